"""batch.py — lct.Batch: many tensors packed once for liblct's _many calls, sent in place or run as an lct.Job."""
import ctypes
import sys
import threading

from . import _dtypes, _native, _values
from .errors import LctError, canceled, error, error_code
from .info import tensor_info


class Batch:
    """The (key, value) pairs of a put_many or get_many (put: which), checked
    and packed for liblct once: a trainer that moves the same tensors every
    step sends the same Batch each time, and only the requests' work remains.
    Each send() stores the values' current bytes, or fills the outs, as
    put_many or get_many does (a source packed through a copy, a strided CUDA
    tensor, is packed again). The values must stay alive and in place while
    the Batch is used."""

    def __init__(self, client, items, put):
        self.client = client
        self.put = put
        self.items = list(items)
        self._infos = [None] * len(self.items)
        self._released = False
        self._job = None  # the last submit()'s
        self._pack()

    def _pack(self):
        put, device_path = self.put, self.client._device_path
        self._repack = False
        self._packed_fresh = True  # the copies just made serve the next send
        self._staged_on = None  # a device whose current stream made staging buffers
        batch, self._single = [], []  # (index, key bytes, Host, shape array) of CUDA tensors; others by index
        for i, (key, value) in enumerate(self.items):
            host = _values.host(value, not put, device_path) if device_path else None
            if put and host is not None and host.natural is None:  # checked before anything is sent
                raise TypeError(f"a {host.what} needs put() with dtype= (put_many takes the value's own)")
            if host is None or not host.device or host.nbytes == 0:
                self._single.append(i)
                continue
            self._repack |= put and host.staged  # a copied source: copied again at the next send
            if host.staged:
                self._staged_on = value.device
            batch.append((i, _values.key_bytes(key), host, (ctypes.c_uint64 * max(len(host.shape), 1))(*host.shape)))
        self._batch = batch
        # What retarget() may swap in place: a CUDA tensor of the same type, dtype, shape and device.
        self._layout = [_values.layout(self.items[i][1]) for i, _, _, _ in batch]
        # A get's (raw bytes, dtype) that last fitted each out: the same again needs no closer look.
        self._fitted = [None] * len(batch)
        self._arr = (_native.DeviceTensor * len(batch))()
        self._cinfo = (_native.TensorInfo * len(batch))()
        for j, (_, k, host, dims) in enumerate(batch):
            d = self._arr[j]
            d.key, d.shape, d.ndim, d.dptr, d.bytes = k, dims, len(host.shape), host.ptr, host.nbytes
            d.dtype = _dtypes.code(host.natural) if put else 0
            d.info = ctypes.pointer(self._cinfo[j])

    def send(self, stream=None):
        """One round: the values one by one, then the CUDA tensors' requests.
        stream: as for put_many."""
        self._check_idle()
        if self._released:
            raise ValueError("the batch was released: retarget() gives it values again")
        if self._repack and not self._packed_fresh:
            self._pack()
        self._packed_fresh = False
        if stream is not None and self._staged_on is not None:
            # The staging copies were queued on the current stream, not on stream.
            torch = sys.modules["torch"]
            if hasattr(stream, "wait_stream"):
                stream.wait_stream(torch.cuda.current_stream(self._staged_on))
            else:
                stream = None  # a bare handle: synchronize the whole GPU
        client, put = self.client, self.put
        self._one_by_one(self._single)
        batch = self._batch
        if not batch:
            return
        lib = _native.lib()
        failed = ctypes.c_size_t()
        many = lib.lct_put_device_many if put else lib.lct_get_device_many
        if stream is not None:
            handle = ctypes.c_void_p(getattr(stream, "cuda_stream", stream))

            def many(c, *args, plain=many):
                lib.lct_set_device_stream(c, handle)  # CUDA tensors in the batch: liblct has the device path
                try:
                    return plain(c, *args)
                finally:
                    lib.lct_set_device_stream(c, None)
        try:
            client._call(many, self._arr, len(batch), ctypes.byref(failed))
        except LctError as e:
            raise self._at_fault(e, failed.value)
        first_error = self._received()
        if first_error is not None:
            raise first_error

    def _one_by_one(self, indices):
        for i in indices:
            key, value = self.items[i]
            if self.put:
                self._infos[i] = self.client.put(key, value)
            else:
                self.client.get(key, out=value)

    @property
    def submittable(self):
        """Whether submit() takes this batch: contiguous CUDA tensors, and a liblct with the device path."""
        return not (self._single or self._staged_on is not None) and self.client._device_path

    def submit(self, event=None, after=None):
        """send() on the client's job thread (lct_submit_put_device_many or
        lct_submit_get_device_many): returns
        its Job at once, whose wait() ends it as send() would. The thread
        first waits for after (a Job of any client's batch, or None; if it
        failed, this one fails with LCT_ECANCELED and sends nothing), then for
        event (a recorded torch.cuda.Event, or its cudaEvent_t) instead of
        synchronizing the GPU: record it after the work that writes the
        values (put) or last uses them (get). Takes batches of contiguous
        CUDA tensors on the device path only. Until the job is waited for,
        the batch must not be sent, retargeted or released, and the client's
        other calls wait for it."""
        self._check_idle()
        if self._released:
            raise ValueError("the batch was released: retarget() gives it values again")
        if not self.submittable:
            raise ValueError("submit() takes a batch of contiguous CUDA tensors on the device path")
        if after is None:
            return self._submit(event, None, None)
        with after._lock:  # its handle stays valid while held (Job._end frees it under this lock)
            if after._done and after._error is not None:
                raise canceled(after._error)
            return self._submit(event, after, None if after._done else after._handle)

    def _submit(self, event, after, after_handle):
        lib = _native.lib()
        handle = ctypes.c_void_p()
        client = self.client
        with client._lock:
            if client._c is None:
                raise ValueError("client is closed")
            submit = lib.lct_submit_put_device_many if self.put else lib.lct_submit_get_device_many
            rc = submit(client._c, self._arr, len(self._batch), getattr(event, "cuda_event", event), after_handle,
                        ctypes.byref(handle))
            if rc < 0:
                raise error(rc)
            self._job = Job(self, handle, event, after)
            client._jobs.append(self._job)
        return self._job

    def _check_idle(self):
        if self._job is not None and not self._job._done:
            raise ValueError("the batch's submitted job is pending: wait() for it first")

    def _at_fault(self, e, failed):
        """e with the key of the item at fault, when liblct named one."""
        if failed < len(self._batch):
            e.detail = f"{_values.key_str(self._batch[failed][1])}: {e.detail}"
        return e

    def _received(self):
        """After a get: fills the staged outs and returns the LctError of the
        first out that does not fit what was read into it, or None."""
        if self.put:
            return None
        batch, fitted, cinfo = self._batch, self._fitted, self._cinfo
        first_error = None  # every staged out is filled before a mismatch is raised
        for j, (_, k, host, _) in enumerate(batch):
            if host.staged:
                host.finish()
            info = cinfo[j]
            got = info.raw_bytes, info.dtype
            if got != fitted[j]:
                mismatch = _values.out_mismatch(k, info, host)
                fitted[j] = got if mismatch is None else None
                first_error = first_error or mismatch
        return first_error

    def retarget(self, values):
        """Takes new values for the batch's keys, in order. Where each CUDA
        tensor has the dtype and shape of the one it replaces (the same
        layout in a buffer allocated anew, say), only its address is packed
        again; otherwise the batch is packed afresh."""
        self._check_idle()
        values = list(values)
        if len(values) != len(self.items):
            raise ValueError(f"{len(values)} values for a batch of {len(self.items)}")
        self.items = [(key, v) for (key, _), v in zip(self.items, values)]
        self._released = False
        same = not self._repack
        layout, arr = self._layout, self._arr
        for j, (i, k, host, dims) in enumerate(self._batch):
            if not same:
                break
            v = values[i]
            same = type(v) is layout[j][0] and _values.layout(v) == layout[j] and v.is_contiguous()
            if same:
                arr[j].dptr = host.ptr = v.data_ptr()
                host.keep = v
                if host.staged:
                    host.finish, host.staged = _values.no_finish, False
        if not same:
            self._pack()
        else:
            self._staged_on = None

    def release(self):
        """Lets go of the values (the packing stays for retarget): a batch
        kept between uses holds no memory of theirs."""
        self._check_idle()
        self.items = [(key, None) for key, _ in self.items]
        self._released = True
        for _, _, host, _ in self._batch:
            host.keep = None
            host.finish = _values.no_finish

    def infos(self):
        """The TensorInfo of each item as the last send() stored it (put)."""
        for j, (i, k, _, _) in enumerate(self._batch):
            self._infos[i] = tensor_info(_values.key_str(k), self._cinfo[j])
        return list(self._infos)


