//! The address-space map: one space's arena drawn as a wrapped band of cells, zoomable
//! (wheel, `+`/`-`) and pannable (drag, arrows); live regions coloured by kind, size class
//! or age; free holes dark, the largest outlined; hover shows a region, click pins it.

use egui::{pos2, vec2, Color32, Mesh, Rect, Sense, Shape, Stroke, StrokeKind, Ui};

use super::cells::{kind_colour, ramp, Cells, ColourBy, FREE};
use super::lod;
use crate::pipeline::space::{
    human_bytes, human_time, RegionDetail, RegionKind, RegionSource, RegionView, SpaceInfo,
    SpaceKey,
};

/// Outline of the largest free block.
pub const LARGEST_HOLE: Color32 = Color32::from_rgb(255, 235, 59);
/// Up to this many spaces get one tab each; more get a drop-down list.
pub const TAB_LIMIT: usize = 8;

/// Outline of the pinned region.
pub const PINNED: Color32 = Color32::WHITE;

/// Remembered map settings.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Options {
    /// What colours the cells.
    pub colour: ColourBy,
    /// Rows of the wrapped band (1 = a single band).
    pub rows: u32,
    /// Height of one row in points.
    pub row_height: f32,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            colour: ColourBy::Kind,
            rows: 24,
            row_height: 14.0,
        }
    }
}

#[derive(Clone, PartialEq)]
struct CacheKey {
    space: SpaceKey,
    lo: u64,
    hi: u64,
    n: usize,
    generation: u64,
    colour: ColourBy,
    age_range: (u64, u64),
}

type Cache = lod::Built<CacheKey>;

/// Per-window map state (not persisted: it refers to one trace's addresses).
#[derive(Default)]
pub struct State {
    /// The space shown (`None`: the first).
    pub space: Option<SpaceKey>,
    /// Index into the space's segments.
    pub segment: usize,
    /// Zoomed window `[lo, hi)` inside the segment (`None`: all of it).
    pub view: Option<(u64, u64)>,
    /// The region under the pointer this frame.
    pub hovered: Option<RegionDetail>,
    /// The region clicked last.
    pub pinned: Option<RegionDetail>,
    /// Regions aggregated for the last drawing (for the status line and tests).
    pub regions_drawn: u64,
    cache: Option<Cache>,
    background: lod::Background<CacheKey, Cache>,
}

/// What the map reads this frame.
pub struct Input<'a> {
    /// The regions.
    pub source: &'a dyn RegionSource,
    /// Changes whenever the model changed (cache key).
    pub generation: u64,
    /// Oldest and newest allocation time, for age colouring.
    pub age_range: (u64, u64),
    /// The run's first timestamp: times are shown relative to it.
    pub t0: u64,
    /// When given, cells are built on a background thread from the job this makes for
    /// (space, lo, hi); the map shows the last finished cells meanwhile.
    pub background: Option<&'a dyn Fn(SpaceKey, u64, u64) -> lod::Job>,
}

impl State {
    fn window(&self, seg: (u64, u64)) -> (u64, u64) {
        match self.view {
            Some((lo, hi)) if lo >= seg.0 && hi <= seg.1 && hi > lo => (lo, hi),
            _ => seg,
        }
    }

    /// Zooms by `factor` (< 1 zooms in) keeping the address at `anchor` (0..=1 of the
    /// window) in place.
    pub fn zoom(&mut self, seg: (u64, u64), factor: f64, anchor: f64, min_span: u64) {
        let (lo, hi) = self.window(seg);
        let span = (hi - lo) as f64;
        let new_span = (span * factor).clamp(min_span.max(1) as f64, (seg.1 - seg.0) as f64);
        let a = lo as f64 + span * anchor.clamp(0.0, 1.0);
        let new_lo = (a - new_span * anchor.clamp(0.0, 1.0)).max(seg.0 as f64);
        self.set_window(seg, new_lo, new_span);
    }

    /// Moves the window by `bytes` (negative: towards lower addresses).
    pub fn pan(&mut self, seg: (u64, u64), bytes: f64) {
        let (lo, hi) = self.window(seg);
        self.set_window(seg, lo as f64 + bytes, (hi - lo) as f64);
    }

    fn set_window(&mut self, seg: (u64, u64), lo: f64, span: f64) {
        let seg_span = (seg.1 - seg.0) as f64;
        if span >= seg_span {
            self.view = None;
            return;
        }
        let lo = lo.clamp(seg.0 as f64, seg.1 as f64 - span) as u64;
        let hi = (lo + span.round() as u64).min(seg.1);
        self.view = Some((lo, hi));
    }

