//! Allocator settings: `PYTORCH_CUDA_ALLOC_CONF` parsing and the PyTorch version whose
//! rules the simulator follows.

use std::fmt;

use super::rounding::{LARGE_BUFFER, ROUNDUP_INTERVALS};
use crate::torch::snapshot::{Action, AllocatorSettings, Snapshot};

const MB: u64 = 1 << 20;

/// A PyTorch release (`major.minor`); rules that changed between releases follow it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Version {
    /// Major.
    pub major: u16,
    /// Minor.
    pub minor: u16,
}

impl Version {
    /// The release that wrote the bundled fixtures (their settings name
    /// `graph_capture_record_stream_reuse`, which appeared in 2.9).
    pub const DEFAULT: Version = Version { major: 2, minor: 9 };

    /// Parses `"2.5"`, `"2.5.1"`, `"2.5.1+cu121"`.
    pub fn parse(s: &str) -> Option<Version> {
        let mut it = s.trim().split(['.', '+']);
        let major = it.next()?.parse().ok()?;
        let minor = it.next().unwrap_or("0").parse().ok()?;
        Some(Version { major, minor })
    }

    fn at_least(self, major: u16, minor: u16) -> bool {
        self >= Version { major, minor }
    }

    /// `max_non_split_rounding_mb` is a known option (approximately 2.6 on; before it the
    /// limit was the constant 20 MiB, which is also its default).
    pub fn has_max_non_split_rounding(self) -> bool {
        self.at_least(2, 6)
    }

    /// `large_segment_size_mb` is a known option (the unified allocator config, 2.9 on).
    pub fn has_large_segment_size(self) -> bool {
        self.at_least(2, 9)
    }

    /// The unified allocator config (2.9 on) fills a `>` entry of the list form of
    /// `roundup_power2_divisions` from the interval *after* the last named one; older
    /// parsers start at the last named interval itself.
    pub fn roundup_gt_starts_after_last(self) -> bool {
        self.at_least(2, 9)
    }

    /// Smallest accepted `max_split_size_mb`: older parsers require `> 20`, 2.9 on `>= 20`.
    pub fn min_max_split_mb(self) -> u64 {
        if self.at_least(2, 9) {
            20
        } else {
            21
        }
    }

    /// How blocks of expandable segments split.
    ///
    /// Up to 2.9 (read from `CUDACachingAllocator.cpp`): whenever expandable segments are
    /// on, any remainder of at least 512 B is split off, regardless of `max_split_size_mb`.
    /// Later releases are reported to peak far higher with
    /// `max_split_size_mb:128,expandable_segments:True` (782 MiB on 2.9.1 vs 16 GB later);
    /// the simulator models that as oversize requests (≥ max_split_size) no longer
    /// splitting expandable blocks — an inference from the report, not from source.
    pub fn expandable_split(self) -> ExpandableSplit {
        if self.at_least(2, 10) {
            ExpandableSplit::HonourMaxSplit
        } else {
            ExpandableSplit::Always
        }
    }
}

impl Default for Version {
    fn default() -> Self {
        Version::DEFAULT
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)
    }
}

/// How the remainder of an expandable-segment block is split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpandableSplit {
    /// Split any remainder ≥ 512 B.
    Always,
    /// Split any remainder ≥ 512 B, except for requests ≥ `max_split_size`.
    HonourMaxSplit,
}

/// Which allocator backend the configuration selects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// PyTorch's own caching allocator (simulated).
    Native,
    /// `cudaMallocAsync`: the driver's stream-ordered pool, opaque to any simulator.
    CudaMallocAsync,
}

