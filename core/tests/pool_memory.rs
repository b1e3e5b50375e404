//! A pool over memory the caller provides (`Pool::in_memory`): several pools over
//! one memory behave as one pool, the way processes mapping one shared region
//! will. Each handle here has its own process-local state (its own `Pool`, its
//! own `AnyKeyed`), exactly what a second process would have; only the memory
//! is common.
//!
//! * identical limits registered through different handles are one limit: the
//!   total admitted over 8 handles on 8 threads equals the exact bound, per
//!   keyed kind;
//! * limits that differ in kind, quota or bound never share a state;
//! * 8 handles registering one limit at once all get the same entry;
//! * a flood of new keys through one handle never lifts a victim's limit
//!   checked through another (evictions fold into the shared sketch);
//! * parameters are fixed: `set_spec` is refused; a full registry is
//!   `PoolFull`.
#![cfg(all(feature = "std", not(miri)))]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

use sluicegate::keyed::{AnyKeyed, FullPolicy, Group, Pool, PoolMemory, RegistryEntry, Slot};
use sluicegate::{AnyLimiter, ConfigError, Kind, Spec, SpecError};

#[derive(Debug)]
struct Mem {
    groups: Vec<Group>,
    cells: Vec<Slot>,
    registry: Vec<RegistryEntry>,
    seed: u64,
}

impl PoolMemory for Mem {
    fn groups(&self) -> &[Group] {
        &self.groups
    }
    fn cells(&self) -> &[Slot] {
        &self.cells
    }
    fn registry(&self) -> &[RegistryEntry] {
        &self.registry
    }
    fn seed(&self) -> u64 {
        self.seed
    }
}

fn memory(groups: usize, cells: usize, entries: usize) -> Arc<Mem> {
    Arc::new(Mem {
        groups: (0..groups).map(|_| Group::new()).collect(),
        cells: (0..cells).map(|_| Slot::new()).collect(),
        registry: (0..entries).map(|_| RegistryEntry::new()).collect(),
        seed: 0x5eed,
    })
}

fn keyed_kinds() -> impl Iterator<Item = Kind> {
    Kind::ALL.into_iter().filter(|k| k.caps().keyed)
}

fn spec(kind: Kind, rate: &str) -> Spec {
    let s = Spec::parse(kind, rate).unwrap();
    if kind.caps().max_delay {
        s.with_max_delay_ns(0).unwrap()
    } else {
        s
    }
}

