/* ops_host.c — the ops on host memory: put (whole or chunked), get, delete, stat, list, stats, save, ping. */
#include <inttypes.h>
#include <nanomsg/nn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lct_error.h"
#include "blob.h"
#include "ops.h"
#include "persist.h"
#include "staging.h"
#include "work.h"

#ifndef LCT_VERSION
#define LCT_VERSION "0"
#endif

#define LCT__LIST_DEFAULT 100

/* Checks a put's key and declaration; replies itself on failure. */
static int lct__put_check_or_reply(lct__request *rq, lct_put_decl *d) {
  char why[160];
  int rc = lct__put_check(&rq->srv->cfg, &rq->hdr->key, rq->hdr->meta, d, why, sizeof why);
  if (rc != 0)
    lct__reply_error(rq, rc, "%s", why);
  return rc == 0;
}

/* Counts a host put of key, shaped by d and laid out in segments of seg (0: as lctd lays out its own),
 * against the sender's quota (hold: while the request lasts; else only checked); replies itself on failure. */
static int lct__quota_or_reply(lct__request *rq, const uint8_t *key, size_t len, const lct_put_decl *d, uint64_t seg,
                               int hold) {
  char why[256];
  seg = seg != 0 ? seg : lct__segment_bytes(rq->srv, d->raw_bytes);
  int rc = lct__quota_check(rq, key, len, d, seg, hold, why, sizeof why);
  if (rc != 0)
    lct__reply_error(rq, rc, "%s", why);
  return rc == 0;
}

/* ---- put ---------------------------------------------------------------- */

/* A committed chunked put's staged bytes, held until its encode ends. */
static void lct__release_pending(lct__request *rq) {
  lct__staging_release(rq->srv->staging, rq->op_state);
  rq->op_state = NULL;
  rq->op_release = NULL;
}

static void lct__put_done(void *arg, int rc, const char *why, const lct__entry *e) {
  lct__request *rq = arg;
  if (rq->op_release != NULL)
    lct__release_pending(rq);
  if (rc != 0) {
    lct__reply_error(rq, rc, "%s", why);
    return;
  }
  lct__reply_meta(rq, e);
}

/* Replies to a put of d, laid out in segments of seg, that could not start (rc): on LCT_ENOSPC, why the
 * pool has no room for it; else that starting what failed. */
static void lct__start_failed(lct__request *rq, int rc, const lct_put_decl *d, uint64_t seg, const char *what) {
  if (rc != LCT_ENOSPC) {
    lct__reply_error(rq, rc, "cannot start the %s", what);
    return;
  }
  char why[256] = "";
  int room = lct__pool_room(rq->srv, d, seg, why, sizeof why);
  lct__reply_error(rq, room != 0 ? room : rc, "%s", why);
}

/* Starts the encode of a complete tensor; replies itself on failure. */
static void lct__put_begin_encode(lct__request *rq, const uint8_t *key, size_t key_len,
                                  const lct_put_decl *d, const lct__put_src *src) {
  int rc = lct__put_start(rq->srv, key, key_len, d, src, lct__put_done, rq);
  if (rc != 0)
    lct__start_failed(rq, rc, d, lct__segment_bytes(rq->srv, d->raw_bytes), "encode");
}

/* Whether the request asks for the encoded form. */
static int lct__encoded(const lct__request *rq) { return rq->hdr->has_encoded && rq->hdr->encoded; }

/* A committed chunked put leaves staging; its bytes are held until the encode or acceptance ends. */
static void lct__commit_take(lct__request *rq, lct__pending *p) {
  lct__staging_take(rq->srv->staging, p);
  rq->op_state = p;
  rq->op_release = lct__release_pending;
}

/* Starts the acceptance of a put's blobs; replies itself on failure. seg:
 * the segment size they are laid out in. staged: a committed chunked put's,
 * taken from staging once its quota allows the put (refused for its quota,
 * it stays staged for a later commit, as a raw put does), or NULL. */
