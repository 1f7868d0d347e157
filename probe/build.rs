//! Link flags for the injected library.
fn main() {
    // The probe is never unloaded: wrappers handed out through dlsym/cuGetProcAddress must
    // stay valid for the life of the process, even if someone dlcloses it.
    println!("cargo:rustc-cdylib-link-arg=-Wl,-z,nodelete");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libfragprobe.so");
}
