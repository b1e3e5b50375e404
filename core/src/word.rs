//! Bit layouts of the window algorithms' state words, in one place.
//!
//! The token bucket, leaky bucket and shaper store one instant in nanoseconds and
//! need no layout. The windows pack a window index and counts:
//!
//! ```text
//! fixed window    [ index : 64 − c ][ count : c ]
//! sliding window  [ index : 64 − 2c ][ previous : c ][ current : c ]
//! ```
//!
//! The index is `now / window`, stored whole: it never wraps, for any `u64` time,
//! so comparing indices is exact and a clock that goes backwards is always seen.
//! That fixes the index width at `bits(u64::MAX / window)` and leaves `c` bits per
//! count; the layout therefore depends on the window length only, and the limit
//! can change at runtime up to `2^c − 1`. A one-second window gives a fixed window
//! up to 536,870,911 per second and a sliding window up to 16,383 per second; a
//! one-minute window, 131,071 per minute sliding; longer windows allow more.
//!
//! A sliding window whose limit does not fit next to the whole index takes the
//! *wide* layout instead: `c = 20` (up to 1,048,575 per window of any length) and
//! the index stored modulo `2²⁴`. How a wrapped index is read, and why a stale one
//! can only make a decision more restrictive, is in [`crate::sliding_window`].

use crate::error::ConfigError;

/// The layout for one window length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Layout {
    /// Bits per count.
    pub(crate) count_bits: u32,
    /// How many counts the word holds (1 for fixed, 2 for sliding).
    pub(crate) counts: u32,
}

impl Layout {
    /// The layout for `window_ns` with `counts` counters, or why none fits.
    pub(crate) const fn new(window_ns: u64, counts: u32) -> Result<Self, ConfigError> {
        if window_ns == 0 {
            return Err(ConfigError::Zero { field: "window" });
        }
        let index_bits = 64 - (u64::MAX / window_ns).leading_zeros();
        let count_bits = (64 - index_bits) / counts;
        if count_bits == 0 {
            return Err(ConfigError::TooLarge {
                field: "limit",
                max: 0,
            });
        }
        Ok(Self { count_bits, counts })
    }

    /// The largest count a field holds.
    pub(crate) const fn max_count(&self) -> u64 {
        (1u64 << self.count_bits) - 1
    }

    /// Packs an index and counts (`counts[0]` is the lowest field).
    #[inline]
    pub(crate) const fn pack(&self, index: u64, low: u64, high: u64) -> u64 {
        let shift = self.count_bits * self.counts;
        // A shift of 64 only happens when the index has no bits, i.e. never for a
        // valid layout (window ≥ 1 ns leaves the index at least one bit).
        let idx = if shift >= 64 { 0 } else { index << shift };
        idx | (high << self.count_bits) | low
    }

    /// Unpacks into (index, low count, high count); `high` is 0 for one count.
    #[inline]
    pub(crate) const fn unpack(&self, word: u64) -> (u64, u64, u64) {
        let shift = self.count_bits * self.counts;
        let index = if shift >= 64 { 0 } else { word >> shift };
        let mask = self.max_count();
        let low = word & mask;
        let high = if self.counts > 1 {
            (word >> self.count_bits) & mask
        } else {
            0
        };
        (index, low, high)
    }
}

/// Validates a window's limit against its layout.
pub(crate) const fn check_limit(limit: u64, layout: &Layout) -> Result<(), ConfigError> {
    if limit == 0 {
        return Err(ConfigError::Zero { field: "limit" });
    }
    if limit > layout.max_count() {
        return Err(ConfigError::TooLarge {
            field: "limit",
            max: layout.max_count(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_never_wraps_and_counts_round_trip() {
        for window in [1u64, 2, 3, 1_000, 1_000_000_000, 60_000_000_000, u64::MAX] {
            for counts in [1, 2] {
                let Ok(l) = Layout::new(window, counts) else {
                    // Only windows of a few nanoseconds leave no room for counts.
                    assert!(window <= 3, "window {window} counts {counts}");
                    continue;
                };
                let max_index = u64::MAX / window;
                let m = l.max_count();
                let w = l.pack(max_index, m, if counts == 2 { m } else { 0 });
                assert_eq!(l.unpack(w), (max_index, m, if counts == 2 { m } else { 0 }));
                let w = l.pack(max_index - 1, 1, 0);
                assert_eq!(l.unpack(w), (max_index - 1, 1, 0));
            }
        }
    }

    #[test]
    fn documented_maxima() {
        let sec = 1_000_000_000;
        assert_eq!(Layout::new(sec, 1).unwrap().max_count(), 536_870_911);
        assert_eq!(Layout::new(sec, 2).unwrap().max_count(), 16_383);
        assert_eq!(Layout::new(60 * sec, 2).unwrap().max_count(), 131_071);
        assert_eq!(
            Layout::new(1, 1),
            Err(ConfigError::TooLarge {
                field: "limit",
                max: 0
            })
        );
        assert_eq!(
            Layout::new(0, 1),
            Err(ConfigError::Zero { field: "window" })
        );
    }
}
