"""lct.torch — LCT inside the training loop: activations, weights and optimizer states held losslessly
compressed on the trainer's own GPU, with no daemon round trip.

    import lct.torch as lt
    weights = lt.CompressedParameters(model)                      # parameters as blobs between uses
    opt = lt.CompressedAdamW(model.parameters(), lr=3e-4, weights=weights)  # moments as blobs
    for x, y in batches:
        with lt.compressed_activations():                         # saved activations as blobs
            loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

Everything is exact: losses, gradients, parameters and moments are bitwise those of the same loop with
torch.optim.AdamW(fused=True) and nothing compressed. CUDA tensors use the GPU codec on the current stream
(liblct_codec.so built with CUDA); CPU tensors the CPU codec. encode() and decode() do single tensors.
"""
from ._codec import CODED, Codec, Packed, default_codec
from .activations import compressed_activations
from .adamw import CompressedAdamW
from .weights import CompressedParameters
from . import wire  # CUDA tensors to and from lctd coded on their GPU

__all__ = ["CODED", "Codec", "CompressedAdamW", "CompressedParameters", "Packed", "compressed_activations",
           "codec_has_cuda", "decode", "default_codec", "encode", "wire"]


def encode(tensor, role=None, codec=None):
    """A tensor of a coded dtype as a Packed blob on its device; role names its codebook (default: its dtype)."""
    return (codec or default_codec()).encode([tensor], [role or ("tensor", str(tensor.dtype))])[0]


def decode(packed, codec=None):
    """The tensor a Packed holds, bit for bit."""
    return (codec or default_codec()).decode([packed])[0]


def codec_has_cuda():
    """True if the loaded liblct_codec has the CUDA codec."""
    from .. import codec
    return codec.cuda_built()
