/* lct_codec.c — CPU reference encoder and validating decoder for the LCT blob format. */
#include <string.h>

#include "lct_codec.h"
#include "lct_codec_internal.h"

#define CHECK_MUL 0x9E3779B1u

static inline uint64_t pad4(uint64_t x) { return (x + 3) & ~(uint64_t)3; }
static inline uint64_t pad8(uint64_t x) { return (x + 7) & ~(uint64_t)7; }

static inline void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static inline void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static inline uint16_t get16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

uint32_t lct_check(const void *bytes, size_t len, uint64_t base) {
  const uint8_t *p = bytes;
  uint32_t h = 0, mul = (uint32_t)(2 * base + 1) * CHECK_MUL;
  size_t j = 0;
  for (; j + 4 <= len; j += 4, mul += 2 * CHECK_MUL) h += get32(p + j) * mul;
  if (j < len) {
    uint8_t last[4] = {0};
    memcpy(last, p + j, len - j);
    h += get32(last) * mul;
  }
  return h;
}

static uint64_t chunk_elems(uint64_t n_elems, uint64_t c) {
  uint64_t first = c * LCT_CHUNK_ELEMS;
  return n_elems - first < LCT_CHUNK_ELEMS ? n_elems - first : LCT_CHUNK_ELEMS;
}

static uint64_t table_offset(uint64_t cb_bytes) { return LCT_HEADER_BYTES + pad8(cb_bytes); }

size_t lct_encode_bound(int dtype, uint64_t n_elems) {
  size_t w = lct_dtype_size(dtype);
  if (!w) return 0;
  uint64_t chunks = lct_chunk_count(n_elems), full = n_elems / LCT_CHUNK_ELEMS;
  uint64_t bound = table_offset(lct_codebook_bytes(dtype)) + 16 * chunks + full * pad4((uint64_t)LCT_CHUNK_ELEMS * w);
  if (chunks > full) bound += pad4((n_elems - full * LCT_CHUNK_ELEMS) * w);
  return (size_t)bound;
}

/* ---- encoder ---------------------------------------------------------- */

/* LSB-first bit writer into 32-bit little-endian words. Words past end are
 * counted but not stored, so a caller detects overflow by out > end. */
typedef struct {
  uint8_t *out, *end;
  uint64_t acc;
  unsigned n;
} bit_writer;

static inline void bw_put(bit_writer *w, uint64_t v, unsigned bits) {
  w->acc |= v << w->n;
  w->n += bits;
  if (w->n >= 32) {
    if (w->out < w->end) put32(w->out, (uint32_t)w->acc);
    w->out += 4;
    w->acc >>= 32;
    w->n -= 32;
  }
}

static inline void bw_flush(bit_writer *w) {
  if (w->n) {
    if (w->out < w->end) put32(w->out, (uint32_t)w->acc);
    w->out += 4;
  }
  w->acc = 0;
  w->n = 0;
}

typedef struct {
  lct__layout lay;
  uint32_t enc[LCT_MAX_SYMS]; /* code | len << 16 */
  uint32_t esc;               /* code | len << 16 of ESC */
} encoder;

static size_t encode_raw_chunk(const uint8_t *src, uint64_t n, unsigned w, uint32_t check, uint8_t *dst) {
  uint64_t bytes = n * w, size = LCT_RAW_CHUNK_HEADER + pad4(bytes);
  memset(dst, 0, LCT_RAW_CHUNK_HEADER);
  put32(dst + 4, check);
  memcpy(dst + LCT_RAW_CHUNK_HEADER, src, bytes);
  memset(dst + LCT_RAW_CHUNK_HEADER + bytes, 0, size - LCT_RAW_CHUNK_HEADER - bytes);
  return size;
}

static inline unsigned chunk_trim(const uint8_t *src, uint64_t n, const lct__layout *lay, const unsigned width) {
  uint32_t all = 0, mask = (1u << lay->mant_bits) - 1;
  for (uint64_t i = 0; i < n; i++) all |= lct__load_elem(src, i, width);
  all &= mask;
  return all ? (unsigned)__builtin_ctz(all) : lay->mant_bits;
}

