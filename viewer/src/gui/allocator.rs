//! The allocator-level figures of an imported PyTorch snapshot (one device): what is
//! allocated, requested, active and reserved, what `empty_cache()` cannot return, rounding
//! waste, the largest free block per pool, and fragmentation by each definition in use —
//! now (the snapshot's state) and at the peak of its trace.

use egui::{RichText, Ui};

use crate::pipeline::allocator::rows;
use crate::pipeline::blocks::DeviceLayer;

/// Draws the figures of `d` as a two-column grid.
pub fn ui(ui: &mut Ui, d: &DeviceLayer) {
    egui::Grid::new(("allocator-figures", d.device))
        .num_columns(2)
        .striped(true)
        .show(ui, |ui| {
            for (label, value, hover) in rows(d) {
                ui.label(label);
                let r = ui.label(RichText::new(value).monospace());
                if !hover.is_empty() {
                    r.on_hover_text(hover);
                }
                ui.end_row();
            }
        });
    match &d.peak {
        Some(p) if !p.exact => {
            ui.label("Peaks: the replay of the trace did not reproduce every address.");
        }
        Some(_) => {}
        None => {
            ui.label("No trace in the snapshot: no peak figures.");
        }
    }
}
