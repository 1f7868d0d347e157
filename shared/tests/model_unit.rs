//! Unit tests of the model's documented behaviour: each anomaly, VMM lifetimes, resyncs,
//! verdicts, metadata, queries, series and checkpoints.

use fragprobe_shared::format::{Api, EventKind, Flags, MetaEntry, MetaKind, MetaWriter, Record};
use fragprobe_shared::live::LiveClass;
use fragprobe_shared::model::{
    AnomalyKind, CheckpointError, DeviceKey, Metric, Model, RegionKind, SpaceId, Verdict,
};

const PID: u32 = 42;

/// Builds records with increasing seq and ts.
struct Ev {
    seq: u64,
    pid: u32,
    dev: i16,
}

impl Ev {
    fn new() -> Ev {
        Ev {
            seq: 0,
            pid: PID,
            dev: 0,
        }
    }
    fn rec(&mut self, kind: EventKind, addr: u64, size: u64, aux: u64, aux2: u64) -> Record {
        self.seq += 1;
        Record {
            seq: self.seq,
            ts_ns: self.seq * 1000,
            addr,
            size,
            aux,
            aux2,
            pid: self.pid,
            device: self.dev,
            kind: kind as u16,
            api: Api::Synthetic as u16,
            ..Record::default()
        }
    }
}

fn apply(m: &mut Model, e: &mut Ev, kind: EventKind, addr: u64, size: u64, aux: u64, aux2: u64) {
    let r = e.rec(kind, addr, size, aux, aux2);
    m.apply(&r);
}

fn only(m: &Model, k: AnomalyKind) {
    let nz: Vec<_> = m.anomalies().nonzero().collect();
    assert_eq!(nz, vec![(k, 1)], "expected exactly one {}", k.name());
}

fn live(m: &Model) -> u64 {
    m.spaces().iter().map(|s| s.totals().live_bytes).sum()
}

// ------------------------------------------------------------------ anomalies

#[test]
fn free_of_unknown_address() {
    let (mut m, mut e) = (Model::new(), Ev::new());
    apply(&mut m, &mut e, EventKind::Free, 0x1000, 0, 0, 0);
    only(&m, AnomalyKind::FreeUnknown);
    assert_eq!(
        m.anomalies().examples(AnomalyKind::FreeUnknown)[0].addr,
        0x1000
    );
    assert_eq!(m.anomalies().examples(AnomalyKind::FreeUnknown)[0].seq, 1);
    // cudaFree(NULL) is legal.
    apply(&mut m, &mut e, EventKind::Free, 0, 0, 0, 0);
    assert_eq!(m.counts().anomalies, 1);
}

#[test]
fn live_address_allocated_again_replaces_it() {
    let (mut m, mut e) = (Model::new(), Ev::new());
    apply(&mut m, &mut e, EventKind::Alloc, 0x1000, 100, 0, 0);
    apply(&mut m, &mut e, EventKind::Alloc, 0x1000, 300, 0, 0);
    only(&m, AnomalyKind::DoubleAlloc);
    assert_eq!(live(&m), 300);
    assert_eq!(m.spaces()[0].totals().live_count, 1);
}

#[test]
fn overlapping_allocation_drops_the_overlapped() {
    let (mut m, mut e) = (Model::new(), Ev::new());
    apply(&mut m, &mut e, EventKind::Alloc, 0x1000, 0x100, 0, 0);
    apply(&mut m, &mut e, EventKind::Alloc, 0x1200, 0x100, 0, 0);
    apply(&mut m, &mut e, EventKind::Alloc, 0x1080, 0x200, 0, 0);
    only(&m, AnomalyKind::AllocOverlap);
    assert_eq!(live(&m), 0x200);
}

#[test]
fn zero_sized_or_null_allocations() {
    let (mut m, mut e) = (Model::new(), Ev::new());
    // cudaMalloc(0) → NULL: legal.
    apply(&mut m, &mut e, EventKind::Alloc, 0, 0, 0, 0);
    assert_eq!(m.counts().anomalies, 0);
    apply(&mut m, &mut e, EventKind::Alloc, 0x1000, 0, 0, 0);
    only(&m, AnomalyKind::BadAllocRecord);
    assert_eq!(m.counts().ok_allocs, 2);
    assert_eq!(live(&m), 0);
}

#[test]
fn release_of_unknown_handle_and_double_release() {
    let (mut m, mut e) = (Model::new(), Ev::new());
    apply(&mut m, &mut e, EventKind::MemRelease, 7, 0, 0, 0);
    only(&m, AnomalyKind::ReleaseUnknown);
    let mut m = Model::new();
    apply(
        &mut m,
        &mut e,
        EventKind::AddressReserve,
        0x10000,
        0x4000,
        0,
        0,
    );
    apply(&mut m, &mut e, EventKind::MemCreate, 7, 0x2000, 0, 0);
    apply(&mut m, &mut e, EventKind::MemMap, 0x10000, 0x2000, 7, 0);
    apply(&mut m, &mut e, EventKind::MemRelease, 7, 0, 0, 0);
    apply(&mut m, &mut e, EventKind::MemRelease, 7, 0, 0, 0);
    only(&m, AnomalyKind::DoubleRelease);
}

#[test]
fn handle_value_reused_while_live() {
    let (mut m, mut e) = (Model::new(), Ev::new());
    apply(&mut m, &mut e, EventKind::MemCreate, 7, 0x2000, 0, 0);
    apply(&mut m, &mut e, EventKind::MemCreate, 7, 0x4000, 0, 0);
    only(&m, AnomalyKind::HandleReused);
    assert_eq!(live(&m), 0x4000);
}

