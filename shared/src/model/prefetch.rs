//! Software prefetch hints: ask the CPU to start loading memory an upcoming event will
//! read, so several events' cache misses overlap instead of stalling one after another.
//! Hints never change a result.

/// Starts loading the cache line holding `p` (a hint: nothing is read, and any address,
/// even a stale one, is fine).
#[inline(always)]
pub(crate) fn line<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `_mm_prefetch` is only a hint to the cache: it never faults, reads nothing
    // the program can observe and is defined for any address, valid or not. SSE, which it
    // needs, is part of every x86_64 CPU.
    unsafe {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Starts loading every cache line of `bytes` bytes from `p`.
#[inline(always)]
pub(crate) fn span<T>(p: *const T, bytes: usize) {
    let b = p.cast::<u8>();
    let mut off = 0;
    while off < bytes {
        line(b.wrapping_add(off));
        off += 64;
    }
    // The last byte, for a span not starting on a line.
    if bytes > 0 {
        line(b.wrapping_add(bytes - 1));
    }
}