static void lct__put_begin_accept(lct__request *rq, const uint8_t *key, size_t key_len, const lct_put_decl *d,
                                  uint64_t seg, const lct__blob_ref *refs, size_t n, lct__pending *staged) {
  if (!lct__quota_or_reply(rq, key, key_len, d, seg, 1))
    return;
  if (staged != NULL)
    lct__commit_take(rq, staged);
  int rc = lct__accept_start(rq->srv, key, key_len, d, refs, n, lct__put_done, rq);
  if (rc != 0)
    lct__start_failed(rq, rc, d, seg, "validation");
}

/* The most blobs a tensor laid out by lay can have: one per 64 KiB, and one
 * for the empty tensor. */
static size_t lct__blobs_max(const lct_put_decl *d) { return (size_t)(d->raw_bytes / (64 << 10)) + 1; }

/* PUT with encoded: the payload is the tensor's blobs. */
static void lct__op_put_encoded(lct__request *rq, const lct_put_decl *d) {
  if (!d->has_checksum) {
    lct__reply_error(rq, LCT_EINVAL, "an encoded put declares the checksum of the raw tensor");
    return;
  }
  if (rq->frame.payload_len > rq->srv->cfg.frame_size) {
    lct__reply_error(rq, LCT_E2BIG, "%zu bytes of blobs exceed the frame size %" PRIu64 "; use a chunked put",
                     rq->frame.payload_len, rq->srv->cfg.frame_size);
    return;
  }
  /* No more blobs than the payload holds headers: a declared shape alone does not size the table. */
  size_t cap = lct__blobs_max(d), n;
  if (cap > rq->frame.payload_len / LCT_HEADER_BYTES + 1)
    cap = rq->frame.payload_len / LCT_HEADER_BYTES + 1;
  lct__blob_ref *refs = malloc(cap * sizeof *refs);
  if (refs == NULL) {
    lct__reply_error(rq, LCT_ENOMEM, "out of memory for the blobs' table");
    return;
  }
  lct__blob_layout lay = {d, rq->srv->cfg.segment_size, 0};
  uint64_t covered;
  char why[256];
  int rc = lct__blobs_walk(&lay, 0, rq->frame.payload, rq->frame.payload_len, refs, cap, &n, &covered, why,
                           sizeof why);
  if (rc == 0 && covered != d->raw_bytes) {
    rc = LCT_ESIZE;
    snprintf(why, sizeof why, "the blobs hold %" PRIu64 " raw bytes; dtype and shape make %" PRIu64, covered,
             d->raw_bytes);
  }
  if (rc != 0)
    lct__reply_error(rq, rc, "%s", why);
  else
    /* An empty tensor has no segment size of its own: the configured one sizes its (nil) reservation. */
    lct__put_begin_accept(rq, rq->hdr->key.data, rq->hdr->key.len, d, lay.seg ? lay.seg : rq->srv->cfg.segment_size,
                          refs, n, NULL);
  free(refs);
}

void lct__op_put(lct__request *rq) {
  lct_put_decl d;
  if (!lct__need_key(rq) || !lct__put_check_or_reply(rq, &d))
    return;
  if (lct__encoded(rq)) {
    lct__op_put_encoded(rq, &d);
    return;
  }
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
  if (!lct__quota_or_reply(rq, rq->hdr->key.data, rq->hdr->key.len, &d, 0, 1))
    return;
  lct__put_src src = {rq->frame.payload, NULL, 0};
  lct__put_begin_encode(rq, rq->hdr->key.data, rq->hdr->key.len, &d, &src);
}

