/* lct_cuda_decode.cuh — device code: blob header/codebook validation and the chunk decoder (two warps per chunk, a thread per lane). */
#ifndef LCT_CUDA_DECODE_CUH
#define LCT_CUDA_DECODE_CUH

#include <type_traits>

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
  uint32_t begin;   /* its first chunk block in the launch (LCT__DEC_CHUNKS chunks each) */
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

/* A lane's code stream reader, forward or mirrored: it reads the words a
 * provider hands it, each with the first bit to read as its most significant
 * (forward: a stream word bit-reversed; mirrored: the 32 stream bits below a
 * place, as they lie). The reader stands at bit 32 (wa - 2) + pos of that
 * sequence, pos < 32: lo and hi are words wa - 2 and wa - 1, nw is word wa,
 * read one advance ahead. win is the 32 bits from there on, the first as its
 * most significant bit (one funnel shift, no 64-bit shifts), with the used
 * bits taken since shifted out. bad: an invalid code was read. */
struct lct__code_reader {
  uint32_t lo, hi, nw, pos, wa, win, used, bad;
};

template <typename Words> __device__ static inline void lct__reader_start(lct__code_reader &r, const Words &words) {
  r.lo = words(0);
  r.hi = words(1);
  r.nw = words(2);
  r.wa = 2;
  r.pos = 0;
  r.win = r.lo;
  r.used = 0;
  r.bad = 0;
}

/* Bits the reader has consumed. */
__device__ static inline uint32_t lct__reader_bits(const lct__code_reader &r) { return 32 * (r.wa - 2) + r.pos; }

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
  if (adv) r.nw = words(r.wa);
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
  const uint32_t sym = __brev(r.win << l) & TAB::SMASK; /* its bit 0 read first */
  r.used = l + TAB::S;
  lct__commit(r, words);
  return sym << TAB::SH;
}

/* Takes two symbols from a fresh window as if neither were ESC or invalid,
 * without a branch, and moves the reader past them: *pair gets their two
 * entries (of the lower step in the low half: for a mirrored reader, the
 * second), and the return value is the OR of both (RARE set: the round is
 * decoded again by lct__take_symbol). The chain from one lookup to the next
 * is kept short, as it is the decoder's critical path: the second lookup's
 * offset is the window shifted right by the first entry itself (a funnel
 * shift reads its low 5 bits, SHR - l0), and the reader's new place,
 * pos + l0 + l1 = pos + 2 SHR - e0 - e1 modulo 64, takes the whole entries:
 * what lies above bit 5 drops out. */
template <int DT, bool BACK, typename Words>
__device__ static inline uint32_t lct__take_pair(lct__code_reader &r, const typename lct__dec_tab<DT>::Ent *tab,
                                                 const Words &words, uint32_t *pair) {
  using TAB = lct__dec_tab<DT>;
  using Ent = typename TAB::Ent;
  const char *base = reinterpret_cast<const char *>(tab);
  const uint32_t e0 = *reinterpret_cast<const Ent *>(base + ((r.win >> TAB::SHR) & TAB::OFFSETS));
  const uint32_t e1 = *reinterpret_cast<const Ent *>(base + (__funnelshift_r(r.win, 0, e0) & TAB::OFFSETS));
  *pair = BACK ? __byte_perm(e1, e0, 0x5410) : __byte_perm(e0, e1, 0x5410);
  lct__advance(r, words, r.pos + 2 * TAB::SHR - e0 - e1);
  return e0 | e1;
}

/* Chunks per block of the chunk decoder, two warps each (forward and
 * mirrored steps): they share the blob's decode table. */
#define LCT__DEC_CHUNKS 4
#define LCT__DEC_THREADS (LCT__DEC_CHUNKS * 64)

/* Code rows a warp keeps in shared memory: a ring filled a round ahead of
 * its slowest lane, so that the chain of lookups never waits on memory. */
#define LCT__CODE_RING 32

