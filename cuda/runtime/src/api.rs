//! The exported `cuda*` functions.

use crate::driver::{driver, Driver, Ptr};
use fragprobe_simgpu::codes::*;
use fragprobe_simgpu::spec::MAX_DEVICES;
use std::cell::Cell;
use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::Mutex;

/// `CUDART_VERSION` of this runtime.
const RUNTIME_VERSION: c_int = 12080;

thread_local! {
    static DEVICE: Cell<c_int> = const { Cell::new(0) };
    static LAST_ERROR: Cell<u32> = const { Cell::new(0) };
}

/// Retained primary context of each device (0 = not yet).
static PRIMARY: Mutex<[usize; MAX_DEVICES]> = Mutex::new([0; MAX_DEVICES]);

/// Records a failure as the thread's last error; returns the code.
fn ret(code: u32) -> u32 {
    if code != CUDA_RT_SUCCESS {
        LAST_ERROR.with(|e| e.set(code));
    }
    code
}

fn rt(driver_code: u32) -> u32 {
    ret(runtime_from_driver(driver_code))
}

/// The primary context of `dev`, retained once per process.
fn primary(d: &Driver, dev: c_int) -> Result<Ptr, u32> {
    if dev < 0 || dev as usize >= MAX_DEVICES {
        return Err(CUDA_RT_ERROR_INVALID_DEVICE);
    }
    let mut count: c_int = 0;
    // SAFETY: valid out-pointer.
    unsafe { (d.device_get_count)(&mut count) };
    if dev >= count {
        return Err(CUDA_RT_ERROR_INVALID_DEVICE);
    }
    let mut table = PRIMARY.lock().unwrap_or_else(|e| e.into_inner());
    if table[dev as usize] == 0 {
        let mut ctx: Ptr = std::ptr::null_mut();
        // SAFETY: valid out-pointer.
        let rc = unsafe { (d.primary_ctx_retain)(&mut ctx, dev) };
        if rc != 0 {
            return Err(runtime_from_driver(rc));
        }
        table[dev as usize] = ctx as usize;
    }
    Ok(table[dev as usize] as Ptr)
}

/// Makes sure the calling thread has a context: the one it has, or its device's primary.
fn ensure_context() -> Result<&'static Driver, u32> {
    let d = driver()?;
    let mut cur: Ptr = std::ptr::null_mut();
    // SAFETY: valid out-pointer.
    unsafe { (d.ctx_get_current)(&mut cur) };
    if cur.is_null() {
        let ctx = primary(d, DEVICE.with(|x| x.get()))?;
        // SAFETY: a context handle from the driver.
        let rc = unsafe { (d.ctx_set_current)(ctx) };
        if rc != 0 {
            return Err(runtime_from_driver(rc));
        }
    }
    Ok(d)
}

/// Runs `f` with a context current; converts driver codes.
fn with_ctx(f: impl FnOnce(&Driver) -> u32) -> u32 {
    match ensure_context() {
        Ok(d) => rt(f(d)),
        Err(e) => ret(e),
    }
}

