#!/usr/bin/env python3
"""test_k8s.py K8S_DIR LCTD — the Kubernetes manifests and the Dockerfile checked offline: the fields a GPU DaemonSet of lctd needs, its arguments through lctd itself.

Exits 77 (a skip) only when PyYAML is missing (deploy/setup.sh --test installs python3-yaml).
"""
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import unittest

try:
    import yaml
except ImportError:
    print("SKIP: PyYAML is not installed (deploy/setup.sh --test installs python3-yaml)")
    sys.exit(77)

K8S = pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else pathlib.Path(__file__).parents[1] / "deploy" / "k8s"
LCTD = sys.argv[2] if len(sys.argv) > 2 else None


def load(name):
    with open(K8S / name) as f:
        docs = [d for d in yaml.safe_load_all(f) if d is not None]
    assert len(docs) == 1, f"{name}: one object expected, found {len(docs)}"
    return docs[0]


def path(obj, dotted):
    """obj's field at a dotted path ('spec.template.spec'); KeyError naming the path when absent."""
    for part in dotted.split("."):
        if not isinstance(obj, dict) or part not in obj:
            raise KeyError(f"no {dotted}")
        obj = obj[part]
    return obj


class TestManifests(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.ds = load("lctd-daemonset.yaml")
        cls.svc = load("lctd-service.yaml")
        cls.pod = path(cls.ds, "spec.template.spec")
        cls.containers = {c["name"]: c for c in cls.pod["containers"]}
        cls.lctd = cls.containers["lctd"]
        cls.ports = {p["name"]: p for p in cls.lctd["ports"]}

    def arg(self, name):
        """The value of lctd's --NAME=VALUE argument."""
        values = [a.split("=", 1)[1] for a in self.lctd["args"] if a.startswith(f"--{name}=")]
        self.assertEqual(len(values), 1, f"--{name} given {len(values)} times")
        return values[0]

    def test_daemonset(self):
        self.assertEqual((self.ds["apiVersion"], self.ds["kind"]), ("apps/v1", "DaemonSet"))
        selector = path(self.ds, "spec.selector.matchLabels")
        labels = path(self.ds, "spec.template.metadata.labels")
        self.assertTrue(selector and selector.items() <= labels.items(), "the selector must match the pod labels")
        self.assertEqual(path(self.pod, "nodeSelector").get("nvidia.com/gpu.present"), "true")

    def test_gpu_through_the_device_plugin(self):
        gpus = path(self.lctd, "resources.limits").get("nvidia.com/gpu")
        self.assertIsInstance(gpus, int)
        self.assertGreaterEqual(gpus, 1)
        self.assertEqual(self.arg("backend"), "cuda")

    def test_probes_on_healthz(self):
        metrics_port = int(self.arg("metrics").rsplit(":", 1)[1])
        for probe in ("readinessProbe", "livenessProbe"):
            get = path(self.lctd, f"{probe}.httpGet")
            self.assertEqual(get["path"], "/healthz", probe)
            port = get["port"]
            number = self.ports[port]["containerPort"] if isinstance(port, str) else port
            self.assertEqual(number, metrics_port, f"{probe} must ask the metrics endpoint")

    def test_prometheus_annotations(self):
        notes = path(self.ds, "spec.template.metadata.annotations")
        self.assertEqual(notes.get("prometheus.io/scrape"), "true")
        self.assertEqual(notes.get("prometheus.io/path"), "/metrics")
        self.assertEqual(int(notes["prometheus.io/port"]), int(self.arg("metrics").rsplit(":", 1)[1]))

    def test_not_root(self):
        pod_sc, sc = self.pod.get("securityContext", {}), self.lctd.get("securityContext", {})
        self.assertTrue(sc.get("runAsNonRoot", pod_sc.get("runAsNonRoot")), "runAsNonRoot")
        self.assertNotEqual(sc.get("runAsUser", pod_sc.get("runAsUser")), 0)
        self.assertIs(sc.get("allowPrivilegeEscalation"), False)
        self.assertIn("ALL", path(sc, "capabilities.drop"))

    def test_ports_match_the_arguments(self):
        listen = self.arg("listen")
        self.assertTrue(listen.startswith("tcp://0.0.0.0:"), listen)
        self.assertEqual(int(listen.rsplit(":", 1)[1]), self.ports["lctd"]["containerPort"])
        self.assertEqual(int(self.arg("metrics").rsplit(":", 1)[1]), self.ports["metrics"]["containerPort"])
        # The token file comes from a Secret mounted where the argument says.
        mounts = {m["name"]: m["mountPath"] for m in self.lctd["volumeMounts"]}
        volumes = {v["name"]: v for v in self.pod["volumes"]}
        token = self.arg("auth-token-file")
        secret = [n for n, v in volumes.items() if "secret" in v and token.startswith(mounts.get(n, "//") + "/")]
        self.assertEqual(len(secret), 1, f"{token} is not in a mounted Secret")
        self.assertIn(self.arg("persist-dir"), mounts.values(),
                      "persist_dir must be a volume: the root filesystem is read-only")
        self.assertIs(path(self.lctd, "securityContext.readOnlyRootFilesystem"), True)

    @unittest.skipIf(LCTD is None, "no lctd given")
    def test_lctd_takes_the_arguments(self):
        # lctd reads the token file and checks every setting: a real file stands in for the Secret's.
        with tempfile.TemporaryDirectory() as tmp:
            token = os.path.join(tmp, "token")
            with open(token, "w") as f:
                f.write("0123456789abcdef0123456789abcdef\n")
            args = [a for a in self.lctd["args"] if not a.startswith(("--auth-token-file=", "--persist-dir="))]
            out = subprocess.run([LCTD, *args, f"--auth-token-file={token}", f"--persist-dir={tmp}",
                                  "--print-config"], capture_output=True, text=True)
            self.assertEqual(out.returncode, 0, out.stderr)
            self.assertIn(f"listen {self.arg('listen')}\n", out.stdout)
            self.assertIn(f"metrics {self.arg('metrics')}\n", out.stdout)

    def test_headless_service(self):
        self.assertEqual((self.svc["apiVersion"], self.svc["kind"]), ("v1", "Service"))
        self.assertEqual(path(self.svc, "spec.clusterIP"), "None")
        selector = path(self.svc, "spec.selector")
        self.assertTrue(selector.items() <= path(self.ds, "spec.template.metadata.labels").items())
        for port in path(self.svc, "spec.ports"):
            target = port["targetPort"]
            self.assertIn(target, self.ports, f"targetPort {target} is no port of the lctd container")
            self.assertEqual(port["port"], self.ports[target]["containerPort"])

    def test_dockerfile(self):
        text = (K8S / "Dockerfile").read_text()
        stages = re.findall(r"(?m)^FROM\s+(\S+)", text)
        self.assertTrue(stages and re.fullmatch(r"nvidia/cuda:\$\{CUDA_VERSION\}-runtime-\$\{UBUNTU\}", stages[-1]),
                        f"the image must start from a CUDA runtime base, not {stages[-1:]}")
        users = re.findall(r"(?m)^USER\s+(\S+)", text)
        self.assertTrue(users, "no USER: the image would run as root")
        self.assertNotIn(users[-1].split(":")[0], ("0", "root"))
        image_user = int(users[-1].split(":")[0])
        self.assertEqual(image_user, self.pod["securityContext"]["runAsUser"])
        self.assertRegex(text, r'(?m)^ENTRYPOINT \["/opt/lct/bin/lctd"\]')


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1], verbosity=2)
