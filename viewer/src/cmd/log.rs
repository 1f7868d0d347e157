//! `fragprobe log`: a background-friendly NVML sampler writing CSV or JSON Lines, with
//! threshold alerts — the `nohup nvidia-smi --query-gpu=… -l` loop, done properly.
//!
//! It ignores SIGHUP (it keeps running when the SSH session drops), writes and flushes
//! every row before the next sample, only appends to its files, and fires each alert once
//! per crossing.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use crate::exit;
use crate::nvml::alert::{Alert, AlertState, Firing};
use crate::nvml::logfile::{self, Format, LogWriter};
use crate::nvml::procfs::ProcFs;
use crate::nvml::prometheus;
use crate::nvml::units::iso8601;
use crate::nvml::{Monitor, NvmlArgs};

/// Log GPU figures to a file.
#[derive(clap::Args, Clone, Debug)]
pub struct Args {
    /// Seconds between samples (fractions allowed: 0.1 = 10 Hz)
    #[arg(short = 'n', long = "interval", value_name = "SECS", default_value = "1",
          value_parser = super::watch::parse_interval)]
    pub interval: f64,
    /// Only these GPUs (comma-separated indices)
    #[arg(short = 'i', long = "id", value_name = "GPU,…", value_delimiter = ',')]
    pub gpus: Vec<u32>,
    /// Append CSV rows (with a header) to FILE
    #[arg(long, value_name = "FILE", conflicts_with = "jsonl")]
    pub csv: Option<PathBuf>,
    /// Append JSON Lines to FILE (one object per GPU per sample, with the process list)
    #[arg(long, value_name = "FILE")]
    pub jsonl: Option<PathBuf>,
    /// Keep FILE (e.g. /var/lib/node_exporter/textfile/fragprobe.prom) the Prometheus
    /// exposition of the latest sample, for node_exporter's textfile collector: GPU memory
    /// and, per process, NVML's figure and the probe's (labelled by job, not pid). Alone,
    /// no CSV goes to stdout
    #[arg(long, value_name = "FILE")]
    pub prometheus: Option<PathBuf>,
    /// Alert when EXPR becomes true, e.g. used>90%, used>18000MiB, temp>85, util<10%
    /// (repeatable; fires once per crossing)
    #[arg(long = "alert", value_name = "EXPR", value_parser = parse_alert)]
    pub alerts: Vec<Alert>,
    /// Run CMD with `sh -c` when an alert fires; it gets FRAGPROBE_ALERT, FRAGPROBE_GPU,
    /// FRAGPROBE_VALUE, FRAGPROBE_UUID and FRAGPROBE_TIMESTAMP
    #[arg(long, value_name = "CMD", requires = "alerts")]
    pub alert_cmd: Option<String>,
    /// Stop after the sample on which an alert fired, with exit status 7
    #[arg(long, requires = "alerts")]
    pub exit_on_alert: bool,
    /// Stop after N samples (default: run until killed)
    #[arg(long, value_name = "N")]
    pub count: Option<u64>,
    /// fsync the file after every row, and the --prometheus file before each rename
    /// (survives a power loss, costs a disk flush per sample)
    #[arg(long)]
    pub fsync: bool,
    #[command(flatten)]
    pub nvml: NvmlArgs,
}

fn parse_alert(s: &str) -> Result<Alert, String> {
    s.parse::<Alert>().map_err(|e| e.0)
}

/// Keeps running when the controlling terminal hangs up.
pub fn ignore_sighup() {
    // SAFETY: installing SIG_IGN for SIGHUP has no preconditions and no handler code runs.
    unsafe {
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
    }
}

fn alert_line(f: &Firing) -> String {
    let uuid = if f.uuid.is_empty() {
        String::new()
    } else {
        format!(" ({})", f.uuid)
    };
    format!(
        "{} ALERT gpu {}{uuid}: {} (value {})",
        iso8601(f.unix_ns),
        f.gpu,
        f.text,
        f.value
    )
}

fn spawn_alert_cmd(cmd: &str, f: &Firing) -> std::io::Result<Child> {
    Command::new("/bin/sh")
        .arg("-c")
        .arg(cmd)
        .env("FRAGPROBE_ALERT", &f.text)
        .env("FRAGPROBE_GPU", f.gpu.to_string())
        .env("FRAGPROBE_VALUE", &f.value)
        .env("FRAGPROBE_UUID", &f.uuid)
        .env("FRAGPROBE_TIMESTAMP", iso8601(f.unix_ns))
        .stdin(Stdio::null())
        .spawn()
}

