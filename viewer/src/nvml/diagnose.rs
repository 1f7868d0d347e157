//! "Why did I run out of memory?" — verdicts from evidence, as pure functions.
//!
//! [`Evidence`] is a small, source-neutral summary (filled from a trace, a `log` file or
//! the live NVML view by [`crate::nvml::evidence`]); [`diagnose`] turns it into
//! [`Finding`]s. Four causes are told apart, in this order for each failed allocation:
//!
//! 1. **Peak demand**: what the run held plus the failed request exceeds what the device
//!    offers even when nothing else runs on it. No allocator setting helps.
//! 2. **Other processes**: the demand would fit on an empty device, but other (or
//!    leftover) processes hold the difference.
//! 3. **Fragmentation**: enough memory is free in total but no free block is large
//!    enough (or the caching allocator holds enough unused cache).
//! 4. **Leak** (independent of failures): the baseline — the minimum of live bytes over
//!    successive segments of the run — keeps rising.
//!
//! Settings (`expandable_segments`, `max_split_size_mb`, `set_per_process_memory_fraction`,
//! `CUDA_VISIBLE_DEVICES`) are suggested only where the evidence supports them.

use serde::Serialize;

use super::units::{human, MIB};

/// A failed allocation and the state around it.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Failure {
    /// When, ns (any clock; only used for display order).
    pub t_ns: u64,
    /// Bytes requested.
    pub request: u64,
    /// Bytes the run held (live) when it failed.
    pub live: u64,
    /// Free bytes in total inside the modelled address space, when known.
    pub free_total: Option<u64>,
    /// Largest free block inside the modelled address space, when known.
    pub largest_free: Option<u64>,
    /// Unused bytes cached by the framework's allocator (PyTorch "reserved but
    /// unallocated"), when known.
    pub cached_unused: Option<u64>,
    /// Device memory in use outside the run's tracked allocations (CUDA contexts, module
    /// images, allocations the probe did not see, other processes), estimated from the
    /// last `cuMemGetInfo` before the failure: `total − free − live then`.
    pub outside: Option<u64>,
}

/// A process holding device memory that is not part of the run.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct OtherProcess {
    /// Host pid.
    pub pid: u32,
    /// Bytes it holds (`None`: the driver does not say).
    pub used: Option<u64>,
    /// Owner.
    pub user: String,
    /// Command line.
    pub cmdline: String,
    /// Its parent is gone: probably left over from an earlier job.
    pub leftover: bool,
}

/// Everything the verdicts look at.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Evidence {
    /// Where this came from, for the report ("trace run.fpt", "live NVML").
    pub source: String,
    /// The device in question.
    pub device: Option<u32>,
    /// Device capacity, bytes.
    pub capacity: Option<u64>,
    /// Bytes the driver reserves on the device.
    pub reserved: u64,
    /// Failed allocations.
    pub failures: Vec<Failure>,
    /// Processes not part of the run that hold memory on the device.
    pub others: Vec<OtherProcess>,
    /// Bytes held by others when their pids are not known (e.g. device used minus the
    /// run's own NVML figure at the failure).
    pub others_unattributed: Option<u64>,
    /// (time ns, bytes) samples of what the run holds, for the leak check.
    pub live: Vec<(u64, u64)>,
    /// What `live` measures, for the report ("live bytes", "device used").
    pub live_label: String,
    /// Highest device use seen, bytes (NVML), for the near-capacity warning.
    pub peak_used: Option<u64>,
    /// Bytes still allocated when the run's processes exited.
    pub unfreed_at_exit: Option<u64>,
    /// The workload uses PyTorch's caching allocator.
    pub pytorch: bool,
    /// Free bytes on the other GPUs of the machine: (index, free).
    pub other_gpus: Vec<(u32, u64)>,
    /// Processes of the run on this device (0 counts as 1): bounds how much memory outside
    /// the tracked allocations is put down to the run's own CUDA contexts.
    pub run_processes: u32,
    /// The allocator configuration PyTorch itself says it ran with (a snapshot's
    /// `allocator_settings`), when known: which of `PYTORCH_ALLOC_CONF` and
    /// `PYTORCH_CUDA_ALLOC_CONF` it honoured, in effect.
    pub pytorch_conf: Option<String>,
    /// Other settings replayed through the allocator simulator on this run's own
    /// allocator history (a PyTorch snapshot of the run), when there is one.
    pub simulated: Vec<SimulatedConf>,
}

