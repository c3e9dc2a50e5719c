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
/* A chunk's raw words lane by lane: lane t's word g is chunk word 32 g + t
 * (proto/FORMAT.md, "Lanes"), so a lane's steps lie in order. */
typedef uint32_t lane_words[LCT_LANES][LCT_LANE_ELEMS];

/* Gathers the nbytes of a chunk into lanes; a partial last word is
 * zero-padded. Rows are taken 8 at a time, so that both the reads and the
 * writes of a block stay in few cache lines. */
static void gather_lanes(const uint8_t *src, uint32_t nbytes, lane_words lanes) {
  const uint32_t rows = nbytes / 128;
  uint32_t g0 = 0;
  for (; g0 + 8 <= rows; g0 += 8) {
    for (unsigned t = 0; t < LCT_LANES; t++) {
      for (uint32_t g = g0; g < g0 + 8; g++) lanes[t][g] = get32(src + 4 * (32 * g + t));
    }
  }
  for (uint32_t g = g0; g < rows; g++) {
    for (unsigned t = 0; t < LCT_LANES; t++) lanes[t][g] = get32(src + 4 * (32 * g + t));
  }
  for (unsigned t = 0; t < LCT_LANES && 128 * rows + 4 * t < nbytes; t++) {
    const uint32_t at = 128 * rows + 4 * t, len = nbytes - at < 4 ? nbytes - at : 4;
    uint8_t word[4] = {0};
    memcpy(word, src + at, len);
    lanes[t][rows] = get32(word);
  }
}

/* The inverse: the chunk's nbytes from lanes. */
static void scatter_lanes(const lane_words lanes, uint32_t nbytes, uint8_t *dst) {
  const uint32_t rows = nbytes / 128;
  uint32_t g0 = 0;
  for (; g0 + 8 <= rows; g0 += 8) {
    for (unsigned t = 0; t < LCT_LANES; t++) {
      for (uint32_t g = g0; g < g0 + 8; g++) put32(dst + 4 * (32 * g + t), lanes[t][g]);
    }
  }
  for (uint32_t g = g0; g < rows; g++) {
    for (unsigned t = 0; t < LCT_LANES; t++) put32(dst + 4 * (32 * g + t), lanes[t][g]);
  }
  for (unsigned t = 0; t < LCT_LANES && 128 * rows + 4 * t < nbytes; t++) {
    const uint32_t at = 128 * rows + 4 * t, len = nbytes - at < 4 ? nbytes - at : 4;
    uint8_t word[4];
    put32(word, lanes[t][rows]);
    memcpy(dst + at, word, len);
  }
}

typedef struct {
  lct__layout lay;
  uint32_t enc[LCT_MAX_SYMS - 1];
  lane_images code, mant; /* each lane's streams, then interleaved into the chunk */
  lane_words lanes; /* the chunk's raw words, lane by lane */
} encoder;