#[test]
fn map_of_unknown_or_released_handle() {
    let (mut m, mut e) = (Model::new(), Ev::new());
    apply(
        &mut m,
        &mut e,
        EventKind::AddressReserve,
        0x10000,
        0x8000,
        0,
        0,
    );
    apply(&mut m, &mut e, EventKind::MemMap, 0x10000, 0x2000, 9, 0);
    only(&m, AnomalyKind::MapUnknownHandle);
    assert_eq!(m.spaces()[0].totals().mapped_bytes, 0x2000);
    assert_eq!(live(&m), 0);

    let mut m = Model::new();
    apply(
        &mut m,
        &mut e,
        EventKind::AddressReserve,
        0x10000,
        0x8000,
        0,
        0,
    );
    apply(&mut m, &mut e, EventKind::MemCreate, 7, 0x2000, 0, 0);
    apply(&mut m, &mut e, EventKind::MemMap, 0x10000, 0x2000, 7, 0);
    apply(&mut m, &mut e, EventKind::MemRelease, 7, 0, 0, 0);
    apply(&mut m, &mut e, EventKind::MemMap, 0x12000, 0x2000, 7, 0);
    only(&m, AnomalyKind::MapReleasedHandle);
    // Two mappings hold the handle now: unmapping one keeps it live.
    apply(&mut m, &mut e, EventKind::MemUnmap, 0x10000, 0x2000, 0, 0);
    assert_eq!(live(&m), 0x2000);
    apply(&mut m, &mut e, EventKind::MemUnmap, 0x12000, 0x2000, 0, 0);
    assert_eq!(live(&m), 0);
}

#[test]
fn map_outside_a_reservation_and_over_a_mapping() {
    let (mut m, mut e) = (Model::new(), Ev::new());
    apply(&mut m, &mut e, EventKind::MemCreate, 7, 0x4000, 0, 0);
    apply(&mut m, &mut e, EventKind::MemMap, 0x10000, 0x2000, 7, 0);
    only(&m, AnomalyKind::MapOutsideReservation);

    let mut m = Model::new();
    apply(
        &mut m,
        &mut e,
        EventKind::AddressReserve,
        0x10000,
        0x8000,
        0,
        0,
    );
    apply(&mut m, &mut e, EventKind::MemCreate, 7, 0x4000, 0, 0);
    apply(&mut m, &mut e, EventKind::MemMap, 0x10000, 0x4000, 7, 0);
    apply(&mut m, &mut e, EventKind::MemMap, 0x12000, 0x4000, 7, 0);
    only(&m, AnomalyKind::MapOverMapped);
    // The first mapping was cut back to [0x10000, 0x12000).
    assert_eq!(m.spaces()[0].totals().mapped_bytes, 0x6000);
    assert_eq!(m.spaces()[0].totals().mapping_count, 2);
}

#[test]
fn unmap_of_an_unmapped_range() {
    let (mut m, mut e) = (Model::new(), Ev::new());
    apply(
        &mut m,
        &mut e,
        EventKind::AddressReserve,
        0x10000,
        0x8000,
        0,
        0,
    );
    apply(&mut m, &mut e, EventKind::MemCreate, 7, 0x2000, 0, 0);
    apply(&mut m, &mut e, EventKind::MemMap, 0x10000, 0x2000, 7, 0);
    // Covers the mapping and 0x1000 bytes that are not mapped.
    apply(&mut m, &mut e, EventKind::MemUnmap, 0x10000, 0x3000, 0, 0);
    only(&m, AnomalyKind::UnmapUnmapped);
    assert_eq!(m.spaces()[0].totals().mapped_bytes, 0);
}

#[test]
fn partial_unmap_splits_the_mapping() {
    let (mut m, mut e) = (Model::new(), Ev::new());
    apply(
        &mut m,
        &mut e,
        EventKind::AddressReserve,
        0x10000,
        0x8000,
        0,
        0,
    );
    apply(&mut m, &mut e, EventKind::MemCreate, 7, 0x6000, 0, 0);
    apply(&mut m, &mut e, EventKind::MemMap, 0x10000, 0x6000, 7, 0);
    apply(&mut m, &mut e, EventKind::MemRelease, 7, 0, 0, 0);
    apply(&mut m, &mut e, EventKind::MemUnmap, 0x12000, 0x2000, 0, 0);
    assert_eq!(m.counts().anomalies, 0);
    let t = m.spaces()[0].totals();
    assert_eq!(
        (t.mapped_bytes, t.mapping_count, t.live_bytes),
        (0x4000, 2, 0x6000)
    );
    let maps: Vec<_> = m
        .regions_in(SpaceId(0), 0, u64::MAX)
        .into_iter()
        .filter(|r| r.kind == RegionKind::Mapping)
        .map(|r| (r.addr, r.size, r.aux2))
        .collect();
    assert_eq!(maps, vec![(0x10000, 0x2000, 0), (0x14000, 0x2000, 0x4000)]);
    apply(&mut m, &mut e, EventKind::MemUnmap, 0x10000, 0x2000, 0, 0);
    assert_eq!(live(&m), 0x6000);
    apply(&mut m, &mut e, EventKind::MemUnmap, 0x14000, 0x2000, 0, 0);
    assert_eq!(live(&m), 0);
}

