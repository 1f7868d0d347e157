//! `fragprobe view [TRACE…]`: the desktop viewer. Several traces are compared side by
//! side; `--live DIR` follows probed processes; `--screenshot OUT.png` renders the window
//! to a PNG without a display or GPU and exits.

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use fragprobe_shared::format::check_version;
use fragprobe_shared::trace::TRACE_MAGIC;

use crate::exit;
pub use crate::gui::app::At;
use crate::gui::app::{self, App, Viewer};
use crate::gui::options::{Options, Tab};
use crate::gui::screenshot;
use crate::load::CodedError;
use crate::nvml::NvmlArgs;
use crate::pipeline::nvml::Sampler;
use crate::pipeline::{FeedReceiver, LiveTarget, Run, Source};

/// How long `--screenshot` waits for loading and rewinding.
const SCREENSHOT_TIMEOUT: Duration = Duration::from_secs(600);

/// Arguments of `fragprobe view`.
#[derive(clap::Args, Debug, Clone, Default)]
pub struct Args {
    /// Trace files (.fpt) or PyTorch memory snapshots to open; two or more are compared
    /// side by side
    #[arg(value_name = "TRACE")]
    pub traces: Vec<PathBuf>,
    /// Follow probed processes live from this ring directory (what `fragprobe attach`
    /// lists)
    #[arg(long, value_name = "DIR")]
    pub live: Option<PathBuf>,
    /// With --live: only this process
    #[arg(long, value_name = "PID", requires = "live")]
    pub pid: Option<u32>,
    /// Render the window to a PNG and exit (needs no display and no GPU)
    #[arg(long, value_name = "OUT.png")]
    pub screenshot: Option<PathBuf>,
    /// Time cursor: seconds since the trace's start, `peak` (highest live bytes) or `end`
    /// (default: just before the first process exit)
    #[arg(long, value_name = "TIME")]
    pub at: Option<String>,
    /// The panel shown: map, timeline, figures, events, processes, compare or blocks (PyTorch snapshots)
    #[arg(long, value_name = "NAME")]
    pub panel: Option<String>,
    /// Screenshot size in pixels
    #[arg(long, value_name = "WxH", default_value = "1600x1000")]
    pub size: String,
    /// Do not sample NVML (no processes panel, no live cross-check)
    #[arg(long)]
    pub no_nvml: bool,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub nvml: NvmlArgs,
}

/// Parses `--at`.
pub fn parse_at(s: &str) -> Result<At, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "peak" => Ok(At::Peak),
        "end" | "latest" => Ok(At::End),
        v => {
            let v = v.trim_end_matches('s');
            let secs: f64 = v.parse().map_err(|_| {
                format!("--at {s:?}: expected seconds (e.g. 12.5), `peak` or `end`")
            })?;
            if !secs.is_finite() || secs < 0.0 {
                return Err(format!("--at {s:?}: seconds must be 0 or more"));
            }
            Ok(At::Seconds(secs))
        }
    }
}

fn usage(msg: String) -> anyhow::Error {
    CodedError {
        code: exit::USAGE,
        message: msg,
    }
    .into()
}

/// Checks a file before a thread opens it, so a bad path fails with its exit code.
fn check_input(path: &Path) -> anyhow::Result<Source> {
    let coded = |code, message: String| anyhow::Error::from(CodedError { code, message });
    if let Ok(m) = std::fs::metadata(path) {
        if !m.is_file() {
            return Err(coded(
                exit::NO_INPUT,
                format!(
                    "cannot open {}: it is {}, not a regular file (save it to a file first)",
                    path.display(),
                    fragprobe_shared::trace::file_kind(&m)
                ),
            ));
        }
    }
    let mut f = std::fs::File::open(path).map_err(|e| {
        coded(
            exit::NO_INPUT,
            format!("cannot open {}: {e}", path.display()),
        )
    })?;
    let mut head = [0u8; 20];
    let n = f.read(&mut head).map_err(|e| {
        coded(
            exit::NO_INPUT,
            format!("cannot read {}: {e}", path.display()),
        )
    })?;
    if n >= 16 && head[..16] == TRACE_MAGIC {
        if n >= 20 {
            let v = u32::from_le_bytes([head[16], head[17], head[18], head[19]]);
            check_version("trace file", v)
                .map_err(|e| coded(exit::VERSION, format!("{}: {e}", path.display())))?;
        }
        return Ok(Source::Trace(path.to_path_buf()));
    }
    if n == 0 {
        return Err(coded(
            exit::BAD_INPUT,
            format!(
                "{} is empty: not a fragprobe trace or PyTorch snapshot",
                path.display()
            ),
        ));
    }
    Ok(Source::Snapshot(path.to_path_buf()))
}