    /// Shows the whole segment again.
    pub fn reset(&mut self) {
        self.view = None;
    }

    /// Selects the space and segment (the segment resets the zoom).
    pub fn select(&mut self, space: SpaceKey, segment: usize) {
        if self.space != Some(space) || self.segment != segment {
            self.space = Some(space);
            self.segment = segment;
            self.view = None;
            self.pinned = None;
        }
    }
}

/// The space the state refers to, falling back to the first one.
pub fn current_space<'a>(state: &State, spaces: &'a [SpaceInfo]) -> Option<&'a SpaceInfo> {
    state
        .space
        .and_then(|k| spaces.iter().find(|s| s.key == k))
        .or(spaces.first())
}

/// Draws the map in about `height` points (the band's rows shrink or grow to fit).
pub fn ui(ui: &mut Ui, opts: &mut Options, state: &mut State, input: &Input<'_>, height: f32) {
    let spaces = input.source.spaces();
    let Some(space) = current_space(state, &spaces).cloned() else {
        ui.label("No address space yet: no allocation has been recorded.");
        return;
    };
    controls(ui, opts, state, &spaces, &space);
    let Some(seg) = space.segments.get(state.segment).or(space.segments.first()) else {
        ui.label("This space has no addresses yet.");
        return;
    };
    let seg_range = (seg.lo, seg.hi.max(seg.lo + 1));
    let rows = opts.rows.clamp(1, 256) as usize;
    let band = (height - 70.0).max(rows as f32 * 2.0);
    let row_h = (band / rows as f32).clamp(2.0, opts.row_height.clamp(2.0, 64.0));
    let width = ui.available_width().max(16.0);
    let (rect, response) =
        ui.allocate_exact_size(vec2(width, rows as f32 * row_h), Sense::click_and_drag());
    response.widget_info(|| egui::WidgetInfo::labeled(egui::Role::Canvas, true, "address map"));
    let cols = (rect.width().floor() as usize).max(1);
    let n = cols * rows;
    let (lo, hi) = state.window(seg_range);

    let key = CacheKey {
        space: space.key,
        lo,
        hi,
        n,
        generation: input.generation,
        colour: opts.colour,
        age_range: input.age_range,
    };
    if state.cache.as_ref().is_none_or(|c| c.key != key) {
        let req = lod::Request {
            lo,
            hi,
            n,
            colour: opts.colour,
            age_range: input.age_range,
        };
        let make = input
            .background
            .filter(|_| state.background.start("fragprobe-map", ui.ctx()));
        match make {
            Some(make) => {
                let k = key.clone();
                let built = state.background.request(&key, || {
                    let job = make(space.key, lo, hi);
                    Box::new(move || lod::build(k, &req, job))
                });
                if let Some((_, b)) = built {
                    state.cache = Some(b);
                }
            }
            None => {
                let src = input.source;
                let sk = space.key;
                let job = move |f: &mut dyn FnMut(&RegionView)| src.visit(sk, lo, hi, f);
                state.cache = Some(lod::build(key.clone(), &req, job));
            }
        }
    }
    let Some(cache) = state.cache.take() else {
        ui.label("building the map...");
        return;
    };
    let painter = ui.painter_at(rect);
    if cache.colours.len() != n {
        // The window was resized and the new cells are still being built.
        painter.rect_filled(rect, 0.0, FREE);
        state.cache = Some(cache);
        ui.label("building the map...");
        return;
    }
    state.regions_drawn = cache.cells.regions;
    painter.add(Shape::mesh(cells_mesh(
        rect,
        cols,
        rows,
        row_h,
        &cache.colours,
    )));

    if let Some(h) = space.largest_hole {
        outline(
            &painter,
            rect,
            &cache.cells,
            cols,
            rows,
            row_h,
            (h.addr, h.size),
            LARGEST_HOLE,
        );
    }
    if let Some(p) = state.pinned.as_ref() {
        outline(
            &painter,
            rect,
            &cache.cells,
            cols,
            rows,
            row_h,
            (p.region.addr, p.region.size),
            PINNED,
        );
    }

    // Interaction: position under the pointer, in cells.
    let pos_at = |p: egui::Pos2| -> f64 {
        let row = (((p.y - rect.top()) / row_h).floor() as usize).min(rows - 1);
        let col = ((p.x - rect.left()) as f64).clamp(0.0, cols as f64);
        row as f64 * cols as f64 + col
    };
    state.hovered = None;
    let mut hover_addr = None;
    if let Some(p) = response.hover_pos() {
        let addr = cache.cells.addr_at(pos_at(p));
        hover_addr = Some(addr);
        state.hovered = input.source.detail(space.key, addr);
        let scroll = ui.input(|i| i.smooth_scroll_delta.y as f64);
        let zoom = ui.input(|i| i.zoom_delta() as f64);
        let factor = if zoom != 1.0 {
            1.0 / zoom
        } else {
            (-scroll / 200.0).exp()
        };
        if factor != 1.0 {
            let anchor = pos_at(p) / n as f64;
            state.zoom(seg_range, factor, anchor, n as u64);
        }
    }
    if response.dragged() {
        let d = response.drag_delta();
        let cells_moved = d.x as f64 + (d.y / row_h) as f64 * cols as f64;
        state.pan(seg_range, -cells_moved * cache.cells.bytes_per_cell());
    }
    if response.double_clicked() {
        state.reset();
    } else if response.clicked() {
        state.pinned = state.hovered.clone();
    }
    let hovered = state.hovered.clone();
    let response = response.on_hover_ui_at_pointer(|ui| match &hovered {
        Some(d) => detail_ui(ui, d, input.t0),
        None => {
            ui.label(format!("free  {:#x}", hover_addr.unwrap_or(0)));
        }
    });
    let _ = response;

    legend(
        ui,
        opts.colour,
        cache.cells.bytes_per_cell(),
        (lo, hi),
        state.regions_drawn,
    );
    if let Some(p) = state.pinned.clone() {
        ui.separator();
        ui.horizontal(|ui| {
            ui.strong("Pinned");
            if ui.small_button("unpin").clicked() {
                state.pinned = None;
            }
        });
        detail_ui(ui, &p, input.t0);
    }
    state.cache = Some(cache);
}

