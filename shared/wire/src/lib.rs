//! fragprobe's wire: every byte that crosses a process or lands in a file, in one crate.
//!
//! This is the only fragprobe crate `libfragprobe.so` links, and it has no dependencies:
//! what the probe runs is allocation-free, lock-free and panic-free, and nothing
//! consumer-side (the model, file mapping, checksums) can come with it. CI checks that
//! (`cargo tree -p fragprobe-probe`).
//!
//! # FORMAT: where each layout is drawn
//!
//! | bytes | drawn in | version |
//! |---|---|---|
//! | the 80-byte [`format::Record`], [`format::EventKind`], [`format::Api`], flags | [`format`] | [`format::FORMAT_VERSION`] |
//! | metadata entries (run info, device info, meta areas) | [`format`] (`MetaWriter`, `MetaEntry`) | same |
//! | the ring file: 320-byte header, slots, meta area, live table | [`ring`] | same |
//! | the live table's 48-byte entries and the resync protocol | [`live`] | same |
//! | the trace file: 64-byte header, checksummed chunks | [`trace`] | same |
//!
//! One version number covers all of them: a change to any layout that an older reader
//! cannot skip bumps [`format::FORMAT_VERSION`], and every reader that meets another
//! version refuses with [`format::VersionError`], which names both versions. A trace file
//! recorded with version 1 is kept in the tests (`tests/fixtures/format-v1.fpt`) and must
//! keep opening.
//!
//! The consumer side (reading and writing trace files, mapping ring files, the model) is
//! `fragprobe_shared`, which re-exports these modules under the same names.

pub mod format;
pub mod live;
pub mod ring;
pub mod trace;
