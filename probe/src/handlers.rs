//! One handler per hooked symbol: which shape of hook it is and what it records.
//!
//! Each handler receives the real function and the caller's arguments, and must call the
//! real function exactly once with those arguments.

use core::ffi::{c_char, c_int, c_uint, c_void};

use fragprobe_wire::format::{Api, EventKind, Flags};
use fragprobe_wire::live::LiveClass;

use crate::hooks::IpcMemHandle;
use crate::record::{self, Seen};

type Ptr = *mut c_void;

/// Reads an out-parameter the real call wrote (0 when absent or on failure).
#[inline]
fn out<T: Copy + Into<u64>>(r: c_int, p: *const T) -> u64 {
    if r != 0 || p.is_null() {
        return 0;
    }
    // SAFETY: the caller passed p as an out-parameter and the real call succeeded, so it
    // points to an initialised T the caller owns.
    unsafe { core::ptr::read_volatile(p) }.into()
}

/// Reads a `void**` out-parameter as an address.
#[inline]
fn out_ptr(r: c_int, p: *const Ptr) -> u64 {
    if r != 0 || p.is_null() {
        return 0;
    }
    // SAFETY: as in `out`: a successful call wrote a pointer there.
    unsafe { core::ptr::read_volatile(p) as u64 }
}

fn plain(addr: u64, size: u64) -> Seen {
    Seen {
        addr,
        size,
        ..Seen::default()
    }
}

// ---------------------------------------------------------------- plain device memory

/// # Safety
/// C contract of `cuMemAlloc_v2`.
pub unsafe fn cuMemAlloc_v2(
    real: unsafe extern "C" fn(*mut u64, usize) -> c_int,
    dptr: *mut u64,
    size: usize,
) -> c_int {
    // SAFETY: forwarded unchanged.
    record::alloc(
        Api::CuMemAllocV2,
        EventKind::Alloc,
        Some(LiveClass::Device),
        || unsafe { real(dptr, size) },
        |r| plain(out(r, dptr), size as u64),
    )
}

/// # Safety
/// C contract of the legacy (32-bit `CUdeviceptr`) `cuMemAlloc`.
pub unsafe fn cuMemAlloc(
    real: unsafe extern "C" fn(*mut u32, c_uint) -> c_int,
    dptr: *mut u32,
    size: c_uint,
) -> c_int {
    // SAFETY: forwarded unchanged.
    record::alloc(
        Api::CuMemAlloc,
        EventKind::Alloc,
        Some(LiveClass::Device),
        || unsafe { real(dptr, size) },
        |r| plain(out(r, dptr), size as u64),
    )
}

/// # Safety
/// C contract of `cuMemAllocPitch_v2`.
pub unsafe fn cuMemAllocPitch_v2(
    real: unsafe extern "C" fn(*mut u64, *mut usize, usize, usize, c_uint) -> c_int,
    dptr: *mut u64,
    pitch: *mut usize,
    width: usize,
    height: usize,
    elem: c_uint,
) -> c_int {
    record::alloc(
        Api::CuMemAllocPitchV2,
        EventKind::Alloc,
        Some(LiveClass::Device),
        // SAFETY: forwarded unchanged.
        || unsafe { real(dptr, pitch, width, height, elem) },
        |r| {
            let p = out(r, pitch as *const u64);
            Seen {
                addr: out(r, dptr),
                size: p.saturating_mul(height as u64),
                aux: p,
                flags: Flags::PITCH,
                ..Seen::default()
            }
        },
    )
}

/// # Safety
/// C contract of the legacy `cuMemAllocPitch`.
pub unsafe fn cuMemAllocPitch(
    real: unsafe extern "C" fn(*mut u32, *mut c_uint, c_uint, c_uint, c_uint) -> c_int,
    dptr: *mut u32,
    pitch: *mut c_uint,
    width: c_uint,
    height: c_uint,
    elem: c_uint,
) -> c_int {
    record::alloc(
        Api::CuMemAllocPitch,
        EventKind::Alloc,
        Some(LiveClass::Device),
        // SAFETY: forwarded unchanged.
        || unsafe { real(dptr, pitch, width, height, elem) },
        |r| {
            let p = out(r, pitch);
            Seen {
                addr: out(r, dptr),
                size: p.saturating_mul(height as u64),
                aux: p,
                flags: Flags::PITCH,
                ..Seen::default()
            }
        },
    )
}

