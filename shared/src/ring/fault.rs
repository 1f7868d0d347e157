//! Surviving a ring file that another process truncates while we have it mapped.
//!
//! A consumer maps a file that the producer (or anyone with write access) can shrink at any
//! moment; touching a page past the new end raises SIGBUS, which would kill `fragprobe`.
//! A size check before each pass ([`RingFile::intact`](super::RingFile::intact)) cannot
//! close the window between the check and the access, so this module also installs a
//! SIGBUS handler that, for a fault inside a registered ring mapping, maps anonymous zero
//! pages over the rest of that mapping and returns: the faulting load is retried and reads
//! zeros (an empty slot, which the consumer never delivers) and the mapping is marked
//! damaged. A fault anywhere else is passed to the handler that was there before (the
//! default one kills the process as it would have).
//!
//! The handler does only async-signal-safe work: atomic loads and stores and one `mmap`.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Once;

/// Mappings watched at once; a consumer past this many rings keeps only the size check.
const SLOTS: usize = 256;

#[allow(clippy::declare_interior_mutable_const)]
const ZERO: AtomicUsize = AtomicUsize::new(0);
#[allow(clippy::declare_interior_mutable_const)]
const CLEAR: AtomicBool = AtomicBool::new(false);

/// Start and end of each watched mapping (0, 0 = free slot).
static START: [AtomicUsize; SLOTS] = [ZERO; SLOTS];
static END: [AtomicUsize; SLOTS] = [ZERO; SLOTS];
/// Set by the handler when it patched the slot's mapping.
static HIT: [AtomicBool; SLOTS] = [CLEAR; SLOTS];
static PAGE: AtomicUsize = AtomicUsize::new(4096);
/// The `sigaction` that was installed before ours, for faults that are not ours.
static mut PREVIOUS: Option<libc::sigaction> = None;
static INSTALL: Once = Once::new();

/// A watched mapping; unwatched when dropped (drop it before unmapping).
#[derive(Debug)]
pub struct Watch {
    slot: Option<usize>,
}

impl Watch {
    /// Whether a fault inside the mapping was absorbed (the file shrank under it).
    pub fn damaged(&self) -> bool {
        self.slot.is_some_and(|s| HIT[s].load(Ordering::Acquire))
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(s) = self.slot {
            END[s].store(0, Ordering::Release);
            START[s].store(0, Ordering::Release);
            HIT[s].store(false, Ordering::Release);
        }
    }
}

/// Watches `len` bytes at `start` (a mapping of a file others may truncate).
pub fn watch(start: *const u8, len: usize) -> Watch {
    INSTALL.call_once(install);
    let start = start as usize;
    for s in 0..SLOTS {
        if START[s]
            .compare_exchange(0, start, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            HIT[s].store(false, Ordering::Release);
            END[s].store(start + len, Ordering::Release);
            return Watch { slot: Some(s) };
        }
    }
    Watch { slot: None }
}

fn install() {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if page > 0 {
        PAGE.store(page as usize, Ordering::Relaxed);
    }
    // SAFETY: a zeroed sigaction is a valid "no handler" value to fill in; the handler has
    // the SA_SIGINFO signature; `old` receives the previous action, stored before ours can
    // run for a fault of someone else's (no ring is watched before this returns).
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = on_sigbus as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
        libc::sigemptyset(&mut act.sa_mask);
        let mut old: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGBUS, &act, &mut old) == 0 {
            PREVIOUS = Some(old);
        }
    }
}

extern "C" fn on_sigbus(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let addr = unsafe { (*info).si_addr() } as usize;
    let page = PAGE.load(Ordering::Relaxed);
    for s in 0..SLOTS {
        let (start, end) = (
            START[s].load(Ordering::Acquire),
            END[s].load(Ordering::Acquire),
        );
        if start != 0 && addr >= start && addr < end {
            let from = addr & !(page - 1);
            // SAFETY: [from, end) lies inside a mapping this process owns and watches;
            // replacing it with private zero pages only changes what later loads of our
            // own reader see. mmap is async-signal-safe.
            let p = unsafe {
                libc::mmap(
                    from as *mut libc::c_void,
                    end - from,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_FIXED | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            if p != libc::MAP_FAILED {
                HIT[s].store(true, Ordering::Release);
                return;
            }
        }
    }
    // Not ours: hand it to whoever had it, else die of it as we would have.
    // SAFETY: PREVIOUS was written once, before any ring was watched, and is only read.
    let prev = unsafe { *std::ptr::addr_of!(PREVIOUS) };
    match prev {
        Some(p) if p.sa_sigaction != libc::SIG_DFL && p.sa_sigaction != libc::SIG_IGN => {
            if p.sa_flags & libc::SA_SIGINFO != 0 {
                // SAFETY: the previous handler was installed with the SA_SIGINFO signature.
                let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) =
                    unsafe { std::mem::transmute(p.sa_sigaction) };
                f(sig, info, ctx);
            } else {
                // SAFETY: the previous handler was installed with the plain signature.
                let f: extern "C" fn(libc::c_int) = unsafe { std::mem::transmute(p.sa_sigaction) };
                f(sig);
            }
        }
        _ => {
            // SAFETY: restoring the default action and returning re-runs the faulting
            // access, which then kills the process with SIGBUS as before.
            unsafe {
                let mut act: libc::sigaction = std::mem::zeroed();
                act.sa_sigaction = libc::SIG_DFL;
                libc::sigaction(libc::SIGBUS, &act, std::ptr::null_mut());
            }
        }
    }
}
