#!/usr/bin/env python3
"""train_offload.py — a ~150M-parameter byte-level GPT trained with torch AdamW and with
OffloadedAdamW keeping its Adam states in lctd (same GPU over ipc, and over tcp loopback).

Asserts that the loss of every step is bitwise identical between torch AdamW
(foreach=False, the single-tensor path OffloadedAdamW reproduces) and the offloaded
optimizer. PyTorch's default AdamW on CUDA (foreach=True, multi-tensor kernels; its
results differ in the last bits) trains too, as the fastest baseline. Reports the peak
of device memory summed over every process on the GPU (NVML: trainer, lctd and their
CUDA contexts; lctd left out of the baselines, which do not use it), the trainer's own peak, lctd's resident bytes and ratio per state kind
(each mode trained alone), step time and its overhead against each baseline (the four
modes trained side by side, in turn in runs of four steps, so that the machine's drifts
fall on all alike), and the longest sequence length that trains under a cap on that
sum with each. Needs a CUDA GPU, torch, and a built lctd:

    tests/bench/train_offload.py --lctd build/bin/lctd --out results/
"""
import argparse
import json
import os
import re
import socket
import statistics
import sys
import time
import urllib.request

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS, set before CUDA starts
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "client", "python", "tests"))
from lctd_helper import Lctd  # noqa: E402  (it puts the lct package on the path)
import lct  # noqa: E402
import lct.optim  # noqa: E402
from gpt import GPT, add_trainer_args, batches, corpus  # noqa: E402
from gpu_memory import Nvml, PeakSampler  # noqa: E402

ap = argparse.ArgumentParser()
add_trainer_args(ap)
ap.add_argument("--steps", type=int, default=80)
ap.add_argument("--warmup", type=int, default=10, help="untimed steps before the timed modes")
ap.add_argument("--scratch-mib", type=int, default=2048,
                help="OffloadedAdamW scratch: taken from memory the backward pass freed, during step() only")
ap.add_argument("--lctd-arg", action="append", default=[], help="extra lctd argument (repeatable)")
ap.add_argument("--cap-gib", type=float, default=8.0, help="the context search's cap on the summed memory of the GPU's processes")
ap.add_argument("--contexts", default="1024,1280,1536,1664,1792,1920,2048,2176,2304,2560,3072")
a = ap.parse_args()
os.makedirs(a.out, exist_ok=True)
dev = "cuda"
torch.use_deterministic_algorithms(True)  # bitwise-comparable runs
LR, BETAS, WD = 3e-4, (0.9, 0.95), 0.1

text = corpus()
data = torch.frombuffer(bytearray(text), dtype=torch.uint8).to(dev).long()


BASELINES = ("torch", "foreach")  # torch.optim.AdamW with foreach=False, and with foreach=True (CUDA's default)
MODES = BASELINES + ("ipc", "tcp")


def make(mode, block, client=None, prefix=""):
    torch.manual_seed(0)
    model = GPT(block, a.embd, a.heads, a.layers).to(dev)
    if mode in BASELINES:
        opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, weight_decay=WD, foreach=mode == "foreach",
                                fused=False)
    else:
        opt = lct.optim.OffloadedAdamW(model.parameters(), client, lr=LR, betas=BETAS, weight_decay=WD,
                                       key_prefix=f"{prefix}{mode}/{block}/", scratch_bytes=a.scratch_mib << 20)
    return model, opt