static void encoder_init(encoder *e, const lct_codebook *cb) {
  const unsigned esc = e->lay.n_syms - 1, esc_len = cb->len[esc];
  for (unsigned sym = 0; sym < esc; sym++) {
    if (cb->len[sym]) {
      e->enc[sym] = cb->code[sym] | (uint32_t)cb->len[sym] << 24;
    } else {
      e->enc[sym] = (cb->code[esc] | sym << esc_len) | (esc_len + e->lay.sym_bits) << 24 | 1u << 31;
    }
  }
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

/* Lays the lane streams out as one version 2 section at out
 * (proto/FORMAT.md, "Interleaved sections"): rows of one word per lane,
 * then each lane's remaining bits end to end, zero-padded. */
static void interleave(const lane_images img, const uint32_t bits[LCT_LANES], uint8_t *out) {
  const uint32_t rows = section_rows(bits);
  for (uint32_t i = 0; i < rows; i++) {
    for (unsigned t = 0; t < LCT_LANES; t++) memcpy(out + 4 * (32 * (uint64_t)i + t), img[t] + 4 * i, 4);
  }
  const uint64_t bytes = section_bytes(bits);
  bit_writer tw = {out + 128 * (uint64_t)rows, out + bytes, 0, 0};
  for (unsigned t = 0; t < LCT_LANES; t++) {
    for (uint32_t p = 32 * rows; p < bits[t]; p += 32) {
      const unsigned nb = bits[t] - p < 32 ? bits[t] - p : 32;
      bw_add(&tw, get32(img[t] + p / 8) & (uint32_t)((1ull << nb) - 1), nb);
      bw_flush(&tw);
    }
  }
  bw_finish(&tw, out);
}

/* Writes the kept mantissa bits of n elements as one LSB-first stream of
 * mant_bytes bytes (the section, padding included). */
static void pack_mantissas_scalar(const uint8_t *src, uint64_t n, unsigned width, unsigned m, unsigned trim,
                                  unsigned keep, uint8_t *mant, uint64_t mant_bytes) {
  bit_writer mw = {mant, mant + mant_bytes, 0, 0};
  const uint32_t mmask = (1u << m) - 1;
  const unsigned per_flush = 56 / keep;
  for (uint64_t i = 0; i < n;) {
    uint64_t stop = n - i < per_flush ? n : i + per_flush;
    for (; i < stop; i++) bw_add(&mw, (lct__load_elem(src, i, width) & mmask) >> trim, keep);
    bw_flush(&mw);
  }
  bw_finish(&mw, mant);
}

#if defined(__x86_64__) && defined(__GNUC__)
/* With BMI2, one pext gathers the kept bits of a whole 64-bit word of elements. */
__attribute__((target("bmi2"))) static void pack_mantissas_bmi2(const uint8_t *src, uint64_t n, unsigned width,
                                                                 unsigned m, unsigned trim, unsigned keep,
                                                                 uint8_t *mant, uint64_t mant_bytes) {
  bit_writer mw = {mant, mant + mant_bytes, 0, 0};
  const unsigned per_word = 8 / width, bits = per_word * keep;
  uint64_t lane_mask = ((1ull << m) - 1) & ~((1ull << trim) - 1), mask = 0;
  for (unsigned k = 0; k < per_word; k++) mask |= lane_mask << (8 * width * k);
  uint64_t i = 0;
  for (; i + per_word <= n; i += per_word) {
    bw_add(&mw, __builtin_ia32_pext_di(get64(src + i * width), mask), bits);
    bw_flush(&mw);
  }
  for (; i < n; i++) {
    bw_add(&mw, (lct__load_elem(src, i, width) & lane_mask) >> trim, keep);
    bw_flush(&mw);
  }
  bw_finish(&mw, mant);
}

static void pack_mantissas(const uint8_t *src, uint64_t n, unsigned width, unsigned m, unsigned trim, unsigned keep,
                           uint8_t *mant, uint64_t mant_bytes) {
  /* A load of the CPU model libgcc filled at start: no lazy state shared between threads. */
  (__builtin_cpu_supports("bmi2") ? pack_mantissas_bmi2 : pack_mantissas_scalar)(src, n, width, m, trim, keep, mant,
                                                                                 mant_bytes);
}
#else
#define pack_mantissas pack_mantissas_scalar
#endif

/* Codes one chunk at dst, which has room for its raw form. The width is a
 * compile-time constant in each caller so the element loop specializes.
 * The chunk's words are gathered lane by lane first; each lane's code and
 * mantissa streams are then written as version 1 writes a lane, on their
 * own, and interleaved. */
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
    gather_lanes(src, (uint32_t)(n * width), e->lanes);
    for (unsigned t = 0; t < LCT_LANES; t++) {
      const uint32_t nt = lct__v2_lane_elems((uint32_t)n, t, E);
      const uint8_t *lane = (const uint8_t *)e->lanes[t];
      bit_writer cw = {e->code[t], e->code[t] + LANE_IMAGE, 0, 0};
      uint32_t i = 0;
      for (; i + 2 <= nt; i += 2) { /* two codes (<= 44 bits) per flush */
        uint32_t e0 = e->enc[lct__load_elem(lane, i, width) >> m], e1 = e->enc[lct__load_elem(lane, i + 1, width) >> m];
        escapes += (e0 >> 31) + (e1 >> 31);
        bw_add(&cw, e0 & ENC_CODE_MASK, (e0 >> 24) & 0x7f);
        bw_add(&cw, e1 & ENC_CODE_MASK, (e1 >> 24) & 0x7f);
        bw_flush(&cw);
      }
      if (i < nt) {
        uint32_t e0 = e->enc[lct__load_elem(lane, i, width) >> m];
        escapes += e0 >> 31;
        bw_add(&cw, e0 & ENC_CODE_MASK, (e0 >> 24) & 0x7f);
      }
      code_bits[t] = (uint32_t)(8 * (cw.out - e->code[t]) + cw.n);
      bw_finish(&cw, e->code[t]);
      mant_bits[t] = nt * keep;
      if (keep) pack_mantissas(lane, nt, width, m, trim, keep, e->mant[t], pad4(((uint64_t)nt * keep + 7) / 8));
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
  uint16_t table[1 << LCT_MAX_CODE_LEN];
  lane_images code, mant; /* version 2: each lane's streams, taken out of the interleaved sections */
  lane_words lanes;       /* version 2: the decoded words, lane by lane */
} decoder;

/* Where a lane decoder reads: code and mantissa bits from cbase and mbase
 * (clen and mlen bytes). */
typedef struct {
  const uint16_t *table;
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
  const uint32_t rows = section_rows(bits);
  for (uint32_t i = 0; i < rows; i++) {
    for (unsigned t = 0; t < LCT_LANES; t++) memcpy(img[t] + 4 * i, sec + 4 * (32 * (uint64_t)i + t), 4);
  }
  uint64_t pos = 8 * 128 * (uint64_t)rows;
  for (unsigned t = 0; t < LCT_LANES; t++) {
    uint32_t p = 32 * rows;
    for (; p < bits[t]; p += 32) {
      const unsigned nb = bits[t] - p < 32 ? bits[t] - p : 32;
      put32(img[t] + p / 8, (uint32_t)peek64(sec, sec_bytes, pos) & (uint32_t)((1ull << nb) - 1));
      pos += nb;
    }
    memset(img[t] + p / 8, 0, 8);
  }
}

/* Decodes one coded chunk (header already read) into out; the chunk's bytes
 * are blob[at, at + size). Lane t's step j is chunk element 512 t + j in
 * version 1, element 32 E (j / E) + E t + j % E in version 2, whose lane streams are taken
 * out of their sections first and whose lanes are decoded side by side,
 * then scattered to their words. Returns 0 or a negative error. */
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

  /* Each lane's first code and mantissa bit, and its last code bit. */
  uint64_t code_start[LCT_LANES], mant_start[LCT_LANES], code_end[LCT_LANES];
  lane_decoder ld = {d->table, blob, blob, len, len, m, s, trim, keep, esc, ((uint64_t)1 << keep) - 1,
                     ((uint64_t)1 << s) - 1};
  if (v2) {
    deinterleave(blob + code_at, code_bytes, lane_bits, d->code);
    deinterleave(blob + mant_at, mant_bytes, mant_bits, d->mant);
    ld.cbase = d->code[0];
    ld.mbase = d->mant[0];
    ld.clen = ld.mlen = sizeof d->code;
  }
  for (unsigned t = 0, sum = 0; t < LCT_LANES; sum += lane_bits[t], t++) {
    code_start[t] = v2 ? 8 * LANE_IMAGE * t : code_at * 8 + sum;
    mant_start[t] = v2 ? 8 * LANE_IMAGE * t : mant_at * 8 + (uint64_t)t * LCT_LANE_ELEMS * keep;
    code_end[t] = code_start[t] + lane_bits[t];
  }
  /* Lanes are independent streams: decoding four at once overlaps their
   * load-lookup-shift dependency chains. A lane has no more steps than the
   * one before it. */
  enum { GROUP = 4 };
  for (unsigned g = 0; g < LCT_LANES && lane_elems[g]; g += GROUP) {
    uint64_t pos[GROUP], mpos[GROUP];
    uint8_t *lane_out[GROUP];
    uint32_t bad = 0;
    for (unsigned k = 0; k < GROUP; k++) {
      pos[k] = code_start[g + k];
      mpos[k] = mant_start[g + k];
      lane_out[k] = v2 ? (uint8_t *)d->lanes[g + k] : out + (uint64_t)(g + k) * LCT_LANE_ELEMS * width;
    }
    /* A lane reads at most 22 bits per element past its start: when even the
     * last lane of the group stays 8 bytes inside the blob, skip the checks
     * (lane images have that room). */
    const int in_bounds = v2 || (pos[GROUP - 1] + LCT_LANE_ELEMS * (LCT_MAX_CODE_LEN + 10)) / 8 + 8 <= len;
#define LANE_STEP(k, j, checked)                                                                              \
  store_elem(lane_out[k], (j), decode_elem(&ld, &pos[k], &mpos[k], &bad, checked), width)
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
      if (pos[k] != code_end[g + k]) bad = 1;
    }
#undef LANE_STEP
    if (bad) return LCT_ECORRUPT;
  }
  if (v2) scatter_lanes((const uint32_t(*)[LCT_LANE_ELEMS])d->lanes, (uint32_t)(n * width), out);
  return 0;
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
