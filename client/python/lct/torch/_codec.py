"""_codec.py — Codec: torch tensors to and from LCT blobs on their own device (the CUDA codec on the current
stream, the CPU codec for CPU tensors), with one codebook per role, rebuilt on drift as lctd does."""
import collections
import threading

import torch

from .. import codec as _lib
from ..errors import error, error_code

CODED = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}
for _name, _code in (("float8_e4m3fn", "f8e4m3"), ("float8_e5m2", "f8e5m2")):
    if hasattr(torch, _name):
        CODED[getattr(torch, _name)] = _code
_ELEMENT_BYTES = {dtype: torch.empty(0, dtype=dtype).element_size() for dtype in CODED}
DRIFT = 0.02  # a codebook whose codes take 2% more bits than it expected is rebuilt (lctd: LCT__DRIFT)
_CHUNK_ELEMS = 16384  # the format's chunk: pieces of a tensor split at multiples of it
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
    """A tensor held as LCT blobs, one per piece of at most the codec's piece size: each a uint8 tensor on the
    tensor's device (often a view into an allocation shared with blobs encoded alongside it). Right after a
    CUDA encode the blobs are still in the encoder's scratch; the codec moves them to memory of their exact
    size once the stream has told it their sizes (Codec.wait)."""
    __slots__ = ("blobs", "piece_elems", "dtype", "shape", "perm", "numel", "device", "_launch", "_stream")

    def __init__(self, dtype, shape, perm, numel, device):
        self.dtype, self.shape, self.perm, self.numel, self.device = dtype, shape, perm, numel, device
        self.blobs, self.piece_elems, self._launch = [], max(numel, 1), None
        self._stream = None  # CUDA: the stream its blobs were written on

    @property
    def raw_bytes(self):
        return self.numel * _ELEMENT_BYTES[self.dtype]

    @property
    def nbytes(self):
        """Bytes its blobs take (after the encode's sizes are known: see Codec.wait)."""
        if self._launch is not None:
            self._launch.codec.wait(self._launch)
        return sum(b.numel() for b in self.blobs)


class _Book:
    """A role's codebook: on the host, and on each device that encodes with it."""
    __slots__ = ("host", "device", "stale")

    def __init__(self, host):
        self.host, self.device, self.stale = host, {}, False


class _Launch:
    """One encode launch whose blob sizes are on their way to the host."""
    __slots__ = ("codec", "stream", "event", "scratch", "host_sizes", "host_hist", "pieces", "counting",
                 "scratch_bytes")

    def __init__(self, codec, stream):
        self.codec, self.stream = codec, stream


