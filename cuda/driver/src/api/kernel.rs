//! What frameworks call besides allocation, answered as a real driver would with kernels
//! that do nothing: module and library loading, functions and their attributes (those of
//! compute capability 9.0 code), launches, occupancy, memsets,
//! copies and pinned host memory.
//!
//! What that means for values: memory behaviour — the sequence of allocations and frees a
//! program makes, which is all fragprobe looks at — is real; computed values are not.
//! Device memory is not backed by host memory, so a launch, a memset or a copy into the
//! device changes nothing, and a copy from the device to the host writes zeros (so
//! `tensor.cpu()` and `.item()` read 0). Pinned host memory is real host memory.

use std::ffi::{c_char, c_int, c_uint, c_void};
use std::sync::atomic::{AtomicU64, Ordering};

use super::{code, put};
use fragprobe_simgpu::codes::*;

/// Opaque handles for modules, libraries, kernels and functions: distinct, never NULL.
static NEXT_HANDLE: AtomicU64 = AtomicU64::new(1);

fn fresh(tag: u64) -> *mut c_void {
    (tag << 44 | NEXT_HANDLE.fetch_add(1, Ordering::Relaxed)) as usize as *mut c_void
}

const MODULE: u64 = 0xA1;
const FUNCTION: u64 = 0xA2;
const LIBRARY: u64 = 0xA3;
const KERNEL: u64 = 0xA4;

/// # Safety
/// `module` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadData(module: *mut *mut c_void, _image: *const c_void) -> u32 {
    // SAFETY: forwarded caller contract.
    code(crate::with_gpu(|_| unsafe { put(module, fresh(MODULE)) }))
}

/// # Safety
/// `module` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadDataEx(
    module: *mut *mut c_void,
    image: *const c_void,
    _n: c_uint,
    _options: *mut c_int,
    _values: *mut *mut c_void,
) -> u32 {
    // SAFETY: same contract.
    unsafe { cuModuleLoadData(module, image) }
}

/// # Safety
/// `module` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuModuleLoadFatBinary(
    module: *mut *mut c_void,
    image: *const c_void,
) -> u32 {
    // SAFETY: same contract.
    unsafe { cuModuleLoadData(module, image) }
}

/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuModuleUnload(_module: *mut c_void) -> u32 {
    CUDA_SUCCESS
}

/// # Safety
/// `func` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuModuleGetFunction(
    func: *mut *mut c_void,
    module: *mut c_void,
    name: *const c_char,
) -> u32 {
    if module.is_null() || name.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: forwarded caller contract.
    code(unsafe { put(func, fresh(FUNCTION)) })
}

/// # Safety
/// `library` must be NULL or valid for a write; the option arrays are not read.
#[no_mangle]
pub unsafe extern "C" fn cuLibraryLoadData(
    library: *mut *mut c_void,
    _code: *const c_void,
    _jit_options: *mut c_int,
    _jit_values: *mut *mut c_void,
    _n_jit: c_uint,
    _lib_options: *mut c_int,
    _lib_values: *mut *mut c_void,
    _n_lib: c_uint,
) -> u32 {
    // SAFETY: forwarded caller contract.
    code(crate::with_gpu(|_| unsafe { put(library, fresh(LIBRARY)) }))
}

/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuLibraryUnload(_library: *mut c_void) -> u32 {
    CUDA_SUCCESS
}

/// # Safety
/// `module` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuLibraryGetModule(module: *mut *mut c_void, library: *mut c_void) -> u32 {
    if library.is_null() {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    // SAFETY: forwarded caller contract.
    code(unsafe { put(module, fresh(MODULE)) })
}

/// A global (`__device__` or `__constant__`) of a module: a fresh address of the size
/// asked about is not known, so its size is 0 and its address NULL-free but unbacked.
///
/// # Safety
/// `dptr` and `bytes` must each be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuModuleGetGlobal_v2(
    dptr: *mut u64,
    bytes: *mut usize,
    module: *mut c_void,
    name: *const c_char,
) -> u32 {
    if module.is_null() || name.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: non-null out-parameters of the caller's.
    unsafe {
        if !dptr.is_null() {
            dptr.write(fresh(0xA5) as usize as u64);
        }
        if !bytes.is_null() {
            bytes.write(0);
        }
    }
    CUDA_SUCCESS
}

