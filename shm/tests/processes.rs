//! Real processes on one region: exact limits across 8 of them, a SIGKILL
//! storm, and every way opening a region can fail.
//!
//! The child processes are this test binary run again with `SG_CHILD` set: the
//! `child` test does the child's work and prints one line per admission
//! (`admit <key>`), flushed as it goes, so admissions of a process killed a
//! moment later are still counted.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sluicegate::keyed::AnyKeyed;
use sluicegate::{Kind, Spec};
use sluicegate_shm::{Error, LAYOUT_VERSION, Options, Region};

/// A file in the temporary directory, unique to this run.
fn file(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("sg-proc-{}-{name}", std::process::id()))
}

fn spec(kind: Kind, rate: &str) -> Spec {
    let s = Spec::parse(kind, rate).unwrap();
    if kind.caps().max_delay {
        s.with_max_delay_ns(0).unwrap()
    } else {
        s
    }
}

fn keyed_kinds() -> impl Iterator<Item = Kind> {
    Kind::ALL.into_iter().filter(|k| k.caps().keyed)
}

/// What one limit admits on its own, from fresh, at one instant.
fn bound(spec: &Spec) -> u64 {
    let alone = AnyKeyed::with_clock(spec, 8, ()).unwrap();
    let mut n = 0;
    while alone.check_n_at("k", 1, 0).unwrap().decision.allowed {
        n += 1;
    }
    n
}

const OPTIONS: fn() -> Options = || Options::default().memory(1 << 20).limits(64);

/// The child: `SG_CHILD=<path>|<kind>|<rate>|<keys>|<rounds>|<single>` checks
/// `keys` keys `rounds` times each (and the single limiter once per round),
/// printing `admit <key>` (or `admit single`) per admission.
#[test]
fn child() {
    let Ok(args) = std::env::var("SG_CHILD") else {
        return;
    };
    let a: Vec<&str> = args.split('|').collect();
    let kind = Kind::ALL.into_iter().find(|k| k.name() == a[1]).unwrap();
    let spec = spec(kind, a[2]);
    let (keys, rounds): (u64, u64) = (a[3].parse().unwrap(), a[4].parse().unwrap());
    let region = Region::open(a[0], &OPTIONS()).unwrap();
    let t = region.keyed(&spec, 10_000).unwrap();
    let single = (a[5] == "1").then(|| region.limiter(&spec).unwrap());
    let out = std::io::stdout();
    for _ in 0..rounds {
        for k in 0..keys {
            let key = format!("user-{k}");
            if t.check(&key).unwrap().decision.allowed {
                writeln!(out.lock(), "admit {key}").unwrap();
            }
        }
        if let Some(l) = &single {
            if l.check().unwrap().decision.allowed {
                writeln!(out.lock(), "admit single").unwrap();
            }
        }
    }
}

fn spawn_child(path: &Path, kind: Kind, rate: &str, keys: u64, rounds: u64, single: bool) -> Child {
    let arg = format!(
        "{}|{}|{rate}|{keys}|{rounds}|{}",
        path.display(),
        kind.name(),
        u8::from(single)
    );
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env("SG_CHILD", arg)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// Admissions per key printed by `child` (and whether it exited cleanly).
fn admissions(child: Child) -> (std::collections::HashMap<String, u64>, bool) {
    let mut child = child;
    let mut counts = std::collections::HashMap::new();
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let Ok(line) = line else { break };
        // The test harness's own "test child ... " may start the first line.
        if let Some((_, key)) = line.split_once("admit ") {
            *counts.entry(key.to_string()).or_insert(0) += 1;
        }
    }
    let ok = child.wait().unwrap().success();
    (counts, ok)
}

/// 8 processes check 8 keys of one per-hour keyed limit and one single limiter
/// of the same spec, three times the bound each: per keyed kind, the total
/// admitted per key (and for the single limiter) is exactly the bound.
#[test]
fn eight_processes_admit_exactly_one_limit() {
    for kind in keyed_kinds() {
        let path = file(&format!("exact-{}", kind.name()));
        sluicegate_shm::unlink(&path).unwrap();
        let rate = "12/hour";
        let b = bound(&spec(kind, rate));
        let children: Vec<Child> = (0..8)
            .map(|_| spawn_child(&path, kind, rate, 8, 3 * b, true))
            .collect();
        let mut total = std::collections::HashMap::new();
        for c in children {
            let (counts, ok) = admissions(c);
            assert!(ok, "{kind}: a child failed");
            for (k, n) in counts {
                *total.entry(k).or_insert(0) += n;
            }
        }
        assert_eq!(total.len(), 9, "{kind}: {total:?}");
        for (k, n) in &total {
            assert_eq!(*n, b, "{kind}: {k} admitted {n} times, bound {b}");
        }
        sluicegate_shm::unlink(&path).unwrap();
    }
}

