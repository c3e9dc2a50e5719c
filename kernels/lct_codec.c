/* lct_codec.c — CPU reference encoder and validating decoder for the LCT blob format. */
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
  if (w->n) w->n = 8;
  bw_flush(w);
  while ((w->out - base) % 4) {
    if (w->out < w->end) *w->out = 0;
    w->out++;
  }
  return (uint64_t)(w->out - base);
}

/* Per-symbol entry: the bits to write (low 32), escaped at bit ENC_ESC_AT
 * and the length from bit ENC_LEN_AT. A symbol the codebook lacks gets the
 * whole ESC sequence (ESC code, then the symbol), so the hot loop has no
 * branch for it. Summing a chunk's entries counts its escapes at ENC_ESC_AT:
 * below it, 16384 codes of at most 22 bits; above, 16384 flags stay under
 * the lengths, whose sum only wraps past bit 63. */
#define ENC_ESC_AT 40
#define ENC_LEN_AT 56
/* Longest code section a chunk can need: every element escaped, plus slack
 * for the writer's 8-byte stores. */
#define CODE_SCRATCH ((size_t)LCT_CHUNK_ELEMS * (LCT_MAX_CODE_LEN + 10) / 8 + 16)
typedef struct {
  lct__layout lay;
  uint64_t enc[LCT_MAX_SYMS - 1];
  uint8_t scratch[CODE_SCRATCH]; /* the code section is built here, then placed after the mantissas */
} encoder;

