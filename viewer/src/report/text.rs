//! Human-readable rendering of a [`Report`].

use std::fmt::Write as _;

use super::Report;

/// `1.50 GiB`, `20.0 MiB`, `512 B`.
pub fn bytes(b: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else if v >= 100.0 {
        format!("{v:.0} {}", UNITS[u])
    } else if v >= 10.0 {
        format!("{v:.1} {}", UNITS[u])
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

/// `12.345 s`, `3.2 ms`.
pub fn duration(ns: u64) -> String {
    if ns >= 1_000_000_000 {
        format!("{:.3} s", ns as f64 / 1e9)
    } else if ns >= 1_000_000 {
        format!("{:.1} ms", ns as f64 / 1e6)
    } else {
        format!("{:.1} µs", ns as f64 / 1e3)
    }
}

/// The full text report (what `fragprobe report` prints).
pub fn render(r: &Report) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "fragprobe report: {}", r.source);
    for w in &r.warnings {
        let _ = writeln!(o, "  warning: {w}");
    }
    let _ = writeln!(o, "duration        {}", duration(r.duration_ns));
    for p in &r.processes {
        let mut line = format!("process {:>7}  {}", p.pid, p.cmdline.join(" "));
        if let Some(c) = &p.alloc_conf {
            let _ = write!(line, "  [PYTORCH_CUDA_ALLOC_CONF={c}]");
        }
        if let Some(rank) = p.rank {
            let _ = write!(line, "  [rank {rank}]");
        }
        if p.incomplete {
            line.push_str("  [incomplete: events lost]");
        }
        let _ = writeln!(o, "{line}");
    }
    for d in &r.devices {
        let _ = writeln!(
            o,
            "device {:>2}  {} {}  total {}  peak live {}  max frag {:.3}  final frag {:.3}",
            d.ordinal,
            d.name.as_deref().unwrap_or("?"),
            d.uuid.as_deref().unwrap_or(""),
            d.total_bytes.map(bytes).unwrap_or_else(|| "?".into()),
            bytes(d.peak_live),
            d.max_ratio,
            d.final_ratio
        );
        if let Some(n) = &d.nvml {
            let _ = writeln!(
                o,
                "  nvml        device used: peak {}, last sample {}, of {}",
                bytes(n.peak_used),
                bytes(n.last_used),
                n.total.map(bytes).unwrap_or_else(|| "?".into())
            );
        }
    }
    let _ = writeln!(
        o,
        "events          {} total, {} dropped, {} anomalies",
        r.events.total, r.events.dropped, r.events.anomalies
    );
    let kinds: Vec<String> = r
        .events
        .by_kind
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect();
    let _ = writeln!(o, "  by kind       {}", kinds.join(", "));
    if !r.events.anomalies_by_type.is_empty() {
        let a: Vec<String> = r
            .events
            .anomalies_by_type
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        let _ = writeln!(o, "  anomalies     {}", a.join(", "));
    }
    let _ = writeln!(
        o,
        "allocations     {} ok, {} failed, {} frees",
        r.allocations.ok, r.allocations.failed, r.allocations.frees
    );
    let _ = writeln!(
        o,
        "peak live       {}{}",
        bytes(r.bytes.peak_live),
        r.bytes
            .peak_live_at_rel_ns
            .map(|t| format!(" at +{}", duration(t)))
            .unwrap_or_default()
    );
    let _ = writeln!(o, "final live      {}", bytes(r.bytes.final_live));
    let f = &r.fragmentation;
    let _ = writeln!(
        o,
        "fragmentation   max {:.3}, at peak {:.3}, final {:.3}; largest free block final {}, smallest {}",
        f.max_ratio,
        f.ratio_at_peak,
        f.final_ratio,
        bytes(f.final_largest_free_block),
        bytes(f.min_largest_free_block)
    );
    if r.leaks.count > 0 {
        let _ = writeln!(
            o,
            "live at exit    {} objects, {}",
            r.leaks.count,
            bytes(r.leaks.bytes)
        );
        for l in r.leaks.by_size.iter().take(10) {
            let _ = writeln!(o, "  {:>6} × {:>10} {}", l.count, bytes(l.size), l.kind);
        }
    }
    if r.failed_allocations.is_empty() {
        let _ = writeln!(o, "failed allocs   none");
    } else {
        let _ = writeln!(o, "failed allocs   {}", r.failed_allocations.len());
        for fa in r.failed_allocations.iter().take(20) {
            let _ = writeln!(
                o,
                "  +{:<10} pid {} dev {} {} of {}: {} (free {}, largest free block {}){}",
                duration(fa.time_rel_ns),
                fa.pid,
                fa.device,
                fa.api,
                bytes(fa.size),
                fa.verdict.to_uppercase(),
                fa.free_bytes.map(bytes).unwrap_or_else(|| "?".into()),
                fa.largest_free_block
                    .map(bytes)
                    .unwrap_or_else(|| "?".into()),
                fa.driver_free
                    .map(|d| format!(", driver free {}", bytes(d)))
                    .unwrap_or_default()
            );
        }
    }
    o.push_str(&torch_lines(r));
    o
}

