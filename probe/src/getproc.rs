//! Door 3: `cuGetProcAddress` / `cuGetProcAddress_v2`, and finding real functions.
//!
//! After the real lookup succeeds, the returned pointer is mapped back to the exact driver
//! symbol it is — by comparing it with what `dlsym(libcuda, name)` gives for every hooked
//! name — and the wrapper of exactly that symbol is handed out. This keeps the ABI right
//! (`_v2` vs legacy, `_ptsz` vs legacy stream) without guessing from the requested name.
//! Only when a driver returns a pointer that is no exported symbol does [`variant_name`]
//! derive the symbol from the name, version and flags. Unknown pointers pass through.

use core::ffi::{c_char, c_int, c_void, CStr};
use core::sync::atomic::{AtomicUsize, Ordering};

use crate::dlsym::real_dlsym;
use crate::hooks::COUNT;
use crate::table;

/// `dlopen` handles of the driver and runtime, found with `RTLD_NOLOAD` (0 = not yet).
static LIBCUDA: AtomicUsize = AtomicUsize::new(0);
static LIBCUDART: AtomicUsize = AtomicUsize::new(0);

/// `dlsym(libcuda, name)` for every hooked name, filled once (0 = not exported).
static EXPORTED: [AtomicUsize; COUNT] = [const { AtomicUsize::new(0) }; COUNT];
static EXPORTED_READY: AtomicUsize = AtomicUsize::new(0);

const CUDA_LIBS: [&CStr; 2] = [c"libcuda.so.1", c"libcuda.so"];
const CUDART_LIBS: [&CStr; 1] = [c"libcudart.so.12"];

fn handle(cache: &AtomicUsize, names: &[&CStr]) -> *mut c_void {
    let h = cache.load(Ordering::Acquire);
    if h != 0 {
        return h as *mut c_void;
    }
    for n in names {
        // SAFETY: n is NUL-terminated; RTLD_NOLOAD never loads anything new, it only
        // returns a handle to an already loaded library (or NULL).
        let h = unsafe { libc::dlopen(n.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD) };
        if !h.is_null() {
            cache.store(h as usize, Ordering::Release);
            return h;
        }
    }
    core::ptr::null_mut()
}

/// The driver library's handle, if it is loaded.
pub fn libcuda() -> *mut c_void {
    handle(&LIBCUDA, &CUDA_LIBS)
}

/// Finds the real function for a NUL-terminated `name` (0 if none): in the library it
/// belongs to, then after the probe in the global scope.
pub fn lookup_real(name: &str) -> usize {
    let lib = if name.starts_with("cuda") {
        handle(&LIBCUDART, &CUDART_LIBS)
    } else {
        libcuda()
    };
    let c = name.as_ptr() as *const c_char;
    if !lib.is_null() {
        // SAFETY: name is NUL-terminated (all table names are) and lib is a live handle.
        let p = unsafe { real_dlsym(lib, c) };
        if !p.is_null() {
            return p as usize;
        }
    }
    // SAFETY: as above; RTLD_NEXT from the probe finds the definition after us.
    unsafe { real_dlsym(libc::RTLD_NEXT, c) as usize }
}

fn exported_table() -> bool {
    if EXPORTED_READY.load(Ordering::Acquire) == 1 {
        return true;
    }
    let lib = libcuda();
    if lib.is_null() {
        return false;
    }
    for (i, slot) in EXPORTED.iter().enumerate() {
        let name = table::name(i);
        if name.starts_with("cuda") {
            continue;
        }
        // SAFETY: NUL-terminated table name, live handle.
        let p = unsafe { real_dlsym(lib, name.as_ptr() as *const c_char) };
        slot.store(p as usize, Ordering::Relaxed);
    }
    EXPORTED_READY.store(1, Ordering::Release);
    true
}

