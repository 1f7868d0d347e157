//! Hook timing: the call's duration and the record's timestamp from time-stamp-counter
//! ticks, converted to `CLOCK_MONOTONIC` nanoseconds.
//!
//! A hook needs two instants (before and after the real call). `clock_gettime` costs about
//! 24 ns, `rdtsc` about 10. So when the TSC is trustworthy a hook reads only the TSC, before
//! and after the call: the duration is the tick delta times a factor calibrated against
//! `CLOCK_MONOTONIC` in the hooks themselves (no start-up delay: the first (ticks, ns) pair
//! is taken when the probe starts, the factor computed once 10 ms have passed and refined
//! over spans 4 × longer each time, up to about 100 s); the timestamp is the latest
//! *anchor* (a (ticks, ns) pair read back to back, renewed every millisecond by whichever
//! hook finds it stale) plus the ticks since, converted the same way. A timestamp is thus
//! within the kernel's slew of the clock over one millisecond (under 1 µs even at NTP's
//! maximum 500 ppm, a few ns typically) of a `clock_gettime` at the same moment. Until the
//! first calibration, and whenever the TSC is not trusted, both instants come from
//! `clock_gettime`. `dur_ns` and `ts_ns` are nanoseconds either way.
//!
//! The TSC is trusted only on x86-64 when the CPU says it is invariant (constant rate in
//! every P-/C-state: CPUID 0x8000_0007 EDX bit 8) *and* the kernel's clocksource is `tsc`
//! (the kernel checked the counters are synchronised across CPUs, so a thread that moves
//! between cores mid-call still gets a sane delta). A calibration that gives an implausible
//! rate turns the TSC off for the process. `FRAGPROBE_CLOCK=monotonic` forces
//! `clock_gettime`.

use core::sync::atomic::{fence, AtomicU64, AtomicU8, Ordering};

/// Nanoseconds per tick, 32.32 fixed point; 0 while durations come from `clock_gettime`.
static MULT: AtomicU64 = AtomicU64::new(0);
/// The (ticks, ns) pair calibrations measure from.
static ANCHOR_TICKS: AtomicU64 = AtomicU64::new(0);
static ANCHOR_NS: AtomicU64 = AtomicU64::new(0);
/// `CLOCK_MONOTONIC` ns at which the next (re)calibration is due; `u64::MAX`: never.
static NEXT_CAL_NS: AtomicU64 = AtomicU64::new(u64::MAX);
/// The timestamp anchor, a seqlock: version (odd while being written), ticks, ns.
static TS_VERSION: AtomicU64 = AtomicU64::new(0);
static TS_TICKS: AtomicU64 = AtomicU64::new(0);
static TS_NS: AtomicU64 = AtomicU64::new(0);
/// When the anchor is due for renewal (ns); `u64::MAX` while one thread renews it.
static NEXT_ANCHOR_NS: AtomicU64 = AtomicU64::new(u64::MAX);
/// What [`setup`] decided.
static SOURCE: AtomicU8 = AtomicU8::new(UNDECIDED);

const UNDECIDED: u8 = 0;
const TSC: u8 = 1;
const MONOTONIC: u8 = 2;

/// First calibration after this span; each later one after 4 × the previous span.
const FIRST_CAL_NS: u64 = 10_000_000;
/// No recalibration past this span: the factor is then exact to well under 1 ppm.
const LAST_CAL_NS: u64 = 100_000_000_000;
/// How often the timestamp anchor is renewed.
const ANCHOR_EVERY_NS: u64 = 1_000_000;

/// The instant before a call, in whichever unit [`start`] chose.
#[derive(Clone, Copy)]
pub enum Start {
    /// TSC ticks.
    Ticks(u64),
    /// `CLOCK_MONOTONIC` ns.
    Ns(u64),
}

/// The instant before the real call.
#[inline]
pub fn start() -> Start {
    // Acquire: pairs with the calibration's release, so the first anchor is visible.
    if MULT.load(Ordering::Acquire) != 0 {
        Start::Ticks(rdtsc())
    } else {
        Start::Ns(now_ns())
    }
}

/// After the real call: `(timestamp ns, duration ns)`.
#[inline]
pub fn stop(s: Start) -> (u64, u64) {
    match s {
        Start::Ticks(t0) => {
            let t1 = rdtsc();
            let mult = MULT.load(Ordering::Relaxed);
            let dur = ticks_to_ns(t1.saturating_sub(t0), mult);
            let ts = match anchored(t1, mult) {
                Some(ts) => ts,
                // The anchor is being renewed this instant: ask the clock.
                None => now_ns(),
            };
            if ts >= NEXT_ANCHOR_NS.load(Ordering::Relaxed) {
                renew_anchor(ts);
            }
            (ts, dur)
        }
        Start::Ns(t0) => {
            let ts = now_ns();
            if ts >= NEXT_CAL_NS.load(Ordering::Relaxed) {
                calibrate(ts);
            }
            (ts, ts.saturating_sub(t0))
        }
    }
}