#[test]
fn address_free_of_unknown_or_mapped_reservation() {
    let (mut m, mut e) = (Model::new(), Ev::new());
    apply(
        &mut m,
        &mut e,
        EventKind::AddressFree,
        0x10000,
        0x8000,
        0,
        0,
    );
    only(&m, AnomalyKind::AddressFreeUnknown);

    let mut m = Model::new();
    apply(
        &mut m,
        &mut e,
        EventKind::AddressReserve,
        0x10000,
        0x8000,
        0,
        0,
    );
    apply(&mut m, &mut e, EventKind::MemCreate, 7, 0x2000, 0, 0);
    apply(&mut m, &mut e, EventKind::MemMap, 0x10000, 0x2000, 7, 0);
    apply(&mut m, &mut e, EventKind::MemRelease, 7, 0, 0, 0);
    apply(
        &mut m,
        &mut e,
        EventKind::AddressFree,
        0x10000,
        0x8000,
        0,
        0,
    );
    only(&m, AnomalyKind::AddressFreeMapped);
    let t = m.spaces()[0].totals();
    assert_eq!((t.reserved_bytes, t.mapped_bytes, t.live_bytes), (0, 0, 0));
}

#[test]
fn overlapping_reservation() {
    let (mut m, mut e) = (Model::new(), Ev::new());
    apply(
        &mut m,
        &mut e,
        EventKind::AddressReserve,
        0x10000,
        0x8000,
        0,
        0,
    );
    apply(
        &mut m,
        &mut e,
        EventKind::AddressReserve,
        0x14000,
        0x8000,
        0,
        0,
    );
    only(&m, AnomalyKind::ReserveOverlap);
    assert_eq!(m.spaces()[0].totals().reserved_bytes, 0x8000);
}

#[test]
fn resync_markers_without_begin_and_bad_entries() {
    let (mut m, mut e) = (Model::new(), Ev::new());
    apply(&mut m, &mut e, EventKind::ResyncEnd, 0, 0, 5, 0);
    only(&m, AnomalyKind::ResyncWithoutBegin);
    let mut m = Model::new();
    apply(&mut m, &mut e, EventKind::ResyncBegin, 0, 1, 5, 0);
    let mut bad = e.rec(EventKind::ResyncEntry, 0x1000, 10, 0, 0);
    bad.result = 99;
    m.apply(&bad);
    apply(&mut m, &mut e, EventKind::ResyncEnd, 0, 1, 9, 0);
    only(&m, AnomalyKind::BadResyncEntry);
}

#[test]
fn start_of_a_pid_that_still_has_live_state() {
    let (mut m, mut e) = (Model::new(), Ev::new());
    apply(&mut m, &mut e, EventKind::Alloc, 0x1000, 100, 0, 0);
    apply(&mut m, &mut e, EventKind::ProcessStart, 0, 0, 1, 0);
    only(&m, AnomalyKind::RestartedLiveProcess);
    assert_eq!(live(&m), 0);
}

// ------------------------------------------------------------------ semantics

#[test]
fn llama_cpp_releases_before_unmapping() {
    let (mut m, mut e) = (Model::new(), Ev::new());
    apply(
        &mut m,
        &mut e,
        EventKind::AddressReserve,
        0x100000,
        0x100000,
        0,
        0,
    );
    for i in 0..4u64 {
        apply(&mut m, &mut e, EventKind::MemCreate, 100 + i, 0x10000, 0, 0);
        apply(
            &mut m,
            &mut e,
            EventKind::MemMap,
            0x100000 + i * 0x10000,
            0x10000,
            100 + i,
            0,
        );
        apply(&mut m, &mut e, EventKind::MemRelease, 100 + i, 0, 0, 0);
    }
    // Released but mapped: the physical memory is still live.
    let t = *m.spaces()[0].totals();
    assert_eq!(
        (t.live_bytes, t.live_count, t.mapped_bytes),
        (0x40000, 4, 0x40000)
    );
    // Four releases, and no memory given back yet: no frees.
    assert_eq!((m.counts().frees, m.counts().releases), (0, 4));
    // One cuMemUnmap over all four pages frees them all.
    apply(&mut m, &mut e, EventKind::MemUnmap, 0x100000, 0x40000, 0, 0);
    let t = *m.spaces()[0].totals();
    assert_eq!((t.live_bytes, t.live_count, t.mapped_bytes), (0, 0, 0));
    assert_eq!((m.counts().frees, m.counts().releases), (4, 4));
    assert_eq!(t.reserved_bytes, 0x100000);
    assert_eq!(m.spaces()[0].summary().peak_live, 0x40000);
    assert_eq!(m.counts().anomalies, 0);
}

#[test]
fn handle_lives_until_released_and_unmapped_in_either_order() {
    let (mut m, mut e) = (Model::new(), Ev::new());
    apply(
        &mut m,
        &mut e,
        EventKind::AddressReserve,
        0x100000,
        0x100000,
        0,
        0,
    );
    apply(&mut m, &mut e, EventKind::MemCreate, 5, 0x10000, 0, 0);
    apply(&mut m, &mut e, EventKind::MemMap, 0x100000, 0x10000, 5, 0);
    apply(&mut m, &mut e, EventKind::MemUnmap, 0x100000, 0x10000, 0, 0);
    assert_eq!(live(&m), 0x10000, "unmapped but not released: still live");
    apply(&mut m, &mut e, EventKind::MemRelease, 5, 0, 0, 0);
    assert_eq!(live(&m), 0);
}

#[test]
fn vmm_objects_are_attributed_to_their_devices() {
    let (mut m, mut e) = (Model::new(), Ev::new());
    e.dev = -1;
    apply(
        &mut m,
        &mut e,
        EventKind::AddressReserve,
        0x100000,
        0x100000,
        0,
        0,
    );
    e.dev = 1;
    apply(&mut m, &mut e, EventKind::MemCreate, 5, 0x10000, 0, 0);
    apply(&mut m, &mut e, EventKind::MemMap, 0x100000, 0x10000, 5, 0);
    let r = m.space(m.space_id(PID, -1).unwrap()).unwrap().totals();
    let h = m.space(m.space_id(PID, 1).unwrap()).unwrap().totals();
    assert_eq!(
        (r.reserved_bytes, r.mapped_bytes, r.live_bytes),
        (0x100000, 0x10000, 0)
    );
    assert_eq!(
        (h.reserved_bytes, h.mapped_bytes, h.live_bytes),
        (0, 0, 0x10000)
    );
}

