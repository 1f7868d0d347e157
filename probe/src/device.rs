//! Which device an allocation is on, device descriptions, and `cuMemGetInfo` samples.
//!
//! The device of an allocation is the current context's (`cuCtxGetDevice`, result checked:
//! it fails with 201 on threads without a context). Each device is described once
//! (ordinal, UUID, name, total memory, PCI bus id) the first time it is seen. The probe
//! samples `cuMemGetInfo_v2` itself at most every 100 ms while events flow, so the
//! driver's view of free memory is in every trace.

use core::ffi::{c_char, c_int, c_void};
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use fragprobe_wire::format::{EventKind, MetaKind, MetaWriter, DEVICE_UNKNOWN};
use fragprobe_wire::ring::Ring;

use crate::dlsym::real_dlsym;
use crate::record::{synthetic, Seen};
use crate::thread::Guard;

static DESCRIBED: AtomicU64 = AtomicU64::new(0);
/// Bumped whenever a context is destroyed: a cached (context → device) is trusted only
/// under the generation it was learnt in, since a new context may reuse the address.
static CTX_GENERATION: AtomicU32 = AtomicU32::new(0);
static LAST_SAMPLE_NS: AtomicU64 = AtomicU64::new(0);

/// Ring flag a consumer sets to ask for a `cuMemGetInfo` sample at the next event.
pub const SAMPLE_REQUESTED: u32 = 16;

/// Minimum distance between the probe's own `cuMemGetInfo` samples.
pub const SAMPLE_EVERY_NS: u64 = 100_000_000;

