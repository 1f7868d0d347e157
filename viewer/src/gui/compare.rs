//! Compare: two or more runs side by side — a figures table and their curves overlaid —
//! each labelled with its `PYTORCH_CUDA_ALLOC_CONF` (or its file name).

use egui::{Color32, Ui};
use egui_plot::{Legend, Line, Plot};

use crate::pipeline::space::human_bytes;

pub use crate::pipeline::panels::compare::{Run, Stats};

/// What the overlaid curves' time axis counts from.
pub const ALIGNED: &str = "seconds since each run's first allocation";

/// How one row of the table shows a run's stats.
type StatText = dyn Fn(&Stats) -> String;

fn opt(b: Option<u64>) -> String {
    b.map(human_bytes).unwrap_or_else(|| "n/a".into())
}

/// Colour of run `i`.
pub fn run_colour(i: usize) -> Color32 {
    const C: [Color32; 6] = [
        Color32::from_rgb(66, 165, 245),
        Color32::from_rgb(255, 167, 38),
        Color32::from_rgb(102, 187, 106),
        Color32::from_rgb(236, 64, 122),
        Color32::from_rgb(171, 71, 188),
        Color32::from_rgb(255, 238, 88),
    ];
    C[i % C.len()]
}

/// Draws the comparison.
pub fn ui(ui: &mut Ui, runs: &[Run]) {
    if runs.len() < 2 {
        ui.label("Open two or more traces to compare them (File > Open, or drop files here).");
    }
    if runs.is_empty() {
        return;
    }
    egui::ScrollArea::horizontal()
        .id_salt("compare-table")
        .show(ui, |ui| {
            egui::Grid::new("compare")
                .num_columns(runs.len() + 1)
                .striped(true)
                .show(ui, |ui| {
                    ui.strong("run");
                    for (i, r) in runs.iter().enumerate() {
                        let label = if r.loading {
                            format!("{} (loading)", r.label)
                        } else {
                            r.label.clone()
                        };
                        ui.colored_label(run_colour(i), label);
                    }
                    ui.end_row();
                    ui.label("file");
                    for r in runs {
                        ui.label(&r.file);
                    }
                    ui.end_row();
                    let rows: [(&str, &StatText); 11] = [
                        ("peak", &|s| human_bytes(s.peak_live)),
                        ("fragmentation at peak", &|s| {
                            format!("{:.3}", s.ratio_at_peak)
                        }),
                        ("max fragmentation", &|s| format!("{:.3}", s.max_ratio)),
                        ("largest free block at peak", &|s| {
                            opt(s.largest_free_at_peak)
                        }),
                        ("smallest largest free block", &|s| opt(s.min_largest_free)),
                        ("live at end", &|s| human_bytes(s.final_live)),
                        ("failed allocations", &|s| s.failed_allocs.to_string()),
                        ("dropped events", &|s| s.dropped.to_string()),
                        ("anomalies", &|s| s.anomalies.to_string()),
                        ("events", &|s| s.events.to_string()),
                        ("duration", &|s| format!("{:.3} s", s.duration_s)),
                    ];
                    for (name, get) in rows {
                        ui.label(name);
                        for r in runs {
                            ui.monospace(get(&r.stats));
                        }
                        ui.end_row();
                    }
                    allocator_rows(ui, runs);
                });
        });
    let h = ((ui.available_height() - 20.0) / 2.0).clamp(80.0, 260.0);
    let link = ui.scope_id().with("compare-link");
    Plot::new("compare-live")
        .height(h)
        .legend(Legend::default())
        .link_axis(link, [true, false])
        .x_axis_label(ALIGNED)
        .include_y(0.0)
        .y_axis_formatter(|m, _| human_bytes(m.value.max(0.0) as u64))
        .show(ui, |p| {
            for (i, r) in runs.iter().enumerate() {
                p.line(Line::new(r.label.clone(), r.live.clone()).color(run_colour(i)));
            }
        });
    Plot::new("compare-ratio")
        .height(h)
        .legend(Legend::default())
        .link_axis(link, [true, false])
        .x_axis_label(ALIGNED)
        .include_y(0.0)
        .include_y(1.0)
        .show(ui, |p| {
            for (i, r) in runs.iter().enumerate() {
                p.line(Line::new(r.label.clone(), r.ratio.clone()).color(run_colour(i)));
            }
        });
}

/// The allocator-level rows of the runs that are PyTorch snapshots ("n/a" for the others).
fn allocator_rows(ui: &mut Ui, runs: &[Run]) {
    let mut labels: Vec<&str> = Vec::new();
    for r in runs {
        for (l, _) in &r.allocator {
            if !labels.contains(&l.as_str()) {
                labels.push(l);
            }
        }
    }
    if labels.is_empty() {
        return;
    }
    ui.strong("allocator (PyTorch snapshot)");
    ui.end_row();
    for l in labels {
        ui.label(l);
        for r in runs {
            let v = r.allocator.iter().find(|(k, _)| k == l);
            ui.monospace(v.map_or("n/a", |(_, v)| v.as_str()));
        }
        ui.end_row();
    }
}
