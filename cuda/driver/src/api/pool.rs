//! Stream-ordered allocation and memory pools.

use super::{code, cur, put};
use crate::{latency, run, with_gpu};
use fragprobe_simgpu::codes::*;
use fragprobe_simgpu::pool::PoolAttr;
use std::ffi::{c_int, c_void};

type Handle = *mut c_void;

fn val(h: Handle) -> u64 {
    h as usize as u64
}

fn ptr(h: u64) -> Handle {
    h as usize as Handle
}

/// `CUmemLocation`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct MemLocation {
    pub kind: u32,
    pub id: c_int,
}

/// `CUmemAccessDesc`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct MemAccessDesc {
    pub location: MemLocation,
    pub flags: u32,
}

/// `CUmemPoolProps` (88 bytes).
#[repr(C)]
pub struct MemPoolProps {
    alloc_type: u32,
    handle_types: u32,
    location: MemLocation,
    win32_security_attributes: *mut c_void,
    max_size: usize,
    usage: u16,
    reserved: [u8; 54],
}

const _: () = assert!(std::mem::size_of::<MemPoolProps>() == 88);
const _: () = assert!(std::mem::size_of::<MemAccessDesc>() == 12);

/// # Safety
/// `dptr` must be NULL or valid for a write.
unsafe fn alloc_async(dptr: *mut u64, size: usize, stream: Handle) -> u32 {
    if dptr.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    latency();
    match with_gpu(|g| g.alloc_async(cur(), size as u64, val(stream))) {
        Ok(p) => {
            // SAFETY: non-null, valid per the caller's contract.
            unsafe { dptr.write(p) };
            CUDA_SUCCESS
        }
        Err(e) => e.0,
    }
}

/// # Safety
/// `dptr` must be NULL or valid for a write.
unsafe fn alloc_from_pool(dptr: *mut u64, size: usize, pool: Handle, stream: Handle) -> u32 {
    if dptr.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    latency();
    match with_gpu(|g| g.alloc_from_pool_async(cur(), size as u64, val(pool), val(stream))) {
        Ok(p) => {
            // SAFETY: non-null, valid per the caller's contract.
            unsafe { dptr.write(p) };
            CUDA_SUCCESS
        }
        Err(e) => e.0,
    }
}

fn free_async(dptr: u64, stream: Handle) -> u32 {
    latency();
    run(|g| g.free_async(cur(), dptr, val(stream)))
}

/// # Safety
/// `dptr` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocAsync(dptr: *mut u64, size: usize, stream: Handle) -> u32 {
    // SAFETY: same contract.
    unsafe { alloc_async(dptr, size, stream) }
}

/// # Safety
/// `dptr` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocAsync_ptsz(dptr: *mut u64, size: usize, stream: Handle) -> u32 {
    // SAFETY: same contract.
    unsafe { alloc_async(dptr, size, stream) }
}

/// # Safety
/// `dptr` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocFromPoolAsync(
    dptr: *mut u64,
    size: usize,
    pool: Handle,
    stream: Handle,
) -> u32 {
    // SAFETY: same contract.
    unsafe { alloc_from_pool(dptr, size, pool, stream) }
}