/// # Safety
/// `p` must be NULL or valid for a write.
unsafe fn out<T>(p: *mut T, v: T) -> u32 {
    if p.is_null() {
        return ret(CUDA_RT_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null, valid per the caller's contract.
    unsafe { p.write(v) };
    CUDA_RT_SUCCESS
}

/// # Safety
/// `dev_ptr` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cudaMalloc(dev_ptr: *mut *mut c_void, size: usize) -> u32 {
    if dev_ptr.is_null() {
        return ret(CUDA_RT_ERROR_INVALID_VALUE);
    }
    if size == 0 {
        // SAFETY: non-null, valid per the caller's contract.
        unsafe { dev_ptr.write(std::ptr::null_mut()) };
        return CUDA_RT_SUCCESS;
    }
    with_ctx(|d| {
        let mut p = 0u64;
        // SAFETY: valid out-pointer.
        let rc = unsafe { (d.mem_alloc)(&mut p, size) };
        // SAFETY: non-null, valid per the caller's contract.
        unsafe { dev_ptr.write(p as usize as *mut c_void) };
        rc
    })
}

/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cudaFree(dev_ptr: *mut c_void) -> u32 {
    if dev_ptr.is_null() {
        return CUDA_RT_SUCCESS;
    }
    // SAFETY: no pointer arguments are dereferenced by the driver.
    with_ctx(|d| unsafe { (d.mem_free)(dev_ptr as usize as u64) })
}

/// # Safety
/// `dev_ptr` and `pitch` must be NULL or valid for writes.
#[no_mangle]
pub unsafe extern "C" fn cudaMallocPitch(
    dev_ptr: *mut *mut c_void,
    pitch: *mut usize,
    width: usize,
    height: usize,
) -> u32 {
    if dev_ptr.is_null() || pitch.is_null() {
        return ret(CUDA_RT_ERROR_INVALID_VALUE);
    }
    with_ctx(|d| {
        let mut p = 0u64;
        let mut pi = 0usize;
        // SAFETY: valid out-pointers.
        let rc = unsafe { (d.mem_alloc_pitch)(&mut p, &mut pi, width, height, 4) };
        // SAFETY: both non-null, valid per the caller's contract.
        unsafe {
            dev_ptr.write(p as usize as *mut c_void);
            pitch.write(pi);
        }
        rc
    })
}

/// # Safety
/// `dev_ptr` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cudaMallocManaged(
    dev_ptr: *mut *mut c_void,
    size: usize,
    flags: c_uint,
) -> u32 {
    if dev_ptr.is_null() {
        return ret(CUDA_RT_ERROR_INVALID_VALUE);
    }
    with_ctx(|d| {
        let mut p = 0u64;
        // SAFETY: valid out-pointer.
        let rc = unsafe { (d.mem_alloc_managed)(&mut p, size, flags) };
        // SAFETY: non-null, valid per the caller's contract.
        unsafe { dev_ptr.write(p as usize as *mut c_void) };
        rc
    })
}

/// # Safety
/// `dev_ptr` must be NULL or valid for a write.
unsafe fn malloc_async(dev_ptr: *mut *mut c_void, size: usize, stream: Ptr, pt: usize) -> u32 {
    if dev_ptr.is_null() {
        return ret(CUDA_RT_ERROR_INVALID_VALUE);
    }
    if size == 0 {
        // SAFETY: non-null, valid per the caller's contract.
        unsafe { dev_ptr.write(std::ptr::null_mut()) };
        return CUDA_RT_SUCCESS;
    }
    with_ctx(|d| {
        let mut p = 0u64;
        // SAFETY: valid out-pointer; the stream is a handle.
        let rc = unsafe { (d.mem_alloc_async[pt])(&mut p, size, stream) };
        // SAFETY: non-null, valid per the caller's contract.
        unsafe { dev_ptr.write(p as usize as *mut c_void) };
        rc
    })
}

/// # Safety
/// `dev_ptr` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cudaMallocAsync(
    dev_ptr: *mut *mut c_void,
    size: usize,
    stream: Ptr,
) -> u32 {
    // SAFETY: same contract.
    unsafe { malloc_async(dev_ptr, size, stream, 0) }
}

/// Per-thread-default-stream variant (programs built with `--default-stream per-thread`).
///
/// # Safety
/// `dev_ptr` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cudaMallocAsync_ptsz(
    dev_ptr: *mut *mut c_void,
    size: usize,
    stream: Ptr,
) -> u32 {
    // SAFETY: same contract.
    unsafe { malloc_async(dev_ptr, size, stream, 1) }
}

fn free_async(dev_ptr: *mut c_void, stream: Ptr, pt: usize) -> u32 {
    if dev_ptr.is_null() {
        return CUDA_RT_SUCCESS;
    }
    // SAFETY: handles only.
    with_ctx(|d| unsafe { (d.mem_free_async[pt])(dev_ptr as usize as u64, stream) })
}

/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cudaFreeAsync(dev_ptr: *mut c_void, stream: Ptr) -> u32 {
    free_async(dev_ptr, stream, 0)
}

/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cudaFreeAsync_ptsz(dev_ptr: *mut c_void, stream: Ptr) -> u32 {
    free_async(dev_ptr, stream, 1)
}

