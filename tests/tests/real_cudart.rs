//! NVIDIA's own CUDA runtime (libcudart 12.8 and 13.0 from PyPI's wheels, the library every
//! PyTorch wheel loads by absolute path) on the simulated driver: it is served the
//! driver's private export tables (with an integrity answer it verifies), gets its device,
//! allocates and frees, and the probe records what it did.
//!
//! The runtimes come from `cuda/fetch-nvidia-runtime.sh` (a few MB, once per machine,
//! outside the checkout; `.ci/run` calls it). Where they are missing the tests say so in
//! one line and pass — except under CI, where a missing runtime is a failure.

use std::path::PathBuf;
use std::process::{Command, Output};

use fragprobe_tests::cache;
use fragprobe_tests::probe::{fragprobe, out_path, report_json};
use fragprobe_tests::sim::{artifact_dir, sim_env_on, workspace_root};

/// `DIR/<version>/<lib>` as the fetch script lays it out, or None after saying why.
fn runtime(version: &str, lib: &str) -> Option<PathBuf> {
    let p = cache::dir("FRAGPROBE_NVIDIA_RUNTIME_DIR", "nvidia-runtime")?
        .join(version)
        .join(lib);
    if p.is_file() {
        return Some(p);
    }
    cache::missing(&format!(
        "NVIDIA's runtime {version} is not at {} (run cuda/fetch-nvidia-runtime.sh; it needs PyPI)",
        p.display()
    ));
    None
}

/// The C program that loads a libcudart and allocates through it.
fn program() -> PathBuf {
    static BUILT: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BUILT.get_or_init(build_program).clone()
}

fn build_program() -> PathBuf {
    let out = artifact_dir().join("real_cudart");
    let st = Command::new(std::env::var("CC").unwrap_or_else(|_| "cc".into()))
        .args(["-std=gnu11", "-O1", "-Wall", "-Werror"])
        .arg(workspace_root().join("tests/c/real_cudart.c"))
        .arg("-o")
        .arg(&out)
        .arg("-ldl")
        .status()
        .expect("cc");
    assert!(st.success());
    out
}

fn text(o: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn runs_on_the_simulated_driver(version: &str, lib: &str, driver: Option<&str>) {
    let Some(rt) = runtime(version, lib) else {
        return;
    };
    let mut cmd = Command::new(program());
    sim_env_on(&mut cmd, Some("1x16GiB"));
    if let Some(v) = driver {
        cmd.env("FRAGPROBE_SIM_DRIVER_VERSION", v);
    }
    let o = cmd.arg(&rt).output().unwrap();
    let out = text(&o);
    assert!(o.status.success(), "{out}");
    assert!(out.contains("devices 1"), "{out}");
    // 16 GiB less the 300 MiB context, 64 MiB and 1 MiB.
    let free = (16u64 << 30) - (300 << 20) - (64 << 20) - (1 << 20);
    assert!(
        out.contains(&format!("meminfo free={free} total={}", 16u64 << 30)),
        "{out}"
    );
    // Under the probe: the runtime's allocations are seen (through cuGetProcAddress).
    let trace = out_path(&format!("real-cudart-{version}.fpt"));
    let mut rec = fragprobe();
    rec.args(["record", "--simulated-gpu=1x16GiB", "-q", "-o"])
        .arg(&trace)
        .arg("--")
        .arg(program())
        .arg(&rt);
    if let Some(v) = driver {
        rec.env("FRAGPROBE_SIM_DRIVER_VERSION", v);
    }
    let o = rec.output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let v = report_json(&trace);
    assert_eq!(v["allocations"]["ok"], 2, "{v:#}");
    assert_eq!(v["allocations"]["frees"], 2, "{v:#}");
    assert_eq!(v["bytes"]["peak_live"], (64u64 << 20) + (1 << 20), "{v:#}");
    assert_eq!(v["events"]["anomalies"], 0);
    let _ = std::fs::remove_file(&trace);
}

#[test]
fn nvidias_cuda_12_8_runtime_allocates_on_the_simulated_gpu() {
    runs_on_the_simulated_driver("12.8", "libcudart.so.12", None);
}

#[test]
fn nvidias_cuda_13_runtime_allocates_on_the_default_13_0_driver() {
    runs_on_the_simulated_driver("13.0", "libcudart.so.13", None);
}

#[test]
fn nvidias_cuda_12_8_runtime_allocates_on_a_simulated_12_8_driver() {
    runs_on_the_simulated_driver("12.8", "libcudart.so.12", Some("12.8"));
}

#[test]
fn a_13_runtime_refuses_a_12_8_driver_as_on_real_hardware() {
    let Some(rt) = runtime("13.0", "libcudart.so.13") else {
        return;
    };
    let mut cmd = Command::new(program());
    sim_env_on(&mut cmd, Some("1x16GiB"));
    cmd.env("FRAGPROBE_SIM_DRIVER_VERSION", "12.8");
    let o = cmd.arg(&rt).output().unwrap();
    assert!(!o.status.success());
    assert!(
        text(&o).contains("cudaGetDeviceCount 35 cudaErrorInsufficientDriver"),
        "{}",
        text(&o)
    );
}