/// # Safety
/// `dptr` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocFromPoolAsync_ptsz(
    dptr: *mut u64,
    size: usize,
    pool: Handle,
    stream: Handle,
) -> u32 {
    // SAFETY: same contract.
    unsafe { alloc_from_pool(dptr, size, pool, stream) }
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuMemFreeAsync(dptr: u64, stream: Handle) -> u32 {
    free_async(dptr, stream)
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuMemFreeAsync_ptsz(dptr: u64, stream: Handle) -> u32 {
    free_async(dptr, stream)
}

/// # Safety
/// `pool` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetDefaultMemPool(pool: *mut Handle, dev: c_int) -> u32 {
    code(with_gpu(|g| {
        let d = g.check_device(dev)?;
        // SAFETY: forwarded caller contract.
        unsafe { put(pool, ptr(g.default_pool(d))) }
    }))
}

/// # Safety
/// `pool` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetMemPool(pool: *mut Handle, dev: c_int) -> u32 {
    code(with_gpu(|g| {
        let d = g.check_device(dev)?;
        // SAFETY: forwarded caller contract.
        unsafe { put(pool, ptr(g.current_pool(d))) }
    }))
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceSetMemPool(dev: c_int, pool: Handle) -> u32 {
    run(|g| {
        let d = g.check_device(dev)?;
        g.set_current_pool(d, val(pool))
    })
}

/// # Safety
/// `pool` must be NULL or valid for a write; `props` NULL or a valid `CUmemPoolProps`.
#[no_mangle]
pub unsafe extern "C" fn cuMemPoolCreate(pool: *mut Handle, props: *const MemPoolProps) -> u32 {
    code(with_gpu(|g| {
        if pool.is_null() || props.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        // SAFETY: non-null and valid per the caller's contract.
        let p = unsafe { &*props };
        let h = g.pool_create(
            p.alloc_type,
            p.location.kind,
            p.location.id,
            p.max_size as u64,
        )?;
        // SAFETY: forwarded caller contract.
        unsafe { put(pool, ptr(h)) }
    }))
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuMemPoolDestroy(pool: Handle) -> u32 {
    run(|g| g.pool_destroy(val(pool)))
}

/// # Safety
/// `value` must point to an `int` (attributes 1–3) or a `cuuint64_t` (4–8).
#[no_mangle]
pub unsafe extern "C" fn cuMemPoolGetAttribute(
    pool: Handle,
    attr: c_int,
    value: *mut c_void,
) -> u32 {
    code(with_gpu(|g| {
        if value.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        match g.pool_get_attribute(val(pool), attr)? {
            // SAFETY: the attribute's type per the caller's contract.
            PoolAttr::Int(v) => unsafe { put(value.cast::<c_int>(), v) },
            // SAFETY: the attribute's type per the caller's contract.
            PoolAttr::U64(v) => unsafe { put(value.cast::<u64>(), v) },
        }
    }))
}

/// # Safety
/// `value` must point to an `int` (attributes 1–3) or a `cuuint64_t` (4–8).
#[no_mangle]
pub unsafe extern "C" fn cuMemPoolSetAttribute(
    pool: Handle,
    attr: c_int,
    value: *mut c_void,
) -> u32 {
    code(with_gpu(|g| {
        if value.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        let v = match attr {
            // SAFETY: an int per the caller's contract.
            1..=3 => PoolAttr::Int(unsafe { value.cast::<c_int>().read() }),
            // SAFETY: a cuuint64_t per the caller's contract.
            4..=8 => PoolAttr::U64(unsafe { value.cast::<u64>().read() }),
            _ => return Err(CuError::INVALID_VALUE),
        };
        g.pool_set_attribute(val(pool), attr, v)
    }))
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuMemPoolTrimTo(pool: Handle, keep: usize) -> u32 {
    run(|g| g.pool_trim_to(val(pool), keep as u64))
}

/// # Safety
/// `map` must hold `count` descriptors.
#[no_mangle]
pub unsafe extern "C" fn cuMemPoolSetAccess(
    pool: Handle,
    map: *const MemAccessDesc,
    count: usize,
) -> u32 {
    run(|g| {
        g.pool(val(pool))?;
        if map.is_null() || count == 0 {
            return Err(CuError::INVALID_VALUE);
        }
        for i in 0..count {
            // SAFETY: `map` holds `count` descriptors per the caller's contract.
            let d = unsafe { *map.add(i) };
            if d.location.kind != 1 || d.flags > 3 {
                return Err(CuError::INVALID_VALUE);
            }
            g.check_device(d.location.id)?;
        }
        Ok(())
    })
}

/// Read-write for the pool's own device, none for others.
///
/// # Safety
/// `flags` must be NULL or valid for a write; `location` NULL or valid for a read.
#[no_mangle]
pub unsafe extern "C" fn cuMemPoolGetAccess(
    flags: *mut u32,
    pool: Handle,
    location: *const MemLocation,
) -> u32 {
    code(with_gpu(|g| {
        let owner = g.pool(val(pool))?.device;
        if location.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        // SAFETY: non-null and valid per the caller's contract.
        let loc = unsafe { *location };
        let d = g.check_device(loc.id)?;
        // SAFETY: forwarded caller contract.
        unsafe { put(flags, if d == owner { 3 } else { 0 }) }
    }))
}

/// CUDA graphs' own memory (`CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT` … `_RESERVED_MEM_HIGH`,
/// 0–3): always 0 — the simulation instantiates no graph that allocates. PyTorch's
/// `backend:cudaMallocAsync` reads these in `torch.cuda.memory_stats()`.
///
/// # Safety
/// `value` must be NULL or valid for a write of a `cuuint64_t`.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetGraphMemAttribute(
    dev: c_int,
    attr: c_int,
    value: *mut u64,
) -> u32 {
    code(with_gpu(|g| {
        g.check_device(dev)?;
        if !(0..=3).contains(&attr) {
            return Err(CuError::INVALID_VALUE);
        }
        // SAFETY: forwarded caller contract.
        unsafe { put(value, 0) }
    }))
}

/// Resets a high-water mark (`_USED_MEM_HIGH` 1, `_RESERVED_MEM_HIGH` 3) to 0, the only
/// value a real driver accepts; the current figures cannot be set.
///
/// # Safety
/// `value` must be NULL or valid for a read of a `cuuint64_t`.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceSetGraphMemAttribute(
    dev: c_int,
    attr: c_int,
    value: *const u64,
) -> u32 {
    code(with_gpu(|g| {
        g.check_device(dev)?;
        // SAFETY: non-null checked first; readable per the caller's contract.
        if !matches!(attr, 1 | 3) || value.is_null() || unsafe { value.read() } != 0 {
            return Err(CuError::INVALID_VALUE);
        }
        Ok(())
    }))
}

/// Nothing to trim: graphs hold no memory here.
///
/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGraphMemTrim(dev: c_int) -> u32 {
    code(with_gpu(|g| g.check_device(dev).map(|_| ())))
}
