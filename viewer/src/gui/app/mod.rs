//! The viewer window: menus, banners, tabs, and the wiring between the panels and the
//! runs. [`Viewer::ui`] draws one frame into any `Ui` (eframe, the test harness, or the
//! headless screenshot renderer); [`App`] adds eframe's persistence and repaint timing.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use egui::{Color32, RichText, Ui};

use super::help::{self, Command};
use super::options::{Options, Tab, STORAGE_KEY};
use super::{allocator, blocks, compare, events, figures, lod, map, processes, replay, timeline};
use crate::pipeline::log::EventLog as _;
use crate::pipeline::nvml::{self, Sampler};
use crate::pipeline::space::{SpaceInfo, SpaceKey};
use crate::pipeline::view::{self, ModelRegions, NvmlFigures};
use crate::pipeline::{Run, Source};

mod bars;
mod panels;

/// How often expensive derived views (map cells, space lists) follow a changing model.
pub const REFRESH: Duration = Duration::from_millis(200);

/// Banner colours.
const WARN: Color32 = Color32::from_rgb(255, 167, 38);
const ERROR: Color32 = Color32::from_rgb(239, 83, 80);

struct SpacesCache {
    key: (usize, bool, u64),
    spaces: Vec<SpaceInfo>,
}

/// Runs `f` on the run's cursor model (`cursor`) or head model, under its read lock.
fn with_model<R>(
    run: &Run,
    cursor: bool,
    f: impl FnOnce(&fragprobe_shared::model::Model) -> R,
) -> Option<R> {
    if cursor {
        let c = run.cursor();
        c.as_ref().map(|c| f(&c.model))
    } else {
        Some(f(&run.head().model))
    }
}

/// Keeps a generation from changing more often than [`REFRESH`].
#[derive(Default)]
struct Throttle {
    shown: u64,
    at: Option<Instant>,
}

impl Throttle {
    fn get(&mut self, actual: u64, now: Instant) -> u64 {
        let due = self.at.is_none_or(|t| now.duration_since(t) >= REFRESH);
        if actual != self.shown && due {
            self.shown = actual;
            self.at = Some(now);
        }
        self.shown
    }
}

/// The in-app "open a file" dialog.
#[derive(Default)]
struct OpenDialog {
    path: String,
    error: Option<String>,
}

/// The whole viewer's state.
/// Where the time cursor goes (`view --at`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum At {
    /// Seconds since the first record.
    Seconds(f64),
    /// When live bytes peaked (the highest peak of any space).
    Peak,
    /// The latest state; in a live view, the newest event, followed as events arrive.
    End,
}

pub struct Viewer {
    /// Remembered settings.
    pub options: Options,
    /// Runs, in the order they were opened.
    pub runs: Vec<Arc<Run>>,
    /// The run shown by the map, timeline, figures and events.
    pub selected: usize,
    /// Records applied at the time cursor (`None`: the latest state).
    pub cursor: Option<usize>,
    /// Replay controls.
    pub replay: replay::Replay,
    /// Map state.
    pub map: map::State,
    /// Events list state.
    pub events: events::State,
    /// Blocks view state (PyTorch snapshots).
    pub blocks: blocks::State,
    /// Help overlay shown.
    pub help_open: bool,
    /// NVML sampler (live sessions).
    pub nvml: Option<Arc<Sampler>>,
    /// The last problem to show (a file that would not open...).
    pub status: Option<String>,
    /// Put the cursor just before the first process exit once a finished trace is loaded.
    pub auto_cursor: bool,
    /// Build the map's cells and the space list on background threads (the window does;
    /// tests and screenshots build them in the frame, deterministically).
    pub background: bool,
    /// Where `--at` asked the cursor to go, until the run is loaded far enough to say
    /// where that is (see [`Viewer::go_to`]).
    pub pending_at: Option<At>,
    open_dialog: Option<OpenDialog>,
    live_baselines: HashMap<(u32, i16), view::Baselines>,
    spaces_cache: Option<SpacesCache>,
    spaces_background: lod::Background<(usize, bool, u64), Vec<SpaceInfo>>,
    map_gen: Throttle,
    spaces_gen: Throttle,
}

