//! `fragprobe simulate SNAPSHOT [--verify] [--alloc-conf STR]… [--capacity SIZE] [--json]`.
//!
//! Replays a PyTorch memory snapshot (`torch.cuda.memory._dump_snapshot()`) through the
//! simulator of PyTorch's native caching allocator.
//!
//! - `--verify`: replays the recorded trace with the snapshot's own settings and counts how
//!   many recorded allocation addresses and segment sizes the simulator reproduces. Exit
//!   code 0 when everything matches, 7 when something does not.
//! - otherwise (predict): replays the recorded request stream under each `--alloc-conf` string
//!   (a default sweep when none is given) against `--capacity`, next to what was recorded.

use std::path::PathBuf;
use std::process::ExitCode;

use fragprobe_shared::torch::predict::{predict, PredictReport, DEFAULT_SWEEP};
use fragprobe_shared::torch::sim::Version;
use fragprobe_shared::torch::verify::{verify, VerifyReport};
use fragprobe_shared::torch::{load_snapshot, ImportError};

use crate::exit;
use crate::load::CodedError;

/// Options of `fragprobe simulate`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// The snapshot pickle (`torch.cuda.memory._dump_snapshot(path)`).
    pub snapshot: PathBuf,
    /// Check the simulator against the recording instead of predicting.
    #[arg(long)]
    pub verify: bool,
    /// A `PYTORCH_CUDA_ALLOC_CONF` string to predict (repeatable). Default: a sweep of 11
    /// common settings. `per_process_memory_fraction:F` stands for
    /// `torch.cuda.set_per_process_memory_fraction(F)`.
    #[arg(long = "alloc-conf", visible_alias = "conf", value_name = "STR")]
    pub confs: Vec<String>,
    /// Device memory for predictions, e.g. `80GiB`, `81559MiB` or bytes (default:
    /// unlimited; snapshots do not record the device's total).
    #[arg(long, value_name = "SIZE", value_parser = parse_size)]
    pub capacity: Option<u64>,
    /// Follow the rules of this PyTorch release where they changed (e.g. `2.5`).
    #[arg(long = "pytorch", value_name = "VERSION", default_value = "2.9", value_parser = parse_version)]
    pub pytorch: Version,
    /// Device to predict (default: every device in the snapshot).
    #[arg(long)]
    pub device: Option<i32>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Parses `123`, `4096KiB`, `80GiB`, `1.5GB`… into bytes; a size past 2^64 - 1 bytes is
/// an error, not a saturated figure.
pub fn parse_size(s: &str) -> Result<u64, String> {
    fragprobe_simgpu::size::parse_size(s).map_err(|e| e.to_string())
}

fn parse_version(s: &str) -> Result<Version, String> {
    Version::parse(s).ok_or_else(|| format!("{s:?} is not a PyTorch version like 2.5"))
}

/// Bytes for people.
pub fn human(b: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < U.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", U[i])
    }
}

/// Loads a snapshot, mapping failures to documented exit codes.
pub fn load(path: &std::path::Path) -> anyhow::Result<fragprobe_shared::torch::Snapshot> {
    load_snapshot(path).map_err(|e| {
        let code = match e {
            ImportError::Io(_) => exit::NO_INPUT,
            ImportError::Pickle(_) | ImportError::Shape(_) => exit::BAD_INPUT,
        };
        anyhow::Error::new(CodedError {
            code,
            message: format!("{}: {e}", path.display()),
        })
    })
}

