"""_native.py — finds liblct.so, declares its C API (client/lct.h) to ctypes and checks the structures against it."""
import ctypes
import os
import pathlib
import threading

MAX_DIMS = 8  # LCT_MAX_DIMS


class Options(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("endpoint", ctypes.c_char_p),
        ("timeout_ms", ctypes.c_int),
        ("connect_timeout_ms", ctypes.c_int),
        ("frame_bytes", ctypes.c_size_t),
        ("auth_token_file", ctypes.c_char_p),
        ("save_timeout_ms", ctypes.c_int),
        ("host_path", ctypes.c_int),
        ("connections", ctypes.c_int),
    ]


class TensorInfo(ctypes.Structure):
    _fields_ = [
        ("dtype", ctypes.c_int),
        ("ndim", ctypes.c_int),
        ("shape", ctypes.c_uint64 * MAX_DIMS),
        ("raw_bytes", ctypes.c_uint64),
        ("stored_bytes", ctypes.c_uint64),
        ("version", ctypes.c_uint64),
        ("checksum", ctypes.c_uint32),
    ]


class ListEntry(ctypes.Structure):
    _fields_ = [("key", ctypes.c_char_p), ("info", TensorInfo)]


class ListPage(ctypes.Structure):
    _fields_ = [
        ("n", ctypes.c_size_t),
        ("entries", ctypes.POINTER(ListEntry)),
        ("next_cursor", ctypes.c_char_p),
    ]


class ServerInfo(ctypes.Structure):
    _fields_ = [
        ("server", ctypes.c_char * 64),
        ("backend", ctypes.c_char * 16),
        ("protocol", ctypes.c_int),
        ("frame_bytes", ctypes.c_uint64),
        ("instance", ctypes.c_uint64),
    ]


class DeviceTensor(ctypes.Structure):
    _fields_ = [
        ("key", ctypes.c_char_p),
        ("dtype", ctypes.c_int),
        ("shape", ctypes.POINTER(ctypes.c_uint64)),
        ("ndim", ctypes.c_int),
        ("dptr", ctypes.c_void_p),
        ("bytes", ctypes.c_size_t),
        ("info", ctypes.POINTER(TensorInfo)),
    ]


class ServerStats(ctypes.Structure):
    """lct_server_stats: a uint64 per field, named as the loaded liblct names them (set by lib())."""


STATS_FIELDS = ()  # lct_server_stats's field names, in order, from the loaded liblct

# Each structure's C name and lct_struct value (for lct_struct_size).
_STRUCTS = {
    Options: ("lct_options", 1), TensorInfo: ("lct_tensor_info", 2), DeviceTensor: ("lct_device_tensor", 3),
    ListEntry: ("lct_list_entry", 4), ListPage: ("lct_list_page", 5), ServerStats: ("lct_server_stats", 6),
    ServerInfo: ("lct_server_info", 7),
}