/// Everything the simulator needs to know about one allocator configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct Config {
    /// Whose rules to follow.
    pub version: Version,
    /// Backend.
    pub backend: Backend,
    /// `max_split_size_mb` in bytes (`u64::MAX` = unlimited, the default).
    pub max_split_size: u64,
    /// `max_non_split_rounding_mb` in bytes (default 20 MiB).
    pub max_non_split_rounding: u64,
    /// `roundup_power2_divisions` per interval (0 or 1 = plain 512 B rounding).
    pub roundup_power2_divisions: [u64; ROUNDUP_INTERVALS],
    /// `garbage_collection_threshold` (0 = off; only acts with a memory fraction).
    pub garbage_collection_threshold: f64,
    /// `expandable_segments`.
    pub expandable_segments: bool,
    /// `large_segment_size_mb` in bytes: the segment for 1–10 MiB requests and the page of
    /// large expandable segments (default 20 MiB).
    pub large_segment_size: u64,
    /// `torch.cuda.set_per_process_memory_fraction` (written `per_process_memory_fraction`
    /// in a fragprobe configuration string; PyTorch sets it from Python only).
    pub memory_fraction: Option<f64>,
    /// Device memory total (`cudaMemGetInfo`), used by the memory fraction and to size the
    /// address space of expandable segments (1⅛ × total).
    pub device_total: Option<u64>,
    /// Physical bytes the allocator may obtain before `cudaMalloc`/`cuMemCreate` fail
    /// (`None` = unlimited).
    pub capacity: Option<u64>,
    /// The configuration string this was parsed from.
    pub source: String,
    /// Set when the configuration was inferred from what a snapshot shows, not read from
    /// it: why (see [`Config::of_snapshot`]).
    pub inferred: Option<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            version: Version::DEFAULT,
            backend: Backend::Native,
            max_split_size: u64::MAX,
            max_non_split_rounding: LARGE_BUFFER,
            roundup_power2_divisions: [0; ROUNDUP_INTERVALS],
            garbage_collection_threshold: 0.0,
            expandable_segments: false,
            large_segment_size: LARGE_BUFFER,
            memory_fraction: None,
            device_total: None,
            capacity: None,
            source: String::new(),
            inferred: None,
        }
    }
}

/// A configuration string PyTorch would reject (same reasons, same wording where possible).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfError {
    /// The offending string.
    pub conf: String,
    /// What is wrong.
    pub msg: String,
}

impl fmt::Display for ConfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "allocator configuration {:?}: {}", self.conf, self.msg)
    }
}

impl std::error::Error for ConfError {}

impl Config {
    /// Whether the simulator can model this configuration.
    pub fn simulable(&self) -> Result<(), String> {
        match self.backend {
            Backend::Native => Ok(()),
            Backend::CudaMallocAsync => Err(
                "backend:cudaMallocAsync hands every tensor to the driver's stream-ordered pool \
                 (no rounding, splitting or retries on PyTorch's side); that pool's layout is \
                 opaque, so it cannot be simulated"
                    .into(),
            ),
        }
    }

    /// The configuration a snapshot records in `allocator_settings`.
    pub fn from_settings(s: &AllocatorSettings, version: Version) -> Result<Config, ConfError> {
        // The parsed values are authoritative; the string is parsed for the options the
        // settings dict does not carry (large_segment_size_mb, max_non_split_rounding_mb…).
        let mut c = Config::parse(&s.conf, version)?;
        c.max_split_size = s.max_split_size.unwrap_or(u64::MAX);
        c.expandable_segments = s.expandable_segments;
        c.garbage_collection_threshold = s.garbage_collection_threshold;
        c.roundup_power2_divisions = s.roundup_power2_divisions;
        Ok(c)
    }

    /// The configuration `snap` was recorded under, with the rules of `version`: its
    /// `allocator_settings` when it has them (PyTorch ≈ 2.4+ writes them); else inferred
    /// from what it shows — `expandable_segments:True` when a segment is expandable or the
    /// trace maps segments (`segment_map`/`segment_unmap`), which only that setting does —
    /// with [`Config::inferred`] saying so; else PyTorch's defaults.
    pub fn of_snapshot(snap: &Snapshot, version: Version) -> Result<Config, ConfError> {
        if let Some(s) = &snap.settings {
            return Config::from_settings(s, version);
        }
        let expandable = snap.segments.iter().filter(|s| s.is_expandable).count();
        let maps = snap
            .devices()
            .into_iter()
            .flat_map(|d| snap.trace(d))
            .filter(|e| matches!(e.action, Action::SegmentMap | Action::SegmentUnmap))
            .count();
        let mut c = Config {
            version,
            ..Config::default()
        };
        if expandable > 0 || maps > 0 {
            c.expandable_segments = true;
            c.source = "expandable_segments:True".into();
            c.inferred = Some(format!(
                "the file has no allocator_settings; {expandable} of its {} segments are expandable and its trace has {maps} segment_map/segment_unmap entries, which only expandable_segments:True makes",
                snap.segments.len()
            ));
        }
        Ok(c)
    }

