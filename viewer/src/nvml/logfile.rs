//! The rows `fragprobe log` writes (CSV or JSON Lines) and reads back for `plot` and
//! `doctor`.
//!
//! One row per GPU (and per MIG instance) per sample. Memory comes in MiB (like
//! nvidia-smi) and in exact bytes; `memory.used` is computed as `total − free − reserved`.
//! A value the driver did not give is `n/a` in CSV and `null` in JSON. Files are only ever
//! appended to; each row is written with one `write` and flushed before the next sample.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::Path;

use serde_json::{json, Value};

use super::alert::Firing;
use super::sample::{DeviceSample, Snapshot};
use super::units::{iso8601, parse_iso8601, MIB};

/// The CSV header, in column order.
pub const CSV_COLUMNS: &[&str] = &[
    "timestamp",
    "unix_s",
    "gpu",
    "mig",
    "uuid",
    "name",
    "memory.total.MiB",
    "memory.used.MiB",
    "memory.free.MiB",
    "memory.reserved.MiB",
    "memory.total.bytes",
    "memory.used.bytes",
    "memory.free.bytes",
    "memory.reserved.bytes",
    "utilization.gpu.pct",
    "utilization.memory.pct",
    "temperature.gpu.C",
    "power.draw.W",
    "power.limit.W",
    "pstate",
    "clocks.sm.MHz",
    "clocks.mem.MHz",
    "ecc.corrected",
    "ecc.uncorrected",
    "alerts",
];

/// What a missing value looks like in CSV (pandas reads it as NaN by default).
pub const NA: &str = "n/a";

/// Output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Comma-separated values with a header row.
    Csv,
    /// One JSON object per line.
    Jsonl,
}

/// One GPU at one sample.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LogRow {
    /// ns since the epoch.
    pub unix_ns: u64,
    /// GPU index.
    pub gpu: u32,
    /// MIG instance index on that GPU, `None` for the whole GPU.
    pub mig: Option<u32>,
    /// UUID, empty when unknown.
    pub uuid: String,
    /// Name, empty when unknown.
    pub name: String,
    /// Total bytes.
    pub total: Option<u64>,
    /// Used bytes (`total − free − reserved`).
    pub used: Option<u64>,
    /// Free bytes.
    pub free: Option<u64>,
    /// Reserved bytes.
    pub reserved: Option<u64>,
    /// GPU utilisation %.
    pub util_gpu: Option<u32>,
    /// Memory utilisation %.
    pub util_mem: Option<u32>,
    /// °C.
    pub temp: Option<u32>,
    /// Watts.
    pub power_w: Option<f64>,
    /// Watts.
    pub power_limit_w: Option<f64>,
    /// P-state number.
    pub pstate: Option<u32>,
    /// MHz.
    pub clock_sm: Option<u32>,
    /// MHz.
    pub clock_mem: Option<u32>,
    /// Volatile corrected ECC errors.
    pub ecc_corrected: Option<u64>,
    /// Volatile uncorrected ECC errors.
    pub ecc_uncorrected: Option<u64>,
    /// (pid, used bytes) per process; JSON Lines only (`None` in CSV).
    pub processes: Option<Vec<(u32, Option<u64>)>>,
    /// Alerts that fired on this GPU at this sample.
    pub alerts: Vec<String>,
}

/// The rows for one snapshot, with the alerts that fired attached to their GPU.
pub fn rows(snap: &Snapshot, fired: &[Firing]) -> Vec<LogRow> {
    let mut out = Vec::new();
    for d in &snap.devices {
        let alerts: Vec<String> = fired
            .iter()
            .filter(|f| f.gpu == d.index)
            .map(|f| f.text.clone())
            .collect();
        out.push(row(snap.unix_ns, d.index, None, d, alerts));
        for m in &d.mig {
            out.push(row(snap.unix_ns, d.index, Some(m.index), m, Vec::new()));
        }
    }
    out
}