class Job:
    """A Batch's requests on its client's job thread (Batch.submit)."""

    def __init__(self, batch, handle, event, after):
        self.batch = batch
        self._handle = handle
        self._event, self._after = event, after  # alive until this one ends
        self._done = False
        self._error = None
        self._lock = threading.Lock()

    def wait(self):
        """Waits for the job and ends it as Batch.send() would: raises what
        failed (again at each later call) and, for a get, checks the outs.
        Any thread may wait."""
        with self._lock:
            self._end()
        if self._error is not None:
            raise self._error

    def _end(self):
        if not self._done:
            lib = _native.lib()
            failed = ctypes.c_size_t()
            rc = lib.lct_job_wait(self._handle, ctypes.byref(failed))
            cause = failure(self._after) if rc == error_code("LCT_ECANCELED") and self._after is not None else None
            if cause is not None:
                self._error = canceled(cause)  # what the job waited for raised
            elif rc < 0:
                self._error = self.batch._at_fault(error(rc, lib.lct_job_error(self._handle)), failed.value)
            else:
                self._error = self.batch._received()
            client = self.batch.client
            with client._lock:
                if self in client._jobs:
                    client._jobs.remove(self)
                lib.lct_job_free(self._handle)
                self._handle = None
            self._event = self._after = None
            self._done = True

    def __del__(self):
        if getattr(self, "_handle", None) is not None:
            _native.lib().lct_job_free(self._handle)  # waits for it: the batch's buffers may be in use


def failure(job):
    """Waits for a job (anything with wait()); the exception it raised, or None."""
    try:
        job.wait()
    except Exception as e:  # noqa: BLE001 - returned to be looked at
        return e
    return None
