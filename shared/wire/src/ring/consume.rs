//! The consumer side: draining committed records in order, skipping slots a dead producer
//! claimed, reading metadata, heartbeats and the one-consumer claim.

use super::*;

impl Ring {
    /// Takes the next record, if committed. Only one consumer may pop (see
    /// [`Ring::acquire_consumer`]).
    pub fn pop(&self) -> Pop {
        let head = self.word(OFF_HEAD);
        let pos = head.load(Ordering::Relaxed);
        let st = self.state(pos);
        // Acquire pairs with the producer's release CAS in commit: the record words are
        // visible once we see `pos + 1`.
        let s = st.load(Ordering::Acquire);
        if s == pos.wrapping_add(1) {
            let rec = self.read_slot(pos);
            // Release: our reads of the slot happen before the next lap's producer writes.
            st.store(pos.wrapping_add(self.cap), Ordering::Release);
            head.store(pos.wrapping_add(1), Ordering::Release);
            Pop::Record(rec)
        } else if s == pos && self.word(OFF_TAIL).load(Ordering::Acquire) <= pos {
            Pop::Empty
        } else {
            // Claimed and not committed (or an inconsistent state word, e.g. a second
            // consumer popped concurrently): skip_pending can clear it.
            Pop::Pending { seq: pos }
        }
    }

    /// Gives up on position `seq`, claimed by a producer that will never commit it (its
    /// process died). Returns `true` when the slot was skipped: the event is lost (counted
    /// in [`Ring::skipped`]) and the consumer moves on. Returns `false` when `seq` is not the
    /// consumer's position, when it was committed meanwhile (pop it), or when nobody
    /// claimed it.
    pub fn skip_pending(&self, seq: u64) -> bool {
        let head = self.word(OFF_HEAD);
        if head.load(Ordering::Relaxed) != seq {
            return false;
        }
        // Only a claimed slot may be skipped: skipping an unclaimed one would leave a state
        // that no producer accepts for position `seq`.
        if self.word(OFF_TAIL).load(Ordering::Acquire) <= seq {
            return false;
        }
        let st = self.state(seq);
        let s = st.load(Ordering::Acquire);
        if s == seq.wrapping_add(1) {
            return false;
        }
        // AcqRel: a failed race with the producer's commit must be seen as such; on success
        // the release makes the slot reusable for the next lap like a normal pop.
        match st.compare_exchange(
            s,
            seq.wrapping_add(self.cap),
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => {
                head.store(seq.wrapping_add(1), Ordering::Release);
                self.word(OFF_SKIPPED).fetch_add(1, Ordering::Relaxed);
                true
            }
            Err(_) => false,
        }
    }

    /// Delivers up to `max` committed records in order to `out`; stops at an empty or
    /// pending slot, and (with [`DrainEnd::Max`]) before the first record that may depend
    /// on a drop the consumer has not accounted for, i.e. as soon as
    /// [`Ring::dropped`] exceeds `seen_dropped`. The caller then records the loss and resyncs
    /// ([`resync_records`](crate::live::resync_records)) before delivering more, so that, say,
    /// the free of an allocation whose event was dropped comes after the loss marker.
    ///
    /// Why this is enough: a producer increments the drop counter before it commits any
    /// later event, and the consumer reads the counter after acquiring each record, so a
    /// record that happens after a drop (same thread, or synchronised by the program) is
    /// never delivered before the drop is visible.
    pub fn drain_until_drop(
        &self,
        max: usize,
        seen_dropped: u64,
        out: &mut impl FnMut(&Record),
    ) -> DrainStatus {
        let head = self.word(OFF_HEAD);
        let dropped = self.word(OFF_DROPPED);
        let mut pos = head.load(Ordering::Relaxed);
        let mut count = 0;
        while count < max {
            let st = self.state(pos);
            let s = st.load(Ordering::Acquire);
            if s != pos.wrapping_add(1) {
                let end = if s == pos && self.word(OFF_TAIL).load(Ordering::Acquire) <= pos {
                    DrainEnd::Empty
                } else {
                    DrainEnd::Pending { seq: pos }
                };
                return DrainStatus { count, end };
            }
            // After the acquire above: sees every drop that happened before this commit.
            if dropped.load(Ordering::Relaxed) > seen_dropped {
                break;
            }
            let rec = self.read_slot(pos);
            st.store(pos.wrapping_add(self.cap), Ordering::Release);
            pos = pos.wrapping_add(1);
            head.store(pos, Ordering::Release);
            out(&rec);
            count += 1;
        }
        DrainStatus {
            count,
            end: DrainEnd::Max,
        }
    }

    /// Events refused because the ring was full (they have no sequence number).
    pub fn dropped(&self) -> u64 {
        // Acquire pairs with the release in `Full`'s drop: the dropping producer's
        // live-table update is visible to a consumer that sees its drop.
        self.word(OFF_DROPPED).load(Ordering::Acquire)
    }

