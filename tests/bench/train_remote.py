#!/usr/bin/env python3
"""train_remote.py — a remote trainer: the ~150M-parameter byte-level GPT of train_offload.py with gradient
accumulation to --tokens tokens per optimizer step, its Adam states kept in lctd over tcp on the host path (as
from another host: lct.Client(remote=True), every byte crosses the socket), coded on the trainer's GPU and sent
as blobs (lct.torch.wire), against torch.optim.AdamW(fused=True) with resident states.

The offloaded step applies the function torch.optim.AdamW(fused=True).step() calls to the moments fetched from
lctd, so losses must be bitwise identical. The moments of step k are stored while step k+1 accumulates its
gradients, and fetched back behind those stores while it still accumulates: the overhead is what the transfer
does not hide plus the update. Needs a CUDA GPU, torch 2, and a build with CUDA:

    tests/bench/train_remote.py --lctd build-gpu/bin/lctd --out results/
"""
import argparse
import json
import os
import socket
import statistics
import sys
import threading
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS, set before CUDA starts
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "client", "python", "tests"))
from lctd_helper import Lctd  # noqa: E402  (it puts the lct package on the path)
import lct  # noqa: E402
from lct.torch import Codec, wire  # noqa: E402
from lct.torch.adamw import _fused_adamw  # noqa: E402
from gpt import GPT, add_trainer_args, batches, corpus  # noqa: E402

ap = argparse.ArgumentParser()
add_trainer_args(ap)
ap.add_argument("--tokens", type=int, default=256 << 10, help="tokens per optimizer step (at least)")
ap.add_argument("--steps", type=int, default=6, help="optimizer steps per mode (the first is not timed)")
ap.add_argument("--connections", type=int, default=4, help="lanes of each connection to lctd")
ap.add_argument("--lctd-arg", action="append", default=[], help="extra lctd argument (repeatable)")
a = ap.parse_args()
os.makedirs(a.out, exist_ok=True)
dev = "cuda"
torch.use_deterministic_algorithms(True)
LR, BETAS, WD, EPS = 3e-4, (0.9, 0.95), 0.1, 1e-8
MICRO = -(-a.tokens // (a.batch * a.block))  # micro-batches per optimizer step

text = corpus()
data = torch.frombuffer(bytearray(text), dtype=torch.uint8).to(dev).long()


def make():
    torch.manual_seed(0)
    return GPT(a.block, a.embd, a.heads, a.layers).to(dev)


def accumulate(model, feed):
    """One optimizer step's gradients over MICRO micro-batches; the losses (one float each)."""
    losses = []
    for _ in range(MICRO):
        x, y = next(feed)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x).view(-1, 256).float(), y.view(-1)) / MICRO
        loss.backward()
        losses.append(loss.detach())
    return [t.item() for t in losses]


class Remote:
    """AdamW(fused=True) whose moments live in lctd between steps: stored after an update, fetched back before
    the next, each on a thread of its own with its own connection and codec, overlapping the accumulation."""

    def __init__(self, params, endpoint):
        self.params = [p for p in params]
        opts = dict(remote=True, connections=a.connections, timeout_ms=120000)
        self.fetch_client, self.store_client = lct.Client(endpoint, **opts), lct.Client(endpoint, **opts)
        self.fetch_codec, self.store_codec = Codec(), wire.codec_for(self.store_client)
        self.steps = [torch.zeros((), dtype=torch.float32, device=dev) for _ in self.params]
        self.moments = None  # [(exp_avg, exp_avg_sq)] on the GPU while fetched
        self.storing = self.fetching = None
        self.adamw = _fused_adamw()

    def _store(self, moments):
        for i, (m, v) in enumerate(moments):
            wire.put(self.store_client, f"remote/{i}/exp_avg", m, codec=self.store_codec)
            wire.put(self.store_client, f"remote/{i}/exp_avg_sq", v, codec=self.store_codec)

    def _fetch(self):
        self.storing.join()
        self.moments = [tuple(wire.get(self.fetch_client, f"remote/{i}/{k}", codec=self.fetch_codec)[0]
                              for k in ("exp_avg", "exp_avg_sq")) for i in range(len(self.params))]

    def prefetch(self):
        """Starts fetching the moments (after the last stores): called as the accumulation starts."""
        if self.storing is not None:
            self.fetching = threading.Thread(target=self._fetch)
            self.fetching.start()

    def step(self):
        if self.fetching is not None:
            self.fetching.join()
            moments = self.moments
        else:  # the first step: zero moments, as torch.optim.AdamW starts
            moments = [(torch.zeros_like(p), torch.zeros_like(p)) for p in self.params]
        self.adamw(self.params, [p.grad for p in self.params], [m for m, _ in moments], [v for _, v in moments], [],
                   self.steps, fused=True, amsgrad=False, beta1=BETAS[0], beta2=BETAS[1], lr=LR, weight_decay=WD,
                   eps=EPS, maximize=False)
        self.moments = None
        self.storing = threading.Thread(target=self._store, args=(moments,))
        self.storing.start()

    def flush(self):
        if self.storing is not None:
            self.storing.join()

    def close(self):
        self.flush()
        self.fetch_client.close()
        self.store_client.close()


