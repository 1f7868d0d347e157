//! A hand-off queue for records produced elsewhere in the program: `run --view` and
//! `attach --view` drain rings on their own thread (writing the trace) and push every
//! record here; the viewer's ingest thread takes them in batches.

use std::sync::{Arc, Mutex};

use fragprobe_shared::format::Record;

#[derive(Default)]
struct Queue {
    records: Vec<Record>,
    metas: Vec<(u32, u64, Arc<[u8]>)>,
    dropped: u64,
    closed: bool,
}

struct Shared {
    name: String,
    queue: Mutex<Queue>,
}

/// The producing end. Dropping it tells the viewer the feed has ended.
pub struct FeedSender {
    shared: Arc<Shared>,
}

/// The consuming end, given to the viewer as [`Source::Feed`](super::Source::Feed).
pub struct FeedReceiver {
    shared: Arc<Shared>,
}

/// A new feed called `name` (shown as the run's name until its metadata gives a label).
pub fn feed(name: &str) -> (FeedSender, FeedReceiver) {
    let shared = Arc::new(Shared {
        name: name.to_string(),
        queue: Mutex::new(Queue::default()),
    });
    (
        FeedSender {
            shared: shared.clone(),
        },
        FeedReceiver { shared },
    )
}

impl FeedSender {
    /// Queues one record and, when it points at one, the metadata entry's bytes (what
    /// `Recorder::meta_of` returns).
    pub fn send(&self, r: &Record, meta: Option<&[u8]>) {
        if let Ok(mut q) = self.shared.queue.lock() {
            q.records.push(*r);
            if let (Some(m), true) = (meta, r.meta != 0) {
                q.metas.push((r.pid, r.meta, Arc::from(m)));
            }
        }
    }

    /// Reports the events lost so far (ring full), for the viewer's drop banner.
    pub fn set_dropped(&self, total: u64) {
        if let Ok(mut q) = self.shared.queue.lock() {
            q.dropped = total;
        }
    }
}

impl Drop for FeedSender {
    fn drop(&mut self) {
        if let Ok(mut q) = self.shared.queue.lock() {
            q.closed = true;
        }
    }
}

/// What one [`FeedReceiver::take`] got.
#[derive(Default)]
pub struct Taken {
    /// Records, in the order they were sent.
    pub records: Vec<Record>,
    /// Metadata entries `(pid, meta_ref, bytes)`.
    pub metas: Vec<(u32, u64, Arc<[u8]>)>,
    /// Events lost so far, per the sender.
    pub dropped: u64,
    /// The sender is gone and everything was taken.
    pub closed: bool,
}

impl FeedReceiver {
    /// The feed's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// Takes everything queued so far.
    pub fn take(&self) -> Taken {
        let Ok(mut q) = self.shared.queue.lock() else {
            return Taken {
                closed: true,
                ..Taken::default()
            };
        };
        Taken {
            records: std::mem::take(&mut q.records),
            metas: std::mem::take(&mut q.metas),
            dropped: q.dropped,
            closed: q.closed,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_and_metas_arrive_in_order_then_close() {
        let (tx, rx) = feed("t");
        tx.send(
            &Record {
                seq: 1,
                ..Record::default()
            },
            None,
        );
        tx.send(
            &Record {
                seq: 2,
                meta: 9,
                pid: 4,
                ..Record::default()
            },
            Some(b"abc"),
        );
        tx.set_dropped(3);
        let t = rx.take();
        assert_eq!(
            t.records.iter().map(|r| r.seq).collect::<Vec<_>>(),
            vec![1, 2]
        );
        assert_eq!(t.metas.len(), 1);
        assert_eq!(
            (t.metas[0].0, t.metas[0].1, &*t.metas[0].2),
            (4, 9, &b"abc"[..])
        );
        assert_eq!(t.dropped, 3);
        assert!(!t.closed);
        drop(tx);
        let t = rx.take();
        assert!(t.records.is_empty() && t.closed);
    }
}
