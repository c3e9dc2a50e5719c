"""test_service.py — lctd as a system service: config table and errors, /metrics through promtool, readiness, signals, auth, limits, ipc access.

Environment (set by tests/CMakeLists.txt): LCT_LCTD and LCT_CLI, the lctd and
lct binaries; LCT_LIBRARY, liblct.so for the Python binding.
"""
import os
import pathlib
import random
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "client" / "python"))
import lct  # noqa: E402

LCTD = os.environ["LCT_LCTD"]
CLI = os.environ["LCT_CLI"]
TOKEN = "s3cret-token-0123456789abcdef"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port, path="/metrics", timeout=5):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
        return r.status, r.headers.get("Content-Type"), r.read().decode()


def crc32c(data, crc=0):
    """CRC-32C (Castagnoli), as proto/lct_checksum.h computes it."""
    table = crc32c.table
    if table is None:
        table = crc32c.table = [0] * 256
        for i in range(256):
            c = i
            for _ in range(8):
                c = (c >> 1) ^ (0x82F63B78 if c & 1 else 0)
            table[i] = c
    crc ^= 0xFFFFFFFF
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


crc32c.table = None


def metric(text, name):
    """The value of one sample line 'name value' (name with its labels)."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return None


class Daemon:
    """One lctd with an ipc and a tcp endpoint and the stats endpoint, its stderr in a file."""

    def __init__(self, tmp, *extra, env=None, wait=True):
        self.tmp = pathlib.Path(tmp)
        self.ipc = f"ipc://{self.tmp}/lctd.sock"
        self.tcp = f"tcp://127.0.0.1:{free_port()}"
        self.http = free_port()
        self.log_path = self.tmp / "lctd.log"
        self.log = open(self.log_path, "w")
        self.signaled = False
        self.proc = subprocess.Popen(
            [LCTD, "--backend", "cpu", "--memory", "256M", "--listen", self.ipc, "--listen", self.tcp,
             "--metrics", f"127.0.0.1:{self.http}", *extra],
            stderr=self.log, env=env)
        if wait:
            self.wait_ready()

    def wait_ready(self):
        deadline = time.monotonic() + 20
        while True:
            if self.proc.poll() is not None:
                raise AssertionError(f"lctd exited at start ({self.proc.returncode}): {self.stderr()}")
            try:
                lct.Client(self.ipc, connect_timeout_ms=100).close()
                return
            except lct.LctError:
                if time.monotonic() > deadline:
                    raise AssertionError("lctd did not answer within 20 s") from None

    def stderr(self):
        return self.log_path.read_text()

    def client(self, endpoint=None, **kw):
        return lct.Client(endpoint or self.ipc, timeout_ms=20000, **kw)

    def terminate(self):
        """Sends the one SIGTERM (a second one would kill lctd at once)."""
        if not self.signaled:
            self.signaled = True
            self.proc.send_signal(signal.SIGTERM)

    def stop(self, timeout=20):
        if self.proc.poll() is None:
            self.terminate()
        try:
            rc = self.proc.wait(timeout=timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.log.close()
        return rc


class ServiceTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="lct-svc-")
        self.addCleanup(shutil.rmtree, self.tmp, True)
        self.daemons = []

    def tearDown(self):
        for d in self.daemons:
            if d.proc.poll() is None:
                d.proc.kill()
                d.proc.wait()

    def start(self, *extra, **kw):
        d = Daemon(self.tmp, *extra, **kw)
        self.daemons.append(d)
        return d

    def write(self, name, text, mode=0o600):
        p = pathlib.Path(self.tmp) / name
        p.write_text(text)
        p.chmod(mode)
        return str(p)

    def run_lctd(self, *args):
        return subprocess.run([LCTD, *args], capture_output=True, text=True, timeout=20)

    # ---- 1. configuration ---------------------------------------------------

    def test_example_config_is_the_table(self):
        """deploy/lctd.conf is what the settings table generates, and lctd accepts it."""
        out = self.run_lctd("--example-config")
        self.assertEqual(out.returncode, 0)
        shipped = (REPO / "deploy" / "lctd.conf").read_text()
        self.assertEqual(out.stdout, shipped,
                         "deploy/lctd.conf disagrees with the table: regenerate it with "
                         "`lctd --example-config > deploy/lctd.conf`")
        printed = self.run_lctd("--config", str(REPO / "deploy" / "lctd.conf"), "--print-config")
        self.assertEqual(printed.returncode, 0, printed.stderr)
        self.assertIn("metrics 127.0.0.1:9878", printed.stdout)
        help_ = self.run_lctd("--help").stdout
        readme = (REPO / "deploy" / "README.md").read_text()
        keys = [line.split("(file key: ")[1].split(")")[0].split(";")[0]
                for line in help_.splitlines() if "(file key: " in line]
        self.assertIn("persist_dir", keys)
        for key in keys:
            self.assertIn("--" + key.replace("_", "-"), help_)
            self.assertIn(f"| `{key}` |", readme, f"deploy/README.md does not document {key}")
            self.assertRegex(shipped, rf"(?m)^(# )?{key}\b", f"deploy/lctd.conf lacks {key}")

    def test_bad_values_one_line_each(self):
        """A bad value stops lctd at start with one line: key, value, what is allowed."""
        cases = [
            (["--frame-size", "1K"], "frame_size: '1K'", "a size from 65536"),
            (["--memory", "lots"], "memory: 'lots'", "a size from"),
            (["--log-level", "loud"], "log_level: 'loud'", "one of error, warn, info, debug"),
            (["--metrics", "localhost"], "metrics: 'localhost'", "HOST:PORT"),
            (["--metrics", "127.0.0.1:99999"], "metrics: '127.0.0.1:99999'", "port 1..65535"),
            (["--ipc-mode", "0999"], "ipc_mode: '0999'", "octal permission bits"),
            (["--ipc-group", "no-such-group-lct"], "ipc_group: 'no-such-group-lct'", "existing group"),
            (["--max-key-length", "2000"], "max_key_length: '2000'", "an integer from 1 to 1024"),
            (["--put-timeout", "5d"], "put_timeout: '5d'", "a duration"),
            (["--listen", "http://x"], "listen: 'http://x'", "tcp://HOST:PORT or ipc:///PATH"),
            (["--auth-token-file", "/nonexistent/token"], "auth_token_file: '/nonexistent/token'",
             "cannot read it"),
        ]
        short = self.write("short.token", "tooshort\n")
        cases.append((["--auth-token-file", short], f"auth_token_file: '{short}'", "16 to 4096 bytes"))
        conf = self.write("bad.conf", "memory 1G\nsegment_size 100K\nthreads many\n")
        cases.append((["--config", conf], f"{conf}:3: threads: 'many'", "an integer from 0 to 1024"))
        for args, named, allowed in cases:
            with self.subTest(args=args):
                r = self.run_lctd("--backend", "cpu", *args)
                self.assertEqual(r.returncode, 2)
                lines = r.stderr.splitlines()
                self.assertEqual(len(lines), 1, r.stderr)
                self.assertIn(named, lines[0])
                self.assertIn(allowed, lines[0])

    # ---- 3. stats endpoint ---------------------------------------------------

    def test_metrics_prometheus(self):
        d = self.start()
        c = d.client()
        c.put("w/bf16", bytes(range(256)) * 512, dtype="bf16")
        c.put("w/f32", bytes(4096), dtype="f32")
        c.get("w/bf16")
        with self.assertRaises(lct.LctError):
            c.get("missing")
        status, ctype, text = scrape(d.http)
        self.assertEqual(status, 200)
        self.assertTrue(ctype.startswith("text/plain; version=0.0.4"), ctype)
        promtool = shutil.which("promtool")
        self.assertIsNotNone(promtool, "promtool missing (deploy/setup.sh installs Debian's prometheus)")
        check = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True,
                               text=True, timeout=60)
        self.assertEqual(check.returncode, 0, check.stdout + check.stderr + text)
        self.assertEqual((check.stdout + check.stderr).strip(), "", "promtool lint findings")
        for name in ["lct_requests_total{op=\"put\",status=\"ok\"}", "lct_tensors", "lct_raw_bytes",
                     "lct_stored_bytes", "lct_pool_capacity_bytes", "lct_pool_used_bytes",
                     "lct_pool_free_bytes", "lct_pool_held_bytes", "lct_received_bytes_total", "lct_sent_bytes_total",
                     "lct_encoded_bytes_total", "lct_decoded_bytes_total", "lct_encode_seconds_total",
                     "lct_decode_seconds_total", "lct_codebook_builds_total",
                     "lct_codebook_rebuilds_total", "lct_clients",
                     "lct_compression_ratio{dtype=\"bf16\"}",
                     "lct_errors_total{kind=\"LCT_ENOENT\"}",
                     "lct_request_duration_seconds_count{op=\"get\"}"]:
            self.assertIsNotNone(metric(text, name), name)
        self.assertEqual(metric(text, "lct_tensors"), 2)
        self.assertGreater(metric(text, "lct_compression_ratio{dtype=\"bf16\"}"), 1.0)
        self.assertEqual(metric(text, "lct_codebook_builds_total"), 2)
        self.assertGreaterEqual(metric(text, "lct_clients"), 1)
        self.assertIn("lct_request_duration_seconds_bucket{op=\"put\",le=\"+Inf\"} 2\n", text)
        self.assertNotIn("w/bf16", text, "no per-key labels")
        self.assertEqual(scrape(d.http, "/healthz")[2], "ok\n")
        # The same figures through the stats op, as `lct stats --prometheus` prints them.
        out = subprocess.run([CLI, "--endpoint", d.ipc, "stats", "--prometheus"], capture_output=True, text=True,
                             timeout=20)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(metric(out.stdout, "lct_tensors"), 2)
        self.assertIn("lct_compression_ratio{dtype=\"bf16\"}", out.stdout)
        c.close()
        self.assertEqual(d.stop(), 0)

    def test_metrics_fair_under_slow_clients(self):
        """200 connections that send half a request line and stall: scrapes keep succeeding, stalled ones are closed."""
        d = self.start("--log-level", "warn")

        def stall():
            s = socket.create_connection(("127.0.0.1", d.http), timeout=10)
            s.sendall(b"GET /metr")
            return s

        stalled = [stall() for _ in range(200)]
        self.addCleanup(lambda: [s.close() for s in stalled])
        scrapes = ok = 0
        deadline = time.monotonic() + 30
        while scrapes < 40 and time.monotonic() < deadline:
            # Keep 200 open: those the server closed come back, as a slowloris client's do.
            for i, s in enumerate(stalled):
                s.setblocking(False)
                try:
                    gone = s.recv(1) == b""
                except BlockingIOError:
                    gone = False
                except OSError:
                    gone = True
                if gone:
                    s.close()
                    stalled[i] = stall()
            scrapes += 1
            try:
                ok += scrape(d.http, timeout=2)[0] == 200
            except (OSError, urllib.error.URLError):
                pass
        self.assertGreaterEqual(ok, 0.95 * scrapes, f"{ok} of {scrapes} scrapes answered")
        self.assertGreaterEqual(scrapes, 10)
        # One that stalls alone is closed after the request-head deadline.
        for s in stalled:
            s.close()
        s = stall()
        s.settimeout(10)
        started = time.monotonic()
        self.assertEqual(s.recv(1), b"", "closed without a reply")
        self.assertLess(time.monotonic() - started, 5)
        s.close()
        self.assertEqual(scrape(d.http)[0], 200)
        self.assertEqual(d.stop(), 0)

    # ---- 2. readiness (sd_notify) ------------------------------------------

    def test_notify_ready_after_endpoints(self):
        path = os.path.join(self.tmp, "notify.sock")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(path)
        sock.settimeout(20)
        self.addCleanup(sock.close)
        env = dict(os.environ, NOTIFY_SOCKET=path)
        d = self.start("--log-level", "warn", env=env, wait=False)
        msg = sock.recv(4096).decode()
        self.assertEqual(msg, "READY=1")
        # At READY=1 every endpoint answers at once, with no retry.
        for ep in (d.ipc, d.tcp):
            c = lct.Client(ep, connect_timeout_ms=2000)
            self.assertTrue(c.ping().server.startswith("lctd "))
            c.close()
        self.assertEqual(scrape(d.http, "/healthz")[0], 200)
        d.terminate()
        self.assertEqual(sock.recv(4096).decode(), "STOPPING=1")
        self.assertEqual(d.stop(), 0)

    # ---- 4. signals -----------------------------------------------------------

    def test_sighup_reloads(self):
        conf = self.write("lctd.conf", "log_level warn\nmax_key_length 1024\n")
        d = self.start("--config", conf)
        c = d.client()
        self.write("lctd.conf", "log_level debug\nmax_key_length 8\nframe_size 1M\n")
        d.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while "reload: done" not in d.stderr() and time.monotonic() < deadline:
            time.sleep(0.05)
        log = d.stderr()
        self.assertIn("info: reload: log_level 'warn' -> 'debug'", log)
        self.assertIn("info: reload: max_key_length '1024' -> '8'", log)
        self.assertIn("warn: reload: frame_size changed", log)
        with self.assertRaises(lct.LctError) as e:
            c.put("longer-than-8", b"x")
        self.assertEqual(e.exception.name, "LCT_ENAMETOOLONG")
        c.put("short", b"x")
        # An invalid file changes nothing and the daemon keeps serving.
        self.write("lctd.conf", "log_level chatty\n")
        d.proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while "reload refused" not in d.stderr() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.assertIn("log_level: 'chatty' is not allowed", d.stderr())
        text = scrape(d.http)[2]
        self.assertEqual(metric(text, "lct_config_reloads_total"), 1)
        self.assertEqual(metric(text, "lct_config_reload_failures_total"), 1)
        c.ping()
        for line in d.stderr().splitlines():
            self.assertRegex(line, r"^\S+ lctd (error|warn|info|debug): ", "one event per line, with a level")
        c.close()
        self.assertEqual(d.stop(), 0)

    def test_sigterm_answers_in_flight(self):
        """SIGTERM while a long put is being encoded: the put is answered, then lctd exits 0."""
        d = self.start("--threads", "1", "--frame-size", "256M", "--log-level", "warn",
                       "--drain-timeout", "120s")  # room for a sanitizer build's slow encode
        c = d.client()
        big = bytes(range(256)) * (192 << 12)  # 192 MiB, one frame, one codec thread
        result = {}

        def put():
            try:
                result["info"] = c.put("big", big, dtype="bf16")
            except lct.LctError as e:
                result["error"] = e

        t = threading.Thread(target=put)
        t.start()
        deadline = time.monotonic() + 20
        while metric(scrape(d.http)[2], "lct_requests_in_flight") != 1:
            self.assertLess(time.monotonic(), deadline, "the put never arrived")
            time.sleep(0.002)
        started = time.monotonic()
        d.terminate()
        t.join(30)
        self.assertNotIn("error", result)
        self.assertEqual(result["info"].raw_bytes, len(big))
        self.assertEqual(d.stop(), 0)
        self.assertLess(time.monotonic() - started, 120)
        c.close()

    def test_sigterm_under_load(self):
        """Clients hammering lctd when SIGTERM comes: lctd exits 0 promptly; every answered request was right."""
        d = self.start("--log-level", "warn", "--drain-timeout", "10s")
        stop = threading.Event()
        failures, done = [], []

        def worker(i):
            c = lct.Client(d.ipc, timeout_ms=1000)
            payload = bytes([i]) * 65536 * 4
            n = 0
            try:
                while not stop.is_set():
                    c.put(f"k{i}", payload, dtype="bf16")
                    if bytes(c.get(f"k{i}")) != payload:
                        failures.append(f"worker {i}: wrong bytes")
                    n += 1
            except lct.LctError as e:
                if e.name not in ("LCT_ETIMEDOUT", "LCT_ECONN"):
                    failures.append(f"worker {i}: {e}")
            done.append(n)
            c.close()

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        time.sleep(1.0)
        started = time.monotonic()
        d.terminate()
        rc = d.proc.wait(timeout=10)
        elapsed = time.monotonic() - started
        stop.set()
        for t in threads:
            t.join(10)
        self.assertEqual(rc, 0, d.stderr())
        self.assertLess(elapsed, 12)
        self.assertEqual(failures, [])
        self.assertEqual(len(done), 4)
        self.assertGreater(sum(done), 0)
        d.stop()

    # ---- 5. persistence ---------------------------------------------------------

    def snapshot_of(self, c):
        return {t.key: (t.version, t.checksum, t.raw_bytes, t.stored_bytes, tuple(t.shape), t.dtype)
                for t in c.list()}

    def test_persist_save_restart_restore(self):
        pdir = os.path.join(self.tmp, "state")
        d = self.start("--persist-dir", pdir, "--frame-size", "64K", "--segment-size", "64K",
                       "--log-level", "warn")
        c = d.client()
        data = {
            "w/bf16": (bytes(range(256)) * 2048, "bf16"),      # 512 KiB: several segments, chunked put
            "w/f32": (bytes(i % 256 for i in range(7, 263)) * 300, "f32"),
            "raw": (b"\x00\x01odd-length", "raw"),
            "empty": (b"", "f16"),
            "gone": (b"x" * 64, "raw"),
        }
        for k, (v, dt) in data.items():
            c.put(k, v, dtype=dt)
        out = subprocess.run([CLI, "--endpoint", d.ipc, "save"], capture_output=True, text=True, timeout=20)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout, "saved: 5 tensors written\n")
        files = sorted(f for f in os.listdir(pdir) if f.endswith(".lct"))
        self.assertEqual(len(files), 5)
        c.delete("gone")
        del data["gone"]
        c.put("w/f32", bytes(i % 256 for i in range(9, 265)) * 300, dtype="f32")  # a newer version, saved at shutdown
        data["w/f32"] = (bytes(i % 256 for i in range(9, 265)) * 300, "f32")
        before = self.snapshot_of(c)
        c.close()
        self.assertEqual(d.stop(), 0)
        self.assertEqual(len([f for f in os.listdir(pdir) if f.endswith(".lct")]), 4, "the deleted key's file is gone")

        d2 = self.start("--persist-dir", pdir, "--frame-size", "64K", "--segment-size", "64K",
                        "--log-level", "info")
        c = d2.client()
        self.assertEqual(self.snapshot_of(c), before, "versions, checksums, sizes and shapes restored")
        for k, (v, dt) in data.items():
            self.assertEqual(bytes(c.get(k)), v, k)
        newer = c.put("w/bf16", b"\x01\x02", dtype="bf16")
        self.assertGreater(newer.version, max(v[0] for v in before.values()), "versions continue above the restored ones")
        text = scrape(d2.http)[2]
        self.assertEqual(metric(text, "lct_snapshot_restored_tensors"), 4)
        self.assertEqual(metric(text, "lct_snapshot_skipped_files"), 0)
        c.close()
        self.assertEqual(d2.stop(), 0)
        self.assertIn("persist: restored 4 tensors", d2.stderr())

    def test_persist_corrupt_file_skipped(self):
        pdir = os.path.join(self.tmp, "state")
        d = self.start("--persist-dir", pdir, "--log-level", "warn")
        c = d.client()
        values = {f"k{i}": bytes([i]) * (1000 + i) for i in range(6)}
        for k, v in values.items():
            c.put(k, v, dtype="raw")
        c.close()
        self.assertEqual(d.stop(), 0)
        files = sorted(os.path.join(pdir, f) for f in os.listdir(pdir))
        self.assertEqual(len(files), 6)
        with open(files[0], "r+b") as f:  # one flipped byte in a blob
            f.seek(150)
            b = f.read(1)
            f.seek(150)
            f.write(bytes([b[0] ^ 0x40]))
        with open(files[1], "r+b") as f:  # cut short, as by a crash without the atomic rename
            f.truncate(100)
        with open(files[2], "r+b") as f:  # a header that lies about the segment count
            f.seek(20)
            f.write((0xFFFFFFFF).to_bytes(4, "little"))
        pathlib.Path(pdir, ".0123.lct.tmp").write_bytes(b"partial")
        d2 = self.start("--persist-dir", pdir, "--log-level", "warn")
        c = d2.client()
        keys = {t.key for t in c.list()}
        self.assertEqual(len(keys), 3)
        for k in keys:
            self.assertEqual(bytes(c.get(k)), values[k])
        log = d2.stderr()
        self.assertEqual(log.count("is corrupt or partial"), 3, log)
        self.assertIn("checksum mismatch", log)
        self.assertEqual(len([f for f in os.listdir(pdir) if f.endswith(".corrupt")]), 3)
        self.assertFalse(os.path.exists(os.path.join(pdir, ".0123.lct.tmp")))
        self.assertEqual(metric(scrape(d2.http)[2], "lct_snapshot_skipped_files"), 3)
        c.close()
        self.assertEqual(d2.stop(), 0)
        self.assertEqual(len([f for f in os.listdir(pdir) if f.endswith(".corrupt")]), 3,
                         "a save never removes a file set aside")

    def corrupt_snapshot_of(self, pdir, key):
        """Puts key into an lctd on pdir, stops it, and cuts the key's file short: its path."""
        d = self.start("--persist-dir", pdir, "--log-level", "warn")
        d.client().put(key, b"\x07" * 4000, dtype="raw")
        self.assertEqual(d.stop(), 0)
        (name,) = [f for f in os.listdir(pdir) if f.endswith(".lct")]
        path = os.path.join(pdir, name)
        with open(path, "r+b") as f:
            f.truncate(100)
        return path

    def test_persist_set_aside_keeps_the_older_file(self):
        """A key's file found corrupt at two starts: the second is set aside beside the first, not over it."""
        pdir = os.path.join(self.tmp, "state")
        path = self.corrupt_snapshot_of(pdir, "k")
        first = pathlib.Path(path).read_bytes()
        d = self.start("--persist-dir", pdir, "--log-level", "warn")
        self.assertEqual(d.stop(), 0)
        self.corrupt_snapshot_of(pdir, "k")
        d = self.start("--persist-dir", pdir, "--log-level", "warn")
        self.assertEqual(d.stop(), 0)
        self.assertIn(f"renamed {os.path.basename(path)}.corrupt.1", d.stderr())
        self.assertEqual(pathlib.Path(path + ".corrupt").read_bytes(), first)
        self.assertTrue(os.path.exists(path + ".corrupt.1"))
        self.assertFalse(os.path.exists(path))

    def test_persist_refuses_to_start_over_a_file_it_cannot_set_aside(self):
        """A file that did not load and cannot leave its name would be removed by the next save: lctd refuses to
        start, says why, and the file stays."""
        pdir = os.path.join(self.tmp, "state")
        path = self.corrupt_snapshot_of(pdir, "k")
        kept = pathlib.Path(path).read_bytes()
        for k in range(16):  # every name it could be set aside under is taken
            os.mkdir(path + ".corrupt" + (f".{k}" if k else ""))
        d = self.start("--persist-dir", pdir, "--log-level", "warn", wait=False)
        self.assertEqual(d.proc.wait(timeout=20), 2, "exit 2: a restart cannot mend it")
        d.log.close()
        self.assertIn("cannot be renamed aside", d.stderr())
        self.assertEqual(pathlib.Path(path).read_bytes(), kept)

    def test_corrupt_blob_reads_as_ecorrupt(self):
        """A blob corrupted at rest, in a snapshot whose file CRC still holds: every get answers LCT_ECORRUPT."""
        pdir = os.path.join(self.tmp, "state")
        d = self.start("--persist-dir", pdir, "--log-level", "warn")
        c = d.client()
        values = {k: bytes(range(256)) * 12 for k in ("bad-version", "bad-check", "bad-structure", "intact")}
        for k, v in values.items():
            c.put(k, v, dtype="raw")  # one segment, raw chunks: each fault reaches the decoder as planted
        c.close()
        self.assertEqual(d.stop(), 0)

        def corrupt(path, fault):
            data = bytearray(pathlib.Path(path).read_bytes())
            key_len, n_seg, flags = (int.from_bytes(data[o:o + 4], "little") for o in (8, 20, 108))
            self.assertEqual(flags & 1, 0, "a raw tensor's file holds no codebook")
            blob = 112 + key_len + 24 * n_seg  # the first segment's blob (deploy/README.md, Persistence)
            chunk = blob + int.from_bytes(data[blob + 40:blob + 48], "little")  # chunk table after the header
            if fault == "bad-version":
                data[blob + 4] = 3  # a format version no decoder knows (proto/FORMAT.md: LCT_EVERSION)
            elif fault == "bad-check":
                data[chunk + 4] ^= 0x01  # the raw chunk's check (LCT_ECHECKSUM)
            else:
                data[chunk] = 9  # an unknown chunk mode (LCT_ECORRUPT)
            data[-4:] = crc32c(bytes(data[:-4])).to_bytes(4, "little")  # the file itself stays valid
            pathlib.Path(path).write_bytes(bytes(data))

        for f in os.listdir(pdir):
            path = os.path.join(pdir, f)
            head = pathlib.Path(path).read_bytes()
            key = head[112:112 + int.from_bytes(head[8:12], "little")].decode()
            if key != "intact":
                corrupt(path, key)
        d2 = self.start("--persist-dir", pdir, "--log-level", "warn")
        c = d2.client()
        self.assertEqual(metric(scrape(d2.http)[2], "lct_snapshot_restored_tensors"), 4)
        for k in values:
            if k == "intact":
                self.assertEqual(bytes(c.get(k)), values[k])
                continue
            with self.assertRaises(lct.LctError, msg=k) as e:
                c.get(k)
            self.assertEqual(e.exception.name, "LCT_ECORRUPT", f"{k}: {e.exception}")
        log = d2.stderr()
        for k in values:
            self.assertEqual(f"'{k}'" in log, k != "intact", f"the log names {k} if and only if it is corrupt: {log}")
        text = scrape(d2.http)[2]
        self.assertEqual(metric(text, 'lct_errors_total{kind="LCT_ECORRUPT"}'), 3)
        c.close()
        self.assertEqual(d2.stop(), 0)

    def test_persist_larger_segments_set_aside_intact(self):
        # Files saved with segments larger than the restarted lctd's
        # segment_size are intact: set aside as .unloaded, not .corrupt, and
        # restored by an lctd with room for them.
        pdir = os.path.join(self.tmp, "state")
        d = self.start("--persist-dir", pdir, "--segment-size", "256K", "--log-level", "warn")
        c = d.client()
        value = bytes(range(256)) * 2048  # 512 KiB raw: two 256 KiB segments
        c.put("big", value, dtype="raw")
        c.close()
        self.assertEqual(d.stop(), 0)
        d2 = self.start("--persist-dir", pdir, "--segment-size", "64K", "--log-level", "warn")
        self.assertEqual(list(d2.client().list()), [])
        self.assertEqual(d2.stop(), 0)
        self.assertIn("does not fit", d2.stderr())
        aside = [f for f in os.listdir(pdir) if not f.startswith(".")]
        self.assertEqual(len(aside), 1)
        self.assertTrue(aside[0].endswith(".unloaded"), aside)
        os.rename(os.path.join(pdir, aside[0]), os.path.join(pdir, aside[0][:-len(".unloaded")]))
        d3 = self.start("--persist-dir", pdir, "--segment-size", "256K", "--log-level", "warn")
        self.assertEqual(bytes(d3.client().get("big")), value)
        self.assertEqual(d3.stop(), 0)

    def test_save_keeps_serving(self):
        # A save writes its files on a thread of its own: another client's
        # puts and gets are served while it runs, even by one codec thread,
        # and a second SAVE meanwhile waits for a save of its own (the
        # snapshot of the first may predate its tensors).
        pdir = os.path.join(self.tmp, "state")
        d = self.start("--persist-dir", pdir, "--memory", "1G", "--threads", "1", "--log-level", "warn")
        c, other, late = d.client(), d.client(), d.client()
        blob = random.Random(3).randbytes(64 << 20)  # raw bytes: the puts do not code them
        answered = 0
        for attempt in range(3):
            for i in range(8):
                c.put(f"big{i}", blob, dtype="raw")  # new versions: the save writes every one
            saved = {}
            first = threading.Thread(target=lambda: saved.update(first=c.save()))
            first.start()
            # In flight: lctd's own gauge, from its stats endpoint on the same loop ...
            deadline = time.monotonic() + 60
            while first.is_alive() and metric(scrape(d.http)[2], "lct_requests_in_flight") < 1:
                self.assertLess(time.monotonic(), deadline)
                time.sleep(0.005)
            if first.is_alive():
                # ... and meanwhile another client is answered.
                other.ping()
                self.assertEqual(other.stat("big0").raw_bytes, len(blob))
                late.put("late", b"x" * 100, dtype="raw")
                self.assertEqual(bytes(other.get("late")), b"x" * 100)
                answered += first.is_alive()
                saved["late"] = late.save()
            first.join(60)
            self.assertEqual(saved["first"], 8)
            if answered:
                self.assertGreaterEqual(saved["late"], 1, "the late save wrote the tensor put during the first")
                break
        self.assertGreater(answered, 0, "no request was answered while a save was writing")
        for cl in (c, other, late):
            cl.close()
        self.assertEqual(d.stop(), 0)
        self.assertEqual(len([f for f in os.listdir(pdir) if f.endswith(".lct")]), 9)

    def test_stop_during_save(self):
        # SIGTERM while a save writes, with a drain timeout shorter than it:
        # the save ends first, the final save follows, and all is restored.
        pdir = os.path.join(self.tmp, "state")
        d = self.start("--persist-dir", pdir, "--memory", "1G", "--drain-timeout", "100ms", "--log-level", "info")
        c = d.client()
        blob = random.Random(4).randbytes(64 << 20)
        for i in range(8):
            c.put(f"big{i}", blob, dtype="raw")
        c.close()
        c = d.client()
        outcome = []

        def save():
            try:
                outcome.append(c.save())
            except lct.LctError as e:
                outcome.append(e.name)
        saving = threading.Thread(target=save)
        saving.start()
        deadline = time.monotonic() + 60
        while saving.is_alive() and metric(scrape(d.http)[2], "lct_requests_in_flight") < 1:
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.005)
        self.assertTrue(saving.is_alive(), "the save ended before the stop could cut it off")
        d.terminate()
        self.assertEqual(d.proc.wait(timeout=60), 0, d.stderr())
        saving.join(60)
        self.assertEqual(outcome, ["LCT_ECONN"], "cut off by the drain timeout: lctd exited without a reply")
        c.close()
        self.assert_restores_bigs(pdir, blob)

    def test_sighup_while_stopping_is_ignored(self):
        # SIGHUPs throughout a stop (its drain and its shutdown save) neither reload nor kill: the stop ends
        # with exit 0, the service manager hears how long it may take, and every tensor is saved.
        pdir = os.path.join(self.tmp, "state")
        path = os.path.join(self.tmp, "notify.sock")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(path)
        sock.settimeout(20)
        self.addCleanup(sock.close)
        d = self.start("--persist-dir", pdir, "--memory", "1G", "--drain-timeout", "7s", "--log-level", "info",
                       env=dict(os.environ, NOTIFY_SOCKET=path))
        self.assertEqual(sock.recv(4096), b"READY=1")
        c = d.client()
        blob = random.Random(5).randbytes(64 << 20)
        for i in range(8):
            c.put(f"big{i}", blob, dtype="raw")  # a shutdown save of 512 MiB
        c.close()
        d.terminate()
        deadline = time.monotonic() + 20
        while "stopping" not in d.stderr():
            self.assertLess(time.monotonic(), deadline)
            time.sleep(0.005)
        hups = 0
        while d.proc.poll() is None and hups < 2000:
            d.proc.send_signal(signal.SIGHUP)
            hups += 1
            time.sleep(0.005)
        self.assertEqual(d.proc.wait(timeout=60), 0, d.stderr())
        self.assertNotIn("reload:", d.stderr())
        self.assertEqual(sock.recv(4096), b"STOPPING=1")
        self.assertEqual(sock.recv(4096), b"EXTEND_TIMEOUT_USEC=67000000", "drain_timeout and a minute")
        self.assertEqual(sock.recv(4096), b"EXTEND_TIMEOUT_USEC=60000000", "the save's progress")
        self.assert_restores_bigs(pdir, blob)

    def assert_restores_bigs(self, pdir, blob):
        """An lctd started on pdir holds big0 .. big7, each blob."""
        d = self.start("--persist-dir", pdir, "--memory", "1G", "--log-level", "warn")
        c = d.client()
        self.assertEqual(sorted(t.key for t in c.list()), [f"big{i}" for i in range(8)])
        for i in range(8):
            self.assertEqual(bytes(c.get(f"big{i}")), blob)
        c.close()
        self.assertEqual(d.stop(), 0)

    def test_save_without_persist_dir(self):
        d = self.start("--log-level", "warn")
        out = subprocess.run([CLI, "--endpoint", d.ipc, "save"], capture_output=True, text=True, timeout=20)
        self.assertEqual(out.returncode, 1)
        self.assertIn("no persist_dir", out.stderr)
        self.assertEqual(d.stop(), 0)

    # ---- 6. access control and limits ------------------------------------------

    def test_tcp_requires_token(self):
        token = self.write("token", TOKEN + "\n")
        wrong = self.write("wrong", "x" * len(TOKEN) + "\n")
        d = self.start("--auth-token-file", token, "--log-level", "warn")
        with self.assertRaises(lct.LctError) as e:
            lct.Client(d.tcp, connect_timeout_ms=2000)
        self.assertEqual(e.exception.name, "LCT_EACCES")
        with self.assertRaises(lct.LctError) as e:
            lct.Client(d.tcp, connect_timeout_ms=2000, auth_token_file=wrong)
        self.assertEqual(e.exception.name, "LCT_EACCES")
        c = d.client(d.tcp, auth_token_file=token)
        c.put("t", b"tcp")
        c.close()
        ipc = d.client()  # ipc: access is the socket file's mode and group
        self.assertEqual(bytes(ipc.get("t")), b"tcp")
        ipc.close()
        text = scrape(d.http)[2]
        self.assertEqual(metric(text, "lct_errors_total{kind=\"LCT_EACCES\"}"), 2)
        ok = subprocess.run([CLI, "--endpoint", d.tcp, "--auth-token-file", token, "ping"],
                            capture_output=True, text=True, timeout=20)
        self.assertEqual(ok.returncode, 0, ok.stderr)
        refused = subprocess.run([CLI, "--endpoint", d.tcp, "ping"], capture_output=True, text=True,
                                 timeout=20)
        self.assertEqual(refused.returncode, 1)
        self.assertIn("authentication required", refused.stderr)
        self.assertIn("--auth-token-file", refused.stderr)
        self.assertEqual(d.stop(), 0)

    def test_ipc_mode_and_group(self):
        d = self.start("--ipc-mode", "0600", "--ipc-group", "root", "--log-level", "warn")
        st = os.stat(d.ipc[len("ipc://"):])
        self.assertTrue(stat.S_ISSOCK(st.st_mode))
        self.assertEqual(stat.S_IMODE(st.st_mode), 0o600)
        self.assertEqual(st.st_gid, 0)
        self.assertEqual(d.stop(), 0)

    def test_limits(self):
        d = self.start("--max-key-length", "16", "--max-tensor-size", "4K", "--log-level", "warn")
        c = d.client()
        c.put("k" * 16, bytes(4096))
        with self.assertRaises(lct.LctError) as e:
            c.put("k" * 17, b"x")
        self.assertEqual(e.exception.name, "LCT_ENAMETOOLONG")
        self.assertIn("max_key_length 16", str(e.exception))
        with self.assertRaises(lct.LctError) as e:
            c.put("big", bytes(4097))
        self.assertEqual(e.exception.name, "LCT_E2BIG")
        self.assertIn("max_tensor_size 4096", str(e.exception))
        c.close()
        self.assertEqual(d.stop(), 0)


if __name__ == "__main__":
    unittest.main()
