//! Property tests of the model against the naive reference in `model_reference`, on random
//! event sequences (VMM included), plus fuzz-style no-panic and checkpoint-replay checks.

mod model_reference;

use fragprobe_shared::format::{Api, EventKind, Record};
use fragprobe_shared::model::{AnomalyKind, Model, ModelConfig, SpaceId};
use model_reference::RefModel;
use proptest::prelude::*;

/// One random operation, decoded by [`record`].
type Raw = (u8, u8, u8, u8, u8, u8, u8, u8, bool);

const KINDS: &[(EventKind, u32)] = &[
    (EventKind::Alloc, 16),
    (EventKind::Free, 14),
    (EventKind::AsyncAlloc, 5),
    (EventKind::AsyncFree, 4),
    (EventKind::ManagedAlloc, 4),
    (EventKind::Import, 3),
    (EventKind::AddressReserve, 5),
    (EventKind::AddressFree, 4),
    (EventKind::MemCreate, 6),
    (EventKind::MemRelease, 5),
    (EventKind::MemMap, 8),
    (EventKind::MemUnmap, 6),
    (EventKind::Device, 2),
    (EventKind::ProcessStart, 1),
    (EventKind::ProcessExit, 1),
    (EventKind::Loss, 1),
    (EventKind::MemGetInfo, 1),
    (EventKind::NvmlSample, 1),
    (EventKind::PoolTrim, 1),
];

fn pick_kind(sel: u8) -> Option<EventKind> {
    let total: u32 = KINDS.iter().map(|k| k.1).sum::<u32>() + 2;
    let mut x = sel as u32 % total;
    for (k, w) in KINDS {
        if x < *w {
            return Some(*k);
        }
        x -= w;
    }
    None // an unknown kind
}

fn addr(i: u8) -> u64 {
    match i % 40 {
        0 => 0,
        39 => u64::MAX - 0x100,
        k => 0x10000 + k as u64 * 0x100,
    }
}

fn size(i: u8) -> u64 {
    match i % 12 {
        0 => 0,
        1 => 0x80,
        11 => u64::MAX,
        k => k as u64 * 0x100,
    }
}

/// Decodes one raw operation into a record (event number `i`).
fn record(i: usize, r: Raw) -> Record {
    let (ksel, pid, ord, a, sz, aux, aux2, seqsel, fail) = r;
    let kind = pick_kind(ksel);
    let mut rec = Record {
        seq: if seqsel < 24 {
            (seqsel % 4) as u64
        } else {
            1000 + i as u64
        },
        ts_ns: 10 * i as u64,
        addr: addr(a),
        size: size(sz),
        aux: 0,
        aux2: 0,
        pid: 1 + (pid % 2) as u32,
        device: (ord % 3) as i16 - 1,
        result: if fail && seqsel % 5 == 0 { 2 } else { 0 },
        kind: kind.map_or(200, |k| k as u16),
        api: if seqsel == 255 {
            999
        } else {
            Api::Synthetic as u16
        },
        ..Record::default()
    };
    match kind {
        Some(EventKind::Alloc) => rec.aux = if aux % 8 == 0 { 0x100 } else { 0 },
        Some(EventKind::MemCreate) | Some(EventKind::MemRelease) => rec.addr = 1 + (aux % 6) as u64,
        Some(EventKind::MemMap) => {
            rec.aux = 1 + (aux % 6) as u64;
            rec.aux2 = aux2 as u64;
        }
        Some(EventKind::Import) => {
            rec.aux2 = (aux % 2) as u64;
            if rec.aux2 == 1 {
                rec.addr = 1 + (aux2 % 6) as u64;
            }
        }
        Some(EventKind::Device) => rec.size = [0, 0x2000, 0x4000, 0x10000][aux as usize % 4],
        Some(EventKind::MemGetInfo) => {
            rec.size = aux as u64 * 0x100;
            rec.aux = 0x10000;
        }
        _ => {}
    }
    rec
}

