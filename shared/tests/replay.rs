//! The one replay (`fragprobe_shared::replay`) builds the same model as applying each
//! record with its metadata by hand, calls its observer once per record with the model
//! after that record, and stops at the first observer error.

use fragprobe_shared::model::Model;
use fragprobe_shared::replay;
use fragprobe_shared::trace::Trace;

fn fixture() -> Trace {
    let p = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../tests/fixtures/format-v1.fpt"
    );
    Trace::open(p).expect("the frozen version-1 trace")
}

fn by_hand(trace: &Trace) -> (Model, Vec<u64>) {
    let mut m = Model::new();
    let mut events = Vec::new();
    for r in trace.records() {
        m.apply_with_meta(&r, trace.meta_of(&r).as_ref());
        events.push(m.counts().events);
    }
    (m, events)
}

#[test]
fn replay_equals_applying_each_record_with_its_metadata() {
    let t = fixture();
    let (want, want_events) = by_hand(&t);
    let mut got = Model::new();
    let mut seen = Vec::new();
    let span = replay::trace(&t, &mut got, |m, r| {
        seen.push(m.counts().events);
        assert!(r.kind != 0);
    });
    assert_eq!(seen, want_events, "observed after each record, in order");
    assert_eq!(
        got.checkpoint(),
        want.checkpoint(),
        "the same model, byte for byte"
    );
    assert!(got.processes().len() == 7 && got.shown_devices().count() == 2);
    let first = t.records().map(|r| r.ts_ns).filter(|&t| t != 0).min();
    let last = t.records().map(|r| r.ts_ns).max();
    assert_eq!(Some(span.first_ns), first);
    assert_eq!(Some(span.last_ns), last);
}

#[test]
fn an_observer_error_stops_the_replay_and_is_returned() {
    let t = fixture();
    let mut m = Model::new();
    let mut calls = 0;
    let r = replay::try_trace(&t, &mut m, |_, _| {
        calls += 1;
        if calls == 10 {
            Err("output went away")
        } else {
            Ok(())
        }
    });
    assert_eq!(r, Err("output went away"));
    assert_eq!(calls, 10, "no observer call after the error");
}

#[test]
fn one_record_at_a_time_with_meta_bytes_is_the_same_replay() {
    let t = fixture();
    let (want, _) = by_hand(&t);
    let mut m = Model::new();
    for r in t.records() {
        let bytes = (r.meta != 0)
            .then(|| t.meta(r.pid, r.meta))
            .flatten()
            .map(|e| e.padded_len);
        // Re-encode through the bytes path: the entry's bytes as the ring or log holds them.
        let raw = bytes.and_then(|_| {
            t.metas()
                .iter()
                .find(|mr| mr.pid == r.pid && mr.meta_ref == r.meta)
                .map(|mr| t.bytes(mr.bytes.clone()).to_vec())
        });
        replay::one(&mut m, &r, raw.as_deref());
    }
    assert_eq!(m.checkpoint(), want.checkpoint());
}
