//! # A rate limiter in firmware
//!
//! What a `sluicegate` user writes on a microcontroller: no heap, no std, no
//! `unsafe`. Three pieces:
//!
//! 1. **A clock.** The SysTick interrupt ([`on_systick`]) counts milliseconds in a
//!    32-bit counter, which wraps every 49.7 days. [`SysTickClock`] implements
//!    [`Clock`] by extending that counter to 64 bits ([`WrapExtender`]) and scaling
//!    it to nanoseconds. On a chip with a free-running 32-bit timer (TIM2 on an
//!    STM32, `DWT.CYCCNT`), replace [`read_ticks`] with a read of its counter
//!    register and [`TICK_HZ`] with its frequency; nothing else changes.
//! 2. **`static` limiters**, built at compile time by the `const fn`
//!    `with_clock_const`: an invalid quota is a compile error, and no
//!    initialisation code runs at boot.
//! 3. **The calls the firmware makes per event**: [`on_button_press`] and
//!    [`try_send_telemetry`].
//!
//! ## Building for a target
//! The limiters need 64-bit atomics. `sluicegate` takes them from
//! `portable-atomic`, whose `fallback` feature supplies them where the CPU has
//! none; on a CPU with no compare-and-swap at all, the *end user* (the firmware,
//! not a library) says how to get one:
//!
//! | target | CPU | flags |
//! |---|---|---|
//! | `thumbv7m-none-eabi` | Cortex-M3: 32-bit CAS, no 64-bit atomics | none (the fallback's global locks); see *Interrupts* below |
//! | `thumbv6m-none-eabi` | Cortex-M0/M0+: no CAS | `--cfg portable_atomic_unsafe_assume_single_core` |
//! | `riscv32imc-unknown-none-elf` | RV32 without the A extension: no CAS | `--cfg portable_atomic_unsafe_assume_single_core` (machine mode; in supervisor mode add `--cfg portable_atomic_s_mode`) |
//!
//! The single-core cfg makes portable-atomic disable interrupts around each atomic
//! operation: sound only on a single-core chip running privileged code. A
//! multi-core chip enables portable-atomic's `critical-section` feature instead and
//! links a `critical-section` implementation. The firmware puts the flag in its
//! `.cargo/config.toml`:
//!
//! ```toml
//! [target.thumbv6m-none-eabi]
//! rustflags = ["--cfg", "portable_atomic_unsafe_assume_single_core"]
//! ```
//!
//! `scripts/no-std` builds this crate for all three targets that way.
//!
//! ## Interrupts
//! [`on_systick`] touches only the 32-bit tick counter, which is lock-free on every
//! target above. The clock's extension word and the limiters are 64-bit atomics:
//! call them from one execution context — the main loop (an interrupt handler sets
//! a flag, the loop calls [`on_button_press`]) or a single interrupt priority. On
//! `thumbv7m` the 64-bit fallback is a spin lock: an interrupt handler that
//! preempted its holder would spin for ever. To use a limiter from handlers of
//! several priorities, build `thumbv7m` with the single-core cfg too (the fallback
//! then masks interrupts instead of locking). Don't call `set_quota` on a limiter
//! that an interrupt handler checks, from code that handler can preempt: the
//! limiter's parameter seqlock would make the handler wait for the preempted writer.
#![no_std]
#![forbid(unsafe_code)]

use portable_atomic::{AtomicU32, AtomicU64, Ordering};
use sluicegate::{Clock, FixedWindow, Quota, TokenBucket};

/// The SysTick frequency: one tick per millisecond.
pub const TICK_HZ: u64 = 1_000;

const NS_PER_TICK: u64 = 1_000_000_000 / TICK_HZ;

/// The tick counter: the one piece of state an interrupt handler writes. It stands
/// in for a hardware timer's 32-bit counter register.
static TICKS: AtomicU32 = AtomicU32::new(0);

/// The SysTick interrupt handler's body (`#[exception] fn SysTick()` with
/// `cortex-m-rt`): one tick. It touches only the 32-bit counter, so it is
/// lock-free on every target; keeping the 64-bit extension current is the main
/// loop's job ([`refresh_clock`]).
///
/// ```
/// use sluicegate::Clock;
/// use sluicegate_no_std_example::{on_systick, read_ticks, SysTickClock};
/// on_systick();
/// assert_eq!(read_ticks(), 1);
/// assert_eq!(SysTickClock.now(), 1_000_000); // one millisecond
/// ```
pub fn on_systick() {
    TICKS.fetch_add(1, Ordering::Relaxed);
}

