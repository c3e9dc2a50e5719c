/* lct_client_device.c — liblct's device path: CUDA buffers lent to lctd by IPC handle, else copied through host memory. */
#include <inttypes.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lct_client_internal.h"

#ifdef LCT_CLIENT_CUDA
/* A CUDA allocation, as the driver names it. */
typedef struct lct__alloc {
  int device;
  CUdeviceptr start;
  size_t range;
  unsigned long long id; /* unique per allocation for the process's life */
} lct__alloc;

static int lct__cuda_fail(lct_client *c, cudaError_t e, const char *what) {
  cudaGetLastError(); /* not sticky: cleared so that the caller's next CUDA call does not see it */
  return lct__fail(c, LCT_ECUDA, "%s: %s", what, cudaGetErrorString(e));
}

/* Whether [p, p + bytes) lies in allocation a. */
static int lct__alloc_holds(const lct__alloc *a, const void *p, size_t bytes) {
  uint64_t off = (uint64_t)((uintptr_t)p - (uintptr_t)a->start);
  return (uintptr_t)p >= (uintptr_t)a->start && off <= a->range && bytes <= a->range - off;
}

/* Finds the allocation holding [dptr, dptr + bytes) (the driver's
 * cuPointerGetAttributes, looked up through the runtime: liblct does not
 * link libcuda). */
static int lct__device_locate(lct_client *c, const void *dptr, size_t bytes, lct__alloc *a) {
  if (c->device.pointer_attrs == NULL) {
    enum cudaDriverEntryPointQueryResult found;
    cudaError_t e = cudaGetDriverEntryPointByVersion("cuPointerGetAttributes", (void **)&c->device.pointer_attrs,
                                                     12000, cudaEnableDefault, &found);
    if (e != cudaSuccess || found != cudaDriverEntryPointSuccess) {
      c->device.pointer_attrs = NULL;
      return e != cudaSuccess ? lct__cuda_fail(c, e, "no CUDA driver")
                              : lct__fail(c, LCT_ECUDA, "the CUDA driver has no cuPointerGetAttributes");
    }
  }
  CUmemorytype type = 0;
  int ordinal = -1;
  CUdeviceptr base = 0;
  size_t range = 0;
  unsigned long long id = 0;
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                 CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                 CU_POINTER_ATTRIBUTE_BUFFER_ID};
  void *data[] = {&type, &ordinal, &base, &range, &id};
  CUresult r = c->device.pointer_attrs(5, attrs, data, (CUdeviceptr)(uintptr_t)dptr);
  if (r != CUDA_SUCCESS || type != CU_MEMORYTYPE_DEVICE || ordinal < 0)
    return lct__fail(c, LCT_EINVAL, "%p is not CUDA device memory", dptr);
  *a = (lct__alloc){ordinal, base, range, id};
  if (!lct__alloc_holds(a, dptr, bytes))
    return lct__fail(c, LCT_EINVAL, "%zu bytes at %p run past their allocation", bytes, dptr);
  return 0;
}

/* Waits for the work a device call follows: the job's event, else the
 * stream set, else the whole current GPU. */
static int lct__device_sync(lct_client *c, cudaEvent_t event) {
  cudaError_t e = event != NULL           ? cudaEventSynchronize(event)
                  : c->device.sync_stream != NULL ? cudaStreamSynchronize(c->device.sync_stream)
                                           : cudaDeviceSynchronize();
  if (e == cudaSuccess)
    return 0;
  return lct__cuda_fail(c, e, event != NULL             ? "waiting for the job's event"
                              : c->device.sync_stream != NULL ? "synchronizing the device stream"
                                                       : "synchronizing the buffer's device");
}

/* lct__device_sync with the buffer's device current, as the host path needs
 * before its copies. */
static int lct__device_sync_on(lct_client *c, int device, cudaEvent_t event) {
  int prev;
  cudaError_t e = cudaGetDevice(&prev);
  if (e != cudaSuccess || (e = cudaSetDevice(device)) != cudaSuccess)
    return lct__cuda_fail(c, e, "selecting the buffer's device");
  int rc = lct__device_sync(c, event);
  cudaSetDevice(prev); /* best effort: the synchronization's outcome is the one to report */
  return rc;
}

