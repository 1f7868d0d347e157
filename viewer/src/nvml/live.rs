//! Live state of a probed process, read from its ring's live table without draining the
//! ring (a `fragprobe run` or `record` may be consuming it at the same time).
//!
//! Live bytes and count come straight from the table. The fragmentation figures come from
//! replaying the table's entries into the shared address-space model as one resync, with
//! the device's NVML total as the arena's capacity when the process uses a single device.

use std::path::PathBuf;

use fragprobe_shared::format::{Api, EventKind, MetaEntry, MetaKind, Record};
use fragprobe_shared::live::LiveEntry;
use fragprobe_shared::model::{ArenaFigures, Model};
use fragprobe_shared::ring::RingFile;

use super::sample::ProbeInfo;

/// What the ring at `ring` says about its process. `capacity` is the device's total bytes
/// (NVML). Fields the ring cannot answer (unreadable ring, another user's) stay `None`.
///
/// `device_uuid` is the NVML device's uuid: a process on several GPUs shows, on each, only
/// the objects on the CUDA device with that uuid (found in the ring's device descriptions,
/// so `CUDA_VISIBLE_DEVICES` renumbering does not matter). A ring that describes no device
/// yet gives all its objects.
pub fn probe_info(ring: PathBuf, capacity: Option<u64>, device_uuid: Option<&str>) -> ProbeInfo {
    let Ok(file) = RingFile::open(&ring) else {
        return ProbeInfo {
            ring,
            ..ProbeInfo::default()
        };
    };
    let mut entries = Vec::new();
    file.live().for_each(|e| entries.push(e));
    if let Some(u) = device_uuid {
        let described = described_devices(file.meta_area());
        if !described.is_empty() {
            let ordinal = described.iter().find(|(_, id)| id == u).map(|(o, _)| *o);
            entries.retain(|e| Some(e.device) == ordinal);
        }
    }
    let (count, bytes) = totals(&entries);
    let arena = arena_of(file.pid(), &entries, capacity);
    ProbeInfo {
        ring,
        live_bytes: Some(bytes),
        live_count: Some(count),
        frag: arena.map(|a| a.ratio()),
        largest_free: arena.map(|a| a.largest_free),
    }
}

/// The (CUDA ordinal, uuid) of every device a ring's metadata describes.
pub fn described_devices(meta: &[u8]) -> Vec<(i16, String)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < meta.len() {
        let Some(e) = MetaEntry::parse(&meta[at..]) else {
            break; // the last entry may still be being written
        };
        if e.kind == Some(MetaKind::DeviceInfo) {
            if let (Some(o), Some(u)) = (e.get_str("ordinal"), e.get_str("uuid")) {
                if let Ok(o) = o.parse::<i16>() {
                    out.push((o, u.to_string()));
                }
            }
        }
        at += e.padded_len.max(8);
    }
    out
}

/// Live objects and bytes that hold device memory (as `LiveTable::totals` counts them).
pub fn totals(entries: &[LiveEntry]) -> (u64, u64) {
    entries
        .iter()
        .filter(|e| e.class.holds_memory())
        .fold((0, 0), |(n, b), e| (n + 1, b.saturating_add(e.size)))
}

/// The most constrained arena (smallest largest free block) of a process whose live
/// objects are `entries`, via the model. `None` when no allocation lies in an arena.
pub fn arena_of(pid: u32, entries: &[LiveEntry], capacity: Option<u64>) -> Option<ArenaFigures> {
    let mut model = Model::new();
    let mut ordinals: Vec<i16> = entries.iter().map(|e| e.device).collect();
    ordinals.sort_unstable();
    ordinals.dedup();
    // Only with one device is it clear which GPU's total applies.
    if let (Some(total), [ordinal]) = (capacity, ordinals.as_slice()) {
        model.apply(&Record {
            size: total,
            device: *ordinal,
            pid,
            kind: EventKind::Device as u16,
            api: Api::Consumer as u16,
            ..Record::default()
        });
    }
    for r in fragprobe_shared::live::resync_records_of(pid, 0, 0, 0, entries) {
        model.apply(&r);
    }
    model
        .devices()
        .iter()
        .filter_map(|d| model.device_arena(d.id()))
        .min_by_key(|a| a.largest_free)
}