fn raw() -> impl Strategy<Value = Raw> {
    (
        any::<u8>(),
        any::<u8>(),
        any::<u8>(),
        any::<u8>(),
        any::<u8>(),
        any::<u8>(),
        any::<u8>(),
        any::<u8>(),
        any::<bool>(),
    )
}

/// Compares every space and device of the model with the reference.
fn compare(m: &Model, r: &RefModel, at: usize) -> Result<(), TestCaseError> {
    for (i, rs) in r.spaces.iter().enumerate() {
        let id = m.space_id(rs.pid, rs.ord);
        prop_assert!(
            id.is_some(),
            "event {at}: model lacks space {:?}",
            (rs.pid, rs.ord)
        );
        let sp = m.space(id.unwrap()).unwrap();
        let want = r.fig(i);
        let t = sp.totals();
        let a = sp
            .arena()
            .map(|a| (a.free_blocks, a.largest_free, a.total_free, a.ratio()));
        let got = model_reference::Fig {
            live: t.live_bytes,
            live_count: t.live_count,
            managed: t.managed_bytes,
            mapped: t.mapped_bytes,
            mapping_count: t.mapping_count,
            reserved: t.reserved_bytes,
            imported: t.imported_bytes,
            arena: a,
        };
        prop_assert_eq!(got, want, "event {}: space {:?}", at, (rs.pid, rs.ord));
        prop_assert_eq!(sp.summary().peak_live, rs.peak, "event {}: peak", at);
    }
    for sp in m.spaces() {
        prop_assert!(
            r.space_idx(sp.pid(), sp.ordinal()).is_some(),
            "event {at}: model has extra space {:?}",
            (sp.pid(), sp.ordinal())
        );
    }
    // Devices: sums of their spaces, and the most constrained arena.
    for d in m.devices() {
        let mut live = 0u64;
        let mut mapped = 0u64;
        let mut worst: Option<(u64, u32, (u64, u64, u64))> = None;
        for s in d.spaces() {
            let sp = m.space(s).unwrap();
            let i = r.space_idx(sp.pid(), sp.ordinal()).unwrap();
            let f = r.fig(i);
            live = live.wrapping_add(f.live);
            mapped = mapped.wrapping_add(f.mapped);
            if let Some((blocks, largest, total, _)) = f.arena {
                let c = (largest, s.0, (blocks, largest, total));
                if worst.is_none_or(|w| (c.0, c.1) < (w.0, w.1)) {
                    worst = Some(c);
                }
            }
        }
        prop_assert_eq!(d.totals().live_bytes, live, "event {}: device live", at);
        prop_assert_eq!(
            d.totals().mapped_bytes,
            mapped,
            "event {}: device mapped",
            at
        );
        let got = m
            .device_arena(d.id())
            .map(|a| (a.free_blocks, a.largest_free, a.total_free));
        prop_assert_eq!(got, worst.map(|w| w.2), "event {}: device arena", at);
    }
    for k in AnomalyKind::ALL {
        prop_assert_eq!(
            m.anomalies().count(k),
            r.anomalies[k as usize],
            "event {}: anomaly {}",
            at,
            k.name()
        );
    }
    prop_assert_eq!(
        m.counts().duplicates,
        r.duplicates,
        "event {}: duplicates",
        at
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 384, ..ProptestConfig::default() })]

    #[test]
    fn model_matches_reference_after_every_event(ops in prop::collection::vec(raw(), 1..160)) {
        let mut m = Model::with_config(ModelConfig { series_cap: 64 });
        let mut r = RefModel::default();
        for (i, op) in ops.into_iter().enumerate() {
            let rec = record(i, op);
            m.apply(&rec);
            r.apply(&rec);
            compare(&m, &r, i)?;
        }
    }

    #[test]
    fn restore_and_replay_equals_replay(ops in prop::collection::vec(raw(), 1..160), cut in any::<prop::sample::Index>()) {
        let recs: Vec<Record> = ops.into_iter().enumerate().map(|(i, o)| record(i, o)).collect();
        let k = cut.index(recs.len() + 1);
        let mut full = Model::new();
        for r in &recs {
            full.apply(r);
        }
        let mut head = Model::new();
        for r in &recs[..k] {
            head.apply(r);
        }
        let cp = head.checkpoint();
        let mut resumed = Model::restore(&cp).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(resumed.checkpoint(), cp, "round trip at {}", k);
        for r in &recs[k..] {
            resumed.apply(r);
        }
        prop_assert_eq!(resumed.checkpoint(), full.checkpoint());
        for (a, b) in resumed.spaces().iter().zip(full.spaces()) {
            prop_assert_eq!(a.totals(), b.totals());
            prop_assert_eq!(a.arena(), b.arena());
            prop_assert_eq!(a.summary(), b.summary());
        }
        for (a, b) in resumed.devices().iter().zip(full.devices()) {
            prop_assert_eq!(a.totals(), b.totals());
            prop_assert_eq!(resumed.device_arena(a.id()), full.device_arena(b.id()));
        }
        prop_assert_eq!(resumed.leaks(), full.leaks());
        prop_assert_eq!(resumed.failed_allocs(), full.failed_allocs());
    }

    #[test]
    fn arbitrary_records_never_panic(
        recs in prop::collection::vec(
            (any::<[u64; 6]>(), any::<[u32; 2]>(), 0u16..40, 0u16..100, any::<i16>(), any::<u16>(), any::<u32>()),
            0..120,
        )
    ) {
        let mut m = Model::with_config(ModelConfig { series_cap: 8 });
        for (w, p, kind, api, device, flags, result) in recs {
            let rec = Record {
                seq: w[0] % 64,
                ts_ns: w[1],
                addr: if w[2] % 3 == 0 { w[2] % 4096 } else { w[2] },
                size: if w[3] % 3 == 0 { w[3] % 4096 } else { w[3] },
                aux: if w[4] % 2 == 0 { w[4] % 8 } else { w[4] },
                aux2: w[5] % 4,
                pid: p[0] % 3,
                tid: p[1],
                result: if result % 4 == 0 { result % 8 } else { 0 },
                kind,
                api,
                device: device % 4,
                flags,
                ..Record::default()
            };
            m.apply(&rec);
        }
        let cp = m.checkpoint();
        let r = Model::restore(&cp).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(r.checkpoint(), cp);
        for s in m.spaces() {
            let _ = m.regions_in(s.id(), 0, u64::MAX);
            let _ = m.gaps_in(s.id(), 0, u64::MAX);
            let _ = m.regions_lod(s.id(), 0, u64::MAX, 64);
            let _ = m.region_at(s.id(), 0x1000);
        }
        let _ = m.leaks();
    }

    #[test]
    fn restore_of_damaged_bytes_never_panics(
        ops in prop::collection::vec(raw(), 1..40),
        flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..8),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut m = Model::new();
        for (i, o) in ops.into_iter().enumerate() {
            m.apply(&record(i, o));
        }
        let mut cp = m.checkpoint();
        for (i, b) in flips {
            let i = i.index(cp.len());
            cp[i] ^= b;
        }
        let k = cut.index(cp.len() + 1);
        if let Ok(mut r) = Model::restore(&cp[..k]) {
            // A restored model must keep working.
            r.apply(&record(0, (0, 0, 1, 3, 3, 0, 0, 200, false)));
            let _ = r.checkpoint();
        }
    }
}

#[test]
fn space_ids_are_stable_and_devices_sum() {
    let mut m = Model::new();
    let mk = |seq, pid, device, addr| Record {
        seq,
        pid,
        device,
        addr,
        size: 0x100,
        kind: EventKind::Alloc as u16,
        api: Api::Synthetic as u16,
        ..Record::default()
    };
    m.apply(&mk(1, 1, 0, 0x1000));
    m.apply(&mk(2, 2, 0, 0x1000));
    assert_eq!(m.space_id(1, 0), Some(SpaceId(0)));
    assert_eq!(m.space_id(2, 0), Some(SpaceId(1)));
    assert_eq!(m.devices().len(), 1);
    assert_eq!(m.devices()[0].totals().live_bytes, 0x200);
}