/// # Safety
/// `dev_ptr` must be NULL or valid for a write.
unsafe fn malloc_from_pool(
    dev_ptr: *mut *mut c_void,
    size: usize,
    pool: Ptr,
    stream: Ptr,
    pt: usize,
) -> u32 {
    if dev_ptr.is_null() {
        return ret(CUDA_RT_ERROR_INVALID_VALUE);
    }
    with_ctx(|d| {
        let mut p = 0u64;
        // SAFETY: valid out-pointer; pool and stream are handles.
        let rc = unsafe { (d.mem_alloc_from_pool_async[pt])(&mut p, size, pool, stream) };
        // SAFETY: non-null, valid per the caller's contract.
        unsafe { dev_ptr.write(p as usize as *mut c_void) };
        rc
    })
}

/// # Safety
/// `dev_ptr` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cudaMallocFromPoolAsync(
    dev_ptr: *mut *mut c_void,
    size: usize,
    pool: Ptr,
    stream: Ptr,
) -> u32 {
    // SAFETY: same contract.
    unsafe { malloc_from_pool(dev_ptr, size, pool, stream, 0) }
}

/// # Safety
/// `dev_ptr` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cudaMallocFromPoolAsync_ptsz(
    dev_ptr: *mut *mut c_void,
    size: usize,
    pool: Ptr,
    stream: Ptr,
) -> u32 {
    // SAFETY: same contract.
    unsafe { malloc_from_pool(dev_ptr, size, pool, stream, 1) }
}

/// # Safety
/// `free` and `total` must each be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cudaMemGetInfo(free: *mut usize, total: *mut usize) -> u32 {
    // SAFETY: forwarded caller contract (the driver accepts NULL for either).
    with_ctx(|d| unsafe { (d.mem_get_info)(free, total) })
}

/// # Safety
/// `count` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cudaGetDeviceCount(count: *mut c_int) -> u32 {
    if count.is_null() {
        return ret(CUDA_RT_ERROR_INVALID_VALUE);
    }
    let d = match driver() {
        Ok(d) => d,
        Err(e) => return ret(e),
    };
    let mut n: c_int = 0;
    // SAFETY: valid out-pointer.
    let rc = unsafe { (d.device_get_count)(&mut n) };
    if rc != 0 || n == 0 {
        return ret(CUDA_RT_ERROR_NO_DEVICE);
    }
    // SAFETY: non-null, valid per the caller's contract.
    unsafe { out(count, n) }
}

/// Selects the thread's device and makes its primary context current (CUDA 12 semantics).
///
/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cudaSetDevice(device: c_int) -> u32 {
    let d = match driver() {
        Ok(d) => d,
        Err(e) => return ret(e),
    };
    let ctx = match primary(d, device) {
        Ok(c) => c,
        Err(e) => return ret(e),
    };
    DEVICE.with(|x| x.set(device));
    // SAFETY: a context handle from the driver.
    rt(unsafe { (d.ctx_set_current)(ctx) })
}

