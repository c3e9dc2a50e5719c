/* lct_cuda_decode.cuh — device code: blob header/codebook validation and the chunk decoder (a warp per chunk, a thread per lane). */
#ifndef LCT_CUDA_DECODE_CUH
#define LCT_CUDA_DECODE_CUH

#include "lct_cuda_common.cuh"

#define LCT__HDR_THREADS 512
#define LCT__TABLE_ENTRIES (1u << LCT_MAX_CODE_LEN)

/* One blob of a decode launch. */
struct lct__dec_tensor {
  const uint8_t *blob;
  uint64_t blob_bytes;
  uint8_t *dst;
  uint64_t n_elems;
  int *status;
  uint32_t begin;   /* its first chunk block in the launch (LCT__DEC_WARPS chunks each) */
  uint32_t slot;    /* its index in the workspace arrays */
  uint32_t aligned; /* dst is 4-byte aligned */
};

/* What the blobs of a decode launch share: the workspace. */
struct lct__dec_common {
  uint8_t *tables;   /* a 4096-entry decode table per slot, LCT__TABLE_BYTES each (see lct__dec_tab) */
  int *ws_status;    /* status per slot */
  unsigned *ws_done; /* finished chunks per slot */
};

template <unsigned N> using lct__dec_params = lct__launch_params<lct__dec_tensor, lct__dec_common, N>;

#define LCT__TABLE_BYTES (LCT__TABLE_ENTRIES * 2) /* workspace per slot */

/* Decode table of a dtype, indexed by the next 12 stream bits, the first as
 * the index's most significant bit (the code read MSB first); a window's
 * lookup is at byte offset (window >> SHR) & OFFSETS. Entry (16 bits): SHR
 * minus the code length in bits 0-4 (the right shift of the window that
 * brings the next code's index to that place, and the length as the code
 * reader sums it: see lct__take_pair), bit 5 (RARE) set for ESC and for an
 * invalid code (length 0) so that one OR over a round's entries tells whether
 * it met either, and the symbol from bit SH on: SH = M where the symbol fits
 * above those bits in 16, so that an element is (entry & SYMS) | mantissa
 * bits, else the top of the entry. The code reader hands the assembler
 * entries, or their symbol fields (for ESC, the raw symbol at SH), which it
 * masks with SYMS. */
template <int DT> struct lct__dec_tab {
  static constexpr unsigned S = lct__dt<DT>::S, M = lct__dt<DT>::M;
  static constexpr unsigned SH = M >= 6 && S + M <= 16 ? M : 16 - S;
  static constexpr uint32_t RARE = 32, SMASK = (1u << S) - 1, SYMS = SMASK << SH;
  using Ent = uint16_t;
  static constexpr unsigned LOG = 1;                                   /* an index to a byte offset */
  static constexpr uint32_t OFFSETS = (LCT__TABLE_ENTRIES - 1) << LOG; /* the byte offset's bits */
  static constexpr unsigned SHR = 32 - LCT_MAX_CODE_LEN - LOG;
  static_assert(SH >= 6 && S + SH <= 16 && SHR < 32 && SHR >= LCT_MAX_CODE_LEN, "an entry's fields");

  __device__ static Ent entry(unsigned sym, unsigned len, unsigned esc) {
    return (Ent)(sym == esc ? RARE | (SHR - len) : sym << SH | (SHR - len));
  }
  static constexpr uint32_t INVALID = RARE | SHR; /* length 0 */
  __device__ static uint32_t len(uint32_t e) { return SHR - (e & 31); }
  /* The symbol of entry e (or of a raw symbol at SH) at bit M of an element. */
  __device__ static uint32_t sym_bits(uint32_t e) {
    if constexpr (SH <= M) {
      return (e & SYMS) << (M - SH);
    } else {
      return (e & SYMS) >> (SH - M);
    }
  }
};

__device__ static inline uint32_t lct__chunk_count(uint64_t n_elems) {
  return (uint32_t)((n_elems + LCT_CHUNK_ELEMS - 1) / LCT_CHUNK_ELEMS);
}

/* The error a blob's header words hw (with n_chunks the chunk count the
 * caller's n_elems implies) show, before the codebook is read; *chk gets the
 * check of words [0, 6). */
template <int DT>
__device__ static inline int lct__header_error(const lct__dec_tensor &T, const uint32_t *hw, uint32_t n_chunks,
                                               uint32_t *chk) {
  using L = lct__layout_of<DT>;
  const uint64_t len = T.blob_bytes;
  if (len < LCT_HEADER_BYTES || hw[0] != LCT__MAGIC) return LCT_ECORRUPT;
  if ((hw[1] & 0xff) != LCT_FORMAT_VERSION && (hw[1] & 0xff) != 1) return LCT_EVERSION;
  const uint64_t n_elems = hw[2] | (uint64_t)hw[3] << 32, blob_size = hw[8] | (uint64_t)hw[9] << 32;
  if (((hw[1] >> 8) & 0xff) != DT || ((hw[1] >> 16) & 0xff) != LCT_MAX_CODE_LEN || (hw[1] >> 24) || hw[7])
    return LCT_ECORRUPT;
  if (n_elems != T.n_elems || hw[4] != n_chunks || hw[5] != L::CB_BYTES) return LCT_ECORRUPT;
  if (blob_size != len || L::TABLE + 8ull * n_chunks > len || (n_chunks == 0 && len != L::TABLE)) return LCT_ECORRUPT;
  uint32_t c = 0;
#pragma unroll
  for (unsigned j = 0; j < 6; j++) c += hw[j] * lct__mult(j);
  *chk = c;
  return 0;
}