fn row(unix_ns: u64, gpu: u32, mig: Option<u32>, d: &DeviceSample, alerts: Vec<String>) -> LogRow {
    let m = d.memory.as_ref().ok();
    LogRow {
        unix_ns,
        gpu,
        mig,
        uuid: d.uuid.clone().unwrap_or_default(),
        name: d.name.clone().unwrap_or_default(),
        total: m.map(|m| m.total),
        used: m.map(|m| m.used()),
        free: m.map(|m| m.free),
        reserved: m.map(|m| m.reserved),
        util_gpu: d.util_gpu.clone().ok(),
        util_mem: d.util_mem.clone().ok(),
        temp: d.temperature.clone().ok(),
        power_w: d.power_mw.as_ref().ok().map(|&mw| mw as f64 / 1000.0),
        power_limit_w: d.power_limit_mw.as_ref().ok().map(|&mw| mw as f64 / 1000.0),
        pstate: d.pstate.clone().ok(),
        clock_sm: d.clock_sm.clone().ok(),
        clock_mem: d.clock_mem.clone().ok(),
        ecc_corrected: d.ecc_corrected.clone().ok(),
        ecc_uncorrected: d.ecc_uncorrected.clone().ok(),
        processes: d
            .processes
            .as_ref()
            .ok()
            .map(|ps| ps.iter().map(|p| (p.pid, p.used)).collect()),
        alerts,
    }
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| NA.to_string())
}