/// While 6 processes check, a random one is killed (SIGKILL) and replaced
/// every few milliseconds, for 3 s. Afterwards no key was admitted more than
/// its bound, a fresh process decides every key from where the dead left it,
/// and the region still places new keys (nothing stays held).
#[test]
fn a_sigkill_storm_leaves_the_region_exact_and_usable() {
    let path = file("storm");
    sluicegate_shm::unlink(&path).unwrap();
    let (kind, rate) = (Kind::TokenBucket, "40/hour");
    let b = bound(&spec(kind, rate));
    let keys = 16;
    let mut total = std::collections::HashMap::<String, u64>::new();
    let mut rng = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let readers = std::sync::Mutex::new(Vec::new());
    let mut live: Vec<Child> = (0..6)
        .map(|_| spawn_child(&path, kind, rate, keys, 200, false))
        .collect();
    let (mut killed, mut spawned) = (0, 6);
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(3) {
        std::thread::sleep(Duration::from_millis(2 + next() % 6));
        let i = (next() % live.len() as u64) as usize;
        let mut victim = live.swap_remove(i);
        let _ = victim.kill();
        killed += 1;
        readers
            .lock()
            .unwrap()
            .push(std::thread::spawn(move || admissions(victim).0));
        live.push(spawn_child(&path, kind, rate, keys, 200, false));
        spawned += 1;
    }
    for c in live {
        readers
            .lock()
            .unwrap()
            .push(std::thread::spawn(move || admissions(c).0));
    }
    for r in readers.into_inner().unwrap() {
        for (k, n) in r.join().unwrap() {
            *total.entry(k).or_insert(0) += n;
        }
    }
    let admitted: u64 = total.values().sum();
    println!(
        "storm: {spawned} processes, {killed} killed, {admitted} admitted over {keys} keys \
         (bound {b} each, {} in all)",
        b * keys
    );
    assert!(killed > 100, "only {killed} kills");
    for (k, n) in &total {
        assert!(*n <= b, "{k}: admitted {n} times, bound {b}");
    }
    // A fresh process: each key has exactly what the dead left it.
    let region = Region::open(&path, &OPTIONS()).unwrap();
    let t = region.keyed(&spec(kind, rate), 10_000).unwrap();
    for k in 0..keys {
        let key = format!("user-{k}");
        let mut more = 0;
        while t.check(&key).unwrap().decision.allowed {
            more += 1;
            assert!(more <= b, "{key}: unlimited after the storm");
        }
        let seen = total.get(&key).copied().unwrap_or(0);
        assert!(seen + more <= b, "{key}: {seen} + {more} > {b}");
    }
    // Nothing stays held: 1,000 new keys are all placed and admitted once.
    let fresh = region.keyed(&spec(kind, "1/hour"), 10_000).unwrap();
    for k in 0..1000 {
        assert!(
            fresh.check(format!("new-{k}")).unwrap().decision.allowed,
            "new key {k}"
        );
    }
    drop((t, fresh, region));
    sluicegate_shm::unlink(&path).unwrap();
}

#[test]
fn a_symlink_is_never_followed() {
    let target = file("target");
    std::fs::write(&target, b"").unwrap();
    let link = file("link");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let e = Region::open(&link, &OPTIONS()).unwrap_err();
    assert!(matches!(e, Error::NotAFile { .. }), "{e}");
    assert!(
        e.to_string().contains("symbolic links are never followed"),
        "{e}"
    );
    assert_eq!(
        std::fs::metadata(&target).unwrap().len(),
        0,
        "the target was written"
    );
    // A directory is not a region either.
    let e = Region::open(std::env::temp_dir(), &OPTIONS()).unwrap_err();
    assert!(
        matches!(e, Error::NotAFile { .. } | Error::Io { .. }),
        "{e}"
    );
    std::fs::remove_file(&link).unwrap();
    std::fs::remove_file(&target).unwrap();
}

#[test]
fn created_with_the_mode_asked_for() {
    use std::os::unix::fs::PermissionsExt;
    let path = file("mode");
    sluicegate_shm::unlink(&path).unwrap();
    let r = Region::open(&path, &OPTIONS()).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    drop(r);
    sluicegate_shm::unlink(&path).unwrap();
    let _r = Region::open(&path, &OPTIONS().mode(0o660)).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o660);
    sluicegate_shm::unlink(&path).unwrap();
}

#[test]
fn a_region_another_user_owns_is_refused_unless_allowed() {
    let path = file("owner");
    sluicegate_shm::unlink(&path).unwrap();
    drop(Region::open(&path, &OPTIONS()).unwrap());
    // Only root can give a file away; elsewhere this case cannot be made.
    if rustix::process::geteuid().is_root() {
        std::os::unix::fs::chown(&path, Some(65534), Some(65534)).unwrap();
        let e = Region::open(&path, &OPTIONS()).unwrap_err();
        assert!(matches!(e, Error::OtherOwner { owner: 65534, .. }), "{e}");
        Region::open(&path, &OPTIONS().allow_other_owner(true)).unwrap();
    }
    sluicegate_shm::unlink(&path).unwrap();
}

