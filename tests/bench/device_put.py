#!/usr/bin/env python3
"""device_put.py — lctd's device batch path alone: GET_DEVICE_MANY and PUT_DEVICE_MANY
of the Adam moments of train_offload.py's 152M GPT (2 x 148 f32 tensors, 1.2 GB) in
requests of about 64 MiB, as OffloadedAdamW sends them, timed as the client sees them
(request sent to reply received, the GPU otherwise idle).

Two regimes: steady (the same bytes put again: every put reuses its codebook) and
drifting (the values doubled and halved in turn, so that every put's codes take more
bits than its codebook expects and every other put rebuilds it: a histogram in the
encode pass, a Huffman build, and a new device codebook at the next put). A device to
device copy of each request's bytes is timed in the same run as the baseline.

A request of one 4 KiB tensor, put and got in the same rounds, gives the fixed cost of a
request (the client's call, the socket, lctd's hand-offs between threads, the launches and
the GPU's turn-around).

With several --lctd binaries (a change and the code before it, say), each gets its
own lctd on the same GPU and the rounds alternate between them, so that the machine's
drifts fall on all. Needs a CUDA GPU, torch, and a built lctd:

    tests/bench/device_put.py --lctd build/bin/lctd --out results/
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

ap = argparse.ArgumentParser()
ap.add_argument("--lctd", action="append", required=True, help="an lctd binary (repeat to compare)")
ap.add_argument("--out", default=".")
ap.add_argument("--rounds", type=int, default=30)
ap.add_argument("--skip", type=int, default=4, help="first rounds left out")
ap.add_argument("--request-mib", type=int, default=64)
a = ap.parse_args()
SHAPES = shapes()  # train_offload.py's GPT
os.makedirs(a.out, exist_ok=True)


def moments():
    """exp_avg and exp_avg_sq-like values of every shape, as requests of about
    --request-mib: lists of (key, view) over one buffer per request."""
    g = torch.Generator(device="cuda").manual_seed(0)
    tensors = []
    for i, s in enumerate(SHAPES):
        grad = torch.randn(s, device="cuda", generator=g) * 1e-3
        tensors += [(f"m{i}", grad * 0.1), (f"v{i}", grad * grad * 0.05)]
    requests, cur, size = [], [], 0
    for key, t in tensors:
        cur.append((key, t))
        size += t.numel() * 4
        if size >= a.request_mib << 20:
            requests.append(cur)
            cur, size = [], 0
    if cur:
        requests.append(cur)
    out = []
    for req in requests:  # one allocation per request: its tensors travel in one _MANY request
        buf = torch.empty(sum(t.numel() for _, t in req), device="cuda")
        views, off = [], 0
        for key, t in req:
            v = buf[off:off + t.numel()].view(t.shape)
            v.copy_(t)
            views.append((key, v))
            off += t.numel()
        out.append((buf, views))
    return out


def timed(fn):
    torch.cuda.synchronize()
    t = time.perf_counter()
    fn()
    return (time.perf_counter() - t) * 1e3


def copy_ms(buf):
    dst = torch.empty_like(buf)
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
    ev[0].record()
    dst.copy_(buf)
    ev[1].record()
    torch.cuda.synchronize()
    return ev[0].elapsed_time(ev[1])


reqs = moments()
SMALL = torch.randn(1024, device="cuda")  # the 4 KiB request
raw = sum(b.numel() * 4 for b, _ in reqs)
servers = []
for path in a.lctd:
    d = Lctd(backend="cuda", memory="3G", binary=path)
    c = lct.Client(d.endpoint, timeout_ms=60000)
    puts = [lct.Batch(c, views, put=True) for _, views in reqs]
    gets = [lct.Batch(c, views, put=False) for _, views in reqs]
    small = (lct.Batch(c, [("small", SMALL)], put=True), lct.Batch(c, [("small", SMALL)], put=False))
    servers.append(dict(path=path, lctd=d, client=c, puts=puts, gets=gets, small=small,
                        t={"get": [], "put steady": [], "put drifting": [], "put 4 KiB": [], "get 4 KiB": []}))

# Rounds: every server gets its moments back and puts them again, steady then drifting.
copies = []
for regime in ("put steady", "put drifting"):
    for r in range(a.rounds):
        if regime == "put drifting":
            for b, _ in reqs:
                b.mul_(2.0 if r % 2 == 0 else 0.5)
        order = servers if r % 2 == 0 else servers[::-1]
        for s in order:
            for p, g in zip(s["puts"], s["gets"]):
                ms_put = timed(p.send)
                ms_get = timed(g.send)
                if r >= a.skip:
                    s["t"][regime].append(ms_put)
                    s["t"]["get"].append(ms_get)
            if regime == "put steady":
                ms_put, ms_get = timed(s["small"][0].send), timed(s["small"][1].send)
                if r >= a.skip:
                    s["t"]["put 4 KiB"].append(ms_put)
                    s["t"]["get 4 KiB"].append(ms_get)
        if r >= a.skip and regime == "put steady":
            copies += [copy_ms(b) for b, _ in reqs]

results = {"requests": len(reqs), "tensors": sum(len(v) for _, v in reqs), "raw_bytes": raw,
           "copy_ms_per_request": statistics.median(copies), "servers": []}
# What was timed holds: every server gives back the bytes last put (a wrong decode is no result).
for s in servers:
    for (buf, _), g in zip(reqs, s["gets"]):
        want = buf.clone()
        buf.zero_()
        g.send()
        if not torch.equal(buf, want):
            raise SystemExit(f"{s['path']}: a get differs from the bytes put")
for s in servers:
    st = s["client"].stats()
    s["client"].close()
    s["lctd"].stop()
    results["servers"].append({"lctd": s["path"], "ms_per_request": {k: statistics.median(v) for k, v in s["t"].items()},
                               "times_ms": s["t"], "codebook_rebuilds": st.get("codebook_rebuilds")})
with open(os.path.join(a.out, "device_put.json"), "w") as f:
    json.dump(results, f, indent=1)

print(f"{results['tensors']} f32 tensors, {raw / 2**20:.0f} MiB in {len(reqs)} requests; "
      f"median ms per request; copy of a request's bytes {results['copy_ms_per_request']:.3f} ms")
print(f"{'lctd':40s} {'get':>8s} {'put steady':>11s} {'put drifting':>13s} {'rebuilds':>9s} "
      f"{'get 4 KiB':>10s} {'put 4 KiB':>10s}")
for s in results["servers"]:
    m = s["ms_per_request"]
    print(f"{s['lctd'][-40:]:40s} {m['get']:8.3f} {m['put steady']:11.3f} {m['put drifting']:13.3f} "
          f"{s['codebook_rebuilds'] or 0:9.0f} {m['get 4 KiB']:10.3f} {m['put 4 KiB']:10.3f}")
