//! Stand-in for `libcuda.so.1` backed by the simulated GPU of `fragprobe-simgpu`.
//!
//! Exports the CUDA 12.8 driver API by its real ELF names and C signatures. Memory,
//! contexts, streams, events, pools, VMM, pointer queries, error strings and
//! `cuGetProcAddress` are simulated; every other entry point exists and returns
//! `CUDA_ERROR_NOT_SUPPORTED` (801). `entry_points.txt` lists them all with the versions
//! `cuGetProcAddress` resolves.
//!
//! Results cross the C boundary as `u32` (`CUresult` is a C enum of 4 bytes).

mod api;
mod proc;
mod table;

use fragprobe_simgpu::codes::{code_of, CuError, CuResult, CUDA_ERROR_NOT_INITIALIZED};
use fragprobe_simgpu::Gpu;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Instant;

/// The process's simulated driver, created by the first successful `cuInit`.
static GPU: OnceLock<Mutex<Gpu>> = OnceLock::new();
/// `cuInit`'s result when initialisation failed (0 while not tried or succeeded).
static INIT_ERROR: AtomicU32 = AtomicU32::new(0);
/// Set in a child forked after `cuInit`: like the real driver, CUDA is unusable there.
static FORKED: AtomicBool = AtomicBool::new(false);
/// Pid that initialised the driver (the exit handler only releases its own slot).
static INIT_PID: AtomicU32 = AtomicU32::new(0);
/// FRAGPROBE_SIM_LATENCY_NS.
static LATENCY_NS: AtomicU64 = AtomicU64::new(0);

fn lock(m: &Mutex<Gpu>) -> MutexGuard<'_, Gpu> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` on the initialised driver.
pub(crate) fn with_gpu<T>(f: impl FnOnce(&mut Gpu) -> CuResult<T>) -> CuResult<T> {
    if FORKED.load(Ordering::Relaxed) {
        return Err(CuError(CUDA_ERROR_NOT_INITIALIZED));
    }
    match GPU.get() {
        Some(m) => f(&mut lock(m)),
        None => Err(CuError(CUDA_ERROR_NOT_INITIALIZED)),
    }
}

/// Whether the driver is usable in this process, without taking its lock: for the calls a
/// real driver answers from the calling thread's own state (`cuCtxGetCurrent`).
pub(crate) fn initialized() -> CuResult<()> {
    if FORKED.load(Ordering::Relaxed) || GPU.get().is_none() {
        return Err(CuError(CUDA_ERROR_NOT_INITIALIZED));
    }
    Ok(())
}

/// Like [`with_gpu`] for calls that return only a code.
pub(crate) fn run(f: impl FnOnce(&mut Gpu) -> CuResult<()>) -> u32 {
    code_of(with_gpu(f))
}

/// Busy-waits FRAGPROBE_SIM_LATENCY_NS (allocating and freeing calls).
pub(crate) fn latency() {
    let ns = LATENCY_NS.load(Ordering::Relaxed);
    if ns > 0 {
        let t = Instant::now();
        while (t.elapsed().as_nanos() as u64) < ns {
            std::hint::spin_loop();
        }
    }
}

extern "C" fn after_fork_in_child() {
    FORKED.store(true, Ordering::Relaxed);
}

extern "C" fn at_exit() {
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u32;
    if pid != INIT_PID.load(Ordering::Relaxed) || FORKED.load(Ordering::Relaxed) {
        return;
    }
    if let Some(m) = GPU.get() {
        // another thread may hold the lock while the process exits; the slot is then
        // reclaimed by the next process that finds this pid dead
        if let Ok(g) = m.try_lock() {
            g.release_process();
        }
    }
}

/// `cuInit`: reads the FRAGPROBE_SIM_* settings and joins the shared state.
pub(crate) fn init() -> u32 {
    if FORKED.load(Ordering::Relaxed) {
        return CUDA_ERROR_NOT_INITIALIZED;
    }
    if GPU.get().is_some() {
        return 0;
    }
    static INIT_LOCK: Mutex<()> = Mutex::new(());
    let _guard = INIT_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    if GPU.get().is_some() {
        return 0;
    }
    let err = INIT_ERROR.load(Ordering::Relaxed);
    if err != 0 {
        return err;
    }
    let cfg = match fragprobe_simgpu::Config::from_env() {
        Ok(c) => c,
        Err(e) => return init_failed(&e.to_string()),
    };
    let latency_ns = cfg.latency_ns;
    match Gpu::new(cfg) {
        Ok(g) => {
            LATENCY_NS.store(latency_ns, Ordering::Relaxed);
            let _ = GPU.set(Mutex::new(g));
            // SAFETY: getpid has no preconditions.
            INIT_PID.store(unsafe { libc::getpid() } as u32, Ordering::Relaxed);
            // SAFETY: registering handlers with plain `extern "C" fn()` items that live for
            // the whole program.
            unsafe {
                libc::pthread_atfork(None, None, Some(after_fork_in_child));
                libc::atexit(at_exit);
            }
            0
        }
        Err(msg) => init_failed(&msg),
    }
}

fn init_failed(msg: &str) -> u32 {
    eprintln!("fragprobe simulated GPU: {msg}");
    let code = fragprobe_simgpu::codes::CUDA_ERROR_NO_DEVICE;
    INIT_ERROR.store(code, Ordering::Relaxed);
    code
}

/// What every not-simulated entry point returns. With `FRAGPROBE_SIM_TRACE_STUBS` set, the
/// call is also named on stderr: how to find what a program needs that is not simulated.
pub(crate) fn stub_called(name: &str) -> u32 {
    static TRACE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *TRACE.get_or_init(|| std::env::var_os("FRAGPROBE_SIM_TRACE_STUBS").is_some()) {
        eprintln!("fragprobe simulated GPU: {name} is not simulated (CUDA_ERROR_NOT_SUPPORTED)");
    }
    fragprobe_simgpu::codes::CUDA_ERROR_NOT_SUPPORTED
}

/// The address of an exported symbol (the generated table names it in a comment).
pub(crate) struct Sym(pub *const std::ffi::c_void);
// SAFETY: the pointers are addresses of functions in this library; they are never written.
unsafe impl Sync for Sym {}

/// One line of `entry_points.txt`: `sym` and `per_thread` index [`table::SYMBOLS`].
pub(crate) struct Proc {
    pub name: &'static str,
    pub version: u32,
    pub sym: usize,
    pub per_thread: Option<usize>,
}
