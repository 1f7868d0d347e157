//! JSON encodings of the reports (stable field names; byte counts are integers, ratios are
//! floats in 0..1).

use super::figures::{Figures, PeakFigures};
use super::json::{array, string, Obj};
use super::predict::{PredictReport, Prediction};
use super::sim::allocator::Stats;
use super::verify::{DeviceVerify, Mismatch, VerifyReport};

impl Figures {
    /// JSON object with every figure, each named after its definition.
    pub fn to_json(&self) -> String {
        Obj::new()
            .u("segments", self.segments as u64)
            .u("reserved_bytes", self.reserved)
            .u("allocated_bytes", self.allocated)
            .u("requested_bytes", self.requested)
            .u("active_bytes", self.active)
            .u("free_bytes", self.free)
            .u("non_releasable_bytes", self.non_releasable)
            .u("internal_waste_bytes", self.internal_waste)
            .u("largest_free_block", self.largest_free)
            .u("largest_free_block_small_pool", self.largest_free_small)
            .u("largest_free_block_large_pool", self.largest_free_large)
            .f("unallocated_fraction", self.unallocated_fraction())
            .f("external_fragmentation", self.external_fragmentation())
            .f("memory_viz_fragmentation", self.memory_viz_fragmentation())
            .raw(
                "pools",
                &array(self.per_pool.iter().map(|p| {
                    Obj::new()
                        .s("pool", p.pool.name())
                        .raw("pool_id", &format!("[{},{}]", p.pool_id.0, p.pool_id.1))
                        .u("segments", p.segments as u64)
                        .u("reserved_bytes", p.reserved)
                        .u("free_bytes", p.total_free)
                        .u("largest_free_block", p.largest_free)
                        .end()
                })),
            )
            .end()
    }
}

impl PeakFigures {
    /// JSON object of the peaks and the figures derived from them.
    pub fn to_json(&self) -> String {
        Obj::new()
            .u("peak_reserved_bytes", self.peak_reserved)
            .u("peak_allocated_bytes", self.peak_allocated)
            .u("peak_active_bytes", self.peak_active)
            .u("peak_requested_bytes", self.peak_requested)
            .u(
                "allocated_at_peak_reserved_bytes",
                self.allocated_at_peak_reserved,
            )
            .u("peak_non_releasable_bytes", self.peak_non_releasable)
            .f(
                "unallocated_at_peak_fraction",
                self.unallocated_at_peak_fraction(),
            )
            .f("gmlake_utilization", self.gmlake_utilization())
            .f("gmlake_fragmentation", self.gmlake_fragmentation())
            .end()
    }
}

fn counters(s: &Stats) -> String {
    Obj::new()
        .u("allocs", s.allocs)
        .u("frees", s.frees)
        .u("cuda_mallocs", s.cuda_mallocs)
        .u("cuda_frees", s.cuda_frees)
        .u("segment_maps", s.maps)
        .u("pages_mapped", s.pages_mapped)
        .u("segment_unmaps", s.unmaps)
        .u("pages_unmapped", s.pages_unmapped)
        .u("alloc_retries", s.alloc_retries)
        .u("ooms", s.ooms)
        .u("cache_flushes", s.cache_flushes)
        .u("gc_runs", s.gc_runs)
        .u("gc_released_bytes", s.gc_released)
        .end()
}

fn mismatch(m: &Option<Mismatch>) -> String {
    match m {
        None => "null".into(),
        Some(m) => Obj::new()
            .u("index", m.index as u64)
            .s("action", m.action.name())
            .u("recorded_addr", m.recorded_addr)
            .u("predicted_addr", m.predicted_addr)
            .u("size", m.size)
            .u("predicted_size", m.predicted_size)
            .end(),
    }
}

