//! Processes: NVML's per-process view joined with the owner and command line (what
//! `nvidia-smi --query-compute-apps` plus `ps -o user,cmd` shows), probed processes marked.

use egui::{Color32, RichText, Ui};

use crate::pipeline::space::human_bytes;

pub use crate::pipeline::panels::processes::{Input, Row};

/// Draws the table. Returns the pid the user picked (to show its space on the map).
pub fn ui(ui: &mut Ui, input: &Input) -> Option<u32> {
    if let Some(why) = &input.unavailable {
        ui.colored_label(
            Color32::from_rgb(255, 167, 38),
            format!("NVML unavailable: {why}"),
        );
    }
    if input.rows.is_empty() {
        ui.label("No GPU processes.");
        return None;
    }
    let mut rows: Vec<&Row> = input.rows.iter().collect();
    rows.sort_by(|a, b| {
        a.gpu
            .cmp(&b.gpu)
            .then(b.used.cmp(&a.used))
            .then(a.pid.cmp(&b.pid))
    });
    let mut picked = None;
    egui::ScrollArea::both()
        .auto_shrink([false, true])
        .show(ui, |ui| {
            egui::Grid::new("processes")
                .num_columns(8)
                .striped(true)
                .show(ui, |ui| {
                    for h in [
                        "GPU", "PID", "type", "used", "tracked", "user", "probe", "command",
                    ] {
                        ui.strong(h);
                    }
                    ui.end_row();
                    for r in rows {
                        ui.label(r.gpu.to_string());
                        if ui.link(r.pid.to_string()).clicked() {
                            picked = Some(r.pid);
                        }
                        ui.label(&r.kind);
                        ui.monospace(r.used.map(human_bytes).unwrap_or_else(|| "n/a".into()));
                        ui.monospace(r.tracked.map(human_bytes).unwrap_or_default());
                        ui.label(&r.user);
                        if r.probed {
                            ui.label(
                                RichText::new("probed").color(Color32::from_rgb(102, 187, 106)),
                            );
                        } else {
                            ui.label("");
                        }
                        ui.label(&r.command);
                        ui.end_row();
                    }
                });
        });
    picked
}
