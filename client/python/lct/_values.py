"""_values.py — a caller's keys and values as liblct takes them: memory to read or fill, on the host or a CUDA device."""
import ctypes
import sys
import weakref

from . import _dtypes, _native
from .errors import error, error_code


def key_bytes(key):
    """A str or bytes key as liblct takes it (a C string)."""
    if isinstance(key, str):
        # surrogateescape: keys list() decoded from arbitrary bytes come back intact.
        key = key.encode("utf-8", "surrogateescape")
    elif not isinstance(key, bytes):
        raise TypeError(f"key must be str or bytes, not {type(key).__name__}")
    if b"\0" in key:
        raise ValueError("key contains a NUL byte")  # liblct takes C strings
    return key


def key_str(raw):
    """A key from liblct as a str (bytes that are not UTF-8 kept as surrogates)."""
    return raw.decode("utf-8", "surrogateescape")


def no_finish():
    pass


class Host:
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
        self.finish = finish or no_finish
        self.device = device
        self.staged = staged  # a device buffer of the binding's own (a put's copy: its bytes as of packing;
        # a get's staging), made on the current stream


def host(value, writable, device_path):
    """The one dispatch from a caller's value to the memory liblct uses.

    writable: the value is a get's destination (else a put's source). torch
    and numpy are looked up in sys.modules, never imported here: a value of
    their types implies they are loaded. CUDA tensors stay on their device
    (the result's device is set) when liblct has the device path
    (device_path, lct_device_path's answer); else they go through host memory.
    """
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        if value.device.type == "cuda" and device_path:
            return _torch_device(torch, value, writable)
        return _torch_host(torch, value, writable)
    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, np.ndarray):
        return _numpy_host(np, value, writable)
    return _buffer_host(value, writable)


def _torch_host(torch, t, writable):
    t = t.detach()  # liblct reads and writes memory autograd does not track
    natural = _dtypes.TORCH_DTYPES.get(str(t.dtype))
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
    return Host(staged.data_ptr(), staged.numel() * staged.element_size(), t.shape,
                 t.element_size(), natural, what, staged, finish)


def _torch_device(torch, t, writable):
    """A CUDA tensor's own memory, or a contiguous copy on its device."""
    t = t.detach()
    natural = _dtypes.TORCH_DTYPES.get(str(t.dtype))
    what = f"torch {str(t.dtype)[6:]} tensor"
    finish = None
    if t.is_contiguous():
        staged = t
    elif writable:
        staged = torch.empty(t.shape, dtype=t.dtype, device=t.device)
        finish = lambda: t.copy_(staged)
    else:
        staged = t.contiguous()
    return Host(staged.data_ptr(), staged.numel() * staged.element_size(), t.shape,
                 t.element_size(), natural, what, staged, finish, device=True, staged=staged is not t)


def _numpy_host(np, a, writable):
    natural = _dtypes.NUMPY_DTYPES.get(a.dtype.name)
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
    return Host(staged.ctypes.data, a.nbytes, a.shape, a.itemsize, natural, what, staged, finish)


def _buffer_host(obj, writable):
    try:
        mv = memoryview(obj)
    except TypeError:
        raise TypeError(f"{type(obj).__name__} is not a bytes-like object, numpy array or "
                        "torch tensor") from None
    if not mv.c_contiguous:
        raise ValueError("buffer is not C-contiguous")
    natural = _dtypes.BUFFER_FORMATS.get(mv.format.lstrip("@=<"))
    what = f"buffer of format '{mv.format}'"
    nbytes = mv.nbytes
    if nbytes == 0:
        return Host(None, 0, mv.shape, mv.itemsize, natural, what, None)
    if not mv.readonly:
        arr = (ctypes.c_char * nbytes).from_buffer(mv.cast("B"))
    elif writable:
        raise ValueError("out is a read-only buffer")
    elif isinstance(obj, bytes):
        arr = ctypes.c_char_p(obj)  # points into the bytes object: no copy
        return Host(ctypes.cast(arr, ctypes.c_void_p).value, nbytes, mv.shape, mv.itemsize,
                     natural, what, (obj, arr))
    else:
        arr = (ctypes.c_char * nbytes).from_buffer_copy(mv)  # other read-only buffers: one copy
    return Host(ctypes.addressof(arr), nbytes, mv.shape, mv.itemsize, natural, what, (mv, arr))


def default_shape(shape, itemsize, width):
    """The shape of a value's bytes seen as elements of width bytes, as
    numpy's view() reshapes the last axis. Inexact sizes are left for liblct
    to refuse (LCT_ESIZE) with its message."""
    if itemsize == width:
        return shape
    if not shape:
        return (itemsize // width,)
    return shape[:-1] + (shape[-1] * itemsize // width,)


_numpy_found = None


def numpy_module():
    """numpy if importable (imported on first need), else None."""
    global _numpy_found
    if _numpy_found is None:
        try:
            import numpy
            _numpy_found = numpy
        except ImportError:
            _numpy_found = False
    return _numpy_found or None


def layout(t):
    """What Batch.retarget requires a CUDA tensor replacing t to share with it."""
    return type(t), t.dtype, t.shape, t.get_device()


def out_mismatch(k, info, host):
    """The LctError for an out that does not fit the stored tensor read into it, or None."""
    if info.raw_bytes != host.nbytes:
        return error(error_code("LCT_ESIZE"), f"{key_str(k)} holds {info.raw_bytes} bytes; out has {host.nbytes}")
    # Raw tensors hold any element type; a coded one must keep its width.
    if info.dtype != _dtypes.code("raw") and host.itemsize not in (_dtypes.size(info.dtype), 1):
        return error(error_code("LCT_EDTYPE"), f"{key_str(k)} holds {_dtypes.name(info.dtype)}; "
                     f"out has {host.itemsize}-byte elements")
    return None


def adopt(ptr, info):
    """Turns lct_get_alloc's malloc'd buffer into get()'s result."""
    n = info.raw_bytes
    shape = tuple(info.shape[:info.ndim])
    np_dtype, fmt = _dtypes.RESULT_TYPES.get(_dtypes.name(info.dtype), ("uint8", "B"))
    np = numpy_module()
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
