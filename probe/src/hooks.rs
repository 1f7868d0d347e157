//! THE table: every symbol the probe intercepts, once, with its C signature and handler.
//!
//! This one list drives the exported wrappers (door 1), the `dlsym` door (by name) and
//! the `cuGetProcAddress` door (by the real pointer the driver returns). Adding a symbol
//! here is all it takes to see it through every door.
//!
//! Types follow the LP64 C ABI: `CUdeviceptr` and `CUmemGenericAllocationHandle` are
//! `u64`, legacy (v1) `CUdeviceptr_v1` is `u32`, streams/pools/contexts are pointers, and
//! results are plain `c_int` (never a Rust enum: unknown values would be UB).

use core::ffi::{c_char, c_int, c_uint, c_void};

use crate::handlers as h;
use crate::table::hook_table;

/// `CUipcMemHandle`: 64 opaque bytes, passed by value.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IpcMemHandle {
    /// Opaque bytes.
    pub reserved: [c_char; 64],
}

type Ptr = *mut c_void;

hook_table! {
    // --- driver: plain device memory ---
    cuMemAlloc_v2(dptr: *mut u64, bytesize: usize) => h::cuMemAlloc_v2;
    cuMemAlloc(dptr: *mut u32, bytesize: c_uint) => h::cuMemAlloc;
    cuMemAllocPitch_v2(dptr: *mut u64, pitch: *mut usize, width: usize, height: usize, elem: c_uint) => h::cuMemAllocPitch_v2;
    cuMemAllocPitch(dptr: *mut u32, pitch: *mut c_uint, width: c_uint, height: c_uint, elem: c_uint) => h::cuMemAllocPitch;
    cuMemFree_v2(dptr: u64) => h::cuMemFree_v2;
    cuMemFree(dptr: u32) => h::cuMemFree;
    // --- driver: managed ---
    cuMemAllocManaged(dptr: *mut u64, bytesize: usize, flags: c_uint) => h::cuMemAllocManaged;
    // --- driver: stream-ordered ---
    cuMemAllocAsync(dptr: *mut u64, bytesize: usize, stream: Ptr) => h::cuMemAllocAsync;
    cuMemAllocAsync_ptsz(dptr: *mut u64, bytesize: usize, stream: Ptr) => h::cuMemAllocAsync_ptsz;
    cuMemAllocFromPoolAsync(dptr: *mut u64, bytesize: usize, pool: Ptr, stream: Ptr) => h::cuMemAllocFromPoolAsync;
    cuMemAllocFromPoolAsync_ptsz(dptr: *mut u64, bytesize: usize, pool: Ptr, stream: Ptr) => h::cuMemAllocFromPoolAsync_ptsz;
    cuMemFreeAsync(dptr: u64, stream: Ptr) => h::cuMemFreeAsync;
    cuMemFreeAsync_ptsz(dptr: u64, stream: Ptr) => h::cuMemFreeAsync_ptsz;
    cuMemPoolTrimTo(pool: Ptr, min_bytes_to_keep: usize) => h::cuMemPoolTrimTo;
    // --- driver: virtual memory management (PyTorch expandable_segments, NCCL, llama.cpp) ---
    cuMemAddressReserve(ptr: *mut u64, size: usize, alignment: usize, addr: u64, flags: u64) => h::cuMemAddressReserve;
    cuMemAddressFree(ptr: u64, size: usize) => h::cuMemAddressFree;
    cuMemCreate(handle: *mut u64, size: usize, prop: *const c_void, flags: u64) => h::cuMemCreate;
    cuMemRelease(handle: u64) => h::cuMemRelease;
    cuMemMap(ptr: u64, size: usize, offset: usize, handle: u64, flags: u64) => h::cuMemMap;
    cuMemUnmap(ptr: u64, size: usize) => h::cuMemUnmap;
    // --- driver: what the driver says is free ---
    cuMemGetInfo_v2(free: *mut usize, total: *mut usize) => h::cuMemGetInfo_v2;
    cuMemGetInfo(free: *mut c_uint, total: *mut c_uint) => h::cuMemGetInfo;
    // --- driver: imports (recognised, not new memory) ---
    cuIpcOpenMemHandle_v2(pdptr: *mut u64, handle: IpcMemHandle, flags: c_uint) => h::cuIpcOpenMemHandle_v2;
    cuIpcOpenMemHandle(pdptr: *mut u64, handle: IpcMemHandle, flags: c_uint) => h::cuIpcOpenMemHandle;
    cuIpcCloseMemHandle(dptr: u64) => h::cuIpcCloseMemHandle;
    cuMemImportFromShareableHandle(handle: *mut u64, os_handle: Ptr, kind: c_uint) => h::cuMemImportFromShareableHandle;
    cuMemPoolImportPointer(dptr: *mut u64, pool: Ptr, share: Ptr) => h::cuMemPoolImportPointer;
    // --- driver: contexts (only so the probe's per-thread device cache never outlives one) ---
    cuCtxDestroy_v2(ctx: Ptr) => h::cuCtxDestroy;
    cuCtxDestroy(ctx: Ptr) => h::cuCtxDestroy;
    // --- door 3: the driver's own symbol lookup ---
    cuGetProcAddress(symbol: *const c_char, pfn: *mut Ptr, version: c_int, flags: u64) => h::cuGetProcAddress;
    cuGetProcAddress_v2(symbol: *const c_char, pfn: *mut Ptr, version: c_int, flags: u64, status: *mut c_int) => h::cuGetProcAddress_v2;
    // --- runtime (where libcudart is a shared library): recorded with the API the program called ---
    cudaMalloc(dev_ptr: *mut Ptr, size: usize) => h::cudaMalloc;
    cudaFree(dev_ptr: Ptr) => h::cudaFree;
    cudaMallocAsync(dev_ptr: *mut Ptr, size: usize, stream: Ptr) => h::cudaMallocAsync;
    cudaFreeAsync(dev_ptr: Ptr, stream: Ptr) => h::cudaFreeAsync;
    cudaMallocFromPoolAsync(dev_ptr: *mut Ptr, size: usize, pool: Ptr, stream: Ptr) => h::cudaMallocFromPoolAsync;
    cudaMallocManaged(dev_ptr: *mut Ptr, size: usize, flags: c_uint) => h::cudaMallocManaged;
    cudaMallocPitch(dev_ptr: *mut Ptr, pitch: *mut usize, width: usize, height: usize) => h::cudaMallocPitch;
    cudaMemGetInfo(free: *mut usize, total: *mut usize) => h::cudaMemGetInfo;
}
