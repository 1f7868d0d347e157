//! `cuGetProcAddress` (CUDA 11.3, 4 arguments) and `cuGetProcAddress_v2` (CUDA 12.0, with a
//! status). They work before `cuInit`, as the real ones do.

use crate::proc::{resolve, FOUND};
use fragprobe_simgpu::codes::*;
use std::ffi::{c_char, c_int, c_void, CStr};

/// # Safety
/// `symbol` must be NULL or a C string; `pfn` NULL or valid for a write; `status` NULL or
/// valid for a write.
unsafe fn get_proc(
    symbol: *const c_char,
    pfn: *mut *const c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> u32 {
    if symbol.is_null() || pfn.is_null() || flags > 2 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: non-null C string per the caller's contract.
    let name = unsafe { CStr::from_ptr(symbol) }.to_bytes();
    let (p, st, rc) = match resolve(name, version, flags) {
        Ok(p) => (p, FOUND, CUDA_SUCCESS),
        Err(st) => (std::ptr::null(), st, CUDA_ERROR_NOT_FOUND),
    };
    // SAFETY: `pfn` non-null and valid; `status` NULL (skipped) or valid — caller contract.
    unsafe {
        pfn.write(p);
        if !status.is_null() {
            status.write(st);
        }
    }
    rc
}

/// # Safety
/// `symbol` must be NULL or a C string; `pfn` NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress(
    symbol: *const c_char,
    pfn: *mut *const c_void,
    version: c_int,
    flags: u64,
) -> u32 {
    // SAFETY: same contract.
    unsafe { get_proc(symbol, pfn, version, flags, std::ptr::null_mut()) }
}

/// # Safety
/// `symbol` must be NULL or a C string; `pfn` and `status` NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn cuGetProcAddress_v2(
    symbol: *const c_char,
    pfn: *mut *const c_void,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> u32 {
    // SAFETY: same contract.
    unsafe { get_proc(symbol, pfn, version, flags, status) }
}
