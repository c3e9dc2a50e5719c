"""_codec.py — Codec: torch tensors to and from LCT blobs on their own device (the CUDA codec on the current
stream, the CPU codec for CPU tensors), with one codebook per role, rebuilt on drift as lctd does."""
import torch

from .. import codec as _lib
from ..errors import error, error_code

CODED = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}
for _name, _code in (("float8_e4m3fn", "f8e4m3"), ("float8_e5m2", "f8e5m2")):
    if hasattr(torch, _name):
        CODED[getattr(torch, _name)] = _code
DRIFT = 0.02  # a codebook whose codes take 2% more bits than it expected is rebuilt (lctd: LCT__DRIFT)
_ELEMENT_BYTES = {dtype: torch.empty(0, dtype=dtype).element_size() for dtype in CODED}
_ALIGN = 16  # blobs start at multiples of this in a shared allocation (the decoder needs 8)


def _aligned(n):
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def layout(t):
    """(flat, perm): t's elements in memory order as a 1-D view, and the permutation whose inverse gives t's
    strides back (None when t is contiguous); None when t's memory is not dense (the caller keeps it as is)."""
    if t.is_contiguous():
        return t.reshape(-1), None
    perm = sorted(range(t.dim()), key=lambda d: (-t.stride(d), -t.size(d)))
    p = t.permute(perm)
    if not p.is_contiguous():
        return None
    return p.reshape(-1), perm


class Packed:
    """A tensor held as an LCT blob: blob is a uint8 tensor on the tensor's device (often a view into an
    allocation shared with the blobs encoded alongside it)."""
    __slots__ = ("blob", "dtype", "shape", "perm", "numel")

    def __init__(self, blob, dtype, shape, perm, numel):
        self.blob, self.dtype, self.shape, self.perm, self.numel = blob, dtype, shape, perm, numel

    @property
    def raw_bytes(self):
        return self.numel * _ELEMENT_BYTES[self.dtype]

    @property
    def nbytes(self):
        return self.blob.numel()


class _Book:
    """A role's codebook: on the host, and on each device that encodes with it."""
    __slots__ = ("host", "device", "stale")

    def __init__(self, host):
        self.host, self.device, self.stale = host, {}, False


