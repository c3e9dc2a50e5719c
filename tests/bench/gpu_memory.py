"""gpu_memory.py — device memory as the GPU sees it: NVML's per-process usage summed over every process on the
GPU (trainer, lctd, CUDA contexts), sampled in the background for its peak."""
import ctypes
import threading
import time


class _ProcessInfo(ctypes.Structure):  # nvmlProcessInfo_t (v2 and later)
    _fields_ = [("pid", ctypes.c_uint), ("usedGpuMemory", ctypes.c_ulonglong), ("gpuInstanceId", ctypes.c_uint),
                ("computeInstanceId", ctypes.c_uint)]


class _Memory(ctypes.Structure):  # nvmlMemory_t
    _fields_ = [("total", ctypes.c_ulonglong), ("free", ctypes.c_ulonglong), ("used", ctypes.c_ulonglong)]


class Nvml:
    """The GPU with the given PCI bus id (torch: '0000:19:00.0'), or the first."""

    def __init__(self, pci_bus_id=None):
        self.lib = ctypes.CDLL("libnvidia-ml.so.1")
        self._check(self.lib.nvmlInit_v2(), "nvmlInit")
        self.handle = ctypes.c_void_p()
        if pci_bus_id is None or self.lib.nvmlDeviceGetHandleByPciBusId_v2(
                pci_bus_id.encode(), ctypes.byref(self.handle)) != 0:
            self._check(self.lib.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(self.handle)), "device 0")

    @staticmethod
    def _check(rc, what):
        if rc != 0:
            raise OSError(f"NVML {what}: error {rc}")

    def processes(self):
        """{pid: bytes} of every compute process on the GPU."""
        n = ctypes.c_uint(64)
        infos = (_ProcessInfo * 64)()
        fn = getattr(self.lib, "nvmlDeviceGetComputeRunningProcesses_v3", None) or \
            self.lib.nvmlDeviceGetComputeRunningProcesses_v2
        self._check(fn(self.handle, ctypes.byref(n), infos), "process list")
        return {infos[i].pid: infos[i].usedGpuMemory for i in range(n.value)}

    def device_used(self):
        mem = _Memory()
        self._check(self.lib.nvmlDeviceGetMemoryInfo(self.handle, ctypes.byref(mem)), "memory info")
        return mem.used


class PeakSampler:
    """Samples the sum over the GPU's processes (but those of exclude) every interval seconds, in a thread, while it
    runs."""

    def __init__(self, nvml, interval=0.005, exclude=()):
        self.nvml, self.interval, self.exclude = nvml, interval, set(exclude)
        self.peak_sum = self.peak_device = 0
        self.peak_by_pid = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def sample(self):
        procs = {pid: used for pid, used in self.nvml.processes().items() if pid not in self.exclude}
        self.peak_sum = max(self.peak_sum, sum(procs.values()))
        for pid, used in procs.items():
            self.peak_by_pid[pid] = max(self.peak_by_pid.get(pid, 0), used)
        self.peak_device = max(self.peak_device, self.nvml.device_used())

    def _run(self):
        while not self._stop.is_set():
            self.sample()
            time.sleep(self.interval)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.sample()
