//! Damaged, cut and foreign files.

use fragprobe_shared::format::{MetaKind, MetaWriter, Record, FORMAT_VERSION, RECORD_SIZE};
use fragprobe_shared::trace::{Trace, TraceError, TraceTail, TraceWriter};

fn rec(i: u64) -> Record {
    Record {
        seq: i,
        addr: i * 64,
        size: i,
        kind: 1,
        pid: 9,
        ..Record::default()
    }
}

/// A small trace with every chunk kind and several events chunks.
fn sample() -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = TraceWriter::with_created(&mut out, 7).unwrap();
    w.set_chunk_records(3);
    let mut buf = [0u8; 64];
    let mut m = MetaWriter::new(&mut buf, MetaKind::RunInfo);
    m.field(b"label", b"x");
    let (n, _) = m.finish();
    w.write_run_info(&buf[..n]).unwrap();
    w.write_records(&(0..7).map(rec).collect::<Vec<_>>())
        .unwrap();
    w.write_meta(9, 1, &buf[..n]).unwrap();
    w.write_checkpoint(7, b"abc").unwrap();
    w.write_records(&(7..9).map(rec).collect::<Vec<_>>())
        .unwrap();
    w.finish().unwrap();
    out
}

/// Independent walk over the chunk headers of a complete file: how many whole records a
/// reader must find in its first `cut` bytes.
fn whole_records_within(full: &[u8], cut: usize) -> u64 {
    let mut off = 64;
    let mut n = 0u64;
    while off + 16 <= full.len() {
        if cut < off + 16 {
            break;
        }
        let kind = u16::from_le_bytes([full[off + 4], full[off + 5]]);
        let plen = u32::from_le_bytes(full[off + 8..off + 12].try_into().unwrap()) as usize;
        let payload = off + 16;
        if kind == 1 {
            n += (plen.min(cut - payload) / RECORD_SIZE) as u64;
        }
        if cut < payload + plen {
            break;
        }
        off = payload + plen.div_ceil(8) * 8;
    }
    n
}