/// # Safety
/// `device` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cudaGetDevice(device: *mut c_int) -> u32 {
    if let Err(e) = driver() {
        return ret(e);
    }
    // SAFETY: forwarded caller contract.
    unsafe { out(device, DEVICE.with(|x| x.get())) }
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cudaDeviceSynchronize() -> u32 {
    // SAFETY: no arguments.
    with_ctx(|d| unsafe { (d.ctx_synchronize)() })
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cudaGetLastError() -> u32 {
    LAST_ERROR.with(|e| e.replace(CUDA_RT_SUCCESS))
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cudaPeekAtLastError() -> u32 {
    LAST_ERROR.with(|e| e.get())
}

const UNRECOGNIZED: &str = "unrecognized error code\0";

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cudaGetErrorString(error: u32) -> *const c_char {
    runtime_code(error)
        .map(|(_, m)| m)
        .unwrap_or(UNRECOGNIZED)
        .as_ptr()
        .cast()
}

/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cudaGetErrorName(error: u32) -> *const c_char {
    runtime_code(error)
        .map(|(n, _)| n)
        .unwrap_or(UNRECOGNIZED)
        .as_ptr()
        .cast()
}

/// # Safety
/// `stream` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cudaStreamCreate(stream: *mut Ptr) -> u32 {
    if stream.is_null() {
        return ret(CUDA_RT_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null, valid per the caller's contract.
    with_ctx(|d| unsafe { (d.stream_create)(stream, 0) })
}

/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cudaStreamDestroy(stream: Ptr) -> u32 {
    // SAFETY: handle only.
    with_ctx(|d| unsafe { (d.stream_destroy)(stream) })
}

/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cudaStreamSynchronize(stream: Ptr) -> u32 {
    // SAFETY: handle only.
    with_ctx(|d| unsafe { (d.stream_synchronize[0])(stream) })
}

/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cudaStreamSynchronize_ptsz(stream: Ptr) -> u32 {
    // SAFETY: handle only.
    with_ctx(|d| unsafe { (d.stream_synchronize[1])(stream) })
}

/// # Safety
/// `pool` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cudaDeviceGetDefaultMemPool(pool: *mut Ptr, device: c_int) -> u32 {
    if pool.is_null() {
        return ret(CUDA_RT_ERROR_INVALID_VALUE);
    }
    // SAFETY: non-null, valid per the caller's contract.
    with_ctx(|d| unsafe { (d.device_get_default_mem_pool)(pool, device) })
}

/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cudaMemPoolTrimTo(pool: Ptr, keep: usize) -> u32 {
    // SAFETY: handle only.
    with_ctx(|d| unsafe { (d.mem_pool_trim_to)(pool, keep) })
}

/// # Safety
/// `version` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cudaRuntimeGetVersion(version: *mut c_int) -> u32 {
    // SAFETY: forwarded caller contract.
    unsafe { out(version, RUNTIME_VERSION) }
}

/// 0 when no driver can be loaded, as documented.
///
/// # Safety
/// `version` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cudaDriverGetVersion(version: *mut c_int) -> u32 {
    let mut v: c_int = 0;
    if let Ok(d) = driver() {
        // SAFETY: valid out-pointer.
        unsafe { (d.driver_get_version)(&mut v) };
    }
    // SAFETY: forwarded caller contract.
    unsafe { out(version, v) }
}

/// # Safety
/// `symbol` must be a C string, `func` valid for a write, `status` NULL or valid.
unsafe fn entry_point(
    symbol: *const c_char,
    func: *mut Ptr,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> u32 {
    if symbol.is_null() || func.is_null() || flags > 2 {
        return ret(CUDA_RT_ERROR_INVALID_VALUE);
    }
    let d = match driver() {
        Ok(d) => d,
        Err(e) => return ret(e),
    };
    let mut st: c_int = 0;
    // SAFETY: forwarded caller contract.
    let rc = unsafe { (d.get_proc)(symbol, func, version, flags, &mut st) };
    if !status.is_null() {
        // SAFETY: non-null, valid per the caller's contract.
        unsafe { status.write(st) };
        return CUDA_RT_SUCCESS;
    }
    if rc == CUDA_ERROR_NOT_FOUND {
        return ret(CUDA_RT_ERROR_SYMBOL_NOT_FOUND);
    }
    rt(rc)
}

/// `flags`: `cudaEnableDefault` (0), `cudaEnableLegacyStream` (1),
/// `cudaEnablePerThreadDefaultStream` (2), passed to `cuGetProcAddress_v2` with this
/// runtime's version. With `driver_status` the lookup result is reported there.
///
/// # Safety
/// `symbol` must be a C string, `func` valid for a write, `driver_status` NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn cudaGetDriverEntryPoint(
    symbol: *const c_char,
    func: *mut Ptr,
    flags: u64,
    driver_status: *mut c_int,
) -> u32 {
    // SAFETY: same contract.
    unsafe { entry_point(symbol, func, RUNTIME_VERSION, flags, driver_status) }
}

/// # Safety
/// `symbol` must be a C string, `func` valid for a write, `driver_status` NULL or valid.
#[no_mangle]
pub unsafe extern "C" fn cudaGetDriverEntryPointByVersion(
    symbol: *const c_char,
    func: *mut Ptr,
    version: c_uint,
    flags: u64,
    driver_status: *mut c_int,
) -> u32 {
    // SAFETY: same contract.
    unsafe { entry_point(symbol, func, version as c_int, flags, driver_status) }
}
