/* handlers.c — lctd request handlers: parse a frame, dispatch by op, reply. */
#include "handlers.h"

#include <inttypes.h>
#include <nanomsg/nn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "device_batch.h"
#include "lct_error.h"
#include "lct_wire.h"
#include "log.h"
#include "persist.h"
#include "server.h"
#include "staging.h"
#include "transport.h"
#include "work.h"

#ifndef LCT_VERSION
#define LCT_VERSION "0"
#endif

#define LCT__LIST_DEFAULT 100

/* One request from receipt to reply; owns the nanomsg buffers. */
typedef struct lct__request {
  lct__server *srv;
  int sock;
  void *control;        /* routing header, handed back with the reply */
  void *msg;            /* the received message (NULL once a staged put keeps it) */
  uint32_t op;
  lct_wire_frame frame; /* views into msg */
  Lctpb__Request *hdr;
  lct__pending *pending; /* PUT_COMMIT: the staged put being encoded */
  void *reply_msg;      /* GET: the reply being filled by decode workers */
  const uint8_t *ipc_base; /* device ops: the client allocation mapped, unmapped with the request */
  /* Device ops: the request's items (PUT_DEVICE and GET_DEVICE: `one`, from
   * the request's key, meta and version over the whole device buffer). */
  Lctpb__DeviceItem *const *items;
  size_t n_items;
  Lctpb__DeviceItem one, *one_ptr;
  lct__batch_item *batch; /* device ops: the items' work, n_items of them (once checked) */
  size_t reply_len;
  uint64_t received;    /* uv_hrtime at receipt */
} lct__request;

static int lct__is_many(const lct__request *rq) {
  return rq->op == LCTPB__OP__OP_PUT_DEVICE_MANY || rq->op == LCTPB__OP__OP_GET_DEVICE_MANY;
}

/* A device get: its items hold references to the entries read. */
static int lct__is_get(const lct__request *rq) {
  return rq->op == LCTPB__OP__OP_GET_DEVICE || rq->op == LCTPB__OP__OP_GET_DEVICE_MANY;
}

static void lct__request_free(lct__request *rq) {
  rq->srv->stats.in_flight--;
  if (rq->hdr != NULL)
    lctpb__request__free_unpacked(rq->hdr, NULL);
  if (rq->msg != NULL)
    nn_freemsg(rq->msg);
  if (rq->control != NULL)
    nn_freemsg(rq->control);
  if (rq->reply_msg != NULL)
    nn_freemsg(rq->reply_msg);
  if (rq->pending != NULL)
    lct__staging_release(rq->srv->staging, rq->pending);
  if (rq->batch != NULL && lct__is_get(rq))
    for (size_t i = 0; i < rq->n_items; i++)
      if (rq->batch[i].entry != NULL)
        lct__entry_unref(rq->batch[i].entry);
  free(rq->batch);
  if (rq->ipc_base != NULL) {
    const lct__backend *be = lct__pool_backend(rq->srv->pool);
    be->ops->ipc_unmap(be->ctx, rq->ipc_base);
  }
  free(rq);
}

/* Packs rp into a new nanomsg buffer with room for plen payload bytes. */
static int lct__reply_alloc(Lctpb__Reply *rp, size_t plen, void **msg, size_t *len,
                            uint8_t **payload) {
  rp->payload_bytes = plen;
  size_t hlen = lctpb__reply__get_packed_size(rp);
  if (hlen > LCT_WIRE_HEADER_MAX)
    return LCT_E2BIG;
  size_t total = LCT_WIRE_PREFIX_BYTES + hlen + plen;
  uint8_t *m = nn_allocmsg(total, 0);
  if (m == NULL)
    return LCT_ENOMEM;
  lct_wire_prefix(m, hlen);
  lctpb__reply__pack(rp, m + LCT_WIRE_PREFIX_BYTES);
  *msg = m;
  *len = total;
  *payload = m + LCT_WIRE_PREFIX_BYTES + hlen;
  return 0;
}

/* Sends a packed reply, counts it, and ends the request. */
static void lct__reply_send(lct__request *rq, uint32_t status, void *msg, size_t len) {
  lct__server *srv = rq->srv;
  srv->stats.bytes_out += len;
  lct__stats_count(&srv->stats, rq->op, status);
  lct__stats_latency(&srv->stats, rq->op, uv_hrtime() - rq->received);
  lct__transport_send(srv->transport, rq->sock, rq->control, msg, len);
  rq->control = NULL;
  lct__request_free(rq);
}