void lct__op_put_begin(lct__request *rq) {
  lct__server *srv = rq->srv;
  lct_put_decl d;
  if (!lct__need_key(rq) || !lct__put_check_or_reply(rq, &d))
    return;
  if (rq->frame.payload_len != 0) {
    lct__reply_error(rq, LCT_EINVAL, "put-begin carries no payload; send it in put-chunk");
    return;
  }
  if (lct__encoded(rq) && !d.has_checksum) {
    lct__reply_error(rq, LCT_EINVAL, "an encoded put declares the checksum of the raw tensor");
    return;
  }
  if (!lct__quota_or_reply(rq, rq->hdr->key.data, rq->hdr->key.len, &d, 0, 0))
    return;
  char why[256];
  int rc = lct__pool_room(srv, &d, lct__segment_bytes(srv, d.raw_bytes), why, sizeof why);
  if (rc != 0) {
    lct__reply_error(rq, rc, "%s", why);
    return;
  }
  lct__pending *p;
  rc = lct__staging_begin(srv->staging, rq->conn, rq->hdr->key.data, rq->hdr->key.len, &d, &p);
  if (rc == LCT_EIO) {
    lct__reply_error(rq, rc, "no random bytes for a put id (getrandom)");
    return;
  }
  if (rc != 0) {
    lct__reply_error(rq, rc, "staging full: %" PRIu64 " of %" PRIu64 " bytes held by %" PRIu64
                     " puts; %" PRIu64 " more needed",
                     srv->stats.staging_bytes, srv->cfg.staging_memory, srv->stats.pending_puts,
                     d.raw_bytes);
    return;
  }
  p->encoded = lct__encoded(rq);
  p->shared = rq->hdr->has_shared && rq->hdr->shared;
  Lctpb__Reply rp = LCTPB__REPLY__INIT;
  rp.has_put_id = 1;
  rp.put_id = p->id;
  lct__reply(rq, &rp, NULL, 0);
}

/* The put the request names, if its connection began it and its key is the
 * sender's tenant's: another's is answered as an id that does not exist. */
static lct__pending *lct__find_put(lct__request *rq) {
  lct__pending *p = rq->hdr->has_put_id ? lct__staging_find(rq->srv->staging, rq->hdr->put_id, rq->conn)
                                         : NULL;
  if (p != NULL && rq->tenant != NULL && !lct__tenant_has(rq->tenant, p->key, p->key_len))
    p = NULL;
  if (p == NULL)
    lct__reply_error(rq, LCT_ENOENT, "no such put (never begun, committed, aborted or expired)");
  else if (rq->hdr->has_key &&
           (rq->hdr->key.len != p->key_len || memcmp(rq->hdr->key.data, p->key, p->key_len))) {
    lct__reply_error(rq, LCT_EINVAL, "key differs from the one the put began with");
    p = NULL;
  }
  return p;
}

void lct__op_put_chunk(lct__request *rq) {
  lct__pending *p = lct__find_put(rq);
  if (p == NULL)
    return;
  uint64_t off = rq->hdr->has_offset ? rq->hdr->offset : UINT64_MAX;
  size_t len = rq->frame.payload_len;
  if (!p->shared && off != p->received) {
    lct__reply_error(rq, LCT_EINVAL, "chunk at offset %" PRIu64 "; the put expects %" PRIu64,
                     off, p->received);
    return;
  }
  if (off > p->decl.raw_bytes) {
    lct__reply_error(rq, LCT_EINVAL, "chunk at offset %" PRIu64 " beyond the tensor's %" PRIu64 " bytes", off,
                     p->decl.raw_bytes);
    return;
  }
  uint64_t raw_len = len, seg = p->seg;
  if (p->encoded && len > 0) {
    lct__blob_layout lay = {&p->decl, rq->srv->cfg.segment_size, p->seg};
    size_t n;
    char why[256];
    int rc = lct__blobs_walk(&lay, off, rq->frame.payload, len, NULL, 0, &n, &raw_len, why, sizeof why);
    if (rc != 0) {
      lct__reply_error(rq, rc, "%s", why);
      return;
    }
    seg = lay.seg; /* the put's segment size, once this chunk is taken */
  }
  if (raw_len > p->decl.raw_bytes - off || raw_len > p->decl.raw_bytes - p->received) {
    lct__reply_error(rq, LCT_ESIZE, "chunk of %" PRIu64 " bytes at %" PRIu64 " runs past %" PRIu64, raw_len,
                     off, p->decl.raw_bytes);
    return;
  }
  /* A shared put's chunks come in any order, each once: with no overlap, the received bytes cover the
   * tensor exactly once they add up to it. */
  const lct__piece *q = p->shared && raw_len > 0 ? lct__staging_overlap(p, off, raw_len) : NULL;
  if (q != NULL) {
    lct__reply_error(rq, LCT_EINVAL, "chunk at offset %" PRIu64 " overlaps the one received at %" PRIu64, off,
                     q->offset);
    return;
  }
  if (len > 0) {
    /* The put keeps the message: no copy of the payload. */
    size_t msg_bytes = LCT_WIRE_PREFIX_BYTES + rq->frame.header_len + len;
    if (lct__staging_add(rq->srv->staging, p, rq->msg, msg_bytes, rq->frame.payload, len, off, raw_len) != 0) {
      lct__reply_error(rq, LCT_ENOMEM, "staging full: %" PRIu64 " of %" PRIu64 " bytes held; this chunk's "
                       "message needs %zu beyond its payload", rq->srv->stats.staging_bytes,
                       rq->srv->cfg.staging_memory, msg_bytes - len);
      return;
    }
    rq->msg = NULL;
    lct__staging_touch(rq->srv->staging, p); /* only progress keeps a put alive: empty chunks do not */
  }
  p->seg = seg;
  Lctpb__Reply rp = LCTPB__REPLY__INIT;
  rp.has_received = 1;
  rp.received = p->received;
  lct__reply(rq, &rp, NULL, 0);
}