/// # Safety
/// C contract of `cuMemFree_v2`.
pub unsafe fn cuMemFree_v2(real: unsafe extern "C" fn(u64) -> c_int, dptr: u64) -> c_int {
    if dptr == 0 {
        // SAFETY: forwarded unchanged.
        return unsafe { real(dptr) };
    }
    // SAFETY: forwarded unchanged.
    record::free(
        Api::CuMemFreeV2,
        EventKind::Free,
        &[LiveClass::Device, LiveClass::Managed],
        dptr,
        0,
        || unsafe { real(dptr) },
    )
}

/// # Safety
/// C contract of the legacy `cuMemFree`.
pub unsafe fn cuMemFree(real: unsafe extern "C" fn(u32) -> c_int, dptr: u32) -> c_int {
    if dptr == 0 {
        // SAFETY: forwarded unchanged.
        return unsafe { real(dptr) };
    }
    // SAFETY: forwarded unchanged.
    record::free(
        Api::CuMemFree,
        EventKind::Free,
        &[LiveClass::Device, LiveClass::Managed],
        dptr as u64,
        0,
        || unsafe { real(dptr) },
    )
}

// ---------------------------------------------------------------- managed

/// # Safety
/// C contract of `cuMemAllocManaged`.
pub unsafe fn cuMemAllocManaged(
    real: unsafe extern "C" fn(*mut u64, usize, c_uint) -> c_int,
    dptr: *mut u64,
    size: usize,
    flags: c_uint,
) -> c_int {
    record::alloc(
        Api::CuMemAllocManaged,
        EventKind::ManagedAlloc,
        Some(LiveClass::Managed),
        // SAFETY: forwarded unchanged.
        || unsafe { real(dptr, size, flags) },
        |r| Seen {
            aux: flags as u64,
            ..plain(out(r, dptr), size as u64)
        },
    )
}

// ---------------------------------------------------------------- stream-ordered

fn async_alloc(
    api: Api,
    call: impl FnOnce() -> c_int,
    dptr: *const u64,
    size: usize,
    stream: Ptr,
    pool: Ptr,
) -> c_int {
    record::alloc(
        api,
        EventKind::AsyncAlloc,
        Some(LiveClass::Async),
        call,
        |r| Seen {
            aux: stream as u64,
            aux2: pool as u64,
            ..plain(out(r, dptr), size as u64)
        },
    )
}

fn async_free(api: Api, dptr: u64, stream: Ptr, call: impl FnOnce() -> c_int) -> c_int {
    if dptr == 0 {
        return call();
    }
    record::free(
        api,
        EventKind::AsyncFree,
        &[LiveClass::Async, LiveClass::Device],
        dptr,
        stream as u64,
        call,
    )
}

/// # Safety
/// C contract of `cuMemAllocAsync`.
pub unsafe fn cuMemAllocAsync(
    real: unsafe extern "C" fn(*mut u64, usize, Ptr) -> c_int,
    dptr: *mut u64,
    size: usize,
    stream: Ptr,
) -> c_int {
    // SAFETY: forwarded unchanged.
    async_alloc(
        Api::CuMemAllocAsync,
        || unsafe { real(dptr, size, stream) },
        dptr,
        size,
        stream,
        core::ptr::null_mut(),
    )
}

/// # Safety
/// C contract of `cuMemAllocAsync_ptsz`.
pub unsafe fn cuMemAllocAsync_ptsz(
    real: unsafe extern "C" fn(*mut u64, usize, Ptr) -> c_int,
    dptr: *mut u64,
    size: usize,
    stream: Ptr,
) -> c_int {
    // SAFETY: forwarded unchanged.
    async_alloc(
        Api::CuMemAllocAsyncPtsz,
        || unsafe { real(dptr, size, stream) },
        dptr,
        size,
        stream,
        core::ptr::null_mut(),
    )
}

/// # Safety
/// C contract of `cuMemAllocFromPoolAsync`.
pub unsafe fn cuMemAllocFromPoolAsync(
    real: unsafe extern "C" fn(*mut u64, usize, Ptr, Ptr) -> c_int,
    dptr: *mut u64,
    size: usize,
    pool: Ptr,
    stream: Ptr,
) -> c_int {
    // SAFETY: forwarded unchanged.
    async_alloc(
        Api::CuMemAllocFromPoolAsync,
        || unsafe { real(dptr, size, pool, stream) },
        dptr,
        size,
        stream,
        pool,
    )
}

