//! The `watch` frame: device rows with memory bars, then the process table, with the
//! cells that changed since the previous frame highlighted (like `watch -d nvidia-smi`).
//!
//! Rendering is a pure function of two snapshots, so it is tested without a terminal.

use std::collections::HashMap;

use super::sample::{DeviceSample, Field, ProcessSample, Snapshot};
use super::units::{bar, human, mib};

/// How to draw.
#[derive(Clone, Debug)]
pub struct Style {
    /// Use ANSI attributes (off when `NO_COLOR` is set or output is not a terminal).
    pub color: bool,
    /// Highlight what changed since the previous frame.
    pub diff: bool,
    /// Terminal width; lines are cut to fit.
    pub width: usize,
}

const NA: &str = "n/a";
const HL_ON: &str = "\x1b[7m";
const HL_OFF: &str = "\x1b[0m";
const BOLD: &str = "\x1b[1m";

fn f<T>(v: &Field<T>, show: impl Fn(&T) -> String) -> String {
    v.as_ref().map(show).unwrap_or_else(|_| NA.to_string())
}

struct Table {
    head: Vec<&'static str>,
    rows: Vec<(String, Vec<String>)>,
}

fn device_cells(d: &DeviceSample, label: String) -> Vec<String> {
    let mem = match &d.memory {
        Ok(m) => format!(
            "{} {:>9} / {:>9} {:>5.1}%",
            bar(m.used_fraction(), 20),
            mib(m.used()),
            mib(m.total),
            m.used_fraction() * 100.0
        ),
        Err(_) => NA.to_string(),
    };
    vec![
        label,
        f(&d.name, |s| s.clone()),
        mem,
        f(&d.memory, |m| mib(m.reserved)),
        f(&d.util_gpu, |u| format!("{u}%")),
        f(&d.util_mem, |u| format!("{u}%")),
        f(&d.temperature, |t| format!("{t}C")),
        match (&d.power_mw, &d.power_limit_mw) {
            (Ok(p), Ok(l)) => format!("{}W / {}W", p / 1000, l / 1000),
            (Ok(p), Err(_)) => format!("{}W / {NA}", p / 1000),
            _ => NA.to_string(),
        },
        f(&d.pstate, |p| {
            if *p < 16 {
                format!("P{p}")
            } else {
                "P?".into()
            }
        }),
        format!(
            "{}/{}",
            f(&d.clock_sm, u32::to_string),
            f(&d.clock_mem, u32::to_string)
        ),
        match (&d.ecc_corrected, &d.ecc_uncorrected) {
            (Err(_), Err(_)) => NA.to_string(),
            (c, u) => format!("{}/{}", f(c, u64::to_string), f(u, u64::to_string)),
        },
    ]
}

fn devices(s: &Snapshot) -> Table {
    let mut rows = Vec::new();
    for d in &s.devices {
        rows.push((
            format!("d{}", d.index),
            device_cells(d, d.index.to_string()),
        ));
        for m in &d.mig {
            rows.push((
                format!("d{}m{}", d.index, m.index),
                device_cells(m, format!("{}/mig{}", d.index, m.index)),
            ));
        }
    }
    Table {
        head: vec![
            "GPU",
            "Name",
            "Memory used / total",
            "Reserved",
            "Util",
            "MemUtil",
            "Temp",
            "Power / limit",
            "Perf",
            "SM/Mem MHz",
            "ECC c/u",
        ],
        rows,
    }
}