/* Rounds of mantissa rows in flight or in use: the round being decoded and
 * the next two, so that a copy has two rounds to land. */
#define LCT__MANT_ROUNDS 3

/* Shared memory of a warp decoding half of a full version 2 chunk: the code
 * ring (the warp's i-th row in slot i % LCT__CODE_RING) and the mantissa rows
 * of three rounds (a round's k rows, and one more that a window may read past
 * them). */
template <int DT> struct lct__dec_warp_smem {
  uint32_t code[LCT__CODE_RING][32];
  uint32_t mant[LCT__MANT_ROUNDS][lct__dt<DT>::M + 1][32];
};

/* One lane's stream of `bits` bits in a section of a coded chunk
 * (proto/FORMAT.md): its words in the section's first `up` rows, from the
 * stream's start, and in the rows after them, to the stream's end; its
 * middle bits in the tail, from section bit `tail`. Version 1's
 * concatenated streams have no rows: all of a stream is its middle. Bits
 * past the section read as zero: nothing past the chunk is read. */
struct lct__lane_stream {
  const uint32_t *base;
  uint32_t nwords, bits, rows, up, tail, lane;

  __device__ uint32_t row(uint32_t i) const { return __ldg(base + 32 * i + lane); }
  /* The 32 section bits from bit p on. */
  __device__ uint32_t section_bits(uint32_t p) const {
    const uint32_t q = p / 32;
    const uint32_t lo = q < nwords ? __ldg(base + q) : 0, hi = q + 1 < nwords ? __ldg(base + q + 1) : 0;
    return __funnelshift_r(lo, hi, p);
  }
  /* The 32 stream bits from bit b on (b may be negative; bits outside the
   * stream read as zero), from each region the window meets. Not inlined:
   * it serves the slow readers only, and a copy of it in every step of the
   * unrolled rounds overflowed the instruction cache. */
  __device__ __noinline__ uint32_t bits32(int b) const {
    const int mid0 = 32 * up, mid1 = (int)bits - 32 * (int)(rows - up);
    uint32_t v = 0;
    /* Each region's first bit in the window [b, b + 32), if it has one. */
    const int a = max(b, 0), m = max(b, mid0), d = max(b, mid1);
    if (a < mid0 && a < b + 32) {
      const uint32_t i = a / 32;
      v |= __funnelshift_r(row(i), i + 1 < up ? row(i + 1) : 0, a) << (a - b);
    }
    if (m < mid1 && m < b + 32) {
      const int n = min(mid1 - m, 32);
      const uint32_t x = section_bits(tail + (m - mid0));
      v |= (n < 32 ? x & ((1u << n) - 1) : x) << (m - b);
    }
    if (d < (int)bits && d < b + 32) {
      const uint32_t o = d - mid1, j = o / 32;
      v |= __funnelshift_r(row(up + j), up + j + 1 < rows ? row(up + j + 1) : 0, o) << (d - b);
    }
    return v;
  }
};

/* A forward reader's words: the stream's words, bit-reversed; the first
 * `landed` from the warp's ring. */
struct lct__fwd_words {
  lct__lane_stream st;
  const uint32_t (*ring)[32];
  uint32_t landed;
  __device__ uint32_t operator()(uint32_t i) const {
    if (i < landed) return __brev(ring[i % LCT__CODE_RING][st.lane]);
    return __brev(i < st.up ? st.row(i) : st.bits32(32 * (int)i));
  }
};

/* A mirrored reader's words: word i is the 32 stream bits below bit
 * bits - 32 i, as they lie (the last rows, from the section's last one
 * down); the first `landed` from the warp's ring. */
struct lct__back_words {
  lct__lane_stream st;
  const uint32_t (*ring)[32];
  uint32_t landed;
  __device__ uint32_t operator()(uint32_t i) const {
    if (i < landed) return ring[i % LCT__CODE_RING][st.lane];
    if (i < st.rows - st.up) return st.row(st.rows - 1 - i);
    return st.bits32((int)st.bits - 32 * (int)(i + 1));
  }
};

