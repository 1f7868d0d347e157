//! The producer side: claiming a slot, committing a record, appending metadata. Every
//! function here is allocation-free, lock-free and panic-free (the probe calls them from
//! inside allocation hooks).

use super::*;

impl Ring {
    /// Claims the next slot. `None` when the ring is full: the event is counted in
    /// [`Ring::dropped`]. Never blocks (lock-free: it retries only when another producer
    /// made progress).
    #[inline]
    pub fn claim(&self) -> Option<Claim<'_>> {
        // A refusal dropped at once is counted at once.
        self.try_claim().ok()
    }

    /// [`Ring::claim`] for an event that also updates the live table: when the ring is
    /// full, the drop is counted only when the returned [`Full`] is dropped. A producer
    /// keeps it until its live-table update is done, so a consumer that sees the drop
    /// and resyncs finds that update in the table (see [`crate::live`], Resync).
    #[inline]
    pub fn try_claim(&self) -> Result<Claim<'_>, Full<'_>> {
        let tail = self.word(OFF_TAIL);
        let mut pos = tail.load(Ordering::Relaxed);
        loop {
            // Acquire pairs with the consumer's release store of `pos` into this state
            // (when it consumed last lap's record): its reads of the slot happen before our
            // writes.
            let s = self.state(pos).load(Ordering::Acquire);
            if s == pos {
                // Relaxed is enough: the CAS only decides which producer owns `pos`; the
                // ordering that matters is the acquire above and the release in commit.
                match tail.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        return Ok(Claim {
                            ring: self,
                            pos,
                            done: false,
                        })
                    }
                    Err(now) => pos = now,
                }
            } else if (s.wrapping_sub(pos) as i64) < 0 {
                // The slot still holds (or is still being written for) the previous lap:
                // the ring is full. Give up, never wait; `Full` counts the drop.
                return Err(Full { ring: self });
            } else {
                // Another producer took `pos` already; catch up. Its claim of the tail came
                // before its commit, which the acquire above saw, so the tail has moved. A
                // tail that has not means the ring's memory was overwritten from outside:
                // drop the event rather than spin in the host forever.
                let now = tail.load(Ordering::Relaxed);
                if now == pos {
                    return Err(Full { ring: self });
                }
                pos = now;
            }
        }
    }

    /// Claims a slot and commits `rec` into it (its `seq` is set to the position).
    /// `false` when the ring was full (counted in [`Ring::dropped`]).
    #[inline]
    pub fn push(&self, rec: Record) -> bool {
        match self.claim() {
            Some(c) => {
                c.commit(rec);
                true
            }
            None => false,
        }
    }

    fn commit_at(&self, pos: u64, mut rec: Record) {
        rec.seq = pos;
        self.write_slot(pos, &rec);
        // Release publishes the record words written above to the consumer's acquire load.
        // The CAS fails only if the consumer gave up on this slot (skip_pending): the event
        // was already counted as skipped, so nothing else to do.
        let _ = self.state(pos).compare_exchange(
            pos,
            pos.wrapping_add(1),
            Ordering::Release,
            Ordering::Relaxed,
        );
    }

    /// Appends an encoded metadata entry (the output of
    /// [`MetaWriter`](crate::format::MetaWriter)); returns its reference (`offset + 1`, for
    /// [`Record::meta`]), or `None` when the entry is malformed or does not fit.
    pub fn write_meta(&self, entry: &[u8]) -> Option<u64> {
        if entry.len() < crate::format::META_HEADER {
            return None;
        }
        let declared = u32::from_le_bytes([entry[0], entry[1], entry[2], entry[3]]) as usize;
        if declared < crate::format::META_HEADER || declared > entry.len() {
            return None;
        }
        let padded = (entry.len() + 7) & !7;
        let cursor = self.word(OFF_META_CURSOR);
        let mut off = cursor.load(Ordering::Relaxed);
        loop {
            let end = off.checked_add(padded as u64)?;
            if end > self.meta_bytes as u64 {
                return None;
            }
            // Relaxed: the cursor only hands out disjoint ranges; the entry is published by
            // the release store of its length word below.
            match cursor.compare_exchange_weak(off, end, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => break,
                Err(now) => off = now,
            }
        }
        let off = off as usize;
        // SAFETY: off..off+padded is inside the meta area (checked above) and was handed out
        // to us alone by the cursor CAS; entry.len() <= padded.
        unsafe {
            core::ptr::copy_nonoverlapping(
                entry.as_ptr().add(4),
                self.meta.add(off + 4),
                entry.len() - 4,
            );
        }
        // SAFETY: off is a multiple of 8 inside the meta area, which starts 64-aligned.
        let len_word = unsafe { &*(self.meta.add(off) as *const AtomicU32) };
        len_word.store(declared as u32, Ordering::Release);
        Some(off as u64 + 1)
    }
}

/// A claimed slot. [`Claim::commit`] publishes a record into it; dropping it uncommitted
/// publishes a void record (kind 0) so the consumer never waits on it.
#[must_use = "a claim that is dropped publishes a void record"]
pub struct Claim<'a> {
    ring: &'a Ring,
    pos: u64,
    done: bool,
}

impl Claim<'_> {
    /// The sequence number (ring position) the record will get.
    pub fn seq(&self) -> u64 {
        self.pos
    }

    /// Writes `rec` (with `seq` set to [`Claim::seq`]) and publishes it.
    #[inline]
    pub fn commit(mut self, rec: Record) {
        self.done = true;
        self.ring.commit_at(self.pos, rec);
    }
}

/// A claim refused because the ring was full (see [`Ring::try_claim`]). Dropping it counts
/// the event in [`Ring::dropped`].
#[must_use = "dropping it counts the drop: keep it until the live table is updated"]
pub struct Full<'a> {
    ring: &'a Ring,
}

impl Drop for Full<'_> {
    fn drop(&mut self) {
        // Release: whatever the producer did before (its live-table update) is visible to
        // a consumer that acquires the count.
        self.ring.word(OFF_DROPPED).fetch_add(1, Ordering::Release);
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        if !self.done {
            let void = Record {
                pid: self.ring.pid(),
                ..Record::default()
            };
            self.ring.commit_at(self.pos, void);
        }
    }
}
