"""lctd_helper.py — starts a real lctd on a private ipc endpoint, for a test module (cpu backend) or a benchmark.

Environment: LCT_LCTD, the lctd binary (default build/bin/lctd of this
checkout); LCT_LIBRARY, liblct.so (see lct/_native.py for the default
search); LCT_TEST_DATA, the tensors directory (default tests/data).
"""
import ctypes
import itertools
import os
import pathlib
import signal
import subprocess
import sys
import time
import unittest

TESTS = pathlib.Path(__file__).resolve().parent
PACKAGE_ROOT = TESTS.parent  # client/python: the source tree, not an installed copy, is tested
REPO = TESTS.parents[2]
sys.path.insert(0, str(PACKAGE_ROOT))

import lct  # noqa: E402

DATA = pathlib.Path(os.environ.get("LCT_TEST_DATA", REPO / "tests" / "data"))
_serial = itertools.count()


def _die_with_parent():
    # A crashed test run must not leave its lctd behind (PR_SET_PDEATHSIG = 1).
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)


class Lctd:
    """One lctd process; stop() requires a clean exit (status 0). extra:
    more arguments (another --listen, say); binary: None for $LCT_LCTD or
    this checkout's build; stderr: where its log goes (inherited)."""

    def __init__(self, *extra, backend="cpu", memory="256M", binary=None, stderr=None):
        binary = binary or os.environ.get("LCT_LCTD") or str(REPO / "build" / "bin" / "lctd")
        if not os.access(binary, os.X_OK):
            raise RuntimeError(f"lctd not found at {binary}: build it or set LCT_LCTD")
        self.endpoint = f"ipc:///tmp/lct-py-{os.getpid()}-{next(_serial)}.sock"
        self.proc = subprocess.Popen(
            [binary, "--backend", backend, "--listen", self.endpoint, "--memory", memory,
             "--log-level", "warn", *extra],
            preexec_fn=_die_with_parent, stderr=stderr)
        deadline = time.monotonic() + 20
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"lctd exited at start with status {self.proc.returncode}")
            try:
                lct.Client(self.endpoint, connect_timeout_ms=100).close()
                return
            except lct.LctError:
                if time.monotonic() > deadline:
                    self.proc.kill()
                    raise RuntimeError("lctd did not answer within 20 s") from None

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("lctd did not stop within 20 s of SIGTERM") from None
        if self.proc.returncode != 0:
            raise AssertionError(f"lctd ended with status {self.proc.returncode}")


class LctdTestCase(unittest.TestCase):
    """Starts one lctd for the class; self.client is a connection to it."""

    @classmethod
    def setUpClass(cls):
        cls.lctd = Lctd()
        cls.addClassCleanup(cls.lctd.stop)
        cls.client = lct.Client(cls.lctd.endpoint, timeout_ms=20000)
        cls.addClassCleanup(cls.client.close)  # cleanups run last-in first-out: before stop

    def key(self, suffix=""):
        """A key private to the running test."""
        return f"{self.id()}/{suffix}"


def tensor_bits(t):
    """A torch tensor's bit patterns as integers, so that NaNs and signed zeros compare exactly."""
    import torch
    words = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    return t.detach().contiguous().view(words[t.element_size()])
