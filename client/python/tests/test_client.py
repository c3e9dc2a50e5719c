"""test_client.py — lct.Client against a real lctd: round trips of every value kind and dtype, metadata, errors."""
import array
import tempfile
import threading
import unittest

from lctd_helper import DATA, LctdTestCase, lct

try:
    import numpy as np
except ImportError:  # the module's numpy tests skip; test_no_numpy covers that case
    np = None

needs_numpy = unittest.skipIf(np is None, "numpy is not importable")

# The dtype of a tests/data file, from its name (A_s100_w.bf16.bin, all_patterns_1280.f8e4m3.in).
NUMPY_WORDS = {"f32": "float32", "f16": "float16", "bf16": "uint16", "f8e4m3": "uint8",
               "f8e5m2": "uint8", "raw": "uint8"}


def data_files():
    files = sorted(DATA.glob("*.bin")) + sorted((DATA / "golden").glob("*.in"))
    assert files, f"no test tensors under {DATA}"
    return [(f, f.name.split(".")[-2]) for f in files]


class TestBasics(LctdTestCase):
    def test_ping(self):
        info = self.client.ping()
        self.assertEqual(info.backend, "cpu")
        self.assertTrue(info.server.startswith("lctd "))
        self.assertEqual(info.protocol, 1)
        self.assertGreater(info.frame_bytes, 0)
        self.assertNotEqual(info.instance, 0)
        self.assertEqual(self.client.ping().instance, info.instance, "one run of lctd, one instance id")

    def test_bytes_like_round_trip(self):
        payload = bytes(range(256)) * 3 + b"tail"
        for name, value in [("bytes", payload), ("bytearray", bytearray(payload)),
                            ("memoryview", memoryview(payload)[5:-5]),
                            ("readonly-slice", memoryview(bytearray(payload)).toreadonly()),
                            ("empty", b"")]:
            with self.subTest(name):
                info = self.client.put(self.key(name), value)
                raw = bytes(memoryview(value))
                self.assertEqual((info.dtype, info.shape, info.raw_bytes), ("raw", (len(raw),), len(raw)))
                out = bytearray(len(raw))
                self.assertIs(self.client.get(self.key(name), out=out), out)
                self.assertEqual(bytes(out), raw)
                self.assertEqual(bytes(memoryview(self.client.get(self.key(name)))), raw)

    def test_bytes_with_dtype(self):
        floats = array.array("f", [1.5, -2.0, float("inf"), 0.0, -0.0, 3.25])
        info = self.client.put(self.key(), floats.tobytes(), dtype="f32")
        self.assertEqual((info.dtype, info.shape), ("f32", (6,)))
        info = self.client.put(self.key("shaped"), floats.tobytes(), dtype="f32", shape=(2, 3))
        self.assertEqual(info.shape, (2, 3))
        # array.array('f') is a bytes-like object of format 'f': its dtype is f32 by itself.
        self.assertEqual(self.client.put(self.key("array"), floats).dtype, "f32")
        out = array.array("f", bytes(24))
        self.client.get(self.key("shaped"), out=out)
        self.assertEqual(out.tobytes(), floats.tobytes())

    @needs_numpy
    def test_encoded_tensor_travels_in_frames(self):
        # Blobs coded here fit a 128 KiB frame (lct_segment_bytes lowers their size to fit), though lctd's
        # segment_size is larger; read back as blobs and decoded here, or decoded by lctd.
        a = np.random.default_rng(4).standard_normal(300000).astype(np.float32)
        with lct.Client(self.lctd.endpoint, frame_bytes=128 << 10) as small:
            self.assertEqual(small.segment_bytes(), 64 << 10)
            info = small.put_encoded("coded", a)
            self.assertLess(info.stored_bytes, a.nbytes)
            back, got = small.get_encoded("coded")
            self.assertEqual(bytes(back), a.tobytes())
            self.assertEqual(got.checksum, info.checksum)
            np.testing.assert_array_equal(small.get("coded"), a)
            into = np.empty_like(a)
            self.assertIs(small.get_encoded("coded", out=into)[0], into)
            np.testing.assert_array_equal(into, a)
            with self.assertRaises(lct.LctError) as cm:
                small.get_encoded("coded", out=bytearray(a.nbytes - 4))
            self.assertEqual(cm.exception.code, lct.error_code("LCT_EINVAL"))

    def test_large_tensor_travels_in_frames(self):
        # A 64 KiB frame splits this into 17 puts and 17 gets; the odd size ends in a partial frame.
        with lct.Client(self.lctd.endpoint, frame_bytes=64 << 10) as small:
            payload = bytes((i * 7919) & 0xFF for i in range((1 << 20) + 12345))
            small.put(self.key(), payload)
            self.assertEqual(bytes(memoryview(small.get(self.key()))), payload)
            out = bytearray(len(payload))
            small.get(self.key(), out=out)
            self.assertEqual(out, payload)

    def test_stat_list_delete(self):
        prefix = self.key()
        keys = [f"{prefix}{name}" for name in ("b", "a", "c/1", "c/2", "d")]
        for i, k in enumerate(keys):
            self.client.put(k, bytes(i + 1))
        st = self.client.stat(keys[0])
        self.assertEqual((st.key, st.dtype, st.shape, st.raw_bytes), (keys[0], "raw", (1,), 1))
        self.assertGreater(st.stored_bytes, 0)
        listed = list(self.client.list(prefix))
        self.assertEqual([e.key for e in listed], sorted(keys))
        self.assertEqual([e.key for e in self.client.list(prefix, page_size=2)], sorted(keys))
        self.assertEqual([e.key for e in self.client.list(prefix + "c/")], [prefix + "c/1", prefix + "c/2"])
        self.assertEqual(listed[0], self.client.stat(listed[0].key))

        v1 = self.client.stat(keys[1]).version
        self.client.put(keys[1], b"again")
        st = self.client.stat(keys[1])
        self.assertGreater(st.version, v1)
        self.assertEqual(st.raw_bytes, 5)

        self.client.delete(keys[2])
        with self.assertRaises(lct.NotFoundError):
            self.client.stat(keys[2])
        with self.assertRaises(lct.NotFoundError):
            self.client.delete(keys[2])
        self.assertNotIn(keys[2], [e.key for e in self.client.list(prefix)])

    def test_list_spans_default_pages(self):
        prefix = self.key()
        keys = sorted(f"{prefix}{i:04d}" for i in range(230))  # default page: 100
        for k in keys:
            self.client.put(k, b"x")
        self.assertEqual([e.key for e in self.client.list(prefix)], keys)

    def test_keys_keep_their_bytes(self):
        for key in ["ünïcødé/κλειδί", b"bytes-key", "x" * 1024]:
            with self.subTest(key=key[:20]):
                self.client.put(key, b"v")
                want = key.decode() if isinstance(key, bytes) else key
                self.assertEqual(self.client.stat(key).key, want)
                self.assertIn(want, [e.key for e in self.client.list(key)])

    def test_stats(self):
        before = self.client.stats()
        self.client.put(self.key(), bytes(1000))
        after = self.client.stats()
        for name in ("tensors", "raw_bytes", "stored_bytes", "pool_capacity", "pool_used", "pool_held",
                     "requests", "errors", "bytes_in", "bytes_out"):
            self.assertIn(name, after)
        self.assertEqual(after["pool_capacity"], 256 << 20)
        self.assertEqual(after["pool_held"], after["pool_used"], "the cpu backend holds what it uses")
        self.assertGreaterEqual(after["raw_bytes"], before["raw_bytes"] + 1000)
        self.assertGreater(after["requests"], before["requests"])

    def test_threads_share_a_client(self):
        errors = []

        def work(t):
            try:
                for i in range(50):
                    k = self.key(f"{t}/{i}")
                    payload = bytes([t, i]) * (i + 1)
                    self.client.put(k, payload)
                    self.assertEqual(bytes(memoryview(self.client.get(k))), payload)
            except Exception as e:  # reported by the main thread
                errors.append(e)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])

    def test_context_manager_closes(self):
        with lct.Client(self.lctd.endpoint) as c:
            c.ping()
        self.assertIn("closed", repr(c))
        with self.assertRaises(ValueError):
            c.ping()
        c.close()  # twice is harmless