/// A library's global: as a module's (`cuModuleGetGlobal_v2`); cuBLAS 13's `cublasCreate`
/// looks one up and fails with `CUBLAS_STATUS_ALLOC_FAILED` when the driver refuses.
///
/// # Safety
/// `dptr` and `bytes` must each be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuLibraryGetGlobal(
    dptr: *mut u64,
    bytes: *mut usize,
    library: *mut c_void,
    name: *const c_char,
) -> u32 {
    // SAFETY: same contract.
    unsafe { cuModuleGetGlobal_v2(dptr, bytes, library, name) }
}

/// A library's `__managed__` variable: as a global.
///
/// # Safety
/// `dptr` and `bytes` must each be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuLibraryGetManaged(
    dptr: *mut u64,
    bytes: *mut usize,
    library: *mut c_void,
    name: *const c_char,
) -> u32 {
    // SAFETY: same contract.
    unsafe { cuLibraryGetGlobal(dptr, bytes, library, name) }
}

/// The driver's log callbacks (CUDA 12.9+): registered, never called — the simulation
/// writes no driver log.
///
/// # Safety
/// `handle` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuLogsRegisterCallback(
    callback: *const c_void,
    _user: *mut c_void,
    handle: *mut *mut c_void,
) -> u32 {
    if callback.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: forwarded caller contract.
    code(unsafe { put(handle, fresh(0xA6)) })
}

/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuLogsUnregisterCallback(handle: *mut c_void) -> u32 {
    if handle.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUDA_SUCCESS
}

/// The log's current position: always the start (nothing is ever logged).
///
/// # Safety
/// `iterator` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuLogsCurrent(iterator: *mut u32, _flags: c_uint) -> u32 {
    // SAFETY: forwarded caller contract.
    code(unsafe { put(iterator, 0) })
}

/// An empty log written to `path` (or nothing: there is no entry to write).
///
/// # Safety
/// No pointer is dereferenced beyond the NULL checks.
#[no_mangle]
pub unsafe extern "C" fn cuLogsDumpToFile(
    _iterator: *mut u32,
    path: *const c_char,
    _flags: c_uint,
) -> u32 {
    if path.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUDA_SUCCESS
}

/// An empty log: the buffer is left as an empty C string.
///
/// # Safety
/// `buffer` must be NULL or valid for one byte; `size` NULL or valid for reads and writes.
#[no_mangle]
pub unsafe extern "C" fn cuLogsDumpToMemory(
    _iterator: *mut u32,
    buffer: *mut c_char,
    size: *mut usize,
    _flags: c_uint,
) -> u32 {
    if buffer.is_null() || size.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: non-null; the caller's buffer holds `*size` bytes.
    unsafe {
        if size.read() > 0 {
            buffer.write(0);
        }
        size.write(0);
    }
    CUDA_SUCCESS
}

/// # Safety
/// `kernel` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuLibraryGetKernel(
    kernel: *mut *mut c_void,
    library: *mut c_void,
    name: *const c_char,
) -> u32 {
    if library.is_null() || name.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: forwarded caller contract.
    code(unsafe { put(kernel, fresh(KERNEL)) })
}

/// # Safety
/// `func` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuKernelGetFunction(func: *mut *mut c_void, kernel: *mut c_void) -> u32 {
    if kernel.is_null() {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    // SAFETY: forwarded caller contract.
    code(unsafe { put(func, fresh(FUNCTION)) })
}

/// A function's attribute as compute capability 9.0 code compiled for it reports
/// (`CUfunction_attribute`); cuBLAS checks the PTX and binary versions.
pub fn function_attribute(attr: c_int) -> Option<c_int> {
    Some(match attr {
        0 => 1024,  // MAX_THREADS_PER_BLOCK
        1..=3 => 0, // SHARED, CONST, LOCAL size bytes
        4 => 32,    // NUM_REGS
        5 => 90,    // PTX_VERSION
        6 => 90,    // BINARY_VERSION
        7 => 0,     // CACHE_MODE_CA
        8 => 0,     // MAX_DYNAMIC_SHARED_SIZE_BYTES (until set)
        9 => -1,    // PREFERRED_SHARED_MEMORY_CARVEOUT
        10 => 0,    // CLUSTER_SIZE_MUST_BE_SET
        11..=13 => 0,
        14 => 0, // NON_PORTABLE_CLUSTER_SIZE_ALLOWED
        15 => 0, // CLUSTER_SCHEDULING_POLICY_PREFERENCE
        _ => return None,
    })
}

