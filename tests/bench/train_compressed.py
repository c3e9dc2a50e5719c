#!/usr/bin/env python3
"""train_compressed.py — lct.torch inside the training loop against the same loop with everything resident, with
device memory as the GPU sees it (NVML, summed over every process on the GPU).

  --model gpt162m  (a) a 162M-parameter GPT: 12 layers, 768 wide, 12 heads, context 1024, 50,257 token ids
                   (the text's two-byte words folded into them), untied head, fp32 parameters, bf16 autocast.
                   Modes: baseline (torch.optim.AdamW(fused=True), all resident); lct (saved activations,
                   parameters and Adam moments held as LCT blobs); lct-states (parameters and moments only).
                   Reports peak memory, step time, each tensor kind's ratio and share, and checks that every
                   step's loss is bitwise the baseline's.
  --model qwen3-4b (b) a Qwen3-4B-shaped decoder (qwen.py), bf16 weights and gradients, fp32 master weights and
                   moments, briefly pre-trained on the text first. Peak memory at --context, and the longest
                   context that trains under --cap-gib of summed device memory, per mode.

Each mode runs in a process of its own, so that NVML's per-process figures are its alone. The text is the
Python sources of the installed torch. Needs a CUDA GPU, torch 2 and liblct_codec built with CUDA:

    tests/bench/train_compressed.py --out results/            # both models; --model picks one
"""
import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "client", "python"))

MODELS = {
    "gpt162m": dict(context=1024, batch=8, steps=20, warmup=5, pretrain=0, vocab=50257,
                    modes=("baseline", "lct", "lct-states")),
    "qwen3-4b": dict(context=2048, batch=1, steps=3, warmup=1, pretrain=8, vocab=151936, modes=("baseline", "lct")),
}
LR, BETAS, WD = 3e-4, (0.9, 0.95), 0.1


