//! Memory-over-time plots as PNG: one line per GPU (or process), the device total, a
//! dashed threshold line (95 % by default), and alerts and failed allocations marked —
//! the matplotlib plot users write by hand, without Python or system fonts.

use tiny_skia::{
    Color, Paint, PathBuilder, Pixmap, PremultipliedColorU8, Rect, Stroke, StrokeDash, Transform,
};

use super::font;
use super::units::{GIB, MIB};

/// One line.
#[derive(Clone, Debug, Default)]
pub struct Series {
    /// Legend text.
    pub label: String,
    /// (seconds since the plot's start, bytes), in time order.
    pub points: Vec<(f64, f64)>,
    /// The device's capacity, bytes, when known.
    pub total: Option<f64>,
}

/// What a marker stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkerKind {
    /// An alert fired.
    Alert,
    /// An allocation failed.
    Failure,
}

/// A vertical marker at a time.
#[derive(Clone, Debug)]
pub struct Marker {
    /// Seconds since the start.
    pub t: f64,
    /// Which kind.
    pub kind: MarkerKind,
    /// Index of the series it belongs to, if any (draws a symbol on that line).
    pub series: Option<usize>,
}

/// A whole plot.
#[derive(Clone, Debug)]
pub struct Chart {
    /// Title at the top.
    pub title: String,
    /// The lines.
    pub series: Vec<Series>,
    /// The markers.
    pub markers: Vec<Marker>,
    /// Percent of each total drawn as a dashed line, `None` for none.
    pub threshold_pct: Option<f64>,
    /// Image width, pixels.
    pub width: u32,
    /// Image height, pixels.
    pub height: u32,
}

const PALETTE: [(u8, u8, u8); 8] = [
    (31, 119, 180),
    (44, 160, 44),
    (148, 103, 189),
    (140, 86, 75),
    (23, 190, 207),
    (188, 189, 34),
    (227, 119, 194),
    (127, 127, 127),
];
const RED: (u8, u8, u8) = (214, 39, 40);
const ORANGE: (u8, u8, u8) = (255, 127, 14);
const GREY: (u8, u8, u8) = (90, 90, 90);
const LIGHT: (u8, u8, u8) = (225, 225, 225);
const INK: (u8, u8, u8) = (20, 20, 20);

fn paint(c: (u8, u8, u8)) -> Paint<'static> {
    let mut p = Paint::default();
    p.set_color_rgba8(c.0, c.1, c.2, 255);
    p.anti_alias = true;
    p
}

fn line(pm: &mut Pixmap, pts: &[(f32, f32)], c: (u8, u8, u8), width: f32, dash: Option<Vec<f32>>) {
    if pts.len() < 2 {
        return;
    }
    let mut pb = PathBuilder::new();
    pb.move_to(pts[0].0, pts[0].1);
    for p in &pts[1..] {
        pb.line_to(p.0, p.1);
    }
    let Some(path) = pb.finish() else { return };
    let mut stroke = Stroke {
        width,
        ..Stroke::default()
    };
    stroke.dash = dash.and_then(|d| StrokeDash::new(d, 0.0));
    pm.stroke_path(&path, &paint(c), &stroke, Transform::identity(), None);
}

fn rect(pm: &mut Pixmap, x: f32, y: f32, w: f32, h: f32, c: (u8, u8, u8)) {
    if let Some(r) = Rect::from_xywh(x, y, w, h) {
        pm.fill_rect(r, &paint(c), Transform::identity(), None);
    }
}

fn text(pm: &mut Pixmap, s: &str, x: i32, y: i32, scale: u32, c: (u8, u8, u8)) {
    let (w, h) = (pm.width() as i32, pm.height() as i32);
    let px = PremultipliedColorU8::from_rgba(c.0, c.1, c.2, 255)
        .unwrap_or(PremultipliedColorU8::TRANSPARENT);
    let pixels = pm.pixels_mut();
    font::rasterize(s, |gx, gy| {
        for dy in 0..scale {
            for dx in 0..scale {
                let (px_x, px_y) = (x + (gx * scale + dx) as i32, y + (gy * scale + dy) as i32);
                if (0..w).contains(&px_x) && (0..h).contains(&px_y) {
                    pixels[(px_y * w + px_x) as usize] = px;
                }
            }
        }
    });
}

/// A "nice" step (1, 2 or 5 × 10^k) giving about `target` intervals over `span`.
pub fn nice_step(span: f64, target: f64) -> f64 {
    if !(span.is_finite() && span > 0.0) {
        return 1.0;
    }
    let raw = span / target;
    let mag = 10f64.powf(raw.log10().floor());
    let norm = raw / mag;
    let m = if norm <= 1.0 {
        1.0
    } else if norm <= 2.0 {
        2.0
    } else if norm <= 5.0 {
        5.0
    } else {
        10.0
    };
    m * mag
}