/// # Safety
/// `value` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuFuncGetAttribute(
    value: *mut c_int,
    attr: c_int,
    func: *mut c_void,
) -> u32 {
    if func.is_null() {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    match function_attribute(attr) {
        // SAFETY: forwarded caller contract.
        Some(v) => code(unsafe { put(value, v) }),
        None => CUDA_ERROR_INVALID_VALUE,
    }
}

/// # Safety
/// `value` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuKernelGetAttribute(
    value: *mut c_int,
    attr: c_int,
    kernel: *mut c_void,
    _dev: c_int,
) -> u32 {
    // SAFETY: same contract.
    unsafe { cuFuncGetAttribute(value, attr, kernel) }
}

/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuFuncSetAttribute(func: *mut c_void, attr: c_int, _value: c_int) -> u32 {
    if func.is_null() {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if function_attribute(attr).is_none() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUDA_SUCCESS
}

/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuKernelSetAttribute(
    attr: c_int,
    value: c_int,
    kernel: *mut c_void,
    _dev: c_int,
) -> u32 {
    // SAFETY: same contract.
    unsafe { cuFuncSetAttribute(kernel, attr, value) }
}

/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuFuncSetCacheConfig(_func: *mut c_void, _config: c_int) -> u32 {
    CUDA_SUCCESS
}

/// A launch: checked, and done at once (the kernel does nothing); into a capturing stream,
/// a node of the graph being captured.
///
/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuLaunchKernel(
    func: *mut c_void,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    _shared: c_uint,
    stream: *mut c_void,
    _params: *mut *mut c_void,
    _extra: *mut *mut c_void,
) -> u32 {
    if func.is_null() {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if (bx as u64) * (by as u64) * (bz as u64) > 1024 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let rc = code(crate::with_gpu(|_| Ok(())));
    if rc == CUDA_SUCCESS {
        super::graph::captured(stream);
    }
    rc
}

/// # Safety
/// As [`cuLaunchKernel`].
#[no_mangle]
pub unsafe extern "C" fn cuLaunchKernel_ptsz(
    func: *mut c_void,
    gx: c_uint,
    gy: c_uint,
    gz: c_uint,
    bx: c_uint,
    by: c_uint,
    bz: c_uint,
    shared: c_uint,
    stream: *mut c_void,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> u32 {
    let stream = super::graph::per_thread(stream) as usize as *mut c_void;
    // SAFETY: same contract.
    unsafe { cuLaunchKernel(func, gx, gy, gz, bx, by, bz, shared, stream, params, extra) }
}

/// `CUlaunchConfig`'s leading fields.
#[repr(C)]
pub struct LaunchConfig {
    grid: [c_uint; 3],
    block: [c_uint; 3],
    shared: c_uint,
    stream: *mut c_void,
    attrs: *mut c_void,
    num_attrs: c_uint,
}

/// # Safety
/// `config` must be NULL or point at a `CUlaunchConfig`.
#[no_mangle]
pub unsafe extern "C" fn cuLaunchKernelEx(
    config: *const LaunchConfig,
    func: *mut c_void,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> u32 {
    if config.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: non-null, a CUlaunchConfig per the caller's contract.
    let c = unsafe { &*config };
    // SAFETY: same contract as cuLaunchKernel.
    unsafe {
        cuLaunchKernel(
            func, c.grid[0], c.grid[1], c.grid[2], c.block[0], c.block[1], c.block[2], c.shared,
            c.stream, params, extra,
        )
    }
}

/// # Safety
/// As [`cuLaunchKernelEx`].
#[no_mangle]
pub unsafe extern "C" fn cuLaunchKernelEx_ptsz(
    config: *const LaunchConfig,
    func: *mut c_void,
    params: *mut *mut c_void,
    extra: *mut *mut c_void,
) -> u32 {
    // SAFETY: same contract.
    unsafe { cuLaunchKernelEx(config, func, params, extra) }
}

/// Resident blocks per SM for `block` threads: 2048 threads and 32 blocks per SM.
pub fn blocks_per_sm(block: c_int) -> c_int {
    if block <= 0 {
        0
    } else {
        (2048 / block).clamp(0, 32)
    }
}

/// # Safety
/// `blocks` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuOccupancyMaxActiveBlocksPerMultiprocessor(
    blocks: *mut c_int,
    func: *mut c_void,
    block: c_int,
    _dyn_shared: usize,
) -> u32 {
    if func.is_null() {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    // SAFETY: forwarded caller contract.
    code(unsafe { put(blocks, blocks_per_sm(block)) })
}

/// # Safety
/// `blocks` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(
    blocks: *mut c_int,
    func: *mut c_void,
    block: c_int,
    dyn_shared: usize,
    _flags: c_uint,
) -> u32 {
    // SAFETY: same contract.
    unsafe { cuOccupancyMaxActiveBlocksPerMultiprocessor(blocks, func, block, dyn_shared) }
}

/// Dynamic shared memory a block may have when `blocks` blocks share an SM: an H100's
/// 228 KiB per SM less 1 KiB reserved per block, at most 227 KiB.
///
/// # Safety
/// `smem` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuOccupancyAvailableDynamicSMemPerBlock(
    smem: *mut usize,
    func: *mut c_void,
    blocks: c_int,
    _block_size: c_int,
) -> u32 {
    if func.is_null() {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    let per = if blocks <= 0 {
        0
    } else {
        (228 * 1024 / blocks as usize)
            .saturating_sub(1024)
            .min(227 * 1024)
    };
    // SAFETY: forwarded caller contract.
    code(unsafe { put(smem, per) })
}

/// Clusters of the launch configuration that fit at once: 132 SMs, one block of a
/// cluster per SM (cluster dimensions are not read: a cluster of 2, as cuBLAS asks).
///
/// # Safety
/// `clusters` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuOccupancyMaxActiveClusters(
    clusters: *mut c_int,
    func: *mut c_void,
    _config: *const c_void,
) -> u32 {
    if func.is_null() {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    // SAFETY: forwarded caller contract.
    code(unsafe { put(clusters, 66) })
}

/// 1024-thread blocks, two per SM on 132 SMs.
///
/// # Safety
/// `min_grid` and `block` must each be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuOccupancyMaxPotentialBlockSize(
    min_grid: *mut c_int,
    block: *mut c_int,
    func: *mut c_void,
    _to_smem: *mut c_void,
    _dyn_shared: usize,
    limit: c_int,
) -> u32 {
    if func.is_null() {
        return CUDA_ERROR_INVALID_HANDLE;
    }
    let b = if limit > 0 { limit.min(1024) } else { 1024 };
    // SAFETY: forwarded caller contract.
    code(unsafe { put(min_grid, 132 * blocks_per_sm(b)).and_then(|()| put(block, b)) })
}

/// # Safety
/// As [`cuOccupancyMaxPotentialBlockSize`].
#[no_mangle]
pub unsafe extern "C" fn cuOccupancyMaxPotentialBlockSizeWithFlags(
    min_grid: *mut c_int,
    block: *mut c_int,
    func: *mut c_void,
    to_smem: *mut c_void,
    dyn_shared: usize,
    limit: c_int,
    _flags: c_uint,
) -> u32 {
    // SAFETY: same contract.
    unsafe { cuOccupancyMaxPotentialBlockSize(min_grid, block, func, to_smem, dyn_shared, limit) }
}

// ---- context limits ------------------------------------------------------------------

/// An H100's defaults for `CUlimit`: stack 1 KiB, printf FIFO 1 MiB, malloc heap 8 MiB,
/// runtime sync depth 2, pending launches 2048, L2 fetch granularity 32, persisting L2 0.
pub fn limit_default(limit: c_int) -> Option<usize> {
    Some(match limit {
        0 => 1024,
        1 => 1 << 20,
        2 => 8 << 20,
        3 => 2,
        4 => 2048,
        5 => 32,
        6 => 0,
        _ => return None,
    })
}

/// # Safety
/// `value` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetLimit(value: *mut usize, limit: c_int) -> u32 {
    match limit_default(limit) {
        // SAFETY: forwarded caller contract.
        Some(v) => code(crate::with_gpu(|_| unsafe { put(value, v) })),
        None => CUDA_ERROR_INVALID_VALUE,
    }
}

/// Accepted (and not remembered: nothing runs that would use it).
///
/// # Safety
/// No pointer arguments.
#[no_mangle]
pub unsafe extern "C" fn cuCtxSetLimit(limit: c_int, _value: usize) -> u32 {
    match limit_default(limit) {
        Some(_) => code(crate::with_gpu(|_| Ok(()))),
        None => CUDA_ERROR_INVALID_VALUE,
    }
}

// ---- pinned host memory: real host memory ---------------------------------------------

/// # Safety
/// `pp` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuMemHostAlloc(pp: *mut *mut c_void, size: usize, _flags: c_uint) -> u32 {
    if pp.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    if size == 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let mut p = std::ptr::null_mut();
    // SAFETY: `p` is a valid out-parameter; 4096 is a power of two and a multiple of the
    // pointer size.
    if unsafe { libc::posix_memalign(&mut p, 4096, size) } != 0 {
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    // SAFETY: non-null out-parameter.
    unsafe { pp.write(p) };
    CUDA_SUCCESS
}

/// # Safety
/// `pp` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocHost_v2(pp: *mut *mut c_void, size: usize) -> u32 {
    // SAFETY: same contract.
    unsafe { cuMemHostAlloc(pp, size, 0) }
}