def train(mode, endpoint=None):
    model = make()
    params = list(model.parameters())
    opt = torch.optim.AdamW(params, lr=LR, betas=BETAS, eps=EPS, weight_decay=WD, fused=True) \
        if mode == "resident" else Remote(params, endpoint)
    feed = batches(data, MICRO * a.steps, a.batch, a.block)
    losses, times = [], []
    for _ in range(a.steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        if mode == "remote":
            opt.prefetch()
        losses += accumulate(model, feed)
        opt.step()
        for p in params:
            p.grad = None
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    if mode == "remote":
        opt.close()
    peak = torch.cuda.max_memory_allocated()
    del model, opt, params
    torch.cuda.empty_cache()
    return losses, times, peak


with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    tcp = f"tcp://127.0.0.1:{s.getsockname()[1]}"
lctd = Lctd("--listen", tcp, *a.lctd_arg, backend="cuda", memory="8G", binary=a.lctd,
            stderr=open(os.path.join(a.out, "lctd_remote.log"), "w"))
try:
    results = {}
    for mode in ("resident", "remote", "resident", "remote"):  # twice each, alternating: drifts fall on both
        torch.cuda.reset_peak_memory_stats()
        losses, times, peak = train(mode, tcp)
        r = results.setdefault(mode, {"losses": losses, "step_s": [], "peak_bytes": peak})
        r["step_s"] += times[1:]  # the first step builds codebooks and fills caches
        if r["losses"] != losses:
            raise SystemExit(f"{mode}: two runs of the same training differ")
        print(f"{mode}: steps {[round(t, 3) for t in times]} s, peak {peak / 2**30:.2f} GiB", flush=True)
finally:
    lctd.stop()

same = results["resident"]["losses"] == results["remote"]["losses"]
res, rem = (statistics.median(results[m]["step_s"]) for m in ("resident", "remote"))
params = sum(p.numel() for p in make().parameters())
summary = {"params": params, "micro_batches": MICRO, "tokens_per_step": MICRO * a.batch * a.block,
           "connections": a.connections, "losses_bitwise_equal": same, "resident_step_s": res,
           "remote_step_s": rem, "overhead": rem / res - 1, "results": results}
json.dump(summary, open(os.path.join(a.out, "train_remote.json"), "w"), indent=1)
print(f"\nGPT {params / 1e6:.1f}M params, {MICRO} micro-batches of {a.batch} x {a.block} = "
      f"{MICRO * a.batch * a.block} tokens per optimizer step, {a.steps} steps per run, bf16 autocast")
print(f"losses bitwise equal (remote vs AdamW(fused=True) resident): {same}")
print(f"step s (median): resident {res:.3f}, remote {rem:.3f}: overhead {100 * (rem / res - 1):+.1f}% (target <= +10%)")
print(f"trainer peak GiB: resident {results['resident']['peak_bytes'] / 2**30:.2f}, "
      f"remote {results['remote']['peak_bytes'] / 2**30:.2f}")
if not same:
    raise SystemExit("the remote trainer's losses differ from AdamW(fused=True)'s")