    /// Parses a `PYTORCH_CUDA_ALLOC_CONF` string the way `version` does.
    pub fn parse(conf: &str, version: Version) -> Result<Config, ConfError> {
        let mut c = Config {
            version,
            source: conf.to_string(),
            ..Config::default()
        };
        let toks = lex(conf);
        let err = |msg: String| ConfError {
            conf: conf.to_string(),
            msg,
        };
        let mut i = 0;
        while i < toks.len() {
            let key = toks[i].as_str();
            let value_at = |i: usize| -> Result<&str, ConfError> {
                if toks.get(i + 1).map(String::as_str) != Some(":") {
                    return Err(err(format!("expected ':' after {key}")));
                }
                toks.get(i + 2)
                    .map(String::as_str)
                    .ok_or_else(|| err(format!("expecting {key} value")))
            };
            let num = |v: &str| -> Result<u64, ConfError> {
                v.parse::<u64>()
                    .map_err(|_| err(format!("{key} value {v:?} is not a number")))
            };
            let boolean = |v: &str| -> Result<bool, ConfError> {
                match v {
                    "True" | "true" | "1" => Ok(true),
                    "False" | "false" | "0" => Ok(false),
                    _ => Err(err(format!(
                        "expected a single True/False argument for {key}"
                    ))),
                }
            };
            match key {
                "backend" => {
                    let v = value_at(i)?;
                    c.backend = match v {
                        "native" => Backend::Native,
                        "cudaMallocAsync" | "hipMallocAsync" => Backend::CudaMallocAsync,
                        _ => {
                            return Err(err(format!(
                                "unknown allocator backend {v:?}, options are native and cudaMallocAsync"
                            )))
                        }
                    };
                    i += 3;
                }
                "max_split_size_mb" => {
                    let v = num(value_at(i)?)?;
                    let min = version.min_max_split_mb();
                    if v < min {
                        return Err(err(format!(
                            "max_split_size_mb too small, must be >= {min} (PyTorch {version})"
                        )));
                    }
                    c.max_split_size = v.saturating_mul(MB);
                    i += 3;
                }
                "max_non_split_rounding_mb" => {
                    if !version.has_max_non_split_rounding() {
                        return Err(err(format!(
                            "unrecognized option max_non_split_rounding_mb for PyTorch {version}"
                        )));
                    }
                    let v = num(value_at(i)?)?;
                    if v < 20 {
                        return Err(err(
                            "max_non_split_rounding_mb too small, must be >= 20".into()
                        ));
                    }
                    c.max_non_split_rounding = v.saturating_mul(MB);
                    i += 3;
                }
                "large_segment_size_mb" => {
                    if !version.has_large_segment_size() {
                        return Err(err(format!(
                            "unrecognized option large_segment_size_mb for PyTorch {version}"
                        )));
                    }
                    let v = num(value_at(i)?)?;
                    if v == 0 {
                        return Err(err("large_segment_size_mb must be > 0".into()));
                    }
                    c.large_segment_size = v.saturating_mul(MB);
                    i += 3;
                }
                "garbage_collection_threshold" => {
                    let v = value_at(i)?;
                    let t: f64 = v.parse().map_err(|_| {
                        err(format!(
                            "garbage_collection_threshold {v:?} is not a number"
                        ))
                    })?;
                    if !(t > 0.0 && t < 1.0) {
                        return Err(err(
                            "garbage_collect_threshold is invalid, set it in (0.0, 1.0)".into(),
                        ));
                    }
                    c.garbage_collection_threshold = t;
                    i += 3;
                }
                "expandable_segments" => {
                    c.expandable_segments = boolean(value_at(i)?)?;
                    i += 3;
                }
                "per_process_memory_fraction" => {
                    let v = value_at(i)?;
                    let f: f64 = v.parse().map_err(|_| {
                        err(format!("per_process_memory_fraction {v:?} is not a number"))
                    })?;
                    if !(f > 0.0 && f <= 1.0) {
                        return Err(err("per_process_memory_fraction must be in (0, 1]".into()));
                    }
                    c.memory_fraction = Some(f);
                    i += 3;
                }
                "roundup_power2_divisions" => {
                    i = parse_divisions(&toks, i, version, &mut c.roundup_power2_divisions)
                        .map_err(err)?;
                }
                // Options that do not change device-memory placement.
                "release_lock_on_cudamalloc"
                | "release_lock_on_hipmalloc"
                | "pinned_use_cuda_host_register"
                | "pinned_use_hip_host_register"
                | "pinned_num_register_threads"
                | "pinned_reserve_segment_size_mb"
                | "pinned_use_background_threads"
                | "graph_capture_record_stream_reuse" => {
                    value_at(i)?;
                    i += 3;
                }
                "," => {
                    i += 1;
                    continue;
                }
                other => {
                    return Err(err(format!(
                        "unrecognized CachingAllocator option: {other}"
                    )));
                }
            }
            if i < toks.len() {
                if toks[i] != "," {
                    return Err(err(format!("expected ',' before {:?}", toks[i])));
                }
                i += 1;
            }
        }
        Ok(c)
    }
}