    /// Whether every position from the consumer's head up to `end` is committed: the
    /// producers of those events are done with them, live-table updates included. A
    /// resync waits for this below its watermark (see [`crate::live`], Resync).
    pub fn committed_below(&self, end: u64) -> bool {
        let mut pos = self.word(OFF_HEAD).load(Ordering::Relaxed);
        while (end.wrapping_sub(pos) as i64) > 0 {
            // Acquire pairs with the producer's release in commit.
            if self.state(pos).load(Ordering::Acquire) != pos.wrapping_add(1) {
                return false;
            }
            pos = pos.wrapping_add(1);
        }
        true
    }

    /// Claimed slots the consumer gave up on with [`Ring::skip_pending`] (sequence gaps).
    pub fn skipped(&self) -> u64 {
        self.word(OFF_SKIPPED).load(Ordering::Relaxed)
    }

    /// Producers' claim position: the next sequence number to be handed out.
    pub fn tail(&self) -> u64 {
        self.word(OFF_TAIL).load(Ordering::Acquire)
    }

    /// The consumer's position: the next sequence number it will deliver.
    pub fn head(&self) -> u64 {
        self.word(OFF_HEAD).load(Ordering::Acquire)
    }

    /// Capacity in records.
    pub fn capacity(&self) -> u64 {
        self.cap
    }

    /// The metadata entry that [`Record::meta`] value `meta_ref` points at (padded to 8
    /// bytes); `None` when the reference is 0, out of range or not yet written. Copy out
    /// what you keep: the producer never rewrites an entry, but the mapping may go away.
    pub fn meta(&self, meta_ref: u64) -> Option<&[u8]> {
        let off = meta_ref.checked_sub(1)? as usize;
        let cursor = self.word(OFF_META_CURSOR).load(Ordering::Acquire) as usize;
        if !off.is_multiple_of(8) || off + crate::format::META_HEADER > cursor.min(self.meta_bytes)
        {
            return None;
        }
        // SAFETY: off is 8-aligned and inside the meta area.
        let len_word = unsafe { &*(self.meta.add(off) as *const AtomicU32) };
        // Acquire pairs with the release store in write_meta: the entry bytes are visible.
        let len = len_word.load(Ordering::Acquire) as usize;
        if len < crate::format::META_HEADER || off + len > self.meta_bytes {
            return None;
        }
        let padded = ((len + 7) & !7).min(self.meta_bytes - off);
        // SAFETY: off..off+padded is inside the meta area and fully written (len word seen).
        Some(unsafe { core::slice::from_raw_parts(self.meta.add(off), padded) })
    }

    /// The meta area up to the cursor. The last entry may still be being written (its
    /// length word is then 0): parse entries in order and stop at a zero length.
    pub fn meta_area(&self) -> &[u8] {
        let cursor = self.word(OFF_META_CURSOR).load(Ordering::Acquire) as usize;
        // SAFETY: the cursor never exceeds meta_bytes (write_meta checks), clamped anyway.
        unsafe { core::slice::from_raw_parts(self.meta, cursor.min(self.meta_bytes)) }
    }

    /// Records the consumer's liveness (CLOCK_MONOTONIC ns).
    pub fn heartbeat(&self, now_ns: u64) {
        self.word(OFF_HEARTBEAT).store(now_ns, Ordering::Release);
    }

    /// The consumer's last heartbeat (0 = never).
    pub fn heartbeat_ns(&self) -> u64 {
        self.word(OFF_HEARTBEAT).load(Ordering::Acquire)
    }

    /// Becomes the ring's one consumer: sets [`CONSUMER_ATTACHED`] and the heartbeat. Fails
    /// while another consumer is attached and heartbeated within `stale_after_ns`; a consumer
    /// whose heartbeat is older is presumed dead and replaced.
    pub fn acquire_consumer(&self, now_ns: u64, stale_after_ns: u64) -> bool {
        let flags = self.flags_word();
        let prev = flags.fetch_or(CONSUMER_ATTACHED, Ordering::AcqRel);
        if prev & CONSUMER_ATTACHED == 0 {
            self.heartbeat(now_ns);
            return true;
        }
        let hb = self.word(OFF_HEARTBEAT);
        let last = hb.load(Ordering::Acquire);
        if now_ns.saturating_sub(last) > stale_after_ns {
            // Take over; the CAS makes sure only one of two racing takers wins.
            return hb
                .compare_exchange(last, now_ns, Ordering::AcqRel, Ordering::Acquire)
                .is_ok();
        }
        false
    }

    /// Stops being the consumer (clears [`CONSUMER_ATTACHED`]).
    pub fn release_consumer(&self) {
        self.clear_flag(CONSUMER_ATTACHED);
    }
}
