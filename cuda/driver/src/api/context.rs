//! Primary and created contexts, the per-thread context stack.

use super::{code, cur, put};
use crate::{initialized, run, with_gpu};
use fragprobe_simgpu::codes::*;
use fragprobe_simgpu::current;
use std::ffi::{c_int, c_uint, c_void};

type CUcontext = *mut c_void;

fn ctx_ptr(h: u64) -> CUcontext {
    h as usize as CUcontext
}

fn ctx_val(c: CUcontext) -> u64 {
    c as usize as u64
}

/// # Safety
/// `pctx` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRetain(pctx: *mut CUcontext, dev: c_int) -> u32 {
    code(with_gpu(|g| {
        if pctx.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        let d = g.check_device(dev)?;
        let h = g.primary_retain(d)?;
        // SAFETY: forwarded caller contract.
        unsafe { put(pctx, ctx_ptr(h)) }
    }))
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease_v2(dev: c_int) -> u32 {
    run(|g| {
        let d = g.check_device(dev)?;
        g.primary_release(d)
    })
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxRelease(dev: c_int) -> u32 {
    // SAFETY: same contract.
    unsafe { cuDevicePrimaryCtxRelease_v2(dev) }
}

/// # Safety
/// `flags` and `active` must be NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxGetState(
    dev: c_int,
    flags: *mut c_uint,
    active: *mut c_int,
) -> u32 {
    code(with_gpu(|g| {
        let d = g.check_device(dev)?;
        let (f, a) = g.primary_state(d);
        // SAFETY: forwarded caller contract.
        unsafe {
            put(flags, f)?;
            put(active, a as c_int)
        }
    }))
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxSetFlags_v2(dev: c_int, flags: c_uint) -> u32 {
    run(|g| {
        let d = g.check_device(dev)?;
        g.primary_set_flags(d, flags, false)
    })
}

/// Pre-11.0 form: refuses with `CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE` while active.
///
/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxSetFlags(dev: c_int, flags: c_uint) -> u32 {
    run(|g| {
        let d = g.check_device(dev)?;
        g.primary_set_flags(d, flags, true)
    })
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxReset_v2(dev: c_int) -> u32 {
    run(|g| {
        let d = g.check_device(dev)?;
        g.primary_reset(d)?;
        current::forget(fragprobe_simgpu::gpu::primary_handle(d));
        Ok(())
    })
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuDevicePrimaryCtxReset(dev: c_int) -> u32 {
    // SAFETY: same contract.
    unsafe { cuDevicePrimaryCtxReset_v2(dev) }
}

/// Creates a context and makes it current on the calling thread.
///
/// # Safety
/// `pctx` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v2(pctx: *mut CUcontext, flags: c_uint, dev: c_int) -> u32 {
    code(with_gpu(|g| {
        if pctx.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        let d = g.check_device(dev)?;
        let h = g.ctx_create(d, flags)?;
        current::push(h);
        // SAFETY: forwarded caller contract.
        unsafe { put(pctx, ctx_ptr(h)) }
    }))
}

/// # Safety
/// `pctx` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate(pctx: *mut CUcontext, flags: c_uint, dev: c_int) -> u32 {
    // SAFETY: same contract.
    unsafe { cuCtxCreate_v2(pctx, flags, dev) }
}

/// Execution-affinity parameters are not simulated: only `num_params == 0` is accepted.
///
/// # Safety
/// `pctx` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v3(
    pctx: *mut CUcontext,
    _params: *const c_void,
    num_params: c_int,
    flags: c_uint,
    dev: c_int,
) -> u32 {
    if num_params != 0 {
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    // SAFETY: same contract.
    unsafe { cuCtxCreate_v2(pctx, flags, dev) }
}

/// `CUctxCreateParams`: execution affinity and CIG parameters.
#[repr(C)]
pub struct CtxCreateParams {
    exec_affinity: *const c_void,
    num_exec_affinity: c_int,
    cig: *const c_void,
}

/// Accepts NULL parameters or parameters asking for nothing.
///
/// # Safety
/// `pctx` must be NULL or valid for a write; `params` NULL or a valid `CUctxCreateParams`.
#[no_mangle]
pub unsafe extern "C" fn cuCtxCreate_v4(
    pctx: *mut CUcontext,
    params: *const CtxCreateParams,
    flags: c_uint,
    dev: c_int,
) -> u32 {
    if !params.is_null() {
        // SAFETY: non-null and valid per the caller's contract.
        let p = unsafe { &*params };
        if p.num_exec_affinity != 0 || !p.cig.is_null() {
            return CUDA_ERROR_NOT_SUPPORTED;
        }
    }
    // SAFETY: same contract.
    unsafe { cuCtxCreate_v2(pctx, flags, dev) }
}

/// # Safety
/// No pointer arguments (the context is a handle).
#[no_mangle]
pub unsafe extern "C" fn cuCtxDestroy_v2(ctx: CUcontext) -> u32 {
    run(|g| {
        let h = ctx_val(ctx);
        g.ctx_destroy(h)?;
        current::forget(h);
        Ok(())
    })
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuCtxDestroy(ctx: CUcontext) -> u32 {
    // SAFETY: same contract.
    unsafe { cuCtxDestroy_v2(ctx) }
}

/// # Safety
/// `pctx` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCurrent(pctx: *mut CUcontext) -> u32 {
    // A real driver answers this from the calling thread's state, without a global lock;
    // so does the simulation (the thread's context stack is thread-local).
    code(initialized().and_then(|()| {
        // SAFETY: forwarded caller contract.
        unsafe { put(pctx, ctx_ptr(cur().unwrap_or(0))) }
    }))
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuCtxSetCurrent(ctx: CUcontext) -> u32 {
    run(|g| {
        let h = ctx_val(ctx);
        if h != 0 {
            g.ctx_device_activating(h)?;
        }
        current::set_current(h);
        Ok(())
    })
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuCtxPushCurrent_v2(ctx: CUcontext) -> u32 {
    run(|g| {
        let h = ctx_val(ctx);
        g.ctx_device_activating(h)?;
        current::push(h);
        Ok(())
    })
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuCtxPushCurrent(ctx: CUcontext) -> u32 {
    // SAFETY: same contract.
    unsafe { cuCtxPushCurrent_v2(ctx) }
}

/// # Safety
/// `pctx` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuCtxPopCurrent_v2(pctx: *mut CUcontext) -> u32 {
    code(with_gpu(|_| {
        let h = current::pop().ok_or(CuError::INVALID_CONTEXT)?;
        if !pctx.is_null() {
            // SAFETY: non-null and valid per the caller's contract.
            unsafe { pctx.write(ctx_ptr(h)) };
        }
        Ok(())
    }))
}

/// # Safety
/// `pctx` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuCtxPopCurrent(pctx: *mut CUcontext) -> u32 {
    // SAFETY: same contract.
    unsafe { cuCtxPopCurrent_v2(pctx) }
}

/// # Safety
/// `device` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetDevice(device: *mut c_int) -> u32 {
    code(with_gpu(|g| {
        let d = g.current_device(cur())?;
        // SAFETY: forwarded caller contract.
        unsafe { put(device, d as c_int) }
    }))
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuCtxSynchronize() -> u32 {
    run(|g| {
        let d = g.current_device(cur())?;
        g.synchronize_device(d);
        Ok(())
    })
}

/// # Safety
/// `flags` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetFlags(flags: *mut c_uint) -> u32 {
    code(with_gpu(|g| {
        let c = cur().ok_or(CuError::INVALID_CONTEXT)?;
        let f = g.ctx_flags(c)?;
        // SAFETY: forwarded caller contract.
        unsafe { put(flags, f) }
    }))
}

/// # Safety
/// `version` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetApiVersion(ctx: CUcontext, version: *mut c_uint) -> u32 {
    code(with_gpu(|g| {
        let h = if ctx.is_null() {
            cur().ok_or(CuError::INVALID_CONTEXT)?
        } else {
            ctx_val(ctx)
        };
        g.ctx_device(h)?;
        // SAFETY: forwarded caller contract.
        unsafe { put(version, 3020) }
    }))
}

