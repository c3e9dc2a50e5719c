"""test_lct_torch.py — lct.torch: the codec on torch tensors (CPU and CUDA, the same bytes), saved activations,
compressed parameters and CompressedAdamW, each bitwise against the same training without them."""
import contextlib
import os
import sys
import threading
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # the lct package

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import torch.utils.checkpoint
except ImportError:
    torch = None

if torch is not None:
    import lct.torch as lt
    from lct import LctError


def devices():
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() and lt.codec_has_cuda() else [])


def bits(t):
    """t's words as integers, for bitwise comparison (NaN payloads included)."""
    return t.contiguous().view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()])


def same_bits(a, b):
    return a.shape == b.shape and a.stride() == b.stride() and torch.equal(bits(a), bits(b))


if torch is not None:
    class Block(nn.Module):
        """A small pre-norm transformer block with explicit attention (its backward is deterministic)."""

        def __init__(self, d=64, heads=4):
            super().__init__()
            self.h = heads
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.fc2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = (t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in self.qkv(self.ln1(x)).split(C, 2))
            att = ((q @ k.transpose(-2, -1)) / (C // self.h) ** 0.5).softmax(-1)
            x = x + self.proj((att @ v).transpose(1, 2).reshape(B, T, C))
            return x + self.fc2(F.gelu(self.fc(self.ln2(x))))

    class Net(nn.Module):
        def __init__(self, d=64, layers=2, vocab=97):
            super().__init__()
            self.emb = nn.Embedding(vocab, d)
            self.blocks = nn.Sequential(*[Block(d) for _ in range(layers)])
            self.head = nn.Linear(d, vocab, bias=False)

        def forward(self, idx):
            return self.head(self.blocks(self.emb(idx)))


@unittest.skipIf(torch is None, "torch is not importable")
class TestCodec(unittest.TestCase):
    def test_round_trip_every_dtype_size_and_layout(self):
        g = torch.Generator().manual_seed(5)
        special = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e-45, -3e-39, 1.0])
        for device in devices():
            # Small pieces and a small scratch budget: tensors cut into several blobs, encodes waited for.
            codec = lt.Codec(piece_bytes=128 << 10, inflight_bytes=256 << 10)
            for dtype in lt.CODED:
                for n in (1, 16383, 16384, 16385, 40000, 100000):
                    with self.subTest(device=device, dtype=str(dtype), n=n):
                        x = (torch.randn(n, generator=g) * 3)
                        x[: min(n, 8)] = special[: min(n, 8)]
                        x = x.to(dtype).to(device)
                        p = codec.encode([x], [("t", str(dtype))])[0]
                        self.assertTrue(same_bits(codec.decode([p])[0], x))
            # Dense but permuted views come back with their strides; a batch keeps its order.
            a = torch.randn(33, 70, 3, generator=g).to(device).permute(2, 0, 1)
            b = torch.randn(500, 40, generator=g).to(device, torch.bfloat16).t()
            pa, pb = codec.encode([a, b], ["a", "b"])
            da, db = codec.decode([pa, pb])
            self.assertTrue(same_bits(da, a) and same_bits(db, b))
            codec.verify()

    def test_smaller_than_raw_and_codebook_rebuilt_on_drift(self):
        codec = lt.Codec()
        narrow = torch.randn(1 << 16) * 1e-3
        p = codec.encode([narrow], ["role"])[0]
        self.assertLess(p.nbytes, p.raw_bytes)
        wide = torch.randn(1 << 16) * torch.logspace(-30, 30, 1 << 16)  # symbols the first codebook lacks
        for _ in range(3):
            q = codec.encode([wide], ["role"])[0]
            self.assertTrue(same_bits(codec.decode([q])[0], wide))
        self.assertGreaterEqual(codec.rebuilds, 1)

    def test_cpu_and_cuda_write_the_same_bytes(self):
        if "cuda" not in devices():
            self.skipTest("no CUDA device or a codec built without CUDA")
        g = torch.Generator().manual_seed(6)
        for dtype in lt.CODED:
            x = (torch.randn(100003, generator=g) * 5).to(dtype)
            on_cpu = lt.Codec().encode([x], ["r"])[0]
            on_gpu = lt.Codec().encode([x.cuda()], ["r"])[0]
            self.assertTrue(torch.equal(on_cpu.blobs[0], on_gpu.blobs[0].cpu()), str(dtype))

    def test_corrupt_blob_is_an_error(self):
        for device in devices():
            codec = lt.Codec()
            p = codec.encode([torch.randn(50000).to(device)], ["r"])[0]
            p.blobs[0][p.nbytes // 2] ^= 0x5A
            with self.assertRaises(LctError):
                codec.decode([p])
                codec.verify()

    def test_threads_take_turns(self):
        """Four threads on one codec, as autograd's backward threads of four devices would be (each on a stream of
        its own, its own roles): every tensor round-trips, and the codec's counts add up."""
        for device in devices():
            codec = lt.Codec(piece_bytes=64 << 10, inflight_bytes=128 << 10)  # many launches to settle
            xs = [[torch.randn(20000 + 97 * i, generator=torch.Generator().manual_seed(10 * t + i)).to(device)
                   for i in range(12)] for t in range(4)]
            wrong = []

            def work(t):
                try:
                    stream = torch.cuda.Stream() if device == "cuda" else None
                    with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
                        for i, x in enumerate(xs[t]):
                            p = codec.encode([x], [("thread", t)])[0]
                            if not same_bits(codec.decode([p])[0], x):
                                wrong.append((t, i))
                        codec.verify()
                except Exception as e:  # reported below, with the thread's
                    wrong.append((t, repr(e)))

            interval = sys.getswitchinterval()
            sys.setswitchinterval(1e-6)  # threads switch as often as they can
            try:
                threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
                for th in threads:
                    th.start()
                for th in threads:
                    th.join()
            finally:
                sys.setswitchinterval(interval)
            self.assertEqual(wrong, [], device)
            codec.wait()
            self.assertEqual(codec.totals["thread"][0], sum(x.numel() * 4 for row in xs for x in row), device)

    def test_tensor_not_dense_in_memory_is_refused(self):
        with self.assertRaisesRegex(LctError, "not dense"):
            lt.Codec().encode([torch.zeros(1, 4).expand(8, 4)], ["role"])

    def test_uncoded_dtype_is_refused(self):
        with self.assertRaises(LctError):
            lt.Codec().encode([torch.arange(10)], ["r"])


@unittest.skipIf(torch is None, "torch is not importable")
class TestTraining(unittest.TestCase):
    def run_steps(self, device, activations=False, weights=False, steps=3):
        torch.manual_seed(0)
        model = Net().to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        params = lt.CompressedParameters(model, codec=lt.Codec(), min_bytes=1024) if weights else None
        idx = torch.randint(0, 97, (4, 33), generator=torch.Generator().manual_seed(1)).to(device)
        losses, saved = [], []
        for _ in range(steps):
            if activations:
                with lt.compressed_activations(codec=lt.Codec(), min_bytes=1024, batch_bytes=64 << 10,
                                               prefetch_bytes=48 << 10) as ctx:
                    loss = F.cross_entropy(model(idx[:, :-1]).flatten(0, 1), idx[:, 1:].flatten())
                saved.append((ctx.tensors, ctx.raw_bytes, ctx.blob_bytes))
            else:
                loss = F.cross_entropy(model(idx[:, :-1]).flatten(0, 1), idx[:, 1:].flatten())
            loss.backward()
            if params is not None:
                with params.materialized():
                    opt.step()
            else:
                opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.detach())
        if params is not None:
            params.remove()
        return losses, [p.detach().clone() for p in model.parameters()], saved

    def test_activations_and_weights_are_exact(self):
        for device in devices():
            base_losses, base_params, _ = self.run_steps(device)
            for activations, weights in ((True, False), (False, True), (True, True)):
                with self.subTest(device=device, activations=activations, weights=weights):
                    losses, params, saved = self.run_steps(device, activations, weights)
                    for a, b in zip(losses, base_losses):
                        self.assertTrue(same_bits(a, b))
                    for a, b in zip(params, base_params):
                        self.assertTrue(same_bits(a, b))
                    if activations:
                        tensors, raw, blob = saved[-1]
                        self.assertGreater(tensors, 10)
                        self.assertLess(blob, raw)

    def test_a_tensor_saved_twice_is_held_once(self):
        torch.manual_seed(2)
        lin1, lin2 = nn.Linear(64, 64), nn.Linear(64, 64)
        x = torch.randn(32, 64, requires_grad=True)

        def loss():
            h = torch.tanh(x)  # saved by tanh, lin1 and lin2
            return (lin1(h) * lin2(h)).sum()

        base = torch.autograd.grad(loss(), [x, lin1.weight, lin2.weight])
        with lt.compressed_activations(codec=lt.Codec(), min_bytes=1024) as ctx:
            out = loss()
        self.assertEqual(ctx.tensors, 3)  # h, and the two products' operands
        for a, b in zip(torch.autograd.grad(out, [x, lin1.weight, lin2.weight]), base):
            self.assertTrue(same_bits(a, b))

    def test_a_tensor_changed_in_place_after_it_was_saved_is_an_error(self):
        x = torch.randn(64, 64, requires_grad=True)
        with self.assertRaises(RuntimeError):
            with lt.compressed_activations(codec=lt.Codec(), min_bytes=1024):
                y = x * 2
                z = y.sin()  # saves y
                y.add_(1)
            z.sum().backward()

    def test_checkpointed_blocks_and_state_dict(self):
        """A block recomputed by torch.utils.checkpoint (reentrant: called outside the root's forward) and
        state_dict() see the parameters' values, never their placeholders."""
        def run(weights):
            torch.manual_seed(0)
            model = Net()
            params = lt.CompressedParameters(model, codec=lt.Codec(), min_bytes=1024) if weights else None
            idx = torch.randint(0, 97, (4, 33), generator=torch.Generator().manual_seed(1))
            x = model.emb(idx[:, :-1])
            for block in model.blocks:
                x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=True)
            loss = F.cross_entropy(model.head(x).flatten(0, 1), idx[:, 1:].flatten())
            loss.backward()
            return [p.grad for p in model.parameters()], model.state_dict(), params

        base_grads, base_sd, _ = run(False)
        grads, sd, params = run(True)
        for a, b in zip(grads, base_grads):
            self.assertTrue(same_bits(a, b))
        for k in base_sd:
            self.assertTrue(torch.equal(bits(sd[k]), bits(base_sd[k])), k)

    def test_non_reentrant_checkpoint_inside_the_root(self):
        """A checkpoint's own saved-tensor hooks stay on top while it recomputes a block in backward."""
        class CheckpointedNet(Net):
            def forward(self, idx):
                x = self.emb(idx)
                for block in self.blocks:
                    x = torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
                return self.head(x)

        def grads(weights):
            torch.manual_seed(0)
            model = CheckpointedNet()
            if weights:
                lt.CompressedParameters(model, codec=lt.Codec(), min_bytes=1024)
            idx = torch.randint(0, 97, (4, 33), generator=torch.Generator().manual_seed(1))
            F.cross_entropy(model(idx[:, :-1]).flatten(0, 1), idx[:, 1:].flatten()).backward()
            return [p.grad for p in model.parameters()]

        for a, b in zip(grads(True), grads(False)):
            self.assertTrue(same_bits(a, b))

    def test_a_forward_inside_materialized_keeps_the_update(self):
        model = Net()
        params = lt.CompressedParameters(model, codec=lt.Codec(), min_bytes=1024)
        w = model.blocks[0].fc.weight
        with params.materialized():
            with torch.no_grad():
                w.fill_(0.5)
            model(torch.zeros(2, 5, dtype=torch.long))
            self.assertTrue(bool((w == 0.5).all()), "the forward left the updated values in place")
        with params.materialized():
            self.assertTrue(bool((w == 0.5).all()), "the update was encoded on leaving")

    def test_backward_after_the_parameters_changed_is_an_error(self):
        """As autograd refuses a saved tensor changed in place: the blob no longer holds the forward's values."""
        model = Net()
        params = lt.CompressedParameters(model, codec=lt.Codec(), min_bytes=1024)
        loss = model(torch.zeros(2, 5, dtype=torch.long)).sum()
        with params.materialized():
            with torch.no_grad():
                model.head.weight.mul_(2)
        with self.assertRaisesRegex(RuntimeError, "changed in place"):
            loss.backward()

    def test_parameter_sets_of_other_dtypes_share_a_codec(self):
        codec = lt.Codec()
        model = Net()
        copy = Net().to(torch.bfloat16)
        lt.CompressedParameters(model, codec=codec, min_bytes=1024)
        held = lt.CompressedParameters(copy, codec=codec, min_bytes=1024)
        self.assertLess(held.blob_bytes, held.raw_bytes)

    def test_frozen_parameters_are_not_saved_as_activations(self):
        layer = nn.Linear(512, 512).requires_grad_(False)  # a frozen 1 MiB weight: alive anyway
        x = torch.randn(4, 512, requires_grad=True)
        with lt.compressed_activations(codec=lt.Codec(), min_bytes=1024) as acts:
            y = layer(x).sum()
        self.assertEqual(acts.tensors, 0)
        y.backward()
        grad, x.grad = x.grad, None
        layer(x).sum().backward()
        self.assertTrue(same_bits(grad, x.grad))

    def test_parameters_are_placeholders_between_uses(self):
        model = Net()
        before = {n: p.detach().clone() for n, p in model.named_parameters()}
        params = lt.CompressedParameters(model, codec=lt.Codec(), min_bytes=1024)
        w = model.blocks[0].fc.weight
        self.assertEqual(w.shape, before["blocks.0.fc.weight"].shape)
        self.assertEqual(w.stride(), (0, 0))  # one element of memory
        self.assertLess(params.blob_bytes, params.raw_bytes)
        with params.materialized():
            for n, p in model.named_parameters():
                self.assertTrue(same_bits(p.detach(), before[n]), n)