/* Either reader's words from its warp's ring alone: for a round whose words
 * have all landed there. */
template <bool BACK> struct lct__ring_words {
  const uint32_t (*ring)[32];
  unsigned lane;
  __device__ uint32_t operator()(uint32_t i) const {
    const uint32_t w = ring[i % LCT__CODE_RING][lane];
    return BACK ? w : __brev(w);
  }
};

/* The lane's stream of bits bits in a section of nwords words at base, as
 * version 1 (concatenated) or 2 (interleaved) lays the 32 lanes' streams out. */
__device__ static inline lct__lane_stream lct__lane_section(const uint32_t *base, uint32_t nwords, uint32_t bits,
                                                            bool v2, unsigned lane) {
  const uint32_t rows = v2 ? __reduce_min_sync(LCT__FULL, bits / 32) : 0, rest = bits - 32 * rows;
  uint32_t start = rest;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t y = __shfl_up_sync(LCT__FULL, start, o);
    if ((int)lane >= o) start += y;
  }
  start -= rest; /* the lane's first bit in the tail */
  return {base, nwords, bits, rows, (rows + 1) / 2, 1024 * rows + start, lane};
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

/* What one warp of a chunk's pair found: an error (alike in every lane), its
 * part of the check and where its lane's steps ended (forward: the bit after
 * the last; mirrored: the lowest). */
struct lct__half_result {
  int err;
  uint32_t chk, end;
};

/* A raw chunk, the pair's warp `half` taking every other run of 32 words:
 * copy, verify size and padding, and sum its part of the check. */
template <int DT>
__device__ static int lct__raw_chunk(const lct__chunk_view &v, bool aligned, unsigned lane, unsigned half,
                                     uint32_t *chk_out) {
  constexpr unsigned W = lct__dt<DT>::W;
  const uint32_t nbytes = v.n * W, rw = (uint32_t)lct__pad4(nbytes) / 4;
  uint32_t chk = 0, bad = v.trim || v.size != LCT_RAW_CHUNK_HEADER + 4ull * rw;
  for (uint32_t j = 32 * half + lane; !bad && j < rw; j += 64) {
    const uint32_t x = __ldg(v.ch + 2 + j), b = 4 * j;
    chk += x * ((v.mult0 + 2 * j) * LCT__CHECK_MUL);
    if (b + 4 > nbytes) bad |= x >> (8 * (nbytes - b));
    lct__store_word<W>(v.out, b, x, nbytes, aligned);
  }
  *chk_out = lct__warp_sum(chk);
  return __any_sync(LCT__FULL, bad) ? LCT_ECORRUPT : 0;
}

/* The raw word of steps [E u, E u + E) of a lane's round: their symbols from
 * the round's pairs of entries (sy; a mirrored round's in reverse order),
 * their mantissas from mv (k bits each, the first at bit 0), moved up by trim. */
template <int DT, bool BACK>
__device__ static inline uint32_t lct__round_word(const uint32_t *sy, unsigned u, uint32_t mv, uint32_t k,
                                                  uint32_t trim) {
  using TAB = lct__dec_tab<DT>;
  constexpr unsigned W = lct__dt<DT>::W;
  auto pair = [&](unsigned p) { return sy[BACK ? 15 - p : p]; };
  const uint32_t kmask = (1u << k) - 1;
  if constexpr (W == 4) {
    return TAB::sym_bits(pair(u >> 1) >> (16 * (u & 1))) | (mv & kmask) << trim;
  } else if constexpr (W == 2) {
    static_assert(TAB::SH == TAB::M, "2-byte symbols sit at their place in the element");
    const uint32_t kt = kmask << trim, mt = mv << trim;
    return (pair(u) & (TAB::SYMS * 0x10001u)) | (mt & kt) | ((mt << (16 - k)) & (kt << 16));
  } else {
    uint32_t w = 0;
#pragma unroll
    for (unsigned r = 0; r < 4; r++) {
      const uint32_t e = pair(2 * u + r / 2) >> (16 * (r & 1));
      w |= (TAB::sym_bits(e) | ((mv >> (k * r)) & kmask) << trim) << (8 * r);
    }
    return w;
  }
}

