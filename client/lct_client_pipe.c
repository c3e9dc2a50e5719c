/* lct_client_pipe.c — liblct's pipelined transfers: frames of large tensors with several requests in flight, encoded tensors (blobs sent and received as stored), put streams. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "lct_checksum.h"
#include "lct_client_internal.h"
#include "lct_codec.h" /* the format's sizes only: liblct codes nothing */

/* ---- the window of requests in flight ----------------------------------- */

void lct__window_init(const lct_client *c, lct__window *w) {
  memset(w, 0, sizeof *w);
  w->cap = LCT__WINDOW_REQUESTS * (size_t)c->connections;
  w->cap_bytes = (uint64_t)LCT__WINDOW_BYTES * (uint64_t)c->connections;
}

/* Takes one reply of those in flight; *lost when none came (the connection went, and with it the
 * requests in flight: the window is emptied). */
static int lct__window_take(lct_client *c, lct__window *w, lct__take_fn take, void *arg, int *lost) {
  size_t slot;
  lct__reply r;
  int rc = lct__collect(c, w->ids, w->cap, &slot, &r);
  *lost = rc != 0;
  if (rc != 0) {
    memset(w->ids, 0, sizeof w->ids);
    w->n = 0;
    w->in_bytes = 0;
    w->lost = rc;
    return rc;
  }
  w->ids[slot] = 0;
  w->n--;
  w->in_bytes -= w->bytes[slot];
  rc = take != NULL ? take(arg, slot, &r) : lct__reply_status(c, &r);
  lct__reply_free(&r);
  return rc;
}

int lct__window_post(lct_client *c, lct__window *w, Lctpb__Request *rq, const void *payload, size_t plen,
                     uint64_t bytes, lct__take_fn take, void *arg, size_t *slot) {
  int rc;
  /* One request alone may exceed the bytes: lctd never refuses a connection's only one for its size. */
  int lost;
  while (w->n > 0 && (w->n == w->cap || w->in_bytes + bytes > w->cap_bytes))
    if ((rc = lct__window_take(c, w, take, arg, &lost)) != 0)
      return rc; /* the caller drains the rest */
  size_t i = 0;
  while (w->ids[i] != 0)
    i++;
  if ((rc = lct__post(c, rq, payload, plen, &w->ids[i])) != 0) {
    w->ids[i] = 0;
    return rc;
  }
  w->bytes[i] = bytes;
  w->n++;
  w->in_bytes += bytes;
  *slot = i;
  return 0;
}

int lct__window_drain(lct_client *c, lct__window *w, lct__take_fn take, void *arg) {
  /* Every reply is taken, whatever failed: a lane left with a request in flight would refuse the next. */
  int first = 0, lost = 0;
  while (w->n > 0 && !lost) {
    int rc = lct__window_take(c, w, take, arg, &lost);
    if (first == 0)
      first = rc;
  }
  return first;
}

/* ---- put streams ------------------------------------------------------------ */

struct lct_put_stream {
  lct_client *c;
  Lctpb__Request ch;   /* PUT_CHUNK, PUT_COMMIT, PUT_ABORT of the put */
  lct_dtype dtype;
  int encoded;
  uint64_t raw_bytes;
  uint64_t offset;     /* raw bytes written so far */
  lct__window w;
  int rc;              /* the first error; it ends the stream */
};

