//! The simulated GPU's NVML: the stand-in `libnvidia-ml.so.1` built next to the
//! `fragprobe` executable, reading the same shared state as `fragprobe run --simulated-gpu`
//! (`FRAGPROBE_SIM_STATE`, default `/dev/shm/fragprobe-simgpu-<uid>`).

use std::path::{Path, PathBuf};

/// A per-user, per-build directory for the library links, so that a debug and a release
/// build never swap each other's libraries.
fn lib_dir_for(artifacts: &Path) -> PathBuf {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in artifacts.as_os_str().as_encoded_bytes() {
        h = (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3);
    }
    std::env::temp_dir()
        .join(format!("fragprobe-{}", super::procfs::current_uid()))
        .join(format!("simgpu-lib-{h:016x}"))
}

/// clap's parser for `--simulated-gpu[=SPEC]`: "" (the default devices) or a spec that
/// parses, so a malformed one is a usage error (exit 2) before anything runs.
pub fn spec_arg(spec: &str) -> Result<String, String> {
    if !spec.trim().is_empty() {
        fragprobe_simgpu::DeviceSpec::parse(spec.trim()).map_err(|e| e.to_string())?;
    }
    Ok(spec.to_string())
}

/// Prepares the simulated GPU for `spec` ("" = the simulator's default: the devices of the
/// state file's live users, else one 16 GiB device) and returns the NVML stand-in's path.
/// A non-empty spec is validated and exported as `FRAGPROBE_SIM_GPU` for this process.
/// Call before starting threads.
pub fn nvml_lib(spec: &str) -> Result<PathBuf, String> {
    let spec = spec.trim();
    if !spec.is_empty() {
        fragprobe_simgpu::DeviceSpec::parse(spec).map_err(|e| format!("--simulated-gpu: {e}"))?;
    }
    let artifacts = crate::install::artifact_dir();
    let lib_dir = lib_dir_for(&artifacts);
    if let Some(per_user) = lib_dir.parent() {
        // The same per-user directory may take the probe's rings, and the probe accepts it
        // only if nobody else may write it: make it 0700, whatever the umask.
        use std::os::unix::fs::DirBuilderExt;
        let _ = std::fs::DirBuilder::new().mode(0o700).create(per_user);
    }
    let dir = fragprobe_simgpu::prepare_lib_dir(&artifacts, &lib_dir)
        .map_err(|e| format!("simulated GPU: {e}"))?;
    if !spec.is_empty() {
        for (k, v) in fragprobe_simgpu::sim_env(Some(spec), &dir) {
            if k != "LD_LIBRARY_PATH" && std::env::var(&k).ok().as_deref() != Some(v.as_str()) {
                std::env::set_var(k, v);
            }
        }
    }
    Ok(dir.join("libnvidia-ml.so.1"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lib_dirs_differ_per_build() {
        let a = lib_dir_for(Path::new("/x/target/debug"));
        let b = lib_dir_for(Path::new("/x/target/release"));
        assert_ne!(a, b);
        assert_eq!(a, lib_dir_for(Path::new("/x/target/debug")));
    }

    #[test]
    fn bad_spec_is_refused_before_anything_else() {
        let e = nvml_lib("lots of GPUs").unwrap_err();
        assert!(e.starts_with("--simulated-gpu:"), "{e}");
    }
}