@unittest.skipIf(torch is None, "torch is not importable")
class TestCompressedAdamW(unittest.TestCase):
    def setUp(self):
        if not torch.cuda.is_available() or int(torch.__version__.split(".")[0]) < 2 or "cuda" not in devices():
            self.skipTest("needs CUDA, the CUDA codec and torch 2 (fused AdamW)")

    def train(self, make_opt, dtype=None, weights=False, steps=4):
        torch.manual_seed(0)
        model = Net(d=128).cuda().to(dtype or torch.float32)
        params = lt.CompressedParameters(model, codec=lt.Codec(), min_bytes=4096) if weights else None
        opt = make_opt(model, params)
        idx = torch.randint(0, 97, (4, 65), generator=torch.Generator().manual_seed(1)).cuda()
        losses = []
        for _ in range(steps):
            loss = F.cross_entropy(model(idx[:, :-1]).flatten(0, 1).float(), idx[:, 1:].flatten())
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            losses.append(loss.detach())
        if params is not None:
            params.remove()
        return losses, [p.detach().clone() for p in model.parameters()], opt

    def test_bitwise_equal_to_fused_adamw(self):
        hyper = dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
        base = self.train(lambda m, _: torch.optim.AdamW(m.parameters(), fused=True, **hyper))
        for weights in (False, True):
            with self.subTest(weights=weights):
                got = self.train(lambda m, w: lt.CompressedAdamW(m.parameters(), codec=lt.Codec(), weights=w,
                                                                 scratch_bytes=200 << 10, min_bytes=4096, **hyper),
                                 weights=weights)
                for a, b in zip(got[0], base[0]):
                    self.assertTrue(same_bits(a, b))
                for a, b in zip(got[1], base[1]):
                    self.assertTrue(same_bits(a, b))
                raw, held = got[2].state_bytes()
                self.assertLess(held, raw)
                sd, ref = got[2].state_dict()["state"], base[2].state_dict()["state"]
                for i in ref:
                    for k in ("exp_avg", "exp_avg_sq"):
                        self.assertTrue(same_bits(sd[i][k], ref[i][k]))

    def test_master_weights_match_fp32_master_adamw(self):
        """bf16 parameters with fp32 master weights and moments: the same as fused AdamW on fp32 masters."""
        hyper = dict(lr=1e-2, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)

        class MasterAdamW:
            def __init__(self, model):
                self.params = list(model.parameters())
                self.masters = [p.detach().float().clone() for p in self.params]
                self.opt = torch.optim.AdamW(self.masters, fused=True, **hyper)

            @torch.no_grad()
            def step(self):
                for p, m in zip(self.params, self.masters):
                    m.grad = p.grad.float()
                self.opt.step()
                for p, m in zip(self.params, self.masters):
                    p.copy_(m)

            def zero_grad(self, set_to_none=True):
                for p in self.params:
                    p.grad = None

            def state_dict(self):
                return self.opt.state_dict()

        base = self.train(lambda m, _: MasterAdamW(m), dtype=torch.bfloat16)
        got = self.train(lambda m, w: lt.CompressedAdamW(m.parameters(), codec=lt.Codec(), weights=w,
                                                         master_weights=True, min_bytes=4096, **hyper),
                         dtype=torch.bfloat16, weights=True)
        for a, b in zip(got[0], base[0]):
            self.assertTrue(same_bits(a, b))
        for a, b in zip(got[1], base[1]):
            self.assertTrue(same_bits(a, b))


if __name__ == "__main__":
    unittest.main()