/* A committed encoded put's blobs, walked again in raw order: they must
 * cover the tensor once, in one layout. */
static void lct__commit_encoded(lct__request *rq, lct__pending *p) {
  size_t cap = lct__blobs_max(&p->decl), n = 0;
  lct__blob_ref *refs = malloc(cap * sizeof *refs);
  if (refs == NULL) {
    lct__commit_take(rq, p);
    lct__reply_error(rq, LCT_ENOMEM, "out of memory for the blobs' table");
    return;
  }
  lct__blob_layout lay = {&p->decl, rq->srv->cfg.segment_size, 0};
  uint64_t at = 0;
  char why[256];
  int rc = 0;
  for (size_t i = 0; i < p->n_pieces && rc == 0; i++) {
    size_t k;
    uint64_t covered;
    if (p->pieces[i].offset != at) {
      rc = p->pieces[i].offset > at ? LCT_ESIZE : LCT_EINVAL;
      snprintf(why, sizeof why, "chunks %s at raw offset %" PRIu64, p->pieces[i].offset > at ? "leave a gap" : "overlap",
               p->pieces[i].offset > at ? at : p->pieces[i].offset);
      break;
    }
    rc = lct__blobs_walk(&lay, at, p->pieces[i].bytes, p->pieces[i].len, refs + n, cap - n, &k, &covered, why,
                         sizeof why);
    n += k;
    at += covered;
  }
  if (rc == 0 && (n == 0 || at != p->decl.raw_bytes)) {
    rc = LCT_ESIZE;
    snprintf(why, sizeof why, "the blobs hold %" PRIu64 " raw bytes; dtype and shape make %" PRIu64, at,
             p->decl.raw_bytes);
  }
  if (rc != 0) {
    lct__commit_take(rq, p); /* blobs that cannot be stored end the put */
    lct__reply_error(rq, rc, "%s", why);
  } else {
    lct__put_begin_accept(rq, p->key, p->key_len, &p->decl, lay.seg ? lay.seg : rq->srv->cfg.segment_size, refs,
                          n, p);
  }
  free(refs);
}

void lct__op_put_commit(lct__request *rq) {
  lct__pending *p = lct__find_put(rq);
  if (p == NULL)
    return;
  if (p->received != p->decl.raw_bytes) {
    lct__reply_error(rq, LCT_ESIZE, "put incomplete: %" PRIu64 " of %" PRIu64 " bytes received",
                     p->received, p->decl.raw_bytes);
    return;
  }
  if (p->encoded) {
    lct__commit_encoded(rq, p); /* its quota depends on the blobs' segment size */
    return;
  }
  if (!lct__quota_or_reply(rq, p->key, p->key_len, &p->decl, 0, 1))
    return;
  lct__commit_take(rq, p);
  lct__put_src src = {NULL, p->pieces, p->n_pieces};
  lct__put_begin_encode(rq, p->key, p->key_len, &p->decl, &src);
}

