//! Real PyTorch (PyPI's 2.9.1+cu128 and 2.15.0+cu132) beyond a training loop, on the
//! simulated GPU under the probe (tests/torch/features.py): cuDNN convolutions, several
//! devices, CUDA graph capture and replay, a real out-of-memory raising PyTorch's own
//! `torch.OutOfMemoryError`, and the NVML tools users run beside it (nvitop, gpustat,
//! nvidia-ml-py) showing the torch process and its memory.
//!
//! The venvs come from `cuda/torch-venv.sh`; where one is missing its tests say so in one
//! line and pass, except under CI.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use fragprobe_shared::format::{Api, EventKind, Record};
use fragprobe_tests::cache;
use fragprobe_tests::probe::{
    fragprobe, out_path, output_text, read_trace, report_json, torch_run, TORCH_TEST_ENV,
};
use fragprobe_tests::sim::sim_env_on;
use serde_json::Value;

fn features_py() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("torch/features.py")
}

/// Runs one feature under `fragprobe record`; its RESULT and the trace's records.
fn feature(version: &str, what: &str, gpus: &str) -> Option<(Value, Vec<Record>, Value)> {
    let py = cache::torch_python(version)?;
    let trace = out_path(&format!("feature-{version}-{what}.fpt"));
    let (o, out) = torch_run("RESULT ", || {
        fragprobe()
            .args(["record", "-q", "-o"])
            .arg(&trace)
            .arg(format!("--simulated-gpu={gpus}"))
            .arg("--")
            .arg(&py)
            .arg(features_py())
            .arg(what)
            .env_remove("PYTORCH_CUDA_ALLOC_CONF")
            .env_remove("PYTORCH_ALLOC_CONF")
            .envs(TORCH_TEST_ENV)
            .output()
            .unwrap()
    });
    assert!(o.status.success(), "torch {version} {what}: {out}");
    assert!(!out.contains("Traceback"), "{out}");
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .unwrap_or_else(|| panic!("no RESULT: {out}"));
    let records = read_trace(&trace);
    let report = report_json(&trace);
    let _ = std::fs::remove_file(&trace);
    Some((serde_json::from_str(line).unwrap(), records, report))
}

/// Successful `cudaMalloc`s per device.
fn segments_by_device(records: &[Record], devices: usize) -> Vec<u64> {
    let mut v = vec![0; devices];
    for r in records {
        if r.kind() == Some(EventKind::Alloc) && r.api() == Some(Api::CudaMalloc) && r.result == 0 {
            v[r.device as usize] += 1;
        }
    }
    v
}

fn conv(version: &str) {
    let Some((r, _, rep)) = feature(version, "conv", "1x24GiB") else {
        return;
    };
    assert!(r["cudnn"].as_u64().unwrap() >= 90000, "{r}");
    assert_eq!(r["shape"], serde_json::json!([8, 16, 62, 62]));
    assert_eq!(rep["events"]["anomalies"], 0);
}

fn multi(version: &str) {
    let Some((r, records, rep)) = feature(version, "multi", "2x80GiB") else {
        return;
    };
    assert_eq!(r["devices"], 2);
    let seen = segments_by_device(&records, 2);
    assert_eq!(serde_json::json!(seen), r["segments"], "{r} {seen:?}");
    assert!(seen.iter().all(|&n| n > 0), "{seen:?}");
    assert_eq!(rep["events"]["anomalies"], 0);
}

fn graph(version: &str) {
    let Some((r, records, _)) = feature(version, "graph", "1x24GiB") else {
        return;
    };
    // The graph's private pool is cudaMalloc'd like any segment.
    assert_eq!(
        serde_json::json!(segments_by_device(&records, 1)[0]),
        r["segments"],
        "{r}"
    );
    assert!(r["segments"].as_u64().unwrap() >= 2, "{r}");
}

