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

/// The `crate::…` modules a viewer module's non-test code names.
fn imports_of(module: &str) -> std::collections::BTreeSet<String> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../viewer/src");
    let mut files = Vec::new();
    let dir = root.join(module);
    if dir.is_dir() {
        let mut stack = vec![dir];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "rs") {
                    files.push(p);
                }
            }
        }
    } else {
        files.push(root.join(format!("{module}.rs")));
    }
    let mut found = std::collections::BTreeSet::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        // Unit tests may reach anywhere; what ships may not.
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        for (i, _) in code.match_indices("crate::") {
            let name: String = code[i + 7..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if name != module {
                found.insert(name);
            }
        }
    }
    found
}

#[test]
fn the_viewers_modules_import_one_way() {
    // cmd is the top (it wires everything); gui draws what pipeline builds; pipeline and
    // record feed the model; report, torchhook, nvml and load know nothing above them.
    let rules: [(&str, &[&str]); 7] = [
        ("gui", &["cmd"]),
        ("pipeline", &["cmd", "gui"]),
        ("record", &["cmd", "gui"]),
        ("report", &["cmd", "gui", "pipeline", "record"]),
        ("torchhook", &["cmd", "gui", "pipeline", "record", "report"]),
        ("nvml", &["cmd", "gui", "pipeline", "record", "report"]),
        ("load", &["cmd", "gui", "pipeline", "record", "report"]),
    ];
    for (module, forbidden) in rules {
        let imports = imports_of(module);
        for f in forbidden {
            assert!(
                !imports.contains(*f),
                "viewer/src/{module} imports crate::{f} (it imports {imports:?})"
            );
        }
    }
}
