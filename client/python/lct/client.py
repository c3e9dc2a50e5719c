"""client.py — lct.Client: put/get/stat/list/delete of named tensors in lctd through liblct."""
import ctypes
import dataclasses
import os
import sys
import threading
import weakref

from . import _native

# Natural lct dtype of a value's element type; anything else needs dtype=.
_NUMPY_DTYPES = {
    "float32": "f32", "float16": "f16", "uint8": "raw", "int8": "raw", "bool": "raw",
    # ml_dtypes' numpy extension types
    "bfloat16": "bf16", "float8_e4m3fn": "f8e4m3", "float8_e5m2": "f8e5m2",
}
_TORCH_DTYPES = {
    "torch.float32": "f32", "torch.float16": "f16", "torch.bfloat16": "bf16",
    "torch.float8_e4m3fn": "f8e4m3", "torch.float8_e5m2": "f8e5m2",
    "torch.uint8": "raw", "torch.int8": "raw", "torch.bool": "raw",
}
_BUFFER_FORMATS = {"f": "f32", "B": "raw", "b": "raw", "c": "raw", "?": "raw"}

# What get() returns per stored dtype: numpy dtype, memoryview format. 16- and
# 8-bit floats come back as their raw words (numpy has no bf16/f8, memoryview
# cannot cast to 'e').
_RESULT_TYPES = {
    "f32": ("float32", "f"), "f16": ("float16", "H"), "bf16": ("uint16", "H"),
    "f8e4m3": ("uint8", "B"), "f8e5m2": ("uint8", "B"), "raw": ("uint8", "B"),
}


class LctError(Exception):
    """A failure reported by liblct or lctd.

    code is the negative LCT error code (proto/lct_error.h), name its symbol
    ('LCT_ENOENT'), message lct_strerror's text and detail the specifics
    (often the server's words; may be empty).
    """

    def __init__(self, code, detail=""):
        lib = _native.lib()
        self.code = code
        self.name = lib.lct_err_name(code).decode()
        self.message = lib.lct_strerror(code).decode()
        self.detail = detail
        super().__init__(code, detail)

    def __str__(self):
        if self.detail and self.detail != self.message:
            return f"{self.name}: {self.message}: {self.detail}"
        return f"{self.name}: {self.message}"


class NotFoundError(LctError, KeyError):
    """LCT_ENOENT: the key does not exist (also a KeyError; str() stays LctError's)."""


def _error(code, detail=""):
    if isinstance(detail, bytes):
        detail = detail.decode("utf-8", "replace")
    cls = NotFoundError if code == error_code("LCT_ENOENT") else LctError
    return cls(code, detail)


_error_codes = {}
_dtype_names = {}


def error_code(name):
    """The negative code of an error symbol, e.g. error_code('LCT_ENOENT') == -9."""
    if not _error_codes:
        lib = _native.lib()
        syms = {lib.lct_err_name(code).decode(): code for code in range(-1, -128, -1)}
        syms.pop("LCT_EUNKNOWN", None)
        _error_codes.update(syms)  # whole, so that another thread never sees it half filled
    try:
        return _error_codes[name]
    except KeyError:
        raise AttributeError(f"no LCT error named {name}") from None


def _dtype_tables():
    """{name: code} of the dtypes this liblct knows, asked of the library itself."""
    if not _dtype_names:
        lib = _native.lib()
        names, code = {}, 0
        while (name := lib.lct_dtype_name(code)) is not None:
            names[name.decode()] = code
            code += 1
        _dtype_names.update(names)
    return _dtype_names


def _dtype_code(name):
    codes = _dtype_tables()
    if name not in codes:
        raise _error(error_code("LCT_EDTYPE"), f"'{name}'; known: {', '.join(codes)}")
    return codes[name]


def _dtype_name(code):
    for name, c in _dtype_tables().items():
        if c == code:
            return name
    return f"dtype{code}"  # from a newer server


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """What lctd holds for a key (stat, list, put)."""
    key: str
    dtype: str
    shape: tuple
    raw_bytes: int
    stored_bytes: int
    version: int
    checksum: int  # CRC-32C of the raw bytes


@dataclasses.dataclass(frozen=True)
class ServerInfo:
    server: str
    backend: str
    protocol: int
    frame_bytes: int