fn csv_field(s: &str) -> String {
    if s.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

fn unix_s(ns: u64) -> String {
    format!("{}.{:03}", ns / 1_000_000_000, (ns / 1_000_000) % 1000)
}

/// Parses a decimal seconds value exactly (f64 cannot hold epoch nanoseconds).
fn parse_unix_s(s: &str) -> Option<u64> {
    let (int, frac) = s.split_once('.').unwrap_or((s, ""));
    let secs: u64 = int.parse().ok()?;
    let digits: String = frac.chars().take(9).collect();
    if !digits.chars().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let frac_ns = if digits.is_empty() {
        0
    } else {
        digits.parse::<u64>().ok()? * 10u64.pow(9 - digits.len() as u32)
    };
    secs.checked_mul(1_000_000_000)?.checked_add(frac_ns)
}

/// The CSV header line, newline included.
pub fn csv_header() -> String {
    let mut s = CSV_COLUMNS.join(",");
    s.push('\n');
    s
}

/// One CSV line, newline included.
pub fn csv_line(r: &LogRow) -> String {
    let f = |v: Option<f64>| v.map(|w| format!("{w:.2}")).unwrap_or_else(|| NA.into());
    let cells = [
        iso8601(r.unix_ns),
        unix_s(r.unix_ns),
        r.gpu.to_string(),
        r.mig.map(|m| m.to_string()).unwrap_or_default(),
        csv_field(&r.uuid),
        csv_field(&r.name),
        opt(r.total.map(|b| b / MIB)),
        opt(r.used.map(|b| b / MIB)),
        opt(r.free.map(|b| b / MIB)),
        opt(r.reserved.map(|b| b / MIB)),
        opt(r.total),
        opt(r.used),
        opt(r.free),
        opt(r.reserved),
        opt(r.util_gpu),
        opt(r.util_mem),
        opt(r.temp),
        f(r.power_w),
        f(r.power_limit_w),
        r.pstate
            .map(|p| format!("P{p}"))
            .unwrap_or_else(|| NA.into()),
        opt(r.clock_sm),
        opt(r.clock_mem),
        opt(r.ecc_corrected),
        opt(r.ecc_uncorrected),
        csv_field(&r.alerts.join(";")),
    ];
    let mut s = cells.join(",");
    s.push('\n');
    s
}

/// One JSON line, newline included.
pub fn json_line(r: &LogRow) -> String {
    let v = json!({
        "timestamp": iso8601(r.unix_ns),
        "unix_s": r.unix_ns as f64 / 1e9,
        "unix_ns": r.unix_ns,
        "gpu": r.gpu,
        "mig": r.mig,
        "uuid": r.uuid,
        "name": r.name,
        "memory": {"total": r.total, "used": r.used, "free": r.free, "reserved": r.reserved},
        "utilization": {"gpu": r.util_gpu, "memory": r.util_mem},
        "temperature_c": r.temp,
        "power_w": r.power_w,
        "power_limit_w": r.power_limit_w,
        "pstate": r.pstate,
        "clocks_mhz": {"sm": r.clock_sm, "mem": r.clock_mem},
        "ecc": {"corrected": r.ecc_corrected, "uncorrected": r.ecc_uncorrected},
        "processes": r.processes.as_ref().map(|ps| ps.iter().map(|(pid, used)| json!({"pid": pid, "used_bytes": used})).collect::<Vec<_>>()),
        "alerts": r.alerts,
    });
    let mut s = v.to_string();
    s.push('\n');
    s
}

/// Where rows go: a file opened for appending, or standard output.
pub struct LogWriter {
    out: Box<dyn Write + Send>,
    file: Option<File>,
    format: Format,
    fsync: bool,
}

impl LogWriter {
    /// Appends to `path`, creating it. A CSV file gets the header only when it is empty;
    /// an existing CSV file whose header differs is refused (the columns would not line
    /// up). A file whose last line was cut off (a crash mid-write) gets a newline first
    /// so the cut line stays one bad line instead of corrupting the next row.
    pub fn append(path: &Path, format: Format, fsync: bool) -> io::Result<LogWriter> {
        let mut f = File::options()
            .read(true)
            .append(true)
            .create(true)
            .open(path)?;
        let len = f.metadata()?.len();
        let mut w = LogWriter {
            out: Box::new(io::sink()),
            file: None,
            format,
            fsync,
        };
        if len > 0 {
            if format == Format::Csv {
                let mut head = Vec::new();
                f.seek(SeekFrom::Start(0))?;
                (&mut f).take(4096).read_to_end(&mut head)?;
                let first = head.split(|&b| b == b'\n').next().unwrap_or(&[]);
                let want = CSV_COLUMNS.join(",");
                if first != want.as_bytes() {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "{} already holds data with another header; `log` only appends to its own CSV files (choose a new file)",
                            path.display()
                        ),
                    ));
                }
            }
            let mut last = [0u8; 1];
            f.seek(SeekFrom::Start(len - 1))?;
            f.read_exact(&mut last)?;
            w.file = Some(f);
            if last[0] != b'\n' {
                w.write_raw("\n")?;
            }
        } else {
            w.file = Some(f);
            if format == Format::Csv {
                w.write_raw(&csv_header())?;
            }
        }
        Ok(w)
    }

    /// Writes to standard output; CSV gets its header first.
    pub fn stdout(format: Format) -> io::Result<LogWriter> {
        let mut w = LogWriter {
            out: Box::new(io::stdout()),
            file: None,
            format,
            fsync: false,
        };
        if format == Format::Csv {
            w.write_raw(&csv_header())?;
        }
        Ok(w)
    }

    /// Writes one row and flushes it (and syncs it to disk with `fsync`).
    pub fn write_row(&mut self, r: &LogRow) -> io::Result<()> {
        let line = match self.format {
            Format::Csv => csv_line(r),
            Format::Jsonl => json_line(r),
        };
        self.write_raw(&line)
    }

    fn write_raw(&mut self, s: &str) -> io::Result<()> {
        match self.file.as_mut() {
            Some(f) => {
                f.write_all(s.as_bytes())?;
                if self.fsync {
                    f.sync_data()?;
                }
                Ok(())
            }
            None => {
                self.out.write_all(s.as_bytes())?;
                self.out.flush()
            }
        }
    }
}

/// What reading a log file found.
#[derive(Clone, Debug, Default)]
pub struct LogData {
    /// The rows, in file order.
    pub rows: Vec<LogRow>,
    /// Lines that could not be parsed (typically one cut off by a crash).
    pub skipped: usize,
}