/* Half of a full, aligned version 2 chunk: the forward steps [0, 256) or the
 * mirrored steps [256, 512) of every lane, in rounds of 32 steps (a mirrored
 * warp's from the last down). A round's 16 pairs of lookups run without a
 * branch, and again exactly where any lane met ESC or an invalid code, beside
 * the assembly and 128-byte stores of the round before, so that a warp has
 * two chains of work independent of each other. Code rows stream through the
 * warp's ring, mantissa rows a round ahead. Returns the warp's part of the
 * check; r is left where the lane's steps ended. */
template <int DT, bool BACK>
__device__ static uint32_t lct__half_rings(const typename lct__dec_tab<DT>::Ent *tab, lct__dec_warp_smem<DT> &sm,
                                           const lct__chunk_view &v, const uint32_t *mant, const uint32_t *code,
                                           const lct__lane_stream &cs, uint32_t k, unsigned lane,
                                           lct__code_reader &r) {
  using TAB = lct__dec_tab<DT>;
  constexpr unsigned E = 4 / lct__dt<DT>::W, ROUNDS = LCT_LANE_FORWARD / 32, BLOCKS = LCT_LANE_ELEMS / 32;
  const uint32_t trim = v.trim;
  /* The x-th row a warp takes: forward row x of the rows from the streams'
   * starts, mirrored the x-th from the section's last row down. */
  const uint32_t rows = BACK ? cs.rows - cs.up : cs.up;
  auto row_of = [&](uint32_t x) { return BACK ? cs.rows - 1 - x : x; };
  uint32_t filled = min(rows, (uint32_t)LCT__CODE_RING), issued = filled;
  for (uint32_t x = 0; x < filled; x++) lct__fetch_row(&sm.code[x], code, row_of(x), lane);
  auto block_of = [](uint32_t rd) { return BACK ? BLOCKS - 1 - rd : rd; };
  for (uint32_t q = 0; q < k; q++) lct__fetch_row(&sm.mant[0][q], mant, block_of(0) * k + q, lane);
  lct__cp_commit();
  lct__cp_wait<0>();
  __syncwarp();
  uint32_t landed = filled;
  /* The slow readers take the ring's rows that have landed, else the section's words. */
  using Slow = typename std::conditional<BACK, lct__back_words, lct__fwd_words>::type;
  lct__reader_start(r, Slow{cs, sm.code, landed});

  uint32_t *const out32 = reinterpret_cast<uint32_t *>(v.out) + lane;
  uint32_t chk = 0;
  uint32_t prev[16]; /* round rd - 1's pairs of entries */
#pragma unroll 1
  for (uint32_t rd = 0; rd <= ROUNDS; rd++) {
    /* What the round before last fetched has landed (the last round's copies
     * may still be in flight); every lane is past the rows below the slowest
     * reader's need, whose slots take the next rows, and round rd + 1's
     * mantissa rows go where round rd - 2's were. */
    lct__cp_wait<1>();
    __syncwarp();
    landed = filled;
    filled = issued;
    /* A slot takes its next row once every lane is past its row and that
     * row's copy has landed (a lane may have read it from the section). */
    const uint32_t free_below = min(__reduce_min_sync(LCT__FULL, r.wa), filled);
    for (; issued < min(rows, free_below + LCT__CODE_RING); issued++)
      lct__fetch_row(&sm.code[issued % LCT__CODE_RING], code, row_of(issued), lane);
    if (rd + 1 < ROUNDS)
      for (uint32_t q = 0; q < k; q++)
        lct__fetch_row(&sm.mant[(rd + 1) % LCT__MANT_ROUNDS][q], mant, block_of(rd + 1) * k + q, lane);
    lct__cp_commit();
    /* Round rd - 1's k rows hold its 32 k mantissa bits; its words are the
     * lane's words 32 / E blk .. of the chunk. */
    const uint32_t *mrow = &sm.mant[(rd + LCT__MANT_ROUNDS - 1) % LCT__MANT_ROUNDS][0][lane];
    const uint32_t g0 = 32 / E * block_of(rd - 1); /* used from round 1 on */
    uint32_t mul = (v.mult0 + 2 * (32 * g0 + lane)) * LCT__CHECK_MUL;
    uint32_t b = 0;
    auto word = [&](unsigned u) {
      const uint32_t mv = __funnelshift_r(mrow[32 * (b / 32)], mrow[32 * (b / 32) + 32], b);
      const uint32_t x = lct__round_word<DT, BACK>(prev, u, mv, k, trim);
      chk += x * mul;
      mul += 64 * LCT__CHECK_MUL;
      out32[32 * (g0 + u)] = x;
      b += E * k;
    };
    if (rd == ROUNDS) {
#pragma unroll
      for (unsigned u = 0; u < 32 / E; u++) word(u);
      break;
    }
    const Slow slow{cs, sm.code, landed};
    uint32_t sy[16];
    const lct__code_reader saved = r;
    uint32_t seen = 0;
    /* Pair p's lookups, and the words of the last round that go with it. */
    auto pass = [&](const auto &words, auto assemble) {
#pragma unroll
      for (unsigned p = 0; p < 16; p++) {
        seen |= lct__take_pair<DT, BACK>(r, tab, words, &sy[p]);
        if constexpr (decltype(assemble)::value) {
#pragma unroll
          for (unsigned u = 32 / E * p / 16; u < 32 / E * (p + 1) / 16; u++) word(u);
        }
      }
    };
    /* Most rounds hold no ESC and no invalid code, and find every word they
     * may read in the ring (a pass moves at most 16 pairs of 12-bit codes,
     * 12 words, and reads one ahead): their pairs are read without a branch.
     * The others take words where they lie, and a round that met either is
     * decoded again exactly. */
    const bool in_ring = __all_sync(LCT__FULL, r.wa + 13 <= landed);
    auto run = [&](auto assemble) {
      if (in_ring) {
        pass(lct__ring_words<BACK>{sm.code, lane}, assemble);
      } else {
        pass(slow, assemble);
      }
    };
    if (rd == 0) {
      run(lct__bool<false>());
    } else {
      run(lct__bool<true>());
    }
    if (__any_sync(LCT__FULL, seen & TAB::RARE)) {
      r = saved;
#pragma unroll
      for (unsigned p = 0; p < 16; p++) {
        const uint32_t s0 = lct__take_symbol<DT>(r, tab, slow);
        const uint32_t s1 = lct__take_symbol<DT>(r, tab, slow);
        lct__commit(r, slow);
        sy[p] = BACK ? s1 | s0 << 16 : s0 | s1 << 16;
      }
    }
#pragma unroll
    for (unsigned p = 0; p < 16; p++) prev[p] = sy[p];
  }
  lct__cp_wait<0>(); /* no copy into the warp's slots outlives it */
  return chk;
}

