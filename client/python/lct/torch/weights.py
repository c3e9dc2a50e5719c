"""weights.py — CompressedParameters: a module's parameters held as LCT blobs between uses, decoded just before
the forward of the module that owns them and for the backward operations that saved them."""
import contextlib

import torch

from . import _saved
from ._codec import CODED, default_codec


class _Weight:
    __slots__ = ("param", "role", "packed", "packed_version", "placeholder", "live")

    def __init__(self, param, name):
        self.param, self.role, self.packed, self.live = param, ("param", name, str(param.dtype)), None, False
        # The parameter's version counter (in-place changes bump it; swapping its .data does not) when the blob
        # was made: the values a saved reference of that version may take from the blob.
        self.packed_version = None
        # Same shape, dtype and device, one element of memory: what the parameter shows between uses. It is
        # NaN, so that a use the hooks did not see (a parent module reading a child's weight) is loud.
        self.placeholder = torch.full((1,) * param.dim(), float("nan"), dtype=param.dtype,
                                      device=param.device).expand(param.shape)


class _ParameterView(_saved.Handle):
    """A saved (view of a) compressed parameter: decoded again when backward needs it."""
    __slots__ = ("params", "weight", "version", "dtype", "size", "stride", "offset")

    def __init__(self, params, weight, t):
        self.params, self.weight, self.version, self.dtype = params, weight, weight.param._version, t.dtype
        self.size, self.stride, self.offset = t.size(), t.stride(), t.storage_offset()

    def unpack(self):
        w = self.weight
        # Its values of the forward: the live ones if still decoded, else the blob's; neither once changed in
        # place since (autograd refuses such a saved tensor too).
        if (w.param._version if w.live else w.packed_version) != self.version:
            raise RuntimeError(f"parameter {w.role[1]} was changed in place after an operation saved it for "
                               "backward")
        whole = w.param.data if w.live else self.params.codec.decode([w.packed])[0]
        if self.dtype != whole.dtype:  # a view of the parameter's bytes as another dtype
            whole = whole.view(self.dtype)
        return whole.as_strided(self.size, self.stride, self.offset)


class CompressedParameters:
    """Holds a module's parameters (of a coded dtype, contiguous, of at least min_bytes) as LCT blobs.

    Between uses a parameter's .data is a one-element NaN placeholder expanded to its shape, so shape, dtype
    and device read as before (and state_dict() holds the decoded values). A forward pre-hook on each module
    decodes its own parameters; its forward hook puts back the placeholders of those it decoded (not those
    already decoded, by `materialized()` or an enclosing module sharing them): code that reads a parameter
    outside its own module's forward must do so inside `materialized()`. In the forward of the module given
    (the root), a parameter that an operation saves for backward is saved as a reference to its blob and
    decoded when backward needs it; a submodule called on its own (a checkpoint's recomputation) leaves saving
    to autograd and to the saved-tensor hooks in force. The values are exact, so losses and gradients are
    bitwise those of the module without it.

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
        self._hooks, self._frames = [], []  # per forward entered and not left: (weights it decoded, hooks pushed)
        self._hooks.append(module.register_forward_pre_hook(self._reset))
        for m in module.modules():
            own = [(name, self._weights[id(p)]) for name, p in m._parameters.items()
                   if p is not None and id(p) in self._weights]
            if own or m is module:
                weights, root = [w for _, w in own], m is module
                self._hooks.append(m.register_forward_pre_hook(
                    lambda mod, args, ws=weights, root=root: self._enter(ws, root)))
                self._hooks.append(m.register_forward_hook(lambda mod, args, out: self._exit()))
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

    # A module's forward, entered from the root or called directly (a checkpoint's recomputation), decodes
    # those of its parameters not decoded yet and releases them on leaving. Outside a compressed_activations
    # context the root's forward also installs hooks that save parameters as references; only the root's, so
    # that a checkpoint's own hooks stay on top while it recomputes a block. A root forward that raised left
    # its frames: the next one releases what they decoded (unchanged: a forward does not update parameters).
    def _reset(self, module, args):
        while self._frames:
            self._exit()

    def _enter(self, weights, root):
        push = root and not _saved.activation_stack()
        if push:
            torch._C._autograd._push_saved_tensors_default_hooks(self._pack, _saved.unpack)
        self._frames.append((self._decode(weights), push))

    def _exit(self):
        decoded, pushed = self._frames.pop()
        self._release(decoded)
        if pushed:
            torch._C._autograd._pop_saved_tensors_default_hooks()

    def _state_dict(self, own, state_dict, prefix):
        """A module's state_dict holds its parameters' values, not their placeholders."""
        for name, w in own:
            if not w.live and prefix + name in state_dict:
                state_dict[prefix + name] = self.codec.decode([w.packed])[0]

    def _pack(self, t):
        handle = self.handle(t)
        return handle if handle is not None else t

    def _decode(self, weights):
        """Decodes those of weights not decoded yet; returns them."""
        todo = [w for w in weights if not w.live]
        for w, data in zip(todo, self.codec.decode([w.packed for w in todo])):
            w.param.data = data
            w.live = True
            self._live[_saved.storage_address(data)] = w
        return todo

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
            w.packed, w.packed_version = p, w.param._version
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
