/* lct_codec.c — CPU reference encoder and validating decoder for the LCT blob format. */
#include <stdlib.h>
#include <string.h>

#include "lct_codec.h"
#include "lct_codec_internal.h"

#define CHECK_MUL 0x9E3779B1u

/* The hot loops are also built for x86-64-v3 (BMI2 variable shifts, AVX2),
 * chosen at load time; other machines run the portable build. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define HOT_CLONES __attribute__((target_clones("default", "arch=x86-64-v3")))
#else
#define HOT_CLONES
#endif

static inline uint64_t pad4(uint64_t x) { return (x + 3) & ~(uint64_t)3; }
static inline uint64_t pad8(uint64_t x) { return (x + 7) & ~(uint64_t)7; }

static inline void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static inline void put32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void put64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static inline uint16_t get16(const uint8_t *p) { uint16_t v; memcpy(&v, p, 2); return v; }
static inline uint32_t get32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint64_t get64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

HOT_CLONES uint32_t lct_check(const void *bytes, size_t len, uint64_t base) {
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
  uint64_t bound, tail = chunks > full ? pad4((n_elems - full * LCT_CHUNK_ELEMS) * w) : 0;
  if (__builtin_mul_overflow(full, pad4((uint64_t)LCT_CHUNK_ELEMS * w), &bound) ||
      __builtin_add_overflow(bound, table_offset(lct_codebook_bytes(dtype)) + 16 * chunks + tail, &bound) ||
      (uint64_t)(size_t)bound != bound)
    return SIZE_MAX;
  return (size_t)bound;
}

/* ---- encoder ---------------------------------------------------------- */

/* LSB-first bit writer. Bits gather in a 64-bit accumulator; bw_flush moves
 * its whole bytes out with one unaligned 64-bit store while 8 bytes of room
 * remain, byte by byte after that. Callers add at most 56 bits between
 * flushes. Bytes past end are counted, not stored: out > end means overflow. */
typedef struct {
  uint8_t *out, *end;
  uint64_t acc;
  unsigned n;
} bit_writer;

static inline void bw_add(bit_writer *w, uint64_t v, unsigned bits) {
  w->acc |= v << w->n;
  w->n += bits;
}

static inline void bw_flush(bit_writer *w) {
  unsigned bytes = w->n >> 3;
  if (__builtin_expect(w->out + 8 <= w->end, 1)) {
    put64(w->out, w->acc);
  } else {
    for (unsigned i = 0; i < bytes; i++) {
      if (w->out + i < w->end) w->out[i] = (uint8_t)(w->acc >> (8 * i));
    }
  }
  w->out += bytes;
  w->acc = bytes == 8 ? 0 : w->acc >> (8 * bytes);
  w->n &= 7;
}

/* Writes the last partial byte and zero padding up to a 4-byte boundary
 * (relative to base); returns the section size. */
static inline uint64_t bw_finish(bit_writer *w, uint8_t *base) {
  bw_flush(w);
  if (w->n) w->n = 8;
  bw_flush(w);
  while ((w->out - base) % 4) {
    if (w->out < w->end) *w->out = 0;
    w->out++;
  }
  return (uint64_t)(w->out - base);
}

/* Per-symbol bits to write: code | length << 24 | escaped << 31. A symbol the
 * codebook lacks gets the whole ESC sequence (ESC code, then the symbol), so
 * the hot loop has no branch for it. */
#define ENC_CODE_MASK 0xffffffu
/* Bytes of one lane's stream, code or mantissa, at its longest (512 steps of
 * 22 bits: ESC and a 10-bit symbol, or f32's 22 mantissa bits), plus slack
 * for 8-byte reads and writes past its end. */
#define LANE_IMAGE ((size_t)LCT_LANE_ELEMS * (LCT_MAX_CODE_LEN + 10) / 8 + 16)
typedef uint8_t lane_images[LCT_LANES][LANE_IMAGE];
/* Chunk element of step j of lane t (proto/FORMAT.md, "Lanes"), E = 4 / width elements a word. */
static inline uint32_t lane_elem(unsigned t, uint32_t j, const unsigned E) { return 32 * E * (j / E) + E * t + j % E; }

typedef struct {
  lct__layout lay;
  uint32_t enc[LCT_MAX_SYMS - 1];      /* a forward step's bits */
  uint32_t enc_back[LCT_MAX_SYMS - 1]; /* a mirrored step's: the same bits in reverse order */
  lane_images code, mant; /* each lane's streams, then interleaved into the chunk */
} encoder;

static void encoder_init(encoder *e, const lct_codebook *cb) {
  const unsigned esc = e->lay.n_syms - 1, esc_len = cb->len[esc];
  for (unsigned sym = 0; sym < esc; sym++) {
    if (cb->len[sym]) {
      e->enc[sym] = cb->code[sym] | (uint32_t)cb->len[sym] << 24;
    } else {
      e->enc[sym] = (cb->code[esc] | sym << esc_len) | (esc_len + e->lay.sym_bits) << 24 | 1u << 31;
    }
    const uint32_t len = (e->enc[sym] >> 24) & 0x7f;
    e->enc_back[sym] = (e->enc[sym] & ~ENC_CODE_MASK) | lct__reverse_bits(e->enc[sym] & ENC_CODE_MASK, len);
  }
}