/// One setting replayed on the run's own allocator history.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct SimulatedConf {
    /// The `PYTORCH_CUDA_ALLOC_CONF` value.
    pub conf: String,
    /// OOMs the replay predicts.
    pub ooms: u64,
    /// Peak reserved bytes the replay predicts.
    pub peak_reserved: u64,
    /// The snapshot replayed.
    pub snapshot: String,
}

/// What went wrong.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// Demand exceeds the device.
    PeakDemand,
    /// Free memory exists but not in one piece.
    Fragmentation,
    /// Other or leftover processes hold the memory.
    OtherProcesses,
    /// The baseline keeps rising.
    Leak,
    /// No failure seen, but the device came within 5 % of full.
    NearCapacity,
}

/// A suggested change and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Suggestion {
    /// What to set or do.
    pub action: String,
    /// Why the evidence supports it.
    pub why: String,
}

/// One diagnosed cause.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Finding {
    /// The cause.
    pub cause: Cause,
    /// One line.
    pub summary: String,
    /// The figures behind it.
    pub evidence: Vec<String>,
    /// What to do about it.
    pub suggestions: Vec<Suggestion>,
}

/// All findings, plus what could not be checked.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Verdict {
    /// Causes found, most important first.
    pub findings: Vec<Finding>,
    /// What the evidence did not allow to check.
    pub notes: Vec<String>,
}

impl Verdict {
    /// Whether any cause was found.
    pub fn found(&self) -> bool {
        !self.findings.is_empty()
    }
    /// Whether `cause` was found.
    pub fn has(&self, cause: Cause) -> bool {
        self.findings.iter().any(|f| f.cause == cause)
    }
}

/// The rising-baseline test's result.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Trend {
    /// Minimum of each segment, in time order.
    pub minima: Vec<u64>,
    /// Last minimum minus the first considered one.
    pub rise: u64,
    /// Average rise per segment.
    pub per_segment: f64,
    /// Duration of one segment, ns.
    pub segment_ns: u64,
}

/// Splits `series` (time-ordered) into `segments` equal time spans and returns the
/// minima when they rise monotonically: no segment drops by more than `tol` and at least
/// 60 % of the steps rise by more than `tol`. With five or more segments the first is
/// ignored (warm-up: loading weights is not a leak).
pub fn rising_baseline(series: &[(u64, u64)], segments: usize, tol: u64) -> Option<Trend> {
    if segments < 3 || series.len() < segments * 2 {
        return None;
    }
    let (t0, t1) = (series.first()?.0, series.last()?.0);
    if t1 <= t0 {
        return None;
    }
    let span = (t1 - t0) as u128;
    let mut minima: Vec<Option<u64>> = vec![None; segments];
    for &(t, v) in series {
        let k = (((t - t0) as u128 * segments as u128) / (span + 1)) as usize;
        let k = k.min(segments - 1);
        minima[k] = Some(minima[k].map_or(v, |m| m.min(v)));
    }
    let minima: Vec<u64> = minima.into_iter().flatten().collect();
    let considered = if minima.len() >= 5 {
        &minima[1..]
    } else {
        &minima[..]
    };
    if considered.len() < 3 {
        return None;
    }
    let steps = considered.len() - 1;
    let mut rises = 0;
    for w in considered.windows(2) {
        if w[1] + tol < w[0] {
            return None;
        }
        if w[1] > w[0] + tol {
            rises += 1;
        }
    }
    let rise = considered.last()?.saturating_sub(considered[0]);
    if rises * 10 < steps * 6 || rise <= tol {
        return None;
    }
    Some(Trend {
        minima: minima.clone(),
        rise,
        per_segment: rise as f64 / steps as f64,
        segment_ns: (span / segments as u128) as u64,
    })
}

