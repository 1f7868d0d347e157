"""Predicted vs real: does `fragprobe simulate` foresee what PyTorch's caching allocator
does under other settings? For each workload, one run with PyTorch's defaults is recorded
with `--torch-snapshot`; `fragprobe simulate` replays that one snapshot under every
setting; then the workload really runs under each setting, and PyTorch's own counters
(torch.cuda.memory_stats at the end) and the probe's trace say what happened.

    python3 predict_vs_real.py FRAGPROBE PYTHON [--markdown]

FRAGPROBE is the fragprobe executable, PYTHON one that imports torch. Prints one JSON line
per (workload, setting): real and predicted peak reserved bytes, segments (cudaMalloc
segments; for expandable segments, pages mapped: the probe's cuMemMap calls), retries and
OOMs, and `simulate --verify` of that run's own snapshot (exact, allocations matched); with
--markdown, a table too. Everything runs on the simulated GPU.
"""
import glob
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TRAIN = os.path.join(HERE, "train.py")
WORKLOADS = {
    # the real-PyTorch demo: a fragmentation OOM under the defaults
    "demo (2 GiB)": ([os.path.join(ROOT, "viewer/src/cmd/demo_torch.py")], "1x2GiB", "DEMO "),
    # GPT training, sequence length varying step to step
    "gpt 4×512": ([TRAIN, "--steps", "8"], "1x24GiB", "STATS "),
    "gpt 6×768": ([TRAIN, "--steps", "8", "--width", "768", "--batch", "12", "--max-seq", "512", "--layers", "6"], "1x24GiB", "STATS "),
}
CONFS = [
    "",
    "expandable_segments:True",
    "max_split_size_mb:128",
    "roundup_power2_divisions:4",
    "expandable_segments:True,max_split_size_mb:128",
]


def run(fp, py, workload, conf, snapshot):
    args, gpu, tag = WORKLOADS[workload]
    d = tempfile.mkdtemp(prefix="fragprobe-pvr-")
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=conf, PYTORCH_ALLOC_CONF=conf,
               FRAGPROBE_SIM_STATE=os.path.join(d, "gpu.state"),
               TORCH_AUTOGRAD_SHUTDOWN_WAIT_LIMIT="0")
    trace = os.path.join(d, "run.fpt")
    cmd = [fp, "run", "-q", "--record", trace, "--simulated-gpu=" + gpu]
    cmd += ["--torch-snapshot"] if snapshot else []
    cmd += ["--", py] + args
    o = subprocess.run(cmd, env=env, capture_output=True, text=True)
    lines = [l[len(tag):] for l in o.stdout.splitlines() if l.startswith(tag)]
    if o.returncode != 0 or not lines:
        sys.exit("%s under %r failed (exit %d):\n%s%s" % (workload, conf, o.returncode, o.stdout, o.stderr))
    stats = json.loads(lines[-1])
    report = json.loads(subprocess.run([fp, "report", "--json", trace], capture_output=True, text=True, check=True).stdout)
    snaps = sorted(glob.glob(trace + ".torch/*-exit.pickle"))
    return stats, report, (snaps[0] if snaps else None)


def main():
    fp, py = sys.argv[1], sys.argv[2]
    rows = []
    for w in WORKLOADS:
        default = run(fp, py, w, "", True)  # the default run, with its snapshot
        snap = default[2]
        out = subprocess.run([fp, "simulate", snap, "--json"] + [a for c in CONFS[1:] for a in ("--alloc-conf", c)],
                             capture_output=True, text=True, check=True).stdout
        dev = json.loads(out)["devices"][0]
        for i, conf in enumerate(CONFS):
            stats, report, own = default if conf == "" else run(fp, py, w, conf, True)
            # and the simulator replays this run's own snapshot exactly (simulate --verify)
            v = json.loads(subprocess.run([fp, "simulate", "--verify", "--json", own], capture_output=True, text=True).stdout)
            p = dev["configurations"][i]
            c = p["counters"]
            expandable = "expandable_segments:True" in conf
            real_segments = report["events"]["by_kind"].get("mem_map", 0) if expandable else stats["segment.all.allocated"]
            row = {
                "workload": w,
                "conf": conf or "default",
                "capacity_from_oom": dev.get("capacity_from_oom", False),
                "real": [stats["reserved_bytes.all.peak"], real_segments, stats["num_alloc_retries"], stats["num_ooms"]],
                "predicted": [p["peak_reserved_bytes"], c["pages_mapped"] if expandable else c["cuda_mallocs"], c["alloc_retries"], c["ooms"]],
            }
            row["verify"] = [v["exact"], v["alloc_address_matches"], v["alloc_events"], v["segment_map_matches"], v["segment_maps"]]
            rows.append(row)
            print(json.dumps(row), flush=True)
    if "--markdown" in sys.argv:
        mib = lambda b: "%.1f" % (b / 2**20)
        print("| workload | setting | peak reserved MiB | segments (pages mapped) | retries | OOMs | `simulate --verify` of the run's own snapshot |")
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            a, b = r["real"], r["predicted"]
            cell = lambda x, y, f=str: f(x) if x == y else "**%s / %s**" % (f(x), f(y))
            v = r["verify"]
            verify = "exact, %d/%d allocations" % (v[1], v[2]) + (", %d/%d maps" % (v[3], v[4]) if v[4] else "")
            if not v[0]:
                verify = "**not exact**, " + verify[len("exact, "):]
            print("| %s | `%s` | %s | %s | %s | %s | %s |" % (r["workload"], r["conf"], cell(a[0], b[0], mib), cell(a[1], b[1]), cell(a[2], b[2]), cell(a[3], b[3]), verify))


if __name__ == "__main__":
    main()