fn write(dir: &tempfile::TempDir, name: &str, bytes: &[u8]) -> std::path::PathBuf {
    let p = dir.path().join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn cut_at_every_byte_keeps_whole_records_and_warns() {
    let full = sample();
    let dir = tempfile::tempdir().unwrap();
    let all: Vec<Record> = (0..9).map(rec).collect();
    assert_eq!(whole_records_within(&full, full.len()), 9);
    for cut in 0..=full.len() {
        let p = write(&dir, "cut.fpt", &full[..cut]);
        match Trace::open(&p) {
            Err(TraceError::Empty { .. }) => assert!(cut < 64, "cut {cut}"),
            Err(e) => panic!("cut {cut}: {e}"),
            Ok(t) => {
                assert!(cut >= 64, "cut {cut}");
                let want = whole_records_within(&full, cut);
                assert_eq!(t.len(), want, "cut {cut}");
                assert!(
                    t.records().eq(all[..want as usize].iter().copied()),
                    "cut {cut}"
                );
                if cut == full.len() {
                    assert!(t.complete() && t.warnings().is_empty());
                } else {
                    assert!(!t.complete(), "cut {cut}");
                    assert!(!t.warnings().is_empty(), "cut {cut}: no warning");
                    let tr = t.truncated().expect("truncation reported");
                    assert!(tr.valid_up_to <= cut as u64, "cut {cut}: {tr:?}");
                }
            }
        }
    }
}

#[test]
fn cut_inside_an_events_chunk_says_how_much_is_missing() {
    let mut out = Vec::new();
    let mut w = TraceWriter::with_created(&mut out, 7).unwrap();
    w.write_records(&(0..100).map(rec).collect::<Vec<_>>())
        .unwrap();
    w.finish().unwrap();
    // Header 64 + chunk header 16 + 100 records; cut 30 records and 5 bytes before the end
    // of the records.
    let cut = 64 + 16 + 70 * RECORD_SIZE - 5;
    let dir = tempfile::tempdir().unwrap();
    let t = Trace::open(write(&dir, "c.fpt", &out[..cut])).unwrap();
    assert_eq!(t.len(), 69);
    let tr = t.truncated().unwrap();
    assert_eq!(tr.missing_bytes_estimate, (30 * RECORD_SIZE + 5) as u64);
    assert_eq!(tr.valid_up_to, (64 + 16 + 69 * RECORD_SIZE) as u64);
    let w = &t.warnings()[0];
    assert!(
        w.contains("c.fpt") && w.contains("cut short") && w.contains("2405 bytes"),
        "{w}"
    );
}

#[test]
fn zero_filled_tail_is_a_cut() {
    let mut full = sample();
    full.extend(std::iter::repeat_n(0u8, 4096));
    let dir = tempfile::tempdir().unwrap();
    let t = Trace::open(write(&dir, "z.fpt", &full)).unwrap();
    assert_eq!(t.len(), 9);
    assert!(
        t.warnings().iter().any(|w| w.contains("zeros")),
        "{:?}",
        t.warnings()
    );
}

#[test]
fn bad_checksum_stops_there_with_the_offset() {
    let mut full = sample();
    // The second events chunk: after header, run-info chunk, first events chunk.
    let runinfo_len = {
        let plen = u32::from_le_bytes(full[72..76].try_into().unwrap()) as usize;
        16 + plen.div_ceil(8) * 8
    };
    let second = 64 + runinfo_len + 16 + 3 * RECORD_SIZE;
    full[second + 16 + 10] ^= 0xff;
    let dir = tempfile::tempdir().unwrap();
    let p = write(&dir, "crc.fpt", &full);
    let t = Trace::open(&p).unwrap();
    assert_eq!(t.len(), 3, "records before the damaged chunk are kept");
    assert_eq!(t.corrupt_at(), Some(second as u64));
    let w = &t.warnings()[0];
    assert!(
        w.contains("checksum") && w.contains(&format!("offset {second}")),
        "{w}"
    );
    assert!(!t.complete());
    // Unverified opening does not look at payloads, so it reads through.
    assert_eq!(Trace::open_unverified(&p).unwrap().len(), 9);
    // A tail reader reports the damage as an error.
    let e = TraceTail::open(&p).unwrap().poll().unwrap_err();
    assert!(
        matches!(e, TraceError::Corrupt { offset, .. } if offset == second as u64),
        "{e}"
    );

    // A damaged chunk header.
    let mut full = sample();
    full[64] = b'X';
    let t = Trace::open(write(&dir, "hdr.fpt", &full)).unwrap();
    assert_eq!(t.len(), 0);
    assert!(
        t.warnings()[0].contains("no chunk header at offset 64"),
        "{:?}",
        t.warnings()
    );
}

#[test]
fn not_a_trace_and_empty_files() {
    let dir = tempfile::tempdir().unwrap();
    let p = write(
        &dir,
        "photo.png",
        b"\x89PNG\r\n\x1a\n and then a lot of image data........",
    );
    let e = Trace::open(&p).unwrap_err();
    assert!(
        matches!(&e, TraceError::NotATrace { found_magic, .. } if found_magic.starts_with(b"\x89PNG"))
    );
    let msg = e.to_string();
    assert!(
        msg.contains("photo.png") && msg.contains("not a fragprobe trace"),
        "{msg}"
    );
    assert!(!msg.contains('\n'));

    let p = write(&dir, "short.txt", b"hi");
    assert!(matches!(Trace::open(&p), Err(TraceError::NotATrace { .. })));

    let p = write(&dir, "empty.fpt", b"");
    let e = Trace::open(&p).unwrap_err();
    assert!(matches!(e, TraceError::Empty { .. }));
    assert!(e.to_string().contains("empty.fpt"));

    let e = Trace::open(dir.path().join("missing.fpt")).unwrap_err();
    assert!(matches!(e, TraceError::Io { .. }));
    assert!(e.to_string().contains("missing.fpt"));

    // A tail on a file that turns out not to be a trace errors even before 64 bytes.
    let p = write(&dir, "notes.txt", b"some notes");
    assert!(matches!(
        TraceTail::open(&p).unwrap().poll(),
        Err(TraceError::NotATrace { .. })
    ));
}

#[test]
fn other_versions_are_refused_naming_both() {
    let mut full = sample();
    full[16..20].copy_from_slice(&99u32.to_le_bytes());
    let dir = tempfile::tempdir().unwrap();
    let p = write(&dir, "future.fpt", &full);
    let e = Trace::open(&p).unwrap_err();
    let TraceError::Version { err, .. } = &e else {
        panic!("{e}")
    };
    assert_eq!((err.found, err.supported), (99, FORMAT_VERSION));
    let msg = e.to_string();
    assert!(
        msg.contains("future.fpt") && msg.contains("version 99"),
        "{msg}"
    );
    assert!(
        msg.contains(&format!("version {FORMAT_VERSION}")) && msg.contains("upgrade"),
        "{msg}"
    );
    assert!(matches!(
        TraceTail::open(&p).unwrap().poll(),
        Err(TraceError::Version { .. })
    ));
}

#[test]
fn unknown_chunk_kinds_are_skipped_with_a_warning() {
    let full = sample();
    // Splice a chunk of kind 77 (with a valid checksum) right after the header.
    let payload = b"from the future!";
    let mut chunk = Vec::new();
    chunk.extend_from_slice(b"FPCH");
    chunk.extend_from_slice(&77u16.to_le_bytes());
    chunk.extend_from_slice(&0u16.to_le_bytes());
    chunk.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    chunk.extend_from_slice(&crc32(payload).to_le_bytes());
    chunk.extend_from_slice(payload);
    let mut spliced = full[..64].to_vec();
    spliced.extend_from_slice(&chunk);
    spliced.extend_from_slice(&full[64..]);
    let dir = tempfile::tempdir().unwrap();
    let t = Trace::open(write(&dir, "u.fpt", &spliced)).unwrap();
    assert_eq!(t.len(), 9);
    assert!(t
        .warnings()
        .iter()
        .any(|w| w.contains("unknown chunk kind 77")));
}

/// Bitwise CRC-32 (IEEE), independent of the implementation under test.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}
