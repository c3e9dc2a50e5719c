"""test_torch.py — torch tensors through lct.Client: every coded dtype, strided views, autograd leaves, CUDA tensors."""
import unittest

from lctd_helper import LctdTestCase, tensor_bits

try:
    import torch
except ImportError:
    torch = None
# What these tests use (float8 dtypes, uint16 from numpy, AdamW's fused= and foreach=) came with torch 2.
if torch is not None and int(torch.__version__.split(".")[0]) < 2:
    torch = None


def devices():
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@unittest.skipIf(torch is None, "torch 2 is not importable")
class TestTorch(LctdTestCase):
    def test_dtypes_round_trip(self):
        g = torch.Generator().manual_seed(9)
        cases = [(torch.float32, "f32"), (torch.float16, "f16"), (torch.bfloat16, "bf16"),
                 (torch.float8_e4m3fn, "f8e4m3"), (torch.float8_e5m2, "f8e5m2"), (torch.uint8, "raw")]
        for device in devices():
            for dtype, name in cases:
                with self.subTest(device=device, dtype=name):
                    src = (torch.randn(37, 5, generator=g) * 4).to(dtype).to(device)
                    info = self.client.put(self.key(f"{device}/{name}"), src)
                    self.assertEqual((info.dtype, info.shape), (name, (37, 5)))
                    out = torch.empty_like(src)
                    self.assertIs(self.client.get(self.key(f"{device}/{name}"), out=out), out)
                    self.assertTrue(torch.equal(tensor_bits(out), tensor_bits(src)))
                    # Without out: a numpy array of the stored words.
                    words = self.client.get(self.key(f"{device}/{name}"))
                    self.assertEqual(words.tobytes(), tensor_bits(src).cpu().numpy().tobytes())

    def test_bf16_from_numpy_words(self):
        src = torch.randn(64).to(torch.bfloat16)
        self.client.put(self.key(), src)
        words = self.client.get(self.key())
        self.assertEqual(str(words.dtype), "uint16")
        self.assertTrue(torch.equal(torch.from_numpy(words).view(torch.bfloat16), src))

    def test_strided_and_autograd_leaves(self):
        for device in devices():
            with self.subTest(device=device):
                w = torch.randn(6, 10, device=device, requires_grad=True)
                self.client.put(self.key(f"{device}/w"), w.t())  # strided, requires grad
                out = torch.zeros(20, 6, device=device)[::2]  # strided destination
                self.client.get(self.key(f"{device}/w"), out=out)
                self.assertTrue(torch.equal(out, w.detach().t()))
                leaf = torch.zeros(10, 6, device=device, requires_grad=True)
                self.client.get(self.key(f"{device}/w"), out=leaf)
                self.assertTrue(torch.equal(leaf.detach(), w.detach().t()))

    def test_float64_needs_raw(self):
        t = torch.arange(10, dtype=torch.float64)
        with self.assertRaises(TypeError):
            self.client.put(self.key(), t)
        self.client.put(self.key(), t, dtype="raw")
        out = torch.empty_like(t)
        self.client.get(self.key(), out=out)
        self.assertTrue(torch.equal(out, t))


if __name__ == "__main__":
    unittest.main()