/* One block per blob: validates the header and the codebook against what the
 * caller expects, and builds the blob's decode table into the workspace. Every
 * step is spread over the block, with one read of the blob and no serial
 * loop: the chunk kernel, launched behind it as a programmatic dependent, waits
 * for it before its first decoded symbol. */
template <int DT, unsigned N>
__global__ void __launch_bounds__(LCT__HDR_THREADS)
    lct__decode_header_kernel(const __grid_constant__ lct__dec_params<N> p) {
  using L = lct__layout_of<DT>;
  using TAB = lct__dec_tab<DT>;
  constexpr unsigned S = lct__dt<DT>::S, NSYM = S ? (1u << S) + 1 : 1;
  constexpr unsigned CL = LCT_MAX_CODE_LEN, TILES = (NSYM + 31) / 32, CBW = L::CB_PAD / 4;
  static_assert(CBW <= LCT__HDR_THREADS && TILES * (CL + 1) <= LCT__HDR_THREADS && CL <= LCT__HDR_THREADS / 32 &&
                    LCT__TABLE_ENTRIES == 8 * LCT__HDR_THREADS,
                "one codebook word, tile count and 8 table entries per thread; a warp per code length");
  __shared__ uint32_t s_hw[LCT_HEADER_BYTES / 4];
  __shared__ uint32_t s_chk, s_kraft, s_bad;
  __shared__ uint8_t s_len[NSYM];
  __shared__ uint16_t s_rank[NSYM];            /* a symbol's rank among its tile's symbols of its length */
  __shared__ uint16_t s_tile[TILES][CL + 1];   /* per tile and length: symbols, then those in earlier tiles */
  __shared__ uint16_t s_sorted[NSYM];          /* the coded symbols in canonical order */
  __shared__ uint32_t s_count[CL + 1];

  /* Nothing the chunk kernel may read before its wait is written here. */
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
  const lct__dec_tensor &T = p.t[blockIdx.x];
  const unsigned tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const uint32_t n_chunks = lct__chunk_count(T.n_elems);
  const uint32_t *h = reinterpret_cast<const uint32_t *>(T.blob);
  /* The header and the codebook words in one round trip; nothing past the blob. */
  if (tid < LCT_HEADER_BYTES / 4) s_hw[tid] = T.blob_bytes >= LCT_HEADER_BYTES ? h[tid] : 0;
  const bool cb_word = S && tid < CBW && T.blob_bytes >= L::TABLE;
  const uint32_t v = cb_word ? h[LCT_HEADER_BYTES / 4 + tid] : 0;
  if (tid < TILES * (CL + 1)) (&s_tile[0][0])[tid] = 0;
  if (tid == 0) s_chk = s_kraft = s_bad = 0;
  __syncthreads();

  uint32_t hchk = 0;
  int err = lct__header_error<DT>(T, s_hw, n_chunks, &hchk); /* alike in every thread */
  if constexpr (S > 0) {
    if (!err && warp < (CBW + 31) / 32) { /* codebook words: header check, padding, lengths, Kraft sum */
      const unsigned valid = L::CB_BYTES > 4 * tid ? min(4u, L::CB_BYTES - 4 * tid) : 0;
      const uint32_t mask = valid == 4 ? ~0u : (1u << (8 * valid)) - 1;
      uint32_t chk = cb_word ? (v & mask) * lct__mult(6 + tid) : 0, kraft = 0, bad = v & ~mask;
#pragma unroll
      for (unsigned q = 0; q < 8; q++) {
        const unsigned sym = 8 * tid + q, l = (v >> (4 * q)) & 15;
        if (sym < NSYM) {
          s_len[sym] = (uint8_t)l;
          bad |= l > CL;
          kraft += l && l <= CL ? 1u << (CL - l) : 0;
        } else if (sym == NSYM) {
          bad |= l; /* the padding nibble */
        }
      }
      chk = lct__warp_sum(chk);
      kraft = lct__warp_sum(kraft);
      bad = lct__warp_or(bad);
      if (lane == 0) {
        atomicAdd(&s_chk, chk);
        atomicAdd(&s_kraft, kraft);
        if (bad) atomicOr(&s_bad, 1u);
      }
    }
  }
  __syncthreads();
  if (!err && (hchk + s_chk != s_hw[6] || s_bad)) err = LCT_ECORRUPT;
  if (!err && S && (!s_len[NSYM - 1] || s_kraft > (1u << CL))) err = LCT_ECORRUPT;

  if (S && !err) { /* err is the block's: every branch below is taken by all threads or none */
    /* Canonical codes sort the coded symbols by (length, symbol): a symbol's
     * place is the symbols of shorter codes, plus those of its length in
     * earlier tiles of 32, plus its rank within its tile. */
    for (unsigned t = warp; t < TILES; t += LCT__HDR_THREADS / 32) {
      const unsigned i = 32 * t + lane, l = i < NSYM ? s_len[i] : 0;
      const unsigned same = __match_any_sync(LCT__FULL, l);
      if (i < NSYM) s_rank[i] = (uint16_t)__popc(same & ((1u << lane) - 1));
      if (lane == (unsigned)__ffs(same) - 1) s_tile[t][l] = (uint16_t)__popc(same);
    }
    __syncthreads();
    if (warp < CL) { /* warp l - 1: exclusive sums of length l's tile counts, and its total */
      const unsigned l = warp + 1;
      uint32_t carry = 0;
      for (unsigned t0 = 0; t0 < TILES; t0 += 32) {
        const unsigned t = t0 + lane;
        const uint32_t c = t < TILES ? s_tile[t][l] : 0;
        uint32_t incl = c;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
          const uint32_t y = __shfl_up_sync(LCT__FULL, incl, o);
          if ((int)lane >= o) incl += y;
        }
        if (t < TILES) s_tile[t][l] = (uint16_t)(carry + incl - c);
        carry += __shfl_sync(LCT__FULL, incl, 31);
      }
      if (lane == 0) s_count[l] = carry;
    }
    __syncthreads();
    /* Per length: its first place in canonical order (off) and its first
     * table entry (first): a code of length l covers 2^(12 - l) consecutive
     * entries, in canonical order from entry 0. */
    uint32_t count[CL + 1], off[CL + 1], first[CL + 1], end = 0, at = 0;
#pragma unroll
    for (unsigned l = 1; l <= CL; l++) {
      count[l] = s_count[l];
      off[l] = at;
      first[l] = end;
      at += count[l];
      end += count[l] << (CL - l);
    }
    for (unsigned i = tid; i < NSYM; i += LCT__HDR_THREADS) {
      const unsigned l = s_len[i];
      uint32_t o = 0;
#pragma unroll
      for (unsigned k = 1; k <= CL; k++) o = l == k ? off[k] : o;
      if (l) s_sorted[o + s_tile[i / 32][l] + s_rank[i]] = (uint16_t)i;
    }
    __syncthreads();
    /* Entries [8 tid, 8 tid + 8): each in the region of the last length
     * whose region starts at or before it; past the last region, invalid.
     * Regions of lengths up to 9 hold whole aligned groups of 8. */
    auto entry = [&](uint32_t idx) -> uint32_t {
      uint32_t len = 0, base = 0, o = 0;
#pragma unroll
      for (unsigned l = 1; l <= CL; l++) {
        if (count[l] && first[l] <= idx) {
          len = l;
          base = first[l];
          o = off[l];
        }
      }
      if (idx >= end) return TAB::INVALID;
      return TAB::entry(s_sorted[o + ((idx - base) >> (CL - len))], len, NSYM - 1);
    };
    uint32_t e[8];
    e[0] = entry(8 * tid);
    if (TAB::len(e[0]) && TAB::len(e[0]) <= CL - 3) {
#pragma unroll
      for (unsigned j = 1; j < 8; j++) e[j] = e[0];
    } else {
#pragma unroll
      for (unsigned j = 1; j < 8; j++) e[j] = entry(8 * tid + j);
    }
    auto *tab = reinterpret_cast<uint4 *>(p.common.tables + (size_t)T.slot * LCT__TABLE_BYTES);
    tab[tid] = make_uint4(e[0] | e[1] << 16, e[2] | e[3] << 16, e[4] | e[5] << 16, e[6] | e[7] << 16);
  }
  if (tid == 0) {
    p.common.ws_status[T.slot] = err;
    p.common.ws_done[T.slot] = 0;
    if (n_chunks == 0) *T.status = err;
  }
}

