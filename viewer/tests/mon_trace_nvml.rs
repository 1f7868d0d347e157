//! `doctor` on traces with NVML samples: each GPU of a process gets its own figure, and a
//! process that ended no longer counts as part of the run.

mod gui_support;

use std::process::Command;

use fragprobe_shared::format::{Api, EventKind, Record};
use gui_support::{Synth, BASE, DEVICE, MIB};

/// What `doctor --json` puts down to other processes on GPU 0 of the trace `s` makes.
fn others_on_gpu0(s: &Synth, name: &str) -> serde_json::Value {
    let trace = std::env::temp_dir().join(format!("fragprobe-{name}-{}.fpt", std::process::id()));
    s.write(&trace);
    let o = Command::new(env!("CARGO_BIN_EXE_fragprobe"))
        .args(["doctor", "--json"])
        .arg(&trace)
        .env("NO_COLOR", "1")
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&trace);
    let out = String::from_utf8_lossy(&o.stdout);
    assert_eq!(
        o.status.code(),
        Some(7),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let gpu0 = v["reports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["evidence"]["device"] == 0)
        .unwrap_or_else(|| panic!("no report for GPU 0: {v}"));
    gpu0["evidence"]["others_unattributed"].clone()
}

#[test]
fn each_gpu_of_a_process_gets_its_own_nvml_figure() {
    let mut s = Synth::new(7, None);
    s.push(Record {
        kind: EventKind::Device as u16,
        api: Api::Probe as u16,
        device: 1,
        size: DEVICE,
        ..Record::default()
    });
    s.alloc(BASE, 500 * MIB);
    s.push(Record {
        kind: EventKind::Alloc as u16,
        api: Api::CudaMalloc as u16,
        device: 1,
        addr: BASE + (1 << 40),
        size: 100 * MIB,
        ..Record::default()
    });
    // One sample, one record per GPU, both with the ring position of the sample: GPU 0
    // holds 900 MiB of which the process 500, GPU 1 only the process's 100.
    s.nvml(900 * MIB, 500 * MIB);
    let seq = s.records.last().unwrap().seq;
    s.nvml(100 * MIB, 100 * MIB);
    let last = s.records.last_mut().unwrap();
    last.device = 1;
    last.seq = seq;
    s.failed(200 * MIB);
    assert_eq!(others_on_gpu0(&s, "two-gpus"), 400 * MIB);
}

#[test]
fn a_process_that_ended_is_not_counted_as_the_run() {
    // A helper (pid 8) held 300 MiB and ended; then pid 7's request fails while another
    // program holds 400 MiB of the 700 MiB in use.
    let mut helper = Synth::new(8, None);
    helper.nvml(300 * MIB, 300 * MIB);
    helper.exit();
    let mut s = Synth::new(7, None);
    s.alloc(BASE, 300 * MIB);
    s.nvml(700 * MIB, 300 * MIB);
    s.failed(400 * MIB);
    let t_end = helper.records.last().unwrap().ts_ns;
    let mut all = Synth::new(7, None);
    all.records = helper.records.clone();
    all.records.extend(s.records.iter().map(|r| Record {
        ts_ns: r.ts_ns + t_end,
        ..*r
    }));
    all.metas = [helper.metas.clone(), s.metas.clone()].concat();
    assert_eq!(others_on_gpu0(&all, "helper"), 400 * MIB);
}
