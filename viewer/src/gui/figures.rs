//! Figures: the numbers for the selected space at the cursor (fragmentation ratio, largest
//! free block, total free, live count, peak, dropped events, anomalies) and the NVML
//! cross-check with its plain-words verdict.

use egui::{Color32, RichText, Ui};

use crate::pipeline::crosscheck::{CrossCheck, Verdict};
use crate::pipeline::space::{human_bytes, human_bytes_signed};

pub use crate::pipeline::panels::figures::Figures;

/// Draws the figures as a two-column grid (label, value).
pub fn ui(ui: &mut Ui, f: &Figures) {
    egui::Grid::new("figures")
        .num_columns(2)
        .striped(true)
        .show(ui, |ui| {
            let row = |ui: &mut Ui, label: &str, value: String, hover: String| {
                ui.label(label);
                ui.label(RichText::new(value).monospace())
                    .on_hover_text(hover);
                ui.end_row();
            };
            let bytes = |b: u64| (human_bytes(b), format!("{b} bytes"));
            if let Some(a) = &f.allocator {
                // A PyTorch snapshot: the device layer is its segments (reserved); what is
                // allocated and free is inside them.
                let (v, _) = bytes(f.live_bytes);
                row(ui, "reserved (segments)", v, "PyTorch's segments: what the driver handed out (memory_reserved)".into());
                row(ui, "segments", f.live_count.to_string(), String::new());
                let (v, h) = bytes(f.peak_live);
                row(ui, "peak reserved", v, h);
                let (v, _) = bytes(a.allocated);
                row(ui, "allocated", v, "blocks handed out inside the segments (memory_allocated)".into());
                let ratio = if a.free > 0 {
                    1.0 - a.largest_free as f64 / a.free as f64
                } else {
                    0.0
                };
                row(ui, "fragmentation ratio", format!("{ratio:.3}"), "inside the segments: 1 - largest free block / total free".into());
                let (v, _) = bytes(a.largest_free);
                row(ui, "largest free block", v, "the largest free block inside the segments (the Allocator section has it per pool)".into());
                let (v, _) = bytes(a.free);
                row(ui, "total free", v, "free inside the segments: reserved but unallocated".into());
            } else {
                let (v, h) = bytes(f.live_bytes);
                row(ui, "live bytes", v, h);
                row(ui, "live count", f.live_count.to_string(), String::new());
                let (v, h) = bytes(f.peak_live);
                row(ui, "peak", v, h);
                let ratio = format!("{:.3}", f.frag_ratio);
                row(
                    ui,
                    "fragmentation ratio",
                    ratio,
                    "1 - largest free block / total free".into(),
                );
                let (v, h) = f
                    .largest_free
                    .map(bytes)
                    .unwrap_or(("n/a".into(), "no arena yet".into()));
                row(ui, "largest free block", v, h);
                let (v, h) = f
                    .total_free
                    .map(bytes)
                    .unwrap_or(("n/a".into(), "no arena yet".into()));
                row(ui, "total free", v, h);
            }
            if f.managed_bytes > 0 {
                let (v, h) = bytes(f.managed_bytes);
                row(ui, "managed", v, h);
            }
            if f.mapped_bytes > 0 || f.reserved_bytes > 0 {
                let (v, h) = bytes(f.mapped_bytes);
                row(ui, "VMM mapped", v, h);
                let (v, h) = bytes(f.reserved_bytes);
                row(ui, "VMM reserved", v, h);
            }
            row(
                ui,
                "failed allocations",
                f.failed_allocs.to_string(),
                String::new(),
            );
            row(
                ui,
                "dropped events",
                f.dropped.to_string(),
                "lost in the ring: the ring was full".into(),
            );
            row(
                ui,
                "anomalies",
                f.anomalies.to_string(),
                "double frees, frees of unknown addresses...".into(),
            );
            row(ui, "events", f.events.to_string(), String::new());
        });
    ui.separator();
    crosscheck_ui(ui, f.crosscheck.as_ref());
}

fn crosscheck_ui(ui: &mut Ui, c: Option<&CrossCheck>) {
    ui.strong("NVML cross-check");
    let Some(c) = c else {
        ui.label("No NVML figures for this process (none sampled, or NVML unavailable).");
        return;
    };
    egui::Grid::new("crosscheck").num_columns(2).show(ui, |ui| {
        let na = || "n/a".to_string();
        ui.label("tracked live");
        ui.monospace(human_bytes(c.tracked_live));
        ui.end_row();
        ui.label("NVML, this process");
        ui.monospace(c.process_used.map(human_bytes).unwrap_or_else(na));
        ui.end_row();
        ui.label("context baseline");
        ui.monospace(
            c.baseline
                .map_or_else(na, |b| match c.baseline_estimated_with {
                    Some(_) => format!("{} (est.)", human_bytes(b)),
                    None => human_bytes(b),
                }),
        );
        ui.end_row();
        ui.label("unexplained");
        let text = c.unexplained().map(human_bytes_signed).unwrap_or_else(na);
        let colour = if c.flagged() {
            Color32::from_rgb(255, 112, 67)
        } else {
            ui.visuals().text_color()
        };
        ui.label(RichText::new(text).monospace().color(colour));
        ui.end_row();
        ui.label("NVML, device");
        ui.monospace(format!(
            "{} of {}",
            human_bytes(c.device_used),
            human_bytes(c.device_total)
        ));
        ui.end_row();
    });
    let verdict = match c.verdict() {
        Verdict::ContextOverheadOnly => "context overhead only",
        Verdict::UntrackedAllocations => "untracked allocations",
        Verdict::TrackedExceedsNvml => "tracked exceeds NVML",
        Verdict::NoProcessFigure => "no per-process figure",
    };
    ui.label(RichText::new(format!("Verdict: {verdict}")).strong());
    ui.label(c.explain());
}
