//! Reading a snapshot costs about as much memory as the file: values are 4-byte handles,
//! strings are interned, shared frames stay shared.

#[path = "../../tests/src/snapshots.rs"]
#[allow(dead_code)]
mod snapshots;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every method forwards to the system allocator with the caller's arguments and
// only adds bookkeeping on atomics, so the GlobalAlloc contract is the system's.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let now = LIVE.fetch_add(l.size(), Ordering::Relaxed) + l.size();
        PEAK.fetch_max(now, Ordering::Relaxed);
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        // SAFETY: `p` came from `alloc` above with the same layout.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        let now = LIVE.fetch_add(new, Ordering::Relaxed) + new;
        PEAK.fetch_max(now, Ordering::Relaxed);
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
        // SAFETY: `p` came from this allocator with layout `l`; forwarded unchanged.
        unsafe { System.realloc(p, l, new) }
    }
}

#[global_allocator]
static A: Counting = Counting;

#[test]
fn decoding_needs_about_the_file_size_in_memory() {
    if snapshots::dir().is_none() {
        return;
    }
    let dir = snapshots::dir().unwrap();
    for name in [
        "bcrafton__memory_snapshot.pickle",
        "Wedsonlin__medium_128_inference_memory_snapshot.pickle",
    ] {
        let path = dir.join(name);
        let size = std::fs::metadata(&path).unwrap().len() as usize;
        let base = LIVE.load(Ordering::Relaxed);
        PEAK.store(base, Ordering::Relaxed);
        let f = std::io::BufReader::new(std::fs::File::open(&path).unwrap());
        let p = fragprobe_shared::torch::pickle::read_pickle(f).unwrap();
        let pickle_peak = PEAK.load(Ordering::Relaxed) - base;
        let s = fragprobe_shared::torch::snapshot::decode(&p).unwrap();
        drop(p);
        let held = LIVE.load(Ordering::Relaxed) - base;
        let total_peak = PEAK.load(Ordering::Relaxed) - base;
        eprintln!("{name}: file {size} B, pickle peak {pickle_peak} B, decode peak {total_peak} B, snapshot {held} B");
        assert!(
            pickle_peak <= 2 * size,
            "{name}: pickle VM peak {pickle_peak} B for a {size} B file"
        );
        assert!(
            held <= 2 * size,
            "{name}: the decoded snapshot holds {held} B"
        );
        assert!(s.event_count() > 0);
    }
}
