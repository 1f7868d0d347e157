//! Per-thread state: the re-entrancy guard, the cached thread id, the clock.
//!
//! Thread-locals are `const`-initialised `Cell`s without destructors: no allocation, no
//! registration, safe to touch from any hook (including during thread teardown, where
//! `try_with` fails and the hook simply passes through).

use core::cell::Cell;
use core::sync::atomic::{AtomicU32, Ordering};

thread_local! {
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    static TID: Cell<(u32, u32)> = const { Cell::new((u32::MAX, 0)) };
}

/// Bumped in the child after `fork`, so cached thread ids are fetched again.
pub static FORK_GENERATION: AtomicU32 = AtomicU32::new(0);

/// Proof that this thread is inside the outermost hooked call. Recording code is only
/// reachable through a `Guard`; dropping it re-enables recording on the thread.
pub struct Guard {
    _not_send: core::marker::PhantomData<*const ()>,
}

impl Guard {
    /// Enters a hook. `None` when this thread is already inside a hooked call (a runtime
    /// call nested in `cudaMalloc`, say): then the hook only forwards, so nothing is
    /// recorded twice.
    #[inline]
    pub fn enter() -> Option<Guard> {
        let outermost = DEPTH
            .try_with(|d| {
                if d.get() == 0 {
                    d.set(1);
                    true
                } else {
                    false
                }
            })
            .unwrap_or(false);
        outermost.then_some(Guard {
            _not_send: core::marker::PhantomData,
        })
    }
}

impl Drop for Guard {
    #[inline]
    fn drop(&mut self) {
        let _ = DEPTH.try_with(|d| d.set(0));
    }
}

/// The kernel thread id, cached per thread and refreshed after `fork`.
#[inline]
pub fn tid() -> u32 {
    let gen = FORK_GENERATION.load(Ordering::Relaxed);
    TID.try_with(|c| {
        let (g, t) = c.get();
        if g == gen {
            return t;
        }
        let t = raw_gettid();
        c.set((gen, t));
        t
    })
    .unwrap_or_else(|_| raw_gettid())
}

fn raw_gettid() -> u32 {
    // SAFETY: gettid takes no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
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