impl Viewer {
    /// A viewer over `runs`.
    pub fn new(runs: Vec<Arc<Run>>, options: Options, nvml: Option<Arc<Sampler>>) -> Viewer {
        let mut events = events::State::default();
        events.filter = options.events.clone();
        Viewer {
            options,
            runs,
            selected: 0,
            cursor: None,
            replay: replay::Replay::default(),
            map: map::State::default(),
            events,
            blocks: blocks::State::default(),
            help_open: false,
            nvml,
            status: None,
            pending_at: None,
            auto_cursor: true,
            background: false,
            open_dialog: None,
            live_baselines: HashMap::new(),
            spaces_cache: None,
            spaces_background: lod::Background::default(),
            map_gen: Throttle::default(),
            spaces_gen: Throttle::default(),
        }
    }

    /// Opens a file (trace or PyTorch snapshot) as a new run and selects it.
    pub fn open(&mut self, path: &Path) -> Result<(), String> {
        let source = Source::detect(path)?;
        let run = Run::start(self.runs.len(), source)
            .map_err(|e| format!("cannot start a thread: {e}"))?;
        self.runs.push(run);
        self.options.remember(path.to_path_buf());
        self.select(self.runs.len() - 1);
        Ok(())
    }

    /// Shows run `i`.
    pub fn select(&mut self, i: usize) {
        if i < self.runs.len() && i != self.selected {
            self.selected = i;
            self.cursor = None;
            self.map = map::State::default();
            self.blocks = blocks::State::default();
            self.events.selected = None;
            self.events.matches.clear();
            self.events.scanned = 0;
            self.auto_cursor = true;
        }
    }

    /// The selected run.
    pub fn run(&self) -> Option<&Arc<Run>> {
        self.runs.get(self.selected)
    }

    /// Moves the cursor to `at` as soon as the selected run is loaded far enough to know
    /// where that is: at once for `End` (a live view then follows the newest event), once
    /// the whole trace is in for a time or the peak. A window is opened before its trace
    /// has loaded, so placing the cursor at once would put it at the start.
    pub fn go_to(&mut self, at: At) {
        self.auto_cursor = false;
        self.pending_at = Some(at);
        self.apply_pending_at();
    }

    fn apply_pending_at(&mut self) {
        let Some(at) = self.pending_at else {
            return;
        };
        let Some(run) = self.run().cloned() else {
            return;
        };
        if at == At::End {
            self.pending_at = None;
            self.set_cursor(None);
            return;
        }
        if !run.progress.finished() || !run.progress.history_ready() {
            return;
        }
        self.pending_at = None;
        let t = {
            let h = run.head();
            match at {
                At::Seconds(s) => Some(h.t_first.saturating_add((s * 1e9) as u64)),
                At::Peak => h
                    .model
                    .spaces()
                    .iter()
                    .filter_map(|s| Some((s.summary().peak_live, s.summary().peak_at?)))
                    .max_by_key(|(peak, w)| (*peak, std::cmp::Reverse(w.ts_ns)))
                    .map(|(_, w)| w.ts_ns),
                At::End => None,
            }
        };
        if let Some(t) = t {
            self.set_cursor_time(t);
        }
    }

    /// Moves the time cursor to "after the first `index` records" (`None`: latest).
    pub fn set_cursor(&mut self, index: Option<usize>) {
        self.auto_cursor = false;
        self.put_cursor(index);
    }

    fn put_cursor(&mut self, index: Option<usize>) {
        let Some(run) = self.run().cloned() else {
            return;
        };
        let applied = run.head().applied();
        let index = index.map(|i| i.min(applied));
        self.cursor = index;
        run.seek(index);
    }

    /// Moves the cursor to the state at time `t_ns` (trace clock).
    pub fn set_cursor_time(&mut self, t_ns: u64) {
        let Some(run) = self.run().cloned() else {
            return;
        };
        let i = run.head().index_at(t_ns);
        self.set_cursor(Some(i));
    }

    /// The cursor's time (the last applied record's time), if a cursor is set.
    pub fn cursor_time(&self) -> Option<u64> {
        let run = self.run()?;
        let i = self.cursor?;
        let h = run.head();
        if i == 0 {
            return Some(h.t_first);
        }
        h.log().get(i - 1).map(|r| r.ts_ns)
    }

