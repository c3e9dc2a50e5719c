"""test_client_set.py — lct.ClientSet and Client.for_rank over several real lctd: placement as lct.h states it, routing, a dead endpoint."""
import hashlib
import os
import random
import struct
import unittest
from unittest import mock

from lctd_helper import Lctd, lct

_M = (1 << 64) - 1


def _rotl(x, b):
    return ((x << b) | (x >> (64 - b))) & _M


def siphash24(key, data):
    """SipHash-2-4 (Aumasson and Bernstein), written from the paper: lct.h's placement, checked independently."""
    k0, k1 = struct.unpack("<QQ", key)
    v = [k0 ^ 0x736F6D6570736575, k1 ^ 0x646F72616E646F6D, k0 ^ 0x6C7967656E657261, k1 ^ 0x7465646279746573]

    def rounds(n):
        for _ in range(n):
            v[0] = (v[0] + v[1]) & _M
            v[1] = _rotl(v[1], 13) ^ v[0]
            v[0] = _rotl(v[0], 32)
            v[2] = (v[2] + v[3]) & _M
            v[3] = _rotl(v[3], 16) ^ v[2]
            v[0] = (v[0] + v[3]) & _M
            v[3] = _rotl(v[3], 21) ^ v[0]
            v[2] = (v[2] + v[1]) & _M
            v[1] = _rotl(v[1], 17) ^ v[2]
            v[2] = _rotl(v[2], 32)

    whole = len(data) // 8 * 8
    tail = data[whole:] + bytes(7 - len(data) % 8) + bytes([len(data) & 0xFF])
    for i in range(0, whole + 8, 8):
        m, = struct.unpack("<Q", (data[i:i + 8] if i < whole else tail))
        v[3] ^= m
        rounds(2)
        v[0] ^= m
    v[2] ^= 0xFF
    rounds(4)
    return v[0] ^ v[1] ^ v[2] ^ v[3]


def place(key, endpoints):
    def weight(e):
        return siphash24(hashlib.blake2b(e.encode(), digest_size=16).digest(), key.encode())
    return max(range(len(endpoints)), key=lambda i: (weight(endpoints[i]), [-b for b in endpoints[i].encode()]))


class TestPlacement(unittest.TestCase):
    def test_siphash_reference_vector(self):
        # The paper's appendix: key 00..0f, message 00..0e.
        self.assertEqual(siphash24(bytes(range(16)), bytes(range(15))), 0xA129CA6149BE45E5)

    def test_liblct_places_as_documented(self):
        rng = random.Random(7)
        eps = [f"tcp://10.0.{i}.1:{7878 + i}" for i in range(5)] + ["ipc:///run/lct/gpu0/lctd.sock"]
        s = lct.client_set._Placement(eps)
        for _ in range(300):
            key = "".join(rng.choice("abcdefghij/._0123456789") for _ in range(rng.randint(1, 40)))
            self.assertEqual(s.place(key), place(key, eps), key)
        s.close()

    def test_lists(self):
        self.assertEqual(lct.client_set.endpoints(" tcp://a:1 ,ipc:///b"), ("tcp://a:1", "ipc:///b"))
        for bad in (["tcp://a:1", "tcp://a:1"], "tcp://a:1,,tcp://b:2", ["a:1"]):
            with self.assertRaises(ValueError, msg=bad):
                lct.ClientSet(bad)

    def test_rank_choice(self):
        eps = ["tcp://127.0.0.1:1", "tcp://127.0.0.1:2", "tcp://127.0.0.1:3"]
        with mock.patch.object(lct.Client, "__init__", return_value=None) as init:
            lct.Client.for_rank(4, eps, timeout_ms=5)
            init.assert_called_with("tcp://127.0.0.1:2", timeout_ms=5)
            with mock.patch.dict(os.environ, {"LOCAL_RANK": "2", "LCT_ENDPOINTS": ",".join(eps)}):
                lct.Client.for_rank()
            init.assert_called_with("tcp://127.0.0.1:3")


class TestClientSet(unittest.TestCase):
    def setUp(self):
        self.lctds = [Lctd() for _ in range(3)]
        self.eps = [d.endpoint for d in self.lctds]

    def tearDown(self):
        for d in self.lctds:
            if d.proc.returncode is None:
                d.stop()

    def fill(self, s, n=30):
        keys = [f"set/{i:03d}" for i in range(n)]
        for i, k in enumerate(keys):
            s.put(k, bytes([i]) * (i + 1))
        return keys

    def test_routes_each_key_to_its_lctd(self):
        with lct.Client(self.eps, timeout_ms=20000) as s:
            self.assertIsInstance(s, lct.ClientSet)
            keys = self.fill(s)
            for i, ep in enumerate(self.eps):
                with lct.Client(ep) as direct:
                    held = [info.key for info in direct.list("set/")]
                self.assertTrue(held, f"{ep} holds no key")
                self.assertEqual(held, [k for k in keys if place(k, self.eps) == i])
            for i, k in enumerate(keys):
                self.assertEqual(bytes(s.get(k)), bytes([i]) * (i + 1))
            self.assertEqual([info.key for info in s.list("set/")], keys)
            self.assertEqual(s.stats()["tensors"], 30)
            self.assertEqual(sum(c["tensors"] for c in s.stats_by_endpoint().values()), 30)
            self.assertEqual(set(s.ping()), set(self.eps))
            s.delete(keys[0])
            with self.assertRaises(lct.NotFoundError):
                s.stat(keys[0])
        # The same list in another order finds every key.
        with lct.Client(list(reversed(self.eps))) as s:
            self.assertEqual(s.stat(keys[5]).raw_bytes, 6)

    def test_one_endpoint_is_a_client(self):
        with lct.Client([self.eps[1]]) as c:
            self.assertIsInstance(c, lct.Client)
            self.assertEqual(c.ping().backend, "cpu")
        with mock.patch.dict(os.environ, {"LCT_ENDPOINTS": ",".join(self.eps)}):
            with lct.Client() as s:
                self.assertIsInstance(s, lct.ClientSet)
                self.assertEqual(s.endpoints, tuple(self.eps))

    def test_dead_endpoint_fails_its_keys_only(self):
        with lct.Client(self.eps, timeout_ms=20000) as s:
            keys = self.fill(s)
        self.lctds[1].proc.kill()
        self.lctds[1].proc.wait()
        with lct.Client(self.eps, timeout_ms=20000, connect_timeout_ms=200) as s:
            dead = [k for k in keys if s.place(k) == 1]
            self.assertTrue(dead)
            with self.assertRaises(lct.LctError) as caught:
                s.get(dead[0])
            self.assertEqual(caught.exception.name, "LCT_ECONN")
            self.assertIn(self.eps[1], str(caught.exception))
            self.assertIn(dead[0], str(caught.exception))
            for i, k in enumerate(keys):
                if k not in dead:
                    self.assertEqual(bytes(s.get(k)), bytes([i]) * (i + 1))
            with self.assertRaises(lct.LctError):
                s.stats()


if __name__ == "__main__":
    unittest.main()