int lct_put_stream_open(lct_client *c, const char *key, lct_dtype dtype, const uint64_t *shape, int ndim,
                        uint32_t checksum, int encoded, lct_put_stream **out) {
  Lctpb__Request rq = LCTPB__REQUEST__INIT;
  lct_put_decl d;
  Lctpb__TensorMeta m;
  int rc;
  if (out == NULL)
    return lct__fail(c, LCT_EINVAL, "no stream pointer");
  if ((rc = lct__key_of(c, key, &rq)) != 0 || (rc = lct__put_meta(c, dtype, shape, ndim, &d, &m)) != 0)
    return rc;
  if (encoded && c->segment_bytes == 0)
    return lct__fail(c, LCT_EOP, "this lctd takes no encoded puts (it is older); the put was not sent");
  m.has_checksum = 1;
  m.checksum = checksum;
  rq.op = LCTPB__OP__OP_PUT_BEGIN;
  rq.meta = &m;
  rq.has_encoded = encoded != 0;
  rq.encoded = encoded != 0;
  /* Over several connections the chunks may arrive in any order, on any of them. */
  rq.has_shared = rq.shared = c->connections > 1;
  lct_put_stream *s = calloc(1, sizeof *s);
  if (s == NULL)
    return lct__fail(c, LCT_ENOMEM, "out of memory for a put stream");
  lct__reply r;
  if ((rc = lct__call(c, &rq, NULL, 0, &r)) != 0) {
    free(s);
    return rc;
  }
  if (!r.hdr->has_put_id) {
    lct__reply_free(&r);
    free(s);
    return lct__fail(c, LCT_EPROTO, "put-begin reply without a put id");
  }
  lctpb__request__init(&s->ch);
  s->ch.has_put_id = 1;
  s->ch.put_id = r.hdr->put_id;
  lct__reply_free(&r);
  s->c = c;
  s->dtype = dtype;
  s->encoded = encoded != 0;
  s->raw_bytes = d.raw_bytes;
  lct__window_init(c, &s->w);
  *out = s;
  return 0;
}

/* One PUT_CHUNK of len bytes holding raw bytes from s->offset. */
static int lct__stream_chunk(lct_put_stream *s, const uint8_t *p, size_t len, uint64_t raw) {
  s->ch.op = LCTPB__OP__OP_PUT_CHUNK;
  s->ch.has_offset = 1;
  s->ch.offset = s->offset;
  size_t slot;
  int rc = lct__window_post(s->c, &s->w, &s->ch, p, len, len, NULL, NULL, &slot);
  s->offset += raw;
  return rc;
}

/* The raw bytes the blob at p (len bytes left) holds, and its size; 0 or
 * LCT_EINVAL for what is not a whole blob of the stream's dtype. */
static int lct__blob_sizes(lct_put_stream *s, const uint8_t *p, size_t len, uint64_t *size, uint64_t *raw) {
  uint64_t n;
  if (len < LCT_HEADER_BYTES || memcmp(p, "LCTZ", 4) != 0 || p[5] != (uint8_t)s->dtype)
    return lct__fail(s->c, LCT_EINVAL, "not a blob of dtype %s at raw offset %" PRIu64, lct_dtype_name(s->dtype),
                     s->offset);
  memcpy(&n, p + 8, sizeof n); /* FORMAT.md's header: little-endian, as this host */
  memcpy(size, p + 32, sizeof *size);
  if (*size < LCT_HEADER_BYTES || *size > len || n > UINT64_MAX / 8)
    return lct__fail(s->c, LCT_EINVAL, "blob at raw offset %" PRIu64 " claims %" PRIu64 " bytes; %zu given",
                     s->offset, *size, len);
  *raw = n * lct_dtype_size(s->dtype);
  return 0;
}

int lct_put_stream_write(lct_put_stream *s, const void *bytes, size_t len) {
  if (s == NULL)
    return LCT_EINVAL;
  if (s->rc != 0)
    return s->rc;
  lct_client *c = s->c;
  const uint8_t *p = bytes;
  int rc = 0;
  if (p == NULL && len > 0)
    rc = lct__fail(c, LCT_EINVAL, "no bytes");
  while (rc == 0 && len > 0) {
    size_t n = 0;
    uint64_t raw = 0;
    if (!s->encoded) {
      n = raw = len < c->frame ? len : c->frame;
      if (raw > s->raw_bytes - s->offset)
        rc = lct__fail(c, LCT_ESIZE, "%zu bytes written past the tensor's %" PRIu64, len, s->raw_bytes);
    } else {
      /* Whole blobs, as many as a frame holds. */
      uint64_t size = 0, r = 0;
      while (rc == 0 && n < len && (rc = lct__blob_sizes(s, p + n, len - n, &size, &r)) == 0) {
        if (n + size > c->frame) {
          if (n == 0)
            rc = lct__fail(c, LCT_E2BIG, "a blob of %" PRIu64 " bytes exceeds the frame (%zu bytes): encode in "
                           "smaller segments", size, c->frame);
          break;
        }
        n += (size_t)size;
        raw += r;
      }
    }
    if (rc == 0)
      rc = lct__stream_chunk(s, p, n, raw);
    p += n;
    len -= n;
  }
  s->rc = rc;
  return rc;
}

