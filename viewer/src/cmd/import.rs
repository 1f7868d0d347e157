//! `fragprobe import SNAPSHOT [-o TRACE] [--pickle OUT] [--json]`.
//!
//! Reads a PyTorch memory snapshot (`torch.cuda.memory._dump_snapshot()`) with fragprobe's
//! safe pickle reader — the file is never executed — and prints its allocator-level
//! figures: what is allocated, reserved, stranded in split segments, lost to rounding, and
//! fragmentation by each definition in use (now, and at the peak of the recorded trace).
//!
//! - `-o TRACE`: also write the snapshot's device layer (segments) as a fragprobe trace,
//!   so `fragprobe report`/the viewer can open it.
//! - `--pickle OUT`: write the snapshot back as a plain pickle for PyTorch's `memory_viz`.
//!
//! [`trace_to_pickle`] does the reverse conversion (a fragprobe trace as a snapshot that
//! opens in `memory_viz`).

use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use fragprobe_shared::format::{MetaKind, MetaWriter};
use fragprobe_shared::torch::figures::{figures, Figures, PeakFigures};
use fragprobe_shared::torch::json::{array, Obj};
use fragprobe_shared::torch::sim::Version;
use fragprobe_shared::torch::snapshot::{BlockState, Segment, Snapshot};
use fragprobe_shared::torch::verify::verify;
use fragprobe_shared::torch::{from_records, to_records, write_snapshot_pickle};
use fragprobe_shared::trace::{Trace, TraceWriter};

use super::simulate::{human, load};

/// Options of `fragprobe import`.
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// The snapshot pickle (`torch.cuda.memory._dump_snapshot(path)`).
    pub snapshot: PathBuf,
    /// Write the segments as a fragprobe trace here.
    #[arg(short, long, value_name = "TRACE")]
    pub output: Option<PathBuf>,
    /// Write the snapshot back as a plain pickle for PyTorch's memory_viz.
    #[arg(long, value_name = "OUT")]
    pub pickle: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
}

struct DeviceSummary {
    device: i32,
    now: Figures,
    blocks: usize,
    pending: usize,
    events: usize,
    history: Option<(PeakFigures, bool)>,
}

fn summarize(snap: &Snapshot) -> Vec<DeviceSummary> {
    let verified = verify(snap, Version::DEFAULT).ok();
    snap.devices()
        .into_iter()
        .map(|d| {
            let segs: Vec<Segment> = snap.device_segments(d).cloned().collect();
            let blocks = segs.iter().map(|s| s.blocks.len()).sum();
            let pending = segs
                .iter()
                .flat_map(|s| &s.blocks)
                .filter(|b| b.state == BlockState::ActivePendingFree)
                .count();
            let events = snap.trace(d).len();
            let history = verified
                .as_ref()
                .and_then(|v| v.devices.iter().find(|x| x.device == d))
                .and_then(|x| {
                    (events > 0).then(|| {
                        let exact =
                            x.alloc_address_matches == x.alloc_events && x.final_state_matches;
                        (PeakFigures::from(&x.stats), exact)
                    })
                });
            DeviceSummary {
                device: d,
                now: figures(&segs),
                blocks,
                pending,
                events,
                history,
            }
        })
        .collect()
}

fn render(snap: &Snapshot, path: &Path, devs: &[DeviceSummary]) -> String {
    let f = &snap.format;
    let mut out = format!(
        "{}: PyTorch memory snapshot ({:?} layout, pickle protocol {}{}{})\n",
        path.display(),
        f.layout,
        f.pickle_protocol,
        if f.has_time_us { ", timed trace" } else { "" },
        if f.legacy_history {
            ", 2.0-era block history"
        } else {
            ""
        },
    );
    match &snap.settings {
        Some(s) => out.push_str(&format!(
            "settings: PYTORCH_CUDA_ALLOC_CONF={:?} max_split_size={} expandable_segments={} gc_threshold={}\n",
            s.conf,
            s.max_split_size.map_or("unlimited".into(), human),
            s.expandable_segments,
            s.garbage_collection_threshold
        )),
        None => match fragprobe_shared::torch::sim::Config::of_snapshot(
            snap,
            fragprobe_shared::torch::sim::Version::DEFAULT,
        )
        .ok()
        .and_then(|c| c.inferred.map(|why| (c.source, why)))
        {
            Some((conf, why)) => out.push_str(&format!(
                "settings: not recorded; {conf} inferred ({why})\n"
            )),
            None => out.push_str("settings: not recorded (assuming defaults)\n"),
        },
    }
    if let Some((name, why)) = snap.other_backend() {
        out.push_str(&format!("backend: looks like {name}: {why}\n"));
    }
    let pct = |x: f64| format!("{:.1} %", 100.0 * x);
    for d in devs {
        let n = &d.now;
        out.push_str(&format!(
            "device {}: {} segments, {} blocks ({} pending free), {} trace entries\n",
            d.device, n.segments, d.blocks, d.pending, d.events
        ));
        out.push_str(&format!(
            "  reserved {}  allocated {}  requested {}  active {}  free {}\n",
            human(n.reserved),
            human(n.allocated),
            human(n.requested),
            human(n.active),
            human(n.free)
        ));
        out.push_str(&format!(
            "  non-releasable (inactive split) {}  rounding waste {}\n",
            human(n.non_releasable),
            human(n.internal_waste)
        ));
        out.push_str(&format!(
            "  largest free block {} (small pool {}, large pool {})\n",
            human(n.largest_free),
            human(n.largest_free_small),
            human(n.largest_free_large)
        ));
        out.push_str(&format!(
            "  reserved-but-unallocated {}   external 1−largest/free {}   MemoryViz Σgap²/reserved² {}\n",
            pct(n.unallocated_fraction()),
            pct(n.external_fragmentation()),
            pct(n.memory_viz_fragmentation())
        ));
        if let Some((p, exact)) = &d.history {
            out.push_str(&format!(
                "  over the trace{}: peak reserved {}, peak allocated {}, peak active {}\n",
                if *exact { "" } else { " (replay NOT exact)" },
                human(p.peak_reserved),
                human(p.peak_allocated),
                human(p.peak_active)
            ));
            out.push_str(&format!(
                "  reserved-but-unallocated at peak {}   GMLake 1−peak active/peak reserved {}\n",
                pct(p.unallocated_at_peak_fraction()),
                pct(p.gmlake_fragmentation())
            ));
        }
    }
    out
}

