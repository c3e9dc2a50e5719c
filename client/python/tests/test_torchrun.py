"""test_torchrun.py — two DDP or FSDP ranks (torchrun, gloo) each keeping its AdamW states in its own lctd: losses bitwise those of AdamW, and a restarted group resumes from lctd.

The ranks share one device: the CPU, or GPU 0 (two ranks on one GPU). Skipped
where torch (2.1 or later, with torch.distributed and gloo; 2.6 for FSDP2's
fully_shard) or, for the GPU case, CUDA is absent.
"""
import collections
import os
import pathlib
import subprocess
import sys
import tempfile
import unittest
import uuid

from lctd_helper import PACKAGE_ROOT, Lctd, lct

try:
    import torch
    import torch.distributed
except ImportError:
    torch = None

WORKER = pathlib.Path(__file__).resolve().parent / "torchrun_worker.py"
STEPS, FAIL_AFTER = 8, 3


def usable():
    """Why this torch cannot run the test, or None."""
    if torch is None:
        return "torch is not importable"
    if not hasattr(torch.float32, "itemsize"):
        return f"torch {torch.__version__} is older than OffloadedAdamW needs (2.1)"
    if not (torch.distributed.is_available() and torch.distributed.is_gloo_available()):
        return "torch.distributed with gloo is not available"
    return None


def fsdp_usable():
    """Why this torch cannot shard with FSDP2, or None."""
    if usable() is not None:
        return usable()
    try:
        from torch.distributed.fsdp import fully_shard  # noqa: F401
    except ImportError:
        return f"torch {torch.__version__} has no FSDP2 (fully_shard, 2.6 or later)"
    return None