def step(model, opt, x, y, flush=False):
    """One training step: its loss, its time and its optimizer step's time (the
    part the offload changes). flush: an offloaded step also waits until its
    last states are back in lctd (else they overlap the next step)."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = F.cross_entropy(model(x).view(-1, 256).float(), y.view(-1))
    opt.zero_grad(set_to_none=True)
    loss.backward()
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    opt.step()
    loss = loss.item()  # synchronizes
    if flush and hasattr(opt, "flush"):
        opt.flush()
    t2 = time.perf_counter()
    return loss, t2 - t0, t2 - t1


def train(model, opt, n, batch, block, after_first=None):
    """Losses, step times and optimizer-step times; after_first, if given, is
    called after the first step (which builds every codebook)."""
    losses, times, opt_times = [], [], []
    for x, y in batches(data, n, batch, block):
        if len(losses) == 1 and after_first is not None:
            after_first()
        loss, t, t_opt = step(model, opt, x, y, flush=len(losses) == n - 1)
        losses.append(loss)
        times.append(t)
        opt_times.append(t_opt)
    return losses, times, opt_times


def interleaved(modes, clients, block=4):
    """Step times with every mode's model resident, the modes taking turns in
    runs of block steps, the order rotating each round: drifts of the machine
    (clocks, other tenants) fall on all modes alike, and within a run an
    offloaded step's last stores overlap its own next step, as in training
    (the run's last step waits for them). {mode: (step times, optimizer
    times)}, each mode's first run (codebooks built, allocator settling)
    left out."""
    runs = {m: make(m, a.block, clients.get(m), prefix="interleaved/") for m in modes}
    times = {m: ([], []) for m in modes}
    feed = list(batches(data, a.steps, a.batch, a.block))
    for r, start in enumerate(range(0, len(feed), block)):
        end = min(start + block, len(feed))
        for m in modes[r % len(modes):] + modes[:r % len(modes)]:
            for k in range(start, end):
                _, t, t_opt = step(*runs[m], *feed[k], flush=k == end - 1)
                if start > 0:
                    times[m][0].append(t)
                    times[m][1].append(t_opt)
    for client in clients.values():  # the pool's room goes to the context search
        for t in list(client.list(prefix="interleaved/")):
            client.delete(t.key)
    return times


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def settle(metrics_port, limit=30.0):
    """Frees the trainer's cached memory and waits (bounded) until lctd has unmapped the trainer's freed buffers
    (ipc_idle after their last request): the next measurement starts from what is allocated."""
    torch.cuda.empty_cache()
    end = time.monotonic() + limit
    while time.monotonic() < end:
        text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
        mapped = re.search(r"^lct_ipc_mapped_bytes (\S+)", text, re.M)
        if mapped is None or float(mapped.group(1)) == 0:
            return
        time.sleep(0.1)


def server_seconds(metrics_port):
    """lctd's time in device batch requests, receipt to reply: {op: (count, seconds)}."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    out = {}
    for op in ("get_device_many", "put_device_many"):
        count = re.search(rf'^lct_request_duration_seconds_count{{op="{op}"}} (\S+)', text, re.M)
        total = re.search(rf'^lct_request_duration_seconds_sum{{op="{op}"}} (\S+)', text, re.M)
        out[op] = (float(count.group(1)) if count else 0.0, float(total.group(1)) if total else 0.0)
    return out


port, metrics_port = free_port(), free_port()
lctd = Lctd("--listen", f"tcp://127.0.0.1:{port}", "--metrics", f"127.0.0.1:{metrics_port}", *a.lctd_arg,
            backend="cuda", memory="6G", binary=a.lctd, stderr=open(os.path.join(a.out, "lctd.log"), "w"))
