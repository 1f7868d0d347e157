//! Stand-in for `libnvidia-ml.so.1`: NVML's view of the simulated devices, read live from
//! the shared state file that every simulated driver writes (same `FRAGPROBE_SIM_GPU` and
//! `FRAGPROBE_SIM_STATE` settings). A monitor process therefore sees what workloads in other
//! processes hold: per-process used memory (allocations, pool chunks, VMM handles and the
//! context overhead), device totals, and telemetry derived from them.
//!
//! Memory figures: total = device size; reserved = a fixed driver reservation of 0.5% of the
//! size (rounded down to MiB; bookkeeping only); used = physical memory in use by all
//! processes; free = total − reserved − used (never below 0). The v1 struct's `used`
//! includes the reservation, as drivers since 510 report it. Telemetry is described in
//! `fragprobe_simgpu::ident`.
//!
//! `nvml-wrapper` resolves each symbol when the library is loaded but fails only when a
//! missing one is called; every function it needs for the queries above is exported here.

#![allow(non_snake_case)]

mod device;
mod system;
mod tools;

pub use device::*;
pub use system::*;

use fragprobe_simgpu::codes::*;
use fragprobe_simgpu::state::SharedState;
use std::sync::{Mutex, MutexGuard};

/// The state file while NVML is initialised, and how many `nvmlInit` calls are open.
struct Nvml {
    state: Option<SharedState>,
    inits: u32,
}

static NVML: Mutex<Nvml> = Mutex::new(Nvml {
    state: None,
    inits: 0,
});

fn lock() -> MutexGuard<'static, Nvml> {
    NVML.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `f` on the state file; `NVML_ERROR_UNINITIALIZED` before `nvmlInit`.
pub(crate) fn with_state(f: impl FnOnce(&SharedState) -> u32) -> u32 {
    let g = lock();
    match &g.state {
        Some(s) => f(s),
        None => NVML_ERROR_UNINITIALIZED,
    }
}

pub(crate) fn init() -> u32 {
    let mut g = lock();
    if g.state.is_none() {
        let opened = fragprobe_simgpu::Config::from_env()
            .map_err(|e| e.to_string())
            .and_then(|cfg| {
                let st = SharedState::open(&cfg.state_path).map_err(|e| e.to_string())?;
                st.settle_spec(cfg.spec.as_ref(), None)
                    .map_err(|e| e.to_string())?;
                Ok(st)
            });
        match opened {
            Ok(st) => g.state = Some(st),
            Err(msg) => {
                eprintln!("fragprobe simulated NVML: {msg}");
                return NVML_ERROR_DRIVER_NOT_LOADED;
            }
        }
    }
    g.inits += 1;
    NVML_SUCCESS
}

pub(crate) fn shutdown() -> u32 {
    let mut g = lock();
    if g.inits == 0 {
        return NVML_ERROR_UNINITIALIZED;
    }
    g.inits -= 1;
    if g.inits == 0 {
        g.state = None;
    }
    NVML_SUCCESS
}

/// Copies `s` with its NUL into a buffer of `len` bytes; `NVML_ERROR_INSUFFICIENT_SIZE` if
/// it does not fit.
///
/// # Safety
/// `dst` must be NULL or valid for `len` bytes of writes.
pub(crate) unsafe fn put_str(dst: *mut std::ffi::c_char, len: u32, s: &str) -> u32 {
    if dst.is_null() {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if s.len() + 1 > len as usize {
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    // SAFETY: `dst` holds `len` >= s.len() + 1 bytes per the caller's contract.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr().cast(), dst, s.len());
        *dst.add(s.len()) = 0;
    }
    NVML_SUCCESS
}

/// Writes `v` through `p`; `NVML_ERROR_INVALID_ARGUMENT` for NULL.
///
/// # Safety
/// `p` must be NULL or valid for a write of `T`.
pub(crate) unsafe fn put<T>(p: *mut T, v: T) -> u32 {
    if p.is_null() {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    // SAFETY: non-null, valid per the caller's contract.
    unsafe { p.write(v) };
    NVML_SUCCESS
}
