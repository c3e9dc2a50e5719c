/* ops_device.c — the ops on a client's GPU memory (CUDA IPC): PUT_DEVICE, GET_DEVICE and their _MANY forms, served as device batches. */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_batch.h"
#include "lct_error.h"
#include "ops.h"

/* What a device op holds until its request ends. PUT_DEVICE and GET_DEVICE
 * are their _MANY ops with one item: the request's key, meta and version
 * over the whole device buffer (`one`). */
typedef struct lct__device_op {
  const uint8_t *ipc_base; /* the client allocation mapped, unmapped with the request */
  Lctpb__DeviceItem *const *items;
  size_t n_items;
  Lctpb__DeviceItem one, *one_ptr;
  lct__batch_item *batch; /* the items' work, n_items of them (once checked) */
} lct__device_op;

static lct__device_op *lct__dev(const lct__request *rq) { return rq->op_state; }

static int lct__is_many(const lct__request *rq) {
  return rq->op == LCTPB__OP__OP_PUT_DEVICE_MANY || rq->op == LCTPB__OP__OP_GET_DEVICE_MANY;
}

/* A device get: its items hold references to the entries read. */
static int lct__is_get(const lct__request *rq) {
  return rq->op == LCTPB__OP__OP_GET_DEVICE || rq->op == LCTPB__OP__OP_GET_DEVICE_MANY;
}

static void lct__device_op_release(lct__request *rq) {
  lct__device_op *d = lct__dev(rq);
  if (d->batch != NULL && lct__is_get(rq))
    for (size_t i = 0; i < d->n_items; i++)
      if (d->batch[i].entry != NULL)
        lct__entry_unref(d->batch[i].entry);
  free(d->batch);
  if (d->ipc_base != NULL) {
    const lct__backend *be = lct__pool_backend(rq->srv->pool);
    be->ops->ipc_unmap(be->ctx, d->ipc_base);
  }
  free(d);
  rq->op_state = NULL;
}

/* The op's state, attached to the request; replies itself and returns NULL
 * when out of memory. */
static lct__device_op *lct__device_op_new(lct__request *rq) {
  lct__device_op *d = calloc(1, sizeof *d);
  if (d == NULL) {
    lct__reply_error(rq, LCT_ENOMEM, "out of memory for a device request");
    return NULL;
  }
  rq->op_state = d;
  rq->op_release = lct__device_op_release;
  return d;
}

static void lct__reply_item_error(lct__request *rq, int err, size_t item, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* The error of an item of a device request: for a _MANY op, failed_item and a
 * message that starts with its index; PUT_DEVICE and GET_DEVICE (served as
 * one item) name none. */
static void lct__reply_item_error(lct__request *rq, int err, size_t item, const char *fmt, ...) {
  const int many = lct__is_many(rq);
  char text[512];
  int k = many ? snprintf(text, sizeof text, "item %zu: ", item) : 0;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text + k, sizeof text - (size_t)k, fmt, ap);
  va_end(ap);
  lct__reply_status(rq, err, many ? (long)item : -1, text);
}

/* Answers LCT_ENOIPC, counting why: the client then takes the host path. */
static void lct__reply_fallback(lct__request *rq, int reason, const char *why) {
  lct__stats_fallback(&rq->srv->stats, reason);
  lct__reply_error(rq, LCT_ENOIPC, "%s; use the host path", why);
}

/* Maps the request's (checked) device buffer and points *ptr at it; replies
 * itself and returns 0 on failure, LCT_ENOIPC (counted by reason) where the
 * buffer cannot be reached device to device. The mapping is released with
 * the request. */
