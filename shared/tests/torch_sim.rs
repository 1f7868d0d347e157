//! The simulator against the worked examples of PyTorch's allocator and its documented
//! rules.

use fragprobe_shared::torch::sim::{Allocator, Config, FirstFit, Version};
use fragprobe_shared::torch::snapshot::BlockState;

const MIB: u64 = 1 << 20;

fn sim(conf: &str) -> (Allocator, FirstFit) {
    (
        Allocator::new(Config::parse(conf, Version::DEFAULT).unwrap()),
        FirstFit::new(),
    )
}

fn run(a: &mut Allocator, src: &mut FirstFit, sizes: &[u64]) -> Vec<u64> {
    sizes
        .iter()
        .map(|&s| a.malloc(s, 0, src).unwrap())
        .collect()
}

#[test]
fn eight_16mib_then_four_32mib_reserves_256mib() {
    let (mut a, mut f) = sim("");
    let p = run(&mut a, &mut f, &[16 * MIB; 8]);
    assert_eq!(a.stats().reserved, 128 * MIB);
    for x in p {
        a.free(x).unwrap();
    }
    run(&mut a, &mut f, &[32 * MIB; 4]);
    assert_eq!(
        a.stats().reserved,
        256 * MIB,
        "16 MiB segments never merge into 32 MiB"
    );
    assert_eq!(a.stats().cuda_mallocs, 12);
}

#[test]
fn four_32mib_then_eight_16mib_reserves_128mib() {
    let (mut a, mut f) = sim("");
    let p = run(&mut a, &mut f, &[32 * MIB; 4]);
    for x in p {
        a.free(x).unwrap();
    }
    run(&mut a, &mut f, &[16 * MIB; 8]);
    assert_eq!(
        a.stats().reserved,
        128 * MIB,
        "each 32 MiB block splits in two"
    );
    assert_eq!(a.stats().cuda_mallocs, 4);
}

#[test]
fn expandable_segments_map_seven_20mib_pages_and_reuse_them() {
    let (mut a, mut f) = sim("expandable_segments:True");
    let p = run(&mut a, &mut f, &[16 * MIB; 8]);
    assert_eq!(a.stats().pages_mapped, 7);
    assert_eq!(a.stats().reserved, 140 * MIB);
    assert_eq!(
        a.stats().cuda_mallocs,
        0,
        "expandable segments map pages, no cudaMalloc"
    );
    // The 8 blocks are contiguous in one segment.
    for w in p.windows(2) {
        assert_eq!(w[1], w[0] + 16 * MIB);
    }
    for x in p {
        a.free(x).unwrap();
    }
    run(&mut a, &mut f, &[32 * MIB; 4]);
    assert_eq!(a.stats().pages_mapped, 7, "no new mapping needed");
    assert_eq!(a.stats().reserved, 140 * MIB);
}

#[test]
fn two_mib_then_half_mib_reserves_22mib_in_two_pools() {
    let (mut a, mut f) = sim("");
    run(&mut a, &mut f, &[2 * MIB, MIB / 2]);
    assert_eq!(a.stats().reserved, 22 * MIB);
    let segs = a.segments(0);
    assert_eq!(segs.len(), 2);
    assert_eq!(segs.iter().map(|s| s.total_size).sum::<u64>(), 22 * MIB);
}

#[test]
fn small_requests_pack_into_2mib_segments_and_merge_back() {
    let (mut a, mut f) = sim("");
    let p = run(&mut a, &mut f, &[1000, 1000, 1000]);
    assert_eq!(p[1] - p[0], 1024, "rounded to 512-byte multiples");
    assert_eq!(a.stats().reserved, 2 * MIB);
    assert_eq!(a.stats().allocated, 3 * 1024);
    a.free(p[1]).unwrap();
    // A freed block inside a live segment is non-releasable (inactive split).
    assert!(a.stats().inactive_split > 0);
    a.free(p[0]).unwrap();
    a.free(p[2]).unwrap();
    let segs = a.segments(0);
    assert_eq!(
        segs[0].blocks.len(),
        1,
        "free neighbours merge within the segment"
    );
    assert_eq!(segs[0].blocks[0].state, BlockState::Inactive);
    assert_eq!(a.stats().inactive_split, 0);
}

