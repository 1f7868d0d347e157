//! The monitoring commands end to end, without a GPU: NVML missing, `plot` and `doctor`
//! over log files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

fn fragprobe() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_fragprobe"));
    c.env_remove("FRAGPROBE_NVML_LIB").env("NO_COLOR", "1");
    c
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("fp-mon-cli-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn nvml_missing_is_one_line_and_exit_6() {
    for args in [
        vec!["watch", "--once"],
        vec!["log", "--count", "1"],
        vec!["doctor"],
    ] {
        let o = fragprobe()
            .args(&args)
            .args(["--nvml-lib", "/nonexistent/libnvidia-ml.so.1"])
            .output()
            .unwrap();
        let (out, err) = text(&o);
        assert_eq!(o.status.code(), Some(6), "{args:?}: {err}");
        assert!(err.starts_with("NVML unavailable: "), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(out.is_empty() || args[0] == "log", "{out}");
    }
    // The environment variable works the same way.
    let o = fragprobe()
        .args(["watch", "--once"])
        .env("FRAGPROBE_NVML_LIB", "/nonexistent/x.so")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(6));
    assert!(text(&o).1.contains("/nonexistent/x.so"));
}

#[test]
fn bad_alert_and_interval_are_usage_errors() {
    let o = fragprobe()
        .args(["log", "--alert", "used>90", "--count", "1"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o).1.contains("memory needs a unit"), "{}", text(&o).1);
    let o = fragprobe().args(["watch", "-n", "0"]).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
}

/// A CSV like `log` writes: two GPUs, GPU 0 climbing with an alert, GPU 1 flat.
fn write_log(path: &Path) {
    use fragprobe_viewer::nvml::logfile::{csv_header, csv_line, LogRow};
    let mut s = csv_header();
    for i in 0..120u64 {
        for gpu in 0..2u32 {
            let total = 16 * GIB;
            let used = if gpu == 0 {
                // A training loop whose baseline climbs by 40 MiB per iteration of 10 samples.
                2 * GIB + (i / 10) * 40 * MIB + if i % 10 < 5 { GIB } else { 0 }
            } else {
                GIB
            };
            s.push_str(&csv_line(&LogRow {
                unix_ns: 1_700_000_000_000_000_000 + i * 500_000_000,
                gpu,
                uuid: format!("GPU-{gpu}"),
                name: "Sim GPU".into(),
                total: Some(total),
                used: Some(used),
                free: Some(total - used - 80 * MIB),
                reserved: Some(80 * MIB),
                alerts: if gpu == 0 && i == 60 {
                    vec!["used>20%".into()]
                } else {
                    vec![]
                },
                ..LogRow::default()
            }));
        }
    }
    std::fs::write(path, s).unwrap();
}

#[test]
fn plot_writes_a_nonblank_png_of_the_requested_size() {
    let d = scratch("plot");
    let log = d.join("gpu.csv");
    write_log(&log);
    let png = d.join("out.png");
    let o = fragprobe()
        .args(["plot"])
        .arg(&log)
        .arg("-o")
        .arg(&png)
        .args(["--width", "800", "--height", "400"])
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.contains("2 line(s), 1 marker(s)"), "{err}");
    let bytes = std::fs::read(&png).unwrap();
    let pm = tiny_skia::Pixmap::decode_png(&bytes).expect("a valid PNG");
    assert_eq!((pm.width(), pm.height()), (800, 400));
    let px = pm.pixels();
    let white = px
        .iter()
        .filter(|p| p.red() == 255 && p.green() == 255 && p.blue() == 255)
        .count();
    assert!(
        white < px.len() * 97 / 100,
        "mostly blank: {white}/{}",
        px.len()
    );
    // The dashed threshold line is red; the alert marker orange: both are present.
    assert!(
        px.iter()
            .any(|p| p.red() > 200 && p.green() < 60 && p.blue() < 60),
        "no red threshold"
    );
    assert!(
        px.iter()
            .any(|p| p.red() == 255 && (100..150).contains(&p.green()) && p.blue() < 30),
        "no alert marker"
    );
    // JSON Lines plot the same.
    let jl = d.join("gpu.jsonl");
    let data = fragprobe_viewer::nvml::logfile::read(&log).unwrap();
    let lines: String = data
        .rows
        .iter()
        .map(fragprobe_viewer::nvml::logfile::json_line)
        .collect();
    std::fs::write(&jl, lines).unwrap();
    let o = fragprobe()
        .args(["plot"])
        .arg(&jl)
        .arg("-o")
        .arg(d.join("j.png"))
        .args(["-i", "1"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o).1);
    assert!(text(&o).1.contains("1 line(s), 0 marker(s)"));
}

#[test]
fn plot_input_errors() {
    let d = scratch("plot-err");
    let o = fragprobe()
        .args(["plot"])
        .arg(d.join("missing.csv"))
        .arg("-o")
        .arg(d.join("x.png"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3));
    std::fs::write(d.join("junk.bin"), b"\x00\x01not a log").unwrap();
    let o = fragprobe()
        .args(["plot"])
        .arg(d.join("junk.bin"))
        .arg("-o")
        .arg(d.join("x.png"))
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(4), "{}", text(&o).1);
    assert!(!d.join("x.png").exists());
}

#[test]
fn doctor_on_a_log_finds_the_rising_baseline() {
    let d = scratch("doctor");
    let log = d.join("gpu.csv");
    write_log(&log);
    let o = fragprobe().args(["doctor"]).arg(&log).output().unwrap();
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(7), "{out}{err}");
    let gpu0 = out.split("GPU 1").next().unwrap();
    assert!(gpu0.contains("[leak]"), "{out}");
    assert!(
        out.split("GPU 1")
            .nth(1)
            .unwrap()
            .contains("no out-of-memory cause found"),
        "{out}"
    );
    let o = fragprobe()
        .args(["doctor", "--json", "-i", "0"])
        .arg(&log)
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let reports = v["reports"].as_array().unwrap();
    assert_eq!(reports.len(), 1);
    assert_eq!(reports[0]["verdict"]["findings"][0]["cause"], "leak");
    assert_eq!(reports[0]["evidence"]["capacity"], 16 * GIB);
}
