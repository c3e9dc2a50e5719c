"""test_torch_wire.py — lct.torch.wire: CUDA tensors put encoded on their GPU (pieces of lctd's segment size, sent
as blobs) and read encoded and decoded on the GPU, against a real lctd (cpu backend: it codes nothing of these)."""
import unittest

from lctd_helper import Lctd, lct, tensor_bits

try:
    import torch
    import lct.torch as lt
    from lct.torch import wire
except ImportError:
    torch = None


def have_cuda_codec():
    return torch is not None and torch.cuda.is_available() and lt.codec_has_cuda()


@unittest.skipUnless(have_cuda_codec(), "needs torch with a CUDA device and liblct_codec built with CUDA")
class TestWire(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # 64 KiB segments: a few MiB make many blobs.
        cls.lctd = Lctd("--segment-size", "64K", memory="512M")
        cls.addClassCleanup(cls.lctd.stop)
        cls.client = lct.Client(cls.lctd.endpoint, timeout_ms=30000)
        cls.addClassCleanup(cls.client.close)

    def sizes(self, dtype):
        chunk = 16384
        seg = self.client.segment_bytes() // torch.empty(0, dtype=dtype).element_size()
        return [0, 1, chunk - 1, chunk, chunk + 1, seg, 3 * seg + 777]

    def test_round_trips_bit_for_bit(self):
        g = torch.Generator().manual_seed(7)
        for dtype in (torch.bfloat16, torch.float32, torch.float16):
            for n in self.sizes(dtype):
                with self.subTest(dtype=dtype, n=n):
                    src = (torch.randn(n, generator=g) * 5).to(dtype).cuda()
                    if n > 8:
                        src[3] = float("nan")
                        src[5] = float("-inf")
                    key = f"wire/{dtype}/{n}"
                    info = wire.put(self.client, key, src)
                    self.assertEqual(info.shape, (n,))
                    blobs, _ = self.client.get_blob(key)
                    self.assertEqual(info.stored_bytes, len(blobs), "stored as sent")
                    back, got = wire.get(self.client, key)
                    self.assertEqual(got.checksum, info.checksum)
                    self.assertEqual(back.device.type, "cuda")
                    self.assertTrue(torch.equal(tensor_bits(back), tensor_bits(src)))
                    # lctd decodes the client's blobs as its own
                    out = torch.empty_like(src)
                    self.client.get(key, out=out)
                    self.assertTrue(torch.equal(tensor_bits(out), tensor_bits(src)))

    def test_pieces_are_lctd_segments(self):
        src = torch.randn(5 * self.client.segment_bytes() // 2 + 99).to(torch.bfloat16).cuda()
        wire.put(self.client, "wire/pieces", src)
        blobs, info = self.client.get_blob("wire/pieces")
        at, counts = 0, []
        while at < len(blobs):
            counts.append(int.from_bytes(blobs[at + 8:at + 16], "little"))
            at += int.from_bytes(blobs[at + 32:at + 40], "little")
        seg_elems = self.client.segment_bytes() // 2
        self.assertEqual(counts[:-1], [seg_elems] * (len(counts) - 1))
        self.assertEqual(sum(counts), src.numel())

    def test_strided_and_2d(self):
        src = torch.randn(300, 200).cuda()[:, ::2]
        wire.put(self.client, "wire/strided", src)
        back, info = wire.get(self.client, "wire/strided")
        self.assertEqual(info.shape, (300, 100))
        self.assertTrue(torch.equal(tensor_bits(back), tensor_bits(src)))

    def test_server_coded_tensors_decode_on_the_gpu(self):
        src = torch.randn(200000).to(torch.bfloat16)
        self.client.put("wire/by-lctd", src)
        back, _ = wire.get(self.client, "wire/by-lctd")
        self.assertTrue(torch.equal(tensor_bits(back).cpu(), tensor_bits(src)))

    def test_a_codec_of_other_pieces_is_refused(self):
        with self.assertRaises(ValueError):
            wire.put(self.client, "wire/x", torch.zeros(10, device="cuda"), codec=lt.Codec(piece_bytes=1 << 22))

    def test_uncoded_dtypes_go_raw(self):
        src = torch.arange(1000, dtype=torch.int32, device="cuda")
        wire.put(self.client, "wire/int", src)
        out = torch.empty_like(src)
        self.client.get("wire/int", out=out)
        self.assertTrue(torch.equal(out, src))


if __name__ == "__main__":
    unittest.main()