/// Axis label for a byte value in the unit chosen for the axis.
fn byte_label(v: f64, unit: f64) -> String {
    let name = if unit == GIB as f64 { "GiB" } else { "MiB" };
    let x = v / unit;
    if (x - x.round()).abs() < 1e-9 {
        format!("{} {name}", x.round() as i64)
    } else {
        format!("{x:.1} {name}")
    }
}

/// Axis label for `s` seconds since the start, in ticks of `unit` seconds (1, 60, 3600).
pub fn tick_label(s: f64, unit: f64) -> String {
    if unit >= 3600.0 {
        format!("{}h", trim(s / 3600.0))
    } else if unit >= 60.0 {
        format!("{}m", trim(s / 60.0))
    } else {
        format!("{}s", trim(s))
    }
}

fn trim(v: f64) -> String {
    if (v - v.round()).abs() < 1e-6 {
        format!("{}", v.round() as i64)
    } else {
        format!("{v:.1}")
    }
}

/// Draws the chart and encodes it as PNG.
pub fn render(chart: &Chart) -> Result<Vec<u8>, String> {
    let (w, h) = (chart.width.max(200), chart.height.max(150));
    let mut pm = Pixmap::new(w, h).ok_or("cannot allocate the image")?;
    pm.fill(Color::WHITE);
    let legend = legend_entries(chart);
    let legend_rows = legend_layout(&legend, w as i32 - 110)
        .last()
        .map_or(0, |e| e.2 + 1);
    let (left, right, top) = (90.0f32, 20.0f32, 44.0f32);
    let bottom = 44.0 + 22.0 * legend_rows as f32;
    let (pw, ph) = (w as f32 - left - right, h as f32 - top - bottom);

    let mut tmax = 0f64;
    let mut ymax = 0f64;
    for s in &chart.series {
        for &(t, v) in &s.points {
            tmax = tmax.max(t);
            ymax = ymax.max(v);
        }
        if let Some(tot) = s.total {
            ymax = ymax.max(tot);
        }
    }
    for m in &chart.markers {
        tmax = tmax.max(m.t);
    }
    if tmax <= 0.0 {
        tmax = 1.0;
    }
    if ymax <= 0.0 {
        ymax = MIB as f64;
    }
    let ytop = ymax * 1.05;
    let unit = if ymax >= 2.0 * GIB as f64 {
        GIB as f64
    } else {
        MIB as f64
    };
    let xs = |t: f64| left + (t / tmax) as f32 * pw;
    let ys = |v: f64| top + ph - (v / ytop) as f32 * ph;

    // Grid and axis labels.
    let ystep = nice_step(ytop / unit, 6.0) * unit;
    let mut v = 0.0;
    while v <= ytop {
        line(
            &mut pm,
            &[(left, ys(v)), (left + pw, ys(v))],
            LIGHT,
            1.0,
            None,
        );
        let l = byte_label(v, unit);
        let lw = font::text_width(&l) as i32 * 2;
        text(&mut pm, &l, left as i32 - 8 - lw, ys(v) as i32 - 7, 2, INK);
        v += ystep;
    }
    let tunit = if tmax >= 7200.0 {
        3600.0
    } else if tmax >= 120.0 {
        60.0
    } else {
        1.0
    };
    let xstep = nice_step(tmax / tunit, 8.0) * tunit;
    let mut t = 0.0;
    while t <= tmax + 1e-9 {
        line(
            &mut pm,
            &[(xs(t), top), (xs(t), top + ph)],
            LIGHT,
            1.0,
            None,
        );
        let l = tick_label(t, tunit);
        let lw = font::text_width(&l) as i32 * 2;
        text(
            &mut pm,
            &l,
            xs(t) as i32 - lw / 2,
            (top + ph) as i32 + 8,
            2,
            INK,
        );
        t += xstep;
    }
    line(
        &mut pm,
        &[(left, top), (left, top + ph), (left + pw, top + ph)],
        INK,
        1.5,
        None,
    );
    text(&mut pm, &chart.title, left as i32, 12, 2, INK);

    // Totals and threshold lines, once per distinct total.
    let mut totals: Vec<f64> = chart.series.iter().filter_map(|s| s.total).collect();
    totals.sort_by(f64::total_cmp);
    totals.dedup();
    for &tot in &totals {
        line(
            &mut pm,
            &[(left, ys(tot)), (left + pw, ys(tot))],
            GREY,
            2.0,
            None,
        );
        text(
            &mut pm,
            &format!("total {}", byte_label(tot, unit)),
            (left + pw) as i32 - 180,
            ys(tot) as i32 - 20,
            2,
            GREY,
        );
        if let Some(p) = chart.threshold_pct {
            let y = ys(tot * p / 100.0);
            line(
                &mut pm,
                &[(left, y), (left + pw, y)],
                RED,
                2.0,
                Some(vec![10.0, 7.0]),
            );
            let l = format!("{}%", trim(p));
            let lw = font::text_width(&l) as i32 * 2;
            text(
                &mut pm,
                &l,
                (left + pw) as i32 - lw - 4,
                y as i32 + 6,
                2,
                RED,
            );
        }
    }

    // The series.
    for (i, s) in chart.series.iter().enumerate() {
        let c = PALETTE[i % PALETTE.len()];
        let pts: Vec<(f32, f32)> = s.points.iter().map(|&(t, v)| (xs(t), ys(v))).collect();
        if pts.len() == 1 {
            rect(&mut pm, pts[0].0 - 2.0, pts[0].1 - 2.0, 4.0, 4.0, c);
        }
        line(&mut pm, &pts, c, 2.5, None);
    }

    // Markers.
    for m in &chart.markers {
        let (c, label) = match m.kind {
            MarkerKind::Alert => (ORANGE, "!"),
            MarkerKind::Failure => (RED, "X"),
        };
        let x = xs(m.t);
        line(
            &mut pm,
            &[(x, top), (x, top + ph)],
            c,
            1.5,
            Some(vec![4.0, 4.0]),
        );
        text(&mut pm, label, x as i32 - 5, top as i32 + 2, 2, c);
        if let Some(v) = m
            .series
            .and_then(|i| chart.series.get(i))
            .and_then(|s| value_at(&s.points, m.t))
        {
            let y = ys(v);
            rect(&mut pm, x - 4.0, y - 4.0, 8.0, 8.0, c);
        }
    }

    // Legend, below the axis labels.
    let ly0 = (top + ph) as i32 + 34;
    for (c, l, row, x) in legend_layout(&legend, w as i32 - 110) {
        let (lx, ly) = (left as i32 + x, ly0 + 22 * row);
        rect(&mut pm, lx as f32, ly as f32 + 5.0, 18.0, 6.0, c);
        text(&mut pm, &l, lx + 26, ly, 2, INK);
    }
    pm.encode_png()
        .map_err(|e| format!("PNG encoding failed: {e}"))
}