/* Synchronizes (with sync: lct__device_sync) the GPU of allocation a, and
 * describes the buffer [dptr, dptr + bytes) in it for lctd: the
 * allocation's IPC handle (exported once per allocation), the offset into
 * it, the GPU's UUID and this host's boot id (each looked up once per
 * client); msg's fields point into the client, valid until its next device
 * call. LCT_ENOIPC when the buffer cannot be shared by IPC (the host path
 * applies). */
static int lct__device_describe(lct_client *c, const lct__alloc *a, const void *dptr, size_t bytes, int sync,
                                cudaEvent_t event, Lctpb__DeviceBuffer *msg) {
  int rc, prev;
  cudaError_t e = cudaGetDevice(&prev);
  if (e != cudaSuccess || (e = cudaSetDevice(a->device)) != cudaSuccess)
    return lct__cuda_fail(c, e, "selecting the buffer's device");
  if (sync && (rc = lct__device_sync(c, event)) != 0) {
    cudaSetDevice(prev); /* best effort: the synchronization's error is the one to report */
    return rc;
  }
  int slot = -1;
  for (int i = 0; i < LCT__IPC_EXPORTS && slot < 0; i++)
    if (c->device.exports[i].buffer_id == a->id && a->id != 0)
      slot = i;
  rc = 0;
  if (slot < 0) {
    cudaIpcMemHandle_t h;
    if ((e = cudaIpcGetMemHandle(&h, (void *)(uintptr_t)a->start)) != cudaSuccess) {
      cudaGetLastError();
      rc = lct__fail(c, LCT_ENOIPC, "cannot export the buffer's allocation: %s", cudaGetErrorString(e));
    } else {
      slot = c->device.export_next;
      c->device.export_next = (c->device.export_next + 1) % LCT__IPC_EXPORTS;
      c->device.exports[slot].buffer_id = a->id;
      memcpy(c->device.exports[slot].handle, h.reserved, LCT_IPC_HANDLE_BYTES);
    }
  }
  if (rc == 0 && a->device < LCT__GPUS && !c->device.gpu_known[a->device]) {
    struct cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, a->device)) != cudaSuccess) {
      rc = lct__cuda_fail(c, e, "reading the buffer's device");
    } else {
      memcpy(c->device.gpu_uuid[a->device], prop.uuid.bytes, LCT_GPU_UUID_BYTES);
      c->device.gpu_known[a->device] = 1;
    }
  }
  if (rc == 0 && a->device >= LCT__GPUS)
    rc = lct__fail(c, LCT_ENOIPC, "device %d: beyond the %d this liblct tracks", a->device, LCT__GPUS);
  if (rc == 0 && !c->device.boot_known) {
    if (lct_wire_boot_id(c->device.boot_id) != 0)
      rc = lct__fail(c, LCT_ENOIPC, "cannot read this host's boot id");
    c->device.boot_known = rc == 0;
  }
  if ((e = cudaSetDevice(prev)) != cudaSuccess && rc == 0)
    rc = lct__cuda_fail(c, e, "restoring the current device");
  if (rc != 0)
    return rc;
  lctpb__device_buffer__init(msg);
  msg->ipc_handle.data = c->device.exports[slot].handle;
  msg->ipc_handle.len = LCT_IPC_HANDLE_BYTES;
  msg->offset = (uint64_t)((uintptr_t)dptr - (uintptr_t)a->start);
  msg->size = bytes;
  msg->gpu_uuid.data = c->device.gpu_uuid[a->device];
  msg->gpu_uuid.len = LCT_GPU_UUID_BYTES;
  msg->boot_id.data = c->device.boot_id;
  msg->boot_id.len = LCT_BOOT_ID_BYTES;
  return 0;
}

/* Copies bytes between a device buffer on device and host memory, and waits
 * for the copy to land (a pageable copy to the device may return before). */
