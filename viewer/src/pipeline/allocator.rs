//! The allocator-level figures of an imported PyTorch snapshot (one device) as labelled
//! text rows: what is allocated, requested, active and reserved, what `empty_cache()`
//! cannot return, rounding waste, the largest free block per pool, and fragmentation by
//! each definition in use — now (the snapshot's state) and at the peak of its trace. The
//! figures panel draws them; Compare lists them per run.

use crate::pipeline::blocks::DeviceLayer;
use crate::pipeline::space::human_bytes;

fn pct(x: f64) -> String {
    format!("{:.1} %", 100.0 * x)
}

/// The rows `(label, value, hover)` shown for `d`.
pub fn rows(d: &DeviceLayer) -> Vec<(String, String, &'static str)> {
    let n = &d.now;
    let b = |v: u64| human_bytes(v);
    let mut out =
        vec![
        (
            "reserved".into(),
            b(n.reserved),
            "memory_reserved: segments obtained from the device",
        ),
        (
            "allocated".into(),
            b(n.allocated),
            "memory_allocated: blocks handed out (rounded sizes)",
        ),
        (
            "requested".into(),
            b(n.requested),
            "what the program asked for, of allocated blocks",
        ),
        (
            "active".into(),
            b(n.active),
            "allocated plus pending-free blocks",
        ),
        ("cached free".into(), b(n.free), "inactive blocks in segments"),
        (
            "non-releasable".into(),
            b(n.non_releasable),
            "inactive_split_bytes: free blocks in split segments; empty_cache() cannot return them",
        ),
        (
            "rounding waste".into(),
            b(n.internal_waste),
            "Σ (size − requested) over allocated blocks",
        ),
        (
            "1 − allocated/reserved".into(),
            pct(n.unallocated_fraction()),
            "reserved but not allocated, now",
        ),
        (
            "1 − largest/free".into(),
            pct(n.external_fragmentation()),
            "external fragmentation of the cached free bytes",
        ),
    ];
    for p in &n.per_pool {
        let id = if p.pool_id == (0, 0) {
            String::new()
        } else {
            format!(" {:?}", p.pool_id)
        };
        out.push((
            format!("largest free, {} pool{id}", p.pool.name()),
            b(p.largest_free),
            "the largest request this pool serves without a new segment",
        ));
    }
    if let Some(p) = &d.peak {
        let f = &p.figures;
        out.push((
            "peak reserved".into(),
            b(f.peak_reserved),
            "over the snapshot's trace (replayed)",
        ));
        out.push(("peak allocated".into(), b(f.peak_allocated), ""));
        out.push(("peak active".into(), b(f.peak_active), ""));
        out.push((
            "1 − allocated/reserved at peak".into(),
            pct(f.unallocated_at_peak_fraction()),
            "at the moment reserved peaked",
        ));
        out.push((
            "GMLake peak active/reserved".into(),
            pct(f.gmlake_utilization()),
            "GMLake (ASPLOS '24) utilisation: peak active / peak reserved",
        ));
    }
    out
}
