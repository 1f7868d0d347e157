//! `cuMemAlloc`-family entry points (current `_v2` and legacy 32-bit forms), memory info
//! and pointer queries.

use super::{code, cur, put};
use crate::{latency, run, with_gpu};
use fragprobe_simgpu::codes::*;
use fragprobe_simgpu::mem::PtrAttr;
use std::ffi::{c_uint, c_void};

/// # Safety
/// `dptr` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc_v2(dptr: *mut u64, bytesize: usize) -> u32 {
    if dptr.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    latency();
    match with_gpu(|g| g.mem_alloc(cur(), bytesize as u64)) {
        Ok(p) => {
            // SAFETY: non-null, valid per the caller's contract.
            unsafe { dptr.write(p) };
            CUDA_SUCCESS
        }
        Err(e) => e.0,
    }
}

/// # Safety
/// `dptr` and `pitch` must be NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocPitch_v2(
    dptr: *mut u64,
    pitch: *mut usize,
    width: usize,
    height: usize,
    elem: c_uint,
) -> u32 {
    if dptr.is_null() || pitch.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    latency();
    match with_gpu(|g| g.mem_alloc_pitch(cur(), width as u64, height as u64, elem)) {
        Ok((p, pi)) => {
            // SAFETY: both non-null, valid per the caller's contract.
            unsafe {
                dptr.write(p);
                pitch.write(pi as usize);
            }
            CUDA_SUCCESS
        }
        Err(e) => e.0,
    }
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuMemFree_v2(dptr: u64) -> u32 {
    latency();
    run(|g| g.mem_free(cur(), dptr))
}

/// Legacy 32-bit `cuMemAlloc(CUdeviceptr_v1 *, unsigned int)`: served from the simulation's
/// window below 4 GiB.
///
/// # Safety
/// `dptr` must be NULL or valid for a 4-byte write.
#[no_mangle]
pub unsafe extern "C" fn cuMemAlloc(dptr: *mut u32, bytesize: c_uint) -> u32 {
    if dptr.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    latency();
    match with_gpu(|g| g.mem_alloc_legacy(cur(), bytesize as u64)) {
        Ok(p) => {
            // SAFETY: non-null, valid per the caller's contract.
            unsafe { dptr.write(p) };
            CUDA_SUCCESS
        }
        Err(e) => e.0,
    }
}

/// Legacy 32-bit `cuMemAllocPitch`.
///
/// # Safety
/// `dptr` and `pitch` must be NULL or valid for 4-byte writes.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocPitch(
    dptr: *mut u32,
    pitch: *mut c_uint,
    width: c_uint,
    height: c_uint,
    elem: c_uint,
) -> u32 {
    if dptr.is_null() || pitch.is_null() || width == 0 || height == 0 || !matches!(elem, 4 | 8 | 16)
    {
        return CUDA_ERROR_INVALID_VALUE;
    }
    latency();
    let pi = (width as u64).div_ceil(512) * 512;
    let Some(size) = pi.checked_mul(height as u64) else {
        return CUDA_ERROR_OUT_OF_MEMORY;
    };
    match with_gpu(|g| g.mem_alloc_legacy(cur(), size)) {
        Ok(p) => {
            // SAFETY: both non-null, valid per the caller's contract.
            unsafe {
                dptr.write(p);
                pitch.write(pi as c_uint);
            }
            CUDA_SUCCESS
        }
        Err(e) => e.0,
    }
}

/// Legacy 32-bit `cuMemFree(CUdeviceptr_v1)`.
///
/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuMemFree(dptr: u32) -> u32 {
    latency();
    run(|g| g.mem_free(cur(), dptr as u64))
}

/// Either pointer may be NULL.
///
/// # Safety
/// `free` and `total` must each be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo_v2(free: *mut usize, total: *mut usize) -> u32 {
    code(with_gpu(|g| {
        let (f, t) = g.mem_get_info(cur())?;
        // SAFETY: each is NULL (skipped) or valid per the caller's contract.
        unsafe {
            if !free.is_null() {
                free.write(f as usize);
            }
            if !total.is_null() {
                total.write(t as usize);
            }
        }
        Ok(())
    }))
}

