//! The exporters: a trace as CSV (one row per event that changed a device's figures) or as
//! a Chrome/Perfetto JSON trace. Both are observers of one replay
//! ([`fragprobe_shared::replay`]); `fragprobe export` opens the file and picks one.

use std::collections::HashMap;
use std::io::Write;

use fragprobe_shared::format::{EventKind, Record};
use fragprobe_shared::model::Model;
use fragprobe_shared::trace::Trace;
use serde_json::json;

/// The figures of the device a record touched, after it was applied.
fn device_row(
    model: &Model,
    r: &Record,
) -> Option<(
    i16,
    fragprobe_shared::model::Snapshot,
    Option<u64>,
    Option<u64>,
)> {
    let sid = model.space_id(r.pid, r.device)?;
    let space = model.space(sid)?;
    let dev = model.device(space.device())?;
    let snap = model.device_final(dev.id());
    Some((
        dev.ordinal(),
        snap,
        dev.samples().nvml_used,
        dev.samples().driver_free,
    ))
}

fn is_state_change(k: Option<EventKind>) -> bool {
    matches!(k, Some(k) if (k as u16) <= EventKind::Import as u16 || matches!(k, EventKind::NvmlSample | EventKind::ResyncEnd | EventKind::ProcessExit))
}

/// Writes `trace` as CSV, one row per event that changed a device's figures (time, live,
/// mapped, reserved, NVML used and driver free where recorded, largest free block, total
/// free, fragmentation ratio); returns the rows written.
pub fn csv(trace: &Trace, out: &mut dyn Write) -> anyhow::Result<u64> {
    writeln!(out, "time_ns,time_rel_s,pid,device,event,api,result,live_bytes,mapped_bytes,reserved_bytes,nvml_used_bytes,driver_free_bytes,largest_free_block,total_free,fragmentation_ratio")?;
    let mut model = Model::new();
    let mut first = None;
    let mut rows = 0;
    fragprobe_shared::replay::try_trace(trace, &mut model, |model, r| -> anyhow::Result<()> {
        if !is_state_change(r.kind()) {
            return Ok(());
        }
        let Some((ord, snap, nvml, dfree)) = device_row(model, r) else {
            return Ok(());
        };
        let t0 = *first.get_or_insert(r.ts_ns);
        let a = snap.arena;
        writeln!(
            out,
            "{},{:.9},{},{},{},{},{},{},{},{},{},{},{},{},{:.6}",
            r.ts_ns,
            r.ts_ns.saturating_sub(t0) as f64 / 1e9,
            r.pid,
            ord,
            r.kind().map(|k| k.name()).unwrap_or("?"),
            r.api().map(|a| a.name()).unwrap_or("?"),
            r.result,
            snap.totals.live_bytes,
            snap.totals.mapped_bytes,
            snap.totals.reserved_bytes,
            nvml.map(|v| v.to_string()).unwrap_or_default(),
            dfree.map(|v| v.to_string()).unwrap_or_default(),
            a.map(|a| a.largest_free.to_string()).unwrap_or_default(),
            a.map(|a| a.total_free.to_string()).unwrap_or_default(),
            a.map(|a| a.ratio()).unwrap_or(0.0)
        )?;
        rows += 1;
        Ok(())
    })?;
    Ok(rows)
}

