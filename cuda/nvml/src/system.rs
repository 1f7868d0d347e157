//! Initialisation, error strings and system queries.

use crate::{put, put_str};
use fragprobe_simgpu::codes::*;
use fragprobe_simgpu::ident;
use std::ffi::{c_char, c_int, c_uint};

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn nvmlInit_v2() -> u32 {
    crate::init()
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn nvmlInit() -> u32 {
    crate::init()
}

/// Flags (`NVML_INIT_FLAG_NO_GPUS`, `NVML_INIT_FLAG_NO_ATTACH`) change nothing here.
///
/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> u32 {
    crate::init()
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn nvmlShutdown() -> u32 {
    crate::shutdown()
}

/// # Safety
/// No pointer arguments; the result is a static string.
#[no_mangle]
pub unsafe extern "C" fn nvmlErrorString(result: u32) -> *const c_char {
    nvml_message(result).as_ptr().cast()
}

/// # Safety
/// `version` must be valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetDriverVersion(version: *mut c_char, len: c_uint) -> u32 {
    // SAFETY: forwarded caller contract.
    crate::with_state(|_| unsafe {
        put_str(
            version,
            len,
            ident::display_driver_version_for(ident::driver_version()),
        )
    })
}

/// # Safety
/// `version` must be valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetNVMLVersion(version: *mut c_char, len: c_uint) -> u32 {
    // SAFETY: forwarded caller contract.
    crate::with_state(|_| unsafe {
        put_str(
            version,
            len,
            &ident::nvml_version_for(ident::driver_version()),
        )
    })
}

/// # Safety
/// `version` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion(version: *mut c_int) -> u32 {
    // SAFETY: forwarded caller contract.
    crate::with_state(|_| unsafe { put(version, ident::driver_version()) })
}

/// # Safety
/// `version` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetCudaDriverVersion_v2(version: *mut c_int) -> u32 {
    // SAFETY: forwarded caller contract.
    crate::with_state(|_| unsafe { put(version, ident::driver_version()) })
}

/// The process's command name (`/proc/<pid>/comm`).
///
/// # Safety
/// `name` must be valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn nvmlSystemGetProcessName(
    pid: c_uint,
    name: *mut c_char,
    len: c_uint,
) -> u32 {
    crate::with_state(
        |_| match std::fs::read_to_string(format!("/proc/{pid}/comm")) {
            Ok(comm) => {
                let comm = comm.trim_end();
                let take = comm.len().min(len.saturating_sub(1) as usize);
                // SAFETY: forwarded caller contract; the copy is truncated to fit.
                unsafe { put_str(name, len, comm.get(..take).unwrap_or("")) }
            }
            Err(_) => NVML_ERROR_NOT_FOUND,
        },
    )
}
