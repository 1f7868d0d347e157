//! The records a run has seen, in arrival order: what the events list shows and what the
//! rewinder replays from a checkpoint.

use fragprobe_shared::format::Record;

/// Random access to a run's records.
pub trait EventLog: Send + Sync {
    /// Records available.
    fn len(&self) -> usize;
    /// Whether there are none.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Record `i` (0-based, arrival order).
    fn get(&self, i: usize) -> Option<Record>;
    /// Index of the first record whose time is after `t_ns` (records are in time order
    /// per process; the search treats the log as sorted, which the ingest guarantees by
    /// stamping records with non-decreasing times).
    fn partition_by_time(&self, t_ns: u64) -> usize {
        let (mut lo, mut hi) = (0usize, self.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.get(mid) {
                Some(r) if r.ts_ns <= t_ns => lo = mid + 1,
                _ => hi = mid,
            }
        }
        lo
    }
}

const CHUNK: usize = 1 << 16;

/// Records kept in memory, in fixed-size chunks so appending never copies old records.
#[derive(Default)]
pub struct MemLog {
    chunks: Vec<Vec<Record>>,
    len: usize,
}

impl MemLog {
    /// Appends one record.
    pub fn push(&mut self, r: Record) {
        if self.chunks.last().is_none_or(|c| c.len() == CHUNK) {
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        if let Some(c) = self.chunks.last_mut() {
            c.push(r);
            self.len += 1;
        }
    }
}

impl EventLog for MemLog {
    fn len(&self) -> usize {
        self.len
    }
    fn get(&self, i: usize) -> Option<Record> {
        self.chunks.get(i / CHUNK)?.get(i % CHUNK).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_index_and_time_search() {
        let mut l = MemLog::default();
        for i in 0..(CHUNK as u64 * 2 + 5) {
            l.push(Record {
                seq: i,
                ts_ns: i / 2,
                ..Record::default()
            });
        }
        assert_eq!(l.len(), CHUNK * 2 + 5);
        assert_eq!(l.get(CHUNK + 3).unwrap().seq, CHUNK as u64 + 3);
        assert!(l.get(CHUNK * 2 + 5).is_none());
        assert_eq!(l.partition_by_time(0), 2);
        assert_eq!(l.partition_by_time(10), 22);
        assert_eq!(l.partition_by_time(u64::MAX), l.len());
    }
}
