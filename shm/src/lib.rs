//! sluicegate's limits in shared memory: one region that every worker process
//! of a host maps, so that `gunicorn -w 4` admits a limit once, not four times.
//!
//! A region is a file (normally under `/dev/shm`) holding one keyed
//! [`Pool`]: its slots, its eviction sketch and its registry of limits. Every
//! process that opens it maps the same words and runs core's compare-and-swap
//! loop on them; no lock is ever taken on a check, so a process killed at any
//! instruction leaves nothing held.
//!
//! ```
//! use sluicegate::{Kind, Spec};
//! use sluicegate_shm::{Options, Region};
//! # let dir = std::env::temp_dir();
//! # let file = format!("sg-doc-{}", std::process::id());
//! # let path = dir.join(&file);
//! // Every worker opens the same region (a bare name means /dev/shm/sluicegate-<name>).
//! let region = Region::open(&path, &Options::default())?;
//! let per_ip = region.keyed(&Spec::parse(Kind::TokenBucket, "2/minute")?, 10_000)?;
//! assert!(per_ip.check("10.0.0.1")?.decision.allowed);
//! // Another process opening the region sees the same limit and the same key:
//! let other = Region::open(&path, &Options::default())?;
//! let same = other.keyed(&Spec::parse(Kind::TokenBucket, "2/minute")?, 10_000)?;
//! assert!(same.check("10.0.0.1")?.decision.allowed);
//! assert!(!per_ip.check("10.0.0.1")?.decision.allowed);
//! # sluicegate_shm::unlink(&path)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # What a region guarantees
//! * **One limit across processes.** A limit is identified by its kind,
//!   quotas and capacity: processes registering the same one share it, and two
//!   different ones never mix (see [`sluicegate::keyed::PoolMemory`]). Keys hash
//!   with XXH3-64 of their bytes and the region's seed, recorded in its header,
//!   so one key lands in the same slot from every process, language and
//!   version.
//! * **One time base.** Every process reads `CLOCK_MONOTONIC`, the same clock
//!   for the whole boot. A region that outlives a reboot (a file not on tmpfs)
//!   is reset when it is next opened, never read against the new boot's clock.
//! * **Memory really there.** The file's pages are reserved at creation
//!   (`fallocate`), so a full tmpfs is an error at open, not a `SIGBUS` at the
//!   first check. Docker's default `/dev/shm` is 64 MB.
//! * **Lock-free atomics only.** A region is refused where the CPU lacks a
//!   lock-free 16-byte compare-and-swap (the fallback would be a lock in one
//!   process's memory).
//! * **Creation.** The creator initialises the region under an exclusive
//!   `flock`, which the kernel releases if it dies; the next opener finds the
//!   header not ready and initialises it again. Openers wait on the same lock.
//! * **Security.** The file is created exclusively (`O_CREAT | O_EXCL`) with
//!   mode `0600` by default ([`Options::mode`]), never through a symlink
//!   (`O_NOFOLLOW`), and a region owned by another user is refused unless
//!   [`Options::allow_other_owner`] says otherwise.
//! * **Untrusted contents.** Bytes another process wrote are never trusted
//!   beyond what atomics give: impossible values make decisions conservative,
//!   never a crash, an out-of-bounds read or an endless loop.
//!
//! # What it does not do (yet)
//! Parameters of a limit in a region are fixed (`set_spec` is refused: build a
//! limiter of the new spec, which registers a limit of its own). Limits no
//! process uses any more keep their registry entry until the region is removed
//! ([`unlink`]) and made again. The sliding log is not offered shared (its
//! writer lock is process memory).
#![forbid(unsafe_op_in_unsafe_fn)]

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;

mod layout;
mod map;

use std::collections::BTreeMap;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use rustix::fs::{FallocateFlags, FlockOperation, OFlags};
use sluicegate::keyed::{
    AnyKeyed, Group, KeyHash, KeyedStats, Pool, PoolMemory, RegistryEntry, Slot,
};
use sluicegate::{AnyLimiter, InsufficientCapacity, Outcome, Receipt, Spec, SpecError};

pub use layout::LAYOUT_VERSION;
use layout::{HASH_XXH3_64, Layout, MAGIC, READY, TIME_MONOTONIC};
use map::Mapped;

/// How to create a region (when it does not exist yet) and what to accept
/// when opening one.
///
/// ```
/// let o = sluicegate_shm::Options::default().memory(16 << 20).limits(256).mode(0o660);
/// # let _ = o;
/// ```
#[derive(Clone, Debug)]
pub struct Options {
    memory: usize,
    limits: usize,
    mode: u32,
    allow_other_owner: bool,
}

impl Default for Options {
    /// 16 MiB of slots and sketch (about 120,000 keys; Docker's default `/dev/shm`
    /// is 64 MB), 1,024 limits, mode
    /// `0600`, owner must be this user.
    fn default() -> Self {
        Options {
            memory: 16 << 20,
            limits: 1024,
            mode: 0o600,
            allow_other_owner: false,
        }
    }
}

impl Options {
    /// Bytes for keys (16 each) and their eviction sketch. An existing region
    /// of another size is an error naming both: resizing is a new region.
    ///
    /// ```
    /// let o = sluicegate_shm::Options::default().memory(1 << 20);
    /// # let _ = o;
    /// ```
    pub fn memory(mut self, bytes: usize) -> Self {
        self.memory = bytes;
        self
    }

    /// How many limits (keyed limits and single limiters, one per quota) the
    /// region can register, from 1 to 65,535.
    ///
    /// ```
    /// let o = sluicegate_shm::Options::default().limits(64);
    /// # let _ = o;
    /// ```
    pub fn limits(mut self, limits: usize) -> Self {
        self.limits = limits;
        self
    }

    /// The file's permission bits when it is created (`0600` by default;
    /// `0660` lets a group of worker users share it).
    ///
    /// ```
    /// let o = sluicegate_shm::Options::default().mode(0o660);
    /// # let _ = o;
    /// ```
    pub fn mode(mut self, mode: u32) -> Self {
        self.mode = mode & 0o777;
        self
    }

