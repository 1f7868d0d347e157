//! The window's frame around the panels: the top bar (menus, tabs, open), the banners
//! (loading, errors, losses), the replay bar, dropped files and the open dialog.

use super::*;

impl Viewer {
    pub(super) fn dropped_files(&mut self, ui: &Ui) {
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

    pub(super) fn top_bar(&mut self, ui: &mut Ui) {
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

    pub(super) fn banners(&mut self, ui: &mut Ui) {
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

    pub(super) fn replay_bar(&mut self, ui: &mut Ui) {
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

    pub(super) fn open_window(&mut self, ui: &mut Ui) {
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