/// Legacy 32-bit form: values clamped to 4 GiB − 1.
///
/// # Safety
/// `free` and `total` must each be NULL or valid for a 4-byte write.
#[no_mangle]
pub unsafe extern "C" fn cuMemGetInfo(free: *mut c_uint, total: *mut c_uint) -> u32 {
    code(with_gpu(|g| {
        let (f, t) = g.mem_get_info(cur())?;
        let clamp = |v: u64| v.min(u32::MAX as u64) as c_uint;
        // SAFETY: each is NULL (skipped) or valid per the caller's contract.
        unsafe {
            if !free.is_null() {
                free.write(clamp(f));
            }
            if !total.is_null() {
                total.write(clamp(t));
            }
        }
        Ok(())
    }))
}

/// # Safety
/// `dptr` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocManaged(dptr: *mut u64, bytesize: usize, flags: c_uint) -> u32 {
    if dptr.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    latency();
    match with_gpu(|g| g.mem_alloc_managed(cur(), bytesize as u64, flags)) {
        Ok(p) => {
            // SAFETY: non-null, valid per the caller's contract.
            unsafe { dptr.write(p) };
            CUDA_SUCCESS
        }
        Err(e) => e.0,
    }
}

/// # Safety
/// `base` and `size` must each be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuMemGetAddressRange_v2(
    base: *mut u64,
    size: *mut usize,
    dptr: u64,
) -> u32 {
    code(with_gpu(|g| {
        let (b, s) = g.address_range(dptr)?;
        // SAFETY: each is NULL (skipped) or valid per the caller's contract.
        unsafe {
            if !base.is_null() {
                base.write(b);
            }
            if !size.is_null() {
                size.write(s as usize);
            }
        }
        Ok(())
    }))
}

/// Bytes an attribute's value takes (pointer-sized ones are 8).
fn attr_size(attr: i32) -> usize {
    match attr {
        1 | 3 | 4 | 7 | 11 | 12 | 17 => 8,
        _ => 4,
    }
}

/// # Safety
/// `data` must be valid for a write of the attribute's type.
unsafe fn write_attr(data: *mut c_void, v: PtrAttr) -> CuResult<()> {
    match v {
        // SAFETY: forwarded caller contract.
        PtrAttr::U64(x) => unsafe { put(data.cast::<u64>(), x) },
        // SAFETY: forwarded caller contract.
        PtrAttr::U32(x) => unsafe { put(data.cast::<u32>(), x) },
    }
}

/// # Safety
/// `data` must be valid for a write of the attribute's type.
#[no_mangle]
pub unsafe extern "C" fn cuPointerGetAttribute(data: *mut c_void, attribute: i32, ptr: u64) -> u32 {
    code(with_gpu(|g| {
        if data.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        let v = g.pointer_attribute(attribute, ptr)?;
        // SAFETY: forwarded caller contract.
        unsafe { write_attr(data, v) }
    }))
}

/// Unknown pointers give default (zero) values instead of an error, as documented.
///
/// # Safety
/// `attributes` and `data` must hold `count` entries; each `data[i]` must be NULL or valid
/// for a write of attribute `i`'s type.
#[no_mangle]
pub unsafe extern "C" fn cuPointerGetAttributes(
    count: c_uint,
    attributes: *const i32,
    data: *mut *mut c_void,
    ptr: u64,
) -> u32 {
    code(with_gpu(|g| {
        if attributes.is_null() || data.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        for i in 0..count as usize {
            // SAFETY: both arrays hold `count` entries per the caller's contract.
            let (attr, out) = unsafe { (*attributes.add(i), *data.add(i)) };
            if out.is_null() {
                continue;
            }
            let v = match g.pointer_attribute(attr, ptr) {
                Ok(v) => v,
                Err(e) if e == CuError::INVALID_VALUE && (1..=21).contains(&attr) => {
                    if attr_size(attr) == 8 {
                        PtrAttr::U64(0)
                    } else {
                        PtrAttr::U32(0)
                    }
                }
                Err(e) => return Err(e),
            };
            // SAFETY: forwarded caller contract.
            unsafe { write_attr(out, v)? };
        }
        Ok(())
    }))
}