fn oom(version: &str) {
    let Some((r, records, rep)) = feature(version, "oom", "1x8GiB") else {
        return;
    };
    // 8 GiB less the 300 MiB context: seven 1 GiB tensors fit, the eighth does not.
    assert_eq!(r["held"], 7, "{r}");
    let msg = r["message"].as_str().unwrap();
    assert!(
        msg.starts_with("CUDA out of memory. Tried to allocate 1024.00 MiB. GPU 0 has a total capacity of 8.00 GiB"),
        "{msg}"
    );
    assert_eq!(r["num_ooms"], 1, "{r}");
    let failed = records
        .iter()
        .filter(|x| x.kind() == Some(EventKind::Alloc) && x.result != 0)
        .count() as u64;
    // The allocator tries, frees its cache, tries again: every refusal is in the trace.
    assert_eq!(failed, 1 + r["retries"].as_u64().unwrap(), "{r}");
    assert_eq!(rep["allocations"]["failed"], failed, "{rep:#}");
}

macro_rules! both {
    ($($f:ident: $a:ident, $b:ident;)*) => {$(
        #[test]
        fn $a() { $f("2.9.1"); }
        #[test]
        fn $b() { $f("2.15.0"); }
    )*};
}

both! {
    conv: cudnn_convolutions_run_2_9, cudnn_convolutions_run_2_15;
    multi: two_devices_are_recorded_apart_2_9, two_devices_are_recorded_apart_2_15;
    graph: cuda_graphs_capture_and_replay_2_9, cuda_graphs_capture_and_replay_2_15;
    oom: a_real_oom_raises_torchs_own_error_2_9, a_real_oom_raises_torchs_own_error_2_15;
}

/// nvitop, gpustat and a pynvml script while real torch holds 400 MiB: the device, the
/// process and its memory (the tensor's segment and the 300 MiB context), no traceback.
#[test]
fn nvml_tools_show_the_torch_process() {
    let Some(py) = cache::torch_python("2.15.0") else {
        return;
    };
    let bin = py.parent().unwrap();
    let mut hold = Command::new(&py);
    let state = sim_env_on(&mut hold, Some("1x24GiB"));
    let mut child = hold
        .arg(features_py())
        .arg("hold")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let r: Value = serde_json::from_str(line.strip_prefix("RESULT ").expect(&line)).unwrap();
    let used_mib = r["reserved"].as_u64().unwrap() / (1 << 20) + 300;
    let pid = child.id().to_string();
    let run = |prog: &Path, args: &[&str]| {
        let mut c = Command::new(prog);
        sim_env_on(&mut c, Some("1x24GiB"));
        let o = c
            .env("FRAGPROBE_SIM_STATE", &state)
            .args(args)
            .output()
            .unwrap();
        let out = output_text(&o);
        assert!(o.status.success(), "{} {args:?}: {out}", prog.display());
        assert!(!out.contains("Traceback"), "{out}");
        out
    };
    let nvitop = run(&bin.join("nvitop"), &["-1"]);
    let gpustat = run(&bin.join("gpustat"), &["-F", "-e", "-P"]);
    let pynvml = run(
        &py,
        &[
            "-c",
            "import pynvml as n; n.nvmlInit(); h = n.nvmlDeviceGetHandleByIndex(0); \
             print([(p.pid, p.usedGpuMemory >> 20) for p in n.nvmlDeviceGetComputeRunningProcesses(h)], \
             n.nvmlSystemGetCudaDriverVersion(), n.nvmlDeviceGetCudaComputeCapability(h), \
             n.nvmlDeviceGetMigMode(h), n.nvmlDeviceGetFanSpeed(h) > 0)",
        ],
    );
    drop(child.stdin.take());
    let _ = child.wait();
    assert!(nvitop.contains("CUDA Driver Version: 13.0"), "{nvitop}");
    assert!(nvitop.contains(&pid), "{nvitop}");
    assert!(
        nvitop.contains(&format!("{used_mib}.0MiB")),
        "{used_mib} {nvitop}"
    );
    assert!(
        gpustat.contains(&format!("{used_mib} / 24576 MB")),
        "{gpustat}"
    );
    assert!(gpustat.contains(&format!("({used_mib}M)")), "{gpustat}");
    assert_eq!(
        pynvml.trim(),
        format!("[({pid}, {used_mib})] 13000 (9, 0) [0, 0] True"),
        "{pynvml}"
    );
}