def parse():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=list(MODELS) + ["all"], default="all",
                    help="all: both, the Qwen3-4B-shaped one with its context search (--contexts, default below)")
    ap.add_argument("--out", default=".")
    ap.add_argument("--context", type=int)
    ap.add_argument("--batch", type=int)
    ap.add_argument("--steps", type=int)
    ap.add_argument("--warmup", type=int)
    ap.add_argument("--cap-gib", type=float, default=80.0, help="the context search's cap on summed device memory")
    ap.add_argument("--contexts", default="", help="the context search's lengths (qwen3-4b; empty: none)")
    ap.add_argument("--min-bytes", type=int, default=1 << 20, help="saved activations under this stay as they are")
    ap.add_argument("--alloc-conf", default="expandable_segments:True",
                    help="PYTORCH_CUDA_ALLOC_CONF of every mode alike")
    ap.add_argument("--child", help=argparse.SUPPRESS)  # a mode, run in this process
    ap.add_argument("--json", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.model == "all":
        return a
    for k, v in MODELS[a.model].items():
        if getattr(a, k, None) is None:
            setattr(a, k, v)
    return a


# ---- one mode, in its own process ----------------------------------------------------------------------------

def text_ids(vocab, device):
    import torch
    from gpt import corpus
    text = corpus(64 << 20)
    words = torch.frombuffer(bytearray(text[: len(text) // 2 * 2]), dtype=torch.int16).to(torch.int64) & 0xFFFF
    return (words % vocab).to(device)


class MasterAdamW:
    """The resident baseline of bf16 training: fp32 master weights and torch.optim.AdamW(fused=True) on them,
    stepped in groups of at most group_bytes of fp32 gradients (cast from the bf16 ones just before their
    group's update), as CompressedAdamW bounds its scratch: the baseline's peak is not set by casting every
    gradient at once."""

    def __init__(self, params, group_bytes=512 << 20, **hyper):
        import torch
        self.params = list(params)
        self.masters = [p.detach().float().clone() for p in self.params]
        self.groups, group, size = [], [], 0
        for i, m in enumerate(self.masters):
            if group and size + m.numel() * 4 > group_bytes:
                self.groups.append(group)
                group, size = [], 0
            group.append(i)
            size += m.numel() * 4
        if group:
            self.groups.append(group)
        self.opts = [torch.optim.AdamW([self.masters[i] for i in g], fused=True, **hyper) for g in self.groups]

    def step(self):
        import torch
        with torch.no_grad():
            for group, opt in zip(self.groups, self.opts):
                for i in group:
                    self.masters[i].grad = self.params[i].grad.float()
                opt.step()
                for i in group:
                    self.params[i].copy_(self.masters[i])
                    self.masters[i].grad = None

    def zero_grad(self, set_to_none=True):
        for p in self.params:
            p.grad = None

    def state_bytes(self):
        n = sum(m.numel() * 4 for m in self.masters) * 3
        return n, n


def run_mode(a):
    import torch
    import torch.nn.functional as F
    import lct.torch as lt
    from gpu_memory import Nvml, PeakSampler

    torch.use_deterministic_algorithms(True)  # bitwise-comparable runs (cuDNN attention too)
    dev = torch.device("cuda", torch.cuda.current_device())
    torch.cuda.init()
    torch.empty(1, device=dev)  # the context exists: what NVML counts from here on
    props = torch.cuda.get_device_properties(dev)
    bus = getattr(props, "pci_bus_id", None)
    nvml = Nvml(f"{getattr(props, 'pci_domain_id', 0):08x}:{bus:02x}:{props.pci_device_id:02x}.0"
                if bus is not None else None)
    result = dict(mode=a.child, model=a.model, context=a.context, batch=a.batch, ok=False)
    if a.cap_gib and a.contexts:
        procs = nvml.processes()
        others = sum(v for pid, v in procs.items() if pid != os.getpid())
        context_bytes = procs.get(os.getpid(), 0)  # the CUDA context, before any tensor of the run
        room = int(a.cap_gib * (1 << 30)) - others - context_bytes
        torch.cuda.set_per_process_memory_fraction(max(room, 0) / props.total_memory, dev)
        result.update(cap_bytes=int(a.cap_gib * (1 << 30)), context_bytes=context_bytes, other_bytes=others)

    lctmode = a.child != "baseline"
    codec = lt.Codec()
    torch.manual_seed(0)
    if a.model == "gpt162m":
        from gpt import GPT
        model = GPT(a.context, 768, 12, 12, device=dev, vocab=a.vocab)
        autocast = lambda: torch.autocast("cuda", dtype=torch.bfloat16)  # noqa: E731
    else:
        from qwen import SHAPE, Qwen3Shaped
        with torch.device(dev):
            model = Qwen3Shaped(**SHAPE).to(torch.bfloat16)
        autocast = contextlib.nullcontext
    n_params = sum(p.numel() for p in model.parameters())
    weights = lt.CompressedParameters(model, codec=codec) if lctmode else None
    master = a.model == "qwen3-4b"
    if lctmode:
        opt = lt.CompressedAdamW(model.parameters(), lr=LR, betas=BETAS, weight_decay=WD, codec=codec,
                                 weights=weights, master_weights=master)
    elif master:
        opt = MasterAdamW(model.parameters(), lr=LR, betas=BETAS, weight_decay=WD)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, weight_decay=WD, fused=True)

    data = text_ids(a.vocab, dev)
    gen = torch.Generator().manual_seed(1)

    def batch(T):
        ix = torch.randint(0, data.numel() - T - 1, (a.batch,), generator=gen).tolist()
        return (torch.stack([data[i:i + T] for i in ix]), torch.stack([data[i + 1:i + T + 1] for i in ix]))

    kinds = {}

    def step(T, phase=lambda name: None):
        x, y = batch(T)
        acts = lt.compressed_activations(codec=codec, min_bytes=a.min_bytes) if a.child == "lct" else None
        with acts or contextlib.nullcontext(), autocast():
            loss = F.cross_entropy(model(x).float().view(-1, a.vocab), y.view(-1))
        phase("forward")
        loss.backward()
        phase("backward")
        grads = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None)
        opt.step()
        opt.zero_grad(set_to_none=True)
        phase("optimizer")
        kinds["gradients"] = (grads, grads)
        if acts is not None:
            kinds["activations"] = (acts.raw_bytes, acts.blob_bytes)
        return loss.detach()

    phase_peaks = {}

    def phase(name):
        """After the timed steps: each phase's peak of allocated memory (it waits for the GPU)."""
        torch.cuda.synchronize()
        phase_peaks[name] = torch.cuda.max_memory_allocated(dev)
        torch.cuda.reset_peak_memory_stats(dev)

    losses, times = [], []
    try:
        with PeakSampler(nvml) as peak:
            for _ in range(getattr(a, "pretrain", 0)):  # pre-training: the tensors are not pure noise
                step(512)
            for i in range(a.warmup + a.steps):
                t0, t1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                t0.record()
                losses.append(step(a.context))
                t1.record()
                t1.synchronize()
                if i >= a.warmup:
                    times.append(t0.elapsed_time(t1))
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats(dev)
            losses.append(step(a.context, phase))  # one more, untimed: where the memory peaks
            codec.verify()
        result["ok"] = True
    except torch.cuda.OutOfMemoryError as e:
        result["error"] = str(e).splitlines()[0]
        peak = None
    if peak is not None:
        if weights is not None:
            kinds["weights"] = (weights.raw_bytes, weights.blob_bytes)
        else:
            w = sum(p.numel() * p.element_size() for p in model.parameters())
            kinds["weights"] = (w, w)
        kinds["optimizer states"] = opt.state_bytes() if hasattr(opt, "state_bytes") else \
            (lambda n: (n, n))(sum(t.numel() * t.element_size() for s in opt.state.values()
                                   for t in s.values() if torch.is_tensor(t) and t.dim() > 0))
        result.update(peak_sum=peak.peak_sum, peak_self=peak.peak_by_pid.get(os.getpid(), 0),
                      peak_device=peak.peak_device, max_reserved=torch.cuda.max_memory_reserved(dev),
                      losses=[float(x).hex() for x in losses], step_ms=times, kinds=kinds, params=n_params,
                      rebuilds=codec.rebuilds, phase_peaks=phase_peaks)
        if a.cap_gib and a.contexts and peak.peak_sum > result["cap_bytes"]:
            result.update(ok=False, error=f"summed memory {peak.peak_sum} above the cap")
    with open(a.json, "w") as f:
        json.dump(result, f)


# ---- the parent: every mode in turn, then the report ---------------------------------------------------------

def child(a, mode, context, steps, warmup, contexts=""):
    path = os.path.join(a.out, f"{a.model}-{mode}-{context}{'-search' if contexts else ''}.json")
    cmd = [sys.executable, __file__, "--model", a.model, "--child", mode, "--json", path, "--context", str(context),
           "--batch", str(a.batch), "--steps", str(steps), "--warmup", str(warmup), "--cap-gib", str(a.cap_gib),
           "--contexts", contexts, "--min-bytes", str(a.min_bytes)]
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=a.alloc_conf)
    rc = subprocess.run(cmd, cwd=HERE, env=env).returncode
    if rc != 0 or not os.path.exists(path):
        return dict(mode=mode, context=context, ok=False, error=f"exit {rc}")
    with open(path) as f:
        return json.load(f)


def gib(n):
    return n / (1 << 30)


def report(a, runs):
    base = runs["baseline"]
    print(f"{a.model}: {base.get('params', 0) / 1e6:.1f}M parameters, batch {a.batch}, context {a.context}, "
          f"PYTORCH_CUDA_ALLOC_CONF={a.alloc_conf}")
    print(f"{'mode':<11} {'peak GiB (sum)':>14} {'vs base':>8} {'step ms':>8} {'vs base':>8} {'losses':>9}")
    summary = {}
    for mode, r in runs.items():
        if not r.get("ok"):
            print(f"{mode:<11} failed: {r.get('error')}")
            continue
        ms = statistics.median(r["step_ms"]) if r["step_ms"] else float("nan")
        base_ms = statistics.median(base["step_ms"]) if base.get("step_ms") else float("nan")
        same = r["losses"] == base.get("losses")
        mem = r["peak_sum"] / base["peak_sum"] - 1
        time = ms / base_ms - 1
        summary[mode] = dict(peak_sum=r["peak_sum"], memory_change=mem, step_ms=ms, time_change=time,
                             losses_bitwise=same)
        print(f"{mode:<11} {gib(r['peak_sum']):>14.3f} {mem:>+8.1%} {ms:>8.1f} {time:>+8.1%} "
              f"{'bitwise' if same else 'DIFFER':>9}")
    for mode, r in runs.items():
        if r.get("ok") and r.get("phase_peaks"):
            print(f"  {mode}: peak allocated by phase: " + ", ".join(
                f"{k} {gib(v):.2f} GiB" for k, v in r["phase_peaks"].items()))
    for mode, r in runs.items():
        if r.get("ok") and r.get("kinds"):
            print(f"  {mode}: " + ", ".join(
                f"{k} {gib(held):.2f} GiB (ratio {raw / held if held else 0:.3f}, {held / r['peak_sum']:.0%} of peak)"
                for k, (raw, held) in r["kinds"].items()))
    return summary


def main():
    a = parse()
    if a.model == "all":  # each model in a run of its own, with its own defaults
        rc = 0
        for model, extra in (("gpt162m", []), ("qwen3-4b", ["--contexts", a.contexts or "2048,3072,4096,6144,8192"])):
            rc |= subprocess.run([sys.executable, __file__, "--model", model, "--out", a.out, "--cap-gib",
                                  str(a.cap_gib), "--min-bytes", str(a.min_bytes), "--alloc-conf", a.alloc_conf]
                                 + extra).returncode
        return rc
    if a.child:
        return run_mode(a)
    os.makedirs(a.out, exist_ok=True)
    runs = {mode: child(a, mode, a.context, a.steps, a.warmup) for mode in MODELS[a.model]["modes"]}
    results = dict(model=a.model, batch=a.batch, context=a.context, alloc_conf=a.alloc_conf, runs=runs,
                   summary=report(a, runs))
    ok = all(r.get("ok") for r in runs.values()) and all(s["losses_bitwise"] for s in results["summary"].values())
    if a.contexts:
        longest = {}
        for mode in MODELS[a.model]["modes"]:
            longest[mode] = 0
            for T in (int(t) for t in a.contexts.split(",")):
                r = child(a, mode, T, 1, 1, a.contexts)
                peak = f" (peak {gib(r['peak_sum']):.1f} GiB)" if r.get("peak_sum") else ""
                print(f"  {mode} context {T}: {'fits' if r.get('ok') else r.get('error')}{peak}", flush=True)
                if not r.get("ok"):
                    break
                longest[mode] = T
        results["longest_context"] = longest
        print(f"longest context under {a.cap_gib} GiB summed: " + ", ".join(f"{m} {t}" for m, t in longest.items()))
        if longest.get("baseline"):
            print(f"  lct / baseline: {longest.get('lct', 0) / longest['baseline']:.2f}x")
    with open(os.path.join(a.out, f"train_compressed_{a.model}.json"), "w") as f:
        json.dump(results, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