    /// Accepts a region another user owns (a master running as root that
    /// created it for workers running as another user, with [`Self::mode`]
    /// letting them in). Off by default: a file someone else placed in a
    /// world-writable directory is not trusted.
    ///
    /// ```
    /// let o = sluicegate_shm::Options::default().allow_other_owner(true);
    /// # let _ = o;
    /// ```
    pub fn allow_other_owner(mut self, allow: bool) -> Self {
        self.allow_other_owner = allow;
        self
    }
}

/// Why a region could not be opened, or a limit in it made.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A system call on the region's file failed.
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The error.
        source: io::Error,
    },
    /// The path is a symbolic link (never followed) or not a regular file.
    NotAFile {
        /// The file.
        path: PathBuf,
    },
    /// Another user owns the file ([`Options::allow_other_owner`]).
    OtherOwner {
        /// The file.
        path: PathBuf,
        /// Its owner's uid.
        owner: u32,
        /// This process's effective uid.
        us: u32,
    },
    /// The file is not a sluicegate region (another magic number).
    NotARegion {
        /// The file.
        path: PathBuf,
    },
    /// The region was made by a build with another layout version.
    Version {
        /// The file.
        path: PathBuf,
        /// Its version.
        found: u64,
        /// This build's ([`LAYOUT_VERSION`]).
        supported: u64,
    },
    /// The region's header describes parts its file does not hold (it was
    /// truncated), or parts this build's core lays out differently.
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// The region exists with another size than asked for.
    Size {
        /// The file.
        path: PathBuf,
        /// Bytes of its file asked for (from [`Options`]).
        asked: u64,
        /// Bytes of its file as it is.
        found: u64,
    },
    /// The device has no room for the region (a full tmpfs: Docker's default
    /// `/dev/shm` is 64 MB).
    NoSpace {
        /// The file.
        path: PathBuf,
        /// Bytes asked for.
        bytes: u64,
    },
    /// [`Options`] describe no region (no memory for a single group, or more
    /// limits than 65,535).
    Options(String),
    /// This CPU has no lock-free 16-byte compare-and-swap: a region shared
    /// through a lock in one process's memory would not be shared at all.
    NotLockFree,
    /// The limit could not be made (its spec, or a full registry).
    Spec(SpecError),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io { path, op, source } => write!(f, "{}: {op}: {source}", path.display()),
            Error::NotAFile { path } => write!(
                f,
                "{}: not a regular file (symbolic links are never followed)",
                path.display()
            ),
            Error::OtherOwner { path, owner, us } => write!(
                f,
                "{}: owned by uid {owner}, not by this process (uid {us}); \
                 allow_other_owner accepts it",
                path.display()
            ),
            Error::NotARegion { path } => {
                write!(f, "{}: not a sluicegate shared region", path.display())
            }
            Error::Version {
                path,
                found,
                supported,
            } => write!(
                f,
                "{}: a region of layout version {found}; this build reads version \
                 {supported} (remove it to make a new one)",
                path.display()
            ),
            Error::Corrupt { path, what } => write!(f, "{}: corrupt region: {what}", path.display()),
            Error::Size { path, asked, found } => write!(
                f,
                "{}: the region holds {found} bytes, {asked} were asked for \
                 (resizing is a new region: remove it first)",
                path.display()
            ),
            Error::NoSpace { path, bytes } => write!(
                f,
                "{}: no room for {bytes} bytes on its device (Docker's default \
                 /dev/shm is 64 MB: --shm-size raises it)",
                path.display()
            ),
            Error::Options(what) => write!(f, "shared region options: {what}"),
            Error::NotLockFree => f.write_str(
                "this CPU has no lock-free 16-byte compare-and-swap: shared regions are unavailable",
            ),
            Error::Spec(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io { source, .. } => Some(source),
            Error::Spec(e) => Some(e),
            _ => None,
        }
    }
}

impl From<SpecError> for Error {
    fn from(e: SpecError) -> Self {
        Error::Spec(e)
    }
}

/// The file of region `name`: a name without `/` is
/// `/dev/shm/sluicegate-<name>`; anything else is a path.
///
/// ```
/// use std::path::Path;
/// assert_eq!(sluicegate_shm::path_of("api"), Path::new("/dev/shm/sluicegate-api"));
/// assert_eq!(sluicegate_shm::path_of("/run/app/limits"), Path::new("/run/app/limits"));
/// ```
pub fn path_of(name: impl AsRef<Path>) -> PathBuf {
    let p = name.as_ref();
    match p.to_str() {
        Some(s) if !s.contains('/') => PathBuf::from(format!("/dev/shm/sluicegate-{s}")),
        _ => p.to_path_buf(),
    }
}

/// Removes region `name` (a path, or a bare name as in [`path_of`]). Processes
/// that have it mapped keep using their mapping; the next open makes a new one.
/// A region that does not exist is not an error.
///
/// ```
/// sluicegate_shm::unlink("/tmp/no-such-sluicegate-region")?;
/// # Ok::<(), sluicegate_shm::Error>(())
/// ```
pub fn unlink(name: impl AsRef<Path>) -> Result<(), Error> {
    let path = path_of(name);
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(Error::Io {
            path,
            op: "remove",
            source,
        }),
    }
}

/// Nanoseconds of `CLOCK_MONOTONIC`: a region's time base, the same clock in
/// every process of one boot.
///
/// ```
/// let (a, b) = (sluicegate_shm::now(), sluicegate_shm::now());
/// assert!(b >= a);
/// ```
pub fn now() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    (t.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(t.tv_nsec as u64)
}

/// The region's pool memory, as core sees it.
#[derive(Debug)]
struct Memory {
    mapped: Arc<Mapped>,
    seed: u64,
}

impl PoolMemory for Memory {
    fn groups(&self) -> &[Group] {
        self.mapped.groups()
    }
    fn cells(&self) -> &[Slot] {
        self.mapped.cells()
    }
    fn registry(&self) -> &[RegistryEntry] {
        self.mapped.registry()
    }
    fn seed(&self) -> u64 {
        self.seed
    }
    /// The region's time base: `CLOCK_MONOTONIC`, the same in every process.
    fn now(&self) -> Option<u64> {
        Some(now())
    }
    /// The region's key hash ([`Region::key_hash`]): what a policy's keyed
    /// rules in the region hash their keys' text with.
    fn key_hash(&self, key: &[u8]) -> Option<KeyHash> {
        Some(hash_key(key, self.seed))
    }
}

