//! A cluster's masters, each with its own circuit breaker.
//!
//! A key's slot is CRC16 (XMODEM) of its hash tag, modulo 16384, as the cluster
//! computes it; the slot's master comes from `CLUSTER SLOTS`, read after each
//! connect and again whenever a master's breaker opens (a failover or a slot
//! migration is the usual reason a master stops answering). A stale map costs no
//! correctness: it only decides which breaker a call counts against, and the
//! connection routes the call by the cluster's own (redirected) map. Slots the
//! map does not cover, and every call before the first map arrives, count against
//! the limiter's main breaker.

use std::sync::Arc;

use redis::Value;

use crate::breaker::{Breaker, BreakerConfig};

/// Slots in a Redis Cluster.
pub(crate) const SLOTS: usize = 16_384;

/// "No master known" in [`NodeMap`]'s slot table.
const NONE: u16 = u16::MAX;

/// The cluster slot of `key` (the part between the first `{` and the next `}`
/// when that is not empty, else the whole key).
pub(crate) fn key_slot(key: &[u8]) -> u16 {
    let tag = key
        .iter()
        .position(|&b| b == b'{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.iter()
                .position(|&b| b == b'}')
                .map(|close| &rest[..close])
        })
        .filter(|t| !t.is_empty())
        .unwrap_or(key);
    // SLOTS is 2^14, so the remainder fits a u16.
    crc16::State::<crc16::XMODEM>::calculate(tag) % (SLOTS as u16)
}

/// Which master serves each slot, and the masters' breakers.
#[derive(Debug)]
pub(crate) struct NodeMap {
    /// Slot → index into `nodes`, or [`NONE`].
    slot_node: Box<[u16]>,
    /// Each master's identity (node id, else `host:port`) and breaker.
    nodes: Vec<(String, Arc<Breaker>)>,
}

impl NodeMap {
    /// The map in a `CLUSTER SLOTS` reply; the breakers of masters already in
    /// `old` are kept (with their state). `None` if the reply is not one.
    pub(crate) fn from_cluster_slots(
        reply: &Value,
        old: Option<&Self>,
        cfg: BreakerConfig,
    ) -> Option<Self> {
        let Value::Array(ranges) = reply else {
            return None;
        };
        let mut slot_node = vec![NONE; SLOTS].into_boxed_slice();
        let mut nodes: Vec<(String, Arc<Breaker>)> = Vec::new();
        for range in ranges {
            let Value::Array(r) = range else { return None };
            let (Some(lo), Some(hi), Some(Value::Array(master))) =
                (r.first().and_then(int), r.get(1).and_then(int), r.get(2))
            else {
                return None;
            };
            let id = match (master.get(2).and_then(text), master.first().and_then(text)) {
                (Some(id), _) => id,
                (None, Some(host)) => format!("{host}:{}", master.get(1).and_then(int)?),
                (None, None) => return None,
            };
            let index = match nodes.iter().position(|(n, _)| *n == id) {
                Some(i) => i,
                None => {
                    let breaker = old
                        .and_then(|o| o.nodes.iter().find(|(n, _)| *n == id))
                        .map_or_else(
                            || {
                                let host = master.first().and_then(text).unwrap_or_default();
                                let port = master.get(1).and_then(int).unwrap_or(0);
                                Arc::new(Breaker::new(cfg, format!("cluster master {host}:{port}")))
                            },
                            |(_, b)| Arc::clone(b),
                        );
                    nodes.push((id, breaker));
                    nodes.len() - 1
                }
            };
            let index = u16::try_from(index).ok().filter(|&i| i != NONE)?;
            let (lo, hi) = (usize::try_from(lo).ok()?, usize::try_from(hi).ok()?);
            if lo > hi || hi >= SLOTS {
                return None;
            }
            slot_node[lo..=hi].fill(index);
        }
        Some(Self { slot_node, nodes })
    }

    /// The breaker of the master serving `slot`, if the map knows it.
    pub(crate) fn breaker(&self, slot: u16) -> Option<&Arc<Breaker>> {
        let i = *self.slot_node.get(usize::from(slot))?;
        self.nodes.get(usize::from(i)).map(|(_, b)| b)
    }

    /// Whether any master's circuit is open.
    pub(crate) fn any_open(&self) -> bool {
        self.nodes.iter().any(|(_, b)| b.is_open())
    }

