//! Timelines: bytes (live, mapped, reserved, largest free block, NVML used, device total
//! with a 95 % line) and the fragmentation ratio, with failed allocations marked and a
//! time cursor. Clicking or dragging on a plot moves the cursor (the map rewinds to it).

use egui::{Color32, Ui};
use egui_plot::{Legend, Line, LineStyle, Plot, VLine};

use crate::pipeline::space::human_bytes;

pub use crate::pipeline::panels::timeline::{Curve, Input, Marker};

/// Colour of the time cursor.
pub const CURSOR: Color32 = Color32::from_rgb(255, 255, 255);
/// Width of both plots' y axes, so their time axes line up.
const AXIS_WIDTH: f32 = 64.0;
/// Legend name of the failed-allocation markers.
pub const FAILURES: &str = "failed allocations";
/// Colour of failed-allocation markers.
pub const FAILURE: Color32 = Color32::from_rgb(229, 57, 53);

/// Remembered timeline settings.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Options {
    /// Threshold line as a fraction of the device total.
    pub threshold: f64,
    /// Smallest height of the bytes plot (it grows with the window).
    pub height: f32,
    /// Show the fragmentation plot.
    pub show_ratio: bool,
}

impl Default for Options {
    fn default() -> Options {
        Options {
            threshold: 0.95,
            height: 180.0,
            show_ratio: true,
        }
    }
}

/// Draws both plots; returns the new cursor time when the user clicked or dragged.
pub fn ui(ui: &mut Ui, opts: &Options, input: &Input, cursor: Option<f64>) -> Option<f64> {
    let link = ui.scope_id().with("timeline-link");
    let mut moved = None;
    let bytes_fmt = |mark: egui_plot::GridMark, _r: &std::ops::RangeInclusive<f64>| {
        human_bytes(mark.value.max(0.0) as u64)
    };
    // Both plots span the same seconds: each fits its own data, so both are told the
    // extent of all of it (a bytes curve that runs on past the last ratio point, NVML
    // samples after the last record, must not stretch one time axis and not the other).
    let (x0, x1) = x_extent(input);
    let avail = ui.available_height() - 8.0;
    let (bytes_h, ratio_h) = if opts.show_ratio {
        let b = (avail * 0.62).max(opts.height.min(avail).max(80.0));
        (b, (avail - b - 8.0).max(50.0))
    } else {
        (avail.max(80.0), 0.0)
    };
    let resp = Plot::new("timeline-bytes")
        .height(bytes_h)
        .legend(legend())
        .link_axis(link, [true, false])
        .link_cursor(link, [true, false])
        .allow_drag(false)
        .allow_boxed_zoom(false)
        .y_axis_min_width(AXIS_WIDTH)
        .include_y(0.0)
        .include_x(x0)
        .include_x(x1)
        .y_axis_formatter(bytes_fmt)
        .x_axis_formatter(seconds)
        .label_formatter(|h| {
            let (name, p) = match h {
                egui_plot::HoverPosition::NearDataPoint {
                    plot_name,
                    position,
                    ..
                } => (*plot_name, *position),
                egui_plot::HoverPosition::Elsewhere { position } => ("", *position),
            };
            let span = (input.span.1 - input.span.0).abs().max(1e-9);
            let near = input
                .markers
                .iter()
                .filter(|m| (m.t - p.x).abs() < span * 0.005)
                .min_by(|a, b| (a.t - p.x).abs().total_cmp(&(b.t - p.x).abs()))
                .map(|m| format!("\n{}", m.text))
                .unwrap_or_default();
            Some(format!(
                "{name}\n{:.3} s\n{}{near}",
                p.x,
                human_bytes(p.y.max(0.0) as u64)
            ))
        })
        .show(ui, |p| {
            for c in &input.bytes {
                p.line(curve_line(c));
            }
            if let Some(total) = input.device_total {
                let flat = |v: f64| vec![[input.span.0, v], [input.span.1, v]];
                p.line(
                    Line::new("device total", flat(total))
                        .color(Color32::from_gray(170))
                        .style(LineStyle::dashed_loose()),
                );
                p.line(
                    Line::new(
                        format!("{:.0} % of total", opts.threshold * 100.0),
                        flat(total * opts.threshold),
                    )
                    .color(FAILURE)
                    .style(LineStyle::dashed_loose()),
                );
            }
            markers(p, input, cursor);
        });
    moved = moved.or(cursor_from(&resp));
    if opts.show_ratio {
        let resp = Plot::new("timeline-ratio")
            .height(ratio_h)
            .legend(legend())
            .link_axis(link, [true, false])
            .link_cursor(link, [true, false])
            .allow_drag(false)
            .allow_boxed_zoom(false)
            .y_axis_min_width(AXIS_WIDTH)
            .include_y(0.0)
            .include_y(1.0)
            .include_x(x0)
            .include_x(x1)
            .x_axis_formatter(seconds)
            .show(ui, |p| {
                for c in &input.ratio {
                    p.line(curve_line(c));
                }
                markers(p, input, cursor);
            });
        moved = moved.or(cursor_from(&resp));
    }
    moved
}

