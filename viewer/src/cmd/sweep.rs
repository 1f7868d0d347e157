//! `fragprobe sweep --alloc-conf CONF [--alloc-conf CONF…] -- CMD ARGS…`: run the real
//! workload once per PyTorch allocator configuration under the probe and compare the runs.
//!
//! Every configuration is checked with the same parser as `fragprobe simulate` before
//! anything runs, so a typo fails in a second instead of after the first training run.
//! The runs are sequential (they would compete for the same GPU otherwise); each gets
//! `PYTORCH_CUDA_ALLOC_CONF` (and its newer name `PYTORCH_ALLOC_CONF`, which PyTorch ≥ 2.9
//! reads first) set to its configuration, `default` meaning both empty: PyTorch's
//! defaults. A run that ends in an OOM or a non-zero exit is data, not a reason to stop.
//! Each trace is kept in the output directory, so any column can be opened with
//! `fragprobe view` or `report` afterwards.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use fragprobe_shared::torch::sim::{Config, Version};
use serde::Serialize;

use super::run::{record_session, warn_no_ring};
use crate::exit;
use crate::load::CodedError;
use crate::record::SessionOptions;
use crate::report::compare::{compare, render, Better, Comparison, Row};

/// The configuration value that stands for PyTorch's defaults (variable set empty).
pub const DEFAULT_CONF: &str = "default";

/// Options of `fragprobe sweep`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// A `PYTORCH_CUDA_ALLOC_CONF` value to run with (repeat for each run; `default` runs
    /// with PyTorch's defaults).
    #[arg(
        long = "alloc-conf",
        alias = "conf",
        value_name = "CONF",
        required = true
    )]
    pub confs: Vec<String>,
    /// Directory for the traces (default: fragprobe-sweep-<time> in the current directory).
    #[arg(short, long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
    /// Run on the simulated GPU (SPEC like `1x4GiB`; default one 16 GiB device). Each run
    /// gets a fresh simulated device.
    #[arg(long, value_name = "SPEC", num_args = 0..=1, default_missing_value = "",
          value_parser = crate::nvml::simulated::spec_arg)]
    pub simulated_gpu: Option<String>,
    /// Print the comparison as JSON.
    #[arg(long)]
    pub json: bool,
    /// `--torch-snapshot` for every run: PyTorch's own snapshots at exit and on OOM, joined
    /// with each trace, and each OOM judged inside the caching allocator.
    #[command(flatten)]
    pub torch: super::run::TorchArgs,
    /// The command to run, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// One run of the sweep.
#[derive(Clone, Debug, Serialize)]
pub struct SweepRun {
    /// The configuration (`default` for PyTorch's defaults).
    pub alloc_conf: String,
    /// The trace written.
    pub trace: String,
    /// The command's exit code (128+N when killed by signal N).
    pub exit_code: u8,
    /// Wall-clock seconds from start to exit.
    pub wall_s: f64,
    /// Failed allocations with the verdict of each (`capacity`, `fragmentation`, `other`).
    pub failures: Vec<String>,
    /// With `--torch-snapshot`: PyTorch's OOMs, judged inside its caching allocator.
    pub torch_ooms: Vec<String>,
}

/// The sweep's result: the runs, and the comparison table of their reports.
#[derive(Clone, Debug, Serialize)]
pub struct Sweep {
    /// The runs in the order given.
    pub runs: Vec<SweepRun>,
    /// The comparison (with `wall time s` and `exit code` rows added).
    pub comparison: Comparison,
}

/// Checks every configuration before anything runs.
pub fn check_confs(confs: &[String], version: Version) -> Result<(), CodedError> {
    for c in confs {
        if c == DEFAULT_CONF {
            continue;
        }
        Config::parse(c, version).map_err(|e| {
            CodedError::new(
                exit::BAD_INPUT,
                format!("{e} (PyTorch would refuse it at start-up; nothing was run)"),
            )
        })?;
    }
    let mut seen = std::collections::HashSet::new();
    for c in confs {
        if !seen.insert(c) {
            return Err(CodedError::new(
                exit::USAGE,
                format!("--alloc-conf {c:?} is given twice"),
            ));
        }
    }
    Ok(())
}

/// A file-name-safe form of a configuration.
fn slug(conf: &str) -> String {
    let s: String = conf
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    let s = s.trim_matches('_').to_string();
    let s = if s.is_empty() { "default".into() } else { s };
    s.chars().take(60).collect()
}

fn default_dir() -> PathBuf {
    PathBuf::from(format!("fragprobe-sweep-{}", crate::record::utc_stamp()))
}

