"""optim.py — OffloadedAdamW: AdamW whose moments live in lctd between steps, updated through a bounded scratch buffer."""
import functools
from concurrent.futures import ThreadPoolExecutor

import torch

from .client import Batch, LctError, error_code

_LOST = (error_code("LCT_ETIMEDOUT"), error_code("LCT_ECONN"))  # a request whose fate is unknown

_ALIGN = 256  # scratch slots start at multiples of this (any dtype's view, coalesced device access)
_PARTS = 4  # the scratch's parts: a group updating, the next ones fetched, the previous stored
_RAMP = 4  # the first and last groups take at most 1/_RAMP of a part
_MIN_AUTO_SCRATCH = 256 << 20
_UNSUPPORTED = ("amsgrad", "maximize", "capturable", "differentiable")
_CODED = (torch.float32, torch.bfloat16, torch.float16)  # state dtypes lct codes; others go raw


def _aligned(nbytes):
    return (nbytes + _ALIGN - 1) // _ALIGN * _ALIGN


class OffloadedAdamW(torch.optim.Optimizer):
    """torch.optim.AdamW (foreach=False, fused=False) with exp_avg and
    exp_avg_sq kept in lctd instead of in the trainer's memory.

    Each step walks the parameters that have gradients in order, in groups
    of as many as fit in a quarter of a scratch buffer of scratch_bytes on
    their device: it fetches a group's moments from lctd into its part,
    applies the update with the same operations in the same order as
    PyTorch's single-tensor AdamW (so parameters and moments are bitwise
    identical to torch.optim.AdamW's), puts the moments back and moves on.
    The four parts rotate so that the requests overlap the updates: while a
    group updates, a fetcher thread gets the next groups' moments and a
    storer thread puts the previous groups' back, each synchronizing a CUDA
    stream of its own (Client.put_many's stream), so the trainer's stream
    never waits for lctd. A group's moments travel in one request each way
    (Client.get_many, put_many: for CUDA parameters lctd decodes into and
    encodes from the scratch in one GPU pass); the fetcher uses client, the
    storer a second connection (client.clone()). Besides the parameters and
    gradients the trainer holds only the scratch, and only during step(): it
    is taken from and returned to PyTorch's caching allocator, so it reuses
    memory the backward pass freed (for CPU parameters, plus a host copy of a
    tensor in flight on each mover thread). lctd keeps the allocator segments
    it mapped open (up to 64, proto/PROTOCOL.md): after
    torch.cuda.empty_cache() their memory returns only when lctd evicts them
    or stops. A step whose request timed out or lost its connection keeps its
    scratch for good, since lctd may still be writing into it.

    Keys are f"{key_prefix}{i}/exp_avg" and f"{key_prefix}{i}/exp_avg_sq" with
    i the parameter's position across param_groups (as in state_dict); give
    each optimizer sharing an lctd its own key_prefix.

    offload_master_weights: for low-precision parameters. Each parameter's
    float32 master copy (from the parameter at its first step) is kept in lctd
    too, as f"{key_prefix}{i}/master_param"; moments are float32, the update
    runs on the master with the gradient cast to float32, and the parameter
    receives the master rounded to its dtype. This equals torch.optim.AdamW
    run on float32 parameters.

    scratch_bytes: None sizes the scratch to four times the largest
    parameter's need (at least 256 MiB); a parameter needs 3 (4 with master
    weights) slots of its state size. A given size whose quarter cannot hold
    one parameter's need is an error. The requests overlap the updates best
    when a part holds a few hundred MiB.
    """

    def __init__(self, params, client, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
                 key_prefix="opt/", scratch_bytes=None, offload_master_weights=False):
        if isinstance(lr, torch.Tensor) or not 0.0 <= lr:
            raise ValueError(f"lr must be a float >= 0, not {lr!r}")
        if not 0.0 <= eps:
            raise ValueError(f"invalid eps {eps}")
        if not (0.0 <= betas[0] < 1.0 and 0.0 <= betas[1] < 1.0):
            raise ValueError(f"invalid betas {betas}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"invalid weight_decay {weight_decay}")
        if scratch_bytes is not None and scratch_bytes <= 0:
            raise ValueError(f"invalid scratch_bytes {scratch_bytes}")
        # add_param_group, called by Optimizer.__init__, checks against these.
        self.client = client
        self._store_client = None  # the storer's connection (client.clone()), opened at the first step
        self._batches = {}  # ("fetch" or "store", group number): its requests, packed, released between steps
        self._shapes = {}  # parameter index: _shape()
        self._quarantined = []  # scratch of a step whose requests were cut off (lctd may still write it)
        self.key_prefix = key_prefix
        self.offload_master_weights = offload_master_weights
        self._auto_scratch = scratch_bytes is None
        self.scratch_bytes = _MIN_AUTO_SCRATCH if scratch_bytes is None else scratch_bytes
        # The switches name the torch.optim.AdamW path this reproduces, so that
        # AdamW loading this optimizer's state_dict takes that same path.
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=False,
                        maximize=False, foreach=False, fused=False, capturable=False,
                        differentiable=False)
        super().__init__(params, defaults)

    def _state_dtype(self, p):
        return torch.float32 if self.offload_master_weights else p.dtype

    def _need(self, p):
        slot = _aligned(p.numel() * self._state_dtype(p).itemsize)
        # m, v and denom; with master weights also the master, and the float32
        # gradient shares denom's slot (it is dead before denom is computed).
        return slot * (4 if self.offload_master_weights else 3)

    def add_param_group(self, param_group):
        super().add_param_group(param_group)  # normalizes params to a list, rejects sets
        try:
            unsupported = [k for k in _UNSUPPORTED if self.param_groups[-1].get(k)]
            if unsupported:
                raise ValueError(f"OffloadedAdamW does not implement {', '.join(unsupported)}")
            for p in self.param_groups[-1]["params"]:
                if torch.is_complex(p) or not p.is_floating_point():
                    raise ValueError(f"OffloadedAdamW takes real floating-point parameters, not {p.dtype}")
                need = self._need(p)
                if need > self._part() and not self._auto_scratch:
                    raise ValueError(f"a parameter of shape {tuple(p.shape)} needs {need} bytes of "
                                     f"scratch, {_PARTS} times that in all; scratch_bytes is {self.scratch_bytes}")
                if need > self._part():
                    self.scratch_bytes = _PARTS * need
        except ValueError:
            self.param_groups.pop()
            raise

    def _key(self, index, name):
        return f"{self.key_prefix}{index}/{name}"

    def _indexed_params(self):
        """(index, group, param), index counting across groups as state_dict does."""
        index = 0
        for group in self.param_groups:
            for p in group["params"]:
                yield index, group, p
                index += 1

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        groups = self._groups()
        if groups:
            self._pipeline(groups)
        return loss

    def _part(self):
        return self.scratch_bytes // _PARTS // _ALIGN * _ALIGN

    def _groups(self):
        """The parameters with gradients, in order, cut into groups of one
        device whose states fit a part of the scratch. The first group and
        the last take at most a quarter of a part (or one parameter): the
        pipeline fills and drains through small requests."""
        groups, batch, used, part = [], [], 0, self._part()
        for index, group, p in self._indexed_params():
            if p.grad is None:
                continue
            if p.grad.is_sparse:
                raise RuntimeError("OffloadedAdamW does not support sparse gradients")
            _, _, dtype, elems, slots, _, _ = self._shape(index, p)
            need = slots * elems * dtype.itemsize
            if need > part:  # a parameter grown since add_param_group
                raise ValueError(f"a parameter of shape {tuple(p.shape)} needs {need} bytes of scratch, "
                                 f"{_PARTS} times that in all; scratch_bytes is {self.scratch_bytes}")
            room = part if groups else part // _RAMP
            if batch and (used + need > room or p.device != batch[0][2].device):
                groups.append(batch)
                batch, used = [], 0
            batch.append((index, group, p, need))
            used += need
        tail, used = [], 0
        while len(batch) > 1 and used + batch[-1][3] <= part // _RAMP:
            used += batch[-1][3]
            tail.insert(0, batch.pop())
        return [g for g in groups + [batch, tail] if g]

    def _pipeline(self, groups):
        """Updates the groups in order, group i in part i % _PARTS of its
        device's scratch, while two mover threads carry the requests: the
        fetcher gets the states of the groups ahead (group i + _PARTS once
        group i is stored), the storer puts each group's back once updated.
        Each mover has its own connection and synchronizes its own CUDA
        stream, which waits for what the part held before (the scratch's
        previous use, ready; a group's update, done), so the trainer's stream
        never stops for lctd."""
        part, plans, scratch = self._part(), [], {}

        def planned(i):
            # Planned just before its fetch: the first fetch waits for one plan only.
            device = groups[i][0][2].device
            if device not in scratch:
                buf = torch.empty(_PARTS * part, dtype=torch.uint8, device=device)
                streams = (None, None)
                if device.type == "cuda":
                    streams = torch.cuda.Stream(device), torch.cuda.Stream(device)
                    # The allocator hands out memory whose last use is queued on the current stream.
                    streams[0].wait_stream(torch.cuda.current_stream(device))
                scratch[device] = buf, streams
            buf, streams = scratch[device]
            plans.append(self._plan(groups[i], buf[i % _PARTS * part:][:part], *streams))
            return i

        if self._store_client is None:
            self._store_client = self.client.clone()
        stored = []

        def send(slot, client, items, stream, put):
            # The same group as last step: its requests are packed already.
            b = self._batches.get(slot)
            if b is not None and b.client is client and [k for k, _ in b.items] == [k for k, _ in items]:
                b.retarget(t for _, t in items)
            else:
                b = self._batches[slot] = Batch(client, items, put)
            b.send(stream)

        def fetch(i):
            plan = plans[i]
            if i >= _PARTS:
                stored[i - _PARTS].result()  # the part is free once its last group is stored
            if plan.fetch:
                send(("fetch", i), self.client, plan.fetch, plan.fetch_stream, put=False)

        def store(i, done):
            plan = plans[i]
            if done is not None:
                plan.store_stream.wait_event(done)
            if plan.coded:
                send(("store", i), self._store_client, plan.coded, plan.store_stream, put=True)
            for key, t in plan.raw:
                self._store_client.put(key, t, dtype="raw")

        try:
            with ThreadPoolExecutor(1, thread_name_prefix="lct-fetch") as fetcher, \
                    ThreadPoolExecutor(1, thread_name_prefix="lct-store") as storer:
                fetched = [fetcher.submit(fetch, planned(i)) for i in range(min(_PARTS, len(groups)))]
                for i in range(len(groups)):
                    fetched[i].result()  # raises a failed fetch, or a failed store of this part
                    plan = plans[i]
                    self._update(plan)
                    done = None
                    if plan.store_stream is not None:
                        done = torch.cuda.Event()
                        done.record(torch.cuda.current_stream(plan.store_stream.device))
                    stored.append(storer.submit(store, i, done))
                    if i + _PARTS < len(groups):
                        fetched.append(fetcher.submit(fetch, planned(i + _PARTS)))
                for f in stored:
                    f.result()
        except LctError as e:
            if e.code in _LOST:
                # lctd may still be writing into the scratch: it never goes back to the allocator.
                self._quarantined += [buf for buf, _ in scratch.values()]
            raise
        finally:
            # The packed requests stay for the next step; the scratch goes back to the allocator.
            for slot in [s for s in self._batches if s[1] >= len(groups)]:
                del self._batches[slot]
            for b in self._batches.values():
                b.release()
            plans.clear()
            scratch.clear()

    def _shape(self, index, p):
        """What a parameter's states take in the scratch, worked out once:
        (param, shape, state dtype, slot elements, slots, keys, coded)."""
        known = self._shapes.get(index)
        if known is not None and known[0] is p and known[1] == p.shape and known[7] == p.dtype:
            return known[:7]
        dtype = self._state_dtype(p)
        slots = 4 if self.offload_master_weights else 3
        names = ("exp_avg", "exp_avg_sq") + (("master_param",) if self.offload_master_weights else ())
        known = (p, p.shape, dtype, _aligned(p.numel() * dtype.itemsize) // dtype.itemsize, slots,
                 tuple(self._key(index, name) for name in names), dtype in _CODED, p.dtype)
        self._shapes[index] = known
        return known[:7]

    def _plan(self, batch, buf, fetch_stream, store_stream):
        """A group's slots in its part of the scratch and its requests."""
        off, typed = 0, {}
        plan = _Plan(fetch_stream, store_stream)
        for index, group, p, _ in batch:
            _, shape, dtype, elems, slots, keys, coded = self._shape(index, p)
            if dtype not in typed:
                base = buf.view(dtype)
                typed[dtype] = base, base.storage_offset()
            base, at = typed[dtype]
            # One view of the parameter's slots, split: m, v, denom (and master).
            views = base.as_strided((slots,) + tuple(shape), (elems,) + _contiguous_strides(shape),
                                    at + off // dtype.itemsize).unbind(0)
            off += slots * elems * dtype.itemsize
            m, v, tmp = views[:3]
            master = views[3] if slots == 4 else None
            fresh = not self.state[p]  # its state is made at its update, when its keys are about to exist
            moved = list(zip(keys, (m, v, master)))
            if not fresh:
                plan.fetch += moved
            (plan.coded if coded else plan.raw).extend(moved)
            plan.work.append((group, p, m, v, tmp, master, fresh))
        return plan

    def _update(self, plan):
        """The AdamW update of a group whose states are in its scratch."""
        for group, p, m, v, tmp, master, fresh in plan.work:
            if fresh:
                # As torch.optim.AdamW initialises: a step counter on the CPU, zero moments.
                self.state[p]["step"] = torch.tensor(0.0, dtype=_scalar_dtype())
                m.zero_()
                v.zero_()
                if master is not None:
                    master.copy_(p)
            if master is None:
                _adamw_step(p, p.grad, m, v, tmp, self.state[p]["step"], group)
            else:
                tmp.copy_(p.grad)
                _adamw_step(master, tmp, m, v, tmp, self.state[p]["step"], group)
                p.copy_(master)

    def _put(self, index, name, t):
        self.client.put(self._key(index, name), t, dtype=None if t.dtype in _CODED else "raw")

    def state_dict(self):
        """As torch.optim.AdamW's (its load_state_dict takes it), with the
        moments (and master_param) fetched from lctd as CPU tensors."""
        sd = super().state_dict()
        names = ["exp_avg", "exp_avg_sq"] + (["master_param"] if self.offload_master_weights else [])
        for index, _, p in self._indexed_params():
            if index not in sd["state"]:
                continue
            entry = dict(sd["state"][index])
            for name in names:
                t = torch.empty(p.shape, dtype=self._state_dtype(p))
                entry[name] = self.client.get(self._key(index, name), out=t)
            sd["state"][index] = entry
        return sd

    def load_state_dict(self, state_dict):
        """Takes a state_dict of this class or of torch.optim.AdamW: the steps
        and hyperparameters stay here, the moments go to lctd."""
        for group in state_dict["param_groups"]:
            unsupported = [k for k in _UNSUPPORTED if group.get(k)]
            if group.get("decoupled_weight_decay") is False:
                unsupported.append("L2 weight decay (Adam)")
            if unsupported:
                raise ValueError(f"OffloadedAdamW cannot continue a state with {', '.join(unsupported)}")
        moments = state_dict["state"]
        # Only the steps pass through Optimizer's loader: the moments would be
        # moved to the parameters' devices in full. Steps are copied: the
        # loader would share them with state_dict, and steps count in place.
        slim = dict(state_dict, state={i: {"step": torch.tensor(float(s["step"]), dtype=_scalar_dtype())}
                                       for i, s in moments.items()})
        super().load_state_dict(slim)
        for index, _, p in self._indexed_params():
            if index not in moments:
                continue
            s = moments[index]
            dtype = self._state_dtype(p)
            self._put(index, "exp_avg", s["exp_avg"].to(dtype))
            self._put(index, "exp_avg_sq", s["exp_avg_sq"].to(dtype))
            if self.offload_master_weights:
                master = s.get("master_param")
                self._put(index, "master_param", (master if master is not None else p).to(torch.float32))


class _Plan:
    """One group's requests: states to fetch into the scratch, and to store
    from it (coded by lctd, or raw), with the streams the movers synchronize."""

    def __init__(self, fetch_stream, store_stream):
        self.fetch_stream, self.store_stream = fetch_stream, store_stream
        self.fetch, self.coded, self.raw, self.work = [], [], [], []


@functools.lru_cache(maxsize=1024)
def _contiguous_strides(shape):
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def _scalar_dtype():
    """The dtype of torch's step counters (torch.optim.optimizer._get_scalar_dtype)."""
    return torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32


def _adamw_step(param, grad, exp_avg, exp_avg_sq, denom, step_t, group):
    """One AdamW update, operation for operation as torch/optim/adam.py's
    _single_tensor_adam with decoupled_weight_decay (no amsgrad, maximize,
    capturable or differentiable), checked against torch 2.11. denom is
    scratch for the denominator; it may alias grad, which is dead by then."""
    lr, (beta1, beta2) = group["lr"], group["betas"]
    weight_decay, eps = group["weight_decay"], group["eps"]
    step_t += 1
    if weight_decay != 0:
        param.mul_(1 - lr * weight_decay)
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
    step = step_t.item()
    bias_correction1 = 1 - beta1**step
    bias_correction2 = 1 - beta2**step
    step_size = lr / bias_correction1
    bias_correction2_sqrt = bias_correction2**0.5
    # torch computes (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps) in
    # fresh tensors; the same kernels write into denom here.
    torch.sqrt(exp_avg_sq, out=denom)
    denom.div_(bias_correction2_sqrt).add_(eps)
    param.addcdiv_(exp_avg, denom, value=-step_size)