/* Codes steps [from, to) of lane t of the chunk at src with the entries enc. */
static inline __attribute__((always_inline)) void code_steps(bit_writer *cw, const uint8_t *src, unsigned t,
                                                             uint32_t from, uint32_t to, const uint32_t *enc,
                                                             unsigned m, uint64_t *escapes, const unsigned width) {
  const unsigned E = 4 / width;
  uint32_t i = from, esc = 0; /* counted here: a store through escapes each step was the loop's bottleneck */
  for (; i + 2 <= to; i += 2) { /* two codes (<= 44 bits) per flush */
    uint32_t x0, x1;
    if (E == 2) { /* the pair is one word of the lane */
      const uint32_t w = get32(src + 4 * (32 * (i / 2) + t));
      x0 = w & 0xffff;
      x1 = w >> 16;
    } else {
      x0 = lct__load_elem(src, lane_elem(t, i, E), width);
      x1 = lct__load_elem(src, lane_elem(t, i + 1, E), width);
    }
    uint32_t e0 = enc[x0 >> m], e1 = enc[x1 >> m];
    esc += (e0 >> 31) + (e1 >> 31);
    bw_add(cw, e0 & ENC_CODE_MASK, (e0 >> 24) & 0x7f);
    bw_add(cw, e1 & ENC_CODE_MASK, (e1 >> 24) & 0x7f);
    bw_flush(cw);
  }
  if (i < to) {
    uint32_t e0 = enc[lct__load_elem(src, lane_elem(t, i, E), width) >> m];
    esc += e0 >> 31;
    bw_add(cw, e0 & ENC_CODE_MASK, (e0 >> 24) & 0x7f);
    bw_flush(cw);
  }
  *escapes += esc;
}

static size_t encode_raw_chunk(const uint8_t *src, uint64_t n, unsigned w, uint32_t check, uint8_t *dst) {
  uint64_t bytes = n * w, size = LCT_RAW_CHUNK_HEADER + pad4(bytes);
  memset(dst, 0, LCT_RAW_CHUNK_HEADER);
  put32(dst + 4, check);
  memcpy(dst + LCT_RAW_CHUNK_HEADER, src, bytes);
  memset(dst + LCT_RAW_CHUNK_HEADER + bytes, 0, size - LCT_RAW_CHUNK_HEADER - bytes);
  return size;
}

/* The chunk's check (lct_check of its bytes from word base) and, in the
 * same pass over its 32-bit words, the trim of its mantissas: the low
 * mantissa bits zero in every element. */
static inline uint32_t chunk_scan(const uint8_t *src, uint64_t n, const lct__layout *lay, const unsigned width,
                                  uint64_t base, unsigned *trim) {
  const uint64_t len = n * width;
  uint32_t h = 0, all = 0, mul = (uint32_t)(2 * base + 1) * CHECK_MUL;
  uint64_t j = 0;
  for (; j + 4 <= len; j += 4, mul += 2 * CHECK_MUL) {
    const uint32_t w = get32(src + j);
    h += w * mul;
    all |= w;
  }
  if (j < len) {
    uint8_t last[4] = {0};
    memcpy(last, src + j, len - j);
    h += get32(last) * mul;
    all |= get32(last);
  }
  /* Every element of a word lies at a multiple of width: fold them onto the lowest. */
  if (width <= 2) all |= all >> 16;
  if (width == 1) all |= all >> 8;
  all &= (1u << lay->mant_bits) - 1;
  *trim = all ? (unsigned)__builtin_ctz(all) : lay->mant_bits;
  return h;
}

/* Section bytes of 32 streams of bits[t] bits, in either version. */
static uint64_t section_bytes(const uint32_t bits[LCT_LANES]) {
  uint64_t total = 0;
  for (unsigned t = 0; t < LCT_LANES; t++) total += bits[t];
  return pad4((total + 7) / 8);
}

/* Whole 32-bit words every stream has: the interleaved rows. */
static uint32_t section_rows(const uint32_t bits[LCT_LANES]) {
  uint32_t rows = bits[0] / 32;
  for (unsigned t = 1; t < LCT_LANES; t++) rows = bits[t] / 32 < rows ? bits[t] / 32 : rows;
  return rows;
}

/* The 32 bits of a lane image from bit p on (images have 8 bytes of slack). */
static inline uint32_t image_bits(const uint8_t *img, uint64_t p) { return (uint32_t)(get64(img + p / 8) >> (p % 8)); }

/* Lays the lane streams out as one version 2 section at out
 * (proto/FORMAT.md, "Interleaved sections"): rows of one word per lane,
 * the first half from each stream's start, the rest from its end, then each
 * lane's middle bits end to end, zero-padded. */
static void interleave(const lane_images img, const uint32_t bits[LCT_LANES], uint8_t *out) {
  const uint32_t rows = section_rows(bits), up = (rows + 1) / 2;
  for (uint32_t i = 0; i < rows; i++) {
    for (unsigned t = 0; t < LCT_LANES; t++)
      put32(out + 4 * (32 * (uint64_t)i + t), image_bits(img[t], i < up ? 32 * i : bits[t] - 32 * (rows - i)));
  }
  const uint64_t bytes = section_bytes(bits);
  bit_writer tw = {out + 128 * (uint64_t)rows, out + bytes, 0, 0};
  for (unsigned t = 0; t < LCT_LANES; t++) {
    const uint32_t end = bits[t] - 32 * (rows - up);
    for (uint32_t p = 32 * up; p < end; p += 32) {
      const unsigned nb = end - p < 32 ? end - p : 32;
      bw_add(&tw, image_bits(img[t], p) & (uint32_t)((1ull << nb) - 1), nb);
      bw_flush(&tw);
    }
  }
  bw_finish(&tw, out);
}

