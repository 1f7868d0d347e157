//! `cuGetExportTable`: the private tables NVIDIA's runtime (libcudart 12.x and 13.x, the
//! one every PyTorch wheel loads) asks the driver for before its first device call. Each
//! table is an array of pointers; most start with their own size in bytes. What the
//! runtime was seen to call is implemented (../shared notes: "Hosting NVIDIA's own
//! libraries"); every other slot answers success and does nothing.
//!
//! The protocol was learnt from ZLUDA's `dark_api` (read, not copied). The integrity
//! check is HMAC-MD2 (RFC 1319, RFC 2104 with MD2's 16-byte block) keyed with a fixed
//! 16-byte secret, over the driver version, the requested version, pid, tid, the
//! addresses of two tables and of one slot, the caller's time, and each device's uuid and
//! PCI domain, bus and device.

use std::ffi::{c_int, c_uint, c_void};
use std::sync::Mutex;

use fragprobe_simgpu::codes::*;
use fragprobe_simgpu::ident;

/// One table: pointers the runtime reads (never writes).
#[repr(transparent)]
pub struct Table<const N: usize>(pub [*const c_void; N]);

// SAFETY: the tables are immutable after compilation and hold only function addresses
// and sizes.
unsafe impl<const N: usize> Sync for Table<N> {}

pub(super) const fn size_of_table(n: usize) -> *const c_void {
    (n * std::mem::size_of::<usize>()) as *const c_void
}

/// The do-nothing slot: every slot the runtime may call that the simulation has nothing
/// to do for.
extern "C" fn nothing() -> u32 {
    CUDA_SUCCESS
}

const NOP: *const c_void = nothing as *const c_void;

// ---- CUDART_INTERFACE {6bd5fb6c-5bf4-e74a-8987-d93912fd9df9} --------------------------

/// Slot 2: the device's primary context, handed out *inactive*, as the real driver does:
/// it costs device memory only once something makes it current or retains it.
extern "C" fn primary_context(pctx: *mut *mut c_void, dev: c_int) -> u32 {
    let r = crate::with_gpu(|g| {
        let d = g.check_device(dev)?;
        if pctx.is_null() {
            return Err(CuError::INVALID_VALUE);
        }
        // SAFETY: non-null; the runtime passes a CUcontext slot.
        unsafe { pctx.write(fragprobe_simgpu::gpu::primary_handle(d) as usize as *mut c_void) };
        Ok(())
    });
    code_of(r)
}

/// Slots 1, 6 and 8: a module from a fat binary. Nothing runs on the simulation, so every
/// fat binary "loads" into the same module handle.
extern "C" fn module_from_fatbin(module: *mut usize, _fatbin: *const c_void) -> u32 {
    if module.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: non-null; the runtime passes a CUmodule slot.
    unsafe { module.write(MODULE) };
    CUDA_SUCCESS
}

extern "C" fn module_from_fatbin_ext1(
    module: *mut usize,
    fatbin: *const c_void,
    _a: *mut c_void,
    _b: *mut c_void,
    _c: c_uint,
) -> u32 {
    module_from_fatbin(module, fatbin)
}

extern "C" fn module_from_fatbin_ext2(
    fatbin: *const c_void,
    module: *mut usize,
    _a: *mut c_void,
    _b: *mut c_void,
    _c: c_uint,
) -> u32 {
    module_from_fatbin(module, fatbin)
}

/// The one module handle fat binaries load into.
pub const MODULE: usize = 0x4D0D_0000_0001;

static CUDART_INTERFACE: Table<13> = Table([
    size_of_table(13),
    module_from_fatbin as *const c_void,
    primary_context as *const c_void,
    NOP,
    NOP,
    NOP,
    module_from_fatbin_ext1 as *const c_void,
    NOP,
    module_from_fatbin_ext2 as *const c_void,
    NOP,
    NOP,
    NOP,
    NOP, // 13.x: load the compilers
]);

// ---- TOOLS_RUNTIME_CALLBACK_HOOKS {a094798c-2e74-2e74-93f2-0800200c0a66} --------------

static SCRATCH_1024: Mutex<[u64; 1024]> = Mutex::new([0; 1024]);
static SCRATCH_14: Mutex<[u64; 14]> = Mutex::new([0; 14]);