/* The forward (BACK false) or mirrored steps of a coded chunk, one step at a
 * time straight from the sections: a partial or unaligned chunk, or version
 * 1 (all forward). Returns the warp's part of the check. */
template <int DT, bool BACK>
__device__ static uint32_t lct__half_steps(const typename lct__dec_tab<DT>::Ent *tab, const lct__chunk_view &v,
                                           const lct__lane_stream &cs, const lct__lane_stream &ms, uint32_t nt,
                                           uint32_t fwd, uint32_t k, bool v2, unsigned lane, lct__code_reader &r) {
  using TAB = lct__dec_tab<DT>;
  constexpr unsigned W = lct__dt<DT>::W, E = 4 / W;
  const uint32_t kmask = (1u << k) - 1, trim = v.trim;
  using Words = typename std::conditional<BACK, lct__back_words, lct__fwd_words>::type;
  const Words words{cs, nullptr, 0};
  lct__reader_start(r, words);
  uint32_t chk = 0;
  const uint32_t steps = BACK ? nt - fwd : fwd;
#pragma unroll 1
  for (uint32_t i = 0; i < steps; i++) {
    const uint32_t j = BACK ? nt - 1 - i : i;
    const uint32_t sym = lct__take_symbol<DT>(r, tab, words);
    lct__commit(r, words);
    const uint32_t mv = ms.bits32((int)(j * k));
    const uint32_t x = TAB::sym_bits(sym) | (mv & kmask) << trim;
    const uint32_t e = v2 ? 32 * E * (j / E) + E * lane + j % E : lane * LCT_LANE_ELEMS + j;
    chk += (x << (8 * ((e * W) & 3))) * ((v.mult0 + 2 * ((e * W) >> 2)) * LCT__CHECK_MUL);
    lct__store_elem<W>(v.out, e, x);
  }
  return chk;
}

