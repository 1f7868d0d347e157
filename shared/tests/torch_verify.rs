//! The simulator reproduces every recorded allocation of the real snapshots.

#[path = "../../tests/src/snapshots.rs"]
#[allow(dead_code)]
mod snapshots;

use std::path::PathBuf;

use fragprobe_shared::torch::load_snapshot;
use fragprobe_shared::torch::sim::{Config, Version};
use fragprobe_shared::torch::snapshot::Action;
use fragprobe_shared::torch::verify::{verify, verify_with};

fn fixture(name: &str) -> PathBuf {
    snapshots::path(name)
}

#[test]
fn verify_is_exact_on_every_fixture() {
    if snapshots::dir().is_none() {
        return;
    }
    for name in [
        "silmont2000__mem_snapshot.pickle",
        "MAGMA27__memory_snapshot.pickle",
        "Wedsonlin__medium_128_inference_memory_snapshot.pickle",
        "bcrafton__memory_snapshot.pickle",
    ] {
        let s = load_snapshot(&fixture(name)).unwrap();
        let r = verify(&s, Version::DEFAULT).unwrap();
        for d in &r.devices {
            eprintln!(
                "{name}: dev {} allocs {}/{} segs {}/{} maps {}/{} unexpected {} releases {}/{} free_err {} final {} inferred {} (whole {}, ambiguous {}) anomalies {:?} first {:?}",
                d.device, d.alloc_address_matches, d.alloc_events, d.segment_size_matches, d.segment_allocs,
                d.segment_map_matches, d.segment_maps, d.unexpected_segments, d.segment_release_matches,
                d.segment_releases, d.free_errors, d.final_state_matches, d.reconstruction.inferred_blocks,
                d.reconstruction.inferred_whole, d.reconstruction.ambiguous_blocks,
                d.reconstruction.anomalies, d.first_mismatch
            );
        }
        assert!(r.alloc_events() > 0, "{name}");
        assert_eq!(r.alloc_address_matches(), r.alloc_events(), "{name}");
        assert_eq!(r.segment_size_matches(), r.segment_allocs(), "{name}");
        assert!(r.is_exact(), "{name}");
    }
}

#[test]
fn silmont_trace_starts_empty_so_nothing_is_inferred() {
    if snapshots::dir().is_none() {
        return;
    }
    let s = load_snapshot(&fixture("silmont2000__mem_snapshot.pickle")).unwrap();
    let r = verify(&s, Version::DEFAULT).unwrap();
    let d = &r.devices[0];
    assert!(
        d.reconstruction.segments.is_empty(),
        "the first entry is a segment_alloc"
    );
    assert_eq!(d.reconstruction.inferred_blocks, 0);
    assert!(d.reconstruction.anomalies.is_empty());
    assert_eq!((d.segment_allocs, d.segment_size_matches), (9, 9));
    // The replay's reserved bytes end where the snapshot does.
    let reserved: u64 = s.segments.iter().map(|x| x.total_size).sum();
    assert_eq!(d.stats.reserved, reserved);
}

#[test]
fn wrong_rules_are_caught() {
    if snapshots::dir().is_none() {
        return;
    }
    // Rounding to quarter powers of two is not what these programs ran with: addresses and
    // the final layout must stop matching.
    let s = load_snapshot(&fixture("bcrafton__memory_snapshot.pickle")).unwrap();
    let cfg = Config::parse("roundup_power2_divisions:4", Version::DEFAULT).unwrap();
    let r = verify_with(&s, &cfg).unwrap();
    assert!(r.alloc_address_matches() < r.alloc_events());
    assert!(!r.is_exact());
    assert!(r.devices[0].first_mismatch.is_some());
}

#[test]
fn a_tampered_address_is_caught() {
    if snapshots::dir().is_none() {
        return;
    }
    let mut s = load_snapshot(&fixture("silmont2000__mem_snapshot.pickle")).unwrap();
    // Move one recorded allocation by 512 bytes (and its frees with it).
    let t = &mut s.traces[0];
    let k = t.iter().rposition(|e| e.action == Action::Alloc).unwrap();
    let old = t[k].addr;
    for e in t.iter_mut().skip(k) {
        if e.addr == old
            && matches!(
                e.action,
                Action::Alloc | Action::FreeRequested | Action::FreeCompleted
            )
        {
            e.addr += 512;
        }
    }
    let r = verify(&s, Version::DEFAULT).unwrap();
    assert_eq!(r.alloc_address_matches() + 1, r.alloc_events());
    assert_eq!(r.devices[0].first_mismatch.as_ref().unwrap().index, k);
}
