//! Keyed limiters (groups `keyed_1`, `keyed_100k`, `keyed_1m`): one limiter state
//! per client key, one thread. Each group is one key population, and every
//! contender in it runs on the same keys in the same order, so the ratios within a
//! group compare the tables and nothing else:
//!
//! * `sluicegate check_at` — `KeyedLimiter<Gcra, ()>`, `u64` keys, time passed in;
//! * `sluicegate check` — `KeyedLimiter<Gcra>` on the default (quanta) clock, `u64`
//!   keys; `sluicegate check (String)` — the same with `String` keys;
//! * `governor check_key` / `governor check_key (String)` — governor 0.10's keyed
//!   limiter (`RateLimiter::keyed`, a `DashMap`, its quanta clock), `u64` / `String`
//!   keys;
//! * `rwlock_hashmap allow (String)` — the seeds' `RwLock<HashMap<String,
//!   Mutex<bucket>>>` ([`KeyedMutexMap`]);
//! * `floor slot add` / `floor quanta_now + slot add` / `floor dependent miss` —
//!   references, not contenders, over an array as large as our table: one atomic
//!   add on the key's slot, without and with a clock read (calls overlap, so this
//!   is a throughput floor), and one load that waits for the previous call's (the
//!   latency of one miss, the floor of a check whose misses cannot overlap the
//!   next check's); see [`Floor`].
//!
//! # Keys and order
//! `keyed_1` is one hot key. `keyed_100k` and `keyed_1m` cycle through 100,000 and
//! 1,000,000 distinct keys in one fixed pseudo-random permutation (the same for
//! every contender), so consecutive requests hit unrelated entries and, at a
//! million keys, miss the caches as real traffic from many clients does (our table
//! is 20 MB there, governor's map more; this machine's last-level cache is 32 MB,
//! shared). `u64` keys are random-looking 64-bit ids (splitmix64 of the index),
//! not `0..n`: foldhash spreads consecutive integers more evenly than random, which
//! would flatter our table's placement. `String` keys (`client-000000123456`, 19
//! bytes) are allocated in request order, like request buffers; each map's own
//! copy of a key lies wherever the map put it.
//!
//! Our tables have **1.25 slots per key** (capacity 125,000 and 1,250,000), with
//! the default full-table policy (`EvictStalest`).
//!
//! # Quotas: every call is admitted, every key stays live
//! * `keyed_1`: the `WIDE` quota of the direct benchmarks (10⁹/s, burst 2³⁰); time
//!   passed in advances 1 ns a call, exactly the refill a call takes.
//! * `keyed_100k`, `keyed_1m`: **1 per minute with a burst of 2²⁰**. A key is
//!   revisited every 100,000 or 1,000,000 calls, far fewer than 2²⁰ visits in a run,
//!   so it is always admitted; and its bucket is never full again between visits
//!   (one unit takes a minute to refill), so its entry stays *live*, as under real
//!   per-client limits: our table's lossless reuse of fresh slots never applies.
//!
//! A key lives in one of 16 candidate slots: 8 in its home group and 8 in a
//! second group picked by an independent mix of its hash (two-choice placement: a
//! new key goes to the group with more room). With every key live and 1.25 slots
//! per key, every key of these populations finds a free slot, so no timed call
//! evicts or takes the placement path (a group lock and a 16-slot scan). The run
//! prints, per table, how many keys it tracks and how many evictions the timed
//! calls made (`keyed-stats:` lines, read into the table by
//! `scripts/bench-table.py`), so a change that brings evictions back shows there.
//!
//! # Proof of admission
//! Before timing, each contender runs two passes over its keys (the first places
//! every key, the second is the timed loop's exact sequence of calls), and after
//! timing one more; each pass asserts that every call was admitted (a pass is at
//! least 300,000 calls, so the hot key is checked too). This replaces a separate
//! `preflight` run for these groups: building a second million-key table only to
//! check it would double the setup time, and checking the instance that is timed,
//! before *and* after, is stronger.

use std::hash::Hash;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, Criterion};
use governor::DefaultKeyedRateLimiter;
use sluicegate::keyed::KeyedLimiter;
use sluicegate::{Clock, Decision, Gcra, QuantaClock, Quota};

use crate::contenders::{self as c, START_NS, WIDE_BURST, WIDE_RATE, WIDE_STEP_NS};
use crate::mutex_bucket::KeyedMutexMap;

/// Our table's slots per key: 5/4.
const SLOTS_PER_KEY: (usize, usize) = (5, 4);