/// Why a log could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// The file is missing or unreadable.
    Io(io::Error),
    /// The content is not a `fragprobe log` file.
    NotALog(String),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Io(e) => write!(f, "{e}"),
            ReadError::NotALog(m) => f.write_str(m),
        }
    }
}
impl std::error::Error for ReadError {}

/// Whether `bytes` look like a `fragprobe log` file (CSV header or JSON object lines).
pub fn looks_like_log(bytes: &[u8]) -> bool {
    let t = String::from_utf8_lossy(&bytes[..bytes.len().min(256)]);
    let t = t.trim_start();
    t.starts_with("timestamp,") || t.starts_with('{')
}

/// Reads a CSV or JSON Lines log written by `fragprobe log`.
pub fn read(path: &Path) -> Result<LogData, ReadError> {
    let text = std::fs::read(path).map_err(ReadError::Io)?;
    parse(&String::from_utf8_lossy(&text))
        .map_err(|m| ReadError::NotALog(format!("{}: {m}", path.display())))
}

/// Parses log text (CSV or JSON Lines, detected from the first line).
pub fn parse(text: &str) -> Result<LogData, String> {
    let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
    if first.trim_start().starts_with('{') {
        parse_jsonl(text)
    } else if first.starts_with("timestamp,") {
        parse_csv(text)
    } else {
        Err("not a `fragprobe log` file: expected a CSV header starting with `timestamp,` or JSON lines".into())
    }
}

/// Splits one CSV line, honouring double quotes.
pub fn split_csv(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match (c, quoted) {
            ('"', true) if chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            ('"', _) => quoted = !quoted,
            (',', false) => out.push(std::mem::take(&mut cur)),
            (c, _) => cur.push(c),
        }
    }
    out.push(cur);
    out
}

