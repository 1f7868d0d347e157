//! Threshold alerts for `log --alert EXPR`, fired once per crossing.
//!
//! Grammar: `METRIC OP VALUE[UNIT]`, no spaces needed: `used>90%`, `used>18000MiB`,
//! `free<2GiB`, `temp>85`, `util<10%`, `power>95%`, `memutil>=80`.
//!
//! | metric (aliases) | plain number | `%` | byte units |
//! |---|---|---|---|
//! | `used` (`memory.used`), `free` (`memory.free`), `reserved` (`memory.reserved`) | — | of total | B KiB MiB GiB TiB KB MB GB TB |
//! | `util` (`utilization.gpu`), `memutil` (`utilization.memory`) | percent | percent | — |
//! | `temp` (`temperature.gpu`) | °C | — | — |
//! | `power` (`power.draw`) | W | of the power limit | — |
//!
//! Operators: `>`, `>=`, `<`, `<=`. An alert fires when its condition becomes true for a
//! GPU and re-arms only when the condition becomes false again (hysteresis), so a GPU that
//! stays above 90 % produces one alert, not one per sample. A value that is "n/a" leaves
//! the state unchanged.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use super::sample::{DeviceSample, Snapshot};
use super::units::MIB;

/// What an alert looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Metric {
    /// Used memory (`total − free − reserved`).
    Used,
    /// Free memory.
    Free,
    /// Driver-reserved memory.
    Reserved,
    /// GPU utilisation.
    Util,
    /// Memory-controller utilisation.
    MemUtil,
    /// Temperature.
    Temp,
    /// Power draw.
    Power,
}

impl Metric {
    fn parse(s: &str) -> Option<Metric> {
        Some(match s.trim().to_ascii_lowercase().as_str() {
            "used" | "memory.used" | "mem" => Metric::Used,
            "free" | "memory.free" => Metric::Free,
            "reserved" | "memory.reserved" => Metric::Reserved,
            "util" | "utilization.gpu" | "gpu" => Metric::Util,
            "memutil" | "utilization.memory" => Metric::MemUtil,
            "temp" | "temperature" | "temperature.gpu" => Metric::Temp,
            "power" | "power.draw" => Metric::Power,
            _ => return None,
        })
    }
    fn is_memory(self) -> bool {
        matches!(self, Metric::Used | Metric::Free | Metric::Reserved)
    }
    /// The short name used in messages.
    pub fn name(self) -> &'static str {
        match self {
            Metric::Used => "used",
            Metric::Free => "free",
            Metric::Reserved => "reserved",
            Metric::Util => "util",
            Metric::MemUtil => "memutil",
            Metric::Temp => "temp",
            Metric::Power => "power",
        }
    }
}

/// Comparison operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `>`
    Gt,
    /// `>=`
    Ge,
    /// `<`
    Lt,
    /// `<=`
    Le,
}

impl Op {
    fn holds(self, a: f64, b: f64) -> bool {
        match self {
            Op::Gt => a > b,
            Op::Ge => a >= b,
            Op::Lt => a < b,
            Op::Le => a <= b,
        }
    }
}

/// The threshold's unit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Threshold {
    /// Percent of the total (memory), of the limit (power), or plain percent (utilisation).
    Percent(f64),
    /// Bytes (memory metrics only).
    Bytes(f64),
    /// The metric's natural unit: °C, W, percent for utilisation.
    Plain(f64),
}

/// One parsed `--alert` expression.
#[derive(Clone, Debug, PartialEq)]
pub struct Alert {
    /// The expression as given (passed to the alert command as `FRAGPROBE_ALERT`).
    pub text: String,
    /// What is compared.
    pub metric: Metric,
    /// How.
    pub op: Op,
    /// Against what.
    pub threshold: Threshold,
}

/// A bad `--alert` expression; the message says what is accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AlertError(pub String);

impl fmt::Display for AlertError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}
impl std::error::Error for AlertError {}

const HELP: &str = "expected METRIC OP VALUE like used>90%, used>18000MiB, free<2GiB, temp>85, util<10%, power>95%; metrics: used free reserved util memutil temp power; operators: > >= < <=";

