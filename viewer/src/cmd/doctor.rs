//! `fragprobe doctor`: "why did I run out of memory?" from the evidence — a trace, a
//! `log` file, or (without an input) the live NVML view.

use std::path::PathBuf;
use std::process::ExitCode;

use serde_json::json;

use crate::exit;
use crate::nvml::diagnose::{diagnose, Verdict};
use crate::nvml::evidence::{self, DeviceEvidence};
use crate::nvml::logfile;
use crate::nvml::procfs::ProcFs;
use crate::nvml::{Monitor, NvmlArgs};

/// Diagnose out-of-memory causes.
#[derive(clap::Args, Clone, Debug)]
pub struct Args {
    /// A fragprobe trace or a `fragprobe log` file; without it, the live GPUs are examined
    #[arg(value_name = "TRACE")]
    pub input: Option<PathBuf>,
    /// Print the evidence and verdicts as JSON
    #[arg(long)]
    pub json: bool,
    /// Only these GPUs (comma-separated indices)
    #[arg(short = 'i', long = "id", value_name = "GPU,…", value_delimiter = ',')]
    pub gpus: Vec<u32>,
    #[command(flatten)]
    pub nvml: NvmlArgs,
}

/// Renders the verdicts as text.
pub fn render_text(reports: &[(DeviceEvidence, Verdict)]) -> String {
    let mut s = String::new();
    for (d, v) in reports {
        s.push_str(&format!("{} — from {}\n", d.title, d.evidence.source));
        if v.findings.is_empty() {
            s.push_str("  no out-of-memory cause found\n");
        }
        for f in &v.findings {
            s.push_str(&format!(
                "  [{}] {}\n",
                serde_json::to_value(f.cause)
                    .ok()
                    .and_then(|c| c.as_str().map(String::from))
                    .unwrap_or_default(),
                f.summary
            ));
            for e in &f.evidence {
                s.push_str(&format!("      evidence: {e}\n"));
            }
            for g in &f.suggestions {
                s.push_str(&format!(
                    "      try: {}\n           ({})\n",
                    g.action, g.why
                ));
            }
        }
        for n in &v.notes {
            s.push_str(&format!("  note: {n}\n"));
        }
        s.push('\n');
    }
    s
}

fn gather(args: &Args) -> Result<Vec<DeviceEvidence>, (u8, String)> {
    match &args.input {
        None => {
            let mon = Monitor::open(&args.nvml)
                .map_err(|e| (exit::NO_NVML, format!("NVML unavailable: {e}")))?;
            mon.check_selection(&args.gpus)
                .map_err(|e| (exit::USAGE, e))?;
            Ok(evidence::from_snapshot(&mon.sample(&args.gpus)))
        }
        Some(p) => {
            let bytes = std::fs::read(p)
                .map_err(|e| (exit::NO_INPUT, format!("cannot read {}: {e}", p.display())))?;
            if logfile::looks_like_log(&bytes) {
                let data = logfile::parse(&String::from_utf8_lossy(&bytes))
                    .map_err(|e| (exit::BAD_INPUT, format!("{}: {e}", p.display())))?;
                let src = format!("log {}", p.display());
                let mut ev = evidence::from_log(&data, &src, &ProcFs::default());
                ev.retain(|d| {
                    args.gpus.is_empty()
                        || d.evidence.device.is_some_and(|g| args.gpus.contains(&g))
                });
                Ok(ev)
            } else {
                evidence::from_trace(p, &args.gpus)
            }
        }
    }
}

/// Runs `fragprobe doctor`.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let devices = match gather(args) {
        Ok(d) => d,
        Err((code, msg)) => {
            if code == exit::NO_NVML {
                eprintln!("{msg}");
            } else {
                eprintln!("fragprobe doctor: {msg}");
            }
            return Ok(ExitCode::from(code));
        }
    };
    let reports: Vec<(DeviceEvidence, Verdict)> = devices
        .into_iter()
        .map(|d| {
            let v = diagnose(&d.evidence);
            (d, v)
        })
        .collect();
    if args.json {
        let list: Vec<_> = reports
            .iter()
            .map(|(d, v)| json!({"device": d.title, "evidence": d.evidence, "verdict": v}))
            .collect();
        crate::stdout::println(&serde_json::to_string_pretty(&json!({ "reports": list }))?)?;
    } else {
        crate::stdout::print(&render_text(&reports))?;
    }
    if reports.iter().any(|(_, v)| v.found()) {
        Ok(ExitCode::from(exit::FINDING))
    } else {
        Ok(ExitCode::SUCCESS)
    }
}
