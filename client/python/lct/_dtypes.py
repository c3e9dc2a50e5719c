"""_dtypes.py — lct dtypes: their names and codes as liblct knows them, the natural one of a value's element type."""
from . import _native
from .errors import error, error_code

# Natural lct dtype of a value's element type; anything else needs dtype=.
NUMPY_DTYPES = {
    "float32": "f32", "float16": "f16", "uint8": "raw", "int8": "raw", "bool": "raw",
    # ml_dtypes' numpy extension types
    "bfloat16": "bf16", "float8_e4m3fn": "f8e4m3", "float8_e5m2": "f8e5m2",
}
TORCH_DTYPES = {
    "torch.float32": "f32", "torch.float16": "f16", "torch.bfloat16": "bf16",
    "torch.float8_e4m3fn": "f8e4m3", "torch.float8_e5m2": "f8e5m2",
    "torch.uint8": "raw", "torch.int8": "raw", "torch.bool": "raw",
}
BUFFER_FORMATS = {"f": "f32", "B": "raw", "b": "raw", "c": "raw", "?": "raw"}

# What get() returns per stored dtype: numpy dtype, memoryview format. 16- and
# 8-bit floats come back as their raw words (numpy has no bf16/f8, memoryview
# cannot cast to 'e').
RESULT_TYPES = {
    "f32": ("float32", "f"), "f16": ("float16", "H"), "bf16": ("uint16", "H"),
    "f8e4m3": ("uint8", "B"), "f8e5m2": ("uint8", "B"), "raw": ("uint8", "B"),
}

_dtype_names = {}


def _tables():
    """{name: code} of the dtypes this liblct knows, asked of the library itself."""
    if not _dtype_names:
        lib = _native.lib()
        names, value = {}, 0
        while (label := lib.lct_dtype_name(value)) is not None:
            names[label.decode()] = value
            value += 1
        _dtype_names.update(names)
    return _dtype_names


def code(name):
    """The code of a dtype name; LCT_EDTYPE for one liblct does not know."""
    codes = _tables()
    if name not in codes:
        raise error(error_code("LCT_EDTYPE"), f"'{name}'; known: {', '.join(codes)}")
    return codes[name]


def name(dtype):
    """The name of a dtype code ('dtype7' for one from a newer server)."""
    for label, value in _tables().items():
        if value == dtype:
            return label
    return f"dtype{dtype}"


def size(dtype):
    """Bytes per element of a dtype code (0 if unknown)."""
    return _native.lib().lct_dtype_size(dtype)