/// # Safety
/// `id` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetId(ctx: CUcontext, id: *mut u64) -> u32 {
    code(with_gpu(|g| {
        let h = if ctx.is_null() {
            cur().ok_or(CuError::INVALID_CONTEXT)?
        } else {
            ctx_val(ctx)
        };
        g.ctx_device(h)?;
        // SAFETY: forwarded caller contract.
        unsafe { put(id, h & 0xff_ffff_ffff) }
    }))
}

/// # Safety
/// `least` and `greatest` must be NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetStreamPriorityRange(
    least: *mut c_int,
    greatest: *mut c_int,
) -> u32 {
    code(with_gpu(|g| {
        g.current_device(cur())?;
        // SAFETY: NULL is allowed for either; otherwise valid per the caller's contract.
        unsafe {
            if !least.is_null() {
                least.write(0);
            }
            if !greatest.is_null() {
                greatest.write(-5);
            }
        }
        Ok(())
    }))
}

/// Peer access granted from one context to another's device memory: (context, peer).
static PEERS: std::sync::Mutex<Vec<(u64, u64)>> = std::sync::Mutex::new(Vec::new());

/// The current context and `peer`, checked as the driver checks them: both must exist and
/// be on different devices (`cuDeviceCanAccessPeer` says every other device can).
fn peer_pair(peer: u64) -> fragprobe_simgpu::codes::CuResult<(u64, u64)> {
    use fragprobe_simgpu::codes::CuError;
    let me = cur().ok_or(CuError::INVALID_CONTEXT)?;
    with_gpu(|g| {
        let a = g.ctx_device(me)?;
        let b = g.ctx_device(peer).map_err(|_| CuError::INVALID_CONTEXT)?;
        if a == b {
            return Err(CuError::INVALID_DEVICE);
        }
        Ok((me, peer))
    })
}

/// Lets the current context reach `peer`'s memory (copies between them are no-ops like
/// every copy into the device here).
///
/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuCtxEnablePeerAccess(peer: u64, flags: c_uint) -> u32 {
    if flags != 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    match peer_pair(peer) {
        Err(e) => code(Err(e)),
        Ok(pair) => {
            let mut v = PEERS.lock().unwrap_or_else(|e| e.into_inner());
            if v.contains(&pair) {
                return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
            }
            v.push(pair);
            CUDA_SUCCESS
        }
    }
}

/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuCtxDisablePeerAccess(peer: u64) -> u32 {
    match peer_pair(peer) {
        Err(e) => code(Err(e)),
        Ok(pair) => {
            let mut v = PEERS.lock().unwrap_or_else(|e| e.into_inner());
            match v.iter().position(|p| *p == pair) {
                Some(i) => {
                    v.swap_remove(i);
                    CUDA_SUCCESS
                }
                None => CUDA_ERROR_PEER_ACCESS_NOT_ENABLED,
            }
        }
    }
}