/// Writes `trace` as a Chrome/Perfetto JSON trace: counter tracks for the curves, async
/// slices for allocation lifetimes, metadata naming processes and threads; returns the
/// trace events written.
pub fn chrome(trace: &Trace, out: &mut dyn Write) -> anyhow::Result<u64> {
    let mut model = Model::new();
    let mut n = 0u64;
    let mut first = true;
    let mut emit = |out: &mut dyn Write, v: serde_json::Value| -> anyhow::Result<()> {
        if !first {
            out.write_all(b",\n")?;
        }
        first = false;
        serde_json::to_writer(&mut *out, &v)?;
        n += 1;
        Ok(())
    };
    out.write_all(b"{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n")?;
    let mut named_pids = std::collections::HashSet::new();
    let mut named_tids = std::collections::HashSet::new();
    let mut open: HashMap<(u32, u64), (u64, Record)> = HashMap::new();
    let mut last_counter: HashMap<(u32, i16), u64> = HashMap::new();
    let mut t_end = 0;
    fragprobe_shared::replay::try_trace(trace, &mut model, |model, r| -> anyhow::Result<()> {
        let us = r.ts_ns as f64 / 1000.0;
        t_end = t_end.max(r.ts_ns);
        if r.pid != 0 && named_pids.insert(r.pid) {
            emit(
                out,
                json!({"ph":"M","name":"process_name","pid":r.pid,"args":{"name":format!("pid {}", r.pid)}}),
            )?;
        }
        if r.kind == EventKind::ProcessStart as u16 {
            if let Some(p) = model.process(r.pid) {
                let name = p.info().cmdline.join(" ");
                emit(
                    out,
                    json!({"ph":"M","name":"process_name","pid":r.pid,"args":{"name":format!("{} (pid {})", name, r.pid)}}),
                )?;
            }
        }
        if r.tid != 0 && named_tids.insert((r.pid, r.tid)) {
            emit(
                out,
                json!({"ph":"M","name":"thread_name","pid":r.pid,"tid":r.tid,"args":{"name":format!("thread {}", r.tid)}}),
            )?;
        }
        let kind = r.kind();
        let alloc_like = matches!(
            kind,
            Some(
                EventKind::Alloc
                    | EventKind::AsyncAlloc
                    | EventKind::ManagedAlloc
                    | EventKind::MemCreate
            )
        );
        let free_like = matches!(
            kind,
            Some(EventKind::Free | EventKind::AsyncFree | EventKind::MemRelease)
        );
        let api = r.api().map(|a| a.name()).unwrap_or("?");
        if alloc_like && r.ok() {
            open.insert((r.pid, r.addr), (r.seq, *r));
            emit(
                out,
                json!({"ph":"b","cat":"allocation","name":format!("{} {}", crate::report::bytes(r.size), api),"id":format!("{}:{}", r.pid, r.seq),"pid":r.pid,"tid":r.tid,"ts":us,"args":{"addr":format!("{:#x}", r.addr),"size":r.size,"device":r.device}}),
            )?;
        } else if alloc_like {
            emit(
                out,
                json!({"ph":"i","s":"p","cat":"failure","name":format!("FAILED {} {} (result {})", api, crate::report::bytes(r.size), r.result),"pid":r.pid,"tid":r.tid,"ts":us}),
            )?;
        } else if free_like && r.ok() {
            if let Some((seq, a)) = open.remove(&(r.pid, r.addr)) {
                emit(
                    out,
                    json!({"ph":"e","cat":"allocation","name":format!("{} {}", crate::report::bytes(a.size), a.api().map(|x| x.name()).unwrap_or("?")),"id":format!("{}:{}", r.pid, seq),"pid":r.pid,"tid":a.tid,"ts":us}),
                )?;
            }
        }
        if is_state_change(kind) {
            if let Some((ord, snap, nvml, _)) = device_row(model, r) {
                // At most one counter sample per microsecond per device: keeps huge traces small.
                let key = (r.pid, ord);
                if last_counter.get(&key).is_none_or(|t| r.ts_ns >= t + 1000) {
                    last_counter.insert(key, r.ts_ns);
                    let a = snap.arena;
                    let mut mem =
                        json!({"live": snap.totals.live_bytes, "mapped": snap.totals.mapped_bytes});
                    if let Some(v) = nvml {
                        mem["nvml_used"] = json!(v);
                    }
                    emit(
                        out,
                        json!({"ph":"C","name":format!("device {ord} memory (bytes)"),"pid":r.pid,"ts":us,"args":mem}),
                    )?;
                    if let Some(a) = a {
                        emit(
                            out,
                            json!({"ph":"C","name":format!("device {ord} largest free block (bytes)"),"pid":r.pid,"ts":us,"args":{"largest_free":a.largest_free,"total_free":a.total_free}}),
                        )?;
                        emit(
                            out,
                            json!({"ph":"C","name":format!("device {ord} fragmentation ratio"),"pid":r.pid,"ts":us,"args":{"ratio":a.ratio()}}),
                        )?;
                    }
                }
            }
        }
        Ok(())
    })?;
    for ((pid, _), (seq, a)) in open {
        emit(
            out,
            json!({"ph":"e","cat":"allocation","name":format!("{} {}", crate::report::bytes(a.size), a.api().map(|x| x.name()).unwrap_or("?")),"id":format!("{}:{}", pid, seq),"pid":pid,"tid":a.tid,"ts":t_end as f64 / 1000.0,"args":{"live_at_end":true}}),
        )?;
    }
    out.write_all(b"\n]}\n")?;
    Ok(n)
}