#[test]
fn free_decides_by_the_region_kind() {
    let (mut m, mut e) = (Model::new(), Ev::new());
    apply(&mut m, &mut e, EventKind::ManagedAlloc, 0x1000, 100, 1, 0);
    apply(
        &mut m,
        &mut e,
        EventKind::AsyncAlloc,
        0x2000,
        200,
        0x77,
        0x88,
    );
    apply(&mut m, &mut e, EventKind::Alloc, 0x3000, 300, 0, 0);
    let t = *m.spaces()[0].totals();
    assert_eq!((t.live_bytes, t.managed_bytes), (500, 100));
    apply(&mut m, &mut e, EventKind::Free, 0x1000, 0, 0, 0);
    apply(&mut m, &mut e, EventKind::Free, 0x2000, 0, 0, 0);
    apply(&mut m, &mut e, EventKind::AsyncFree, 0x3000, 0, 0, 0);
    let t = *m.spaces()[0].totals();
    assert_eq!((t.live_bytes, t.managed_bytes), (0, 0));
    assert_eq!(m.counts().anomalies, 0);
    assert_eq!((m.counts().ok_allocs, m.counts().frees), (3, 3));
}

#[test]
fn free_with_unknown_device_finds_the_region_elsewhere_in_the_process() {
    let (mut m, mut e) = (Model::new(), Ev::new());
    e.dev = 1;
    apply(&mut m, &mut e, EventKind::Alloc, 0x1000, 100, 0, 0);
    e.dev = -1;
    apply(&mut m, &mut e, EventKind::Free, 0x1000, 0, 0, 0);
    assert_eq!(live(&m), 0);
    assert_eq!(m.counts().anomalies, 0);
}

#[test]
fn imports_are_not_memory_but_are_known() {
    let (mut m, mut e) = (Model::new(), Ev::new());
    apply(
        &mut m,
        &mut e,
        EventKind::Import,
        0x9000,
        0,
        Api::CuIpcOpenMemHandleV2 as u64,
        0,
    );
    apply(&mut m, &mut e, EventKind::Import, 33, 0, 0, 1);
    apply(
        &mut m,
        &mut e,
        EventKind::AddressReserve,
        0x100000,
        0x10000,
        0,
        0,
    );
    apply(&mut m, &mut e, EventKind::MemMap, 0x100000, 0x10000, 33, 0);
    assert_eq!(live(&m), 0);
    assert_eq!(m.spaces()[0].totals().imported_count, 2);
    apply(&mut m, &mut e, EventKind::Free, 0x9000, 0, 0, 0);
    apply(&mut m, &mut e, EventKind::MemUnmap, 0x100000, 0x10000, 0, 0);
    apply(&mut m, &mut e, EventKind::MemRelease, 33, 0, 0, 0);
    assert_eq!(m.counts().anomalies, 0);
    assert_eq!(m.spaces()[0].totals().imported_count, 0);
}

#[test]
fn failed_calls_change_nothing_and_are_kept_with_verdicts() {
    let (mut m, mut e) = (Model::new(), Ev::new());
    apply(&mut m, &mut e, EventKind::Device, 0, 1000, 0, 0);
    apply(&mut m, &mut e, EventKind::Alloc, 0x1000, 100, 0, 0);
    apply(&mut m, &mut e, EventKind::Alloc, 0x1064, 200, 0, 0);
    apply(&mut m, &mut e, EventKind::Alloc, 0x112c, 100, 0, 0);
    apply(&mut m, &mut e, EventKind::Free, 0x1064, 0, 0, 0);
    // total free 800, largest 600.
    let fail = |m: &mut Model, e: &mut Ev, kind, size| {
        let mut r = e.rec(kind, 0, size, 0, 0);
        r.result = 2;
        m.apply(&r);
    };
    fail(&mut m, &mut e, EventKind::Alloc, 900);
    fail(&mut m, &mut e, EventKind::Alloc, 700);
    fail(&mut m, &mut e, EventKind::Alloc, 500);
    apply(&mut m, &mut e, EventKind::MemGetInfo, 0, 300, 1000, 0);
    fail(&mut m, &mut e, EventKind::AsyncAlloc, 400);
    fail(&mut m, &mut e, EventKind::Free, 0);
    let v: Vec<_> = m
        .failed_allocs()
        .iter()
        .map(|f| (f.size, f.verdict))
        .collect();
    assert_eq!(
        v,
        vec![
            (900, Verdict::Capacity),
            (700, Verdict::Fragmentation),
            (500, Verdict::Other),
            (400, Verdict::Capacity),
        ]
    );
    let f = m.failed_allocs()[1];
    assert_eq!(
        (f.total_free, f.largest_free, f.driver_free),
        (Some(800), Some(600), None)
    );
    assert_eq!(m.failed_allocs()[3].driver_free, Some(300));
    assert_eq!((m.counts().failed_allocs, m.counts().failed_calls), (4, 5));
    assert_eq!(live(&m), 200);
}