/* Stores bytes [b, min(b + 4, nbytes)) of raw word v at out + b, as whole
 * elements (W-aligned) or one word when out is 16-byte aligned. */
template <unsigned W>
__device__ static inline void lct__store_word(uint8_t *out, uint32_t b, uint32_t v, uint32_t nbytes, bool aligned) {
  if (b + 4 <= nbytes && (aligned || W == 4)) {
    *reinterpret_cast<uint32_t *>(out + b) = v;
    return;
  }
#pragma unroll
  for (unsigned i = 0; i < 4; i += W) {
    if (b + i < nbytes) {
      const uint32_t x = v >> (8 * i);
      if (W == 4) {
        *reinterpret_cast<uint32_t *>(out + b + i) = x;
      } else if (W == 2) {
        *reinterpret_cast<uint16_t *>(out + b + i) = (uint16_t)x;
      } else {
        out[b + i] = (uint8_t)x;
      }
    }
  }
}

template <unsigned W> __device__ static inline void lct__store_elem(uint8_t *out, uint32_t e, uint32_t x) {
  if (W == 4) {
    *reinterpret_cast<uint32_t *>(out + 4 * e) = x;
  } else if (W == 2) {
    *reinterpret_cast<uint16_t *>(out + 2 * e) = (uint16_t)x;
  } else {
    out[e] = (uint8_t)x;
  }
}

/* A lane's code stream reader (words from lct__lane_words). The reader
 * stands at stream bit 32 (wa - 2) + pos, pos < 32: lo and hi are words
 * wa - 2 and wa - 1, nw is word wa, read one advance ahead, each
 * bit-reversed. win is the 32
 * stream bits from there on, the first as its most significant bit (one
 * funnel shift, no 64-bit shifts), with the used bits taken since shifted
 * out. bad: an invalid code was read. */
