//! The scenario programs on the simulated GPU: placement, fragmentation, pools, VMM,
//! threads, fork/exec/exit, fault injection, and sharing a device between processes.

use fragprobe_tests::sim::{
    parse_lines, sim_command, spawn_held, state_of, ScenarioLine, ENV_CONTEXT_OVERHEAD,
    ENV_FAIL_ABOVE, ENV_FAIL_NTH, ENV_GPU, ENV_STATE,
};
use std::collections::HashSet;
use std::process::Command;

const MIB: u64 = 1 << 20;
const OVERHEAD: u64 = 300 * MIB;
const ARENA0: u64 = 0x7000_0000_0000;

/// Runs a command to completion; returns (success, stdout, stderr).
fn run(mut cmd: Command) -> (bool, String, String) {
    let out = cmd.output().expect("run scenario");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs a scenario that must succeed and returns its FPSCN lines and full output.
fn scenario(cmd: Command) -> (Vec<ScenarioLine>, String) {
    let (ok, out, err) = run(cmd);
    assert!(ok, "scenario failed:\n{out}\n{err}");
    (parse_lines(&out), out)
}

fn meminfo(lines: &[ScenarioLine]) -> Vec<(u64, u64)> {
    lines
        .iter()
        .filter(|l| l.op == "meminfo")
        .map(|l| (l.size, l.aux))
        .collect()
}

#[test]
fn door_link_placement_is_deterministic_first_fit() {
    let (a, _) = scenario(sim_command("door_link", Some("1x4GiB")));
    let (b, _) = scenario(sim_command("door_link", Some("1x4GiB")));
    let addrs = |v: &[ScenarioLine]| {
        v.iter()
            .map(|l| (l.op.clone(), l.api.clone(), l.addr, l.res))
            .collect::<Vec<_>>()
    };
    assert_eq!(addrs(&a), addrs(&b));
    let allocs: Vec<&ScenarioLine> = a.iter().filter(|l| l.op == "alloc").collect();
    // 1 MiB at the arena start, then the pitched 1024 x 64 block right after it
    assert_eq!(
        (allocs[0].api.as_str(), allocs[0].addr),
        ("cuMemAlloc_v2", ARENA0)
    );
    assert_eq!(
        (allocs[1].api.as_str(), allocs[1].addr, allocs[1].aux),
        ("cuMemAllocPitch_v2", ARENA0 + MIB, 1024)
    );
    // the legacy 32-bit entry points get addresses below 4 GiB
    assert_eq!(
        (allocs[2].api.as_str(), allocs[2].addr),
        ("cuMemAlloc", 0x4000_0000)
    );
    assert_eq!(allocs[3].api, "cuMemAllocPitch");
    assert!(allocs[3].addr < 1 << 32);
    // the deliberate double free fails with CUDA_ERROR_INVALID_VALUE, all else succeeds
    let failed: Vec<&ScenarioLine> = a.iter().filter(|l| l.res != 0).collect();
    assert_eq!(failed.len(), 1);
    assert_eq!((failed[0].op.as_str(), failed[0].res), ("free", 1));
    let m = meminfo(&a);
    assert_eq!(m[0], ((4 << 30) - OVERHEAD, 4 << 30));
    assert_eq!(m.last().unwrap().0, m[0].0, "everything freed");
}

#[test]
fn frag_oom_fails_while_total_free_suffices() {
    let (lines, _) = scenario(sim_command("frag_oom", Some("1x4GiB")));
    let m = meminfo(&lines);
    let free_before = m[1].0;
    let big = lines
        .iter()
        .rfind(|l| l.op == "alloc" && l.size > 128 * MIB)
        .expect("the large request");
    assert!(
        big.size <= free_before,
        "request {} > free {}",
        big.size,
        free_before
    );
    assert!(big.size >= 4 * 128 * MIB);
    assert_eq!(big.res, 2, "CUDA_ERROR_OUT_OF_MEMORY from fragmentation");
}

#[test]
fn threads16_counts_and_lines() {
    let mut quiet = sim_command("threads16", None);
    quiet.args(["200", "--quiet"]);
    let (_, out) = scenario(quiet);
    assert_eq!(out.trim(), "FPSCN-SUMMARY allocs=3200 frees=3200");

    let mut loud = sim_command("threads16", None);
    loud.arg("25");
    let (lines, out) = scenario(loud);
    assert_eq!(lines.len(), 16 * 25 * 2);
    assert!(lines.iter().all(|l| l.res == 0));
    let tids: HashSet<u64> = lines.iter().map(|l| l.tid).collect();
    assert_eq!(tids.len(), 16);
    assert!(out.contains("FPSCN-SUMMARY allocs=400 frees=400"));
}

#[test]
fn fork_parent_and_child_allocate_and_late_child_fails() {
    let (lines, _) = scenario(sim_command("fork", Some("1x4GiB")));
    let pids: HashSet<u32> = lines.iter().map(|l| l.pid).collect();
    assert_eq!(pids.len(), 3, "{lines:?}");
    let failed: Vec<&ScenarioLine> = lines.iter().filter(|l| l.res != 0).collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].res, 3, "CUDA_ERROR_NOT_INITIALIZED after fork");
    assert_eq!(
        lines
            .iter()
            .filter(|l| l.op == "alloc" && l.res == 0)
            .count(),
        3
    );
}