#[test]
fn unknown_kinds_and_apis_are_counted_and_skipped() {
    let (mut m, mut e) = (Model::new(), Ev::new());
    let mut r = e.rec(EventKind::Alloc, 0x1000, 100, 0, 0);
    r.kind = 999;
    m.apply(&r);
    let mut r = e.rec(EventKind::Alloc, 0x1000, 100, 0, 0);
    r.api = 9999;
    m.apply(&r);
    assert_eq!((m.counts().events, m.counts().unknown), (2, 2));
    assert!(m.spaces().is_empty());
}

#[test]
fn loss_marks_incomplete_until_a_resync() {
    let (mut m, mut e) = (Model::new(), Ev::new());
    apply(&mut m, &mut e, EventKind::Alloc, 0x1000, 100, 0, 0);
    apply(&mut m, &mut e, EventKind::Loss, 10, 25, 0, 0);
    assert!(m.process(PID).unwrap().incomplete());
    assert_eq!(m.counts().lost, 25);
    apply(&mut m, &mut e, EventKind::ResyncBegin, 0, 0, 30, 0);
    apply(&mut m, &mut e, EventKind::ResyncEnd, 0, 0, 32, 0);
    assert!(!m.process(PID).unwrap().incomplete());
    assert_eq!(m.process(PID).unwrap().resyncs(), 1);
    // The (empty) snapshot replaced the state.
    assert_eq!(live(&m), 0);
}

/// A resync entry: `result` = class, `seq` = the live object's own seq.
fn entry(e: &mut Ev, class: LiveClass, seq: u64, key: u64, size: u64, aux: u64) -> Record {
    let mut r = e.rec(EventKind::ResyncEntry, key, size, aux, 0);
    r.result = class as u32;
    r.seq = seq;
    r.api = Api::Consumer as u16;
    r
}

#[test]
fn resync_replaces_state_skips_duplicates_and_forgives_window_frees() {
    let (mut m, mut e) = (Model::new(), Ev::new());
    apply(&mut m, &mut e, EventKind::Device, 0, 1 << 20, 0, 0);
    apply(&mut m, &mut e, EventKind::Alloc, 0x1000, 100, 0, 0); // seq 2, lost later
    apply(&mut m, &mut e, EventKind::Loss, 3, 50, 0, 0);
    e.seq = 60;
    apply(&mut m, &mut e, EventKind::ResyncBegin, 0, 6, 60, 0);
    let entries = [
        entry(&mut e, LiveClass::Device, 40, 0x2000, 0x100, 0),
        entry(&mut e, LiveClass::Device, 41, 0x3000, 0x100, 0x20),
        entry(&mut e, LiveClass::Managed, 42, 0x8000, 0x100, 1),
        // Mapping before its reservation and handle: order must not matter.
        entry(&mut e, LiveClass::Mapping, 45, 0x100000, 0x10000, 9),
        entry(&mut e, LiveClass::Reservation, 43, 0x100000, 0x100000, 0),
        entry(&mut e, LiveClass::Handle, 44, 9, 0x10000, 0),
        // A mapping whose handle has no entry: released, kept alive by the mapping.
        entry(&mut e, LiveClass::Mapping, 46, 0x110000, 0x8000, 77),
    ];
    for r in &entries {
        m.apply(r);
    }
    apply(&mut m, &mut e, EventKind::ResyncEnd, 0, 7, 65, 0);
    assert_eq!(
        m.counts().anomalies,
        0,
        "{:?}",
        m.anomalies().nonzero().collect::<Vec<_>>()
    );
    let t = *m.spaces()[0].totals();
    assert_eq!(t.live_bytes, 0x200 + 0x10000 + 0x8000);
    assert_eq!(t.managed_bytes, 0x100);
    assert_eq!((t.mapped_bytes, t.reserved_bytes), (0x18000, 0x100000));
    let pitch = m.region_at(SpaceId(0), 0x3000).unwrap();
    assert_eq!((pitch.kind, pitch.seq), (RegionKind::Pitch, 41));
    // The ring then delivers the allocation with seq 41 again: a duplicate, skipped.
    let mut dup = e.rec(EventKind::Alloc, 0x3000, 0x100, 0x20, 0);
    dup.seq = 41;
    m.apply(&dup);
    assert_eq!(m.counts().duplicates, 1);
    assert_eq!(m.counts().anomalies, 0);
    // A free of something the snapshot no longer had, within [60, 65): benign.
    let mut f = e.rec(EventKind::Free, 0x5000, 0, 0, 0);
    f.seq = 62;
    m.apply(&f);
    assert_eq!((m.counts().benign_frees, m.counts().anomalies), (1, 0));
    // After the window it is an anomaly again.
    let mut f = e.rec(EventKind::Free, 0x5000, 0, 0, 0);
    f.seq = 70;
    m.apply(&f);
    assert_eq!(m.anomalies().count(AnomalyKind::FreeUnknown), 1);
    // The orphan handle is freed when its mapping goes.
    apply(&mut m, &mut e, EventKind::MemUnmap, 0x110000, 0x8000, 0, 0);
    assert_eq!(m.spaces()[0].totals().live_bytes, 0x200 + 0x10000);
}