struct lct__code_reader {
  uint32_t lo, hi, nw, pos, wa, win, used, bad;
};

/* Moves the reader to bit t mod 64 of word lo (t's higher bits are not
 * read: lct__take_pair leaves garbage there) and refreshes the window.
 * Without a branch: lanes diverging here would run both paths one after the
 * other. Both candidate windows are funnel shifts by t mod 32, so that only
 * their selection waits for t's bit 5. */
template <typename Words>
__device__ static inline void lct__advance(lct__code_reader &r, const Words &words, uint32_t t) {
  const bool adv = t & 32;
  r.win = adv ? __funnelshift_l(r.nw, r.hi, t) : __funnelshift_l(r.hi, r.lo, t);
  r.lo = adv ? r.hi : r.lo;
  r.hi = adv ? r.nw : r.hi;
  r.pos = t & 31;
  r.wa += adv;
  if (adv) r.nw = __brev(words(r.wa));
}

/* Moves the reader past the used bits (at most 32). */
template <typename Words> __device__ static inline void lct__commit(lct__code_reader &r, const Words &words) {
  lct__advance(r, words, r.pos + r.used);
  r.used = 0;
}

/* Takes one symbol, ESC and invalid codes included, and returns it as an
 * entry's symbol field (at SH): the exact reader, for rounds that met either
 * and for partial chunks. A code takes at most
 * 12 bits, so a fresh window covers two, and the symbol loop commits once
 * per pair; ESC's raw symbol may need more bits than are left, so that path
 * commits before it and again after, leaving a fresh window as a commit
 * does. */
template <int DT, typename Words>
__device__ static inline uint32_t lct__take_symbol(lct__code_reader &r, const typename lct__dec_tab<DT>::Ent *tab,
                                                   const Words &words) {
  using TAB = lct__dec_tab<DT>;
  static_assert(2 * LCT_MAX_CODE_LEN <= 32, "a window holds the two codes of a pair");
  static_assert(LCT_MAX_CODE_LEN + TAB::S <= 32, "a window holds an ESC code and its raw symbol");
  const uint32_t ent = (uint32_t)tab[r.win >> (32 - LCT_MAX_CODE_LEN)], l = TAB::len(ent);
  if (__builtin_expect(!(ent & TAB::RARE), 1)) {
    r.win <<= l;
    r.used += l;
    return ent & TAB::SYMS;
  }
  r.bad |= l == 0;
  lct__commit(r, words);
  const uint32_t sym = __brev(r.win << l) & TAB::SMASK; /* written LSB-first */
  r.used = l + TAB::S;
  lct__commit(r, words);
  return sym << TAB::SH;
}

/* Takes two symbols from a fresh window as if neither were ESC or invalid,
 * without a branch, and moves the reader past them: *pair gets their two
 * entries (the first in the low half), and the return value is the OR of
 * both (RARE set: the round is decoded again by lct__take_symbol). The
 * chain from one lookup to the next is kept short, as it is the decoder's
 * critical path: the second lookup's offset is the window shifted right by
 * the first entry itself (a funnel shift reads its low 5 bits, SHR - l0),
 * and the reader's new place, pos + l0 + l1 = pos + 2 SHR - e0 - e1 modulo
 * 64, takes the whole entries: what lies above bit 5 drops out. */
template <int DT, typename Words>
__device__ static inline uint32_t lct__take_pair(lct__code_reader &r, const typename lct__dec_tab<DT>::Ent *tab,
                                                 const Words &words, uint32_t *pair) {
  using TAB = lct__dec_tab<DT>;
  using Ent = typename TAB::Ent;
  const char *base = reinterpret_cast<const char *>(tab);
  const uint32_t e0 = *reinterpret_cast<const Ent *>(base + ((r.win >> TAB::SHR) & TAB::OFFSETS));
  const uint32_t e1 = *reinterpret_cast<const Ent *>(base + (__funnelshift_r(r.win, 0, e0) & TAB::OFFSETS));
  *pair = __byte_perm(e0, e1, 0x5410);
  lct__advance(r, words, r.pos + 2 * TAB::SHR - e0 - e1);
  return e0 | e1;
}

/* Chunks per block of the chunk decoder, a warp each: they share the blob's
 * decode table. */
#define LCT__DEC_WARPS 8

/* Code rows a warp keeps in shared memory: a ring filled a round ahead of
 * its slowest lane, so that the chain of lookups never waits on memory. */
#define LCT__CODE_RING 32

/* Rounds of mantissa rows in flight or in use: the round being decoded and
 * the next two, so that a copy has two rounds to land. */
#define LCT__MANT_ROUNDS 3

/* Shared memory of a warp decoding a full version 2 chunk: the code ring
 * (row i in slot i % LCT__CODE_RING) and the mantissa rows of three rounds
 * (a round's k rows, and one more that a window may read past them). */
template <int DT> struct lct__dec_warp_smem {
  uint32_t code[LCT__CODE_RING][32];
  uint32_t mant[LCT__MANT_ROUNDS][lct__dt<DT>::M + 1][32];
};