def _tensor_info(key, c):
    return TensorInfo(key=key, dtype=_dtype_name(c.dtype), shape=tuple(c.shape[:c.ndim]),
                      raw_bytes=c.raw_bytes, stored_bytes=c.stored_bytes, version=c.version,
                      checksum=c.checksum)


def _key_bytes(key):
    if isinstance(key, str):
        # surrogateescape: keys list() decoded from arbitrary bytes come back intact.
        key = key.encode("utf-8", "surrogateescape")
    elif not isinstance(key, bytes):
        raise TypeError(f"key must be str or bytes, not {type(key).__name__}")
    if b"\0" in key:
        raise ValueError("key contains a NUL byte")  # liblct takes C strings
    return key


def _key_str(raw):
    return raw.decode("utf-8", "surrogateescape")


def _no_finish():
    pass


class _Host:
    """Contiguous memory that liblct reads or fills on behalf of a value: host
    memory, or with device set, a CUDA device buffer for lct_put_device and
    lct_get_device.

    ptr is None for an empty value; finish() copies a staged get back into the
    caller's object; keep holds whatever owns the memory until the call returns.
    """
    __slots__ = ("ptr", "nbytes", "shape", "itemsize", "natural", "what", "finish", "keep", "device", "staged")

    def __init__(self, ptr, nbytes, shape, itemsize, natural, what, keep, finish=None, device=False, staged=False):
        self.ptr = ptr if nbytes else None
        self.nbytes = nbytes
        self.shape = tuple(shape)
        self.itemsize = itemsize
        self.natural = natural
        self.what = what
        self.keep = keep
        self.finish = finish or _no_finish
        self.device = device
        self.staged = staged  # a device buffer of the binding's own (a put's copy: its bytes as of packing;
        # a get's staging), made on the current stream


# Whether liblct has the device path; False once it answered LCT_ENODEV
# (built without CUDA), after which CUDA tensors go through host memory.
_device_path = True
_device_path_asked = False  # whether _has_device_path asked liblct already


def _has_device_path(client):
    """_device_path, asked of liblct before a job relies on it (a job could
    not fall back to host memory as send() does)."""
    global _device_path, _device_path_asked
    if _device_path and not _device_path_asked:
        with client._lock:
            if client._c is None:
                raise ValueError("client is closed")
            # Resets the client's device stream, which is unset between calls: LCT_ENODEV without CUDA.
            rc = _native.lib().lct_set_device_stream(client._c, None)
        _device_path = rc != error_code("LCT_ENODEV")
        _device_path_asked = True
    return _device_path


def _host(value, writable):
    """The one dispatch from a caller's value to the memory liblct uses.

    writable: the value is a get's destination (else a put's source). torch
    and numpy are looked up in sys.modules, never imported here: a value of
    their types implies they are loaded. CUDA tensors stay on their device
    (the result's device is set) while liblct has the device path.
    """
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        if value.device.type == "cuda" and _device_path:
            return _torch_device(torch, value, writable)
        return _torch_host(torch, value, writable)
    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, np.ndarray):
        return _numpy_host(np, value, writable)
    return _buffer_host(value, writable)


def _torch_host(torch, t, writable):
    t = t.detach()  # liblct reads and writes memory autograd does not track
    natural = _TORCH_DTYPES.get(str(t.dtype))
    what = f"torch {str(t.dtype)[6:]} tensor"
    if t.device.type == "cpu" and t.is_contiguous():
        staged, finish = t, None
    elif writable:
        # Device tensors and strided views: filled through a contiguous host
        # tensor, then copied in (copy_ from pageable memory is synchronous).
        staged = torch.empty(t.shape, dtype=t.dtype)
        finish = lambda: t.copy_(staged)
    else:
        staged, finish = t.to("cpu").contiguous(), None
    return _Host(staged.data_ptr(), staged.numel() * staged.element_size(), t.shape,
                 t.element_size(), natural, what, staged, finish)


def _torch_device(torch, t, writable):
    """A CUDA tensor's own memory, or a contiguous copy on its device."""
    t = t.detach()
    natural = _TORCH_DTYPES.get(str(t.dtype))
    what = f"torch {str(t.dtype)[6:]} tensor"
    finish = None
    if t.is_contiguous():
        staged = t
    elif writable:
        staged = torch.empty(t.shape, dtype=t.dtype, device=t.device)
        finish = lambda: t.copy_(staged)
    else:
        staged = t.contiguous()
    return _Host(staged.data_ptr(), staged.numel() * staged.element_size(), t.shape,
                 t.element_size(), natural, what, staged, finish, device=True, staged=staged is not t)