/// The many-key quota's burst (its rate: one unit a minute).
const KEYS_BURST: u32 = 1 << 20;

/// The shortest pass of the admission proof, in calls.
const MIN_PASS: usize = 300_000;

/// One keyed contender: a call for a key and whether its answer admitted.
trait KeyedCheck<K: ?Sized> {
    /// What the call returns; the timed loop `black_box`es all of it.
    type Answer;
    /// `Some(step)`: time passed in, advanced by `step` ns a call; `None`: the
    /// contender reads its own clock.
    const STEP_NS: Option<u64>;
    fn call(&self, key: &K, now: u64) -> Self::Answer;
    fn admitted(answer: &Self::Answer) -> bool;
    /// Keys the contender tracks at `now`.
    fn tracked(&self, now: u64) -> usize;
    /// Our table's (slots, evictions so far); `None` for the anchors, whose maps
    /// never forget a key.
    fn table(&self) -> Option<(usize, u64)> {
        None
    }
}

/// Ours, time passed in.
struct OursAt(KeyedLimiter<Gcra, ()>);
impl<K: Hash + ?Sized> KeyedCheck<K> for OursAt {
    type Answer = Decision;
    const STEP_NS: Option<u64> = Some(WIDE_STEP_NS);
    #[inline]
    fn call(&self, key: &K, now: u64) -> Decision {
        self.0.check_at(key, now)
    }
    fn admitted(d: &Decision) -> bool {
        d.allowed
    }
    fn tracked(&self, now: u64) -> usize {
        self.0.len_at(now)
    }
    fn table(&self) -> Option<(usize, u64)> {
        Some((self.0.capacity(), self.0.stats().evicted))
    }
}

/// Ours on the default clock.
struct OursClock(KeyedLimiter<Gcra>);
impl<K: Hash + ?Sized> KeyedCheck<K> for OursClock {
    type Answer = Decision;
    const STEP_NS: Option<u64> = None;
    #[inline]
    fn call(&self, key: &K, _: u64) -> Decision {
        self.0.check(key)
    }
    fn admitted(d: &Decision) -> bool {
        d.allowed
    }
    fn tracked(&self, _: u64) -> usize {
        self.0.len()
    }
    fn table(&self) -> Option<(usize, u64)> {
        Some((self.0.capacity(), self.0.stats().evicted))
    }
}

/// governor's keyed limiter (DashMap, quanta clock).
struct GovernorKeyed<K: Hash + Eq + Clone>(DefaultKeyedRateLimiter<K>);
impl<K: Hash + Eq + Clone> KeyedCheck<K> for GovernorKeyed<K> {
    type Answer = Result<(), governor::NotUntil<governor::clock::QuantaInstant>>;
    const STEP_NS: Option<u64> = None;
    #[inline]
    fn call(&self, key: &K, _: u64) -> Self::Answer {
        self.0.check_key(key)
    }
    fn admitted(a: &Self::Answer) -> bool {
        a.is_ok()
    }
    fn tracked(&self, _: u64) -> usize {
        self.0.len()
    }
}

/// The seeds' `RwLock<HashMap<String, Mutex<bucket>>>`.
struct MutexMap(KeyedMutexMap);
impl KeyedCheck<String> for MutexMap {
    type Answer = bool;
    const STEP_NS: Option<u64> = None;
    #[inline]
    fn call(&self, key: &String, _: u64) -> bool {
        self.0.allow(key)
    }
    fn admitted(a: &bool) -> bool {
        *a
    }
    fn tracked(&self, _: u64) -> usize {
        self.0.len()
    }
}

/// References, not contenders: the physical floors of a keyed check at this key
/// count, over an array of 16-byte slots as large as our table.
///
/// * [`Floor::add`]: one atomic add on the key's slot, found by one multiply (no
///   hashing, probing, compare or lock); with a clock, the added value is a quanta
///   clock read, so the write waits on the clock as a limiter's does. Calls
///   overlap freely: the floor for straight-line code.
/// * [`Floor::chase`]: each call loads the slot whose index the previous call
///   loaded (one random cycle, Sattolo's algorithm), so no call starts its load
///   before the last one returned: the latency of one miss. A check that branches
///   on what it loaded (is this my key? am I admitted?) and runs a few hundred
///   instructions cannot overlap its miss with the next check's much either, so
///   this is the floor for such a check.
struct Floor {
    /// Two words a slot; the chase keeps its link in the first.
    words: Vec<AtomicU64>,
    how: FloorHow,
    keys: usize,
}