/* One lane's stream in a section of a coded chunk (proto/FORMAT.md): its word
 * i is the section's word 32 i + lane below `rows` (version 2's interleaved
 * rows; from the warp's ring below `landed`), else the 32 bits from bit sh
 * of word q0 + i (version 2's tail, or version 1's concatenated streams,
 * rows 0). Words past the section's nwords read as zero: nothing past the
 * chunk is read. */
struct lct__lane_words {
  const uint32_t *base;
  uint32_t rows, q0, sh, nwords, lane;
  const uint32_t (*ring)[32];
  uint32_t landed;
  __device__ uint32_t operator()(uint32_t i) const {
    if (i < landed) return ring[i % LCT__CODE_RING][lane];
    if (i < rows) return __ldg(base + 32 * i + lane);
    const uint32_t q = q0 + i;
    const uint32_t lo = q < nwords ? __ldg(base + q) : 0, hi = q + 1 < nwords ? __ldg(base + q + 1) : 0;
    return __funnelshift_r(lo, hi, sh);
  }
};

/* A lane's code words from its warp's ring alone: for a round whose words
 * have all landed there. */
struct lct__ring_words {
  const uint32_t (*ring)[32];
  unsigned lane;
  __device__ uint32_t operator()(uint32_t i) const { return ring[i % LCT__CODE_RING][lane]; }
};

/* The lane's stream of bits bits in a section of nwords words at base, as
 * version 1 (concatenated) or 2 (interleaved) lays the 32 lanes' streams out. */
__device__ static inline lct__lane_words lct__lane_section(const uint32_t *base, uint32_t nwords, uint32_t bits,
                                                           bool v2, unsigned lane) {
  const uint32_t rows = v2 ? __reduce_min_sync(LCT__FULL, bits / 32) : 0, rest = bits - 32 * rows;
  uint32_t start = rest;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t y = __shfl_up_sync(LCT__FULL, start, o);
    if ((int)lane >= o) start += y;
  }
  start -= rest; /* the lane's first bit after the rows */
  return {base, rows, 32 * rows + (start >> 5) - rows, start & 31, nwords, lane, nullptr, 0};
}

/* Asynchronous copy of row i of a section into a warp's shared slot. */
__device__ static inline void lct__fetch_row(uint32_t (*slot)[32], const uint32_t *base, uint32_t i, unsigned lane) {
  lct__cp_async4(&(*slot)[lane], base + 32 * i + lane, true);
}

/* Where chunk c lies and what its header says. */
struct lct__chunk_view {
  const uint32_t *ch; /* the chunk */
  uint64_t size;      /* its bytes */
  uint8_t *out;       /* its first element in dst */
  uint32_t n;         /* its elements */
  uint32_t hw;        /* header word `lane` (zero past the coded header or the chunk) */
  uint32_t stored;    /* its check */
  uint32_t mode, trim;
  uint32_t mult0;     /* lct__mult(base + g) = (mult0 + 2g) * LCT__CHECK_MUL */
};

/* Reads chunk c's place in the chunk table and its header words, alike in
 * every lane: 0, or LCT_ECORRUPT for an invalid place or first header word.
 * It runs before the header kernel's verdict is known, so it checks itself
 * that the table lies inside the blob. */
template <int DT>
__device__ static int lct__chunk_open(const lct__dec_tensor &T, uint32_t c, uint32_t n_chunks, unsigned lane,
                                      lct__chunk_view &v) {
  using L = lct__layout_of<DT>;
  constexpr unsigned W = lct__dt<DT>::W;
  const uint64_t len = T.blob_bytes, first_elem = (uint64_t)c * LCT_CHUNK_ELEMS;
  v.n = T.n_elems - first_elem < LCT_CHUNK_ELEMS ? (uint32_t)(T.n_elems - first_elem) : LCT_CHUNK_ELEMS;
  v.out = T.dst + first_elem * W;
  v.mult0 = (uint32_t)(2 * (first_elem * W / 4) + 1);
  const bool table_inside = L::TABLE + 8ull * n_chunks <= len;
  uint64_t off = 0, end = 0;
  if (lane == 0 && table_inside) {
    const uint64_t *table = reinterpret_cast<const uint64_t *>(T.blob + L::TABLE);
    off = table[c];
    end = c + 1 < n_chunks ? table[c + 1] : len;
  }
  off = __shfl_sync(LCT__FULL, off, 0);
  end = __shfl_sync(LCT__FULL, end, 0);
  if (!table_inside || (c == 0 && off != L::TABLE + 8ull * n_chunks) || (off & 3) || end < off || end > len ||
      end - off < LCT_RAW_CHUNK_HEADER)
    return LCT_ECORRUPT;
  v.size = end - off;
  v.ch = reinterpret_cast<const uint32_t *>(T.blob + off);
  v.hw = lane < LCT_CODED_CHUNK_HEADER / 4 && 4 * lane + 4 <= v.size ? __ldg(v.ch + lane) : 0;
  const uint32_t h0 = __shfl_sync(LCT__FULL, v.hw, 0);
  v.stored = __shfl_sync(LCT__FULL, v.hw, 1);
  v.mode = h0 & 0xff;
  v.trim = (h0 >> 8) & 0xff;
  return h0 >> 16 ? LCT_ECORRUPT : 0;
}

