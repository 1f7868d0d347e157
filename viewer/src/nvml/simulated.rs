//! The simulated GPU's NVML: the stand-in library built next to the `fragprobe`
//! executable, reading the same shared state as `fragprobe run --simulated-gpu`.

use std::path::PathBuf;

/// Prepares the simulated GPU for `spec` ("" = default) and returns the NVML stand-in's path.
pub fn nvml_lib(spec: &str) -> Result<PathBuf, String> {
    let _ = spec;
    Err("the simulated GPU is not part of this build".into())
}
