"""optim.py — OffloadedAdamW: AdamW whose moments live in lctd between steps, updated through a bounded scratch buffer."""
from concurrent.futures import ThreadPoolExecutor

import torch

from ._shard import local
from .batch import Batch, failure
from .client import Client
from .errors import LctError, canceled, error_code

_LOST = (error_code("LCT_ETIMEDOUT"), error_code("LCT_ECONN"))  # a request whose fate is unknown

_ALIGN = 256  # scratch slots start at multiples of this (any dtype's view, coalesced device access)
_PARTS = 4  # the scratch's parts: a group updating, the next ones fetched, the previous stored
_FIRST = 16  # the first group takes at most 1/_FIRST of a part, each next twice as much as the one before
_TAIL = 4  # the last group takes at most 1/_TAIL of a part
_MIN_AUTO_SCRATCH = 256 << 20
_UNSUPPORTED = ("amsgrad", "maximize", "capturable", "differentiable")
_CODED = (torch.float32, torch.bfloat16, torch.float16)  # state dtypes lct codes; others go raw
# The multi-tensor operations of the CUDA update (_adamw_run); a torch without them updates tensor by tensor.
_FOREACH = hasattr(torch, "_foreach_lerp_") and hasattr(torch, "_foreach_copy_")


def _aligned(nbytes):
    return (nbytes + _ALIGN - 1) // _ALIGN * _ALIGN