/* A raw chunk: copy, verify size, padding and check. */
template <int DT> __device__ static int lct__raw_chunk(const lct__chunk_view &v, bool aligned, unsigned lane) {
  constexpr unsigned W = lct__dt<DT>::W;
  const uint32_t nbytes = v.n * W, rw = (uint32_t)lct__pad4(nbytes) / 4;
  uint32_t chk = 0, bad = v.trim || v.size != LCT_RAW_CHUNK_HEADER + 4ull * rw;
  for (uint32_t j = lane; !bad && j < rw; j += 32) {
    const uint32_t x = __ldg(v.ch + 2 + j), b = 4 * j;
    chk += x * ((v.mult0 + 2 * j) * LCT__CHECK_MUL);
    if (b + 4 > nbytes) bad |= x >> (8 * (nbytes - b));
    lct__store_word<W>(v.out, b, x, nbytes, aligned);
  }
  if (__any_sync(LCT__FULL, bad)) return LCT_ECORRUPT;
  return lct__warp_sum(chk) != v.stored ? LCT_ECHECKSUM : 0;
}

/* The raw word of steps [E u, E u + E) of a lane's round: their symbols from
 * the round's pairs of entries (sy), their mantissas from mv (k bits each,
 * the first at bit 0), moved up by trim. */
template <int DT>
__device__ static inline uint32_t lct__round_word(const uint32_t *sy, unsigned u, uint32_t mv, uint32_t k,
                                                  uint32_t trim) {
  using TAB = lct__dec_tab<DT>;
  constexpr unsigned W = lct__dt<DT>::W;
  const uint32_t kmask = (1u << k) - 1;
  if constexpr (W == 4) {
    return TAB::sym_bits(sy[u >> 1] >> (16 * (u & 1))) | (mv & kmask) << trim;
  } else if constexpr (W == 2) {
    static_assert(TAB::SH == TAB::M, "2-byte symbols sit at their place in the element");
    const uint32_t kt = kmask << trim, mt = mv << trim;
    return (sy[u] & (TAB::SYMS * 0x10001u)) | (mt & kt) | ((mt << (16 - k)) & (kt << 16));
  } else {
    uint32_t w = 0;
#pragma unroll
    for (unsigned r = 0; r < 4; r++) {
      const uint32_t e = sy[2 * u + r / 2] >> (16 * (r & 1));
      w |= (TAB::sym_bits(e) | ((mv >> (k * r)) & kmask) << trim) << (8 * r);
    }
    return w;
  }
}

/* A lane's mantissa stream as the decoder walks it: words cur and cur + 1. */
struct lct__mant_cursor {
  uint32_t lo, hi, cur;
};

/* The 32 mantissa bits from bit b on; b moves forward by at most 32 a call. */
__device__ static inline uint32_t lct__mant_bits(lct__mant_cursor &m, const lct__lane_words &words, uint32_t b) {
  if ((b >> 5) != m.cur) {
    m.lo = m.hi;
    m.cur++;
    m.hi = words(m.cur + 1);
  }
  return __funnelshift_r(m.lo, m.hi, b);
}

/* A coded chunk, lane t decoding lane t's steps: a full chunk in rounds of
 * 32 steps (a branch-free pass over 16 pairs of codes, done again exactly
 * where any lane met ESC or an invalid code, then the round's words
 * assembled and stored: in version 2 a warp's store is 128 consecutive
 * bytes), a partial one step by step. Returns 0, LCT_ECORRUPT or
 * LCT_ECHECKSUM, alike in every lane. */