fn parse_csv(text: &str) -> Result<LogData, String> {
    let mut lines = text.lines();
    let header = split_csv(lines.next().unwrap_or(""));
    let col = |name: &str| header.iter().position(|h| h == name);
    let need =
        |name: &str| col(name).ok_or_else(|| format!("CSV header lacks the `{name}` column"));
    let ts = need("timestamp")?;
    let gpu = need("gpu")?;
    let unix = col("unix_s");
    let idx = |n: &str| col(n);
    let (c_total, c_used, c_free, c_res) = (
        idx("memory.total.bytes"),
        idx("memory.used.bytes"),
        idx("memory.free.bytes"),
        idx("memory.reserved.bytes"),
    );
    let (c_total_mib, c_used_mib) = (idx("memory.total.MiB"), idx("memory.used.MiB"));
    let mut data = LogData::default();
    for line in lines {
        if line.trim().is_empty() || line.starts_with("timestamp,") {
            continue;
        }
        let cells = split_csv(line);
        if cells.len() != header.len() {
            data.skipped += 1;
            continue;
        }
        let get = |c: Option<usize>| {
            c.and_then(|i| cells.get(i))
                .map(|s| s.trim())
                .filter(|s| !s.is_empty() && *s != NA)
        };
        let num = |c: Option<usize>| get(c).and_then(|s| s.parse::<u64>().ok());
        let small = |n: &str| get(idx(n)).and_then(|s| s.parse::<u32>().ok());
        let float = |n: &str| get(idx(n)).and_then(|s| s.parse::<f64>().ok());
        let unix_ns = get(unix)
            .and_then(parse_unix_s)
            .or_else(|| get(Some(ts)).and_then(parse_iso8601));
        let (Some(unix_ns), Some(g)) = (unix_ns, get(Some(gpu)).and_then(|s| s.parse().ok()))
        else {
            data.skipped += 1;
            continue;
        };
        let bytes_or_mib =
            |b: Option<usize>, m: Option<usize>| num(b).or_else(|| num(m).map(|v| v * MIB));
        data.rows.push(LogRow {
            unix_ns,
            gpu: g,
            mig: num(idx("mig")).map(|v| v as u32),
            uuid: get(idx("uuid")).unwrap_or("").to_string(),
            name: get(idx("name")).unwrap_or("").to_string(),
            total: bytes_or_mib(c_total, c_total_mib),
            used: bytes_or_mib(c_used, c_used_mib),
            free: num(c_free),
            reserved: num(c_res),
            util_gpu: small("utilization.gpu.pct"),
            util_mem: small("utilization.memory.pct"),
            temp: small("temperature.gpu.C"),
            power_w: float("power.draw.W"),
            power_limit_w: float("power.limit.W"),
            pstate: get(idx("pstate")).and_then(|s| s.trim_start_matches('P').parse().ok()),
            clock_sm: small("clocks.sm.MHz"),
            clock_mem: small("clocks.mem.MHz"),
            ecc_corrected: num(idx("ecc.corrected")),
            ecc_uncorrected: num(idx("ecc.uncorrected")),
            processes: None,
            alerts: get(idx("alerts"))
                .map(|s| {
                    s.split(';')
                        .filter(|a| !a.is_empty())
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default(),
        });
    }
    Ok(data)
}

fn parse_jsonl(text: &str) -> Result<LogData, String> {
    let mut data = LogData::default();
    for line in text.lines() {
        if line.trim().is_empty() {
            continue;
        }
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            data.skipped += 1;
            continue;
        };
        let u = |p: &str| v.pointer(p).and_then(Value::as_u64);
        let s = |p: &str| {
            v.pointer(p)
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let unix_ns = v
            .get("unix_ns")
            .and_then(Value::as_u64)
            .or_else(|| {
                v.get("unix_s")
                    .and_then(Value::as_f64)
                    .map(|s| (s * 1e9).round() as u64)
            })
            .or_else(|| {
                v.get("timestamp")
                    .and_then(Value::as_str)
                    .and_then(parse_iso8601)
            });
        let (Some(unix_ns), Some(gpu)) = (unix_ns, u("/gpu")) else {
            data.skipped += 1;
            continue;
        };
        data.rows.push(LogRow {
            unix_ns,
            gpu: gpu as u32,
            mig: u("/mig").map(|m| m as u32),
            uuid: s("/uuid"),
            name: s("/name"),
            total: u("/memory/total"),
            used: u("/memory/used"),
            free: u("/memory/free"),
            reserved: u("/memory/reserved"),
            util_gpu: u("/utilization/gpu").map(|x| x as u32),
            util_mem: u("/utilization/memory").map(|x| x as u32),
            temp: u("/temperature_c").map(|x| x as u32),
            power_w: v.get("power_w").and_then(Value::as_f64),
            power_limit_w: v.get("power_limit_w").and_then(Value::as_f64),
            pstate: u("/pstate").map(|x| x as u32),
            clock_sm: u("/clocks_mhz/sm").map(|x| x as u32),
            clock_mem: u("/clocks_mhz/mem").map(|x| x as u32),
            ecc_corrected: u("/ecc/corrected"),
            ecc_uncorrected: u("/ecc/uncorrected"),
            processes: v.get("processes").and_then(Value::as_array).map(|ps| {
                ps.iter()
                    .filter_map(|p| {
                        let pid = p.get("pid")?.as_u64()? as u32;
                        Some((pid, p.get("used_bytes").and_then(Value::as_u64)))
                    })
                    .collect()
            }),
            alerts: v
                .get("alerts")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|x| x.as_str().map(String::from))
                        .collect()
                })
                .unwrap_or_default(),
        });
    }
    if data.rows.is_empty() && data.skipped > 0 {
        return Err("no line is a `fragprobe log` JSON row".into());
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_row() -> LogRow {
        LogRow {
            unix_ns: 1_714_567_890_123_000_000,
            gpu: 1,
            mig: None,
            uuid: "GPU-abc".into(),
            name: "Sim, \"GPU\" 80GB".into(),
            total: Some(80 * 1024 * MIB),
            used: Some(1000 * MIB + 17),
            free: Some(80 * 1024 * MIB - 1000 * MIB - 17 - 512 * MIB),
            reserved: Some(512 * MIB),
            util_gpu: Some(87),
            util_mem: None,
            temp: Some(65),
            power_w: Some(310.5),
            power_limit_w: Some(700.0),
            pstate: Some(0),
            clock_sm: Some(1980),
            clock_mem: None,
            ecc_corrected: Some(0),
            ecc_uncorrected: None,
            processes: None,
            alerts: vec!["used>90%".into(), "temp>60".into()],
        }
    }

    #[test]
    fn csv_round_trip() {
        let r = sample_row();
        let text = format!("{}{}", csv_header(), csv_line(&r));
        assert!(text.contains(",n/a,"));
        assert!(text.contains(",1000,"), "used MiB column: {text}");
        let back = parse(&text).unwrap();
        assert_eq!(back.skipped, 0);
        assert_eq!(back.rows, vec![r]);
    }

    #[test]
    fn jsonl_round_trip() {
        let mut r = sample_row();
        r.mig = Some(2);
        r.processes = Some(vec![(42, Some(5 * MIB)), (43, None)]);
        let text = json_line(&r);
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["memory"]["used"], json!(1000 * MIB + 17));
        assert_eq!(v["utilization"]["memory"], Value::Null);
        assert_eq!(parse(&text).unwrap().rows, vec![r]);
    }

    #[test]
    fn cut_line_is_skipped_not_fatal() {
        let r = sample_row();
        let full = csv_line(&r);
        let text = format!("{}{}{}", csv_header(), full, &full[..20]);
        let d = parse(&text).unwrap();
        assert_eq!((d.rows.len(), d.skipped), (1, 1));
        assert!(parse("hello\nworld\n").is_err());
    }

    #[test]
    fn append_keeps_old_rows_and_refuses_foreign_csv() {
        let dir = std::env::temp_dir().join(format!("fp-logfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("a.csv");
        let _ = std::fs::remove_file(&p);
        let r = sample_row();
        LogWriter::append(&p, Format::Csv, false)
            .unwrap()
            .write_row(&r)
            .unwrap();
        // Simulate a crash mid-line, then append again.
        let mut f = File::options().append(true).open(&p).unwrap();
        f.write_all(b"2024-01-01T00:00:00.000Z,17").unwrap();
        drop(f);
        LogWriter::append(&p, Format::Csv, true)
            .unwrap()
            .write_row(&r)
            .unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert_eq!(text.matches("timestamp,").count(), 1, "header written once");
        let d = parse(&text).unwrap();
        assert_eq!((d.rows.len(), d.skipped), (2, 1));
        let q = dir.join("b.csv");
        std::fs::write(&q, "a,b,c\n1,2,3\n").unwrap();
        let e = LogWriter::append(&q, Format::Csv, false).err().unwrap();
        assert!(e.to_string().contains("another header"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn rows_carry_alerts_to_their_gpu() {
        use crate::nvml::sample::Na;
        let mut a = DeviceSample::missing(0, Na::NotSupported);
        a.uuid = Ok("GPU-a".into());
        let b = DeviceSample::missing(1, Na::NoPermission);
        let snap = Snapshot {
            unix_ns: 5,
            driver: Ok("x".into()),
            devices: vec![a, b],
        };
        let f = Firing {
            alert: 0,
            text: "temp>1".into(),
            gpu: 1,
            uuid: String::new(),
            value: "2C".into(),
            unix_ns: 5,
        };
        let rs = rows(&snap, &[f]);
        assert_eq!(rs.len(), 2);
        assert!(rs[0].alerts.is_empty());
        assert_eq!(rs[1].alerts, vec!["temp>1".to_string()]);
        assert_eq!(rs[1].used, None);
        assert!(csv_line(&rs[1]).contains("n/a"));
    }
}