class OffloadedAdamW(torch.optim.Optimizer):
    """torch.optim.AdamW (foreach=False, fused=False) with exp_avg and
    exp_avg_sq kept in lctd instead of in the trainer's memory.

    Each step walks the parameters that have gradients in order, in groups
    of as many as fit in a quarter of a scratch buffer of scratch_bytes on
    their device: it fetches a group's moments from lctd into its part,
    applies the update with the same operations in the same order as
    PyTorch's single-tensor AdamW, on CUDA each one multi-tensor kernel over
    the group's parameters of one parameter group, step count and dtype (so
    parameters and moments are bitwise identical to
    torch.optim.AdamW(foreach=False)'s, checked with torch 2.11, in a few
    launches per group instead of a few per parameter), puts the moments
    back and moves on.
    The four parts rotate so that the requests overlap the updates: while a
    group updates, the next groups' moments are fetched and the previous
    groups' put back, in the background. A group's moments travel in one
    request each way (for CUDA parameters lctd decodes into and encodes from
    the scratch in one GPU pass): for CUDA tensors a job on liblct's own
    threads (lct.Batch.submit) that waits for a CUDA event of the trainer's
    stream and for the job that frees its part, so that neither the
    trainer's thread nor its stream waits for lctd; for other values two
    mover threads of this optimizer. Fetches use client, stores a second
    connection (client.clone()). The first groups are small and grow (the
    pipeline fills quickly); step() returns once the last group is updated,
    its moments on their way back while the trainer goes on. The next
    step(), state_dict(), load_state_dict() and flush() wait for them (and
    raise what failed storing them): call flush() before reading the moments
    from lctd some other way.
    Besides the parameters and gradients the trainer holds only the scratch,
    from the start of step() until the last group is stored: it is taken from
    and returned to PyTorch's caching allocator, so it reuses memory the
    backward pass freed (for CPU parameters, plus a host copy of a tensor in
    flight on each mover thread). lctd keeps the allocator segments
    it mapped open (up to 64, proto/PROTOCOL.md): after
    torch.cuda.empty_cache() their memory returns only when lctd evicts them
    or stops. A step whose request timed out or lost its connection keeps its
    scratch for good, since lctd may still be writing into it.

    Keys are f"{key_prefix}{i}/exp_avg" and f"{key_prefix}{i}/exp_avg_sq" with
    i the parameter's position across param_groups (as in state_dict); give
    each optimizer sharing an lctd its own key_prefix.

    A parameter that is a DTensor (FSDP2's fully_shard, tensor parallelism)
    keeps the states of its local shard, which is all its rank updates:
    under DDP or FSDP each rank runs its own OffloadedAdamW with its own
    key_prefix (lct.Client.for_rank() picks the rank's lctd). state_dict()
    holds those shards as plain tensors.

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
        if not isinstance(client, Client):
            raise TypeError(f"OffloadedAdamW keeps its states in one lctd: it takes an lct.Client, not {client!r} "
                            "(lct.Client.for_rank() picks a rank's lctd from $LCT_ENDPOINTS)")
        # add_param_group, called by Optimizer.__init__, checks against these.
        self.client = client
        self._store_client = None  # the stores' connection (client.clone()), opened at the first step
        self._movers = None  # threads for requests that are not liblct jobs, and for each step's end
        self._pending = None  # the end of the last step, on a mover thread: flush() waits for it
        self._layout = None  # (the step's parameter indices, its groups' _Layouts), while the step's shape holds
        # Group number: (keys, Batch), its requests packed once, released at the end of each step.
        self._fetches, self._stores = {}, {}
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

    def _state_names(self):
        """The states a parameter keeps in lctd, each a key."""
        return ("exp_avg", "exp_avg_sq") + (("master_param",) if self.offload_master_weights else ())

    def _slot_bytes(self, p):
        return _aligned(local(p).numel() * self._state_dtype(p).itemsize)

    def _need(self, p):
        # A slot per state and one for denom (with master weights the float32
        # gradient shares denom's: it is dead before denom is computed).
        return self._slot_bytes(p) * (len(self._state_names()) + 1)

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
                    raise ValueError(f"a parameter of shape {tuple(local(p).shape)} needs {need} bytes of "
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
        self.flush()
        groups = self._groups()
        if groups:
            self._pipeline(groups)
        return loss

    def _part(self):
        return self.scratch_bytes // _PARTS // _ALIGN * _ALIGN

    def _groups(self):
        """The parameters with gradients, in order, cut into groups of one
        device whose states fit a part of the scratch, as _Layouts. The first
        group takes at most 1/_FIRST of a part (or one parameter), each next
        one twice as much, the last at most 1/_TAIL: the pipeline fills
        through small requests, and the last group's store, which the step
        does not wait for, holds the scratch briefly. Worked out again only
        when the parameters with gradients, or their shapes or dtypes,
        change."""
        present = []
        for index, group, p in self._indexed_params():
            if p.grad is None:
                continue
            if p.grad.is_sparse:
                raise RuntimeError("OffloadedAdamW does not support sparse gradients")
            # Cached entries hold p and its group: their ids stay their own (load_state_dict makes new groups).
            present.append((index, id(p), id(group), local(p).shape, p.dtype, p.device))
        part = self._part()
        present = tuple(present), part
        if self._layout is not None and self._layout[0] == present:
            return self._layout[1]
        params = {index: (group, p) for index, group, p in self._indexed_params()}
        groups, batch, used = [], [], 0
        for index, *_ in present[0]:
            group, p = params[index]
            need = self._need(p)
            if need > part:  # a parameter grown since add_param_group
                raise ValueError(f"a parameter of shape {tuple(local(p).shape)} needs {need} bytes of scratch, "
                                 f"{_PARTS} times that in all; scratch_bytes is {self.scratch_bytes}")
            room = min(part, part // _FIRST << len(groups))
            if batch and (used + need > room or p.device != batch[0][2].device):
                groups.append(batch)
                batch, used = [], 0
            batch.append((index, group, p, need))
            used += need
        tail, used = [], 0
        while len(batch) > 1 and used + batch[-1][3] <= part // _TAIL:
            used += batch[-1][3]
            tail.insert(0, batch.pop())
        layouts = [self._group_layout(g) for g in groups + [batch, tail] if g]
        self._layout = present, layouts
        self._fetches.clear()  # packed for other groups
        self._stores.clear()
        return layouts

    def _pipeline(self, groups):
        """Updates the groups in order, group i in part i % _PARTS of its
        device's scratch, while the requests run in the background: group
        i's fetch once the part is free (the scratch just taken, or group
        i - _PARTS stored), its store once its update is done. For CUDA
        tensors they are jobs on liblct's threads (Batch.submit: client for
        fetches, a second connection for stores), which wait on CUDA events
        and on each other, so neither the trainer's thread nor its stream
        waits for lctd beyond the fetch it needs next; other values go
        through this optimizer's two mover threads the same way."""
        part, plans, scratch = self._part(), [], {}
        if self._store_client is None:
            self._store_client = self.client.clone()
        fetched, stored, updated = [], [], []  # jobs, and the CUDA events after each group's update
        holder = {}  # (device, part): the group last in it

        def planned(i):
            # Planned just before its fetch: the first fetch waits for one plan only.
            device = groups[i].device
            if device not in scratch:
                buf = torch.empty(_PARTS * part, dtype=torch.uint8, device=device)
                ready = None
                if device.type == "cuda":
                    # The allocator hands out memory whose last use is queued on the current stream.
                    ready = torch.cuda.Event()
                    ready.record(torch.cuda.current_stream(device))
                scratch[device] = buf, ready
            buf, ready = scratch[device]
            plans.append(self._plan(groups[i], buf[i % _PARTS * part:][:part], ready))
            return plans[-1]

        def fetch(i):
            # The part is free once its last group is stored, which followed
            # that group's update (its event, waited for already); a part not
            # used yet, once the allocator's last use of the scratch is done.
            plan = planned(i)
            last = holder.get((plan.layout.device, i % _PARTS))
            holder[plan.layout.device, i % _PARTS] = i
            after = stored[last] if last is not None else None
            event = updated[last] if last is not None else plan.ready
            if not plan.fetch_keys:
                return after
            b = self._batch(self._fetches, i, self.client, plan.fetch_keys, plan.fetch, put=False)
            return self._start(b, event, after)

        def store(i):
            plan = plans[i]
            event = None
            if plan.layout.device.type == "cuda":
                event = torch.cuda.Event()
                event.record(torch.cuda.current_stream(plan.layout.device))
            updated.append(event)
            job = None
            if plan.coded:
                b = self._batch(self._stores, i, self._store_client, plan.layout.coded_keys, plan.coded, put=True)
                job = self._start(b, event, None)
            if plan.raw:
                items = list(zip(plan.layout.raw_keys, plan.raw))
                try:
                    job = _ThreadJob(self._mover(True), self._put_raw, items, event, job)
                except BaseException:
                    if job is not None:
                        failure(job)  # nothing may still read the scratch when it goes
                    raise
            return job

        def finish(errors, unstored):
            # Ends a step: lets go of the requests' values and of the scratch,
            # which goes back to the allocator unless a request cut off may
            # still be writing into it. The groups in unstored ({group: what
            # failed its store, None when never sent}) were not (all) put
            # back: their parameters made fresh this step lose the state their
            # keys did not get.
            for i, error in unstored.items():
                self._forget_unstored(plans[i], error)
            for batches in (self._fetches, self._stores):
                for _, b in batches.values():
                    b.release()
            if any(isinstance(e, LctError) and e.code in _LOST for e in errors):
                self._quarantined += [buf for buf, _ in scratch.values()]
            plans.clear()
            scratch.clear()

        def finish_last():
            error = failure(stored[-1]) if stored[-1] is not None else None
            finish([error], {len(plans) - 1: error} if error is not None else {})
            if error is not None:
                raise error

        try:
            for i in range(min(_PARTS, len(groups))):
                fetched.append(fetch(i))
            for i in range(len(groups)):
                if fetched[i] is not None:
                    fetched[i].wait()  # raises a failed fetch, or a failed store of this part
                self._update(plans[i])
                stored.append(store(i))
                if i + _PARTS < len(groups):
                    fetched.append(fetch(i + _PARTS))
            for job in stored[:-1]:
                if job is not None:
                    job.wait()
        except BaseException as e:
            # Nothing may touch the scratch once it returns to the allocator;
            # any request cut off keeps it from going back.
            failures = [failure(job) if job is not None else None for job in stored]
            unstored = {i: failures[i] if i < len(stored) else None for i in range(len(plans))
                        if i >= len(stored) or failures[i] is not None}
            finish([e] + [failure(job) for job in fetched if job is not None] + failures, unstored)
            raise
        # The last group's states go back while the trainer goes on; a mover
        # thread then lets go of the scratch, and the next step waits for it.
        self._pending = self._mover(True).submit(finish_last)

    def _batch(self, batches, i, client, keys, values, put):
        """Group i's requests, packed at its first step and retargeted after."""
        known = batches.get(i)
        if known is not None and known[0] == keys:
            known[1].retarget(values)
            return known[1]
        b = Batch(client, zip(keys, values), put)
        batches[i] = keys, b
        return b

    def _start(self, batch, event, after):
        """A request in the background: a job on liblct's thread for a batch
        of CUDA tensors, else on a mover thread (which syncs the event)."""
        if batch.submittable and not isinstance(after, _ThreadJob):
            return batch.submit(event, after)
        return _ThreadJob(self._mover(batch.put), _send_batch, batch, event, after)

    def _mover(self, put):
        """The mover thread for puts or for gets, started at its first use."""
        if self._movers is None:
            self._movers = (ThreadPoolExecutor(1, thread_name_prefix="lct-fetch"),
                            ThreadPoolExecutor(1, thread_name_prefix="lct-store"))
        return self._movers[bool(put)]

    def _forget_unstored(self, plan, error):
        """After plan's store failed with error (None: it was never sent):
        each parameter whose state was made at this step keeps it only if all
        its keys reached lctd (a store of host values may fail part way);
        otherwise a later step starts it afresh instead of fetching keys that
        do not exist. Where the store was never sent or its fate is unknown
        (lctd out of reach) lctd is not asked: each question would wait out
        the client's timeout."""
        ask = error is not None and not (isinstance(error, LctError) and error.code in _LOST)
        for (_, p, *_, fresh), keys in zip(plan.work, plan.layout.entries):
            if fresh and self.state.get(p) and not (ask and self._all_stored(keys[-1])):
                del self.state[p]

    def _all_stored(self, keys):
        """Whether lctd holds every key (False also when it cannot be asked)."""
        try:
            for key in keys:
                self._store_client.stat(key)
        except LctError:
            return False
        return True

    def _put_raw(self, items, event, after):
        _await(event, after)
        for key, t in items:
            self._store_client.put(key, t, dtype="raw")

    def flush(self):
        """Waits until the states of the last step are back in lctd (step()
        returns while its last group's are on their way) and raises what
        failed storing them. step(), state_dict() and load_state_dict() flush
        first."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()  # once: the failed group keeps its previous moments, its steps counted

    def _group_layout(self, batch):
        """Where each parameter of a group keeps its states in a part: its
        slots (m, v, denom, and master) one after the other."""
        layout, off = _Layout(batch[0][2].device), 0
        names = self._state_names()
        for index, group, p, need in batch:
            dtype = self._state_dtype(p)
            slots, elems = len(names) + 1, self._slot_bytes(p) // dtype.itemsize
            keys = tuple(self._key(index, name) for name in names)
            shape = local(p).shape
            layout.entries.append((group, p, (slots,) + tuple(shape), (elems,) + _contiguous_strides(shape),
                                   off // dtype.itemsize, dtype, keys))
            layout.fetch_keys += keys
            (layout.coded_keys if dtype in _CODED else layout.raw_keys).extend(keys)
            off += need
        layout.fetch_keys, layout.coded_keys, layout.raw_keys = (
            tuple(layout.fetch_keys), tuple(layout.coded_keys), tuple(layout.raw_keys))
        return layout

    def _plan(self, layout, buf, ready):
        """A group's states in its part of the scratch (buf), as views, and
        the values of its requests."""
        typed, fetch_keys = {}, []
        plan = _Plan(layout, ready)
        for group, p, size, strides, at, dtype, keys in layout.entries:
            if dtype not in typed:
                base = buf.view(dtype)
                typed[dtype] = base, base.storage_offset()
            base, start = typed[dtype]
            # One view of the parameter's slots, split: m, v, denom (and master).
            views = base.as_strided(size, strides, start + at).unbind(0)
            m, v, tmp = views[:3]
            master = views[3] if len(views) == 4 else None
            moved = (m, v) if master is None else (m, v, master)
            fresh = not self.state.get(p)  # its state is made at its update, when its keys are about to exist
            if not fresh:
                plan.fetch += moved
                fetch_keys += keys
            (plan.coded if dtype in _CODED else plan.raw).extend(moved)
            plan.work.append((group, p, m, v, tmp, master, fresh))
        if len(fetch_keys) < len(layout.fetch_keys):
            plan.fetch_keys = tuple(fetch_keys)
        return plan

    def _update(self, plan):
        """The AdamW update of a group whose states are in its scratch: its
        parameters in runs that share a parameter group, a step count and
        dtypes (multi-tensor kernels take one dtype per launch), each run
        updated by _adamw_run, on CUDA with multi-tensor kernels."""
        runs = {}
        for group, p, m, v, tmp, master, fresh in plan.work:
            if fresh:
                # As torch.optim.AdamW initialises: a step counter on the CPU, zero moments.
                self.state[p]["step"] = torch.tensor(0.0, dtype=_scalar_dtype())
                m.zero_()
                v.zero_()
                if master is not None:
                    master.copy_(local(p))
            step_t = self.state[p]["step"]
            _, run = runs.setdefault((id(group), step_t.item(), p.dtype, p.grad.dtype), (group, []))
            run.append((local(p), local(p.grad), m, v, tmp, master, step_t))
        ops = torch if plan.layout.device.type == "cuda" and _FOREACH else _PerTensor
        for group, run in runs.values():
            params, grads, ms, vs, tmps, masters, steps = (list(x) for x in zip(*run))
            torch._foreach_add_(steps, 1)
            if masters[0] is None:
                _adamw_run(ops, params, grads, ms, vs, tmps, steps[0].item(), group)
            else:
                ops._foreach_copy_(tmps, grads)
                _adamw_run(ops, masters, tmps, ms, vs, tmps, steps[0].item(), group)
                ops._foreach_copy_(params, masters)

    def _put(self, index, name, t):
        self.client.put(self._key(index, name), t, dtype=None if t.dtype in _CODED else "raw")

    def state_dict(self):
        """As torch.optim.AdamW's (its load_state_dict takes it), with the
        moments (and master_param) fetched from lctd as CPU tensors."""
        self.flush()
        sd = super().state_dict()
        for index, _, p in self._indexed_params():
            if not sd["state"].get(index):
                sd["state"].pop(index, None)  # no state yet (an empty one is what looking it up leaves)
                continue
            entry = dict(sd["state"][index])
            for name in self._state_names():
                t = torch.empty(local(p).shape, dtype=self._state_dtype(p))
                entry[name] = self.client.get(self._key(index, name), out=t)
            sd["state"][index] = entry
        return sd

    def resume(self, step):
        """Takes the states lctd holds under key_prefix as this fresh
        optimizer's, every parameter at step `step` (as after `step` steps in
        which each had a gradient): what a restarted trainer (an elastic
        restart, say) calls instead of loading a checkpoint, with its
        parameters as they were after that step. lctd must hold the states
        of that step: those of the last step() flushed (flush()) before the
        trainer stopped. NotFoundError names a missing key; nothing is
        changed then."""
        self.flush()
        params = list(self._indexed_params())
        for index, _, p in params:
            for name in self._state_names():
                info = self.client.stat(self._key(index, name))
                if info.raw_bytes != local(p).numel() * self._state_dtype(p).itemsize:
                    raise ValueError(f"{self._key(index, name)} holds {info.raw_bytes} bytes, not the "
                                     f"{tuple(local(p).shape)} {self._state_dtype(p)} state of parameter {index}")
        for _, _, p in params:
            self.state[p] = {"step": torch.tensor(float(step), dtype=_scalar_dtype())}

    def load_state_dict(self, state_dict):
        """Takes a state_dict of this class or of torch.optim.AdamW: the steps
        and hyperparameters stay here, the moments go to lctd. A state that
        does not fit the parameters changes nothing (ValueError); a put that
        fails part way raises, and each parameter keeps the step of the
        moments lctd holds for it: the loaded ones before it, its own after
        it, while the one it failed on starts afresh."""
        self.flush()
        for group in state_dict["param_groups"]:
            unsupported = [k for k in _UNSUPPORTED if group.get(k)]
            if group.get("decoupled_weight_decay") is False:
                unsupported.append("L2 weight decay (Adam)")
            if unsupported:
                raise ValueError(f"OffloadedAdamW cannot continue a state with {', '.join(unsupported)}")
        moments = state_dict["state"]
        # Every state checked before anything is replaced: a bad one leaves this optimizer as it was.
        params = {index: p for index, _, p in self._indexed_params()}
        for index, st in moments.items():
            p = params.get(index)
            if p is None:
                continue  # the parameter groups disagree: the loader below says so
            for name in ("step", "exp_avg", "exp_avg_sq") + (("master_param",) if "master_param" in st else ()):
                t = st.get(name)
                if t is None:
                    raise ValueError(f"the state of parameter {index} has no {name}")
                if name != "step" and tuple(local(t).shape) != tuple(local(p).shape):
                    raise ValueError(f"the {name} of parameter {index} has shape {tuple(local(t).shape)}, "
                                     f"the parameter {tuple(local(p).shape)}")
        # Only the steps pass through Optimizer's loader: the moments would be
        # moved to the parameters' devices in full. Steps are copied: the
        # loader would share them with state_dict, and steps count in place.
        slim = dict(state_dict, state={i: {"step": torch.tensor(float(s["step"]), dtype=_scalar_dtype())}
                                       for i, s in moments.items()})
        indexed = list(self._indexed_params())
        previous = [self.state.get(p) for _, _, p in indexed]
        super().load_state_dict(slim)
        for k, (index, _, p) in enumerate(indexed):
            if index not in moments:
                continue
            s = moments[index]
            dtype = self._state_dtype(p)
            try:
                self._put(index, "exp_avg", local(s["exp_avg"]).to(dtype))
                self._put(index, "exp_avg_sq", local(s["exp_avg_sq"]).to(dtype))
                if self.offload_master_weights:
                    master = s.get("master_param")
                    self._put(index, "master_param", local(master if master is not None else p).to(torch.float32))
            except BaseException:
                self.state.pop(p, None)
                for (_, _, q), state in zip(indexed[k + 1:], previous[k + 1:]):
                    self.state.pop(q, None)
                    if state:
                        self.state[q] = state
                raise


class _Layout:
    """A group's parameters and their places in a part of the scratch:
    (param group, param, view size, view strides, element offset, state
    dtype, keys) each; the keys it fetches, and those it stores coded and
    raw."""

    def __init__(self, device):
        self.device = device
        self.entries, self.fetch_keys, self.coded_keys, self.raw_keys = [], [], [], []


class _Plan:
    """One group's step: its states' views in the scratch, the values its
    requests fetch and store, and the CUDA event after which the scratch is
    free (None on the CPU)."""

    def __init__(self, layout, ready):
        self.layout, self.ready = layout, ready
        self.fetch_keys = layout.fetch_keys
        self.fetch, self.coded, self.raw, self.work = [], [], [], []


class _ThreadJob:
    """A request on a mover thread, waited for like a Job: fn(*args, event,
    after) runs after the job `after` (if any) succeeded."""

    def __init__(self, executor, fn, *args):
        self._future = executor.submit(fn, *args)

    def wait(self):
        self._future.result()


def _await(event, after):
    """On a mover thread, what a liblct job waits for before its request:
    the job after (its failure cancels this one), then the CUDA event."""
    cause = failure(after) if after is not None else None
    if cause is not None:
        raise canceled(cause)
    if event is not None:
        event.synchronize()


def _send_batch(batch, event, after):
    _await(event, after)
    batch.send()


def _contiguous_strides(shape):
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def _scalar_dtype():
    """The dtype of torch's step counters (torch.optim.optimizer._get_scalar_dtype)."""
    return torch.float64 if torch.get_default_dtype() == torch.float64 else torch.float32


