//! What a policy check answers: the verdict, and per matching rule what the HTTP
//! integrations put in `RateLimit`, `RateLimit-Policy` and `Retry-After`.

use std::fmt::Write as _;
use std::sync::Arc;

use sluicegate::{Outcome, Receipt};

use crate::attrs::{AttrName, Attrs};
use crate::def::Mode;
use crate::model::Compiled;

/// One matching rule's answer, in file order.
///
/// ```
/// use sluicegate_policy::{Mode, Policy};
/// let p = Policy::from_toml("[[rule]]\nname = \"g\"\nlimit = \"10/minute\"\n")?;
/// let d = p.check_n_at(&[("path", "/")], 3, 0);
/// let r = d.rules().next().unwrap();
/// assert_eq!((r.name, r.mode, r.allowed, r.remaining, r.limit), ("g", Mode::Enforce, true, 7, 10));
/// assert_eq!(r.window_ns, 60_000_000_000);
/// # Ok::<(), sluicegate_policy::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RuleDecision<'a> {
    /// The rule's name.
    pub name: &'a str,
    /// Enforce or shadow.
    pub mode: Mode,
    /// Whether this rule admitted the request (a shadow rule's `false` denied nothing).
    pub allowed: bool,
    /// Units this rule could still admit now (for this rule's key).
    pub remaining: u64,
    /// The binding limit: the most units the rule admits at once.
    pub limit: u64,
    /// The window of the binding limit, for `RateLimit-Policy`'s `w`.
    pub window_ns: u64,
    /// Nanoseconds until a request of the same cost would pass this rule; 0 when allowed.
    pub retry_after_ns: u64,
    /// Nanoseconds until this rule's limiter is back to full.
    pub reset_after_ns: u64,
    /// The shaper's wait before the request may run; 0 otherwise.
    pub delay_ns: u64,
    /// The shared backend failed and the rule's `on_error` decided.
    pub backend_error: bool,
    /// The rule's index in the policy's rules (`policy.definition().rules()`).
    pub index: usize,
    /// The rule's `key` attributes (see [`Self::key_text`]).
    pub key: &'a [AttrName],
    /// The policy's IPv6 prefix for keys.
    pub ipv6_prefix: u8,
}

impl RuleDecision<'_> {
    /// Nanoseconds the `RateLimit` field's `t` counts down: until the rule is full
    /// again when it admitted, else until it admits again and is full (the longer
    /// of [`Self::retry_after_ns`] and [`Self::reset_after_ns`]).
    ///
    /// ```
    /// use sluicegate_policy::Policy;
    /// let p = Policy::from_toml("[[rule]]\nname = \"a\"\nlimit = \"1/s\"\n")?;
    /// let d = p.check_n_at(&[("k", "v")], 1, 0);
    /// assert_eq!(d.rules().next().unwrap().reset_ns(), 1_000_000_000);
    /// let d = p.check_n_at(&[("k", "v")], 1, 400_000_000);
    /// assert_eq!(d.rules().next().unwrap().reset_ns(), 600_000_000);
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn reset_ns(&self) -> u64 {
        if self.allowed {
            self.reset_after_ns
        } else {
            self.retry_after_ns.max(self.reset_after_ns)
        }
    }

    /// The key this rule limited the request by, as text (the text a shared
    /// backend stores it under): the `key` attributes' values in `attrs` (the
    /// request's), joined by `|`, `|` and `\` escaped with `\`, an absent
    /// attribute as `\0`, the address as the policy groups it (IPv6 by its
    /// prefix). Empty for a keyless rule.
    ///
    /// ```
    /// use sluicegate_policy::Policy;
    /// let p = Policy::from_toml("[[rule]]\nname = \"a\"\nkey = [\"ip\", \"user\"]\nlimit = \"1/s\"\n")?;
    /// let req = [("ip", "2001:db8::7"), ("user", "a|b")];
    /// let d = p.check_n_at(&req, 1, 0);
    /// let r = d.rules().next().unwrap();
    /// assert_eq!((r.index, r.key_text(&req)), (0, "2001:db8::|a\\|b".to_owned()));
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn key_text<A: Attrs + ?Sized>(&self, attrs: &A) -> String {
        let mut out = String::new();
        self.write_key_text(attrs, &mut out);
        out
    }

    /// [`Self::key_text`] into `out` (cleared first), to reuse one buffer.
    ///
    /// ```
    /// use sluicegate_policy::Policy;
    /// let p = Policy::from_toml("[[rule]]\nname = \"a\"\nkey = [\"tenant\"]\nlimit = \"1/s\"\n")?;
    /// let mut key = String::from("old");
    /// let d = p.check_n_at(&[("ip", "192.0.2.1")], 1, 0);
    /// d.rules().next().unwrap().write_key_text(&[("ip", "192.0.2.1")], &mut key);
    /// assert_eq!(key, "\\0"); // no tenant: its own key
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn write_key_text<A: Attrs + ?Sized>(&self, attrs: &A, out: &mut String) {
        crate::key::key_text_into(attrs, self.key, self.ipv6_prefix, out);
    }
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Item {
    pub rule: u32,
    pub outcome: Outcome,
    pub backend_error: bool,
    pub stage: Stage,
}