    fn command(&mut self, c: Command) {
        let seg = self.map_segment();
        match c {
            Command::Help => self.help_open = !self.help_open,
            Command::PlayPause => self.replay.toggle(),
            Command::Step(d) => self.action(replay::Action::Step(d)),
            Command::NextFailure => self.action(replay::Action::NextFailure),
            Command::PrevFailure => self.action(replay::Action::PrevFailure),
            Command::Start => self.set_cursor(Some(0)),
            Command::End => self.action(replay::Action::Latest),
            Command::Faster => {
                self.options.replay_speed = (self.options.replay_speed * 2.0).min(10_000.0)
            }
            Command::Slower => {
                self.options.replay_speed = (self.options.replay_speed / 2.0).max(0.001)
            }
            Command::ZoomIn | Command::ZoomOut | Command::Pan(_) | Command::ResetZoom => {
                if let Some(seg) = seg {
                    match c {
                        Command::ZoomIn => self.map.zoom(seg, 0.5, 0.5, 1),
                        Command::ZoomOut => self.map.zoom(seg, 2.0, 0.5, 1),
                        Command::Pan(d) => {
                            let (lo, hi) = self.map.view.unwrap_or(seg);
                            self.map.pan(seg, d as f64 * (hi - lo) as f64 * 0.25);
                        }
                        _ => self.map.reset(),
                    }
                }
            }
            Command::Tab(n) => {
                if let Some(t) = Tab::ALL.get(n as usize) {
                    self.options.tab = *t;
                }
            }
            Command::Figures => self.options.show_figures = !self.options.show_figures,
            Command::Open => self.open_dialog = Some(OpenDialog::default()),
            Command::Escape => {
                self.help_open = false;
                self.open_dialog = None;
                self.map.pinned = None;
            }
        }
    }

    fn map_segment(&self) -> Option<(u64, u64)> {
        let spaces = &self.spaces_cache.as_ref()?.spaces;
        let s = map::current_space(&self.map, spaces)?;
        let seg = s.segments.get(self.map.segment).or(s.segments.first())?;
        Some((seg.lo, seg.hi.max(seg.lo + 1)))
    }

    fn action(&mut self, a: replay::Action) {
        let Some(run) = self.run().cloned() else {
            return;
        };
        match a {
            replay::Action::Seek(t) => self.set_cursor_time(t),
            replay::Action::Latest => {
                self.replay.playing = false;
                self.set_cursor(None);
            }
            replay::Action::Step(d) => {
                let applied = run.head().applied();
                let at = self.cursor.unwrap_or(applied);
                let next = if d > 0 {
                    at.saturating_add(1)
                } else {
                    at.saturating_sub(1)
                };
                self.set_cursor(Some(next.min(applied)));
            }
            replay::Action::NextFailure | replay::Action::PrevFailure => {
                let now = self.cursor_time();
                let times = view::failure_times(&run.head().model);
                let t = if a == replay::Action::NextFailure {
                    times.into_iter().find(|&t| now.is_none_or(|n| t > n))
                } else {
                    times
                        .into_iter()
                        .rev()
                        .find(|&t| now.is_some_and(|n| t < n))
                };
                if let Some(t) = t {
                    // The state right after the failed call.
                    self.set_cursor_time(t);
                } else {
                    self.status = Some("no more failed allocations in that direction".into());
                }
            }
        }
    }