def _adamw_run(ops, params, grads, exp_avgs, exp_avg_sqs, denoms, step, group):
    """The AdamW update of tensors at the same step of one parameter group,
    operation for operation as torch/optim/adam.py's _single_tensor_adam with
    decoupled_weight_decay (no amsgrad, maximize, capturable or
    differentiable), checked against torch 2.11, each operation over the
    whole run through ops: torch's multi-tensor kernels for CUDA tensors
    (the same elementwise arithmetic, so the same bits, in a few launches
    instead of a few per tensor), _PerTensor for others (on the CPU the
    multi-tensor ops round a scalar to a bfloat16 tensor's dtype first,
    where the single-tensor ones do not). denoms is scratch for the
    denominators; it may alias grads, which are dead by then."""
    lr, (beta1, beta2) = group["lr"], group["betas"]
    weight_decay, eps = group["weight_decay"], group["eps"]
    if weight_decay != 0:
        ops._foreach_mul_(params, 1 - lr * weight_decay)
    ops._foreach_lerp_(exp_avgs, grads, 1 - beta1)
    ops._foreach_mul_(exp_avg_sqs, beta2)
    ops._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1 - beta2)
    bias_correction1 = 1 - beta1**step
    bias_correction2 = 1 - beta2**step
    step_size = lr / bias_correction1
    bias_correction2_sqrt = bias_correction2**0.5
    # torch computes (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps) in
    # fresh tensors; the same kernels work in the denoms here.
    ops._foreach_copy_(denoms, exp_avg_sqs)
    ops._foreach_sqrt_(denoms)
    ops._foreach_div_(denoms, bias_correction2_sqrt)
    ops._foreach_add_(denoms, eps)
    ops._foreach_addcdiv_(params, exp_avgs, denoms, value=-step_size)


class _PerTensor:
    """The torch._foreach_* operations _adamw_run uses, one tensor at a time."""

    @staticmethod
    def _foreach_mul_(xs, scalar):
        for x in xs:
            x.mul_(scalar)

    @staticmethod
    def _foreach_lerp_(xs, ends, weight):
        for x, end in zip(xs, ends):
            x.lerp_(end, weight)

    @staticmethod
    def _foreach_addcmul_(xs, t1s, t2s, value):
        for x, t1, t2 in zip(xs, t1s, t2s):
            x.addcmul_(t1, t2, value=value)

    @staticmethod
    def _foreach_copy_(xs, srcs):
        for x, src in zip(xs, srcs):
            x.copy_(src)

    @staticmethod
    def _foreach_sqrt_(xs):
        for x in xs:
            x.sqrt_()

    @staticmethod
    def _foreach_div_(xs, scalar):
        for x in xs:
            x.div_(scalar)

    @staticmethod
    def _foreach_add_(xs, scalar):
        for x in xs:
            x.add_(scalar)

    @staticmethod
    def _foreach_addcdiv_(xs, t1s, t2s, value):
        for x, t1, t2 in zip(xs, t1s, t2s):
            x.addcdiv_(t1, t2, value=value)