/// The raw 32-bit tick count. On real hardware: a read of the timer's counter
/// register.
///
/// ```
/// use sluicegate_no_std_example::read_ticks;
/// assert_eq!(read_ticks(), 0); // nothing has ticked in this test program
/// ```
pub fn read_ticks() -> u32 {
    TICKS.load(Ordering::Relaxed)
}

/// Extends a wrapping 32-bit counter to 64 bits, lock-free.
///
/// It keeps the extended value last returned; a new raw reading is taken to be at
/// most 2³¹ − 1 ticks *after* it (mod 2³²), so a wrap adds 2³² ticks. A reading
/// that is *behind* it — read before another caller's later reading was stored —
/// returns the stored value: the clock never goes backwards.
///
/// The one requirement: [`Self::extend`] runs at least once every 2³¹ ticks (24.8
/// days at 1 kHz). Past that, time stands still until the counter comes round
/// again: limiters then refill late and deny more, never admit more.
///
/// ```
/// use sluicegate_no_std_example::WrapExtender;
/// let ext = WrapExtender::new();
/// for raw in [1 << 30, 2 << 30, 3 << 30] {
///     assert_eq!(ext.extend(raw), u64::from(raw)); // a quarter of the range at a time
/// }
/// assert_eq!(ext.extend(u32::MAX - 1), u64::from(u32::MAX) - 1);
/// assert_eq!(ext.extend(3), (1 << 32) + 3); // wrapped: five ticks later
/// assert_eq!(ext.extend(u32::MAX), (1 << 32) + 3); // a stale reading: no time passes
/// ```
#[derive(Debug, Default)]
pub struct WrapExtender {
    last: AtomicU64,
}

impl WrapExtender {
    /// An extender starting at 0 ticks (a counter that starts at 0 at boot).
    ///
    /// ```
    /// use sluicegate_no_std_example::WrapExtender;
    /// static EXT: WrapExtender = WrapExtender::new();
    /// assert_eq!(EXT.extend(7), 7);
    /// ```
    pub const fn new() -> Self {
        Self {
            last: AtomicU64::new(0),
        }
    }

    /// The 64-bit tick count for a raw reading `raw` of the counter, taken now.
    ///
    /// ```
    /// use sluicegate_no_std_example::WrapExtender;
    /// let ext = WrapExtender::new();
    /// assert_eq!(ext.extend(10), 10);
    /// assert_eq!(ext.extend(10), 10);
    /// ```
    pub fn extend(&self, raw: u32) -> u64 {
        // Relaxed: the word carries no other data, and every read-modify-write of
        // one atomic sees the latest value in its modification order.
        let mut last = self.last.load(Ordering::Relaxed);
        loop {
            // The low half of `last` is the raw reading it was made from.
            let ahead = raw.wrapping_sub(last as u32);
            if ahead == 0 || ahead > i32::MAX as u32 {
                return last;
            }
            let next = last.saturating_add(u64::from(ahead));
            match self
                .last
                .compare_exchange_weak(last, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return next,
                Err(actual) => last = actual,
            }
        }
    }
}

static EXTENDED: WrapExtender = WrapExtender::new();

/// The firmware's clock: SysTick milliseconds, extended past the counter's wrap,
/// in nanoseconds. Zero-sized and `Copy`, so a `static` limiter can own one.
///
/// ```
/// use sluicegate::Clock;
/// use sluicegate_no_std_example::{on_systick, SysTickClock};
/// let before = SysTickClock.now();
/// on_systick();
/// on_systick();
/// assert_eq!(SysTickClock.now() - before, 2_000_000);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct SysTickClock;

impl Clock for SysTickClock {
    fn now(&self) -> u64 {
        EXTENDED.extend(read_ticks()).saturating_mul(NS_PER_TICK)
    }
}

/// Keeps the clock's extension current; the main loop calls it on every pass (at
/// least once every 24.8 days is enough), so time is right even after weeks with
/// no button press.
///
/// ```
/// use sluicegate_no_std_example::refresh_clock;
/// refresh_clock();
/// ```
pub fn refresh_clock() {
    let _ = SysTickClock.now();
}