template <int DT>
__device__ static int lct__coded_chunk(const typename lct__dec_tab<DT>::Ent *tab, lct__dec_warp_smem<DT> &sm,
                                       const lct__chunk_view &v, bool v2, bool aligned, unsigned lane) {
  using TAB = lct__dec_tab<DT>;
  constexpr unsigned W = lct__dt<DT>::W, S = lct__dt<DT>::S, M = lct__dt<DT>::M, E = 4 / W;
  if (v.mode != 1 || S == 0 || v.trim > M || v.size < LCT_CODED_CHUNK_HEADER) return LCT_ECORRUPT;
  const uint32_t n = v.n, k = M - v.trim, trim = v.trim;
  uint32_t nt;
  if (v2) {
    const uint32_t rem = n % (32 * E), extra = rem > E * lane ? rem - E * lane : 0;
    nt = n / (32 * E) * E + min(extra, E);
  } else {
    nt = n > lane * LCT_LANE_ELEMS ? min(n - lane * LCT_LANE_ELEMS, (uint32_t)LCT_LANE_ELEMS) : 0;
  }
  const uint32_t lb = (__shfl_sync(LCT__FULL, v.hw, 2 + lane / 2) >> (16 * (lane & 1))) & 0xffff;
  const uint32_t total = lct__warp_sum(lb), mwords = (n * k + 31) / 32, hwords = (total + 31) / 32;
  if (__any_sync(LCT__FULL, lb > nt * (LCT_MAX_CODE_LEN + S)) ||
      v.size != LCT_CODED_CHUNK_HEADER + 4ull * mwords + 4ull * hwords)
    return LCT_ECORRUPT;
  const uint32_t *mant = v.ch + LCT_CODED_CHUNK_HEADER / 4, *code = mant + mwords;
  lct__lane_words cw = lct__lane_section(code, hwords, lb, v2, lane);
  const lct__lane_words mw = lct__lane_section(mant, mwords, nt * k, v2, lane);
  /* A full version 2 chunk streams its rows through shared memory: the code
   * ring's first fill and round 0's mantissa rows now. */
  const bool rings = v2 && n == LCT_CHUNK_ELEMS && aligned;
  uint32_t filled = 0, issued = 0; /* code rows fetched as of the last round, and as of this one */
  if (rings) {
    cw.ring = sm.code;
    filled = issued = min(cw.rows, (uint32_t)LCT__CODE_RING);
    for (uint32_t i = 0; i < filled; i++) lct__fetch_row(&sm.code[i], code, i, lane);
    for (uint32_t q = 0; q < k; q++) lct__fetch_row(&sm.mant[0][q], mant, q, lane);
    lct__cp_commit();
    lct__cp_wait<0>();
    __syncwarp();
    cw.landed = filled;
  }

  lct__code_reader r;
  r.lo = __brev(cw(0));
  r.hi = __brev(cw(1));
  r.wa = 2;
  r.nw = __brev(cw(2));
  r.pos = 0;
  r.win = r.lo;
  r.used = 0;
  r.bad = 0;
  uint32_t chk = 0;
  if (rings) {
    /* Lane t's raw words: word 32 u + t of the chunk, u = 0, 1, ... */
    uint32_t *const out32 = reinterpret_cast<uint32_t *>(v.out) + lane;
    uint32_t mul = (v.mult0 + 2 * lane) * LCT__CHECK_MUL;
    /* Round rd's lookups run beside the assembly of round rd - 1's words,
     * so that a warp has two chains of work independent of each other. */
    uint32_t prev[16]; /* round rd - 1's pairs of entries */
#pragma unroll 1
    for (uint32_t rd = 0; rd <= LCT_LANE_ELEMS / 32; rd++) {
      /* What the round before last fetched has landed (the last round's
       * copies may still be in flight); every lane is past the rows below
       * the slowest reader's word, whose slots take the next rows, and round
       * rd + 1's mantissa rows go where round rd - 2's were. */
      lct__cp_wait<1>();
      __syncwarp();
      cw.landed = filled;
      filled = issued;
      /* A slot takes its next row once every lane is past its row and that
       * row's copy has landed (a lane may have read it from the section). */
      const uint32_t free_below = min(__reduce_min_sync(LCT__FULL, r.wa), filled);
      for (; issued < min(cw.rows, free_below + LCT__CODE_RING); issued++)
        lct__fetch_row(&sm.code[issued % LCT__CODE_RING], code, issued, lane);
      if (rd + 1 < LCT_LANE_ELEMS / 32)
        for (uint32_t q = 0; q < k; q++)
          lct__fetch_row(&sm.mant[(rd + 1) % LCT__MANT_ROUNDS][q], mant, (rd + 1) * k + q, lane);
      lct__cp_commit();
      /* Round rd - 1's k rows hold its 32 k mantissa bits; its words are
       * the lane's word 32 u of its 32 / E rows of the chunk. */
      const uint32_t *mrow = &sm.mant[(rd + LCT__MANT_ROUNDS - 1) % LCT__MANT_ROUNDS][0][lane];
      const uint32_t o = 32 * (32 / E) * (rd - 1); /* used from round 1 on */
      uint32_t b = 0;
      auto word = [&](unsigned u) {
        const uint32_t mv = __funnelshift_r(mrow[32 * (b / 32)], mrow[32 * (b / 32) + 32], b);
        const uint32_t x = lct__round_word<DT>(prev, u, mv, k, trim);
        chk += x * mul;
        mul += 64 * LCT__CHECK_MUL;
        out32[o + 32 * u] = x;
        b += E * k;
      };
      if (rd == LCT_LANE_ELEMS / 32) {
#pragma unroll
        for (unsigned u = 0; u < 32 / E; u++) word(u);
        break;
      }
      uint32_t sy[16];
      const lct__code_reader saved = r;
      uint32_t seen = 0;
      /* Pair p's lookups, and the words of the last round that go with it. */
      auto pass = [&](const auto &words, auto assemble) {
#pragma unroll
        for (unsigned p = 0; p < 16; p++) {
          seen |= lct__take_pair<DT>(r, tab, words, &sy[p]);
          if constexpr (decltype(assemble)::value) {
#pragma unroll
            for (unsigned u = 32 / E * p / 16; u < 32 / E * (p + 1) / 16; u++) word(u);
          }
        }
      };
      /* Most rounds hold no ESC and no invalid code, and find every word
       * they may read in the ring (a pass takes at most 16 words past wa,
       * one a pair, where it meets either: a pass then thrown away): their
       * pairs are read without a branch. The others take words where they
       * lie, and a round that met either is decoded again exactly. */
      const bool in_ring = __all_sync(LCT__FULL, r.wa + 17 <= cw.landed);
      const lct__ring_words ring{sm.code, lane};
      if (rd == 0) {
        if (in_ring) {
          pass(ring, lct__bool<false>());
        } else {
          pass(cw, lct__bool<false>());
        }
      } else if (in_ring) {
        pass(ring, lct__bool<true>());
      } else {
        pass(cw, lct__bool<true>());
      }
      if (__any_sync(LCT__FULL, seen & TAB::RARE)) {
        r = saved;
#pragma unroll
        for (unsigned p = 0; p < 16; p++) {
          const uint32_t s0 = lct__take_symbol<DT>(r, tab, cw);
          sy[p] = s0 | lct__take_symbol<DT>(r, tab, cw) << 16;
          lct__commit(r, cw);
        }
      }
#pragma unroll
      for (unsigned p = 0; p < 16; p++) prev[p] = sy[p];
    }
  } else { /* a partial or unaligned chunk, or version 1: straight from the sections */
    const uint32_t kmask = (1u << k) - 1;
    lct__mant_cursor mc = {mw(0), mw(1), 0};
#pragma unroll 1
    for (uint32_t j = 0; j < nt; j++) {
      const uint32_t sym = lct__take_symbol<DT>(r, tab, cw);
      lct__commit(r, cw);
      const uint32_t x = TAB::sym_bits(sym) | (lct__mant_bits(mc, mw, j * k) & kmask) << trim;
      const uint32_t e = v2 ? 32 * E * (j / E) + E * lane + j % E : lane * LCT_LANE_ELEMS + j;
      chk += (x << (8 * ((e * W) & 3))) * ((v.mult0 + 2 * ((e * W) >> 2)) * LCT__CHECK_MUL);
      lct__store_elem<W>(v.out, e, x);
    }
  }
  /* The lane consumed exactly lane_bits; no invalid code; zero padding. */
  uint32_t bad = r.bad || 32 * (r.wa - 2) + r.pos != lb;
  if (lane == 0 && (total & 31)) bad |= __ldg(code + hwords - 1) >> (total & 31);
  if (lane == 0 && ((n * k) & 31)) bad |= __ldg(mant + mwords - 1) >> ((n * k) & 31);
  if (__any_sync(LCT__FULL, bad)) return LCT_ECORRUPT;
  return lct__warp_sum(chk) != v.stored ? LCT_ECHECKSUM : 0;
}