/// # Safety
/// `pp` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuMemAllocHost(pp: *mut *mut c_void, size: c_uint) -> u32 {
    // SAFETY: same contract.
    unsafe { cuMemHostAlloc(pp, size as usize, 0) }
}

/// # Safety
/// `p` must be NULL or come from [`cuMemHostAlloc`].
#[no_mangle]
pub unsafe extern "C" fn cuMemFreeHost(p: *mut c_void) -> u32 {
    // SAFETY: per the contract, memory from posix_memalign (free(NULL) is a no-op).
    unsafe { libc::free(p) };
    CUDA_SUCCESS
}

/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuMemHostRegister_v2(p: *mut c_void, size: usize, _flags: c_uint) -> u32 {
    if p.is_null() || size == 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    CUDA_SUCCESS
}

/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuMemHostRegister(p: *mut c_void, size: usize, flags: c_uint) -> u32 {
    // SAFETY: same contract.
    unsafe { cuMemHostRegister_v2(p, size, flags) }
}

/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuMemHostUnregister(_p: *mut c_void) -> u32 {
    CUDA_SUCCESS
}

/// Unified addressing: a pinned host page's device address is its host address.
///
/// # Safety
/// `dptr` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuMemHostGetDevicePointer_v2(
    dptr: *mut u64,
    p: *mut c_void,
    _flags: c_uint,
) -> u32 {
    // SAFETY: forwarded caller contract.
    code(unsafe { put(dptr, p as usize as u64) })
}