impl FromStr for Alert {
    type Err = AlertError;
    fn from_str(s: &str) -> Result<Alert, AlertError> {
        let bad = |why: &str| AlertError(format!("bad alert {s:?}: {why}; {HELP}"));
        let pos = s.find(['<', '>']).ok_or_else(|| bad("no operator"))?;
        let (lhs, rest) = s.split_at(pos);
        let (op, rhs) = if let Some(r) = rest.strip_prefix(">=") {
            (Op::Ge, r)
        } else if let Some(r) = rest.strip_prefix("<=") {
            (Op::Le, r)
        } else if let Some(r) = rest.strip_prefix('>') {
            (Op::Gt, r)
        } else {
            (Op::Lt, &rest[1..])
        };
        let metric =
            Metric::parse(lhs).ok_or_else(|| bad(&format!("unknown metric {:?}", lhs.trim())))?;
        let rhs = rhs.trim();
        let split = rhs
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rhs.len());
        let (num, unit) = rhs.split_at(split);
        let v: f64 = num.parse().map_err(|_| bad("the value is not a number"))?;
        if !v.is_finite() || v < 0.0 {
            return Err(bad("the value must be a non-negative number"));
        }
        let unit = unit.trim();
        let threshold = match unit {
            "%" => {
                if metric == Metric::Temp {
                    return Err(bad("temperature takes degrees C, not %"));
                }
                Threshold::Percent(v)
            }
            "" => {
                if metric.is_memory() {
                    return Err(bad(
                        "memory needs a unit: % of total or bytes (MiB, GiB, …)",
                    ));
                }
                if matches!(metric, Metric::Util | Metric::MemUtil) {
                    Threshold::Percent(v)
                } else {
                    Threshold::Plain(v)
                }
            }
            "C" | "c" if metric == Metric::Temp => Threshold::Plain(v),
            "W" | "w" if metric == Metric::Power => Threshold::Plain(v),
            u => {
                if !metric.is_memory() {
                    return Err(bad(&format!(
                        "unit {u:?} does not apply to {}",
                        metric.name()
                    )));
                }
                let mult: f64 = match u {
                    "B" | "b" => 1.0,
                    "KiB" | "K" | "k" => 1024.0,
                    "MiB" | "M" | "m" => MIB as f64,
                    "GiB" | "G" | "g" => (1u64 << 30) as f64,
                    "TiB" | "T" | "t" => (1u64 << 40) as f64,
                    "KB" | "kB" => 1e3,
                    "MB" => 1e6,
                    "GB" => 1e9,
                    "TB" => 1e12,
                    _ => return Err(bad(&format!("unknown unit {u:?}"))),
                };
                Threshold::Bytes(v * mult)
            }
        };
        Ok(Alert {
            text: s.trim().to_string(),
            metric,
            op,
            threshold,
        })
    }
}

impl Alert {
    /// The measured value in the threshold's unit and its display text, or `None` when
    /// the device did not report it.
    pub fn measure(&self, d: &DeviceSample) -> Option<(f64, String)> {
        let mem = |pick: fn(&super::Memory) -> u64| -> Option<(f64, String)> {
            let m = d.memory.as_ref().ok()?;
            let b = pick(m);
            Some(match self.threshold {
                Threshold::Percent(_) => {
                    if m.total == 0 {
                        return None;
                    }
                    let p = b as f64 * 100.0 / m.total as f64;
                    (p, format!("{p:.1}%"))
                }
                _ => (b as f64, format!("{}MiB", b / MIB)),
            })
        };
        match self.metric {
            Metric::Used => mem(|m| m.used()),
            Metric::Free => mem(|m| m.free),
            Metric::Reserved => mem(|m| m.reserved),
            Metric::Util => d
                .util_gpu
                .as_ref()
                .ok()
                .map(|&u| (u as f64, format!("{u}%"))),
            Metric::MemUtil => d
                .util_mem
                .as_ref()
                .ok()
                .map(|&u| (u as f64, format!("{u}%"))),
            Metric::Temp => d
                .temperature
                .as_ref()
                .ok()
                .map(|&t| (t as f64, format!("{t}C"))),
            Metric::Power => {
                let mw = *d.power_mw.as_ref().ok()?;
                match self.threshold {
                    Threshold::Percent(_) => {
                        let lim = *d.power_limit_mw.as_ref().ok()?;
                        if lim == 0 {
                            return None;
                        }
                        let p = mw as f64 * 100.0 / lim as f64;
                        Some((p, format!("{p:.1}%")))
                    }
                    _ => Some((mw as f64 / 1000.0, format!("{:.1}W", mw as f64 / 1000.0))),
                }
            }
        }
    }

    /// Whether the condition holds for `d`; `None` when the value is "n/a".
    pub fn holds(&self, d: &DeviceSample) -> Option<bool> {
        let (v, _) = self.measure(d)?;
        let t = match self.threshold {
            Threshold::Percent(t) | Threshold::Bytes(t) | Threshold::Plain(t) => t,
        };
        Some(self.op.holds(v, t))
    }
}

/// One alert firing.
#[derive(Clone, Debug, PartialEq)]
pub struct Firing {
    /// Index into the alert list.
    pub alert: usize,
    /// The expression.
    pub text: String,
    /// GPU index.
    pub gpu: u32,
    /// GPU UUID, empty when unknown.
    pub uuid: String,
    /// The measured value, formatted (`91.3%`, `18200MiB`, `86C`).
    pub value: String,
    /// Sample time, ns since the epoch.
    pub unix_ns: u64,
}

/// Per (alert, GPU) arming state.
#[derive(Clone, Debug, Default)]
pub struct AlertState {
    fired: HashMap<(usize, u32), bool>,
}

