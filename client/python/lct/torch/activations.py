"""activations.py — compressed_activations: the tensors autograd saves for backward held as LCT blobs from the
forward pass to the backward pass."""
import weakref

import torch

from . import _saved
from ._codec import CODED, default_codec, layout


class _Activation(_saved.Handle):
    """A saved tensor: raw until its batch is encoded, then its blob."""
    __slots__ = ("codec", "raw", "packed", "__weakref__")

    def __init__(self, codec, raw):
        self.codec, self.raw, self.packed = codec, raw, None

    def unpack(self):
        if self.raw is not None:  # backward before the batch was encoded
            return self.raw
        return self.codec.decode([self.packed])[0]


class compressed_activations(torch.autograd.graph.saved_tensors_hooks):
    """Within it, every tensor autograd saves for backward that is of a coded dtype (f32, bf16, f16, f8), of at
    least min_bytes and not a parameter is kept as an LCT blob until backward needs it, then decoded on its
    device. Gradients are bitwise those of the same code without it: the decode is exact and restores the
    tensor's strides.

        with lct.torch.compressed_activations():
            loss = model(x)
        loss.backward()

    Saved tensors are encoded in batches of batch_bytes (one GPU launch and one wait each), and the rest when
    the context exits: until then a saved tensor stays as it is, so memory exceeds what the blobs take by at
    most one batch. The n-th saved tensor of a forward pass has its own codebook (one role per position, kept
    by the codec across steps), so enter the context once per forward pass. Parameters held by a
    CompressedParameters are saved as references to their blobs instead.
    """

    def __init__(self, codec=None, min_bytes=1 << 20, batch_bytes=256 << 20):
        self.codec = codec or default_codec()
        self.min_bytes, self.batch_bytes = min_bytes, batch_bytes
        self._pending, self._pending_bytes, self._ordinal = [], 0, 0
        self.tensors, self._totals = 0, (0, 0)
        super().__init__(self.pack, _saved.unpack)

    def __enter__(self):
        self._ordinal = 0
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
        if base.is_leaf and base.requires_grad:  # a parameter or a view of one: alive anyway
            return False
        return layout(t) is not None

    def pack(self, t):
        handle = _saved.parameter_handle(t)
        if handle is not None:
            return handle
        if not self.eligible(t):
            return t
        saved = _Activation(self.codec, t)
        self._pending.append((weakref.ref(saved), ("activation", self._ordinal, str(t.dtype))))
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
        packed = self.codec.encode([saved.raw for saved, _ in live], [role for _, role in live])
        for (saved, _), p in zip(live, packed):
            saved.packed, saved.raw = p, None
        self.tensors += len(live)

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