/// XXH3-64 of `key` with `seed`: the region's key hash, fixed by the layout.
fn hash_key(key: &[u8], seed: u64) -> KeyHash {
    KeyHash::from_raw(xxhash_rust::xxh3::xxh3_64_with_seed(key, seed))
}

/// A mapped region: make limits in it with [`Region::keyed`] and
/// [`Region::limiter`]. Cloning gives another handle on the same mapping; it
/// is unmapped when the last handle and limit are dropped.
#[derive(Clone, Debug)]
pub struct Region {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    path: PathBuf,
    /// The mapped file's identity (device, inode) when it was opened.
    file: FileId,
    mapped: Arc<Mapped>,
    pool: Pool,
    seed: u64,
}

/// A file's identity: its device and inode numbers. A file removed and made
/// again under the same name is another file; an inode number is not reused
/// while a mapping keeps its file alive.
type FileId = (u64, u64);

/// The mappings this process has, by file ([`Region::open_cached`]), with the
/// region's seed. Weak: the last handle of a region, or the last pool over it
/// (a policy's `[shared]` keeps only the pool), unmaps it; its dead entry is
/// dropped at the next insertion.
static MAPPED: Mutex<BTreeMap<FileId, (Weak<Mapped>, u64)>> = Mutex::new(BTreeMap::new());

fn io_error<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(io::Error) -> Error + 'a {
    move |source| Error::Io {
        path: path.to_path_buf(),
        op,
        source,
    }
}

/// This boot's id (`/proc/sys/kernel/random/boot_id`) as two words; zeros
/// where the system has none.
fn boot_id() -> [u64; 2] {
    let text = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").unwrap_or_default();
    let hex: String = text.chars().filter(char::is_ascii_hexdigit).collect();
    let word = |s: &str| u64::from_str_radix(s, 16).unwrap_or(0);
    if hex.len() == 32 {
        [word(&hex[..16]), word(&hex[16..])]
    } else {
        [0, 0]
    }
}