/// The `max_split_size_mb` to suggest for a failed request: the largest power of two
/// MiB not above it, at least 32 (PyTorch rejects values of 20 MiB and below).
pub fn split_size_mb(request: u64) -> u64 {
    let mb = (request / MIB).max(32);
    1u64 << (63 - mb.leading_zeros())
}

fn others_bytes(e: &Evidence) -> u64 {
    let listed: u64 = e.others.iter().filter_map(|o| o.used).sum();
    listed.max(e.others_unattributed.unwrap_or(0))
}

/// The most memory outside the tracked allocations put down to one of the run's own
/// processes (a CUDA context with its module images is ~300–600 MiB on recent stacks)
/// when NVML does not say what other processes hold.
pub const CONTEXT_ALLOWANCE: u64 = 1 << 30;

/// How a failure's memory outside the tracked allocations splits between the run itself
/// and other processes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Split {
    /// The run's own (contexts, untracked allocations).
    own: u64,
    /// Other processes'.
    others: u64,
    /// `others` was inferred (no NVML figures): the excess over [`CONTEXT_ALLOWANCE`] per
    /// process of the run.
    inferred: bool,
}

fn split(e: &Evidence, f: &Failure) -> Split {
    let outside = f.outside.unwrap_or(0);
    let known = !e.others.is_empty() || e.others_unattributed.is_some();
    if known {
        let others = others_bytes(e);
        Split {
            own: outside.saturating_sub(others),
            others,
            inferred: false,
        }
    } else {
        let own = outside.min(CONTEXT_ALLOWANCE.saturating_mul(u64::from(e.run_processes.max(1))));
        Split {
            own,
            others: outside - own,
            inferred: outside > own,
        }
    }
}

/// Diagnoses `e`.
pub fn diagnose(e: &Evidence) -> Verdict {
    let mut v = Verdict::default();
    if let Some(c) = &e.pytorch_conf {
        v.notes.push(format!(
            "PyTorch ran with allocator settings {:?} (from its own snapshot: what it honoured of PYTORCH_ALLOC_CONF / PYTORCH_CUDA_ALLOC_CONF)",
            if c.is_empty() { "(defaults)" } else { c }
        ));
    }
    match e.capacity {
        None if !e.failures.is_empty() => v.notes.push(
            "the device's capacity is unknown (no device record or NVML sample), so peak demand and other processes cannot be weighed".into(),
        ),
        _ => {}
    }
    if let Some(cap) = e.capacity {
        let usable = cap.saturating_sub(e.reserved);
        let mut peak: Option<&Failure> = None;
        let mut crowded: Option<&Failure> = None;
        let mut frag: Option<&Failure> = None;
        let mut unexplained = 0usize;
        for f in &e.failures {
            // What the run itself needed: its allocations, the request, and what it holds
            // outside them (contexts...) — the part of `outside` not explained by others.
            let sp = split(e, f);
            let others = sp.others;
            let need = f.live.saturating_add(f.request).saturating_add(sp.own);
            // The request would fit if the allocator's cached free bytes were usable for it
            // (one piece, or given back to the driver): fragmentation inside the
            // allocator, whether or not the cache alone could hold the request.
            let cache_would_fit = f
                .cached_unused
                .is_some_and(|c| c > 0 && need.saturating_sub(c) <= usable.saturating_sub(others));
            if need > usable && !cache_would_fit {
                peak.get_or_insert(f);
            } else if need > usable.saturating_sub(others) && !cache_would_fit {
                crowded.get_or_insert(f);
            } else if cache_would_fit
                || (f.largest_free.is_some_and(|l| l < f.request)
                    && f.free_total.is_some_and(|t| t >= f.request))
            {
                frag.get_or_insert(f);
            } else {
                unexplained += 1;
            }
        }
        if let Some(f) = peak {
            v.findings.push(peak_finding(e, f, usable));
        }
        if let Some(f) = crowded {
            v.findings
                .push(others_finding(e, Some(f), usable, split(e, f).others));
        }
        if let Some(f) = frag {
            v.findings.push(frag_finding(e, f));
        }
        if unexplained > 0 {
            v.notes.push(format!(
                "{unexplained} failed allocation(s) fit within the device and no fragmentation figures explain them: memory may be held by allocations the probe did not see (libraries calling the driver directly, graphics) or by processes NVML did not list"
            ));
        }
        if e.failures.is_empty() {
            if let Some(p) = e.peak_used.filter(|&p| p as f64 >= cap as f64 * 0.95) {
                v.findings.push(Finding {
                    cause: Cause::NearCapacity,
                    summary: format!(
                        "no allocation failed, but device use reached {} of {} ({:.1}%)",
                        human(p),
                        human(cap),
                        p as f64 * 100.0 / cap as f64
                    ),
                    evidence: vec![],
                    suggestions: vec![Suggestion {
                        action:
                            "keep headroom: a slightly larger batch or another process will fail"
                                .into(),
                        why: "use stayed within 5% of the capacity".into(),
                    }],
                });
            }
            let leftovers: Vec<&OtherProcess> = e
                .others
                .iter()
                .filter(|o| o.leftover && o.used.unwrap_or(0) > 0)
                .collect();
            if !leftovers.is_empty() {
                v.findings
                    .push(others_finding(e, None, usable, others_bytes(e)));
            }
        }
    }
    let tol = (e.live.iter().map(|p| p.1).max().unwrap_or(0) / 200).max(MIB);
    if let Some(t) = rising_baseline(&e.live, 8, tol) {
        v.findings.push(leak_finding(e, &t));
    } else if e.live.len() < 16 {
        v.notes.push(format!(
            "too few {} samples ({}) to check for a rising baseline",
            if e.live_label.is_empty() {
                "memory"
            } else {
                &e.live_label
            },
            e.live.len()
        ));
    }
    v
}

