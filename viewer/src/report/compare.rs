//! `fragprobe compare`: the report's figures side by side, the better value per row marked.

use std::fmt::Write as _;

use serde::Serialize;

use super::text::bytes;
use super::Report;

/// Whether smaller or larger is better for a row.
#[derive(Clone, Copy, Debug)]
pub enum Better {
    /// The smallest value is best.
    Lower,
    /// The largest value is best.
    Higher,
    /// Shown for information; no value is marked.
    Neither,
}

/// One row of the comparison.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// Figure name.
    pub figure: String,
    /// One value per run.
    pub values: Vec<f64>,
    /// Index of the best run (None when all are equal).
    pub best: Option<usize>,
    /// Whether the values are byte counts (drawn as KiB/MiB/GiB).
    #[serde(skip)]
    pub bytes: bool,
}

impl Row {
    /// A row whose best value is the lowest or highest (none when all are equal). NaN
    /// stands for "not applicable to this run" (drawn `n/a`, `null` in JSON) and is never
    /// the best.
    pub fn new(figure: &str, better: Better, values: Vec<f64>, bytes: bool) -> Row {
        let known: Vec<f64> = values.iter().copied().filter(|v| !v.is_nan()).collect();
        let all_equal = known.windows(2).all(|w| w[0] == w[1]);
        let best = if all_equal || known.is_empty() || matches!(better, Better::Neither) {
            None
        } else {
            let it = values.iter().enumerate().filter(|(_, v)| !v.is_nan());
            match better {
                Better::Lower => it.min_by(|a, b| a.1.total_cmp(b.1)).map(|x| x.0),
                // The first of equal best values, as for Lower.
                Better::Higher => it.min_by(|a, b| b.1.total_cmp(a.1)).map(|x| x.0),
                Better::Neither => None,
            }
        };
        Row {
            figure: figure.to_string(),
            values,
            best,
            bytes,
        }
    }
}

/// The comparison.
#[derive(Clone, Debug, Serialize)]
pub struct Comparison {
    /// Schema version (same as the report's).
    pub format_version: u32,
    /// Column labels: each run's PYTORCH_CUDA_ALLOC_CONF, else its file name.
    pub labels: Vec<String>,
    /// Sources.
    pub sources: Vec<String>,
    /// Rows.
    pub rows: Vec<Row>,
}