/* Codes one chunk at dst, which has room for its raw form. The width is a
 * compile-time constant in each caller so the element loop specializes. */
static inline size_t encode_chunk(const encoder *e, const uint8_t *src, uint64_t n, uint64_t c,
                                  uint8_t *dst, lct_encode_stats *st, const unsigned width) {
  const lct__layout *lay = &e->lay;
  const uint64_t raw_size = LCT_RAW_CHUNK_HEADER + pad4(n * width);
  const uint32_t check = lct_check(src, n * width, c * (LCT_CHUNK_ELEMS * width / 4));
  const unsigned trim = chunk_trim(src, n, lay, width), keep = lay->mant_bits - trim;
  const uint64_t mant_bytes = pad4((n * keep + 7) / 8);
  if (LCT_CODED_CHUNK_HEADER + mant_bytes >= raw_size) goto raw;

  {
    uint8_t *mant = dst + LCT_CODED_CHUNK_HEADER, *code = mant + mant_bytes;
    bit_writer mw = {mant, mant + mant_bytes, 0, 0};
    bit_writer cw = {code, dst + raw_size, 0, 0};
    const unsigned m = lay->mant_bits, s = lay->sym_bits;
    const uint32_t mmask = (1u << m) - 1;
    uint64_t total_bits = 0, escapes = 0;
    memset(dst, 0, LCT_CODED_CHUNK_HEADER);
    dst[0] = 1;
    dst[1] = (uint8_t)trim;
    put32(dst + 4, check);
    for (unsigned t = 0; t < LCT_LANES; t++) {
      uint64_t lo = (uint64_t)t * LCT_LANE_ELEMS;
      if (lo >= n) break;
      uint64_t hi = lo + LCT_LANE_ELEMS < n ? lo + LCT_LANE_ELEMS : n, lane_bits = 0;
      for (uint64_t i = lo; i < hi; i++) {
        uint32_t x = lct__load_elem(src, i, width), sym = x >> m, ent = e->enc[sym];
        if (__builtin_expect(!(ent >> 16), 0)) {
          bw_put(&cw, e->esc & 0xffff, e->esc >> 16);
          bw_put(&cw, sym, s);
          lane_bits += (e->esc >> 16) + s;
          escapes++;
        } else {
          bw_put(&cw, ent & 0xffff, ent >> 16);
          lane_bits += ent >> 16;
        }
        if (keep) bw_put(&mw, (x & mmask) >> trim, keep);
      }
      put16(dst + 8 + 2 * t, (uint16_t)lane_bits);
      total_bits += lane_bits;
    }
    bw_flush(&mw);
    bw_flush(&cw);
    st->code_bits += total_bits; /* counted for raw fallbacks too: they measure the codebook's fit */
    st->escapes += escapes;
    if (cw.out >= dst + raw_size) goto raw; /* not smaller than raw */
    return (size_t)(cw.out - dst);
  }
raw:
  st->raw_chunks++;
  return encode_raw_chunk(src, n, width, check, dst);
}

static size_t encode_chunk_any(const encoder *e, const uint8_t *src, uint64_t n, uint64_t c, uint8_t *dst,
                               lct_encode_stats *st) {
  switch (e->lay.width) {
  case 4: return encode_chunk(e, src, n, c, dst, st, 4);
  case 2: return encode_chunk(e, src, n, c, dst, st, 2);
  default: return encode_chunk(e, src, n, c, dst, st, 1);
  }
}

static void write_header(uint8_t *dst, int dtype, uint64_t n_elems, uint32_t n_chunks, uint32_t cb_bytes) {
  memset(dst, 0, LCT_HEADER_BYTES);
  memcpy(dst, "LCTZ", 4);
  dst[4] = LCT_FORMAT_VERSION;
  dst[5] = (uint8_t)dtype;
  dst[6] = LCT_MAX_CODE_LEN;
  put64(dst + 8, n_elems);
  put32(dst + 16, n_chunks);
  put32(dst + 20, cb_bytes);
}

