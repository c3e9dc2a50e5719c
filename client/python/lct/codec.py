"""codec.py — the LCT codec (liblct_codec.so, kernels/lct_codec.h and lct_cuda.h) for Python: codebooks, the CPU
codec on buffers, and the CUDA codec's stream-ordered calls on device pointers (lct.torch wraps them for tensors).

    import lct.codec as codec
    cb = codec.Codebook.from_data("bf16", buf)       # once per tensor or class of tensors
    blob = codec.encode("bf16", cb, buf)             # bytes in proto/FORMAT.md's format
    codec.decode(blob, out)                          # bit for bit what was encoded

Needs no lctd and no liblct. Errors raise lct.LctError with the codec's code.
"""
import ctypes
import threading

from . import _native
from .errors import error, error_code

MAX_SYMS = 1025  # LCT_MAX_SYMS


class _Codebook(ctypes.Structure):
    _fields_ = [
        ("dtype", ctypes.c_uint8),
        ("max_len", ctypes.c_uint8),
        ("n_syms", ctypes.c_uint16),
        ("len", ctypes.c_uint8 * MAX_SYMS),
        ("code", ctypes.c_uint16 * MAX_SYMS),
        ("expected_bits_per_elem", ctypes.c_double),
    ]


class _EncodeStats(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in ("blob_bytes", "code_bits", "escapes", "raw_chunks")]


class _BlobInfo(ctypes.Structure):
    _fields_ = [("dtype", ctypes.c_int), ("n_elems", ctypes.c_uint64), ("raw_bytes", ctypes.c_uint64),
                ("blob_bytes", ctypes.c_uint64), ("n_chunks", ctypes.c_uint32)]


class EncodeItem(ctypes.Structure):
    """lct_cuda_encode_item: one tensor of lct_cuda_encode_batch (device pointers as integers)."""
    _fields_ = [("dtype", ctypes.c_int), ("codebook", ctypes.c_void_p), ("src", ctypes.c_void_p),
                ("n_elems", ctypes.c_uint64), ("dst", ctypes.c_void_p), ("cap", ctypes.c_size_t),
                ("blob_bytes", ctypes.c_void_p), ("code_bits", ctypes.c_void_p), ("hist", ctypes.c_void_p)]


class DecodeItem(ctypes.Structure):
    """lct_cuda_decode_item: one blob of lct_cuda_decode_batch (device pointers as integers)."""
    _fields_ = [("dtype", ctypes.c_int), ("n_elems", ctypes.c_uint64), ("blob", ctypes.c_void_p),
                ("blob_bytes", ctypes.c_size_t), ("dst", ctypes.c_void_p), ("status", ctypes.c_void_p)]


_P, _U64, _SZ, _I = ctypes.c_void_p, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_int
_CB = ctypes.POINTER(_Codebook)
_PROTOTYPES = {
    "lct_codec_struct_size": (_SZ, [_I]),
    "lct_strerror": (ctypes.c_char_p, [_I]),
    "lct_err_name": (ctypes.c_char_p, [_I]),
    "lct_dtype_parse": (_I, [ctypes.c_char_p, ctypes.POINTER(_I)]),
    "lct_dtype_name": (ctypes.c_char_p, [_I]),
    "lct_dtype_size": (_SZ, [_I]),
    "lct_dtype_symbol_bits": (ctypes.c_uint, [_I]),
    "lct_encode_bound": (_SZ, [_I, _U64]),
    "lct_histogram": (_I, [_I, _P, _U64, _P]),
    "lct_codebook_build": (_I, [_I, _P, _CB]),
    "lct_codebook_from_data": (_I, [_I, _P, _U64, _CB]),
    "lct_encode": (_I, [_I, _CB, _P, _U64, _P, _SZ, ctypes.POINTER(_EncodeStats)]),
    "lct_blob_info_read": (_I, [_P, _SZ, ctypes.POINTER(_BlobInfo)]),
    "lct_blob_next": (_I, [_P, _SZ, ctypes.POINTER(_BlobInfo)]),
    "lct_decode": (_I, [_P, _SZ, _P, _SZ]),
}
_CUDA_PROTOTYPES = {
    "lct_cuda_struct_size": (_SZ, [_I]),
    "lct_cuda_codebook_create": (_I, [_CB, ctypes.POINTER(_P)]),
    "lct_cuda_codebook_set": (_I, [_P, _CB, _P]),
    "lct_cuda_codebook_destroy": (None, [_P]),
    "lct_cuda_histogram": (_I, [_I, _P, _U64, _P, _P]),
    "lct_cuda_encode_workspace_size": (_SZ, [ctypes.POINTER(EncodeItem), _SZ]),
    "lct_cuda_encode_batch": (_I, [ctypes.POINTER(EncodeItem), _SZ, _P, _SZ, _P]),
    "lct_cuda_decode_workspace_size": (_SZ, [_SZ]),
    "lct_cuda_decode_batch": (_I, [ctypes.POINTER(DecodeItem), _SZ, _P, _SZ, _P]),
    "lct_cuda_crc32c_workspace_size": (_SZ, [_U64]),
    "lct_cuda_crc32c": (_I, [_P, _U64, _P, _P, _SZ, _P]),
}
# Each structure's C name and its lct_codec_struct / lct_cuda_struct value.
_STRUCTS = {_Codebook: ("lct_codebook", 0), _EncodeStats: ("lct_encode_stats", 1), _BlobInfo: ("lct_blob_info", 2)}
_CUDA_STRUCTS = {EncodeItem: ("lct_cuda_encode_item", 0), DecodeItem: ("lct_cuda_decode_item", 1)}

