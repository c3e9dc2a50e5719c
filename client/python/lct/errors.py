"""errors.py — lct.LctError and NotFoundError, raised for liblct's negative codes, and the codes by name."""
from . import _native


def _table():
    """A library with the error table (lct_err_name, lct_strerror): liblct, else the codec's (lct.codec needs
    no liblct)."""
    try:
        return _native.lib()
    except OSError:
        from . import codec
        return codec.lib()


class LctError(Exception):
    """A failure reported by liblct or lctd.

    code is the negative LCT error code (proto/lct_error.h), name its symbol
    ('LCT_ENOENT'), message lct_strerror's text and detail the specifics
    (often the server's words; may be empty).
    """

    def __init__(self, code, detail=""):
        lib = _table()
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


def error(code, detail=""):
    """The exception for a negative code: NotFoundError for LCT_ENOENT, else LctError."""
    if isinstance(detail, bytes):
        detail = detail.decode("utf-8", "replace")
    cls = NotFoundError if code == error_code("LCT_ENOENT") else LctError
    return cls(code, detail)


_error_codes = {}


def error_code(name):
    """The negative code of an error symbol, e.g. error_code('LCT_ENOENT') == -9."""
    if not _error_codes:
        lib = _table()
        syms = {lib.lct_err_name(code).decode(): code for code in range(-1, -128, -1)}
        syms.pop("LCT_EUNKNOWN", None)
        _error_codes.update(syms)  # whole, so that another thread never sees it half filled
    try:
        return _error_codes[name]
    except KeyError:
        raise AttributeError(f"no LCT error named {name}") from None


def canceled(cause):
    """LCT_ECANCELED for a job whose predecessor raised cause."""
    e = error(error_code("LCT_ECANCELED"), f"the job it waited for failed: {cause}")
    e.__cause__ = cause
    return e
