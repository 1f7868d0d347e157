//! Initialisation, version, device queries, error strings.

use super::{code, put};
use crate::with_gpu;
use fragprobe_simgpu::codes::*;
use fragprobe_simgpu::ident;
use std::ffi::{c_char, c_int, c_uint, CStr};

/// Copies `s` into a C buffer of `len` bytes, truncating, always NUL-terminated.
///
/// # Safety
/// `dst` must be valid for `len` bytes of writes.
unsafe fn copy_str(dst: *mut c_char, len: c_int, s: &str) -> CuResult<()> {
    if dst.is_null() || len <= 0 {
        return Err(CuError::INVALID_VALUE);
    }
    let n = s.len().min(len as usize - 1);
    // SAFETY: `dst` holds `len` bytes (caller contract) and n + 1 <= len.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr().cast::<c_char>(), dst, n);
        *dst.add(n) = 0;
    }
    Ok(())
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuInit(flags: c_uint) -> u32 {
    if flags != 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    crate::init()
}

/// # Safety
/// `version` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuDriverGetVersion(version: *mut c_int) -> u32 {
    // SAFETY: forwarded caller contract.
    code(unsafe { put(version, ident::driver_version()) })
}

/// # Safety
/// `count` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetCount(count: *mut c_int) -> u32 {
    code(with_gpu(|g| {
        // SAFETY: forwarded caller contract.
        unsafe { put(count, g.device_count() as c_int) }
    }))
}

/// # Safety
/// `device` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGet(device: *mut c_int, ordinal: c_int) -> u32 {
    code(with_gpu(|g| {
        if device.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        let d = g.check_device(ordinal)?;
        // SAFETY: forwarded caller contract.
        unsafe { put(device, d as c_int) }
    }))
}

/// # Safety
/// `name` must be valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetName(name: *mut c_char, len: c_int, dev: c_int) -> u32 {
    code(with_gpu(|g| {
        let d = g.check_device(dev)?;
        // SAFETY: forwarded caller contract.
        unsafe { copy_str(name, len, &ident::name(g.device_size(d))) }
    }))
}

/// # Safety
/// `uuid` must be NULL or valid for 16 bytes.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetUuid(uuid: *mut [u8; 16], dev: c_int) -> u32 {
    code(with_gpu(|g| {
        let d = g.check_device(dev)?;
        // SAFETY: forwarded caller contract.
        unsafe { put(uuid, ident::uuid(g.physical(d))) }
    }))
}

/// # Safety
/// `uuid` must be NULL or valid for 16 bytes.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetUuid_v2(uuid: *mut [u8; 16], dev: c_int) -> u32 {
    // SAFETY: same contract.
    unsafe { cuDeviceGetUuid(uuid, dev) }
}

/// # Safety
/// `bytes` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem_v2(bytes: *mut usize, dev: c_int) -> u32 {
    code(with_gpu(|g| {
        let d = g.check_device(dev)?;
        // SAFETY: forwarded caller contract.
        unsafe { put(bytes, g.device_size(d) as usize) }
    }))
}

/// The pre-3.2 entry point with a 32-bit size: clamped, as the real one does.
///
/// # Safety
/// `bytes` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceTotalMem(bytes: *mut c_uint, dev: c_int) -> u32 {
    code(with_gpu(|g| {
        let d = g.check_device(dev)?;
        // SAFETY: forwarded caller contract.
        unsafe { put(bytes, g.device_size(d).min(u32::MAX as u64) as c_uint) }
    }))
}

/// # Safety
/// `value` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetAttribute(value: *mut c_int, attrib: c_int, dev: c_int) -> u32 {
    code(with_gpu(|g| {
        let d = g.check_device(dev)?;
        let v = ident::attribute(attrib, g.physical(d)).ok_or(CuError::INVALID_VALUE)?;
        // SAFETY: forwarded caller contract.
        unsafe { put(value, v) }
    }))
}

/// # Safety
/// `major` and `minor` must be NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceComputeCapability(
    major: *mut c_int,
    minor: *mut c_int,
    dev: c_int,
) -> u32 {
    code(with_gpu(|g| {
        let d = g.check_device(dev)?;
        // SAFETY: forwarded caller contract.
        unsafe {
            put(major, ident::attribute(75, g.physical(d)).unwrap_or(9))?;
            put(minor, ident::attribute(76, g.physical(d)).unwrap_or(0))
        }
    }))
}

/// # Safety
/// `bus_id` must be valid for `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetPCIBusId(bus_id: *mut c_char, len: c_int, dev: c_int) -> u32 {
    code(with_gpu(|g| {
        let d = g.check_device(dev)?;
        // SAFETY: forwarded caller contract.
        unsafe { copy_str(bus_id, len, &ident::pci_bus_id(g.physical(d))) }
    }))
}

/// Accepts `[domain]:[bus]:[device].[function]` with or without the domain, any case.
///
/// # Safety
/// `dev` must be NULL or valid for a write; `bus_id` NULL or a C string.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceGetByPCIBusId(dev: *mut c_int, bus_id: *const c_char) -> u32 {
    code(with_gpu(|g| {
        if bus_id.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        // SAFETY: non-null C string per the caller's contract.
        let text = unsafe { CStr::from_ptr(bus_id) }
            .to_string_lossy()
            .to_ascii_lowercase();
        let found = (0..g.device_count()).find(|&d| {
            let p = g.physical(d);
            let full = ident::pci_bus_id(p);
            text == full || text == ident::nvml_bus_id(p) || full.ends_with(&text)
        });
        let d = found.ok_or(CuError::INVALID_DEVICE)?;
        // SAFETY: forwarded caller contract.
        unsafe { put(dev, d as c_int) }
    }))
}

/// # Safety
/// `can` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuDeviceCanAccessPeer(can: *mut c_int, dev: c_int, peer: c_int) -> u32 {
    code(with_gpu(|g| {
        let a = g.check_device(dev)?;
        let b = g.check_device(peer)?;
        // SAFETY: forwarded caller contract.
        unsafe { put(can, (a != b) as c_int) }
    }))
}

/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuGetErrorName(error: u32, out: *mut *const c_char) -> u32 {
    match driver_code(error) {
        Some((name, _)) => {
            // SAFETY: forwarded caller contract; the string is static and NUL-terminated.
            code(unsafe { put(out, name.as_ptr().cast()) })
        }
        None => {
            // SAFETY: forwarded caller contract.
            let _ = unsafe { put(out, std::ptr::null()) };
            CUDA_ERROR_INVALID_VALUE
        }
    }
}

/// # Safety
/// `out` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuGetErrorString(error: u32, out: *mut *const c_char) -> u32 {
    match driver_code(error) {
        Some((_, msg)) => {
            // SAFETY: forwarded caller contract; the string is static and NUL-terminated.
            code(unsafe { put(out, msg.as_ptr().cast()) })
        }
        None => {
            // SAFETY: forwarded caller contract.
            let _ = unsafe { put(out, std::ptr::null()) };
            CUDA_ERROR_INVALID_VALUE
        }
    }
}
