/* snapshot_file.c — the layout of one tensor's snapshot file in persist_dir: the bytes a save writes and the checked parse a restore reads. */
#include "snapshot_file.h"

#include <string.h>

#include "lct_checksum.h"

/* File layout (deploy/README.md), integers little-endian:
 *   0   "LCTS"             magic
 *   4   u32 format         LCT__SNAPSHOT_FORMAT, or 1
 *   8   u32 key_len        1..LCT_KEY_MAX
 *   12  u32 dtype
 *   16  u32 ndim           0..LCT_MAX_DIMS
 *   20  u32 n_segments     >= 1
 *   24  u64 shape[8]
 *   88  u64 raw_bytes
 *   96  u64 version
 *   104 u32 checksum       CRC-32C of the raw bytes
 *   108 u32 flags          bit 0: a codebook follows the key; bit 1: it is stale (0 in format 1)
 *   112 key,
 *       with a codebook: f64 expected code bits per element (its IEEE-754
 *       bits), then the dtype's lct_codebook_bytes of code lengths as a
 *       blob holds them (proto/FORMAT.md),
 *       then n_segments x {u64 raw_offset, u64 raw_bytes, u64 blob_bytes},
 *       then the blobs (proto/FORMAT.md) back to back,
 *   end u32 CRC-32C of every byte before it. */
#define LCT__SNAPSHOT_MAGIC "LCTS"
#define LCT__FLAG_CODEBOOK 1u
#define LCT__FLAG_STALE 2u

static void lct__put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}
static void lct__put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; i++)
    p[i] = (uint8_t)(v >> (8 * i));
}
static uint32_t lct__get32(const uint8_t *p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}
static uint64_t lct__get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--)
    v = v << 8 | p[i];
  return v;
}

size_t lct__snapshot_head(const lct__entry *e, uint8_t *out) {
  memset(out, 0, LCT__SNAPSHOT_HEADER);
  memcpy(out, LCT__SNAPSHOT_MAGIC, 4);
  lct__put32(out + 4, LCT__SNAPSHOT_FORMAT);
  lct__put32(out + 8, (uint32_t)e->key_len);
  lct__put32(out + 12, (uint32_t)e->dtype);
  lct__put32(out + 16, (uint32_t)e->ndim);
  lct__put32(out + 20, (uint32_t)e->n_segments);
  for (int i = 0; i < LCT_MAX_DIMS; i++)
    lct__put64(out + 24 + 8 * i, e->shape[i]);
  lct__put64(out + 88, e->raw_bytes);
  lct__put64(out + 96, e->version);
  lct__put32(out + 104, e->checksum);
  size_t n = LCT__SNAPSHOT_HEADER;
  memcpy(out + n, e->key, e->key_len);
  n += e->key_len;
  size_t cb_bytes = lct_codebook_bytes(e->dtype);
  /* A codebook that does not serialize (none is built so) is left out: the
   * key's next put then builds one. */
  if (e->has_codebook && cb_bytes > 0 && lct_codebook_serialize(&e->codebook, out + n + 8, cb_bytes) == 0) {
    lct__put32(out + 108, LCT__FLAG_CODEBOOK | (e->codebook_stale ? LCT__FLAG_STALE : 0));
    uint64_t bits;
    memcpy(&bits, &e->codebook.expected_bits_per_elem, 8);
    lct__put64(out + n, bits);
    n += 8 + cb_bytes;
  }
  return n;
}

void lct__snapshot_row_write(const lct__segment *sg, uint8_t out[LCT__SNAPSHOT_ROW]) {
  lct__put64(out, sg->raw_offset);
  lct__put64(out + 8, sg->raw_bytes);
  lct__put64(out + 16, sg->blob_bytes);
}

lct__snapshot_row lct__snapshot_row_read(const lct__snapshot_file *f, uint32_t i) {
  const uint8_t *p = f->table + (size_t)i * LCT__SNAPSHOT_ROW;
  return (lct__snapshot_row){lct__get64(p), lct__get64(p + 8), lct__get64(p + 16)};
}

/* The codebook after the key: *at advanced past it. */
static int lct__parse_codebook(const uint8_t *bytes, size_t *at, size_t end, lct__snapshot_file *f) {
  size_t cb_bytes = lct_codebook_bytes(f->decl.dtype);
  if (cb_bytes == 0 || end - *at < 8 + cb_bytes)
    return LCT_ECORRUPT;
  uint64_t bits = lct__get64(bytes + *at);
  double expected;
  memcpy(&expected, &bits, 8);
  if (!(expected >= 0 && expected <= LCT_MAX_CODE_LEN)) /* NaN too */
    return LCT_ECORRUPT;
  if (lct_codebook_parse(f->decl.dtype, bytes + *at + 8, cb_bytes, &f->codebook) != 0)
    return LCT_ECORRUPT;
  f->codebook.expected_bits_per_elem = expected;
  *at += 8 + cb_bytes;
  return 0;
}

