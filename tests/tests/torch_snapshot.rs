//! `fragprobe run --torch-snapshot` with a Python program, on the simulated GPU, against
//! the stand-in torch in `tests/fixtures/fake-torch` (the same names the hook calls in real
//! PyTorch): snapshots at OOM and at exit land next to the trace, are named in it, and are
//! joined with the probe's records; processes that never use CUDA get nothing; a
//! sitecustomize that was already on the path still runs.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use fragprobe_tests::probe::{fragprobe, out_path, report_json};
use fragprobe_tests::sim::workspace_root;
use serde_json::Value;

fn fake_torch() -> PathBuf {
    workspace_root().join("tests/fixtures/fake-torch")
}

fn python() -> &'static str {
    let ok = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        ok,
        "python3 is needed by these tests (.ci/run installs it on a fresh machine)"
    );
    "python3"
}

/// A successful `fragprobe ARGS… --record|-o TRACE -- python3 SCRIPT`.
struct Ran {
    trace: PathBuf,
    stdout: String,
    stderr: String,
}

impl Ran {
    /// The report's `torch_snapshots`.
    fn snapshots(&self) -> Vec<Value> {
        report_json(&self.trace)["torch_snapshots"]
            .as_array()
            .cloned()
            .unwrap_or_default()
    }
}

/// Runs `script` as `train.py` with `fragprobe ARGS… TRACE -- python3 train.py`, the
/// stand-in torch (and `extra_path` before it) on `PYTHONPATH`; it must succeed.
fn run_with(name: &str, args: &[&str], script: &str, extra_path: Option<&Path>) -> Ran {
    let trace = out_path(name);
    let dir = trace.with_extension("py.d");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("train.py");
    std::fs::write(&file, script).unwrap();
    let mut path = OsString::new();
    if let Some(p) = extra_path {
        path.push(p);
        path.push(":");
    }
    path.push(fake_torch());
    let out = fragprobe()
        .args(args)
        .arg(&trace)
        .arg("--")
        .arg(python())
        .arg(&file)
        .env("PYTHONPATH", path)
        .output()
        .unwrap();
    let ran = Ran {
        trace,
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    };
    assert!(out.status.success(), "{}", ran.stderr);
    ran
}

const RUN: &[&str] = &[
    "run",
    "--simulated-gpu",
    "1x1GiB",
    "--torch-snapshot",
    "--record",
];

fn run_py(name: &str, script: &str) -> Ran {
    run_with(name, RUN, script, None)
}

const TRAIN: &str = r#"
import torch
ts = [torch.cuda.alloc(30 << 20) for _ in range(3)]
torch.cuda.free(ts[1])
try:
    torch.cuda.alloc(2 << 30)
except torch.OutOfMemoryError:
    print("caught OOM")
"#;

#[test]
fn snapshots_at_oom_and_exit_are_kept_and_joined_with_the_trace() {
    let ran = run_py("torch.fpt", TRAIN);
    let (trace, stderr) = (&ran.trace, &ran.stderr);
    assert!(ran.stdout.contains("caught OOM"));
    let dir = trace.with_file_name(format!(
        "{}.torch",
        trace.file_name().unwrap().to_string_lossy()
    ));
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}\n{stderr}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files.len(), 2, "{files:?}");
    assert!(files[0].ends_with("-exit.pickle") && files[1].ends_with("-oom1.pickle"));
    // The summary names them; the report reads them back from the trace.
    assert!(stderr.contains("torch snapshot  pid"), "{stderr}");
    let v = report_json(trace);
    let snaps = v["torch_snapshots"].as_array().unwrap();
    assert_eq!(snaps.len(), 2, "{v}");
    let pid = v["processes"][0]["pid"].as_u64().unwrap();
    for s in snaps {
        assert_eq!(s["pid"].as_u64(), Some(pid), "{s}");
        assert!(s["error"].is_null(), "{s}");
        // Every segment PyTorch reports is an allocation the probe saw from that process.
        assert_eq!(s["segments"], 3, "{s}");
        assert_eq!(s["segments_seen_by_probe"], 3, "{s}");
        assert_eq!(s["reserved"].as_u64(), Some(3 * (30 << 20)), "{s}");
    }
    let exit = snaps.iter().find(|s| s["reason"] == "exit").unwrap();
    assert_eq!(exit["allocated"].as_u64(), Some(2 * (30 << 20)));
    assert_eq!(exit["ooms"], 1, "{exit}");
    assert!(exit["history_entries"].as_u64().unwrap() >= 9, "{exit}");
    // Paths are relative to the trace, so the pair can be moved together.
    assert!(!Path::new(exit["path"].as_str().unwrap()).is_absolute());
    // The probe saw the failed 2 GiB request too.
    assert_eq!(v["allocations"]["failed"], 1, "{v}");
}