class Codec:
    """Encodes and decodes torch tensors with LCT's codec, losslessly, on the tensors' device.

    A role names a class of tensors that share a codebook (a parameter, its Adam moments, the n-th saved
    activation of a forward pass). A role's first encode builds its codebook from the tensor's symbol counts;
    later encodes reuse it with no counting pass; when a tensor's codes take more than DRIFT above what the
    codebook expected, the role's next encode counts its symbols in the same pass and the codebook is rebuilt
    from them. CUDA work runs on the current stream; encode() synchronizes once per call (it sizes each blob's
    allocation from the sizes the kernel wrote), decode() not at all: verify() reports a decode that failed.
    """

    def __init__(self, drift=DRIFT):
        self.drift = drift
        self._books = {}
        self._statuses = []  # decode status words not yet checked
        self.rebuilds = 0

    @staticmethod
    def coded(t):
        return t.dtype in CODED

    # -- encode -----------------------------------------------------------------------------------------------
    def encode(self, tensors, roles):
        """Packed blobs of tensors (each of a coded dtype, dense in memory), in order."""
        out = [None] * len(tensors)
        by_device = {}
        for i, t in enumerate(tensors):
            if t.dtype not in CODED:
                raise error(error_code("LCT_EDTYPE"), f"{t.dtype} is not a dtype LCT codes")
            by_device.setdefault(t.device, []).append(i)
        for dev, idx in by_device.items():
            encode = self._encode_cuda if dev.type == "cuda" else self._encode_cpu
            for i, p in zip(idx, encode([tensors[i] for i in idx], [roles[i] for i in idx], dev)):
                out[i] = p
        return out

    def _book(self, role, dev):
        return self._books.get((role, dev))

    def _drifted(self, book, code_bits, n_elems):
        return code_bits > book.host.expected_bits * n_elems * (1.0 + self.drift)

    def _encode_cpu(self, tensors, roles, dev):
        out = []
        for t, role in zip(tensors, roles):
            flat, perm = layout(t)
            code = _lib.dtype_code(CODED[t.dtype])
            book = self._book(role, dev)
            if book is None or book.stale:  # the CPU codec counts in a pass of its own
                host = _lib.Codebook.from_data(code, (flat.data_ptr(), flat.numel() * flat.element_size()))
                self.rebuilds += book is not None
                book = self._books[(role, dev)] = _Book(host)
            cap = _lib.encode_bound(code, flat.numel())
            scratch = torch.empty(cap, dtype=torch.uint8)
            size, code_bits = _lib.encode_into(code, book.host, flat.data_ptr(), flat.numel(), scratch.data_ptr(), cap)
            book.stale = self._drifted(book, code_bits, flat.numel())
            out.append(Packed(scratch[:size].clone(), t.dtype, tuple(t.shape), perm, flat.numel()))
        return out

    def _encode_cuda(self, tensors, roles, dev):
        stream = torch.cuda.current_stream(dev).cuda_stream
        flats = [layout(t) for t in tensors]
        codes = [_lib.dtype_code(CODED[t.dtype]) for t in tensors]
        self._build_missing(flats, codes, roles, dev, stream)

        # Stale roles count their symbols in this pass (the first of their tensors does).
        counting = {}
        for i, role in enumerate(roles):
            book = self._book(role, dev)
            if book.stale and role not in counting:
                counting[role] = i
        sym_counts = [1 << _lib.symbol_bits(codes[i]) for i in counting.values()]
        hist = torch.zeros(max(sum(sym_counts), 1), dtype=torch.int64, device=dev)
        hist_at = {}
        at = 0
        for (role, i), n in zip(counting.items(), sym_counts):
            hist_at[i] = (at, n)
            at += n

        caps = [_aligned(_lib.encode_bound(c, f.numel())) for c, (f, _) in zip(codes, flats)]
        scratch = torch.empty(sum(caps), dtype=torch.uint8, device=dev)
        sizes = torch.zeros(len(tensors), 2, dtype=torch.int64, device=dev)  # blob bytes, code bits
        items, off = [], 0
        for i, ((flat, _), code, role, cap) in enumerate(zip(flats, codes, roles, caps)):
            h = hist_at.get(i)
            items.append(_lib.EncodeItem(
                dtype=code, codebook=self._book(role, dev).device[dev].handle.value, src=flat.data_ptr(),
                n_elems=flat.numel(), dst=scratch.data_ptr() + off, cap=cap, blob_bytes=sizes[i].data_ptr(),
                code_bits=sizes[i].data_ptr() + 8, hist=hist.data_ptr() + 8 * h[0] if h else None))
            off += cap
        ws_bytes = _lib.cuda_encode_workspace_size(items)
        workspace = torch.empty(max(ws_bytes, 1), dtype=torch.uint8, device=dev)
        _lib.cuda_encode_batch(items, workspace.data_ptr(), ws_bytes, stream)

        host_sizes = sizes.to("cpu", non_blocking=True)
        host_hist = hist.to("cpu", non_blocking=True) if counting else None
        statuses = self._take_statuses(dev)
        torch.cuda.current_stream(dev).synchronize()  # the one wait: blob sizes decide the allocation
        self._raise_failed(statuses)

        blob_sizes = host_sizes[:, 0].tolist()
        store = torch.empty(max(sum(_aligned(s) for s in blob_sizes), 1), dtype=torch.uint8, device=dev)
        dsts, srcs, out, at, off = [], [], [], 0, 0
        for (flat, perm), t, size, cap in zip(flats, tensors, blob_sizes, caps):
            dsts.append(store[at:at + size])
            srcs.append(scratch[off:off + size])
            out.append(Packed(dsts[-1], t.dtype, tuple(t.shape), perm, flat.numel()))
            at += _aligned(size)
            off += cap
        if hasattr(torch, "_foreach_copy_"):
            torch._foreach_copy_(dsts, srcs)
        else:
            for d, s in zip(dsts, srcs):
                d.copy_(s)

        code_bits = host_sizes[:, 1].tolist()
        for i, role in enumerate(roles):
            book = self._book(role, dev)
            if i in hist_at:
                at, n = hist_at[i]
                counts = host_hist[at:at + n].contiguous()
                book.host = _lib.Codebook.from_histogram(codes[i], counts.data_ptr())
                book.device[dev].set(book.host, stream)
                book.stale = False
                self.rebuilds += 1
            elif self._drifted(book, code_bits[i], flats[i][0].numel()):
                book.stale = True
        return out

    def _build_missing(self, flats, codes, roles, dev, stream):
        """Codebooks for the roles that have none on dev, from their first tensor's symbol counts (one wait)."""
        new = {}
        for i, role in enumerate(roles):
            if self._book(role, dev) is None and role not in new:
                new[role] = i
        if not new:
            return
        bits = [1 << _lib.symbol_bits(codes[i]) for i in new.values()]
        hist = torch.zeros(sum(bits), dtype=torch.int64, device=dev)
        at = 0
        for i, n in zip(new.values(), bits):
            flat = flats[i][0]
            _lib.cuda_histogram(codes[i], flat.data_ptr(), flat.numel(), hist.data_ptr() + 8 * at, stream)
            at += n
        counts = hist.cpu()
        at = 0
        for (role, i), n in zip(new.items(), bits):
            host = _lib.Codebook.from_histogram(codes[i], counts[at:at + n].contiguous().data_ptr())
            book = _Book(host)
            with torch.cuda.device(dev):
                book.device[dev] = _lib.CudaCodebook(host)
            self._books[(role, dev)] = book
            at += n

    # -- decode -----------------------------------------------------------------------------------------------
    def decode(self, packed):
        """New tensors holding what each Packed held, bit for bit, with its shape and strides."""
        out = [None] * len(packed)
        by_device = {}
        for i, p in enumerate(packed):
            by_device.setdefault(p.blob.device, []).append(i)
        for dev, idx in by_device.items():
            decode = self._decode_cuda if dev.type == "cuda" else self._decode_cpu
            for i, t in zip(idx, decode([packed[i] for i in idx], dev)):
                out[i] = t
        return out

    @staticmethod
    def _empty(p, dev):
        """An uninitialized tensor of p's shape and strides, and the flat view the decoder fills."""
        if p.perm is None:
            t = torch.empty(p.shape, dtype=p.dtype, device=dev)
            return t, t.view(-1)
        permuted = torch.empty([p.shape[d] for d in p.perm], dtype=p.dtype, device=dev)
        inverse = [0] * len(p.perm)
        for i, d in enumerate(p.perm):
            inverse[d] = i
        return permuted.permute(inverse), permuted.view(-1)

    def _decode_cpu(self, packed, dev):
        out = []
        for p in packed:
            t, flat = self._empty(p, dev)
            _lib.decode_into(p.blob.data_ptr(), p.blob.numel(), flat.data_ptr(), flat.numel() * flat.element_size())
            out.append(t)
        return out

    def _decode_cuda(self, packed, dev):
        stream = torch.cuda.current_stream(dev).cuda_stream
        status = torch.empty(len(packed), dtype=torch.int32, device=dev)
        out, items = [], []
        for i, p in enumerate(packed):
            t, flat = self._empty(p, dev)
            out.append(t)
            items.append(_lib.DecodeItem(dtype=_lib.dtype_code(CODED[p.dtype]), n_elems=p.numel,
                                         blob=p.blob.data_ptr(), blob_bytes=p.blob.numel(), dst=flat.data_ptr(),
                                         status=status.data_ptr() + 4 * i))
        ws_bytes = _lib.cuda_decode_workspace_size(len(items))
        workspace = torch.empty(max(ws_bytes, 1), dtype=torch.uint8, device=dev)
        _lib.cuda_decode_batch(items, workspace.data_ptr(), ws_bytes, stream)
        self._statuses.append(status)
        return out

    def _take_statuses(self, dev=None):
        mine = [s for s in self._statuses if dev is None or s.device == dev]
        self._statuses = [s for s in self._statuses if not (dev is None or s.device == dev)]
        return [s.to("cpu", non_blocking=True) for s in mine]

    @staticmethod
    def _raise_failed(host_statuses):
        for s in host_statuses:
            bad = s[s != 0]
            if bad.numel():
                raise error(int(bad[0]), "a blob failed its checks while decoding on the GPU")

    def verify(self):
        """Waits for the decodes queued so far and raises LctError if any blob failed its checks."""
        statuses = self._take_statuses()
        if statuses:
            torch.cuda.synchronize()
            self._raise_failed(statuses)


_default = None


def default_codec():
    """The process's shared Codec (codebooks per role live as long as it does)."""
    global _default
    if _default is None:
        _default = Codec()
    return _default