fn device(d: &DeviceVerify) -> String {
    let r = &d.reconstruction;
    Obj::new()
        .i("device", d.device as i64)
        .u("events", d.events)
        .u("alloc_events", d.alloc_events)
        .u("alloc_address_matches", d.alloc_address_matches)
        .u("segment_allocs", d.segment_allocs)
        .u("segment_size_matches", d.segment_size_matches)
        .u("segment_maps", d.segment_maps)
        .u("segment_map_matches", d.segment_map_matches)
        .u("unexpected_segments", d.unexpected_segments)
        .u("segment_releases", d.segment_releases)
        .u("segment_release_matches", d.segment_release_matches)
        .u("free_errors", d.free_errors)
        .u("resyncs", d.resyncs)
        .b("final_state_matches", d.final_state_matches)
        .raw("first_mismatch", &mismatch(&d.first_mismatch))
        .raw(
            "reconstruction",
            &Obj::new()
                .u("segments_at_start", r.segments.len() as u64)
                .u("inferred_block_sizes", r.inferred_blocks)
                .u("inferred_whole_runs", r.inferred_whole)
                .u("ambiguous_blocks", r.ambiguous_blocks)
                .raw("anomalies", &array(r.anomalies.iter().map(|a| string(a))))
                .end(),
        )
        .raw("peaks", &PeakFigures::from(&d.stats).to_json())
        .raw("counters", &counters(&d.stats))
        .end()
}

impl VerifyReport {
    /// `{"alloc_events":N,"alloc_address_matches":N,"segment_allocs":N,
    /// "segment_size_matches":N, …, "devices":[…]}`.
    pub fn to_json(&self) -> String {
        let sum = |f: fn(&DeviceVerify) -> u64| self.devices.iter().map(f).sum::<u64>();
        Obj::new()
            .u("alloc_events", self.alloc_events())
            .u("alloc_address_matches", self.alloc_address_matches())
            .u("segment_allocs", self.segment_allocs())
            .u("segment_size_matches", self.segment_size_matches())
            .u("segment_maps", sum(|d| d.segment_maps))
            .u("segment_map_matches", sum(|d| d.segment_map_matches))
            .b("exact", self.is_exact())
            .s("config", &self.config.source)
            .s("rules_version", &self.config.version.to_string())
            .raw("devices", &array(self.devices.iter().map(device)))
            .end()
    }
}

fn prediction(p: &Prediction) -> String {
    let o = Obj::new()
        .s("conf", &p.conf)
        .b("baseline", p.baseline)
        .b("simulated", p.error.is_none());
    match &p.error {
        Some(e) => o.s("error", e).end(),
        None => o
            .raw("error", "null")
            .u("peak_reserved_bytes", p.peak.peak_reserved)
            .u("peak_allocated_bytes", p.peak.peak_allocated)
            .u("failed_allocs", p.failed_allocs)
            .raw("peaks", &p.peak.to_json())
            .raw("end", &p.end.to_json())
            .raw("counters", &counters(&p.stats))
            .end(),
    }
}

impl PredictReport {
    /// JSON with the recorded run and one entry per configuration.
    pub fn to_json(&self) -> String {
        Obj::new()
            .i("device", self.device as i64)
            .u("requests", self.requests as u64)
            .u("initial_blocks", self.initial_blocks as u64)
            .opt_u("capacity_bytes", self.capacity)
            .b("capacity_from_oom", self.capacity_from_oom.is_some())
            .raw(
                "recorded",
                &Obj::new()
                    .b("exact", self.recorded.exact)
                    .u("peak_reserved_bytes", self.recorded.peak.peak_reserved)
                    .u("peak_allocated_bytes", self.recorded.peak.peak_allocated)
                    .raw("peaks", &self.recorded.peak.to_json())
                    .raw("end", &self.recorded.end.to_json())
                    .raw("counters", &counters(&self.recorded.stats))
                    .end(),
            )
            .raw(
                "configurations",
                &array(self.predictions.iter().map(prediction)),
            )
            .end()
    }
}