/* Writes the kept mantissa bits of lane t's nt steps of the chunk at src as
 * one LSB-first stream of mant_bytes bytes (padding included). */
static void pack_mantissas_scalar(const uint8_t *src, unsigned t, uint32_t nt, unsigned width, unsigned m,
                                  unsigned trim, unsigned keep, uint8_t *mant, uint64_t mant_bytes) {
  bit_writer mw = {mant, mant + mant_bytes, 0, 0};
  const uint32_t mmask = (1u << m) - 1;
  const unsigned per_flush = 56 / keep, E = 4 / width;
  for (uint32_t i = 0; i < nt;) {
    uint32_t stop = nt - i < per_flush ? nt : i + per_flush;
    for (; i < stop; i++) bw_add(&mw, (lct__load_elem(src, lane_elem(t, i, E), width) & mmask) >> trim, keep);
    bw_flush(&mw);
  }
  bw_finish(&mw, mant);
}

#if defined(__x86_64__) && defined(__GNUC__)
/* With BMI2, one pext gathers the kept bits of a whole word of the lane. */
__attribute__((target("bmi2"))) static void pack_mantissas_bmi2(const uint8_t *src, unsigned t, uint32_t nt,
                                                                 unsigned width, unsigned m, unsigned trim,
                                                                 unsigned keep, uint8_t *mant, uint64_t mant_bytes) {
  bit_writer mw = {mant, mant + mant_bytes, 0, 0};
  const unsigned E = 4 / width, bits = E * keep;
  uint32_t elem_mask = ((1u << m) - 1) & ~((1u << trim) - 1), mask = 0;
  for (unsigned k = 0; k < E; k++) mask |= elem_mask << (8 * width * k);
  uint32_t g = 0;
  const uint64_t mask2 = mask | (uint64_t)mask << 32;
  for (; E * (g + 2) <= nt; g += 2) { /* whole words, two a pext and a flush (<= 44 bits): none reads past the chunk */
    const uint64_t w2 = get32(src + 4 * (32 * g + t)) | (uint64_t)get32(src + 4 * (32 * g + 32 + t)) << 32;
    bw_add(&mw, __builtin_ia32_pext_di(w2, mask2), 2 * bits);
    bw_flush(&mw);
  }
  for (uint32_t i = E * g; i < nt; i++) {
    bw_add(&mw, (lct__load_elem(src, lane_elem(t, i, E), width) & elem_mask) >> trim, keep);
    bw_flush(&mw);
  }
  bw_finish(&mw, mant);
}

static void pack_mantissas(const uint8_t *src, unsigned t, uint32_t nt, unsigned width, unsigned m, unsigned trim,
                           unsigned keep, uint8_t *mant, uint64_t mant_bytes) {
  /* A load of the CPU model libgcc filled at start: no lazy state shared between threads. */
  (__builtin_cpu_supports("bmi2") ? pack_mantissas_bmi2 : pack_mantissas_scalar)(src, t, nt, width, m, trim, keep,
                                                                                 mant, mant_bytes);
}
#else
#define pack_mantissas pack_mantissas_scalar
#endif

/* Codes one chunk at dst, which has room for its raw form. The width is a
 * compile-time constant in each caller so the element loop specializes.
 * Each lane's code and mantissa streams are written on their own, its
 * words read where they lie in src, then interleaved. */
static inline __attribute__((always_inline)) size_t encode_chunk(encoder *e, const uint8_t *src, uint64_t n, uint64_t c,
                                  uint8_t *dst, lct_encode_stats *st, const unsigned width) {
  const lct__layout *lay = &e->lay;
  const unsigned E = 4 / width;
  const uint64_t raw_size = LCT_RAW_CHUNK_HEADER + pad4(n * width);
  unsigned trim;
  const uint32_t check = chunk_scan(src, n, lay, width, c * (LCT_CHUNK_ELEMS * width / 4), &trim);
  const unsigned keep = lay->mant_bits - trim;
  const uint64_t mant_bytes = pad4((n * keep + 7) / 8);
  if (LCT_CODED_CHUNK_HEADER + mant_bytes >= raw_size) goto raw;

  {
    const unsigned m = lay->mant_bits;
    uint32_t code_bits[LCT_LANES], mant_bits[LCT_LANES];
    uint64_t escapes = 0, total = 0;
    for (unsigned t = 0; t < LCT_LANES; t++) {
      const uint32_t nt = lct__v2_lane_elems((uint32_t)n, t, E);
      bit_writer cw = {e->code[t], e->code[t] + LANE_IMAGE, 0, 0};
      /* A mirrored step takes the bits a forward one would, in reverse
       * order: written in step order they fill the stream from its end down. */
      const uint32_t fwd = nt < LCT_LANE_FORWARD ? nt : LCT_LANE_FORWARD;
      code_steps(&cw, src, t, 0, fwd, e->enc, m, &escapes, width);
      code_steps(&cw, src, t, fwd, nt, e->enc_back, m, &escapes, width);
      code_bits[t] = (uint32_t)(8 * (cw.out - e->code[t]) + cw.n);
      bw_finish(&cw, e->code[t]);
      mant_bits[t] = nt * keep;
      if (keep) pack_mantissas(src, t, nt, width, m, trim, keep, e->mant[t], pad4(((uint64_t)nt * keep + 7) / 8));
      total += code_bits[t];
    }
    const uint64_t code_bytes = pad4((total + 7) / 8);
    st->code_bits += total; /* counted for raw fallbacks too: they measure the codebook's fit */
    st->escapes += escapes;
    const uint64_t size = LCT_CODED_CHUNK_HEADER + mant_bytes + code_bytes;
    if (size >= raw_size) goto raw;
    memset(dst, 0, 8);
    dst[0] = 1;
    dst[1] = (uint8_t)trim;
    put32(dst + 4, check);
    for (unsigned t = 0; t < LCT_LANES; t++) put16(dst + 8 + 2 * t, (uint16_t)code_bits[t]);
    interleave((const uint8_t(*)[LANE_IMAGE])e->mant, mant_bits, dst + LCT_CODED_CHUNK_HEADER);
    interleave((const uint8_t(*)[LANE_IMAGE])e->code, code_bits, dst + LCT_CODED_CHUNK_HEADER + mant_bytes);
    return (size_t)size;
  }
raw:
  st->raw_chunks++;
  return encode_raw_chunk(src, n, width, check, dst);
}

