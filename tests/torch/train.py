"""A GPT-style training loop for fragprobe's tests and examples: token embeddings,
LayerNorm, causal self-attention (scaled_dot_product_attention), an MLP, AdamW and bf16
autocast, with a sequence length that varies step to step (the allocation pattern that
fragments PyTorch's caching allocator).

    python train.py [--steps N] [--layers L] [--width D] [--batch B] [--max-seq S]
                    [--stats-every K] [--seed S]

Prints a line `STATS {json}` with torch.cuda.memory_stats() counters and the
CLOCK_MONOTONIC instant after every K steps and at the end, so a test can compare them with
what the probe recorded up to the same instant.
On a simulated GPU the kernels do nothing: the losses are meaningless, the allocations are
real.
"""
import argparse
import faulthandler
import json
import random
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

KEYS = [
    "segment.all.allocated",
    "segment.all.freed",
    "reserved_bytes.all.peak",
    "reserved_bytes.all.current",
    "allocated_bytes.all.peak",
    "allocated_bytes.all.current",
    "num_alloc_retries",
    "num_ooms",
]


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, vocab, d, layers, heads, max_seq):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_seq, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln(x))


def stats(step):
    s = torch.cuda.memory_stats()
    row = {k: s.get(k, 0) for k in KEYS}
    row["step"] = step
    # CLOCK_MONOTONIC, the probe's clock: every allocation call of the run so far returned
    # before this instant, so a test can cut the probe's trace here.
    row["t_ns"] = time.monotonic_ns()
    print("STATS " + json.dumps(row), flush=True)


def main():
    # Python's stacks if the interpreter dies of a signal (an abort in teardown included).
    faulthandler.enable()
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--vocab", type=int, default=8192)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--max-seq", type=int, default=1024)
    p.add_argument("--stats-every", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    rng = random.Random(a.seed)
    dev = torch.device("cuda")
    model = GPT(a.vocab, a.width, a.layers, a.heads, a.max_seq).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    for step in range(1, a.steps + 1):
        t = rng.choice([a.max_seq // 8, a.max_seq // 4, a.max_seq // 2, 3 * a.max_seq // 4, a.max_seq])
        idx = torch.randint(0, a.vocab, (a.batch, t), device=dev)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            logits = model(idx[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, a.vocab).float(), idx[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del logits, loss, idx
        if step % a.stats_every == 0 or step == a.steps:
            stats(step)
    print("DONE", flush=True)
    # Let autograd's device threads drop the last backward pass's state before the
    # interpreter finalizes (see the end of features.py: otherwise a SIGABRT after DONE
    # now and then, when the machine is busy).
    time.sleep(0.2)


if __name__ == "__main__":
    sys.exit(main())