/* A coded chunk, the pair's forward warp (BACK false) or mirrored warp
 * decoding its steps of every lane, a thread per lane. err is 0 or
 * LCT_ECORRUPT. Not inlined: the kernel's two instances, inlined side by
 * side, spilled where each alone fits the register budget. */
template <int DT, bool BACK>
__device__ static __noinline__ lct__half_result lct__coded_half(const typename lct__dec_tab<DT>::Ent *tab,
                                                                lct__dec_warp_smem<DT> &sm, const lct__chunk_view v,
                                                                bool v2, bool aligned, unsigned lane) {
  constexpr unsigned S = lct__dt<DT>::S, M = lct__dt<DT>::M, E = 4 / lct__dt<DT>::W;
  if (v.mode != 1 || S == 0 || v.trim > M || v.size < LCT_CODED_CHUNK_HEADER) return {LCT_ECORRUPT, 0, 0};
  const uint32_t n = v.n, k = M - v.trim;
  uint32_t nt;
  if (v2) {
    const uint32_t rem = n % (32 * E), extra = rem > E * lane ? rem - E * lane : 0;
    nt = n / (32 * E) * E + min(extra, E);
  } else {
    nt = n > lane * LCT_LANE_ELEMS ? min(n - lane * LCT_LANE_ELEMS, (uint32_t)LCT_LANE_ELEMS) : 0;
  }
  const uint32_t fwd = v2 ? min(nt, (uint32_t)LCT_LANE_FORWARD) : nt;
  const uint32_t lb = (__shfl_sync(LCT__FULL, v.hw, 2 + lane / 2) >> (16 * (lane & 1))) & 0xffff;
  const uint32_t total = lct__warp_sum(lb), mwords = (n * k + 31) / 32, hwords = (total + 31) / 32;
  if (__any_sync(LCT__FULL, lb > nt * (LCT_MAX_CODE_LEN + S)) ||
      v.size != LCT_CODED_CHUNK_HEADER + 4ull * mwords + 4ull * hwords)
    return {LCT_ECORRUPT, 0, 0};
  const uint32_t *mant = v.ch + LCT_CODED_CHUNK_HEADER / 4, *code = mant + mwords;
  const lct__lane_stream cs = lct__lane_section(code, hwords, lb, v2, lane);
  const lct__lane_stream ms = lct__lane_section(mant, mwords, nt * k, v2, lane);
  lct__code_reader r;
  const uint32_t chk = v2 && n == LCT_CHUNK_ELEMS && aligned
                           ? lct__half_rings<DT, BACK>(tab, sm, v, mant, code, cs, k, lane, r)
                           : lct__half_steps<DT, BACK>(tab, v, cs, ms, nt, fwd, k, v2, lane, r);
  uint32_t bad = r.bad;
  if (!BACK) { /* zero padding after each section's last bit */
    if (lane == 0 && (total & 31)) bad |= __ldg(code + hwords - 1) >> (total & 31);
    if (lane == 0 && ((n * k) & 31)) bad |= __ldg(mant + mwords - 1) >> ((n * k) & 31);
  }
  return {__any_sync(LCT__FULL, bad) ? LCT_ECORRUPT : 0, lct__warp_sum(chk),
          BACK ? lb - lct__reader_bits(r) : lct__reader_bits(r)};
}