HOT_CLONES static size_t encode_chunk_any(encoder *e, const uint8_t *src, uint64_t n, uint64_t c, uint8_t *dst,
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

static int encode_blob(encoder *e, const lct__layout *lay, int dtype, const lct_codebook *cb, const void *src,
                       uint64_t n_elems, void *dst, lct_encode_stats *stats) {
  const uint32_t cb_bytes = (uint32_t)lct_codebook_bytes(dtype), n_chunks = (uint32_t)lct_chunk_count(n_elems);
  uint8_t *out = dst;
  const uint8_t *in = src;
  lct_encode_stats st = {0};
  write_header(out, dtype, n_elems, n_chunks, cb_bytes);
  uint64_t table = table_offset(cb_bytes);
  memset(out + LCT_HEADER_BYTES, 0, table - LCT_HEADER_BYTES);
  if (cb_bytes) {
    /* Codes come from the serialized lengths, as every decoder derives them
     * (the GPU encoder does the same): a codebook whose lengths are out of
     * range is refused, and one whose codes disagree with its lengths still
     * gives a blob that decodes to src. */
    lct_codebook canon;
    if (lct_codebook_canonical(cb, out + LCT_HEADER_BYTES, cb_bytes, &canon) != 0) return LCT_EINVAL;
    e->lay = *lay;
    encoder_init(e, &canon);
  }
  put32(out + 24, header_check(out, cb_bytes));

  uint64_t pos = table + 8 * (uint64_t)n_chunks;
  for (uint64_t c = 0; c < n_chunks; c++) {
    uint64_t n = chunk_elems(n_elems, c);
    const uint8_t *chunk_src = in + c * LCT_CHUNK_ELEMS * lay->width;
    put64(out + table + 8 * c, pos);
    if (lay->sym_bits) {
      pos += encode_chunk_any(e, chunk_src, n, c, out + pos, &st);
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

int lct_encode(int dtype, const lct_codebook *cb, const void *src, uint64_t n_elems, void *dst, size_t cap,
               lct_encode_stats *stats) {
  lct__layout lay;
  int rc = lct__dtype_layout(dtype, &lay);
  if (rc) return rc;
  if ((n_elems && !src) || !dst) return LCT_EINVAL;
  if (lay.sym_bits && (!cb || cb->dtype != dtype || cb->n_syms != lay.n_syms)) return LCT_EINVAL;
  if (n_elems > (UINT64_MAX / 8) || lct_chunk_count(n_elems) > UINT32_MAX) return LCT_E2BIG;
  if (cap < lct_encode_bound(dtype, n_elems)) return LCT_EBUFSIZE;
  encoder *e = lay.sym_bits ? malloc(sizeof *e) : NULL; /* about 160 KiB: kept off the caller's stack */
  if (lay.sym_bits && !e) return LCT_ENOMEM;
  rc = encode_blob(e, &lay, dtype, cb, src, n_elems, dst, stats);
  free(e);
  return rc;
}

/* ---- decoder ---------------------------------------------------------- */

int lct_blob_info_read(const void *blob, size_t len, lct_blob_info *info) {
  const uint8_t *p = blob;
  if (!blob || len < LCT_HEADER_BYTES) return LCT_ECORRUPT;
  if (memcmp(p, "LCTZ", 4) != 0) return LCT_ECORRUPT;
  if (p[4] != LCT_FORMAT_VERSION && p[4] != 1) return LCT_EVERSION; /* version 1 blobs still decode */
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

int lct_blob_next(const void *blobs, size_t len, lct_blob_info *info) {
  if (!blobs || len < LCT_HEADER_BYTES) return LCT_ECORRUPT;
  uint64_t blob_bytes = get64((const uint8_t *)blobs + 32);
  return blob_bytes > len ? LCT_ESIZE : lct_blob_info_read(blobs, (size_t)blob_bytes, info);
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
  uint16_t table[1 << LCT_MAX_CODE_LEN];      /* by the next 12 stream bits, the first as bit 0 */
  uint16_t table_back[1 << LCT_MAX_CODE_LEN]; /* the same, the first as bit 11: mirrored steps, read downward */
  lane_images code, mant; /* version 2: each lane's streams, taken out of the interleaved sections */
} decoder;

/* Where a lane decoder reads: code and mantissa bits from cbase and mbase
 * (clen and mlen bytes). */
typedef struct {
  const uint16_t *table, *table_back;
  const uint8_t *cbase, *mbase;
  uint64_t clen, mlen;
  unsigned m, s, trim, keep, esc;
  uint64_t kmask, smask;
} lane_decoder;

/* One element of a lane: its code at bit *pos, its kept mantissa at *mpos.
 * An invalid code sets *bad and consumes nothing; the caller checks once. */
static inline uint32_t decode_elem(const lane_decoder *ld, uint64_t *pos, uint64_t *mpos, uint32_t *bad,
                                   const int in_bounds) {
  /* in_bounds: the caller proved every read stays 8 bytes inside its buffer */
  uint64_t v = in_bounds ? get64(ld->cbase + (*pos >> 3)) >> (*pos & 7) : peek64(ld->cbase, ld->clen, *pos);
  uint32_t ent = ld->table[v & ((1u << LCT_MAX_CODE_LEN) - 1)];
  *bad |= !ent;
  uint32_t l = ent >> 11, sym = ent & 0x7ff;
  *pos += l;
  if (__builtin_expect(sym == ld->esc, 0)) {
    sym = (uint32_t)((v >> l) & ld->smask);
    *pos += ld->s;
  }
  uint64_t mv = in_bounds ? get64(ld->mbase + (*mpos >> 3)) >> (*mpos & 7) : peek64(ld->mbase, ld->mlen, *mpos);
  uint32_t mant = (uint32_t)(mv & ld->kmask);
  *mpos += ld->keep;
  return sym << ld->m | mant << ld->trim;
}

/* The 64 bits of a lane image below bit pos, bit pos - 1 as bit 63: the
 * order a mirrored step is read in. Bits below the image read as zero. */
static inline uint64_t peek_below(const uint8_t *img, uint64_t pos) {
  const uint64_t q = (pos + 7) >> 3;
  if (__builtin_expect(q >= 8, 1)) return get64(img + q - 8) << (8 * q - pos);
  uint8_t tmp[8] = {0};
  memcpy(tmp + 8 - q, img, q);
  return get64(tmp) << (8 * q - pos);
}

/* A mirrored step's symbol, moved into place: its code read down from bit
 * *pos of a lane's code image (a code that would run below the image's start
 * sets *bad and stops there). */
static inline uint32_t decode_elem_back(const lane_decoder *ld, const uint8_t *img, uint64_t *pos, uint32_t *bad) {
  const uint64_t v = peek_below(img, *pos);
  const uint32_t ent = ld->table_back[v >> (64 - LCT_MAX_CODE_LEN)];
  uint32_t l = ent >> 11, sym = ent & 0x7ff;
  *bad |= !ent;
  if (__builtin_expect(sym == ld->esc, 0)) { /* the raw symbol, its bit 0 read first */
    sym = lct__reverse_bits((uint32_t)((v << l) >> (64 - ld->s)), ld->s);
    l += ld->s;
  }
  if (__builtin_expect(l > *pos, 0)) {
    *bad = 1;
    l = (uint32_t)*pos;
  }
  *pos -= l;
  return sym << ld->m;
}

static inline void store_elem(uint8_t *out, uint64_t i, uint32_t x, const unsigned width) {
  if (width == 4) {
    put32(out + 4 * i, x);
  } else if (width == 2) {
    put16(out + 2 * i, (uint16_t)x);
  } else {
    out[i] = (uint8_t)x;
  }
}

/* Takes the 32 lane streams of a version 2 section (sec_bytes, already
 * checked against bits) out into img, each followed by 8 zero bytes; the
 * caller bounds every bits[t] by a lane image. */
static void deinterleave(const uint8_t *sec, uint64_t sec_bytes, const uint32_t bits[LCT_LANES], lane_images img) {
  const uint32_t rows = section_rows(bits), up = (rows + 1) / 2;
  uint64_t pos = 8 * 128 * (uint64_t)rows; /* the tail's next bit */
  for (unsigned t = 0; t < LCT_LANES; t++) {
    bit_writer w = {img[t], img[t] + LANE_IMAGE, 0, 0};
    const uint32_t middle = bits[t] - 32 * rows;
    for (uint32_t i = 0; i < up; i++) {
      bw_add(&w, get32(sec + 4 * (32 * (uint64_t)i + t)), 32);
      bw_flush(&w);
    }
    for (uint32_t p = 0; p < middle; p += 32) {
      const unsigned nb = middle - p < 32 ? middle - p : 32;
      bw_add(&w, (uint32_t)peek64(sec, sec_bytes, pos) & (uint32_t)((1ull << nb) - 1), nb);
      bw_flush(&w);
      pos += nb;
    }
    for (uint32_t i = up; i < rows; i++) {
      bw_add(&w, get32(sec + 4 * (32 * (uint64_t)i + t)), 32);
      bw_flush(&w);
    }
    bw_finish(&w, img[t]);
    memset(w.out, 0, 8);
  }
}

/* Lanes decoded side by side: their load-lookup-shift dependency chains
 * overlap. A lane has no more steps than the one before it. */
enum { GROUP = 4 };

/* Version 1's lanes, read straight from the chunk: lane t's step j is
 * element 512 t + j. */
static inline __attribute__((always_inline)) int decode_v1_lanes(const lane_decoder *ld, uint64_t len,
                                                                 const uint64_t code_start[LCT_LANES],
                                                                 const uint64_t mant_start[LCT_LANES],
                                                                 const uint32_t lane_bits[LCT_LANES],
                                                                 const uint32_t lane_elems[LCT_LANES], uint8_t *out,
                                                                 const unsigned width) {
  for (unsigned g = 0; g < LCT_LANES && lane_elems[g]; g += GROUP) {
    uint64_t pos[GROUP], mpos[GROUP];
    uint8_t *lane_out[GROUP];
    uint32_t bad = 0;
    for (unsigned k = 0; k < GROUP; k++) {
      pos[k] = code_start[g + k];
      mpos[k] = mant_start[g + k];
      lane_out[k] = out + (uint64_t)(g + k) * LCT_LANE_ELEMS * width;
    }
    /* A lane reads at most 22 bits per element past its start: when even the
     * last lane of the group stays 8 bytes inside the blob, skip the checks. */
    const int in_bounds = (pos[GROUP - 1] + LCT_LANE_ELEMS * (LCT_MAX_CODE_LEN + 10)) / 8 + 8 <= len;
#define LANE_STEP(k, j, checked)                                                                              \
  store_elem(lane_out[k], (j), decode_elem(ld, &pos[k], &mpos[k], &bad, checked), width)
    const uint32_t common = lane_elems[g + GROUP - 1];
    if (in_bounds) {
      for (uint32_t j = 0; j < common; j++) {
        for (unsigned k = 0; k < GROUP; k++) LANE_STEP(k, j, 1);
      }
    } else {
      for (uint32_t j = 0; j < common; j++) {
        for (unsigned k = 0; k < GROUP; k++) LANE_STEP(k, j, 0);
      }
    }
    for (unsigned k = 0; k < GROUP; k++) {
      for (uint32_t j = common; j < lane_elems[g + k]; j++) LANE_STEP(k, j, 0);
      if (pos[k] != code_start[g + k] + lane_bits[g + k]) bad = 1;
    }
#undef LANE_STEP
    if (bad) return LCT_ECORRUPT;
  }
  return 0;
}

/* A forward step's symbol, moved into place: its code read up from bit *pos
 * of a lane's code image (the image has room for any 256 steps' reads). */
static inline uint32_t code_up(const lane_decoder *ld, const uint8_t *img, uint64_t *pos, uint32_t *bad) {
  const uint64_t v = get64(img + (*pos >> 3)) >> (*pos & 7);
  const uint32_t ent = ld->table[v & ((1u << LCT_MAX_CODE_LEN) - 1)];
  uint32_t l = ent >> 11, sym = ent & 0x7ff;
  *bad |= !ent;
  if (__builtin_expect(sym == ld->esc, 0)) {
    sym = (uint32_t)((v >> l) & ld->smask);
    l += ld->s;
  }
  *pos += l;
  return sym << ld->m;
}

/* The kept mantissa at bit mpos of a lane's mantissa image, moved into place. */
static inline uint32_t mantissa_at(const lane_decoder *ld, const uint8_t *img, uint64_t mpos) {
  return (uint32_t)((get64(img + (mpos >> 3)) >> (mpos & 7)) & ld->kmask) << ld->trim;
}

/* The kept mantissas of a lane word's 4 / width steps, from bit mpos of the
 * lane's mantissa image, each moved into place in its element. */
static inline uint32_t spread_mantissas(const lane_decoder *ld, const uint8_t *img, uint64_t mpos,
                                        const unsigned width) {
  const uint32_t bits = (uint32_t)(get64(img + (mpos >> 3)) >> (mpos & 7));
  uint32_t x = 0;
  for (unsigned e = 0; e < 4 / width; e++) x |= ((bits >> (ld->keep * e)) & (uint32_t)ld->kmask) << (8 * width * e);
  return x << ld->trim;
}

/* Version 2's lanes, from their streams taken out into lane images: lane
 * t's forward steps read up from bit 0, its mirrored steps down from bit
 * lane_bits[t], so a group of full lanes runs eight chains side by side.
 * Step j of lane t is element 32 E (j / E) + E t + j % E, stored in place.
 * The two halves must meet exactly. */
static inline __attribute__((always_inline)) int decode_v2_lanes(decoder *d, const lane_decoder *ld,
                                                                 const uint32_t lane_bits[LCT_LANES],
                                                                 const uint32_t lane_elems[LCT_LANES], uint8_t *out,
                                                                 const unsigned width) {
  const unsigned E = 4 / width, keep = ld->keep;
  for (unsigned g = 0; g < LCT_LANES && lane_elems[g]; g += GROUP) {
    const uint8_t(*code)[LANE_IMAGE] = d->code + g, (*mant)[LANE_IMAGE] = d->mant + g;
    uint64_t up[GROUP] = {0}, down[GROUP];
    uint32_t bad = 0;
    for (unsigned k = 0; k < GROUP; k++) down[k] = lane_bits[g + k];
    /* Full lanes: each half of the four at once (eight chains at once spill
     * registers); the lanes' mantissas lie at the same places of their images. */
    const uint32_t both = lane_elems[g + GROUP - 1] == LCT_LANE_ELEMS ? LCT_LANE_FORWARD : 0;
    /* A word of each of the four lanes at a time: E steps' symbols, their
     * mantissas (E k bits at the same place of each image), one store. */
#define WORD_UP(k)                                                                                             \
  do {                                                                                                         \
    uint32_t x = 0;                                                                                            \
    for (unsigned e = 0; e < E; e++) x |= code_up(ld, code[k], &up[k], &bad) << (8 * width * e);              \
    put32(out + 4 * (32 * (uint64_t)wg + g + (k)), x | spread_mantissas(ld, mant[k], mpos, width));        \
  } while (0)
#define WORD_DOWN(k)                                                                                           \
  do {                                                                                                         \
    uint32_t x = 0;                                                                                            \
    for (unsigned e = E; e-- > 0;) x |= decode_elem_back(ld, code[k], &down[k], &bad) << (8 * width * e);     \
    put32(out + 4 * (32 * (uint64_t)wg + g + (k)), x | spread_mantissas(ld, mant[k], mpos, width));        \
  } while (0)
    _Static_assert(GROUP == 4, "the steps below are written out for four lanes");
    for (uint32_t wg = 0; wg < both / E; wg++) {
      const uint64_t mpos = (uint64_t)wg * E * keep;
      WORD_UP(0);
      WORD_UP(1);
      WORD_UP(2);
      WORD_UP(3);
    }
    for (uint32_t wg = LCT_LANE_ELEMS / E; both && wg-- > LCT_LANE_FORWARD / E;) {
      const uint64_t mpos = (uint64_t)wg * E * keep;
      WORD_DOWN(0);
      WORD_DOWN(1);
      WORD_DOWN(2);
      WORD_DOWN(3);
    }
#undef WORD_UP
#undef WORD_DOWN
    for (unsigned k = 0; k < GROUP && !both; k++) {
      const uint32_t nt = lane_elems[g + k], fwd = nt < LCT_LANE_FORWARD ? nt : LCT_LANE_FORWARD;
      for (uint32_t j = 0; j < fwd; j++)
        store_elem(out, lane_elem(g + k, j, E),
                   code_up(ld, code[k], &up[k], &bad) | mantissa_at(ld, mant[k], (uint64_t)j * keep), width);
      for (uint32_t j = nt; j-- > fwd;)
        store_elem(out, lane_elem(g + k, j, E),
                   decode_elem_back(ld, code[k], &down[k], &bad) | mantissa_at(ld, mant[k], (uint64_t)j * keep),
                   width);
    }
    for (unsigned k = 0; k < GROUP; k++) {
      if (up[k] != down[k]) bad = 1;
    }
    if (bad) return LCT_ECORRUPT;
  }
  return 0;
}

/* Decodes one coded chunk (header already read) into out; the chunk's bytes
 * are blob[at, at + size). Returns 0 or a negative error. */
static inline __attribute__((always_inline)) int decode_coded_chunk(decoder *d, const uint8_t *blob, uint64_t len,
                                                                   uint64_t at, uint64_t size, uint64_t n,
                                                                   uint8_t *out, const unsigned width, const int v2) {
  const uint8_t *ch = blob + at;
  const unsigned m = d->lay.mant_bits, s = d->lay.sym_bits, trim = ch[1], keep = m - trim, E = 4 / width;
  const unsigned esc = d->lay.n_syms - 1;
  uint32_t lane_bits[LCT_LANES], lane_elems[LCT_LANES], mant_bits[LCT_LANES];
  uint64_t total = 0;
  for (unsigned t = 0; t < LCT_LANES; t++) {
    const uint64_t lo = (uint64_t)t * LCT_LANE_ELEMS;
    lane_bits[t] = get16(ch + 8 + 2 * t);
    lane_elems[t] = v2 ? lct__v2_lane_elems((uint32_t)n, t, E)
                       : (uint32_t)(lo >= n ? 0 : (n - lo < LCT_LANE_ELEMS ? n - lo : LCT_LANE_ELEMS));
    mant_bits[t] = lane_elems[t] * keep;
    /* An empty lane writes nothing; no lane takes more than an ESC sequence per element. */
    if (lane_bits[t] > lane_elems[t] * (LCT_MAX_CODE_LEN + s)) return LCT_ECORRUPT;
    total += lane_bits[t];
  }
  const uint64_t mant_bytes = pad4((n * keep + 7) / 8), code_bytes = pad4((total + 7) / 8);
  if (LCT_CODED_CHUNK_HEADER + mant_bytes + code_bytes != size) return LCT_ECORRUPT;
  const uint64_t mant_at = at + LCT_CODED_CHUNK_HEADER, code_at = mant_at + mant_bytes;
  if (!zero_bits_after(blob + mant_at, mant_bytes, n * keep) || !zero_bits_after(blob + code_at, code_bytes, total))
    return LCT_ECORRUPT;

  lane_decoder ld = {d->table, d->table_back, blob, blob, len, len, m, s, trim, keep, esc,
                     ((uint64_t)1 << keep) - 1, ((uint64_t)1 << s) - 1};
  if (v2) {
    deinterleave(blob + code_at, code_bytes, lane_bits, d->code);
    deinterleave(blob + mant_at, mant_bytes, mant_bits, d->mant);
    return decode_v2_lanes(d, &ld, lane_bits, lane_elems, out, width);
  }
  uint64_t code_start[LCT_LANES], mant_start[LCT_LANES];
  for (unsigned t = 0, sum = 0; t < LCT_LANES; sum += lane_bits[t], t++) {
    code_start[t] = code_at * 8 + sum;
    mant_start[t] = mant_at * 8 + (uint64_t)t * LCT_LANE_ELEMS * keep;
  }
  return decode_v1_lanes(&ld, len, code_start, mant_start, lane_bits, lane_elems, out, width);
}

HOT_CLONES static int decode_chunk(decoder *d, const uint8_t *blob, uint64_t len, uint64_t at, uint64_t size,
                                   uint64_t n, uint64_t c, uint8_t *out, int v2) {
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
#define CODED(width, version) decode_coded_chunk(d, blob, len, at, size, n, out, width, version)
    switch (w) {
    case 4: rc = v2 ? CODED(4, 1) : CODED(4, 0); break;
    case 2: rc = v2 ? CODED(2, 1) : CODED(2, 0); break;
    default: rc = v2 ? CODED(1, 1) : CODED(1, 0); break;
    }
#undef CODED
  } else {
    return LCT_ECORRUPT;
  }
  if (rc) return rc;
  return lct_check(out, n * w, c * (LCT_CHUNK_ELEMS * w / 4)) == get32(ch + 4) ? 0 : LCT_ECHECKSUM;
}

/* The one decoder of a whole blob: into dst, or (dst NULL) chunk by chunk
 * into a chunk-sized scratch, each chunk handed to fn (validation). */
static int decode_blob(decoder *d, const void *blob, size_t len, void *dst, size_t cap, lct_chunk_fn fn, void *arg) {
  lct_blob_info info;
  int rc = lct_blob_info_read(blob, len, &info);
  if (rc) return rc;
  if (dst && cap < info.raw_bytes) return LCT_EBUFSIZE;
  const uint8_t *p = blob;
  lct__dtype_layout(info.dtype, &d->lay);
  uint32_t cb_bytes = get32(p + 20);
  if (cb_bytes) {
    lct_codebook cb;
    if (lct_codebook_parse(info.dtype, p + LCT_HEADER_BYTES, cb_bytes, &cb)) return LCT_ECORRUPT;
    lct_codebook_decode_table(&cb, d->table);
    for (unsigned i = 0; i < (1u << LCT_MAX_CODE_LEN); i++)
      d->table_back[i] = d->table[lct__reverse_bits(i, LCT_MAX_CODE_LEN)];
  }
  uint8_t scratch[dst ? 1 : LCT_CHUNK_ELEMS * 4];
  const uint64_t table = table_offset(cb_bytes);
  uint64_t expect = table + 8 * (uint64_t)info.n_chunks;
  for (uint64_t c = 0; c < info.n_chunks; c++) {
    uint64_t at = get64(p + table + 8 * c);
    uint64_t end = c + 1 < info.n_chunks ? get64(p + table + 8 * (c + 1)) : len;
    if (at != expect || at % 4 || end < at || end > len) return LCT_ECORRUPT;
    uint64_t n = chunk_elems(info.n_elems, c);
    uint8_t *out = dst ? (uint8_t *)dst + c * LCT_CHUNK_ELEMS * d->lay.width : scratch;
    rc = decode_chunk(d, p, len, at, end - at, n, c, out, p[4] == 2);
    if (rc) return rc;
    if (fn) fn(arg, out, n * d->lay.width);
    expect = end;
  }
  return expect == len ? 0 : LCT_ECORRUPT;
}

/* decode_blob with its decoder (about 100 KiB) off the caller's stack. */
static int decode_blob_alloc(const void *blob, size_t len, void *dst, size_t cap, lct_chunk_fn fn, void *arg) {
  decoder *d = malloc(sizeof *d);
  if (!d) return LCT_ENOMEM;
  const int rc = decode_blob(d, blob, len, dst, cap, fn, arg);
  free(d);
  return rc;
}

int lct_decode(const void *blob, size_t len, void *dst, size_t cap) {
  if (!dst) {
    lct_blob_info info;
    int rc = lct_blob_info_read(blob, len, &info);
    if (rc) return rc;
    if (info.raw_bytes) return cap < info.raw_bytes ? LCT_EBUFSIZE : LCT_EINVAL;
  }
  return decode_blob_alloc(blob, len, dst, cap, NULL, NULL);
}

int lct_validate(const void *blob, size_t len, lct_chunk_fn fn, void *arg) {
  return decode_blob_alloc(blob, len, NULL, 0, fn, arg);
}

size_t lct_codec_struct_size(lct_codec_struct which) {
  switch (which) {
  case LCT_CODEC_STRUCT_CODEBOOK: return sizeof(lct_codebook);
  case LCT_CODEC_STRUCT_ENCODE_STATS: return sizeof(lct_encode_stats);
  case LCT_CODEC_STRUCT_BLOB_INFO: return sizeof(lct_blob_info);
  }
  return 0;
}