#[test]
fn process_exit_records_leaks_and_clears() {
    let (mut m, mut e) = (Model::new(), Ev::new());
    apply(&mut m, &mut e, EventKind::Device, 0, 1 << 20, 0, 0);
    for i in 0..3 {
        apply(
            &mut m,
            &mut e,
            EventKind::Alloc,
            0x1000 + i * 0x1000,
            0x800,
            0,
            0,
        );
    }
    apply(&mut m, &mut e, EventKind::MemCreate, 5, 0x4000, 0, 0);
    apply(&mut m, &mut e, EventKind::Free, 0x2000, 0, 0, 0);
    let before = m.spaces()[0].arena().unwrap();
    apply(&mut m, &mut e, EventKind::ProcessExit, 0, 0x5000, 3, 0);
    assert_eq!(live(&m), 0);
    let fin = m.space_final(SpaceId(0));
    assert_eq!(fin.totals.live_bytes, 0x1000 + 0x4000);
    assert_eq!(fin.arena, Some(before));
    assert_eq!(
        m.device_final(m.spaces()[0].device()).totals.live_bytes,
        0x5000
    );
    let leaks = m.leaks();
    assert_eq!(leaks.len(), 2);
    assert_eq!(
        (
            leaks[0].kind,
            leaks[0].size,
            leaks[0].count,
            leaks[0].at_exit
        ),
        (RegionKind::Handle, 0x4000, 1, true)
    );
    assert_eq!(
        (leaks[1].kind, leaks[1].size, leaks[1].count),
        (RegionKind::Device, 0x800, 2)
    );
    let x = m.process(PID).unwrap().exit().unwrap();
    assert_eq!((x.reported_live_bytes, x.reported_live_count), (0x5000, 3));
}

#[test]
fn at_exit_frees_count_as_leaks() {
    let (mut m, mut e) = (Model::new(), Ev::new());
    apply(&mut m, &mut e, EventKind::Alloc, 0x1000, 0x800, 0, 0);
    let mut f = e.rec(EventKind::Free, 0x1000, 0, 0, 0);
    f.flags = Flags::AT_EXIT;
    m.apply(&f);
    let l = m.leaks();
    assert_eq!((l[0].size, l[0].count, l[0].at_exit), (0x800, 1, true));
}

#[test]
fn live_regions_of_running_processes_are_reported_as_not_at_exit() {
    let (mut m, mut e) = (Model::new(), Ev::new());
    apply(&mut m, &mut e, EventKind::Alloc, 0x1000, 0x800, 0, 0);
    let l = m.leaks();
    assert_eq!((l[0].size, l[0].at_exit), (0x800, false));
}

// ------------------------------------------------------------------ arena and devices

#[test]
fn arena_without_device_record_ends_at_the_highest_end() {
    let (mut m, mut e) = (Model::new(), Ev::new());
    apply(&mut m, &mut e, EventKind::Alloc, 0x1000, 0x100, 0, 0);
    apply(&mut m, &mut e, EventKind::Alloc, 0x1400, 0x100, 0, 0);
    let a = m.spaces()[0].arena().unwrap();
    assert_eq!(
        (a.base, a.end, a.total_free, a.largest_free),
        (0x1000, 0x1500, 0x300, 0x300)
    );
    // The device's total arrives later: the arena grows to base + total.
    apply(&mut m, &mut e, EventKind::Device, 0, 0x1000, 0, 0);
    let a = m.spaces()[0].arena().unwrap();
    assert_eq!(
        (a.end, a.total_free, a.largest_free, a.free_blocks),
        (0x2000, 0xe00, 0xb00, 2)
    );
}

#[test]
fn lower_address_moves_the_base_down() {
    let (mut m, mut e) = (Model::new(), Ev::new());
    apply(&mut m, &mut e, EventKind::Device, 0, 0x1000, 0, 0);
    apply(&mut m, &mut e, EventKind::Alloc, 0x5000, 0x100, 0, 0);
    apply(&mut m, &mut e, EventKind::Alloc, 0x4000, 0x100, 0, 0);
    let a = m.spaces()[0].arena().unwrap();
    // base 0x4000, end = max(0x5000, highest end 0x5100).
    assert_eq!((a.base, a.end), (0x4000, 0x5100));
    assert_eq!(
        (a.free_blocks, a.total_free, a.largest_free),
        (1, 0xf00, 0xf00)
    );
}

fn device_meta(buf: &mut [u8], uuid: &str) -> usize {
    let mut w = MetaWriter::new(buf, MetaKind::DeviceInfo);
    w.field_u64(b"ordinal", 0)
        .field(b"uuid", uuid.as_bytes())
        .field(b"name", b"Sim GPU");
    w.finish().0
}

#[test]
fn devices_are_told_apart_by_uuid() {
    let mut m = Model::new();
    let mut buf = [0u8; 256];
    // Two ranks each see their GPU as ordinal 0.
    for (pid, uuid) in [(1u32, "GPU-aaaa"), (2, "GPU-bbbb")] {
        let mut e = Ev {
            seq: 0,
            pid,
            dev: 0,
        };
        let n = device_meta(&mut buf, uuid);
        let meta = MetaEntry::parse(&buf[..n]).unwrap();
        let mut r = e.rec(EventKind::Device, 0, 1 << 20, 0, 0);
        r.meta = 8;
        m.apply_with_meta(&r, Some(&meta));
        apply(&mut m, &mut e, EventKind::Alloc, 0x1000, 0x100, 0, 0);
    }
    assert_eq!(m.devices().len(), 2);
    assert_eq!(m.devices()[0].key(), &DeviceKey::Uuid("GPU-aaaa".into()));
    assert_eq!(m.devices()[1].info().name.as_deref(), Some("Sim GPU"));
    assert_eq!(m.devices()[1].totals().live_bytes, 0x100);
}

