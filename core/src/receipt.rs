//! [`Receipt`]: what one admission took, so that it can be given back.
//!
//! A caller that admits a request in several independent limiters (a policy's
//! rules) and must deny it when a later one denies gives back what the earlier
//! ones took: [`crate::AnyLimiter::check_n_at_receipt`] and
//! [`crate::keyed::AnyKeyed::check_n_at_receipt`] write a receipt (the caller's,
//! so a hot path reuses one), and the same handle's `refund(&mut receipt, now)`
//! gives it back.
//!
//! A refund never credits more than the admission took: it restores the state
//! from before the admission if nothing happened since, and otherwise applies the
//! algorithm's own give-back ([`crate::Algorithm::give_back`], the mechanism a
//! compound's all-or-nothing uses), which takes back at most the admitted units
//! and nothing that other admissions took. A refund empties the receipt (it
//! cannot be given back twice), and a receipt offered to another handle gives
//! nothing back. A keyed table gives nothing back to a key that is no
//! longer in the table (its charged state may already be in the table's
//! sketch): conservative, the request's units stay spent.

use crate::spec::Spec;

/// What one admission took, for a `refund` on the handle that issued it (see the
/// `receipt` module's docs). Empty for a denial, a peek, a cost of zero, or a handle
/// that cannot give back (see `can_refund`).
///
/// ```
/// use sluicegate::{AnyLimiter, Kind, Receipt, Spec};
/// let l = AnyLimiter::with_clock(&Spec::parse(Kind::FixedWindow, "3/s")?, ())?;
/// let mut receipt = Receipt::empty();
/// assert!(l.check_n_at_receipt(2, 0, &mut receipt)?.decision.allowed);
/// assert_eq!(receipt.units(), 2);
/// l.refund(&mut receipt, 0);
/// assert_eq!(l.peek_n_at(3, 0)?.decision.remaining, 0); // all 3 are back
/// assert!(l.check_n_at_receipt(4, 0, &mut receipt).is_err()); // can never pass
/// assert!(receipt.is_empty());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, PartialEq, Eq)]
pub struct Receipt {
    /// The issuing handle (the address of its engine); 0 when empty.
    pub(crate) owner: usize,
    /// A keyed table's hash of the key; 0 otherwise.
    pub(crate) key: u64,
    pub(crate) n: u64,
    /// Limits charged (0: nothing to give back).
    pub(crate) len: u8,
    /// Per limit, the state before and after the admission.
    pub(crate) taken: [(u64, u64); Spec::MAX_LIMITS],
}

impl Receipt {
    /// A receipt for nothing.
    ///
    /// ```
    /// use sluicegate::Receipt;
    /// assert!(Receipt::empty().is_empty());
    /// assert_eq!(Receipt::empty().units(), 0);
    /// ```
    pub const fn empty() -> Receipt {
        Receipt {
            owner: 0,
            key: 0,
            n: 0,
            len: 0,
            taken: [(0, 0); Spec::MAX_LIMITS],
        }
    }

    /// Whether a refund of it gives nothing back.
    ///
    /// ```
    /// use sluicegate::{AnyLimiter, Kind, Receipt, Spec};
    /// let l = AnyLimiter::with_clock(&Spec::parse(Kind::TokenBucket, "1/s")?, ())?;
    /// let mut r = Receipt::empty();
    /// l.check_n_at_receipt(1, 0, &mut r)?;
    /// assert!(!r.is_empty());
    /// l.check_n_at_receipt(1, 0, &mut r)?;
    /// assert!(r.is_empty()); // denied: nothing taken
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub const fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The units the admission took (0 when empty).
    ///
    /// ```
    /// use sluicegate::{AnyLimiter, Kind, Receipt, Spec};
    /// let l = AnyLimiter::with_clock(&Spec::parse(Kind::SlidingWindow, "5/s; 9/min")?, ())?;
    /// let mut r = Receipt::empty();
    /// l.check_n_at_receipt(3, 0, &mut r)?;
    /// assert_eq!(r.units(), 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub const fn units(&self) -> u64 {
        if self.len == 0 { 0 } else { self.n }
    }

    /// The charged limits' (before, after) words, if `owner` issued it.
    pub(crate) fn taken_by(&self, owner: usize) -> Option<&[(u64, u64)]> {
        (self.len > 0 && self.owner == owner).then(|| &self.taken[..usize::from(self.len)])
    }
}
