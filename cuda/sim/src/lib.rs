//! The simulated GPU behind fragprobe's stand-ins for `libcuda.so.1`, `libcudart.so.12` and
//! `libnvidia-ml.so.1`: device specs, the cross-process shared state, and the placement
//! allocator. The stand-ins export the real C API (real signatures, result codes and
//! `cuGetProcAddress` semantics), so a program — and fragprobe's probe — runs unchanged on
//! the simulation and on a real GPU.
//!
//! # Environment
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `FRAGPROBE_SIM_GPU` | devices: `2x80GiB`, `1x16GiB,1x24GiB`, `24GiB` (≤ 16 devices, 64 MiB–512 GiB each) | devices of the state file's live users, else `1x16GiB` |
//! | `FRAGPROBE_SIM_STATE` | shared state file | `/dev/shm/fragprobe-simgpu-<uid>` |
//! | `FRAGPROBE_SIM_CONTEXT_OVERHEAD` | physical memory per context (bytes or `300MiB`) | `300MiB` |
//! | `FRAGPROBE_SIM_FAIL_NTH` | the Nth allocating call of the process (1-based, all allocating entry points counted) fails with `CUDA_ERROR_OUT_OF_MEMORY` | off |
//! | `FRAGPROBE_SIM_FAIL_ABOVE` | allocating calls asking for more than SIZE fail with `CUDA_ERROR_OUT_OF_MEMORY` | off |
//! | `FRAGPROBE_SIM_LATENCY_NS` | busy-wait this long in every allocating or freeing call | 0 |
//!
//! Processes that share a state file must agree on the devices: a process asking for a
//! different spec while another live process uses the file fails `cuInit` with
//! `CUDA_ERROR_NO_DEVICE` and a message on stderr.
//!
//! # Placement
//!
//! Device `d` has an arena of its size at `0x7000_0000_0000 + d·2^39`. `cuMemAlloc` (and
//! pitch, legacy and pool chunks) rounds the size up to 512 bytes and takes the
//! **lowest-addressed free range that fits** (first fit), aligned to 512 bytes; freed
//! ranges merge with free neighbours. The same call sequence always yields the same
//! addresses. An allocation fails with `CUDA_ERROR_OUT_OF_MEMORY` when no single free range
//! is large enough — even if the total free space would be — and when the device's physical
//! usage over all processes (allocations, pool chunks, VMM handles and per-context
//! overhead) would exceed its size. Worked example on a fresh 1 GiB device:
//! `a = alloc(100)` → base, `b = alloc(1000)` → base+0x200, `c = alloc(512)` →
//! base+0x600; `free(b)`; `alloc(300)` → base+0x200 (b's hole is the lowest that fits),
//! then `alloc(600)` (1024 bytes after rounding) → base+0x800, because the rest of b's hole
//! (0x200 bytes) is too small.
//!
//! Other address ranges (per process): VMM reservations of device `d` at
//! `0x2000_0000_0000 + d·2^42`, managed memory at `0x1000_0000_0000`, and the legacy 32-bit
//! entry points' window at `0x4000_0000`. VMM handles take physical memory in 2 MiB pages
//! and no address space; reservations take address space and no memory. Managed memory
//! takes no device memory (it is never touched, so never migrates) and so shows neither in
//! `cuMemGetInfo` nor in NVML — as on a real GPU, where NVML does not count it per process.
//! Stream-ordered pools are described in `pool.rs`.
//!
//! `cuMemGetInfo` reports free = size − physical use of all processes, total = size.
//! NVML additionally reports a fixed driver reservation of 0.5% of the size, which is
//! bookkeeping only (allocations can still use the whole size).

pub mod arena;
pub mod codes;
pub mod config;
pub mod current;
pub mod gpu;
pub mod handles;
pub mod holes;
pub mod ident;
pub mod layout;
pub mod mem;
pub mod pool;
pub mod size;
pub mod spec;
pub mod state;
pub mod vmm;

#[cfg(test)]
mod gpu_tests;

pub use codes::{CuError, CuResult};
pub use config::Config;
pub use gpu::Gpu;
pub use spec::DeviceSpec;

use std::io;
use std::path::{Path, PathBuf};