// ---- memsets and copies --------------------------------------------------------------

/// Whether `ptr` is device memory of the simulation (not backed by host memory).
fn on_device(ptr: u64) -> bool {
    crate::with_gpu(|g| Ok(g.pointer_attribute(2, ptr).is_ok())).unwrap_or(false)
}

/// A copy of `n` bytes from `src` to `dst`: between host buffers the bytes move; into the
/// device nothing happens; out of the device the host buffer gets zeros.
///
/// # Safety
/// Host pointers among `dst` and `src` must be valid for `n` bytes.
unsafe fn copy(dst: u64, src: u64, n: usize) -> u32 {
    if n == 0 {
        return CUDA_SUCCESS;
    }
    if dst == 0 || src == 0 {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let (d_dev, s_dev) = (on_device(dst), on_device(src));
    // SAFETY: host pointers are valid for `n` bytes per the caller's contract.
    unsafe {
        match (d_dev, s_dev) {
            (true, _) => {}
            (false, true) => std::ptr::write_bytes(dst as usize as *mut u8, 0, n),
            (false, false) => std::ptr::copy(src as usize as *const u8, dst as usize as *mut u8, n),
        }
    }
    CUDA_SUCCESS
}

/// A copy (see the module's doc for what moves).
///
/// # Safety
/// Host pointers must be valid for `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpy(dst: u64, src: u64, n: usize) -> u32 {
    // SAFETY: forwarded caller contract.
    unsafe { copy(dst, src, n) }
}

/// A copy (see the module's doc for what moves).
///
/// # Safety
/// Host pointers must be valid for `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpy_ptds(dst: u64, src: u64, n: usize) -> u32 {
    // SAFETY: forwarded caller contract.
    unsafe { copy(dst, src, n) }
}