_lock = threading.Lock()
_lib = None
_has_cuda = False


def _declare_all(handle, path, prototypes, structs, size_fn):
    try:
        for name, (restype, argtypes) in prototypes.items():
            fn = getattr(handle, name)
            fn.restype, fn.argtypes = restype, argtypes
    except AttributeError as e:
        raise OSError(f"{path} is not the liblct_codec this binding was written for: {e}") from None
    for cls, (c_name, which) in structs.items():
        size = getattr(handle, size_fn)(which)
        if ctypes.sizeof(cls) != size:
            raise OSError(f"{path}: {c_name} is {size} bytes there and {ctypes.sizeof(cls)} as this binding "
                          "declares it: a liblct_codec of another version")


def _declare(handle, path):
    global _has_cuda
    _declare_all(handle, path, _PROTOTYPES, _STRUCTS, "lct_codec_struct_size")
    _has_cuda = hasattr(handle, "lct_cuda_struct_size")  # a build without CUDA has the CPU codec only
    if _has_cuda:
        _declare_all(handle, path, _CUDA_PROTOTYPES, _CUDA_STRUCTS, "lct_cuda_struct_size")


def lib():
    """liblct_codec, loaded (LCT_CODEC_LIBRARY, else as liblct is found), declared and checked on first use."""
    global _lib
    with _lock:
        if _lib is None:
            _lib = _native.load("liblct_codec", "LCT_CODEC_LIBRARY", _declare)
        return _lib


def cuda_built():
    """True if the loaded liblct_codec has the CUDA codec (a GPU may still be absent)."""
    lib()
    return _has_cuda


def check(rc, what):
    """rc when >= 0; an LctError naming what failed otherwise."""
    if rc < 0:
        raise error(rc, what)
    return rc


def dtype_code(name):
    """The code of a dtype name (f32, bf16, f16, f8e4m3, f8e5m2, raw); LCT_EDTYPE for another."""
    out = ctypes.c_int()
    if lib().lct_dtype_parse(name.encode(), ctypes.byref(out)) != 0:
        raise error(error_code("LCT_EDTYPE"), f"'{name}'")
    return out.value


def dtype_size(code):
    return lib().lct_dtype_size(code)


def symbol_bits(code):
    """Bits of the coded sign+exponent field; 0 for a dtype stored raw."""
    return lib().lct_dtype_symbol_bits(code)


def encode_bound(code, n_elems):
    """The largest blob n_elems elements of the dtype can give."""
    return lib().lct_encode_bound(code, n_elems)


def _address(buf, writable=False):
    """(address, nbytes, owner) of a buffer-protocol object, or of an (address, nbytes) pair; owner keeps the
    memory alive for the call (a copy where a read-only buffer is not bytes)."""
    if isinstance(buf, tuple):
        return buf[0], buf[1], None
    if isinstance(buf, bytes):
        return ctypes.cast(ctypes.c_char_p(buf), ctypes.c_void_p).value, len(buf), buf
    view = memoryview(buf)
    if not view.contiguous or (writable and view.readonly):
        raise error(error_code("LCT_EINVAL"), "the buffer must be contiguous" + (" and writable" if writable else ""))
    if view.readonly:
        return _address(view.tobytes())
    if view.nbytes == 0:
        return 0, 0, None
    return ctypes.addressof(ctypes.c_char.from_buffer(view.cast("B"))), view.nbytes, view