/// 8 handles on 8 threads check 16 keys of one per-hour limit, all at times
/// within one second (no refill of consequence): the total admitted per key is
/// exactly what one limit admits.
#[test]
fn identical_limits_through_many_handles_are_one_limit() {
    const HANDLES: usize = 8;
    const KEYS: u64 = 16;
    for kind in keyed_kinds() {
        let mem = memory(64, 64, 32);
        let spec = spec(kind, "20/hour");
        // The reference: one limit on its own, checked alone.
        let alone = AnyKeyed::with_clock(&spec, 64, ()).unwrap();
        let mut bound = 0;
        while alone.check_n_at("k", 1, 0).unwrap().decision.allowed {
            bound += 1;
        }
        assert!(bound > 0, "{kind}");
        let admitted: Vec<AtomicU64> = (0..KEYS).map(|_| AtomicU64::new(0)).collect();
        let barrier = Barrier::new(HANDLES);
        std::thread::scope(|s| {
            for h in 0..HANDLES {
                let (mem, spec, admitted, barrier) = (mem.clone(), spec, &admitted, &barrier);
                s.spawn(move || {
                    let pool = Pool::in_memory(mem).unwrap();
                    let t = AnyKeyed::in_pool(&pool, &spec, 1000, ()).unwrap();
                    barrier.wait();
                    for round in 0..3 * bound {
                        for k in 0..KEYS {
                            let now = (round * HANDLES as u64 + h as u64) * 1000;
                            let key = format!("user-{k}");
                            if t.check_n_at(key.as_str(), 1, now).unwrap().decision.allowed {
                                admitted[k as usize].fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                });
            }
        });
        for (k, a) in admitted.iter().enumerate() {
            assert_eq!(a.load(Ordering::Relaxed), bound, "{kind}: key {k}");
        }
        assert_eq!(Pool::in_memory(mem).unwrap().limits(), 1, "{kind}");
    }
}

#[test]
fn limits_that_differ_in_kind_quota_or_bound_never_share_a_state() {
    let mem = memory(64, 64, 32);
    let (a, b) = (
        Pool::in_memory(mem.clone()).unwrap(),
        Pool::in_memory(mem.clone()).unwrap(),
    );
    let base = spec(Kind::TokenBucket, "2/hour");
    let t = AnyKeyed::in_pool(&a, &base, 100, ()).unwrap();
    assert!(t.check_n_at("k", 2, 0).unwrap().decision.allowed);
    assert!(!t.check_n_at("k", 1, 0).unwrap().decision.allowed);
    let others = [
        AnyKeyed::in_pool(&b, &spec(Kind::FixedWindow, "2/hour"), 100, ()).unwrap(),
        AnyKeyed::in_pool(&b, &spec(Kind::TokenBucket, "3/hour"), 100, ()).unwrap(),
        AnyKeyed::in_pool(&b, &base, 101, ()).unwrap(),
    ];
    for o in &others {
        assert!(o.check_n_at("k", 2, 0).unwrap().decision.allowed);
        assert_ne!(o.pool_ids(), t.pool_ids());
    }
    // And the same limit through the other handle is the first one.
    let same = AnyKeyed::in_pool(&b, &base, 100, ()).unwrap();
    assert_eq!(same.pool_ids(), t.pool_ids());
    assert!(!same.check_n_at("k", 1, 0).unwrap().decision.allowed);
    assert_eq!(a.limits(), 4);
}

#[test]
fn handles_registering_one_limit_at_once_meet_in_one_entry() {
    for round in 0..20 {
        let mem = memory(16, 64, 8);
        let spec = spec(Kind::SlidingWindow, &format!("{}/hour", round + 1));
        let barrier = Barrier::new(8);
        let ids: Vec<Vec<u16>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8)
                .map(|_| {
                    let (mem, barrier) = (mem.clone(), &barrier);
                    s.spawn(move || {
                        let pool = Pool::in_memory(mem).unwrap();
                        barrier.wait();
                        AnyKeyed::in_pool(&pool, &spec, 10, ()).unwrap().pool_ids()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(ids.iter().all(|i| *i == ids[0]), "round {round}: {ids:?}");
        assert_eq!(Pool::in_memory(mem).unwrap().limits(), 1);
    }
}

/// A pool of 4 groups (32 slots): one handle floods it with new keys of a
/// second limit while another checks a victim key of the first, on two threads.
/// Evicted victim state goes to the shared sketch, so the victim never gets
/// more than its exact token-bucket bound.
#[test]
fn a_flood_through_one_handle_never_lifts_a_victim_checked_through_another() {
    let mem = memory(4, 64, 8);
    let victim_spec = spec(Kind::TokenBucket, "10/s");
    let flood_spec = spec(Kind::TokenBucket, "1/s");
    let ms = 2_000u64;
    let admitted = AtomicU64::new(0);
    let barrier = Barrier::new(2);
    std::thread::scope(|s| {
        let (m1, m2) = (mem.clone(), mem.clone());
        let (barrier, admitted) = (&barrier, &admitted);
        s.spawn(move || {
            let pool = Pool::in_memory(m1).unwrap();
            let t = AnyKeyed::in_pool(&pool, &victim_spec, 32, ())
                .unwrap()
                .with_policy(FullPolicy::EvictStalest);
            for i in 0..ms {
                if i % 16 == 0 {
                    barrier.wait();
                }
                for _ in 0..4 {
                    if t.check_n_at("victim", 1, i * 1_000_000)
                        .unwrap()
                        .decision
                        .allowed
                    {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        });
        s.spawn(move || {
            let pool = Pool::in_memory(m2).unwrap();
            let t = AnyKeyed::in_pool(&pool, &flood_spec, 32, ())
                .unwrap()
                .with_policy(FullPolicy::EvictStalest);
            let mut key = 0u64;
            for i in 0..ms {
                if i % 16 == 0 {
                    barrier.wait();
                }
                for _ in 0..8 {
                    key += 1;
                    let _ = t.check_n_at(&key, 1, i * 1_000_000);
                }
            }
        });
    });
    // Burst 10 plus 10/s over [0, ms - 1] ms.
    let bound = 10 + 10 * (ms - 1) / 1000;
    let got = admitted.load(Ordering::Relaxed);
    assert!(got <= bound, "victim admitted {got}, bound {bound}");
    assert!(
        got >= bound - 2,
        "victim admitted {got} of {bound}: limited early"
    );
}

#[test]
fn parameters_in_caller_memory_are_fixed() {
    let pool = Pool::in_memory(memory(8, 64, 8)).unwrap();
    let t = AnyKeyed::in_pool(&pool, &spec(Kind::TokenBucket, "1/s"), 10, ()).unwrap();
    let e = t.set_spec(&spec(Kind::TokenBucket, "2/s")).unwrap_err();
    assert_eq!(
        e,
        SpecError::Config {
            index: 0,
            error: ConfigError::Immutable { field: "shared" }
        }
    );
    // Dropping a handle frees nothing: another process may use the limit.
    let ids = t.pool_ids();
    drop(t);
    assert_eq!(pool.limits(), 1);
    let again = AnyKeyed::in_pool(&pool, &spec(Kind::TokenBucket, "1/s"), 10, ()).unwrap();
    assert_eq!(again.pool_ids(), ids);
}

#[test]
fn a_full_registry_is_pool_full() {
    // 4 entries: entry 0 is never used, so 3 limits.
    let pool = Pool::in_memory(memory(8, 64, 4)).unwrap();
    let mut held = Vec::new();
    for i in 1..=3 {
        let s = spec(Kind::FixedWindow, &format!("{i}/s"));
        held.push(AnyKeyed::in_pool(&pool, &s, 10, ()).unwrap());
    }
    let e = AnyKeyed::in_pool(&pool, &spec(Kind::FixedWindow, "9/s"), 10, ()).unwrap_err();
    assert_eq!(e, SpecError::PoolFull { max: 3 });
    // The registered ones still join.
    assert!(AnyKeyed::in_pool(&pool, &spec(Kind::FixedWindow, "2/s"), 10, ()).is_ok());
}

/// A single limiter in caller memory is one word of its registry entry: every
/// handle registering the same spec (8 threads here, processes over a mapped
/// region) checks that word, exactly; a different spec, or a keyed limit of
/// the same spec, never meets it.
#[test]
fn single_limiters_in_caller_memory_share_one_word_per_spec() {
    let mem = memory(4, 64, 16);
    for kind in Kind::ALL.into_iter().filter(|k| *k != Kind::SlidingLog) {
        let s = spec(kind, "5/hour");
        let admitted = AtomicU64::new(0);
        std::thread::scope(|sc| {
            for _ in 0..8 {
                let (m, s, admitted) = (mem.clone(), &s, &admitted);
                sc.spawn(move || {
                    let pool = Pool::in_memory(m).unwrap();
                    let l = AnyLimiter::in_pool(&pool, s, ()).unwrap();
                    for _ in 0..4 {
                        if l.check_n_at(1, 1_000).unwrap().decision.allowed {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        let bound = spec(kind, "5/hour").capacity();
        assert_eq!(admitted.load(Ordering::Relaxed), bound, "{kind}");
        let pool = Pool::in_memory(mem.clone()).unwrap();
        // Another quota is another word; a keyed limit of the spec another entry.
        let other = AnyLimiter::in_pool(&pool, &spec(kind, "6/hour"), ()).unwrap();
        assert!(
            other.check_n_at(1, 1_000).unwrap().decision.allowed,
            "{kind}"
        );
        let keyed = AnyKeyed::in_pool(&pool, &s, 1, ()).unwrap();
        assert!(
            keyed.check_n_at("k", 1, 1_000).unwrap().decision.allowed,
            "{kind}"
        );
        // Fixed parameters; a reset is every process's.
        let again = AnyLimiter::in_pool(&pool, &s, ()).unwrap();
        assert!(matches!(
            again.set_spec(&spec(kind, "7/hour")),
            Err(SpecError::Config {
                error: ConfigError::Immutable { field: "shared" },
                ..
            })
        ));
        assert!(
            !again.check_n_at(1, 1_000).unwrap().decision.allowed,
            "{kind}"
        );
    }
    let pool = Pool::in_memory(mem.clone()).unwrap();
    let log = Spec::parse(Kind::SlidingLog, "5/hour").unwrap();
    assert!(matches!(
        AnyLimiter::in_pool(&pool, &log, ()),
        Err(SpecError::Unsupported { .. })
    ));
    let two = Spec::parse(Kind::TokenBucket, "5/hour; 50/day").unwrap();
    assert!(matches!(
        AnyLimiter::in_pool(&pool, &two, ()),
        Err(SpecError::Unsupported { .. })
    ));
}