fn legend_entries(chart: &Chart) -> Vec<((u8, u8, u8), String)> {
    let mut entries: Vec<((u8, u8, u8), String)> = chart
        .series
        .iter()
        .enumerate()
        .map(|(i, s)| (PALETTE[i % PALETTE.len()], s.label.clone()))
        .collect();
    if chart.markers.iter().any(|m| m.kind == MarkerKind::Alert) {
        entries.push((ORANGE, "alert".into()));
    }
    if chart.markers.iter().any(|m| m.kind == MarkerKind::Failure) {
        entries.push((RED, "failed allocation".into()));
    }
    entries
}

type Placed = ((u8, u8, u8), String, i32, i32);

/// Places legend entries left to right, wrapping at `width`: (colour, label, row, x).
fn legend_layout(entries: &[((u8, u8, u8), String)], width: i32) -> Vec<Placed> {
    let mut out = Vec::new();
    let (mut row, mut x) = (0, 0);
    for (c, l) in entries {
        let ew = 26 + font::text_width(l) as i32 * 2 + 24;
        if x > 0 && x + ew > width {
            row += 1;
            x = 0;
        }
        out.push((*c, l.clone(), row, x));
        x += ew;
    }
    out
}

/// The series value at time `t` (the last point at or before `t`).
fn value_at(points: &[(f64, f64)], t: f64) -> Option<f64> {
    let i = points.partition_point(|p| p.0 <= t);
    points.get(i.checked_sub(1)?).map(|p| p.1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_nice() {
        assert_eq!(nice_step(10.0, 5.0), 2.0);
        assert_eq!(nice_step(84.0, 6.0), 20.0);
        assert_eq!(nice_step(0.7, 7.0), 0.1);
        assert_eq!(nice_step(0.0, 5.0), 1.0);
        assert_eq!(tick_label(30.0, 1.0), "30s");
        assert_eq!(tick_label(60.0, 60.0), "1m");
        assert_eq!(tick_label(9000.0, 3600.0), "2.5h");
    }

    #[test]
    fn renders_a_png() {
        let s = Series {
            label: "GPU 0".into(),
            points: (0..50)
                .map(|i| (i as f64, (i * 1000) as f64 * MIB as f64))
                .collect(),
            total: Some(80.0 * GIB as f64),
        };
        let chart = Chart {
            title: "test".into(),
            series: vec![s],
            markers: vec![Marker {
                t: 20.0,
                kind: MarkerKind::Alert,
                series: Some(0),
            }],
            threshold_pct: Some(95.0),
            width: 400,
            height: 300,
        };
        let png = render(&chart).unwrap();
        assert_eq!(&png[1..4], b"PNG");
        assert_eq!(
            value_at(&chart.series[0].points, 20.5),
            Some(20_000.0 * MIB as f64)
        );
        assert_eq!(value_at(&chart.series[0].points, -1.0), None);
    }
}
