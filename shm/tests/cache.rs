//! `Region::open_cached`: one mapping per region per process, counted in
//! `/proc/self/maps`, and never a stale one for a region made again.

use std::path::{Path, PathBuf};

use sluicegate::{Kind, Spec};
use sluicegate_shm::{Error, Options, Region};

/// A file in the temporary directory, unique to this run.
fn file(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("sg-cache-{}-{name}", std::process::id()))
}

/// How many of this process's mappings are of `path` (removed or not).
fn mappings(path: &Path) -> usize {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let p = path.to_str().unwrap();
    maps.lines()
        .filter(|l| l.ends_with(p) || l.ends_with(&format!("{p} (deleted)")))
        .count()
}

/// A region of 1 MiB and 64 limits.
fn small() -> Options {
    Options::default().memory(1 << 20).limits(64)
}

fn hourly(n: u64) -> Spec {
    Spec::parse(Kind::TokenBucket, &format!("{n}/hour")).unwrap()
}

#[test]
fn many_opens_map_once_and_the_last_handle_unmaps() {
    let path = file("once");
    let o = small();
    let mut limits = Vec::new();
    for i in 1..=20 {
        let r = Region::open_cached(&path, &o).unwrap();
        limits.push(r.keyed(&hourly(i), 100).unwrap());
        limits.push(r.keyed(&hourly(i), 100).unwrap());
    }
    assert_eq!(mappings(&path), 1);
    // One state through every handle: the same limit opened twice.
    assert!(limits[0].check_n_at("k", 1, 0).unwrap().decision.allowed);
    assert!(!limits[1].check_n_at("k", 1, 0).unwrap().decision.allowed);
    // Uncached opens map anew, as before.
    let plain = Region::open(&path, &o).unwrap();
    assert_eq!(mappings(&path), 2);
    drop(plain);
    drop(limits);
    assert_eq!(mappings(&path), 0);
    sluicegate_shm::unlink(&path).unwrap();
}

#[test]
fn a_region_made_again_is_mapped_afresh() {
    let path = file("again");
    let o = small();
    let old = Region::open_cached(&path, &o).unwrap();
    let old_limit = old.limiter(&hourly(1)).unwrap();
    assert!(old_limit.check_n_at(1, 0).unwrap().decision.allowed);
    // Removed and made again while this process still has the old one mapped.
    sluicegate_shm::unlink(&path).unwrap();
    let new = Region::open_cached(&path, &o).unwrap();
    assert!(!new.same_mapping(&old));
    assert_eq!(mappings(&path), 2); // the old (deleted) and the new
    let new_limit = new.limiter(&hourly(1)).unwrap();
    assert!(new_limit.check_n_at(1, 0).unwrap().decision.allowed);
    assert!(!old_limit.check_n_at(1, 0).unwrap().decision.allowed);
    // Later opens find the new one.
    assert!(Region::open_cached(&path, &o).unwrap().same_mapping(&new));
    drop((old, old_limit));
    assert_eq!(mappings(&path), 1);
    // Replaced by another process's region under the same name (a rename over
    // it): a new file again.
    let other = file("again-other");
    drop(Region::open(&other, &o).unwrap());
    std::fs::rename(&other, &path).unwrap();
    let third = Region::open_cached(&path, &o).unwrap();
    assert!(!third.same_mapping(&new));
    assert!(
        third
            .limiter(&hourly(1))
            .unwrap()
            .check_n_at(1, 0)
            .unwrap()
            .decision
            .allowed
    );
    drop((new, new_limit, third));
    sluicegate_shm::unlink(&path).unwrap();
}

#[test]
fn a_cached_region_checks_options_and_file_as_an_uncached_open() {
    let path = file("checks");
    let o = small();
    let held = Region::open_cached(&path, &o).unwrap();
    // Another size: the same error as without the cache, naming both.
    let big = Options::default().memory(2 << 20).limits(64);
    let cached = Region::open_cached(&path, &big).unwrap_err();
    let plain = Region::open(&path, &big).unwrap_err();
    assert!(matches!(cached, Error::Size { .. }), "{cached}");
    assert_eq!(cached.to_string(), plain.to_string());
    let fewer = Options::default().memory(1 << 20).limits(8);
    assert!(matches!(
        Region::open_cached(&path, &fewer),
        Err(Error::Size { .. })
    ));
    // A header damaged in place: the error an uncached open gives.
    let region_file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    std::os::unix::fs::FileExt::write_at(&region_file, &1000u64.to_le_bytes(), 8).unwrap();
    let cached = Region::open_cached(&path, &o).unwrap_err();
    assert!(
        matches!(cached, Error::Version { found: 1000, .. }),
        "{cached}"
    );
    std::os::unix::fs::FileExt::write_at(
        &region_file,
        &sluicegate_shm::LAYOUT_VERSION.to_le_bytes(),
        8,
    )
    .unwrap();
    assert!(Region::open_cached(&path, &o).unwrap().same_mapping(&held));
    // A symbolic link in its place is refused, not served from the cache.
    let moved = file("checks-moved");
    std::fs::rename(&path, &moved).unwrap();
    std::os::unix::fs::symlink(&moved, &path).unwrap();
    assert!(matches!(
        Region::open_cached(&path, &o),
        Err(Error::NotAFile { .. })
    ));
    std::fs::remove_file(&path).unwrap();
    // Read-only to its owner (when not root, who may write it anyway).
    std::fs::rename(&moved, &path).unwrap();
    if rustix::process::geteuid().as_raw() != 0 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o400)).unwrap();
        let e = Region::open_cached(&path, &o).unwrap_err();
        assert!(matches!(e, Error::Io { .. }), "{e}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    assert!(Region::open_cached(&path, &o).unwrap().same_mapping(&held));
    drop(held);
    sluicegate_shm::unlink(&path).unwrap();
}

#[test]
fn threads_opening_at_once_end_with_one_mapping() {
    let path = file("threads");
    let o = small();
    for _ in 0..5 {
        let regions: Vec<Region> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|_| s.spawn(|| Region::open_cached(&path, &o).unwrap()))
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(regions.iter().all(|r| r.same_mapping(&regions[0])));
        assert_eq!(mappings(&path), 1);
        drop(regions);
        assert_eq!(mappings(&path), 0);
        sluicegate_shm::unlink(&path).unwrap();
    }
}
