//! Trace files: writing, opening (with and without checksums) and reading records, at 1 M
//! and 10 M events (80 MB and 800 MB; the 10 M file is written once to a temporary
//! directory and opened from the page cache).

use std::hint::black_box;
use std::path::Path;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use fragprobe_shared::format::Record;
use fragprobe_shared::trace::{Trace, TraceWriter};

fn rec(i: u64) -> Record {
    Record {
        seq: i,
        kind: 1,
        addr: i * 256,
        size: 256,
        ts_ns: i,
        pid: 1,
        ..Record::default()
    }
}

fn write_file(path: &Path, n: u64) {
    let mut w = TraceWriter::create(path).expect("trace file");
    let mut batch = Vec::with_capacity(4096);
    let mut i = 0;
    while i < n {
        batch.clear();
        batch.extend((i..(i + 4096).min(n)).map(rec));
        w.write_records(&batch).expect("write");
        i += batch.len() as u64;
    }
    w.finish().expect("finish");
}

fn write(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("w.fpt");
    let recs: Vec<Record> = (0..1_000_000).map(rec).collect();
    let mut g = c.benchmark_group("trace/write");
    g.throughput(Throughput::Elements(recs.len() as u64));
    g.sample_size(10);
    g.bench_function("1M_records", |b| {
        b.iter(|| {
            let mut w = TraceWriter::create(&path).expect("trace file");
            for chunk in recs.chunks(4096) {
                w.write_records(chunk).expect("write");
            }
            w.finish().expect("finish")
        })
    });
    g.finish();
}

fn open_and_read(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    for (label, n) in [("1M", 1_000_000u64), ("10M", 10_000_000)] {
        let path = dir.path().join(format!("{label}.fpt"));
        write_file(&path, n);
        let mut g = c.benchmark_group(format!("trace/{label}"));
        g.sample_size(10);
        g.bench_function("open_verified", |b| {
            b.iter(|| black_box(Trace::open(&path).expect("open").len()))
        });
        g.bench_function("open_unverified", |b| {
            b.iter(|| black_box(Trace::open_unverified(&path).expect("open").len()))
        });
        let t = Trace::open_unverified(&path).expect("open");
        g.throughput(Throughput::Elements(n));
        g.bench_function("read_all_records", |b| {
            b.iter(|| {
                let mut sum = 0u64;
                for chunk in t.record_chunks() {
                    for r in chunk {
                        sum = sum.wrapping_add(r.size);
                    }
                }
                black_box(sum)
            })
        });
        g.finish();
        drop(t);
        std::fs::remove_file(&path).ok();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3));
    targets = write, open_and_read
}
criterion_main!(benches);