static int lct__device_or_reply(lct__request *rq, uint8_t **ptr) {
  lct__server *srv = rq->srv;
  const Lctpb__DeviceBuffer *d = rq->hdr->device;
  const lct__backend *be = lct__pool_backend(srv->pool);
  if (be->ops->ipc_map == NULL) {
    lct__reply_fallback(rq, LCT__FALLBACK_CPU_BACKEND, "this lctd keeps tensors in host memory (cpu backend)");
    return 0;
  }
  if (memcmp(d->boot_id.data, srv->boot_id, LCT_BOOT_ID_BYTES) != 0) {
    lct__reply_fallback(rq, LCT__FALLBACK_OTHER_HOST, "the device buffer is on another host than this lctd");
    return 0;
  }
  /* A buffer on another GPU of this host is coded in place over peer access where the GPUs have it. */
  const int peer = memcmp(d->gpu_uuid.data, be->gpu_uuid, LCT_GPU_UUID_BYTES) != 0;
  if (peer && (be->ops->peer == NULL || !be->ops->peer(be->ctx, d->gpu_uuid.data))) {
    lct__reply_fallback(rq, LCT__FALLBACK_OTHER_DEVICE,
                        "the device buffer is on another GPU than this lctd's, which it cannot reach by peer access");
    return 0;
  }
  uint8_t *base;
  uint64_t size;
  int opened;
  int rc = be->ops->ipc_map(be->ctx, d->ipc_handle.data, &base, &size, &opened);
  if (rc == LCT_ENOIPC) {
    lct__reply_fallback(rq, LCT__FALLBACK_IPC_OPEN, "cannot open the device buffer's CUDA IPC handle");
    return 0;
  }
  if (rc != 0) {
    lct__reply_error(rq, rc, "mapping the device buffer failed");
    return 0;
  }
  srv->stats.ipc_opens += (uint64_t)opened;
  srv->stats.device_peer_requests += (uint64_t)peer;
  lct__dev(rq)->ipc_base = base;
  if (d->offset > size || d->size > size - d->offset) {
    lct__reply_error(rq, LCT_EINVAL, "device buffer of %" PRIu64 " bytes at offset %" PRIu64
                     " runs past its allocation of %" PRIu64 " bytes", d->size, d->offset, size);
    return 0;
  }
  *ptr = base + d->offset;
  return 1;
}

/* ---- many tensors in one device buffer (PUT_DEVICE_MANY, GET_DEVICE_MANY) -- */

typedef struct lct__keyref {
  uint64_t hash;
  size_t index;
} lct__keyref;

static int lct__keyref_cmp(const void *a, const void *b) {
  const lct__keyref *x = a, *y = b;
  return x->hash < y->hash ? -1 : x->hash > y->hash ? 1 : (x->index > y->index) - (x->index < y->index);
}

/* Whether the items' keys are distinct; if not, *dup is an item whose key an
 * earlier one has. Sorting hashes keeps a request of 1024 keys cheap. */
static int lct__keys_distinct(Lctpb__DeviceItem *const *items, size_t n, size_t *dup) {
  if (n < 2)
    return 1; /* PUT_DEVICE, GET_DEVICE */
  lct__keyref *refs = malloc(n * sizeof *refs);
  if (refs == NULL)
    return -1;
  for (size_t i = 0; i < n; i++)
    refs[i] = (lct__keyref){lct__key_hash(items[i]->key.data, items[i]->key.len, LCT__FNV_BASIS), i};
  qsort(refs, n, sizeof *refs, lct__keyref_cmp);
  int ok = 1;
  for (size_t i = 1; i < n && ok; i++) {
    for (size_t j = i; j-- > 0 && refs[j].hash == refs[i].hash;) {
      const ProtobufCBinaryData *a = &items[refs[j].index]->key, *b = &items[refs[i].index]->key;
      if (a->len == b->len && memcmp(a->data, b->data, a->len) == 0) {
        *dup = refs[i].index;
        ok = 0;
        break;
      }
    }
  }
  free(refs);
  return ok;
}

/* The checks common to the device ops: no payload, 1..LCT_DEVICE_ITEMS_MAX
 * items with distinct keys the sender may use, each inside the device
 * buffer (alignment needs the element size: lct__batch_map_or_reply).
 * Allocates lct__dev(rq)->batch. Replies itself and returns 0 on failure. */