fn to_json(snap: &Snapshot, path: &Path, devs: &[DeviceSummary]) -> String {
    let f = &snap.format;
    Obj::new()
        .s("file", &path.display().to_string())
        .s("layout", &format!("{:?}", f.layout))
        .u("pickle_protocol", f.pickle_protocol as u64)
        .b("has_time_us", f.has_time_us)
        .b("legacy_history", f.legacy_history)
        .opt_s(
            "alloc_conf",
            snap.settings.as_ref().map(|s| s.conf.as_str()),
        )
        .raw(
            "devices",
            &array(devs.iter().map(|d| {
                let o = Obj::new()
                    .i("device", d.device as i64)
                    .u("blocks", d.blocks as u64)
                    .u("pending_free_blocks", d.pending as u64)
                    .u("trace_entries", d.events as u64)
                    .raw("now", &d.now.to_json());
                match &d.history {
                    Some((p, exact)) => o
                        .b("history_exact", *exact)
                        .raw("history", &p.to_json())
                        .end(),
                    None => o.raw("history", "null").end(),
                }
            })),
        )
        .end()
}

/// Writes the segments of `snap` as a fragprobe trace.
pub fn write_trace(snap: &Snapshot, source: &Path, out: &Path) -> anyhow::Result<u64> {
    let records = to_records(snap);
    let mut w = TraceWriter::create(out).with_context(|| format!("creating {}", out.display()))?;
    let mut buf = [0u8; 1024];
    let mut m = MetaWriter::new(&mut buf, MetaKind::RunInfo);
    // Absolute, so that `report` finds the snapshot again from wherever the trace is.
    let source = source
        .canonicalize()
        .unwrap_or_else(|_| source.to_path_buf());
    m.field(b"source", crate::torchhook::IMPORT_SOURCE.as_bytes())
        .field(b"snapshot", source.display().to_string().as_bytes())
        .field(b"fragprobe_version", env!("CARGO_PKG_VERSION").as_bytes());
    let (len, _) = m.finish();
    w.write_run_info(&buf[..len])?;
    w.write_records(&records)?;
    w.finish()?;
    Ok(records.len() as u64)
}

/// Converts a fragprobe trace into a snapshot pickle that PyTorch's `memory_viz` opens
/// (every device allocation becomes a one-block segment).
pub fn trace_to_pickle(trace: &Path, out: &Path) -> anyhow::Result<()> {
    let t = Trace::open(trace).map_err(|e| anyhow::Error::new(crate::load::coded(e)))?;
    let records: Vec<_> = t.records().collect();
    let snap = from_records(&records);
    write_pickle(&snap, out)
}

fn write_pickle(snap: &Snapshot, out: &Path) -> anyhow::Result<()> {
    let f = std::fs::File::create(out).with_context(|| format!("creating {}", out.display()))?;
    write_snapshot_pickle(BufWriter::with_capacity(1 << 20, f), snap)
        .with_context(|| format!("writing {}", out.display()))?;
    Ok(())
}

/// `fragprobe import`.
pub fn run(args: &Args) -> anyhow::Result<ExitCode> {
    let snap = load(&args.snapshot)?;
    if snap.segments.is_empty() && snap.event_count() == 0 {
        // A well-formed snapshot of nothing (taken before anything was allocated, or of a
        // device the program never used): not bad input, so it exits 0 as `simulate` does.
        eprintln!(
            "fragprobe: note: {} holds no segments and no trace: nothing was allocated when it was taken",
            args.snapshot.display()
        );
    }
    let devs = summarize(&snap);
    if args.json {
        crate::stdout::println(&to_json(&snap, &args.snapshot, &devs))?;
    } else {
        crate::stdout::print(&render(&snap, &args.snapshot, &devs))?;
    }
    if let Some(out) = &args.output {
        let n = write_trace(&snap, &args.snapshot, out)?;
        eprintln!("fragprobe: wrote {n} segment events to {}", out.display());
    }
    if let Some(out) = &args.pickle {
        write_pickle(&snap, out)?;
        eprintln!("fragprobe: wrote {}", out.display());
    }
    // The command ends the process: hand the snapshot's memory back with it instead of
    // freeing millions of trace entries one by one first.
    std::mem::forget(snap);
    Ok(ExitCode::SUCCESS)
}