static int lct__device_copy(lct_client *c, int device, void *dst, const void *src, size_t bytes) {
  int prev;
  cudaError_t e = cudaGetDevice(&prev);
  if (e == cudaSuccess && (e = cudaSetDevice(device)) == cudaSuccess) {
    if ((e = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault)) == cudaSuccess)
      e = cudaDeviceSynchronize();
    cudaError_t restore = cudaSetDevice(prev);
    if (e == cudaSuccess)
      e = restore;
  }
  return e == cudaSuccess ? 0 : lct__cuda_fail(c, e, "copying between the device buffer and host memory");
}

/* The host path of a device call: the server or the buffer cannot go device to device. */
static int lct__fallback(int rc) { return rc == LCT_ENOIPC || rc == LCT_EOP; }
#endif

/* ---- many device buffers ------------------------------------------------- */

#ifdef LCT_CLIENT_CUDA
/* Header bytes kept for one request's items: well under LCT_WIRE_HEADER_MAX. */
#define LCT__MANY_HEADER_BUDGET (LCT_WIRE_HEADER_MAX / 2)

/* Items [from, to) of t that one request carries: they lie in the allocation
 * of t[from] (*a; consecutive items in one allocation travel together), at
 * most LCT_DEVICE_ITEMS_MAX of them and within the header budget (items:
 * their request items, keys and metas filled in). */
static int lct__many_group(lct_client *c, const lct_device_tensor *t, Lctpb__DeviceItem *const *items,
                           size_t from, size_t n, size_t *to, lct__alloc *a) {
  int rc = lct__device_locate(c, t[from].dptr, t[from].bytes, a);
  if (rc != 0)
    return rc;
  size_t header = 0, i = from;
  for (; i < n && i - from < LCT_DEVICE_ITEMS_MAX; i++) {
    header += items[i]->key.len + 64 + 10 * (items[i]->meta != NULL ? items[i]->meta->n_shape : 0);
    if (header > LCT__MANY_HEADER_BUDGET && i > from)
      break;
    if (i > from && !lct__alloc_holds(a, t[i].dptr, t[i].bytes))
      break; /* another allocation, or none: the group it starts sorts it out */
  }
  *to = i;
  return 0;
}

/* Copies a device tensor through host memory: the host path of one item. */
static int lct__many_host(lct_client *c, int put, int device, const lct_device_tensor *t) {
  if (put && t->bytes == 0)
    return lct_put(c, t->key, t->dtype, t->shape, t->ndim, NULL, 0, t->info);
  void *host = NULL;
  lct_tensor_info got;
  int rc;
  if (put) {
    if ((host = malloc(t->bytes)) == NULL)
      return lct__fail(c, LCT_ENOMEM, "cannot allocate %zu bytes for the host path", t->bytes);
    if ((rc = lct__device_copy(c, device, host, t->dptr, t->bytes)) == 0)
      rc = lct_put(c, t->key, t->dtype, t->shape, t->ndim, host, t->bytes, t->info);
    free(host);
    return rc;
  }
  if (t->bytes > 0 && (host = malloc(t->bytes)) == NULL)
    return lct__fail(c, LCT_ENOMEM, "cannot allocate %zu bytes for the host path", t->bytes);
  rc = lct_get(c, t->key, host, t->bytes, &got); /* LCT_EBUFSIZE, with got, when it does not fit */
  if (t->info != NULL && (rc == 0 || rc == LCT_EBUFSIZE))
    *t->info = got;
  if (rc == 0 && got.raw_bytes > 0)
    rc = lct__device_copy(c, device, t->dptr, host, (size_t)got.raw_bytes);
  free(host);
  return rc;
}

/* One PUT_DEVICE_MANY or GET_DEVICE_MANY for items [from, to) of one
 * allocation, their request items (keys and metas filled in) at items[from];
 * on failure *failed_item is the index (from `from`) of the item the server
 * named, else 0: the request as a whole. */