/// (figure, which way is better, how to read it, whether it is bytes).
type RowSpec = (&'static str, Better, fn(&Report) -> f64, bool);

fn rows() -> Vec<RowSpec> {
    vec![
        (
            "peak live bytes",
            Better::Lower,
            |r| r.bytes.peak_live as f64,
            true,
        ),
        (
            "NVML peak used bytes",
            // Device-wide, context included: what the run really cost the GPU, when its
            // trace has NVML samples and nothing else ran on the device. A peak of 0 means
            // the samples only ever saw the idle device (a run shorter than the NVML
            // interval, sampled before its context existed): that is no figure of the run,
            // so it reads n/a like a run without samples, not a winning 0 B.
            Better::Lower,
            |r| {
                r.devices
                    .iter()
                    .filter_map(|d| d.nvml.as_ref().map(|n| n.peak_used))
                    .filter(|&p| p > 0)
                    .map(|p| p as f64)
                    .reduce(f64::max)
                    .unwrap_or(f64::NAN)
            },
            true,
        ),
        (
            "peak reserved (VMM) bytes",
            // Address space costs no memory; a run without VMM is not "better" for it.
            Better::Neither,
            |r| r.bytes.peak_reserved as f64,
            true,
        ),
        (
            "peak mapped (VMM) bytes",
            // Part of peak live bytes, which is where the comparison belongs.
            Better::Neither,
            |r| r.bytes.peak_mapped as f64,
            true,
        ),
        (
            "final live bytes",
            Better::Lower,
            |r| r.bytes.final_live as f64,
            true,
        ),
        (
            "max fragmentation ratio",
            Better::Lower,
            |r| r.fragmentation.max_ratio,
            false,
        ),
        (
            "fragmentation at peak",
            Better::Lower,
            |r| r.fragmentation.ratio_at_peak,
            false,
        ),
        (
            "final fragmentation ratio",
            Better::Lower,
            |r| r.fragmentation.final_ratio,
            false,
        ),
        (
            "smallest largest free block",
            Better::Higher,
            |r| {
                // No arena (only VMM or managed memory): no free block to speak of.
                if r.devices.iter().all(|d| d.min_largest_free_block.is_none()) {
                    f64::NAN
                } else {
                    r.fragmentation.min_largest_free_block as f64
                }
            },
            true,
        ),
        (
            "allocation calls",
            Better::Lower,
            |r| r.allocations.ok as f64,
            false,
        ),
        (
            "failed allocations",
            Better::Lower,
            |r| r.allocations.failed as f64,
            false,
        ),
        (
            "live at exit bytes",
            Better::Lower,
            |r| r.leaks.bytes as f64,
            true,
        ),
        (
            "dropped events",
            Better::Lower,
            |r| r.events.dropped as f64,
            false,
        ),
        (
            "anomalies",
            Better::Lower,
            |r| r.events.anomalies as f64,
            false,
        ),
        (
            "duration s",
            Better::Lower,
            |r| r.duration_ns as f64 / 1e9,
            false,
        ),
    ]
}

/// Builds the comparison of several reports.
pub fn compare(reports: &[Report]) -> Comparison {
    let mut labels: Vec<String> = reports.iter().map(|r| r.label.clone()).collect();
    // Same label twice (two runs of one setting): add the file name.
    for i in 0..labels.len() {
        if labels.iter().filter(|l| **l == labels[i]).count() > 1 {
            labels[i] = format!("{} ({})", reports[i].label, reports[i].source);
        }
    }
    let rows = rows()
        .into_iter()
        .map(|(name, better, f, bytes)| {
            Row::new(name, better, reports.iter().map(f).collect(), bytes)
        })
        .collect();
    Comparison {
        format_version: super::REPORT_VERSION,
        labels,
        sources: reports.iter().map(|r| r.source.clone()).collect(),
        rows,
    }
}

/// The table as text; the best value of each row is marked with `*`.
pub fn render(c: &Comparison) -> String {
    let w0 = c
        .rows
        .iter()
        .map(|r| r.figure.len())
        .max()
        .unwrap_or(10)
        .max(6);
    let cells: Vec<Vec<String>> = c
        .rows
        .iter()
        .map(|r| {
            let b = r.bytes;
            r.values
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    let s = if v.is_nan() {
                        "n/a".to_string()
                    } else if b {
                        bytes(*v as u64)
                    } else if v.fract() != 0.0 {
                        format!("{v:.3}")
                    } else {
                        format!("{v:.0}")
                    };
                    if r.best == Some(i) {
                        format!("{s} *")
                    } else {
                        s
                    }
                })
                .collect()
        })
        .collect();
    let widths: Vec<usize> = (0..c.labels.len())
        .map(|i| {
            cells
                .iter()
                .map(|row| row[i].len())
                .chain([c.labels[i].chars().count()])
                .max()
                .unwrap_or(8)
        })
        .collect();
    let mut o = String::new();
    let _ = write!(o, "{:w0$}", "");
    for (l, w) in c.labels.iter().zip(&widths) {
        let _ = write!(o, "  {l:>w$}");
    }
    o.push('\n');
    for (r, row) in c.rows.iter().zip(&cells) {
        let _ = write!(o, "{:w0$}", r.figure);
        for (v, w) in row.iter().zip(&widths) {
            let _ = write!(o, "  {v:>w$}");
        }
        o.push('\n');
    }
    o.push_str("(* = better)\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn best_ignores_not_applicable_values() {
        let r = Row::new("x", Better::Higher, vec![f64::NAN, 5.0, 7.0], true);
        assert_eq!(r.best, Some(2));
        let r = Row::new("x", Better::Lower, vec![f64::NAN, 5.0, 7.0], false);
        assert_eq!(r.best, Some(1));
        // one known value, or all equal: nothing is better
        assert_eq!(
            Row::new("x", Better::Lower, vec![f64::NAN, 5.0], false).best,
            None
        );
        assert_eq!(
            Row::new("x", Better::Lower, vec![3.0, 3.0], false).best,
            None
        );
        assert_eq!(Row::new("x", Better::Lower, vec![], false).best, None);
        assert_eq!(
            Row::new("x", Better::Neither, vec![0.0, 8.0], true).best,
            None
        );
    }

    #[test]
    fn nvml_peak_used_is_compared_where_the_traces_have_samples() {
        use super::super::{DeviceRow, NvmlRow};
        let report = |peak: Option<u64>| {
            let mut r = Report::build(&fragprobe_shared::model::Model::new(), "t", vec![], 0, 0);
            r.devices.push(DeviceRow {
                ordinal: 0,
                uuid: None,
                name: None,
                total_bytes: None,
                peak_live: 0,
                final_live: 0,
                max_ratio: 0.0,
                final_ratio: 0.0,
                final_largest_free_block: None,
                min_largest_free_block: None,
                nvml: peak.map(|p| NvmlRow {
                    peak_used: p,
                    last_used: p / 2,
                    total: Some(1 << 30),
                }),
            });
            r
        };
        let c = compare(&[
            report(Some(3 << 20)),
            report(Some(2 << 20)),
            report(None),
            report(Some(0)),
        ]);
        let row = c
            .rows
            .iter()
            .find(|r| r.figure == "NVML peak used bytes")
            .unwrap();
        assert_eq!(row.values[..2], [(3 << 20) as f64, (2 << 20) as f64]);
        assert!(row.values[2].is_nan());
        // Samples of the idle device only: n/a too, not a best 0 B.
        assert!(row.values[3].is_nan());
        assert_eq!(row.best, Some(1));
        assert!(render(&c).contains("NVML peak used bytes"));
    }

    #[test]
    fn not_applicable_is_drawn_and_serialized_as_such() {
        let c = Comparison {
            format_version: 1,
            labels: vec!["a".into(), "b".into()],
            sources: vec!["a.fpt".into(), "b.fpt".into()],
            rows: vec![Row::new(
                "smallest largest free block",
                Better::Higher,
                vec![f64::NAN, 2048.0],
                true,
            )],
        };
        let text = render(&c);
        assert!(text.contains("n/a"), "{text}");
        assert!(text.contains("2.00 KiB"), "{text}");
        let json = serde_json::to_value(&c).unwrap();
        assert!(json["rows"][0]["values"][0].is_null());
    }
}