_P = ctypes.c_void_p
_CLIENT = ctypes.c_void_p
_PROTOTYPES = {
    "lct_version_string": (ctypes.c_char_p, []),
    "lct_struct_size": (ctypes.c_size_t, [ctypes.c_int]),
    "lct_stats_field_name": (ctypes.c_char_p, [ctypes.c_size_t]),
    "lct_options_init_sized": (None, [ctypes.POINTER(Options), ctypes.c_size_t]),
    "lct_connect": (ctypes.c_int, [ctypes.POINTER(Options), ctypes.POINTER(_CLIENT)]),
    "lct_close": (None, [_CLIENT]),
    "lct_free": (None, [ctypes.c_void_p]),
    "lct_last_error": (ctypes.c_char_p, [_CLIENT]),
    "lct_device_path": (ctypes.c_int, [_CLIENT]),
    "lct_put": (ctypes.c_int, [_CLIENT, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_uint64),
                               ctypes.c_int, _P, ctypes.c_size_t, ctypes.POINTER(TensorInfo)]),
    "lct_get": (ctypes.c_int, [_CLIENT, ctypes.c_char_p, _P, ctypes.c_size_t, ctypes.POINTER(TensorInfo)]),
    "lct_put_device": (ctypes.c_int, [_CLIENT, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_uint64),
                                      ctypes.c_int, _P, ctypes.c_size_t, ctypes.POINTER(TensorInfo)]),
    "lct_get_device": (ctypes.c_int, [_CLIENT, ctypes.c_char_p, _P, ctypes.c_size_t, ctypes.POINTER(TensorInfo)]),
    "lct_put_device_many": (ctypes.c_int, [_CLIENT, ctypes.POINTER(DeviceTensor), ctypes.c_size_t,
                                           ctypes.POINTER(ctypes.c_size_t)]),
    "lct_get_device_many": (ctypes.c_int, [_CLIENT, ctypes.POINTER(DeviceTensor), ctypes.c_size_t,
                                           ctypes.POINTER(ctypes.c_size_t)]),
    "lct_set_device_stream": (ctypes.c_int, [_CLIENT, ctypes.c_void_p]),
    "lct_submit_put_device_many": (ctypes.c_int, [_CLIENT, ctypes.POINTER(DeviceTensor), ctypes.c_size_t,
                                                  _P, _P, ctypes.POINTER(_P)]),
    "lct_submit_get_device_many": (ctypes.c_int, [_CLIENT, ctypes.POINTER(DeviceTensor), ctypes.c_size_t,
                                                  _P, _P, ctypes.POINTER(_P)]),
    "lct_job_wait": (ctypes.c_int, [_P, ctypes.POINTER(ctypes.c_size_t)]),
    "lct_job_error": (ctypes.c_char_p, [_P]),
    "lct_job_free": (None, [_P]),
    "lct_checksum": (ctypes.c_uint32, [ctypes.c_uint32, _P, ctypes.c_size_t]),
    "lct_segment_bytes": (ctypes.c_uint64, [_CLIENT]),
    "lct_put_encoded": (ctypes.c_int, [_CLIENT, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_uint64),
                                       ctypes.c_int, ctypes.c_uint32, _P, ctypes.c_size_t,
                                       ctypes.POINTER(TensorInfo)]),
    "lct_get_encoded": (ctypes.c_int, [_CLIENT, ctypes.c_char_p, ctypes.POINTER(_P), ctypes.POINTER(ctypes.c_size_t),
                                       ctypes.POINTER(TensorInfo)]),
    "lct_submit_put": (ctypes.c_int, [_CLIENT, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_uint64),
                                      ctypes.c_int, _P, ctypes.c_size_t, ctypes.POINTER(TensorInfo), _P,
                                      ctypes.POINTER(_P)]),
    "lct_submit_get": (ctypes.c_int, [_CLIENT, ctypes.c_char_p, _P, ctypes.c_size_t, ctypes.POINTER(TensorInfo), _P,
                                      ctypes.POINTER(_P)]),
    "lct_save": (ctypes.c_int, [_CLIENT, ctypes.POINTER(ctypes.c_uint64)]),
    "lct_get_alloc": (ctypes.c_int, [_CLIENT, ctypes.c_char_p, ctypes.POINTER(_P), ctypes.POINTER(TensorInfo)]),
    "lct_delete": (ctypes.c_int, [_CLIENT, ctypes.c_char_p]),
    "lct_stat": (ctypes.c_int, [_CLIENT, ctypes.c_char_p, ctypes.POINTER(TensorInfo)]),
    "lct_list": (ctypes.c_int, [_CLIENT, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t,
                                ctypes.POINTER(ctypes.POINTER(ListPage))]),
    "lct_list_free": (None, [ctypes.POINTER(ListPage)]),
    "lct_stats": (ctypes.c_int, [_CLIENT, ctypes.POINTER(ServerStats), ctypes.POINTER(_P)]),
    "lct_ping": (ctypes.c_int, [_CLIENT, ctypes.POINTER(ServerInfo)]),
    "lct_client_set_open": (ctypes.c_int, [ctypes.POINTER(Options), ctypes.c_char_p, ctypes.POINTER(_P)]),
    "lct_client_set_close": (None, [_P]),
    "lct_client_set_size": (ctypes.c_size_t, [_P]),
    "lct_client_set_endpoint": (ctypes.c_char_p, [_P, ctypes.c_size_t]),
    "lct_client_set_place": (ctypes.c_size_t, [_P, ctypes.c_char_p]),
    "lct_strerror": (ctypes.c_char_p, [ctypes.c_int]),
    "lct_err_name": (ctypes.c_char_p, [ctypes.c_int]),
    "lct_dtype_size": (ctypes.c_size_t, [ctypes.c_int]),
    "lct_dtype_name": (ctypes.c_char_p, [ctypes.c_int]),
}