impl Region {
    /// Opens region `name` (a path, or a bare name: [`path_of`]), creating it
    /// with `options` if it does not exist. See the [crate docs](crate) for
    /// what is checked.
    ///
    /// ```
    /// use sluicegate_shm::{Error, Options, Region};
    /// # let dir = std::env::temp_dir();
    /// # let file = format!("sg-open-{}", std::process::id());
    /// let path = dir.join(&file);
    /// let r = Region::open(&path, &Options::default().memory(1 << 20))?;
    /// // The same region asked for with another size is an error naming both.
    /// let e = Region::open(&path, &Options::default().memory(2 << 20)).unwrap_err();
    /// assert!(matches!(e, Error::Size { .. }), "{e}");
    /// # drop(r);
    /// # sluicegate_shm::unlink(&path)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open(name: impl AsRef<Path>, options: &Options) -> Result<Region, Error> {
        Region::open_with(&path_of(name), options, |_| None)
    }

    /// Opens region `name` as [`Region::open`] does, but maps each region only
    /// once per process: while a handle of this process has the same file
    /// mapped, that mapping is shared instead of mapping the file again (a
    /// pre-fork worker that opens many limiters in one region holds one
    /// mapping, as it holds one file).
    ///
    /// Everything [`Region::open`] checks is still checked on every call, with
    /// the same errors: the file is opened (never through a symbolic link) and
    /// its owner, header and size checked against `options` (so another size
    /// asked for is [`Error::Size`], cached or not). The file is identified by
    /// its device and inode: a region removed ([`unlink`], or by another
    /// process) and made again under the same name is a new file, opened and
    /// mapped afresh, never served from the old mapping. The cache holds no
    /// mapping alive: the last handle of a region (or limit, or pool over it)
    /// unmaps it.
    ///
    /// ```
    /// use sluicegate::{Kind, Spec};
    /// use sluicegate_shm::{Error, Options, Region};
    /// # let path = std::env::temp_dir().join(format!("sg-cached-{}", std::process::id()));
    /// let o = Options::default().memory(1 << 20);
    /// let a = Region::open_cached(&path, &o)?;
    /// let b = Region::open_cached(&path, &o)?;
    /// assert!(a.same_mapping(&b));
    /// // The options are checked as without the cache.
    /// let e = Region::open_cached(&path, &Options::default().memory(2 << 20)).unwrap_err();
    /// assert!(matches!(e, Error::Size { .. }), "{e}");
    /// // Removed and made again: a new region, not the old mapping.
    /// let spec = Spec::parse(Kind::TokenBucket, "1/hour")?;
    /// assert!(a.limiter(&spec)?.check_n_at(1, 0)?.decision.allowed);
    /// sluicegate_shm::unlink(&path)?;
    /// let c = Region::open_cached(&path, &o)?;
    /// assert!(!c.same_mapping(&a));
    /// assert!(c.limiter(&spec)?.check_n_at(1, 0)?.decision.allowed);
    /// # sluicegate_shm::unlink(&path)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn open_cached(name: impl AsRef<Path>, options: &Options) -> Result<Region, Error> {
        // The lock is held for lookups only, never across a system call: a
        // child forked while another thread opens a region can still open.
        let mapped = || MAPPED.lock().unwrap_or_else(PoisonError::into_inner);
        let region = Region::open_with(&path_of(name), options, |id| {
            let (m, seed) = mapped().get(&id).cloned()?;
            Some((m.upgrade()?, seed))
        })?;
        let mut mapped = mapped();
        let inner = &region.inner;
        if let Some(first) = mapped.get(&inner.file).and_then(|(m, _)| m.upgrade()) {
            // Reused; or mapped by another thread meanwhile (the same file,
            // checked by both): keep one mapping.
            if Arc::ptr_eq(&first, &inner.mapped) {
                return Ok(region);
            }
            if first.layout() == inner.mapped.layout() {
                return Region::over(inner.path.clone(), inner.file, first, inner.seed);
            }
        }
        mapped.retain(|_, (m, _)| m.strong_count() > 0);
        mapped.insert(inner.file, (Arc::downgrade(&inner.mapped), inner.seed));
        Ok(region)
    }

    /// Whether two handles share one mapping of their region (handles from
    /// [`Region::open_cached`] of one file do; every [`Region::open`] maps
    /// anew).
    ///
    /// ```
    /// use sluicegate_shm::{Options, Region};
    /// # let path = std::env::temp_dir().join(format!("sg-same-{}", std::process::id()));
    /// let a = Region::open(&path, &Options::default())?;
    /// let b = Region::open(&path, &Options::default())?;
    /// assert!(a.same_mapping(&a.clone()) && !a.same_mapping(&b));
    /// # sluicegate_shm::unlink(&path)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn same_mapping(&self, other: &Region) -> bool {
        Arc::ptr_eq(&self.inner.mapped, &other.inner.mapped)
    }

    /// Opens the file at `path` and checks it; `cached` offers a handle this
    /// process already has on the file of that identity, reused if the file
    /// still matches it and `options`. Any doubt (another file, a header that
    /// changed, another size asked for) takes the full path, under the file
    /// lock, whose answer is the same as without a cache.
    fn open_with(
        path: &Path,
        options: &Options,
        cached: impl FnOnce(FileId) -> Option<(Arc<Mapped>, u64)>,
    ) -> Result<Region, Error> {
        if !sluicegate::keyed::slots_lock_free() {
            return Err(Error::NotLockFree);
        }
        if !(1..=65_535).contains(&options.limits) {
            return Err(Error::Options(format!(
                "{} limits asked for: from 1 to 65,535",
                options.limits
            )));
        }
        // Registry entry 0 is never used: one more than the limits.
        let want = Layout::for_memory(options.memory, options.limits + 1).ok_or_else(|| {
            Error::Options(format!(
                "{} bytes of memory hold no group of 8 keys",
                options.memory
            ))
        })?;
        let path = path.to_path_buf();
        let (file, id) = open_file(&path, options)?;
        if let Some((m, seed)) = cached(id) {
            let len = file.metadata().map_err(io_error(&path, "stat"))?.len();
            // A file shorter than the mapping (truncated since) is not read
            // through it; the full path reports it.
            if len >= m.layout().len as u64
                && matches!(inspect(&path, m.header(), len, &want), Ok(Found::Ready(l)) if l == *m.layout())
            {
                return Region::over(path, id, m, seed);
            }
        }
        // One initialiser at a time; the kernel drops the lock if it dies.
        rustix::fs::flock(&file, FlockOperation::LockExclusive)
            .map_err(|e| io_error(&path, "flock")(e.into()))?;
        let opened = attach(&path, &file, &want);
        let _ = rustix::fs::flock(&file, FlockOperation::Unlock);
        let (mapped, seed) = opened?;
        Region::over(path, id, Arc::new(mapped), seed)
    }

    /// A handle on `mapped`, the checked mapping of file `id` at `path`.
    fn over(path: PathBuf, id: FileId, mapped: Arc<Mapped>, seed: u64) -> Result<Region, Error> {
        let pool = Pool::in_memory(Memory {
            mapped: mapped.clone(),
            seed,
        })?;
        Ok(Region {
            inner: Arc::new(Inner {
                path,
                file: id,
                mapped,
                pool,
                seed,
            }),
        })
    }

    /// The region's file, as this handle's open named it.
    ///
    /// ```
    /// # let dir = std::env::temp_dir();
    /// # let file = format!("sg-path-{}", std::process::id());
    /// let r = sluicegate_shm::Region::open(dir.join(&file), &Default::default())?;
    /// assert_eq!(r.path(), dir.join(&file));
    /// # sluicegate_shm::unlink(r.path())?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Bytes of the region's file (header, slots, sketch and registry).
    ///
    /// ```
    /// # let dir = std::env::temp_dir();
    /// # let file = format!("sg-bytes-{}", std::process::id());
    /// let r = sluicegate_shm::Region::open(dir.join(&file), &sluicegate_shm::Options::default().memory(1 << 20))?;
    /// assert!(r.bytes() > 1 << 20 && r.bytes() < 3 << 20);
    /// # sluicegate_shm::unlink(r.path())?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn bytes(&self) -> usize {
        self.inner.mapped.layout().len
    }

    /// The pool the region holds (for a policy's keyed rules, or
    /// [`AnyKeyed::in_pool`] with keys hashed by [`Region::key_hash`]).
    ///
    /// ```
    /// # let dir = std::env::temp_dir();
    /// # let file = format!("sg-pool-{}", std::process::id());
    /// let r = sluicegate_shm::Region::open(dir.join(&file), &Default::default())?;
    /// assert!(r.pool().capacity() > 100_000);
    /// # sluicegate_shm::unlink(r.path())?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn pool(&self) -> &Pool {
        &self.inner.pool
    }

    /// The region's hash of a key's bytes: XXH3-64 with the region's seed, the
    /// same in every process, language and version.
    ///
    /// ```
    /// # let dir = std::env::temp_dir();
    /// # let file = format!("sg-hash-{}", std::process::id());
    /// let path = dir.join(&file);
    /// let (a, b) = (sluicegate_shm::Region::open(&path, &Default::default())?,
    ///               sluicegate_shm::Region::open(&path, &Default::default())?);
    /// assert_eq!(a.key_hash(b"10.0.0.1"), b.key_hash(b"10.0.0.1"));
    /// # sluicegate_shm::unlink(&path)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn key_hash(&self, key: &[u8]) -> KeyHash {
        hash_key(key, self.inner.seed)
    }

    /// A keyed limiter of `spec` in the region, holding at most `max_keys`
    /// live keys: the same limiter in every process that makes it with the
    /// same spec and bound.
    ///
    /// ```
    /// use sluicegate::{Kind, Spec};
    /// # let dir = std::env::temp_dir();
    /// # let file = format!("sg-keyed-{}", std::process::id());
    /// let r = sluicegate_shm::Region::open(dir.join(&file), &Default::default())?;
    /// let t = r.keyed(&Spec::parse(Kind::FixedWindow, "1/minute")?, 1000)?;
    /// assert!(t.check_n_at("a", 1, 0)?.decision.allowed);
    /// assert!(!t.check_n_at("a", 1, 0)?.decision.allowed);
    /// let log = Spec::parse(Kind::SlidingLog, "1/minute")?;
    /// assert!(r.keyed(&log, 10).is_err()); // its writer lock is process memory
    /// # sluicegate_shm::unlink(r.path())?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn keyed(&self, spec: &Spec, max_keys: usize) -> Result<SharedKeyed, Error> {
        let table = AnyKeyed::in_pool(&self.inner.pool, spec, max_keys, ())?;
        Ok(SharedKeyed {
            table,
            region: self.clone(),
        })
    }

    /// A single limiter of `spec` in the region (one state for every process
    /// that makes it with the same spec).
    ///
    /// ```
    /// use sluicegate::{Kind, Spec};
    /// # let dir = std::env::temp_dir();
    /// # let file = format!("sg-single-{}", std::process::id());
    /// let r = sluicegate_shm::Region::open(dir.join(&file), &Default::default())?;
    /// let l = r.limiter(&Spec::parse(Kind::TokenBucket, "2/hour")?)?;
    /// assert!(l.check_n_at(2, 0)?.decision.allowed);
    /// assert!(!l.check_n_at(1, 0)?.decision.allowed);
    /// # sluicegate_shm::unlink(r.path())?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn limiter(&self, spec: &Spec) -> Result<SharedLimiter, Error> {
        let single = match spec.quotas() {
            // One word in its registry entry, checked by one CAS.
            [_] => Single::Word(AnyLimiter::in_pool(&self.inner.pool, spec, ())?),
            // Several quotas are several words no one CAS covers: one key of a
            // keyed limit bounded to one key (the bound is part of the limit's
            // identity, so it never meets a keyed limiter of the same spec).
            _ => Single::Key(AnyKeyed::in_pool(&self.inner.pool, spec, 1, ())?),
        };
        Ok(SharedLimiter {
            single,
            _region: self.clone(),
        })
    }
}

