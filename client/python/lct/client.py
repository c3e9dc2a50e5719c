"""client.py — lct.Client: put/get/stat/list/delete of named tensors in lctd through liblct."""
import ctypes
import os
import threading

from . import _dtypes, _native, _values
from .batch import Batch
from .errors import error, error_code
from .info import server_info, tensor_info


def _resolve(endpoint):
    """endpoint as given, or the endpoints of the set it names (a tuple): a
    list, or None while $LCT_ENDPOINTS is set."""
    if isinstance(endpoint, (list, tuple)) or (endpoint is None and os.environ.get("LCT_ENDPOINTS")):
        from .client_set import endpoints
        return endpoints(endpoint)
    return endpoint


class Client:
    """A connection to one lctd.

    endpoint: 'ipc:///path' or 'tcp://host:port'; None: $LCT_ENDPOINT, else
    ipc:///tmp/lctd.sock. A list of several endpoints (or None while
    $LCT_ENDPOINTS lists several) makes an lct.ClientSet instead, which
    places each key on one of them; a list of one is that endpoint. timeout_ms: per request (None: 30 s; negative:
    forever). save_timeout_ms: for save() (None: no limit). A killed or
    restarted lctd ends a call within about 2 s whatever its timeout
    (LCT_ECONN, LCT_ERESTARTED); no request is sent twice.
    connect_timeout_ms: for the first ping (None: 5 s). frame_bytes:
    payload bytes per message (None: 16 MiB, lowered to the server's limit).
    auth_token_file: file holding a token of the lctd (its
    auth_token_file's, or a tenant's of its access_file), proven by
    challenge-response and never sent (None: $LCT_AUTH_TOKEN_FILE, else
    none). A tenant's token confines the client to the tenant's keys and
    quota.
    remote: True holds the client to the host path, as one on another host
    (CUDA tensors are copied through host memory and every byte crosses the
    socket), False lets it go device to device where lctd can, whatever
    $LCT_HOST_PATH says (None: $LCT_HOST_PATH). connections: connections to lctd that
    large tensors' frames and queued jobs spread over, each authenticated by
    itself (None: $LCT_CONNECTIONS, else 1; at most 16).
    A Client may be shared between threads: its calls are serialized.
    """

    def __new__(cls, endpoint=None, **options):
        resolved = _resolve(endpoint)
        if isinstance(resolved, tuple) and len(resolved) > 1:
            from .client_set import ClientSet
            return ClientSet(resolved, **options)
        return super().__new__(cls)

    def __init__(self, endpoint=None, auth_token_file=None, timeout_ms=None,
                 connect_timeout_ms=None, frame_bytes=None, save_timeout_ms=None, remote=None, connections=None):
        resolved = _resolve(endpoint)
        if isinstance(resolved, tuple):
            endpoint = resolved[0]  # a set of one
        lib = _native.lib()
        self._lock = threading.Lock()
        self._c = None
        self._jobs = []  # Batch.submit's jobs not yet waited for: liblct serves no other call meanwhile
        self._device_path = False  # lct_device_path: CUDA tensors go device to device, else through host memory
        self.endpoint = endpoint
        self._options = dict(endpoint=endpoint, auth_token_file=auth_token_file, timeout_ms=timeout_ms,
                             connect_timeout_ms=connect_timeout_ms, frame_bytes=frame_bytes,
                             save_timeout_ms=save_timeout_ms, remote=remote, connections=connections)
        opts = _native.Options()
        lib.lct_options_init_sized(ctypes.byref(opts), ctypes.sizeof(opts))
        opts.endpoint = endpoint.encode() if endpoint is not None else None
        opts.timeout_ms = timeout_ms or 0
        opts.connect_timeout_ms = connect_timeout_ms or 0
        opts.frame_bytes = frame_bytes or 0
        opts.save_timeout_ms = save_timeout_ms or 0
        opts.host_path = 0 if remote is None else 1 if remote else -1
        opts.connections = connections or 0
        opts.auth_token_file = os.fsencode(auth_token_file) if auth_token_file is not None else None
        handle = ctypes.c_void_p()
        rc = lib.lct_connect(ctypes.byref(opts), ctypes.byref(handle))
        if rc < 0:
            raise error(rc, f"connecting to {endpoint or '$LCT_ENDPOINT or the default endpoint'}")
        self._c = handle
        self._device_path = bool(lib.lct_device_path(handle))

    @classmethod
    def for_rank(cls, rank=None, endpoints=None, **options):
        """A Client of the lctd that trainer rank `rank` uses: endpoints[rank
        % len(endpoints)]. rank None: $LOCAL_RANK (torchrun sets it), else 0,
        so that with one lctd per GPU each rank takes its own GPU's.
        endpoints: a list or comma-separated string; None: $LCT_ENDPOINTS,
        else $LCT_ENDPOINT or the default. options: as for Client."""
        from .client_set import endpoints as resolve
        listed = resolve(endpoints)
        if rank is None:
            rank = int(os.environ.get("LOCAL_RANK", "0"))
        return cls(listed[rank % len(listed)], **options)

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
                raise error(rc, _native.lib().lct_last_error(self._c))

    def _settle_jobs(self):
        # Under the lock: the client's jobs finish before it takes another call.
        lib = _native.lib()
        for job in self._jobs:
            lib.lct_job_wait(job._handle, None)
        self._jobs.clear()

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
        k = _values.key_bytes(key)
        host = _values.host(value, False, self._device_path)
        name = dtype if dtype is not None else host.natural
        if name is None:
            raise TypeError(f"a {host.what} needs dtype= (e.g. 'bf16' for bfloat16 words, or "
                            "'raw' for its bytes)")
        code = _dtypes.code(name)
        if shape is None:
            shape = _values.default_shape(host.shape, host.itemsize, _dtypes.size(code))
        shape = tuple(int(d) for d in shape)
        if any(d < 0 for d in shape):
            raise ValueError(f"negative dimension in shape {shape}")
        dims = (ctypes.c_uint64 * max(len(shape), 1))(*shape)
        info = _native.TensorInfo()
        lib = _native.lib()
        # liblct takes the host path by itself where lctd cannot go device to device.
        self._call(lib.lct_put_device if host.device else lib.lct_put, k, code, dims, len(shape), host.ptr,
                   host.nbytes, ctypes.byref(info))
        return tensor_info(_values.key_str(k), info)

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
        k = _values.key_bytes(key)
        lib = _native.lib()
        info = _native.TensorInfo()
        if out is not None:
            host = _values.host(out, True, self._device_path)
            self._call(lib.lct_get_device if host.device else lib.lct_get, k, host.ptr, host.nbytes,
                       ctypes.byref(info))
            host.finish()
            mismatch = _values.out_mismatch(k, info, host)
            if mismatch is not None:
                raise mismatch
            return out
        ptr = ctypes.c_void_p()
        self._call(lib.lct_get_alloc, k, ctypes.byref(ptr), ctypes.byref(info))
        return _values.adopt(ptr.value, info)

    def segment_bytes(self):
        """The most raw bytes one blob of put_blob may hold (lctd's segment_size, lowered so that a blob surely
        fits this client's frame); 0: lctd takes no blobs."""
        with self._lock:
            return _native.lib().lct_segment_bytes(self._c)

    def put_blob(self, key, blobs, dtype, shape, checksum):
        """Stores a tensor sent encoded: blobs (bytes-like) are its blobs of
        proto/FORMAT.md back to back, as lct_put_encoded lays them out,
        checksum the CRC-32C of its raw bytes (lct.checksum). lctd validates
        every blob and stores them as sent; returns the TensorInfo."""
        k = _values.key_bytes(key)
        code = _dtypes.code(dtype)
        shape = tuple(int(d) for d in shape)
        dims = (ctypes.c_uint64 * max(len(shape), 1))(*shape)
        view = memoryview(blobs).cast("B")
        buf = (ctypes.c_char * len(view)).from_buffer_copy(view) if view.readonly else \
            (ctypes.c_char * len(view)).from_buffer(view)
        info = _native.TensorInfo()
        self._call(_native.lib().lct_put_encoded, k, code, dims, len(shape), checksum, buf, len(view),
                   ctypes.byref(info))
        return tensor_info(_values.key_str(k), info)

    def get_blob(self, key):
        """(blobs, TensorInfo): key's stored blobs back to back, as lctd holds them, as bytes."""
        k = _values.key_bytes(key)
        lib = _native.lib()
        ptr, n, info = ctypes.c_void_p(), ctypes.c_size_t(), _native.TensorInfo()
        self._call(lib.lct_get_encoded, k, ctypes.byref(ptr), ctypes.byref(n), ctypes.byref(info))
        try:
            return ctypes.string_at(ptr.value, n.value), tensor_info(_values.key_str(k), info)
        finally:
            lib.lct_free(ptr)

    def put_encoded(self, key, value, dtype=None, shape=None, codebook=None):
        """put() with the tensor encoded here, on the CPU, through lct.codec
        (liblct_codec.so), in segments of segment_bytes() (at most 1 MiB), and sent as
        blobs: the wire carries the coded bytes and lctd codes nothing.
        codebook: an lct.codec.Codebook to reuse (None: built from value)."""
        from . import codec
        host = _values.host(value, False, False)
        name = dtype if dtype is not None else host.natural
        if name is None:
            raise TypeError(f"a {host.what} needs dtype=")
        code = _dtypes.code(name)
        if shape is None:
            shape = _values.default_shape(host.shape, host.itemsize, _dtypes.size(code))
        raw = (ctypes.c_char * host.nbytes).from_address(host.ptr) if host.nbytes else b""
        seg = min(self.segment_bytes(), 1 << 20)
        if seg == 0:
            raise error(error_code("LCT_EOP"), "this lctd takes no encoded puts")
        if codebook is None and codec.symbol_bits(code):
            codebook = codec.Codebook.from_data(name, raw)
        mv = memoryview(raw).cast("B") if host.nbytes else memoryview(b"")
        blobs = b"".join(codec.encode(name, codebook, mv[i:i + seg]) for i in range(0, max(len(mv), 1), seg)) \
            if len(mv) else codec.encode(name, codebook, b"")
        checksum = _native.lib().lct_checksum(0, host.ptr, host.nbytes)
        return self.put_blob(key, blobs, name, shape, checksum)

    def get_encoded(self, key, out=None):
        """The tensor's raw bytes, with the stored blobs sent as they are and
        decoded here, on the CPU, through lct.codec; the blobs must cover the
        tensor and the CRC-32C of the result is checked. Returns (bytearray,
        TensorInfo), or (out, TensorInfo) with each blob decoded straight into
        its place in out (any writable contiguous buffer of exactly raw_bytes
        bytes; LCT_EINVAL for another size)."""
        from . import codec
        blobs, info = self.get_blob(key)
        if out is None:
            out = bytearray(info.raw_bytes)
        dst, cap, _target = codec._address(out, writable=True)
        if cap != info.raw_bytes:
            raise error(error_code("LCT_EINVAL"), f"'{key}': out holds {cap} bytes, the tensor {info.raw_bytes}")
        src, left, _blobs = codec._address(blobs)
        off = 0
        while left:
            raw, size = codec.blob_next(src, left)
            if raw > cap - off:
                raise error(error_code("LCT_EPROTO"), f"'{key}': the blobs hold more than the tensor")
            codec.decode_into(src, size, dst + off, raw)
            src, left, off = src + size, left - size, off + raw
        if off != cap:
            raise error(error_code("LCT_EPROTO"), f"'{key}': the blobs hold {off} of the tensor's {cap} bytes")
        if _native.lib().lct_checksum(0, dst, cap) != info.checksum:
            raise error(error_code("LCT_ECHECKSUM"), f"'{key}': decoded bytes do not match the stored checksum")
        return out, info

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
        self._call(_native.lib().lct_delete, _values.key_bytes(key))

    def stat(self, key):
        """The TensorInfo of key; NotFoundError if absent."""
        k = _values.key_bytes(key)
        info = _native.TensorInfo()
        self._call(_native.lib().lct_stat, k, ctypes.byref(info))
        return tensor_info(_values.key_str(k), info)

    def list(self, prefix=None, page_size=None):
        """Yields the TensorInfo of every key starting with prefix, in bytewise
        key order, fetching pages of page_size (None: the server's default)
        as iteration goes."""
        lib = _native.lib()
        p = _values.key_bytes(prefix) if prefix is not None else None
        cursor = None
        while True:
            page = ctypes.POINTER(_native.ListPage)()
            self._call(lib.lct_list, p, cursor, page_size or 0, ctypes.byref(page))
            try:
                entries = page.contents.entries[:page.contents.n]
                items = [tensor_info(_values.key_str(e.key), e.info) for e in entries]
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
        lib = _native.lib()  # lays out ServerStats as liblct names its fields
        s = _native.ServerStats()
        self._call(lib.lct_stats, ctypes.byref(s), None)
        return {name: getattr(s, name) for name in _native.STATS_FIELDS}

    def save(self):
        """Has lctd write every tensor changed since its last save to its
        persist_dir (SAVE) and returns how many it wrote; LCT_ECONFIG from an
        lctd without one, LCT_EIO when some could not be written. Waits
        save_timeout_ms, not timeout_ms."""
        written = ctypes.c_uint64()
        self._call(_native.lib().lct_save, ctypes.byref(written))
        return written.value

    def ping(self):
        """One round trip; returns the server's ServerInfo."""
        i = _native.ServerInfo()
        self._call(_native.lib().lct_ping, ctypes.byref(i))
        return server_info(i)