/// One line per PyTorch snapshot joined with the trace.
pub fn torch_lines(r: &Report) -> String {
    let mut o = String::new();
    for t in &r.torch_snapshots {
        if let Some(e) = &t.error {
            let _ = writeln!(
                o,
                "torch snapshot  pid {} {}: {} ({e})",
                t.pid, t.reason, t.path
            );
            continue;
        }
        if t.reason == "import" {
            // The trace is the snapshot's segments: its own figures are inside them.
            let _ = writeln!(
                o,
                "torch snapshot  imported from {}: reserved {}, allocated {} ({:.1} % unallocated), non-releasable {}, largest free block inside the segments {}; {} history entries, {} OOM(s) (the fragmentation line above measures the gaps between its segments)",
                t.path,
                bytes(t.reserved),
                bytes(t.allocated),
                100.0 * t.unallocated_fraction,
                bytes(t.non_releasable),
                bytes(t.largest_free_block),
                t.history_entries,
                t.ooms
            );
            continue;
        }
        let _ = writeln!(
            o,
            "torch snapshot  pid {} {}: reserved {}, allocated {} ({:.1} % unallocated), non-releasable {}, largest free block {}; {} of {} segments seen by the probe; {} history entries, {} OOM(s) — {}",
            t.pid,
            t.reason,
            bytes(t.reserved),
            bytes(t.allocated),
            100.0 * t.unallocated_fraction,
            bytes(t.non_releasable),
            bytes(t.largest_free_block),
            t.segments_seen_by_probe,
            t.segments,
            t.history_entries,
            t.ooms,
            t.path
        );
        if let Some(m) = &t.oom {
            let _ = writeln!(o, "                {}", oom_line(m));
        }
    }
    o
}

/// What an OOM looked like inside PyTorch's caching allocator, and what would have helped.
pub fn oom_line(m: &crate::torchhook::JoinedOom) -> String {
    let state = format!(
        "asked for {} on device {} with {} free on the device and {} free inside PyTorch's segments (largest free block {})",
        bytes(m.request),
        m.device,
        bytes(m.device_free),
        bytes(m.cached_free),
        bytes(m.largest_free_block)
    );
    let why = match m.verdict.as_str() {
        "fragmentation" if !m.expandable_segments => "FRAGMENTATION inside the caching allocator: enough was free in total, no piece was large enough, and no segment could be given back; PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True lets free space become one piece".to_string(),
        "fragmentation" => "FRAGMENTATION inside the caching allocator: enough was free in total, no piece was large enough".to_string(),
        "capacity" => "CAPACITY: less was free in total, PyTorch's cache included, than was asked for".to_string(),
        _ => "neither capacity nor fragmentation: a free piece was large enough (another process, a pool limit or a setting such as max_split_size_mb)".to_string(),
    };
    format!("OOM: {state}: {why}")
}

/// The short summary `fragprobe run` prints at the end.
pub fn print_summary(r: &Report, trace: Option<&std::path::Path>) {
    let f = &r.fragmentation;
    eprintln!("── fragprobe summary ─────────────────────────────────────────────");
    eprintln!(
        "peak live {}  worst fragmentation {:.3}  failed allocations {}  live at exit {} ({} objects)",
        bytes(r.bytes.peak_live),
        f.max_ratio,
        r.allocations.failed,
        bytes(r.leaks.bytes),
        r.leaks.count
    );
    let frag_ooms = r
        .failed_allocations
        .iter()
        .filter(|x| x.verdict == "fragmentation")
        .count();
    if frag_ooms > 0 {
        eprintln!("{frag_ooms} allocation(s) failed because of FRAGMENTATION: enough memory was free, no single block was large enough");
    }
    if r.events.dropped > 0 {
        eprintln!("{} events were dropped (ring full); the map was resynchronised from the probe's live table", r.events.dropped);
    }
    eprint!("{}", torch_lines(r));
    if let Some(t) = trace {
        eprintln!(
            "trace: {}   (fragprobe report {0} · fragprobe view {0})",
            t.display()
        );
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn byte_units() {
        assert_eq!(super::bytes(512), "512 B");
        assert_eq!(super::bytes(20 << 20), "20.0 MiB");
        assert_eq!(super::bytes(3 << 30), "3.00 GiB");
    }
}
