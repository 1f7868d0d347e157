//! The simulated driver's `cuGetProcAddress` answers every request the real CUDA 12.8
//! runtime makes like a real 12.8 driver, and exports every symbol cudarc binds.

use fragprobe_tests::sim::{driver_library, workspace_root};
use libloading::Library;
use std::ffi::{c_char, c_int, c_void, CString};

type GetProcV2 =
    unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64, *mut c_int) -> u32;
type GetProc = unsafe extern "C" fn(*const c_char, *mut *mut c_void, c_int, u64) -> u32;

const CUDA_SUCCESS: u32 = 0;
const CUDA_ERROR_INVALID_VALUE: u32 = 1;
const CUDA_ERROR_NOT_FOUND: u32 = 500;
const FOUND: c_int = 0;
const SYMBOL_NOT_FOUND: c_int = 1;
const VERSION_NOT_SUFFICIENT: c_int = 2;

struct Driver {
    lib: Library,
    v2: GetProcV2,
    v1: GetProc,
}

fn driver() -> Driver {
    // SAFETY: loading the stand-in driver runs no initialisation code.
    let lib = unsafe { Library::new(driver_library()) }.expect("load the stand-in libcuda");
    // SAFETY: the symbols have these C signatures.
    let v2 = unsafe {
        *lib.get::<GetProcV2>(b"cuGetProcAddress_v2\0")
            .expect("cuGetProcAddress_v2")
    };
    // SAFETY: as above.
    let v1 = unsafe {
        *lib.get::<GetProc>(b"cuGetProcAddress\0")
            .expect("cuGetProcAddress")
    };
    Driver { lib, v2, v1 }
}

impl Driver {
    /// Address of an exported symbol (dlsym on the library).
    fn dlsym(&self, name: &str) -> Option<*mut c_void> {
        let c = CString::new(name).unwrap();
        // SAFETY: only the address dlsym returns is taken; nothing is called or read.
        unsafe { self.lib.get::<*mut c_void>(c.as_bytes_with_nul()) }
            .ok()
            .map(|s| *s)
    }

    /// (result, status, pointer) of `cuGetProcAddress_v2`.
    fn get(&self, name: &str, version: c_int, flags: u64) -> (u32, c_int, *mut c_void) {
        let c = CString::new(name).unwrap();
        let mut p: *mut c_void = std::ptr::null_mut();
        let mut status: c_int = -1;
        // SAFETY: valid C string and out-pointers.
        let rc = unsafe { (self.v2)(c.as_ptr(), &mut p, version, flags, &mut status) };
        (rc, status, p)
    }
}

fn fixture(name: &str) -> String {
    std::fs::read_to_string(workspace_root().join("cuda/fixtures").join(name)).expect("fixture")
}

#[test]
fn every_cudart_12_8_request_is_answered_like_a_real_driver() {
    let d = driver();
    let requests: Vec<(String, c_int, u64)> = fixture("cudart-12.8-getproc-requests.txt")
        .lines()
        .map(|l| {
            let (name, rest) = l.split_once(", ver=").expect("name");
            let (ver, flags) = rest.split_once(", flags=").expect("flags");
            (
                name.to_string(),
                ver.parse().unwrap(),
                flags.parse().unwrap(),
            )
        })
        .collect();
    let expected: Vec<Vec<String>> = fixture("cudart-12.8-getproc-expected.txt")
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split_whitespace().map(String::from).collect())
        .collect();
    assert_eq!(requests.len(), 419);
    assert_eq!(requests.len(), expected.len());
    let mut found = 0;
    for ((name, ver, flags), exp) in requests.iter().zip(&expected) {
        assert_eq!(
            exp[1].parse::<c_int>().unwrap(),
            *ver,
            "fixtures out of step at {name}"
        );
        let (rc, status, p) = d.get(name, *ver, *flags);
        if exp[3] == "SYMBOL_NOT_FOUND" {
            assert_eq!(
                (rc, status, p),
                (CUDA_ERROR_NOT_FOUND, SYMBOL_NOT_FOUND, std::ptr::null_mut()),
                "{name:?}"
            );
            continue;
        }
        assert_eq!(
            (rc, status),
            (CUDA_SUCCESS, FOUND),
            "{name} ver={ver} flags={flags}"
        );
        assert!(!p.is_null(), "{name}");
        let want = d
            .dlsym(&exp[3])
            .unwrap_or_else(|| panic!("{} is not exported", exp[3]));
        assert_eq!(
            p, want,
            "{name} ver={ver} flags={flags} should be {}",
            exp[3]
        );
        found += 1;
    }
    assert_eq!(found, 418);
}

