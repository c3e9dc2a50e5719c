/* entry.c — a stored tensor: its segments of coded bytes in pool memory, reserved before an encode and published after it. */
#include "entry.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "lct_checksum.h"
#include "server.h"

int lct__entry_new(lct__pool *pool, const uint8_t *key, size_t key_len, size_t n_segments, lct__entry **out) {
  lct__entry *e = calloc(1, sizeof *e);
  if (e == NULL)
    return LCT_ENOMEM;
  e->key = malloc(key_len);
  e->segments = calloc(n_segments ? n_segments : 1, sizeof *e->segments);
  if (e->key == NULL || e->segments == NULL) {
    free(e->key);
    free(e->segments);
    free(e);
    return LCT_ENOMEM;
  }
  memcpy(e->key, key, key_len);
  e->key_len = key_len;
  e->n_segments = n_segments;
  e->pool = pool;
  e->refs = 1;
  *out = e;
  return 0;
}

void lct__entry_ref(lct__entry *e) {
  assert(e->refs > 0);
  e->refs++;
}

void lct__entry_unref(lct__entry *e) {
  assert(e->refs > 0);
  if (--e->refs > 0)
    return;
  for (size_t i = 0; i < e->n_segments; i++)
    if (e->segments[i].blob != NULL)
      lct__pool_free(e->pool, e->segments[i].blob, e->segments[i].alloc_bytes);
  free(e->segments);
  free(e->key);
  free(e);
}

uint64_t lct__segment_bytes(const lct__server *srv, uint64_t raw_bytes) {
  const uint64_t align = 64 << 10;
  uint64_t seg = srv->cfg.segment_size, workers = srv->threads > 0 ? (uint64_t)srv->threads : 1;
  uint64_t per = raw_bytes / workers;
  if (per >= seg) /* rounded up below, per could wrap */
    return seg;
  uint64_t spread = (per + align - 1) / align * align;
  if (spread < LCT__SEGMENT_MIN)
    spread = LCT__SEGMENT_MIN;
  return spread < seg ? spread : seg;
}

int lct__entry_declared(lct__pool *pool, const uint8_t *key, size_t key_len, const lct_put_decl *decl,
                        size_t n_segments, lct__entry **out) {
  int rc = lct__entry_new(pool, key, key_len, n_segments, out);
  if (rc != 0)
    return rc;
  lct__entry *e = *out;
  e->dtype = decl->dtype;
  e->ndim = decl->ndim;
  memcpy(e->shape, decl->shape, sizeof e->shape);
  e->n_elems = decl->n_elems;
  e->raw_bytes = decl->raw_bytes;
  return 0;
}

int lct__entry_reserve_bytes(const lct_put_decl *decl, uint64_t seg_bytes, uint64_t *out) {
  if (seg_bytes == 0)
    return LCT_EINVAL; /* a caller's bug, never a division by zero */
  uint64_t esize = lct_dtype_size(decl->dtype);
  uint64_t full = decl->raw_bytes / seg_bytes, tail = decl->raw_bytes % seg_bytes, total;
  if (__builtin_mul_overflow(full, (uint64_t)lct_encode_bound(decl->dtype, seg_bytes / esize), &total) ||
      ((tail != 0 || full == 0) &&
       __builtin_add_overflow(total, (uint64_t)lct_encode_bound(decl->dtype, tail / esize), &total)))
    return LCT_E2BIG;
  *out = total;
  return 0;
}

int lct__entry_reserve(lct__server *srv, const uint8_t *key, size_t key_len, const lct_put_decl *decl,
                       uint64_t seg_bytes, lct__entry **out) {
  size_t esize = lct_dtype_size(decl->dtype);
  assert(esize != 0 && decl->n_elems * esize == decl->raw_bytes && seg_bytes % (64 << 10) == 0);
  uint64_t n_seg = decl->raw_bytes / seg_bytes + (decl->raw_bytes % seg_bytes != 0 || decl->raw_bytes == 0);
  lct__entry *e;
  int rc = lct__entry_declared(srv->pool, key, key_len, decl, n_seg, &e);
  if (rc != 0)
    return rc;
  for (uint64_t i = 0; i < n_seg; i++) {
    lct__segment *sg = &e->segments[i];
    sg->raw_offset = i * seg_bytes;
    sg->raw_bytes = decl->raw_bytes - sg->raw_offset < seg_bytes ? decl->raw_bytes - sg->raw_offset : seg_bytes;
    size_t bound = lct_encode_bound(decl->dtype, sg->raw_bytes / esize);
    if ((rc = lct__pool_alloc(srv->pool, bound, &sg->blob)) != 0) {
      lct__entry_unref(e);
      return rc;
    }
    sg->alloc_bytes = bound;
  }
  *out = e;
  return 0;
}

uint32_t lct__entry_crc(const lct__entry *e) {
  uint32_t crc = 0;
  for (size_t i = 0; i < e->n_segments; i++)
    crc = i == 0 ? e->segments[0].crc : lct_crc32c_combine(crc, e->segments[i].crc, e->segments[i].raw_bytes);
  return crc;
}

void lct__entry_publish(lct__server *srv, lct__entry *e) {
  e->stored_bytes = 0;
  for (size_t i = 0; i < e->n_segments; i++) {
    lct__segment *sg = &e->segments[i];
    sg->alloc_bytes = lct__pool_shrink(srv->pool, &sg->blob, sg->alloc_bytes, sg->blob_bytes);
    e->stored_bytes += sg->blob_bytes;
  }
  lct__pool_settle(srv->pool);
  srv->stats.encoded_bytes += e->raw_bytes;
  lct__store_install(srv->store, e);
}

int lct__stored_decode_error(int rc) {
  switch (rc) {
  case LCT_EVERSION:
  case LCT_ECHECKSUM:
  case LCT_EDTYPE:
  case LCT_ESIZE:
  case LCT_EBUFSIZE:
  case LCT_E2BIG:
    return LCT_ECORRUPT;
  default:
    return rc;
  }
}