/// How far a check of one matching rule got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Stage {
    /// Not run yet (its outcome is a placeholder).
    Todo,
    /// Peeked: what a check would answer, nothing charged.
    Peeked,
    /// Checked: charged if it admitted.
    Checked,
}

/// Receipts of the rules a check has charged so far (rule index, receipt), given
/// back if a later rule denies: slots reused from check to check (one list per
/// thread: no allocation once warm).
#[derive(Debug, Default)]
pub(crate) struct Pending {
    slots: Vec<(u32, Receipt)>,
    used: usize,
}

impl Pending {
    pub(crate) fn clear(&mut self) {
        self.used = 0;
    }

    /// The next slot, for a check to write its receipt into.
    pub(crate) fn next(&mut self) -> &mut Receipt {
        if self.used == self.slots.len() {
            self.slots.push((0, Receipt::empty()));
        }
        &mut self.slots[self.used].1
    }

    /// Keeps what the last check wrote into [`Self::next`] as rule `rule`'s.
    pub(crate) fn keep(&mut self, rule: u32) {
        if let Some(slot) = self.slots.get_mut(self.used) {
            slot.0 = rule;
            self.used += 1;
        }
    }

    /// The kept receipts; empties the list.
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = &mut (u32, Receipt)> {
        let used = std::mem::take(&mut self.used);
        self.slots[..used].iter_mut()
    }
}

/// The answer of [`crate::Policy::check`]: admitted only if every enforcing rule
/// that matched admitted it.
///
/// A `Decision` can be reused with [`crate::Policy::check_n_at_into`], so a
/// server's check allocates nothing once its buffer has grown.
///
/// ```
/// use sluicegate_policy::Policy;
/// let p = Policy::from_toml("[[rule]]\nname = \"login\"\nlimit = \"1/minute\"\nkey = [\"ip\"]\n")?;
/// let req = [("ip", "192.0.2.7")];
/// assert!(p.check_n_at(&req, 1, 0).allowed());
/// let d = p.check_n_at(&req, 1, 0);
/// assert!(!d.allowed());
/// assert_eq!(d.retry_after_ns(), 60_000_000_000);
/// assert_eq!(d.retry_after_secs(), 60);
/// assert_eq!(d.ratelimit_policy_header(), r#""login";q=1;w=60"#);
/// assert_eq!(d.ratelimit_header(), r#""login";r=0;t=60"#);
/// # Ok::<(), sluicegate_policy::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct Decision {
    pub(crate) snapshot: Option<Arc<Compiled>>,
    pub(crate) items: Vec<Item>,
    pub(crate) allowed: bool,
}

impl Decision {
    /// An empty decision (admitted, no rule), to pass to
    /// [`crate::Policy::check_n_at_into`].
    ///
    /// ```
    /// # use sluicegate_policy::Decision;
    /// let d = Decision::new();
    /// assert!(d.allowed());
    /// assert_eq!(d.rules().count(), 0);
    /// ```
    pub fn new() -> Decision {
        Decision {
            snapshot: None,
            items: Vec::new(),
            allowed: true,
        }
    }