/// Opens (never through a symlink) or creates (exclusively) the file, and
/// checks what it is and who owns it. Returns it with its identity.
fn open_file(path: &Path, options: &Options) -> Result<(File, FileId), Error> {
    let flags = (OFlags::NOFOLLOW | OFlags::CLOEXEC).bits() as i32;
    let file = match OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(options.mode)
        .custom_flags(flags)
        .open(path)
    {
        Ok(f) => {
            // Exactly the mode asked for, whatever the umask.
            rustix::fs::fchmod(&f, rustix::fs::Mode::from_bits_truncate(options.mode))
                .map_err(|e| io_error(path, "chmod")(e.into()))?;
            f
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(flags)
            .open(path)
            .map_err(|e| {
                if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) {
                    Error::NotAFile {
                        path: path.to_path_buf(),
                    }
                } else {
                    io_error(path, "open")(e)
                }
            })?,
        Err(e) => return Err(io_error(path, "create")(e)),
    };
    let meta = file.metadata().map_err(io_error(path, "stat"))?;
    if !meta.file_type().is_file() {
        return Err(Error::NotAFile {
            path: path.to_path_buf(),
        });
    }
    let us = rustix::process::geteuid().as_raw();
    if meta.uid() != us && !options.allow_other_owner {
        return Err(Error::OtherOwner {
            path: path.to_path_buf(),
            owner: meta.uid(),
            us,
        });
    }
    Ok((file, (meta.dev(), meta.ino())))
}

/// What a region's header says of it.
enum Found {
    /// A region of this build's layout, made in this boot: its parts.
    Ready(Layout),
    /// A region to make again: its creator died before it was ready, or it was
    /// made in another boot (its times are another clock's).
    Remake,
}

/// Reads a region's header (of a file of `len` bytes, at least a header's)
/// and checks it against the layout `want`ed: what it is, or why it cannot be
/// used.
fn inspect(path: &Path, h: &layout::Header, len: u64, want: &Layout) -> Result<Found, Error> {
    let corrupt = |what: String| Error::Corrupt {
        path: path.to_path_buf(),
        what,
    };
    let magic = h.magic.load(Ordering::Acquire);
    // The creator writes the magic first and the ready state last: a file with
    // neither is a region whose creator died before writing anything (its
    // pages are zeros), one with the magic alone died half-way (we hold the
    // lock it held). Any other file is not ours to overwrite.
    let state = h.state.load(Ordering::Acquire);
    if (magic == 0 && state == 0) || (magic == MAGIC && state != READY) {
        return Ok(Found::Remake);
    }
    if magic != MAGIC {
        return Err(Error::NotARegion {
            path: path.to_path_buf(),
        });
    }
    let version = h.version.load(Ordering::Acquire);
    if version != LAYOUT_VERSION {
        return Err(Error::Version {
            path: path.to_path_buf(),
            found: version,
            supported: LAYOUT_VERSION,
        });
    }
    let words = |w: &[&std::sync::atomic::AtomicU64]| -> Vec<u64> {
        w.iter().map(|a| a.load(Ordering::Acquire)).collect()
    };
    let core = words(&[&h.group_bytes, &h.group_slots, &h.entry_bytes]);
    let ours = layout_words();
    if core != ours {
        return Err(corrupt(format!(
            "laid out by a core with (group bytes, slots per group, entry bytes) = {core:?}, \
             this one has {ours:?}"
        )));
    }
    let found = Layout::of(h, len).ok_or_else(|| {
        corrupt(format!(
            "its header describes parts that {len} bytes of file do not hold (truncated?)"
        ))
    })?;
    if h.len.load(Ordering::Acquire) != found.len as u64 {
        return Err(corrupt(
            "its header's length disagrees with its parts".into(),
        ));
    }
    if found != *want {
        return Err(Error::Size {
            path: path.to_path_buf(),
            asked: want.len as u64,
            found: found.len as u64,
        });
    }
    if h.time_base.load(Ordering::Acquire) != TIME_MONOTONIC
        || h.key_hash.load(Ordering::Acquire) != HASH_XXH3_64
    {
        return Err(corrupt("an unknown time base or key hash".into()));
    }
    let boot = [
        h.boot[0].load(Ordering::Acquire),
        h.boot[1].load(Ordering::Acquire),
    ];
    if boot != boot_id() {
        return Ok(Found::Remake);
    }
    Ok(Found::Ready(found))
}