class Codec:
    """Encodes and decodes torch tensors with LCT's codec, losslessly, on the tensors' device.

    A role names a class of tensors that share a codebook (a parameter, its Adam moments, the n-th saved
    activation of a forward pass). A role's first encode builds its codebook from the tensor's symbol counts;
    later encodes reuse it with no counting pass; when a tensor's codes take more than `drift` above what the
    codebook expected, the role's next encode counts its symbols in the same pass and the codebook is rebuilt
    from them.

    Use one stream per codec and device for encodes (a role's device codebook is updated in its order). CUDA work runs on the current stream and never waits for it on the way in: a tensor is encoded into
    scratch of its worst-case size, and its blobs move to memory of their exact size once the stream has
    passed the encode (checked without blocking at each later call; blocking only when more than
    `inflight_bytes` of scratch is outstanding, or in wait()). Large tensors are cut into pieces of
    `piece_bytes` so that the scratch stays bounded. A decode waits for its blobs' sizes (long known by then in
    a training step) and queues without blocking; verify() reports a blob that failed its checks.

    Threads take turns in a codec, a call at a time (autograd runs each device's backward on a thread of its
    own); each thread encodes on its own stream, and roles are per device.
    """

    def __init__(self, drift=DRIFT, piece_bytes=64 << 20, inflight_bytes=1 << 30):
        self._lock = threading.RLock()
        self.drift, self.piece_bytes, self.inflight_bytes = drift, piece_bytes, inflight_bytes
        self._books = {}
        self._launches = collections.deque()  # encodes whose blobs are still in scratch, oldest first
        self._inflight = 0
        self._decodes = collections.deque()  # (event after a CUDA decode, its pinned status words), unchecked
        self.rebuilds = 0
        self.totals = collections.defaultdict(lambda: [0, 0])  # role kind -> [raw bytes, blob bytes] encoded

    @staticmethod
    def coded(t):
        return t.dtype in CODED

    # -- encode -----------------------------------------------------------------------------------------------
    def encode(self, tensors, roles):
        """Packed blobs of tensors (each of a coded dtype, dense in memory), in order."""
        with self._lock:
            return self._encode(tensors, roles)

    def _encode(self, tensors, roles):
        out = []
        for t, role in zip(tensors, roles):
            if t.dtype not in CODED:
                raise error(error_code("LCT_EDTYPE"), f"{t.dtype} is not a dtype LCT codes")
            dense = layout(t)
            if dense is None:
                raise error(error_code("LCT_EINVAL"), f"a tensor of shape {tuple(t.shape)} and strides {t.stride()} "
                            "is not dense in memory (make it contiguous first)")
            flat, perm = dense
            out.append((Packed(t.dtype, tuple(t.shape), perm, flat.numel(), t.device), flat, role))
        cuda = [x for x in out if x[0].device.type == "cuda"]
        for packed, flat, role in out:
            if packed.device.type != "cuda":
                self._encode_cpu(packed, flat, role)
        if cuda:
            self._encode_cuda(cuda)
        return [x[0] for x in out]

    def _drifted(self, book, code_bits, n_elems):
        return code_bits > book.host.expected_bits * n_elems * (1.0 + self.drift)

    def _encode_cpu(self, packed, flat, role):
        code = _lib.dtype_code(CODED[flat.dtype])
        key = (role, flat.device)
        book = self._books.get(key)
        if book is None or book.stale:  # the CPU codec counts in a pass of its own
            host = _lib.Codebook.from_data(code, (flat.data_ptr(), flat.numel() * flat.element_size()))
            self.rebuilds += book is not None
            book = self._books[key] = _Book(host)
        cap = _lib.encode_bound(code, flat.numel())
        scratch = torch.empty(cap, dtype=torch.uint8)
        size, code_bits = _lib.encode_into(code, book.host, flat.data_ptr(), flat.numel(), scratch.data_ptr(), cap)
        book.stale = self._drifted(book, code_bits, flat.numel())
        packed.blobs = [scratch[:size].clone()]
        self._count(role, packed.raw_bytes, size)

    def _count(self, role, raw, blob):
        total = self.totals[role[0] if isinstance(role, tuple) else role]
        total[0] += raw
        total[1] += blob

    def _pieces(self, cuda):
        """(packed, piece index, flat piece, role) for every piece, a piece at most piece_bytes."""
        for packed, flat, role in cuda:
            step = max(self.piece_bytes // flat.element_size() // _CHUNK_ELEMS, 1) * _CHUNK_ELEMS
            n = max((flat.numel() + step - 1) // step, 1)
            packed.blobs, packed.piece_elems = [None] * n, step
            for i in range(n):
                yield packed, i, flat[i * step:(i + 1) * step], role

    def _encode_cuda(self, cuda):
        group, group_bytes = [], 0
        for piece in self._pieces(cuda):
            need = piece[2].numel() * piece[2].element_size()
            if group and (group_bytes + need > self.piece_bytes * 2 or piece[2].device != group[0][2].device):
                self._submit(group)
                group, group_bytes = [], 0
            group.append(piece)
            group_bytes += need
        if group:
            self._submit(group)

    def _submit(self, pieces):
        """Encodes pieces of one device, on its current stream (its device current: the codec launches there)."""
        with torch.cuda.device(pieces[0][2].device):
            self._submit_on_device(pieces)

    def _submit_on_device(self, pieces):
        dev = pieces[0][2].device
        stream = torch.cuda.current_stream(dev)
        codes = [_lib.dtype_code(CODED[flat.dtype]) for _, _, flat, _ in pieces]
        self._build_missing(pieces, codes, dev, stream.cuda_stream)

        # Stale roles count their symbols in this pass (the first of their pieces does).
        counting, hist_at, at = {}, {}, 0
        for i, (_, _, _, role) in enumerate(pieces):
            if self._books[(role, dev)].stale and role not in counting:
                counting[role] = i
                n = 1 << _lib.symbol_bits(codes[i])
                hist_at[i] = (at, n)
                at += n
        hist = torch.zeros(at, dtype=torch.int64, device=dev) if counting else None

        caps = [_aligned(_lib.encode_bound(c, flat.numel())) for c, (_, _, flat, _) in zip(codes, pieces)]
        scratch = torch.empty(sum(caps), dtype=torch.uint8, device=dev)
        sizes = torch.zeros(len(pieces), 2, dtype=torch.int64, device=dev)  # blob bytes, code bits
        items, off = [], 0
        for i, ((_, _, flat, role), code, cap) in enumerate(zip(pieces, codes, caps)):
            flat.record_stream(stream)  # the caller may drop it at once: its memory waits for the encode
            h = hist_at.get(i)
            items.append(_lib.EncodeItem(
                dtype=code, codebook=self._books[(role, dev)].device[dev].handle.value, src=flat.data_ptr(),
                n_elems=flat.numel(), dst=scratch.data_ptr() + off, cap=cap, blob_bytes=sizes[i].data_ptr(),
                code_bits=sizes[i].data_ptr() + 8, hist=hist.data_ptr() + 8 * h[0] if h else None))
            off += cap
        ws_bytes = _lib.cuda_encode_workspace_size(items)
        workspace = torch.empty(max(ws_bytes, 1), dtype=torch.uint8, device=dev)
        _lib.cuda_encode_batch(items, workspace.data_ptr(), ws_bytes, stream.cuda_stream)

        launch = _Launch(self, stream)
        launch.host_sizes = torch.empty(sizes.shape, dtype=sizes.dtype, pin_memory=True)
        launch.host_sizes.copy_(sizes, non_blocking=True)
        launch.host_hist = None
        if counting:
            launch.host_hist = torch.empty(hist.shape, dtype=hist.dtype, pin_memory=True)
            launch.host_hist.copy_(hist, non_blocking=True)
        launch.event = torch.cuda.Event()
        launch.event.record(stream)
        launch.scratch, launch.scratch_bytes = scratch, scratch.numel()
        launch.pieces = [(packed, i, flat.numel(), role, code, cap) for (packed, i, flat, role), code, cap
                         in zip(pieces, codes, caps)]
        launch.counting = hist_at
        for packed, *_ in pieces:
            packed._launch = launch
        self._launches.append(launch)
        self._inflight += launch.scratch_bytes
        self._settle(block=False)

    def _settle(self, block, upto=None):
        """Moves the blobs of finished launches, oldest first, to memory of their exact size: those the stream
        has passed; with block, every launch up to `upto` (all if None) too, and the oldest ones while more
        than inflight_bytes of scratch is outstanding. Checks the finished decodes on the way."""
        self._check_decodes(block=False)
        while self._launches:
            launch = self._launches[0]
            must = block and (upto is None or upto in self._launches) or self._inflight > self.inflight_bytes
            if not must and not launch.event.query():
                break
            launch.event.synchronize()
            self._place(launch)  # first: if it fails (out of memory), the launch stays for a later try
            self._launches.popleft()
            self._inflight -= launch.scratch_bytes
            if launch is upto:
                break

    def _place(self, launch):
        with torch.cuda.stream(launch.stream):
            self._place_on_stream(launch)

    def _place_on_stream(self, launch):
        dev = launch.stream.device
        sizes = launch.host_sizes[:, 0].tolist()
        code_bits = launch.host_sizes[:, 1].tolist()
        store = torch.empty(max(sum(_aligned(s) for s in sizes), 1), dtype=torch.uint8, device=dev)
        dsts, srcs, at, off = [], [], 0, 0
        for (packed, i, n_elems, role, code, cap), size in zip(launch.pieces, sizes):
            dsts.append(store[at:at + size])
            srcs.append(launch.scratch[off:off + size])
            packed.blobs[i] = dsts[-1]
            packed._stream = launch.stream
            self._count(role, n_elems * _ELEMENT_BYTES[packed.dtype], size)
            if packed._launch is launch:
                packed._launch = None
            at += _aligned(size)
            off += cap
        torch._foreach_copy_(dsts, srcs)
        launch.scratch = None  # back to the allocator, ordered after the copies on this stream

        stream = launch.stream.cuda_stream
        for k, (packed, i, n_elems, role, code, cap) in enumerate(launch.pieces):
            book = self._books[(role, dev)]
            if k in launch.counting:
                at, n = launch.counting[k]
                counts = launch.host_hist[at:at + n].contiguous()
                book.host = _lib.Codebook.from_histogram(code, counts.data_ptr())
                book.device[dev].set(book.host, stream)
                book.stale = False
                self.rebuilds += 1
            elif self._drifted(book, code_bits[k], n_elems):
                book.stale = True

    def _build_missing(self, pieces, codes, dev, stream):
        """Codebooks for the roles that have none on dev, from their first piece's symbol counts (one wait, on a
        role's first encode only)."""
        new = {}
        for i, (_, _, _, role) in enumerate(pieces):
            if (role, dev) not in self._books and role not in new:
                new[role] = i
        if not new:
            return
        bits = [1 << _lib.symbol_bits(codes[i]) for i in new.values()]
        hist = torch.zeros(sum(bits), dtype=torch.int64, device=dev)
        at = 0
        for i, n in zip(new.values(), bits):
            flat = pieces[i][2]
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

    def wait(self, launch=None):
        """Waits for the encodes queued so far (or up to one launch) and moves their blobs to exact-size memory."""
        with self._lock:
            self._settle(block=True, upto=launch)

    # -- decode -----------------------------------------------------------------------------------------------
    def decode(self, packed):
        """New tensors holding what each Packed held, bit for bit, with its shape and strides, on the current
        stream (which waits for the stream that wrote the blobs, if another)."""
        for p in packed:  # another codec's encodes, waited for outside this one's lock
            launch = p._launch
            if launch is not None and launch.codec is not self:
                launch.codec.wait(launch)
        with self._lock:
            return self._decode(packed)

    def _decode(self, packed):
        for p in packed:
            if p._launch is not None:
                self._settle(block=True, upto=p._launch)
        self._settle(block=False)
        for p in packed:
            if p._stream is not None and p._stream != torch.cuda.current_stream(p.device):
                current = torch.cuda.current_stream(p.device)
                current.wait_stream(p._stream)
                for blob in p.blobs:
                    blob.record_stream(current)
        out, cuda_items = [], []
        for p in packed:
            t, flat = self._empty(p)
            out.append(t)
            at = 0
            for blob in p.blobs:
                n = min(p.numel - at, p.piece_elems)
                if p.device.type == "cuda":
                    cuda_items.append((p, blob, flat[at:at + n]))
                else:
                    _lib.decode_into(blob.data_ptr(), blob.numel(), flat[at:].data_ptr(), n * flat.element_size())
                at += n
        if cuda_items:
            self._decode_cuda(cuda_items)
        return out

    @staticmethod
    def _empty(p):
        """An uninitialized tensor of p's shape and strides, and the flat view the decoder fills."""
        if p.perm is None:
            t = torch.empty(p.shape, dtype=p.dtype, device=p.device)
            return t, t.view(-1)
        permuted = torch.empty([p.shape[d] for d in p.perm], dtype=p.dtype, device=p.device)
        inverse = [0] * len(p.perm)
        for i, d in enumerate(p.perm):
            inverse[d] = i
        return permuted.permute(inverse), permuted.view(-1)

    def _decode_cuda(self, items):
        by_device = collections.defaultdict(list)
        for item in items:
            by_device[item[0].device].append(item)
        for dev, group in by_device.items():
            with torch.cuda.device(dev):  # the decoder launches on the current device
                stream = torch.cuda.current_stream(dev)
                # Status words in pinned memory: read once the stream has passed the decode, with no wait.
                status = torch.zeros(len(group), dtype=torch.int32, pin_memory=True)
                decode_items = [_lib.DecodeItem(dtype=_lib.dtype_code(CODED[p.dtype]), n_elems=dst.numel(),
                                                blob=blob.data_ptr(), blob_bytes=blob.numel(), dst=dst.data_ptr(),
                                                status=status.data_ptr() + 4 * i)
                                for i, (p, blob, dst) in enumerate(group)]
                ws_bytes = _lib.cuda_decode_workspace_size(len(decode_items))
                workspace = torch.empty(max(ws_bytes, 1), dtype=torch.uint8, device=dev)
                _lib.cuda_decode_batch(decode_items, workspace.data_ptr(), ws_bytes, stream.cuda_stream)
                done = torch.cuda.Event()
                done.record(stream)
                self._decodes.append((done, status))

    def _check_decodes(self, block):
        """Raises LctError for a finished decode whose blob failed its checks (with block: waits for all)."""
        while self._decodes:
            done, status = self._decodes[0]
            if block:
                done.synchronize()
            elif not done.query():
                return
            self._decodes.popleft()
            bad = status[status != 0]
            if bad.numel():
                raise error(int(bad[0]), "a blob failed its checks while decoding on the GPU")

    def verify(self):
        """Waits for the decodes queued so far and raises LctError if any blob failed its checks (later calls
        check finished decodes as they go, without waiting)."""
        with self._lock:
            self._check_decodes(block=True)


_default = None
_default_lock = threading.Lock()


def default_codec():
    """The process's shared Codec (codebooks per role live as long as it does)."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Codec()
        return _default
