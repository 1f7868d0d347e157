"""A small training loop for cuda/gpu-check.sh: prints checkpoints the check compares
with what fragprobe recorded. Uses only torch; no network.

Each checkpoint line:  FPCHECK <monotonic_ns> reserved=<bytes> allocated=<bytes> num_device_alloc=<n>
"""
import os
import sys
import time

import torch


def checkpoint(tag):
    torch.cuda.synchronize()
    s = torch.cuda.memory_stats()
    print(
        f"FPCHECK {time.monotonic_ns()} tag={tag} reserved={torch.cuda.memory_reserved()} "
        f"allocated={torch.cuda.memory_allocated()} num_device_alloc={s.get('num_device_alloc', -1)}",
        flush=True,
    )


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    torch.manual_seed(0)
    dev = torch.device("cuda")
    model = torch.nn.Sequential(
        torch.nn.Linear(2048, 4096), torch.nn.GELU(), torch.nn.Linear(4096, 4096), torch.nn.GELU(),
        torch.nn.Linear(4096, 1024),
    ).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    checkpoint("start")
    t0 = time.perf_counter()
    for step in range(steps):
        # Varying batch sizes make the caching allocator split, cache and grow segments.
        batch = 64 + (step * 37) % 512
        x = torch.randn(batch, 2048, device=dev)
        loss = model(x).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 20 == 19:
            checkpoint(f"step{step}")
    torch.cuda.synchronize()
    print(f"FPTIME {time.perf_counter() - t0:.6f}", flush=True)
    torch.cuda.empty_cache()
    checkpoint("after_empty_cache")


if __name__ == "__main__":
    main()
