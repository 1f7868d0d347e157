//! An LD_PRELOAD interposer of `cuMemAlloc_v2` sees calls through the exported symbol, but
//! not the runtime's calls nor functions obtained from `cuGetProcAddress` — exactly as with
//! NVIDIA's driver and runtime, so a probe must stand in all three doors.

use fragprobe_tests::sim::{artifact_dir, parse_lines, sim_command, workspace_root};
use std::path::PathBuf;
use std::process::Command;

fn shim() -> PathBuf {
    let out = artifact_dir()
        .join("simgpu-scenarios")
        .join(format!("libshim_count-{}.so", std::process::id()));
    std::fs::create_dir_all(out.parent().unwrap()).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let st = Command::new(cc)
        .args(["-shared", "-fPIC", "-O1", "-Wall", "-Werror"])
        .arg(workspace_root().join("cuda/scenarios/shim_count.c"))
        .arg("-o")
        .arg(&out)
        .arg("-ldl")
        .status()
        .unwrap();
    assert!(st.success());
    out
}

/// (number of shim reports, scenario lines) of a scenario run under the shim.
fn under_shim(scenario: &str, shim: &PathBuf) -> (usize, usize) {
    let mut cmd = sim_command(scenario, Some("1x4GiB"));
    cmd.env("LD_PRELOAD", shim);
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let lines = parse_lines(&stdout);
    assert!(lines.iter().filter(|l| l.op == "alloc").count() > 0);
    (
        stderr.lines().filter(|l| l.starts_with("SHIM ")).count(),
        lines.len(),
    )
}

#[test]
fn exported_symbols_are_interposable_but_getproc_and_runtime_paths_are_not() {
    let shim = shim();
    // door_link calls cuMemAlloc_v2 by name once
    assert_eq!(under_shim("door_link", &shim).0, 1);
    // the pointer cuGetProcAddress returns is the driver's own function
    assert_eq!(under_shim("door_getproc", &shim).0, 0);
    // the runtime reaches the driver only through cuGetProcAddress_v2's pointers (its one
    // cuMemAlloc_v2 line comes from cudaGetDriverEntryPoint, also a driver pointer)
    assert_eq!(under_shim("door_runtime", &shim).0, 0);
    let _ = std::fs::remove_file(&shim);
}
