"""info.py — what lctd reports: lct.TensorInfo of a key, lct.ServerInfo of the server."""
import dataclasses

from . import _dtypes


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
    instance: int  # this run of lctd (random, drawn at its start): another after a restart


def tensor_info(key, c):
    """The TensorInfo of key from liblct's lct_tensor_info c."""
    return TensorInfo(key=key, dtype=_dtypes.name(c.dtype), shape=tuple(c.shape[:c.ndim]),
                      raw_bytes=c.raw_bytes, stored_bytes=c.stored_bytes, version=c.version,
                      checksum=c.checksum)


def server_info(c):
    """The ServerInfo of liblct's lct_server_info c."""
    return ServerInfo(server=c.server.decode(), backend=c.backend.decode(), protocol=c.protocol,
                      frame_bytes=c.frame_bytes, instance=c.instance)
