"""fragprobe demo --torch: a short real PyTorch program that runs out of memory from
fragmentation under the default caching allocator, and fits with expandable_segments:True.

The allocation pattern of two training steps whose sequence length changes, on a small
device (only plain tensors: the pattern is the point, not the arithmetic):

1. step 1's activations, 20 MiB each, fill 60 % of the free memory; its backward pass
   frees them all, and PyTorch keeps the 20 MiB segments cached;
2. step 2's shorter sequences make 12 MiB activations that stay alive; the caching
   allocator carves each out of one cached 20 MiB segment, leaving an 8 MiB hole in every
   segment;
3. then one buffer of the device's free memory plus half the holes is asked for.

Under the default allocator no hole is large enough, and no segment can be given back to
the driver (each holds a live activation), so the request fails although more than enough
memory is free in total: fragmentation. With expandable_segments:True the activations sit
side by side in one segment that grows at its end, the free space is one piece, and the
request fits.

fragprobe writes this file and runs it; it prints one line `DEMO {json}` with what it asked
for and PyTorch's own counters (torch.cuda.memory_stats), and exits 0 either way.
"""
import json

import torch

MiB = 1 << 20

torch.zeros(1, device="cuda")  # the context first, so that free memory is measured after it
free0, total = torch.cuda.mem_get_info()
n = int(free0 * 0.6) // (20 * MiB)
step1 = [torch.empty(20 * MiB, dtype=torch.uint8, device="cuda") for _ in range(n)]
del step1  # freed after the backward pass; the segments stay cached
step2 = [torch.empty(12 * MiB, dtype=torch.uint8, device="cuda") for _ in range(n)]
free_now, _ = torch.cuda.mem_get_info()
holes = torch.cuda.memory_reserved() - torch.cuda.memory_allocated()
want = (free_now + holes // 2) // MiB * MiB
result = {
    "device_mib": total // MiB,
    "live_mib": n * 12,
    "device_free_mib": free_now // MiB,
    "cached_free_mib": holes // MiB,
    "request_mib": want // MiB,
}
try:
    buffer = torch.empty(want, dtype=torch.uint8, device="cuda")
    result["fits"] = True
except torch.OutOfMemoryError as e:
    result["fits"] = False
    result["error"] = str(e).split(". ")[0] + "."
stats = torch.cuda.memory_stats()
for k in ("reserved_bytes.all.peak", "allocated_bytes.all.peak", "segment.all.allocated", "num_alloc_retries", "num_ooms"):
    result[k] = stats.get(k, 0)
print("DEMO " + json.dumps(result), flush=True)