fn controls(
    ui: &mut Ui,
    opts: &mut Options,
    state: &mut State,
    spaces: &[SpaceInfo],
    space: &SpaceInfo,
) {
    ui.horizontal_wrapped(|ui| {
        let mut sel = (
            space.key,
            state.segment.min(space.segments.len().saturating_sub(1)),
        );
        if spaces.len() <= TAB_LIMIT {
            // Few processes: one tab each.
            for s in spaces {
                if ui
                    .selectable_label(s.key == space.key, s.key.to_string())
                    .clicked()
                    && s.key != space.key
                {
                    sel = (s.key, 0);
                }
            }
        } else {
            egui::ComboBox::new("map-space", "space")
                .selected_text(space.key.to_string())
                .show_ui(ui, |ui| {
                    for s in spaces {
                        ui.selectable_value(&mut sel, (s.key, 0), s.key.to_string());
                    }
                });
        }
        if space.segments.len() > 1 {
            let name = space
                .segments
                .get(sel.1)
                .map(|s| s.name.as_str())
                .unwrap_or("");
            egui::ComboBox::new("map-segment", "range")
                .selected_text(name)
                .show_ui(ui, |ui| {
                    for (i, s) in space.segments.iter().enumerate() {
                        ui.selectable_value(&mut sel.1, i, &s.name);
                    }
                });
        }
        state.select(sel.0, sel.1);
        ui.label("colour by");
        for c in ColourBy::ALL {
            ui.selectable_value(&mut opts.colour, c, c.name());
        }
        let l = ui.label("rows");
        ui.add(egui::DragValue::new(&mut opts.rows).range(1..=256))
            .labelled_by(l.id);
        if state.view.is_some() && ui.button("reset zoom").clicked() {
            state.reset();
        }
        ui.label(format!("{} live", space.live_count));
    });
}

/// The mesh of a band of `rows` x `cols` one-point cells in `rect` (runs of one colour
/// merged into one rectangle); the blocks view draws its band with it too.
pub(super) fn cells_mesh(
    rect: Rect,
    cols: usize,
    rows: usize,
    row_h: f32,
    colours: &[Color32],
) -> Mesh {
    let mut mesh = Mesh::default();
    for row in 0..rows {
        let y0 = rect.top() + row as f32 * row_h;
        let y1 = y0 + row_h - if row_h >= 6.0 { 1.0 } else { 0.0 };
        let base = row * cols;
        let mut start = 0;
        while start < cols {
            let c = colours[base + start];
            let mut end = start + 1;
            while end < cols && colours[base + end] == c {
                end += 1;
            }
            let x0 = rect.left() + start as f32;
            let x1 = rect.left() + end as f32;
            mesh.add_colored_rect(Rect::from_min_max(pos2(x0, y0), pos2(x1, y1)), c);
            start = end;
        }
    }
    mesh
}