@unittest.skipIf(usable() is not None, usable() or "")
class TestTorchrun(unittest.TestCase):
    def torchrun(self, out, device, optimizer, env=None, restarts=0, fail_after=0, parallel="ddp"):
        """Runs the two ranks to the end; their (attempt, step, loss) lines and parameter digests by rank."""
        out.mkdir()
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               f"--max_restarts={restarts}", str(WORKER), str(out), "--device", device, "--optimizer", optimizer,
               "--steps", str(STEPS), "--fail-after", str(fail_after), "--parallel", parallel]
        run_env = dict(os.environ, PYTHONPATH=str(PACKAGE_ROOT), OMP_NUM_THREADS="1", **(env or {}))
        try:
            done = subprocess.run(cmd, env=run_env, capture_output=True, text=True, timeout=150)
        except subprocess.TimeoutExpired as e:  # what the ranks said before they hung (bytes, whatever text=)
            said, err = (x.decode(errors="replace") if isinstance(x, bytes) else x or "" for x in (e.stdout, e.stderr))
            self.fail(f"torchrun timed out:\n{said[-3000:]}\n{err[-6000:]}")
        self.assertEqual(done.returncode, 0, f"torchrun failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}")
        lines, digests = {}, {}
        for rank in (0, 1):
            rows = [line.split() for line in (out / f"rank{rank}.txt").read_text().splitlines()]
            lines[rank] = [(int(a), int(s), loss) for a, s, loss in rows]
            digests[rank] = (out / f"rank{rank}.params").read_text()
        return lines, digests

    def run_device(self, device, parallel="ddp"):
        lctds = [Lctd(backend="auto" if device == "cuda" else "cpu") for _ in range(2)]
        try:
            endpoints = ",".join(d.endpoint for d in lctds)
            with tempfile.TemporaryDirectory() as tmp:
                tmp = pathlib.Path(tmp)
                ref_lines, ref_params = self.torchrun(tmp / "adamw", device, "adamw", parallel=parallel)
                ref = {rank: {s: loss for _, s, loss in rows} for rank, rows in ref_lines.items()}
                self.assertEqual(sorted(ref[0]), list(range(STEPS)))

                # Offloaded: each rank's states in the lctd of its local rank; the same bits.
                run = f"run-{uuid.uuid4().hex[:8]}"
                lines, params = self.torchrun(tmp / "offload", device, "offload", parallel=parallel,
                                              env={"LCT_ENDPOINTS": endpoints, "LCT_RUN": run})
                self.assertEqual({r: {s: loss for _, s, loss in rows} for r, rows in lines.items()}, ref,
                                 "offloaded losses differ from AdamW's")
                self.assertEqual(params, ref_params, "final parameters differ from AdamW's")
                for rank, d in enumerate(lctds):
                    with lct.Client(d.endpoint) as c:
                        keys = {info.key for info in c.list(f"{run}/")}
                    self.assertTrue(keys and all(k.startswith(f"{run}/rank{rank}/") for k in keys),
                                    f"lctd {rank} holds {sorted(keys)[:4]}...: rank {rank}'s keys only")

                # Rank 1 fails after step FAIL_AFTER; torchrun restarts both, which resume from their lctd.
                run = f"run-{uuid.uuid4().hex[:8]}"
                lines, params = self.torchrun(tmp / "restart", device, "offload", restarts=1,
                                              fail_after=FAIL_AFTER, parallel=parallel,
                                              env={"LCT_ENDPOINTS": endpoints, "LCT_RUN": run})
                for rank, rows in lines.items():
                    steps = collections.defaultdict(list)
                    for attempt, step, _ in rows:
                        steps[attempt].append(step)
                    self.assertEqual(steps[0], list(range(FAIL_AFTER)), f"rank {rank}'s first attempt")
                    self.assertEqual(steps[1], list(range(FAIL_AFTER, STEPS)),
                                     f"rank {rank} did not resume at step {FAIL_AFTER}")
                    self.assertEqual({s: loss for _, s, loss in rows}, ref[rank],
                                     f"rank {rank}: losses across the restart differ from AdamW's")
                self.assertEqual(params, ref_params, "final parameters after the restart differ from AdamW's")
        finally:
            for d in lctds:
                d.stop()

    def test_two_ranks_on_the_cpu(self):
        self.run_device("cpu")

    @unittest.skipIf(torch is None or not torch.cuda.is_available(), "no CUDA device")
    def test_two_ranks_on_one_gpu(self):
        self.run_device("cuda")

    @unittest.skipIf(fsdp_usable() is not None, fsdp_usable() or "")
    def test_fsdp_on_the_cpu(self):
        """FSDP2 shards: each rank offloads the states of its shards, resumes them after a restart."""
        self.run_device("cpu", parallel="fsdp")

    @unittest.skipIf(fsdp_usable() is not None or not torch.cuda.is_available(), fsdp_usable() or "no CUDA device")
    def test_fsdp_on_one_gpu(self):
        self.run_device("cuda", parallel="fsdp")

    @unittest.skipIf(torch is None or not torch.cuda.is_available(), "no CUDA device")
    def test_compressed_adamw_under_ddp(self):
        """lct.torch.CompressedAdamW in each rank: the losses and parameters of AdamW(fused=True)."""
        self.compressed_adamw("ddp")

    @unittest.skipIf(fsdp_usable() is not None or not torch.cuda.is_available(), fsdp_usable() or "no CUDA device")
    def test_compressed_adamw_under_fsdp(self):
        """The same with FSDP2 shards: each rank compresses the states of its shards."""
        self.compressed_adamw("fsdp")

    def compressed_adamw(self, parallel):
        with tempfile.TemporaryDirectory() as tmp:
            tmp = pathlib.Path(tmp)
            ref = self.torchrun(tmp / "fused", "cuda", "fused", parallel=parallel)
            got = self.torchrun(tmp / "compressed", "cuda", "compressed", parallel=parallel)
            self.assertEqual(got, ref, f"CompressedAdamW under {parallel} differs from AdamW(fused=True)")


if __name__ == "__main__":
    unittest.main()