static void encoder_init(encoder *e, const lct_codebook *cb) {
  const unsigned esc = e->lay.n_syms - 1, esc_len = cb->len[esc];
  for (unsigned sym = 0; sym < esc; sym++) {
    if (cb->len[sym]) {
      e->enc[sym] = cb->code[sym] | (uint64_t)cb->len[sym] << ENC_LEN_AT;
    } else {
      e->enc[sym] = (cb->code[esc] | sym << esc_len) | 1ull << ENC_ESC_AT |
                    (uint64_t)(esc_len + e->lay.sym_bits) << ENC_LEN_AT;
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
 * compile-time constant in each caller so the element loop specializes. */
static inline __attribute__((always_inline)) size_t encode_chunk(encoder *e, const uint8_t *src, uint64_t n, uint64_t c,
                                  uint8_t *dst, lct_encode_stats *st, const unsigned width) {
  const lct__layout *lay = &e->lay;
  const uint64_t raw_size = LCT_RAW_CHUNK_HEADER + pad4(n * width);
  unsigned trim;
  const uint32_t check = chunk_scan(src, n, lay, width, c * (LCT_CHUNK_ELEMS * width / 4), &trim);
  const unsigned keep = lay->mant_bits - trim;
  const uint64_t mant_bytes = pad4((n * keep + 7) / 8);
  if (LCT_CODED_CHUNK_HEADER + mant_bytes >= raw_size) goto raw;

  {
    uint8_t *code = (uint8_t *)e->scratch;
    bit_writer cw = {code, code + CODE_SCRATCH, 0, 0};
    const unsigned m = lay->mant_bits;
    uint64_t tally = 0, lane_start = 0; /* tally: the sum of the chunk's entries */
    uint32_t lane_bits[LCT_LANES] = {0}, widest = 0; /* 0 for empty lanes */
    for (unsigned t = 0; t < LCT_LANES && (uint64_t)t * LCT_LANE_ELEMS < n; t++) {
      uint64_t lo = (uint64_t)t * LCT_LANE_ELEMS, hi = lo + LCT_LANE_ELEMS < n ? lo + LCT_LANE_ELEMS : n, i = lo;
      for (; i + 2 <= hi; i += 2) { /* two codes (<= 44 bits) in one add */
        const uint64_t e0 = e->enc[lct__load_elem(src, i, width) >> m],
                       e1 = e->enc[lct__load_elem(src, i + 1, width) >> m];
        const unsigned len0 = (unsigned)(e0 >> ENC_LEN_AT);
        tally += e0 + e1;
        bw_add(&cw, (uint32_t)e0 | (uint64_t)(uint32_t)e1 << len0, len0 + (unsigned)(e1 >> ENC_LEN_AT));
        bw_flush(&cw);
      }
      if (i < hi) {
        const uint64_t e0 = e->enc[lct__load_elem(src, i, width) >> m];
        tally += e0;
        bw_add(&cw, (uint32_t)e0, (unsigned)(e0 >> ENC_LEN_AT));
        bw_flush(&cw);
      }
      uint64_t lane_end = 8 * (uint64_t)(cw.out - code) + cw.n;
      lane_bits[t] = (uint32_t)(lane_end - lane_start);
      widest |= lane_bits[t];
      lane_start = lane_end;
    }
    const uint64_t code_bytes = bw_finish(&cw, code);
    st->code_bits += lane_start; /* counted for raw fallbacks too: they measure the codebook's fit */
    st->escapes += (tally >> ENC_ESC_AT) & 0xffff;
    const uint64_t size = LCT_CODED_CHUNK_HEADER + mant_bytes + code_bytes;
    /* A lane of 4096 code bits or more (16 per element: ESC most of the time)
     * has no field to hold its length; its chunk is stored raw. */
    if (size >= raw_size || widest >> LCT_LANE_FIELD_BITS) goto raw;
    memset(dst, 0, 8);
    dst[0] = 1;
    dst[1] = (uint8_t)trim;
    put32(dst + 4, check);
    bit_writer lw = {dst + 8, dst + LCT_CODED_CHUNK_HEADER, 0, 0};
    for (unsigned t = 0; t < LCT_LANES; t++) {
      bw_add(&lw, lane_bits[t], LCT_LANE_FIELD_BITS);
      bw_flush(&lw);
    }
    bw_finish(&lw, dst + 8);
    uint8_t *mant = dst + LCT_CODED_CHUNK_HEADER;
    if (keep) pack_mantissas(src, n, width, m, trim, keep, mant, mant_bytes);
    memcpy(mant + mant_bytes, code, code_bytes);
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
    /* Codes come from the serialized lengths, as every decoder derives them
     * (the GPU encoder does the same): a codebook whose lengths are out of
     * range is refused, and one whose codes disagree with its lengths still
     * gives a blob that decodes to src. */
    lct_codebook canon;
    if (lct_codebook_canonical(cb, out + LCT_HEADER_BYTES, cb_bytes, &canon) != 0) return LCT_EINVAL;
    encoder_init(&e, &canon);
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
  if (p[4] != 1 && p[4] != LCT_FORMAT_VERSION) return LCT_EVERSION;
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

/* How a blob's version lays out its coded chunks: lanes of lane_elems
 * elements, their lengths in a header of `header` bytes. */
typedef struct {
  unsigned version, lanes, lane_elems, header;
} chunk_form;

static chunk_form chunk_form_of(unsigned version) {
  return version == 1 ? (chunk_form){1, LCT_V1_LANES, LCT_V1_LANE_ELEMS, LCT_V1_CODED_CHUNK_HEADER}
                      : (chunk_form){2, LCT_LANES, LCT_LANE_ELEMS, LCT_CODED_CHUNK_HEADER};
}

/* Lane t's lane_bits field of a coded chunk ch (version 2: 12 bits at bit 12 t
 * of bytes 8..103, so in the two bytes from byte 8 + 12 t / 8, at bit 0 or 4). */
static inline uint32_t lane_field(const uint8_t *ch, const chunk_form *f, unsigned t) {
  _Static_assert(LCT_LANE_FIELD_BITS == 12, "a field within two bytes");
  if (f->version == 1) return get16(ch + 8 + 2 * t);
  const unsigned b = LCT_LANE_FIELD_BITS * t;
  return (get16(ch + 8 + b / 8) >> (b % 8)) & ((1u << LCT_LANE_FIELD_BITS) - 1);
}

typedef struct {
  lct__layout lay;
  chunk_form form;
  uint16_t table[1 << LCT_MAX_CODE_LEN];
} decoder;

typedef struct {
  const uint16_t *table;
  const uint8_t *blob;
  uint64_t len;
  unsigned m, s, trim, keep, esc;
  uint64_t kmask, smask;
} lane_decoder;

/* One element of a lane: its code at bit *pos, its kept mantissa at *mpos.
 * An invalid code sets *bad and consumes nothing; the caller checks once. */
static inline uint32_t decode_elem(const lane_decoder *ld, uint64_t *pos, uint64_t *mpos, uint32_t *bad,
                                   const int in_bounds) {
  /* in_bounds: the caller proved every read stays 8 bytes inside the blob */
  uint64_t v = in_bounds ? get64(ld->blob + (*pos >> 3)) >> (*pos & 7) : peek64(ld->blob, ld->len, *pos);
  uint32_t ent = ld->table[v & ((1u << LCT_MAX_CODE_LEN) - 1)];
  *bad |= !ent;
  uint32_t l = ent >> 11, sym = ent & 0x7ff;
  *pos += l;
  if (__builtin_expect(sym == ld->esc, 0)) {
    sym = (uint32_t)((v >> l) & ld->smask);
    *pos += ld->s;
  }
  uint64_t mv = in_bounds ? get64(ld->blob + (*mpos >> 3)) >> (*mpos & 7) : peek64(ld->blob, ld->len, *mpos);
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

/* Decodes one coded chunk (header already read) into out; the chunk's bytes
 * are blob[at, at + size). Returns 0 or a negative error. */
static inline __attribute__((always_inline)) int decode_coded_chunk(const decoder *d, const uint8_t *blob, uint64_t len, uint64_t at, uint64_t size,
                                     uint64_t n, uint8_t *out, const unsigned width, const unsigned ge) {
  const uint8_t *ch = blob + at;
  const unsigned m = d->lay.mant_bits, s = d->lay.sym_bits, trim = ch[1], keep = m - trim;
  const unsigned esc = d->lay.n_syms - 1, lanes = d->form.lanes;
  uint64_t lane_start[LCT_LANES + 1], total = 0;
  for (unsigned t = 0; t < lanes; t++) {
    uint32_t bits = lane_field(ch, &d->form, t);
    if ((uint64_t)t * ge >= n && bits) return LCT_ECORRUPT;
    lane_start[t] = total;
    total += bits;
  }
  lane_start[lanes] = total;
  const uint64_t mant_bytes = pad4((n * keep + 7) / 8), code_bytes = pad4((total + 7) / 8);
  if (d->form.header + mant_bytes + code_bytes != size) return LCT_ECORRUPT;
  const uint64_t mant_at = at + d->form.header, code_at = mant_at + mant_bytes;
  if (!zero_bits_after(blob + mant_at, mant_bytes, n * keep) || !zero_bits_after(blob + code_at, code_bytes, total))
    return LCT_ECORRUPT;

  const uint64_t code_bit0 = code_at * 8, mant_bit0 = mant_at * 8;
  const lane_decoder ld = {d->table, blob, len, m, s, trim, keep, esc, ((uint64_t)1 << keep) - 1, ((uint64_t)1 << s) - 1};
  /* Lanes are independent streams: decoding four at once overlaps their
   * load-lookup-shift dependency chains. */
  enum { GROUP = 4 };
  for (unsigned g = 0; g < lanes && (uint64_t)g * ge < n; g += GROUP) {
    uint64_t pos[GROUP], mpos[GROUP], cnt[GROUP];
    uint32_t bad = 0;
    for (unsigned k = 0; k < GROUP; k++) {
      uint64_t lo = (uint64_t)(g + k) * ge;
      cnt[k] = lo >= n ? 0 : (n - lo < ge ? n - lo : ge);
      pos[k] = code_bit0 + lane_start[g + k];
      mpos[k] = mant_bit0 + lo * keep;
    }
    /* A lane reads at most 22 bits per element past its start: when even the
     * last lane of the group stays 8 bytes inside the blob, skip the checks. */
    const int in_bounds = (pos[GROUP - 1] + ge * (LCT_MAX_CODE_LEN + 10)) / 8 + 8 <= len;
    uint8_t *lane_out = out + (uint64_t)g * ge * width;
    if (in_bounds) {
      for (uint64_t j = 0; j < cnt[GROUP - 1]; j++) {
        for (unsigned k = 0; k < GROUP; k++)
          store_elem(lane_out, k * ge + j, decode_elem(&ld, &pos[k], &mpos[k], &bad, 1), width);
      }
    } else {
      for (uint64_t j = 0; j < cnt[GROUP - 1]; j++) {
        for (unsigned k = 0; k < GROUP; k++)
          store_elem(lane_out, k * ge + j, decode_elem(&ld, &pos[k], &mpos[k], &bad, 0), width);
      }
    }
    for (unsigned k = 0; k < GROUP; k++) {
      for (uint64_t j = cnt[GROUP - 1]; j < cnt[k]; j++) {
        store_elem(lane_out, k * ge + j, decode_elem(&ld, &pos[k], &mpos[k], &bad, 0), width);
      }
      if (pos[k] != code_bit0 + lane_start[g + k + 1]) bad = 1;
    }
    if (bad) return LCT_ECORRUPT;
  }
  return 0;
}

/* decode_coded_chunk with the width and the lane length as constants in its loops. */
static inline __attribute__((always_inline)) int decode_coded_width(const decoder *d, const uint8_t *blob, uint64_t len,
                                                                    uint64_t at, uint64_t size, uint64_t n, uint8_t *out,
                                                                    const unsigned width) {
  return d->form.lane_elems == LCT_LANE_ELEMS
             ? decode_coded_chunk(d, blob, len, at, size, n, out, width, LCT_LANE_ELEMS)
             : decode_coded_chunk(d, blob, len, at, size, n, out, width, LCT_V1_LANE_ELEMS);
}

HOT_CLONES static int decode_chunk(const decoder *d, const uint8_t *blob, uint64_t len, uint64_t at, uint64_t size, uint64_t n,
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
    if (ch[1] > d->lay.mant_bits || size < d->form.header) return LCT_ECORRUPT;
    switch (w) {
    case 4: rc = decode_coded_width(d, blob, len, at, size, n, out, 4); break;
    case 2: rc = decode_coded_width(d, blob, len, at, size, n, out, 2); break;
    default: rc = decode_coded_width(d, blob, len, at, size, n, out, 1); break;
    }
  } else {
    return LCT_ECORRUPT;
  }
  if (rc) return rc;
  return lct_check(out, n * w, c * (LCT_CHUNK_ELEMS * w / 4)) == get32(ch + 4) ? 0 : LCT_ECHECKSUM;
}

/* The one decoder of a whole blob: into dst, or (dst NULL) chunk by chunk
 * into a chunk-sized scratch, each chunk handed to fn (validation). */
static int decode_blob(const void *blob, size_t len, void *dst, size_t cap, lct_chunk_fn fn, void *arg) {
  lct_blob_info info;
  int rc = lct_blob_info_read(blob, len, &info);
  if (rc) return rc;
  if (dst && cap < info.raw_bytes) return LCT_EBUFSIZE;
  const uint8_t *p = blob;
  decoder d;
  lct__dtype_layout(info.dtype, &d.lay);
  d.form = chunk_form_of(p[4]);
  uint32_t cb_bytes = get32(p + 20);
  if (cb_bytes) {
    lct_codebook cb;
    if (lct_codebook_parse(info.dtype, p + LCT_HEADER_BYTES, cb_bytes, &cb)) return LCT_ECORRUPT;
    lct_codebook_decode_table(&cb, d.table);
  }
  uint8_t scratch[dst ? 1 : LCT_CHUNK_ELEMS * 4];
  const uint64_t table = table_offset(cb_bytes);
  uint64_t expect = table + 8 * (uint64_t)info.n_chunks;
  for (uint64_t c = 0; c < info.n_chunks; c++) {
    uint64_t at = get64(p + table + 8 * c);
    uint64_t end = c + 1 < info.n_chunks ? get64(p + table + 8 * (c + 1)) : len;
    if (at != expect || at % 4 || end < at || end > len) return LCT_ECORRUPT;
    uint64_t n = chunk_elems(info.n_elems, c);
    uint8_t *out = dst ? (uint8_t *)dst + c * LCT_CHUNK_ELEMS * d.lay.width : scratch;
    rc = decode_chunk(&d, p, len, at, end - at, n, c, out);
    if (rc) return rc;
    if (fn) fn(arg, out, n * d.lay.width);
    expect = end;
  }
  return expect == len ? 0 : LCT_ECORRUPT;
}

int lct_decode(const void *blob, size_t len, void *dst, size_t cap) {
  if (!dst) {
    lct_blob_info info;
    int rc = lct_blob_info_read(blob, len, &info);
    if (rc) return rc;
    if (info.raw_bytes) return cap < info.raw_bytes ? LCT_EBUFSIZE : LCT_EINVAL;
  }
  return decode_blob(blob, len, dst, cap, NULL, NULL);
}

int lct_validate(const void *blob, size_t len, lct_chunk_fn fn, void *arg) {
  return decode_blob(blob, len, NULL, 0, fn, arg);
}

size_t lct_codec_struct_size(lct_codec_struct which) {
  switch (which) {
  case LCT_CODEC_STRUCT_CODEBOOK: return sizeof(lct_codebook);
  case LCT_CODEC_STRUCT_ENCODE_STATS: return sizeof(lct_encode_stats);
  case LCT_CODEC_STRUCT_BLOB_INFO: return sizeof(lct_blob_info);
  }
  return 0;
}