#[allow(clippy::too_many_arguments)]
fn outline(
    painter: &egui::Painter,
    rect: Rect,
    cells: &Cells,
    cols: usize,
    rows: usize,
    row_h: f32,
    (addr, size): (u64, u64),
    colour: Color32,
) {
    let a = cells.pos_of(addr);
    let b = cells.pos_of(addr.saturating_add(size));
    if b <= 0.0 {
        return;
    }
    outline_cells(painter, rect, cols, rows, row_h, (a, b), colour);
}

/// Outlines the cells `[a, b)` of a band (cell positions, wrapped over the rows), at
/// least two cells wide so that a small block is still findable.
pub(super) fn outline_cells(
    painter: &egui::Painter,
    rect: Rect,
    cols: usize,
    rows: usize,
    row_h: f32,
    (a, b): (f64, f64),
    colour: Color32,
) {
    let n = (cols * rows) as f64;
    let a = a.max(0.0);
    if a >= n {
        return;
    }
    let b = b.max(a + 2.0).min(n);
    for row in (a / cols as f64).floor() as usize..rows {
        let r0 = (row * cols) as f64;
        if r0 >= b {
            break;
        }
        let x0 = (a.max(r0) - r0) as f32;
        let x1 = (b.min(r0 + cols as f64) - r0) as f32;
        if x1 <= x0 {
            continue;
        }
        let y0 = rect.top() + row as f32 * row_h;
        let r = Rect::from_min_max(
            pos2(rect.left() + x0, y0),
            pos2(rect.left() + x1, y0 + row_h - 1.0),
        );
        painter.rect_stroke(r, 0.0, Stroke::new(1.5, colour), StrokeKind::Inside);
    }
}

fn legend(ui: &mut Ui, by: ColourBy, bytes_per_cell: f64, (lo, hi): (u64, u64), regions: u64) {
    ui.horizontal_wrapped(|ui| {
        let swatch = |ui: &mut Ui, c: Color32, label: &str| {
            let (r, _) = ui.allocate_exact_size(vec2(12.0, 12.0), Sense::hover());
            ui.painter().rect_filled(r, 2.0, c);
            ui.label(label);
        };
        match by {
            ColourBy::Kind => {
                for k in RegionKind::ALL {
                    swatch(ui, kind_colour(k), k.name());
                }
            }
            ColourBy::SizeClass => {
                swatch(ui, ramp(0.0), "<= 512 B");
                swatch(ui, ramp(0.5), "~ 64 MiB");
                swatch(ui, ramp(1.0), ">= 64 GiB");
            }
            ColourBy::Age => {
                swatch(ui, ramp(0.0), "oldest");
                swatch(ui, ramp(1.0), "newest");
            }
        }
        swatch(ui, FREE, "free");
        let (r, _) = ui.allocate_exact_size(vec2(12.0, 12.0), Sense::hover());
        ui.painter()
            .rect_stroke(r, 0.0, Stroke::new(1.5, LARGEST_HOLE), StrokeKind::Inside);
        ui.label("largest free block");
    });
    ui.label(format!(
        "{:#x} - {:#x} · one cell = {} · {} regions drawn",
        lo,
        hi,
        human_bytes(bytes_per_cell.round() as u64),
        regions
    ));
}

/// The rows describing one region (tooltip and pinned box).
pub fn detail_ui(ui: &mut Ui, d: &RegionDetail, t0: u64) {
    egui::Grid::new(("region", d.region.addr))
        .num_columns(2)
        .show(ui, |ui| {
            ui.label("address");
            ui.monospace(format!("{:#x}", d.region.addr));
            ui.end_row();
            ui.label("size");
            ui.label(format!(
                "{} ({} bytes)",
                human_bytes(d.region.size),
                d.region.size
            ));
            ui.end_row();
            ui.label("kind");
            ui.label(d.region.kind.name());
            ui.end_row();
            ui.label("API");
            ui.label(d.api.map(|a| a.name()).unwrap_or("?"));
            ui.end_row();
            ui.label("thread");
            ui.label(d.tid.to_string());
            ui.end_row();
            if d.stream != 0 {
                ui.label("stream");
                ui.monospace(format!("{:#x}", d.stream));
                ui.end_row();
            }
            ui.label("allocated at");
            ui.label(format!(
                "{} (#{})",
                human_time(d.region.ts_ns.saturating_sub(t0)),
                d.seq
            ));
            ui.end_row();
        });
}
