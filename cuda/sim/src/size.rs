//! Byte sizes written by people: `300MiB`, `16GiB`, `4096`, `1.5GiB`.

use std::fmt;

pub const KIB: u64 = 1 << 10;
pub const MIB: u64 = 1 << 20;
pub const GIB: u64 = 1 << 30;
pub const TIB: u64 = 1 << 40;

/// Why a size string was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SizeError {
    pub input: String,
    pub reason: &'static str,
}

impl fmt::Display for SizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid size {:?}: {} (write bytes, or a number with B, KiB, MiB, GiB, TiB, KB, MB, GB or TB, e.g. \"300MiB\")",
            self.input, self.reason
        )
    }
}

impl std::error::Error for SizeError {}

/// Parses a size: a decimal number (fractions allowed with a unit) and an optional unit.
/// Binary units (KiB, MiB, GiB, TiB; also K, M, G, T) are powers of 1024, decimal units
/// (KB, MB, GB, TB) powers of 1000. No unit or `B` means bytes. Case-insensitive.
pub fn parse_size(input: &str) -> Result<u64, SizeError> {
    let err = |reason| SizeError {
        input: input.to_string(),
        reason,
    };
    let s = input.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '_'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let num: String = num.chars().filter(|&c| c != '_').collect();
    if num.is_empty() {
        return Err(err("no number"));
    }
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => KIB,
        "m" | "mib" => MIB,
        "g" | "gib" => GIB,
        "t" | "tib" => TIB,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "tb" => 1_000_000_000_000,
        _ => return Err(err("unknown unit")),
    };
    if let Some((whole, frac)) = num.split_once('.') {
        if frac.contains('.') {
            return Err(err("more than one decimal point"));
        }
        if mult == 1 {
            return Err(err("fractional bytes"));
        }
        let whole: u64 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| err("number too large"))?
        };
        if frac.len() > 9 {
            return Err(err("more than 9 decimal places"));
        }
        let frac_num: u64 = if frac.is_empty() {
            0
        } else {
            frac.parse().map_err(|_| err("bad fraction"))?
        };
        let scale = 10u64.pow(frac.len() as u32);
        let whole_bytes = whole.checked_mul(mult).ok_or_else(|| err("too large"))?;
        let frac_bytes = (frac_num as u128 * mult as u128 / scale as u128) as u64;
        whole_bytes
            .checked_add(frac_bytes)
            .ok_or_else(|| err("too large"))
    } else {
        let n: u64 = num.parse().map_err(|_| err("number too large"))?;
        n.checked_mul(mult).ok_or_else(|| err("too large"))
    }
}

/// Formats bytes with the largest binary unit that divides them exactly (`16GiB`, `300MiB`,
/// `1536B`), so that [`parse_size`] gives the same number back.
pub fn format_size(bytes: u64) -> String {
    for (unit, m) in [("TiB", TIB), ("GiB", GIB), ("MiB", MIB), ("KiB", KIB)] {
        if bytes >= m && bytes.is_multiple_of(m) {
            return format!("{}{}", bytes / m, unit);
        }
    }
    format!("{bytes}B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("300MiB"), Ok(300 * MIB));
        assert_eq!(parse_size("300mib"), Ok(300 * MIB));
        assert_eq!(parse_size("16GiB"), Ok(16 * GIB));
        assert_eq!(parse_size("16G"), Ok(16 * GIB));
        assert_eq!(parse_size("2 TiB"), Ok(2 * TIB));
        assert_eq!(parse_size("80GB"), Ok(80_000_000_000));
        assert_eq!(parse_size("1.5GiB"), Ok(GIB + GIB / 2));
        assert_eq!(parse_size("1_024"), Ok(1024));
    }

    #[test]
    fn rejects() {
        for bad in [
            "",
            "GiB",
            "12XB",
            "1.5",
            "1.2.3GiB",
            "99999999999999999999",
            "-1",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?} accepted");
        }
        let msg = parse_size("12XB").unwrap_err().to_string();
        assert!(
            msg.contains("unknown unit") && msg.contains("300MiB"),
            "{msg}"
        );
    }

    #[test]
    fn round_trip() {
        for n in [1, 512, 1536, MIB, 300 * MIB, 16 * GIB, 3 * TIB] {
            assert_eq!(parse_size(&format_size(n)), Ok(n));
        }
        assert_eq!(format_size(16 * GIB), "16GiB");
    }
}