/// Runs `fragprobe log`.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    ignore_sighup();
    let mon = match Monitor::open(&args.nvml) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("NVML unavailable: {e}");
            return Ok(ExitCode::from(exit::NO_NVML));
        }
    };
    if let Err(e) = mon.check_selection(&args.gpus) {
        eprintln!("fragprobe log: {e}");
        return Ok(ExitCode::from(exit::USAGE));
    }
    let opened = match (&args.csv, &args.jsonl, &args.prometheus) {
        (Some(p), _, _) => LogWriter::append(p, Format::Csv, args.fsync)
            .map(Some)
            .map_err(|e| (p.clone(), e)),
        (None, Some(p), _) => LogWriter::append(p, Format::Jsonl, args.fsync)
            .map(Some)
            .map_err(|e| (p.clone(), e)),
        (None, None, None) => LogWriter::stdout(Format::Csv)
            .map(Some)
            .map_err(|e| ("stdout".into(), e)),
        (None, None, Some(_)) => Ok(None),
    };
    let mut out: Option<LogWriter> = match opened {
        Ok(w) => w,
        Err((p, e)) => {
            eprintln!("fragprobe log: cannot write {}: {e}", p.display());
            return Ok(ExitCode::from(exit::NO_INPUT));
        }
    };
    let host = prometheus::hostname();
    let procs = ProcFs::default();
    let mut prom_failed = false;
    let mut state = AlertState::default();
    let mut children: Vec<Child> = Vec::new();
    let period = Duration::from_secs_f64(args.interval);
    let mut next = Instant::now();
    let mut taken = 0u64;
    loop {
        // The probe's figures and the owners only when the exposition wants them.
        let snap = if args.prometheus.is_some() {
            mon.sample(&args.gpus)
        } else {
            mon.sample_devices(&args.gpus)
        };
        if let Some(p) = &args.prometheus {
            let text = prometheus::exposition(&snap, &host, &procs);
            match prometheus::write_textfile(p, &text, args.fsync) {
                Ok(()) => prom_failed = false,
                // The first write tells a wrong path from a passing problem.
                Err(e) if taken == 0 => {
                    eprintln!("fragprobe log: cannot write {}: {e}", p.display());
                    return Ok(ExitCode::from(exit::NO_INPUT));
                }
                // Said once per failure spell (a full disk, a removed directory).
                Err(e) if !prom_failed => {
                    prom_failed = true;
                    let _ = writeln!(
                        std::io::stderr(),
                        "fragprobe log: cannot write {}: {e} (retrying every sample)",
                        p.display()
                    );
                }
                Err(_) => {}
            }
        }
        let fired = state.update(&args.alerts, &snap);
        for row in logfile::rows(&snap, &fired) {
            let Some(out) = out.as_mut() else { break };
            if let Err(e) = out.write_row(&row) {
                if e.kind() == std::io::ErrorKind::BrokenPipe {
                    return Ok(ExitCode::SUCCESS);
                }
                eprintln!("fragprobe log: write failed: {e}");
                return Ok(ExitCode::from(exit::INTERNAL));
            }
        }
        for f in &fired {
            // stderr may be gone (hung-up terminal); the row in the file still records it.
            let _ = writeln!(std::io::stderr(), "{}", alert_line(f));
            if let Some(cmd) = &args.alert_cmd {
                match spawn_alert_cmd(cmd, f) {
                    Ok(c) => children.push(c),
                    Err(e) => {
                        let _ = writeln!(
                            std::io::stderr(),
                            "fragprobe log: alert command failed to start: {e}"
                        );
                    }
                }
            }
        }
        children.retain_mut(|c| matches!(c.try_wait(), Ok(None)));
        taken += 1;
        if args.exit_on_alert && !fired.is_empty() {
            for mut c in children {
                let _ = c.wait();
            }
            return Ok(ExitCode::from(exit::FINDING));
        }
        if args.count.is_some_and(|n| taken >= n) {
            break;
        }
        next += period;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            // Fell behind (a stalled driver call): resume the schedule from now.
            next = now;
        }
    }
    // Let alert commands finish so a bounded run's side effects are complete.
    for mut c in children {
        let _ = c.wait();
    }
    Ok(ExitCode::SUCCESS)
}
