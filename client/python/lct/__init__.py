"""lct — Python binding of liblct, the client of lctd (tensors kept losslessly compressed in memory).

    import lct
    with lct.Client("ipc:///tmp/lctd.sock") as c:
        c.put("w", numpy_array)           # or a torch tensor, or bytes with dtype=
        w = c.get("w")                    # a new numpy array; or c.get("w", out=tensor)

lct.Client([ep, ...]) is an lct.ClientSet: each key on one of several lctd
(rendezvous hashing); lct.Client.for_rank() picks a trainer rank's own lctd.
put_many / get_many move many tensors per request (CUDA tensors of one
allocation in one GPU pass); lct.Batch packs such a set once for repeated
sends, and its submit() runs one on the client's job thread (an lct.Job).
Errors raise lct.LctError (code, name, message, detail); a missing key raises
lct.NotFoundError, which is also a KeyError. lct.LCT_ENOENT and the other
LCT_E* names give the codes. lct.optim (imported on first use; needs torch)
holds OffloadedAdamW. numpy and torch are optional.
"""
from .batch import Batch, Job
from .client import Client
from .client_set import ClientSet
from .errors import LctError, NotFoundError, error_code
from .info import ServerInfo, TensorInfo

__all__ = ["Batch", "Client", "ClientSet", "Job", "LctError", "NotFoundError", "ServerInfo", "TensorInfo", "error_code", "optim"]
__version__ = "0.1.0"


def __getattr__(name):
    # Lazy so that `import lct` needs neither torch nor a loadable liblct.
    if name == "optim":
        import importlib
        return importlib.import_module(".optim", __name__)
    if name.startswith("LCT_E"):
        return error_code(name)
    raise AttributeError(f"module 'lct' has no attribute '{name}'")