fn render_verify(r: &VerifyReport) -> String {
    let mut out = String::new();
    let conf = if r.config.source.is_empty() {
        "(defaults)"
    } else {
        &r.config.source
    };
    out.push_str(&format!(
        "settings: {conf}  (rules of PyTorch {})\n",
        r.config.version
    ));
    if let Some(why) = &r.config.inferred {
        out.push_str(&format!("  inferred: {why}\n"));
    }
    for d in &r.devices {
        let pct = |a: u64, b: u64| {
            if b == 0 {
                100.0
            } else {
                100.0 * a as f64 / b as f64
            }
        };
        out.push_str(&format!(
            "device {}: {} trace entries\n  alloc addresses  {}/{} ({:.1} %)\n  segment sizes    {}/{} ({:.1} %)\n",
            d.device,
            d.events,
            d.alloc_address_matches,
            d.alloc_events,
            pct(d.alloc_address_matches, d.alloc_events),
            d.segment_size_matches,
            d.segment_allocs,
            pct(d.segment_size_matches, d.segment_allocs),
        ));
        if d.segment_maps > 0 {
            out.push_str(&format!(
                "  segment maps     {}/{}\n",
                d.segment_map_matches, d.segment_maps
            ));
        }
        out.push_str(&format!(
            "  final layout     {}\n  start state      {} segments rebuilt, {} block sizes inferred ({} ambiguous)\n",
            if d.final_state_matches { "matches the snapshot" } else { "DIFFERS from the snapshot" },
            d.reconstruction.segments.len(),
            d.reconstruction.inferred_blocks,
            d.reconstruction.ambiguous_blocks,
        ));
        if d.resyncs > 0 {
            out.push_str(&format!(
                "  resynchronised   {} mismatched allocations moved to their recorded address\n",
                d.resyncs
            ));
        }
        for a in &d.reconstruction.anomalies {
            out.push_str(&format!("  anomaly: {a}\n"));
        }
        if let Some(m) = &d.first_mismatch {
            out.push_str(&format!(
                "  first mismatch: entry {} {} recorded {:#x} ({}), simulated {:#x} ({})\n",
                m.index,
                m.action.name(),
                m.recorded_addr,
                human(m.size),
                m.predicted_addr,
                human(m.predicted_size)
            ));
        }
    }
    out
}

fn render_predict(r: &PredictReport) -> String {
    let mut out = format!(
        "device {}: {} requests ({} blocks live when the trace began), capacity {}\n",
        r.device,
        r.requests,
        r.initial_blocks,
        r.capacity.map_or("unlimited".into(), human)
    );
    if let Some((reserved, free)) = r.capacity_from_oom {
        out.push_str(&format!(
            "  (inferred from the recorded OOM: {} reserved by PyTorch + {} free on the device; --capacity sets it)\n",
            human(reserved),
            human(free)
        ));
    }
    out.push_str(&format!(
        "{:<56} {:>11} {:>11} {:>8} {:>8} {:>6} {:>6} {:>6} {:>6} {:>7} {:>5}\n",
        "configuration",
        "peak resv",
        "peak alloc",
        "unalloc@",
        "GMLake",
        "malloc",
        "free",
        "map",
        "unmap",
        "retries",
        "OOMs"
    ));
    let rec = &r.recorded;
    out.push_str(&format!(
        "{:<56} {:>11} {:>11} {:>7.1}% {:>7.1}% {:>6} {:>6} {:>6} {:>6} {:>7} {:>5}\n",
        if rec.exact {
            "recorded (exact replay)"
        } else {
            "recorded (replay NOT exact)"
        },
        human(rec.peak.peak_reserved),
        human(rec.peak.peak_allocated),
        100.0 * rec.peak.unallocated_at_peak_fraction(),
        100.0 * rec.peak.gmlake_fragmentation(),
        rec.stats.cuda_mallocs,
        rec.stats.cuda_frees,
        rec.stats.maps,
        rec.stats.unmaps,
        rec.stats.alloc_retries,
        rec.stats.ooms,
    ));
    for p in &r.predictions {
        let mut name = if p.conf.is_empty() {
            "(defaults)".to_string()
        } else {
            p.conf.clone()
        };
        if p.baseline {
            name = format!("{name} [own settings]");
        }
        if name.len() > 56 {
            name.truncate(53);
            name.push_str("...");
        }
        match &p.error {
            Some(e) => out.push_str(&format!("{name:<56} not simulated: {e}\n")),
            None => out.push_str(&format!(
                "{:<56} {:>11} {:>11} {:>7.1}% {:>7.1}% {:>6} {:>6} {:>6} {:>6} {:>7} {:>5}\n",
                name,
                human(p.peak.peak_reserved),
                human(p.peak.peak_allocated),
                100.0 * p.peak.unallocated_at_peak_fraction(),
                100.0 * p.peak.gmlake_fragmentation(),
                p.stats.cuda_mallocs,
                p.stats.cuda_frees,
                p.stats.maps,
                p.stats.unmaps,
                p.stats.alloc_retries,
                p.stats.ooms,
            )),
        }
    }
    out.push_str(
        "unalloc@ = 1 − allocated/reserved at peak reserved; GMLake = 1 − peak active/peak reserved\n",
    );
    out
}