/// Writes `word` at byte `offset` of the file.
fn poke(path: &Path, offset: u64, word: u64) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    f.write_all_at(&word.to_le_bytes(), offset).unwrap();
}

#[test]
fn a_damaged_or_foreign_file_is_a_clear_error() {
    let path = file("damaged");
    let fresh = || {
        sluicegate_shm::unlink(&path).unwrap();
        drop(Region::open(&path, &OPTIONS()).unwrap());
    };
    // A newer layout version.
    fresh();
    poke(&path, 8, LAYOUT_VERSION + 1);
    let e = Region::open(&path, &OPTIONS()).unwrap_err();
    assert!(
        matches!(
            e,
            Error::Version {
                found,
                supported: LAYOUT_VERSION,
                ..
            } if found == LAYOUT_VERSION + 1
        ),
        "{e}"
    );
    // Not a region at all.
    fresh();
    poke(&path, 0, 0x1234);
    assert!(matches!(
        Region::open(&path, &OPTIONS()),
        Err(Error::NotARegion { .. })
    ));
    // Someone else's file: refused, and left as it was.
    let junk: Vec<u8> = (0..8192u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8 | 1)
        .collect();
    std::fs::write(&path, &junk).unwrap();
    assert!(matches!(
        Region::open(&path, &OPTIONS()),
        Err(Error::NotARegion { .. })
    ));
    assert_eq!(std::fs::read(&path).unwrap(), junk);
    // Truncated.
    fresh();
    let len = std::fs::metadata(&path).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let e = Region::open(&path, &OPTIONS()).unwrap_err();
    assert!(matches!(e, Error::Corrupt { .. }), "{e}");
    assert!(e.to_string().contains("truncated"), "{e}");
    // Shorter than a header.
    std::fs::write(&path, b"short").unwrap();
    assert!(matches!(
        Region::open(&path, &OPTIONS()),
        Err(Error::Corrupt { .. })
    ));
    // Another size than asked for names both.
    fresh();
    let e = Region::open(&path, &OPTIONS().memory(2 << 20)).unwrap_err();
    assert!(matches!(e, Error::Size { .. }), "{e}");
    // Options that describe no region.
    assert!(matches!(
        Region::open(&path, &OPTIONS().memory(8)),
        Err(Error::Options(_))
    ));
    assert!(matches!(
        Region::open(&path, &OPTIONS().limits(70_000)),
        Err(Error::Options(_))
    ));
    sluicegate_shm::unlink(&path).unwrap();
}

/// A creator killed before it finished leaves the header not ready: the next
/// opener makes the region again. A region from another boot is reset.
#[test]
fn a_half_made_or_previous_boot_region_is_made_again() {
    let path = file("half");
    sluicegate_shm::unlink(&path).unwrap();
    let spec = spec(Kind::TokenBucket, "1/hour");
    // A region opened now admits "k" once: its one unit of the hour is there.
    let fresh_admits = || {
        let r = Region::open(&path, &OPTIONS()).unwrap();
        r.keyed(&spec, 10)
            .unwrap()
            .check("k")
            .unwrap()
            .decision
            .allowed
    };
    assert!(fresh_admits());
    poke(&path, 16, 0); // the state word: not ready
    assert!(fresh_admits(), "the region was not made again");
    poke(&path, 48, 0xdead); // the boot id
    assert!(fresh_admits(), "the region was not made again");
    sluicegate_shm::unlink(&path).unwrap();
}

/// Random words written over random places of a live region (the header
/// spared: that is a clear error above) by "another process": every API keeps
/// answering, with no panic and no hang.
#[test]
fn random_bytes_in_a_live_region_never_crash_or_hang() {
    let path = file("fuzz");
    sluicegate_shm::unlink(&path).unwrap();
    let r = Region::open(&path, &OPTIONS()).unwrap();
    let len = std::fs::metadata(&path).unwrap().len();
    let specs: Vec<Spec> = keyed_kinds().map(|k| spec(k, "5/s")).collect();
    let tables: Vec<_> = specs.iter().map(|s| r.keyed(s, 100).unwrap()).collect();
    let singles: Vec<_> = specs.iter().map(|s| r.limiter(s).unwrap()).collect();
    let mut rng = 0x9e37_79b9_7f4a_7c15_u64;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let start = Instant::now();
    for round in 0..200u64 {
        for _ in 0..64 {
            let at = 4096 + (next() % ((len - 4096) / 8)) * 8;
            poke(&path, at, next());
        }
        let now = round * 10_000_000;
        for t in &tables {
            for k in 0..20 {
                let _ = t.check_n_at(format!("k{k}"), 1, now);
                let _ = t.peek_n_at(format!("k{k}"), 1, now);
            }
            let _ = (t.len_at(now), t.stats());
        }
        for l in &singles {
            let _ = l.check_n_at(1, now);
        }
        let _ = r.pool().live_keys_at(now);
        for s in &specs {
            let _ = r.keyed(s, 50);
        }
    }
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "too slow: a spin?"
    );
    drop((tables, singles, r));
    sluicegate_shm::unlink(&path).unwrap();
}