class TestErrors(LctdTestCase):
    def assertLctError(self, name, fn, *args, **kwargs):
        with self.assertRaises(lct.LctError) as cm:
            fn(*args, **kwargs)
        e = cm.exception
        self.assertEqual(e.name, name)
        self.assertEqual(e.code, getattr(lct, name))
        self.assertLess(e.code, 0)
        self.assertIn(name, str(e))
        self.assertIn(e.message, str(e))
        return e

    def test_missing_key(self):
        e = self.assertLctError("LCT_ENOENT", self.client.get, self.key("absent"))
        self.assertIsInstance(e, KeyError)
        self.assertIsInstance(e, lct.NotFoundError)
        self.assertEqual(e.code, -9)
        self.assertIn("no such key", str(e))
        self.assertLctError("LCT_ENOENT", self.client.stat, self.key("absent"))
        self.assertLctError("LCT_ENOENT", self.client.delete, self.key("absent"))

    def test_size_must_match_dtype_and_shape(self):
        e = self.assertLctError("LCT_ESIZE", self.client.put, self.key(), b"12345", dtype="f32")
        self.assertIn("5 bytes", e.detail)
        self.assertLctError("LCT_ESIZE", self.client.put, self.key(), bytes(16), dtype="f32", shape=(3,))
        self.assertLctError("LCT_ESIZE", self.client.put, self.key(), bytes(16), dtype="bf16", shape=(2, 2))

    def test_out_of_the_wrong_size(self):
        self.client.put(self.key(), bytes(64), dtype="f32")
        self.assertLctError("LCT_EBUFSIZE", self.client.get, self.key(), out=bytearray(63))
        self.assertLctError("LCT_ESIZE", self.client.get, self.key(), out=bytearray(65))
        self.assertLctError("LCT_EDTYPE", self.client.get, self.key(), out=array.array("H", bytes(64)))

    def test_bad_arguments(self):
        self.assertLctError("LCT_EDTYPE", self.client.put, self.key(), b"1234", dtype="f64")
        self.assertLctError("LCT_ENAMETOOLONG", self.client.put, "", b"x")
        self.assertLctError("LCT_ENAMETOOLONG", self.client.put, "k" * 1025, b"x")
        self.assertLctError("LCT_EINVAL", self.client.put, self.key(), bytes(1), shape=(1,) * 9)
        with self.assertRaises(ValueError):
            self.client.put("a\0b", b"x")
        with self.assertRaises(ValueError):
            self.client.put(self.key(), b"x", shape=(-1,))
        with self.assertRaises(TypeError):
            self.client.put(self.key(), object())
        with self.assertRaises(TypeError):
            self.client.put(self.key(), array.array("i", [1, 2]))  # int32: which lct dtype?
        with self.assertRaises(ValueError):
            self.client.get(self.key(), out=b"read-only")

    def test_connect_failures(self):
        self.assertLctError("LCT_ECONN", lct.Client, "ipc:///tmp/lct-py-nobody-listens.sock",
                            connect_timeout_ms=200)
        self.assertLctError("LCT_EINVAL", lct.Client, "nonsense://x")
        self.assertLctError("LCT_EACCES", lct.Client, self.lctd.endpoint,
                            auth_token_file="/nonexistent/lct-token")

    def test_auth_token_file_on_ipc(self):
        # The token travels with every request; an ipc endpoint (access by file
        # mode and group) ignores it.
        with tempfile.NamedTemporaryFile("w", suffix=".token") as f:
            f.write("0123456789abcdef0123\n")
            f.flush()
            c = lct.Client(self.lctd.endpoint, auth_token_file=f.name)
            self.assertTrue(c.ping().server.startswith("lctd "))
            c.close()