#[test]
fn exec_returns_the_old_image_memory() {
    let (lines, _) = scenario(sim_command("exec", Some("1x4GiB")));
    let pids: HashSet<u32> = lines.iter().map(|l| l.pid).collect();
    assert_eq!(pids.len(), 1, "exec keeps the pid");
    let m = meminfo(&lines);
    assert_eq!(m[0].0, (4 << 30) - OVERHEAD - 7 * MIB, "before exec");
    assert_eq!(
        m[1].0,
        (4 << 30) - OVERHEAD,
        "after exec: only the new context"
    );
}

/// Starts `leak --hold`, waits until it holds its memory, returns the child and its lines.
fn hold(spec: &str) -> (std::process::Child, Vec<ScenarioLine>, std::path::PathBuf) {
    let cmd = sim_command("leak", Some(spec));
    let state = state_of(&cmd).unwrap();
    let (child, text) = spawn_held(cmd);
    (child, parse_lines(&text), state)
}

#[test]
fn processes_share_physical_memory_and_exit_returns_it() {
    let (mut holder, _, state) = hold("1x1GiB");
    let held = 82 * MIB + OVERHEAD;
    let mut other = sim_command("door_dlsym", Some("1x1GiB"));
    other.env(ENV_STATE, &state);
    let (lines, _) = scenario(other);
    assert_eq!(meminfo(&lines)[0].0, (1 << 30) - held - OVERHEAD);

    // a different device spec cannot join while the holder lives
    let mut conflict = sim_command("door_dlsym", Some("2x1GiB"));
    conflict.env(ENV_STATE, &state);
    let (ok, _, err) = run(conflict);
    assert!(!ok);
    assert!(err.contains("FRAGPROBE_SIM_GPU"), "{err}");
    // without a spec the holder's devices are adopted
    let mut adopt = sim_command("door_dlsym", None);
    adopt.env(ENV_STATE, &state).env_remove(ENV_GPU);
    let (lines, _) = scenario(adopt);
    assert_eq!(meminfo(&lines)[0].1, 1 << 30);

    drop(holder.stdin.take());
    assert!(holder.wait().unwrap().success());
    let mut after = sim_command("door_dlsym", Some("1x1GiB"));
    after.env(ENV_STATE, &state);
    let (lines, _) = scenario(after);
    assert_eq!(
        meminfo(&lines)[0].0,
        (1 << 30) - OVERHEAD,
        "leaked memory returned at exit"
    );
}

#[test]
fn hard_exit_memory_is_reclaimed_by_the_next_process() {
    let mut leak = sim_command("leak", Some("1x1GiB"));
    let state = state_of(&leak).unwrap();
    leak.arg("--hard");
    scenario(leak);
    let mut after = sim_command("door_dlsym", Some("1x1GiB"));
    after.env(ENV_STATE, &state);
    let (lines, _) = scenario(after);
    assert_eq!(meminfo(&lines)[0].0, (1 << 30) - OVERHEAD);
}

#[test]
fn pools_keep_memory_until_trim_or_threshold() {
    let (lines, out) = scenario(sim_command("pools", Some("1x4GiB")));
    assert!(lines.iter().all(|l| l.res == 0), "{out}");
    let pool: Vec<(String, Vec<u64>)> = out
        .lines()
        .filter_map(|l| l.strip_prefix("FPSCN-POOL pool="))
        .map(|l| {
            let mut f = l.split_whitespace();
            let name = f.next().unwrap().to_string();
            let vals = f
                .map(|kv| kv.split_once('=').unwrap().1.parse().unwrap())
                .collect();
            (name, vals)
        })
        .collect();
    // [reserved, reserved_high, used, used_high]
    assert_eq!(
        pool[0],
        (
            "default".into(),
            vec![4 * MIB, 4 * MIB, 3 * MIB + 100352, 3 * MIB + 100352]
        )
    );
    assert_eq!(
        pool[1],
        ("created".into(), vec![6 * MIB, 6 * MIB, 6 * MIB, 6 * MIB])
    );
    // after freeing and synchronising: default pool (threshold max) keeps, created releases
    assert_eq!(pool[2].1, vec![4 * MIB, 4 * MIB, 0, 3 * MIB + 100352]);
    assert_eq!(pool[3].1, vec![0, 6 * MIB, 0, 6 * MIB]);
    assert_eq!(pool[4].1[0], 0, "trimmed");
    let m = meminfo(&lines);
    let base = (4 << 30) - OVERHEAD;
    assert_eq!(
        m.iter().map(|x| base - x.0).collect::<Vec<_>>(),
        vec![0, 10 * MIB, 4 * MIB, 0]
    );
}

