"""What real PyTorch does beyond a training loop, for fragprobe's tests on the simulated
GPU. One feature per run:

    python features.py conv    # cuDNN convolution forward/backward, fp32 and bf16
    python features.py multi   # every device: torch.cuda.set_device, a tensor each, a copy
    python features.py graph   # capture a CUDA graph and replay it
    python features.py oom     # allocate 1 GiB tensors until torch.OutOfMemoryError
    python features.py hold    # hold 400 MiB until stdin closes (for NVML tools)

Each prints `RESULT {json}` with what PyTorch itself says.
"""
import json
import sys
import time

import torch


def result(**kw):
    print("RESULT " + json.dumps(kw), flush=True)


what = sys.argv[1]
if what == "conv":
    m = torch.nn.Conv2d(3, 16, 3).cuda()
    x = torch.randn(8, 3, 64, 64, device="cuda", requires_grad=True)
    m(x).sum().backward()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        y = m(x)
    result(cudnn=torch.backends.cudnn.version(), shape=list(y.shape))
elif what == "multi":
    reserved = []
    for d in range(torch.cuda.device_count()):
        torch.cuda.set_device(d)
        t = torch.empty(100 << 20, dtype=torch.uint8, device="cuda")
        reserved.append(torch.cuda.memory_reserved(d))
    b = torch.ones(1 << 20, device="cuda:0").to("cuda:1")
    result(devices=torch.cuda.device_count(), reserved=reserved,
           segments=[torch.cuda.memory_stats(d)["segment.all.allocated"]
                     for d in range(torch.cuda.device_count())])
elif what == "graph":
    x = torch.randn(1 << 20, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = x * 2 + 1
    g.replay()
    g.replay()
    s = torch.cuda.memory_stats()
    result(segments=s["segment.all.allocated"], reserved=s["reserved_bytes.all.current"])
elif what == "oom":
    keep = []
    try:
        while True:
            keep.append(torch.empty(1 << 30, dtype=torch.uint8, device="cuda"))
    except torch.OutOfMemoryError as e:
        s = torch.cuda.memory_stats()
        result(held=len(keep), message=str(e).splitlines()[0], num_ooms=s["num_ooms"],
               segments=s["segment.all.allocated"], retries=s["num_alloc_retries"])
elif what == "hold":
    x = torch.empty(400 << 20, dtype=torch.uint8, device="cuda")
    result(reserved=torch.cuda.memory_reserved())
    sys.stdin.read()

# Let autograd's device threads finish dropping the last backward pass's state before the
# interpreter finalizes. Without this, a device thread that drops it a moment too late
# takes the GIL during finalization, CPython ends the thread with pthread_exit, and the
# unwind through a noexcept destructor calls std::terminate: SIGABRT after RESULT (PyTorch
# 2.15, `conv`: 9 of 16 runs with two at once on 2 cores, 0 of 12 alone). Sleeping
# releases the GIL, so a thread already waiting for it goes first.
time.sleep(0.2)