/// # Safety
/// C contract of `cuMemAllocFromPoolAsync_ptsz`.
pub unsafe fn cuMemAllocFromPoolAsync_ptsz(
    real: unsafe extern "C" fn(*mut u64, usize, Ptr, Ptr) -> c_int,
    dptr: *mut u64,
    size: usize,
    pool: Ptr,
    stream: Ptr,
) -> c_int {
    // SAFETY: forwarded unchanged.
    async_alloc(
        Api::CuMemAllocFromPoolAsyncPtsz,
        || unsafe { real(dptr, size, pool, stream) },
        dptr,
        size,
        stream,
        pool,
    )
}

/// # Safety
/// C contract of `cuMemFreeAsync`.
pub unsafe fn cuMemFreeAsync(
    real: unsafe extern "C" fn(u64, Ptr) -> c_int,
    dptr: u64,
    stream: Ptr,
) -> c_int {
    // SAFETY: forwarded unchanged.
    async_free(Api::CuMemFreeAsync, dptr, stream, || unsafe {
        real(dptr, stream)
    })
}

/// # Safety
/// C contract of `cuMemFreeAsync_ptsz`.
pub unsafe fn cuMemFreeAsync_ptsz(
    real: unsafe extern "C" fn(u64, Ptr) -> c_int,
    dptr: u64,
    stream: Ptr,
) -> c_int {
    // SAFETY: forwarded unchanged.
    async_free(Api::CuMemFreeAsyncPtsz, dptr, stream, || unsafe {
        real(dptr, stream)
    })
}

/// # Safety
/// C contract of `cuMemPoolTrimTo`.
pub unsafe fn cuMemPoolTrimTo(
    real: unsafe extern "C" fn(Ptr, usize) -> c_int,
    pool: Ptr,
    keep: usize,
) -> c_int {
    // SAFETY: forwarded unchanged.
    record::note(
        Api::CuMemPoolTrimTo,
        EventKind::PoolTrim,
        || unsafe { real(pool, keep) },
        |_| {
            Some(Seen {
                size: keep as u64,
                aux: pool as u64,
                ..Seen::default()
            })
        },
    )
}

// ---------------------------------------------------------------- VMM

/// # Safety
/// C contract of `cuMemAddressReserve`.
pub unsafe fn cuMemAddressReserve(
    real: unsafe extern "C" fn(*mut u64, usize, usize, u64, u64) -> c_int,
    ptr: *mut u64,
    size: usize,
    align: usize,
    addr: u64,
    flags: u64,
) -> c_int {
    record::alloc(
        Api::CuMemAddressReserve,
        EventKind::AddressReserve,
        Some(LiveClass::Reservation),
        // SAFETY: forwarded unchanged.
        || unsafe { real(ptr, size, align, addr, flags) },
        |r| Seen {
            aux: align as u64,
            aux2: addr,
            ..plain(out(r, ptr), size as u64)
        },
    )
}

/// # Safety
/// C contract of `cuMemAddressFree`.
pub unsafe fn cuMemAddressFree(
    real: unsafe extern "C" fn(u64, usize) -> c_int,
    ptr: u64,
    size: usize,
) -> c_int {
    // SAFETY: forwarded unchanged.
    record::free(
        Api::CuMemAddressFree,
        EventKind::AddressFree,
        &[LiveClass::Reservation],
        ptr,
        0,
        || unsafe { real(ptr, size) },
    )
}

/// `CUmemAllocationProp.location` (type, id) at byte offsets 8 and 12.
fn prop_location(prop: *const c_void) -> (u32, i32) {
    if prop.is_null() {
        return (0, -1);
    }
    // SAFETY: the caller passes a valid CUmemAllocationProp (32 bytes, 8-aligned); the
    // location is {u32 type; i32 id} at offset 8.
    unsafe {
        let b = prop as *const u8;
        (
            core::ptr::read_unaligned(b.add(8) as *const u32),
            core::ptr::read_unaligned(b.add(12) as *const i32),
        )
    }
}

/// # Safety
/// C contract of `cuMemCreate`.
pub unsafe fn cuMemCreate(
    real: unsafe extern "C" fn(*mut u64, usize, *const c_void, u64) -> c_int,
    handle: *mut u64,
    size: usize,
    prop: *const c_void,
    flags: u64,
) -> c_int {
    let (loc_type, id) = prop_location(prop);
    record::alloc(
        Api::CuMemCreate,
        EventKind::MemCreate,
        Some(LiveClass::Handle),
        // SAFETY: forwarded unchanged.
        || unsafe { real(handle, size, prop, flags) },
        |r| Seen {
            aux: loc_type as u64,
            aux2: flags,
            device: Some(id.clamp(-1, i16::MAX as i32) as i16),
            ..plain(out(r, handle), size as u64)
        },
    )
}

