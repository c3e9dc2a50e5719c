"""activations.py — compressed_activations: the tensors autograd saves for backward held as LCT blobs from the
forward pass to the backward pass."""
import weakref

import torch

from . import _saved
from ._codec import CODED, default_codec, layout


class _Activation(_saved.Handle):
    """A saved tensor: raw until its batch is encoded, then its blob (and, once decoded, its value for as long
    as autograd holds the handle: every operation that saved the tensor gets that one decode)."""
    __slots__ = ("owner", "index", "raw", "version", "packed", "decoded", "__weakref__")

    def __init__(self, owner, index, raw):
        self.owner, self.index, self.raw, self.version, self.packed, self.decoded = owner, index, raw, raw._version, \
            None, None

    def check_unchanged(self):
        """autograd does not check the version of a tensor a hook saved: this does, as autograd would."""
        if self.raw._version != self.version:
            raise RuntimeError("one of the variables needed for gradient computation has been modified by an inplace "
                               "operation after compressed_activations saved it")

    def unpack(self):
        if self.raw is not None:  # backward before the batch was encoded
            self.check_unchanged()
            return self.raw
        if self.decoded is None:
            self.owner._prefetch(self)
        return self.decoded


class compressed_activations(torch.autograd.graph.saved_tensors_hooks):
    """Within it, every tensor autograd saves for backward that is of a coded dtype (f32, bf16, f16, f8), of at
    least min_bytes and not a parameter is kept as an LCT blob until backward needs it, then decoded on its
    device. Gradients are bitwise those of the same code without it: the decode is exact and restores the
    tensor's strides.

        with lct.torch.compressed_activations():
            loss = model(x)
        loss.backward()

    Saved tensors are encoded in batches of batch_bytes, and the rest when the context exits: until then a
    saved tensor stays as it is, so memory exceeds what the blobs take by at most one batch (and the codec's
    scratch in flight). When backward needs a saved tensor, it is decoded together with the ones saved just
    before it, up to prefetch_bytes, in one launch. The n-th saved tensor of a forward pass has its own codebook (one role per position, kept
    by the codec across steps), so enter the context once per forward pass. Parameters held by a
    CompressedParameters are saved as references to their blobs instead.
    """

    def __init__(self, codec=None, min_bytes=1 << 20, batch_bytes=256 << 20, prefetch_bytes=256 << 20):
        self.codec = codec or default_codec()
        self.min_bytes, self.batch_bytes, self.prefetch_bytes = min_bytes, batch_bytes, prefetch_bytes
        self._pending, self._pending_bytes, self._ordinal = [], 0, 0
        self._saved = []  # weak references to this pass's saved tensors, in the order they were saved
        self._by_tensor = {}  # id(tensor) -> weak references to it and its handle, and its version
        self.tensors, self._totals = 0, (0, 0)
        super().__init__(self.pack, _saved.unpack)

    def __enter__(self):
        self._ordinal, self._saved, self._by_tensor = 0, [], {}
        self.tensors, self._totals = 0, tuple(self.codec.totals["activation"])
        _saved.activation_stack().append(self)
        super().__enter__()
        return self

    def __exit__(self, *exc):
        try:
            self.flush()
        finally:
            _saved.activation_stack().pop()
            super().__exit__(*exc)

    def eligible(self, t):
        if t.dtype not in CODED or t.layout != torch.strided or t.device.type not in ("cuda", "cpu"):
            return False
        if t.numel() * t.element_size() < self.min_bytes:
            return False
        base = t._base if t._base is not None else t
        if base.is_leaf and (base.requires_grad or isinstance(base, torch.nn.Parameter)):  # alive anyway (frozen too)
            return False
        return layout(t) is not None

    def pack(self, t):
        handle = _saved.parameter_handle(t)
        if handle is not None:
            return handle
        # A tensor several operations save (a norm's output read by the q, k and v projections) is held once.
        seen = self._by_tensor.get(id(t))
        if seen is not None and seen[0]() is t and seen[2] == t._version and (held := seen[1]()) is not None:
            return held
        if not self.eligible(t):
            return t
        saved = _Activation(self, len(self._saved), t)
        self._saved.append(weakref.ref(saved))
        self._by_tensor[id(t)] = (weakref.ref(t), self._saved[-1], t._version)
        self._pending.append((self._saved[-1], ("activation", self._ordinal, str(t.dtype))))
        self._ordinal += 1
        self._pending_bytes += t.numel() * t.element_size()
        if self._pending_bytes >= self.batch_bytes:
            self.flush()
        return saved

    def flush(self):
        """Encodes the saved tensors not yet encoded (those autograd still holds)."""
        live = [(saved, role) for ref, role in self._pending if (saved := ref()) is not None]
        self._pending, self._pending_bytes = [], 0
        if not live:
            return
        for saved, _ in live:
            saved.check_unchanged()
        packed = self.codec.encode([saved.raw for saved, _ in live], [role for _, role in live])
        for (saved, _), p in zip(live, packed):
            saved.packed, saved.raw = p, None
        self.tensors += len(live)

    def _prefetch(self, first):
        """Decodes `first` and, in the same launch, the tensors saved just before it that backward still holds,
        up to prefetch_bytes: backward takes saved tensors roughly in the reverse order of the forward pass."""
        batch, size = [first], first.packed.raw_bytes
        for ref in reversed(self._saved[:first.index]):
            saved = ref()
            if saved is None or saved.packed is None or saved.decoded is not None:
                continue
            if size + saved.packed.raw_bytes > self.prefetch_bytes:
                break
            batch.append(saved)
            size += saved.packed.raw_bytes
        for saved, t in zip(batch, self.codec.decode([s.packed for s in batch])):
            saved.decoded = t

    def _encoded(self):
        self.codec.wait()
        now = self.codec.totals["activation"]
        return now[0] - self._totals[0], now[1] - self._totals[1]

    @property
    def raw_bytes(self):
        """Raw bytes of the tensors encoded since the context was entered (waits for their encodes)."""
        return self._encoded()[0]

    @property
    def blob_bytes(self):
        """Bytes their blobs take (waits for their encodes)."""
        return self._encoded()[1]
