//! The events list: every record, filterable by kind, size range, address, time and
//! thread. Filtering runs a bounded slice of the log per frame, so a 10 M-event trace
//! never freezes the window; selecting a row moves the time cursor to it.

use egui::{RichText, Ui};
use fragprobe_shared::format::{EventKind, Record};

use crate::pipeline::log::EventLog;
use crate::pipeline::space::human_bytes;

/// Records examined per frame while a filter is being applied.
pub const SCAN_PER_FRAME: usize = 400_000;

/// Which kinds of events to list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum KindFilter {
    /// Everything.
    #[default]
    All,
    /// Allocations (plain, managed, async, VMM create/reserve/map).
    Allocs,
    /// Frees, releases, unmaps.
    Frees,
    /// Calls that failed.
    Failures,
    /// Process, device, loss, resync and NVML records.
    Other,
}

impl KindFilter {
    /// Every filter, for the selector.
    pub const ALL: [KindFilter; 5] = [
        KindFilter::All,
        KindFilter::Allocs,
        KindFilter::Frees,
        KindFilter::Failures,
        KindFilter::Other,
    ];
    /// Label.
    pub fn name(self) -> &'static str {
        match self {
            KindFilter::All => "all",
            KindFilter::Allocs => "allocations",
            KindFilter::Frees => "frees",
            KindFilter::Failures => "failures",
            KindFilter::Other => "other",
        }
    }
    fn matches(self, r: &Record) -> bool {
        use EventKind as K;
        let k = r.kind();
        match self {
            KindFilter::All => true,
            KindFilter::Allocs => matches!(
                k,
                Some(
                    K::Alloc
                        | K::ManagedAlloc
                        | K::AsyncAlloc
                        | K::AddressReserve
                        | K::MemCreate
                        | K::MemMap
                )
            ),
            KindFilter::Frees => matches!(
                k,
                Some(K::Free | K::AsyncFree | K::AddressFree | K::MemRelease | K::MemUnmap)
            ),
            KindFilter::Failures => !r.ok(),
            KindFilter::Other => matches!(
                k,
                None | Some(
                    K::Device
                        | K::ProcessStart
                        | K::ProcessExit
                        | K::Loss
                        | K::ResyncBegin
                        | K::ResyncEntry
                        | K::ResyncEnd
                        | K::NvmlSample
                        | K::MemGetInfo
                        | K::Import
                        | K::PoolTrim
                )
            ),
        }
    }
}

/// The filter the user typed (kept as text so half-typed numbers stay editable).
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Filter {
    /// Kind class.
    pub kind: KindFilter,
    /// Minimum size, e.g. "1M", "4096" (empty: none).
    pub min_size: String,
    /// Maximum size.
    pub max_size: String,
    /// An address (hex): events whose range contains it.
    pub addr: String,
    /// Thread id.
    pub tid: String,
    /// From this time (seconds since start).
    pub from_s: String,
    /// Until this time.
    pub to_s: String,
}

/// A parsed filter.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Parsed {
    kind: KindFilter,
    min_size: Option<u64>,
    max_size: Option<u64>,
    addr: Option<u64>,
    tid: Option<u32>,
    from_ns: Option<u64>,
    to_ns: Option<u64>,
}

/// Parses "4096", "64K", "1.5M", "2G" (binary units).
pub fn parse_size(s: &str) -> Result<Option<u64>, String> {
    let s = s.trim();
    if s.is_empty() {
        return Ok(None);
    }
    let upper = s.to_ascii_uppercase();
    let t = upper.trim_end_matches("IB").trim_end_matches('B');
    let (num, mult) = match t.chars().last() {
        Some('K') => (&t[..t.len() - 1], 1u64 << 10),
        Some('M') => (&t[..t.len() - 1], 1 << 20),
        Some('G') => (&t[..t.len() - 1], 1 << 30),
        Some('T') => (&t[..t.len() - 1], 1 << 40),
        _ => (t, 1),
    };
    let v: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("not a size: {s:?} (try 4096, 64K, 1.5M, 2G)"))?;
    if v < 0.0 || !v.is_finite() {
        return Err(format!("not a size: {s:?}"));
    }
    Ok(Some((v * mult as f64) as u64))
}