fn process_cells(gpu: &str, p: &ProcessSample) -> Vec<String> {
    let (user, cmd) = match &p.info {
        Some(i) => (
            i.user.clone(),
            if i.orphaned {
                format!("{} [parent gone]", i.cmdline)
            } else {
                i.cmdline.clone()
            },
        ),
        None => (
            "?".to_string(),
            "(not visible in this pid namespace)".to_string(),
        ),
    };
    let probe = |pick: &dyn Fn(&super::sample::ProbeInfo) -> Option<String>| match &p.probe {
        Some(pr) => pick(pr).unwrap_or_else(|| NA.to_string()),
        None => "-".to_string(),
    };
    vec![
        gpu.to_string(),
        p.pid.to_string(),
        user,
        p.kind.code().to_string(),
        p.used.map(mib).unwrap_or_else(|| NA.to_string()),
        match &p.probe {
            Some(_) => "yes".into(),
            None => "no".into(),
        },
        probe(&|pr| pr.live_bytes.map(human)),
        probe(&|pr| pr.live_count.map(|c| c.to_string())),
        probe(&|pr| pr.frag.map(|v| format!("{v:.2}"))),
        probe(&|pr| pr.largest_free.map(human)),
        cmd,
    ]
}

fn processes(s: &Snapshot) -> (Table, Vec<String>) {
    let mut rows = Vec::new();
    let mut notes = Vec::new();
    for d in &s.devices {
        let mut add = |label: String, dev: &DeviceSample| match &dev.processes {
            Ok(list) => {
                let mut list: Vec<&ProcessSample> = list.iter().collect();
                list.sort_by_key(|p| (std::cmp::Reverse(p.used.unwrap_or(0)), p.pid));
                for p in list {
                    rows.push((format!("p{label}:{}", p.pid), process_cells(&label, p)));
                }
            }
            Err(e) => notes.push(format!("GPU {label}: process list n/a ({e})")),
        };
        add(d.index.to_string(), d);
        for m in &d.mig {
            add(format!("{}/mig{}", d.index, m.index), m);
        }
    }
    let t = Table {
        head: vec![
            "GPU",
            "PID",
            "User",
            "Type",
            "GPU Memory",
            "Probed",
            "Live",
            "Allocs",
            "Frag",
            "Largest free",
            "Command",
        ],
        rows,
    };
    (t, notes)
}

fn cell_map(t: &Table) -> HashMap<(String, usize), String> {
    let mut m = HashMap::new();
    for (key, cells) in &t.rows {
        for (i, c) in cells.iter().enumerate() {
            m.insert((key.clone(), i), c.clone());
        }
    }
    m
}

