//! Hook timing: the record's timestamp from one `CLOCK_MONOTONIC` read, the call's duration
//! from time-stamp-counter ticks.
//!
//! A hook needs two instants (before and after the real call). Two `clock_gettime` calls
//! cost about 20 ns each; `rdtsc` costs a few. So when the TSC is trustworthy a hook reads
//! the TSC before the call, the TSC and the clock after it, and converts the tick delta to
//! nanoseconds with a factor calibrated against `CLOCK_MONOTONIC` in the hooks themselves
//! (no start-up delay): the first pair (ticks, ns) is taken when the probe starts, and the
//! factor is computed once 10 ms have passed, then refined over longer spans (×4 each time,
//! up to about 100 s). Until the first calibration, and whenever the TSC is not trusted,
//! both instants come from `clock_gettime` as before. `dur_ns` is nanoseconds either way.
//!
//! The TSC is trusted only on x86-64 when the CPU says it is invariant (constant rate in
//! every P-/C-state: CPUID 0x8000_0007 EDX bit 8) *and* the kernel's clocksource is `tsc`
//! (the kernel checked the counters are synchronised across CPUs, so a thread that moves
//! between cores mid-call still gets a sane delta). A calibration that gives an implausible
//! rate turns the TSC off for the process. `FRAGPROBE_CLOCK=monotonic` forces
//! `clock_gettime` for durations.

use core::sync::atomic::{AtomicU64, AtomicU8, Ordering};

/// Nanoseconds per tick, 32.32 fixed point; 0 while durations come from `clock_gettime`.
static MULT: AtomicU64 = AtomicU64::new(0);
/// The (ticks, ns) pair calibrations measure from.
static ANCHOR_TICKS: AtomicU64 = AtomicU64::new(0);
static ANCHOR_NS: AtomicU64 = AtomicU64::new(0);
/// `CLOCK_MONOTONIC` ns at which the next (re)calibration is due; `u64::MAX`: never.
static NEXT_CAL_NS: AtomicU64 = AtomicU64::new(u64::MAX);
/// What [`setup`] decided.
static SOURCE: AtomicU8 = AtomicU8::new(UNDECIDED);

const UNDECIDED: u8 = 0;
const TSC: u8 = 1;
const MONOTONIC: u8 = 2;

/// First calibration after this span; each later one after 4 × the previous span.
const FIRST_CAL_NS: u64 = 10_000_000;
/// No recalibration past this span: the factor is then exact to well under 1 ppm.
const LAST_CAL_NS: u64 = 100_000_000_000;

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
    if MULT.load(Ordering::Relaxed) != 0 {
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
            let ts = now_ns();
            let dur = ticks_to_ns(t1.saturating_sub(t0), MULT.load(Ordering::Relaxed));
            if ts >= NEXT_CAL_NS.load(Ordering::Relaxed) {
                calibrate(ts);
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
    let due = NEXT_CAL_NS.load(Ordering::Acquire);
    if seen_ns < due
        || NEXT_CAL_NS
            .compare_exchange(due, u64::MAX, Ordering::AcqRel, Ordering::Relaxed)
            .is_err()
    {
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
    MULT.store(mult as u64, Ordering::Relaxed);
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
            assert!(ts >= c1);
            // The measured span contains [c0, c1] and little else (this thread may be
            // preempted, so only the lower bound is tight).
            assert!(dur + 2_000 >= c1 - c0, "{dur} < {}", c1 - c0);
            assert!(dur < (c1 - c0) + 50_000_000, "{dur}");
        }
    }
}