/// A copy (see the module's doc for what moves).
///
/// # Safety
/// Host pointers must be valid for `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyAsync(dst: u64, src: u64, n: usize, _stream: *mut c_void) -> u32 {
    // SAFETY: forwarded caller contract.
    unsafe { copy(dst, src, n) }
}

/// A copy (see the module's doc for what moves).
///
/// # Safety
/// Host pointers must be valid for `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyAsync_ptsz(
    dst: u64,
    src: u64,
    n: usize,
    _stream: *mut c_void,
) -> u32 {
    // SAFETY: forwarded caller contract.
    unsafe { copy(dst, src, n) }
}

/// A copy (see the module's doc for what moves).
///
/// # Safety
/// Host pointers must be valid for `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoD_v2(dst: u64, src: *const c_void, n: usize) -> u32 {
    // SAFETY: forwarded caller contract.
    unsafe { copy(dst, src as usize as u64, n) }
}

/// A copy (see the module's doc for what moves).
///
/// # Safety
/// Host pointers must be valid for `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoD_v2_ptds(dst: u64, src: *const c_void, n: usize) -> u32 {
    // SAFETY: forwarded caller contract.
    unsafe { copy(dst, src as usize as u64, n) }
}

/// A copy (see the module's doc for what moves).
///
/// # Safety
/// Host pointers must be valid for `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoH_v2(dst: *mut c_void, src: u64, n: usize) -> u32 {
    // SAFETY: forwarded caller contract.
    unsafe { copy(dst as usize as u64, src, n) }
}

/// A copy (see the module's doc for what moves).
///
/// # Safety
/// Host pointers must be valid for `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoH_v2_ptds(dst: *mut c_void, src: u64, n: usize) -> u32 {
    // SAFETY: forwarded caller contract.
    unsafe { copy(dst as usize as u64, src, n) }
}

/// A copy (see the module's doc for what moves).
///
/// # Safety
/// Host pointers must be valid for `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoD_v2(dst: u64, src: u64, n: usize) -> u32 {
    // SAFETY: forwarded caller contract.
    unsafe { copy(dst, src, n) }
}

/// A copy (see the module's doc for what moves).
///
/// # Safety
/// Host pointers must be valid for `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoD_v2_ptds(dst: u64, src: u64, n: usize) -> u32 {
    // SAFETY: forwarded caller contract.
    unsafe { copy(dst, src, n) }
}

/// A copy (see the module's doc for what moves).
///
/// # Safety
/// Host pointers must be valid for `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2(
    dst: u64,
    src: *const c_void,
    n: usize,
    _stream: *mut c_void,
) -> u32 {
    // SAFETY: forwarded caller contract.
    unsafe { copy(dst, src as usize as u64, n) }
}

/// A copy (see the module's doc for what moves).
///
/// # Safety
/// Host pointers must be valid for `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyHtoDAsync_v2_ptsz(
    dst: u64,
    src: *const c_void,
    n: usize,
    _stream: *mut c_void,
) -> u32 {
    // SAFETY: forwarded caller contract.
    unsafe { copy(dst, src as usize as u64, n) }
}

/// A copy (see the module's doc for what moves).
///
/// # Safety
/// Host pointers must be valid for `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2(
    dst: *mut c_void,
    src: u64,
    n: usize,
    _stream: *mut c_void,
) -> u32 {
    // SAFETY: forwarded caller contract.
    unsafe { copy(dst as usize as u64, src, n) }
}

/// A copy (see the module's doc for what moves).
///
/// # Safety
/// Host pointers must be valid for `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoHAsync_v2_ptsz(
    dst: *mut c_void,
    src: u64,
    n: usize,
    _stream: *mut c_void,
) -> u32 {
    // SAFETY: forwarded caller contract.
    unsafe { copy(dst as usize as u64, src, n) }
}

/// A copy (see the module's doc for what moves).
///
/// # Safety
/// Host pointers must be valid for `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoDAsync_v2(
    dst: u64,
    src: u64,
    n: usize,
    _stream: *mut c_void,
) -> u32 {
    // SAFETY: forwarded caller contract.
    unsafe { copy(dst, src, n) }
}

/// A copy (see the module's doc for what moves).
///
/// # Safety
/// Host pointers must be valid for `n` bytes.
#[no_mangle]
pub unsafe extern "C" fn cuMemcpyDtoDAsync_v2_ptsz(
    dst: u64,
    src: u64,
    n: usize,
    _stream: *mut c_void,
) -> u32 {
    // SAFETY: forwarded caller contract.
    unsafe { copy(dst, src, n) }
}