#[test]
fn versions_and_per_thread_variants_select_the_symbol() {
    let d = driver();
    let sym = |n: &str| d.dlsym(n).unwrap();
    let cases: &[(&str, c_int, u64, &str)] = &[
        ("cuMemAlloc", 2000, 0, "cuMemAlloc"),
        ("cuMemAlloc", 3020, 0, "cuMemAlloc_v2"),
        ("cuMemAlloc", 12080, 2, "cuMemAlloc_v2"),
        ("cuMemGetInfo", 3020, 0, "cuMemGetInfo_v2"),
        ("cuCtxCreate", 3020, 0, "cuCtxCreate_v2"),
        ("cuCtxCreate", 11040, 0, "cuCtxCreate_v3"),
        ("cuCtxCreate", 12080, 0, "cuCtxCreate_v4"),
        ("cuStreamDestroy", 4000, 0, "cuStreamDestroy_v2"),
        ("cuStreamDestroy", 3020, 0, "cuStreamDestroy"),
        ("cuEventDestroy", 4000, 0, "cuEventDestroy_v2"),
        (
            "cuDevicePrimaryCtxRelease",
            11000,
            0,
            "cuDevicePrimaryCtxRelease_v2",
        ),
        (
            "cuDevicePrimaryCtxRelease",
            7000,
            0,
            "cuDevicePrimaryCtxRelease",
        ),
        ("cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2"),
        ("cuGetProcAddress", 11030, 0, "cuGetProcAddress"),
        ("cuMemAllocAsync", 11020, 0, "cuMemAllocAsync"),
        ("cuMemAllocAsync", 11020, 1, "cuMemAllocAsync"),
        ("cuMemAllocAsync", 11020, 2, "cuMemAllocAsync_ptsz"),
        ("cuMemFreeAsync", 12080, 2, "cuMemFreeAsync_ptsz"),
        (
            "cuMemAllocFromPoolAsync",
            12080,
            2,
            "cuMemAllocFromPoolAsync_ptsz",
        ),
        ("cuStreamSynchronize", 7000, 2, "cuStreamSynchronize_ptsz"),
        ("cuMemcpyHtoD", 7000, 2, "cuMemcpyHtoD_v2_ptds"),
        ("cuMemcpyHtoD", 2000, 2, "cuMemcpyHtoD"),
        (
            "cuStreamGetCaptureInfo",
            12030,
            2,
            "cuStreamGetCaptureInfo_v3_ptsz",
        ),
        ("cuEventElapsedTime", 12080, 0, "cuEventElapsedTime_v2"),
        ("cuMemCreate", 12080, 0, "cuMemCreate"),
    ];
    for &(name, ver, flags, want) in cases {
        let (rc, status, p) = d.get(name, ver, flags);
        assert_eq!((rc, status), (CUDA_SUCCESS, FOUND), "{name} {ver} {flags}");
        assert_eq!(p, sym(want), "{name} {ver} {flags} should be {want}");
    }
    // too old a version for the function
    let (rc, status, p) = d.get("cuMemAllocAsync", 11010, 0);
    assert_eq!(
        (rc, status, p),
        (
            CUDA_ERROR_NOT_FOUND,
            VERSION_NOT_SUFFICIENT,
            std::ptr::null_mut()
        )
    );
    // unknown names, including the empty one
    for name in ["", "cuNoSuchFunction", "cudaMalloc", "cuMemAlloc_v2"] {
        let (rc, status, p) = d.get(name, 12080, 0);
        assert_eq!(
            (rc, status, p),
            (CUDA_ERROR_NOT_FOUND, SYMBOL_NOT_FOUND, std::ptr::null_mut()),
            "{name:?}"
        );
    }
    // bad flags
    assert_eq!(d.get("cuInit", 12080, 4).0, CUDA_ERROR_INVALID_VALUE);
    // the 4-argument form answers the same
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: valid C string and out-pointer.
    let rc = unsafe { (d.v1)(c"cuMemFree".as_ptr(), &mut p, 12080, 0) };
    assert_eq!((rc, p), (CUDA_SUCCESS, sym("cuMemFree_v2")));
    // SAFETY: as above.
    let rc = unsafe { (d.v1)(c"cuMemFree".as_ptr(), &mut p, 1000, 0) };
    assert_eq!((rc, p), (CUDA_ERROR_NOT_FOUND, std::ptr::null_mut()));
}

#[test]
fn exports_every_symbol_cudarc_and_the_table_name() {
    let d = driver();
    let cudarc = fixture("cudarc-0.19-cuda-12080-driver-symbols.txt");
    let missing: Vec<&str> = cudarc.lines().filter(|n| d.dlsym(n).is_none()).collect();
    assert!(missing.is_empty(), "not exported: {missing:?}");
    assert_eq!(cudarc.lines().count(), 443);
    let table =
        std::fs::read_to_string(workspace_root().join("cuda/driver/entry_points.txt")).unwrap();
    let mut n = 0;
    for line in table
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        for sym in line.split_whitespace().skip(2) {
            assert!(
                d.dlsym(sym).is_some(),
                "{sym} from entry_points.txt is not exported"
            );
            n += 1;
        }
    }
    assert!(n > 600, "{n}");
}

#[test]
fn unsupported_entry_points_answer_801() {
    let d = driver();
    // (Launches, modules and copies are simulated now, as no-op kernels, and so are stream
    // capture and graphs: see cuda/driver/src/api/kernel.rs and graph.rs.)
    for name in [
        "cuArrayCreate",
        "cuTexObjectCreate",
        "cuGraphAddMemAllocNode",
        "cuStreamBeginCaptureToGraph",
    ] {
        let (rc, _, p) = d.get(name, 12080, 0);
        assert_eq!(rc, CUDA_SUCCESS);
        // SAFETY: every stub takes no arguments the callee reads and returns a CUresult.
        let f: unsafe extern "C" fn() -> u32 =
            unsafe { std::mem::transmute::<*mut c_void, unsafe extern "C" fn() -> u32>(p) };
        // SAFETY: as above.
        assert_eq!(unsafe { f() }, 801, "{name}");
    }
}