impl AlertState {
    /// Evaluates `alerts` on `snap` and returns the alerts that crossed into true.
    pub fn update(&mut self, alerts: &[Alert], snap: &Snapshot) -> Vec<Firing> {
        let mut out = Vec::new();
        for (ai, a) in alerts.iter().enumerate() {
            for d in &snap.devices {
                let Some(now) = a.holds(d) else { continue };
                let was = self.fired.entry((ai, d.index)).or_insert(false);
                if now && !*was {
                    let value = a.measure(d).map(|m| m.1).unwrap_or_default();
                    out.push(Firing {
                        alert: ai,
                        text: a.text.clone(),
                        gpu: d.index,
                        uuid: d.uuid.clone().unwrap_or_default(),
                        value,
                        unix_ns: snap.unix_ns,
                    });
                }
                *was = now;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvml::sample::{Memory, Na};

    fn dev(used_mib: u64, total_mib: u64) -> DeviceSample {
        let mut d = DeviceSample::missing(0, Na::NotSupported);
        d.memory = Ok(Memory {
            total: total_mib * MIB,
            free: (total_mib - used_mib) * MIB,
            reserved: 0,
            used_reported: 0,
        });
        d.uuid = Ok("GPU-0".into());
        d
    }

    #[test]
    fn parses_the_documented_forms() {
        let a: Alert = "used>90%".parse().unwrap();
        assert_eq!(
            (a.metric, a.op, a.threshold),
            (Metric::Used, Op::Gt, Threshold::Percent(90.0))
        );
        let a: Alert = "used>18000MiB".parse().unwrap();
        assert_eq!(a.threshold, Threshold::Bytes(18000.0 * MIB as f64));
        let a: Alert = "temp>85".parse().unwrap();
        assert_eq!(
            (a.metric, a.threshold),
            (Metric::Temp, Threshold::Plain(85.0))
        );
        let a: Alert = "util<10%".parse().unwrap();
        assert_eq!(
            (a.metric, a.op, a.threshold),
            (Metric::Util, Op::Lt, Threshold::Percent(10.0))
        );
        let a: Alert = " memory.free <= 2GiB ".parse().unwrap();
        assert_eq!((a.metric, a.op), (Metric::Free, Op::Le));
        assert_eq!(a.threshold, Threshold::Bytes(2.0 * (1u64 << 30) as f64));
        let a: Alert = "power>=300W".parse().unwrap();
        assert_eq!((a.op, a.threshold), (Op::Ge, Threshold::Plain(300.0)));
    }

    #[test]
    fn rejects_with_help() {
        for bad in [
            "used",
            "used>90",
            "temp>85%",
            "bogus>1",
            "used>x%",
            "util>5MiB",
            "used>5XB",
        ] {
            let e = bad.parse::<Alert>().unwrap_err();
            assert!(e.0.contains("expected METRIC OP VALUE"), "{bad}: {e}");
        }
    }

    #[test]
    fn fires_once_per_crossing() {
        let alerts: Vec<Alert> = vec!["used>90%".parse().unwrap()];
        let mut st = AlertState::default();
        let mut fired = Vec::new();
        for used in [10, 95, 96, 97, 50, 91, 92, 10, 10] {
            let snap = Snapshot {
                unix_ns: 0,
                driver: Ok(String::new()),
                devices: vec![dev(used, 100)],
            };
            fired.push(st.update(&alerts, &snap).len());
        }
        assert_eq!(fired, vec![0, 1, 0, 0, 0, 1, 0, 0, 0]);
    }

    #[test]
    fn na_keeps_state() {
        let alerts: Vec<Alert> = vec!["used>50%".parse().unwrap()];
        let mut st = AlertState::default();
        let mk = |d: DeviceSample| Snapshot {
            unix_ns: 0,
            driver: Ok(String::new()),
            devices: vec![d],
        };
        assert_eq!(st.update(&alerts, &mk(dev(60, 100))).len(), 1);
        // Memory unreadable for a sample: not a crossing either way.
        assert_eq!(
            st.update(&alerts, &mk(DeviceSample::missing(0, Na::GpuLost)))
                .len(),
            0
        );
        assert_eq!(st.update(&alerts, &mk(dev(60, 100))).len(), 0);
    }

    #[test]
    fn per_gpu_state_and_value_text() {
        let alerts: Vec<Alert> = vec!["used>1000MiB".parse().unwrap()];
        let mut st = AlertState::default();
        let mut d1 = dev(2000, 4000);
        d1.index = 1;
        let snap = Snapshot {
            unix_ns: 7,
            driver: Ok(String::new()),
            devices: vec![dev(10, 4000), d1],
        };
        let f = st.update(&alerts, &snap);
        assert_eq!(f.len(), 1);
        assert_eq!(
            (f[0].gpu, f[0].value.as_str(), f[0].unix_ns),
            (1, "2000MiB", 7)
        );
    }
}