/* header_check: bytes [0, 24) then the codebook, as one word sequence. */
static uint32_t header_check(const uint8_t *blob, uint32_t cb_bytes) {
  return lct_check(blob, 24, 0) + lct_check(blob + LCT_HEADER_BYTES, cb_bytes, 6);
}

int lct_encode(int dtype, const lct_codebook *cb, const void *src, uint64_t n_elems, void *dst, size_t cap,
               lct_encode_stats *stats) {
  encoder e;
  int rc = lct__dtype_layout(dtype, &e.lay);
  if (rc) return rc;
  if ((n_elems && !src) || !dst) return LCT_EINVAL;
  if (e.lay.sym_bits && (!cb || cb->dtype != dtype || cb->n_syms != e.lay.n_syms)) return LCT_EINVAL;
  if (n_elems > (UINT64_MAX / 8) || lct_chunk_count(n_elems) > UINT32_MAX) return LCT_E2BIG;
  if (cap < lct_encode_bound(dtype, n_elems)) return LCT_EBUFSIZE;

  const uint32_t cb_bytes = (uint32_t)lct_codebook_bytes(dtype), n_chunks = (uint32_t)lct_chunk_count(n_elems);
  uint8_t *out = dst;
  const uint8_t *in = src;
  lct_encode_stats st = {0};
  write_header(out, dtype, n_elems, n_chunks, cb_bytes);
  uint64_t table = table_offset(cb_bytes);
  memset(out + LCT_HEADER_BYTES, 0, table - LCT_HEADER_BYTES);
  if (cb_bytes) {
    lct_codebook_serialize(cb, out + LCT_HEADER_BYTES, cb_bytes);
    for (unsigned sym = 0; sym < e.lay.n_syms; sym++) e.enc[sym] = cb->code[sym] | (uint32_t)cb->len[sym] << 16;
    e.esc = e.enc[e.lay.n_syms - 1];
  }
  put32(out + 24, header_check(out, cb_bytes));

  uint64_t pos = table + 8 * (uint64_t)n_chunks;
  for (uint64_t c = 0; c < n_chunks; c++) {
    uint64_t n = chunk_elems(n_elems, c);
    const uint8_t *chunk_src = in + c * LCT_CHUNK_ELEMS * e.lay.width;
    put64(out + table + 8 * c, pos);
    if (e.lay.sym_bits) {
      pos += encode_chunk_any(&e, chunk_src, n, c, out + pos, &st);
    } else {
      st.raw_chunks++;
      pos += encode_raw_chunk(chunk_src, n, 1, lct_check(chunk_src, n, c * (LCT_CHUNK_ELEMS / 4)), out + pos);
    }
  }
  put64(out + 32, pos);
  st.blob_bytes = pos;
  if (stats) *stats = st;
  return 0;
}

/* ---- decoder ---------------------------------------------------------- */

int lct_blob_info_read(const void *blob, size_t len, lct_blob_info *info) {
  const uint8_t *p = blob;
  if (!blob || len < LCT_HEADER_BYTES) return LCT_ECORRUPT;
  if (memcmp(p, "LCTZ", 4) != 0) return LCT_ECORRUPT;
  if (p[4] != LCT_FORMAT_VERSION) return LCT_EVERSION;
  lct__layout lay;
  if (lct__dtype_layout(p[5], &lay)) return LCT_ECORRUPT;
  uint64_t n_elems = get64(p + 8);
  uint32_t n_chunks = get32(p + 16), cb_bytes = get32(p + 20);
  if (p[6] != LCT_MAX_CODE_LEN || p[7] || get32(p + 28)) return LCT_ECORRUPT;
  if (n_elems > (UINT64_MAX / 8) || n_chunks != lct_chunk_count(n_elems)) return LCT_ECORRUPT;
  if (cb_bytes != lct_codebook_bytes(p[5]) || get64(p + 32) != len) return LCT_ECORRUPT;
  uint64_t table = table_offset(cb_bytes);
  if (table + 8 * (uint64_t)n_chunks > len) return LCT_ECORRUPT;
  if (get32(p + 24) != header_check(p, cb_bytes)) return LCT_ECORRUPT;
  for (uint64_t i = LCT_HEADER_BYTES + cb_bytes; i < table; i++) {
    if (p[i]) return LCT_ECORRUPT;
  }
  info->dtype = p[5];
  info->n_elems = n_elems;
  info->raw_bytes = n_elems * lay.width;
  info->blob_bytes = len;
  info->n_chunks = n_chunks;
  return 0;
}