/// The timestamp of TSC reading `t`: the anchor's ns plus the ticks since it. `None` while
/// the anchor is being written (or is younger than `t`'s reading, never in practice).
#[inline]
fn anchored(t: u64, mult: u64) -> Option<u64> {
    let v1 = TS_VERSION.load(Ordering::Acquire);
    let ticks = TS_TICKS.load(Ordering::Relaxed);
    let ns = TS_NS.load(Ordering::Relaxed);
    fence(Ordering::Acquire);
    let v2 = TS_VERSION.load(Ordering::Relaxed);
    if v1 != v2 || v1 & 1 == 1 || v1 == 0 || t < ticks {
        return None;
    }
    Some(ns.wrapping_add(ticks_to_ns(t - ticks, mult)))
}

/// Writes a new timestamp anchor; the caller holds the renewal (one writer at a time).
fn write_anchor(ticks: u64, ns: u64) {
    let odd = TS_VERSION.load(Ordering::Relaxed).wrapping_add(1) | 1;
    TS_VERSION.store(odd, Ordering::Relaxed);
    fence(Ordering::Release);
    TS_TICKS.store(ticks, Ordering::Relaxed);
    TS_NS.store(ns, Ordering::Relaxed);
    TS_VERSION.store(odd.wrapping_add(1), Ordering::Release);
}

/// Whether this thread takes the work that `next` (a due time in ns, `u64::MAX` while
/// someone has it) says is due at `seen_ns`: one thread wins; the others carry on.
#[inline]
fn claim(next: &AtomicU64, seen_ns: u64) -> bool {
    let due = next.load(Ordering::Acquire);
    seen_ns >= due
        && next
            .compare_exchange(due, u64::MAX, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
}

#[cold]
fn renew_anchor(seen_ns: u64) {
    if !claim(&NEXT_ANCHOR_NS, seen_ns) {
        return;
    }
    let (ticks, ns) = pair();
    write_anchor(ticks, ns);
    NEXT_ANCHOR_NS.store(ns.saturating_add(ANCHOR_EVERY_NS), Ordering::Release);
    if ns >= NEXT_CAL_NS.load(Ordering::Relaxed) {
        calibrate(ns);
    }
}

#[inline]
fn ticks_to_ns(ticks: u64, mult: u64) -> u64 {
    ((ticks as u128 * mult as u128) >> 32).min(u64::MAX as u128) as u64
}

/// CLOCK_MONOTONIC in nanoseconds (vDSO, no syscall on Linux).
#[inline]
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    (ts.tv_sec as u64)
        .wrapping_mul(1_000_000_000)
        .wrapping_add(ts.tv_nsec as u64)
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn rdtsc() -> u64 {
    // SAFETY: rdtsc exists on every x86-64 CPU and has no preconditions; it is only used
    // once `setup` found the counter invariant.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn rdtsc() -> u64 {
    0
}

/// Whether the CPU's TSC runs at a constant rate in every state (CPUID 0x8000_0007 EDX[8]).
#[cfg(target_arch = "x86_64")]
fn invariant_tsc() -> bool {
    use core::arch::x86_64::__cpuid;
    let max_ext = __cpuid(0x8000_0000).eax;
    max_ext >= 0x8000_0007 && __cpuid(0x8000_0007).edx & (1 << 8) != 0
}

#[cfg(not(target_arch = "x86_64"))]
fn invariant_tsc() -> bool {
    false
}

/// Whether the kernel times with the TSC (so it found the CPUs' counters synchronised).
fn kernel_clocksource_is_tsc() -> bool {
    let mut buf = [0u8; 64];
    let n = crate::meta::read_file(
        c"/sys/devices/system/clocksource/clocksource0/current_clocksource",
        &mut buf,
    );
    buf[..n].trim_ascii() == b"tsc"
}

/// Decides where durations come from and takes the calibration's first pair. Called once,
/// by the thread that starts the probe (file reads allowed there).
pub fn setup() {
    if SOURCE.load(Ordering::Acquire) != UNDECIDED {
        return;
    }
    // SAFETY: the name is NUL-terminated; the value is only compared.
    let forced = unsafe { libc::getenv(c"FRAGPROBE_CLOCK".as_ptr()) };
    // SAFETY: a non-null getenv result is a NUL-terminated string.
    let forced_monotonic = !forced.is_null()
        && unsafe { core::ffi::CStr::from_ptr(forced) }.to_bytes() == b"monotonic";
    if forced_monotonic || !invariant_tsc() || !kernel_clocksource_is_tsc() {
        SOURCE.store(MONOTONIC, Ordering::Release);
        return;
    }
    let (ticks, ns) = pair();
    ANCHOR_TICKS.store(ticks, Ordering::Relaxed);
    ANCHOR_NS.store(ns, Ordering::Relaxed);
    SOURCE.store(TSC, Ordering::Release);
    NEXT_CAL_NS.store(ns.saturating_add(FIRST_CAL_NS), Ordering::Release);
}

/// Where durations come from: `b"tsc"` or `b"monotonic"` (before [`setup`]: monotonic).
pub fn source_name() -> &'static [u8] {
    if SOURCE.load(Ordering::Acquire) == TSC {
        b"tsc"
    } else {
        b"monotonic"
    }
}

