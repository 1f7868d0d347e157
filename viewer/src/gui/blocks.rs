//! The blocks view of an imported PyTorch snapshot: the allocator layer. A device's
//! segments are drawn end to end in a wrapped band (the address gaps between segments left
//! out, each segment's start marked by a dark tick), and the blocks inside them coloured by
//! state: allocated (the requested bytes), rounding waste, pending free, inactive. Hover a
//! block for its address, size, requested size, state and the frames that allocated it;
//! click to pin it; wheel zooms, drag pans, double-click resets.
//!
//! Level of detail: a cell's colour mixes the categories by the bytes of each inside it,
//! read from the layer's cumulative sums (two binary searches a cell), so a million blocks
//! cost no more per redraw than a hundred.

use egui::{pos2, vec2, Color32, RichText, Sense, Shape, Stroke, Ui};

use super::map::{cells_mesh, outline_cells};
use crate::pipeline::blocks::{AllocatorLayer, BlockView, Category, DeviceLayer};
use crate::pipeline::space::human_bytes;
use fragprobe_shared::torch::BlockState;

/// Bytes inside a segment that no block covers (only in damaged or legacy files).
pub const UNCOVERED: Color32 = Color32::from_rgb(32, 33, 36);
/// The tick at each segment's start.
pub const SEGMENT_TICK: Color32 = Color32::from_rgb(10, 10, 12);
/// Outline of the pinned block.
pub const PINNED: Color32 = Color32::WHITE;
/// Frames shown per block (PyTorch stacks can run to hundreds of C++ frames).
pub const MAX_FRAMES: usize = 200;

/// The colour of each category.
pub fn colour(c: Category) -> Color32 {
    match c {
        Category::Requested => Color32::from_rgb(66, 165, 245),
        Category::Waste => Color32::from_rgb(255, 202, 40),
        Category::PendingFree => Color32::from_rgb(186, 104, 200),
        Category::Free => Color32::from_rgb(96, 125, 139),
    }
}