@needs_numpy
class TestNumpy(LctdTestCase):
    def round_trip(self, key, a, dtype=None, want_dtype=None):
        info = self.client.put(key, a, dtype=dtype)
        self.assertEqual(info.shape, a.shape)
        self.assertEqual(info.raw_bytes, a.nbytes)
        b = self.client.get(key)
        self.assertEqual(b.dtype, np.dtype(want_dtype or a.dtype))
        self.assertEqual(b.shape, a.shape)
        self.assertEqual(b.tobytes(), a.tobytes())
        return info

    def test_real_tensors(self):
        for path, dtype in data_files():
            with self.subTest(path.name):
                a = np.fromfile(path, dtype=NUMPY_WORDS[dtype])
                explicit = None if a.dtype.name in ("float32", "float16") else dtype
                info = self.round_trip(self.key(path.name), a, dtype=explicit)
                self.assertEqual(info.dtype, dtype)
                if path.name.startswith("A_") and dtype == "bf16":
                    # real bf16 training tensors compress (DESIGN.md: 1.48-1.79x bound)
                    self.assertLess(info.stored_bytes, info.raw_bytes)

    def test_many(self):
        # Host values go one by one; the pairs keep their order and outs are filled.
        rng = np.random.default_rng(8)
        values = [rng.standard_normal((17, 5)).astype(np.float32), np.arange(300, dtype=np.float16),
                  np.zeros(0, np.float32)]
        pairs = [(self.key(f"many{i}"), v) for i, v in enumerate(values)]
        infos = self.client.put_many(pairs)
        self.assertEqual([i.key for i in infos], [k for k, _ in pairs])
        self.assertEqual([i.shape for i in infos], [v.shape for v in values])
        outs = [np.empty_like(v) for v in values]
        got = self.client.get_many([(k, o) for (k, _), o in zip(pairs, outs)])
        self.assertEqual(len(got), 3)
        for v, o, g in zip(values, outs, got):
            self.assertIs(g, o)
            self.assertEqual(o.tobytes(), v.tobytes())
        with self.assertRaises(lct.NotFoundError):
            self.client.get_many([(self.key("many0"), outs[0]), (self.key("absent"), outs[0])])
        # Iterables work as well as lists; get_many returns the outs.
        again = [np.empty_like(v) for v in values]
        got = self.client.get_many((k, o) for (k, _), o in zip(pairs, again))
        self.assertEqual([g.tobytes() for g in got], [v.tobytes() for v in values])

    def test_clone(self):
        # Another connection to the same lctd: it sees the same keys and outlives the original.
        c = lct.Client(self.lctd.endpoint, timeout_ms=20000)
        twin = c.clone()
        c.put(self.key("clone"), b"abc", dtype="raw")
        c.close()
        self.assertEqual(bytes(twin.get(self.key("clone"))), b"abc")
        twin.close()

    def test_save_needs_persist_dir(self):
        with self.assertRaises(lct.LctError) as cm:
            self.client.save()
        self.assertEqual(cm.exception.name, "LCT_ECONFIG")
        with lct.Client(self.lctd.endpoint, save_timeout_ms=5000) as c, self.assertRaises(lct.LctError) as cm:
            c.save()
        self.assertEqual(cm.exception.name, "LCT_ECONFIG")

    def test_batch(self):
        # Host values: one by one at each send, the values retargeted in order.
        keys = [self.key(f"batch{i}") for i in range(2)]
        first = [np.arange(10, dtype=np.float32), np.ones(4, np.float16)]
        batch = lct.Batch(self.client, zip(keys, first), put=True)
        batch.send()
        self.assertEqual([i.shape for i in batch.infos()], [(10,), (4,)])
        second = [np.arange(10, 20, dtype=np.float32), np.zeros(4, np.float16)]
        batch.retarget(second)
        batch.send()
        self.assertEqual(self.client.get(keys[0]).tobytes(), second[0].tobytes())
        self.assertFalse(batch.submittable, "host values take send() only")
        with self.assertRaises(ValueError):
            batch.submit()
        batch.release()
        with self.assertRaises(ValueError):
            batch.send()
        with self.assertRaises(ValueError):
            batch.retarget(second[:1])

    def test_shapes(self):
        rng = np.random.default_rng(6)
        for shape in [(), (1,), (0,), (3, 0, 2), (2, 3, 4, 5), (1,) * 8]:
            with self.subTest(shape=shape):
                a = rng.standard_normal(shape).astype(np.float32)
                self.round_trip(self.key(str(shape)), a)

    def test_dtypes(self):
        rng = np.random.default_rng(7)
        words16 = rng.integers(0, 1 << 16, size=(33, 7), dtype=np.uint16)
        bytes8 = rng.integers(0, 256, size=(5, 51), dtype=np.uint8)
        cases = [
            ("f32", rng.standard_normal((17, 9)).astype(np.float32), None, None),
            ("f16", rng.standard_normal(1001).astype(np.float16), None, None),
            ("bf16", words16, "bf16", None),
            ("f16-words", words16, "f16", "float16"),
            ("f8e4m3", bytes8, "f8e4m3", None),
            ("f8e5m2", bytes8, "f8e5m2", None),
            ("raw-u8", bytes8, None, None),
            ("raw-i8", bytes8.view(np.int8), None, "uint8"),
        ]
        for name, a, dtype, want in cases:
            with self.subTest(name):
                info = self.round_trip(self.key(name), a, dtype=dtype, want_dtype=want)
                self.assertEqual(info.dtype, dtype or {"float32": "f32", "float16": "f16"}.get(a.dtype.name, "raw"))

    def test_specials_are_bit_exact(self):
        bits = np.array([0x7FC00001, 0xFFC12345, 0x7F800000, 0xFF800000, 0, 0x80000000, 1, 0x807FFFFF],
                        dtype=np.uint32)
        a = bits.view(np.float32)
        self.client.put(self.key(), a)
        self.assertTrue(np.array_equal(self.client.get(self.key()).view(np.uint32), bits))

    def test_wider_dtypes_go_raw(self):
        a = np.arange(12, dtype=np.int32).reshape(3, 4)
        with self.assertRaises(TypeError):
            self.client.put(self.key(), a)
        info = self.client.put(self.key(), a, dtype="raw")
        self.assertEqual((info.dtype, info.shape), ("raw", (3, 16)))  # numpy view() shape rule
        out = np.empty_like(a)
        self.client.get(self.key(), out=out)  # raw tensors fill any element type
        self.assertTrue(np.array_equal(out, a))

    def test_strided_and_foreign_byte_order(self):
        base = np.arange(60, dtype=np.float32).reshape(6, 10)
        self.round_trip(self.key("strided"), base[::2, 1::3])
        swapped = base.astype(">f4")
        self.client.put(self.key("be"), swapped)
        self.assertTrue(np.array_equal(self.client.get(self.key("be")), base))

    def test_get_into_out(self):
        a = np.random.default_rng(8).standard_normal((8, 16)).astype(np.float32)
        self.client.put(self.key(), a)
        out = np.empty_like(a)
        self.assertIs(self.client.get(self.key(), out=out), out)
        self.assertTrue(np.array_equal(out, a))
        flat = np.empty(128, np.float32)  # the same bytes in another shape
        self.client.get(self.key(), out=flat)
        self.assertTrue(np.array_equal(flat, a.ravel()))
        words = np.empty(512, np.uint8)  # a byte view of it
        self.client.get(self.key(), out=words)
        self.assertEqual(words.tobytes(), a.tobytes())
        strided = np.zeros((8, 32), np.float32)[:, ::2]  # filled through a staging copy
        self.client.get(self.key(), out=strided)
        self.assertTrue(np.array_equal(strided, a))
        with self.assertRaises(ValueError):
            ro = np.empty_like(a)
            ro.flags.writeable = False
            self.client.get(self.key(), out=ro)

    def test_result_owns_its_memory(self):
        a = np.arange(1 << 16, dtype=np.float32)
        self.client.put(self.key(), a)
        b = self.client.get(self.key())
        view = b[100:200]
        del b  # the buffer liblct allocated must outlive the base array while a view holds it
        self.assertTrue(np.array_equal(view, a[100:200]))
        view[:] = 0  # writable
        self.assertEqual(float(view.sum()), 0.0)


if __name__ == "__main__":
    unittest.main()