/// With the file lock held: initialises the region if it is new (or was left
/// half-made, or outlived a reboot), else checks it; maps it. Returns the
/// mapping and the hash seed.
fn attach(path: &Path, file: &File, want: &Layout) -> Result<(Mapped, u64), Error> {
    let len = file.metadata().map_err(io_error(path, "stat"))?.len();
    if len == 0 {
        return create(path, file, want);
    }
    if len < layout::HEADER_BYTES as u64 {
        return Err(Error::Corrupt {
            path: path.to_path_buf(),
            what: format!("{len} bytes, shorter than its header"),
        });
    }
    // The header alone first: what the rest of the file should be.
    let head = Mapped::new(file, Layout::header_only()).map_err(io_error(path, "mmap"))?;
    let found = inspect(path, head.header(), len, want)?;
    drop(head);
    match found {
        Found::Remake => create(path, file, want),
        Found::Ready(found) => {
            let mapped = Mapped::new(file, found).map_err(io_error(path, "mmap"))?;
            let seed = mapped.header().seed.load(Ordering::Acquire);
            Ok((mapped, seed))
        }
    }
}

/// Core's sizes a region depends on.
fn layout_words() -> Vec<u64> {
    vec![
        std::mem::size_of::<Group>() as u64,
        sluicegate::keyed::GROUP_SLOTS as u64,
        std::mem::size_of::<RegistryEntry>() as u64,
    ]
}

/// With the file lock held: sizes the file (its pages reserved), zeroes it and
/// writes the header, `READY` last.
fn create(path: &Path, file: &File, want: &Layout) -> Result<(Mapped, u64), Error> {
    let len = want.len as u64;
    file.set_len(0).map_err(io_error(path, "truncate"))?;
    match rustix::fs::fallocate(file, FallocateFlags::empty(), 0, len) {
        Ok(()) => {}
        Err(rustix::io::Errno::NOSPC) => {
            let _ = file.set_len(0);
            return Err(Error::NoSpace {
                path: path.to_path_buf(),
                bytes: len,
            });
        }
        // A file system without fallocate: size it, pages on first touch.
        Err(rustix::io::Errno::OPNOTSUPP) => file.set_len(len).map_err(io_error(path, "resize"))?,
        Err(e) => return Err(io_error(path, "fallocate")(e.into())),
    }
    let mapped = Mapped::new(file, *want).map_err(io_error(path, "mmap"))?;
    let h = mapped.header();
    h.state.store(0, Ordering::Release);
    h.magic.store(MAGIC, Ordering::Release);
    for w in &mapped.words()[2..] {
        if w.load(Ordering::Relaxed) != 0 {
            w.store(0, Ordering::Relaxed);
        }
    }
    let seed = std::hash::BuildHasher::hash_one(&std::hash::RandomState::new(), 0x5eed_u64);
    let boot = boot_id();
    let [group_bytes, group_slots, entry_bytes] = layout_words()[..] else {
        unreachable!("three words")
    };
    for (w, v) in [
        (&h.version, LAYOUT_VERSION),
        (&h.seed, seed),
        (&h.time_base, TIME_MONOTONIC),
        (&h.key_hash, HASH_XXH3_64),
        (&h.boot[0], boot[0]),
        (&h.boot[1], boot[1]),
        (&h.len, len),
        (&h.groups, want.groups as u64),
        (&h.cells, want.cells as u64),
        (&h.entries, want.entries as u64),
        (&h.group_bytes, group_bytes),
        (&h.group_slots, group_slots),
        (&h.entry_bytes, entry_bytes),
    ] {
        w.store(v, Ordering::Relaxed);
    }
    h.state.store(READY, Ordering::Release);
    Ok((mapped, seed))
}

/// A keyed limiter in a region ([`Region::keyed`]). Keys are bytes (a `&str`,
/// `&[u8]`, …), hashed by the region's documented hash.
#[derive(Debug)]
pub struct SharedKeyed {
    table: AnyKeyed<()>,
    region: Region,
}

