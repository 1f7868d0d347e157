//! How the runtime reaches the driver: exactly as NVIDIA's `libcudart.so.12` does. On first
//! use it opens the driver, `libcuda.so.1`, with `dlopen`, finds
//! `cuGetProcAddress_v2` with `dlsym`, and then makes the same 419 `cuGetProcAddress_v2`
//! requests, in the same order, that the real 12.8 runtime makes at start-up (the list is
//! the `cudart-12.8-getproc-requests.txt` fixture). Every driver function the runtime calls
//! is one of the pointers those requests returned — never an exported `cuMem*` symbol — so
//! an interposer sees the runtime's driver calls only through its `cuGetProcAddress_v2`.

use fragprobe_simgpu::codes::{CUDA_RT_ERROR_INSUFFICIENT_DRIVER, CUDA_RT_SUCCESS};
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_uint, c_void, CString};
use std::sync::OnceLock;

/// The start-up requests of the real runtime: `name, ver=N, flags=F` per line.
const REQUESTS: &str = include_str!("../../fixtures/cudart-12.8-getproc-requests.txt");

pub type Ptr = *mut c_void;
type GetProc = unsafe extern "C" fn(*const c_char, *mut Ptr, c_int, u64, *mut c_int) -> u32;

/// Driver entry points the runtime uses (pointers from `cuGetProcAddress_v2`).
pub struct Driver {
    pub get_proc: GetProc,
    pub init: unsafe extern "C" fn(c_uint) -> u32,
    pub driver_get_version: unsafe extern "C" fn(*mut c_int) -> u32,
    pub device_get_count: unsafe extern "C" fn(*mut c_int) -> u32,
    pub primary_ctx_retain: unsafe extern "C" fn(*mut Ptr, c_int) -> u32,
    pub ctx_get_current: unsafe extern "C" fn(*mut Ptr) -> u32,
    pub ctx_set_current: unsafe extern "C" fn(Ptr) -> u32,
    pub ctx_synchronize: unsafe extern "C" fn() -> u32,
    pub mem_get_info: unsafe extern "C" fn(*mut usize, *mut usize) -> u32,
    pub mem_alloc: unsafe extern "C" fn(*mut u64, usize) -> u32,
    pub mem_alloc_pitch: unsafe extern "C" fn(*mut u64, *mut usize, usize, usize, c_uint) -> u32,
    pub mem_free: unsafe extern "C" fn(u64) -> u32,
    pub mem_alloc_managed: unsafe extern "C" fn(*mut u64, usize, c_uint) -> u32,
    /// Index 0: legacy default stream (flags 0), 1: per-thread default stream (flags 2).
    pub mem_alloc_async: [unsafe extern "C" fn(*mut u64, usize, Ptr) -> u32; 2],
    pub mem_alloc_from_pool_async: [unsafe extern "C" fn(*mut u64, usize, Ptr, Ptr) -> u32; 2],
    pub mem_free_async: [unsafe extern "C" fn(u64, Ptr) -> u32; 2],
    pub stream_synchronize: [unsafe extern "C" fn(Ptr) -> u32; 2],
    pub stream_create: unsafe extern "C" fn(*mut Ptr, c_uint) -> u32,
    pub stream_destroy: unsafe extern "C" fn(Ptr) -> u32,
    pub device_get_default_mem_pool: unsafe extern "C" fn(*mut Ptr, c_int) -> u32,
    pub mem_pool_trim_to: unsafe extern "C" fn(Ptr, usize) -> u32,
}

// SAFETY: the fields are function pointers into the driver library, which stays loaded for
// the life of the process.
unsafe impl Send for Driver {}
// SAFETY: as above; the functions themselves are thread-safe as the CUDA API requires.
unsafe impl Sync for Driver {}

static DRIVER: OnceLock<Result<Driver, u32>> = OnceLock::new();

/// The driver, loaded and initialised on first use; the `cudaError_t` of a failure.
pub fn driver() -> Result<&'static Driver, u32> {
    DRIVER.get_or_init(load).as_ref().map_err(|&e| e)
}

/// Reinterprets a driver entry point as a typed function pointer.
///
/// # Safety
/// `F` must be the `unsafe extern "C" fn` type of the function at `p`.
unsafe fn fn_from_ptr<F: Copy>(p: Ptr) -> F {
    const { assert!(std::mem::size_of::<F>() == std::mem::size_of::<Ptr>()) };
    // SAFETY: same size (checked above); validity per the caller's contract.
    unsafe { std::mem::transmute_copy::<Ptr, F>(&p) }
}

fn parse_request(line: &str) -> Option<(&str, c_int, u64)> {
    let (name, rest) = line.split_once(", ver=")?;
    let (ver, flags) = rest.split_once(", flags=")?;
    Some((name, ver.parse().ok()?, flags.trim().parse().ok()?))
}