fn peak_finding(e: &Evidence, f: &Failure, usable: u64) -> Finding {
    let own_outside = split(e, f).own;
    let need = f.live + f.request + own_outside;
    let mut s = vec![Suggestion {
        action: "reduce peak demand: smaller batch or sequence length, activation checkpointing, lower precision".into(),
        why: format!("the run needed {} with nothing else on the device, which offers {}", human(need), human(usable)),
    }];
    if let Some((i, free)) = e
        .other_gpus
        .iter()
        .filter(|g| g.1 >= need)
        .max_by_key(|g| g.1)
    {
        s.push(Suggestion {
            action: format!("CUDA_VISIBLE_DEVICES={i}"),
            why: format!("GPU {i} has {} free, enough for the peak", human(*free)),
        });
    }
    Finding {
        cause: Cause::PeakDemand,
        summary: format!(
            "peak demand exceeds the device: {} held + {} requested{} > {} usable",
            human(f.live),
            human(f.request),
            if own_outside > 0 {
                format!(" + {} outside the tracked allocations", human(own_outside))
            } else {
                String::new()
            },
            human(usable)
        ),
        evidence: {
            let mut ev = vec![format!(
                "{} failed allocation(s); the first over capacity asked for {}",
                e.failures.len(),
                human(f.request)
            )];
            if own_outside > 0 {
                ev.push(format!(
                    "{} of device memory was in use besides the run's allocations (CUDA context, module images, allocations the probe did not see), from the last cuMemGetInfo",
                    human(own_outside)
                ));
            }
            ev
        },
        suggestions: s,
    }
}