impl Filter {
    /// Parses the text fields; the error names the field.
    pub fn parse(&self, t0: u64) -> Result<Parsed, String> {
        let secs = |s: &str, what: &str| -> Result<Option<u64>, String> {
            let s = s.trim();
            if s.is_empty() {
                return Ok(None);
            }
            let v: f64 = s
                .parse()
                .map_err(|_| format!("{what}: not a number of seconds: {s:?}"))?;
            Ok(Some(t0.saturating_add((v.max(0.0) * 1e9) as u64)))
        };
        let addr = match self.addr.trim() {
            "" => None,
            a => Some(
                u64::from_str_radix(a.trim_start_matches("0x").trim_start_matches("0X"), 16)
                    .map_err(|_| format!("address: not hex: {a:?}"))?,
            ),
        };
        let tid = match self.tid.trim() {
            "" => None,
            t => Some(
                t.parse()
                    .map_err(|_| format!("thread: not a number: {t:?}"))?,
            ),
        };
        Ok(Parsed {
            kind: self.kind,
            min_size: parse_size(&self.min_size).map_err(|e| format!("min size: {e}"))?,
            max_size: parse_size(&self.max_size).map_err(|e| format!("max size: {e}"))?,
            addr,
            tid,
            from_ns: secs(&self.from_s, "from")?,
            to_ns: secs(&self.to_s, "to")?,
        })
    }
}

impl Parsed {
    /// Whether the filter lets everything through (then no index is built).
    pub fn is_all(&self) -> bool {
        *self == Parsed::default()
    }
    /// Whether `r` passes.
    pub fn matches(&self, r: &Record) -> bool {
        self.kind.matches(r)
            && self.min_size.is_none_or(|m| r.size >= m)
            && self.max_size.is_none_or(|m| r.size <= m)
            && self.tid.is_none_or(|t| r.tid == t)
            && self.from_ns.is_none_or(|t| r.ts_ns >= t)
            && self.to_ns.is_none_or(|t| r.ts_ns <= t)
            && self
                .addr
                .is_none_or(|a| r.addr == a || (a >= r.addr && a - r.addr < r.size))
    }
}

/// The list's state: the filter being edited and the matches found so far.
#[derive(Default)]
pub struct State {
    /// The filter as typed.
    pub filter: Filter,
    /// Parse error of the filter, shown under it.
    pub error: Option<String>,
    applied: Option<Parsed>,
    /// Indices of matching records found so far.
    pub matches: Vec<u32>,
    /// Records examined so far.
    pub scanned: usize,
    /// The selected record index.
    pub selected: Option<usize>,
}

impl State {
    /// Rows the list has: all records, or the matches.
    pub fn rows(&self, log_len: usize) -> usize {
        match &self.applied {
            Some(p) if !p.is_all() => self.matches.len(),
            _ => log_len,
        }
    }

    /// Whether a filter is still being applied.
    pub fn scanning(&self, log_len: usize) -> bool {
        matches!(&self.applied, Some(p) if !p.is_all()) && self.scanned < log_len
    }

    /// Advances the filter over at most `budget` more records.
    pub fn advance(&mut self, log: &dyn EventLog, t0: u64, budget: usize) {
        match self.filter.parse(t0) {
            Ok(p) => {
                self.error = None;
                if self.applied.as_ref() != Some(&p) {
                    self.applied = Some(p);
                    self.matches.clear();
                    self.scanned = 0;
                }
            }
            Err(e) => {
                self.error = Some(e);
                return;
            }
        }
        let Some(p) = self.applied.as_ref().filter(|p| !p.is_all()) else {
            return;
        };
        let end = log.len().min(self.scanned.saturating_add(budget));
        for i in self.scanned..end {
            if log.get(i).is_some_and(|r| p.matches(&r)) {
                self.matches.push(i as u32);
            }
        }
        self.scanned = end;
    }

    fn record_index(&self, row: usize) -> usize {
        match &self.applied {
            Some(p) if !p.is_all() => self
                .matches
                .get(row)
                .map(|&i| i as usize)
                .unwrap_or(usize::MAX),
            _ => row,
        }
    }
}