    /// Forgets the answer (and the rules it refers to), keeping the buffer for
    /// the next [`crate::Policy::check_n_at_into`].
    ///
    /// ```
    /// # use sluicegate_policy::Policy;
    /// let p = Policy::from_toml("[[rule]]\nname = \"a\"\nlimit = \"1/s\"\n")?;
    /// let mut d = p.check_n_at(&[("k", "v")], 1, 0);
    /// d.clear();
    /// assert!(d.allowed() && d.rules().next().is_none());
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn clear(&mut self) {
        self.items.clear();
        self.snapshot = None;
        self.allowed = true;
    }

    /// Whether the request is admitted.
    ///
    /// ```
    /// # use sluicegate_policy::Policy;
    /// let p = Policy::from_toml("")?; // no rule: everything passes
    /// assert!(p.check_n_at(&[("ip", "::1")], 1, 0).allowed());
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn allowed(&self) -> bool {
        self.allowed
    }

    /// Every matching rule's answer, enforcing and shadow, in file order.
    ///
    /// ```
    /// # use sluicegate_policy::{Mode, Policy};
    /// let p = Policy::from_toml("[[rule]]\nname = \"a\"\nlimit = \"1/s\"\n[[rule]]\nname = \"b\"\nlimit = \"1/s\"\nmode = \"shadow\"\n")?;
    /// let d = p.check_n_at(&[("x", "y")], 1, 0);
    /// let names: Vec<&str> = d.rules().map(|r| r.name).collect();
    /// assert_eq!(names, ["a", "b"]);
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn rules(&self) -> impl Iterator<Item = RuleDecision<'_>> + '_ {
        self.items.iter().filter_map(move |it| {
            let rule = self.snapshot.as_ref()?.rules.get(it.rule as usize)?;
            let d = it.outcome.decision;
            let quotas = rule.def.spec().quotas();
            let window_ns = quotas
                .iter()
                .find(|q| q.burst_size() == d.limit || q.amount() == d.limit)
                .or(quotas.first())
                .map_or(0, |q| q.period_ns());
            Some(RuleDecision {
                name: rule.def.name(),
                mode: rule.def.mode(),
                allowed: d.allowed,
                remaining: d.remaining,
                limit: d.limit,
                window_ns,
                retry_after_ns: d.retry_after_ns,
                reset_after_ns: d.reset_after_ns,
                delay_ns: it.outcome.delay_ns,
                backend_error: it.backend_error,
                index: it.rule as usize,
                key: rule.def.key(),
                ipv6_prefix: self.snapshot.as_ref()?.def.ipv6_prefix,
            })
        })
    }

    /// Enforcing rules that denied the request.
    ///
    /// ```
    /// # use sluicegate_policy::Policy;
    /// let p = Policy::from_toml("[[rule]]\nname = \"a\"\nlimit = \"1/s\"\n")?;
    /// p.check_n_at(&[("x", "y")], 1, 0);
    /// assert_eq!(p.check_n_at(&[("x", "y")], 1, 0).denying().next().unwrap().name, "a");
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn denying(&self) -> impl Iterator<Item = RuleDecision<'_>> + '_ {
        self.rules()
            .filter(|r| r.mode == Mode::Enforce && !r.allowed)
    }

    /// Nanoseconds until a retry could pass every denying rule (the longest of
    /// their waits); 0 when admitted.
    ///
    /// ```
    /// # use sluicegate_policy::Policy;
    /// let p = Policy::from_toml("[[rule]]\nname = \"a\"\nlimit = \"2/s\"\n")?;
    /// assert_eq!(p.check_n_at(&[("k", "v")], 2, 0).retry_after_ns(), 0);
    /// assert_eq!(p.check_n_at(&[("k", "v")], 1, 0).retry_after_ns(), 500_000_000);
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn retry_after_ns(&self) -> u64 {
        self.denying().map(|r| r.retry_after_ns).max().unwrap_or(0)
    }