#[cfg(test)]
mod tests {
    use super::*;
    use fragprobe_shared::live::LiveClass;

    fn e(key: u64, size: u64, class: LiveClass) -> LiveEntry {
        LiveEntry {
            key,
            class,
            device: 0,
            size,
            aux: 0,
            aux2: 0,
            seq: key,
        }
    }

    #[test]
    fn totals_count_memory_classes_only() {
        let v = [
            e(0x1000, 100, LiveClass::Device),
            e(0x2000, 50, LiveClass::Async),
            e(0x9000, 4096, LiveClass::Reservation),
        ];
        assert_eq!(totals(&v), (2, 150));
    }

    #[test]
    fn arena_matches_the_model_worked_example() {
        // The model documentation's example: A [0,100), C [300,400) of a 1000-byte device.
        let v = [
            e(0x1000, 100, LiveClass::Device),
            e(0x112c, 100, LiveClass::Device),
        ];
        let a = arena_of(7, &v, Some(1000)).unwrap();
        assert_eq!((a.total_free, a.largest_free), (800, 600));
        assert!((a.ratio() - 0.25).abs() < 1e-12);
        // Without a capacity the arena ends at the last allocation: one 200-byte hole.
        let a = arena_of(7, &v, None).unwrap();
        assert_eq!((a.total_free, a.largest_free), (200, 200));
        assert!(arena_of(7, &[], Some(1000)).is_none());
    }

    #[test]
    fn reads_a_ring_file() {
        let dir = std::env::temp_dir().join(format!("fp-live-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("4242.ring");
        let _ = std::fs::remove_file(&path);
        let cfg = fragprobe_shared::ring::RingConfig::from_env_values(Some(64), Some(64));
        let rf = RingFile::create(&path, &cfg, 4242).expect("create ring");
        assert!(rf.live().insert(0x1000, LiveClass::Device, 0, 100, 0, 0, 1));
        assert!(rf.live().insert(0x112c, LiveClass::Device, 0, 100, 0, 0, 2));
        let info = probe_info(path.clone(), Some(1000), None);
        assert_eq!((info.live_bytes, info.live_count), (Some(200), Some(2)));
        assert_eq!(info.largest_free, Some(600));
        // No device described yet: a uuid filters nothing.
        let info = probe_info(path.clone(), Some(1000), Some("GPU-b"));
        assert_eq!(info.live_bytes, Some(200));
        // Ordinal 0 is GPU-b, ordinal 1 GPU-a (CUDA_VISIBLE_DEVICES=1,0): each NVML device
        // gets its own objects.
        assert!(rf.live().insert(0x9000, LiveClass::Device, 1, 30, 0, 0, 3));
        for (o, u) in [(0, "GPU-b"), (1, "GPU-a")] {
            let mut buf = [0u8; 128];
            let mut m = fragprobe_shared::format::MetaWriter::new(
                &mut buf,
                fragprobe_shared::format::MetaKind::DeviceInfo,
            );
            m.field(b"ordinal", o.to_string().as_bytes())
                .field(b"uuid", u.as_bytes());
            let (len, _) = m.finish();
            rf.write_meta(&buf[..len]).unwrap();
        }
        let b = probe_info(path.clone(), None, Some("GPU-b"));
        assert_eq!((b.live_bytes, b.live_count), (Some(200), Some(2)));
        let a = probe_info(path.clone(), None, Some("GPU-a"));
        assert_eq!((a.live_bytes, a.live_count), (Some(30), Some(1)));
        let other = probe_info(path.clone(), None, Some("GPU-z"));
        assert_eq!(other.live_bytes, Some(0));
        let missing = probe_info(dir.join("1.ring"), None, None);
        assert_eq!(missing.live_bytes, None);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
