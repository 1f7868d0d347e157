fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");
    // Calls and function pointers inside the library bind to its own definitions, as in the real
    // driver, even when an LD_PRELOAD interposer exports the same names.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic-functions");
}