/// The name of a block state, for people.
pub fn state_name(s: BlockState) -> &'static str {
    match s {
        BlockState::ActiveAllocated => "allocated",
        BlockState::ActivePendingFree => "pending free (used by another stream)",
        BlockState::Inactive => "inactive (free, cached)",
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
struct CacheKey {
    layer: usize,
    device: i32,
    lo: u64,
    hi: u64,
    n: usize,
}

struct Cache {
    key: CacheKey,
    colours: Vec<Color32>,
    /// Cell positions of the segment starts drawn as ticks.
    ticks: Vec<f64>,
}

/// Per-window state of the blocks view.
#[derive(Default)]
pub struct State {
    /// The device shown (`None`: the first).
    pub device: Option<i32>,
    /// Zoomed packed window `[lo, hi)` (`None`: every segment).
    pub view: Option<(u64, u64)>,
    /// The block under the pointer this frame (index into the device's blocks).
    pub hovered: Option<usize>,
    /// The block clicked last.
    pub pinned: Option<usize>,
    /// Rows of the band.
    pub rows: u32,
    cache: Option<Cache>,
}

impl State {
    /// Rows of the band (16 until set).
    pub fn rows(&self) -> usize {
        if self.rows == 0 {
            16
        } else {
            self.rows.clamp(1, 256) as usize
        }
    }

    /// The packed window shown for a device spanning `span` bytes.
    pub fn window(&self, span: u64) -> (u64, u64) {
        match self.view {
            Some((lo, hi)) if hi <= span && hi > lo => (lo, hi),
            _ => (0, span.max(1)),
        }
    }

    /// Zooms by `factor` (< 1 zooms in) around `anchor` (0 ..= 1 of the window), never
    /// below `min_span` bytes.
    pub fn zoom(&mut self, span: u64, factor: f64, anchor: f64, min_span: u64) {
        let (lo, hi) = self.window(span);
        let w = (hi - lo) as f64;
        let nw = (w * factor).clamp(min_span.max(1) as f64, span.max(1) as f64);
        let anchor = anchor.clamp(0.0, 1.0);
        let a = lo as f64 + w * anchor;
        self.set(span, a - nw * anchor, nw);
    }

    /// Moves the window by `bytes`.
    pub fn pan(&mut self, span: u64, bytes: f64) {
        let (lo, hi) = self.window(span);
        self.set(span, lo as f64 + bytes, (hi - lo) as f64);
    }

    fn set(&mut self, span: u64, lo: f64, w: f64) {
        if w >= span as f64 {
            self.view = None;
            return;
        }
        let lo = lo.clamp(0.0, span as f64 - w) as u64;
        self.view = Some((lo, (lo + w.round() as u64).min(span)));
    }

    /// Shows the device; switching from another device resets the zoom and the pin.
    pub fn select(&mut self, device: i32) {
        if self.device.is_some_and(|d| d != device) {
            self.view = None;
            self.pinned = None;
        }
        self.device = Some(device);
    }
}

/// The cell colours of `[lo, hi)` in `n` cells, and the segment-start ticks.
fn build(d: &DeviceLayer, lo: u64, hi: u64, n: usize) -> (Vec<Color32>, Vec<f64>) {
    let w = (hi - lo) as u128;
    let at = |k: usize| lo + (w * k as u128 / n as u128) as u64;
    let mut colours = Vec::with_capacity(n);
    let mut prev = d.below(lo);
    for k in 0..n {
        let (a, b) = (at(k), at(k + 1));
        let next = d.below(b);
        let width = (b - a).max(1) as f32;
        let mut rgb = [0f32; 3];
        let mut used = 0f32;
        for c in Category::ALL {
            let f = (next[c.index()] - prev[c.index()]) as f32 / width;
            used += f;
            let col = colour(c);
            rgb[0] += f * col.r() as f32;
            rgb[1] += f * col.g() as f32;
            rgb[2] += f * col.b() as f32;
        }
        let rest = (1.0 - used).max(0.0);
        rgb[0] += rest * UNCOVERED.r() as f32;
        rgb[1] += rest * UNCOVERED.g() as f32;
        rgb[2] += rest * UNCOVERED.b() as f32;
        let ch = |v: f32| v.round().clamp(0.0, 255.0) as u8;
        colours.push(Color32::from_rgb(ch(rgb[0]), ch(rgb[1]), ch(rgb[2])));
        prev = next;
    }
    let per_cell = w as f64 / n as f64;
    let mut ticks = Vec::new();
    let segs = d.segments_in(lo, hi);
    for s in segs {
        // Only segments wide enough for the tick not to hide their blocks.
        if s.offset > lo && s.size as f64 >= 3.0 * per_cell {
            ticks.push((s.offset - lo) as f64 / per_cell);
        }
    }
    (colours, ticks)
}

/// Draws the blocks view of `layer` in about `height` points. `note` is shown above the
/// band (e.g. that the blocks are the snapshot's final state while the cursor is earlier).
pub fn ui(
    ui: &mut Ui,
    state: &mut State,
    layer: Option<&std::sync::Arc<AllocatorLayer>>,
    height: f32,
    note: Option<&str>,
) {
    let Some(layer) = layer else {
        ui.label(
            "No allocator layer: this run is not a PyTorch memory snapshot. Probe traces \
             record the device layer only (see the Map); open a snapshot written by \
             torch.cuda.memory._dump_snapshot() to see its blocks.",
        );
        state.hovered = None;
        return;
    };
    if layer.devices.is_empty() {
        ui.label("The snapshot holds no segments.");
        return;
    }
    let dev = state
        .device
        .and_then(|d| layer.device(d))
        .unwrap_or(&layer.devices[0]);
    let mut pick = dev.device;
    ui.horizontal_wrapped(|ui| {
        if layer.devices.len() > 1 {
            for d in &layer.devices {
                ui.selectable_value(&mut pick, d.device, format!("GPU {}", d.device));
            }
        } else {
            ui.label(format!("GPU {}", dev.device));
        }
        ui.label(format!(
            "{} segments · {} blocks: {} allocated, {} pending free, {} inactive",
            dev.segments.len(),
            dev.blocks.len(),
            dev.counts[0],
            dev.counts[1],
            dev.counts[2]
        ));
        let l = ui.label("rows");
        let mut rows = state.rows() as u32;
        ui.add(egui::DragValue::new(&mut rows).range(1..=256))
            .labelled_by(l.id);
        state.rows = rows;
        if state.view.is_some() && ui.button("reset zoom").clicked() {
            state.view = None;
        }
    });
    state.select(pick);
    let dev = layer.device(pick).unwrap_or(dev);
    if let Some(n) = note {
        ui.label(RichText::new(n).italics());
    }
    if dev.span == 0 {
        ui.label("This device has no segments (only a trace).");
        return;
    }

    let rows = state.rows();
    let band = (height * 0.55).max(rows as f32 * 2.0);
    let row_h = (band / rows as f32).clamp(2.0, 16.0);
    let width = ui.available_width().max(16.0);
    let (rect, response) =
        ui.allocate_exact_size(vec2(width, rows as f32 * row_h), Sense::click_and_drag());
    response
        .widget_info(|| egui::WidgetInfo::labeled(egui::Role::Canvas, true, "allocator blocks"));
    let cols = (rect.width().floor() as usize).max(1);
    let n = cols * rows;
    let (lo, hi) = state.window(dev.span);
    let key = CacheKey {
        layer: std::sync::Arc::as_ptr(layer) as usize,
        device: dev.device,
        lo,
        hi,
        n,
    };
    if state.cache.as_ref().is_none_or(|c| c.key != key) {
        let (colours, ticks) = build(dev, lo, hi, n);
        state.cache = Some(Cache {
            key,
            colours,
            ticks,
        });
    }
    let Some(cache) = state.cache.as_ref() else {
        return;
    };
    let painter = ui.painter_at(rect);
    painter.add(Shape::mesh(cells_mesh(
        rect,
        cols,
        rows,
        row_h,
        &cache.colours,
    )));
    let per_cell = (hi - lo) as f64 / n as f64;
    let cell_of = |x: u64| (x as f64 - lo as f64) / per_cell;
    for &t in &cache.ticks {
        let row = (t / cols as f64).floor() as usize;
        if row >= rows {
            continue;
        }
        let x = rect.left() + (t - (row * cols) as f64) as f32;
        let y0 = rect.top() + row as f32 * row_h;
        painter.line_segment(
            [pos2(x, y0), pos2(x, y0 + row_h - 1.0)],
            Stroke::new(1.0, SEGMENT_TICK),
        );
    }
    if let Some(b) = state.pinned.and_then(|i| Some((i, dev.blocks.get(i)?))) {
        let a = cell_of(dev.offset_of(b.0));
        let z = cell_of(dev.offset_of(b.0) + b.1.size);
        outline_cells(&painter, rect, cols, rows, row_h, (a, z), PINNED);
    }

    // Interaction.
    let pos_at = |p: egui::Pos2| -> f64 {
        let row = (((p.y - rect.top()) / row_h).floor().max(0.0) as usize).min(rows - 1);
        let col = ((p.x - rect.left()) as f64).clamp(0.0, cols as f64 - 1e-6);
        row as f64 * cols as f64 + col
    };
    state.hovered = None;
    if let Some(p) = response.hover_pos() {
        let pos = pos_at(p);
        let x = lo + (pos * per_cell) as u64;
        state.hovered = dev.block_at(x.min(hi - 1));
        let scroll = ui.input(|i| i.smooth_scroll_delta.y as f64);
        let zoom = ui.input(|i| i.zoom_delta() as f64);
        let factor = if zoom != 1.0 {
            1.0 / zoom
        } else {
            (-scroll / 200.0).exp()
        };
        if factor != 1.0 {
            state.zoom(dev.span, factor, pos / n as f64, n as u64);
        }
    }
    if response.dragged() {
        let d = response.drag_delta();
        let moved = d.x as f64 + (d.y / row_h) as f64 * cols as f64;
        state.pan(dev.span, -moved * per_cell);
    }
    if response.double_clicked() {
        state.view = None;
    } else if response.clicked() {
        state.pinned = state.hovered;
    }
    let hovered = state.hovered.and_then(|i| dev.blocks.get(i).copied());
    let _ = response.on_hover_ui_at_pointer(|ui| match hovered {
        Some(b) => {
            ui.label(format!(
                "{} · {} at {:#x}",
                state_name(b.state),
                human_bytes(b.size),
                b.address
            ));
            if let Some(f) = layer.site(b.stack) {
                ui.monospace(f);
            }
        }
        None => {
            ui.label("no block");
        }
    });

    legend(ui, per_cell, (lo, hi), dev);
    ui.separator();
    let shown = state.hovered.or(state.pinned);
    match shown.and_then(|i| dev.blocks.get(i)) {
        Some(b) => {
            ui.horizontal(|ui| {
                let title = if state.hovered.is_some() {
                    "Block under the pointer"
                } else {
                    "Pinned block"
                };
                ui.strong(title);
                if state.hovered.is_none() && ui.small_button("unpin").clicked() {
                    state.pinned = None;
                }
            });
            block_ui(ui, layer, dev, b);
        }
        None => {
            ui.label(
                "Hover a block for its sizes and the frames that allocated it; click to pin it.",
            );
        }
    }
}

fn legend(ui: &mut Ui, per_cell: f64, (lo, hi): (u64, u64), d: &DeviceLayer) {
    let t = d.totals();
    ui.horizontal_wrapped(|ui| {
        let swatch = |ui: &mut Ui, c: Color32, label: String| {
            let (r, _) = ui.allocate_exact_size(vec2(12.0, 12.0), Sense::hover());
            ui.painter().rect_filled(r, 2.0, c);
            ui.label(label);
        };
        for c in Category::ALL {
            swatch(
                ui,
                colour(c),
                format!("{} {}", c.name(), human_bytes(t[c.index()])),
            );
        }
        let (r, _) = ui.allocate_exact_size(vec2(12.0, 12.0), Sense::hover());
        ui.painter().line_segment(
            [r.center_top(), r.center_bottom()],
            Stroke::new(2.0, SEGMENT_TICK),
        );
        ui.label("segment start");
    });
    let segs = d.segments_in(lo, hi).len();
    ui.label(format!(
        "segments packed end to end: {} - {} of {} · {} segments in view · one cell = {}",
        human_bytes(lo),
        human_bytes(hi),
        human_bytes(d.span),
        segs,
        human_bytes(per_cell.round() as u64)
    ));
}

/// The rows describing one block and its frames.
pub fn block_ui(ui: &mut Ui, layer: &AllocatorLayer, d: &DeviceLayer, b: &BlockView) {
    let seg = d.segments.get(b.segment as usize);
    egui::Grid::new(("block", b.address))
        .num_columns(2)
        .show(ui, |ui| {
            let row = |ui: &mut Ui, k: &str, v: String| {
                ui.label(k);
                ui.monospace(v);
                ui.end_row();
            };
            row(ui, "address", format!("{:#x}", b.address));
            row(
                ui,
                "size",
                format!("{} ({} bytes)", human_bytes(b.size), b.size),
            );
            row(
                ui,
                "requested",
                format!("{} ({} bytes)", human_bytes(b.requested), b.requested),
            );
            if b.state == BlockState::ActiveAllocated {
                row(ui, "rounding waste", human_bytes(b.waste()));
            }
            row(ui, "state", state_name(b.state).to_string());
            if let Some(s) = seg {
                row(
                    ui,
                    "segment",
                    format!(
                        "{:#x} · {} · {} pool{}{} · {} blocks",
                        s.address,
                        human_bytes(s.size),
                        s.pool.name(),
                        if s.pool_id != (0, 0) {
                            format!(" {:?}", s.pool_id)
                        } else {
                            String::new()
                        },
                        if s.expandable { " · expandable" } else { "" },
                        s.blocks
                    ),
                );
                if s.stream != 0 {
                    row(ui, "stream", format!("{:#x}", s.stream));
                }
            }
        });
    let frames = layer.frames(b.stack);
    let hidden = layer.hidden_frames(b.stack);
    if frames.is_empty() && hidden == 0 {
        ui.label("No frames recorded for this block (history was off when it was allocated).");
        return;
    }
    if hidden > 0 {
        ui.label(format!(
            "frames ({}, innermost first; {hidden} of PyTorch's unwinder and CPython's interpreter left out, as memory_viz does)",
            frames.len()
        ));
    } else {
        ui.label(format!("frames ({}, innermost first)", frames.len()));
    }
    egui::ScrollArea::vertical()
        .id_salt("block-frames")
        .max_height(ui.available_height().max(120.0))
        .show(ui, |ui| {
            for f in frames.iter().take(MAX_FRAMES) {
                ui.monospace(f);
            }
            if frames.len() > MAX_FRAMES {
                ui.label(format!("... {} more", frames.len() - MAX_FRAMES));
            }
        });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::blocks::seg;

    #[test]
    fn cells_mix_categories_by_bytes_and_pure_cells_keep_their_colour() {
        const MIB: u64 = 1 << 20;
        let s = seg(
            0x1000_0000,
            &[
                (4 * MIB, BlockState::ActiveAllocated, 4 * MIB),
                (4 * MIB, BlockState::Inactive, 0),
            ],
        );
        let d = DeviceLayer::new(0, &[s]);
        let (c, ticks) = build(&d, 0, 8 * MIB, 4);
        assert_eq!(c[0], colour(Category::Requested));
        assert_eq!(c[1], colour(Category::Requested));
        assert_eq!(c[3], colour(Category::Free));
        assert!(ticks.is_empty(), "the first segment needs no tick");
        // [1, 7) MiB in three cells: the middle one is half allocated, half free.
        let (c, _) = build(&d, MIB, 7 * MIB, 3);
        assert_eq!(c[0], colour(Category::Requested));
        assert_eq!(c[2], colour(Category::Free));
        let (a, f) = (colour(Category::Requested), colour(Category::Free));
        let mid = |x: u8, y: u8| ((x as f32 + y as f32) / 2.0).round() as u8;
        assert_eq!(
            c[1],
            Color32::from_rgb(mid(a.r(), f.r()), mid(a.g(), f.g()), mid(a.b(), f.b()))
        );
    }

    #[test]
    fn zoom_and_pan_stay_inside_the_span() {
        let mut s = State::default();
        s.zoom(1000, 0.5, 1.0, 10);
        assert_eq!(s.view, Some((500, 1000)));
        s.pan(1000, 10_000.0);
        assert_eq!(s.view, Some((500, 1000)));
        s.pan(1000, -10_000.0);
        assert_eq!(s.view, Some((0, 500)));
        s.zoom(1000, 0.0001, 0.0, 10);
        assert_eq!(s.view, Some((0, 10)));
        s.zoom(1000, 1e9, 0.5, 10);
        assert_eq!(s.view, None);
    }
}