def _numpy_host(np, a, writable):
    natural = _NUMPY_DTYPES.get(a.dtype.name)
    what = f"numpy {a.dtype.name} array"
    native = a.dtype.newbyteorder("=")
    direct = a.flags.c_contiguous and a.dtype.isnative
    if writable:
        if not a.flags.writeable:
            raise ValueError("out is a read-only array")
        staged = a if direct else np.empty(a.shape, native)
        finish = None if direct else (lambda: np.copyto(a, staged))
    else:
        # ascontiguousarray turns 0-d into 1-d: the shape is taken from a.
        staged = a if direct else np.ascontiguousarray(a, dtype=native)
        finish = None
    return _Host(staged.ctypes.data, a.nbytes, a.shape, a.itemsize, natural, what, staged, finish)


def _buffer_host(obj, writable):
    try:
        mv = memoryview(obj)
    except TypeError:
        raise TypeError(f"{type(obj).__name__} is not a bytes-like object, numpy array or "
                        "torch tensor") from None
    if not mv.c_contiguous:
        raise ValueError("buffer is not C-contiguous")
    natural = _BUFFER_FORMATS.get(mv.format.lstrip("@=<"))
    what = f"buffer of format '{mv.format}'"
    nbytes = mv.nbytes
    if nbytes == 0:
        return _Host(None, 0, mv.shape, mv.itemsize, natural, what, None)
    if not mv.readonly:
        arr = (ctypes.c_char * nbytes).from_buffer(mv.cast("B"))
    elif writable:
        raise ValueError("out is a read-only buffer")
    elif isinstance(obj, bytes):
        arr = ctypes.c_char_p(obj)  # points into the bytes object: no copy
        return _Host(ctypes.cast(arr, ctypes.c_void_p).value, nbytes, mv.shape, mv.itemsize,
                     natural, what, (obj, arr))
    else:
        arr = (ctypes.c_char * nbytes).from_buffer_copy(mv)  # other read-only buffers: one copy
    return _Host(ctypes.addressof(arr), nbytes, mv.shape, mv.itemsize, natural, what, (mv, arr))