static int lct__many_call(lct_client *c, int put, const lct__alloc *a, const lct_device_tensor *t,
                          Lctpb__DeviceItem **items, size_t from, size_t to, int sync, cudaEvent_t event,
                          size_t *failed_item) {
  size_t k = to - from;
  *failed_item = 0;
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  for (size_t i = from; i < to; i++) {
    uintptr_t p = (uintptr_t)t[i].dptr;
    lo = p < lo ? p : lo;
    hi = p + t[i].bytes > hi ? p + t[i].bytes : hi;
  }
  Lctpb__DeviceBuffer buffer;
  int rc = lct__device_describe(c, a, (const void *)lo, hi - lo, sync, event, &buffer);
  if (rc != 0)
    return rc;
  for (size_t i = from; i < to; i++)
    items[i]->offset = (uint64_t)((uintptr_t)t[i].dptr - lo);
  Lctpb__Request rq = LCTPB__REQUEST__INIT;
  rq.op = put ? LCTPB__OP__OP_PUT_DEVICE_MANY : LCTPB__OP__OP_GET_DEVICE_MANY;
  rq.device = &buffer;
  rq.n_items = k;
  rq.items = items + from;
  lct__reply r;
  rc = lct__call(c, &rq, NULL, 0, &r);
  if (rc != 0) {
    *failed_item = c->failed_item < k ? c->failed_item : 0;
    return rc;
  }
  if (r.hdr->n_metas != k) {
    rc = lct__fail(c, LCT_EPROTO, "%zu metas in the reply to %zu items", r.hdr->n_metas, k);
  } else {
    /* Each tensor's size as the server recorded it: a put's bytes, a get's
     * within its buffer. */
    for (size_t j = 0; j < k && rc == 0; j++) {
      const Lctpb__TensorMeta *m = r.hdr->metas[j];
      const uint64_t bytes = t[from + j].bytes;
      if (!m->has_raw_bytes || (put ? m->raw_bytes != bytes : m->raw_bytes > bytes)) {
        rc = lct__fail(c, LCT_EPROTO, "item %zu: the reply has %" PRIu64 " bytes for a buffer of %" PRIu64, j,
                       m->raw_bytes, bytes);
        *failed_item = j;
      }
    }
    for (size_t j = 0; j < k && rc == 0; j++)
      if (t[from + j].info != NULL)
        lct__info_of(r.hdr->metas[j], t[from + j].info);
  }
  lct__reply_free(&r);
  return rc;
}

/* The request items of t[0..n), checked before any is sent (into the one
 * block *block, freed by the caller): keys, buffers, and a put's metas.
 * *at: the item at fault. */
static int lct__many_items(lct_client *c, int put, const lct_device_tensor *t, size_t n, void **block,
                           Lctpb__DeviceItem ***items, size_t *at) {
  size_t item_bytes = sizeof(Lctpb__DeviceItem *) + sizeof(Lctpb__DeviceItem) +
                      (put ? sizeof(Lctpb__TensorMeta) + sizeof(lct_put_decl) : 0);
  if ((*block = malloc(n * item_bytes)) == NULL)
    return lct__fail(c, LCT_ENOMEM, "out of memory for %zu items", n);
  Lctpb__DeviceItem **ptrs = *block;
  Lctpb__DeviceItem *its = (Lctpb__DeviceItem *)(ptrs + n);
  Lctpb__TensorMeta *metas = (Lctpb__TensorMeta *)(its + n);
  lct_put_decl *decls = (lct_put_decl *)(metas + n); /* a put's metas point into them */
  for (size_t i = 0; i < n; i++) {
    *at = i;
    size_t len = t[i].key != NULL ? strlen(t[i].key) : 0;
    if (t[i].key == NULL || lct_wire_key_check((const uint8_t *)t[i].key, len) != 0)
      return lct__fail(c, LCT_ENAMETOOLONG, "key must be 1..%d bytes", (int)LCT_KEY_MAX);
    if (t[i].dptr == NULL && t[i].bytes > 0)
      return lct__fail(c, LCT_EINVAL, "no buffer");
    lctpb__device_item__init(&its[i]);
    its[i].key.data = (uint8_t *)t[i].key;
    its[i].key.len = len;
    its[i].size = t[i].bytes;
    if (put) {
      int rc = lct__put_decl(c, t[i].dtype, t[i].shape, t[i].ndim, t[i].bytes, &decls[i], &metas[i]);
      if (rc != 0)
        return rc;
      its[i].meta = &metas[i];
    }
    ptrs[i] = &its[i];
  }
  *at = n;
  *items = ptrs;
  return 0;
}