/// Replaces `*pfn` with the probe's wrapper when it is a hooked function.
///
/// # Safety
/// `pfn` must be valid for reads and writes; `sym` NUL-terminated or NULL.
pub unsafe fn substitute(sym: *const c_char, pfn: *mut *mut c_void, version: c_int, flags: u64) {
    if pfn.is_null() || crate::state::disabled_by_user() {
        return;
    }
    // SAFETY: the caller guarantees pfn is valid.
    let p = unsafe { *pfn } as usize;
    if p == 0 {
        return;
    }
    if exported_table() {
        if let Some(i) = EXPORTED.iter().position(|s| s.load(Ordering::Relaxed) == p) {
            table::set_real_if_unset(i, p);
            // SAFETY: pfn valid (caller); the wrapper has the same signature as symbol i.
            unsafe { *pfn = table::wrapper(i) as *mut c_void };
            return;
        }
    }
    if sym.is_null() {
        return;
    }
    // SAFETY: sym is NUL-terminated (caller).
    let base = unsafe { CStr::from_ptr(sym) }.to_bytes();
    let mut buf = [0u8; 96];
    if let Some(name) = variant_name(base, version, flags, &mut buf) {
        if let Some(i) = table::index_of_name(name) {
            table::set_real_if_unset(i, p);
            // SAFETY: as above.
            unsafe { *pfn = table::wrapper(i) as *mut c_void };
        }
    }
}

/// The exported symbol a request resolves to, by the driver's naming rules, for hooked
/// families only: `_v2` from the version that introduced it, `_ptsz` for per-thread
/// default-stream requests (flags & 2) of stream-ordered calls.
pub fn variant_name<'a>(
    base: &[u8],
    version: c_int,
    flags: u64,
    buf: &'a mut [u8; 96],
) -> Option<&'a [u8]> {
    const V2: [(&[u8], c_int); 7] = [
        (b"cuMemAlloc", 3020),
        (b"cuMemAllocPitch", 3020),
        (b"cuMemFree", 3020),
        (b"cuMemGetInfo", 3020),
        (b"cuIpcOpenMemHandle", 11000),
        (b"cuGetProcAddress", 12000),
        (b"cuMemAllocManaged", i32::MAX),
    ];
    const PTSZ: [&[u8]; 3] = [
        b"cuMemAllocAsync",
        b"cuMemAllocFromPoolAsync",
        b"cuMemFreeAsync",
    ];
    let suffix: &[u8] = if let Some((_, v)) = V2.iter().find(|(n, _)| *n == base) {
        if version >= *v {
            b"_v2"
        } else {
            b""
        }
    } else if PTSZ.contains(&base) && flags & 2 != 0 {
        b"_ptsz"
    } else {
        b""
    };
    let n = base.len() + suffix.len();
    if n > buf.len() {
        return None;
    }
    buf[..base.len()].copy_from_slice(base);
    buf[base.len()..n].copy_from_slice(suffix);
    Some(&buf[..n])
}

#[cfg(test)]
mod tests {
    use super::variant_name;

    fn v(base: &str, ver: i32, flags: u64) -> String {
        let mut b = [0u8; 96];
        String::from_utf8(
            variant_name(base.as_bytes(), ver, flags, &mut b)
                .unwrap()
                .to_vec(),
        )
        .unwrap()
    }

    #[test]
    fn names_follow_driver_rules() {
        assert_eq!(v("cuMemAlloc", 3020, 0), "cuMemAlloc_v2");
        assert_eq!(v("cuMemAlloc", 2000, 0), "cuMemAlloc");
        assert_eq!(v("cuMemAllocAsync", 11020, 2), "cuMemAllocAsync_ptsz");
        assert_eq!(v("cuMemAllocAsync", 11020, 0), "cuMemAllocAsync");
        assert_eq!(v("cuGetProcAddress", 11030, 0), "cuGetProcAddress");
        assert_eq!(v("cuGetProcAddress", 12000, 0), "cuGetProcAddress_v2");
        assert_eq!(v("cuMemAllocManaged", 6000, 0), "cuMemAllocManaged");
    }
}
