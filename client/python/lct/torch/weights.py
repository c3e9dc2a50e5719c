"""weights.py — CompressedParameters: a module's parameters held as LCT blobs between uses, decoded just before
the forward of the module that owns them and for the backward operations that saved them."""
import contextlib

import torch

from . import _saved
from ._codec import CODED, default_codec


class _Weight:
    __slots__ = ("param", "role", "packed", "placeholder", "live")

    def __init__(self, param, name):
        self.param, self.role, self.packed, self.live = param, ("param", name), None, False
        # Same shape, dtype and device, one element of memory: what the parameter shows between uses. It is
        # NaN, so that a use the hooks did not see (a parent module reading a child's weight) is loud.
        self.placeholder = torch.full((1,) * param.dim(), float("nan"), dtype=param.dtype,
                                      device=param.device).expand(param.shape)


class _ParameterView(_saved.Handle):
    """A saved (view of a) compressed parameter: decoded again when backward needs it."""
    __slots__ = ("params", "weight", "dtype", "size", "stride", "offset")

    def __init__(self, params, weight, t):
        self.params, self.weight, self.dtype = params, weight, t.dtype
        self.size, self.stride, self.offset = t.size(), t.stride(), t.storage_offset()

    def unpack(self):
        whole = self.params.codec.decode([self.weight.packed])[0]
        if self.dtype != whole.dtype:  # a view of the parameter's bytes as another dtype
            whole = whole.view(self.dtype)
        return whole.as_strided(self.size, self.stride, self.offset)


class CompressedParameters:
    """Holds a module's parameters (of a coded dtype, contiguous, of at least min_bytes) as LCT blobs.

    Between uses a parameter's .data is a one-element NaN placeholder expanded to its shape, so shape, dtype
    and device read as before (and state_dict() holds the decoded values). A forward pre-hook on each module
    decodes its own parameters; its forward hook puts the placeholders back: code that reads a parameter
    outside its own module's forward must do so inside `materialized()`. A parameter that an operation saves
    for backward is saved as a reference to its blob and decoded when backward needs it. The values are
    exact, so losses and gradients are bitwise those of the module without it.

    After the parameters change, they must be encoded again: CompressedAdamW(weights=this) does so within
    its step (decode, update, encode, one bounded group at a time); for any other optimizer, step inside
    `with params.materialized():`.
    """

    def __init__(self, module, codec=None, min_bytes=1 << 16):
        self.module, self.codec = module, codec or default_codec()
        self._weights = {}  # id(param) -> _Weight
        self._live = {}  # storage address of a decoded parameter -> its _Weight
        for name, p in module.named_parameters():
            if p.dtype in CODED and p.is_contiguous() and p.numel() * p.element_size() >= min_bytes:
                self._weights[id(p)] = w = _Weight(p, name)
                w.live = True  # its .data holds its values until the first encode
        self._encode(list(self._weights.values()))
        self._hooks, self._pushed, self._depth = [], False, 0
        self._hooks.append(module.register_forward_pre_hook(self._reset))
        for m in module.modules():
            own = [(name, self._weights[id(p)]) for name, p in m._parameters.items()
                   if p is not None and id(p) in self._weights]
            if own or m is module:
                weights = [w for _, w in own]
                self._hooks.append(m.register_forward_pre_hook(lambda mod, args, ws=weights: self._enter(ws)))
                self._hooks.append(m.register_forward_hook(lambda mod, args, out, ws=weights: self._exit(ws)))
            if own:
                self._hooks.append(m._register_state_dict_hook(
                    lambda mod, sd, prefix, meta, own=own: self._state_dict(own, sd, prefix)))
        _saved.register_parameters(self)

    def weight(self, p):
        return self._weights.get(id(p))

    @property
    def raw_bytes(self):
        return sum(w.packed.raw_bytes for w in self._weights.values())

    @property
    def blob_bytes(self):
        return sum(w.packed.nbytes for w in self._weights.values())

    def handle(self, t):
        """A handle for t if it views a decoded parameter of this set."""
        w = self._live.get(_saved.storage_address(t)) if t.layout == torch.strided else None
        return _ParameterView(self, w, t) if w is not None else None

    # A module's forward, entered from the root or called directly (a checkpoint's recomputation), decodes its
    # own parameters; outside a compressed_activations context the outermost one also installs hooks that save
    # parameters as references. A root forward that raised left them installed: the next one starts afresh.
    def _reset(self, module, args):
        if self._pushed:
            torch._C._autograd._pop_saved_tensors_default_hooks()
        self._pushed, self._depth = False, 0

    def _enter(self, weights):
        if self._depth == 0 and not _saved.activation_stack():
            torch._C._autograd._push_saved_tensors_default_hooks(self._pack, _saved.unpack)
            self._pushed = True
        self._depth += 1
        self._decode(weights)

    def _exit(self, weights):
        self._release(weights)
        self._depth -= 1
        if self._depth == 0 and self._pushed:
            torch._C._autograd._pop_saved_tensors_default_hooks()
            self._pushed = False

    def _state_dict(self, own, state_dict, prefix):
        """A module's state_dict holds its parameters' values, not their placeholders."""
        for name, w in own:
            if not w.live and prefix + name in state_dict:
                state_dict[prefix + name] = self.codec.decode([w.packed])[0]

    def _pack(self, t):
        handle = self.handle(t)
        return handle if handle is not None else t

    def _decode(self, weights):
        todo = [w for w in weights if not w.live]
        for w, data in zip(todo, self.codec.decode([w.packed for w in todo])):
            w.param.data = data
            w.live = True
            self._live[_saved.storage_address(data)] = w

    def _release(self, weights):
        for w in weights:
            if w.live:
                self._live.pop(_saved.storage_address(w.param.data), None)
                w.param.data = w.placeholder
                w.live = False

    def _encode(self, weights):
        """Encodes the decoded parameters' current values and puts their placeholders in place."""
        weights = [w for w in weights if w.live]
        if not weights:
            return
        packed = self.codec.encode([w.param.data for w in weights], [w.role for w in weights])
        for w, p in zip(weights, packed):
            w.packed = p
        self._release(weights)

    def decode(self, params):
        """Decodes these parameters (those it holds) into their .data, for an update."""
        self._decode([w for p in params if (w := self.weight(p)) is not None])

    def encode(self, params):
        """Encodes these parameters (those it holds) again after an update, releasing their .data."""
        self._encode([w for p in params if (w := self.weight(p)) is not None])

    @contextlib.contextmanager
    def materialized(self):
        """Every parameter decoded within; encoded again on exit (after an optimizer changed them)."""
        weights = list(self._weights.values())
        self._decode(weights)
        try:
            yield
        finally:
            self._encode(weights)

    def remove(self):
        """Decodes every parameter for good and removes the hooks."""
        self._decode(list(self._weights.values()))
        self._live.clear()
        self._weights.clear()
        for h in self._hooks:
            h.remove()
        self._hooks = []
