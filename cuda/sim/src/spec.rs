//! Which simulated devices exist: `"2x80GiB"`, `"1x16GiB,1x24GiB"`, `"24GiB"`.

use crate::size::{format_size, parse_size, GIB, MIB};
use std::fmt;

/// Most devices one simulation holds (fixed slots in the shared state file).
pub const MAX_DEVICES: usize = 16;
/// Smallest device.
pub const MIN_DEVICE_SIZE: u64 = 64 * MIB;
/// Largest device: each device's arena window is 512 GiB of simulated address space.
pub const MAX_DEVICE_SIZE: u64 = 512 * GIB;
/// Device sizes must be multiples of the allocation alignment.
pub const SIZE_MULTIPLE: u64 = 512;
/// The spec used when none is given: one 16 GiB device.
pub const DEFAULT_SPEC: &str = "1x16GiB";

/// The simulated devices, in ordinal order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSpec {
    sizes: Vec<u64>,
}

/// Why a device spec was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    pub input: String,
    pub reason: String,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid simulated GPU spec {:?}: {} (expected a comma-separated list of COUNTxSIZE \
             or SIZE, e.g. \"2x80GiB\" or \"1x16GiB,1x24GiB\")",
            self.input, self.reason
        )
    }
}

impl std::error::Error for SpecError {}

impl DeviceSpec {
    /// Parses a spec. Empty input is an error; use [`DeviceSpec::default`] for the default.
    pub fn parse(input: &str) -> Result<DeviceSpec, SpecError> {
        let err = |reason: String| SpecError {
            input: input.to_string(),
            reason,
        };
        let mut sizes = Vec::new();
        for group in input.split(',') {
            let group = group.trim();
            if group.is_empty() {
                return Err(err("empty device group".into()));
            }
            let (count, size) = match group.split_once(['x', 'X']) {
                Some((c, s)) if !c.is_empty() && c.chars().all(|ch| ch.is_ascii_digit()) => {
                    let c: usize = c
                        .parse()
                        .map_err(|_| err(format!("bad device count {c:?}")))?;
                    (c, s)
                }
                _ => (1, group),
            };
            if count == 0 {
                return Err(err(format!("device count 0 in {group:?}")));
            }
            let bytes = parse_size(size).map_err(|e| err(e.to_string()))?;
            if bytes < MIN_DEVICE_SIZE {
                return Err(err(format!(
                    "device size {} is below the minimum {}",
                    format_size(bytes),
                    format_size(MIN_DEVICE_SIZE)
                )));
            }
            if bytes > MAX_DEVICE_SIZE {
                return Err(err(format!(
                    "device size {} is above the maximum {}",
                    format_size(bytes),
                    format_size(MAX_DEVICE_SIZE)
                )));
            }
            if !bytes.is_multiple_of(SIZE_MULTIPLE) {
                return Err(err(format!(
                    "device size {bytes} is not a multiple of {SIZE_MULTIPLE} bytes"
                )));
            }
            if sizes.len() + count > MAX_DEVICES {
                return Err(err(format!("more than {MAX_DEVICES} devices")));
            }
            sizes.extend(std::iter::repeat_n(bytes, count));
        }
        Ok(DeviceSpec { sizes })
    }

    /// Builds a spec from device sizes (used when adopting the spec stored in a state file).
    pub fn from_sizes(sizes: Vec<u64>) -> Result<DeviceSpec, SpecError> {
        let text = sizes
            .iter()
            .map(|s| format!("1x{}", format_size(*s)))
            .collect::<Vec<_>>()
            .join(",");
        if sizes.is_empty() {
            return Err(SpecError {
                input: text,
                reason: "no devices".into(),
            });
        }
        DeviceSpec::parse(&text)
    }

    pub fn count(&self) -> usize {
        self.sizes.len()
    }

    pub fn sizes(&self) -> &[u64] {
        &self.sizes
    }

    pub fn size(&self, ordinal: usize) -> Option<u64> {
        self.sizes.get(ordinal).copied()
    }
}

impl Default for DeviceSpec {
    fn default() -> Self {
        DeviceSpec::parse(DEFAULT_SPEC).expect("default spec parses")
    }
}

impl fmt::Display for DeviceSpec {
    /// Canonical text: runs of equal sizes grouped, `2x80GiB,1x24GiB`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut i = 0;
        while i < self.sizes.len() {
            let mut j = i;
            while j < self.sizes.len() && self.sizes[j] == self.sizes[i] {
                j += 1;
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            write!(f, "{}x{}", j - i, format_size(self.sizes[i]))?;
            i = j;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_forms() {
        assert_eq!(
            DeviceSpec::parse("2x80GiB").unwrap().sizes(),
            &[80 * GIB; 2]
        );
        assert_eq!(
            DeviceSpec::parse("1x16GiB, 1x24GiB").unwrap().sizes(),
            &[16 * GIB, 24 * GIB]
        );
        assert_eq!(DeviceSpec::parse("24GiB").unwrap().sizes(), &[24 * GIB]);
        assert_eq!(DeviceSpec::default().sizes(), &[16 * GIB]);
    }

    #[test]
    fn display_round_trips() {
        for s in ["2x80GiB", "1x16GiB,1x24GiB", "3x1GiB,1x2GiB,2x1GiB"] {
            let spec = DeviceSpec::parse(s).unwrap();
            assert_eq!(spec.to_string(), s);
            assert_eq!(DeviceSpec::parse(&spec.to_string()).unwrap(), spec);
        }
        let spec = DeviceSpec::parse("2x80GiB").unwrap();
        assert_eq!(DeviceSpec::from_sizes(spec.sizes().to_vec()).unwrap(), spec);
    }

    #[test]
    fn rejects_bad_specs() {
        for bad in [
            "", "0x16GiB", "2x", "x16GiB", "17x1GiB", "1x1MiB", "1x2TiB", "2x80QB", "1x16GiB,",
        ] {
            let e = DeviceSpec::parse(bad).unwrap_err();
            assert!(e.to_string().contains("2x80GiB"), "{e}");
        }
    }
}