impl SharedKeyed {
    /// Checks `n` units for `key` at `now` (nanoseconds of the region's time
    /// base, [`now`]).
    ///
    /// ```
    /// use sluicegate::{Kind, Spec};
    /// # let dir = std::env::temp_dir();
    /// # let file = format!("sg-kat-{}", std::process::id());
    /// let r = sluicegate_shm::Region::open(dir.join(&file), &Default::default())?;
    /// let t = r.keyed(&Spec::parse(Kind::TokenBucket, "1/s")?, 100)?;
    /// assert!(t.check_n_at("k", 1, 0)?.decision.allowed);
    /// assert!(t.check_n_at("k", 2, 0).is_err()); // more than the burst, ever
    /// # sluicegate_shm::unlink(r.path())?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn check_n_at(
        &self,
        key: impl AsRef<[u8]>,
        n: u64,
        now: u64,
    ) -> Result<Outcome, InsufficientCapacity> {
        let h = self.region.key_hash(key.as_ref());
        self.table.check_n_at_hashed(h, n, now)
    }

    /// Checks one unit for `key` now.
    ///
    /// ```
    /// use sluicegate::{Kind, Spec};
    /// # let dir = std::env::temp_dir();
    /// # let file = format!("sg-kc-{}", std::process::id());
    /// let r = sluicegate_shm::Region::open(dir.join(&file), &Default::default())?;
    /// let t = r.keyed(&Spec::parse(Kind::TokenBucket, "1/hour")?, 100)?;
    /// assert!(t.check("k")?.decision.allowed);
    /// assert!(!t.check("k")?.decision.allowed);
    /// # sluicegate_shm::unlink(r.path())?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn check(&self, key: impl AsRef<[u8]>) -> Result<Outcome, InsufficientCapacity> {
        self.check_n_at(key, 1, now())
    }

    /// What checking `n` units for `key` at `now` would answer, changing nothing.
    ///
    /// ```
    /// use sluicegate::{Kind, Spec};
    /// # let dir = std::env::temp_dir();
    /// # let file = format!("sg-kp-{}", std::process::id());
    /// let r = sluicegate_shm::Region::open(dir.join(&file), &Default::default())?;
    /// let t = r.keyed(&Spec::parse(Kind::TokenBucket, "1/hour")?, 100)?;
    /// assert!(t.peek_n_at("k", 1, 0)?.decision.allowed);
    /// assert!(t.peek_n_at("k", 1, 0)?.decision.allowed);
    /// # sluicegate_shm::unlink(r.path())?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn peek_n_at(
        &self,
        key: impl AsRef<[u8]>,
        n: u64,
        now: u64,
    ) -> Result<Outcome, InsufficientCapacity> {
        let h = self.region.key_hash(key.as_ref());
        self.table.peek_n_at_hashed(h, n, now)
    }

    /// Keys holding live state at `now`, over every process (a scan).
    ///
    /// ```
    /// use sluicegate::{Kind, Spec};
    /// # let dir = std::env::temp_dir();
    /// # let file = format!("sg-kl-{}", std::process::id());
    /// let r = sluicegate_shm::Region::open(dir.join(&file), &Default::default())?;
    /// let t = r.keyed(&Spec::parse(Kind::TokenBucket, "1/hour")?, 100)?;
    /// t.check_n_at("a", 1, 0)?;
    /// assert_eq!(t.len_at(0), 1);
    /// # sluicegate_shm::unlink(r.path())?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn len_at(&self, now: u64) -> usize {
        self.table.len_at(now)
    }

    /// Placement counters, over every process.
    ///
    /// ```
    /// use sluicegate::{Kind, Spec};
    /// # let dir = std::env::temp_dir();
    /// # let file = format!("sg-ks-{}", std::process::id());
    /// let r = sluicegate_shm::Region::open(dir.join(&file), &Default::default())?;
    /// let t = r.keyed(&Spec::parse(Kind::TokenBucket, "1/hour")?, 100)?;
    /// t.check_n_at("a", 1, 0)?;
    /// assert_eq!(t.stats().inserted, 1);
    /// # sluicegate_shm::unlink(r.path())?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stats(&self) -> KeyedStats {
        self.table.stats()
    }

    /// Forgets every key of this limiter, in every process.
    ///
    /// ```
    /// use sluicegate::{Kind, Spec};
    /// # let dir = std::env::temp_dir();
    /// # let file = format!("sg-kx-{}", std::process::id());
    /// let r = sluicegate_shm::Region::open(dir.join(&file), &Default::default())?;
    /// let t = r.keyed(&Spec::parse(Kind::TokenBucket, "1/hour")?, 100)?;
    /// t.check_n_at("a", 1, 0)?;
    /// t.clear();
    /// assert!(t.check_n_at("a", 1, 0)?.decision.allowed);
    /// # sluicegate_shm::unlink(r.path())?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn clear(&self) {
        self.table.clear();
    }

    /// What to do with a new key when every candidate slot holds live state
    /// (evict the stalest, the default; reject; or admit untracked). Each
    /// process's own choice for its checks.
    ///
    /// ```
    /// use sluicegate::keyed::FullPolicy;
    /// use sluicegate::{Kind, Spec};
    /// # let dir = std::env::temp_dir();
    /// # let file = format!("sg-kpol-{}", std::process::id());
    /// let r = sluicegate_shm::Region::open(dir.join(&file), &Default::default())?;
    /// let t = r.keyed(&Spec::parse(Kind::TokenBucket, "1/hour")?, 100)?.with_policy(FullPolicy::Reject);
    /// assert!(t.check_n_at("a", 1, 0)?.decision.allowed);
    /// # sluicegate_shm::unlink(r.path())?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn with_policy(mut self, policy: sluicegate::keyed::FullPolicy) -> Self {
        self.table = self.table.with_policy(policy);
        self
    }

    /// The most live keys this limiter holds in the region.
    ///
    /// ```
    /// use sluicegate::{Kind, Spec};
    /// # let dir = std::env::temp_dir();
    /// # let file = format!("sg-kcap-{}", std::process::id());
    /// let r = sluicegate_shm::Region::open(dir.join(&file), &Default::default())?;
    /// assert_eq!(r.keyed(&Spec::parse(Kind::TokenBucket, "1/hour")?, 100)?.capacity(), 100);
    /// # sluicegate_shm::unlink(r.path())?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn capacity(&self) -> usize {
        self.table.capacity()
    }

    /// The spec.
    ///
    /// ```
    /// use sluicegate::{Kind, Spec};
    /// # let dir = std::env::temp_dir();
    /// # let file = format!("sg-ksp-{}", std::process::id());
    /// let r = sluicegate_shm::Region::open(dir.join(&file), &Default::default())?;
    /// let spec = Spec::parse(Kind::TokenBucket, "1/hour")?;
    /// assert_eq!(r.keyed(&spec, 100)?.spec(), spec);
    /// # sluicegate_shm::unlink(r.path())?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn spec(&self) -> Spec {
        self.table.spec()
    }
}

/// A single limiter in a region ([`Region::limiter`]).
#[derive(Debug)]
pub struct SharedLimiter {
    single: Single,
    _region: Region,
}

/// Where a single limiter's state is.
#[derive(Debug)]
enum Single {
    /// One quota: its registry entry's word.
    Word(AnyLimiter<()>),
    /// Several: one key of a keyed limit.
    Key(AnyKeyed<()>),
}

/// The one key of a single limiter's limit.
const SINGLE: KeyHash = KeyHash::from_raw(0x51_4e_47_4c_45);