    /// Draws one frame.
    pub fn ui(&mut self, ui: &mut Ui) {
        let now = Instant::now();
        for c in help::commands(ui) {
            self.command(c);
        }
        self.dropped_files(ui);
        self.tick(now);
        self.apply_pending_at();
        self.auto_position();

        egui::Panel::top("menu").show(ui, |ui| self.top_bar(ui));
        egui::Panel::bottom("replay").show(ui, |ui| self.replay_bar(ui));
        if self.options.show_figures
            && self.options.tab != Tab::Compare
            && self.options.tab != Tab::Processes
        {
            egui::Panel::right("figures")
                .default_size(300.0)
                .show(ui, |ui| {
                    egui::ScrollArea::vertical().show(ui, |ui| self.figures_panel(ui));
                });
        }
        egui::CentralPanel::default().show(ui, |ui| match self.options.tab {
            Tab::Map => {
                self.blocks_hint(ui);
                let budget = if self.options.show_timeline {
                    ui.available_height() * 0.45
                } else {
                    ui.available_height() - 80.0
                };
                self.map_panel(ui, budget);
                if self.options.show_timeline {
                    ui.separator();
                    self.timeline_panel(ui);
                }
            }
            Tab::Timeline => self.timeline_panel(ui),
            Tab::Events => self.events_panel(ui),
            Tab::Processes => self.processes_panel(ui),
            Tab::Compare => self.compare_panel(ui),
            Tab::Blocks => self.blocks_panel(ui),
        });
        let mut open = self.help_open;
        help::ui(ui, &mut open);
        self.help_open = open;
        self.open_window(ui);
        self.options.events = self.events.filter.clone();
        if self.busy() {
            ui.ctx().request_repaint_after(Duration::from_millis(30));
        }
    }

    /// Whether something is still moving (loading, rewinding, playing, live).
    pub fn busy(&self) -> bool {
        self.replay.playing
            || self
                .runs
                .iter()
                .any(|r| r.live || !r.progress.history_ready() || r.rewinding())
    }

    fn tick(&mut self, now: Instant) {
        if !self.replay.playing {
            self.replay.tick(None, (0, 0), 0.0, now);
            return;
        }
        let Some(run) = self.run().cloned() else {
            return;
        };
        let span = run.head().span();
        if let Some(t) = self
            .replay
            .tick(self.cursor_time(), span, self.options.replay_speed, now)
        {
            let i = run.head().index_at(t);
            self.auto_cursor = false;
            self.put_cursor(Some(i));
        }
    }

    /// A finished trace whose processes exited has an empty final state; show the moment
    /// before the first exit instead (once, unless the user moved the cursor).
    fn auto_position(&mut self) {
        if !self.auto_cursor || self.cursor.is_some() {
            return;
        }
        let Some(run) = self.run().cloned() else {
            return;
        };
        if !run.progress.finished() {
            return;
        }
        let exit = run.head().first_exit;
        if exit.is_none() && !run.progress.history_ready() {
            // Opened from a checkpoint: an exit before it is known once the history is in.
            return;
        }
        self.auto_cursor = false;
        if let Some(i) = exit {
            self.put_cursor(Some(i));
        }
    }
}

/// The eframe application: the viewer plus persistence.
pub struct App {
    /// The viewer.
    pub viewer: Viewer,
}

impl App {
    /// Builds the app, restoring remembered options.
    pub fn new(
        cc: &eframe::CreationContext<'_>,
        runs: Vec<Arc<Run>>,
        nvml: Option<Arc<Sampler>>,
        tab: Option<Tab>,
    ) -> App {
        let mut options: Options = cc
            .storage
            .and_then(|s| eframe::get_value(s, STORAGE_KEY))
            .unwrap_or_default();
        if let Some(t) = tab {
            options.tab = t;
        }
        if runs.len() > 1 && tab.is_none() {
            options.tab = Tab::Compare;
        }
        let mut viewer = Viewer::new(runs, options, nvml);
        viewer.background = true;
        App { viewer }
    }
}

impl eframe::App for App {
    fn ui(&mut self, ui: &mut Ui, _frame: &mut eframe::Frame) {
        self.viewer.ui(ui);
    }

    fn save(&mut self, storage: &mut dyn eframe::Storage) {
        eframe::set_value(storage, STORAGE_KEY, &self.viewer.options);
    }

    fn on_exit(&mut self, _gl: Option<&eframe::glow::Context>) {
        for r in &self.viewer.runs {
            r.stop();
        }
        if let Some(s) = &self.viewer.nvml {
            s.stop();
        }
    }
}

/// Formats a byte figure for the window title.
pub fn title(runs: &[Arc<Run>]) -> String {
    match runs {
        [] => "fragprobe".into(),
        [r] => format!("fragprobe - {}", r.name),
        rs => format!("fragprobe - {} runs", rs.len()),
    }
}