#[test]
fn best_fit_takes_smallest_then_lowest_address() {
    let (mut a, mut f) = sim("");
    // Three own segments (>= 10 MiB): 12, 14, 12 MiB.
    let p = run(&mut a, &mut f, &[12 * MIB, 14 * MIB, 12 * MIB]);
    for &x in &p {
        a.free(x).unwrap();
    }
    // An 11 MiB request fits all three; the smallest (12 MiB) at the lower address wins.
    assert_eq!(a.malloc(11 * MIB, 0, &mut f).unwrap(), p[0]);
    // Streams do not share cached blocks.
    let before = a.stats().cuda_mallocs;
    a.malloc(11 * MIB, 7, &mut f).unwrap();
    assert_eq!(a.stats().cuda_mallocs, before + 1);
}

#[test]
fn large_remainders_split_only_above_1mib() {
    let (mut a, mut f) = sim("");
    // 1.5 MiB request → 20 MiB segment, remainder 18.5 MiB > 1 MiB: split.
    let x = a.malloc(3 * MIB / 2, 0, &mut f).unwrap();
    assert_eq!(a.stats().allocated, 3 * MIB / 2);
    a.free(x).unwrap();
    // 19.5 MiB request takes the cached 20 MiB block whole (remainder 0.5 MiB ≤ 1 MiB).
    let y = a.malloc(19 * MIB + MIB / 2, 0, &mut f).unwrap();
    assert_eq!(y, x);
    assert_eq!(a.stats().allocated, 20 * MIB);
}

#[test]
fn max_split_size_keeps_oversize_blocks_whole() {
    let (mut a, mut f) = sim("max_split_size_mb:64");
    let big = a.malloc(100 * MIB, 0, &mut f).unwrap();
    a.free(big).unwrap();
    // A small-ish request may not take the oversize cached block: new segment.
    let s = a.malloc(30 * MIB, 0, &mut f).unwrap();
    assert_ne!(s, big);
    assert_eq!(a.stats().cuda_mallocs, 2);
    // An oversize request takes an oversize block only within 20 MiB of its size.
    let o = a.malloc(90 * MIB, 0, &mut f).unwrap();
    assert_eq!(o, big);
    assert_eq!(
        a.stats().allocated,
        130 * MIB,
        "not split: the whole 100 MiB block"
    );
    a.free(o).unwrap();
    let far = a.malloc(70 * MIB, 0, &mut f).unwrap();
    assert_ne!(far, big, "100 MiB >= 70 + 20 MiB: refused");
}

#[test]
fn oom_frees_cached_blocks_then_retries() {
    let mut cfg = Config::parse("", Version::DEFAULT).unwrap();
    cfg.capacity = Some(100 * MIB);
    let mut a = Allocator::new(cfg);
    let mut f = FirstFit::new();
    let p: Vec<u64> = (0..4)
        .map(|_| a.malloc(20 * MIB, 0, &mut f).unwrap())
        .collect();
    for x in &p[..3] {
        a.free(*x).unwrap();
    }
    // 60 MiB cached in three 20 MiB segments, 20 MiB live; a 50 MiB request does not fit
    // 100 MiB until the cache is released.
    let big = a.malloc(50 * MIB, 0, &mut f).unwrap();
    assert!(a.is_live(big));
    assert_eq!(a.stats().alloc_retries, 1);
    assert_eq!(a.stats().cuda_frees, 3);
    assert_eq!(a.stats().reserved, 20 * MIB + 50 * MIB);
    // Nothing left to release: a real OOM.
    let e = a.malloc(40 * MIB, 0, &mut f).unwrap_err();
    assert_eq!(e.rounded, 40 * MIB);
    assert_eq!(a.stats().ooms, 1);
}

