//! The wheel as a user gets it: `viewer/wheel/build.py` packages what this test run built,
//! and `viewer/wheel/smoke.sh` installs it with pip into a fresh venv and uses it from
//! another directory with no fragprobe variables set (`--version`, `python -m fragprobe`,
//! `probe-path`, `demo`, `run`, and `LD_PRELOAD=$(fragprobe probe-path)` by hand), and with
//! real PyTorch (`demo --torch`, `run -- python`) where the torch venv is.

use std::process::Command;

use fragprobe_tests::cache;
use fragprobe_tests::probe::{ensure_fragprobe_built, out_path, output_text};
use fragprobe_tests::sim::{artifact_dir, ensure_sim_built, workspace_root};

#[test]
fn the_wheel_installs_with_pip_and_runs_from_any_directory() {
    let venv_ok = Command::new("python3")
        .args(["-m", "venv", "--help"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !venv_ok {
        cache::missing("python3 with venv (apt-get install python3-venv) for the wheel test");
        return;
    }
    ensure_fragprobe_built();
    ensure_sim_built();
    let out = out_path("wheels");
    let build = Command::new("python3")
        .arg(workspace_root().join("viewer/wheel/build.py"))
        .arg("--artifacts")
        .arg(artifact_dir())
        .arg("--out")
        .arg(&out)
        .args(["--compress-level", "1"])
        .output()
        .expect("run build.py");
    let text = output_text(&build);
    assert!(build.status.success(), "build.py failed:\n{text}");
    let wheels: Vec<_> = std::fs::read_dir(&out)
        .expect("wheel directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "whl"))
        .collect();
    assert_eq!(wheels.len(), 1, "one wheel in {}:\n{text}", out.display());
    let name = wheels[0]
        .file_name()
        .unwrap()
        .to_string_lossy()
        .into_owned();
    assert!(
        name.starts_with(&format!(
            "fragprobe-{}-py3-none-manylinux_2_",
            env!("CARGO_PKG_VERSION")
        )) && name.ends_with(&format!("_{}.whl", std::env::consts::ARCH)),
        "wheel name {name}"
    );
    // With real PyTorch too where the torch venv is (always under CI).
    let torch = cache::torch_python("2.9.1");
    let mut cmd = Command::new("bash");
    cmd.arg(workspace_root().join("viewer/wheel/smoke.sh"))
        .arg(&wheels[0])
        .current_dir(std::env::temp_dir());
    if let Some(py) = &torch {
        cmd.env("FRAGPROBE_SMOKE_TORCH_PYTHON", py);
    }
    let smoke = cmd.output().expect("run smoke.sh");
    let text = output_text(&smoke);
    assert!(
        smoke.status.success() && text.contains("smoke: OK"),
        "smoke.sh:\n{text}"
    );
    for line in [
        "run: 3 cudaMalloc and 3 cudaFree recorded",
        "probe loaded",
        "fragmentation OOM",
    ] {
        assert!(
            text.contains(line),
            "smoke.sh did not say {line:?}:\n{text}"
        );
    }
    if torch.is_some() {
        for line in [
            "expandable_segments:True fit",
            "run -- python (torch): 3 device allocations",
        ] {
            assert!(
                text.contains(line),
                "smoke.sh did not say {line:?}:\n{text}"
            );
        }
    }
    let _ = std::fs::remove_dir_all(&out);
}