int lct__device_many(lct_client *c, int put, const lct_device_tensor *t, size_t n, void *event, size_t *failed) {
  size_t at = n;
  int synced = -1;
  void *block = NULL;
  Lctpb__DeviceItem **items = NULL;
  int rc = n > 0 ? lct__many_items(c, put, t, n, &block, &items, &at) : 0;
  for (size_t from = 0, to; from < n && rc == 0; from = to) {
    lct__alloc a = {0};
    to = from + 1;
    if (t[from].bytes == 0) {
      rc = lct__many_host(c, put, -1, &t[from]); /* nothing to map */
    } else if ((rc = lct__many_group(c, t, items, from, n, &to, &a)) == 0) {
      size_t item = 0;
      /* Work queued on the buffers' GPU completes first: one synchronization per device. A client
       * held to the host path does as one on another host would after lctd's LCT_ENOIPC. */
      if (!c->host_path)
        rc = lct__many_call(c, put, &a, t, items, from, to, a.device != synced, (cudaEvent_t)event, &item);
      else if (a.device == synced || (rc = lct__device_sync_on(c, a.device, (cudaEvent_t)event)) == 0)
        rc = LCT_ENOIPC;
      synced = a.device;
      if (lct__fallback(rc)) { /* the host path, item by item */
        rc = 0;
        for (size_t i = from; i < to && rc == 0; i++)
          if ((rc = lct__many_host(c, put, a.device, &t[i])) != 0)
            item = i - from;
      }
      if (rc != 0)
        at = from + item;
    }
    if (rc != 0 && at == n) /* a failure of the group as a whole: its first item */
      at = from;
  }
  free(block);
  if (failed != NULL)
    *failed = rc == 0 ? n : at;
  return rc;
}
#else
/* A liblct without CUDA: every device call answers LCT_ENODEV. */
int lct__device_many(lct_client *c, int put, const lct_device_tensor *t, size_t n, void *event, size_t *failed) {
  (void)t, (void)n, (void)event;
  if (failed != NULL)
    *failed = 0;
  return lct__fail(c, LCT_ENODEV, "this liblct was built without CUDA: no device buffers (use %s)",
                   put ? "lct_put" : "lct_get");
}
#endif

int lct_put_device(lct_client *c, const char *key, lct_dtype dtype, const uint64_t *shape, int ndim,
                   const void *dptr, size_t bytes, lct_tensor_info *info) {
  lct_device_tensor t = {key, dtype, shape, ndim, (void *)dptr, bytes, info};
  return lct__device_many(c, 1, &t, 1, NULL, NULL);
}

int lct_get_device(lct_client *c, const char *key, void *dptr, size_t cap, lct_tensor_info *info) {
  lct_device_tensor t = {key, LCT_DTYPE_RAW, NULL, 0, dptr, cap, info};
  int rc = lct__device_many(c, 0, &t, 1, NULL, NULL);
  if (rc == LCT_EBUFSIZE && info != NULL) {
    /* As lct_get: info tells the size needed (a device reply carries none). */
    char saved[sizeof c->err];
    memcpy(saved, c->err, sizeof saved);
    lct_stat(c, key, info);
    memcpy(c->err, saved, sizeof saved);
  }
  return rc;
}

int lct_put_device_many(lct_client *c, const lct_device_tensor *t, size_t n, size_t *failed) {
  return lct__device_many(c, 1, t, n, NULL, failed);
}

int lct_get_device_many(lct_client *c, const lct_device_tensor *t, size_t n, size_t *failed) {
  return lct__device_many(c, 0, t, n, NULL, failed);
}

int lct_device_path(const lct_client *c) {
  (void)c;
#ifdef LCT_CLIENT_CUDA
  return 1;
#else
  return 0;
#endif
}

int lct_set_device_stream(lct_client *c, void *stream) {
#ifdef LCT_CLIENT_CUDA
  c->device.sync_stream = (cudaStream_t)stream;
  return 0;
#else
  (void)stream;
  return lct__fail(c, LCT_ENODEV, "this liblct was built without CUDA: no device streams");
#endif
}