#[test]
fn max_split_releases_oversize_cache_before_flushing_everything() {
    let mut cfg = Config::parse("max_split_size_mb:40", Version::DEFAULT).unwrap();
    cfg.capacity = Some(110 * MIB);
    let mut a = Allocator::new(cfg);
    let mut f = FirstFit::new();
    let big = a.malloc(60 * MIB, 0, &mut f).unwrap();
    let small = a.malloc(2 * MIB, 0, &mut f).unwrap();
    a.free(big).unwrap();
    a.free(small).unwrap();
    // 80 MiB reserved (60 + 20). An oversize 50 MiB request may round up into the 60 MiB
    // block (60 < 50 + 20).
    let x = a.malloc(50 * MIB, 0, &mut f).unwrap();
    assert_eq!(x, big);
    a.free(x).unwrap();
    // A 38 MiB request (< 40) may not take the oversize block, and 80 + 38 MiB exceeds the
    // 110 MiB device: the oversize 60 MiB block is released first (not the 20 MiB one),
    // without the full flush-and-retry.
    let y = a.malloc(38 * MIB, 0, &mut f).unwrap();
    assert!(a.is_live(y));
    assert_eq!(a.stats().alloc_retries, 0);
    assert_eq!(a.stats().cuda_frees, 1);
    assert_eq!(a.stats().reserved, 20 * MIB + 38 * MIB);
}

#[test]
fn garbage_collection_needs_a_memory_fraction() {
    let run_gc = |fraction: Option<f64>| {
        let mut cfg = Config::parse("garbage_collection_threshold:0.5", Version::DEFAULT).unwrap();
        cfg.device_total = Some(100 * MIB);
        cfg.memory_fraction = fraction;
        let mut a = Allocator::new(cfg);
        let mut f = FirstFit::new();
        let p: Vec<u64> = (0..3)
            .map(|_| a.malloc(20 * MIB, 0, &mut f).unwrap())
            .collect();
        for x in p {
            a.free(x).unwrap();
        }
        a.malloc(30 * MIB, 0, &mut f).unwrap();
        a.stats().clone()
    };
    let without = run_gc(None);
    assert_eq!(
        without.gc_runs, 0,
        "no fraction: the threshold silently does nothing"
    );
    assert_eq!(without.reserved, 90 * MIB);
    let with = run_gc(Some(1.0));
    assert_eq!(with.gc_runs, 1);
    assert!(with.gc_released >= 20 * MIB);
    assert!(with.reserved < 90 * MIB);
}

#[test]
fn expandable_free_pages_unmap_on_empty_cache() {
    let (mut a, mut f) = sim("expandable_segments:True");
    let p = run(&mut a, &mut f, &[16 * MIB; 4]);
    assert_eq!(a.stats().pages_mapped, 4);
    for x in &p[1..] {
        a.free(*x).unwrap();
    }
    a.release_cached_blocks(&mut f);
    // 16 MiB live at the start: page 0 stays; pages 1..3 (60 MiB) go.
    assert_eq!(a.stats().pages_unmapped, 3);
    assert_eq!(a.stats().reserved, 20 * MIB);
    a.free(p[0]).unwrap();
    a.release_cached_blocks(&mut f);
    assert_eq!(a.stats().reserved, 0);
    assert!(a.segments(0).is_empty());
}

#[test]
fn state_round_trips_through_snapshot_segments() {
    let (mut a, mut f) = sim("");
    let p = run(&mut a, &mut f, &[3 * MIB, 700_000, 12 * MIB, 5000]);
    a.free(p[1]).unwrap();
    let segs = a.segments(0);
    let b = Allocator::from_segments(a.config().clone(), &segs).unwrap();
    assert_eq!(b.segments(0), segs);
    assert_eq!(b.stats().allocated, a.stats().allocated);
    assert_eq!(b.stats().reserved, a.stats().reserved);
    assert_eq!(b.stats().inactive_split, a.stats().inactive_split);
}