/// What a [`Floor`] call does.
enum FloorHow {
    /// An atomic add on the key's slot; with a clock, of a clock read.
    Add(Option<QuantaClock>),
    /// A load of the slot the last call's load named (the index it is at).
    Chase(AtomicU64),
}

impl Floor {
    fn new(slots: usize, keys: usize, how: FloorHow) -> Self {
        Self {
            words: (0..2 * slots.max(2)).map(|_| AtomicU64::new(0)).collect(),
            how,
            keys,
        }
    }

    fn add(slots: usize, keys: usize, clock: bool) -> Self {
        Self::new(slots, keys, FloorHow::Add(clock.then(QuantaClock::default)))
    }

    fn chase(slots: usize, keys: usize) -> Self {
        let f = Self::new(slots, keys, FloorHow::Chase(AtomicU64::new(0)));
        let slots = f.words.len() / 2;
        let mut order: Vec<u64> = (0..slots as u64).collect();
        let mut state = 0xc4a5e_u64;
        for i in (1..slots).rev() {
            state = state.wrapping_add(1);
            let j = (splitmix64(state) % i as u64) as usize; // j < i: one cycle
            order.swap(i, j);
        }
        for (i, &o) in order.iter().enumerate() {
            f.words[2 * i].store(2 * o, Ordering::Relaxed);
        }
        f
    }
}

impl KeyedCheck<u64> for Floor {
    type Answer = u64;
    const STEP_NS: Option<u64> = None;
    #[inline]
    fn call(&self, key: &u64, _: u64) -> u64 {
        match &self.how {
            FloorHow::Chase(at) => {
                let next = self.words[at.load(Ordering::Relaxed) as usize].load(Ordering::Relaxed);
                at.store(next, Ordering::Relaxed);
                next
            }
            FloorHow::Add(clock) => {
                // The keys are splitmix64 outputs, uniform already: the multiply
                // maps them onto the slots evenly.
                let i = ((u128::from(*key) * (self.words.len() / 2) as u128) >> 64) as usize;
                let add = clock.as_ref().map_or(1, |c| c.now());
                self.words[2 * i].fetch_add(add, Ordering::AcqRel)
            }
        }
    }
    fn admitted(_: &u64) -> bool {
        true
    }
    fn tracked(&self, _: u64) -> usize {
        self.keys
    }
}

/// One key population: the quota every contender gets and the keys in request order.
struct Population {
    name: &'static str,
    hot: bool,
    ids: Vec<u64>,
    strings: Vec<String>,
}

impl Population {
    fn new(name: &'static str, n: usize) -> Self {
        let order = permutation(n);
        let ids = order.iter().map(|&k| splitmix64(k)).collect();
        let strings = order.iter().map(|k| format!("client-{k:012}")).collect();
        Self {
            name,
            hot: n == 1,
            ids,
            strings,
        }
    }

    fn quota(&self) -> Quota {
        if self.hot {
            c::wide()
        } else {
            Quota::per_minute(1).burst(u64::from(KEYS_BURST))
        }
    }

    fn governor_quota(&self) -> governor::Quota {
        if self.hot {
            c::governor_quota()
        } else {
            governor::Quota::per_minute(NonZeroU32::new(1).unwrap())
                .allow_burst(NonZeroU32::new(KEYS_BURST).unwrap())
        }
    }

    /// (rate per second, burst) for the mutex map.
    fn float_quota(&self) -> (f64, f64) {
        if self.hot {
            (f64::from(WIDE_RATE), f64::from(WIDE_BURST))
        } else {
            (1.0 / 60.0, f64::from(KEYS_BURST))
        }
    }

    fn capacity(&self) -> usize {
        self.ids.len() * SLOTS_PER_KEY.0 / SLOTS_PER_KEY.1
    }
}