#[test]
fn expandable_segments_pages_come_and_go() {
    let mut cmd = sim_command("expandable", Some("1x4GiB"));
    cmd.arg("12");
    let (lines, _) = scenario(cmd);
    assert!(lines.iter().all(|l| l.res == 0));
    let reserve = lines.iter().find(|l| l.op == "reserve").unwrap();
    assert_eq!(reserve.size, (4 << 30) + (4 << 30) / 8);
    assert_eq!(lines.iter().filter(|l| l.op == "map").count(), 12);
    let maps: Vec<&ScenarioLine> = lines.iter().filter(|l| l.op == "map").collect();
    for (i, m) in maps.iter().enumerate() {
        assert_eq!(
            m.addr,
            reserve.addr + i as u64 * 20 * MIB,
            "pages are contiguous"
        );
    }
    let m = meminfo(&lines);
    assert_eq!(m[0].0 - m[1].0, 12 * 20 * MIB);
    assert_eq!(m[2].0, m[0].0);
}

#[test]
fn llama_release_keeps_memory_until_unmap() {
    let (lines, _) = scenario(sim_command("llama_release", Some("1x4GiB")));
    assert!(lines.iter().all(|l| l.res == 0));
    assert_eq!(lines.iter().filter(|l| l.op == "release").count(), 6);
    let m = meminfo(&lines);
    assert_eq!(
        m[0].0 - m[1].0,
        6 * 32 * MIB,
        "released handles still hold memory while mapped"
    );
    assert_eq!(m[2].0, m[0].0, "unmapping returns it");
}

#[test]
fn getproc_and_runtime_doors_work() {
    let (lines, _) = scenario(sim_command("door_getproc", Some("1x4GiB")));
    assert!(lines.iter().all(|l| l.res == 0));
    let apis: HashSet<&str> = lines.iter().map(|l| l.api.as_str()).collect();
    for a in [
        "cuMemAlloc_v2",
        "cuMemAllocPitch_v2",
        "cuMemAllocAsync_ptsz",
        "cuMemFreeAsync_ptsz",
        "cuMemAllocManaged",
    ] {
        assert!(apis.contains(a), "{a}");
    }
    let (lines, _) = scenario(sim_command("door_runtime", Some("1x4GiB")));
    let failed: Vec<&ScenarioLine> = lines.iter().filter(|l| l.res != 0).collect();
    assert_eq!(
        failed.len(),
        1,
        "only the deliberate huge cudaMalloc fails: {failed:?}"
    );
    assert_eq!((failed[0].api.as_str(), failed[0].res), ("cudaMalloc", 2));
    let m = meminfo(&lines);
    assert_eq!(m[0], m[1], "all memory returned");
}

#[test]
fn torch_caching_flushes_and_retries_on_oom() {
    let (lines, out) = scenario(sim_command("torch_caching", Some("1x1GiB")));
    let first_oom = lines
        .iter()
        .position(|l| l.res == 2)
        .expect("an out-of-memory");
    let after = &lines[first_oom + 1..];
    let flushed = after.iter().take_while(|l| l.op == "free").count();
    assert!(
        flushed >= 16,
        "the cache flush frees the small segments: {out}"
    );
    let retry = &after[flushed];
    assert_eq!(
        (retry.op.as_str(), retry.size, retry.res),
        ("alloc", 20 * MIB, 0),
        "retry succeeds"
    );
    assert!(out.contains("FPSCN-INFO large_tensors="));
}

#[test]
fn fault_injection_and_overhead_settings() {
    let mut nth = sim_command("door_link", Some("1x4GiB"));
    nth.env(ENV_FAIL_NTH, "2");
    let (lines, _) = scenario(nth);
    let allocs: Vec<&ScenarioLine> = lines
        .iter()
        .filter(|l| l.op == "alloc" || l.op == "managed")
        .collect();
    assert_eq!(
        allocs.iter().map(|l| l.res).collect::<Vec<_>>(),
        vec![0, 2, 0, 0, 0]
    );

    let mut above = sim_command("door_link", Some("1x4GiB"));
    above.env(ENV_FAIL_ABOVE, "4096");
    let (lines, _) = scenario(above);
    // pitched allocations print width x height but ask the driver for pitch x height
    let res: Vec<(u64, i32)> = lines
        .iter()
        .filter(|l| l.op == "alloc" && !l.api.contains("Pitch"))
        .map(|l| (l.size, l.res))
        .collect();
    assert_eq!(res, vec![(MIB, 2), (4096, 0)]);
    assert!(
        res.iter().all(|&(size, r)| (size > 4096) == (r == 2)),
        "{res:?}"
    );

    let mut no_overhead = sim_command("door_link", Some("1x4GiB"));
    no_overhead.env(ENV_CONTEXT_OVERHEAD, "0");
    let (lines, _) = scenario(no_overhead);
    assert_eq!(meminfo(&lines)[0].0, 4 << 30);

    let mut bad = sim_command("door_link", Some("1x4GiB"));
    bad.env(ENV_CONTEXT_OVERHEAD, "lots");
    let (ok, _, err) = run(bad);
    assert!(
        !ok && err.contains("FRAGPROBE_SIM_CONTEXT_OVERHEAD"),
        "{err}"
    );
}