try:
    clients = {"ipc": lct.Client(lctd.endpoint), "tcp": lct.Client(f"tcp://127.0.0.1:{port}")}
    nvml = Nvml()  # memory as the GPU sees it: this trainer, lctd and their CUDA contexts, summed
    results = {}
    # Untimed steps first: the GPU's clocks and PyTorch's caches settle before
    # the first timed mode (else the baseline, timed first, runs slow).
    model, opt = make("torch", a.block)
    train(model, opt, a.warmup, a.batch, a.block)
    del model, opt
    for mode in MODES:
        settle(metrics_port)
        torch.cuda.reset_peak_memory_stats()
        before = {}

        def after_first():
            if mode not in BASELINES:
                before.update(server_seconds(metrics_port))
        model, opt = make(mode, a.block, clients.get(mode))
        # A baseline runs without lctd: the idle lctd's CUDA context is not its memory.
        with PeakSampler(nvml, exclude=[lctd.proc.pid] if mode in BASELINES else []) as peak:
            losses, times, opt_times = train(model, opt, a.steps, a.batch, a.block, after_first)
        r = {"losses": losses, "alone_step_ms": 1e3 * statistics.median(times[1:]),
             "alone_optimizer_ms": 1e3 * statistics.median(opt_times[1:]),
             "alone_step_times_ms": [round(1e3 * t, 2) for t in times],
             "alone_optimizer_times_ms": [round(1e3 * t, 2) for t in opt_times],
             "trainer_peak_bytes": torch.cuda.max_memory_allocated(),
             "summed_peak_bytes": peak.peak_sum, "lctd_peak_bytes": peak.peak_by_pid.get(lctd.proc.pid, 0),
             "params": sum(p.numel() for p in model.parameters())}
        if mode not in BASELINES:
            kinds = {}
            for t in clients[mode].list(prefix=f"{mode}/{a.block}/"):
                k = kinds.setdefault(t.key.rsplit("/", 1)[1], [0, 0])
                k[0] += t.raw_bytes
                k[1] += t.stored_bytes
            r["states"] = {k: {"raw_bytes": v[0], "stored_bytes": v[1], "ratio": v[0] / v[1]} for k, v in kinds.items()}
            r["lctd_stats"] = clients[mode].stats()
            after = server_seconds(metrics_port)
            # Per step, over the steps after the first (which builds every codebook).
            n = a.steps - 1
            r["requests_per_step"] = {op: (after[op][0] - before[op][0]) / n for op in after}
            r["lctd_ms_per_step"] = {op: 1e3 * (after[op][1] - before[op][1]) / n for op in after}
            for t in list(clients[mode].list(prefix=f"{mode}/{a.block}/")):  # the next mode's sum starts clean
                clients[mode].delete(t.key)
        results[mode] = r
        del model, opt
        print(f"{mode}: losses {losses} step {r['alone_step_ms']:.1f} ms peak "
              f"{r['trainer_peak_bytes'] / 2**30:.2f} GiB", flush=True)
    for mode in MODES[1:]:
        same = [x == y for x, y in zip(results["torch"]["losses"], results[mode]["losses"])]
        results[mode]["losses_bitwise_equal"] = all(same)
    for mode in ("ipc", "tcp"):
        if not results[mode]["losses_bitwise_equal"]:  # not an assert: it must hold under python -O too
            raise SystemExit(f"offloaded AdamW over {mode} diverged from torch AdamW")

    for mode, (times, opt_times) in interleaved(list(MODES), clients).items():
        results[mode]["step_ms"] = 1e3 * statistics.median(times)
        results[mode]["optimizer_ms"] = 1e3 * statistics.median(opt_times)
        results[mode]["step_times_ms"] = [round(1e3 * t, 2) for t in times]
        results[mode]["optimizer_times_ms"] = [round(1e3 * t, 2) for t in opt_times]
        print(f"{mode}: interleaved step {results[mode]['step_ms']:.1f} ms", flush=True)

    # Longest context under a cap on the summed memory of every process on the GPU (lctd's included, but for
    # the baseline, which runs without it), batch 1, two steps each: the trainer's allocator gets what the
    # others and its own context leave, and a trial whose sum passed the cap (lctd grows as it stores) does
    # not fit.
    total = torch.cuda.get_device_properties(0).total_memory
    cap = int(a.cap_gib * 2**30)
    ctx = {}
    for mode in ("torch", "ipc"):
        best = 0
        exclude = [lctd.proc.pid] if mode in BASELINES else []
        for T in (int(t) for t in a.contexts.split(",")):
            settle(metrics_port)
            procs = nvml.processes()
            others = sum(v for pid, v in procs.items() if pid != os.getpid() and pid not in exclude)
            own_context = procs.get(os.getpid(), 0) - torch.cuda.memory_reserved()
            torch.cuda.set_per_process_memory_fraction(max(cap - others - own_context, 0) / total)
            fits = True
            try:
                model, opt = make(mode, T, clients.get(mode))
                with PeakSampler(nvml, exclude=exclude) as peak:
                    train(model, opt, 2, 1, T)
                fits = peak.peak_sum <= cap
            except torch.cuda.OutOfMemoryError:
                fits = False
            model = opt = None
            if mode not in BASELINES:  # this trial's states leave lctd
                for t in list(clients[mode].list(prefix=f"{mode}/{T}/")):
                    clients[mode].delete(t.key)
            if not fits:
                break
            best = T
        ctx[mode] = best
        print(f"{mode}: longest context under {a.cap_gib} GiB: {best}", flush=True)
    results["context_cap_gib"] = a.cap_gib
    results["longest_context"] = ctx
    for client in clients.values():
        client.close()
