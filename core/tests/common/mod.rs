//! What the keyed-table tests share (`mod common;`): tables whose placement is
//! fixed by a seed, and the keyed traffic their property tests replay.
#![allow(dead_code)]

use proptest::prelude::*;
use sluicegate::keyed::{FullPolicy, Group, Keyed};
use sluicegate::{Algorithm, Quota};

/// The hasher every seeded table uses: deterministic placement, so a test can
/// craft colliding keys or rely on which group a key lands in.
pub type FixedState = foldhash::fast::FixedState;

/// A keyed table of `A` with a fixed-seed hasher and `_at` calls only.
pub type SeededTable<A> = Keyed<A, (), Box<[Group]>, FixedState>;

pub fn fixed_hasher(seed: u64) -> FixedState {
    FixedState::with_seed(seed)
}

/// A table of `slots` slots under `policy`, its placement fixed by `seed`.
pub fn seeded_table<A: Algorithm>(
    quota: Quota,
    slots: usize,
    seed: u64,
    policy: FullPolicy,
) -> SeededTable<A> {
    Keyed::<A, (), _, _>::with_capacity_and_hasher(quota, slots, fixed_hasher(seed), ())
        .unwrap()
        .with_policy(policy)
}

/// One to `max_len` calls, each (key below `keys`, time step (none, under 50 ms
/// or under 3 s), cost below `costs`, a check (85 %) or else a peek).
pub fn keyed_traffic(
    keys: u8,
    costs: u64,
    max_len: usize,
) -> impl Strategy<Value = Vec<(u8, u64, u64, bool)>> {
    prop::collection::vec(
        (
            0u8..keys,
            prop_oneof![Just(0u64), 0u64..50_000_000, 0u64..3_000_000_000],
            0u64..costs,
            prop::bool::weighted(0.85),
        ),
        1..max_len,
    )
}