extern "C" fn scratch_1024(p: *mut *mut c_void, n: *mut usize) {
    hand_out(&SCRATCH_1024, p, n);
}

extern "C" fn scratch_14(p: *mut *mut c_void, n: *mut usize) {
    hand_out(&SCRATCH_14, p, n);
}

/// Hands out a buffer that lives as long as the process (the runtime keeps it).
fn hand_out<const N: usize>(m: &'static Mutex<[u64; N]>, p: *mut *mut c_void, n: *mut usize) {
    let mut g = m.lock().unwrap_or_else(|e| e.into_inner());
    let ptr = g.as_mut_ptr().cast::<c_void>();
    if !p.is_null() {
        // SAFETY: non-null out-parameter of the runtime's.
        unsafe { p.write(ptr) };
    }
    if !n.is_null() {
        // SAFETY: as above.
        unsafe { n.write(N) };
    }
}

static CALLBACK_HOOKS: Table<7> = Table([
    size_of_table(7),
    NOP,
    scratch_1024 as *const c_void,
    NOP,
    NOP,
    NOP,
    scratch_14 as *const c_void,
]);

// ---- TOOLS_TLS {42d85a81-23f6-cb47-8298-f6e78a3aecdc} ---------------------------------

static TOOLS_TLS: Table<4> = Table([size_of_table(4), NOP, NOP, NOP]);

// ---- CONTEXT_LOCAL_STORAGE {c693336e-1121-df11-a8c3-68f355d89593} ---------------------
// No size header: slot 0 is a function.

/// (context, key) → value; the runtime looks its per-context state up before every call.
static CLS: Mutex<Vec<(u64, usize, usize)>> = Mutex::new(Vec::new());

fn ctx_or_current(ctx: u64) -> u64 {
    if ctx != 0 {
        ctx
    } else {
        super::cur().unwrap_or(0)
    }
}

extern "C" fn cls_put(ctx: u64, key: usize, value: usize, _dtor: *const c_void) -> u32 {
    let ctx = ctx_or_current(ctx);
    let mut t = CLS.lock().unwrap_or_else(|e| e.into_inner());
    match t.iter_mut().find(|e| e.0 == ctx && e.1 == key) {
        Some(e) => e.2 = value,
        None => t.push((ctx, key, value)),
    }
    CUDA_SUCCESS
}

extern "C" fn cls_delete(ctx: u64, key: usize) -> u32 {
    let ctx = ctx_or_current(ctx);
    CLS.lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|e| !(e.0 == ctx && e.1 == key));
    CUDA_SUCCESS
}

extern "C" fn cls_get(value: *mut usize, ctx: u64, key: usize) -> u32 {
    let ctx = ctx_or_current(ctx);
    let t = CLS.lock().unwrap_or_else(|e| e.into_inner());
    match t.iter().find(|e| e.0 == ctx && e.1 == key) {
        Some(e) if !value.is_null() => {
            // SAFETY: non-null out-parameter of the runtime's.
            unsafe { value.write(e.2) };
            CUDA_SUCCESS
        }
        Some(_) => CUDA_ERROR_INVALID_VALUE,
        None => CUDA_ERROR_INVALID_HANDLE,
    }
}

static CONTEXT_LOCAL_STORAGE: Table<4> = Table([
    cls_put as *const c_void,
    cls_delete as *const c_void,
    cls_get as *const c_void,
    NOP,
]);

// ---- CONTEXT_CHECKS {263e8860-7cd2-6143-92f6-bbd5006dfa7e} ----------------------------

extern "C" fn context_check(_ctx: u64, flags: *mut u32, _out: *mut *const c_void) -> u32 {
    if !flags.is_null() {
        // SAFETY: non-null out-parameter of the runtime's.
        unsafe { flags.write(0) };
    }
    CUDA_SUCCESS
}

extern "C" fn zero() -> u32 {
    0
}

static CONTEXT_CHECKS: Table<4> = Table([
    size_of_table(4),
    NOP,
    context_check as *const c_void,
    zero as *const c_void,
]);

// ---- the CUDA 13 runtime's table {21318c60-9714-3248-8ca6-41ff7324c8f2} ---------------
// 95 slots, none called; without it a 13.x runtime crashes.

static RUNTIME_13: Table<95> = Table({
    let mut t = [NOP; 95];
    t[0] = size_of_table(95);
    t
});

