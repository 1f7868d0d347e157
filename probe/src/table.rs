//! The machinery behind the one hook table ([`crate::hooks`]).
//!
//! `hook_table!` turns each line `name(args) => handler;` into:
//! - an exported `extern "C" fn name(args) -> c_int` (door 1), which finds the real
//!   function and hands it, with the caller's arguments, to `handler`;
//! - an entry in [`NAMES`], [`WRAPPERS`] and the real-pointer slots, which the `dlsym`
//!   door (by name) and the `cuGetProcAddress` door (by the real pointer) look up.

use core::sync::atomic::{AtomicUsize, Ordering};

/// What a wrapper returns when the real function cannot be found at all (the program
/// called an exported wrapper in a process without the real library):
/// `CUDA_ERROR_NOT_INITIALIZED` / `cudaErrorInitializationError`, both 3.
pub const NO_REAL: core::ffi::c_int = 3;

/// Declares the hook table. See the module doc.
macro_rules! hook_table {
    ($( $name:ident ( $($arg:ident : $ty:ty),* $(,)? ) => $handler:path ; )*) => {
        /// Every hooked symbol, in table order.
        #[allow(non_camel_case_types, clippy::upper_case_acronyms)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(usize)]
        pub enum Sym { $($name,)* }

        /// Number of hooked symbols.
        pub const COUNT: usize = [$(stringify!($name)),*].len();

        /// NUL-terminated names, indexed by `Sym`.
        pub static NAMES: [&str; COUNT] = [$(concat!(stringify!($name), "\0")),*];

        /// Wrapper addresses, indexed by `Sym`.
        pub static WRAPPERS: $crate::table::Ptrs<COUNT> =
            $crate::table::Ptrs([$($name as *const ()),*]);

        $(
            /// Hooked entry point: forwards to the real function through its handler.
            ///
            /// # Safety
            /// Same contract as the CUDA function of this name.
            #[no_mangle]
            pub unsafe extern "C" fn $name($($arg: $ty),*) -> core::ffi::c_int {
                type Real = unsafe extern "C" fn($($ty),*) -> core::ffi::c_int;
                let p = $crate::table::real(Sym::$name as usize);
                if p == 0 {
                    return $crate::table::NO_REAL;
                }
                // SAFETY: p was obtained from the dynamic linker or the driver for exactly
                // this symbol name, whose C signature is the one declared in this table.
                let real: Real = unsafe { core::mem::transmute::<usize, Real>(p) };
                // SAFETY: the handler forwards the caller's arguments unchanged to `real`.
                unsafe { $handler(real, $($arg),*) }
            }
        )*
    };
}
pub(crate) use hook_table;

/// A table of function addresses that may live in a `static`.
pub struct Ptrs<const N: usize>(pub [*const (); N]);
// SAFETY: the pointers are addresses of functions in this library: immutable, valid for the
// life of the process (the library is linked -z nodelete), so sharing them is sound.
unsafe impl<const N: usize> Sync for Ptrs<N> {}

use crate::hooks::{COUNT, NAMES, WRAPPERS};

/// The real function of each hooked symbol, resolved lazily.
static REAL: [AtomicUsize; COUNT] = [const { AtomicUsize::new(0) }; COUNT];

/// The wrapper of symbol `i`.
pub fn wrapper(i: usize) -> *const () {
    WRAPPERS.0[i]
}

/// The NUL-terminated name of symbol `i`.
pub fn name(i: usize) -> &'static str {
    NAMES[i]
}

/// The table index of `name` (without NUL), if hooked.
pub fn index_of_name(name: &[u8]) -> Option<usize> {
    NAMES
        .iter()
        .position(|n| &n.as_bytes()[..n.len() - 1] == name)
}

/// Whether `p` is one of the probe's own wrappers.
pub fn is_wrapper(p: usize) -> bool {
    WRAPPERS.0.iter().any(|w| *w as usize == p)
}

/// Records the real function of symbol `i` if none is known yet. Our own wrappers (which
/// `dlsym(RTLD_DEFAULT, …)` finds first in a preloaded process) are never taken as real:
/// that would make the wrapper call itself.
pub fn set_real_if_unset(i: usize, p: usize) {
    if p == 0 || is_wrapper(p) {
        return;
    }
    let _ = REAL[i].compare_exchange(0, p, Ordering::AcqRel, Ordering::Acquire);
}

/// The real function of symbol `i`, resolving it on first use (0 when it does not exist).
#[inline]
pub fn real(i: usize) -> usize {
    let p = REAL[i].load(Ordering::Acquire);
    if p != 0 {
        return p;
    }
    set_real_if_unset(i, crate::getproc::lookup_real(NAMES[i]));
    REAL[i].load(Ordering::Acquire)
}