/// PyTorch's lexer: `,` `:` `[` `]` are tokens, spaces are dropped.
fn lex(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut buf = String::new();
    for ch in s.chars() {
        if matches!(ch, ',' | ':' | '[' | ']') {
            if !buf.is_empty() {
                out.push(std::mem::take(&mut buf));
            }
            out.push(ch.to_string());
        } else if ch != ' ' {
            buf.push(ch);
        }
    }
    if !buf.is_empty() {
        out.push(buf);
    }
    out
}

/// `roundup_power2_divisions:N` or `roundup_power2_divisions:[256:1,512:2,>:8]`; returns the
/// index after the value.
fn parse_divisions(
    toks: &[String],
    i: usize,
    version: Version,
    out: &mut [u64; ROUNDUP_INTERVALS],
) -> Result<usize, String> {
    let tok = |j: usize| toks.get(j).map(String::as_str);
    if tok(i + 1) != Some(":") {
        return Err("expected ':' after roundup_power2_divisions".into());
    }
    let mut j = i + 2;
    match tok(j) {
        None => Err("expecting roundup_power2_divisions value".into()),
        Some("[") => {
            *out = [0; ROUNDUP_INTERVALS];
            let mut first = true;
            let mut last = 0usize;
            j += 1;
            while tok(j).is_some_and(|t| t != "]") {
                let key = tok(j).unwrap_or_default();
                if tok(j + 1) != Some(":") {
                    return Err("error parsing roundup_power2_divisions, expected ':'".into());
                }
                let val: u64 = tok(j + 2)
                    .and_then(|v| v.parse().ok())
                    .ok_or("error parsing roundup_power2_divisions value")?;
                if val != 0 && !val.is_power_of_two() {
                    return Err("for roundups, the divisions have to be a power of 2 or 0".into());
                }
                if key == ">" {
                    let from = if version.roundup_gt_starts_after_last() {
                        last + 1
                    } else {
                        last
                    };
                    for d in out.iter_mut().skip(from) {
                        *d = val;
                    }
                } else {
                    let mb: u64 = key
                        .parse()
                        .map_err(|_| format!("roundup interval {key:?} is not a number"))?;
                    if !mb.is_power_of_two() {
                        return Err("for roundups, the intervals have to be powers of 2".into());
                    }
                    let idx = (mb.trailing_zeros() as usize).min(ROUNDUP_INTERVALS - 1);
                    if first {
                        for d in out.iter_mut().take(idx) {
                            *d = val;
                        }
                        first = false;
                    }
                    out[idx] = val;
                    last = idx;
                }
                j += 3;
                match tok(j) {
                    Some(",") => j += 1,
                    Some("]") => {}
                    _ => {
                        return Err(
                            "error parsing roundup_power2_divisions, expected ',' or ']'".into(),
                        )
                    }
                }
            }
            if tok(j) != Some("]") {
                return Err("roundup_power2_divisions list is missing ']'".into());
            }
            Ok(j + 1)
        }
        Some(v) => {
            let d: u64 = v
                .parse()
                .map_err(|_| format!("roundup_power2_divisions value {v:?} is not a number"))?;
            if !d.is_power_of_two() {
                return Err("for roundups, the divisions have to be a power of 2".into());
            }
            *out = [d; ROUNDUP_INTERVALS];
            Ok(j + 1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_string_is_the_default() {
        let c = Config::parse("", Version::DEFAULT).unwrap();
        assert_eq!(c.max_split_size, u64::MAX);
        assert!(!c.expandable_segments);
        assert_eq!(c.large_segment_size, 20 << 20);
        assert_eq!(c.max_non_split_rounding, 20 << 20);
    }

    #[test]
    fn parses_every_option() {
        let c = Config::parse(
            "max_split_size_mb:128, expandable_segments:True,garbage_collection_threshold:0.6,\
             large_segment_size_mb:64,max_non_split_rounding_mb:256,roundup_power2_divisions:4,\
             per_process_memory_fraction:0.5",
            Version::DEFAULT,
        )
        .unwrap();
        assert_eq!(c.max_split_size, 128 << 20);
        assert!(c.expandable_segments);
        assert_eq!(c.garbage_collection_threshold, 0.6);
        assert_eq!(c.large_segment_size, 64 << 20);
        assert_eq!(c.max_non_split_rounding, 256 << 20);
        assert_eq!(c.roundup_power2_divisions, [4; 16]);
        assert_eq!(c.memory_fraction, Some(0.5));
    }

    #[test]
    fn list_form_matches_pytorch_test() {
        // From PyTorch's AllocatorConfigTest: [64:8,128:2,256:4,512:2,1024:4,>:1].
        let c = Config::parse(
            "roundup_power2_divisions:[64:8,128:2,256:4,512:2,1024:4,>:1]",
            Version::DEFAULT,
        )
        .unwrap();
        let d = c.roundup_power2_divisions;
        assert_eq!(d[5], 8, "32 MiB interval inherits the first value");
        assert_eq!(d[6], 8);
        assert_eq!(d[7], 2);
        assert_eq!(d[8], 4);
        assert_eq!(d[9], 2);
        assert_eq!(d[10], 4);
        assert_eq!(d[11], 1);
        assert_eq!(d[15], 1);
        // Older parsers start the '>' fill at the last named interval.
        let old = Config::parse(
            "roundup_power2_divisions:[256:2,>:8]",
            Version { major: 2, minor: 4 },
        )
        .unwrap();
        assert_eq!(old.roundup_power2_divisions[8], 8);
        let new = Config::parse("roundup_power2_divisions:[256:2,>:8]", Version::DEFAULT).unwrap();
        assert_eq!(new.roundup_power2_divisions[8], 2);
        assert_eq!(new.roundup_power2_divisions[9], 8);
    }

    #[test]
    fn rejects_what_pytorch_rejects() {
        for bad in [
            "max_split_size_mb:10",
            "expandable_segments:yes",
            "garbage_collection_threshold:1.5",
            "roundup_power2_divisions:3",
            "frobnicate:1",
            "backend:magic",
            "max_split_size_mb",
        ] {
            let e = Config::parse(bad, Version::DEFAULT).unwrap_err();
            assert!(!e.to_string().is_empty(), "{bad}");
        }
        let old = Version { major: 2, minor: 4 };
        assert!(Config::parse("max_split_size_mb:20", old).is_err());
        assert!(Config::parse("max_split_size_mb:20", Version::DEFAULT).is_ok());
        assert!(Config::parse("large_segment_size_mb:64", old).is_err());
    }

    #[test]
    fn cuda_malloc_async_is_not_simulable() {
        let c = Config::parse("backend:cudaMallocAsync", Version::DEFAULT).unwrap();
        assert_eq!(c.backend, Backend::CudaMallocAsync);
        assert!(c.simulable().unwrap_err().contains("cannot be simulated"));
    }
}
