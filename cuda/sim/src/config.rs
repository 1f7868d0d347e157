//! Settings read from the environment (see the crate documentation for the list).

use crate::size::{parse_size, MIB};
use crate::spec::DeviceSpec;
use std::fmt;
use std::path::PathBuf;

pub const ENV_GPU: &str = "FRAGPROBE_SIM_GPU";
pub const ENV_STATE: &str = "FRAGPROBE_SIM_STATE";
pub const ENV_CONTEXT_OVERHEAD: &str = "FRAGPROBE_SIM_CONTEXT_OVERHEAD";
pub const ENV_FAIL_NTH: &str = "FRAGPROBE_SIM_FAIL_NTH";
pub const ENV_FAIL_ABOVE: &str = "FRAGPROBE_SIM_FAIL_ABOVE";
pub const ENV_LATENCY_NS: &str = "FRAGPROBE_SIM_LATENCY_NS";

/// Physical memory one context costs unless FRAGPROBE_SIM_CONTEXT_OVERHEAD says otherwise.
pub const DEFAULT_CONTEXT_OVERHEAD: u64 = 300 * MIB;

/// A bad environment variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub var: &'static str,
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.var, self.message)
    }
}

impl std::error::Error for ConfigError {}

/// The simulation's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Devices asked for; `None` adopts the devices of the state file's live users, or the
    /// default one 16 GiB device.
    pub spec: Option<DeviceSpec>,
    pub state_path: PathBuf,
    pub context_overhead: u64,
    /// Fail the Nth allocation call (1-based, counted per process over every allocating
    /// entry point) with out-of-memory.
    pub fail_nth: Option<u64>,
    /// Fail every allocation call asking for more than this many bytes with out-of-memory.
    pub fail_above: Option<u64>,
    /// Busy-wait this long in every allocating or freeing call.
    pub latency_ns: u64,
    /// `CUDA_VISIBLE_DEVICES` as the process has it (`None`: unset, every device visible).
    pub visible_devices: Option<String>,
}

/// `/dev/shm/fragprobe-simgpu-<uid>`, or the temporary directory when there is no
/// `/dev/shm`.
pub fn default_state_path() -> PathBuf {
    // SAFETY: getuid has no preconditions and cannot fail.
    let uid = unsafe { libc::getuid() };
    let name = format!("fragprobe-simgpu-{uid}");
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        shm.join(name)
    } else {
        std::env::temp_dir().join(name)
    }
}

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Result<Config, ConfigError> {
        Config::from_lookup(|k| std::env::var(k).ok())
    }

    /// Reads settings through `get` (tests pass a map).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
        let nonempty = |k: &str| get(k).filter(|v| !v.trim().is_empty());
        let spec = match nonempty(ENV_GPU) {
            Some(s) => Some(DeviceSpec::parse(&s).map_err(|e| ConfigError {
                var: ENV_GPU,
                message: e.to_string(),
            })?),
            None => None,
        };
        let state_path = nonempty(ENV_STATE)
            .map(PathBuf::from)
            .unwrap_or_else(default_state_path);
        let size_of = |var: &'static str| -> Result<Option<u64>, ConfigError> {
            nonempty(var)
                .map(|v| {
                    parse_size(&v).map_err(|e| ConfigError {
                        var,
                        message: e.to_string(),
                    })
                })
                .transpose()
        };
        let context_overhead = size_of(ENV_CONTEXT_OVERHEAD)?.unwrap_or(DEFAULT_CONTEXT_OVERHEAD);
        let fail_above = size_of(ENV_FAIL_ABOVE)?;
        let count_of = |var: &'static str| -> Result<Option<u64>, ConfigError> {
            nonempty(var)
                .map(|v| {
                    v.trim().parse::<u64>().map_err(|_| ConfigError {
                        var,
                        message: format!("{v:?} is not a whole number"),
                    })
                })
                .transpose()
        };
        let fail_nth = count_of(ENV_FAIL_NTH)?;
        if fail_nth == Some(0) {
            return Err(ConfigError {
                var: ENV_FAIL_NTH,
                message: "counts from 1; 0 would never fail".into(),
            });
        }
        let latency_ns = count_of(ENV_LATENCY_NS)?.unwrap_or(0);
        Ok(Config {
            spec,
            state_path,
            context_overhead,
            fail_nth,
            fail_above,
            latency_ns,
            visible_devices: get("CUDA_VISIBLE_DEVICES"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn cfg(pairs: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_lookup(|k| m.get(k).cloned())
    }

    #[test]
    fn defaults_are_off() {
        let c = cfg(&[]).unwrap();
        assert_eq!(c.spec, None);
        assert_eq!(c.context_overhead, 300 * MIB);
        assert_eq!(c.fail_nth, None);
        assert_eq!(c.fail_above, None);
        assert_eq!(c.latency_ns, 0);
        assert!(c.state_path.to_string_lossy().contains("fragprobe-simgpu-"));
    }

    #[test]
    fn parses_everything() {
        let c = cfg(&[
            (ENV_GPU, "2x80GiB"),
            (ENV_STATE, "/tmp/x"),
            (ENV_CONTEXT_OVERHEAD, "1MiB"),
            (ENV_FAIL_NTH, "3"),
            (ENV_FAIL_ABOVE, "1GiB"),
            (ENV_LATENCY_NS, "50"),
        ])
        .unwrap();
        assert_eq!(c.spec.unwrap().count(), 2);
        assert_eq!(c.state_path, PathBuf::from("/tmp/x"));
        assert_eq!(c.context_overhead, MIB);
        assert_eq!(c.fail_nth, Some(3));
        assert_eq!(c.fail_above, Some(1 << 30));
        assert_eq!(c.latency_ns, 50);
    }

    #[test]
    fn errors_name_the_variable() {
        for (k, v) in [
            (ENV_GPU, "lots"),
            (ENV_CONTEXT_OVERHEAD, "big"),
            (ENV_FAIL_NTH, "x"),
            (ENV_FAIL_NTH, "0"),
            (ENV_LATENCY_NS, "-1"),
        ] {
            let e = cfg(&[(k, v)]).unwrap_err();
            assert_eq!(e.var, k);
            assert!(e.to_string().starts_with(k));
        }
    }
}