fn others_finding(e: &Evidence, f: Option<&Failure>, usable: u64, others: u64) -> Finding {
    let mut ev = Vec::new();
    for o in &e.others {
        ev.push(format!(
            "pid {} ({}) holds {}{}: {}",
            o.pid,
            o.user,
            o.used.map(human).unwrap_or_else(|| "n/a".into()),
            if o.leftover {
                ", parent gone (leftover)"
            } else {
                ""
            },
            o.cmdline
        ));
    }
    match f.map(|f| split(e, f)) {
        Some(sp) if sp.inferred => ev.push(format!(
            "{} was in use outside the run's allocations, more than its CUDA context(s) account for (at most {} per process): other processes, or allocations the probe did not see; `fragprobe watch` or nvidia-smi shows who holds it",
            human(sp.others + sp.own),
            human(CONTEXT_ALLOWANCE)
        )),
        _ if e.others.is_empty() => ev.push(format!(
            "other processes held {} (NVML: device used minus this run)",
            human(others)
        )),
        _ => {}
    }
    let mut s = Vec::new();
    let leftover: Vec<String> = e
        .others
        .iter()
        .filter(|o| o.leftover)
        .map(|o| o.pid.to_string())
        .collect();
    if !leftover.is_empty() {
        s.push(Suggestion {
            action: format!(
                "check and end the leftover process(es): ps -o user,cmd -p {0}; kill {0}",
                leftover.join(",")
            ),
            why: "their parent is gone, typical of a crashed or interrupted earlier job".into(),
        });
    }
    let need = f.map(|f| f.live + f.request + split(e, f).own).unwrap_or(0);
    if let Some((i, free)) = e
        .other_gpus
        .iter()
        .filter(|g| g.1 >= need.max(1))
        .max_by_key(|g| g.1)
    {
        s.push(Suggestion {
            action: format!("CUDA_VISIBLE_DEVICES={i}"),
            why: format!("GPU {i} has {} free", human(*free)),
        });
    }
    if e.pytorch && leftover.len() < e.others.len().max(1) && usable > 0 {
        let frac = ((usable.saturating_sub(others)) as f64 / usable as f64 * 20.0).floor() / 20.0;
        if frac >= 0.05 {
            s.push(Suggestion {
                action: format!("torch.cuda.set_per_process_memory_fraction({frac:.2})"),
                why: "if these jobs are meant to share the GPU, cap each one so that none can starve the others".into(),
            });
        }
    }
    let summary = match f {
        Some(f) => format!(
            "other processes hold {}: the run's {} + {} request would fit on an empty device ({}) but not next to them",
            human(others),
            human(f.live),
            human(f.request),
            human(usable)
        ),
        None => format!("leftover processes hold {} of device memory", human(others)),
    };
    Finding {
        cause: Cause::OtherProcesses,
        summary,
        evidence: ev,
        suggestions: s,
    }
}

fn frag_finding(e: &Evidence, f: &Failure) -> Finding {
    let mut ev = Vec::new();
    // the driver-level figures explain the failure only where no free block there fits
    let arena_explains = f.cached_unused.is_none() || f.largest_free.is_some_and(|l| l < f.request);
    if let (true, Some(t), Some(l)) = (arena_explains, f.free_total, f.largest_free) {
        ev.push(format!(
            "{} free in total, but the largest free block is {} (fragmentation {:.2})",
            human(t),
            human(l),
            if t > 0 {
                1.0 - l as f64 / t as f64
            } else {
                0.0
            }
        ));
    }
    if let Some(c) = f.cached_unused {
        ev.push(format!(
            "the caching allocator held {} reserved but unallocated",
            human(c)
        ));
    }
    let mut s = Vec::new();
    if e.pytorch && !e.simulated.is_empty() {
        // Settings tried on the run's own history: those that fit are the advice, in order
        // of the peak they reach; those that still run out are said not to help.
        let mut fits: Vec<&SimulatedConf> = e.simulated.iter().filter(|c| c.ooms == 0).collect();
        fits.sort_by_key(|c| c.peak_reserved);
        for c in fits {
            s.push(Suggestion {
                action: format!("PYTORCH_CUDA_ALLOC_CONF={}", c.conf),
                why: format!(
                    "replayed on this run's own allocator history, it does not run out of memory (peak reserved {}; fragprobe simulate {} --alloc-conf {})",
                    human(c.peak_reserved),
                    c.snapshot,
                    c.conf
                ),
            });
        }
        for c in e.simulated.iter().filter(|c| c.ooms > 0) {
            ev.push(format!(
                "{} would not have helped: replayed on this run's history it still runs out of memory",
                c.conf
            ));
        }
    } else if e.pytorch {
        s.push(Suggestion {
            action: "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True".into(),
            why: "segments grow in place instead of needing one new contiguous block".into(),
        });
        s.push(Suggestion {
            action: format!("PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:{}", split_size_mb(f.request)),
            why: format!(
                "blocks above that size are not split for small requests, so large free blocks stay whole for requests like the failed {}",
                human(f.request)
            ),
        });
    } else {
        s.push(Suggestion {
            action: "allocate the largest, longest-lived buffers first and reuse them, or use a stream-ordered pool (cudaMallocAsync)".into(),
            why: "interleaved short- and long-lived allocations leave holes too small for large requests".into(),
        });
    }
    Finding {
        cause: Cause::Fragmentation,
        summary: format!(
            "fragmentation: enough memory was free, but no free block could hold the {} request",
            human(f.request)
        ),
        evidence: ev,
        suggestions: s,
    }
}