/// # Safety
/// C contract of `cuMemRelease`.
pub unsafe fn cuMemRelease(real: unsafe extern "C" fn(u64) -> c_int, handle: u64) -> c_int {
    // SAFETY: forwarded unchanged.
    record::free(
        Api::CuMemRelease,
        EventKind::MemRelease,
        &[LiveClass::Handle],
        handle,
        0,
        || unsafe { real(handle) },
    )
}

/// # Safety
/// C contract of `cuMemMap`.
pub unsafe fn cuMemMap(
    real: unsafe extern "C" fn(u64, usize, usize, u64, u64) -> c_int,
    ptr: u64,
    size: usize,
    offset: usize,
    handle: u64,
    flags: u64,
) -> c_int {
    // SAFETY: forwarded unchanged.
    record::map(
        Api::CuMemMap,
        ptr,
        size as u64,
        offset as u64,
        handle,
        || unsafe { real(ptr, size, offset, handle, flags) },
    )
}

/// # Safety
/// C contract of `cuMemUnmap`.
pub unsafe fn cuMemUnmap(
    real: unsafe extern "C" fn(u64, usize) -> c_int,
    ptr: u64,
    size: usize,
) -> c_int {
    // SAFETY: forwarded unchanged.
    record::unmap(Api::CuMemUnmap, ptr, size as u64, || unsafe {
        real(ptr, size)
    })
}

// ---------------------------------------------------------------- mem info

fn info(
    api: Api,
    call: impl FnOnce() -> c_int,
    free: impl FnOnce() -> Option<u64>,
    total: impl FnOnce() -> Option<u64>,
) -> c_int {
    record::note(api, EventKind::MemGetInfo, call, |r| {
        if r != 0 {
            return None;
        }
        let (f, t) = (free(), total());
        (f.is_some() || t.is_some()).then(|| Seen {
            size: f.unwrap_or(0),
            aux: t.unwrap_or(0),
            ..Seen::default()
        })
    })
}

fn opt<T: Copy + Into<u64>>(p: *const T) -> Option<u64> {
    (!p.is_null()).then(|| out(0, p))
}

/// # Safety
/// C contract of `cuMemGetInfo_v2` (NULL pointers allowed).
pub unsafe fn cuMemGetInfo_v2(
    real: unsafe extern "C" fn(*mut usize, *mut usize) -> c_int,
    free: *mut usize,
    total: *mut usize,
) -> c_int {
    // SAFETY: forwarded unchanged.
    info(
        Api::CuMemGetInfoV2,
        || unsafe { real(free, total) },
        || opt(free as *const u64),
        || opt(total as *const u64),
    )
}

/// # Safety
/// C contract of the legacy `cuMemGetInfo`.
pub unsafe fn cuMemGetInfo(
    real: unsafe extern "C" fn(*mut c_uint, *mut c_uint) -> c_int,
    free: *mut c_uint,
    total: *mut c_uint,
) -> c_int {
    // SAFETY: forwarded unchanged.
    info(
        Api::CuMemGetInfo,
        || unsafe { real(free, total) },
        || opt(free as *const u32),
        || opt(total as *const u32),
    )
}

/// # Safety
/// C contract of `cudaMemGetInfo`.
pub unsafe fn cudaMemGetInfo(
    real: unsafe extern "C" fn(*mut usize, *mut usize) -> c_int,
    free: *mut usize,
    total: *mut usize,
) -> c_int {
    // SAFETY: forwarded unchanged.
    info(
        Api::CudaMemGetInfo,
        || unsafe { real(free, total) },
        || opt(free as *const u64),
        || opt(total as *const u64),
    )
}

// ---------------------------------------------------------------- imports

fn import(
    api: Api,
    call: impl FnOnce() -> c_int,
    addr: impl FnOnce(c_int) -> u64,
    handle_import: bool,
) -> c_int {
    record::note(api, EventKind::Import, call, |r| {
        Some(Seen {
            addr: addr(r),
            aux: api as u64,
            aux2: handle_import as u64,
            ..Seen::default()
        })
    })
}

