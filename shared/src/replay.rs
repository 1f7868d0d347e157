//! The one replay: records, each with the metadata entry it points at, applied in order to
//! one [`Model`], with an observer called after each record. Every consumer of a trace —
//! `report`, `compare`, `export`, `doctor`, `plot`, the viewer's loader, its time cursor
//! and the recorder's summary — goes through here, so they all see the same model after
//! the same record.
//!
//! Sources differ only in where records and metadata live: a mapped trace file
//! ([`trace`], [`chunk`]), or records held one by one with their metadata's bytes (live
//! rings, the viewer's event log: [`one`]).

use std::convert::Infallible;

use crate::format::{MetaEntry, Record};
use crate::model::Model;
use crate::trace::Trace;

/// The time a replay covered: the first and last non-zero record timestamps (both 0 when no
/// record had a time).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Span {
    /// CLOCK_MONOTONIC ns of the earliest record.
    pub first_ns: u64,
    /// CLOCK_MONOTONIC ns of the latest record.
    pub last_ns: u64,
}

impl Span {
    /// Widens the span to `ts_ns` (0, "no time", is ignored).
    pub fn see(&mut self, ts_ns: u64) {
        if ts_ns == 0 {
            return;
        }
        if self.first_ns == 0 || ts_ns < self.first_ns {
            self.first_ns = ts_ns;
        }
        self.last_ns = self.last_ns.max(ts_ns);
    }

    /// Nanoseconds from the first to the last record.
    pub fn duration_ns(&self) -> u64 {
        self.last_ns.saturating_sub(self.first_ns)
    }
}

/// Replays every record of `trace` into `model`, calling `observe` with the model after each.
pub fn trace(trace: &Trace, model: &mut Model, mut observe: impl FnMut(&Model, &Record)) -> Span {
    let r: Result<Span, Infallible> = try_trace(trace, model, |m, r| {
        observe(m, r);
        Ok(())
    });
    match r {
        Ok(span) => span,
        Err(never) => match never {},
    }
}

/// [`trace`] with an observer that can fail (an exporter whose output went away): the
/// replay stops at the first error and returns it.
pub fn try_trace<E>(
    trace: &Trace,
    model: &mut Model,
    mut observe: impl FnMut(&Model, &Record) -> Result<(), E>,
) -> Result<Span, E> {
    let mut span = Span::default();
    let mut failed = None;
    for recs in trace.record_chunks() {
        chunk(trace, model, recs, |m, r| {
            span.see(r.ts_ns);
            if failed.is_none() {
                if let Err(e) = observe(m, r) {
                    failed = Some(e);
                }
            }
        });
        if let Some(e) = failed {
            return Err(e);
        }
    }
    Ok(span)
}

/// Applies `recs`, read in place from `trace`, with the metadata each points at, through the
/// model's batch path (which loads what the records ahead will touch while one is applied).
/// The viewer's loader calls this chunk by chunk to show progress.
pub fn chunk(
    trace: &Trace,
    model: &mut Model,
    recs: &[Record],
    observe: impl FnMut(&Model, &Record),
) {
    model.apply_batch_with(recs, |r| trace.meta_of(r), observe);
}

/// Applies one record whose metadata entry, if it has one, is given as its encoded bytes
/// (bytes that do not parse are treated as no entry, as a trace reader would).
pub fn one(model: &mut Model, r: &Record, meta: Option<&[u8]>) {
    let entry = meta.and_then(MetaEntry::parse);
    model.apply_with_meta(r, entry.as_ref());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_span_ignores_records_without_a_time() {
        let mut s = Span::default();
        for t in [0, 50, 0, 20, 90, 0] {
            s.see(t);
        }
        assert_eq!(
            s,
            Span {
                first_ns: 20,
                last_ns: 90
            }
        );
        assert_eq!(s.duration_ns(), 70);
        assert_eq!(Span::default().duration_ns(), 0);
    }
}