static int lct__batch_or_reply(lct__request *rq) {
  const Lctpb__Request *h = rq->hdr;
  if (rq->frame.payload_len != 0) {
    lct__reply_error(rq, LCT_EINVAL, "a device request carries no payload");
    return 0;
  }
  if (h->device == NULL) {
    lct__reply_error(rq, LCT_EINVAL, "this operation needs a device buffer");
    return 0;
  }
  if (lct__dev(rq)->n_items == 0) { /* at most LCT_DEVICE_ITEMS_MAX: lct_wire_request_parse */
    lct__reply_error(rq, LCT_EINVAL, "no items; a request takes 1 to %d", LCT_DEVICE_ITEMS_MAX);
    return 0;
  }
  size_t dup = 0;
  int distinct = lct__keys_distinct(lct__dev(rq)->items, lct__dev(rq)->n_items, &dup);
  if (distinct <= 0) {
    if (distinct < 0)
      lct__reply_error(rq, LCT_ENOMEM, "out of memory checking keys");
    else
      lct__reply_item_error(rq, LCT_EINVAL, dup, "key repeats an earlier item's");
    return 0;
  }
  for (size_t i = 0; i < lct__dev(rq)->n_items; i++) {
    const Lctpb__DeviceItem *it = lct__dev(rq)->items[i];
    char why[320];
    if (lct__key_allowed(rq, "key", it->key.data, it->key.len, why, sizeof why) != 0) {
      lct__reply_item_error(rq, LCT_EACCES, i, "%s", why);
      return 0;
    }
    if (it->offset > h->device->size || it->size > h->device->size - it->offset) {
      lct__reply_item_error(rq, LCT_EINVAL, i, "%" PRIu64 " bytes at offset %" PRIu64
                            " run past the device buffer's %" PRIu64, it->size, it->offset, h->device->size);
      return 0;
    }
  }
  lct__dev(rq)->batch = calloc(lct__dev(rq)->n_items, sizeof *lct__dev(rq)->batch);
  if (lct__dev(rq)->batch == NULL) {
    lct__reply_error(rq, LCT_ENOMEM, "out of memory for %zu items", lct__dev(rq)->n_items);
    return 0;
  }
  return 1;
}

/* After the checks, maps the buffer and points each item at its bytes. Each
 * item must be aligned to its element size, checked before the mapping on
 * the offsets (allocations start at least 256-byte aligned); replies itself
 * and returns 0 on failure. */
static int lct__batch_map_or_reply(lct__request *rq) {
  const Lctpb__Request *h = rq->hdr;
  for (size_t i = 0; i < lct__dev(rq)->n_items; i++) {
    const lct__batch_item *b = &lct__dev(rq)->batch[i];
    size_t esize = lct_dtype_size(lct__is_get(rq) ? b->entry->dtype : b->decl.dtype);
    if ((h->device->offset % esize + lct__dev(rq)->items[i]->offset % esize) % esize != 0) {
      lct__reply_item_error(rq, LCT_EINVAL, i, "buffer not aligned to its %zu-byte elements", esize);
      return 0;
    }
  }
  uint8_t *span;
  if (!lct__device_or_reply(rq, &span))
    return 0;
  for (size_t i = 0; i < lct__dev(rq)->n_items; i++)
    lct__dev(rq)->batch[i].device = span + lct__dev(rq)->items[i]->offset;
  return 1;
}

/* The items' metas, in order, as the reply of a _MANY op; the one item's as
 * that of PUT_DEVICE or GET_DEVICE. */
static void lct__reply_batch(lct__request *rq) {
  /* The metas and their pointers in one block. */
  Lctpb__TensorMeta *metas = malloc(lct__dev(rq)->n_items * (sizeof *metas + sizeof(Lctpb__TensorMeta *)));
  if (metas == NULL) {
    lct__reply_error(rq, LCT_ENOMEM, "out of memory for the reply (the batch itself succeeded)");
    return;
  }
  Lctpb__TensorMeta **ptrs = (Lctpb__TensorMeta **)(metas + lct__dev(rq)->n_items);
  for (size_t i = 0; i < lct__dev(rq)->n_items; i++) {
    lct__meta_of(lct__dev(rq)->batch[i].entry, &metas[i]);
    ptrs[i] = &metas[i];
  }
  Lctpb__Reply rp = LCTPB__REPLY__INIT;
  if (lct__is_many(rq)) {
    rp.n_metas = lct__dev(rq)->n_items;
    rp.metas = ptrs;
  } else {
    rp.meta = ptrs[0];
  }
  lct__reply(rq, &rp, NULL, 0);
  free(metas);
}

static void lct__device_batch_ended(void *arg, int rc, size_t failed, const char *why) {
  lct__request *rq = arg;
  if (rc == 0)
    lct__reply_batch(rq);
  else if (failed < lct__dev(rq)->n_items)
    lct__reply_item_error(rq, rc, failed, "%s", why);
  else
    lct__reply_error(rq, rc, "%s", why);
}

