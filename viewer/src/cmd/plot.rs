//! `fragprobe plot`: memory over time as a PNG — one line per GPU, the device total, a
//! dashed threshold line, alerts and failed allocations marked.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::exit;
use crate::nvml::chart::{self, Chart, Marker, MarkerKind, Series};
use crate::nvml::logfile::{self, LogData};
use crate::nvml::units::iso8601;

/// Plot a `log` file (or a trace) as a PNG.
#[derive(clap::Args, Clone, Debug)]
pub struct Args {
    /// A CSV or JSON Lines file written by `fragprobe log`, or a fragprobe trace
    #[arg(value_name = "LOG")]
    pub input: PathBuf,
    /// The PNG to write
    #[arg(short = 'o', long = "output", value_name = "OUT.png")]
    pub output: PathBuf,
    /// Dashed line at this percentage of each device's total (0 = none)
    #[arg(long, value_name = "PCT", default_value = "95", value_parser = parse_pct)]
    pub threshold: f64,
    /// Only these GPUs (comma-separated indices)
    #[arg(short = 'i', long = "id", value_name = "GPU,…", value_delimiter = ',')]
    pub gpus: Vec<u32>,
    /// Image width in pixels
    #[arg(long, default_value = "1200", value_parser = clap::value_parser!(u32).range(200..=10000))]
    pub width: u32,
    /// Image height in pixels
    #[arg(long, default_value = "600", value_parser = clap::value_parser!(u32).range(150..=10000))]
    pub height: u32,
    /// Title (default: the input's name and start time)
    #[arg(long)]
    pub title: Option<String>,
}

fn parse_pct(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("{s:?} is not a percentage"))?;
    if !(0.0..=100.0).contains(&v) {
        return Err(format!("threshold must be 0..100, got {s}"));
    }
    Ok(v)
}

/// Builds the chart for a log file's rows.
pub fn chart_from_log(data: &LogData, gpus: &[u32], title: &str, threshold: f64) -> Chart {
    let rows: Vec<_> = data
        .rows
        .iter()
        .filter(|r| gpus.is_empty() || gpus.contains(&r.gpu))
        .collect();
    let t0 = rows.iter().map(|r| r.unix_ns).min().unwrap_or(0);
    let mut groups: BTreeMap<(u32, Option<u32>), Vec<_>> = BTreeMap::new();
    for r in &rows {
        groups.entry((r.gpu, r.mig)).or_default().push(*r);
    }
    let mut series = Vec::new();
    let mut markers = Vec::new();
    for ((gpu, mig), mut rs) in groups {
        rs.sort_by_key(|r| r.unix_ns);
        let idx = series.len();
        let secs = |ns: u64| (ns - t0) as f64 / 1e9;
        for r in rs.iter().filter(|r| !r.alerts.is_empty()) {
            markers.push(Marker {
                t: secs(r.unix_ns),
                kind: MarkerKind::Alert,
                series: Some(idx),
            });
        }
        let name = rs
            .iter()
            .find(|r| !r.name.is_empty())
            .map(|r| r.name.clone())
            .unwrap_or_default();
        series.push(Series {
            label: match mig {
                Some(m) => format!("GPU {gpu} MIG {m} used"),
                None if name.is_empty() => format!("GPU {gpu} used"),
                None => format!("GPU {gpu} used ({name})"),
            },
            points: rs
                .iter()
                .filter_map(|r| r.used.map(|u| (secs(r.unix_ns), u as f64)))
                .collect(),
            total: rs.iter().filter_map(|r| r.total).max().map(|t| t as f64),
        });
    }
    Chart {
        title: format!("{title}  (start {})", iso8601(t0)),
        series,
        markers,
        threshold_pct: (threshold > 0.0).then_some(threshold),
        width: 1200,
        height: 600,
    }
}

/// Runs `fragprobe plot`.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let bytes = match std::fs::read(&args.input) {
        Ok(b) => b,
        Err(e) => {
            eprintln!("fragprobe plot: cannot read {}: {e}", args.input.display());
            return Ok(ExitCode::from(exit::NO_INPUT));
        }
    };
    let title = args.title.clone().unwrap_or_else(|| {
        format!(
            "GPU memory used - {}",
            args.input.file_name().unwrap_or_default().to_string_lossy()
        )
    });
    let mut chart = if logfile::looks_like_log(&bytes) {
        match logfile::parse(&String::from_utf8_lossy(&bytes)) {
            Ok(d) => {
                if d.skipped > 0 {
                    eprintln!("fragprobe plot: skipped {} unreadable line(s)", d.skipped);
                }
                chart_from_log(&d, &args.gpus, &title, args.threshold)
            }
            Err(e) => {
                eprintln!("fragprobe plot: {}: {e}", args.input.display());
                return Ok(ExitCode::from(exit::BAD_INPUT));
            }
        }
    } else {
        match crate::nvml::evidence::chart_from_trace(
            &args.input,
            &args.gpus,
            &title,
            args.threshold,
        ) {
            Ok(c) => c,
            Err((code, msg)) => {
                eprintln!("fragprobe plot: {msg}");
                return Ok(ExitCode::from(code));
            }
        }
    };
    if chart.series.iter().all(|s| s.points.is_empty()) {
        eprintln!(
            "fragprobe plot: {} has no memory samples{}",
            args.input.display(),
            if args.gpus.is_empty() {
                String::new()
            } else {
                format!(" for GPU(s) {:?}", args.gpus)
            }
        );
        return Ok(ExitCode::from(exit::BAD_INPUT));
    }
    chart.width = args.width;
    chart.height = args.height;
    let png = chart::render(&chart).map_err(anyhow::Error::msg)?;
    if let Err(e) = std::fs::write(&args.output, &png) {
        eprintln!(
            "fragprobe plot: cannot write {}: {e}",
            args.output.display()
        );
        return Ok(ExitCode::from(exit::NO_INPUT));
    }
    eprintln!(
        "fragprobe plot: wrote {} ({} line(s), {} marker(s))",
        args.output.display(),
        chart.series.len(),
        chart.markers.len()
    );
    Ok(ExitCode::SUCCESS)
}
