//! Per-thread state: the re-entrancy guard, the cached thread id, the device of the current
//! context.
//!
//! All of it is one `const`-initialised thread-local without a destructor: no allocation,
//! no registration, safe to touch from any hook (including during thread teardown, where
//! `try_with` fails and the hook simply passes through). A hook looks the thread-local up
//! once (in a shared library every lookup is a `__tls_get_addr` call) and keeps the
//! reference in its [`Guard`].

use core::cell::Cell;
use core::sync::atomic::{AtomicU32, Ordering};

/// What the probe keeps per thread.
pub struct ThreadState {
    depth: Cell<u32>,
    /// (fork generation, kernel thread id).
    tid: Cell<(u32, u32)>,
    /// (context, context generation, its device): the device of the last current context
    /// seen (see [`crate::device::current_cached`]).
    ctx: Cell<(usize, u32, i16)>,
}

thread_local! {
    static STATE: ThreadState = const {
        ThreadState {
            depth: Cell::new(0),
            tid: Cell::new((u32::MAX, 0)),
            ctx: Cell::new((0, 0, -1)),
        }
    };
}

/// Bumped in the child after `fork`, so cached thread ids are fetched again.
pub static FORK_GENERATION: AtomicU32 = AtomicU32::new(0);

/// Proof that this thread is inside the outermost hooked call. Recording code is only
/// reachable through a `Guard`; dropping it re-enables recording on the thread.
pub struct Guard {
    state: &'static ThreadState,
    _not_send: core::marker::PhantomData<*const ()>,
}

impl Guard {
    /// Enters a hook. `None` when this thread is already inside a hooked call (a runtime
    /// call nested in `cudaMalloc`, say): then the hook only forwards, so nothing is
    /// recorded twice.
    #[inline]
    pub fn enter() -> Option<Guard> {
        let state = STATE.try_with(|s| s as *const ThreadState).ok()?;
        // SAFETY: the thread-local has a const initialiser and no destructor, so its storage
        // is valid until this thread exits; the Guard is !Send and lives inside one hooked
        // call on this thread, so the reference never outlives the storage.
        let state: &'static ThreadState = unsafe { &*state };
        if state.depth.get() != 0 {
            return None;
        }
        state.depth.set(1);
        Some(Guard {
            state,
            _not_send: core::marker::PhantomData,
        })
    }

    /// The kernel thread id, cached per thread and refreshed after `fork`.
    #[inline]
    pub fn tid(&self) -> u32 {
        tid_of(self.state)
    }

    /// The cached (context, context generation, device).
    #[inline]
    pub fn ctx_cache(&self) -> (usize, u32, i16) {
        self.state.ctx.get()
    }

    /// Replaces the cached (context, context generation, device).
    #[inline]
    pub fn set_ctx_cache(&self, v: (usize, u32, i16)) {
        self.state.ctx.set(v)
    }
}

impl Drop for Guard {
    #[inline]
    fn drop(&mut self) {
        self.state.depth.set(0);
    }
}

/// The kernel thread id, for code that runs without a [`Guard`] (exit handlers).
pub fn tid() -> u32 {
    STATE.try_with(tid_of).unwrap_or_else(|_| raw_gettid())
}

#[inline]
fn tid_of(s: &ThreadState) -> u32 {
    let gen = FORK_GENERATION.load(Ordering::Relaxed);
    let (g, t) = s.tid.get();
    if g == gen {
        return t;
    }
    let t = raw_gettid();
    s.tid.set((gen, t));
    t
}

fn raw_gettid() -> u32 {
    // SAFETY: gettid takes no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}