fn sampler(args: &Args) -> Option<Arc<Sampler>> {
    if args.no_nvml {
        return None;
    }
    Sampler::start(args.nvml.clone(), Duration::from_secs(1)).ok()
}

fn panel(args: &Args) -> anyhow::Result<Option<(Tab, bool)>> {
    args.panel
        .as_deref()
        .map(Tab::parse)
        .transpose()
        .map_err(usage)
}

/// `fragprobe view`.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let at = args
        .at
        .as_deref()
        .map(parse_at)
        .transpose()
        .map_err(usage)?;
    let tab = panel(args)?;
    let size = screenshot::parse_size(&args.size).map_err(usage)?;
    if args.traces.is_empty() && args.live.is_none() && args.screenshot.is_some() {
        return Err(usage("--screenshot needs a TRACE to render".into()));
    }
    let mut sources = Vec::new();
    for p in &args.traces {
        sources.push(check_input(p)?);
    }
    if let Some(dir) = &args.live {
        if !dir.is_dir() {
            return Err(CodedError {
                code: exit::NO_INPUT,
                message: format!("--live {}: not a directory", dir.display()),
            }
            .into());
        }
        sources.push(Source::Live(LiveTarget {
            dir: dir.clone(),
            pid: args.pid,
        }));
    }
    let mut runs = Vec::new();
    for (i, s) in sources.into_iter().enumerate() {
        runs.push(Run::start(i, s).context("starting the ingest thread")?);
    }
    if let Some(out) = &args.screenshot {
        return screenshot_to(out, runs, at, tab, size).map(|_| ExitCode::SUCCESS);
    }
    window(runs, sampler(args), tab, at)
}

/// Options for [`open_live`].
#[derive(Clone, Debug)]
pub struct LiveOptions {
    /// NVML to sample (`None`: do not sample). The default samples the driver's NVML.
    pub nvml: Option<NvmlArgs>,
    /// Panel to show first.
    pub panel: Option<String>,
}

impl Default for LiveOptions {
    fn default() -> LiveOptions {
        LiveOptions {
            nvml: Some(NvmlArgs::default()),
            panel: None,
        }
    }
}

/// Opens the viewer on records pushed through `feed` (the caller drains the rings on its
/// own thread and sends every record with `FeedSender::send`). Blocks until the window is
/// closed; must be called on the main thread.
pub fn open_live(feed: FeedReceiver, opts: &LiveOptions) -> anyhow::Result<ExitCode> {
    let tab = opts
        .panel
        .as_deref()
        .map(Tab::parse)
        .transpose()
        .map_err(usage)?;
    let run = Run::start(0, Source::Feed(feed)).context("starting the ingest thread")?;
    let nvml = opts
        .nvml
        .clone()
        .and_then(|a| Sampler::start(a, Duration::from_secs(1)).ok());
    window(vec![run], nvml, tab, Some(At::End))
}

fn apply_at(viewer: &mut Viewer, at: Option<At>) {
    if let Some(at) = at {
        viewer.go_to(at);
    }
}

