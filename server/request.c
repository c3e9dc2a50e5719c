/* request.c — a request from receipt to reply: parse the frame, dispatch through the op table, answer exactly once. */
#include "request.h"

#include <inttypes.h>
#include <nanomsg/nn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "health.h"
#include "inflight.h"
#include "lct_error.h"
#include "log.h"
#include "ops.h"
#include "transport.h"

static const lct__op_fn lct__ops[] = {
    [LCTPB__OP__OP_PING] = lct__op_ping,
    [LCTPB__OP__OP_PUT] = lct__op_put,
    [LCTPB__OP__OP_PUT_BEGIN] = lct__op_put_begin,
    [LCTPB__OP__OP_PUT_CHUNK] = lct__op_put_chunk,
    [LCTPB__OP__OP_PUT_COMMIT] = lct__op_put_commit,
    [LCTPB__OP__OP_PUT_ABORT] = lct__op_put_abort,
    [LCTPB__OP__OP_GET] = lct__op_get,
    [LCTPB__OP__OP_DELETE] = lct__op_delete,
    [LCTPB__OP__OP_STAT] = lct__op_stat,
    [LCTPB__OP__OP_LIST] = lct__op_list,
    [LCTPB__OP__OP_STATS] = lct__op_stats,
    [LCTPB__OP__OP_SAVE] = lct__op_save,
    [LCTPB__OP__OP_PUT_DEVICE] = lct__op_put_device,
    [LCTPB__OP__OP_GET_DEVICE] = lct__op_get_device,
    [LCTPB__OP__OP_PUT_DEVICE_MANY] = lct__op_put_device,
    [LCTPB__OP__OP_GET_DEVICE_MANY] = lct__op_get_device,
    [LCTPB__OP__OP_AUTH] = lct__op_auth,
};

static void lct__request_free(lct__request *rq) {
  rq->srv->stats.in_flight--;
  if (rq->load != NULL)
    lct__inflight_end(rq->srv->inflight, rq->load, rq->held);
  if (rq->op_release != NULL)
    rq->op_release(rq);
  if (rq->quota_held > 0)
    lct__tenant_release(rq->tenant, rq->quota_held);
  lct__access_unref(rq->access);
  if (rq->hdr != NULL)
    lctpb__request__free_unpacked(rq->hdr, NULL);
  if (rq->msg != NULL)
    nn_freemsg(rq->msg);
  if (rq->control != NULL)
    nn_freemsg(rq->control);
  if (rq->reply_msg != NULL)
    nn_freemsg(rq->reply_msg);
  free(rq);
}