#[test]
fn record_takes_the_same_flag() {
    let ran = run_with(
        "torch-record.fpt",
        &[
            "record",
            "-q",
            "--simulated-gpu",
            "1x1GiB",
            "--torch-snapshot",
            "--torch-max-entries",
            "50",
            "-o",
        ],
        "import torch\nt = torch.cuda.alloc(3 << 20)\n",
        None,
    );
    let snaps = ran.snapshots();
    let s = &snaps[0];
    assert_eq!(s["segments_seen_by_probe"], 1, "{snaps:?}");
    assert_eq!(s["reserved"].as_u64(), Some(4 << 20), "{snaps:?}");
    // A history length PyTorch could not take is refused before anything runs.
    let bad = fragprobe()
        .args([
            "record",
            "--torch-snapshot",
            "--torch-max-entries",
            "0",
            "-o",
        ])
        .arg(out_path("never.fpt"))
        .args(["--", "true"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
}

#[test]
fn programs_that_never_use_cuda_get_no_snapshot() {
    let ran = run_py(
        "torch-nocuda.fpt",
        "import torch\nimport os\nprint('imported', 'FRAGPROBE_TORCH_SNAPSHOT_DIR' in os.environ)\n",
    );
    let (trace, stderr) = (&ran.trace, &ran.stderr);
    assert!(ran.stdout.contains("imported True"));
    assert!(!stderr.contains("torch snapshot"), "{stderr}");
    // The hook never initialised CUDA: no ring, no snapshot directory.
    assert!(stderr.contains("no process of"), "{stderr}");
    let dir = format!("{}.torch", trace.display());
    assert!(!Path::new(&dir).exists());
}

#[test]
fn a_sitecustomize_already_on_the_path_still_runs() {
    let own = out_path("torch-chain.site");
    std::fs::create_dir_all(&own).unwrap();
    std::fs::write(
        own.join("sitecustomize.py"),
        "import builtins, sys\nbuiltins.USER_SITE_RAN = True\nsys.path.append('/fragprobe-test-added')\n",
    )
    .unwrap();
    let ran = run_with(
        "torch-chain.fpt",
        RUN,
        "import builtins, sys, torch\nprint('user site', getattr(builtins, 'USER_SITE_RAN', False))\nprint('path kept', '/fragprobe-test-added' in sys.path)\nt = torch.cuda.alloc(1 << 20)\n",
        Some(&own),
    );
    assert!(ran.stdout.contains("user site True"), "{}", ran.stderr);
    assert!(ran.stdout.contains("path kept True"), "{}", ran.stderr);
    assert_eq!(ran.snapshots().len(), 1);
}

#[test]
fn a_find_spec_probe_before_the_import_does_not_lose_the_hook() {
    // transformers, accelerate and lightning ask importlib whether torch exists first.
    let ran = run_py(
        "torch-probe.fpt",
        "import importlib.util\nassert importlib.util.find_spec('torch') is not None\nimport torch\nt = torch.cuda.alloc(1 << 20)\nprint('args', torch.cuda._history_args)\n",
    );
    // The hook's own settings: Python stacks only, fragprobe's history length.
    let stdout = &ran.stdout;
    assert!(
        stdout.contains("'stacks': 'python'") && stdout.contains("'max_entries': 100000"),
        "{stdout}"
    );
    assert_eq!(ran.snapshots().len(), 1);
}

#[test]
fn a_program_that_records_its_own_history_keeps_its_settings() {
    let ran = run_py(
        "torch-own.fpt",
        "import torch\ntorch.cuda.memory._record_memory_history(max_entries=7, stacks='all')\nt = torch.cuda.alloc(1 << 20)\nprint('args', torch.cuda._history_args)\n",
    );
    let stdout = &ran.stdout;
    assert!(
        stdout.contains("'stacks': 'all'") && stdout.contains("'max_entries': 7"),
        "{stdout}"
    );
    // Still dumped at exit, with the program's history.
    assert_eq!(ran.snapshots().len(), 1);
}

#[test]
fn a_forked_child_does_not_dump_its_parents_state() {
    let ran = run_py(
        "torch-fork.fpt",
        "import os, sys, torch\nt = torch.cuda.alloc(1 << 20)\npid = os.fork()\nif pid == 0:\n    sys.exit(0)\nos.waitpid(pid, 0)\nprint('child', pid)\n",
    );
    let snaps = ran.snapshots();
    let v = &snaps;
    assert_eq!(snaps.len(), 1, "{v:?}");
    let child: u64 = ran
        .stdout
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    assert_ne!(snaps[0]["pid"].as_u64(), Some(child), "{v:?}");
    assert_eq!(snaps[0]["segments_seen_by_probe"], 1, "{v:?}");
}
