"""test_device.py — CUDA tensors device to device: a cuda-backend lctd serves them with no host copy; a cpu-backend one sends them to the host path, counted."""
import unittest
import unittest.mock

from lctd_helper import Lctd, lct, tensor_bits

try:
    import torch
except ImportError:
    torch = None
# What these tests use (float8 dtypes, uint16 from numpy, AdamW's fused= and foreach=) came with torch 2.
if torch is not None and int(torch.__version__.split(".")[0]) < 2:
    torch = None


def have_cuda():
    return torch is not None and torch.cuda.is_available()


class _DeviceCase(unittest.TestCase):
    backend = None

    @classmethod
    def setUpClass(cls):
        cls.lctd = Lctd("--threads", "4", backend=cls.backend)
        cls.addClassCleanup(cls.lctd.stop)
        cls.client = lct.Client(cls.lctd.endpoint, timeout_ms=20000)
        cls.addClassCleanup(cls.client.close)

    def round_trips(self):
        """Puts and gets CUDA tensors of every coded dtype, contiguous and
        strided; returns the number of puts (and gets) made."""
        g = torch.Generator().manual_seed(5)
        n = 0
        for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.uint8):
            src = (torch.randn(300, 140, generator=g) * 3).to(dtype).cuda()
            for name, value in (("whole", src), ("strided", src[:, ::2])):
                with self.subTest(dtype=dtype, view=name):
                    key = f"{self.id()}/{dtype}/{name}"
                    info = self.client.put(key, value)
                    self.assertEqual(info.shape, tuple(value.shape))
                    out = torch.empty(value.shape[0], value.shape[1] * 2, dtype=dtype, device="cuda")[:, ::2] \
                        if name == "strided" else torch.empty_like(value)
                    self.assertIs(self.client.get(key, out=out), out)
                    self.assertTrue(torch.equal(tensor_bits(out), tensor_bits(value)))
                    n += 1
        return n