/* Dynamic shared memory of a chunk block: its warps' rings (none for dtype
 * raw). The decode table is static shared memory, at an address the
 * compiler knows. */
template <int DT> constexpr size_t lct__dec_smem_bytes() {
  return lct__dt<DT>::S ? 2 * LCT__DEC_CHUNKS * sizeof(lct__dec_warp_smem<DT>) : 0;
}

/* Two warps per chunk, the forward and the mirrored steps of its lanes,
 * LCT__DEC_CHUNKS chunks of one blob per block. */
template <int DT, unsigned N>
__global__ void __launch_bounds__(LCT__DEC_THREADS, 2)
    lct__decode_chunk_kernel(const __grid_constant__ lct__dec_params<N> p) {
  using Ent = typename lct__dec_tab<DT>::Ent;
  __shared__ __align__(16) Ent s_tab[lct__dt<DT>::S ? LCT__TABLE_ENTRIES : 1];
  __shared__ int s_known;
  __shared__ int s_back_err[LCT__DEC_CHUNKS];              /* the mirrored warps' results */
  __shared__ uint32_t s_back_chk[LCT__DEC_CHUNKS], s_back_end[LCT__DEC_CHUNKS][32];
  extern __shared__ __align__(16) uint8_t lct__dec_shared[];
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5, pair = warp >> 1, back = warp & 1;
  const lct__dec_tensor &T = p.t[lct__find_tensor(p.t, p.count, blockIdx.x)];
  const uint32_t n_chunks = lct__chunk_count(T.n_elems), c = (blockIdx.x - T.begin) * LCT__DEC_CHUNKS + pair;
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
    for (unsigned i = threadIdx.x; i < sizeof s_tab / 16; i += LCT__DEC_THREADS)
      reinterpret_cast<uint4 *>(s_tab)[i] = __ldg(tab_g + i);
  }
  /* Skip the work once the blob is known corrupt. */
  if (threadIdx.x == 0) s_known = *(volatile int *)wst;
  __syncthreads();
  if (c >= n_chunks) return; /* both warps of the pair */
  if (s_known == 0 && !err) {
    auto &sm = reinterpret_cast<lct__dec_warp_smem<DT> *>(lct__dec_shared)[warp];
    lct__half_result h = {LCT_ECORRUPT, 0, 0}; /* a coded chunk in a blob of dtype raw */
    if (v.mode == 0) {
      h.err = lct__raw_chunk<DT>(v, T.aligned, lane, back, &h.chk);
    } else if constexpr (lct__dt<DT>::S > 0) {
      h = back ? lct__coded_half<DT, true>(s_tab, sm, v, v2, T.aligned, lane)
               : lct__coded_half<DT, false>(s_tab, sm, v, v2, T.aligned, lane);
    }
    if (back) {
      if (lane == 0) {
        s_back_err[pair] = h.err;
        s_back_chk[pair] = h.chk;
      }
      s_back_end[pair][lane] = h.end;
    }
    asm volatile("bar.sync %0, 64;\n" ::"r"(1 + pair) : "memory"); /* the pair's halves in */
    if (back) return;
    /* The forward steps must end exactly where the mirrored ones did. */
    err = h.err ? h.err : s_back_err[pair];
    if (!err && v.mode == 1 && __any_sync(LCT__FULL, h.end != s_back_end[pair][lane])) err = LCT_ECORRUPT;
    if (!err && h.chk + s_back_chk[pair] != v.stored) err = LCT_ECHECKSUM;
  } else if (back) {
    return;
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