/* Whether rc says lctd did not answer in time or the connection is gone: no further request would fare better. */
static int lct__unreachable(int rc) { return rc == LCT_ETIMEDOUT || rc == LCT_ECONN || rc == LCT_ERESTARTED; }

void lct_put_stream_abort(lct_put_stream *s) {
  if (s == NULL)
    return;
  lct_client *c = s->c;
  char saved[sizeof c->err];
  memcpy(saved, c->err, sizeof saved);
  /* Best effort: free lctd's staging now rather than at put-timeout; not where lctd has just failed to
   * answer or is gone, so that an abort waits at most one timeout. */
  lct__window_drain(c, &s->w, NULL, NULL);
  if (s->w.lost == 0 && !lct__unreachable(s->rc)) {
    lct__reply r;
    s->ch.op = LCTPB__OP__OP_PUT_ABORT;
    s->ch.has_offset = 0;
    if (lct__call(c, &s->ch, NULL, 0, &r) == 0)
      lct__reply_free(&r);
  }
  memcpy(c->err, saved, sizeof saved);
  free(s);
}

int lct_put_stream_commit(lct_put_stream *s, lct_tensor_info *info) {
  if (s == NULL)
    return LCT_EINVAL;
  lct_client *c = s->c;
  int drained = lct__window_drain(c, &s->w, NULL, NULL);
  int rc = s->rc != 0 ? s->rc : drained;
  if (rc == 0 && s->offset != s->raw_bytes)
    rc = lct__fail(c, LCT_ESIZE, "%" PRIu64 " of the tensor's %" PRIu64 " raw bytes written", s->offset,
                   s->raw_bytes);
  lct__reply r;
  if (rc == 0) {
    s->ch.op = LCTPB__OP__OP_PUT_COMMIT;
    s->ch.has_offset = 0;
    rc = lct__call(c, &s->ch, NULL, 0, &r);
  }
  if (rc != 0) {
    s->rc = rc;
    lct_put_stream_abort(s);
    return rc;
  }
  if (info != NULL)
    lct__info_of(r.hdr->meta, info);
  lct__reply_free(&r);
  free(s);
  return 0;
}

/* ---- encoded tensors ---------------------------------------------------- */

uint32_t lct_checksum(uint32_t crc, const void *bytes, size_t len) { return lct_crc32c(crc, bytes, len); }

uint64_t lct_segment_bytes(const lct_client *c) {
  if (c == NULL || c->segment_bytes == 0)
    return 0;
  /* Lowered until a blob of the dtype with the most chunks (one byte per element) surely fits a frame. */
  uint64_t seg = c->segment_bytes;
  while (seg > (64 << 10) && LCT_ENCODE_BOUND(seg, 1) > c->frame)
    seg -= 64 << 10;
  return seg;
}

size_t lct_frame_bytes(const lct_client *c) { return c != NULL ? c->frame : 0; }

