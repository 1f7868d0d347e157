//! The model side of recording: every drained record goes into one model, and a
//! checkpoint of it goes into the trace every [`CHECKPOINT_EVERY`] records so the viewer
//! can seek in long traces.

use fragprobe_shared::format::Record;
use fragprobe_shared::model::Model;

use super::Recorder;
use crate::pipeline::FeedSender;
use crate::report::Report;

/// Write a model checkpoint into the trace every this many records.
pub const CHECKPOINT_EVERY: u64 = 1 << 20;

/// Feeds a model from recorder callbacks and writes checkpoints.
pub struct ModelSink {
    /// The model.
    pub model: Model,
    /// First and last timestamps seen.
    pub first_ns: u64,
    /// Last timestamp.
    pub last_ns: u64,
    since_checkpoint: u64,
    pending_checkpoint: bool,
    /// The live viewer's feed, when one is open: every record goes there too.
    pub feed: Option<FeedSender>,
}

impl Default for ModelSink {
    fn default() -> ModelSink {
        ModelSink {
            model: Model::new(),
            first_ns: u64::MAX,
            last_ns: 0,
            since_checkpoint: 0,
            pending_checkpoint: false,
            feed: None,
        }
    }
}

impl ModelSink {
    /// Applies one record from the recorder.
    pub fn apply(&mut self, r: &Record, rec: &Recorder) {
        let meta = if r.meta != 0 { rec.meta_of(r) } else { None };
        fragprobe_shared::replay::one(&mut self.model, r, meta);
        if let Some(f) = &self.feed {
            f.send(r, meta);
            f.set_dropped(rec.lost());
        }
        if r.ts_ns != 0 {
            self.first_ns = self.first_ns.min(r.ts_ns);
            self.last_ns = self.last_ns.max(r.ts_ns);
        }
        self.since_checkpoint += 1;
        if self.since_checkpoint >= CHECKPOINT_EVERY {
            self.since_checkpoint = 0;
            self.pending_checkpoint = true;
        }
    }

    /// Writes a checkpoint if one is due.
    pub fn checkpoint_if_due(&mut self, rec: &mut Recorder) -> anyhow::Result<()> {
        if self.pending_checkpoint {
            self.pending_checkpoint = false;
            let bytes = self.model.checkpoint();
            rec.write_trace(|w| {
                let at = w.events_written();
                w.write_checkpoint(at, &bytes)
            });
        }
        Ok(())
    }

    /// The report of what was recorded.
    pub fn report(&self, source: &str) -> Report {
        let first = if self.first_ns == u64::MAX {
            0
        } else {
            self.first_ns
        };
        Report::build(&self.model, source, Vec::new(), first, self.last_ns)
    }
}