@unittest.skipUnless(have_cuda(), "needs torch with a CUDA device")
class TestDeviceToDevice(_DeviceCase):
    backend = "cuda"

    def test_round_trips_without_fallback(self):
        before = self.client.stats()
        n = self.round_trips()
        after = self.client.stats()
        self.assertEqual(after["device_puts"] - before["device_puts"], n)
        self.assertEqual(after["device_gets"] - before["device_gets"], n)
        self.assertEqual(after["device_fallbacks"], 0)

    def test_remote_false_overrides_the_environment(self):
        # $LCT_HOST_PATH=1 holds clients to the host path unless they say remote=False.
        x = torch.arange(4096, dtype=torch.float32, device="cuda")
        with unittest.mock.patch.dict("os.environ", {"LCT_HOST_PATH": "1"}):
            held = lct.Client(self.lctd.endpoint, timeout_ms=20000)
            free = lct.Client(self.lctd.endpoint, timeout_ms=20000, remote=False)
        try:
            for client, device_puts in ((held, 0), (free, 1)):
                before = self.client.stats()["device_puts"]
                client.put(f"{self.id()}/{device_puts}", x)
                self.assertEqual(self.client.stats()["device_puts"] - before, device_puts)
        finally:
            held.close()
            free.close()

    def test_many_in_one_buffer(self):
        # Views of one allocation travel in one request each way.
        buf = torch.empty(1 << 22, dtype=torch.uint8, device="cuda")
        g = torch.Generator().manual_seed(9)
        shapes = [(64, 33), (1000,), (7, 3, 5)]
        views, off = [], 0
        for i, shape in enumerate(shapes):
            n = 1
            for d in shape:
                n *= d
            v = buf[off:off + 4 * n].view(torch.float32).view(shape)
            v.copy_(torch.randn(shape, generator=g))
            views.append(v)
            off += 4 * n + 256
        keys = [f"{self.id()}/{i}" for i in range(len(views))]
        before = self.client.stats()
        infos = self.client.put_many(zip(keys, views))
        self.assertEqual([i.shape for i in infos], shapes)
        outs = [torch.full_like(v, float("nan")) for v in views]
        self.assertEqual(self.client.get_many(list(zip(keys, outs))), outs)
        for v, o in zip(views, outs):
            self.assertTrue(torch.equal(tensor_bits(o), tensor_bits(v)))
        after = self.client.stats()
        self.assertEqual(after["device_puts"] - before["device_puts"], len(views))
        self.assertEqual(after["device_gets"] - before["device_gets"], len(views))
        self.assertEqual(after["device_fallbacks"], 0)
        with self.assertRaises(lct.NotFoundError):
            self.client.get_many([(keys[0], outs[0]), (f"{self.id()}/absent", outs[1])])

    def test_batch_retargeted_and_released(self):
        # A batch packed over one buffer, sent again over another of the same layout.
        g = torch.Generator().manual_seed(3)
        shapes = [(300, 7), (5000,)]

        def layout():
            buf = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
            return [buf[:8400].view(torch.float32).view(shapes[0]),
                    buf[8448:18448].view(torch.bfloat16).view(shapes[1])]
        keys = [f"{self.id()}/{i}" for i in range(2)]
        a, b = layout(), layout()
        for v in a + b:
            v.copy_(torch.randn(v.shape, generator=g))
        put = lct.Batch(self.client, zip(keys, a), put=True)
        put.send()
        put.retarget(b)
        self.assertEqual([d.dptr for d in put._arr], [v.data_ptr() for v in b], "only the addresses changed")
        stream = torch.cuda.Stream()
        put.send(stream)
        self.assertEqual([i.checksum for i in put.infos()], [self.client.stat(k).checksum for k in keys])
        outs = [torch.full_like(v, float("nan")) for v in a]
        get = lct.Batch(self.client, zip(keys, outs), put=False)
        get.send(stream)
        for v, o in zip(b, outs):
            self.assertTrue(torch.equal(tensor_bits(o), tensor_bits(v)), "b's bytes were stored")
        get.release()
        self.assertEqual([v for _, v in get.items], [None, None])
        with self.assertRaises(ValueError):
            get.send()
        # Another shape: packed afresh, and the size mismatch named.
        get.retarget([torch.empty(300, 8, device="cuda"), outs[1]])
        with self.assertRaises(lct.LctError) as cm:
            get.send()
        self.assertIn(keys[0], str(cm.exception))

    def test_submitted_jobs_wait_for_events_and_each_other(self):
        # A put job waits for the event after the writes on another stream; a
        # get job on another connection waits for the put job; a failed job
        # cancels the one that waits for it.
        keys = [f"{self.id()}/{i}" for i in range(3)]
        buf = torch.zeros(3 << 16, device="cuda")
        src = list(buf.view(3, -1).unbind(0))
        writer = torch.cuda.Stream()
        with torch.cuda.stream(writer):
            torch.cuda._sleep(50_000_000)  # the writes land well after the submit
            for i, v in enumerate(src):
                v.copy_(torch.arange(v.numel(), device="cuda", dtype=torch.float32) * (i + 1))
        written = torch.cuda.Event()
        written.record(writer)
        put = lct.Batch(self.client, zip(keys, src), put=True)
        self.assertTrue(put.submittable)
        other = self.client.clone()
        self.addCleanup(other.close)
        outs = list(torch.full((3, 1 << 16), float("nan"), device="cuda").unbind(0))
        get = lct.Batch(other, zip(keys, outs), put=False)
        put_job = put.submit(written)
        get_job = get.submit(after=put_job)
        get_job.wait()
        put_job.wait()
        for v, o in zip(src, outs):
            self.assertTrue(torch.equal(o, v), "the get read what the event's writes put")
        self.assertEqual(self.client.stat(keys[2]).checksum, put.infos()[2].checksum)
        missing = lct.Batch(other, [(f"{self.id()}/absent", outs[0])], put=False)
        failed = missing.submit()
        again = put.submit(after=failed)
        with self.assertRaises(lct.NotFoundError):
            failed.wait()
        with self.assertRaises(lct.LctError) as cm:
            again.wait()
        self.assertEqual(cm.exception.name, "LCT_ECANCELED")

    def test_optimizer_moves_states_device_to_device(self):
        from test_optim import HYPER, backward, make_model
        ref_model = make_model("cuda", torch.float32)
        off_model = make_model("cuda", torch.float32)
        ref = torch.optim.AdamW(ref_model.parameters(), foreach=False, fused=False, **HYPER)
        off = lct.optim.OffloadedAdamW(off_model.parameters(), self.client, key_prefix=f"{self.id()}/", **HYPER)
        before = self.client.stats()
        for step in range(4):
            for model, opt in ((ref_model, ref), (off_model, off)):
                opt.zero_grad()
                backward(model, step, "cuda")
                held = torch.cuda.memory_allocated()
                opt.step()
            # step() returns with its last group's states on their way to lctd;
            # once they are stored, the scratch is back with the allocator.
            off.flush()
            self.assertEqual(torch.cuda.memory_allocated(), held, f"step {step}")
        for a, b in zip(ref_model.parameters(), off_model.parameters()):
            self.assertTrue(torch.equal(tensor_bits(a.detach()), tensor_bits(b.detach())))
        after = self.client.stats()
        self.assertGreater(after["device_gets"], before["device_gets"])
        self.assertGreater(after["device_puts"], before["device_puts"])
        self.assertEqual(after["device_fallbacks"], 0)


@unittest.skipUnless(have_cuda(), "needs torch with a CUDA device")
class TestDeviceFallback(_DeviceCase):
    backend = "cpu"

    def test_cpu_backend_takes_the_host_path(self):
        n = self.round_trips()
        s = self.client.stats()
        self.assertEqual((s["device_puts"], s["device_gets"]), (0, 0))
        self.assertEqual(s["device_fallbacks"], 2 * n)


if __name__ == "__main__":
    unittest.main()