finally:
    lctd.stop()

json.dump(results, open(os.path.join(a.out, "train.json"), "w"), indent=1)
t, f, i = results["torch"], results["foreach"], results["ipc"]
states = sum(v["stored_bytes"] for v in i["states"].values())
raw = sum(v["raw_bytes"] for v in i["states"].values())
print(f"\nGPT {t['params'] / 1e6:.1f}M params, batch {a.batch} x {a.block}, {a.steps} steps, bf16 autocast")
print(f"{'':28} {'torch AdamW':>12} {'foreach':>12} {'lctd ipc':>12} {'lctd tcp':>12}")
print(f"{'losses bitwise equal':28} {'-':>12} " +
      " ".join(f"{str(results[m]['losses_bitwise_equal']):>12}" for m in MODES[1:]))
print(f"{'step ms (median, interleaved)':28} " +
      " ".join(f"{results[m]['step_ms']:12.1f}" for m in MODES))
print(f"{'  of which optimizer step':28} " +
      " ".join(f"{results[m]['optimizer_ms']:12.1f}" for m in MODES))
print(f"{'step ms (median, alone)':28} " +
      " ".join(f"{results[m]['alone_step_ms']:12.1f}" for m in MODES))
print(f"{'  of which optimizer step':28} " +
      " ".join(f"{results[m]['alone_optimizer_ms']:12.1f}" for m in MODES))
for op in ("get_device_many", "put_device_many"):
    print(f"{'  lctd in ' + op + ' ms':28} {'-':>12} {'-':>12} " +
          " ".join(f"{results[m]['lctd_ms_per_step'][op]:12.1f}" for m in ("ipc", "tcp")))
print(f"{'requests per step':28} {'-':>12} {'-':>12} " +
      " ".join(f"{sum(results[m]['requests_per_step'].values()):12.1f}" for m in ("ipc", "tcp")))
for base in BASELINES:  # the step time overhead against each
    print(f"{'step time vs ' + base:28} " + " ".join(
        f"{100 * (results[m]['step_ms'] / results[base]['step_ms'] - 1):+11.1f}%"
        if MODES.index(m) > MODES.index(base) else f"{'-':>12}" for m in MODES))
print(f"{'summed peak GiB (NVML)':28} " +
      " ".join(f"{results[m]['summed_peak_bytes'] / 2**30:12.3f}" for m in MODES))
print(f"{'  of which lctd GiB':28} " +
      " ".join(f"{results[m]['lctd_peak_bytes'] / 2**30:12.3f}" for m in MODES))
print(f"{'trainer peak GiB':28} " +
      " ".join(f"{results[m]['trainer_peak_bytes'] / 2**30:12.3f}" for m in MODES))
print(f"{'+ lctd resident GiB':28} {'-':>12} {'-':>12} {states / 2**30:12.3f}")
print(f"{'total GiB':28} {t['trainer_peak_bytes'] / 2**30:12.3f} {f['trainer_peak_bytes'] / 2**30:12.3f} "
      f"{(i['trainer_peak_bytes'] + states) / 2**30:12.3f}")
for k, v in sorted(i["states"].items()):
    print(f"{'  ' + k + ' ratio':28} {'-':>12} {'-':>12} {v['ratio']:12.4f}  ({v['raw_bytes'] / 2**20:.0f} MiB raw)")
print(f"{'  states raw -> stored':28} {'-':>12} {'-':>12} {raw / 2**30:6.3f}->{states / 2**30:.3f}")
print(f"{'longest context @ %.0f GiB sum' % a.cap_gib:28} {ctx['torch']:12d} {'-':>12} {ctx['ipc']:12d}")