/// A memset of device memory: nothing to change (device memory is not backed). Host
/// memory (pinned, or a managed pointer used from the host) is not set either: frameworks
/// memset device memory only.
fn memset(dst: u64) -> u32 {
    if dst == 0 {
        CUDA_ERROR_INVALID_VALUE
    } else {
        CUDA_SUCCESS
    }
}

/// A memset (see [`memset`]).
///
/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8_v2(dst: u64, _value: u8, _n: usize) -> u32 {
    memset(dst)
}

/// A memset (see [`memset`]).
///
/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8_v2_ptds(dst: u64, _value: u8, _n: usize) -> u32 {
    memset(dst)
}

/// A memset (see [`memset`]).
///
/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuMemsetD16_v2(dst: u64, _value: u16, _n: usize) -> u32 {
    memset(dst)
}

/// A memset (see [`memset`]).
///
/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuMemsetD16_v2_ptds(dst: u64, _value: u16, _n: usize) -> u32 {
    memset(dst)
}

/// A memset (see [`memset`]).
///
/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuMemsetD32_v2(dst: u64, _value: c_uint, _n: usize) -> u32 {
    memset(dst)
}

/// A memset (see [`memset`]).
///
/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuMemsetD32_v2_ptds(dst: u64, _value: c_uint, _n: usize) -> u32 {
    memset(dst)
}

/// A memset (see [`memset`]).
///
/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8Async(
    dst: u64,
    _value: u8,
    _n: usize,
    _stream: *mut c_void,
) -> u32 {
    memset(dst)
}

/// A memset (see [`memset`]).
///
/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuMemsetD8Async_ptsz(
    dst: u64,
    _value: u8,
    _n: usize,
    _stream: *mut c_void,
) -> u32 {
    memset(dst)
}

/// A memset (see [`memset`]).
///
/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuMemsetD16Async(
    dst: u64,
    _value: u16,
    _n: usize,
    _stream: *mut c_void,
) -> u32 {
    memset(dst)
}

/// A memset (see [`memset`]).
///
/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuMemsetD16Async_ptsz(
    dst: u64,
    _value: u16,
    _n: usize,
    _stream: *mut c_void,
) -> u32 {
    memset(dst)
}

/// A memset (see [`memset`]).
///
/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuMemsetD32Async(
    dst: u64,
    _value: c_uint,
    _n: usize,
    _stream: *mut c_void,
) -> u32 {
    memset(dst)
}

/// A memset (see [`memset`]).
///
/// # Safety
/// No pointer is dereferenced.
#[no_mangle]
pub unsafe extern "C" fn cuMemsetD32Async_ptsz(
    dst: u64,
    _value: c_uint,
    _n: usize,
    _stream: *mut c_void,
) -> u32 {
    memset(dst)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_are_those_of_sm_90_code() {
        assert_eq!(function_attribute(5), Some(90));
        assert_eq!(function_attribute(6), Some(90));
        assert_eq!(function_attribute(0), Some(1024));
        assert_eq!(function_attribute(99), None);
        assert_eq!(blocks_per_sm(1024), 2);
        assert_eq!(blocks_per_sm(32), 32);
        assert_eq!(blocks_per_sm(0), 0);
    }

    #[test]
    fn pinned_host_memory_is_real_and_host_copies_move_bytes() {
        let mut p = std::ptr::null_mut();
        // SAFETY: a valid out-parameter.
        assert_eq!(unsafe { cuMemHostAlloc(&mut p, 8192, 0) }, CUDA_SUCCESS);
        assert_eq!(p as usize % 4096, 0);
        let src = [7u8; 16];
        // SAFETY: both host buffers hold 16 bytes (no driver: nothing is device memory).
        let rc = unsafe { copy(p as u64, src.as_ptr() as u64, 16) };
        assert_eq!(rc, CUDA_SUCCESS);
        // SAFETY: `p` holds 8192 bytes.
        let got = unsafe { std::slice::from_raw_parts(p as *const u8, 16) };
        assert_eq!(got, &src);
        // SAFETY: from cuMemHostAlloc.
        assert_eq!(unsafe { cuMemFreeHost(p) }, CUDA_SUCCESS);
    }
}