fn leak_finding(e: &Evidence, t: &Trend) -> Finding {
    let label = if e.live_label.is_empty() {
        "memory"
    } else {
        &e.live_label
    };
    let mut ev = vec![format!(
        "minimum {label} per segment of {:.1}s: {}",
        t.segment_ns as f64 / 1e9,
        t.minima
            .iter()
            .map(|&m| human(m))
            .collect::<Vec<_>>()
            .join(" → ")
    )];
    if let Some(u) = e.unfreed_at_exit.filter(|&u| u > 0) {
        ev.push(format!(
            "{} was still allocated when the run exited",
            human(u)
        ));
    }
    if let Some(cap) = e.capacity {
        let last = *t.minima.last().unwrap_or(&0);
        if t.per_segment > 0.0 && cap > last {
            let segs = (cap - last) as f64 / t.per_segment;
            ev.push(format!(
                "at this rate the baseline reaches the capacity in about {:.0}s",
                segs * t.segment_ns as f64 / 1e9
            ));
        }
    }
    Finding {
        cause: Cause::Leak,
        summary: format!(
            "leak: the baseline ({label} between iterations) rose by {} (about {} per segment)",
            human(t.rise),
            human(t.per_segment as u64)
        ),
        evidence: ev,
        suggestions: vec![Suggestion {
            action: "find what is kept across iterations: tensors stored in lists (losses without .item()), caches, growing buffers; look at the allocations alive at the end that were made after the first iteration".into(),
            why: "allocator settings cannot fix memory that is never released".into(),
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvml::units::GIB;

    fn base() -> Evidence {
        Evidence {
            capacity: Some(80 * GIB),
            reserved: GIB / 2,
            pytorch: true,
            ..Evidence::default()
        }
    }

    #[test]
    fn peak_demand() {
        let mut e = base();
        e.failures.push(Failure {
            request: 10 * GIB,
            live: 75 * GIB,
            ..Failure::default()
        });
        e.other_gpus = vec![(1, 90 * GIB), (2, 10 * GIB)];
        let v = diagnose(&e);
        assert_eq!(v.findings[0].cause, Cause::PeakDemand);
        assert!(!v.has(Cause::Fragmentation) && !v.has(Cause::OtherProcesses));
        let acts: Vec<&str> = v.findings[0]
            .suggestions
            .iter()
            .map(|s| s.action.as_str())
            .collect();
        assert!(acts.contains(&"CUDA_VISIBLE_DEVICES=1"), "{acts:?}");
        assert!(!acts.iter().any(|a| a.contains("expandable_segments")));
    }

    #[test]
    fn context_outside_the_allocations_counts_toward_peak_demand() {
        // 1 GiB device, 300 MiB context, 22 × 32 MiB held, a 23rd fails: the device is full.
        let mut e = Evidence {
            capacity: Some(GIB),
            ..Evidence::default()
        };
        e.failures.push(Failure {
            request: 32 * MIB,
            live: 704 * MIB,
            free_total: Some(320 * MIB),
            largest_free: Some(320 * MIB),
            outside: Some(300 * MIB),
            ..Failure::default()
        });
        let v = diagnose(&e);
        assert_eq!(v.findings[0].cause, Cause::PeakDemand, "{v:?}");
        assert!(v.findings[0]
            .summary
            .contains("outside the tracked allocations"));
        // The same memory held by a known other process is the other process's fault.
        e.others_unattributed = Some(300 * MIB);
        assert_eq!(diagnose(&e).findings[0].cause, Cause::OtherProcesses);
    }

    #[test]
    fn much_memory_outside_without_nvml_is_put_down_to_others() {
        // 16 GiB device; the run holds 8 GiB and asks for 2 GiB; cuMemGetInfo said 7.5 GiB
        // were in use besides its allocations: more than a context — someone else.
        let mut e = Evidence {
            capacity: Some(16 * GIB),
            ..Evidence::default()
        };
        e.failures.push(Failure {
            request: 2 * GIB,
            live: 8 * GIB,
            outside: Some(15 * GIB / 2),
            ..Failure::default()
        });
        let v = diagnose(&e);
        assert_eq!(v.findings.len(), 1, "{v:?}");
        assert_eq!(v.findings[0].cause, Cause::OtherProcesses);
        assert!(
            v.findings[0].evidence[0].contains("more than its CUDA context"),
            "{v:?}"
        );
        // Eight processes of the run may hold that much themselves.
        e.run_processes = 8;
        assert_eq!(diagnose(&e).findings[0].cause, Cause::PeakDemand);
    }

    #[test]
    fn other_processes() {
        let mut e = base();
        e.failures.push(Failure {
            request: 4 * GIB,
            live: 60 * GIB,
            ..Failure::default()
        });
        e.others.push(OtherProcess {
            pid: 99,
            used: Some(20 * GIB),
            user: "bob".into(),
            cmdline: "python old.py".into(),
            leftover: true,
        });
        let v = diagnose(&e);
        assert_eq!(v.findings.len(), 1);
        let f = &v.findings[0];
        assert_eq!(f.cause, Cause::OtherProcesses);
        assert!(f.suggestions[0].action.contains("kill 99"));
        assert!(f.evidence[0].contains("leftover"));
    }

    #[test]
    fn unattributed_others_from_nvml() {
        let mut e = base();
        e.failures.push(Failure {
            request: 4 * GIB,
            live: 60 * GIB,
            ..Failure::default()
        });
        e.others_unattributed = Some(18 * GIB);
        let v = diagnose(&e);
        assert!(v.has(Cause::OtherProcesses));
    }

    #[test]
    fn fragmentation() {
        let mut e = base();
        e.failures.push(Failure {
            request: 3 * GIB,
            live: 50 * GIB,
            free_total: Some(29 * GIB),
            largest_free: Some(2 * GIB),
            ..Failure::default()
        });
        let v = diagnose(&e);
        assert_eq!(v.findings.len(), 1);
        assert_eq!(v.findings[0].cause, Cause::Fragmentation);
        let acts: Vec<&str> = v.findings[0]
            .suggestions
            .iter()
            .map(|s| s.action.as_str())
            .collect();
        assert!(acts.contains(&"PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"));
        assert!(
            acts.contains(&"PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:2048"),
            "{acts:?}"
        );
        e.pytorch = false;
        let v = diagnose(&e);
        assert!(!v.findings[0]
            .suggestions
            .iter()
            .any(|s| s.action.contains("PYTORCH")));
    }

    #[test]
    fn caching_allocator_fragmentation() {
        let mut e = base();
        // Held 78 GiB of segments, 10 GiB of them cached but unusable for a 4 GiB block.
        e.failures.push(Failure {
            request: 4 * GIB,
            live: 78 * GIB,
            cached_unused: Some(10 * GIB),
            ..Failure::default()
        });
        assert_eq!(diagnose(&e).findings[0].cause, Cause::Fragmentation);
    }

    #[test]
    fn a_fragmented_cache_smaller_than_the_request_is_still_fragmentation() {
        // demo --torch on real PyTorch: 2 GiB device, 300 MiB context, PyTorch held
        // 1040 MiB of segments with 416 MiB of 8 MiB holes, and asked for 916 MiB.
        let mut e = base();
        e.capacity = Some(2048 * MIB);
        e.reserved = 0;
        e.pytorch = true;
        e.failures.push(Failure {
            request: 916 * MIB,
            live: 1040 * MIB,
            cached_unused: Some(416 * MIB),
            outside: Some(300 * MIB),
            ..Failure::default()
        });
        let v = diagnose(&e);
        assert_eq!(v.findings[0].cause, Cause::Fragmentation, "{v:?}");
        assert!(v.findings[0].suggestions[0]
            .action
            .contains("expandable_segments:True"));
        // without the cache figure the same failure reads as peak demand
        e.failures[0].cached_unused = None;
        assert_eq!(diagnose(&e).findings[0].cause, Cause::PeakDemand);
        // and a cache that would not make room is not fragmentation
        e.failures[0].cached_unused = Some(100 * MIB);
        assert_eq!(diagnose(&e).findings[0].cause, Cause::PeakDemand);
    }

    #[test]
    fn leak_and_no_leak() {
        let mut e = base();
        e.live_label = "live bytes".into();
        // 20 iterations: allocate 1 GiB of activations, free them, but keep 100 MiB.
        let mut t = 0;
        for it in 0..20u64 {
            let baseline = 4 * GIB + it * 100 * MIB;
            for v in [baseline, baseline + GIB, baseline + GIB / 2, baseline] {
                e.live.push((t, v));
                t += 1_000_000;
            }
        }
        let v = diagnose(&e);
        assert_eq!(v.findings.len(), 1, "{v:?}");
        assert_eq!(v.findings[0].cause, Cause::Leak);
        // The same shape without the kept 100 MiB, after a warm-up ramp: no leak.
        let mut e2 = base();
        let mut t = 0;
        for it in 0..20u64 {
            let baseline = if it < 2 { it * 2 * GIB } else { 4 * GIB };
            for v in [baseline, baseline + GIB, baseline] {
                e2.live.push((t, v));
                t += 1_000_000;
            }
        }
        assert!(!diagnose(&e2).has(Cause::Leak));
        assert!(rising_baseline(&e2.live, 8, MIB).is_none());
    }

    #[test]
    fn noisy_flat_is_not_a_leak_and_drops_break_it() {
        let flat: Vec<(u64, u64)> = (0..100)
            .map(|i| (i, 4 * GIB + (i * 7919 % 13) * 1024))
            .collect();
        assert!(rising_baseline(&flat, 8, MIB).is_none());
        let mut up: Vec<(u64, u64)> = (0..100).map(|i| (i, GIB + i * 10 * MIB)).collect();
        assert!(rising_baseline(&up, 8, MIB).is_some());
        up[80].1 = 0;
        assert!(
            rising_baseline(&up, 8, MIB).is_none(),
            "a drop to zero is a release, not a leak"
        );
    }

    #[test]
    fn near_capacity_and_leftovers_without_failures() {
        let mut e = base();
        e.peak_used = Some(79 * GIB);
        e.others.push(OtherProcess {
            pid: 5,
            used: Some(GIB),
            leftover: true,
            ..OtherProcess::default()
        });
        let v = diagnose(&e);
        assert!(v.has(Cause::NearCapacity));
        assert!(v.has(Cause::OtherProcesses));
        let mut e = base();
        e.peak_used = Some(40 * GIB);
        let v = diagnose(&e);
        assert!(!v.found(), "{v:?}");
    }

    #[test]
    fn split_sizes() {
        assert_eq!(split_size_mb(3 * GIB), 2048);
        assert_eq!(split_size_mb(600 * MIB), 512);
        assert_eq!(split_size_mb(MIB), 32);
        assert_eq!(split_size_mb(1024 * MIB), 1024);
    }
}