/// `fragprobe simulate`.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    // A setting PyTorch would refuse is refused before the snapshot is read, as `sweep` does.
    super::sweep::check_confs(&args.confs, args.pytorch)?;
    let snap = load(&args.snapshot)?;
    if let Some(d) = args.device {
        let have = snap.devices();
        if !have.contains(&d) {
            let list: Vec<String> = have.iter().map(|d| d.to_string()).collect();
            return Err(CodedError::new(
                exit::USAGE,
                format!(
                    "--device {d}: {} has no device {d} (it has: {})",
                    args.snapshot.display(),
                    if list.is_empty() {
                        "none".to_string()
                    } else {
                        list.join(", ")
                    }
                ),
            )
            .into());
        }
    }
    if args.verify {
        let r = verify(&snap, args.pytorch).map_err(|e| {
            anyhow::Error::new(CodedError {
                code: exit::BAD_INPUT,
                message: format!(
                    "{}: the recorded settings do not parse: {e}",
                    args.snapshot.display()
                ),
            })
        })?;
        if args.json {
            crate::stdout::println(&r.to_json())?;
        } else {
            let mut text = render_verify(&r);
            if let Some((name, why)) = snap.other_backend() {
                text += &format!("backend: this snapshot looks like one from {name}: {why}\n");
            }
            crate::stdout::print(&text)?;
        }
        return Ok(if r.is_exact() {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(exit::FINDING)
        });
    }
    if snap.event_count() == 0 {
        return Err(anyhow::Error::new(CodedError {
            code: exit::BAD_INPUT,
            message: format!(
                "{}: the snapshot has no trace entries to replay (record with \
                 torch.cuda.memory._record_memory_history() before dumping)",
                args.snapshot.display()
            ),
        }));
    }
    let confs: Vec<String> = if args.confs.is_empty() {
        DEFAULT_SWEEP.iter().map(|s| s.to_string()).collect()
    } else {
        args.confs.clone()
    };
    let devices: Vec<i32> = match args.device {
        Some(d) => vec![d],
        None => snap
            .devices()
            .into_iter()
            .filter(|&d| !snap.trace(d).is_empty())
            .collect(),
    };
    let reports: Vec<PredictReport> = devices
        .iter()
        .map(|&d| predict(&snap, d, &confs, args.pytorch, args.capacity))
        .collect();
    if args.json {
        let items: Vec<String> = reports.iter().map(|r| r.to_json()).collect();
        crate::stdout::println(&format!("{{\"devices\":[{}]}}", items.join(",")))?;
    } else {
        for r in &reports {
            crate::stdout::print(&render_predict(r))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("80GiB").unwrap(), 80 << 30);
        assert_eq!(parse_size("512 MiB").unwrap(), 512 << 20);
        assert_eq!(parse_size("1.5GB").unwrap(), 1_500_000_000);
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert!(parse_size("lots").is_err());
        assert!(parse_size("3 furlongs").is_err());
    }
}
