"""test_no_numpy.py — the binding in a Python that cannot import numpy or torch (a child process with both blocked)."""
import os
import subprocess
import sys
import textwrap
import unittest

from lctd_helper import PACKAGE_ROOT, LctdTestCase

CHILD = textwrap.dedent("""
    import array, importlib.abc, os, sys

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] in ("numpy", "torch", "ml_dtypes"):
                raise ImportError(f"{name} is blocked")

    sys.meta_path.insert(0, Block())
    sys.path.insert(0, os.environ["PACKAGE_ROOT"])
    import lct

    c = lct.Client(os.environ["ENDPOINT"])
    c.put("nonumpy/bytes", b"abc")
    got = c.get("nonumpy/bytes")
    assert isinstance(got, memoryview) and got.format == "B" and got.tobytes() == b"abc", got
    assert isinstance(got.obj, bytearray)

    floats = array.array("f", [0.5 * i for i in range(24)])
    c.put("nonumpy/f32", floats, shape=(2, 3, 4))
    got = c.get("nonumpy/f32")
    assert got.format == "f" and got.shape == (2, 3, 4), (got.format, got.shape)
    assert got.tobytes() == floats.tobytes()
    assert got[1, 2, 3] == 11.5

    c.put("nonumpy/bf16", bytes(range(20)), dtype="bf16")
    got = c.get("nonumpy/bf16")
    assert got.format == "H" and got.shape == (10,) and got.tobytes() == bytes(range(20))

    c.put("nonumpy/empty", b"", dtype="f32")
    got = c.get("nonumpy/empty")
    assert got.format == "f" and len(got) == 0

    out = bytearray(20)
    c.get("nonumpy/bf16", out=out)
    assert out == bytes(range(20))
    assert [e.key for e in c.list("nonumpy/")] == sorted(
        ["nonumpy/bytes", "nonumpy/f32", "nonumpy/bf16", "nonumpy/empty"])
    assert "numpy" not in sys.modules and "torch" not in sys.modules
    try:
        c.get("nonumpy/absent")
    except KeyError as e:
        assert e.name == "LCT_ENOENT"
    else:
        raise AssertionError("no error for a missing key")
    c.close()
    print("no-numpy: ok")
""")


class TestWithoutNumpy(LctdTestCase):
    def test_child_without_numpy_or_torch(self):
        env = dict(os.environ, PACKAGE_ROOT=str(PACKAGE_ROOT), ENDPOINT=self.lctd.endpoint)
        r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "no-numpy: ok")


if __name__ == "__main__":
    unittest.main()
