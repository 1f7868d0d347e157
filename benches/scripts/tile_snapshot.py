#!/usr/bin/env python3
"""A large, realistic snapshot: a real snapshot's trace repeated N times.

    python3 benches/scripts/tile_snapshot.py SNAPSHOT N OUT [--no-frames]

A training or inference loop returns to the same allocator state at the end of each
iteration, so a real trace that does (allocs == frees, no segment changes — check with
`fragprobe simulate --verify OUT`, which must stay exact) can be repeated: iteration k is
the recorded trace with `time_us` shifted by k spans. Frame dicts stay shared and each
repetition gets its own frame lists, as in PyTorch's own dumps. The input is read with a
restricted unpickler that refuses every global. `--no-frames` drops every trace entry's
stack, as `_record_memory_history(context=None)` records it: the same history in a
fraction of the bytes.
"""
import pickle
import sys


class Plain(pickle.Unpickler):
    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refusing global {module}.{name}")


def main():
    args = [a for a in sys.argv[1:] if a != "--no-frames"]
    no_frames = len(args) < len(sys.argv) - 1
    src, n, out = args[0], int(args[1]), args[2]
    with open(src, "rb") as f:
        snap = Plain(f).load()
    traces = []
    for trace in snap["device_traces"]:
        times = [e["time_us"] for e in trace if "time_us" in e]
        span = (max(times) - min(times) + 1) if times else 0
        tiled = []
        for k in range(n):
            for e in trace:
                e = dict(e)
                if "time_us" in e:
                    e["time_us"] += k * span
                if "frames" in e:
                    e["frames"] = [] if no_frames else list(e["frames"])
                tiled.append(e)
        traces.append(tiled)
    snap["device_traces"] = traces
    with open(out, "wb") as f:
        pickle.dump(snap, f, protocol=4)
    print(sum(len(t) for t in traces), "entries")


if __name__ == "__main__":
    main()