/* 64 bits of the stream starting at bit pos; bytes past end read as zero. */
static inline uint64_t peek64(const uint8_t *base, uint64_t end, uint64_t pos) {
  uint64_t byte = pos >> 3;
  if (__builtin_expect(byte + 8 <= end, 1)) return get64(base + byte) >> (pos & 7);
  uint8_t tmp[8] = {0};
  if (byte < end) memcpy(tmp, base + byte, end - byte);
  return get64(tmp) >> (pos & 7);
}

static int zero_bits_after(const uint8_t *sec, uint64_t sec_bytes, uint64_t used_bits) {
  uint64_t byte = used_bits / 8;
  if (used_bits % 8 && (sec[byte++] >> (used_bits % 8))) return 0;
  for (; byte < sec_bytes; byte++) {
    if (sec[byte]) return 0;
  }
  return 1;
}

typedef struct {
  lct__layout lay;
  uint16_t table[1 << LCT_MAX_CODE_LEN];
} decoder;

/* Decodes one coded chunk (header already read) into out; the chunk's bytes
 * are blob[at, at + size). Returns 0 or a negative error. */
static inline int decode_coded_chunk(const decoder *d, const uint8_t *blob, uint64_t len, uint64_t at, uint64_t size,
                                     uint64_t n, uint8_t *out, const unsigned width) {
  const uint8_t *ch = blob + at;
  const unsigned m = d->lay.mant_bits, s = d->lay.sym_bits, trim = ch[1], keep = m - trim;
  const unsigned esc = d->lay.n_syms - 1;
  uint64_t lane_start[LCT_LANES + 1], total = 0;
  for (unsigned t = 0; t < LCT_LANES; t++) {
    uint16_t bits = get16(ch + 8 + 2 * t);
    if ((uint64_t)t * LCT_LANE_ELEMS >= n && bits) return LCT_ECORRUPT;
    lane_start[t] = total;
    total += bits;
  }
  lane_start[LCT_LANES] = total;
  const uint64_t mant_bytes = pad4((n * keep + 7) / 8), code_bytes = pad4((total + 7) / 8);
  if (LCT_CODED_CHUNK_HEADER + mant_bytes + code_bytes != size) return LCT_ECORRUPT;
  const uint64_t mant_at = at + LCT_CODED_CHUNK_HEADER, code_at = mant_at + mant_bytes;
  if (!zero_bits_after(blob + mant_at, mant_bytes, n * keep) || !zero_bits_after(blob + code_at, code_bytes, total))
    return LCT_ECORRUPT;

  const uint64_t kmask = ((uint64_t)1 << keep) - 1, smask = ((uint64_t)1 << s) - 1;
  const uint64_t code_bit0 = code_at * 8, mant_bit0 = mant_at * 8;
  for (unsigned t = 0; t < LCT_LANES; t++) {
    uint64_t lo = (uint64_t)t * LCT_LANE_ELEMS;
    if (lo >= n) break;
    uint64_t hi = lo + LCT_LANE_ELEMS < n ? lo + LCT_LANE_ELEMS : n;
    uint64_t pos = code_bit0 + lane_start[t], mpos = mant_bit0 + lo * keep;
    for (uint64_t i = lo; i < hi; i++) {
      uint64_t v = peek64(blob, len, pos);
      uint32_t ent = d->table[v & ((1u << LCT_MAX_CODE_LEN) - 1)];
      if (__builtin_expect(!ent, 0)) return LCT_ECORRUPT;
      uint32_t l = ent >> 11, sym = ent & 0x7ff;
      pos += l;
      if (__builtin_expect(sym == esc, 0)) {
        sym = (uint32_t)((v >> l) & smask);
        pos += s;
      }
      uint32_t mant = (uint32_t)(peek64(blob, len, mpos) & kmask);
      mpos += keep;
      uint32_t x = sym << m | mant << trim;
      if (width == 4) {
        put32(out + 4 * i, x);
      } else if (width == 2) {
        put16(out + 2 * i, (uint16_t)x);
      } else {
        out[i] = (uint8_t)x;
      }
    }
    if (pos != code_bit0 + lane_start[t + 1]) return LCT_ECORRUPT;
  }
  return 0;
}