/// A (ticks, ns) pair read as close together as possible: the TSC is read on both sides of
/// the clock and the tightest of a few tries is kept, at its midpoint.
fn pair() -> (u64, u64) {
    let mut best = (u64::MAX, 0, 0);
    for _ in 0..4 {
        let a = rdtsc();
        let ns = now_ns();
        let b = rdtsc();
        let width = b.wrapping_sub(a);
        if width < best.0 {
            best = (width, a.wrapping_add(width / 2), ns);
        }
    }
    (best.1, best.2)
}

#[cold]
fn calibrate(seen_ns: u64) {
    // One thread calibrates; the others carry on with the current factor.
    if !claim(&NEXT_CAL_NS, seen_ns) {
        return;
    }
    let (ticks, ns) = pair();
    let span_ns = ns.saturating_sub(ANCHOR_NS.load(Ordering::Relaxed));
    let span_ticks = ticks.wrapping_sub(ANCHOR_TICKS.load(Ordering::Relaxed));
    // Plausible rates only: 10 MHz ..= 100 GHz (0.01 ..= 100 ns per tick).
    let mult = if span_ticks == 0 || span_ticks > 1 << 62 {
        0
    } else {
        ((span_ns as u128) << 32) / span_ticks as u128
    };
    if !((1u128 << 32) / 100..=(100u128 << 32)).contains(&mult) {
        // Not a sane counter: durations from clock_gettime for the rest of the process.
        MULT.store(0, Ordering::Relaxed);
        SOURCE.store(MONOTONIC, Ordering::Release);
        return;
    }
    // Timestamps from this pair on; the anchor is renewed every millisecond from now.
    if NEXT_ANCHOR_NS.load(Ordering::Acquire) == u64::MAX && MULT.load(Ordering::Relaxed) == 0 {
        write_anchor(ticks, ns);
        NEXT_ANCHOR_NS.store(ns.saturating_add(ANCHOR_EVERY_NS), Ordering::Release);
    }
    MULT.store(mult as u64, Ordering::Release);
    if span_ns < LAST_CAL_NS {
        NEXT_CAL_NS.store(
            ns.saturating_add(span_ns.saturating_mul(3)),
            Ordering::Release,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_convert_with_the_fixed_point_factor() {
        // 2.5 GHz: 0.4 ns per tick.
        let mult = ((4u128 << 32) / 10) as u64;
        assert_eq!(ticks_to_ns(2_500_000, mult), 999_999);
        assert_eq!(ticks_to_ns(0, mult), 0);
        // 1 ns per tick is exact.
        assert_eq!(ticks_to_ns(123_456_789, 1 << 32), 123_456_789);
    }

    #[test]
    fn durations_match_the_monotonic_clock() {
        setup();
        let src = source_name();
        // Wait past the first calibration so the TSC path (where available) is used.
        let until = now_ns() + 2 * FIRST_CAL_NS;
        while now_ns() < until {
            let s = start();
            let _ = stop(s);
        }
        if src == b"tsc" {
            assert_ne!(MULT.load(Ordering::Relaxed), 0, "calibrated");
        }
        for _ in 0..5 {
            let s = start();
            let c0 = now_ns();
            while now_ns() - c0 < 2_000_000 {
                core::hint::spin_loop();
            }
            let c1 = now_ns();
            let (ts, dur) = stop(s);
            let c2 = now_ns();
            // The timestamp is the clock's, to within a microsecond (see the module doc).
            assert!(ts + 1_000 >= c1 && ts <= c2 + 1_000, "{c1} <= {ts} <= {c2}");
            // The measured span contains [c0, c1] and little else (this thread may be
            // preempted, so only the lower bound is tight).
            assert!(dur + 2_000 >= c1 - c0, "{dur} < {}", c1 - c0);
            assert!(dur < (c1 - c0) + 50_000_000, "{dur}");
        }
        // Timestamps across many anchor renewals never run ahead of the clock, and keep up
        // with it (the median gap to a clock read right after is small).
        let until = now_ns() + 30_000_000;
        let mut gaps = Vec::new();
        while now_ns() < until {
            let (ts, _) = stop(start());
            let c = now_ns();
            assert!(ts <= c + 1_000, "timestamp {ts} ahead of the clock {c}");
            gaps.push(c.saturating_sub(ts));
        }
        gaps.sort_unstable();
        assert!(
            gaps[gaps.len() / 2] < 5_000,
            "median gap {}",
            gaps[gaps.len() / 2]
        );
    }
}
