"""wire.py — CUDA tensors to and from lctd coded on their own GPU: an encoded put sends the blobs the GPU codec
made in pieces of lctd's segment size (lct.Client.put_blob), an encoded get decodes the stored blobs on the GPU
and checks their CRC-32C there; lctd codes nothing, and the wire carries the coded bytes."""
import ctypes

import torch

from .. import codec as _lib
from ..errors import error, error_code
from ._codec import CODED, Codec, Packed, _aligned

_BY_NAME = {name: dtype for dtype, name in CODED.items()}
_HEADER = 64  # FORMAT.md: a blob's header bytes (n_elems at 8, blob_size at 32)


def _crc(flat, stream):
    """The CRC-32C of a dense CUDA tensor's bytes, computed on stream (waits for it)."""
    nbytes = flat.numel() * flat.element_size()
    out = torch.zeros(1, dtype=torch.int32, pin_memory=True)
    ws_bytes = _lib.cuda_crc32c_workspace_size(nbytes)
    workspace = torch.empty(max(ws_bytes, 1), dtype=torch.uint8, device=flat.device)
    _lib.cuda_crc32c(flat.data_ptr() if nbytes else None, nbytes, out.data_ptr(), workspace.data_ptr(), ws_bytes,
                     stream.cuda_stream)
    stream.synchronize()
    return int(out[0]) & 0xFFFFFFFF


def codec_for(client):
    """A Codec whose pieces are lctd's segments: each piece of a tensor is one blob of an encoded put."""
    seg = client.segment_bytes()
    if seg == 0:
        raise error(error_code("LCT_EOP"), "this lctd takes no encoded puts (it is older)")
    return Codec(piece_bytes=seg)


def put(client, key, tensor, codec=None, role=None):
    """Stores a CUDA tensor of a coded dtype as key, encoded on its GPU (on the current stream, with role's
    codebook: default the key's, reused from put to put) and sent as blobs; returns the TensorInfo. codec must
    cut pieces of lctd's segment size (codec_for(client)); a CPU tensor is encoded on the CPU instead
    (Client.put_encoded), and a tensor of a dtype LCT does not code is put raw."""
    if tensor.device.type != "cuda":
        return client.put_encoded(key, tensor.contiguous())
    if tensor.dtype not in CODED:
        return client.put(key, tensor, dtype="raw")  # its bytes, as they are
    codec = codec or codec_for(client)
    if codec.piece_bytes != client.segment_bytes():
        raise ValueError(f"the codec cuts pieces of {codec.piece_bytes} bytes; lctd's blobs hold "
                         f"{client.segment_bytes()}")
    t = tensor.contiguous()  # lctd holds the tensor in row-major order of its shape
    stream = torch.cuda.current_stream(t.device)
    packed = codec.encode([t], [role if role is not None else ("wire", key)])[0]
    codec.wait()
    crc = _crc(t.view(-1), stream)
    total = sum(b.numel() for b in packed.blobs)
    host = torch.empty(max(total, 1), dtype=torch.uint8, pin_memory=True)
    at = 0
    for b in packed.blobs:
        host[at:at + b.numel()].copy_(b, non_blocking=True)
        at += b.numel()
    stream.synchronize()
    blobs = (ctypes.c_char * total).from_address(host.data_ptr()) if total else b""
    return client.put_blob(key, blobs, CODED[t.dtype], tuple(t.shape), crc)


def get(client, key, device=None, codec=None):
    """(tensor, TensorInfo): key read encoded (its stored blobs, whoever coded them) and decoded on device
    (default the current CUDA device) on the current stream; the CRC-32C of the result is checked on the GPU
    (LCT_ECHECKSUM), and a blob that fails its checks raises LctError."""
    device = torch.device("cuda") if device is None else torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"decoding on {device}: a CUDA device is needed (Client.get_encoded decodes on the CPU)")
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    blobs, info = client.get_blob(key)
    dtype = _BY_NAME.get(info.dtype)
    if dtype is None:
        raise error(error_code("LCT_EDTYPE"), f"'{key}' is {info.dtype}, which lct.torch does not code")
    numel = 1
    for d in info.shape:
        numel *= d
    # The blobs' headers, checked as they are split (the GPU decoder checks the rest); each blob placed at an
    # aligned offset, as the decoder reads its words.
    spans, at, elems = [], 0, 0
    while at < len(blobs):
        if len(blobs) - at < _HEADER:
            raise error(error_code("LCT_EPROTO"), f"'{key}': a truncated blob")
        n = int.from_bytes(blobs[at + 8:at + 16], "little")
        size = int.from_bytes(blobs[at + 32:at + 40], "little")
        if size < _HEADER or size > len(blobs) - at or n > numel - elems:
            raise error(error_code("LCT_EPROTO"), f"'{key}': a blob's header does not fit the tensor")
        spans.append((at, size, n))
        at += size
        elems += n
    if elems != numel or not spans or any(n != spans[0][2] for _, _, n in spans[:-1]):
        raise error(error_code("LCT_EPROTO"), f"'{key}': the blobs do not hold the tensor in equal pieces")
    host = torch.empty(max(sum(_aligned(s) for _, s, _ in spans), 1), dtype=torch.uint8, pin_memory=True)
    base = ctypes.cast(ctypes.c_char_p(blobs), ctypes.c_void_p).value  # blobs (bytes) outlives the copies
    offsets, off = [], 0
    for a, size, _ in spans:
        ctypes.memmove(host.data_ptr() + off, base + a, size)
        offsets.append(off)
        off += _aligned(size)
    with torch.cuda.device(device):
        stream = torch.cuda.current_stream(device)
        dev = host.to(device, non_blocking=True)
        packed = Packed(dtype, tuple(info.shape), None, numel, device)
        packed.blobs = [dev[o:o + s] for o, (_, s, _) in zip(offsets, spans)]
        packed.piece_elems = max(spans[0][2], 1)
        codec = codec or Codec()
        t = codec.decode([packed])[0]
        codec.verify()
        if _crc(t.view(-1), stream) != info.checksum:
            raise error(error_code("LCT_ECHECKSUM"), f"'{key}': decoded bytes do not match the stored checksum")
    return t, info