// ---- INTEGRITY_CHECK {d4082055-bde6-704b-8d34-ba123c66e1f2} ---------------------------

/// The secret the runtime and the driver share (an interoperability constant).
const SECRET: [u8; 16] = [
    0x14, 0x6A, 0xDD, 0xAE, 0x53, 0xA9, 0xA7, 0x52, 0xAA, 0x08, 0x41, 0x36, 0x0B, 0xF5, 0x5A, 0x9F,
];

/// Versions ending in 0 and 1 get fixed answers, as from the real driver.
const FIXED: [[u64; 2]; 2] = [
    [0x3341_181C_03CB_675C, 0x8ED3_83AA_1F4C_D1E8],
    [0x1841_181C_03CB_675C, 0x8ED3_83AA_1F4C_D1E8],
];

extern "C" fn integrity_check(version: u32, unix_seconds: u64, out: *mut [u64; 2]) -> u32 {
    if out.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    let answer = match version % 10 {
        0 | 1 => FIXED[(version % 10) as usize],
        _ => integrity_answer(version, unix_seconds),
    };
    // SAFETY: non-null out-parameter of the runtime's.
    unsafe { out.write(answer) };
    CUDA_SUCCESS
}

static INTEGRITY: Table<3> = Table([size_of_table(3), integrity_check as *const c_void, NOP]);

fn integrity_answer(version: u32, unix_seconds: u64) -> [u64; 2] {
    let mut msg = Vec::with_capacity(48 + 28 * 16);
    msg.extend_from_slice(&(ident::driver_version() as u32).to_le_bytes());
    msg.extend_from_slice(&version.to_le_bytes());
    msg.extend_from_slice(&std::process::id().to_le_bytes());
    // SAFETY: pthread_self has no preconditions.
    let tid = unsafe { libc::pthread_self() } as u32;
    msg.extend_from_slice(&tid.to_le_bytes());
    for p in [
        CUDART_INTERFACE.0.as_ptr() as usize,
        INTEGRITY.0.as_ptr() as usize,
        INTEGRITY.0[1] as usize,
    ] {
        msg.extend_from_slice(&(p as u64).to_le_bytes());
    }
    msg.extend_from_slice(&unix_seconds.to_le_bytes());
    let mut n: c_int = 0;
    // SAFETY: a valid out-parameter.
    unsafe { super::cuDeviceGetCount(&mut n) };
    for d in 0..n {
        let mut uuid = [0u8; 16];
        let (mut domain, mut bus, mut device) = (0, 0, 0);
        // SAFETY: valid out-parameters; `d` is a device ordinal.
        unsafe {
            super::cuDeviceGetUuid_v2(&mut uuid, d);
            super::cuDeviceGetAttribute(&mut domain, 50, d);
            super::cuDeviceGetAttribute(&mut bus, 33, d);
            super::cuDeviceGetAttribute(&mut device, 34, d);
        }
        msg.extend_from_slice(&uuid);
        for v in [domain, bus, device] {
            msg.extend_from_slice(&v.to_le_bytes());
        }
    }
    let d = hmac_md2(&SECRET, &msg);
    [
        u64::from_le_bytes(d[..8].try_into().unwrap_or_default()),
        u64::from_le_bytes(d[8..].try_into().unwrap_or_default()),
    ]
}

/// MD2's substitution table (RFC 1319: a permutation from the digits of pi).
const PI_SUBST: [u8; 256] = [
    41, 46, 67, 201, 162, 216, 124, 1, 61, 54, 84, 161, 236, 240, 6, 19, 98, 167, 5, 243, 192, 199,
    115, 140, 152, 147, 43, 217, 188, 76, 130, 202, 30, 155, 87, 60, 253, 212, 224, 22, 103, 66,
    111, 24, 138, 23, 229, 18, 190, 78, 196, 214, 218, 158, 222, 73, 160, 251, 245, 142, 187, 47,
    238, 122, 169, 104, 121, 145, 21, 178, 7, 63, 148, 194, 16, 137, 11, 34, 95, 33, 128, 127, 93,
    154, 90, 144, 50, 39, 53, 62, 204, 231, 191, 247, 151, 3, 255, 25, 48, 179, 72, 165, 181, 209,
    215, 94, 146, 42, 172, 86, 170, 198, 79, 184, 56, 210, 150, 164, 125, 182, 118, 252, 107, 226,
    156, 116, 4, 241, 69, 157, 112, 89, 100, 113, 135, 32, 134, 91, 207, 101, 230, 45, 168, 2, 27,
    96, 37, 173, 174, 176, 185, 246, 28, 70, 97, 105, 52, 64, 126, 15, 85, 71, 163, 35, 221, 81,
    175, 58, 195, 92, 249, 206, 186, 197, 234, 38, 44, 83, 13, 110, 133, 40, 132, 9, 211, 223, 205,
    244, 65, 129, 77, 82, 106, 220, 55, 200, 108, 193, 171, 250, 36, 225, 123, 8, 12, 189, 177, 74,
    120, 136, 149, 139, 227, 99, 232, 109, 233, 203, 213, 254, 59, 0, 29, 57, 242, 239, 183, 14,
    102, 88, 208, 228, 166, 119, 114, 248, 235, 117, 75, 10, 49, 68, 80, 180, 143, 237, 31, 26,
    219, 153, 141, 51, 159, 17, 131, 20,
];