#[test]
fn late_device_metadata_moves_the_space_to_its_uuid() {
    let mut m = Model::new();
    let mut e = Ev::new();
    let mut r = e.rec(EventKind::Device, 0, 1 << 20, 0, 0);
    r.meta = 17;
    m.apply(&r);
    apply(&mut m, &mut e, EventKind::Alloc, 0x1000, 0x100, 0, 0);
    assert_eq!(m.devices()[0].key(), &DeviceKey::Ordinal(0));
    let mut buf = [0u8; 256];
    let n = device_meta(&mut buf, "GPU-cccc");
    m.apply_meta(PID, 17, &MetaEntry::parse(&buf[..n]).unwrap());
    let d = m.spaces()[0].device();
    assert_eq!(
        m.device(d).unwrap().key(),
        &DeviceKey::Uuid("GPU-cccc".into())
    );
    assert_eq!(m.device(d).unwrap().totals().live_bytes, 0x100);
    // The device it stood on is the one named: no nameless device is left behind.
    assert_eq!(m.devices().len(), 1);
    assert_eq!(m.device_arena(d).unwrap().total_free, (1 << 20) - 0x100);
}

#[test]
fn a_driver_sample_before_the_device_record_leaves_no_phantom_device() {
    // What every probed process does: cuMemGetInfo at start-up, then the Device record.
    let mut m = Model::new();
    let mut e = Ev::new();
    let r = e.rec(EventKind::MemGetInfo, 0, 1 << 19, 1 << 20, 0);
    m.apply(&r);
    let mut buf = [0u8; 256];
    let n = device_meta(&mut buf, "GPU-eeee");
    let mut r = e.rec(EventKind::Device, 0, 1 << 20, 0, 0);
    r.meta = 8;
    m.apply_with_meta(&r, Some(&MetaEntry::parse(&buf[..n]).unwrap()));
    apply(&mut m, &mut e, EventKind::Alloc, 0x1000, 0x100, 0, 0);
    assert_eq!(m.devices().len(), 1, "{:#?}", m.devices());
    let d = &m.devices()[0];
    assert_eq!(d.key(), &DeviceKey::Uuid("GPU-eeee".into()));
    assert_eq!(d.info().name.as_deref(), Some("Sim GPU"));
    assert_eq!(
        d.samples().driver_free,
        Some(1 << 19),
        "the early sample is kept"
    );
    assert_eq!(d.totals().live_bytes, 0x100);
}

#[test]
fn a_space_moving_onto_a_device_with_one_process_adds_to_its_totals() {
    let mut m = Model::new();
    let mut buf = [0u8; 256];
    // Rank 1 names its GPU from the start: the device has that one process.
    let mut e1 = Ev {
        seq: 0,
        pid: 1,
        dev: 0,
    };
    let n = device_meta(&mut buf, "GPU-dddd");
    let mut r = e1.rec(EventKind::Device, 0, 1 << 20, 0, 0);
    r.meta = 8;
    m.apply_with_meta(&r, Some(&MetaEntry::parse(&buf[..n]).unwrap()));
    apply(&mut m, &mut e1, EventKind::Alloc, 0x1000, 0x100, 0, 0);
    // Rank 2's metadata comes late: it starts on an ordinal-only device.
    let mut e2 = Ev {
        seq: 0,
        pid: 2,
        dev: 0,
    };
    let mut r = e2.rec(EventKind::Device, 0, 1 << 20, 0, 0);
    r.meta = 9;
    m.apply(&r);
    apply(&mut m, &mut e2, EventKind::Alloc, 0x8000, 0x200, 0, 0);
    let n = device_meta(&mut buf, "GPU-dddd");
    m.apply_meta(2, 9, &MetaEntry::parse(&buf[..n]).unwrap());
    let d = m.spaces()[0].device();
    assert_eq!(m.spaces()[1].device(), d);
    assert_eq!(m.device(d).unwrap().totals().live_bytes, 0x300);
    assert_eq!(m.device(d).unwrap().totals().live_count, 2);
    apply(&mut m, &mut e1, EventKind::Free, 0x1000, 0, 0, 0);
    assert_eq!(m.device(d).unwrap().totals().live_bytes, 0x200);
    assert_eq!(m.device_summary(d).unwrap().peak_live, 0x300);
    // Rank 2's ordinal-only device is left empty: a placeholder, not shown.
    assert_eq!(m.devices().len(), 2);
    assert!(m.devices()[1].is_placeholder());
    assert_eq!(m.shown_devices().count(), 1);
}

#[test]
fn process_info_from_metadata() {
    let mut buf = [0u8; 512];
    let mut w = MetaWriter::new(&mut buf, MetaKind::ProcessInfo);
    w.field_u64(b"pid", 42)
        .field(b"cmdline", b"python\0train.py\0--lr=1")
        .field(b"hostname", b"node7")
        .field(b"PYTORCH_CUDA_ALLOC_CONF", b"expandable_segments:True")
        .field(b"RANK", b"3")
        .field(b"LOCAL_RANK", b"1");
    let n = w.finish().0;
    let meta = MetaEntry::parse(&buf[..n]).unwrap();
    let mut e = Ev::new();
    let mut r = e.rec(EventKind::ProcessStart, 0, 0, 7, 0);
    r.meta = 1;
    let mut m = Model::new();
    m.apply_with_meta(&r, Some(&meta));
    let i = m.process(PID).unwrap().info();
    assert_eq!(i.cmdline, vec!["python", "train.py", "--lr=1"]);
    assert_eq!(i.ppid, Some(7));
    assert_eq!((i.rank, i.local_rank), (Some(3), Some(1)));
    assert_eq!(i.hostname.as_deref(), Some("node7"));
    assert_eq!(i.alloc_conf.as_deref(), Some("expandable_segments:True"));
    // The same entry given later.
    let mut m = Model::new();
    m.apply(&r);
    assert!(m.process(PID).unwrap().info().cmdline.is_empty());
    m.apply_meta(PID, 1, &meta);
    assert_eq!(m.process(PID).unwrap().info().rank, Some(3));
    assert_eq!(m.process(PID).unwrap().info().ppid, Some(7));
}

