"""test_optim.py — OffloadedAdamW is bitwise torch.optim.AdamW (single-tensor path) with its moments held in lctd."""
import copy
import unittest

from lctd_helper import Lctd, LctdTestCase, lct, tensor_bits

try:
    import torch
except ImportError:
    torch = None
# What these tests use (float8 dtypes, uint16 from numpy, AdamW's fused= and foreach=) came with torch 2.
if torch is not None and int(torch.__version__.split(".")[0]) < 2:
    torch = None

STEPS = 6
HYPER = dict(lr=3e-2, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1)


def devices():
    return ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def make_model(device, dtype, seed=1):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Embedding(50, 24), torch.nn.Linear(24, 40), torch.nn.GELU(),
                                torch.nn.LayerNorm(40), torch.nn.Linear(40, 7))
    return model.to(device=device, dtype=dtype)


def batch(step, device):
    g = torch.Generator().manual_seed(100 + step)
    x = torch.randint(0, 50, (16, 5), generator=g)
    y = torch.randint(0, 7, (16 * 5,), generator=g)
    return x.to(device), y.to(device)


def backward(model, step, device):
    x, y = batch(step, device)
    logits = model(x).float().reshape(-1, 7)
    torch.nn.functional.cross_entropy(logits, y).backward()


@unittest.skipIf(torch is None, "torch 2 is not importable")
class TestOffloadedAdamW(LctdTestCase):
    def assertBitwiseEqual(self, a, b, what):
        self.assertEqual(a.dtype, b.dtype, what)
        self.assertTrue(torch.equal(tensor_bits(a), tensor_bits(b)), f"{what} differs")

    def assertStatesEqual(self, ref, off, what):
        rs, os_ = ref.state_dict()["state"], off.state_dict()["state"]
        self.assertEqual(sorted(rs), sorted(os_), what)
        for i in rs:
            self.assertEqual(float(rs[i]["step"]), float(os_[i]["step"]), f"{what} step {i}")
            for name in ("exp_avg", "exp_avg_sq"):
                self.assertBitwiseEqual(rs[i][name].cpu(), os_[i][name].cpu(), f"{what} {name} {i}")

    def pair(self, device, dtype, prefix, **kwargs):
        ref_model = make_model(device, dtype)
        off_model = copy.deepcopy(ref_model)
        ref = torch.optim.AdamW(ref_model.parameters(), foreach=False, fused=False, **HYPER)
        off = lct.optim.OffloadedAdamW(off_model.parameters(), self.client, key_prefix=prefix,
                                       **HYPER, **kwargs)
        return ref_model, ref, off_model, off

    def train_and_compare(self, ref_model, ref, off_model, off, device, steps, first=0):
        for step in range(first, first + steps):
            for model, opt in ((ref_model, ref), (off_model, off)):
                opt.zero_grad()
                backward(model, step, device)
            for (name, a), b in zip(ref_model.named_parameters(), off_model.parameters()):
                if a.grad is None:
                    self.assertIsNone(b.grad, name)
                else:
                    self.assertBitwiseEqual(a.grad, b.grad, f"step {step} grad {name}")
            ref.step()
            off.step()
            for (name, a), b in zip(ref_model.named_parameters(), off_model.parameters()):
                self.assertBitwiseEqual(a, b, f"step {step} {name}")

    def test_bitwise_equal_to_adamw(self):
        for device in devices():
            for dtype in (torch.float32, torch.bfloat16):
                with self.subTest(device=device, dtype=dtype):
                    prefix = self.key(f"{device}/{dtype}/")
                    # Parts with room for the largest parameter only: every step walks several groups.
                    largest = max(p.numel() for p in make_model(device, dtype).parameters())
                    scratch = 4 * (3 * largest * dtype.itemsize + 3 * 256)
                    pair = self.pair(device, dtype, prefix, scratch_bytes=scratch)
                    self.train_and_compare(*pair, device, STEPS)
                    ref, off = pair[1], pair[3]
                    self.assertStatesEqual(ref, off, f"{device} {dtype}")
                    # Between steps the optimizer itself holds step counters only.
                    self.assertEqual({k for s in off.state.values() for k in s}, {"step"})
                    self.assertEqual(off.scratch_bytes, scratch)
                    self.assertFalse([v for v in vars(off).values() if isinstance(v, torch.Tensor)],
                                     "the scratch is released after each step")
                    keys = {e.key for e in self.client.list(prefix)}
                    n = len(list(pair[2].parameters()))
                    self.assertEqual(keys, {f"{prefix}{i}/{m}" for i in range(n) for m in ("exp_avg", "exp_avg_sq")})
                    st = self.client.stat(f"{prefix}0/exp_avg")
                    self.assertEqual(st.dtype, {torch.float32: "f32", torch.bfloat16: "bf16"}[dtype])

    def test_resume_after_a_restart(self):
        """A new optimizer over the same parameters takes the states in lctd (resume) and goes on bitwise."""
        for device in devices():
            with self.subTest(device=device):
                prefix = self.key(f"{device}/")
                ref_model, ref, off_model, off = self.pair(device, torch.float32, prefix)
                self.train_and_compare(ref_model, ref, off_model, off, device, 3)
                off.flush()
                del off  # the trainer stops; its parameters and lctd's states remain
                fresh = lct.optim.OffloadedAdamW(off_model.parameters(), self.client, key_prefix=prefix, **HYPER)
                fresh.resume(3)
                self.train_and_compare(ref_model, ref, off_model, fresh, device, 3, first=3)
                self.assertStatesEqual(ref, fresh, device)
                lost = lct.optim.OffloadedAdamW(off_model.parameters(), self.client, key_prefix=self.key("none/"),
                                                **HYPER)
                with self.assertRaises(lct.NotFoundError):
                    lost.resume(3)
                self.assertFalse(lost.state, "a failed resume changes nothing")

    def test_param_groups_and_frozen_params(self):
        for device in devices():
            with self.subTest(device=device):
                ref_model = make_model(device, torch.float32)
                off_model = copy.deepcopy(ref_model)

                def groups(m):
                    m[0].weight.requires_grad_(False)  # frozen: no grad, no state
                    return [{"params": list(m[1].parameters()) + [m[0].weight], "lr": 1e-2},
                            {"params": list(m[3].parameters()), "weight_decay": 0.0},
                            {"params": list(m[4].parameters()), "betas": (0.5, 0.6)}]

                ref = torch.optim.AdamW(groups(ref_model), foreach=False, fused=False, **HYPER)
                off = lct.optim.OffloadedAdamW(groups(off_model), self.client,
                                               key_prefix=self.key(f"{device}/"), **HYPER)
                self.train_and_compare(ref_model, ref, off_model, off, device, STEPS)
                self.assertStatesEqual(ref, off, device)
                with self.assertRaises(lct.NotFoundError):
                    self.client.stat(self.key(f"{device}/2/exp_avg"))  # the frozen embedding

    def test_parameters_at_different_steps(self):
        """A parameter whose first gradient comes later updates beside the others, at its own step count."""
        for device in devices():
            with self.subTest(device=device):
                ref_model = make_model(device, torch.float32)
                off_model = copy.deepcopy(ref_model)
                ref = torch.optim.AdamW(ref_model.parameters(), foreach=False, fused=False, **HYPER)
                off = lct.optim.OffloadedAdamW(off_model.parameters(), self.client,
                                               key_prefix=self.key(f"{device}/"), **HYPER)
                for step in range(STEPS):
                    for model, opt in ((ref_model, ref), (off_model, off)):
                        opt.zero_grad()
                        backward(model, step, device)
                        if step < 2:  # the head joins at step 2: its counter lags the others' by two
                            for p in model[4].parameters():
                                p.grad = None
                    ref.step()
                    off.step()
                    for (name, a), b in zip(ref_model.named_parameters(), off_model.parameters()):
                        self.assertBitwiseEqual(a, b, f"step {step} {name}")
                self.assertStatesEqual(ref, off, device)
                steps = {float(s["step"]) for s in off.state_dict()["state"].values()}
                self.assertEqual(steps, {STEPS, STEPS - 2}, device)

    def test_master_weights(self):
        """bf16 parameters with float32 masters in lctd equal AdamW on float32 parameters."""
        for device in devices():
            with self.subTest(device=device):
                low = make_model(device, torch.bfloat16)
                full = copy.deepcopy(low).float()  # bf16 values, exactly
                ref = torch.optim.AdamW(full.parameters(), foreach=False, fused=False, **HYPER)
                prefix = self.key(f"{device}/")
                off = lct.optim.OffloadedAdamW(low.parameters(), self.client, key_prefix=prefix,
                                               offload_master_weights=True, **HYPER)
                for step in range(STEPS):
                    off.zero_grad()
                    backward(low, step, device)
                    for a, b in zip(full.parameters(), low.parameters()):
                        a.grad = b.grad.float()
                    ref.step()
                    off.step()
                    off.flush()  # the last group's states are in lctd
                    for i, (a, b) in enumerate(zip(full.parameters(), low.parameters())):
                        master = self.client.get(f"{prefix}{i}/master_param", out=torch.empty_like(a))
                        self.assertBitwiseEqual(a.cpu(), master.cpu(), f"step {step} master {i}")
                        self.assertBitwiseEqual(a.to(torch.bfloat16), b, f"step {step} param {i}")
                self.assertStatesEqual(ref, off, device)

    def test_state_dict_round_trips(self):
        for device in devices():
            with self.subTest(device=device):
                ref_model, ref, off_model, off = self.pair(device, torch.float32, self.key(f"{device}/a/"))
                self.train_and_compare(ref_model, ref, off_model, off, device, 3)
                # Ours into a fresh OffloadedAdamW with other keys; torch's into another.
                for source, name in ((off, "b"), (ref, "c")):
                    model = copy.deepcopy(off_model)
                    fresh = lct.optim.OffloadedAdamW(model.parameters(), self.client,
                                                     key_prefix=self.key(f"{device}/{name}/"), **HYPER)
                    fresh.load_state_dict(copy.deepcopy(source.state_dict()))
                    ref_next = copy.deepcopy(ref_model)
                    ref_opt = torch.optim.AdamW(ref_next.parameters(), foreach=False, fused=False, **HYPER)
                    ref_opt.load_state_dict(copy.deepcopy(ref.state_dict()))
                    self.train_and_compare(ref_next, ref_opt, model, fresh, device, 3, first=3)
                    self.assertStatesEqual(ref_opt, fresh, f"{device} from {name}")
                # And torch.optim.AdamW takes ours.
                taker = torch.optim.AdamW(copy.deepcopy(off_model).parameters(), foreach=False,
                                          fused=False, **HYPER)
                taker.load_state_dict(off.state_dict())
                self.assertStatesEqual(ref, taker, f"{device} into torch")

    def test_load_state_dict_checks_before_it_replaces(self):
        # A state whose moments do not fit the parameters, or lack one, is
        # refused before anything is replaced: the optimizer keeps its own.
        model = torch.nn.Linear(8, 4)
        opt = lct.optim.OffloadedAdamW(model.parameters(), self.client, key_prefix=self.key(), **HYPER)
        model(torch.randn(4, 8)).square().mean().backward()
        opt.step()
        good = opt.state_dict()
        for what, bad in (("shape", lambda st: st.update(exp_avg=st["exp_avg"].reshape(-1)[:-1])),
                          ("missing", lambda st: st.pop("exp_avg_sq"))):
            sd = copy.deepcopy(good)
            sd["param_groups"][0]["lr"] = 1.0
            bad(sd["state"][0])
            with self.assertRaises(ValueError, msg=what):
                opt.load_state_dict(sd)
            self.assertNotEqual(opt.param_groups[0]["lr"], 1.0, what)
            after = opt.state_dict()
            for i in good["state"]:
                for k in good["state"][i]:
                    self.assertTrue(torch.equal(after["state"][i][k], good["state"][i][k]), f"{what}: {i} {k}")

    def test_load_state_dict_in_place_takes_its_hyperparameters(self):
        # load_state_dict makes new param_group dicts: an optimizer that has
        # stepped already must update with theirs, not the ones it kept.
        for device in devices():
            with self.subTest(device=device):
                ref_model, ref, off_model, off = self.pair(device, torch.float32, self.key(f"{device}/"))
                self.train_and_compare(ref_model, ref, off_model, off, device, 2)
                for opt in (ref, off):
                    sd = copy.deepcopy(opt.state_dict())
                    sd["param_groups"][0]["lr"] *= 10
                    sd["param_groups"][0]["weight_decay"] = 0.5
                    opt.load_state_dict(sd)
                self.train_and_compare(ref_model, ref, off_model, off, device, 2, first=2)
                self.assertStatesEqual(ref, off, device)

    def test_refuses_other_algorithms(self):
        model = make_model("cpu", torch.float32)
        amsgrad = torch.optim.AdamW(model.parameters(), amsgrad=True)
        off = lct.optim.OffloadedAdamW(model.parameters(), self.client, key_prefix=self.key())
        with self.assertRaises(ValueError):
            off.load_state_dict(amsgrad.state_dict())

    def test_takes_one_lctd(self):
        model = make_model("cpu", torch.float32)
        several = lct.ClientSet(["ipc:///nonexistent/a.sock", "ipc:///nonexistent/b.sock"])  # connects when used
        with self.assertRaisesRegex(TypeError, "for_rank"):
            lct.optim.OffloadedAdamW(model.parameters(), several)

    def small_pool(self, seed):
        """A client of an lctd too small for every moment of the model (8 layers of 256 x 256) it returns too,
        with its gradients, and an OffloadedAdamW of it."""
        small = Lctd(memory="1M")
        self.addCleanup(small.stop)
        client = lct.Client(small.endpoint, timeout_ms=20000)
        self.addCleanup(client.close)
        torch.manual_seed(seed)
        model = torch.nn.Sequential(*[torch.nn.Linear(256, 256) for _ in range(8)])
        model(torch.randn(4, 256)).square().mean().backward()
        return client, model, lct.optim.OffloadedAdamW(model.parameters(), client, scratch_bytes=4 * 3 * 256 * 256 * 4)

    def test_failed_step_leaves_the_rest_fresh(self):
        # A pool too small for every moment: the first step's stores fail part
        # way, and the parameters it did not reach keep no state (a later step
        # starts them afresh instead of fetching keys that do not exist).
        client, model, opt = self.small_pool(3)
        with self.assertRaises(lct.LctError) as cm:
            opt.step()
        self.assertEqual(cm.exception.name, "LCT_ENOSPC")
        keys = {t.key for t in client.list()}
        params = list(model.parameters())
        stored = [f"opt/{i}/exp_avg" in keys for i in range(len(params))]
        self.assertTrue(any(stored) and not all(stored), stored)
        for i, p in enumerate(params):
            if stored[i]:
                self.assertEqual(float(opt.state[p]["step"]), 1.0, f"parameter {i} was updated")
            else:  # not reached, or updated but its store failed
                self.assertNotIn(p, opt.state, f"parameter {i} has a state but no keys in lctd")
        # A checkpoint after the failure holds the states that reached lctd, as AdamW's would.
        sd = opt.state_dict()
        self.assertEqual(sorted(sd["state"]), [i for i in range(len(params)) if stored[i]])
        torch.optim.AdamW(model.parameters()).load_state_dict(sd)

    def test_failed_load_keeps_steps_and_moments_together(self):
        # A pool too small for every loaded moment: the load fails part way, and each parameter left with a
        # state has the loaded step and the loaded moments in lctd; the others have none.
        client, model, opt = self.small_pool(4)
        reference = torch.optim.AdamW(model.parameters())
        reference.step()
        sd = reference.state_dict()
        with self.assertRaises(lct.LctError) as cm:
            opt.load_state_dict(sd)
        self.assertEqual(cm.exception.name, "LCT_ENOSPC")
        params = list(model.parameters())
        kept = [i for i, p in enumerate(params) if p in opt.state]
        self.assertTrue(kept and len(kept) < len(params), kept)
        self.assertEqual(kept, list(range(len(kept))), "the parameters before the failure")
        for i in kept:
            self.assertEqual(float(opt.state[params[i]]["step"]), 1.0)
            back = torch.empty_like(params[i])
            client.get(f"opt/{i}/exp_avg_sq", out=back)
            self.assertTrue(torch.equal(back, sd["state"][i]["exp_avg_sq"]), i)

    def test_scratch_bound(self):
        model = make_model("cpu", torch.float32)
        with self.assertRaises(ValueError):
            lct.optim.OffloadedAdamW(model.parameters(), self.client, scratch_bytes=1024)
        opt = lct.optim.OffloadedAdamW(model.parameters(), self.client, key_prefix=self.key())
        self.assertEqual(opt.scratch_bytes, 256 << 20)  # the automatic floor
        with self.assertRaises(ValueError):
            lct.optim.OffloadedAdamW([torch.zeros(3, dtype=torch.int32)], self.client)


if __name__ == "__main__":
    unittest.main()
