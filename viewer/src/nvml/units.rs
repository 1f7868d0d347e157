//! Formatting and parsing helpers: byte sizes, ISO-8601 timestamps, text bars, sampling
//! intervals.

/// Bytes per MiB.
pub const MIB: u64 = 1 << 20;
/// Bytes per GiB.
pub const GIB: u64 = 1 << 30;

/// Bytes as MiB with no fraction, like nvidia-smi ("18432MiB").
pub fn mib(bytes: u64) -> String {
    format!("{}MiB", bytes / MIB)
}

/// Bytes in the largest unit that keeps the number ≥ 1, one decimal ("1.5 GiB").
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Nanoseconds since the Unix epoch, now.
pub fn now_unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos().min(u64::MAX as u128) as u64)
        .unwrap_or(0)
}

/// ISO-8601 UTC with milliseconds: `2024-05-01T12:34:56.789Z`.
pub fn iso8601(unix_ns: u64) -> String {
    let secs = unix_ns / 1_000_000_000;
    let ms = (unix_ns / 1_000_000) % 1000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// Parses what [`iso8601`] writes (also without milliseconds) back to ns since the epoch.
pub fn parse_iso8601(s: &str) -> Option<u64> {
    let s = s.trim().strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let mut dp = date.splitn(3, '-');
    let y: i64 = dp.next()?.parse().ok()?;
    let m: u32 = dp.next()?.parse().ok()?;
    let d: u32 = dp.next()?.parse().ok()?;
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut tp = hms.splitn(3, ':');
    let h: u64 = tp.next()?.parse().ok()?;
    let mi: u64 = tp.next()?.parse().ok()?;
    let se: u64 = tp.next()?.parse().ok()?;
    if !(1..=12).contains(&m) || !(1..=31).contains(&d) || h > 23 || mi > 59 || se > 60 {
        return None;
    }
    let frac_ns: u64 = {
        let digits: String = frac.chars().take(9).collect();
        let n: u64 = digits.parse().ok()?;
        n * 10u64.pow(9 - digits.len() as u32)
    };
    let days = days_from_civil(y, m, d);
    if days < 0 {
        return None;
    }
    Some((days as u64 * 86_400 + h * 3600 + mi * 60 + se) * 1_000_000_000 + frac_ns)
}

// Howard Hinnant's days/civil algorithms (proleptic Gregorian, UTC).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = m as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// A text bar `[#####     ]` of `width` cells filled to `fraction` (clamped to 0..=1).
pub fn bar(fraction: f64, width: usize) -> String {
    let f = if fraction.is_finite() {
        fraction.clamp(0.0, 1.0)
    } else {
        0.0
    };
    let filled = ((f * width as f64).round() as usize).min(width);
    format!("[{}{}]", "#".repeat(filled), " ".repeat(width - filled))
}

/// The shortest sampling interval `watch`, `log` and `--nvml-interval` take.
pub const MIN_INTERVAL_S: f64 = 0.01;

/// Parses a positive interval in seconds, at least [`MIN_INTERVAL_S`].
pub fn parse_interval(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !(v.is_finite() && v > 0.0 && v <= 86_400.0) {
        return Err(format!(
            "interval must be between 0 and 86400 seconds, got {s}"
        ));
    }
    if v < MIN_INTERVAL_S {
        // NVML itself refreshes its figures no faster; below this a sampler only spins.
        return Err(format!(
            "'{s}': the shortest interval is {MIN_INTERVAL_S} s (10 ms)"
        ));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_round_trip() {
        assert_eq!(iso8601(0), "1970-01-01T00:00:00.000Z");
        // 2024-02-29T23:59:59.123Z, a leap day.
        let t = 1_709_251_199_123_000_000;
        assert_eq!(iso8601(t), "2024-02-29T23:59:59.123Z");
        assert_eq!(parse_iso8601("2024-02-29T23:59:59.123Z"), Some(t));
        assert_eq!(parse_iso8601("2024-02-29T23:59:59Z"), Some(t - 123_000_000));
        assert_eq!(parse_iso8601("2024-13-01T00:00:00Z"), None);
        assert_eq!(parse_iso8601("garbage"), None);
        for t in [1u64, 951_782_400_000_000_000, 4_102_444_800_999_000_000] {
            let ms = t / 1_000_000 * 1_000_000;
            assert_eq!(parse_iso8601(&iso8601(t)), Some(ms));
        }
    }

    #[test]
    fn sizes_and_bars() {
        assert_eq!(mib(18_432 * MIB + 5), "18432MiB");
        assert_eq!(human(512), "512 B");
        assert_eq!(human(3 * GIB / 2), "1.5 GiB");
        assert_eq!(bar(0.5, 10), "[#####     ]");
        assert_eq!(bar(2.0, 4), "[####]");
        assert_eq!(bar(f64::NAN, 3), "[   ]");
    }
}
