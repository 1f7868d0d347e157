//! The stand-in driver's C entry points behave like the real ones: initialisation rules,
//! device queries, the context stack, error strings, pointer attributes, streams, events.
//! Runs in a child process so the driver reads a private simulated-GPU environment.

use fragprobe_tests::sim::{driver_library, is_child, rerun_test};
use libloading::Library;
use std::ffi::{c_char, c_float, c_int, c_uint, c_void, CStr};

const TEST: &str = "driver_entry_points_follow_the_cuda_api";

#[test]
fn driver_entry_points_follow_the_cuda_api() {
    if is_child(TEST) {
        // SAFETY: the checks call the stand-in with valid arguments of the declared types.
        unsafe { checks() };
        return;
    }
    let out = rerun_test(TEST, Some("2x1GiB"), |_| {});
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

type Ptr = *mut c_void;

/// Looks up `name` with type `T`.
///
/// # Safety
/// `T` must be the symbol's C signature.
unsafe fn f<T: Copy>(lib: &Library, name: &str) -> T {
    let mut n = name.as_bytes().to_vec();
    n.push(0);
    // SAFETY: per the caller's contract.
    unsafe {
        *lib.get::<T>(n.as_slice())
            .unwrap_or_else(|e| panic!("{name}: {e}"))
    }
}

/// # Safety
/// Calls the stand-in driver; only valid arguments are passed.
unsafe fn checks() {
    // SAFETY: loading the stand-in runs no initialisation code.
    let lib = unsafe { Library::new(driver_library()) }.unwrap();
    // SAFETY: every signature below is the CUDA 12.8 one of that symbol and every pointer
    // passed is valid for the access the function makes.
    unsafe {
        let init: unsafe extern "C" fn(c_uint) -> u32 = f(&lib, "cuInit");
        let version: unsafe extern "C" fn(*mut c_int) -> u32 = f(&lib, "cuDriverGetVersion");
        let count: unsafe extern "C" fn(*mut c_int) -> u32 = f(&lib, "cuDeviceGetCount");
        let name: unsafe extern "C" fn(*mut c_char, c_int, c_int) -> u32 =
            f(&lib, "cuDeviceGetName");
        let attr: unsafe extern "C" fn(*mut c_int, c_int, c_int) -> u32 =
            f(&lib, "cuDeviceGetAttribute");
        let total: unsafe extern "C" fn(*mut usize, c_int) -> u32 = f(&lib, "cuDeviceTotalMem_v2");
        let total_v1: unsafe extern "C" fn(*mut c_uint, c_int) -> u32 = f(&lib, "cuDeviceTotalMem");
        let bus_id: unsafe extern "C" fn(*mut c_char, c_int, c_int) -> u32 =
            f(&lib, "cuDeviceGetPCIBusId");
        let by_bus: unsafe extern "C" fn(*mut c_int, *const c_char) -> u32 =
            f(&lib, "cuDeviceGetByPCIBusId");
        let uuid: unsafe extern "C" fn(*mut [u8; 16], c_int) -> u32 = f(&lib, "cuDeviceGetUuid_v2");
        let err_name: unsafe extern "C" fn(u32, *mut *const c_char) -> u32 =
            f(&lib, "cuGetErrorName");
        let err_str: unsafe extern "C" fn(u32, *mut *const c_char) -> u32 =
            f(&lib, "cuGetErrorString");
        let retain: unsafe extern "C" fn(*mut Ptr, c_int) -> u32 =
            f(&lib, "cuDevicePrimaryCtxRetain");
        let release: unsafe extern "C" fn(c_int) -> u32 = f(&lib, "cuDevicePrimaryCtxRelease_v2");
        let state: unsafe extern "C" fn(c_int, *mut c_uint, *mut c_int) -> u32 =
            f(&lib, "cuDevicePrimaryCtxGetState");
        let set_flags_v1: unsafe extern "C" fn(c_int, c_uint) -> u32 =
            f(&lib, "cuDevicePrimaryCtxSetFlags");
        let set_flags: unsafe extern "C" fn(c_int, c_uint) -> u32 =
            f(&lib, "cuDevicePrimaryCtxSetFlags_v2");
        let create: unsafe extern "C" fn(*mut Ptr, c_uint, c_int) -> u32 =
            f(&lib, "cuCtxCreate_v2");
        let destroy: unsafe extern "C" fn(Ptr) -> u32 = f(&lib, "cuCtxDestroy_v2");
        let get_cur: unsafe extern "C" fn(*mut Ptr) -> u32 = f(&lib, "cuCtxGetCurrent");
        let set_cur: unsafe extern "C" fn(Ptr) -> u32 = f(&lib, "cuCtxSetCurrent");
        let push: unsafe extern "C" fn(Ptr) -> u32 = f(&lib, "cuCtxPushCurrent_v2");
        let pop: unsafe extern "C" fn(*mut Ptr) -> u32 = f(&lib, "cuCtxPopCurrent_v2");
        let ctx_dev: unsafe extern "C" fn(*mut c_int) -> u32 = f(&lib, "cuCtxGetDevice");
        let alloc: unsafe extern "C" fn(*mut u64, usize) -> u32 = f(&lib, "cuMemAlloc_v2");
        let free: unsafe extern "C" fn(u64) -> u32 = f(&lib, "cuMemFree_v2");
        let info: unsafe extern "C" fn(*mut usize, *mut usize) -> u32 = f(&lib, "cuMemGetInfo_v2");
        let ptr_attr: unsafe extern "C" fn(Ptr, c_int, u64) -> u32 =
            f(&lib, "cuPointerGetAttribute");
        let range: unsafe extern "C" fn(*mut u64, *mut usize, u64) -> u32 =
            f(&lib, "cuMemGetAddressRange_v2");
        let stream_create: unsafe extern "C" fn(*mut Ptr, c_uint, c_int) -> u32 =
            f(&lib, "cuStreamCreateWithPriority");
        let stream_prio: unsafe extern "C" fn(Ptr, *mut c_int) -> u32 =
            f(&lib, "cuStreamGetPriority");
        let stream_destroy: unsafe extern "C" fn(Ptr) -> u32 = f(&lib, "cuStreamDestroy_v2");
        let stream_sync: unsafe extern "C" fn(Ptr) -> u32 = f(&lib, "cuStreamSynchronize");
        let event_create: unsafe extern "C" fn(*mut Ptr, c_uint) -> u32 = f(&lib, "cuEventCreate");
        let event_record: unsafe extern "C" fn(Ptr, Ptr) -> u32 = f(&lib, "cuEventRecord");
        let elapsed: unsafe extern "C" fn(*mut c_float, Ptr, Ptr) -> u32 =
            f(&lib, "cuEventElapsedTime");
        let event_destroy: unsafe extern "C" fn(Ptr) -> u32 = f(&lib, "cuEventDestroy_v2");

        // before cuInit: version and error strings work, the rest is NOT_INITIALIZED
        let mut v = 0;
        assert_eq!(version(&mut v), 0);
        assert_eq!(v, 13000);
        let mut n = 0;
        assert_eq!(count(&mut n), 3);
        assert_eq!(init(1), 1, "flags must be 0");
        assert_eq!(init(0), 0);
        assert_eq!(init(0), 0, "repeatable");
        assert_eq!(count(&mut n), 0);
        assert_eq!(n, 2);

        let mut s: *const c_char = std::ptr::null();
        assert_eq!(err_name(2, &mut s), 0);
        assert_eq!(
            CStr::from_ptr(s).to_str().unwrap(),
            "CUDA_ERROR_OUT_OF_MEMORY"
        );
        assert_eq!(err_str(801, &mut s), 0);
        assert_eq!(
            CStr::from_ptr(s).to_str().unwrap(),
            "operation not supported"
        );
        assert_eq!(err_name(123456, &mut s), 1);
        assert!(s.is_null());

        let mut buf = [0 as c_char; 64];
        assert_eq!(name(buf.as_mut_ptr(), 64, 1), 0);
        assert_eq!(
            CStr::from_ptr(buf.as_ptr()).to_str().unwrap(),
            "fragprobe simulated GPU (1GiB)"
        );
        assert_eq!(name(buf.as_mut_ptr(), 64, 2), 101);
        let mut x = 0;
        assert_eq!(attr(&mut x, 115, 0), 0);
        assert_eq!(x, 1, "memory pools supported");
        assert_eq!(attr(&mut x, 75, 0), 0);
        assert_eq!(x, 9);
        assert_eq!(attr(&mut x, 0, 0), 1);
        assert_eq!(attr(&mut x, 16, 9), 101);
        let mut t = 0usize;
        assert_eq!(total(&mut t, 0), 0);
        assert_eq!(t, 1 << 30);
        let mut t1 = 0u32;
        assert_eq!(total_v1(&mut t1, 1), 0);
        assert_eq!(t1, 1 << 30);
        assert_eq!(bus_id(buf.as_mut_ptr(), 64, 1), 0);
        let mut d = -1;
        assert_eq!(by_bus(&mut d, buf.as_ptr()), 0);
        assert_eq!(d, 1);
        let (mut u0, mut u1) = ([0u8; 16], [0u8; 16]);
        assert_eq!(uuid(&mut u0, 0), 0);
        assert_eq!(uuid(&mut u1, 1), 0);
        assert_ne!(u0, u1);

        // contexts: memory calls need a current one
        let mut p = 0u64;
        assert_eq!(alloc(&mut p, 4096), 201);
        let mut c0: Ptr = std::ptr::null_mut();
        assert_eq!(retain(&mut c0, 0), 0);
        let (mut flags, mut active) = (0u32, 0);
        assert_eq!(state(0, &mut flags, &mut active), 0);
        assert_eq!(active, 1);
        assert_eq!(set_flags_v1(0, 4), 708, "legacy form refuses while active");
        assert_eq!(set_flags(0, 4), 0);
        assert_eq!(set_cur(c0), 0);
        let mut cur: Ptr = std::ptr::null_mut();
        assert_eq!(get_cur(&mut cur), 0);
        assert_eq!(cur, c0);
        let mut c1: Ptr = std::ptr::null_mut();
        assert_eq!(create(&mut c1, 0, 1), 0);
        assert_eq!(get_cur(&mut cur), 0);
        assert_eq!(cur, c1, "cuCtxCreate pushes the new context");
        assert_eq!(ctx_dev(&mut d), 0);
        assert_eq!(d, 1);
        assert_eq!(alloc(&mut p, 5000), 0);
        assert_eq!(p, 0x7000_0000_0000 + (1 << 39), "device 1's arena");
        let mut ord: c_int = -1;
        assert_eq!(ptr_attr((&mut ord as *mut c_int).cast(), 9, p + 100), 0);
        assert_eq!(ord, 1);
        let (mut base, mut size) = (0u64, 0usize);
        assert_eq!(range(&mut base, &mut size, p + 4000), 0);
        assert_eq!((base, size), (p, 5000));
        assert_eq!(range(&mut base, &mut size, 12345), 500);
        let (mut fr, mut tot) = (0usize, 0usize);
        assert_eq!(info(&mut fr, std::ptr::null_mut()), 0);
        assert_eq!(info(std::ptr::null_mut(), &mut tot), 0);
        assert_eq!(tot, 1 << 30);
        assert_eq!(fr, (1 << 30) - (300 << 20) - 5120);
        let mut popped: Ptr = std::ptr::null_mut();
        assert_eq!(pop(&mut popped), 0);
        assert_eq!(popped, c1);
        assert_eq!(push(c1), 0);
        assert_eq!(destroy(c1), 0);
        assert_eq!(get_cur(&mut cur), 0);
        assert_eq!(cur, c0, "destroying the current context pops it");
        assert_eq!(
            destroy(c0),
            201,
            "primary contexts are not destroyed this way"
        );
        assert_eq!(free(p), 1, "freed with its context");
        assert_eq!(set_cur(c1), 709, "destroyed context");

        // streams and events
        let mut st: Ptr = std::ptr::null_mut();
        assert_eq!(stream_create(&mut st, 1, -3), 0);
        let mut prio = 0;
        assert_eq!(stream_prio(st, &mut prio), 0);
        assert_eq!(prio, -3);
        let (mut e0, mut e1): (Ptr, Ptr) = (std::ptr::null_mut(), std::ptr::null_mut());
        assert_eq!(event_create(&mut e0, 0), 0);
        assert_eq!(event_create(&mut e1, 0), 0);
        let mut ms: c_float = -1.0;
        assert_eq!(elapsed(&mut ms, e0, e1), 400, "not recorded");
        assert_eq!(event_record(e0, st), 0);
        assert_eq!(event_record(e1, st), 0);
        assert_eq!(elapsed(&mut ms, e0, e1), 0);
        assert!(ms >= 0.0);
        assert_eq!(stream_sync(st), 0);
        assert_eq!(event_destroy(e0), 0);
        assert_eq!(event_destroy(e0), 400);
        assert_eq!(stream_destroy(st), 0);
        assert_eq!(stream_sync(st), 400);
        assert_eq!(event_destroy(e1), 0);
        assert_eq!(release(0), 0);
        assert_eq!(state(0, &mut flags, &mut active), 0);
        assert_eq!((flags, active), (4, 0));
    }
}