/* Starts the encode of the request's items; replies itself on failure. */
static void lct__batch_put_begin(lct__request *rq) {
  size_t failed = lct__dev(rq)->n_items;
  int rc = lct__batch_put_start(rq->srv, lct__dev(rq)->batch, lct__dev(rq)->n_items, lct__device_batch_ended, rq, &failed);
  if (rc == LCT_ENOSPC && failed < lct__dev(rq)->n_items) {
    char why[256];
    int room = lct__pool_room(rq->srv, &lct__dev(rq)->batch[failed].decl, rq->srv->cfg.segment_size, why, sizeof why);
    lct__device_batch_ended(rq, room != 0 ? room : rc, failed, why);
  } else if (rc != 0) {
    lct__device_batch_ended(rq, rc, lct__dev(rq)->n_items, "cannot start the encode");
  }
}

/* Starts the decode of the request's items; replies itself on failure. */
static void lct__batch_get_begin(lct__request *rq) {
  int rc = lct__batch_get_start(rq->srv, lct__dev(rq)->batch, lct__dev(rq)->n_items, lct__device_batch_ended, rq);
  if (rc != 0)
    lct__reply_error(rq, rc, "cannot start the decode");
}

/* Stores the request's items (PUT_DEVICE, PUT_DEVICE_MANY), each counted
 * against the sender's quota. */
static void lct__put_items(lct__request *rq) {
  if (!lct__batch_or_reply(rq))
    return;
  const lct__config *cfg = &rq->srv->cfg;
  for (size_t i = 0; i < lct__dev(rq)->n_items; i++) {
    const Lctpb__DeviceItem *it = lct__dev(rq)->items[i];
    lct__batch_item *b = &lct__dev(rq)->batch[i];
    char why[256];
    int rc = lct__put_check(cfg, &it->key, it->meta, &b->decl, why, sizeof why);
    if (rc == 0 && it->size != b->decl.raw_bytes) {
      rc = LCT_ESIZE;
      snprintf(why, sizeof why, "size %" PRIu64 "; dtype and shape make %" PRIu64, it->size, b->decl.raw_bytes);
    }
    if (rc == 0)
      rc = lct__quota_check(rq, it->key.data, it->key.len, &b->decl, cfg->segment_size, 1, why, sizeof why);
    if (rc != 0) {
      lct__reply_item_error(rq, rc, i, "%s", why);
      return;
    }
    b->key = it->key.data;
    b->key_len = it->key.len;
  }
  if (lct__batch_map_or_reply(rq))
    lct__batch_put_begin(rq);
}

/* Reads the request's items (GET_DEVICE, GET_DEVICE_MANY). */
static void lct__get_items(lct__request *rq) {
  if (!lct__batch_or_reply(rq))
    return;
  for (size_t i = 0; i < lct__dev(rq)->n_items; i++) {
    const Lctpb__DeviceItem *it = lct__dev(rq)->items[i];
    lct__entry *e;
    char why[96];
    int rc = lct__entry_to_read(rq->srv, &it->key, it->has_version, it->version, &e, why, sizeof why);
    if (rc != 0) {
      lct__reply_item_error(rq, rc, i, "%s", why);
      return;
    }
    if (it->size < e->raw_bytes) {
      lct__reply_item_error(rq, LCT_EBUFSIZE, i, "tensor is %" PRIu64 " bytes; its buffer holds %" PRIu64,
                            e->raw_bytes, it->size);
      return;
    }
    lct__entry_ref(e); /* dropped with the request */
    lct__dev(rq)->batch[i].entry = e;
  }
  if (lct__batch_map_or_reply(rq))
    lct__batch_get_begin(rq);
}

/* The request's items: those of a _MANY op, or its one item. */
static int lct__items(lct__request *rq) {
  lct__device_op *d = lct__device_op_new(rq);
  if (d == NULL)
    return 0;
  const Lctpb__Request *h = rq->hdr;
  if (lct__is_many(rq)) {
    d->items = h->items;
    d->n_items = h->n_items;
    return 1;
  }
  if (!lct__need_key(rq))
    return 0;
  lctpb__device_item__init(&d->one);
  d->one.key = h->key;
  d->one.meta = h->meta;
  d->one.size = h->device != NULL ? h->device->size : 0;
  d->one.has_version = h->has_version;
  d->one.version = h->version;
  d->one_ptr = &d->one;
  d->items = &d->one_ptr;
  d->n_items = 1;
  return 1;
}

void lct__op_put_device(lct__request *rq) {
  if (lct__items(rq))
    lct__put_items(rq);
}

void lct__op_get_device(lct__request *rq) {
  if (lct__items(rq))
    lct__get_items(rq);
}