int lct__snapshot_parse(const uint8_t *bytes, size_t len, lct__snapshot_file *f, const char **why) {
  memset(f, 0, sizeof *f);
  *why = "truncated";
  if (len < LCT__SNAPSHOT_HEADER + 4)
    return LCT_ECORRUPT;
  size_t end = len - 4; /* the CRC-32C follows what it covers */
  *why = "bad header";
  f->format = lct__get32(bytes + 4);
  f->key_len = lct__get32(bytes + 8);
  uint32_t dtype = lct__get32(bytes + 12), ndim = lct__get32(bytes + 16), flags = lct__get32(bytes + 108);
  f->n_segments = lct__get32(bytes + 20);
  uint32_t known = f->format == 1 ? 0 : LCT__FLAG_CODEBOOK | LCT__FLAG_STALE;
  if (memcmp(bytes, LCT__SNAPSHOT_MAGIC, 4) != 0 || (f->format != 1 && f->format != LCT__SNAPSHOT_FORMAT) ||
      (flags & ~known) != 0 || (flags == LCT__FLAG_STALE) || f->key_len == 0 || f->key_len > LCT_KEY_MAX ||
      ndim > LCT_MAX_DIMS || f->n_segments == 0)
    return LCT_ECORRUPT;
  uint64_t shape[LCT_MAX_DIMS];
  for (int i = 0; i < LCT_MAX_DIMS; i++)
    shape[i] = lct__get64(bytes + 24 + 8 * i);
  char bad_decl[160];
  if (dtype > INT32_MAX || lct_put_decl_make((int)dtype, shape, (int)ndim, &f->decl, bad_decl, sizeof bad_decl) != 0 ||
      f->decl.raw_bytes != lct__get64(bytes + 88))
    return LCT_ECORRUPT;
  f->version = lct__get64(bytes + 96);
  f->checksum = lct__get32(bytes + 104);
  *why = "truncated";
  if (end - LCT__SNAPSHOT_HEADER < f->key_len)
    return LCT_ECORRUPT;
  f->key = bytes + LCT__SNAPSHOT_HEADER;
  size_t at = LCT__SNAPSHOT_HEADER + f->key_len;
  *why = "bad key";
  if (lct_wire_key_check(f->key, f->key_len) != 0)
    return LCT_ECORRUPT;
  *why = "version out of range";
  if (f->version == 0 || f->version >= UINT64_C(1) << 63) /* later versions count on from it */
    return LCT_ECORRUPT;
  f->has_codebook = (flags & LCT__FLAG_CODEBOOK) != 0;
  f->codebook_stale = (flags & LCT__FLAG_STALE) != 0;
  *why = "bad codebook";
  if (f->has_codebook && lct__parse_codebook(bytes, &at, end, f) != 0)
    return LCT_ECORRUPT;
  *why = "truncated";
  if ((end - at) / LCT__SNAPSHOT_ROW < f->n_segments)
    return LCT_ECORRUPT;
  f->table = bytes + at;
  at += (size_t)f->n_segments * LCT__SNAPSHOT_ROW;
  f->blobs = bytes + at;
  /* Segments: contiguous, all of the first one's size but a shorter last
   * one (what a ranged get relies on), blobs filling the rest exactly. */
  *why = "inconsistent segment table";
  uint64_t raw_off = 0, budget = end - at, width = lct_dtype_size(f->decl.dtype), first = 0;
  for (uint32_t i = 0; i < f->n_segments; i++) {
    lct__snapshot_row r = lct__snapshot_row_read(f, i);
    if (i == 0)
      first = r.raw_bytes;
    int last = i + 1 == f->n_segments;
    if (r.raw_offset != raw_off || r.raw_bytes > f->decl.raw_bytes - raw_off || r.raw_bytes % width != 0 ||
        r.raw_bytes > first || (!last && (r.raw_bytes != first || r.raw_bytes == 0)) || r.blob_bytes > budget)
      return LCT_ECORRUPT;
    raw_off += r.raw_bytes;
    budget -= r.blob_bytes;
  }
  if (raw_off != f->decl.raw_bytes || budget != 0)
    return LCT_ECORRUPT;
  *why = "checksum mismatch";
  if (lct_crc32c(0, bytes, end) != lct__get32(bytes + end))
    return LCT_ECORRUPT;
  return 0;
}
