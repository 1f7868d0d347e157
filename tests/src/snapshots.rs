//! Real PyTorch snapshots recorded by other projects. They are reference data beside the
//! checkout (`../shared/data/pytorch-snapshots/`, with their provenance and licences), never
//! part of the project: tests that need them read them there, and skip with one line where
//! they are absent (a user's clone). CI has them; there a missing directory is a failure.
//! `FRAGPROBE_SNAPSHOTS_DIR` points elsewhere.
//!
//! The shared crate's tests include this file with `#[path]` (it depends on nothing).

use std::path::PathBuf;

/// The directory of real snapshots, or None after saying why in one line.
pub fn dir() -> Option<PathBuf> {
    let d = std::env::var_os("FRAGPROBE_SNAPSHOTS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data/pytorch-snapshots")
        });
    if d.is_dir() {
        return Some(d);
    }
    let msg = format!(
        "no real PyTorch snapshots at {} (they live beside the checkout, in ../shared/data)",
        d.display()
    );
    assert!(std::env::var_os("CI").is_none(), "{msg}");
    eprintln!("SKIPPED: {msg}");
    None
}

/// One snapshot of [`dir`] (call [`dir`] first to skip where there are none).
pub fn path(name: &str) -> PathBuf {
    dir()
        .expect("real snapshots (see snapshots::dir)")
        .join(name)
}
