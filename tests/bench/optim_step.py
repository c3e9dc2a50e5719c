#!/usr/bin/env python3
"""optim_step.py — the optimizer step alone: torch.optim.AdamW with foreach=False (the
single-tensor path) and with foreach=True (multi-tensor kernels, CUDA's default) against
lct.optim.OffloadedAdamW with lctd on the same GPU, on the parameter shapes of
train_offload.py's 152M GPT with random gradients and no forward pass, the three stepped
in turn (the order rotating each round) so that the machine's drifts fall on all.

Reports the median step time of each as the trainer sees it (step() returned, the GPU
idle; the offloaded step's last store runs on after it, as into a forward pass), the
median of the paired differences against each baseline, the trainer thread's CPU time
per step, and the time flush() then waits; asserts that the offloaded parameters stay
bitwise equal to foreach=False's. Needs a CUDA
GPU, torch, and a built lctd:

    tests/bench/optim_step.py --lctd build/bin/lctd --out results/
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "client", "python", "tests"))
from lctd_helper import Lctd  # noqa: E402  (it puts the lct package on the path)
import lct  # noqa: E402
from gpt import shapes  # noqa: E402
import lct.optim  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--lctd", required=True)
ap.add_argument("--out", default=".")
ap.add_argument("--rounds", type=int, default=40)
ap.add_argument("--skip", type=int, default=5, help="first rounds left out (codebooks built, caches settling)")
ap.add_argument("--scratch-mib", type=int, default=2048)
a = ap.parse_args()
SHAPES = shapes()  # train_offload.py's GPT
os.makedirs(a.out, exist_ok=True)

MODES = ("torch", "foreach", "lctd")
HYPER = dict(lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1)


def params():
    g = torch.Generator(device="cuda").manual_seed(0)
    return [torch.nn.Parameter(torch.randn(s, device="cuda", generator=g) * 0.02) for s in SHAPES]


def step(opt, ps, k):
    """Round k's gradients, then one timed step: (wall ms, trainer CPU ms, flush ms)."""
    g = torch.Generator(device="cuda").manual_seed(1000 + k)
    for p in ps:
        p.grad = torch.randn(p.shape, device="cuda", generator=g) * 1e-3
    torch.cuda.synchronize()
    t0, c0 = time.perf_counter(), time.thread_time()
    opt.step()
    c1 = time.thread_time()
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    if hasattr(opt, "flush"):
        opt.flush()
    return (t1 - t0) * 1e3, (c1 - c0) * 1e3, (time.perf_counter() - t1) * 1e3


lctd = Lctd(backend="cuda", memory="6G", binary=a.lctd, stderr=open(os.path.join(a.out, "lctd.log"), "w"))
try:
    client = lct.Client(lctd.endpoint)
    runs = {"torch": (params(),), "foreach": (params(),), "lctd": (params(),)}
    runs["torch"] += (torch.optim.AdamW(runs["torch"][0], foreach=False, fused=False, **HYPER),)
    runs["foreach"] += (torch.optim.AdamW(runs["foreach"][0], foreach=True, fused=False, **HYPER),)
    runs["lctd"] += (lct.optim.OffloadedAdamW(runs["lctd"][0], client, scratch_bytes=a.scratch_mib << 20,
                                              key_prefix="optim-step/", **HYPER),)
    times = {m: [] for m in runs}
    for k in range(a.rounds):
        for m in MODES[k % len(MODES):] + MODES[:k % len(MODES)]:
            ps, opt = runs[m]
            times[m].append(step(opt, ps, k))
    same = all(torch.equal(x, y) for x, y in zip(runs["torch"][0], runs["lctd"][0]))
    if not same:  # not an assert: it must hold under python -O too
        raise SystemExit("OffloadedAdamW diverged from torch AdamW")
    client.close()
finally:
    lctd.stop()

kept = {m: t[a.skip:] for m, t in times.items()}
med = {m: [statistics.median(x[i] for x in t) for i in range(3)] for m, t in kept.items()}
paired = {base: statistics.median(b[0] - t[0] for t, b in zip(kept[base], kept["lctd"])) for base in MODES[:2]}
result = {"shapes": len(SHAPES), "params": sum(torch.Size(s).numel() for s in SHAPES), "rounds": a.rounds,
          "skip": a.skip, "scratch_mib": a.scratch_mib, "bitwise_equal": same,
          "step_ms": {m: v[0] for m, v in med.items()}, "trainer_cpu_ms": {m: v[1] for m, v in med.items()},
          "flush_ms": med["lctd"][2], "paired_difference_ms": paired,
          "step_times_ms": {m: [round(x[0], 3) for x in t] for m, t in times.items()}}
with open(os.path.join(a.out, "optim_step.json"), "w") as f:
    json.dump(result, f, indent=1)
print(f"{result['params'] / 1e6:.1f}M parameters in {len(SHAPES)} tensors, {a.rounds - a.skip} rounds, "
      f"parameters bitwise equal: {same}")
print(f"{'':24} {'torch AdamW':>12} {'foreach':>12} {'lctd':>12}")
print(f"{'step ms (median)':24} " + " ".join(f"{med[m][0]:12.2f}" for m in MODES))
print(f"{'trainer CPU ms (median)':24} " + " ".join(f"{med[m][1]:12.2f}" for m in MODES))
print(f"{'then flush() ms':24} {'-':>12} {'-':>12} {med['lctd'][2]:12.2f}")
print(f"{'lctd minus each (paired)':24} {paired['torch']:12.2f} {paired['foreach']:12.2f} {'-':>12}")