/// # Safety
/// C contract of `cuIpcOpenMemHandle_v2`.
pub unsafe fn cuIpcOpenMemHandle_v2(
    real: unsafe extern "C" fn(*mut u64, IpcMemHandle, c_uint) -> c_int,
    p: *mut u64,
    h: IpcMemHandle,
    flags: c_uint,
) -> c_int {
    // SAFETY: forwarded unchanged.
    import(
        Api::CuIpcOpenMemHandleV2,
        || unsafe { real(p, h, flags) },
        |r| out(r, p),
        false,
    )
}

/// # Safety
/// C contract of `cuIpcOpenMemHandle`.
pub unsafe fn cuIpcOpenMemHandle(
    real: unsafe extern "C" fn(*mut u64, IpcMemHandle, c_uint) -> c_int,
    p: *mut u64,
    h: IpcMemHandle,
    flags: c_uint,
) -> c_int {
    // SAFETY: forwarded unchanged.
    import(
        Api::CuIpcOpenMemHandle,
        || unsafe { real(p, h, flags) },
        |r| out(r, p),
        false,
    )
}

/// # Safety
/// C contract of `cuIpcCloseMemHandle`.
pub unsafe fn cuIpcCloseMemHandle(real: unsafe extern "C" fn(u64) -> c_int, p: u64) -> c_int {
    // SAFETY: forwarded unchanged.
    record::free(
        Api::CuIpcCloseMemHandle,
        EventKind::Free,
        &[],
        p,
        0,
        || unsafe { real(p) },
    )
}

/// # Safety
/// C contract of `cuMemImportFromShareableHandle`.
pub unsafe fn cuMemImportFromShareableHandle(
    real: unsafe extern "C" fn(*mut u64, Ptr, c_uint) -> c_int,
    h: *mut u64,
    os: Ptr,
    kind: c_uint,
) -> c_int {
    // SAFETY: forwarded unchanged.
    import(
        Api::CuMemImportFromShareableHandle,
        || unsafe { real(h, os, kind) },
        |r| out(r, h),
        true,
    )
}

/// # Safety
/// C contract of `cuMemPoolImportPointer`.
pub unsafe fn cuMemPoolImportPointer(
    real: unsafe extern "C" fn(*mut u64, Ptr, Ptr) -> c_int,
    p: *mut u64,
    pool: Ptr,
    share: Ptr,
) -> c_int {
    // SAFETY: forwarded unchanged.
    import(
        Api::CuMemPoolImportPointer,
        || unsafe { real(p, pool, share) },
        |r| out(r, p),
        false,
    )
}

// ---------------------------------------------------------------- contexts

/// `cuCtxDestroy_v2` and the legacy `cuCtxDestroy` (same signature).
///
/// # Safety
/// C contract of `cuCtxDestroy_v2`.
pub unsafe fn cuCtxDestroy(real: unsafe extern "C" fn(Ptr) -> c_int, ctx: Ptr) -> c_int {
    // SAFETY: forwarded unchanged.
    let r = unsafe { real(ctx) };
    // Nothing to record; a context address may now be reused for another device.
    crate::device::context_destroyed();
    r
}

// ---------------------------------------------------------------- door 3

/// # Safety
/// C contract of `cuGetProcAddress` (CUDA 11.3, 4 arguments).
pub unsafe fn cuGetProcAddress(
    real: unsafe extern "C" fn(*const c_char, *mut Ptr, c_int, u64) -> c_int,
    sym: *const c_char,
    pfn: *mut Ptr,
    version: c_int,
    flags: u64,
) -> c_int {
    // SAFETY: forwarded unchanged.
    let r = unsafe { real(sym, pfn, version, flags) };
    if r == 0 {
        // SAFETY: on success the driver wrote a function pointer to *pfn.
        unsafe { crate::getproc::substitute(sym, pfn, version, flags) };
    }
    r
}

/// # Safety
/// C contract of `cuGetProcAddress_v2` (CUDA 12.0, 5 arguments).
pub unsafe fn cuGetProcAddress_v2(
    real: unsafe extern "C" fn(*const c_char, *mut Ptr, c_int, u64, *mut c_int) -> c_int,
    sym: *const c_char,
    pfn: *mut Ptr,
    version: c_int,
    flags: u64,
    status: *mut c_int,
) -> c_int {
    // SAFETY: forwarded unchanged.
    let r = unsafe { real(sym, pfn, version, flags, status) };
    if r == 0 {
        // SAFETY: on success the driver wrote a function pointer to *pfn.
        unsafe { crate::getproc::substitute(sym, pfn, version, flags) };
    }
    r
}

// ---------------------------------------------------------------- runtime

