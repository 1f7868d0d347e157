//! `fragprobe compare`: the report's figures side by side, the better value per row marked.

use std::fmt::Write as _;

use serde::Serialize;

use super::text::bytes;
use super::Report;

/// Whether smaller or larger is better for a row.
#[derive(Clone, Copy)]
enum Better {
    Lower,
    Higher,
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
            "peak reserved (VMM) bytes",
            Better::Lower,
            |r| r.bytes.peak_reserved as f64,
            true,
        ),
        (
            "peak mapped (VMM) bytes",
            Better::Lower,
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
            |r| r.fragmentation.min_largest_free_block as f64,
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
        .map(|(name, better, f, _)| {
            let values: Vec<f64> = reports.iter().map(f).collect();
            let all_equal = values.windows(2).all(|w| w[0] == w[1]);
            let best = if all_equal || values.is_empty() {
                None
            } else {
                let it = values.iter().enumerate();
                match better {
                    Better::Lower => it.min_by(|a, b| a.1.total_cmp(b.1)).map(|x| x.0),
                    Better::Higher => it.max_by(|a, b| a.1.total_cmp(b.1)).map(|x| x.0),
                }
            };
            Row {
                figure: name.to_string(),
                values,
                best,
            }
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
    let is_bytes: Vec<bool> = rows().iter().map(|r| r.3).collect();
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
        .zip(is_bytes.iter())
        .map(|(r, &b)| {
            r.values
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    let s = if b {
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
