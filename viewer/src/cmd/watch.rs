//! `fragprobe watch`: a live terminal view of the GPUs, like `watch -d nvidia-smi`, plus
//! each probed process's live bytes and fragmentation.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::exit;
use crate::nvml::screen::{self, Style};
use crate::nvml::units::iso8601;
use crate::nvml::{Monitor, NvmlArgs, Snapshot};

/// Watch the GPUs.
#[derive(clap::Args, Clone, Debug)]
pub struct Args {
    /// Seconds between refreshes
    #[arg(short = 'n', long = "interval", value_name = "SECS", default_value = "2",
          value_parser = parse_interval)]
    pub interval: f64,
    /// Only these GPUs (comma-separated indices)
    #[arg(short = 'i', long = "id", value_name = "GPU,…", value_delimiter = ',')]
    pub gpus: Vec<u32>,
    /// Highlight values that changed since the last refresh
    #[arg(short = 'd', long)]
    pub diff: bool,
    /// Print one frame and exit (for scripts)
    #[arg(long)]
    pub once: bool,
    #[command(flatten)]
    pub nvml: NvmlArgs,
}

pub use crate::nvml::units::{parse_interval, MIN_INTERVAL_S};

/// Whether to use ANSI attributes on a stream: not when `NO_COLOR` is set (any value,
/// <https://no-color.org>) and not when the stream is not a terminal.
pub fn color_allowed(is_terminal: bool) -> bool {
    is_terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// The terminal's width in columns (`COLUMNS`, else the tty, else 120).
pub fn terminal_width() -> usize {
    if let Some(c) = std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok()) {
        return c;
    }
    // SAFETY: winsize is plain old data; TIOCGWINSZ fills it or fails leaving zeros.
    let mut ws: libc::winsize = unsafe { std::mem::zeroed() };
    // SAFETY: ioctl on fd 1 with a pointer to a live winsize, as TIOCGWINSZ expects.
    let rc = unsafe { libc::ioctl(libc::STDOUT_FILENO, libc::TIOCGWINSZ, &mut ws) };
    if rc == 0 && ws.ws_col > 0 {
        ws.ws_col as usize
    } else {
        120
    }
}

fn title(args: &Args, mon: &Monitor, s: &Snapshot) -> String {
    let every = if args.once {
        String::new()
    } else {
        format!("every {}s  ", args.interval)
    };
    format!(
        "fragprobe watch  {every}{}  driver {}  ({})",
        iso8601(s.unix_ns),
        s.driver.as_deref().unwrap_or("n/a"),
        mon.lib()
    )
}

/// Runs `fragprobe watch`.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let mon = match Monitor::open(&args.nvml) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("NVML unavailable: {e}");
            return Ok(ExitCode::from(exit::NO_NVML));
        }
    };
    if let Err(e) = mon.check_selection(&args.gpus) {
        eprintln!("fragprobe watch: {e}");
        return Ok(ExitCode::from(exit::USAGE));
    }
    let tty = std::io::stdout().is_terminal();
    let mut prev: Option<Snapshot> = None;
    let period = Duration::from_secs_f64(args.interval);
    let mut next = Instant::now();
    loop {
        let snap = mon.sample(&args.gpus);
        let style = Style {
            color: color_allowed(tty),
            diff: args.diff,
            width: terminal_width(),
        };
        let frame = screen::render(&snap, prev.as_ref(), &style, &title(args, &mon, &snap));
        let mut out = std::io::stdout().lock();
        let clear = if tty && !args.once {
            "\x1b[H\x1b[2J"
        } else {
            ""
        };
        crate::stdout::write_to(&mut out, &format!("{clear}{frame}"))?;
        drop(out);
        if crate::stdout::gone() {
            // The reader went away (`| head`, closed terminal): nothing left to do.
            return Ok(ExitCode::SUCCESS);
        }
        if args.once {
            return Ok(ExitCode::SUCCESS);
        }
        prev = Some(snap);
        next += period;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            next = now;
        }
    }
}