    /// [`Self::retry_after_ns`] in whole seconds rounded up, for `Retry-After`.
    ///
    /// ```
    /// # use sluicegate_policy::Policy;
    /// let p = Policy::from_toml("[[rule]]\nname = \"a\"\nlimit = \"2/s\"\n")?;
    /// p.check_n_at(&[("k", "v")], 2, 0);
    /// assert_eq!(p.check_n_at(&[("k", "v")], 1, 0).retry_after_secs(), 1);
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn retry_after_secs(&self) -> u64 {
        self.retry_after_ns().div_ceil(1_000_000_000)
    }

    /// The longest shaper wait among the enforcing rules (0 without shapers).
    ///
    /// ```
    /// # use sluicegate_policy::Policy;
    /// let p = Policy::from_toml("[[rule]]\nname = \"s\"\nlimit = \"10/s burst 1\"\nalgorithm = \"shaper\"\nmax_delay_ms = 1000\n")?;
    /// assert_eq!(p.check_n_at(&[("k", "v")], 1, 0).delay_ns(), 0);
    /// assert_eq!(p.check_n_at(&[("k", "v")], 1, 0).delay_ns(), 100_000_000);
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn delay_ns(&self) -> u64 {
        self.rules()
            .filter(|r| r.mode == Mode::Enforce)
            .map(|r| r.delay_ns)
            .max()
            .unwrap_or(0)
    }

    /// The `RateLimit-Policy` field (IETF httpapi draft): one item per enforcing
    /// rule, `"name";q=<limit>;w=<window seconds>`.
    ///
    /// ```
    /// # use sluicegate_policy::Policy;
    /// let p = Policy::from_toml("[[rule]]\nname = \"a\"\nlimit = \"100/minute\"\n[[rule]]\nname = \"b\"\nlimit = \"5/s\"\n")?;
    /// assert_eq!(p.check_n_at(&[("k", "v")], 1, 0).ratelimit_policy_header(), r#""a";q=100;w=60, "b";q=5;w=1"#);
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn ratelimit_policy_header(&self) -> String {
        self.header(|out, r| {
            let w = r.window_ns.div_ceil(1_000_000_000).max(1);
            let _ = write!(out, ";q={};w={w}", r.limit);
        })
    }

    /// The `RateLimit` field (IETF httpapi draft): one item per enforcing rule,
    /// `"name";r=<remaining>;t=<seconds until the rule is full again>`.
    ///
    /// ```
    /// # use sluicegate_policy::Policy;
    /// let p = Policy::from_toml("[[rule]]\nname = \"a\"\nlimit = \"2/s\"\n")?;
    /// assert_eq!(p.check_n_at(&[("k", "v")], 1, 0).ratelimit_header(), r#""a";r=1;t=1"#);
    /// # Ok::<(), sluicegate_policy::Error>(())
    /// ```
    pub fn ratelimit_header(&self) -> String {
        self.header(|out, r| {
            let t = r.reset_ns().div_ceil(1_000_000_000);
            let _ = write!(out, ";r={};t={t}", r.remaining);
        })
    }

    fn header(&self, params: impl Fn(&mut String, &RuleDecision<'_>)) -> String {
        let mut out = String::new();
        for r in self.rules().filter(|r| r.mode == Mode::Enforce) {
            if !out.is_empty() {
                out.push_str(", ");
            }
            push_sf_string(&mut out, r.name);
            params(&mut out, &r);
        }
        out
    }
}

/// Appends `s` as a structured-field string (RFC 8941 §3.3.3), as the `RateLimit`
/// and `RateLimit-Policy` fields name a rule: quoted, `"` and `\` escaped with
/// `\`. A field value is printable ASCII only, so any other character (a
/// non-ASCII letter, a control character) becomes `?`.
///
/// ```
/// let mut out = String::new();
/// sluicegate_policy::push_sf_string(&mut out, "tier \"gold\" für");
/// assert_eq!(out, r#""tier \"gold\" f?r""#);
/// ```
pub fn push_sf_string(out: &mut String, s: &str) {
    out.reserve(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('?'),
        }
    }
    out.push('"');
}
