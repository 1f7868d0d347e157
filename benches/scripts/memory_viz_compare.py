#!/usr/bin/env python3
"""Whole-command timing: `fragprobe import SNAPSHOT` against PyTorch's own
`python -m torch.cuda._memory_viz stats|trace_plot SNAPSHOT`, alternated in one run.

Usage: PYTHON=/path/to/python-with-torch benches/scripts/memory_viz_compare.py \
           target/release/fragprobe SNAPSHOT [SNAPSHOT…] [--runs N]

Needs a Python with torch (the CPU wheel is enough); prints medians and ratios.
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time


def timed(cmd):
    t = time.perf_counter()
    subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - t


def main():
    args = sys.argv[1:]
    runs = 5
    if "--runs" in args:
        i = args.index("--runs")
        runs = int(args[i + 1])
        del args[i : i + 2]
    if len(args) < 2:
        sys.exit(__doc__)
    fragprobe, snaps = args[0], args[1:]
    py = os.environ.get("PYTHON", sys.executable)
    out = os.path.join(tempfile.mkdtemp(), "o.html")
    for snap in snaps:
        t = {"fragprobe import": [], "memory_viz stats": [], "memory_viz trace_plot": []}
        for _ in range(runs):
            t["fragprobe import"].append(timed([fragprobe, "import", snap]))
            t["memory_viz stats"].append(timed([py, "-m", "torch.cuda._memory_viz", "stats", snap]))
            t["memory_viz trace_plot"].append(
                timed([py, "-m", "torch.cuda._memory_viz", "trace_plot", snap, "-o", out])
            )
        med = {k: statistics.median(v) for k, v in t.items()}
        base = med["fragprobe import"]
        size = os.path.getsize(snap) / 1e6
        print(f"{os.path.basename(snap)} ({size:.1f} MB), median of {runs}:")
        for k, v in med.items():
            ratio = "" if k == "fragprobe import" else f"  ({v / base:.0f}x fragprobe)"
            print(f"  {k:<22} {v * 1e3:9.1f} ms{ratio}")


if __name__ == "__main__":
    main()