/// Button presses: 2 per second on average, up to 3 in a quick burst; the rest are
/// bounces or a stuck key.
static BUTTON: TokenBucket<SysTickClock> =
    match TokenBucket::with_clock_const(Quota::per_second(2).burst(3), SysTickClock) {
        Ok(limiter) => limiter,
        // Evaluated at compile time: a bad quota fails the build, not the device.
        Err(_) => panic!("invalid button quota"),
    };

/// Telemetry uplink: at most 10 packets per minute-long window (windows aligned
/// to whole minutes of uptime).
static TELEMETRY: FixedWindow<SysTickClock> =
    match FixedWindow::with_clock_const(Quota::per_minute(10), SysTickClock) {
        Ok(limiter) => limiter,
        Err(_) => panic!("invalid telemetry quota"),
    };

/// Called by the firmware for each debounced press: whether to act on it.
///
/// ```
/// use sluicegate_no_std_example::on_button_press;
/// assert!(on_button_press());
/// assert!(on_button_press());
/// assert!(on_button_press());
/// assert!(!on_button_press()); // a fourth press in the same millisecond
/// ```
pub fn on_button_press() -> bool {
    BUTTON.check().allowed
}

/// Called before sending `packets` telemetry packets: whether all of them may go
/// now (all or none). More than the window's limit is never allowed.
///
/// ```
/// use sluicegate_no_std_example::try_send_telemetry;
/// assert!(try_send_telemetry(8));
/// assert!(!try_send_telemetry(3)); // only 2 left in this minute
/// assert!(try_send_telemetry(2));
/// assert!(!try_send_telemetry(11)); // can never fit
/// ```
pub fn try_send_telemetry(packets: u64) -> bool {
    matches!(TELEMETRY.check_n(packets), Ok(d) if d.allowed)
}

#[cfg(test)]
mod tests {
    use super::*;

    const WRAP: u64 = 1 << 32;

    #[test]
    fn extension_counts_every_wrap() {
        let ext = WrapExtender::new();
        let mut expected = 0u64;
        let mut raw = 0u32;
        // Ten wraps in steps just under half the counter's range.
        let step = (1u32 << 31) - 1;
        for _ in 0..21 {
            raw = raw.wrapping_add(step);
            expected += u64::from(step);
            assert_eq!(ext.extend(raw), expected);
        }
        assert!(expected > 10 * WRAP);
    }

    #[test]
    fn extension_never_goes_backwards() {
        let ext = WrapExtender::new();
        // More than 2³¹ ahead of the start: taken as a stale reading.
        assert_eq!(ext.extend(u32::MAX - 4), 0);
        assert_eq!(ext.extend((1 << 31) - 1), (1 << 31) - 1);
        assert_eq!(ext.extend(u32::MAX - 4), WRAP - 5);
        assert_eq!(ext.extend(2), WRAP + 2);
        // A reading taken before the wrap but stored after it is stale.
        assert_eq!(ext.extend(u32::MAX - 1), WRAP + 2);
        assert_eq!(ext.extend(1), WRAP + 2);
        assert_eq!(ext.extend(3), WRAP + 3);
    }

    fn advance_ms(ms: u32) {
        TICKS.fetch_add(ms, Ordering::Relaxed);
    }

    /// The only test that touches the statics (tests run in parallel threads).
    #[test]
    fn static_limiters_across_a_counter_wrap() {
        // A burst of 3, then 2 per second.
        assert!(on_button_press());
        assert!(on_button_press());
        assert!(on_button_press());
        assert!(!on_button_press());
        advance_ms(499);
        assert!(!on_button_press());
        advance_ms(1);
        assert!(on_button_press());
        assert!(!on_button_press());

        assert!(try_send_telemetry(10));
        assert!(!try_send_telemetry(1));
        assert!(!try_send_telemetry(11));

        // 49.7 days later, in steps the extension can follow, the counter wraps.
        for _ in 0..4 {
            advance_ms(1 << 30);
            refresh_clock();
        }
        assert_eq!(read_ticks(), 500);
        assert_eq!(SysTickClock.now(), (WRAP + 500) * NS_PER_TICK);

        // Time went forwards, so the bucket is full again (had the clock gone back
        // to 500 ms, it would be empty) and this is a new telemetry window.
        assert!(on_button_press());
        assert!(on_button_press());
        assert!(on_button_press());
        assert!(!on_button_press());
        assert!(try_send_telemetry(10));
        assert!(!try_send_telemetry(1));
    }
}