int lct__reply_alloc(const lct__server *srv, Lctpb__Reply *rp, size_t plen, void **msg, size_t *len,
                     uint8_t **payload) {
  rp->payload_bytes = plen;
  rp->has_instance = 1;
  rp->instance = srv->instance;
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

void lct__reply_send(lct__request *rq, uint32_t status, void *msg, size_t len) {
  lct__server *srv = rq->srv;
  srv->stats.bytes_out += len;
  lct__stats_count(&srv->stats, rq->op, status);
  lct__stats_latency(&srv->stats, rq->op, uv_hrtime() - rq->received);
  lct__transport_send(srv->transport, rq->sock, rq->control, msg, len);
  rq->control = NULL;
  lct__request_free(rq);
}

void lct__reply(lct__request *rq, Lctpb__Reply *rp, const void *payload, size_t plen) {
  void *msg;
  size_t len;
  uint8_t *dst;
  int rc = lct__reply_alloc(rq->srv, rp, plen, &msg, &len, &dst);
  if (rc != 0) {
    lct__reply_error(rq, rc, "cannot build the reply");
    return;
  }
  if (plen > 0)
    memcpy(dst, payload, plen);
  lct__reply_send(rq, 0, msg, len);
}

void lct__reply_status(lct__request *rq, int err, long item, const char *text) {
  Lctpb__Reply rp = LCTPB__REPLY__INIT;
  rp.status = (uint32_t)-err;
  rp.message = (char *)text;
  rp.has_failed_item = item >= 0;
  rp.failed_item = item >= 0 ? (uint32_t)item : 0;
  void *msg;
  size_t len;
  uint8_t *dst;
  if (lct__reply_alloc(rq->srv, &rp, 0, &msg, &len, &dst) != 0) {
    lct__log_error("out of memory for an error reply (%s); the client will time out", text);
    lct__stats_count(&rq->srv->stats, rq->op, rp.status);
    lct__stats_latency(&rq->srv->stats, rq->op, uv_hrtime() - rq->received);
    lct__request_free(rq);
    return;
  }
  lct__log_debug("op %u: %s: %s", rq->op, lct_err_name(err), text);
  lct__reply_send(rq, rp.status, msg, len);
}

void lct__reply_error(lct__request *rq, int err, const char *fmt, ...) {
  char text[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(text, sizeof text, fmt, ap);
  va_end(ap);
  lct__reply_status(rq, err, -1, text);
}

int lct__request_hold(lct__request *rq, uint64_t bytes) {
  char why[192];
  int rc = lct__inflight_grow(rq->srv->inflight, rq->load, bytes, why, sizeof why);
  if (rc != 0) {
    lct__reply_error(rq, rc, "%s", why);
    return 0;
  }
  rq->held += bytes;
  return 1;
}

void lct__meta_of(const lct__entry *e, Lctpb__TensorMeta *m) {
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

void lct__reply_meta(lct__request *rq, const lct__entry *e) {
  Lctpb__Reply rp = LCTPB__REPLY__INIT;
  Lctpb__TensorMeta m;
  lct__meta_of(e, &m);
  rp.meta = &m;
  lct__reply(rq, &rp, NULL, 0);
}

int lct__need_key(lct__request *rq) {
  if (!rq->hdr->has_key) {
    lct__reply_error(rq, LCT_EINVAL, "this operation needs a key");
    return 0;
  }
  char why[320];
  if (lct__key_allowed(rq, "key", rq->hdr->key.data, rq->hdr->key.len, why, sizeof why) != 0) {
    lct__reply_error(rq, LCT_EACCES, "%s", why);
    return 0;
  }
  return 1;
}

/* At most max bytes of b as text: printable ASCII as it is, others as \xNN. */
static const char *lct__bytes_text(const uint8_t *b, size_t len, size_t max, char *buf, size_t cap) {
  size_t n = 0;
  for (size_t i = 0; i < len && i < max && n + 5 < cap; i++)
    n += (size_t)snprintf(buf + n, cap - n, b[i] >= 0x20 && b[i] < 0x7f && b[i] != '\\' ? "%c" : "\\x%02x", b[i]);
  snprintf(buf + n, cap - n, "%s", len > max ? "..." : "");
  return buf;
}

int lct__key_allowed(const lct__request *rq, const char *what, const uint8_t *key, size_t len, char *why,
                     size_t cap) {
  const lct__tenant *t = rq->tenant;
  if (t == NULL || lct__tenant_has(t, key, len))
    return 0;
  char k[272], p[272];
  snprintf(why, cap, "%s '%s' is outside tenant '%s': its keys start with '%s'", what,
           lct__bytes_text(key, len, 64, k, sizeof k), t->name, lct__bytes_text(t->prefix, t->prefix_len, 64, p, sizeof p));
  return LCT_EACCES;
}

int lct__quota_check(lct__request *rq, const uint8_t *key, size_t len, const lct_put_decl *d, uint64_t seg_bytes,
                     int hold, char *why, size_t cap) {
  const lct__tenant *t = rq->tenant;
  uint64_t need;
  if (t == NULL)
    return 0;
  if (lct__entry_reserve_bytes(d, seg_bytes, &need) != 0) {
    snprintf(why, cap, "tensor of %" PRIu64 " bytes is too large: its worst-case coded size overflows 64 bits",
             d->raw_bytes);
    return LCT_E2BIG;
  }
  const lct__entry *old = lct__store_find(rq->srv->store, key, len);
  int rc = lct__tenant_room(t, need, old != NULL ? old->stored_bytes : 0, why, cap);
  if (rc == 0 && hold) {
    lct__tenant_hold(t, need);
    rq->quota_held += need;
  }
  return rc;
}

int lct__put_check(const lct__config *cfg, const ProtobufCBinaryData *key, const Lctpb__TensorMeta *meta,
                   lct_put_decl *d, char *why, size_t cap) {
  if (key->len > (size_t)cfg->max_key_length) {
    snprintf(why, cap, "key of %zu bytes exceeds max_key_length %d", key->len, cfg->max_key_length);
    return LCT_ENAMETOOLONG;
  }
  int rc = lct_put_decl_from_meta(meta, d, why, cap);
  if (rc == 0 && cfg->max_tensor_size != 0 && d->raw_bytes > cfg->max_tensor_size) {
    snprintf(why, cap, "tensor of %" PRIu64 " bytes exceeds max_tensor_size %" PRIu64, d->raw_bytes,
             cfg->max_tensor_size);
    return LCT_E2BIG;
  }
  return rc;
}

int lct__entry_to_read(const lct__server *srv, const ProtobufCBinaryData *key, int has_version, uint64_t version,
                       lct__entry **e, char *why, size_t cap) {
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

int lct__pool_room(const lct__server *srv, const lct_put_decl *d, uint64_t seg_bytes, char *why, size_t cap) {
  const lct__pool *pool = srv->pool;
  uint64_t need, capacity = lct__pool_capacity(pool);
  if (lct__entry_reserve_bytes(d, seg_bytes, &need) != 0) {
    snprintf(why, cap, "tensor of %" PRIu64 " bytes is too large: its worst-case coded size overflows 64 bits",
             d->raw_bytes);
    return LCT_E2BIG;
  }
  if (need > capacity) {
    snprintf(why, cap, "tensor of %" PRIu64 " bytes cannot fit: its coded size may reach %" PRIu64
             " bytes and the pool holds %" PRIu64, d->raw_bytes, need, capacity);
    return LCT_ENOSPC;
  }
  snprintf(why, cap, "tensor of %" PRIu64 " bytes needs up to %" PRIu64 " pool bytes; %" PRIu64 " of %" PRIu64
           " in use", d->raw_bytes, need, lct__pool_used(pool), capacity);
  return lct__pool_fits(pool, need) ? 0 : LCT_ENOSPC;
}

void lct__handle_message(void *arg, int sock, uint64_t conn, void *msg, size_t len, void *control) {
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
  rq->conn = conn;
  rq->control = control;
  rq->msg = msg;
  rq->received = uv_hrtime();
  int rc = lct_wire_split(msg, len, &rq->frame);
  if (rc == LCT_EVERSION) {
    lct__reply_error(rq, rc, "protocol version %u; this server speaks %d", ((const uint8_t *)msg)[4],
                     LCT_WIRE_VERSION);
    return;
  }
  if (rc != 0) {
    lct__reply_error(rq, rc, "malformed frame prefix (%zu bytes)", len);
    return;
  }
  if ((rc = lct_wire_request_parse(&rq->frame, &rq->hdr)) != 0) {
    lct__reply_error(rq, rc,
                     rc == LCT_EPROTO   ? "malformed request header"
                     : rc == LCT_EINVAL ? "key contains a NUL byte"
                     : rc == LCT_E2BIG  ? "more device items than a request takes (1024)"
                                        : "key empty or longer than 1024 bytes");
    return;
  }
  rq->op = rq->hdr->op;
  if (!lct__admit(rq))
    return;
  const char *fault = lct__health_fault(srv->health);
  if (fault != NULL) {
    lct__reply_error(rq, LCT_ECUDA, "lctd is unhealthy and exiting for a restart from its last snapshot: %s", fault);
    return;
  }
  lct__op_fn op = rq->op < sizeof lct__ops / sizeof *lct__ops ? lct__ops[rq->op] : NULL;
  if (op == NULL) {
    lct__reply_error(rq, LCT_EOP, "unknown operation %u", rq->op);
    return;
  }
  char why[192];
  if ((rc = lct__inflight_admit(srv->inflight, conn, len, &rq->load, why, sizeof why)) != 0) {
    lct__reply_error(rq, rc, "%s", why);
    return;
  }
  rq->held = len;
  op(rq);
}
