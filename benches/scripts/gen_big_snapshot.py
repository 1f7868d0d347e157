#!/usr/bin/env python3
# A large, self-consistent snapshot: N tensors in a 64-slot window, PyTorch-like entries.
import pickle, sys, random
n = int(sys.argv[1]); out = sys.argv[2]
random.seed(1)
frames = [{"filename": f"/src/model/layer{i}.py", "line": 10 + i, "name": f"forward{i}"} for i in range(32)]
trace = []; live = {}; t = 1_000_000; base = 0x7f0000000000; nxt = base
for i in range(n):
    size = random.choice([512, 4096, 1 << 20, 3 << 20, 24 << 20])
    seg = max(2 << 20, (size + (2 << 20) - 1) // (2 << 20) * (2 << 20))
    addr = nxt; nxt += seg
    st = frames[i % 32: i % 32 + 6]
    trace.append({"action": "segment_alloc", "addr": addr, "size": seg, "stream": 0, "time_us": t, "frames": st})
    trace.append({"action": "alloc", "addr": addr, "size": size, "stream": 0, "time_us": t + 1, "frames": st})
    live[addr] = (size, seg, st); t += 3
    if len(live) > 64:
        a = random.choice(list(live)); s, sg, st2 = live.pop(a)
        for act, sz in (("free_requested", s), ("free_completed", s), ("segment_free", sg)):
            trace.append({"action": act, "addr": a, "size": sz, "stream": 0, "time_us": t, "frames": st2}); t += 1
segments = []
for a in sorted(live):
    s, sg, st = live[a]
    r = (s + 511) // 512 * 512
    blocks = [{"address": a, "size": r, "requested_size": s, "state": "active_allocated", "frames": st}]
    if sg > r:
        blocks.append({"address": a + r, "size": sg - r, "requested_size": 0, "state": "inactive", "frames": []})
    segments.append({"device": 0, "address": a, "total_size": sg, "allocated_size": r, "active_size": r,
                     "requested_size": s, "stream": 0, "segment_type": "large", "segment_pool_id": (0, 0),
                     "is_expandable": False, "frames": st, "blocks": blocks})
with open(out, "wb") as f:
    pickle.dump({"segments": segments, "device_traces": [trace],
                 "allocator_settings": {"PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
                                        "garbage_collection_threshold": 0.0, "expandable_segments": False,
                                        "roundup_power2_divisions": [1] * 16}}, f, protocol=4)
print(len(trace), "entries")
