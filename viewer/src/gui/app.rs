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

    fn dropped_files(&mut self, ui: &Ui) {
        let dropped: Vec<PathBuf> = ui.input(|i| {
            i.raw
                .dropped_files
                .iter()
                .map(|f| f.path().to_path_buf())
                .filter(|p| !p.as_os_str().is_empty())
                .collect()
        });
        for p in dropped {
            if let Err(e) = self.open(&p) {
                self.status = Some(e);
            }
        }
        if ui.input(|i| !i.raw.hovered_files.is_empty()) {
            let painter = ui.ctx().layer_painter(egui::LayerId::new(
                egui::Order::Foreground,
                egui::Id::unique("fragprobe-drop"),
            ));
            let rect = ui.ctx().content_rect();
            painter.rect_filled(rect, 0.0, Color32::from_black_alpha(160));
            painter.text(
                rect.center(),
                egui::Align2::CENTER_CENTER,
                "Drop traces to open them",
                egui::FontId::proportional(24.0),
                Color32::WHITE,
            );
        }
    }

    fn top_bar(&mut self, ui: &mut Ui) {
        egui::MenuBar::new().ui(ui, |ui| {
            ui.menu_button("File", |ui| {
                if ui.button("Open...  (Ctrl+O)").clicked() {
                    self.open_dialog = Some(OpenDialog::default());
                    ui.close();
                }
                let recent = self.options.recent.clone();
                if !recent.is_empty() {
                    ui.separator();
                    for p in recent {
                        if ui.button(p.display().to_string()).clicked() {
                            if let Err(e) = self.open(&p) {
                                self.status = Some(e);
                            }
                            ui.close();
                        }
                    }
                }
            });
            ui.menu_button("View", |ui| {
                ui.checkbox(&mut self.options.show_figures, "Figures (F)");
                ui.checkbox(&mut self.options.show_timeline, "Timeline under the map");
                ui.checkbox(&mut self.options.timeline.show_ratio, "Fragmentation plot");
                ui.checkbox(
                    &mut self.options.merge_processes,
                    "Figures and timeline: whole device (every process)",
                );
            });
            if ui.button("Help (F1)").clicked() {
                self.help_open = !self.help_open;
            }
            ui.separator();
            for t in Tab::ALL {
                ui.selectable_value(&mut self.options.tab, t, t.name());
            }
        });
        if self.runs.len() > 1 {
            ui.horizontal_wrapped(|ui| {
                ui.label("runs:");
                let mut pick = None;
                for (i, r) in self.runs.iter().enumerate() {
                    let label = r
                        .head()
                        .alloc_conf()
                        .map(|c| format!("{} · {c}", r.name))
                        .unwrap_or_else(|| r.name.clone());
                    let text = RichText::new(label).color(compare::run_colour(i));
                    if ui.selectable_label(i == self.selected, text).clicked() {
                        pick = Some(i);
                    }
                }
                if let Some(i) = pick {
                    self.select(i);
                }
            });
        }
        self.banners(ui);
    }

    fn banners(&mut self, ui: &mut Ui) {
        let live = self.runs.iter().any(|r| r.live);
        if let (Some(s), true) = (&self.nvml, live) {
            if let Some(why) = s.with(|st| st.unavailable.clone()) {
                ui.colored_label(WARN, format!("NVML unavailable: {why} - device and per-process figures are missing; the tracked allocations are still exact."));
            }
        }
        if let Some(msg) = self.status.clone() {
            ui.horizontal(|ui| {
                ui.colored_label(ERROR, msg);
                if ui.small_button("dismiss").clicked() {
                    self.status = None;
                }
            });
        }
        let Some(run) = self.run().cloned() else {
            ui.label("No trace open: File > Open, or drop a trace on the window.");
            return;
        };
        if let Some(e) = run.progress.error() {
            ui.colored_label(ERROR, format!("Error: {e}"));
        }
        let (dropped, lost_procs, warnings) = {
            let h = run.head();
            let incomplete = h
                .model
                .processes()
                .iter()
                .filter(|p| p.incomplete())
                .count();
            (
                h.model.counts().lost.max(h.ring_dropped),
                incomplete,
                h.warnings.clone(),
            )
        };
        if dropped > 0 {
            let tail = if lost_procs > 0 {
                format!("the model of {lost_procs} process(es) is incomplete until the next resync")
            } else {
                "a resync restored the exact state".to_string()
            };
            ui.colored_label(WARN, format!("Warning: the ring dropped {dropped} events (it was full): {tail}. A larger ring (FRAGPROBE_RING_CAPACITY) avoids it."));
        }
        for w in warnings.iter().take(3) {
            ui.colored_label(WARN, format!("Warning: {w}"));
        }
        if !run.progress.finished() {
            ui.horizontal(|ui| {
                ui.spinner();
                let done = run.progress.done();
                match run.progress.fraction() {
                    Some(f) => {
                        ui.add(
                            egui::ProgressBar::new(f)
                                .desired_width(260.0)
                                .show_percentage(),
                        );
                        ui.label(format!(
                            "opening {}: {} of {} events",
                            run.name,
                            done,
                            run.progress.total()
                        ));
                    }
                    None => {
                        let follow = match self.cursor_time() {
                            None => "following the newest event (scrub or step to hold the \
                                     cursor; End follows again)"
                                .to_string(),
                            Some(t) => format!(
                                "cursor held at {:.3} s (End follows the newest event again)",
                                t.saturating_sub(run.head().t_first) as f64 / 1e9
                            ),
                        };
                        ui.label(format!("live: {done} events so far, {follow}"));
                    }
                }
            });
        }
        if run.rewinding() {
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label("rewinding to the cursor...");
            });
        }
    }

    fn replay_bar(&mut self, ui: &mut Ui) {
        let Some(run) = self.run().cloned() else {
            return;
        };
        let (span, failures) = {
            let h = run.head();
            (h.span(), h.model.failed_allocs().len())
        };
        let cursor = self.cursor_time();
        let mut speed = self.options.replay_speed;
        if let Some(a) = replay::ui(ui, &mut self.replay, &mut speed, cursor, span, failures) {
            self.action(a);
        }
        self.options.replay_speed = speed;
    }

    /// The space shown: the map's choice, else the busiest.
    fn space(&self, m: &fragprobe_shared::model::Model) -> Option<SpaceKey> {
        let keys = view::space_keys(m);
        self.map
            .space
            .filter(|k| keys.contains(k))
            .or(keys.first().copied())
    }

    fn live_nvml(
        &mut self,
        run: &Run,
        space: SpaceKey,
    ) -> (Option<NvmlFigures>, Option<view::Baseline>) {
        let Some(s) = &self.nvml else {
            return (None, None);
        };
        // NVML numbers GPUs in PCI order over the whole machine; CUDA ordinals follow
        // CUDA_VISIBLE_DEVICES. The uuid the probe recorded names the same GPU in both.
        let uuid = view::device_uuid(&run.head().model, space);
        let found = s.with(|st| {
            let snap = st.last.as_ref()?;
            let dev = snap.device_for(uuid.as_deref(), space.device)?;
            let mem = dev.memory.as_ref().ok()?;
            let proc_used = dev
                .process_list()
                .iter()
                .find(|p| p.pid == space.pid)
                .and_then(|p| p.used);
            Some(NvmlFigures {
                process_used: proc_used,
                device_used: mem.used(),
                device_total: mem.total,
            })
        });
        if let Some(f) = found {
            let tracked = {
                let h = run.head();
                h.model
                    .space_id(space.pid, space.device)
                    .and_then(|i| h.model.space(i))
                    .map_or(0, |sp| sp.totals().live_bytes)
            };
            if let Some(u) = f.process_used {
                // As for recorded samples (see `Baselines`): measured with nothing
                // tracked, else estimated from the first sample.
                self.live_baselines
                    .entry((space.pid, space.device))
                    .or_default()
                    .note(0, u, tracked);
            }
        }
        let base = self
            .live_baselines
            .get(&(space.pid, space.device))
            .and_then(|b| b.at(u64::MAX));
        (found, base)
    }

    fn figures_panel(&mut self, ui: &mut Ui) {
        let Some(run) = self.run().cloned() else {
            return;
        };
        let space = self.space(&run.head().model);
        let Some(space) = space else {
            ui.label("No allocations yet.");
            return;
        };
        let (nv, base) = self.live_nvml(&run, space);
        // Before taking the read locks below: a second read lock of the same RwLock in one
        // thread can deadlock behind a waiting writer (the ingest thread).
        let at = self.cursor_time();
        let head = run.head();
        let cur = run.cursor();
        let model = match (&*cur, self.cursor) {
            (Some(c), Some(_)) => &c.model,
            _ => &head.model,
        };
        ui.heading("Figures");
        let merged = self.options.merge_processes;
        let what = if merged {
            format!("GPU {} (every process)", space.device)
        } else {
            space.to_string()
        };
        let when = match at {
            Some(t) => format!("at {:.3} s", t.saturating_sub(head.t_first) as f64 / 1e9),
            None => "latest".to_string(),
        };
        ui.label(format!("{what} · {when}"));
        let f = view::figures(model, &head, space, merged, nv, base);
        let layer = head.allocator.clone();
        drop(cur);
        drop(head);
        figures::ui(ui, &f);
        if let Some(d) = layer.as_ref().and_then(|l| l.device(space.device as i32)) {
            ui.separator();
            ui.strong("Allocator (PyTorch snapshot)");
            ui.label("the state when the snapshot was taken");
            allocator::ui(ui, d);
        }
    }

    /// On the map of a snapshot: where its allocator layer is.
    fn blocks_hint(&mut self, ui: &mut Ui) {
        let has = self.run().is_some_and(|r| r.head().allocator.is_some());
        if has {
            ui.horizontal(|ui| {
                ui.label(
                    "Segments of a PyTorch snapshot; the blocks inside them and their frames:",
                );
                if ui.link("Blocks (6)").clicked() {
                    self.options.tab = Tab::Blocks;
                }
            });
        }
    }

    fn blocks_panel(&mut self, ui: &mut Ui) {
        let Some(run) = self.run().cloned() else {
            ui.label("No trace open.");
            return;
        };
        let layer = run.head().allocator.clone();
        let note = self.cursor.is_some().then_some(
            "The blocks are the snapshot's state when it was taken; the map and timeline follow the time cursor.",
        );
        let height = ui.available_height();
        blocks::ui(ui, &mut self.blocks, layer.as_ref(), height, note);
    }

    fn map_panel(&mut self, ui: &mut Ui, height: f32) {
        let Some(run) = self.run().cloned() else {
            return;
        };
        let head = run.head();
        let cur = run.cursor();
        let (model, gen, which) = match (&*cur, self.cursor) {
            (Some(c), Some(_)) => (&c.model, run.cursor_generation(), true),
            _ => (&head.model, run.head_generation(), false),
        };
        let now = Instant::now();
        let sgen = self.spaces_gen.get(gen, now);
        let key = (run.id, which, sgen);
        let stale = self.spaces_cache.as_ref().is_none_or(|c| c.key != key);
        if stale && self.background {
            // Off the UI thread: finding the largest free block walks every gap.
            if self.spaces_background.start("fragprobe-spaces", ui.ctx()) {
                let done = self.spaces_background.request(&key, || {
                    let r = run.clone();
                    Box::new(move || with_model(&r, which, view::spaces).unwrap_or_default())
                });
                if let Some((k, spaces)) = done {
                    self.spaces_cache = Some(SpacesCache { key: k, spaces });
                }
            }
        } else if stale {
            self.spaces_cache = Some(SpacesCache {
                key,
                spaces: view::spaces(model),
            });
        }
        let spaces = self
            .spaces_cache
            .as_ref()
            .map(|c| c.spaces.as_slice())
            .unwrap_or(&[]);
        let log = head.log();
        let source = ModelRegions {
            model,
            spaces,
            log: Some(&log),
        };
        let mgen = self.map_gen.get(gen, now) ^ ((which as u64) << 63);
        let make = |space: SpaceKey, lo: u64, hi: u64| -> lod::Job {
            let r = run.clone();
            Box::new(move |f| {
                with_model(&r, which, |m| view::visit(m, space, lo, hi, f));
            })
        };
        let input = map::Input {
            source: &source,
            generation: mgen,
            age_range: (head.t_first, model.now().ts_ns.max(head.t_first + 1)),
            t0: head.t_first,
            background: if self.background { Some(&make) } else { None },
        };
        map::ui(ui, &mut self.options.map, &mut self.map, &input, height);
    }

    fn timeline_panel(&mut self, ui: &mut Ui) {
        let Some(run) = self.run().cloned() else {
            return;
        };
        let (input, t0) = {
            let head = run.head();
            let Some(space) = self.space(&head.model) else {
                ui.label("No timeline yet.");
                return;
            };
            let width = ui.available_width().max(64.0) as usize;
            let mut input = view::timeline(&head, space, self.options.merge_processes, width);
            self.add_live_nvml(&mut input, &head, space);
            (input, head.t_first)
        };
        if !run.progress.history_ready() && run.progress.finished() {
            ui.horizontal(|ui| {
                ui.spinner();
                ui.label(format!(
                    "building the timelines: {} of {} events (figures and map are exact already)",
                    run.progress.history_done(),
                    run.progress.total()
                ));
            });
        }
        let cursor = self
            .cursor_time()
            .map(|t| t.saturating_sub(t0) as f64 / 1e9);
        if let Some(x) = timeline::ui(ui, &self.options.timeline, &input, cursor) {
            let t = t0.saturating_add((x.max(0.0) * 1e9) as u64);
            self.replay.playing = false;
            self.set_cursor_time(t);
        }
    }

    /// Adds the live sampler's device curve (NVML samples are not in live records).
    fn add_live_nvml(
        &self,
        input: &mut timeline::Input,
        head: &crate::pipeline::Head,
        space: SpaceKey,
    ) {
        let Some(s) = &self.nvml else { return };
        let t0 = head.t_first;
        let uuid = view::device_uuid(&head.model, space);
        s.with(|st| {
            // The NVML index of this CUDA device (by uuid: ordinals may be remapped).
            let index = st
                .last
                .as_ref()
                .and_then(|snap| snap.device_for(uuid.as_deref(), space.device))
                .map_or(space.device.max(0) as u32, |d| d.index);
            let Some(h) = st.history.get(&index) else {
                return;
            };
            let points: Vec<[f64; 2]> = h
                .iter()
                .filter(|p| p.mono_ns >= t0)
                .map(|p| [(p.mono_ns - t0) as f64 / 1e9, p.used as f64])
                .collect();
            if !points.is_empty() {
                input.bytes.push(timeline::Curve {
                    name: "NVML used (device)".into(),
                    colour: Color32::from_rgb(102, 187, 106),
                    points,
                    dashed: false,
                });
            }
            if input.device_total.is_none() {
                input.device_total = h.last().map(|p| p.total as f64);
            }
        });
    }

    fn events_panel(&mut self, ui: &mut Ui) {
        let Some(run) = self.run().cloned() else {
            return;
        };
        let picked = {
            let head = run.head();
            events::ui(ui, &mut self.events, &head.log(), head.t_first)
        };
        if let Some(i) = picked {
            self.replay.playing = false;
            self.set_cursor(Some(i + 1));
        }
    }

    fn processes_panel(&mut self, ui: &mut Ui) {
        let mut input = processes::Input::default();
        let tracked = |pid: u32| -> Option<u64> {
            self.runs.iter().find_map(|r| {
                let h = r.head();
                let p = h.model.process(pid)?;
                Some(
                    p.spaces()
                        .filter_map(|(_, s)| h.model.space(s))
                        .map(|s| s.totals().live_bytes)
                        .sum(),
                )
            })
        };
        if let Some(s) = &self.nvml {
            s.with(|st| {
                input.unavailable = st.unavailable.clone();
                if let Some(snap) = &st.last {
                    input.rows = nvml::rows(snap, &tracked);
                }
            });
        }
        if input.rows.is_empty() {
            // No live NVML: the processes the open traces recorded.
            for r in &self.runs {
                let h = r.head();
                for p in h.model.processes() {
                    for (ord, s) in p.spaces() {
                        let Some(sp) = h.model.space(s) else { continue };
                        let used = h.nvml_process_at(p.pid(), ord, u64::MAX);
                        input.rows.push(processes::Row {
                            gpu: ord.max(0) as u32,
                            pid: p.pid(),
                            used,
                            user: p
                                .info()
                                .fields
                                .iter()
                                .find(|(k, _)| k == "user")
                                .map(|(_, v)| v.clone())
                                .unwrap_or_else(|| "?".into()),
                            command: p.info().cmdline.join(" "),
                            // The probe announces each process it runs in; a
                            // process only seen in an imported snapshot's records was not.
                            probed: p.start().is_some(),
                            tracked: Some(sp.totals().live_bytes),
                            kind: "C".into(),
                        });
                    }
                }
            }
            if self.nvml.is_none() {
                ui.label("From the open traces (no live NVML sampling in this session).");
            }
        }
        if let Some(pid) = processes::ui(ui, &input) {
            if let Some(i) = self
                .runs
                .iter()
                .position(|r| r.head().model.process(pid).is_some())
            {
                self.select(i);
                let key = self.runs[i]
                    .head()
                    .model
                    .process(pid)
                    .and_then(|p| p.spaces().next())
                    .map(|(o, _)| SpaceKey { pid, device: o });
                if let Some(k) = key {
                    self.map.select(k, 0);
                }
                self.options.tab = Tab::Map;
            }
        }
    }

    fn compare_panel(&mut self, ui: &mut Ui) {
        let width = ui.available_width().max(64.0) as usize;
        let runs: Vec<compare::Run> = self
            .runs
            .iter()
            .map(|r| view::compare_run(&r.head(), &r.name, !r.progress.history_ready(), width))
            .collect();
        compare::ui(ui, &runs);
    }

    fn open_window(&mut self, ui: &mut Ui) {
        let Some(mut d) = self.open_dialog.take() else {
            return;
        };
        let mut keep = true;
        let mut chosen: Option<PathBuf> = None;
        egui::Window::new("Open a trace or PyTorch snapshot")
            .collapsible(false)
            .open(&mut keep)
            .show(ui.ctx(), |ui| {
                ui.horizontal(|ui| {
                    let r = ui.add(
                        egui::TextEdit::singleline(&mut d.path)
                            .desired_width(420.0)
                            .hint_text("/path/to/run.fpt"),
                    );
                    if ui.button("Open").clicked()
                        || r.lost_focus() && ui.input(|i| i.key_pressed(egui::Key::Enter))
                    {
                        chosen = Some(PathBuf::from(d.path.trim()));
                    }
                });
                if let Some(e) = &d.error {
                    ui.colored_label(ERROR, e);
                }
                let typed = PathBuf::from(d.path.trim());
                let dir = if typed.is_dir() {
                    typed.clone()
                } else {
                    typed.parent().map(Path::to_path_buf).unwrap_or_default()
                };
                let dir = if dir.as_os_str().is_empty() {
                    PathBuf::from(".")
                } else {
                    dir
                };
                ui.label(format!("in {}", dir.display()));
                egui::ScrollArea::vertical()
                    .max_height(240.0)
                    .show(ui, |ui| {
                        if let Ok(rd) = std::fs::read_dir(&dir) {
                            let mut entries: Vec<PathBuf> =
                                rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
                            entries.sort();
                            for p in entries {
                                let name = p
                                    .file_name()
                                    .map(|n| n.to_string_lossy().into_owned())
                                    .unwrap_or_default();
                                if name.starts_with('.') {
                                    continue;
                                }
                                if p.is_dir() {
                                    if ui.button(format!("{name}/")).clicked() {
                                        d.path = format!("{}/", p.display());
                                    }
                                } else if ui.button(name.clone()).clicked() {
                                    chosen = Some(p);
                                }
                            }
                        }
                    });
                if !self.options.recent.is_empty() {
                    ui.separator();
                    ui.label("recent");
                    for p in self.options.recent.clone() {
                        if ui.button(p.display().to_string()).clicked() {
                            chosen = Some(p);
                        }
                    }
                }
            });
        if let Some(p) = chosen {
            match self.open(&p) {
                Ok(()) => return,
                Err(e) => d.error = Some(e),
            }
        }
        if keep {
            self.open_dialog = Some(d);
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