/// The trace of run `i` with `conf` in `dir`.
pub fn trace_path(dir: &Path, i: usize, conf: &str) -> PathBuf {
    dir.join(format!("{:02}-{}.fpt", i + 1, slug(conf)))
}

/// What to sweep: one run of `command` per configuration, traces in `dir`.
pub struct Plan {
    /// The configurations, checked with [`check_confs`].
    pub confs: Vec<String>,
    /// The traces' directory (made if missing).
    pub dir: PathBuf,
    /// `--simulated-gpu`: `Some("")` the default devices, `Some(spec)`, or `None`: the real GPU.
    pub simulated_gpu: Option<String>,
    /// `--torch-snapshot`'s history length.
    pub torch_snapshot: Option<u64>,
    /// The command.
    pub command: Vec<OsString>,
    /// More environment for every run.
    pub env: Vec<(OsString, OsString)>,
}

/// What a sweep produced.
pub struct Swept {
    /// The runs and their comparison.
    pub sweep: Sweep,
    /// Each run's report, in order.
    pub reports: Vec<crate::report::Report>,
    /// The traces' directory, absolute.
    pub dir: PathBuf,
    /// Whether some trace could not be written in full.
    pub incomplete: bool,
}

/// `fragprobe sweep`.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    check_confs(&args.confs, Version::DEFAULT)?;
    let plan = Plan {
        confs: args.confs.clone(),
        dir: args.out_dir.clone().unwrap_or_else(default_dir),
        simulated_gpu: args.simulated_gpu.clone(),
        torch_snapshot: args.torch.max_entries(),
        command: args.command.clone(),
        env: Vec::new(),
    };
    let swept = match sweep(&plan)? {
        Ok(s) => s,
        Err(code) => return Ok(code),
    };
    if args.json {
        crate::stdout::println(&serde_json::to_string_pretty(&swept.sweep)?)?;
    } else {
        crate::stdout::print(&format!(
            "{}traces: {}\n",
            render_sweep(&swept.sweep),
            swept.dir.display()
        ))?;
    }
    if swept.incomplete {
        return Ok(ExitCode::from(crate::exit::TRACE_INCOMPLETE));
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs the plan, one configuration after the other; `Ok(Err(code))` when the command
/// could not be started (the message is printed).
pub fn sweep(plan: &Plan) -> anyhow::Result<Result<Swept, ExitCode>> {
    let dir = &plan.dir;
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating the sweep directory {}", dir.display()))?;
    // Absolute: the simulated device's state file must be the same for a workload that
    // changes directory, and for its children.
    let dir = dir
        .canonicalize()
        .with_context(|| format!("resolving {}", dir.display()))?;
    let mut runs = Vec::new();
    let mut incomplete = false;
    let mut reports = Vec::new();
    for (i, conf) in plan.confs.iter().enumerate() {
        let trace = trace_path(&dir, i, conf);
        let value: OsString = if conf == DEFAULT_CONF {
            OsString::new()
        } else {
            conf.into()
        };
        let mut env = vec![
            ("PYTORCH_CUDA_ALLOC_CONF".into(), value.clone()),
            ("PYTORCH_ALLOC_CONF".into(), value),
            ("FRAGPROBE_LABEL".into(), conf.into()),
        ];
        env.extend(plan.env.iter().cloned());
        let state = dir.join(format!(".simgpu-{}.state", i + 1));
        if plan.simulated_gpu.is_some() {
            // A fresh simulated device per run: runs must not see each other's leftovers.
            let _ = std::fs::remove_file(&state);
            env.push(("FRAGPROBE_SIM_STATE".into(), state.clone().into()));
        }
        let opts = SessionOptions {
            command: plan.command.clone(),
            trace: Some(trace.clone()),
            simulated_gpu: plan
                .simulated_gpu
                .as_ref()
                .map(|s| (!s.is_empty()).then(|| s.clone())),
            torch_snapshot: plan.torch_snapshot,
            no_probe: false,
            env,
            nvml_interval: Some(crate::record::nvml::DEFAULT_INTERVAL),
        };
        eprintln!(
            "fragprobe sweep: run {}/{}: PYTORCH_CUDA_ALLOC_CONF={}",
            i + 1,
            plan.confs.len(),
            if conf == DEFAULT_CONF { "" } else { conf }
        );
        let out = match record_session(&opts, false)? {
            Ok(o) => o,
            Err(e) => {
                eprintln!("{}", e.message);
                return Ok(Err(ExitCode::from(e.code)));
            }
        };
        let _ = std::fs::remove_file(&state);
        if out.rings_seen == 0 {
            warn_no_ring(&opts);
        }
        if let Some(e) = &out.trace_error {
            // The row comes from the whole run; only the saved trace is short.
            eprintln!("{}", super::run::incomplete_trace_message(&trace, e));
            incomplete = true;
        }
        let mut report = out.report;
        report.label = conf.clone();
        runs.push(SweepRun {
            alloc_conf: conf.clone(),
            trace: trace.display().to_string(),
            exit_code: out.code,
            wall_s: out.wall.as_secs_f64(),
            failures: report
                .failed_allocations
                .iter()
                .map(|f| f.verdict.clone())
                .collect(),
            torch_ooms: report
                .torch_snapshots
                .iter()
                .filter_map(|t| t.oom.as_ref().map(|o| o.verdict.clone()))
                .collect(),
        });
        reports.push(report);
    }
    let sweep = build(runs, &reports);
    Ok(Ok(Swept {
        sweep,
        reports,
        dir,
        incomplete,
    }))
}

/// The comparison of the runs' reports, with the sweep's own rows added.
pub fn build(runs: Vec<SweepRun>, reports: &[crate::report::Report]) -> Sweep {
    let mut comparison = compare(reports);
    comparison.labels = runs.iter().map(|r| r.alloc_conf.clone()).collect();
    let count = |v: &str| -> Vec<f64> {
        runs.iter()
            .map(|r| r.failures.iter().filter(|f| *f == v).count() as f64)
            .collect()
    };
    comparison.rows.push(Row::new(
        "fragmentation OOMs",
        Better::Lower,
        count("fragmentation"),
        false,
    ));
    comparison.rows.push(Row::new(
        "capacity OOMs",
        Better::Lower,
        count("capacity"),
        false,
    ));
    if runs.iter().any(|r| !r.torch_ooms.is_empty()) {
        for (name, v) in [
            ("PyTorch OOMs from fragmentation", "fragmentation"),
            ("PyTorch OOMs from capacity", "capacity"),
        ] {
            let n = runs
                .iter()
                .map(|r| r.torch_ooms.iter().filter(|f| *f == v).count() as f64)
                .collect();
            comparison
                .rows
                .push(Row::new(name, Better::Lower, n, false));
        }
    }
    comparison.rows.push(Row::new(
        "wall time s",
        Better::Lower,
        runs.iter().map(|r| r.wall_s).collect(),
        false,
    ));
    comparison.rows.push(Row::new(
        "exit code",
        Better::Lower,
        runs.iter().map(|r| f64::from(r.exit_code)).collect(),
        false,
    ));
    Sweep { runs, comparison }
}

/// The sweep as text: the comparison table, then one line per run.
pub fn render_sweep(s: &Sweep) -> String {
    let mut out = render(&s.comparison);
    out.push('\n');
    for (i, r) in s.runs.iter().enumerate() {
        let mut fails = if r.failures.is_empty() {
            "no failed allocation".to_string()
        } else {
            format!("failed allocations: {}", r.failures.join(", "))
        };
        if !r.torch_ooms.is_empty() {
            fails += &format!("; PyTorch OOMs: {}", r.torch_ooms.join(", "));
        }
        out.push_str(&format!(
            "run {}: {} — exit {}, {:.2} s, {fails}; {}\n",
            i + 1,
            r.alloc_conf,
            r.exit_code,
            r.wall_s,
            r.trace
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    fn check_confs_default(c: &[String]) -> Result<(), CodedError> {
        super::check_confs(c, Version::DEFAULT)
    }

    use super::*;

    #[test]
    fn confs_are_checked_before_running() {
        assert!(
            check_confs_default(&["default".into(), "expandable_segments:True".into()]).is_ok()
        );
        let e = check_confs_default(&["max_split_size_mb:12".into()]).unwrap_err();
        assert_eq!(e.code, exit::BAD_INPUT);
        assert!(e.to_string().contains("max_split_size_mb"), "{e}");
        let e = check_confs_default(&["expandable_segment:True".into()]).unwrap_err();
        assert!(e.to_string().contains("nothing was run"), "{e}");
        let e = check_confs_default(&["default".into(), "default".into()]).unwrap_err();
        assert!(e.to_string().contains("twice"), "{e}");
    }

    #[test]
    fn trace_names_are_safe_and_ordered() {
        let d = Path::new("/x");
        assert_eq!(
            trace_path(d, 0, "expandable_segments:True"),
            PathBuf::from("/x/01-expandable_segments_True.fpt")
        );
        assert_eq!(
            trace_path(d, 1, "default"),
            PathBuf::from("/x/02-default.fpt")
        );
        assert_eq!(
            trace_path(
                d,
                2,
                "max_split_size_mb:256,roundup_power2_divisions:[256:1,>:4]"
            ),
            PathBuf::from("/x/03-max_split_size_mb_256_roundup_power2_divisions__256_1___4.fpt")
        );
    }
}