static void lct__reply_error(lct__request *rq, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void lct__reply(lct__request *rq, Lctpb__Reply *rp, const void *payload, size_t plen) {
  void *msg;
  size_t len;
  uint8_t *dst;
  int rc = lct__reply_alloc(rp, plen, &msg, &len, &dst);
  if (rc != 0) {
    lct__reply_error(rq, rc, "cannot build the reply");
    return;
  }
  if (plen > 0)
    memcpy(dst, payload, plen);
  lct__reply_send(rq, 0, msg, len);
}

/* An error reply; item >= 0 names the item of a _MANY request at fault. */
static void lct__reply_status(lct__request *rq, int err, long item, const char *text) {
  Lctpb__Reply rp = LCTPB__REPLY__INIT;
  rp.status = (uint32_t)-err;
  rp.message = (char *)text;
  rp.has_failed_item = item >= 0;
  rp.failed_item = item >= 0 ? (uint32_t)item : 0;
  void *msg;
  size_t len;
  uint8_t *dst;
  if (lct__reply_alloc(&rp, 0, &msg, &len, &dst) != 0) {
    lct__log_error("out of memory for an error reply (%s); the client will time out", text);
    lct__stats_count(&rq->srv->stats, rq->op, rp.status);
    lct__stats_latency(&rq->srv->stats, rq->op, uv_hrtime() - rq->received);
    lct__request_free(rq);
    return;
  }
  lct__log_debug("op %u: %s: %s", rq->op, lct_err_name(err), text);
  lct__reply_send(rq, rp.status, msg, len);
}

static void lct__reply_error(lct__request *rq, int err, const char *fmt, ...) {
  char text[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  lct__reply_status(rq, err, -1, text);
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

static void lct__meta_of(const lct__entry *e, Lctpb__TensorMeta *m) {
  lctpb__tensor_meta__init(m);
  m->has_dtype = 1;
  m->dtype = (uint32_t)e->dtype;
  m->n_shape = (size_t)e->ndim;
  m->shape = (uint64_t *)e->shape;
  m->has_raw_bytes = 1;
  m->raw_bytes = e->raw_bytes;
  m->has_stored_bytes = 1;
  m->stored_bytes = e->stored_bytes;
  m->has_version = 1;
  m->version = e->version;
  m->has_checksum = 1;
  m->checksum = e->checksum;
}

int lct__put_decl_parse(const Lctpb__TensorMeta *m, lct__put_decl *d) {
  memset(d, 0, sizeof *d);
  if (m == NULL || !m->has_dtype)
    return LCT_EINVAL;
  size_t w = m->dtype < LCT_DTYPE_COUNT ? lct_dtype_size((int)m->dtype) : 0;
  if (w == 0)
    return LCT_EDTYPE;
  if (m->n_shape > LCT_MAX_DIMS)
    return LCT_EINVAL;
  uint64_t n = 1;
  for (size_t i = 0; i < m->n_shape; i++) {
    if (m->shape[i] != 0 && n > UINT64_MAX / m->shape[i])
      return LCT_E2BIG;
    n *= m->shape[i];
    d->shape[i] = m->shape[i];
  }
  if (n > (uint64_t)SIZE_MAX / w)
    return LCT_E2BIG;
  d->dtype = (int)m->dtype;
  d->ndim = (int)m->n_shape;
  d->n_elems = n;
  d->raw_bytes = n * w;
  if (m->has_raw_bytes && m->raw_bytes != d->raw_bytes)
    return LCT_ESIZE;
  d->has_checksum = m->has_checksum;
  d->checksum = m->checksum;
  return 0;
}

static int lct__need_key(lct__request *rq) {
  if (rq->hdr->has_key)
    return 1;
  lct__reply_error(rq, LCT_EINVAL, "this operation needs a key");
  return 0;
}

/* A put's declaration from its meta, within max_tensor_size: 0, or an error
 * code with its reason in why. */
static int lct__decl_check(const lct__config *cfg, const Lctpb__TensorMeta *m, lct__put_decl *d, char *why,
                           size_t why_len) {
  int rc = lct__put_decl_parse(m, d);
  if (rc == 0 && cfg->max_tensor_size != 0 && d->raw_bytes > cfg->max_tensor_size) {
    snprintf(why, why_len, "tensor of %" PRIu64 " bytes exceeds max_tensor_size %" PRIu64, d->raw_bytes,
             cfg->max_tensor_size);
    return LCT_E2BIG;
  }
  if (rc == LCT_ESIZE)
    snprintf(why, why_len, "raw_bytes %" PRIu64 " disagrees with dtype and shape (%" PRIu64 ")", m->raw_bytes,
             d->raw_bytes);
  else if (rc == LCT_EDTYPE)
    snprintf(why, why_len, "unknown dtype %u", m->dtype);
  else if (rc == LCT_E2BIG)
    snprintf(why, why_len, "shape product overflows");
  else if (rc != 0)
    snprintf(why, why_len, "put needs meta with a dtype (and shape)");
  return rc;
}

/* A put's key against max_key_length: 0, or LCT_ENAMETOOLONG with why. */
static int lct__put_key_check(const lct__config *cfg, const ProtobufCBinaryData *key, char *why, size_t cap) {
  if (key->len <= (size_t)cfg->max_key_length)
    return 0;
  snprintf(why, cap, "key of %zu bytes exceeds max_key_length %d", key->len, cfg->max_key_length);
  return LCT_ENAMETOOLONG;
}

/* Checks a put's key against max_key_length and its declaration; replies
 * itself on failure. */
static int lct__decl_or_reply(lct__request *rq, lct__put_decl *d) {
  const lct__config *cfg = &rq->srv->cfg;
  char why[160];
  int rc = lct__put_key_check(cfg, &rq->hdr->key, why, sizeof why);
  if (rc == 0)
    rc = lct__decl_check(cfg, rq->hdr->meta, d, why, sizeof why);
  if (rc != 0)
    lct__reply_error(rq, rc, "%s", why);
  return rc == 0;
}

static void lct__reply_nospc(lct__request *rq, uint64_t need) {
  lct__pool *pool = rq->srv->pool;
  lct__reply_error(rq, LCT_ENOSPC,
                   "needs up to %" PRIu64 " pool bytes; %" PRIu64 " of %" PRIu64 " in use", need,
                   lct__pool_used(pool), lct__pool_capacity(pool));
}

/* ---- put ---------------------------------------------------------------- */

static void lct__put_done(void *arg, int rc, const char *why, const lct__entry *e) {
  lct__request *rq = arg;
  if (rq->pending != NULL) {
    lct__staging_release(rq->srv->staging, rq->pending);
    rq->pending = NULL;
  }
  if (rc != 0) {
    lct__reply_error(rq, rc, "%s", why);
    return;
  }
  Lctpb__Reply rp = LCTPB__REPLY__INIT;
  Lctpb__TensorMeta m;
  lct__meta_of(e, &m);
  rp.meta = &m;
  lct__reply(rq, &rp, NULL, 0);
}

/* Starts the encode of a complete tensor; replies itself on failure. */
static void lct__put_begin_encode(lct__request *rq, const uint8_t *key, size_t key_len,
                                  const lct__put_decl *d, const lct__put_src *src) {
  int rc = lct__put_start(rq->srv, key, key_len, d, src, lct__put_done, rq);
  if (rc == LCT_ENOSPC)
    lct__reply_nospc(rq, lct__put_reserve(rq->srv, d));
  else if (rc != 0)
    lct__reply_error(rq, rc, "cannot start the encode");
}

static void lct__op_put(lct__request *rq) {
  lct__put_decl d;
  if (!lct__need_key(rq) || !lct__decl_or_reply(rq, &d))
    return;
  if (rq->frame.payload_len != d.raw_bytes) {
    lct__reply_error(rq, LCT_ESIZE, "payload is %zu bytes; dtype and shape make %" PRIu64,
                     rq->frame.payload_len, d.raw_bytes);
    return;
  }
  if (d.raw_bytes > rq->srv->cfg.frame_size) {
    lct__reply_error(rq, LCT_E2BIG, "%" PRIu64 " bytes exceed the frame size %" PRIu64
                     "; use a chunked put", d.raw_bytes, rq->srv->cfg.frame_size);
    return;
  }
  lct__put_src src = {rq->frame.payload, NULL, 0};
  lct__put_begin_encode(rq, rq->hdr->key.data, rq->hdr->key.len, &d, &src);
}

static void lct__op_put_begin(lct__request *rq) {
  lct__server *srv = rq->srv;
  lct__put_decl d;
  if (!lct__need_key(rq) || !lct__decl_or_reply(rq, &d))
    return;
  if (rq->frame.payload_len != 0) {
    lct__reply_error(rq, LCT_EINVAL, "put-begin carries no payload; send it in put-chunk");
    return;
  }
  uint64_t need = lct__put_reserve(srv, &d);
  if (!lct__pool_fits(srv->pool, need)) {
    lct__reply_nospc(rq, need);
    return;
  }
  lct__pending *p;
  int rc = lct__staging_begin(srv->staging, rq->hdr->key.data, rq->hdr->key.len, &d, &p);
  if (rc != 0) {
    lct__reply_error(rq, rc, "staging full: %" PRIu64 " of %" PRIu64 " bytes held by %" PRIu64
                     " puts; %" PRIu64 " more needed",
                     srv->stats.staging_bytes, srv->cfg.staging_memory, srv->stats.pending_puts,
                     d.raw_bytes);
    return;
  }
  Lctpb__Reply rp = LCTPB__REPLY__INIT;
  rp.has_put_id = 1;
  rp.put_id = p->id;
  lct__reply(rq, &rp, NULL, 0);
}

static lct__pending *lct__find_put(lct__request *rq) {
  lct__pending *p = rq->hdr->has_put_id ? lct__staging_find(rq->srv->staging, rq->hdr->put_id)
                                         : NULL;
  if (p == NULL)
    lct__reply_error(rq, LCT_ENOENT, "no such put (never begun, committed, aborted or expired)");
  else if (rq->hdr->has_key &&
           (rq->hdr->key.len != p->key_len || memcmp(rq->hdr->key.data, p->key, p->key_len))) {
    lct__reply_error(rq, LCT_EINVAL, "key differs from the one the put began with");
    p = NULL;
  }
  return p;
}

static void lct__op_put_chunk(lct__request *rq) {
  lct__pending *p = lct__find_put(rq);
  if (p == NULL)
    return;
  uint64_t off = rq->hdr->has_offset ? rq->hdr->offset : UINT64_MAX;
  size_t len = rq->frame.payload_len;
  if (off != p->received) {
    lct__reply_error(rq, LCT_EINVAL, "chunk at offset %" PRIu64 "; the put expects %" PRIu64,
                     off, p->received);
    return;
  }
  if (len > p->decl.raw_bytes - p->received) {
    lct__reply_error(rq, LCT_ESIZE, "chunk of %zu bytes at %" PRIu64 " runs past %" PRIu64, len,
                     off, p->decl.raw_bytes);
    return;
  }
  if (len > 0) {
    /* The put keeps the message: no copy of the payload. */
    size_t msg_bytes = LCT_WIRE_PREFIX_BYTES + rq->frame.header_len + len;
    if (lct__staging_add(rq->srv->staging, p, rq->msg, msg_bytes, rq->frame.payload, len) != 0) {
      lct__reply_error(rq, LCT_ENOMEM, "staging full: %" PRIu64 " of %" PRIu64 " bytes held; this chunk's "
                       "message needs %zu beyond its payload", rq->srv->stats.staging_bytes,
                       rq->srv->cfg.staging_memory, msg_bytes - len);
      return;
    }
    rq->msg = NULL;
  }
  lct__staging_touch(rq->srv->staging, p);
  Lctpb__Reply rp = LCTPB__REPLY__INIT;
  rp.has_received = 1;
  rp.received = p->received;
  lct__reply(rq, &rp, NULL, 0);
}

static void lct__op_put_commit(lct__request *rq) {
  lct__pending *p = lct__find_put(rq);
  if (p == NULL)
    return;
  if (p->received != p->decl.raw_bytes) {
    lct__reply_error(rq, LCT_ESIZE, "put incomplete: %" PRIu64 " of %" PRIu64 " bytes received",
                     p->received, p->decl.raw_bytes);
    return;
  }
  lct__staging_take(rq->srv->staging, p);
  rq->pending = p; /* released when the encode ends, or with the request */
  lct__put_src src = {NULL, p->pieces, p->n_pieces};
  lct__put_begin_encode(rq, p->key, p->key_len, &p->decl, &src);
}

static void lct__op_put_abort(lct__request *rq) {
  lct__pending *p = lct__find_put(rq);
  if (p == NULL)
    return;
  lct__staging_take(rq->srv->staging, p);
  lct__staging_release(rq->srv->staging, p);
  Lctpb__Reply rp = LCTPB__REPLY__INIT;
  lct__reply(rq, &rp, NULL, 0);
}

/* ---- get, delete, stat, list -------------------------------------------- */

static void lct__get_done(void *arg, int rc) {
  lct__request *rq = arg;
  if (rc != 0) {
    lct__reply_error(rq, rc, "stored tensor failed to decode");
    return;
  }
  void *msg = rq->reply_msg;
  rq->reply_msg = NULL;
  lct__reply_send(rq, 0, msg, rq->reply_len);
}

/* The entry of key to read, at the version asked for if any: 0, or
 * LCT_ENOENT / LCT_ESTALE with why. */
static int lct__entry_to_read(const lct__server *srv, const ProtobufCBinaryData *key, int has_version,
                              uint64_t version, lct__entry **e, char *why, size_t cap) {
  *e = lct__store_find(srv->store, key->data, key->len);
  if (*e == NULL) {
    snprintf(why, cap, "no such key");
    return LCT_ENOENT;
  }
  if (has_version && version != (*e)->version) {
    snprintf(why, cap, "key is at version %" PRIu64 ", not %" PRIu64, (*e)->version, version);
    return LCT_ESTALE;
  }
  return 0;
}

/* The entry a GET reads; else the error is answered and NULL returned. */
static lct__entry *lct__find_to_read(lct__request *rq) {
  if (!lct__need_key(rq))
    return NULL;
  lct__entry *e;
  char why[96];
  int rc = lct__entry_to_read(rq->srv, &rq->hdr->key, rq->hdr->has_version, rq->hdr->version, &e, why, sizeof why);
  if (rc != 0) {
    lct__reply_error(rq, rc, "%s", why);
    return NULL;
  }
  return e;
}

static void lct__op_get(lct__request *rq) {
  lct__server *srv = rq->srv;
  Lctpb__Request *h = rq->hdr;
  lct__entry *e = lct__find_to_read(rq);
  if (e == NULL)
    return;
  uint64_t off = h->has_offset ? h->offset : 0;
  if (off > e->raw_bytes) {
    lct__reply_error(rq, LCT_EINVAL, "offset %" PRIu64 " beyond the tensor's %" PRIu64 " bytes",
                     off, e->raw_bytes);
    return;
  }
  uint64_t len = e->raw_bytes - off;
  if (h->has_length && h->length < len)
    len = h->length;
  if (len > srv->cfg.frame_size)
    len = srv->cfg.frame_size;
  Lctpb__Reply rp = LCTPB__REPLY__INIT;
  Lctpb__TensorMeta m;
  lct__meta_of(e, &m);
  rp.meta = &m;
  rp.has_offset = 1;
  rp.offset = off;
  uint8_t *dst;
  int rc = lct__reply_alloc(&rp, (size_t)len, &rq->reply_msg, &rq->reply_len, &dst);
  if (rc != 0) {
    lct__reply_error(rq, rc, "cannot allocate a %" PRIu64 "-byte reply", len);
    return;
  }
  if (len == 0) {
    lct__get_done(rq, 0);
    return;
  }
  if ((rc = lct__get_start(srv, e, off, len, dst, lct__get_done, rq)) != 0)
    lct__reply_error(rq, rc, "cannot start the decode");
}

/* ---- device puts and gets (CUDA IPC) -------------------------------------- */

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
  if (memcmp(d->gpu_uuid.data, be->gpu_uuid, LCT_GPU_UUID_BYTES) != 0) {
    lct__reply_fallback(rq, LCT__FALLBACK_OTHER_DEVICE, "the device buffer is on another GPU than this lctd's");
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
  rq->ipc_base = base;
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
 * items with distinct keys, each inside the device
 * buffer (alignment needs the element size: lct__batch_map_or_reply).
 * Allocates rq->batch. Replies itself and returns 0 on failure. */
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
  if (rq->n_items == 0) { /* at most LCT_DEVICE_ITEMS_MAX: lct_wire_request_parse */
    lct__reply_error(rq, LCT_EINVAL, "no items; a request takes 1 to %d", LCT_DEVICE_ITEMS_MAX);
    return 0;
  }
  size_t dup = 0;
  int distinct = lct__keys_distinct(rq->items, rq->n_items, &dup);
  if (distinct <= 0) {
    if (distinct < 0)
      lct__reply_error(rq, LCT_ENOMEM, "out of memory checking keys");
    else
      lct__reply_item_error(rq, LCT_EINVAL, dup, "key repeats an earlier item's");
    return 0;
  }
  for (size_t i = 0; i < rq->n_items; i++) {
    const Lctpb__DeviceItem *it = rq->items[i];
    if (it->offset > h->device->size || it->size > h->device->size - it->offset) {
      lct__reply_item_error(rq, LCT_EINVAL, i, "%" PRIu64 " bytes at offset %" PRIu64
                            " run past the device buffer's %" PRIu64, it->size, it->offset, h->device->size);
      return 0;
    }
  }
  rq->batch = calloc(rq->n_items, sizeof *rq->batch);
  if (rq->batch == NULL) {
    lct__reply_error(rq, LCT_ENOMEM, "out of memory for %zu items", rq->n_items);
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
  for (size_t i = 0; i < rq->n_items; i++) {
    const lct__batch_item *b = &rq->batch[i];
    size_t esize = lct_dtype_size(lct__is_get(rq) ? b->entry->dtype : b->decl.dtype);
    if ((h->device->offset + rq->items[i]->offset) % esize != 0) {
      lct__reply_item_error(rq, LCT_EINVAL, i, "buffer not aligned to its %zu-byte elements", esize);
      return 0;
    }
  }
  uint8_t *span;
  if (!lct__device_or_reply(rq, &span))
    return 0;
  for (size_t i = 0; i < rq->n_items; i++)
    rq->batch[i].device = span + rq->items[i]->offset;
  return 1;
}

/* The items' metas, in order, as the reply of a _MANY op; the one item's as
 * that of PUT_DEVICE or GET_DEVICE. */
static void lct__reply_batch(lct__request *rq) {
  /* The metas and their pointers in one block. */
  Lctpb__TensorMeta *metas = malloc(rq->n_items * (sizeof *metas + sizeof(Lctpb__TensorMeta *)));
  if (metas == NULL) {
    lct__reply_error(rq, LCT_ENOMEM, "out of memory for the reply (the batch itself succeeded)");
    return;
  }
  Lctpb__TensorMeta **ptrs = (Lctpb__TensorMeta **)(metas + rq->n_items);
  for (size_t i = 0; i < rq->n_items; i++) {
    lct__meta_of(rq->batch[i].entry, &metas[i]);
    ptrs[i] = &metas[i];
  }
  Lctpb__Reply rp = LCTPB__REPLY__INIT;
  if (lct__is_many(rq)) {
    rp.n_metas = rq->n_items;
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
  else if (failed < rq->n_items)
    lct__reply_item_error(rq, rc, failed, "%s", why);
  else
    lct__reply_error(rq, rc, "%s", why);
}

/* Starts the encode of the request's items; replies itself on failure. */
static void lct__batch_put_begin(lct__request *rq) {
  size_t failed;
  int rc = lct__batch_put_start(rq->srv, rq->batch, rq->n_items, lct__device_batch_ended, rq, &failed);
  if (rc == LCT_ENOSPC) {
    char why[160];
    snprintf(why, sizeof why, "the pool is full: %" PRIu64 " of %" PRIu64 " bytes in use",
             lct__pool_used(rq->srv->pool), lct__pool_capacity(rq->srv->pool));
    lct__device_batch_ended(rq, rc, failed, why);
  } else if (rc != 0) {
    lct__device_batch_ended(rq, rc, rq->n_items, "cannot start the encode");
  }
}

/* Starts the decode of the request's items; replies itself on failure. */
static void lct__batch_get_begin(lct__request *rq) {
  int rc = lct__batch_get_start(rq->srv, rq->batch, rq->n_items, lct__device_batch_ended, rq);
  if (rc != 0)
    lct__reply_error(rq, rc, "cannot start the decode");
}

/* Stores the request's items (PUT_DEVICE, PUT_DEVICE_MANY). */
static void lct__put_items(lct__request *rq) {
  if (!lct__batch_or_reply(rq))
    return;
  const lct__config *cfg = &rq->srv->cfg;
  for (size_t i = 0; i < rq->n_items; i++) {
    const Lctpb__DeviceItem *it = rq->items[i];
    lct__batch_item *b = &rq->batch[i];
    char why[160];
    int rc = lct__put_key_check(cfg, &it->key, why, sizeof why);
    if (rc == 0)
      rc = lct__decl_check(cfg, it->meta, &b->decl, why, sizeof why);
    if (rc == 0 && it->size != b->decl.raw_bytes) {
      rc = LCT_ESIZE;
      snprintf(why, sizeof why, "size %" PRIu64 "; dtype and shape make %" PRIu64, it->size, b->decl.raw_bytes);
    }
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
  for (size_t i = 0; i < rq->n_items; i++) {
    const Lctpb__DeviceItem *it = rq->items[i];
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
    rq->batch[i].entry = e;
  }
  if (lct__batch_map_or_reply(rq))
    lct__batch_get_begin(rq);
}

static void lct__many_items(lct__request *rq) {
  rq->items = rq->hdr->items;
  rq->n_items = rq->hdr->n_items;
}

static void lct__op_put_device_many(lct__request *rq) {
  lct__many_items(rq);
  lct__put_items(rq);
}

static void lct__op_get_device_many(lct__request *rq) {
  lct__many_items(rq);
  lct__get_items(rq);
}

/* PUT_DEVICE and GET_DEVICE are their _MANY ops with one item: the
 * request's key, meta and version over the whole device buffer. */
static int lct__one_item(lct__request *rq) {
  const Lctpb__Request *h = rq->hdr;
  if (!lct__need_key(rq))
    return 0;
  lctpb__device_item__init(&rq->one);
  rq->one.key = h->key;
  rq->one.meta = h->meta;
  rq->one.size = h->device != NULL ? h->device->size : 0;
  rq->one.has_version = h->has_version;
  rq->one.version = h->version;
  rq->one_ptr = &rq->one;
  rq->items = &rq->one_ptr;
  rq->n_items = 1;
  return 1;
}

static void lct__op_put_device(lct__request *rq) {
  if (lct__one_item(rq))
    lct__put_items(rq);
}

static void lct__op_get_device(lct__request *rq) {
  if (lct__one_item(rq))
    lct__get_items(rq);
}

static void lct__op_delete(lct__request *rq) {
  if (!lct__need_key(rq))
    return;
  if (lct__store_remove(rq->srv->store, rq->hdr->key.data, rq->hdr->key.len) != 0) {
    lct__reply_error(rq, LCT_ENOENT, "no such key");
    return;
  }
  Lctpb__Reply rp = LCTPB__REPLY__INIT;
  lct__reply(rq, &rp, NULL, 0);
}

static void lct__op_stat(lct__request *rq) {
  if (!lct__need_key(rq))
    return;
  lct__entry *e;
  char why[96];
  int rc = lct__entry_to_read(rq->srv, &rq->hdr->key, 0, 0, &e, why, sizeof why);
  if (rc != 0) {
    lct__reply_error(rq, rc, "%s", why);
    return;
  }
  Lctpb__Reply rp = LCTPB__REPLY__INIT;
  Lctpb__TensorMeta m;
  lct__meta_of(e, &m);
  rp.meta = &m;
  lct__reply(rq, &rp, NULL, 0);
}

static void lct__op_list(lct__request *rq) {
  Lctpb__Request *h = rq->hdr;
  size_t limit = h->has_limit && h->limit > 0 ? h->limit : LCT__LIST_DEFAULT;
  if (limit > LCT_LIST_MAX)
    limit = LCT_LIST_MAX;
  lct__entry **found = malloc(limit * sizeof *found);
  Lctpb__ListEntry *items = malloc(limit * sizeof *items);
  Lctpb__ListEntry **ptrs = malloc(limit * sizeof *ptrs);
  Lctpb__TensorMeta *metas = malloc(limit * sizeof *metas);
  if (found == NULL || items == NULL || ptrs == NULL || metas == NULL) {
    free(found), free(items), free(ptrs), free(metas);
    lct__reply_error(rq, LCT_ENOMEM, "out of memory listing keys");
    return;
  }
  int more;
  size_t n = lct__store_list(rq->srv->store, h->has_prefix ? h->prefix.data : NULL,
                             h->has_prefix ? h->prefix.len : 0,
                             h->has_cursor ? h->cursor.data : NULL,
                             h->has_cursor ? h->cursor.len : 0, limit, found, &more);
  for (size_t i = 0; i < n; i++) {
    lctpb__list_entry__init(&items[i]);
    items[i].key.data = found[i]->key;
    items[i].key.len = found[i]->key_len;
    lct__meta_of(found[i], &metas[i]);
    items[i].meta = &metas[i];
    ptrs[i] = &items[i];
  }
  Lctpb__Reply rp = LCTPB__REPLY__INIT;
  rp.n_entries = n;
  rp.entries = ptrs;
  if (more && n > 0) {
    rp.has_next_cursor = 1;
    rp.next_cursor.data = found[n - 1]->key;
    rp.next_cursor.len = found[n - 1]->key_len;
  }
  lct__reply(rq, &rp, NULL, 0);
  free(found), free(items), free(ptrs), free(metas);
}

/* ---- stats, ping -------------------------------------------------------- */

char *lct__stats_text(lct__server *srv, size_t *len) {
  srv->stats.pool_capacity = lct__pool_capacity(srv->pool);
  srv->stats.pool_used = lct__pool_used(srv->pool);
  srv->stats.clients = lct__transport_clients(srv->transport);
  return lct__stats_render(&srv->stats, srv->backend_name, len);
}

static void lct__op_stats(lct__request *rq) {
  lct__server *srv = rq->srv;
  lct__stats *st = &srv->stats;
  size_t len;
  char *text = lct__stats_text(srv, &len);
  if (text == NULL) {
    lct__reply_error(rq, LCT_ENOMEM, "out of memory rendering stats");
    return;
  }
  Lctpb__StatsSummary sum;
  lct__stats_summarize(st, &sum);
  Lctpb__Reply rp = LCTPB__REPLY__INIT;
  rp.stats = &sum;
  lct__reply(rq, &rp, text, len);
  free(text);
}

/* ---- save: files written on a thread of its own, one save at a time ------ */

/* The SAVE requests one save answers: those that arrived before it began
 * (their tensors are all in its snapshot). */
typedef struct lct__save_job {
  uv_thread_t writer;  /* not one of the codec threads: puts and gets go on */
  int threaded;        /* writer was started (else the save fails unwritten) */
  uv_async_t written;  /* the writer's word to the loop that it is done */
  lct__server *srv;
  lct__snapshot *snap;
  lct__request **rqs;
  size_t n_rqs;
} lct__save_job;

static void lct__save_start(lct__server *srv, lct__request **rqs, size_t n);

static void lct__save_reply(lct__request *rq, int rc, const lct__persist_result *r) {
  if (rc == LCT_ENOMEM) {
    lct__reply_error(rq, rc, "out of memory starting a save");
    return;
  }
  if (rc != 0 && r->failed == 0) {
    lct__reply_error(rq, LCT_EIO, "persist_dir could not be written (see the server log for why)");
    return;
  }
  if (rc != 0) {
    lct__reply_error(rq, LCT_EIO, "%" PRIu64 " tensors written, %" PRIu64
                     " could not be (see the server log for why)", r->written, r->failed);
    return;
  }
  Lctpb__Reply rp = LCTPB__REPLY__INIT;
  rp.has_saved_tensors = 1;
  rp.saved_tensors = r->written;
  rp.has_saved_bytes = 1;
  rp.saved_bytes = r->written_bytes;
  lct__reply(rq, &rp, NULL, 0);
}

static void lct__save_write(void *arg) {
  lct__save_job *job = arg;
  lct__persist_write(job->snap);
  uv_async_send(&job->written);
}

/* The save is over (its handle closed): answer its requests, start the next. */
static void lct__save_end(uv_handle_t *h) {
  lct__save_job *job = h->data;
  lct__server *srv = job->srv;
  lct__persist_result r;
  int rc = lct__persist_end(srv, job->snap, &r);
  lct__log_info("save: %" PRIu64 " tensors written (%" PRIu64 " bytes), %" PRIu64 " removed%s", r.written,
                r.written_bytes, r.removed, rc != 0 ? "; some could not be written" : "");
  for (size_t i = 0; i < job->n_rqs; i++)
    lct__save_reply(job->rqs[i], rc, &r);
  free(job->rqs);
  free(job);
  srv->saving = NULL;
  /* Requests that came during this save: their tensors may be newer than its snapshot. */
  lct__request **next = srv->save_waiting;
  size_t n = srv->n_save_waiting;
  srv->save_waiting = NULL;
  srv->n_save_waiting = 0;
  if (n > 0)
    lct__save_start(srv, next, n);
}

static void lct__save_written(uv_async_t *a) {
  lct__save_job *job = a->data;
  if (job->threaded)
    uv_thread_join(&job->writer);
  uv_close((uv_handle_t *)&job->written, lct__save_end);
}

/* Takes rqs (a malloc'd array) and answers each when the save ends. */
static void lct__save_start(lct__server *srv, lct__request **rqs, size_t n) {
  lct__save_job *job = calloc(1, sizeof *job);
  int rc = job == NULL ? LCT_ENOMEM : lct__persist_begin(srv, &job->snap);
  if (rc != 0) {
    lct__persist_failed(srv);
  } else if (uv_async_init(srv->loop, &job->written, lct__save_written) != 0) {
    lct__persist_result ignored;
    lct__persist_end(srv, job->snap, &ignored); /* unwritten: counted as a failed save */
    rc = LCT_ENOMEM;
  }
  if (rc != 0) {
    lct__persist_result none = {0};
    for (size_t i = 0; i < n; i++)
      lct__save_reply(rqs[i], rc, &none);
    free(rqs);
    free(job);
    return;
  }
  job->srv = srv;
  job->rqs = rqs;
  job->n_rqs = n;
  job->written.data = job;
  srv->saving = job;
  job->threaded = uv_thread_create(&job->writer, lct__save_write, job) == 0;
  if (!job->threaded) { /* never on the loop: it would stop serving for the whole write */
    lct__log_error("persist: cannot start a thread for the save; it fails unwritten");
    uv_async_send(&job->written);
  }
}

void lct__save_abandon(lct__server *srv) {
  lct__save_job *job = srv->saving;
  if (job == NULL)
    return;
  if (job->threaded)
    uv_thread_join(&job->writer);
  lct__persist_result r;
  lct__persist_end(srv, job->snap, &r);
  job->snap = NULL;
  srv->saving = NULL; /* the job and its handle go with the process, which exits next */
}

static void lct__op_save(lct__request *rq) {
  lct__server *srv = rq->srv;
  if (*srv->cfg.persist_dir == '\0') {
    lct__reply_error(rq, LCT_ECONFIG, "this lctd has no persist_dir: nothing to save to");
    return;
  }
  if (srv->saving != NULL) { /* the next save, once this one ends, answers it */
    lct__request **grown = realloc(srv->save_waiting, (srv->n_save_waiting + 1) * sizeof *grown);
    if (grown == NULL) {
      lct__reply_error(rq, LCT_ENOMEM, "out of memory queueing a save");
      return;
    }
    srv->save_waiting = grown;
    srv->save_waiting[srv->n_save_waiting++] = rq;
    return;
  }
  lct__request **rqs = malloc(sizeof *rqs);
  if (rqs == NULL) {
    lct__reply_error(rq, LCT_ENOMEM, "out of memory starting a save");
    return;
  }
  rqs[0] = rq;
  lct__save_start(srv, rqs, 1);
}

static void lct__op_ping(lct__request *rq) {
  Lctpb__ServerInfo info = LCTPB__SERVER_INFO__INIT;
  info.protocol = LCT_WIRE_VERSION;
  info.server = "lctd " LCT_VERSION;
  info.backend = (char *)rq->srv->backend_name;
  info.frame_bytes = rq->srv->cfg.frame_size;
  info.key_max = (uint32_t)rq->srv->cfg.max_key_length;
  info.list_max = LCT_LIST_MAX;
  Lctpb__Reply rp = LCTPB__REPLY__INIT;
  rp.info = &info;
  lct__reply(rq, &rp, NULL, 0);
}

/* ---- dispatch ----------------------------------------------------------- */

void lct__handle_message(void *arg, int sock, void *msg, size_t len, void *control) {
  lct__server *srv = arg;
  srv->stats.bytes_in += len;
  lct__request *rq = calloc(1, sizeof *rq);
  if (rq == NULL) {
    lct__log_error("out of memory for a request; dropped (the client will time out)");
    nn_freemsg(msg);
    nn_freemsg(control);
    return;
  }
  srv->stats.in_flight++;
  rq->srv = srv;
  rq->sock = sock;
  rq->control = control;
  rq->msg = msg;
  rq->received = uv_hrtime();
  int rc = lct_wire_split(msg, len, &rq->frame);
  if (rc == LCT_EVERSION) {
    lct__reply_error(rq, rc, "protocol version %u; this server speaks %d",
                     ((const uint8_t *)msg)[4], LCT_WIRE_VERSION);
    return;
  }
  if (rc != 0) {
    lct__reply_error(rq, rc, "malformed frame prefix (%zu bytes)", len);
    return;
  }
  if ((rc = lct_wire_request_parse(&rq->frame, &rq->hdr)) != 0) {
    lct__reply_error(rq, rc,
                     rc == LCT_EPROTO  ? "malformed request header"
                     : rc == LCT_EINVAL ? "key contains a NUL byte"
                     : rc == LCT_E2BIG  ? "more device items than a request takes (1024)"
                                        : "key empty or longer than 1024 bytes");
    return;
  }
  rq->op = rq->hdr->op;
  if (lct__transport_is_tcp(srv->transport, sock) &&
      !lct__auth_check(&srv->auth, rq->hdr->has_auth_token ? rq->hdr->auth_token.data : NULL,
                       rq->hdr->has_auth_token ? rq->hdr->auth_token.len : 0)) {
    lct__reply_error(rq, LCT_EACCES, "%s: this tcp endpoint requires the token of the server's auth_token_file",
                     rq->hdr->has_auth_token ? "wrong auth token" : "no auth token");
    return;
  }
  switch (rq->op) {
  case LCTPB__OP__OP_PING:
    lct__op_ping(rq);
    break;
  case LCTPB__OP__OP_PUT:
    lct__op_put(rq);
    break;
  case LCTPB__OP__OP_PUT_BEGIN:
    lct__op_put_begin(rq);
    break;
  case LCTPB__OP__OP_PUT_CHUNK:
    lct__op_put_chunk(rq);
    break;
  case LCTPB__OP__OP_PUT_COMMIT:
    lct__op_put_commit(rq);
    break;
  case LCTPB__OP__OP_PUT_ABORT:
    lct__op_put_abort(rq);
    break;
  case LCTPB__OP__OP_GET:
    lct__op_get(rq);
    break;
  case LCTPB__OP__OP_DELETE:
    lct__op_delete(rq);
    break;
  case LCTPB__OP__OP_STAT:
    lct__op_stat(rq);
    break;
  case LCTPB__OP__OP_LIST:
    lct__op_list(rq);
    break;
  case LCTPB__OP__OP_STATS:
    lct__op_stats(rq);
    break;
  case LCTPB__OP__OP_SAVE:
    lct__op_save(rq);
    break;
  case LCTPB__OP__OP_PUT_DEVICE:
    lct__op_put_device(rq);
    break;
  case LCTPB__OP__OP_GET_DEVICE:
    lct__op_get_device(rq);
    break;
  case LCTPB__OP__OP_PUT_DEVICE_MANY:
    lct__op_put_device_many(rq);
    break;
  case LCTPB__OP__OP_GET_DEVICE_MANY:
    lct__op_get_device_many(rq);
    break;
  default:
    lct__reply_error(rq, LCT_EOP, "unknown operation %u", rq->op);
  }
}