/// MD2 (RFC 1319).
pub fn md2(data: &[u8]) -> [u8; 16] {
    let mut x = [0u8; 48];
    let mut checksum = [0u8; 16];
    let mut last = 0u8;
    let pad = 16 - data.len() % 16;
    let mut padded = data.to_vec();
    padded.extend(std::iter::repeat_n(pad as u8, pad));
    let compress = |x: &mut [u8; 48], block: &[u8]| {
        for j in 0..16 {
            x[16 + j] = block[j];
            x[32 + j] = x[16 + j] ^ x[j];
        }
        let mut t = 0u8;
        for round in 0..18u8 {
            for b in x.iter_mut() {
                *b ^= PI_SUBST[t as usize];
                t = *b;
            }
            t = t.wrapping_add(round);
        }
    };
    for block in padded.chunks(16) {
        for j in 0..16 {
            checksum[j] ^= PI_SUBST[(block[j] ^ last) as usize];
            last = checksum[j];
        }
        compress(&mut x, block);
    }
    compress(&mut x, &checksum);
    let mut out = [0u8; 16];
    out.copy_from_slice(&x[..16]);
    out
}

/// HMAC (RFC 2104) over MD2, whose block is 16 bytes: a 16-byte key is used as it is.
pub fn hmac_md2(key: &[u8; 16], msg: &[u8]) -> [u8; 16] {
    let mut inner = key.map(|k| k ^ 0x36).to_vec();
    inner.extend_from_slice(msg);
    let mut outer = key.map(|k| k ^ 0x5c).to_vec();
    outer.extend_from_slice(&md2(&inner));
    md2(&outer)
}

// ---- the lookup --------------------------------------------------------------------

