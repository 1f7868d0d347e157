//! Virtual memory management entry points.

use super::pool::{MemAccessDesc, MemLocation};
use super::{code, cur, put};
use crate::{latency, run, with_gpu};
use fragprobe_simgpu::codes::*;
use fragprobe_simgpu::layout::VMM_GRANULARITY;
use std::ffi::{c_int, c_void};

/// `CUmemAllocationProp` (32 bytes).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct MemAllocationProp {
    pub kind: u32,
    pub requested_handle_types: u32,
    pub location: MemLocation,
    pub win32_handle_meta_data: *mut c_void,
    pub compression_type: u8,
    pub gpu_direct_rdma_capable: u8,
    pub usage: u16,
    pub reserved: [u8; 4],
}

const _: () = assert!(std::mem::size_of::<MemAllocationProp>() == 32);

/// # Safety
/// `ptr` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuMemAddressReserve(
    ptr: *mut u64,
    size: usize,
    alignment: usize,
    addr: u64,
    flags: u64,
) -> u32 {
    code(with_gpu(|g| {
        if ptr.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        let p = g.address_reserve(cur(), size as u64, alignment as u64, addr, flags)?;
        // SAFETY: forwarded caller contract.
        unsafe { put(ptr, p) }
    }))
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuMemAddressFree(ptr: u64, size: usize) -> u32 {
    run(|g| g.address_free(ptr, size as u64))
}

/// # Safety
/// `handle` must be NULL or valid for a write; `prop` NULL or a valid
/// `CUmemAllocationProp`.
#[no_mangle]
pub unsafe extern "C" fn cuMemCreate(
    handle: *mut u64,
    size: usize,
    prop: *const MemAllocationProp,
    flags: u64,
) -> u32 {
    if handle.is_null() || prop.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: non-null and valid per the caller's contract.
    let p = unsafe { *prop };
    latency();
    code(with_gpu(|g| {
        let h = g.mem_create(size as u64, p.kind, p.location.kind, p.location.id, flags)?;
        // SAFETY: forwarded caller contract.
        unsafe { put(handle, h) }
    }))
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuMemRelease(handle: u64) -> u32 {
    latency();
    run(|g| g.mem_release(handle))
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuMemMap(
    ptr: u64,
    size: usize,
    offset: usize,
    handle: u64,
    flags: u64,
) -> u32 {
    run(|g| g.mem_map(ptr, size as u64, offset as u64, handle, flags))
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuMemUnmap(ptr: u64, size: usize) -> u32 {
    latency();
    run(|g| g.mem_unmap(ptr, size as u64).map(|_| ()))
}

/// # Safety
/// `desc` must hold `count` descriptors.
#[no_mangle]
pub unsafe extern "C" fn cuMemSetAccess(
    ptr: u64,
    size: usize,
    desc: *const MemAccessDesc,
    count: usize,
) -> u32 {
    if desc.is_null() || count == 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let descs: Vec<(u32, i32, u32)> = (0..count)
        .map(|i| {
            // SAFETY: `desc` holds `count` descriptors per the caller's contract.
            let d = unsafe { *desc.add(i) };
            (d.location.kind, d.location.id, d.flags)
        })
        .collect();
    run(|g| g.mem_set_access(ptr, size as u64, &descs))
}

/// # Safety
/// `flags` must be NULL or valid for a write; `location` NULL or valid for a read.
#[no_mangle]
pub unsafe extern "C" fn cuMemGetAccess(
    flags: *mut u64,
    location: *const MemLocation,
    ptr: u64,
) -> u32 {
    code(with_gpu(|g| {
        if location.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        // SAFETY: non-null and valid per the caller's contract.
        let loc = unsafe { *location };
        g.check_device(loc.id)?;
        g.pointer_info(ptr)
            .filter(|i| i.mapped_vmm)
            .ok_or(CuError::INVALID_VALUE)?;
        // SAFETY: forwarded caller contract.
        unsafe { put(flags, 3) }
    }))
}

/// Minimum and recommended granularity are both 2 MiB.
///
/// # Safety
/// `granularity` must be NULL or valid for a write; `prop` NULL or valid for a read.
#[no_mangle]
pub unsafe extern "C" fn cuMemGetAllocationGranularity(
    granularity: *mut usize,
    prop: *const MemAllocationProp,
    option: c_int,
) -> u32 {
    code(with_gpu(|g| {
        if prop.is_null() || !(0..=1).contains(&option) {
            return Err(CuError::INVALID_VALUE);
        }
        // SAFETY: non-null and valid per the caller's contract.
        let p = unsafe { *prop };
        if p.kind != 1 || p.location.kind != 1 {
            return Err(CuError::INVALID_VALUE);
        }
        g.check_device(p.location.id)?;
        // SAFETY: forwarded caller contract.
        unsafe { put(granularity, VMM_GRANULARITY as usize) }
    }))
}

/// # Safety
/// `prop` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuMemGetAllocationPropertiesFromHandle(
    prop: *mut MemAllocationProp,
    handle: u64,
) -> u32 {
    code(with_gpu(|g| {
        let (_, d) = g.phys_info(handle)?;
        let p = MemAllocationProp {
            kind: 1,
            requested_handle_types: 0,
            location: MemLocation {
                kind: 1,
                id: d as c_int,
            },
            win32_handle_meta_data: std::ptr::null_mut(),
            compression_type: 0,
            gpu_direct_rdma_capable: 0,
            usage: 0,
            reserved: [0; 4],
        };
        // SAFETY: forwarded caller contract.
        unsafe { put(prop, p) }
    }))
}

/// # Safety
/// `handle` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuMemRetainAllocationHandle(handle: *mut u64, addr: *mut c_void) -> u32 {
    code(with_gpu(|g| {
        if handle.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        let h = g.retain_allocation_handle(addr as usize as u64)?;
        // SAFETY: forwarded caller contract.
        unsafe { put(handle, h) }
    }))
}