/// The seconds every curve, marker and the run's span cover, in both plots.
pub fn x_extent(input: &Input) -> (f64, f64) {
    let xs = input
        .bytes
        .iter()
        .chain(&input.ratio)
        .flat_map(|c| c.points.iter().map(|p| p[0]))
        .chain(input.markers.iter().map(|m| m.t))
        .chain([input.span.0, input.span.1])
        .filter(|x| x.is_finite());
    let (lo, hi) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
        (lo.min(x), hi.max(x))
    });
    if !lo.is_finite() {
        return (0.0, MIN_SPAN_S);
    }
    // Everything at one moment (a snapshot whose trace has no times): a millisecond wide,
    // not a plot library's default of ±10^10 drawn in raw units.
    (lo, hi.max(lo + MIN_SPAN_S))
}

/// The narrowest time axis drawn, in seconds.
const MIN_SPAN_S: f64 = 1e-3;

/// Time-axis labels: seconds, with as many decimals as the grid step needs.
fn seconds(mark: egui_plot::GridMark, _r: &std::ops::RangeInclusive<f64>) -> String {
    let decimals = (-mark.step_size.log10()).ceil().clamp(0.0, 9.0) as usize;
    format!("{:.*} s", decimals, mark.value)
}

fn legend() -> Legend {
    Legend::default()
        .position(egui_plot::Corner::LeftTop)
        .background_alpha(0.6)
}

fn curve_line(c: &Curve) -> Line<'_> {
    let l = Line::new(c.name.clone(), c.points.clone()).color(c.colour);
    if c.dashed {
        l.style(LineStyle::dashed_loose())
    } else {
        l
    }
}

fn markers(p: &mut egui_plot::PlotUi<'_>, input: &Input, cursor: Option<f64>) {
    // One legend entry for all of them; the hover label names the nearest one.
    for m in &input.markers {
        p.vline(VLine::new(FAILURES, m.t).color(FAILURE).width(1.0));
    }
    if let Some(t) = cursor {
        p.vline(VLine::new("cursor", t).color(CURSOR).width(2.0));
    }
}

fn cursor_from<R>(resp: &egui_plot::PlotResponse<R>) -> Option<f64> {
    let r = &resp.response;
    if r.clicked() || r.dragged() {
        let pos = r.interact_pointer_pos()?;
        return Some(resp.transform.value_from_position(pos).x);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_plots_span_the_seconds_of_all_their_curves() {
        let curve = |pts: &[[f64; 2]]| Curve {
            name: "c".into(),
            colour: Color32::WHITE,
            points: pts.to_vec(),
            dashed: false,
        };
        let input = Input {
            bytes: vec![curve(&[[0.0, 1.0], [3.0, 2.0]])],
            ratio: vec![curve(&[[0.5, 0.1], [1.0, 0.2]])],
            markers: vec![Marker {
                t: 3.5,
                text: String::new(),
            }],
            device_total: None,
            span: (0.2, 2.0),
        };
        assert_eq!(x_extent(&input), (0.0, 3.5));
        // All at one moment: a millisecond wide.
        let at_once = Input {
            bytes: vec![curve(&[[0.0, 1.0], [0.0, 2.0]])],
            ..Input::default()
        };
        assert_eq!(x_extent(&at_once), (0.0, MIN_SPAN_S));
        let mark = |value, step_size| egui_plot::GridMark { value, step_size };
        assert_eq!(seconds(mark(0.0002, 0.0001), &(0.0..=1.0)), "0.0002 s");
        assert_eq!(seconds(mark(2.0, 1.0), &(0.0..=1.0)), "2 s");
    }
}