/// Draws the list; returns the index of the record the user selected.
pub fn ui(ui: &mut Ui, state: &mut State, log: &dyn EventLog, t0: u64) -> Option<usize> {
    let mut picked = None;
    ui.horizontal_wrapped(|ui| {
        egui::ComboBox::new("events-kind", "kind")
            .selected_text(state.filter.kind.name())
            .show_ui(ui, |ui| {
                for k in KindFilter::ALL {
                    ui.selectable_value(&mut state.filter.kind, k, k.name());
                }
            });
        let field = |ui: &mut Ui, label: &str, s: &mut String, w: f32| {
            let l = ui.label(label);
            ui.add(egui::TextEdit::singleline(s).desired_width(w))
                .labelled_by(l.id);
        };
        field(ui, "size >=", &mut state.filter.min_size, 60.0);
        field(ui, "<=", &mut state.filter.max_size, 60.0);
        field(ui, "address", &mut state.filter.addr, 120.0);
        field(ui, "thread", &mut state.filter.tid, 60.0);
        field(ui, "from s", &mut state.filter.from_s, 50.0);
        field(ui, "to s", &mut state.filter.to_s, 50.0);
        if ui.button("clear").clicked() {
            state.filter = Filter::default();
        }
    });
    state.advance(log, t0, SCAN_PER_FRAME);
    if let Some(e) = &state.error {
        ui.colored_label(egui::Color32::from_rgb(255, 112, 67), e);
    }
    let len = log.len();
    let rows = state.rows(len);
    if state.scanning(len) {
        ui.horizontal(|ui| {
            ui.spinner();
            ui.label(format!(
                "filtering... {} of {} events, {} match",
                state.scanned, len, rows
            ));
        });
        ui.ctx().request_repaint();
    } else {
        ui.label(format!("{rows} of {len} events"));
    }
    let row_h = ui.text_style_height(&egui::TextStyle::Monospace) + 2.0;
    egui::ScrollArea::vertical()
        .auto_shrink([false, false])
        .show_rows(ui, row_h, rows, |ui, range| {
            egui::Grid::new("events-grid")
                .num_columns(8)
                .striped(true)
                .show(ui, |ui| {
                    for row in range {
                        let i = state.record_index(row);
                        let Some(r) = log.get(i) else { continue };
                        let kind = r.kind().map(|k| k.name()).unwrap_or("?");
                        let text = format!(
                            "#{} {:>10.6} s",
                            r.seq,
                            r.ts_ns.saturating_sub(t0) as f64 / 1e9
                        );
                        let sel = state.selected == Some(i);
                        if ui
                            .selectable_label(sel, RichText::new(text).monospace())
                            .clicked()
                        {
                            state.selected = Some(i);
                            picked = Some(i);
                        }
                        ui.label(kind);
                        ui.label(r.api().map(|a| a.name()).unwrap_or("?"));
                        ui.monospace(if r.size > 0 {
                            human_bytes(r.size)
                        } else {
                            String::new()
                        });
                        ui.monospace(format!("{:#x}", r.addr));
                        ui.label(format!("tid {}", r.tid));
                        ui.label(format!("pid {} · GPU {}", r.pid, r.device));
                        if r.ok() {
                            ui.label("");
                        } else {
                            ui.colored_label(
                                egui::Color32::from_rgb(229, 57, 53),
                                format!("error {}", r.result),
                            );
                        }
                        ui.end_row();
                    }
                });
        });
    picked
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::log::MemLog;

    fn rec(kind: EventKind, size: u64, addr: u64, tid: u32, result: u32) -> Record {
        Record {
            kind: kind as u16,
            size,
            addr,
            tid,
            result,
            ..Record::default()
        }
    }

    #[test]
    fn sizes_parse_with_units_and_reject_nonsense() {
        assert_eq!(parse_size("4096"), Ok(Some(4096)));
        assert_eq!(parse_size("64K"), Ok(Some(65536)));
        assert_eq!(parse_size("1.5MiB"), Ok(Some(3 << 19)));
        assert_eq!(parse_size(" "), Ok(None));
        assert!(parse_size("lots").is_err());
    }

    #[test]
    fn filter_scans_incrementally_and_matches_exactly() {
        let mut log = MemLog::default();
        for i in 0..1000u64 {
            let kind = if i % 2 == 0 {
                EventKind::Alloc
            } else {
                EventKind::Free
            };
            log.push(rec(
                kind,
                i * 10,
                0x1000 * i,
                (i % 3) as u32,
                u32::from(i == 999),
            ));
        }
        let mut s = State::default();
        s.filter.kind = KindFilter::Allocs;
        s.filter.min_size = "5000".into();
        s.advance(&log, 0, 100);
        assert!(s.scanning(log.len()));
        while s.scanning(log.len()) {
            s.advance(&log, 0, 100);
        }
        // even i with i*10 >= 5000: i in 500..1000 step 2
        assert_eq!(s.rows(log.len()), 250);
        s.filter = Filter {
            kind: KindFilter::Failures,
            ..Filter::default()
        };
        s.advance(&log, 0, usize::MAX);
        assert_eq!(s.matches, vec![999]);
        s.filter = Filter {
            addr: "0x2010".into(),
            ..Filter::default()
        };
        s.advance(&log, 0, usize::MAX);
        assert_eq!(s.matches, vec![2], "inside [0x2000, 0x2000+20)");
        s.filter = Filter {
            tid: "x".into(),
            ..Filter::default()
        };
        s.advance(&log, 0, usize::MAX);
        assert!(s.error.as_deref().unwrap().starts_with("thread"));
        s.filter = Filter::default();
        s.advance(&log, 0, usize::MAX);
        assert_eq!(s.rows(log.len()), 1000);
    }
}
