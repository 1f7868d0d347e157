//! Progress of a run's ingest, shared through atomics: the ingest thread writes, the UI
//! reads without locking.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// How far a run's ingest is.
#[derive(Debug, Default)]
pub struct Progress {
    done: AtomicU64,
    total: AtomicU64,
    finished: AtomicBool,
    history_pending: AtomicBool,
    history_done: AtomicU64,
    error: Mutex<Option<String>>,
}

impl Progress {
    /// Records applied so far.
    pub fn done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }
    /// Records expected (0 when unknown: live).
    pub fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }
    /// Whether the source is exhausted (a trace fully read, a live feed ended).
    pub fn finished(&self) -> bool {
        self.finished.load(Ordering::Acquire)
    }
    /// 0..=1 when the total is known.
    pub fn fraction(&self) -> Option<f32> {
        let t = self.total();
        (t > 0).then(|| (self.done() as f64 / t as f64).min(1.0) as f32)
    }
    /// Whether the time series cover the whole run. A trace with checkpoints opens from
    /// its last checkpoint first (figures, map and events are exact at once) and replays
    /// its whole history afterwards for the timelines.
    pub fn history_ready(&self) -> bool {
        self.finished() && !self.history_pending.load(Ordering::Acquire)
    }
    /// Records replayed for the timelines so far (while the history is pending).
    pub fn history_done(&self) -> u64 {
        self.history_done.load(Ordering::Relaxed)
    }
    /// Why the ingest stopped, if it failed.
    pub fn error(&self) -> Option<String> {
        self.error.lock().ok().and_then(|e| e.clone())
    }

    pub(crate) fn set_total(&self, n: u64) {
        self.total.store(n, Ordering::Relaxed);
    }
    pub(crate) fn set_done(&self, n: u64) {
        self.done.store(n, Ordering::Relaxed);
    }
    pub(crate) fn set_history_pending(&self, pending: bool) {
        self.history_pending.store(pending, Ordering::Release);
    }
    pub(crate) fn set_history_done(&self, n: u64) {
        self.history_done.store(n, Ordering::Relaxed);
    }
    pub(crate) fn finish(&self) {
        self.finished.store(true, Ordering::Release);
    }
    pub(crate) fn fail(&self, msg: String) {
        if let Ok(mut e) = self.error.lock() {
            *e = Some(msg);
        }
        self.set_history_pending(false);
        self.finish();
    }
}
