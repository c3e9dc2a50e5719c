"""adamw.py — CompressedAdamW: torch's fused AdamW whose moments (and fp32 master weights) stay LCT-compressed on
the parameters' device between steps, decoded into bounded scratch for the update."""
import importlib
import inspect

import torch

from .._shard import local
from ._codec import CODED, Packed, default_codec

_STATES = ("exp_avg", "exp_avg_sq", "master")


def _fused_adamw():
    """torch's functional AdamW, the one torch.optim.AdamW(fused=True).step() calls."""
    fn = getattr(importlib.import_module("torch.optim.adamw"), "adamw", None)
    if fn is None or "fused" not in inspect.signature(fn).parameters:
        raise RuntimeError(f"CompressedAdamW needs a torch with fused AdamW (2.0 or later); this is {torch.__version__}")
    return fn


class CompressedAdamW(torch.optim.Optimizer):
    """torch.optim.AdamW(fused=True) with exp_avg and exp_avg_sq held as LCT blobs between steps.

    Each step walks the parameters that have gradients in groups whose decoded states fit in scratch_bytes:
    it decodes a group's moments on their device, applies torch's fused AdamW to the group (the same function
    torch.optim.AdamW(fused=True) calls, so parameters and moments are bitwise equal to its), encodes the
    moments again and moves on. States of parameters under min_bytes stay as plain tensors.

    master_weights=True, for parameters of a 16-bit dtype: the update runs on an fp32 master copy (also held
    compressed), from the gradient cast to fp32, and the parameter takes the master's value rounded to its
    dtype: the mixed-precision regime of bf16 weights and gradients with fp32 states.

    weights: the CompressedParameters holding these parameters, if any: each group's parameters are decoded
    for the update and encoded again after it.

    A parameter that is a DTensor (FSDP2's fully_shard) keeps the states of its local shard, the part its rank
    updates, as plain tensors (state_dict() returns them so).
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, *, codec=None,
                 weights=None, master_weights=False, scratch_bytes=512 << 20, min_bytes=1 << 16):
        self._adamw = _fused_adamw()
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        self.codec = codec or default_codec()
        self.weights, self.master_weights = weights, master_weights
        self.scratch_bytes, self.min_bytes = scratch_bytes, min_bytes
        self._index = {}  # id(parameter) -> its number in the order first stepped

    def _has_master(self, p):
        return self.master_weights and p.dtype != torch.float32

    def _state_bytes(self, p):
        """Bytes of p's decoded states: the moments, and the fp32 master where there is one."""
        n = local(p).numel()
        return 3 * n * 4 if self._has_master(p) else 2 * n * p.element_size()

    def _groups(self, params):
        group, size = [], 0
        for p in params:
            need = self._state_bytes(p)
            if group and size + need > self.scratch_bytes:
                yield group
                group, size = [], 0
            group.append(p)
            size += need
        if group:
            yield group

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for params in self._groups([p for p in group["params"] if p.grad is not None]):
                self._update(group, params)
        return loss

    def _init_state(self, p):
        state = self.state[p]
        state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
        if self._has_master(p):
            state["master"] = local(p).detach().to(torch.float32, copy=True)
        like = state.get("master", local(p))
        state["exp_avg"] = torch.zeros_like(like, memory_format=torch.preserve_format)
        state["exp_avg_sq"] = torch.zeros_like(like, memory_format=torch.preserve_format)

    def _compressed(self, t):
        return t.dtype in CODED and t.numel() * t.element_size() >= self.min_bytes and t.is_contiguous()

    def _update(self, group, params):
        if self.weights is not None:
            self.weights.decode(params)
        for p in params:
            if not self.state[p]:
                self._init_state(p)
        states = [self.state[p] for p in params]
        held = [(s, k) for s in states for k in _STATES if isinstance(s.get(k), Packed)]
        for (s, k), t in zip(held, self.codec.decode([s[k] for s, k in held])):
            s[k] = t

        shards = [local(p) for p in params]
        targets = [s.get("master", p) for p, s in zip(shards, states)]
        grads = [local(p.grad) for p in params]
        grads = [g.to(torch.float32) if "master" in s else g for g, s in zip(grads, states)]
        beta1, beta2 = group["betas"]
        self._adamw(targets, grads, [s["exp_avg"] for s in states], [s["exp_avg_sq"] for s in states], [],
                    [s["step"] for s in states], fused=True, amsgrad=False, beta1=beta1, beta2=beta2,
                    lr=group["lr"], weight_decay=group["weight_decay"], eps=group["eps"], maximize=False)
        for p, s in zip(shards, states):
            if "master" in s:
                p.copy_(s["master"])

        todo = [(p, s, k) for p, s in zip(params, states) for k in _STATES
                if k in s and self._compressed(s[k])]
        # A role per state of each parameter (and its dtype: codecs may be shared by optimizers).
        roles = [(k, self._index.setdefault(id(p), len(self._index)), str(s[k].dtype)) for p, s, k in todo]
        for (p, s, k), packed in zip(todo, self.codec.encode([s[k] for _, s, k in todo], roles)):
            s[k] = packed
        if self.weights is not None:
            self.weights.encode(params)

    def state_bytes(self):
        """(raw bytes, bytes held) of the moments and master weights."""
        raw = held = 0
        for s in self.state.values():
            for k in _STATES:
                v = s.get(k)
                if isinstance(v, Packed):
                    raw, held = raw + v.raw_bytes, held + v.nbytes
                elif v is not None:
                    raw, held = raw + v.numel() * v.element_size(), held + v.numel() * v.element_size()
        return raw, held

    def load_state_dict(self, state_dict):
        """torch's, but the fp32 master weights and moments of 16-bit parameters keep their dtype (torch would
        cast them to the parameter's), and states saved as DTensors (torch.optim.AdamW under FSDP2) become their
        local shards; they are compressed again at the next step."""
        super().load_state_dict(state_dict)
        ids = [i for g in state_dict["param_groups"] for i in g["params"]]
        params = [p for g in self.param_groups for p in g["params"]]
        for i, p in zip(ids, params):
            saved, state = state_dict["state"].get(i, {}), self.state.get(p)
            for k in _STATES:
                if k in saved and torch.is_tensor(saved[k]) and saved[k].dtype != p.dtype:
                    state[k] = local(saved[k]).to(device=p.device, copy=True)
                elif state is not None and torch.is_tensor(state.get(k)):
                    state[k] = local(state[k])

    def state_dict(self):
        """torch's optimizer state dict with every state decoded (what torch.optim.AdamW would hold)."""
        sd = super().state_dict()
        sd["state"] = {i: {k: self.codec.decode([v])[0] if isinstance(v, Packed) else v for k, v in s.items()}
                       for i, s in sd["state"].items()}
        return sd