def candidates(stem="liblct", env="LCT_LIBRARY"):
    """Where a library of this project (liblct, liblct_codec) is looked for, in
    order (README.md, "Finding liblct"): env's path, beside this package, a
    checkout's build, the system loader."""
    here = pathlib.Path(__file__).resolve().parent
    chosen = os.environ.get(env)
    if chosen:
        return [chosen]  # an explicit choice is never second-guessed
    paths = [str(here / f"{stem}.so")]
    root = here.parents[2]  # client/python/lct -> the repository root, in a checkout
    if (root / "client" / "lct.h").exists():
        paths.append(str(root / "build" / "lib" / f"{stem}.so"))
    if env != "LCT_LIBRARY" and os.environ.get("LCT_LIBRARY"):
        paths.append(str(pathlib.Path(os.environ["LCT_LIBRARY"]).parent / f"{stem}.so"))  # liblct's neighbour
    paths += [f"{stem}.so.0", f"{stem}.so"]  # the system loader (ldconfig, LD_LIBRARY_PATH)
    return paths


def load(stem, env, declare):
    """The first of candidates(stem, env) that loads, passed to declare(handle, path)."""
    tried = []
    for path in candidates(stem, env):
        if os.sep in path and not os.path.exists(path):
            tried.append(f"{path} (absent)")
            continue
        try:
            handle = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{path} ({e})")
            continue
        declare(handle, path)
        return handle
    raise OSError(f"{stem} not found; set {env} to the path of {stem}.so. Tried: " + "; ".join(tried))


def _declare(handle, path):
    """Declares the prototypes, after laying out ServerStats as handle names its
    fields and checking every structure's size against handle's own."""
    global STATS_FIELDS
    try:
        for name, (restype, argtypes) in _PROTOTYPES.items():
            fn = getattr(handle, name)
            fn.restype = restype
            fn.argtypes = argtypes
    except AttributeError as e:
        raise OSError(f"{path} is not the liblct this binding was written for: {e}") from None
    if not STATS_FIELDS:
        names = []
        while (name := handle.lct_stats_field_name(len(names))) is not None:
            names.append(name.decode())
        ServerStats._fields_ = [(name, ctypes.c_uint64) for name in names]
        STATS_FIELDS = tuple(names)
    for cls, (c_name, which) in _STRUCTS.items():
        size = handle.lct_struct_size(which)
        if ctypes.sizeof(cls) != size:
            raise OSError(f"{path}: {c_name} is {size} bytes there and {ctypes.sizeof(cls)} as this binding "
                          "declares it: a liblct of another version")


_lock = threading.Lock()
_lib = None


def lib():
    """liblct, loaded, declared and checked on first use."""
    global _lib
    with _lock:
        if _lib is None:
            _lib = load("liblct", "LCT_LIBRARY", _declare)
        return _lib


def free(ptr):
    """Releases memory that liblct allocated (lct_get_alloc, lct_stats text)."""
    lib().lct_free(ptr)
