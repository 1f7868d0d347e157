//! Door 2: `dlsym` itself.
//!
//! Programs that `dlopen("libcuda.so.1")` and `dlsym` each entry point (XLA, cudarc with
//! `dynamic-loading`, PyTorch ≤ 2.7, and cudart's own first lookup of
//! `cuGetProcAddress_v2`) get the probe's wrapper for every hooked name.
//!
//! Pitfalls handled here (see the project's interception notes):
//! - the real `dlsym` is found with `dlvsym(RTLD_NEXT, "dlsym", …)`, never with `dlsym`;
//! - `dlsym(RTLD_NEXT, …)` resolves "next" relative to the *caller*: our exported `dlsym`
//!   is an assembly stub that tail-jumps to the real one for `RTLD_NEXT`, preserving the
//!   caller's return address;
//! - the pass-through path (Rust's std looks up weak symbols through `dlsym` too) takes
//!   no locks, does not allocate and uses no `Once`: only atomics;
//! - only `cu[A-Z]…` and `cuda[A-Z]…` names are considered at all (`cudnnCreate` and
//!   friends pass straight through).

use core::ffi::{c_char, c_void, CStr};
use core::sync::atomic::{AtomicUsize, Ordering};

use crate::table;

/// The real `dlsym`, read by the assembly stub. Exported under a fixed name so the stub can
/// reach it through the GOT.
#[no_mangle]
pub static FRAGPROBE_REAL_DLSYM: AtomicUsize = AtomicUsize::new(0);

type DlsymFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_void;

/// Finds the real `dlsym` (libc ≥ 2.34, else libdl) and caches it. Returns 0 if absent.
#[no_mangle]
pub extern "C" fn fragprobe_resolve_dlsym() -> usize {
    let cached = FRAGPROBE_REAL_DLSYM.load(Ordering::Acquire);
    if cached != 0 {
        return cached;
    }
    const VERSIONS: [&CStr; 3] = [c"GLIBC_2.34", c"GLIBC_2.2.5", c"GLIBC_2.17"];
    for v in VERSIONS {
        // SAFETY: both strings are NUL-terminated literals; dlvsym has no other preconditions.
        let p = unsafe { libc::dlvsym(libc::RTLD_NEXT, c"dlsym".as_ptr(), v.as_ptr()) };
        if !p.is_null() {
            FRAGPROBE_REAL_DLSYM.store(p as usize, Ordering::Release);
            return p as usize;
        }
    }
    0
}

/// Calls the real `dlsym` (relative to the probe for `RTLD_NEXT`).
///
/// # Safety
/// `name` must be a valid NUL-terminated string; `handle` a handle `dlsym` accepts.
pub unsafe fn real_dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    let p = fragprobe_resolve_dlsym();
    if p == 0 {
        return core::ptr::null_mut();
    }
    // SAFETY: p is libc's dlsym, whose signature is DlsymFn.
    let f: DlsymFn = unsafe { core::mem::transmute::<usize, DlsymFn>(p) };
    // SAFETY: arguments forwarded under the caller's contract.
    unsafe { f(handle, name) }
}

/// Whether `name` could be a CUDA driver (`cuX…`) or runtime (`cudaX…`) entry point.
pub fn is_cuda_name(name: &[u8]) -> bool {
    let upper_at = |i: usize| name.get(i).is_some_and(|c| c.is_ascii_uppercase());
    name.starts_with(b"cu") && (upper_at(2) || (name.starts_with(b"cuda") && upper_at(4)))
}

/// The body of the exported `dlsym` for every handle except `RTLD_NEXT`.
///
/// # Safety
/// Called only from the assembly stub with the caller's arguments.
#[no_mangle]
pub unsafe extern "C" fn fragprobe_dlsym_impl(
    handle: *mut c_void,
    name: *const c_char,
) -> *mut c_void {
    // SAFETY: forwarded under dlsym's own contract.
    let p = unsafe { real_dlsym(handle, name) };
    if p.is_null() || name.is_null() || crate::state::disabled_by_user() {
        return p;
    }
    // SAFETY: dlsym's contract: name is NUL-terminated.
    let bytes = unsafe { CStr::from_ptr(name) }.to_bytes();
    if !is_cuda_name(bytes) {
        return p;
    }
    match table::index_of_name(bytes) {
        Some(i) => {
            table::set_real_if_unset(i, p as usize);
            table::wrapper(i) as *mut c_void
        }
        None => p,
    }
}

/// The exported `dlsym`. For `RTLD_NEXT` it tail-jumps to the real `dlsym`, so the
/// caller's return address — which glibc uses to find "next" — is preserved; every other
/// handle goes to [`fragprobe_dlsym_impl`].
///
/// # Safety
/// Same contract as libc's `dlsym`.
#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    core::arch::naked_asm!(
        "cmp rdi, -1",
        "jne 2f",
        "mov rax, qword ptr [rip + {real}@GOTPCREL]",
        "mov rax, qword ptr [rax]",
        "test rax, rax",
        "jz 3f",
        "jmp rax",
        "3:",
        "push rdi",
        "push rsi",
        "sub rsp, 8",
        "call {resolve}@PLT",
        "add rsp, 8",
        "pop rsi",
        "pop rdi",
        "test rax, rax",
        "jz 4f",
        "jmp rax",
        "4:",
        "xor eax, eax",
        "ret",
        "2:",
        "jmp {imp}@PLT",
        real = sym FRAGPROBE_REAL_DLSYM,
        resolve = sym fragprobe_resolve_dlsym,
        imp = sym fragprobe_dlsym_impl,
    )
}

/// The exported `dlsym` (aarch64). See the x86_64 version.
///
/// # Safety
/// Same contract as libc's `dlsym`.
#[cfg(target_arch = "aarch64")]
#[unsafe(naked)]
#[no_mangle]
pub unsafe extern "C" fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void {
    core::arch::naked_asm!(
        "cmn x0, #1",
        "b.ne 2f",
        "adrp x16, :got:{real}",
        "ldr x16, [x16, :got_lo12:{real}]",
        "ldr x16, [x16]",
        "cbz x16, 3f",
        "br x16",
        "3:",
        "stp x29, x30, [sp, #-32]!",
        "stp x0, x1, [sp, #16]",
        "bl {resolve}",
        "mov x16, x0",
        "ldp x0, x1, [sp, #16]",
        "ldp x29, x30, [sp], #32",
        "cbz x16, 4f",
        "br x16",
        "4:",
        "mov x0, #0",
        "ret",
        "2:",
        "b {imp}",
        real = sym FRAGPROBE_REAL_DLSYM,
        resolve = sym fragprobe_resolve_dlsym,
        imp = sym fragprobe_dlsym_impl,
    )
}

#[cfg(test)]
mod tests {
    use super::is_cuda_name;

    #[test]
    fn only_cuda_names_are_considered() {
        assert!(is_cuda_name(b"cuMemAlloc_v2"));
        assert!(is_cuda_name(b"cudaMalloc"));
        assert!(is_cuda_name(b"cuGetProcAddress_v2"));
        assert!(!is_cuda_name(b"cudnnCreate"));
        assert!(!is_cuda_name(b"cublasCreate_v2"));
        assert!(!is_cuda_name(b"curand"));
        assert!(!is_cuda_name(b"cu"));
        assert!(!is_cuda_name(b"malloc"));
    }
}