/// # Safety
/// C contract of `cudaMalloc`.
pub unsafe fn cudaMalloc(
    real: unsafe extern "C" fn(*mut Ptr, usize) -> c_int,
    p: *mut Ptr,
    size: usize,
) -> c_int {
    // SAFETY: forwarded unchanged.
    record::alloc(
        Api::CudaMalloc,
        EventKind::Alloc,
        Some(LiveClass::Device),
        || unsafe { real(p, size) },
        |r| plain(out_ptr(r, p), size as u64),
    )
}

/// # Safety
/// C contract of `cudaFree` (`cudaFree(NULL)` is passed through unrecorded).
pub unsafe fn cudaFree(real: unsafe extern "C" fn(Ptr) -> c_int, p: Ptr) -> c_int {
    if p.is_null() {
        // SAFETY: forwarded unchanged.
        return unsafe { real(p) };
    }
    // SAFETY: forwarded unchanged.
    record::free(
        Api::CudaFree,
        EventKind::Free,
        &[LiveClass::Device, LiveClass::Managed],
        p as u64,
        0,
        || unsafe { real(p) },
    )
}

/// # Safety
/// C contract of `cudaMallocAsync`.
pub unsafe fn cudaMallocAsync(
    real: unsafe extern "C" fn(*mut Ptr, usize, Ptr) -> c_int,
    p: *mut Ptr,
    size: usize,
    stream: Ptr,
) -> c_int {
    record::alloc(
        Api::CudaMallocAsync,
        EventKind::AsyncAlloc,
        Some(LiveClass::Async),
        || {
            // SAFETY: forwarded unchanged.
            unsafe { real(p, size, stream) }
        },
        |r| Seen {
            aux: stream as u64,
            ..plain(out_ptr(r, p), size as u64)
        },
    )
}

/// # Safety
/// C contract of `cudaFreeAsync`.
pub unsafe fn cudaFreeAsync(
    real: unsafe extern "C" fn(Ptr, Ptr) -> c_int,
    p: Ptr,
    stream: Ptr,
) -> c_int {
    // SAFETY: forwarded unchanged.
    async_free(Api::CudaFreeAsync, p as u64, stream, || unsafe {
        real(p, stream)
    })
}

/// # Safety
/// C contract of `cudaMallocFromPoolAsync`.
pub unsafe fn cudaMallocFromPoolAsync(
    real: unsafe extern "C" fn(*mut Ptr, usize, Ptr, Ptr) -> c_int,
    p: *mut Ptr,
    size: usize,
    pool: Ptr,
    stream: Ptr,
) -> c_int {
    record::alloc(
        Api::CudaMallocFromPoolAsync,
        EventKind::AsyncAlloc,
        Some(LiveClass::Async),
        || {
            // SAFETY: forwarded unchanged.
            unsafe { real(p, size, pool, stream) }
        },
        |r| Seen {
            aux: stream as u64,
            aux2: pool as u64,
            ..plain(out_ptr(r, p), size as u64)
        },
    )
}

/// # Safety
/// C contract of `cudaMallocManaged`.
pub unsafe fn cudaMallocManaged(
    real: unsafe extern "C" fn(*mut Ptr, usize, c_uint) -> c_int,
    p: *mut Ptr,
    size: usize,
    flags: c_uint,
) -> c_int {
    record::alloc(
        Api::CudaMallocManaged,
        EventKind::ManagedAlloc,
        Some(LiveClass::Managed),
        || {
            // SAFETY: forwarded unchanged.
            unsafe { real(p, size, flags) }
        },
        |r| Seen {
            aux: flags as u64,
            ..plain(out_ptr(r, p), size as u64)
        },
    )
}

/// # Safety
/// C contract of `cudaMallocPitch`.
pub unsafe fn cudaMallocPitch(
    real: unsafe extern "C" fn(*mut Ptr, *mut usize, usize, usize) -> c_int,
    p: *mut Ptr,
    pitch: *mut usize,
    width: usize,
    height: usize,
) -> c_int {
    record::alloc(
        Api::CudaMallocPitch,
        EventKind::Alloc,
        Some(LiveClass::Device),
        || {
            // SAFETY: forwarded unchanged.
            unsafe { real(p, pitch, width, height) }
        },
        |r| {
            let pt = out(r, pitch as *const u64);
            Seen {
                addr: out_ptr(r, p),
                size: pt.saturating_mul(height as u64),
                aux: pt,
                flags: Flags::PITCH,
                ..Seen::default()
            }
        },
    )
}