static int decode_chunk(const decoder *d, const uint8_t *blob, uint64_t len, uint64_t at, uint64_t size, uint64_t n,
                        uint64_t c, uint8_t *out) {
  const unsigned w = d->lay.width;
  const uint8_t *ch = blob + at;
  if (size < LCT_RAW_CHUNK_HEADER || ch[2] || ch[3]) return LCT_ECORRUPT;
  int rc;
  if (ch[0] == 0) {
    if (ch[1] || size != LCT_RAW_CHUNK_HEADER + pad4(n * w)) return LCT_ECORRUPT;
    if (!zero_bits_after(ch + LCT_RAW_CHUNK_HEADER, size - LCT_RAW_CHUNK_HEADER, 8 * n * w)) return LCT_ECORRUPT;
    memcpy(out, ch + LCT_RAW_CHUNK_HEADER, n * w);
    rc = 0;
  } else if (ch[0] == 1 && d->lay.sym_bits) {
    if (ch[1] > d->lay.mant_bits || size < LCT_CODED_CHUNK_HEADER) return LCT_ECORRUPT;
    switch (w) {
    case 4: rc = decode_coded_chunk(d, blob, len, at, size, n, out, 4); break;
    case 2: rc = decode_coded_chunk(d, blob, len, at, size, n, out, 2); break;
    default: rc = decode_coded_chunk(d, blob, len, at, size, n, out, 1); break;
    }
  } else {
    return LCT_ECORRUPT;
  }
  if (rc) return rc;
  return lct_check(out, n * w, c * (LCT_CHUNK_ELEMS * w / 4)) == get32(ch + 4) ? 0 : LCT_ECHECKSUM;
}

int lct_decode(const void *blob, size_t len, void *dst, size_t cap) {
  lct_blob_info info;
  int rc = lct_blob_info_read(blob, len, &info);
  if (rc) return rc;
  if (cap < info.raw_bytes) return LCT_EBUFSIZE;
  if (info.raw_bytes && !dst) return LCT_EINVAL;
  const uint8_t *p = blob;
  decoder d;
  lct__dtype_layout(info.dtype, &d.lay);
  uint32_t cb_bytes = get32(p + 20);
  if (cb_bytes) {
    lct_codebook cb;
    if (lct_codebook_parse(info.dtype, p + LCT_HEADER_BYTES, cb_bytes, &cb)) return LCT_ECORRUPT;
    lct_codebook_decode_table(&cb, d.table);
  }
  const uint64_t table = table_offset(cb_bytes);
  uint64_t expect = table + 8 * (uint64_t)info.n_chunks;
  for (uint64_t c = 0; c < info.n_chunks; c++) {
    uint64_t at = get64(p + table + 8 * c);
    uint64_t end = c + 1 < info.n_chunks ? get64(p + table + 8 * (c + 1)) : len;
    if (at != expect || at % 4 || end < at || end > len) return LCT_ECORRUPT;
    rc = decode_chunk(&d, p, len, at, end - at, chunk_elems(info.n_elems, c), c,
                      (uint8_t *)dst + c * LCT_CHUNK_ELEMS * d.lay.width);
    if (rc) return rc;
    expect = end;
  }
  return expect == len ? 0 : LCT_ECORRUPT;
}
