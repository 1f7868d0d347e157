//! The NVML sampler, shared by `watch`, `log`, `doctor` and the viewer.
//!
//! Layers, bottom up:
//! - [`query`]: the narrow [`query::Driver`]/[`query::Gpu`] interface and the adapter that
//!   turns its answers into a [`sample::Snapshot`] (every field may be "n/a"; nothing is
//!   fatal). [`real`] implements it over `nvml-wrapper`; tests implement fakes.
//! - [`source`]: opening NVML (driver, `--nvml-lib`, or the simulated GPU) and enriching a
//!   sample with `/proc` owners ([`procfs`]) and probe state ([`rings`], [`live`]).
//! - Users of samples: [`alert`] (threshold expressions with hysteresis), [`logfile`]
//!   (CSV/JSONL rows written by `log`, read by `plot` and `doctor`), [`prometheus`] (the
//!   textfile-collector exposition of `log --prometheus`), [`screen`] (the
//!   `watch` frame), [`chart`] (PNG plots), [`diagnose`] (the `doctor` verdicts) and
//!   [`evidence`] (what `doctor` feeds them).

pub mod alert;
pub mod chart;
pub mod diagnose;
pub mod evidence;
pub mod font;
pub mod live;
pub mod logfile;
pub mod procfs;
pub mod prometheus;
pub mod query;
pub mod real;
pub mod rings;
pub mod sample;
pub mod screen;
pub mod simulated;
pub mod source;
pub mod trace_evidence;
pub mod units;

pub use sample::{DeviceSample, Field, Memory, Na, ProcessSample, Snapshot};
pub use source::{Monitor, NvmlArgs};