fn draw(out: &mut String, t: &Table, prev: Option<&Table>, style: &Style) {
    let ncol = t.head.len();
    let mut w: Vec<usize> = t.head.iter().map(|h| h.chars().count()).collect();
    for (_, cells) in &t.rows {
        for (i, c) in cells.iter().enumerate().take(ncol - 1) {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let before = prev.map(cell_map);
    let line = |out: &mut String, cells: &[String], changed: &dyn Fn(usize) -> bool, bold: bool| {
        let mut used = 0usize;
        let mut s = String::new();
        if bold && style.color {
            s.push_str(BOLD);
        }
        for (i, c) in cells.iter().enumerate() {
            let ch = changed(i);
            if i > 0 && used + 2 >= style.width {
                break;
            }
            let sep = if i == 0 {
                ""
            } else if ch && !style.color {
                " *"
            } else {
                "  "
            };
            s.push_str(sep);
            used += sep.len();
            let room = style.width.saturating_sub(used);
            let text: String = if i + 1 == ncol {
                c.chars().take(room).collect()
            } else {
                format!("{c:<width$}", width = w[i])
                    .chars()
                    .take(room)
                    .collect()
            };
            used += text.chars().count();
            if ch && style.color {
                let trimmed = text.trim_end();
                s.push_str(HL_ON);
                s.push_str(trimmed);
                s.push_str(HL_OFF);
                s.push_str(&text[trimmed.len()..]);
            } else {
                s.push_str(&text);
            }
        }
        let mut s = s.trim_end().to_string();
        if bold && style.color {
            s.push_str(HL_OFF);
        }
        out.push_str(&s);
        out.push('\n');
    };
    let head: Vec<String> = t.head.iter().map(|h| h.to_string()).collect();
    line(out, &head, &|_| false, true);
    for (key, cells) in &t.rows {
        let changed = |i: usize| -> bool {
            if !style.diff {
                return false;
            }
            match &before {
                // A row that is new since the last frame is all "changed".
                Some(b) => b.get(&(key.clone(), i)) != Some(&cells[i]),
                None => false,
            }
        };
        line(out, cells, &changed, false);
    }
}

/// One frame. `title` is the first line (interval, time, driver).
pub fn render(cur: &Snapshot, prev: Option<&Snapshot>, style: &Style, title: &str) -> String {
    let mut out = String::new();
    out.push_str(&title.chars().take(style.width).collect::<String>());
    out.push('\n');
    out.push('\n');
    let dt = devices(cur);
    let pdt = prev.map(devices);
    draw(&mut out, &dt, pdt.as_ref(), style);
    if cur.devices.is_empty() {
        out.push_str("(no GPU selected or present)\n");
    }
    out.push('\n');
    let (pt, notes) = processes(cur);
    let ppt = prev.map(|p| processes(p).0);
    if pt.rows.is_empty() {
        out.push_str("Processes: none\n");
    } else {
        draw(&mut out, &pt, ppt.as_ref(), style);
    }
    for n in notes {
        out.push_str(&n);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvml::sample::{Memory, Na, ProbeInfo, ProcInfo, ProcessKind};
    use crate::nvml::units::MIB;

    fn snap(used_mib: u64, temp: u32) -> Snapshot {
        let mut d = DeviceSample::missing(0, Na::NotSupported);
        d.name = Ok("Sim GPU".into());
        d.memory = Ok(Memory {
            total: 1000 * MIB,
            free: (1000 - used_mib) * MIB,
            reserved: 0,
            used_reported: 0,
        });
        d.temperature = Ok(temp);
        d.processes = Ok(vec![ProcessSample {
            pid: 77,
            kind: ProcessKind::Compute,
            used: None,
            gpu_instance: None,
            compute_instance: None,
            info: Some(ProcInfo {
                user: "ann".into(),
                cmdline: "python train.py".into(),
                orphaned: true,
                ..ProcInfo::default()
            }),
            probe: Some(ProbeInfo {
                live_bytes: Some(3 * MIB),
                live_count: Some(4),
                ..ProbeInfo::default()
            }),
        }]);
        Snapshot {
            unix_ns: 0,
            driver: Ok("1".into()),
            devices: vec![d],
        }
    }

    #[test]
    fn plain_frame_shows_values_and_na() {
        let style = Style {
            color: false,
            diff: false,
            width: 300,
        };
        let s = render(&snap(250, 60), None, &style, "title");
        assert!(s.contains("250MiB"), "{s}");
        assert!(s.contains("1000MiB"));
        assert!(s.contains("25.0%"));
        assert!(s.contains("[#####               ]"));
        assert!(s.contains("60C"));
        assert!(s.contains("n/a"), "unsupported fields show n/a");
        assert!(s.contains("python train.py [parent gone]"));
        assert!(s.contains("3.0 MiB"), "probed live bytes");
        assert!(!s.contains('\x1b'));
    }

    #[test]
    fn diff_marks_only_changed_cells() {
        let style = Style {
            color: false,
            diff: true,
            width: 300,
        };
        let s = render(&snap(250, 61), Some(&snap(250, 60)), &style, "t");
        let row = s.lines().find(|l| l.starts_with("0 ")).unwrap();
        assert_eq!(row.matches(" *").count(), 1, "{row}");
        assert!(row.contains(" *61C"));
        let color = Style {
            color: true,
            diff: true,
            width: 300,
        };
        let s = render(&snap(300, 60), Some(&snap(250, 60)), &color, "t");
        assert!(s.contains("\x1b[7m[######"), "{s:?}");
        assert!(!s.contains("\x1b[7m60C"));
    }

    #[test]
    fn lines_fit_the_width() {
        let style = Style {
            color: true,
            diff: true,
            width: 40,
        };
        let s = render(
            &snap(250, 61),
            Some(&snap(100, 60)),
            &style,
            "a long title that goes on and on and on",
        );
        for l in s.lines() {
            let visible = l.replace(HL_ON, "").replace(HL_OFF, "").replace(BOLD, "");
            assert!(visible.chars().count() <= 40, "{visible:?}");
        }
    }
}