def _default_shape(shape, itemsize, width):
    """The shape of a value's bytes seen as elements of width bytes, as
    numpy's view() reshapes the last axis. Inexact sizes are left for liblct
    to refuse (LCT_ESIZE) with its message."""
    if itemsize == width:
        return shape
    if not shape:
        return (itemsize // width,)
    return shape[:-1] + (shape[-1] * itemsize // width,)


_numpy_module = None


def _numpy():
    """numpy if importable (imported on first need), else None."""
    global _numpy_module
    if _numpy_module is None:
        try:
            import numpy
            _numpy_module = numpy
        except ImportError:
            _numpy_module = False
    return _numpy_module or None


class Client:
    """A connection to one lctd.

    endpoint: 'ipc:///path' or 'tcp://host:port'; None: $LCT_ENDPOINT, else
    ipc:///tmp/lctd.sock. timeout_ms: per request (None: 30 s; negative:
    forever). connect_timeout_ms: for the first ping (None: 5 s). frame_bytes:
    payload bytes per message (None: 16 MiB, lowered to the server's limit).
    auth_token_file: file holding the token an lctd with auth_token_file
    requires on tcp endpoints (None: $LCT_AUTH_TOKEN_FILE, else none).
    A Client may be shared between threads: its calls are serialized.
    """

    def __init__(self, endpoint=None, auth_token_file=None, timeout_ms=None,
                 connect_timeout_ms=None, frame_bytes=None):
        lib = _native.lib()
        self._lock = threading.Lock()
        self._c = None
        self._jobs = []  # Batch.submit's jobs not yet waited for: liblct serves no other call meanwhile
        self.endpoint = endpoint
        self._options = dict(endpoint=endpoint, auth_token_file=auth_token_file, timeout_ms=timeout_ms,
                             connect_timeout_ms=connect_timeout_ms, frame_bytes=frame_bytes)
        opts = _native.Options()
        lib.lct_options_init_sized(ctypes.byref(opts), ctypes.sizeof(opts))
        opts.endpoint = endpoint.encode() if endpoint is not None else None
        opts.timeout_ms = timeout_ms or 0
        opts.connect_timeout_ms = connect_timeout_ms or 0
        opts.frame_bytes = frame_bytes or 0
        opts.auth_token_file = os.fsencode(auth_token_file) if auth_token_file is not None else None
        handle = ctypes.c_void_p()
        rc = lib.lct_connect(ctypes.byref(opts), ctypes.byref(handle))
        if rc < 0:
            raise _error(rc, f"connecting to {endpoint or '$LCT_ENDPOINT or the default endpoint'}")
        self._c = handle

    def __repr__(self):
        state = "closed" if self._c is None else "open"
        return f"<lct.Client {self.endpoint or 'default endpoint'} {state}>"

    def clone(self):
        """Another connection to the same lctd with the same options: a
        connection carries one request at a time, so threads that talk to
        lctd at once take one each."""
        return Client(**self._options)

    def close(self):
        with self._lock:
            if self._c is not None:
                _native.lib().lct_close(self._c)
                self._c = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_c", None) is not None:
            self.close()

    def _call(self, fn, *args):
        """fn(client, *args) under the lock; a negative return raises with the detail."""
        with self._lock:
            if self._c is None:
                raise ValueError("client is closed")
            self._settle_jobs()
            rc = fn(self._c, *args)
            if rc < 0:
                raise _error(rc, _native.lib().lct_last_error(self._c))

    def _settle_jobs(self):
        # Under the lock: the client's jobs finish before it takes another call.
        lib = _native.lib()
        for job in self._jobs:
            lib.lct_job_wait(job._handle, None)
        self._jobs.clear()

    def _call_device(self, host, value, writable, host_fn, device_fn, args):
        """Calls device_fn when host (_host(value, writable)) is a CUDA
        tensor's device buffer (liblct falls back to the host path by itself
        where lctd cannot go device to device), else host_fn; args(host) gives
        the arguments after the client. Returns the _Host used."""
        global _device_path
        if not host.device:
            self._call(host_fn, *args(host))
            return host
        try:
            self._call(device_fn, *args(host))
            return host
        except LctError as e:
            if e.code != error_code("LCT_ENODEV"):
                raise
        _device_path = False  # this liblct was built without CUDA
        host = _host(value, writable)
        self._call(host_fn, *args(host))
        return host

    def put(self, key, value, dtype=None, shape=None):
        """Stores value as key, atomically, and returns its TensorInfo.

        value: a bytes-like object, numpy array or torch tensor (CPU or
        device; a CUDA tensor goes device to device when lctd runs on the
        same host and GPU with the cuda backend, else through host memory).
        dtype: an lct dtype name ('f32', 'bf16', 'f16', 'f8e4m3',
        'f8e5m2', 'raw'); None takes it from the value (float32, float16,
        bfloat16, float8 types; 1-byte types and bytes-like objects are 'raw').
        shape: None takes the value's, its last axis rescaled when dtype's
        element width differs (so a uint8 buffer with dtype='f32' holds
        len/4 elements).
        """
        k = _key_bytes(key)
        host = _host(value, writable=False)
        name = dtype if dtype is not None else host.natural
        if name is None:
            raise TypeError(f"a {host.what} needs dtype= (e.g. 'bf16' for bfloat16 words, or "
                            "'raw' for its bytes)")
        code = _dtype_code(name)
        if shape is None:
            shape = _default_shape(host.shape, host.itemsize, _native.lib().lct_dtype_size(code))
        shape = tuple(int(d) for d in shape)
        if any(d < 0 for d in shape):
            raise ValueError(f"negative dimension in shape {shape}")
        dims = (ctypes.c_uint64 * max(len(shape), 1))(*shape)
        info = _native.TensorInfo()
        lib = _native.lib()
        self._call_device(host, value, False, lib.lct_put, lib.lct_put_device,
                          lambda h: (k, code, dims, len(shape), h.ptr, h.nbytes, ctypes.byref(info)))
        return _tensor_info(_key_str(k), info)

    def get(self, key, out=None):
        """Reads key.

        With out (a numpy array, torch tensor on any device, or writable
        buffer of exactly the stored size, elements of the stored width or
        bytes), fills and returns it; after an error its contents are
        unspecified. Without, returns a new numpy array of the stored shape
        (float32, float16; bf16 as uint16 words; f8 and raw as uint8), or,
        when numpy is not importable, a memoryview over a bytearray (format
        'f' for f32, 'H' for 16-bit words, 'B' for bytes; flat if empty).
        """
        k = _key_bytes(key)
        lib = _native.lib()
        info = _native.TensorInfo()
        if out is not None:
            host = self._call_device(_host(out, writable=True), out, True, lib.lct_get,
                                     lib.lct_get_device, lambda h: (k, h.ptr, h.nbytes, ctypes.byref(info)))
            host.finish()
            error = _out_mismatch(k, info, host)
            if error is not None:
                raise error
            return out
        ptr = ctypes.c_void_p()
        self._call(lib.lct_get_alloc, k, ctypes.byref(ptr), ctypes.byref(info))
        return _adopt(ptr.value, info)

    def put_many(self, items, stream=None):
        """Stores (key, value) pairs as put does (dtype and shape from each
        value) and returns their TensorInfo in order. CUDA tensors lying in
        one allocation (slices of one buffer, say) travel together, up to 1024
        per request, coded by lctd in one GPU pass and stored all or none per
        request; other values are put one by one. Keys must be distinct.

        stream: None synchronizes the CUDA tensors' whole GPU before they
        travel; a torch.cuda.Stream of their GPU (or a cudaStream_t as an int)
        synchronizes that stream only (lct_set_device_stream): work on other
        streams that writes the tensors must be ordered before it, an event it
        waits on. (The binding's own copies of strided tensors are ordered on
        it for a torch.cuda.Stream; with an int they sync the whole GPU.)"""
        batch = Batch(self, items, put=True)
        batch.send(stream)
        return batch.infos()

    def get_many(self, items, stream=None):
        """Fills each out of (key, out) pairs as get(key, out) does and
        returns the outs; CUDA tensors travel together, and stream applies,
        as in put_many (work on other streams that uses the outs must be
        ordered before it)."""
        batch = Batch(self, items, put=False)
        batch.send(stream)
        return [out for _, out in batch.items]

    def delete(self, key):
        """Removes key; NotFoundError (an LctError and KeyError) if absent."""
        self._call(_native.lib().lct_delete, _key_bytes(key))

    def stat(self, key):
        """The TensorInfo of key; NotFoundError if absent."""
        k = _key_bytes(key)
        info = _native.TensorInfo()
        self._call(_native.lib().lct_stat, k, ctypes.byref(info))
        return _tensor_info(_key_str(k), info)

    def list(self, prefix=None, page_size=None):
        """Yields the TensorInfo of every key starting with prefix, in bytewise
        key order, fetching pages of page_size (None: the server's default)
        as iteration goes."""
        lib = _native.lib()
        p = _key_bytes(prefix) if prefix is not None else None
        cursor = None
        while True:
            page = ctypes.POINTER(_native.ListPage)()
            self._call(lib.lct_list, p, cursor, page_size or 0, ctypes.byref(page))
            try:
                entries = page.contents.entries[:page.contents.n]
                items = [_tensor_info(_key_str(e.key), e.info) for e in entries]
                # c_char_p: copied into bytes. An empty page ends the listing whatever it says.
                cursor = page.contents.next_cursor if items else None
            finally:
                lib.lct_list_free(page)
            yield from items
            if cursor is None:
                return

    def stats(self):
        """The server's counters as a dict (tensors, raw_bytes, stored_bytes,
        pool_capacity, pool_used, requests, errors, ...)."""
        s = _native.ServerStats()
        self._call(_native.lib().lct_stats, ctypes.byref(s), None)
        return {name: getattr(s, name) for name in _native.STATS_FIELDS}

    def save(self):
        """Has lctd write every tensor changed since its last save to its
        persist_dir (SAVE) and returns how many it wrote; LCT_ECONFIG from an
        lctd without one, LCT_EIO when some could not be written."""
        written = ctypes.c_uint64()
        self._call(_native.lib().lct_save, ctypes.byref(written))
        return written.value

    def ping(self):
        """One round trip; returns the server's ServerInfo."""
        i = _native.ServerInfo()
        self._call(_native.lib().lct_ping, ctypes.byref(i))
        return ServerInfo(server=i.server.decode(), backend=i.backend.decode(),
                          protocol=i.protocol, frame_bytes=i.frame_bytes)


class Batch:
    """The (key, value) pairs of a put_many or get_many (put: which), checked
    and packed for liblct once: a trainer that moves the same tensors every
    step sends the same Batch each time, and only the requests' work remains.
    Each send() stores the values' current bytes, or fills the outs, as
    put_many or get_many does (a source packed through a copy, a strided CUDA
    tensor, is packed again). The values must stay alive and in place while
    the Batch is used."""

    def __init__(self, client, items, put):
        self.client = client
        self.put = put
        self.items = list(items)
        self._infos = [None] * len(self.items)
        self._released = False
        self._job = None  # the last submit()'s
        self._pack()

    def _pack(self):
        put = self.put
        self._device_path = _device_path
        self._repack = False
        self._packed_fresh = True  # the copies just made serve the next send
        self._staged_on = None  # a device whose current stream made staging buffers
        batch, self._single = [], []  # (index, key bytes, _Host, shape array) of CUDA tensors; others by index
        for i, (key, value) in enumerate(self.items):
            host = _host(value, writable=not put) if _device_path else None
            if put and host is not None and host.natural is None:  # checked before anything is sent
                raise TypeError(f"a {host.what} needs put() with dtype= (put_many takes the value's own)")
            if host is None or not host.device or host.nbytes == 0:
                self._single.append(i)
                continue
            self._repack |= put and host.staged  # a copied source: copied again at the next send
            if host.staged:
                self._staged_on = value.device
            batch.append((i, _key_bytes(key), host, (ctypes.c_uint64 * max(len(host.shape), 1))(*host.shape)))
        self._batch = batch
        # What retarget() may swap in place: a CUDA tensor of the same type, dtype, shape and device.
        self._layout = [_layout(self.items[i][1]) for i, _, _, _ in batch]
        # A get's (raw bytes, dtype) that last fitted each out: the same again needs no closer look.
        self._fitted = [None] * len(batch)
        self._arr = (_native.DeviceTensor * len(batch))()
        self._cinfo = (_native.TensorInfo * len(batch))()
        for j, (_, k, host, dims) in enumerate(batch):
            d = self._arr[j]
            d.key, d.shape, d.ndim, d.dptr, d.bytes = k, dims, len(host.shape), host.ptr, host.nbytes
            d.dtype = _dtype_code(host.natural) if put else 0
            d.info = ctypes.pointer(self._cinfo[j])

    def send(self, stream=None):
        """One round: the values one by one, then the CUDA tensors' requests.
        stream: as for put_many."""
        global _device_path
        self._check_idle()
        if self._released:
            raise ValueError("the batch was released: retarget() gives it values again")
        if (self._repack and not self._packed_fresh) or self._device_path != _device_path:
            self._pack()
        self._packed_fresh = False
        if stream is not None and self._staged_on is not None:
            # The staging copies were queued on the current stream, not on stream.
            torch = sys.modules["torch"]
            if hasattr(stream, "wait_stream"):
                stream.wait_stream(torch.cuda.current_stream(self._staged_on))
            else:
                stream = None  # a bare handle: synchronize the whole GPU
        client, put = self.client, self.put
        self._one_by_one(self._single)
        batch = self._batch
        if not batch:
            return
        lib = _native.lib()
        failed = ctypes.c_size_t()
        many = lib.lct_put_device_many if put else lib.lct_get_device_many
        if stream is not None:
            handle = ctypes.c_void_p(getattr(stream, "cuda_stream", stream))

            def many(c, *args, plain=many):
                lib.lct_set_device_stream(c, handle)  # LCT_ENODEV without CUDA: then so is plain
                try:
                    return plain(c, *args)
                finally:
                    lib.lct_set_device_stream(c, None)
        try:
            client._call(many, self._arr, len(batch), ctypes.byref(failed))
        except LctError as e:
            if e.code != error_code("LCT_ENODEV"):
                raise self._at_fault(e, failed.value)
            _device_path = False  # this liblct was built without CUDA: one by one through host memory
            self._one_by_one([i for i, _, _, _ in batch])
            self._pack()
            return
        first_error = self._received()
        if first_error is not None:
            raise first_error

    def _one_by_one(self, indices):
        for i in indices:
            key, value = self.items[i]
            if self.put:
                self._infos[i] = self.client.put(key, value)
            else:
                self.client.get(key, out=value)

    @property
    def submittable(self):
        """Whether submit() takes this batch: contiguous CUDA tensors, and a liblct with the device path."""
        return not (self._single or self._staged_on is not None) and _has_device_path(self.client)

    def submit(self, event=None, after=None):
        """send() on the client's job thread (lct_submit_device_many): returns
        its Job at once, whose wait() ends it as send() would. The thread
        first waits for after (a Job of any client's batch, or None; if it
        failed, this one fails with LCT_ECANCELED and sends nothing), then for
        event (a recorded torch.cuda.Event, or its cudaEvent_t) instead of
        synchronizing the GPU: record it after the work that writes the
        values (put) or last uses them (get). Takes batches of contiguous
        CUDA tensors on the device path only. Until the job is waited for,
        the batch must not be sent, retargeted or released, and the client's
        other calls wait for it."""
        self._check_idle()
        if self._released:
            raise ValueError("the batch was released: retarget() gives it values again")
        if not self.submittable:
            raise ValueError("submit() takes a batch of contiguous CUDA tensors on the device path")
        if after is None:
            return self._submit(event, None, None)
        with after._lock:  # its handle stays valid while held (Job._end frees it under this lock)
            if after._done and after._error is not None:
                raise _canceled(after._error)
            return self._submit(event, after, None if after._done else after._handle)

    def _submit(self, event, after, after_handle):
        lib = _native.lib()
        handle = ctypes.c_void_p()
        client = self.client
        with client._lock:
            if client._c is None:
                raise ValueError("client is closed")
            submit = lib.lct_submit_put_device_many if self.put else lib.lct_submit_get_device_many
            rc = submit(client._c, self._arr, len(self._batch), getattr(event, "cuda_event", event), after_handle,
                        ctypes.byref(handle))
            if rc < 0:
                raise _error(rc)
            self._job = Job(self, handle, event, after)
            client._jobs.append(self._job)
        return self._job

    def _check_idle(self):
        if self._job is not None and not self._job._done:
            raise ValueError("the batch's submitted job is pending: wait() for it first")

    def _at_fault(self, e, failed):
        """e with the key of the item at fault, when liblct named one."""
        if failed < len(self._batch):
            e.detail = f"{_key_str(self._batch[failed][1])}: {e.detail}"
        return e

    def _received(self):
        """After a get: fills the staged outs and returns the LctError of the
        first out that does not fit what was read into it, or None."""
        if self.put:
            return None
        batch, fitted, cinfo = self._batch, self._fitted, self._cinfo
        first_error = None  # every staged out is filled before a mismatch is raised
        for j, (_, k, host, _) in enumerate(batch):
            if host.staged:
                host.finish()
            info = cinfo[j]
            got = info.raw_bytes, info.dtype
            if got != fitted[j]:
                error = _out_mismatch(k, info, host)
                fitted[j] = got if error is None else None
                first_error = first_error or error
        return first_error

    def retarget(self, values):
        """Takes new values for the batch's keys, in order. Where each CUDA
        tensor has the dtype and shape of the one it replaces (the same
        layout in a buffer allocated anew, say), only its address is packed
        again; otherwise the batch is packed afresh."""
        self._check_idle()
        values = list(values)
        if len(values) != len(self.items):
            raise ValueError(f"{len(values)} values for a batch of {len(self.items)}")
        self.items = [(key, v) for (key, _), v in zip(self.items, values)]
        self._released = False
        same = not self._repack and self._device_path == _device_path
        layout, arr = self._layout, self._arr
        for j, (i, k, host, dims) in enumerate(self._batch):
            if not same:
                break
            v = values[i]
            same = type(v) is layout[j][0] and _layout(v) == layout[j] and v.is_contiguous()
            if same:
                arr[j].dptr = host.ptr = v.data_ptr()
                host.keep = v
                if host.staged:
                    host.finish, host.staged = _no_finish, False
        if not same:
            self._pack()
        else:
            self._staged_on = None

    def release(self):
        """Lets go of the values (the packing stays for retarget): a batch
        kept between uses holds no memory of theirs."""
        self._check_idle()
        self.items = [(key, None) for key, _ in self.items]
        self._released = True
        for _, _, host, _ in self._batch:
            host.keep = None
            host.finish = _no_finish

    def infos(self):
        """The TensorInfo of each item as the last send() stored it (put)."""
        for j, (i, k, _, _) in enumerate(self._batch):
            self._infos[i] = _tensor_info(_key_str(k), self._cinfo[j])
        return list(self._infos)


class Job:
    """A Batch's requests on its client's job thread (Batch.submit)."""

    def __init__(self, batch, handle, event, after):
        self.batch = batch
        self._handle = handle
        self._event, self._after = event, after  # alive until this one ends
        self._done = False
        self._error = None
        self._lock = threading.Lock()

    def wait(self):
        """Waits for the job and ends it as Batch.send() would: raises what
        failed (again at each later call) and, for a get, checks the outs.
        Any thread may wait."""
        with self._lock:
            self._end()
        if self._error is not None:
            raise self._error

    def _end(self):
        if not self._done:
            lib = _native.lib()
            failed = ctypes.c_size_t()
            rc = lib.lct_job_wait(self._handle, ctypes.byref(failed))
            cause = _failure(self._after) if rc == error_code("LCT_ECANCELED") and self._after is not None else None
            if cause is not None:
                self._error = _canceled(cause)  # what the job waited for raised
            elif rc < 0:
                self._error = self.batch._at_fault(_error(rc, lib.lct_job_error(self._handle)), failed.value)
            else:
                self._error = self.batch._received()
            client = self.batch.client
            with client._lock:
                if self in client._jobs:
                    client._jobs.remove(self)
                lib.lct_job_free(self._handle)
                self._handle = None
            self._event = self._after = None
            self._done = True

    def __del__(self):
        if getattr(self, "_handle", None) is not None:
            _native.lib().lct_job_free(self._handle)  # waits for it: the batch's buffers may be in use


def _failure(job):
    """Waits for a job (anything with wait()); the exception it raised, or None."""
    try:
        job.wait()
    except Exception as e:  # noqa: BLE001 - returned to be looked at
        return e
    return None


def _canceled(cause):
    e = _error(error_code("LCT_ECANCELED"), f"the job it waited for failed: {cause}")
    e.__cause__ = cause
    return e


def _layout(t):
    return type(t), t.dtype, t.shape, t.get_device()


def _out_mismatch(k, info, host):
    """The LctError for an out that does not fit the stored tensor read into it, or None."""
    if info.raw_bytes != host.nbytes:
        return _error(error_code("LCT_ESIZE"), f"{_key_str(k)} holds {info.raw_bytes} bytes; out has {host.nbytes}")
    # Raw tensors hold any element type; a coded one must keep its width.
    if info.dtype != _dtype_code("raw") and host.itemsize not in (_native.lib().lct_dtype_size(info.dtype), 1):
        return _error(error_code("LCT_EDTYPE"), f"{_key_str(k)} holds {_dtype_name(info.dtype)}; "
                      f"out has {host.itemsize}-byte elements")
    return None


def _adopt(ptr, info):
    """Turns lct_get_alloc's malloc'd buffer into get()'s result."""
    n = info.raw_bytes
    shape = tuple(info.shape[:info.ndim])
    np_dtype, fmt = _RESULT_TYPES.get(_dtype_name(info.dtype), ("uint8", "B"))
    np = _numpy()
    if np is not None and n > 0:
        # Zero-copy: the array owns liblct's buffer, freed when the last view goes.
        buf = (ctypes.c_char * n).from_address(ptr)
        # Not at exit: arrays still alive then must not point at freed memory.
        weakref.finalize(buf, _native.free, ptr).atexit = False
        return np.frombuffer(buf, dtype=np_dtype).reshape(shape)
    if np is not None:
        _native.free(ptr)
        return np.empty(shape, dtype=np_dtype)
    data = bytearray(n)
    if n > 0:
        ctypes.memmove((ctypes.c_char * n).from_buffer(data), ptr, n)
    _native.free(ptr)
    # memoryview cannot cast to a shape with a zero in it: empty results stay flat.
    return memoryview(data).cast(fmt, shape) if n > 0 else memoryview(data).cast(fmt)