fn load() -> Result<Driver, u32> {
    // SAFETY: dlopen with a constant, NUL-terminated name.
    let lib = unsafe { libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
    if lib.is_null() {
        return Err(CUDA_RT_ERROR_INSUFFICIENT_DRIVER);
    }
    // SAFETY: `lib` is a live handle; the name is NUL-terminated.
    let sym = unsafe { libc::dlsym(lib, c"cuGetProcAddress_v2".as_ptr()) };
    if sym.is_null() {
        return Err(CUDA_RT_ERROR_INSUFFICIENT_DRIVER);
    }
    // SAFETY: cuGetProcAddress_v2 has this signature in every CUDA 12 driver.
    let get_proc: GetProc = unsafe { fn_from_ptr(sym) };

    let mut found: HashMap<(String, c_int, u64), Ptr> = HashMap::new();
    for line in REQUESTS.lines() {
        let Some((name, ver, flags)) = parse_request(line) else {
            continue;
        };
        let cname = CString::new(name).unwrap_or_default();
        let mut p: Ptr = std::ptr::null_mut();
        let mut status: c_int = 0;
        // SAFETY: valid C string and out-pointers.
        let rc = unsafe { get_proc(cname.as_ptr(), &mut p, ver, flags, &mut status) };
        if rc == 0 && !p.is_null() {
            found.insert((name.to_string(), ver, flags), p);
        }
    }
    let get = |name: &str, ver: c_int, flags: u64| -> Result<Ptr, u32> {
        found
            .get(&(name.to_string(), ver, flags))
            .copied()
            .ok_or(CUDA_RT_ERROR_INSUFFICIENT_DRIVER)
    };
    macro_rules! f {
        ($name:literal, $ver:literal, $flags:literal) => {{
            let p = get($name, $ver, $flags)?;
            // SAFETY: the driver returned this entry point for this name and version; its C
            // signature is the one the field declares (CUDA 12.8 driver API).
            unsafe { fn_from_ptr(p) }
        }};
    }
    let d = Driver {
        get_proc,
        init: f!("cuInit", 2000, 0),
        driver_get_version: f!("cuDriverGetVersion", 2020, 0),
        device_get_count: f!("cuDeviceGetCount", 2000, 0),
        primary_ctx_retain: f!("cuDevicePrimaryCtxRetain", 7000, 0),
        ctx_get_current: f!("cuCtxGetCurrent", 4000, 0),
        ctx_set_current: f!("cuCtxSetCurrent", 4000, 0),
        ctx_synchronize: f!("cuCtxSynchronize", 2000, 0),
        mem_get_info: f!("cuMemGetInfo", 3020, 0),
        mem_alloc: f!("cuMemAlloc", 3020, 0),
        mem_alloc_pitch: f!("cuMemAllocPitch", 3020, 0),
        mem_free: f!("cuMemFree", 3020, 0),
        mem_alloc_managed: f!("cuMemAllocManaged", 6000, 0),
        mem_alloc_async: [
            f!("cuMemAllocAsync", 11020, 0),
            f!("cuMemAllocAsync", 11020, 2),
        ],
        mem_alloc_from_pool_async: [
            f!("cuMemAllocFromPoolAsync", 11020, 0),
            f!("cuMemAllocFromPoolAsync", 11020, 2),
        ],
        mem_free_async: [
            f!("cuMemFreeAsync", 11020, 0),
            f!("cuMemFreeAsync", 11020, 2),
        ],
        stream_synchronize: [
            f!("cuStreamSynchronize", 2000, 0),
            f!("cuStreamSynchronize", 7000, 2),
        ],
        stream_create: f!("cuStreamCreate", 2000, 0),
        stream_destroy: f!("cuStreamDestroy", 4000, 0),
        device_get_default_mem_pool: f!("cuDeviceGetDefaultMemPool", 11020, 0),
        mem_pool_trim_to: f!("cuMemPoolTrimTo", 11020, 0),
    };
    let mut version: c_int = 0;
    // SAFETY: valid out-pointer.
    unsafe { (d.driver_get_version)(&mut version) };
    if version < 12000 {
        return Err(CUDA_RT_ERROR_INSUFFICIENT_DRIVER);
    }
    // SAFETY: no pointer arguments.
    let rc = unsafe { (d.init)(0) };
    if rc != 0 {
        return Err(fragprobe_simgpu::codes::runtime_from_driver(rc));
    }
    debug_assert_eq!(CUDA_RT_SUCCESS, 0);
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_list_parses() {
        let all: Vec<_> = REQUESTS.lines().map(parse_request).collect();
        assert_eq!(all.len(), 419);
        assert!(all.iter().all(Option::is_some));
        assert_eq!(all[0], Some(("", 0, 0)));
        assert!(all.contains(&Some(("cuMemAllocAsync", 11020, 2))));
    }
}