class Codebook:
    """A host codebook (lct_codebook): built once from data or a histogram, reused for later encodes."""

    def __init__(self, dtype, raw):
        self.dtype, self._raw = dtype, raw  # dtype: the code

    @classmethod
    def from_data(cls, dtype, buf):
        code = dtype_code(dtype) if isinstance(dtype, str) else dtype
        ptr, nbytes, _owner = _address(buf)
        raw = _Codebook()
        check(lib().lct_codebook_from_data(code, ptr, nbytes // max(dtype_size(code), 1), ctypes.byref(raw)),
              "building a codebook")
        return cls(code, raw)

    @classmethod
    def from_histogram(cls, dtype, counts):
        """counts: 2^symbol_bits(dtype) symbol counts (a sequence, or the address of uint64 counters)."""
        code = dtype_code(dtype) if isinstance(dtype, str) else dtype
        n = 1 << symbol_bits(code)
        if isinstance(counts, int):
            hist = counts
        else:
            if len(counts) != n:
                raise error(error_code("LCT_EINVAL"), f"{len(counts)} counts for a dtype of {n} symbols")
            arr = (ctypes.c_uint64 * n)(*counts)
            hist = ctypes.addressof(arr)
        raw = _Codebook()
        check(lib().lct_codebook_build(code, hist, ctypes.byref(raw)), "building a codebook")
        return cls(code, raw)

    @property
    def expected_bits(self):
        """Code bits per element on the data it was built from."""
        return self._raw.expected_bits_per_elem


def encode(dtype, codebook, buf):
    """The blob of a buffer's elements (bytes); codebook None for raw."""
    code = dtype_code(dtype) if isinstance(dtype, str) else dtype
    ptr, nbytes, _owner = _address(buf)
    size = max(dtype_size(code), 1)
    if nbytes % size:
        raise error(error_code("LCT_EINVAL"), f"{nbytes} bytes is not a whole number of {size}-byte elements")
    out = ctypes.create_string_buffer(encode_bound(code, nbytes // size))
    stats = encode_into(code, codebook, ptr, nbytes // size, ctypes.addressof(out), len(out))
    return out.raw[: stats[0]]


def encode_into(code, codebook, src, n_elems, dst, cap):
    """Encodes n_elems elements at host address src into dst (cap bytes): (blob bytes, code bits)."""
    stats = _EncodeStats()
    cb = ctypes.byref(codebook._raw) if codebook is not None else None
    check(lib().lct_encode(code, cb, src, n_elems, dst, cap, ctypes.byref(stats)), "encoding")
    return stats.blob_bytes, stats.code_bits


def blob_info(blob):
    """(dtype code, elements, raw bytes) of a blob, its header validated."""
    ptr, nbytes, _owner = _address(blob)
    info = _BlobInfo()
    check(lib().lct_blob_info_read(ptr, nbytes, ctypes.byref(info)), "reading a blob's header")
    return info.dtype, info.n_elems, info.raw_bytes


def blob_next(address, nbytes):
    """(raw bytes, blob bytes) of the first blob of nbytes at host address
    holding blobs back to back, its header validated (lct_blob_next)."""
    info = _BlobInfo()
    check(lib().lct_blob_next(address, nbytes, ctypes.byref(info)), "reading a blob's header")
    return info.raw_bytes, info.blob_bytes


def decode(blob, out):
    """Decodes a blob into a writable buffer of at least its raw bytes; every field is checked."""
    ptr, nbytes, _owner = _address(blob)
    dst, cap, _target = _address(out, writable=True)
    check(lib().lct_decode(ptr, nbytes, dst, cap), "decoding")


def decode_into(blob, nbytes, dst, cap):
    """lct_decode on host addresses."""
    check(lib().lct_decode(blob, nbytes, dst, cap), "decoding")


class CudaCodebook:
    """A codebook resident on the current CUDA device (lct_cuda_codebook)."""

    def __init__(self, codebook):
        self.dtype = codebook.dtype
        self.handle = ctypes.c_void_p()
        check(lib().lct_cuda_codebook_create(ctypes.byref(codebook._raw), ctypes.byref(self.handle)),
              "uploading a codebook")

    def set(self, codebook, stream):
        """Replaces its contents, ordered on stream (an integer cudaStream_t) after the work queued there."""
        check(lib().lct_cuda_codebook_set(self.handle, ctypes.byref(codebook._raw), stream), "updating a codebook")
        self.dtype = codebook.dtype

    def __del__(self):
        if _lib is not None and getattr(self, "handle", None):
            _lib.lct_cuda_codebook_destroy(self.handle)
            self.handle = None


def cuda_histogram(code, src, n_elems, hist, stream):
    check(lib().lct_cuda_histogram(code, src, n_elems, hist, stream), "counting symbols")


def cuda_encode_workspace_size(items):
    arr = (EncodeItem * len(items))(*items)
    return lib().lct_cuda_encode_workspace_size(arr, len(items))


def cuda_encode_batch(items, workspace, workspace_bytes, stream):
    arr = (EncodeItem * len(items))(*items)
    check(lib().lct_cuda_encode_batch(arr, len(items), workspace, workspace_bytes, stream), "encoding on the GPU")


def cuda_decode_workspace_size(count):
    return lib().lct_cuda_decode_workspace_size(count)


def cuda_decode_batch(items, workspace, workspace_bytes, stream):
    arr = (DecodeItem * len(items))(*items)
    check(lib().lct_cuda_decode_batch(arr, len(items), workspace, workspace_bytes, stream), "decoding on the GPU")


def cuda_crc32c_workspace_size(nbytes):
    return lib().lct_cuda_crc32c_workspace_size(nbytes)


def cuda_crc32c(src, nbytes, crc, workspace, workspace_bytes, stream):
    """The CRC-32C of nbytes at device pointer src into the uint32 at crc (device or pinned), on stream."""
    check(lib().lct_cuda_crc32c(src, nbytes, crc, workspace, workspace_bytes, stream), "checksumming on the GPU")