    /// Times the masters' circuits opened, together.
    pub(crate) fn times_opened(&self) -> u64 {
        self.nodes.iter().map(|(_, b)| b.times_opened()).sum()
    }

    /// How many masters the map has.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        _ => None,
    }
}

fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => String::from_utf8(b.clone()).ok().filter(|s| !s.is_empty()),
        Value::SimpleString(s) => Some(s.clone()).filter(|s| !s.is_empty()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::breaker::Permit;

    #[test]
    fn slots_match_the_cluster_spec() {
        // The examples of the Redis Cluster specification and `CLUSTER KEYSLOT`.
        // CRC16/XMODEM of "123456789" is 0x31C3 (below 16384, so it is the slot).
        assert_eq!(key_slot(b"123456789"), 0x31C3);
        assert_eq!(key_slot(b"foo"), 12182);
        assert_eq!(key_slot(b"{user1000}.following"), key_slot(b"user1000"));
        assert_ne!(key_slot(b"foo{}{bar}"), key_slot(b"bar"));
        assert_eq!(key_slot(b"foo{{bar}}zap"), key_slot(b"{bar"));
        assert_eq!(key_slot(b"foo{bar}{zap}"), key_slot(b"bar"));
        assert_eq!(
            key_slot(b"sluicegate:login:{10.0.0.1}"),
            key_slot(b"10.0.0.1")
        );
    }

    fn node(port: i64, id: &str) -> Value {
        Value::Array(vec![
            Value::BulkString(b"127.0.0.1".to_vec()),
            Value::Int(port),
            Value::BulkString(id.as_bytes().to_vec()),
        ])
    }

    fn range(lo: i64, hi: i64, master: Value) -> Value {
        Value::Array(vec![Value::Int(lo), Value::Int(hi), master])
    }

    #[test]
    fn a_map_from_cluster_slots_keeps_breakers_across_refreshes() {
        let cfg = BreakerConfig::default();
        let reply = Value::Array(vec![
            range(0, 5460, node(7000, "a")),
            range(5461, 10922, node(7001, "b")),
            range(10923, 16000, node(7002, "c")),
            range(16001, 16383, node(7000, "a")),
        ]);
        let map = NodeMap::from_cluster_slots(&reply, None, cfg).unwrap();
        assert_eq!(map.len(), 3);
        let a = Arc::clone(map.breaker(0).unwrap());
        assert!(Arc::ptr_eq(&a, map.breaker(16383).unwrap()));
        assert!(!Arc::ptr_eq(&a, map.breaker(5461).unwrap()));
        for _ in 0..cfg.failure_threshold {
            a.failure(Permit::Call);
        }
        assert!(map.any_open() && a.is_open());
        assert!(!map.breaker(10923).unwrap().is_open());

        // Slot 0 moved to b, and a is still known: a's breaker (still open) is kept.
        let moved = Value::Array(vec![
            range(0, 0, node(7001, "b")),
            range(1, 5460, node(7000, "a")),
            range(5461, 16383, node(7001, "b")),
        ]);
        let map2 = NodeMap::from_cluster_slots(&moved, Some(&map), cfg).unwrap();
        assert!(!map2.breaker(0).unwrap().is_open());
        assert!(Arc::ptr_eq(&a, map2.breaker(1).unwrap()));
        assert_eq!(map2.len(), 2);
    }

    #[test]
    fn holes_and_bad_replies() {
        let cfg = BreakerConfig::default();
        let partial = Value::Array(vec![range(0, 99, node(7000, "a"))]);
        let map = NodeMap::from_cluster_slots(&partial, None, cfg).unwrap();
        assert!(map.breaker(99).is_some() && map.breaker(100).is_none());
        // Without a node id, host:port names the master.
        let anon = Value::Array(vec![range(
            0,
            16383,
            Value::Array(vec![
                Value::BulkString(b"10.0.0.5".to_vec()),
                Value::Int(6379),
            ]),
        )]);
        assert!(NodeMap::from_cluster_slots(&anon, None, cfg).is_some());
        for bad in [
            Value::Nil,
            Value::Array(vec![Value::Int(1)]),
            Value::Array(vec![range(5, 4, node(1, "a"))]),
            Value::Array(vec![range(0, 16384, node(1, "a"))]),
            Value::Array(vec![range(-1, 3, node(1, "a"))]),
        ] {
            assert!(
                NodeMap::from_cluster_slots(&bad, None, cfg).is_none(),
                "{bad:?}"
            );
        }
    }
}