int lct_put_encoded(lct_client *c, const char *key, lct_dtype dtype, const uint64_t *shape, int ndim,
                    uint32_t checksum, const void *blobs, size_t len, lct_tensor_info *info) {
  if (blobs == NULL && len > 0)
    return lct__fail(c, LCT_EINVAL, "no blobs");
  if (c->segment_bytes == 0)
    return lct__fail(c, LCT_EOP, "this lctd takes no encoded puts (it is older); the put was not sent");
  if (len <= c->frame) {
    Lctpb__Request rq = LCTPB__REQUEST__INIT;
    lct_put_decl d;
    Lctpb__TensorMeta m;
    int rc;
    if ((rc = lct__key_of(c, key, &rq)) != 0 || (rc = lct__put_meta(c, dtype, shape, ndim, &d, &m)) != 0)
      return rc;
    m.has_checksum = 1;
    m.checksum = checksum;
    rq.op = LCTPB__OP__OP_PUT;
    rq.meta = &m;
    rq.has_encoded = rq.encoded = 1;
    lct__reply r;
    if ((rc = lct__call(c, &rq, blobs, len, &r)) != 0)
      return rc;
    if (info != NULL)
      lct__info_of(r.hdr->meta, info);
    lct__reply_free(&r);
    return 0;
  }
  lct_put_stream *s;
  int rc = lct_put_stream_open(c, key, dtype, shape, ndim, checksum, 1, &s);
  if (rc != 0)
    return rc;
  if ((rc = lct_put_stream_write(s, blobs, len)) != 0) {
    lct_put_stream_abort(s);
    return rc;
  }
  return lct_put_stream_commit(s, info);
}

/* An encoded get's replies, kept in order until they are joined. */
typedef struct lct__blob_get {
  lct_client *c;
  void **msgs;             /* per range: the reply message, until joined */
  const uint8_t **payload;
  size_t *plen;
  uint64_t *offsets;       /* per range: the raw offset asked for */
  uint64_t stride;         /* raw bytes per range */
  uint64_t version, raw_bytes;
  size_t *slot_range;      /* per window slot: the range its request asked for */
} lct__blob_get;

static int lct__blob_take(void *arg, size_t slot, lct__reply *r) {
  lct__blob_get *g = arg;
  size_t k = g->slot_range[slot];
  int rc = lct__reply_status(g->c, r);
  if (rc != 0)
    return rc;
  const Lctpb__TensorMeta *m = r->hdr->meta;
  uint64_t want = g->raw_bytes - g->offsets[k] < g->stride ? g->raw_bytes - g->offsets[k] : g->stride;
  if (m == NULL || m->version != g->version || !r->hdr->has_offset || r->hdr->offset != g->offsets[k] ||
      !r->hdr->has_length || r->hdr->length != want)
    return lct__fail(g->c, LCT_EPROTO, "reply does not match the encoded get");
  g->msgs[k] = r->msg;
  g->payload[k] = r->payload;
  g->plen[k] = r->payload_len;
  r->msg = NULL; /* kept until joined */
  return 0;
}