struct Fn(AtomicUsize, &'static core::ffi::CStr);
static CTX_GET_DEVICE: Fn = Fn(AtomicUsize::new(0), c"cuCtxGetDevice");
static CTX_GET_CURRENT: Fn = Fn(AtomicUsize::new(0), c"cuCtxGetCurrent");
static DEVICE_GET: Fn = Fn(AtomicUsize::new(0), c"cuDeviceGet");
static DEVICE_GET_NAME: Fn = Fn(AtomicUsize::new(0), c"cuDeviceGetName");
static DEVICE_GET_UUID: Fn = Fn(AtomicUsize::new(0), c"cuDeviceGetUuid");
static DEVICE_TOTAL_MEM: Fn = Fn(AtomicUsize::new(0), c"cuDeviceTotalMem_v2");
static DEVICE_PCI_BUS_ID: Fn = Fn(AtomicUsize::new(0), c"cuDeviceGetPCIBusId");
static MEM_GET_INFO: Fn = Fn(AtomicUsize::new(0), c"cuMemGetInfo_v2");

impl Fn {
    /// The real driver function (never the probe's wrapper), or 0.
    fn get(&self) -> usize {
        let p = self.0.load(Ordering::Acquire);
        if p != 0 {
            return p;
        }
        let lib = crate::getproc::libcuda();
        if lib.is_null() {
            return 0;
        }
        // SAFETY: NUL-terminated name, live handle (a handle's scope excludes the probe).
        let p = unsafe { real_dlsym(lib, self.1.as_ptr()) } as usize;
        self.0.store(p, Ordering::Release);
        p
    }
}

/// Forgets which devices were described (the child of a fork describes them again).
pub fn reset_after_fork() {
    DESCRIBED.store(0, Ordering::Relaxed);
    LAST_SAMPLE_NS.store(0, Ordering::Relaxed);
}

/// The current context's device ordinal, or -1.
pub fn current() -> i16 {
    let p = CTX_GET_DEVICE.get();
    if p == 0 {
        return DEVICE_UNKNOWN;
    }
    let mut dev: c_int = -1;
    // SAFETY: cuCtxGetDevice(CUdevice*) -> CUresult.
    let f: unsafe extern "C" fn(*mut c_int) -> c_int = unsafe { core::mem::transmute(p) };
    // SAFETY: dev is a valid out-parameter.
    if unsafe { f(&mut dev) } == 0 && (0..i16::MAX as c_int).contains(&dev) {
        dev as i16
    } else {
        DEVICE_UNKNOWN
    }
}

/// The calling thread's current context (`cuCtxGetCurrent`, which a driver answers from
/// thread-local state), or 0 when there is none or the call fails.
#[inline]
fn current_context() -> usize {
    let p = CTX_GET_CURRENT.get();
    if p == 0 {
        return 0;
    }
    let mut ctx: *mut c_void = core::ptr::null_mut();
    // SAFETY: cuCtxGetCurrent(CUcontext*) -> CUresult.
    let f: unsafe extern "C" fn(*mut *mut c_void) -> c_int = unsafe { core::mem::transmute(p) };
    // SAFETY: ctx is a valid out-parameter.
    if unsafe { f(&mut ctx) } == 0 {
        ctx as usize
    } else {
        0
    }
}

/// [`current`], remembered per thread for the current context: `cuCtxGetDevice` is asked
/// again only when the thread's current context is another one (`cuCtxSetCurrent`,
/// push/pop, `cudaSetDevice` — whichever way it changed) or a context was destroyed since
/// (a new context may reuse the old one's address).
#[inline]
pub fn current_cached(g: &Guard) -> i16 {
    let gen = CTX_GENERATION.load(Ordering::Acquire);
    let ctx = current_context();
    if ctx == 0 {
        return current();
    }
    let (c, cg, dev) = g.ctx_cache();
    if c == ctx && cg == gen {
        return dev;
    }
    let dev = current();
    if dev != DEVICE_UNKNOWN {
        g.set_ctx_cache((ctx, gen, dev));
    }
    dev
}

/// A context was destroyed (or is being): every thread's cached device is stale.
#[inline]
pub fn context_destroyed() {
    CTX_GENERATION.fetch_add(1, Ordering::AcqRel);
}

/// Writes a Device record the first time `ordinal` is seen.
#[inline]
pub fn describe(ring: &Ring, ordinal: i16) {
    if !(0..64).contains(&ordinal) {
        return;
    }
    let bit = 1u64 << ordinal;
    // A plain load first: after the first event per device this is all it costs (no
    // read-modify-write bouncing the cache line between threads).
    if DESCRIBED.load(Ordering::Acquire) & bit != 0 {
        return;
    }
    describe_new(ring, ordinal, bit);
}

#[cold]
fn describe_new(ring: &Ring, ordinal: i16, bit: u64) {
    if DESCRIBED.fetch_or(bit, Ordering::AcqRel) & bit != 0 {
        return;
    }
    let (get, name_f, uuid_f, total_f, pci_f) = (
        DEVICE_GET.get(),
        DEVICE_GET_NAME.get(),
        DEVICE_GET_UUID.get(),
        DEVICE_TOTAL_MEM.get(),
        DEVICE_PCI_BUS_ID.get(),
    );
    let mut dev: c_int = 0;
    if get != 0 {
        // SAFETY: cuDeviceGet(CUdevice*, int ordinal) -> CUresult.
        let f: unsafe extern "C" fn(*mut c_int, c_int) -> c_int =
            unsafe { core::mem::transmute(get) };
        // SAFETY: dev is a valid out-parameter.
        if unsafe { f(&mut dev, ordinal as c_int) } != 0 {
            dev = ordinal as c_int;
        }
    }
    let mut name = [0u8; 256];
    if name_f != 0 {
        // SAFETY: cuDeviceGetName(char*, int len, CUdevice) -> CUresult.
        let f: unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int =
            unsafe { core::mem::transmute(name_f) };
        // SAFETY: name is writable for its length.
        unsafe { f(name.as_mut_ptr() as *mut c_char, name.len() as c_int, dev) };
    }
    let name_len = name.iter().position(|&c| c == 0).unwrap_or(name.len());
    let mut uuid = [0u8; 16];
    let mut have_uuid = false;
    if uuid_f != 0 {
        // SAFETY: cuDeviceGetUuid(CUuuid*, CUdevice) -> CUresult; CUuuid is 16 bytes.
        let f: unsafe extern "C" fn(*mut u8, c_int) -> c_int =
            unsafe { core::mem::transmute(uuid_f) };
        // SAFETY: uuid is 16 writable bytes.
        have_uuid = unsafe { f(uuid.as_mut_ptr(), dev) } == 0;
    }
    let mut total: usize = 0;
    if total_f != 0 {
        // SAFETY: cuDeviceTotalMem_v2(size_t*, CUdevice) -> CUresult.
        let f: unsafe extern "C" fn(*mut usize, c_int) -> c_int =
            unsafe { core::mem::transmute(total_f) };
        // SAFETY: total is a valid out-parameter.
        unsafe { f(&mut total, dev) };
    }
    let mut pci = [0u8; 32];
    if pci_f != 0 {
        // SAFETY: cuDeviceGetPCIBusId(char*, int len, CUdevice) -> CUresult.
        let f: unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int =
            unsafe { core::mem::transmute(pci_f) };
        // SAFETY: pci is writable for its length.
        unsafe { f(pci.as_mut_ptr() as *mut c_char, pci.len() as c_int, dev) };
    }
    let pci_len = pci.iter().position(|&c| c == 0).unwrap_or(0);
    let mut uuid_text = [0u8; 40];
    let uuid_len = if have_uuid {
        format_uuid(&uuid, &mut uuid_text)
    } else {
        0
    };

    let mut buf = [0u8; 512];
    let mut w = MetaWriter::new(&mut buf, MetaKind::DeviceInfo);
    w.field_u64(b"ordinal", ordinal as u64)
        .field(b"uuid", &uuid_text[..uuid_len])
        .field(b"name", &name[..name_len])
        .field_u64(b"total_bytes", total as u64)
        .field(b"pci_bus_id", &pci[..pci_len]);
    let (len, _) = w.finish();
    let meta = ring.write_meta(&buf[..len]).unwrap_or(0);
    synthetic(
        ring,
        EventKind::Device,
        &Seen {
            size: total as u64,
            ..Seen::default()
        },
        ordinal,
        meta,
    );
}

/// `GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`, as nvidia-smi prints it.
pub fn format_uuid(u: &[u8; 16], out: &mut [u8; 40]) -> usize {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out[..4].copy_from_slice(b"GPU-");
    let mut n = 4;
    for (i, b) in u.iter().enumerate() {
        if matches!(i, 4 | 6 | 8 | 10) {
            out[n] = b'-';
            n += 1;
        }
        out[n] = HEX[(b >> 4) as usize];
        out[n + 1] = HEX[(b & 15) as usize];
        n += 2;
    }
    n
}

/// Samples `cuMemGetInfo_v2` if the last sample is older than [`SAMPLE_EVERY_NS`] or the
/// consumer asked for one.
pub fn maybe_sample(ring: &Ring, now: u64) {
    sample(ring, now, false);
}

/// Samples `cuMemGetInfo_v2` now when `force` (a failed allocation: its verdict needs the
/// driver's view at that moment), else as [`maybe_sample`] says.
pub fn sample(ring: &Ring, now: u64, force: bool) {
    let last = LAST_SAMPLE_NS.load(Ordering::Relaxed);
    let asked = force || ring.flags() & SAMPLE_REQUESTED != 0;
    if !asked && now.saturating_sub(last) < SAMPLE_EVERY_NS {
        return;
    }
    let won = LAST_SAMPLE_NS
        .compare_exchange(last, now, Ordering::AcqRel, Ordering::Relaxed)
        .is_ok();
    if !won && !force {
        return;
    }
    if asked && !force {
        ring.clear_flag(SAMPLE_REQUESTED);
    }
    let p = MEM_GET_INFO.get();
    if p == 0 {
        return;
    }
    let (mut free, mut total) = (0usize, 0usize);
    // SAFETY: cuMemGetInfo_v2(size_t*, size_t*) -> CUresult (the real one, not our hook).
    let f: unsafe extern "C" fn(*mut usize, *mut usize) -> c_int =
        unsafe { core::mem::transmute(p) };
    // SAFETY: valid out-parameters.
    if unsafe { f(&mut free, &mut total) } == 0 {
        let dev = current();
        // The device is described before anything refers to it.
        describe(ring, dev);
        synthetic(
            ring,
            EventKind::MemGetInfo,
            &Seen {
                size: free as u64,
                aux: total as u64,
                ..Seen::default()
            },
            dev,
            0,
        );
    }
}

#[allow(dead_code)]
fn _assert_ptr_size() {
    const _: () = assert!(core::mem::size_of::<*mut c_void>() == 8);
}

#[cfg(test)]
mod tests {
    #[test]
    fn uuid_text_matches_nvidia_smi() {
        let u = [
            0x12, 0x34, 0x56, 0x78, 0x9a, 0xbc, 0xde, 0xf0, 0, 1, 2, 3, 4, 5, 6, 7,
        ];
        let mut out = [0u8; 40];
        let n = super::format_uuid(&u, &mut out);
        assert_eq!(&out[..n], b"GPU-12345678-9abc-def0-0001-020304050607");
    }
}
