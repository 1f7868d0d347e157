//! Streams and events. Simulated work completes at once, so queries report completion and
//! synchronisation only serves as the pools' release point. The `_ptsz` variants (the
//! per-thread default stream) behave alike.

use super::{code, cur, put};
use crate::{run, with_gpu};
use fragprobe_simgpu::codes::*;
use std::ffi::{c_float, c_int, c_uint, c_void};

type Handle = *mut c_void;

fn val(h: Handle) -> u64 {
    h as usize as u64
}

fn ptr(h: u64) -> Handle {
    h as usize as Handle
}

/// # Safety
/// `stream` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuStreamCreate(stream: *mut Handle, flags: c_uint) -> u32 {
    // SAFETY: same contract.
    unsafe { cuStreamCreateWithPriority(stream, flags, 0) }
}

/// # Safety
/// `stream` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuStreamCreateWithPriority(
    stream: *mut Handle,
    flags: c_uint,
    priority: c_int,
) -> u32 {
    code(with_gpu(|g| {
        if stream.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        let h = g.stream_create(cur(), flags, priority)?;
        // SAFETY: forwarded caller contract.
        unsafe { put(stream, ptr(h)) }
    }))
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuStreamDestroy_v2(stream: Handle) -> u32 {
    run(|g| g.stream_destroy(val(stream)))
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuStreamDestroy(stream: Handle) -> u32 {
    run(|g| g.stream_destroy(val(stream)))
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuStreamSynchronize(stream: Handle) -> u32 {
    run(|g| g.stream_synchronize(cur(), val(stream)))
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuStreamSynchronize_ptsz(stream: Handle) -> u32 {
    run(|g| g.stream_synchronize(cur(), val(stream)))
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuStreamQuery(stream: Handle) -> u32 {
    run(|g| g.stream_device(cur(), val(stream)).map(|_| ()))
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuStreamQuery_ptsz(stream: Handle) -> u32 {
    run(|g| g.stream_device(cur(), val(stream)).map(|_| ()))
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuStreamWaitEvent(stream: Handle, event: Handle, flags: c_uint) -> u32 {
    if flags > 1 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    run(|g| g.stream_wait_event(cur(), val(stream), val(event)))
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuStreamWaitEvent_ptsz(
    stream: Handle,
    event: Handle,
    flags: c_uint,
) -> u32 {
    // SAFETY: same contract.
    unsafe { cuStreamWaitEvent(stream, event, flags) }
}

/// # Safety
/// `flags` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetFlags(stream: Handle, flags: *mut c_uint) -> u32 {
    code(with_gpu(|g| {
        let (f, _) = g.stream_info(cur(), val(stream))?;
        // SAFETY: forwarded caller contract.
        unsafe { put(flags, f) }
    }))
}

/// # Safety
/// `flags` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetFlags_ptsz(stream: Handle, flags: *mut c_uint) -> u32 {
    // SAFETY: same contract.
    unsafe { cuStreamGetFlags(stream, flags) }
}

/// # Safety
/// `priority` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetPriority(stream: Handle, priority: *mut c_int) -> u32 {
    code(with_gpu(|g| {
        let (_, p) = g.stream_info(cur(), val(stream))?;
        // SAFETY: forwarded caller contract.
        unsafe { put(priority, p) }
    }))
}

/// # Safety
/// `priority` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetPriority_ptsz(stream: Handle, priority: *mut c_int) -> u32 {
    // SAFETY: same contract.
    unsafe { cuStreamGetPriority(stream, priority) }
}

/// # Safety
/// `pctx` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCtx(stream: Handle, pctx: *mut Handle) -> u32 {
    code(with_gpu(|g| {
        let c = g.stream_ctx(cur(), val(stream))?;
        // SAFETY: forwarded caller contract.
        unsafe { put(pctx, ptr(c)) }
    }))
}

/// # Safety
/// `pctx` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetCtx_ptsz(stream: Handle, pctx: *mut Handle) -> u32 {
    // SAFETY: same contract.
    unsafe { cuStreamGetCtx(stream, pctx) }
}

/// # Safety
/// `device` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetDevice(stream: Handle, device: *mut c_int) -> u32 {
    code(with_gpu(|g| {
        let d = g.stream_device(cur(), val(stream))?;
        // SAFETY: forwarded caller contract.
        unsafe { put(device, d as c_int) }
    }))
}

/// # Safety
/// `device` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuStreamGetDevice_ptsz(stream: Handle, device: *mut c_int) -> u32 {
    // SAFETY: same contract.
    unsafe { cuStreamGetDevice(stream, device) }
}

/// # Safety
/// `event` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuEventCreate(event: *mut Handle, flags: c_uint) -> u32 {
    code(with_gpu(|g| {
        if event.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        let h = g.event_create(cur(), flags)?;
        // SAFETY: forwarded caller contract.
        unsafe { put(event, ptr(h)) }
    }))
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuEventRecord(event: Handle, stream: Handle) -> u32 {
    run(|g| g.event_record(cur(), val(event), val(stream)))
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuEventRecord_ptsz(event: Handle, stream: Handle) -> u32 {
    run(|g| g.event_record(cur(), val(event), val(stream)))
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuEventRecordWithFlags(
    event: Handle,
    stream: Handle,
    flags: c_uint,
) -> u32 {
    if flags > 1 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    run(|g| g.event_record(cur(), val(event), val(stream)))
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuEventRecordWithFlags_ptsz(
    event: Handle,
    stream: Handle,
    flags: c_uint,
) -> u32 {
    // SAFETY: same contract.
    unsafe { cuEventRecordWithFlags(event, stream, flags) }
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuEventQuery(event: Handle) -> u32 {
    run(|g| g.event_check(val(event), false))
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuEventSynchronize(event: Handle) -> u32 {
    run(|g| g.event_check(val(event), true))
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuEventDestroy_v2(event: Handle) -> u32 {
    run(|g| g.event_destroy(val(event)))
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuEventDestroy(event: Handle) -> u32 {
    run(|g| g.event_destroy(val(event)))
}

/// # Safety
/// `ms` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuEventElapsedTime(ms: *mut c_float, start: Handle, end: Handle) -> u32 {
    code(with_gpu(|g| {
        if ms.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        let t = g.event_elapsed(val(start), val(end))?;
        // SAFETY: forwarded caller contract.
        unsafe { put(ms, t) }
    }))
}

/// # Safety
/// `ms` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuEventElapsedTime_v2(
    ms: *mut c_float,
    start: Handle,
    end: Handle,
) -> u32 {
    // SAFETY: same contract.
    unsafe { cuEventElapsedTime(ms, start, end) }
}