int lct_get_encoded(lct_client *c, const char *key, void **blobs, size_t *len, lct_tensor_info *info) {
  Lctpb__Request rq = LCTPB__REQUEST__INIT;
  if (blobs == NULL || len == NULL || info == NULL)
    return lct__fail(c, LCT_EINVAL, "no output pointer");
  int rc = lct__key_of(c, key, &rq);
  if (rc != 0)
    return rc;
  if (c->segment_bytes == 0)
    return lct__fail(c, LCT_EOP, "this lctd sends no encoded tensors (it is older)");
  rq.op = LCTPB__OP__OP_GET;
  rq.has_encoded = rq.encoded = 1;
  rq.has_offset = 1;
  /* The first reply: whole segments within 63/64 of a frame of raw bytes, which their blobs' headers
   * cannot take past a frame (FORMAT.md's bound); it shows the layout. */
  rq.has_length = 1;
  rq.length = c->frame - c->frame / 64;
  lct__reply first;
  rc = lct__call(c, &rq, NULL, 0, &first);
  if (rc != 0)
    return rc;
  const Lctpb__TensorMeta *m = first.hdr->meta;
  if (m == NULL || !first.hdr->has_length || first.hdr->offset != 0 || first.hdr->length > m->raw_bytes) {
    lct__reply_free(&first);
    return lct__fail(c, LCT_EPROTO, "reply does not match the encoded get");
  }
  lct__info_of(m, info);
  lct__blob_get g = {.c = c, .version = m->version, .raw_bytes = m->raw_bytes};
  /* Later ranges, pipelined, each of as many segments as a frame surely holds. */
  uint64_t seg = 0, esize = lct_dtype_size((lct_dtype)m->dtype), rest = g.raw_bytes - first.hdr->length;
  if (first.payload_len >= LCT_HEADER_BYTES) {
    memcpy(&seg, first.payload + 8, sizeof seg); /* the first blob's n_elems */
    seg = esize != 0 && seg <= UINT64_MAX / esize ? seg * esize : 0;
  }
  /* The layout lct.h promises: whole segments, multiples of 64 KiB of at most lctd's segment size. */
  if (rest > 0 && (seg == 0 || seg % (64 << 10) != 0 || seg > c->segment_bytes || first.hdr->length % seg != 0)) {
    lct__reply_free(&first);
    return lct__fail(c, LCT_EPROTO, "reply does not match the encoded get");
  }
  size_t n = 1;
  if (rest > 0) {
    uint64_t per = (uint64_t)c->frame / LCT_ENCODE_BOUND(seg / esize, esize);
    g.stride = (per > 0 ? per : 1) * seg;
    n += (size_t)((rest + g.stride - 1) / g.stride);
  }
  g.msgs = calloc(n, sizeof *g.msgs);
  g.payload = calloc(n, sizeof *g.payload);
  g.plen = calloc(n, sizeof *g.plen);
  g.offsets = calloc(n, sizeof *g.offsets);
  g.slot_range = calloc(LCT__WINDOW_REQUESTS * LCT__CONNECTIONS_MAX, sizeof *g.slot_range);
  if (g.msgs == NULL || g.payload == NULL || g.plen == NULL || g.offsets == NULL || g.slot_range == NULL)
    rc = lct__fail(c, LCT_ENOMEM, "out of memory for an encoded get");
  uint64_t first_len = first.hdr->length;
  if (rc == 0) {
    g.msgs[0] = first.msg;
    g.payload[0] = first.payload;
    g.plen[0] = first.payload_len;
    first.msg = NULL;
  }
  lct__reply_free(&first);
  /* The later ranges, pipelined: each of the first's raw length, which a frame held. */
  lct__window w;
  lct__window_init(c, &w);
  rq.has_version = 1;
  rq.version = g.version;
  rq.length = g.stride;
  for (size_t k = 1; k < n && rc == 0; k++) {
    size_t slot;
    g.offsets[k] = first_len + (k - 1) * g.stride;
    rq.offset = g.offsets[k];
    if ((rc = lct__window_post(c, &w, &rq, NULL, 0, c->frame, lct__blob_take, &g, &slot)) == 0)
      g.slot_range[slot] = k;
  }
  int drained = lct__window_drain(c, &w, lct__blob_take, &g);
  if (rc == 0)
    rc = drained;
  size_t total = 0;
  for (size_t k = 0; k < n && rc == 0; k++)
    total += g.plen[k];
  uint8_t *out = rc == 0 ? malloc(total ? total : 1) : NULL;
  if (rc == 0 && out == NULL)
    rc = lct__fail(c, LCT_ENOMEM, "cannot allocate %zu bytes", total);
  for (size_t k = 0, at = 0; k < n && rc == 0; k++) {
    memcpy(out + at, g.payload[k], g.plen[k]);
    at += g.plen[k];
  }
  for (size_t k = 0; g.msgs != NULL && k < n; k++)
    if (g.msgs[k] != NULL) {
      lct__reply dead = {.msg = g.msgs[k]};
      lct__reply_free(&dead);
    }
  free(g.msgs), free(g.payload), free(g.plen), free(g.offsets), free(g.slot_range);
  if (rc == 0) {
    *blobs = out;
    *len = total;
  }
  return rc;
}
