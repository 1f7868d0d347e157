//! Real PyTorch (PyPI's torch 2.15.0, CUDA 13.2 build) on the simulated GPU, timed as the
//! whole commands users run, with the probe and without it (`--no-probe`), alternated in
//! one sitting:
//!
//! - `real_torch/startup/*`: `import torch` and the first CUDA allocation
//!   (`fragprobe run -- python -c "import torch; torch.empty(1, device='cuda')"`);
//! - `real_torch/train_4_steps/*`: `tests/torch/train.py --steps 4` (a GPT-style step:
//!   embeddings, attention, MLP, AdamW, bf16 autocast);
//! - `real_torch/scenario_torch_caching/*`: the stand-in runtime's imitation of the
//!   caching allocator (`cuda/scenarios/torch_caching.c`), for scale.
//!
//! Needs the venv of `cuda/torch-venv.sh 2.15.0`; without it the bench says so and stops.

use std::path::Path;
use std::process::{Command, Stdio};

use criterion::{criterion_group, criterion_main, Criterion};
use fragprobe_tests::probe::fragprobe;
use fragprobe_tests::sim::build_scenario;

fn run(probe: bool, args: &[&std::ffi::OsStr]) -> Command {
    // `run` writes its trace into the working directory: keep it out of the checkout.
    static DIR: std::sync::OnceLock<tempfile::TempDir> = std::sync::OnceLock::new();
    let dir = DIR.get_or_init(|| tempfile::tempdir().expect("temporary directory"));
    let mut cmd = fragprobe();
    cmd.current_dir(dir.path());
    cmd.args(["run", "-q", "--simulated-gpu=1x24GiB"]);
    if !probe {
        cmd.arg("--no-probe");
    }
    cmd.arg("--")
        .args(args)
        .env_remove("PYTORCH_CUDA_ALLOC_CONF")
        .env_remove("PYTORCH_ALLOC_CONF")
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    cmd
}

fn pair(c: &mut Criterion, name: &str, args: &[&std::ffi::OsStr]) {
    let mut g = c.benchmark_group(format!("real_torch/{name}"));
    g.sample_size(10);
    for probe in [false, true] {
        let id = if probe { "probe" } else { "no_probe" };
        g.bench_function(id, |b| {
            b.iter(|| assert!(run(probe, args).status().expect("fragprobe run").success()))
        });
    }
    g.finish();
}

fn bench(c: &mut Criterion) {
    // Says what is missing and how to make it.
    let Some(py) = fragprobe_tests::cache::torch_python("2.15.0") else {
        return;
    };
    let train = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/torch/train.py");
    let py = py.as_os_str();
    pair(
        c,
        "startup",
        &[
            py,
            "-c".as_ref(),
            "import torch; torch.empty(1, device='cuda')".as_ref(),
        ],
    );
    pair(
        c,
        "train_4_steps",
        &[py, train.as_os_str(), "--steps".as_ref(), "4".as_ref()],
    );
    let scenario = build_scenario("torch_caching");
    pair(c, "scenario_torch_caching", &[scenario.as_os_str()]);
}

criterion_group!(benches, bench);
criterion_main!(benches);
