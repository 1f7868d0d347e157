//! The probe's crate graph holds no consumer-side code: `libfragprobe.so` links
//! `fragprobe-wire` (which has no dependencies) plus `libc` and `ctor`, and nothing else
//! of ours. Checked with `cargo tree` as a build of the probe alone resolves it, because
//! `cargo test --workspace` unifies features and would hide a leak.

use std::process::Command;

/// The packages in the normal-dependency graph of `package`, one name each.
fn graph(package: &str) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "tree",
            "--offline",
            "-e",
            "normal",
            "--prefix",
            "none",
            "-p",
            package,
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run cargo tree");
    assert!(
        out.status.success(),
        "cargo tree -p {package} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut names: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn the_probe_links_only_the_wire_crate_of_ours() {
    let names = graph("fragprobe-probe");
    let ours: Vec<&String> = names
        .iter()
        .filter(|n| n.starts_with("fragprobe"))
        .collect();
    assert_eq!(
        ours,
        ["fragprobe-probe", "fragprobe-wire"],
        "graph: {names:?}"
    );
    for consumer_side in [
        "memmap2",
        "crc32fast",
        "serde",
        "serde_json",
        "egui",
        "eframe",
    ] {
        assert!(
            !names.iter().any(|n| n == consumer_side),
            "the probe's crate graph pulls in {consumer_side}: {names:?}"
        );
    }
    // What it does link is small and known; a new dependency is a decision, not an accident.
    for n in &names {
        assert!(
            matches!(
                n.as_str(),
                "fragprobe-probe"
                    | "fragprobe-wire"
                    | "libc"
                    | "ctor"
                    | "link-section"
                    | "linktime-proc-macro"
            ),
            "the probe gained a dependency: {n} (graph: {names:?})"
        );
    }
}

#[test]
fn the_wire_crate_has_no_dependencies() {
    assert_eq!(graph("fragprobe-wire"), ["fragprobe-wire"]);
}
