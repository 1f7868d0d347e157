//! The simulated driver's exported C entry points, called through the loaded `libcuda.so`
//! stand-in (as a program or the probe would call them).
//!
//! Target: a `cuMemAlloc_v2` + `cuMemFree_v2` pair ≤ 200 ns median
//! (`simgpu/alloc_free_4KiB`). `alloc_free_8KiB_10k_holes` runs the same pair on an arena
//! holding 10 000 holes too small for the request, to show placement stays O(log n).

use std::ffi::{c_char, c_int, c_void};
use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion};
use fragprobe_simgpu::config::{ENV_GPU, ENV_STATE};
use libloading::Library;

type Init = unsafe extern "C" fn(u32) -> u32;
type DeviceGet = unsafe extern "C" fn(*mut c_int, c_int) -> u32;
type Retain = unsafe extern "C" fn(*mut *mut c_void, c_int) -> u32;
type SetCurrent = unsafe extern "C" fn(*mut c_void) -> u32;
type Alloc = unsafe extern "C" fn(*mut u64, usize) -> u32;
type Free = unsafe extern "C" fn(u64) -> u32;
type AllocAsync = unsafe extern "C" fn(*mut u64, usize, *mut c_void) -> u32;
type FreeAsync = unsafe extern "C" fn(u64, *mut c_void) -> u32;
type GetProc = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> u32;

struct Driver {
    _lib: Library,
    ctx: *mut c_void,
    set_current: SetCurrent,
    alloc: Alloc,
    free: Free,
    alloc_async: AllocAsync,
    free_async: FreeAsync,
    get_proc: GetProc,
}

fn load() -> Driver {
    let state = std::env::temp_dir().join(format!("fragprobe-simgpu-bench-{}", std::process::id()));
    let _ = std::fs::remove_file(&state);
    // set before the driver reads its settings (cuInit); the bench is single-threaded here
    std::env::set_var(ENV_STATE, &state);
    std::env::set_var(ENV_GPU, "1x16GiB");
    let path = fragprobe_tests::sim::driver_library();
    // SAFETY: loading the stand-in runs no initialisation code; each symbol below has the
    // declared C signature (CUDA 12.8 driver API).
    unsafe {
        let lib = Library::new(&path).expect("load libcuda.so stand-in");
        let init = *lib.get::<Init>(b"cuInit\0").unwrap();
        let device_get = *lib.get::<DeviceGet>(b"cuDeviceGet\0").unwrap();
        let retain = *lib.get::<Retain>(b"cuDevicePrimaryCtxRetain\0").unwrap();
        let set_current = *lib.get::<SetCurrent>(b"cuCtxSetCurrent\0").unwrap();
        assert_eq!(init(0), 0);
        let mut dev = 0;
        assert_eq!(device_get(&mut dev, 0), 0);
        let mut ctx = std::ptr::null_mut();
        assert_eq!(retain(&mut ctx, dev), 0);
        Driver {
            ctx,
            set_current,
            alloc: *lib.get::<Alloc>(b"cuMemAlloc_v2\0").unwrap(),
            free: *lib.get::<Free>(b"cuMemFree_v2\0").unwrap(),
            alloc_async: *lib.get::<AllocAsync>(b"cuMemAllocAsync\0").unwrap(),
            free_async: *lib.get::<FreeAsync>(b"cuMemFreeAsync\0").unwrap(),
            get_proc: *lib.get::<GetProc>(b"cuGetProcAddress_v2\0").unwrap(),
            _lib: lib,
        }
    }
}

fn bench(c: &mut Criterion) {
    let d = load();
    // SAFETY: a context handle from the driver (current on this, the benchmarking, thread).
    assert_eq!(unsafe { (d.set_current)(d.ctx) }, 0);
    let mut g = c.benchmark_group("simgpu");

    g.bench_function("alloc_free_4KiB", |b| {
        b.iter(|| {
            let mut p = 0u64;
            // SAFETY: valid out-pointer; the pointer freed is the one just allocated.
            unsafe {
                assert_eq!((d.alloc)(&mut p, black_box(4096)), 0);
                assert_eq!((d.free)(black_box(p)), 0);
            }
        })
    });

    g.bench_function("alloc_free_async_4KiB", |b| {
        b.iter(|| {
            let mut p = 0u64;
            // SAFETY: as above; NULL is the legacy default stream.
            unsafe {
                assert_eq!(
                    (d.alloc_async)(&mut p, black_box(4096), std::ptr::null_mut()),
                    0
                );
                assert_eq!((d.free_async)(black_box(p), std::ptr::null_mut()), 0);
            }
        })
    });

    g.bench_function("get_proc_address_cuMemAlloc", |b| {
        b.iter(|| {
            let mut p = std::ptr::null_mut();
            let mut status = 0;
            // SAFETY: valid C string and out-pointers.
            unsafe {
                assert_eq!(
                    (d.get_proc)(
                        c"cuMemAlloc".as_ptr(),
                        &mut p,
                        black_box(12080),
                        0,
                        &mut status
                    ),
                    0
                );
            }
            black_box(p)
        })
    });

    // 20 000 blocks of 4 KiB, every other one freed: 10 000 holes an 8 KiB request skips
    let mut blocks = Vec::new();
    for _ in 0..20_000 {
        let mut p = 0u64;
        // SAFETY: valid out-pointer.
        assert_eq!(unsafe { (d.alloc)(&mut p, 4096) }, 0);
        blocks.push(p);
    }
    for p in blocks.iter().step_by(2) {
        // SAFETY: a live allocation.
        assert_eq!(unsafe { (d.free)(*p) }, 0);
    }
    g.bench_function("alloc_free_8KiB_10k_holes", |b| {
        b.iter(|| {
            let mut p = 0u64;
            // SAFETY: as above.
            unsafe {
                assert_eq!((d.alloc)(&mut p, black_box(8192)), 0);
                assert_eq!((d.free)(black_box(p)), 0);
            }
        })
    });
    g.finish();
    for p in blocks.iter().skip(1).step_by(2) {
        // SAFETY: a live allocation.
        assert_eq!(unsafe { (d.free)(*p) }, 0);
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
