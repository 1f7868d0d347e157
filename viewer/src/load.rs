//! Opening inputs for the headless commands: a trace file (or a PyTorch snapshot) replayed
//! into the model, with a progress bar for large files and actionable errors.

use std::path::Path;

use anyhow::Context;
use fragprobe_shared::model::Model;
use fragprobe_shared::trace::{Trace, TraceError};

use crate::exit;

/// An error that carries the exit code documented in [`crate::exit`].
#[derive(Debug)]
pub struct CodedError {
    /// Exit code.
    pub code: u8,
    /// One line for the user.
    pub message: String,
}

impl std::fmt::Display for CodedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for CodedError {}

impl CodedError {
    /// An error that exits with `code`.
    pub fn new(code: u8, message: impl Into<String>) -> CodedError {
        CodedError {
            code,
            message: message.into(),
        }
    }
}

/// Maps a trace error to its exit code.
pub fn coded(e: TraceError) -> CodedError {
    let code = match &e {
        TraceError::Io { .. } => exit::NO_INPUT,
        TraceError::Version { .. } => exit::VERSION,
        _ => exit::BAD_INPUT,
    };
    CodedError {
        code,
        message: e.to_string(),
    }
}

/// A replayed trace.
pub struct Loaded {
    /// The trace itself (records stay in the file mapping).
    pub trace: Trace,
    /// The model after every record.
    pub model: Model,
    /// Warnings (truncation and such), one line each.
    pub warnings: Vec<String>,
    /// Timestamp of the first and last record.
    pub first_ns: u64,
    /// Timestamp of the last record.
    pub last_ns: u64,
}

fn progress(len: u64, quiet: bool) -> Option<indicatif::ProgressBar> {
    if quiet || len < 2_000_000 || std::env::var_os("NO_PROGRESS").is_some() {
        return None;
    }
    let pb = indicatif::ProgressBar::new(len);
    let style = if std::env::var_os("NO_COLOR").is_some() {
        "{msg} [{bar:40}] {pos}/{len} events ({eta})"
    } else {
        "{msg} [{bar:40.cyan/blue}] {pos}/{len} events ({eta})"
    };
    if let Ok(s) = indicatif::ProgressStyle::with_template(style) {
        pb.set_style(s.progress_chars("=> "));
    }
    pb.set_message("replaying");
    Some(pb)
}

/// Replays every record of `trace` into a fresh model (the one replay,
/// [`fragprobe_shared::replay`], with a progress bar as its observer).
pub fn replay(trace: &Trace, quiet: bool) -> (Model, u64, u64) {
    let mut model = Model::new();
    let pb = progress(trace.len(), quiet);
    let mut n = 0u64;
    let span = fragprobe_shared::replay::trace(trace, &mut model, |_, _| {
        n += 1;
        if n.is_multiple_of(1 << 20) {
            if let Some(pb) = &pb {
                pb.set_position(n);
            }
        }
    });
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    (model, span.first_ns, span.last_ns)
}

/// Opens and replays a trace file.
pub fn load(path: &Path, quiet: bool) -> Result<Loaded, CodedError> {
    let trace = Trace::open(path).map_err(coded)?;
    let warnings = trace.warnings().to_vec();
    let (model, first_ns, last_ns) = replay(&trace, quiet);
    Ok(Loaded {
        trace,
        model,
        warnings,
        first_ns,
        last_ns,
    })
}

/// Turns any error into (exit code, message).
pub fn exit_code_of(e: &anyhow::Error) -> u8 {
    e.downcast_ref::<CodedError>()
        .map(|c| c.code)
        .unwrap_or(exit::INTERNAL)
}

/// Reads a whole file, naming it in the error.
pub fn read(path: &Path) -> anyhow::Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}
