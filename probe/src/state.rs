//! The probe's process-wide state: off, not yet started, starting, recording.
//!
//! The ring is created on the first recorded event, not at load time: processes that never
//! use CUDA (compilers, shells, `nvidia-smi`, data-loader workers) get nothing. Start-up
//! is a compare-and-swap on [`STATE`]; threads that meet it half-way spin briefly
//! (yielding) until it is done. After `fork` the child starts again from scratch and is
//! recorded as its own process.

use core::cell::UnsafeCell;
use core::mem::MaybeUninit;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU8, Ordering};

use fragprobe_wire::ring::Ring;

const UNSTARTED: u8 = 0;
const STARTING: u8 = 1;
const RECORDING: u8 = 2;
const OFF: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(UNSTARTED);
static USER_DISABLED: AtomicBool = AtomicBool::new(false);
static PID: AtomicU32 = AtomicU32::new(0);
static SAID: AtomicBool = AtomicBool::new(false);

struct RingCell(UnsafeCell<MaybeUninit<Ring>>);
// SAFETY: the cell is written only by the one thread that won the UNSTARTED→STARTING
// exchange, before it publishes RECORDING with Release; readers read only after an
// Acquire load of RECORDING. Ring itself is Sync.
unsafe impl Sync for RingCell {}
static RING: RingCell = RingCell(UnsafeCell::new(MaybeUninit::uninit()));

/// Whether `FRAGPROBE_DISABLE=1` turned the probe off: then even wrappers are not handed out.
#[inline]
pub fn disabled_by_user() -> bool {
    USER_DISABLED.load(Ordering::Relaxed)
}

/// This process's id as recorded.
#[inline]
pub fn pid() -> u32 {
    PID.load(Ordering::Relaxed)
}

/// Turns the probe off for this process, saying why once on stderr.
pub fn disable(why: &[u8]) {
    STATE.store(OFF, Ordering::Release);
    if !SAID.swap(true, Ordering::AcqRel) {
        // SAFETY: writing a valid buffer to fd 2; the result is deliberately ignored.
        unsafe { libc::write(2, why.as_ptr() as *const libc::c_void, why.len()) };
    }
}

/// The ring, starting the probe on first use. `None` when off.
#[inline]
pub fn ring() -> Option<&'static Ring> {
    loop {
        match STATE.load(Ordering::Acquire) {
            // SAFETY: RECORDING is published only after RING was written (see RingCell).
            RECORDING => return Some(unsafe { (*RING.0.get()).assume_init_ref() }),
            OFF => return None,
            UNSTARTED => {
                if STATE
                    .compare_exchange(UNSTARTED, STARTING, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
                {
                    return start();
                }
            }
            _ => {
                // Another thread is creating the ring: give it the CPU.
                // SAFETY: sched_yield has no preconditions.
                unsafe { libc::sched_yield() };
            }
        }
    }
}

fn start() -> Option<&'static Ring> {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u32;
    PID.store(pid, Ordering::Relaxed);
    crate::clock::setup();
    let start_ns = crate::clock::now_ns();
    let mut why = crate::ringfile::Text::new();
    match crate::ringfile::create(pid, start_ns, &mut why) {
        Some(ring) => {
            // SAFETY: we won the exchange to STARTING: no other thread reads or writes RING
            // until RECORDING is published below.
            let r: &'static Ring = unsafe { (*RING.0.get()).write(ring) };
            crate::meta::write_process_start(r);
            STATE.store(RECORDING, Ordering::Release);
            Some(r)
        }
        None => {
            disable(why.bytes());
            None
        }
    }
}

/// Load-time set-up: no driver calls, no `dlsym`, no allocation.
pub fn on_load() {
    let off = std::env::var_os("FRAGPROBE_DISABLE")
        .is_some_and(|v| v == "1" || v == "true" || v == "yes");
    if off {
        USER_DISABLED.store(true, Ordering::Relaxed);
        STATE.store(OFF, Ordering::Relaxed);
    }
    // SAFETY: registering plain extern "C" fns with no captured state.
    unsafe {
        libc::pthread_atfork(None, None, Some(after_fork_in_child));
        libc::atexit(at_exit);
    }
}

extern "C" fn after_fork_in_child() {
    crate::thread::FORK_GENERATION.fetch_add(1, Ordering::Relaxed);
    crate::device::reset_after_fork();
    // The parent's ring descriptor (and the lock on it that says the parent lives) is not
    // the child's to keep: a forked worker must not keep its parent's ring from a sweep.
    let fd = crate::ringfile::RING_FD.swap(-1, Ordering::AcqRel);
    if fd >= 0 {
        // SAFETY: fd was the ring's descriptor, inherited; close is async-signal-safe.
        unsafe { libc::close(fd) };
    }
    if !disabled_by_user() {
        // The parent's ring stays the parent's: the child starts afresh on first use and
        // is recorded as its own process.
        STATE.store(UNSTARTED, Ordering::Release);
    }
}

extern "C" fn at_exit() {
    if STATE.load(Ordering::Acquire) != RECORDING {
        return;
    }
    // SAFETY: getpid has no preconditions.
    if unsafe { libc::getpid() } as u32 != pid() {
        return;
    }
    if let Some(r) = ring() {
        crate::record::protect(|| crate::meta::write_process_exit(r));
    }
}

// SAFETY (ctor): runs before main; touches only atomics, getenv and libc registration
// functions — no driver calls, no dlsym, no thread spawning.
#[ctor::ctor(unsafe)]
fn fragprobe_on_load() {
    on_load();
}