/// Renders runs to `out` (PNG) headlessly.
pub fn screenshot_to(
    out: &Path,
    runs: Vec<Arc<Run>>,
    at: Option<At>,
    tab: Option<(Tab, bool)>,
    size: [u32; 2],
) -> anyhow::Result<()> {
    let mut options = Options::default();
    if runs.len() > 1 {
        options.tab = Tab::Compare;
    }
    if let Some((t, figures)) = tab {
        options.tab = t;
        panel_figures(&mut options, t, figures);
    }
    let mut viewer = Viewer::new(runs, options, None);
    for r in &viewer.runs {
        if !r.wait_loaded(SCREENSHOT_TIMEOUT) {
            bail!("{} did not load within {SCREENSHOT_TIMEOUT:?}", r.name);
        }
        if let Some(e) = r.progress.error() {
            let code = if e.contains("format version") {
                exit::VERSION
            } else {
                exit::BAD_INPUT
            };
            return Err(CodedError { code, message: e }.into());
        }
    }
    apply_at(&mut viewer, at);
    let img = screenshot::render(&mut viewer, size, SCREENSHOT_TIMEOUT)
        .map_err(|e| anyhow::anyhow!(e))?;
    img.write_png(out)?;
    for r in &viewer.runs {
        r.stop();
    }
    eprintln!(
        "fragprobe: wrote {} ({}x{})",
        out.display(),
        img.width,
        img.height
    );
    Ok(())
}

fn window(
    runs: Vec<Arc<Run>>,
    nvml: Option<Arc<Sampler>>,
    tab: Option<(Tab, bool)>,
    at: Option<At>,
) -> anyhow::Result<ExitCode> {
    let title = app::title(&runs);
    let native = eframe::NativeOptions {
        viewport: egui::ViewportBuilder::default()
            .with_title(title.clone())
            .with_inner_size([1440.0, 900.0])
            .with_drag_and_drop(true),
        persist_window: true,
        ..eframe::NativeOptions::default()
    };
    // The app name keys the remembered options and window layout: one for every trace.
    let result = eframe::run_native(
        "fragprobe",
        native,
        Box::new(move |cc| {
            let mut a = App::new(cc, runs, nvml, tab.map(|t| t.0));
            if let Some((t, figures)) = tab {
                panel_figures(&mut a.viewer.options, t, figures);
            }
            apply_at(&mut a.viewer, at);
            Ok(Box::new(a))
        }),
    );
    match result {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(e) => {
            let no_display = std::env::var_os("DISPLAY").is_none()
                && std::env::var_os("WAYLAND_DISPLAY").is_none();
            let hint = if no_display {
                "no display (DISPLAY and WAYLAND_DISPLAY are unset): run it on a desktop, over ssh -X, or render a picture with --screenshot OUT.png"
            } else {
                "the display refused an OpenGL window; --screenshot OUT.png renders without one"
            };
            bail!("cannot open the viewer window: {e}; {hint}")
        }
    }
}

/// `--panel map` is the map alone (all the width for it) and `--panel figures` the map
/// with the figures beside it; other panels keep the figures setting as it is.
fn panel_figures(options: &mut Options, tab: Tab, figures: bool) {
    if tab == Tab::Map {
        options.show_figures = figures;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_parses() {
        assert_eq!(parse_at("12.5"), Ok(At::Seconds(12.5)));
        assert_eq!(parse_at("3s"), Ok(At::Seconds(3.0)));
        assert_eq!(parse_at("PEAK"), Ok(At::Peak));
        assert_eq!(parse_at("end"), Ok(At::End));
        assert!(parse_at("-1").is_err());
        assert!(parse_at("soon").unwrap_err().contains("peak"));
    }

    #[test]
    fn missing_and_foreign_files_get_their_exit_codes() {
        let e = check_input(Path::new("/nonexistent/x.fpt")).err().unwrap();
        assert_eq!(crate::load::exit_code_of(&e), exit::NO_INPUT);
        let dir = std::env::temp_dir().join(format!("fp-view-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("future.fpt");
        let mut b = TRACE_MAGIC.to_vec();
        b.extend_from_slice(&99u32.to_le_bytes());
        std::fs::write(&p, &b).unwrap();
        let e = check_input(&p).err().unwrap();
        assert_eq!(crate::load::exit_code_of(&e), exit::VERSION);
        let empty = dir.join("empty.fpt");
        std::fs::write(&empty, b"").unwrap();
        assert_eq!(
            crate::load::exit_code_of(&check_input(&empty).err().unwrap()),
            exit::BAD_INPUT
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