#[test]
fn samples_update_the_device() {
    let (mut m, mut e) = (Model::new(), Ev::new());
    apply(&mut m, &mut e, EventKind::Alloc, 0x1000, 0x100, 0, 0);
    apply(&mut m, &mut e, EventKind::MemGetInfo, 0, 700, 1000, 0);
    let mut n = e.rec(EventKind::NvmlSample, 0, 900, 1000, u64::MAX);
    n.api = Api::Nvml as u16;
    m.apply(&n);
    let s = m.devices()[0].samples();
    assert_eq!(
        (s.driver_free, s.driver_total, s.nvml_used),
        (Some(700), Some(1000), Some(900))
    );
    assert_eq!(s.nvml_process_used, None);
    let d = m.devices()[0].own_series();
    assert_eq!(d.get(Metric::NvmlUsed).last_value(), Some(900.0));
    assert_eq!(d.get(Metric::DriverUsed).last_value(), Some(300.0));
}

// ------------------------------------------------------------------ queries

#[test]
fn regions_gaps_hover_and_level_of_detail() {
    let (mut m, mut e) = (Model::new(), Ev::new());
    apply(&mut m, &mut e, EventKind::Device, 0, 0x1000, 0, 0);
    apply(&mut m, &mut e, EventKind::Alloc, 0x10000, 0x100, 0, 0);
    apply(&mut m, &mut e, EventKind::Alloc, 0x10300, 0x100, 0, 0);
    apply(
        &mut m,
        &mut e,
        EventKind::ManagedAlloc,
        0x20000,
        0x100,
        0,
        0,
    );
    let s = SpaceId(0);
    let r: Vec<_> = m
        .regions_in(s, 0x10050, 0x10350)
        .iter()
        .map(|r| r.addr)
        .collect();
    assert_eq!(r, vec![0x10000, 0x10300]);
    let g: Vec<_> = m
        .gaps_in(s, 0, u64::MAX)
        .iter()
        .map(|g| (g.addr, g.size))
        .collect();
    assert_eq!(g, vec![(0x10100, 0x200), (0x10400, 0xc00)]);
    assert_eq!(m.region_at(s, 0x103ff).map(|r| r.addr), Some(0x10300));
    assert_eq!(m.region_at(s, 0x10100), None);
    assert_eq!(
        m.region_at(s, 0x20010).map(|r| r.kind),
        Some(RegionKind::Managed)
    );
    let cells = m.regions_lod(s, 0x10000, 0x11000, 4);
    assert_eq!(cells.len(), 4);
    assert_eq!(cells[0].bytes[RegionKind::Device as usize - 1], 0x200);
    assert_eq!(cells[0].regions, 2);
    assert_eq!(cells[1].regions, 0);
}

// ------------------------------------------------------------------ series and checkpoints

#[test]
fn series_downsampling_keeps_the_peak() {
    let (mut m, mut e) = (Model::new(), Ev::new());
    for i in 0..5000u64 {
        apply(
            &mut m,
            &mut e,
            EventKind::Alloc,
            0x1000,
            0x100 + (i % 7) * 0x100,
            0,
            0,
        );
        if i == 3333 {
            apply(&mut m, &mut e, EventKind::Alloc, 0x100000, 0x1000000, 0, 0);
            apply(&mut m, &mut e, EventKind::Free, 0x100000, 0, 0, 0);
        }
        apply(&mut m, &mut e, EventKind::Free, 0x1000, 0, 0, 0);
    }
    let sp = &m.spaces()[0];
    let s = sp.series().get(Metric::Live);
    let peak = sp.summary().peak_live as f64;
    let b = s.downsample(0, e.seq * 1000 + 1, 10);
    assert_eq!(b.iter().map(|b| b.max).fold(0.0, f64::max), peak);
    assert_eq!(b.iter().map(|b| b.min).fold(f64::MAX, f64::min), 0.0);
}

#[test]
fn checkpoint_round_trip_and_errors() {
    let (mut m, mut e) = (Model::new(), Ev::new());
    apply(&mut m, &mut e, EventKind::Device, 0, 1 << 20, 0, 0);
    apply(&mut m, &mut e, EventKind::Alloc, 0x1000, 0x100, 0, 0);
    apply(
        &mut m,
        &mut e,
        EventKind::AddressReserve,
        0x100000,
        0x100000,
        0,
        0,
    );
    apply(&mut m, &mut e, EventKind::MemCreate, 5, 0x10000, 0, 0);
    apply(&mut m, &mut e, EventKind::MemMap, 0x100000, 0x10000, 5, 0);
    apply(&mut m, &mut e, EventKind::MemRelease, 5, 0, 0, 0);
    let cp = m.checkpoint();
    let r = Model::restore(&cp).unwrap();
    assert_eq!(r.checkpoint(), cp);
    assert_eq!(r.spaces()[0].totals(), m.spaces()[0].totals());
    assert_eq!(
        r.device_arena(r.devices()[0].id()),
        m.device_arena(m.devices()[0].id())
    );
    assert_eq!(
        Model::restore(b"nope, not a checkpoint").err(),
        Some(CheckpointError::BadMagic)
    );
    let mut v = cp.clone();
    v[4] = 9;
    assert_eq!(
        Model::restore(&v).err(),
        Some(CheckpointError::Version {
            found: 9,
            supported: fragprobe_shared::model::CHECKPOINT_VERSION
        })
    );
    assert_eq!(
        Model::restore(&cp[..cp.len() - 3]).err(),
        Some(CheckpointError::Truncated)
    );
    let msg = CheckpointError::Truncated.to_string();
    assert!(msg.contains("replay"), "{msg}");
}