impl SharedLimiter {
    /// Checks `n` units at `now` (nanoseconds of [`now`]).
    ///
    /// ```
    /// use sluicegate::{Kind, Spec};
    /// # let dir = std::env::temp_dir();
    /// # let file = format!("sg-lat-{}", std::process::id());
    /// let r = sluicegate_shm::Region::open(dir.join(&file), &Default::default())?;
    /// let l = r.limiter(&Spec::parse(Kind::FixedWindow, "3/minute")?)?;
    /// assert!(l.check_n_at(3, 0)?.decision.allowed);
    /// assert!(!l.check_n_at(1, 0)?.decision.allowed);
    /// # sluicegate_shm::unlink(r.path())?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn check_n_at(&self, n: u64, now: u64) -> Result<Outcome, InsufficientCapacity> {
        match &self.single {
            Single::Word(l) => l.check_n_at(n, now),
            Single::Key(t) => t.check_n_at_hashed(SINGLE, n, now),
        }
    }

    /// Checks one unit now.
    ///
    /// ```
    /// use sluicegate::{Kind, Spec};
    /// # let dir = std::env::temp_dir();
    /// # let file = format!("sg-lc-{}", std::process::id());
    /// let r = sluicegate_shm::Region::open(dir.join(&file), &Default::default())?;
    /// let l = r.limiter(&Spec::parse(Kind::TokenBucket, "1/hour")?)?;
    /// assert!(l.check()?.decision.allowed);
    /// assert!(!l.check()?.decision.allowed);
    /// # sluicegate_shm::unlink(r.path())?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn check(&self) -> Result<Outcome, InsufficientCapacity> {
        self.check_n_at(1, now())
    }

    /// The spec.
    ///
    /// ```
    /// use sluicegate::{Kind, Spec};
    /// # let dir = std::env::temp_dir();
    /// # let file = format!("sg-lspec-{}", std::process::id());
    /// let r = sluicegate_shm::Region::open(dir.join(&file), &Default::default())?;
    /// let spec = Spec::parse(Kind::TokenBucket, "1/hour")?;
    /// assert_eq!(r.limiter(&spec)?.spec(), spec);
    /// # sluicegate_shm::unlink(r.path())?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn spec(&self) -> Spec {
        match &self.single {
            Single::Word(l) => l.spec(),
            Single::Key(t) => t.spec(),
        }
    }

    /// What checking `n` units at `now` would answer, changing nothing.
    ///
    /// ```
    /// use sluicegate::{Kind, Spec};
    /// # let dir = std::env::temp_dir();
    /// # let file = format!("sg-lp-{}", std::process::id());
    /// let r = sluicegate_shm::Region::open(dir.join(&file), &Default::default())?;
    /// let l = r.limiter(&Spec::parse(Kind::TokenBucket, "1/hour")?)?;
    /// assert!(l.peek_n_at(1, 0)?.decision.allowed);
    /// # sluicegate_shm::unlink(r.path())?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn peek_n_at(&self, n: u64, now: u64) -> Result<Outcome, InsufficientCapacity> {
        match &self.single {
            Single::Word(l) => l.peek_n_at(n, now),
            Single::Key(t) => t.peek_n_at_hashed(SINGLE, n, now),
        }
    }

    /// [`Self::check_n_at`] recording what the admission took in `receipt`, for
    /// [`Self::refund`] or [`Self::undo`] on this handle.
    ///
    /// ```
    /// use sluicegate::{Kind, Receipt, Spec};
    /// # let dir = std::env::temp_dir();
    /// # let file = format!("sg-lrc-{}", std::process::id());
    /// let r = sluicegate_shm::Region::open(dir.join(&file), &Default::default())?;
    /// let l = r.limiter(&Spec::parse(Kind::TokenBucket, "2/hour")?)?;
    /// let mut receipt = Receipt::empty();
    /// assert!(l.check_n_at_receipt(2, 0, &mut receipt)?.decision.allowed);
    /// l.refund(&mut receipt, 0); // e.g. the request failed before it was served
    /// assert_eq!(l.peek_n_at(0, 0)?.decision.remaining, 2);
    /// # sluicegate_shm::unlink(r.path())?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn check_n_at_receipt(
        &self,
        n: u64,
        now: u64,
        receipt: &mut Receipt,
    ) -> Result<Outcome, InsufficientCapacity> {
        match &self.single {
            Single::Word(l) => l.check_n_at_receipt(n, now, receipt),
            Single::Key(t) => t.check_n_at_hashed_receipt(SINGLE, n, now, receipt),
        }
    }

    /// Gives back what `receipt`'s admission took (see `sluicegate::Receipt`):
    /// exactly if nothing happened since, otherwise what the algorithm can give
    /// back without crediting other processes' admissions.
    ///
    /// See [`Self::check_n_at_receipt`] for an example.
    pub fn refund(&self, receipt: &mut Receipt, now: u64) {
        match &self.single {
            Single::Word(l) => l.refund(receipt, now),
            Single::Key(t) => t.refund(receipt, now),
        }
    }

    /// Undoes `receipt`'s admission only if no admission of any process changed
    /// the limit since, and says whether it did: a shaper's cancel, since a later
    /// reservation was promised a start after this one (see
    /// `sluicegate::AnyLimiter::undo`). A limit of several quotas is never undone.
    ///
    /// ```
    /// use sluicegate::{Kind, Receipt, Spec};
    /// # let dir = std::env::temp_dir();
    /// # let file = format!("sg-lun-{}", std::process::id());
    /// let r = sluicegate_shm::Region::open(dir.join(&file), &Default::default())?;
    /// let spec = Spec::parse(Kind::Shaper, "1/s")?.with_max_delay_ns(5_000_000_000)?;
    /// let (a, b) = (r.limiter(&spec)?, r.limiter(&spec)?); // two processes, say
    /// let (mut first, mut second) = (Receipt::empty(), Receipt::empty());
    /// a.check_n_at_receipt(1, 0, &mut first)?;
    /// assert_eq!(b.check_n_at_receipt(1, 0, &mut second)?.delay_ns, 1_000_000_000);
    /// assert!(!a.undo(&mut first)); // the second was scheduled after it
    /// assert!(b.undo(&mut second));
    /// # sluicegate_shm::unlink(r.path())?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn undo(&self, receipt: &mut Receipt) -> bool {
        match &self.single {
            Single::Word(l) => l.undo(receipt),
            Single::Key(_) => false,
        }
    }
}