/// Which table each id names.
fn table_for(id: &[u8; 16]) -> Option<*const c_void> {
    let tables: [([u8; 16], *const c_void); 9] = [
        (
            [
                0x6B, 0xD5, 0xFB, 0x6C, 0x5B, 0xF4, 0xE7, 0x4A, 0x89, 0x87, 0xD9, 0x39, 0x12, 0xFD,
                0x9D, 0xF9,
            ],
            CUDART_INTERFACE.0.as_ptr().cast(),
        ),
        (
            [
                0xA0, 0x94, 0x79, 0x8C, 0x2E, 0x74, 0x2E, 0x74, 0x93, 0xF2, 0x08, 0x00, 0x20, 0x0C,
                0x0A, 0x66,
            ],
            CALLBACK_HOOKS.0.as_ptr().cast(),
        ),
        (
            [
                0x42, 0xD8, 0x5A, 0x81, 0x23, 0xF6, 0xCB, 0x47, 0x82, 0x98, 0xF6, 0xE7, 0x8A, 0x3A,
                0xEC, 0xDC,
            ],
            TOOLS_TLS.0.as_ptr().cast(),
        ),
        (
            [
                0x21, 0x31, 0x8C, 0x60, 0x97, 0x14, 0x32, 0x48, 0x8C, 0xA6, 0x41, 0xFF, 0x73, 0x24,
                0xC8, 0xF2,
            ],
            RUNTIME_13.0.as_ptr().cast(),
        ),
        (
            [
                0xC6, 0x93, 0x33, 0x6E, 0x11, 0x21, 0xDF, 0x11, 0xA8, 0xC3, 0x68, 0xF3, 0x55, 0xD8,
                0x95, 0x93,
            ],
            CONTEXT_LOCAL_STORAGE.0.as_ptr().cast(),
        ),
        (
            [
                0x26, 0x3E, 0x88, 0x60, 0x7C, 0xD2, 0x61, 0x43, 0x92, 0xF6, 0xBB, 0xD5, 0x00, 0x6D,
                0xFA, 0x7E,
            ],
            CONTEXT_CHECKS.0.as_ptr().cast(),
        ),
        (
            [
                0xD4, 0x08, 0x20, 0x55, 0xBD, 0xE6, 0x70, 0x4B, 0x8D, 0x34, 0xBA, 0x12, 0x3C, 0x66,
                0xE1, 0xF2,
            ],
            INTEGRITY.0.as_ptr().cast(),
        ),
        // Thread-block clusters: cuBLASLt calls it unchecked (cluster.rs).
        (
            [
                0x17, 0x34, 0xDC, 0x26, 0x80, 0x0D, 0x47, 0x45, 0x87, 0x26, 0xC0, 0xF1, 0xE7, 0xDD,
                0x8B, 0xCA,
            ],
            super::cluster::CLUSTER.0.as_ptr().cast(),
        ),
        // Asked for by 12.9 and 13.x first; refused, as harmless.
        (
            [
                0xF8, 0xCF, 0xF9, 0x51, 0x21, 0x46, 0x8B, 0x4E, 0xB9, 0xE2, 0xFB, 0x46, 0x9E, 0x7C,
                0x0D, 0xD9,
            ],
            std::ptr::null(),
        ),
    ];
    tables
        .iter()
        .find(|(u, _)| u == id)
        .and_then(|(_, t)| (!t.is_null()).then_some(*t))
}

/// # Safety
/// `table` must be NULL or valid for a write; `id` NULL or valid for 16 bytes.
#[no_mangle]
pub unsafe extern "C" fn cuGetExportTable(table: *mut *const c_void, id: *const [u8; 16]) -> u32 {
    if table.is_null() || id.is_null() {
        return CUDA_ERROR_INVALID_VALUE;
    }
    // SAFETY: non-null, 16 readable bytes per the caller's contract.
    let id = unsafe { id.read() };
    let found = table_for(&id);
    // SAFETY: non-null, writable per the caller's contract.
    unsafe { table.write(found.unwrap_or(std::ptr::null())) };
    match found {
        Some(_) => CUDA_SUCCESS,
        None => CUDA_ERROR_INVALID_VALUE,
    }
}

/// Lazy loading, the real driver's default since CUDA 12.2 (`CU_MODULE_LAZY_LOADING`).
///
/// # Safety
/// `mode` must be NULL or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn cuModuleGetLoadingMode(mode: *mut c_int) -> u32 {
    // SAFETY: forwarded caller contract.
    super::code(unsafe { super::put(mode, 1) })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(d: [u8; 16]) -> String {
        d.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn md2_matches_rfc_1319() {
        assert_eq!(hex(md2(b"")), "8350e5a3e24c153df2275c9f80692773");
        assert_eq!(hex(md2(b"abc")), "da853b0d3f88d99b30283a69e6ded6bb");
        assert_eq!(
            hex(md2(
                b"12345678901234567890123456789012345678901234567890123456789012345678901234567890"
            )),
            "d5976f79d83d3a0dc9806c3c66f3efd8"
        );
    }

    #[test]
    fn integrity_answers_follow_the_version() {
        let mut out = [0u64; 2];
        assert_eq!(integrity_check(0x2f3a, 0, &mut out), CUDA_SUCCESS);
        assert_eq!(out, FIXED[0]);
        assert_eq!(integrity_check(0x2f3b, 0, &mut out), CUDA_SUCCESS);
        assert_eq!(out, FIXED[1]);
        assert_eq!(
            integrity_check(0x2f3a, 0, std::ptr::null_mut()),
            CUDA_ERROR_INVALID_VALUE
        );
    }

    #[test]
    fn unknown_tables_are_refused() {
        let mut t = NOP;
        // SAFETY: valid pointers.
        let rc = unsafe { cuGetExportTable(&mut t, &[0u8; 16]) };
        assert_eq!((rc, t), (CUDA_ERROR_INVALID_VALUE, std::ptr::null()));
    }
}