/// Names the stand-ins are built as (in cargo's target directory) and the names programs
/// load them by.
pub const LIBRARIES: &[(&str, &[&str])] = &[
    ("libcuda.so", &["libcuda.so.1", "libcuda.so"]),
    ("libcudart.so", &["libcudart.so.12", "libcudart.so"]),
    ("libnvidia_ml.so", &["libnvidia-ml.so.1", "libnvidia-ml.so"]),
];

/// Creates `out_dir` holding symbolic links `libcuda.so.1`/`libcuda.so`,
/// `libcudart.so.12`/`libcudart.so` and `libnvidia-ml.so.1`/`libnvidia-ml.so` to the
/// stand-ins built in `artifact_dir` (cargo's `target/<profile>`). Put `out_dir` first on
/// `LD_LIBRARY_PATH` (see [`sim_env`]). Returns `out_dir`.
pub fn prepare_lib_dir(artifact_dir: &Path, out_dir: &Path) -> io::Result<PathBuf> {
    for (built, _) in LIBRARIES {
        let p = artifact_dir.join(built);
        if !p.is_file() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!(
                    "{} is missing; build the simulated GPU first: cargo build -p fragprobe-simgpu-driver -p fragprobe-simgpu-runtime -p fragprobe-simgpu-nvml",
                    p.display()
                ),
            ));
        }
    }
    std::fs::create_dir_all(out_dir)?;
    let artifact_dir = artifact_dir.canonicalize()?;
    for (built, links) in LIBRARIES {
        let target = artifact_dir.join(built);
        for link in *links {
            let dest = out_dir.join(link);
            // build the link under a temporary name and rename it into place, so that
            // concurrent callers never see a missing library
            let tmp = out_dir.join(format!(".{link}.{}.tmp", std::process::id()));
            let _ = std::fs::remove_file(&tmp);
            std::os::unix::fs::symlink(&target, &tmp)?;
            std::fs::rename(&tmp, &dest)?;
        }
    }
    Ok(out_dir.to_path_buf())
}

/// Environment for a program that should run on the simulated GPU: `LD_LIBRARY_PATH` with
/// `lib_dir` first (followed by the current value), and `FRAGPROBE_SIM_GPU` when a spec is
/// given (validate it first with [`DeviceSpec::parse`]). Other `FRAGPROBE_SIM_*` variables
/// are inherited.
pub fn sim_env(spec: Option<&str>, lib_dir: &Path) -> Vec<(String, String)> {
    let mut path = lib_dir.display().to_string();
    if let Ok(old) = std::env::var("LD_LIBRARY_PATH") {
        if !old.is_empty() {
            path.push(':');
            path.push_str(&old);
        }
    }
    let mut env = vec![("LD_LIBRARY_PATH".to_string(), path)];
    if let Some(s) = spec {
        env.push((config::ENV_GPU.to_string(), s.to_string()));
    }
    env
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prepare_lib_dir_links_and_reports_missing() {
        let base =
            std::env::temp_dir().join(format!("fragprobe-simgpu-libdir-{}", std::process::id()));
        let art = base.join("art");
        std::fs::create_dir_all(&art).unwrap();
        let out = base.join("out");
        let err = prepare_lib_dir(&art, &out).unwrap_err();
        assert!(err
            .to_string()
            .contains("cargo build -p fragprobe-simgpu-driver"));
        for (built, _) in LIBRARIES {
            std::fs::write(art.join(built), b"x").unwrap();
        }
        prepare_lib_dir(&art, &out).unwrap();
        prepare_lib_dir(&art, &out).unwrap(); // idempotent
        let t = std::fs::read_link(out.join("libcuda.so.1")).unwrap();
        assert!(t.ends_with("libcuda.so"));
        assert!(std::fs::read_link(out.join("libnvidia-ml.so.1"))
            .unwrap()
            .ends_with("libnvidia_ml.so"));
        let env = sim_env(Some("2x80GiB"), &out);
        assert!(env[0].1.starts_with(&out.display().to_string()));
        assert_eq!(env[1], ("FRAGPROBE_SIM_GPU".into(), "2x80GiB".into()));
        std::fs::remove_dir_all(&base).unwrap();
    }
}
