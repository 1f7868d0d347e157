//! The panels' wiring: each builds its input from the selected run's model (through
//! `pipeline::view`) and hands it to its panel in `gui/` to draw.

use super::*;

impl Viewer {
    /// The space shown: the map's choice, else the busiest.
    pub(super) fn space(&self, m: &fragprobe_shared::model::Model) -> Option<SpaceKey> {
        let keys = view::space_keys(m);
        self.map
            .space
            .filter(|k| keys.contains(k))
            .or(keys.first().copied())
    }

    pub(super) fn live_nvml(
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

    pub(super) fn figures_panel(&mut self, ui: &mut Ui) {
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
    pub(super) fn blocks_hint(&mut self, ui: &mut Ui) {
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

    pub(super) fn blocks_panel(&mut self, ui: &mut Ui) {
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

    pub(super) fn map_panel(&mut self, ui: &mut Ui, height: f32) {
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

    pub(super) fn timeline_panel(&mut self, ui: &mut Ui) {
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
    pub(super) fn add_live_nvml(
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

    pub(super) fn events_panel(&mut self, ui: &mut Ui) {
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

    pub(super) fn processes_panel(&mut self, ui: &mut Ui) {
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

    pub(super) fn compare_panel(&mut self, ui: &mut Ui) {
        let width = ui.available_width().max(64.0) as usize;
        let runs: Vec<compare::Run> = self
            .runs
            .iter()
            .map(|r| view::compare_run(&r.head(), &r.name, !r.progress.history_ready(), width))
            .collect();
        compare::ui(ui, &runs);
    }
}