void lct__op_put_abort(lct__request *rq) {
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

/* GET with encoded: the stored blobs of whole segments from off, as many as
 * a frame holds and length covers (at least one). */
static void lct__op_get_encoded(lct__request *rq, lct__entry *e, uint64_t off) {
  lct__server *srv = rq->srv;
  const Lctpb__Request *h = rq->hdr;
  uint64_t stride = e->segments[0].raw_bytes; /* every segment but the last holds as many */
  size_t first = stride ? (size_t)(off / stride) : 0;
  if ((stride != 0 && off % stride != 0) || (stride == 0 && off != 0)) {
    lct__reply_error(rq, LCT_EINVAL, "offset %" PRIu64 " is not where a segment starts (every %" PRIu64 " bytes)",
                     off, stride);
    return;
  }
  uint64_t want = h->has_length ? h->length : UINT64_MAX, covered = 0, bytes = 0;
  size_t n = 0;
  while (first + n < e->n_segments &&
         (n == 0 || (covered < want && e->segments[first + n].raw_bytes <= want - covered))) {
    const lct__segment *sg = &e->segments[first + n];
    if (bytes + sg->blob_bytes > srv->cfg.frame_size) {
      if (n == 0) {
        lct__reply_error(rq, LCT_E2BIG, "the segment at %" PRIu64 " is stored in %zu bytes, above the frame "
                         "size %" PRIu64 ": get it decoded", off, sg->blob_bytes, srv->cfg.frame_size);
        return;
      }
      break;
    }
    bytes += sg->blob_bytes;
    covered += sg->raw_bytes;
    n++;
  }
  Lctpb__Reply rp = LCTPB__REPLY__INIT;
  Lctpb__TensorMeta m;
  lct__meta_of(e, &m);
  rp.meta = &m;
  rp.has_offset = rp.has_length = 1;
  rp.offset = off;
  rp.length = covered;
  uint8_t *dst;
  int rc = lct__reply_alloc(srv, &rp, (size_t)bytes, &rq->reply_msg, &rq->reply_len, &dst);
  if (rc != 0) {
    lct__reply_error(rq, rc, "cannot allocate a %" PRIu64 "-byte reply", bytes);
    return;
  }
  if (!lct__request_hold(rq, rq->reply_len))
    return;
  if (n == 0) {
    lct__get_done(rq, 0);
    return;
  }
  if ((rc = lct__blobs_read_start(srv, e, first, n, dst, lct__get_done, rq)) != 0)
    lct__reply_error(rq, rc, "cannot start reading the blobs");
}

void lct__op_get(lct__request *rq) {
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
  if (lct__encoded(rq)) {
    lct__op_get_encoded(rq, e, off);
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
  int rc = lct__reply_alloc(srv, &rp, (size_t)len, &rq->reply_msg, &rq->reply_len, &dst);
  if (rc != 0) {
    lct__reply_error(rq, rc, "cannot allocate a %" PRIu64 "-byte reply", len);
    return;
  }
  if (!lct__request_hold(rq, rq->reply_len)) /* refused before the decode has touched its pages */
    return;
  if (len == 0) {
    lct__get_done(rq, 0);
    return;
  }
  if ((rc = lct__get_start(srv, e, off, len, dst, lct__get_done, rq)) != 0)
    lct__reply_error(rq, rc, "cannot start the decode");
}

void lct__op_delete(lct__request *rq) {
  if (!lct__need_key(rq))
    return;
  if (lct__store_remove(rq->srv->store, rq->hdr->key.data, rq->hdr->key.len) != 0) {
    lct__reply_error(rq, LCT_ENOENT, "no such key");
    return;
  }
  Lctpb__Reply rp = LCTPB__REPLY__INIT;
  lct__reply(rq, &rp, NULL, 0);
}

void lct__op_stat(lct__request *rq) {
  if (!lct__need_key(rq))
    return;
  lct__entry *e;
  char why[96];
  int rc = lct__entry_to_read(rq->srv, &rq->hdr->key, 0, 0, &e, why, sizeof why);
  if (rc != 0) {
    lct__reply_error(rq, rc, "%s", why);
    return;
  }
  lct__reply_meta(rq, e);
}

/* The prefix a LIST lists: the request's, within the sender's tenant's
 * (which a shorter one widens to); 0, or LCT_EACCES with why when the two
 * part. */
static int lct__list_prefix(const lct__request *rq, ProtobufCBinaryData *prefix, char *why, size_t cap) {
  const Lctpb__Request *h = rq->hdr;
  const lct__tenant *t = rq->tenant;
  *prefix = h->has_prefix ? h->prefix : (ProtobufCBinaryData){0, NULL};
  if (t == NULL || lct__tenant_has(t, prefix->data, prefix->len))
    return 0;
  if (prefix->len < t->prefix_len && (prefix->len == 0 || memcmp(prefix->data, t->prefix, prefix->len) == 0)) {
    *prefix = (ProtobufCBinaryData){t->prefix_len, t->prefix};
    return 0;
  }
  return lct__key_allowed(rq, "prefix", prefix->data, prefix->len, why, cap);
}

void lct__op_list(lct__request *rq) {
  Lctpb__Request *h = rq->hdr;
  ProtobufCBinaryData prefix;
  char why[320];
  if (lct__list_prefix(rq, &prefix, why, sizeof why) != 0) {
    lct__reply_error(rq, LCT_EACCES, "%s", why);
    return;
  }
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
  size_t n = lct__store_list(rq->srv->store, prefix.data, prefix.len,
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

/* ---- stats, save, ping ------------------------------------------------- */

/* STATS for a tenant: what it holds against what it may; the server-wide
 * counters would tell it of the others, so they are 0. */
static void lct__op_stats_tenant(lct__request *rq) {
  const lct__tenant *t = rq->tenant;
  size_t len;
  char *text = lct__access_metrics(rq->access, t, &len);
  if (text == NULL) {
    lct__reply_error(rq, LCT_ENOMEM, "out of memory rendering stats");
    return;
  }
  lct__stats st = {0};
  st.tensors = t->usage->tensors;
  st.raw_bytes = t->usage->raw_bytes;
  st.stored_bytes = t->usage->stored_bytes;
  st.pool_capacity = t->quota != LCT__QUOTA_NONE ? t->quota : lct__pool_capacity(rq->srv->pool);
  st.pool_used = t->usage->stored_bytes + t->usage->pending;
  Lctpb__StatsSummary sum;
  lct__stats_summarize(&st, &sum);
  Lctpb__Reply rp = LCTPB__REPLY__INIT;
  rp.stats = &sum;
  lct__reply(rq, &rp, text, len);
  free(text);
}

void lct__op_stats(lct__request *rq) {
  lct__server *srv = rq->srv;
  lct__stats *st = &srv->stats;
  if (rq->tenant != NULL) {
    lct__op_stats_tenant(rq);
    return;
  }
  size_t len;
  char *text = lct__server_stats_text(srv, &len);
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

static void lct__save_done(void *arg, int rc, const lct__persist_result *r) {
  lct__request *rq = arg;
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

void lct__op_save(lct__request *rq) {
  if (rq->tenant != NULL) {
    lct__reply_error(rq, LCT_EACCES, "SAVE is not for tenants: it writes every tenant's tensors; lctd saves "
                     "them every save_interval and when it stops");
    return;
  }
  if (*rq->srv->cfg.persist_dir == '\0') {
    lct__reply_error(rq, LCT_ECONFIG, "this lctd has no persist_dir: nothing to save to");
    return;
  }
  if (lct__save_request(rq->srv, lct__save_done, rq) != 0)
    lct__reply_error(rq, LCT_ENOMEM, "out of memory queueing a save");
}

void lct__op_ping(lct__request *rq) {
  Lctpb__ServerInfo info = LCTPB__SERVER_INFO__INIT;
  info.protocol = LCT_WIRE_VERSION;
  info.server = "lctd " LCT_VERSION;
  info.backend = (char *)rq->srv->backend_name;
  info.frame_bytes = rq->srv->cfg.frame_size;
  info.key_max = (uint32_t)rq->srv->cfg.max_key_length;
  info.list_max = LCT_LIST_MAX;
  info.has_instance = 1;
  info.instance = rq->srv->instance;
  info.has_segment_bytes = 1;
  info.segment_bytes = rq->srv->cfg.segment_size;
  Lctpb__Reply rp = LCTPB__REPLY__INIT;
  rp.info = &info;
  lct__reply(rq, &rp, NULL, 0);
}

