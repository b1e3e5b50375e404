//! The rule index: which rules a request can match at all, from their exact-match
//! conditions (`method = "POST"`, `tenant = ["acme", "globex"]`), so a rule that
//! cannot match costs one bit test instead of an evaluation.
//!
//! Each rule with at least one condition that accepts only exact values is filed
//! under one such attribute (the one most rules share, so a request looks up few
//! attributes), once per value; the others are always candidates. A request's
//! candidates are the always-rules plus, per indexed attribute, the rules filed
//! under its value (a binary search over the sorted values). Every candidate is
//! then matched in full, in file order: the index only skips rules that cannot
//! match.

use std::collections::BTreeMap;

use crate::attrs::AttrName;
use crate::key::Lookup;
use crate::policy::Rule;

/// Policies of up to this many rules are indexed; larger ones are scanned.
pub(crate) const MAX_INDEXED: usize = 256;

/// One bit per rule, in file order.
pub(crate) type Mask = [u64; MAX_INDEXED / 64];

/// An indexed attribute's values, sorted, each with the rules it lets in.
type Values = Box<[(Box<str>, Mask)]>;

/// See the [module docs](self).
#[derive(Debug, Default)]
pub(crate) struct RuleIndex {
    /// `false`: too many rules, every rule is a candidate.
    enabled: bool,
    /// Rules without an exact-match condition.
    always: Mask,
    /// Per indexed attribute (its index in the policy's names), its values in
    /// sorted order and the rules each value lets in.
    by_attr: Box<[(u16, Values)]>,
}

fn set(m: &mut Mask, i: usize) {
    m[i / 64] |= 1 << (i % 64);
}

impl RuleIndex {
    pub(crate) fn build(rules: &[Rule]) -> RuleIndex {
        if rules.len() > MAX_INDEXED {
            return RuleIndex::default();
        }
        // How many rules could be filed under each attribute.
        let mut share: BTreeMap<u16, usize> = BTreeMap::new();
        for r in rules {
            for (a, c) in r.conds.iter() {
                if c.exact_values().is_some() {
                    *share.entry(*a).or_default() += 1;
                }
            }
        }
        let mut always = Mask::default();
        let mut by: BTreeMap<u16, BTreeMap<Box<str>, Mask>> = BTreeMap::new();
        for (i, r) in rules.iter().enumerate() {
            let best = r
                .conds
                .iter()
                .filter_map(|(a, c)| Some((*a, c.exact_values()?)))
                .max_by_key(|(a, _)| (share.get(a).copied().unwrap_or(0), u16::MAX - a));
            match best {
                None => set(&mut always, i),
                Some((a, values)) => {
                    let entry = by.entry(a).or_default();
                    for v in values {
                        set(entry.entry(v.into()).or_default(), i);
                    }
                }
            }
        }
        RuleIndex {
            enabled: true,
            always,
            by_attr: by
                .into_iter()
                .map(|(a, values)| (a, values.into_iter().collect()))
                .collect(),
        }
    }

    /// The rules the request in `lookup` can match, into `out`; `false` when the
    /// policy is not indexed (every rule is a candidate).
    #[inline]
    pub(crate) fn candidates<L: Lookup + ?Sized>(
        &self,
        lookup: &L,
        names: &[AttrName],
        out: &mut Mask,
    ) -> bool {
        if !self.enabled {
            return false;
        }
        *out = self.always;
        for (a, values) in self.by_attr.iter() {
            let Some(name) = names.get(usize::from(*a)) else {
                continue;
            };
            let Some(v) = lookup.value(*a, name) else {
                continue;
            };
            if let Ok(k) = values.binary_search_by(|(s, _)| (**s).cmp(v)) {
                for (o, m) in out.iter_mut().zip(values[k].1.iter()) {
                    *o |= m;
                }
            }
        }
        true
    }
}

/// The set bits of `m`, in order.
#[inline]
pub(crate) fn bits(m: &Mask) -> impl Iterator<Item = usize> + '_ {
    m.iter().enumerate().flat_map(|(w, &word)| {
        let mut rest = word;
        std::iter::from_fn(move || {
            if rest == 0 {
                return None;
            }
            let b = rest.trailing_zeros() as usize;
            rest &= rest - 1;
            Some(w * 64 + b)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_in_order() {
        let mut m = Mask::default();
        for i in [0, 5, 63, 64, 200, 255] {
            set(&mut m, i);
        }
        assert_eq!(bits(&m).collect::<Vec<_>>(), [0, 5, 63, 64, 200, 255]);
        assert_eq!(bits(&Mask::default()).count(), 0);
    }
}
