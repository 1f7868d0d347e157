//! The time cursor's model, built on a background thread ("fragprobe-rewind"): moving
//! forward applies the records in between; moving back restores the nearest checkpoint at
//! or before the target and replays from there. A new target interrupts the work between
//! small batches, so scrubbing stays responsive.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use fragprobe_shared::format::Record;
use fragprobe_shared::model::Model;

use super::run::{Cursor, Run, BATCH};

type Batch = Vec<(Record, Option<Arc<[u8]>>)>;

fn apply(model: &mut Model, batch: &Batch) {
    for (r, m) in batch {
        fragprobe_shared::replay::one(model, r, m.as_deref());
    }
}

/// The wanted index and its serial, or `None` when the thread should stop.
fn wait_for_work(run: &Run, done_serial: u64) -> Option<(Option<usize>, u64)> {
    let mut t = run.target.lock().ok()?;
    while t.serial == done_serial && !run.stop.load(Ordering::Acquire) {
        t = run.target_cv.wait(t).ok()?;
    }
    if run.stop.load(Ordering::Acquire) {
        return None;
    }
    Some((t.want, t.serial))
}

fn serial_now(run: &Run) -> u64 {
    run.target.lock().map(|t| t.serial).unwrap_or(u64::MAX)
}

/// The rewinder thread's body.
pub(crate) fn rewinder(run: &Run) {
    let mut done_serial = 0;
    while let Some((want, serial)) = wait_for_work(run, done_serial) {
        run.rewinding.store(true, Ordering::Release);
        let finished = match want {
            None => {
                let mut c = run.cursor.write().unwrap_or_else(|p| p.into_inner());
                *c = None;
                drop(c);
                run.cursor_gen.fetch_add(1, Ordering::Release);
                true
            }
            Some(target) => seek(run, target, serial),
        };
        if finished {
            done_serial = serial;
            run.rewinding.store(false, Ordering::Release);
        }
    }
}

/// Brings the cursor model to `target`; false when interrupted by a newer target.
fn seek(run: &Run, target: usize, serial: u64) -> bool {
    let target = target.min(run.head().applied());
    let current = run.cursor().as_ref().map(|c| c.index);
    let mut batch = Batch::with_capacity(BATCH);
    if let Some(mut at) = current.filter(|&c| c <= target) {
        // Forward in place, one batch per write lock.
        while at < target {
            if serial_now(run) != serial {
                return false;
            }
            let to = (at + BATCH).min(target);
            batch.clear();
            run.head().copy(at, to, &mut batch);
            let mut c = run.cursor.write().unwrap_or_else(|p| p.into_inner());
            if let Some(cur) = c.as_mut() {
                apply(&mut cur.model, &batch);
                cur.index = to;
            }
            drop(c);
            run.cursor_gen.fetch_add(1, Ordering::Release);
            at = to;
        }
        return true;
    }
    // Back: the nearest checkpoint at or before the target, then replay privately.
    let start = {
        let h = run.head();
        h.checkpoints()
            .iter()
            .rev()
            .find(|(i, _)| *i <= target)
            .cloned()
    };
    let (mut model, mut at) = match start.and_then(|(i, b)| Model::restore(&b).ok().map(|m| (m, i)))
    {
        Some(x) => x,
        None => (Model::new(), 0),
    };
    while at < target {
        if serial_now(run) != serial {
            return false;
        }
        let to = (at + BATCH).min(target);
        batch.clear();
        run.head().copy(at, to, &mut batch);
        apply(&mut model, &batch);
        at = to;
    }
    let mut c = run.cursor.write().unwrap_or_else(|p| p.into_inner());
    *c = Some(Cursor {
        model,
        index: target,
    });
    drop(c);
    run.cursor_gen.fetch_add(1, Ordering::Release);
    true
}