/// splitmix64's output function: a bijection of `u64` that looks random.
fn splitmix64(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A fixed pseudo-random permutation of `0..n` (Fisher–Yates on splitmix64).
fn permutation(n: usize) -> Vec<u64> {
    let mut keys: Vec<u64> = (0..n as u64).collect();
    let mut state = 0x5eed_u64;
    for i in (1..n).rev() {
        state = state.wrapping_add(1);
        let j = (splitmix64(state) % (i as u64 + 1)) as usize;
        keys.swap(i, j);
    }
    keys
}

/// Runs a pass of calls from key `*i` on (cycling; every key at least once, and
/// at least [`MIN_PASS`] calls), asserting that every one was admitted. Returns
/// how many keys the contender tracks afterwards.
fn pass<K, C: KeyedCheck<K>>(c: &C, keys: &[K], i: &mut usize, now: &mut u64, what: &str) -> usize {
    let calls = keys.len().max(MIN_PASS);
    let step = C::STEP_NS.unwrap_or(0);
    let mut denied = 0usize;
    for _ in 0..calls {
        *i += 1;
        if *i == keys.len() {
            *i = 0;
        }
        *now += step;
        if !C::admitted(&c.call(&keys[*i], *now)) {
            denied += 1;
        }
    }
    assert_eq!(denied, 0, "{what}: {denied} of {calls} calls denied");
    c.tracked(*now)
}

fn time<K, C: KeyedCheck<K>>(
    g: &mut BenchmarkGroup<'_, WallTime>,
    pop: &str,
    id: &str,
    c: C,
    keys: &[K],
) {
    let what = format!("{pop}/{id}");
    let (mut i, mut now) = (0usize, START_NS);
    pass(&c, keys, &mut i, &mut now, &format!("{what} (placing)"));
    let tracked = pass(
        &c,
        keys,
        &mut i,
        &mut now,
        &format!("{what} (before timing)"),
    );
    let evicted_before = c.table().map_or(0, |t| t.1);
    let step = C::STEP_NS.unwrap_or(0);
    let mut calls = 0u64;
    g.bench_function(id, |b| {
        // Returns (): see `direct::time`.
        b.iter(|| {
            calls += 1;
            i += 1;
            if i == keys.len() {
                i = 0;
            }
            now += step;
            black_box(c.call(black_box(&keys[i]), black_box(now)));
        })
    });
    let evicted_timed = c.table().map_or(0, |t| t.1) - evicted_before;
    let tracked_after = pass(
        &c,
        keys,
        &mut i,
        &mut now,
        &format!("{what} (after timing)"),
    );
    // Read by scripts/bench-table.py (the hot key's entry is fresh again 1 ns after
    // each call, so it counts as untracked there: `tracked` is for many keys).
    let slots = c.table().map_or(0, |t| t.0);
    eprintln!(
        "keyed-stats: {what}\tkeys={}\tslots={slots}\ttracked={tracked}\t\
         tracked_after={tracked_after}\tevicted_timed={evicted_timed}\tcalls_timed={calls}",
        keys.len()
    );
}

fn group(cr: &mut Criterion, pop: &Population) {
    let mut g = cr.benchmark_group(pop.name);
    // Shorter than the direct groups so the whole run stays near five minutes;
    // each sample still cycles the million keys several times.
    g.warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(30);
    let cap = pop.capacity().max(1);
    let (rate, burst) = pop.float_quota();
    let (ids, strings) = (&pop.ids[..], &pop.strings[..]);
    time(
        &mut g,
        pop.name,
        "sluicegate check_at",
        OursAt(KeyedLimiter::with_clock(pop.quota(), cap, ()).unwrap()),
        ids,
    );
    time(
        &mut g,
        pop.name,
        "sluicegate check",
        OursClock(KeyedLimiter::new(pop.quota(), cap).unwrap()),
        ids,
    );
    time(
        &mut g,
        pop.name,
        "sluicegate check (String)",
        OursClock(KeyedLimiter::new(pop.quota(), cap).unwrap()),
        strings,
    );
    time(
        &mut g,
        pop.name,
        "governor check_key",
        GovernorKeyed(governor::RateLimiter::keyed(pop.governor_quota())),
        ids,
    );
    time(
        &mut g,
        pop.name,
        "governor check_key (String)",
        GovernorKeyed(governor::RateLimiter::keyed(pop.governor_quota())),
        strings,
    );
    time(
        &mut g,
        pop.name,
        "rwlock_hashmap allow (String)",
        MutexMap(KeyedMutexMap::new(rate, burst)),
        strings,
    );
    let keys = ids.len();
    time(
        &mut g,
        pop.name,
        "floor slot add",
        Floor::add(cap, keys, false),
        ids,
    );
    time(
        &mut g,
        pop.name,
        "floor quanta_now + slot add",
        Floor::add(cap, keys, true),
        ids,
    );
    time(
        &mut g,
        pop.name,
        "floor dependent miss",
        Floor::chase(cap, keys),
        ids,
    );
    g.finish();
}

pub(crate) fn bench(cr: &mut Criterion) {
    for (name, n) in [
        ("keyed_1", 1),
        ("keyed_100k", 100_000),
        ("keyed_1m", 1_000_000),
    ] {
        // One population at a time: the million-key maps are freed before the next.
        group(cr, &Population::new(name, n));
    }
}