/* Dynamic shared memory of a chunk block: its warps' rings (none for dtype
 * raw). The decode table is static shared memory, at an address the
 * compiler knows. */
template <int DT> constexpr size_t lct__dec_smem_bytes() {
  return lct__dt<DT>::S ? LCT__DEC_WARPS * sizeof(lct__dec_warp_smem<DT>) : 0;
}

/* A warp per chunk, LCT__DEC_WARPS chunks of one blob per block. */
template <int DT, unsigned N>
__global__ void __launch_bounds__(LCT__DEC_WARPS * 32, 2)
    lct__decode_chunk_kernel(const __grid_constant__ lct__dec_params<N> p) {
  using Ent = typename lct__dec_tab<DT>::Ent;
  __shared__ __align__(16) Ent s_tab[lct__dt<DT>::S ? LCT__TABLE_ENTRIES : 1];
  __shared__ int s_known;
  extern __shared__ __align__(16) uint8_t lct__dec_shared[];
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const lct__dec_tensor &T = p.t[lct__find_tensor(p.t, p.count, blockIdx.x)];
  const uint32_t n_chunks = lct__chunk_count(T.n_elems), c = (blockIdx.x - T.begin) * LCT__DEC_WARPS + warp;
  int *const wst = p.common.ws_status + T.slot;
  /* The blob's chunk table, chunk headers and version byte are the caller's:
   * read before the header kernel is done, which writes the table and status
   * read after (and rejects a version other than 1 and 2). */
  lct__chunk_view v;
  int err = c < n_chunks ? lct__chunk_open<DT>(T, c, n_chunks, lane, v) : 0;
  const bool v2 = T.blob_bytes >= 8 && (__ldg(reinterpret_cast<const uint32_t *>(T.blob) + 1) & 0xff) == 2;
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  if constexpr (lct__dt<DT>::S > 0) {
    const uint4 *tab_g = reinterpret_cast<const uint4 *>(p.common.tables + (size_t)T.slot * LCT__TABLE_BYTES);
    for (unsigned i = threadIdx.x; i < sizeof s_tab / 16; i += LCT__DEC_WARPS * 32)
      reinterpret_cast<uint4 *>(s_tab)[i] = __ldg(tab_g + i);
  }
  /* Skip the work once the blob is known corrupt. */
  if (threadIdx.x == 0) s_known = *(volatile int *)wst;
  __syncthreads();
  if (c >= n_chunks) return;
  if (s_known == 0 && !err) {
    if (v.mode == 0) {
      err = lct__raw_chunk<DT>(v, T.aligned, lane);
    } else if constexpr (lct__dt<DT>::S > 0) {
      err = lct__coded_chunk<DT>(s_tab, reinterpret_cast<lct__dec_warp_smem<DT> *>(lct__dec_shared)[warp], v, v2,
                                 T.aligned, lane);
    } else {
      err = LCT_ECORRUPT; /* a coded chunk in a blob of dtype raw */
    }
  }
  if (lane == 0) {
    if (err && s_known == 0) atomicCAS(wst, 0, err);
    __threadfence();
    if (atomicAdd(p.common.ws_done + T.slot, 1u) == n_chunks - 1) {
      __threadfence();
      *T.status = *(volatile int *)wst;
    }
  }
}

#endif
