/* lct_cuda_decode.cuh — device code: blob header/codebook validation and the chunk decoder (a pair of warps per chunk or half chunk). */
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
  uint32_t begin;   /* its first chunk block in the launch (see lct__decode_chunk_kernel) */
  uint32_t slot;    /* its index in the workspace arrays */
  uint8_t aligned;  /* dst is 16-byte aligned */
  uint8_t split;    /* two units per chunk (lct__part) */
};

/* What the blobs of a decode launch share: the workspace. */
struct lct__dec_common {
  uint8_t *tables;      /* a 4096-entry decode table per slot, LCT__TABLE_BYTES each (see lct__dec_tab) */
  int *ws_status;       /* status per slot */
  unsigned *ws_done;    /* finished units per slot (lct__decode_chunk_kernel) */
  unsigned *ws_version; /* per slot, the format version the header kernel read */
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
  if ((hw[1] & 0xff) != 1 && (hw[1] & 0xff) != LCT_FORMAT_VERSION) return LCT_EVERSION;
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
    p.common.ws_version[T.slot] = s_hw[1] & 0xff;
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

/* Per-dtype shape of the chunk decoder. A chunk, or half of one (lct__part),
 * is decoded by a pair of warps: the code reader, whose lane t follows lane
 * t's code stream (a chain of dependent table lookups, the decoder's critical
 * path, kept free of all other work), and the assembler, whose lane t adds
 * lane t's mantissas to the symbols the reader handed over, checks and stores
 * them. The reader runs a round (32 symbols per lane) ahead. Each keeps only
 * small windows of the chunk in shared memory, so that many pairs stay
 * resident per SM. */
template <int DT> struct lct__dec_cfg {
  static constexpr unsigned W = lct__dt<DT>::W, S = lct__dt<DT>::S, M = lct__dt<DT>::M;
  static constexpr unsigned G = 16 / W; /* elements per 16-byte store */
  /* Mantissa bits are taken E elements (E * M <= 32 bits) per 32-bit window. */
  static constexpr unsigned E = M == 0   ? G
                                : 32 / M >= 16 ? 16
                                : 32 / M >= 8  ? 8
                                : 32 / M >= 4  ? 4
                                : 32 / M >= 2  ? 2
                                               : 1;
  /* Code ring per lane, in 16-byte granules. The assembler refills it a
   * round behind the reader (lct__read_codes), so 8 hold the next fast pass
   * after any round without ESC, which takes at most 12 words. */
  static constexpr unsigned RG = 8;
  static constexpr unsigned RW = 4 * RG;
  static constexpr unsigned MROW = M | 1; /* mantissa row stride, odd: a warp reading one word per row hits 32 banks */
  /* Store groups a lane stages before they are written out (64 bytes, or a
   * round's where that is less): the fewer lanes a store instruction
   * covers, the fewer cache lines it writes parts of. */
  static constexpr unsigned F = 32 / G < 4 ? 32 / G : 4;
  /* Chunks (warp pairs) per block, sharing one decode table: for 2-byte
   * dtypes 8, so that two blocks (1024 threads, 64 registers) fit in
   * shared memory; for f32 (longer mantissa rows) and fp8 (80 registers) 4,
   * in three blocks. Fewer pairs per block would leave a grid of one wave
   * unevenly spread over the SMs. */
  static constexpr unsigned PAIRS = W == 2 ? 8 : 4;
  static_assert(W != 2 || E % 2 == 0, "2-byte elements are assembled in pairs");
  static_assert(4 * RG >= 12 + 17 + 3,
                "a ring holds a round without ESC, the next fast pass's reads and the rest of the reader's granule");
};

/* Shared memory of one part's warp pair: the reader's code ring (row t: lane
 * t's) and where the reader stands in it, the round's symbols handed to the
 * assembler (two rounds: pair p of lane t's symbols, two entries, at [p][t]),
 * and the assembler's round rows of mantissas (row t: lane t's k words of the
 * round) and output staging (lane t's latest F store groups). */
template <int DT> struct lct__dec_pair_smem {
  uint4 stage[32 * lct__dec_cfg<DT>::F];
  uint32_t code[32][lct__dec_cfg<DT>::RW];
  uint32_t wa[2][32]; /* per lane, the reader's word position after round rd, at [rd & 1] (lct__read_codes) */
  uint32_t mid[2][32]; /* per lane of a whole chunk: lct__coded_view::mid, and the bits the reader took by symbol 256 */
  uint32_t syms[2][16][32];
  uint32_t mant[2][32][lct__dec_cfg<DT>::MROW];
};

/* What the two warps of a pair tell each other besides the round buffers:
 * the assembler's one reading of the blob's version (which part of which
 * chunk is theirs) and of the chunk's place and header, from which both
 * derive the same view (so that both take one path and meet each other's
 * barriers, even if the blob changed in between), and the reader's verdict. */
struct lct__pair_talk {
  uint64_t off, end;                      /* the chunk's bytes in the blob (off > end: no valid place) */
  uint32_t hw[LCT_CODED_CHUNK_HEADER / 4]; /* its header words (zero past the chunk), for either version */
  uint32_t version;                       /* the blob's version byte, as read before the header kernel's verdict */
  uint32_t bad;                           /* the reader's verdict: its part of the chunk fails a check */
  uint32_t chk;                           /* a raw chunk: the check of the reader's words */
  uint32_t tail_word[2], tail_mask[2];    /* the mantissa and code sections' last words, their padding bits */
};

/* Where the two parts of a version 2 chunk, decoded by two pairs of one
 * block, meet: the sums of their checks and verdicts; the second to arrive
 * judges the chunk. */
struct lct__chunk_join {
  uint32_t chk, bad, arrived;
};

template <int DT> struct lct__dec_smem {
  lct__dec_pair_smem<DT> pair[lct__dec_cfg<DT>::PAIRS];
};

/* Dynamic shared memory of a chunk block (none for dtype raw: no codes); the
 * decode table is static shared memory, at an address the compiler knows. */
template <int DT> constexpr size_t lct__dec_smem_bytes(unsigned pairs = lct__dec_cfg<DT>::PAIRS) {
  return lct__dt<DT>::S ? pairs * sizeof(lct__dec_pair_smem<DT>) : 0;
}
template <int DT> constexpr size_t lct__dec_table_bytes() {
  return lct__dt<DT>::S ? LCT__TABLE_ENTRIES * sizeof(typename lct__dec_tab<DT>::Ent) : 0;
}

/* Blocks per SM the register budget is set for: as many as shared memory
 * admits (228 KiB, 1 KiB reserved per block), up to 1024 threads (64
 * registers; fp8: 768, for 80 registers and the assembler's 16-element store
 * groups). */
template <int DT> constexpr unsigned lct__dec_blocks_per_sm() {
  constexpr unsigned threads = 64 * lct__dec_cfg<DT>::PAIRS, cap = (lct__dt<DT>::W == 1 ? 768 : 1024) / threads,
                     fit = (228u << 10) / (lct__dec_smem_bytes<DT>() + lct__dec_table_bytes<DT>() + 1024);
  static_assert(lct__dec_cfg<DT>::PAIRS < 16 && (fit < cap ? fit : cap) * lct__dec_cfg<DT>::PAIRS >= 12,
                "a named barrier per pair; at least 12 pairs per SM");
  return fit < cap ? fit : cap;
}

/* The pair's named barrier (1 + the pair's index; 0 is __syncthreads'): the
 * reader waits on it once it has handed a round over, the assembler before
 * it takes one, so the reader fills one half of syms while the assembler
 * reads the other. */
__device__ static inline void lct__pair_sync(unsigned id) { asm volatile("bar.sync %0, 64;\n" ::"r"(id) : "memory"); }

/* A lane's code stream reader. Reader word v is cbase[v], cbase being the
 * code section's start rounded down to 16 bytes; the ring holds words in
 * 16-byte granules, granule g in slot g % RG. The reader stands at stream bit
 * 32 (wa - 2) + pos, pos < 32: lo and hi are words wa - 2 and wa - 1, nw is
 * word wa, read one advance ahead (from the ring or the code section:
 * lct__ring_words, lct__section_words), each bit-reversed. win is the 32
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
 * or whose ring words had not landed, and for a lane's odd last symbol; it
 * reads the code section itself (lct__section_words). A code takes at most
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

/* A lane's code stream as its ring holds it: reader word v is cbase[v],
 * cbase being the code section's start rounded down to 16 bytes; the
 * section ends at reader word cend, and the lane's stream starts at reader
 * bit bit0. Both warps of a pair derive it from the same view. */
struct lct__code_origin {
  const uint32_t *cbase;
  uint32_t cend, bit0;
};

/* Where a code reader takes stream word wa from: its lane's ring row (the
 * fast pass, over words that have landed there: see lct__read_codes) or the
 * code section itself (the exact pass, rare: nothing to wait for). */
template <int DT> struct lct__ring_words {
  const uint32_t *row;
  __device__ uint32_t operator()(uint32_t wa) const { return row[wa & (lct__dec_cfg<DT>::RW - 1)]; }
};

/* Reader words of a code section ending at word cend: zero past it (never consumed). */
struct lct__section_words {
  const uint32_t *cbase;
  uint32_t cend;
  __device__ uint32_t operator()(uint32_t wa) const { return wa < cend ? __ldg(cbase + wa) : 0; }
};

/* The granules a ring holds once filled for a reader at word wa: those
 * before the limit (the slots of the granules before wa's are free). */
template <int DT> __device__ static inline uint32_t lct__ring_limit(uint32_t wa) {
  return (wa >> 2) + lct__dec_cfg<DT>::RG;
}

/* Copies code granule g into its ring slot: 16 bytes when the granule lies
 * inside the code section's end (cend, in reader words), else its words
 * before cend one by one; nothing past the chunk is read. */
template <int DT>
__device__ static inline void lct__fetch_granule(uint32_t *ring, const uint32_t *cbase, uint32_t g, uint32_t cend) {
  uint32_t *dst = ring + 4 * (g & (lct__dec_cfg<DT>::RG - 1));
  const uint32_t v = 4 * g;
  if (v + 4 <= cend) {
    lct__cp_async16(dst, cbase + v);
  } else {
#pragma unroll
    for (unsigned i = 0; i < 4; i++) {
      if (v + i < cend) lct__cp_async4(dst + i, cbase + v + i, true);
    }
  }
}

/* Fetches granules of the stream at o from gfill on into the slots a reader
 * at word wa is done with; returns the new gfill. */
template <int DT>
__device__ static inline uint32_t lct__code_topup(uint32_t *ring, const lct__code_origin &o, uint32_t gfill,
                                                  uint32_t wa) {
#pragma unroll 1
  for (; gfill < lct__ring_limit<DT>(wa); gfill++) lct__fetch_granule<DT>(ring, o.cbase, gfill, o.cend);
  return gfill;
}

/* The words of a round's mantissa rows (k each, laid end to end) a lane
 * copies: words lane, lane + 32, ..., k of them; the first is column c0 of
 * row t0, and each next dt rows and dc columns further. */
struct lct__mant_walk {
  uint32_t t0, c0, dt, dc;
};

__device__ static inline lct__mant_walk lct__mant_walk_of(uint32_t k, unsigned lane) {
  return k ? lct__mant_walk{lane / k, lane % k, 32 / k, 32 % k} : lct__mant_walk{0, 0, 0, 0};
}

/* Mantissas of round rd: row t gets words [lw t + k rd, lw t + k rd + k) of
 * the part's (lane t's elements [32 rd, 32 rd + 32), lw = le k / 32 words
 * per lane), copied by the whole warp, k words per lane, coalesced. */
template <int DT>
__device__ static inline void lct__fetch_mant(uint32_t (*rows)[lct__dec_cfg<DT>::MROW], const uint32_t *mant,
                                             uint32_t mwords, uint32_t k, uint32_t lw, uint32_t rd,
                                             const lct__mant_walk &m) {
  uint32_t t = m.t0, c = m.c0;
  for (uint32_t i = 0; i < k; i++) {
    const uint32_t g = lw * t + k * rd + c;
    lct__cp_async4(&rows[t][c], mant + (g < mwords ? g : 0), g < mwords);
    c += m.dc;
    t += m.dt;
    if (c >= k) {
      c -= k;
      t++;
    }
  }
}

/* The 32 bits of a lane's mantissa row from bit b on, at their place in the
 * element (trim). The word after b's may lie past the row's k words (its
 * bits go unused); where the row has no word after its M (M odd, the stride
 * then M), its last word is read again instead, so that every read stays in
 * the lane's own row. */
template <int DT> __device__ static inline uint32_t lct__mant_window(const uint32_t *row, uint32_t b, uint32_t trim) {
  constexpr unsigned M = lct__dt<DT>::M, MROW = lct__dec_cfg<DT>::MROW;
  uint32_t next = (b >> 5) + 1;
  if constexpr (MROW == M) next = min(next, MROW - 1);
  return __funnelshift_r(row[b >> 5], row[next], b) << trim;
}

/* Slot of store group h of lane t's staged groups, swizzled so that both a
 * lane-per-row write of one group and the flush's F-threads-per-row read
 * hit 8 distinct 16-byte bank groups per quarter warp. */
template <int DT> __device__ static inline uint32_t lct__stage_slot(uint32_t t, uint32_t h) {
  constexpr unsigned F = lct__dec_cfg<DT>::F;
  return F * t + (h ^ ((t * F / 8) & (F - 1)));
}

/* Writes the staged store groups j / G to j / G + F - 1 of round rd of every
 * lane that has them in full: F threads per lane, so each store instruction
 * writes whole 32-byte sectors of few lines (16-byte stores of 32 lanes 1 KiB
 * apart leave every sector half-written, which the memory system turns into
 * read-modify-writes). */
template <int DT>
__device__ static inline void lct__flush_stage(const uint4 *stage, uint8_t *out, uint32_t n, uint32_t le, uint32_t rd,
                                               uint32_t j, unsigned lane) {
  using C = lct__dec_cfg<DT>;
  constexpr unsigned W = C::W, G = C::G, F = C::F;
  const uint32_t h = lane % F;
#pragma unroll
  for (uint32_t i = 0; i < F; i++) {
    const uint32_t t = i * (32 / F) + lane / F, e = t * le + 32 * rd + j + h * G;
    if (e + G <= n) *reinterpret_cast<uint4 *>(out + (size_t)e * W) = stage[lct__stage_slot<DT>(t, h)];
  }
}

/* The part of a chunk a warp pair decodes: its units. A split blob's
 * version 2 chunks are decoded in two parts, lanes 0-31 and 32-63 (8192
 * elements each), by two pairs at once, as a lane's chain of lookups is what
 * such a decode waits for: every blob of a launch too small to fill the GPU,
 * and in a full launch a blob too small to fill its block. The host does not
 * know the version: a split blob gives each chunk two units, and unit u
 * decodes part u % 2 of chunk u / 2 of a version 2 blob, all of chunk u of a
 * version 1 blob (none for u >= n_chunks). Another blob gives each chunk one
 * unit, which decodes it whole: 32 lanes of 512 elements, a version 2 chunk's
 * lanes 2t and 2t + 1 (one code stream, end to end) read as its lane t. */
struct lct__part {
  uint32_t c;     /* the chunk */
  uint32_t h;     /* the part: 0 or 1 */
  uint32_t parts; /* the chunk's parts: 2 (a split version 2 chunk) or 1 */
  uint32_t le;    /* elements per lane */
  uint32_t version;
  bool active;    /* the unit has a part */
};

__device__ static inline lct__part lct__part_of(uint32_t version, uint32_t u, uint32_t n_chunks, bool split) {
  if (split && version != 1) return {u >> 1, u & 1, 2, LCT_LANE_ELEMS, version, true};
  return {u, 0, 1, LCT_V1_LANE_ELEMS, version, u < n_chunks};
}

/* Where a pair's part of chunk c lies and what the chunk's header says, as
 * both warps of the pair derive it from the assembler's one reading
 * (lct__chunk_read). */
struct lct__chunk_view {
  const uint32_t *ch; /* the chunk */
  uint64_t size;      /* its bytes */
  uint8_t *cout;      /* its first element in dst */
  uint32_t cn;        /* its elements */
  uint32_t cmult0;    /* lct__mult(base + g) = (cmult0 + 2g) * LCT__CHECK_MUL for its word g */
  uint8_t *out;       /* the part's first element in dst */
  uint32_t n;         /* the part's elements */
  uint32_t mult0;     /* as cmult0, for the part's words */
  uint32_t hw;        /* header word `lane` (zero past the coded header or the chunk) */
  uint32_t stored;    /* its check */
  uint32_t mode, trim;
  lct__part part;
};

/* The assembler: reads the blob's version and chunk c's place in the chunk
 * table and, where it is valid, its header words into talk, for both warps.
 * It runs before the header kernel's verdict is known, so it checks itself
 * that the table lies inside the blob. */
template <int DT>
__device__ static void lct__chunk_read(const lct__dec_tensor &T, uint32_t c, uint32_t n_chunks, unsigned lane,
                                       lct__pair_talk &talk) {
  using L = lct__layout_of<DT>;
  const uint64_t len = T.blob_bytes;
  const bool table_inside = L::TABLE + 8ull * n_chunks <= len;
  uint64_t off = 0, end = 0;
  if (lane == 0 && table_inside) {
    const uint64_t *table = reinterpret_cast<const uint64_t *>(T.blob + L::TABLE);
    off = table[c];
    end = c + 1 < n_chunks ? table[c + 1] : len;
  }
  off = __shfl_sync(LCT__FULL, off, 0);
  end = __shfl_sync(LCT__FULL, end, 0);
  const bool valid = table_inside && !((c == 0 && off != L::TABLE + 8ull * n_chunks) || (off & 3) || end < off ||
                                       end > len || end - off < LCT_RAW_CHUNK_HEADER);
  if (lane < LCT_CODED_CHUNK_HEADER / 4)
    talk.hw[lane] =
        valid && 4 * lane + 4 <= end - off ? __ldg(reinterpret_cast<const uint32_t *>(T.blob + off) + lane) : 0;
  if (lane == 0) {
    talk.off = valid ? off : 1;
    talk.end = valid ? end : 0;
  }
}

/* The blob's version byte as the assembler of a pair reads it for both
 * warps, before the header kernel's verdict. */
__device__ static inline void lct__version_read(const lct__dec_tensor &T, unsigned lane, lct__pair_talk &talk) {
  if (lane == 0) talk.version = T.blob_bytes >= 8 ? __ldg(reinterpret_cast<const uint32_t *>(T.blob) + 1) & 0xff : 0;
}

/* The pair's view of its part from what the assembler read (talk), alike in
 * both warps: 0, or LCT_ECORRUPT for an invalid place or first header word. */
template <int DT>
__device__ static int lct__chunk_open(const lct__dec_tensor &T, const lct__part &pt, unsigned lane,
                                      const lct__pair_talk &talk, lct__chunk_view &v) {
  constexpr unsigned W = lct__dt<DT>::W;
  const uint64_t first_elem = (uint64_t)pt.c * LCT_CHUNK_ELEMS;
  v.part = pt;
  v.cn = T.n_elems - first_elem < LCT_CHUNK_ELEMS ? (uint32_t)(T.n_elems - first_elem) : LCT_CHUNK_ELEMS;
  v.cout = T.dst + first_elem * W;
  v.cmult0 = (uint32_t)(2 * (first_elem * W / 4) + 1);
  const uint32_t part_first = pt.h * (LCT_CHUNK_ELEMS / 2);
  v.n = v.cn > part_first ? min(v.cn - part_first, LCT_CHUNK_ELEMS / pt.parts) : 0;
  v.out = v.cout + (size_t)part_first * W;
  v.mult0 = v.cmult0 + 2 * (part_first * W / 4);
  if (talk.off > talk.end) return LCT_ECORRUPT;
  v.size = talk.end - talk.off;
  v.ch = reinterpret_cast<const uint32_t *>(T.blob + talk.off);
  v.hw = lane < LCT_CODED_CHUNK_HEADER / 4 ? talk.hw[lane] : 0;
  const uint32_t h0 = talk.hw[0];
  v.stored = talk.hw[1];
  v.mode = h0 & 0xff;
  v.trim = (h0 >> 8) & 0xff;
  return h0 >> 16 ? LCT_ECORRUPT : 0;
}

/* What the assembler of a pair makes of its part: the sum of its words'
 * check terms and whether it failed any other check. */
struct lct__verdict {
  uint32_t chk, bad;
};

/* A raw chunk, by both warps of each of its parts' pairs (alternate 32-word
 * runs): copy, verify size and padding, sum the check. Returns the verdict
 * of the pair's words to the assembler. */
template <int DT>
__device__ static lct__verdict lct__raw_chunk(const lct__chunk_view &v, bool aligned, unsigned lane, bool assembler,
                                              lct__pair_talk &talk, unsigned bar) {
  constexpr unsigned W = lct__dt<DT>::W;
  const uint32_t nbytes = v.cn * W, rw = (uint32_t)lct__pad4(nbytes) / 4;
  const uint32_t warps = 2 * v.part.parts, first = 32 * (2 * v.part.h + assembler);
  uint32_t chk = 0, bad = v.trim || v.size != LCT_RAW_CHUNK_HEADER + 4ull * rw;
  for (uint32_t j = first + lane; !bad && j < rw; j += 32 * warps) {
    const uint32_t x = __ldg(v.ch + 2 + j), b = 4 * j;
    chk += x * ((v.cmult0 + 2 * j) * LCT__CHECK_MUL);
    if (b + 4 > nbytes) bad |= x >> (8 * (nbytes - b));
    lct__store_word<W>(v.cout, b, x, nbytes, aligned);
  }
  bad = __any_sync(LCT__FULL, bad);
  chk = lct__warp_sum(chk);
  if (!assembler && lane == 0) {
    talk.bad = bad;
    talk.chk = chk;
  }
  lct__pair_sync(bar);
  return {chk + talk.chk, bad | talk.bad};
}

/* The layout of a pair's part of a coded chunk, as lane `lane` sees it. */
struct lct__coded_view {
  uint32_t nt;           /* the lane's elements */
  uint32_t lb;           /* its lane_bits */
  uint32_t start;        /* its stream's first bit in the code section */
  uint32_t total;        /* the code section's bits */
  uint32_t k;            /* kept mantissa bits per element */
  uint32_t mwords;       /* the part's mantissa words and what lies after them in the section */
  uint32_t hwords;       /* the code section's words */
  const uint32_t *mant;  /* the part's first mantissa word */
  const uint32_t *code;  /* the code section */
  bool tail_checks;      /* the pair checks the sections' padding (the chunk's last part's pair) */
  uint32_t mid;          /* a whole version 2 chunk: lane 2t's bits, which the reader checks at symbol 256 (~0: none) */
};

/* Lane field f (0..63) of a version 2 coded header whose word `lane` is hw:
 * 12 bits at bit 12 f of words 2..25. */
__device__ static inline uint32_t lct__lane_field(uint32_t hw, uint32_t f) {
  const uint32_t b = LCT_LANE_FIELD_BITS * f, q = 2 + b / 32;
  const uint32_t lo = __shfl_sync(LCT__FULL, hw, q), hi = __shfl_sync(LCT__FULL, hw, min(q + 1, 31u));
  return __funnelshift_r(lo, hi, b) & ((1u << LCT_LANE_FIELD_BITS) - 1);
}

/* Validates a coded chunk's header against its size, and finds the pair's part in it. */
template <int DT>
__device__ static int lct__coded_open(const lct__chunk_view &v, unsigned lane, lct__coded_view &cv) {
  constexpr unsigned S = lct__dt<DT>::S, M = lct__dt<DT>::M;
  const bool v1 = v.part.version == 1;
  const uint32_t header = v1 ? LCT_V1_CODED_CHUNK_HEADER : LCT_CODED_CHUNK_HEADER;
  if (v.mode != 1 || S == 0 || v.trim > M || v.size < header) return LCT_ECORRUPT;
  const uint32_t le = v.part.le;
  cv.nt = v.n > lane * le ? min(v.n - lane * le, le) : 0;
  cv.mid = ~0u;
  uint32_t before = 0, after = 0; /* the lane bits of the parts before and after the pair's */
  if (v1) {
    cv.lb = (__shfl_sync(LCT__FULL, v.hw, 2 + lane / 2) >> (16 * (lane & 1))) & 0xffff;
  } else if (v.part.parts == 1) { /* whole: lanes 2t and 2t + 1 as one; the second empty where lane t has 256 or fewer */
    const uint32_t first = lct__lane_field(v.hw, 2 * lane), second = lct__lane_field(v.hw, 2 * lane + 1);
    cv.lb = first + second;
    cv.mid = cv.nt > LCT_LANE_ELEMS ? first : ~0u;
    if (__any_sync(LCT__FULL, cv.nt <= LCT_LANE_ELEMS && second != 0)) return LCT_ECORRUPT;
  } else {
    const uint32_t f0 = lct__lane_field(v.hw, lane), f1 = lct__lane_field(v.hw, 32 + lane);
    cv.lb = v.part.h ? f1 : f0;
    const uint32_t other = lct__warp_sum(v.part.h ? f0 : f1);
    if (v.part.h) {
      before = other;
    } else {
      after = other;
    }
  }
  uint32_t start = cv.lb;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t y = __shfl_up_sync(LCT__FULL, start, o);
    if ((int)lane >= o) start += y;
  }
  cv.total = before + __shfl_sync(LCT__FULL, start, 31) + after;
  cv.start = before + start - cv.lb;
  cv.k = M - v.trim;
  const uint32_t mwords = (v.cn * cv.k + 31) / 32, skip = v.part.h * (LCT_CHUNK_ELEMS / 2) * cv.k / 32;
  cv.hwords = (cv.total + 31) / 32;
  if (__any_sync(LCT__FULL, cv.nt == 0 && cv.lb != 0) || v.size != header + 4ull * mwords + 4ull * cv.hwords)
    return LCT_ECORRUPT;
  cv.mwords = mwords - min(skip, mwords);
  cv.mant = v.ch + header / 4 + min(skip, mwords);
  cv.code = v.ch + header / 4 + mwords;
  cv.tail_checks = v.part.h == v.part.parts - 1;
  return 0;
}

/* The origin of lane `lane`'s stream, as both warps of a pair derive it. */
__device__ static inline lct__code_origin lct__code_origin_of(const lct__coded_view &cv) {
  const uint32_t *cbase = reinterpret_cast<const uint32_t *>((uintptr_t)cv.code & ~(uintptr_t)15);
  const uint32_t phase = (uint32_t)(cv.code - cbase);
  return {cbase, phase + cv.hwords, 32 * phase + cv.start};
}

/* Rounds of 32 elements per lane in a part of n elements, le per lane. */
__device__ static inline uint32_t lct__rounds(uint32_t n, uint32_t le) { return (min(n, le) + 31) / 32; }

/* Elements of round rd of a lane of nt elements. */
__device__ static inline uint32_t lct__round_elems(uint32_t nt, uint32_t rd) {
  return nt > 32 * rd ? min(nt - 32 * rd, 32u) : 0;
}

/* Section s's last word (of `words`, from `first`) and the mask of its
 * padding bits after `bits` bits, into talk by an asynchronous copy (with the
 * caller's first group), where the pair checks the chunk's padding: the
 * check after the rounds reads them there, so that no register of the
 * rounds holds them and nothing waits for the load before the rounds. */
__device__ static inline void lct__tail_fetch(lct__pair_talk &talk, unsigned s, const uint32_t *first, uint32_t words,
                                              uint32_t bits, bool checks) {
  const uint32_t t = bits & 31, mask = checks && t ? ~0u << t : 0;
  talk.tail_mask[s] = mask;
  lct__cp_async4(&talk.tail_word[s], mask ? first + words - 1 : first, mask != 0);
}

/* The reader warp of a coded chunk: lane t follows lane t's code stream and
 * hands each round's symbols over in sm.syms, then its verdict (an invalid
 * code, a stream not consuming exactly lane_bits, nonzero code padding) in
 * talk.bad. It fills the code ring once; from then on the assembler refills
 * it (lct__assemble), off the reader's path, from the position the reader
 * leaves in sm.wa at each hand-over. What the assembler fetches in round rd
 * lands before the barrier that ends it, so the reader may read it from
 * round rd + 2 on. */
template <int DT>
__device__ static void lct__read_codes(const typename lct__dec_tab<DT>::Ent *tab, lct__dec_pair_smem<DT> &sm,
                                       const lct__chunk_view &v, const lct__coded_view &cv, unsigned lane,
                                       lct__pair_talk &talk, unsigned bar) {
  const uint32_t rounds = lct__rounds(v.n, v.part.le);
  const lct__code_origin o = lct__code_origin_of(cv);
  const lct__ring_words<DT> ring{sm.code[lane]};
  sm.mid[0][lane] = cv.mid; /* out of the rounds' registers */
  const lct__section_words section{o.cbase, o.cend};
  const uint32_t w0 = o.bit0 >> 5;
  lct__code_topup<DT>(sm.code[lane], o, o.bit0 >> 7, w0);
  if (lane == 0) lct__tail_fetch(talk, 1, cv.code, cv.hwords, cv.total, cv.tail_checks);
  lct__cp_commit();
  lct__cp_wait<0>();
  __syncwarp();

  lct__code_reader r;
  r.lo = __brev(ring(w0));
  r.hi = __brev(ring(w0 + 1));
  r.wa = w0 + 2;
  r.nw = __brev(ring(r.wa));
  r.pos = o.bit0 & 31;
  r.win = __funnelshift_l(r.hi, r.lo, r.pos);
  r.used = 0;
  r.bad = 0;
  /* Granules before gdone have landed in the ring: the first fill, then what
   * the assembler fetched for the position handed over a round before the
   * latest (wa_prev). */
  uint32_t gdone = lct__ring_limit<DT>(w0), wa_prev = w0;

  for (uint32_t rd = 0; rd < rounds; rd++) {
    uint32_t *const out = &sm.syms[rd & 1][0][lane];
    const uint32_t jn = lct__round_elems(cv.nt, rd);
    /* The round's pairs of symbols, by take_pair from the ring (EXACT false:
     * returns the OR of the entries it read) or by take_symbol from the
     * code section. */
    auto pairs = [&](auto exact) -> uint32_t {
      constexpr bool EXACT = decltype(exact)::value;
      uint32_t seen = 0;
      auto pair = [&](uint32_t p) {
        if constexpr (EXACT) {
          const uint32_t s0 = lct__take_symbol<DT>(r, tab, section);
          out[32 * p] = s0 | lct__take_symbol<DT>(r, tab, section) << 16;
          lct__commit(r, section);
        } else {
          seen |= lct__take_pair<DT>(r, tab, ring, &out[32 * p]);
        }
      };
      if (__all_sync(LCT__FULL, jn == 32)) {
#pragma unroll
        for (uint32_t p = 0; p < 16; p++) pair(p);
      } else {
#pragma unroll 1
        for (uint32_t p = 0; 2 * p + 2 <= jn; p++) pair(p);
      }
      return seen;
    };
    /* Most rounds hold no ESC and no invalid code: decoded without a branch
     * per symbol where every lane's ring words have landed. The fast pass
     * reads at most 16 words past wa, one per pair (12 where it meets
     * neither, a symbol then taking at most 12 bits; the entries of ESC and
     * invalid codes move it by a word more, in a pass that is thrown away).
     * Where they have not landed, or where any lane met ESC or an invalid
     * code, the whole warp decodes the round exactly, from the state saved
     * here. */
    const lct__code_reader saved = r;
    const bool landed = __all_sync(LCT__FULL, r.wa + 17 <= 4 * gdone);
    if (!landed || __any_sync(LCT__FULL, pairs(lct__bool<false>()) & lct__dec_tab<DT>::RARE)) {
      r = saved;
      pairs(lct__bool<true>());
    }
    if (jn & 1) { /* a partial lane's odd last symbol, by the exact reader */
      out[32 * (jn >> 1)] = lct__take_symbol<DT>(r, tab, section);
      lct__commit(r, section);
    }
    /* a whole version 2 chunk: lane 2t took exactly its bits (checked below) */
    if (rd == LCT_LANE_ELEMS / 32 - 1) sm.mid[1][lane] = 32 * (r.wa - 2) + r.pos - o.bit0;
    sm.wa[rd & 1][lane] = r.wa;
    gdone = lct__ring_limit<DT>(wa_prev);
    wa_prev = r.wa;
    lct__pair_sync(bar); /* hand the round over */
  }
  /* The lane consumed exactly lane_bits; no invalid code; zero padding. */
  uint32_t bad = r.bad || 32 * (r.wa - 2) + r.pos - o.bit0 != cv.lb;
  if (lane == 0) bad |= talk.tail_word[1] & talk.tail_mask[1];
  bad |= sm.mid[0][lane] != ~0u && sm.mid[1][lane] != sm.mid[0][lane];
  bad = __any_sync(LCT__FULL, bad);
  if (lane == 0) talk.bad = bad;
  lct__pair_sync(bar);
}

/* The assembler warp of a pair's part of a coded chunk: lane t rebuilds the
 * part's elements [le t, le t + le) from the symbols the reader hands over
 * and the mantissa section, and stores them. Returns (warp-uniformly) the
 * part's verdict, the reader's included. */
template <int DT>
__device__ static lct__verdict lct__assemble(lct__dec_pair_smem<DT> &sm, const lct__chunk_view &v, const lct__coded_view &cv,
                                    bool aligned, unsigned lane, lct__pair_talk &talk, unsigned bar) {
  using C = lct__dec_cfg<DT>;
  using TAB = lct__dec_tab<DT>;
  constexpr unsigned W = C::W, G = C::G, E = C::E;
  const uint32_t n = v.n, k = cv.k, trim = v.trim;
  uint8_t *const out = v.out;
  const lct__mant_walk walk = lct__mant_walk_of(k, lane);
  const lct__code_origin o = lct__code_origin_of(cv);
  const uint32_t le = v.part.le;
  const uint32_t lw = le / 32 * k; /* mantissa words per lane */
  uint32_t gfill = lct__ring_limit<DT>(o.bit0 >> 5); /* the granule after the reader's first fill */
  lct__fetch_mant<DT>(sm.mant[0], cv.mant, cv.mwords, k, lw, 0, walk);
  if (lane == 0) lct__tail_fetch(talk, 0, cv.mant, cv.mwords, v.cn * k, cv.tail_checks);
  lct__cp_commit();
  lct__cp_wait<0>();
  __syncwarp();

  const uint32_t kmask = ((1u << k) - 1) << trim, e0 = lane * le;
  constexpr unsigned F = C::F;
  const uint32_t rounds = lct__rounds(n, le);
  uint32_t chk = 0, mw = (v.mult0 + 2 * (e0 * W / 4)) * LCT__CHECK_MUL; /* multiplier of the lane's next word */
  for (uint32_t rd = 0; rd < rounds; rd++) {
    /* In flight while this round is assembled: the next round's rows. */
    if (rd + 1 < rounds) lct__fetch_mant<DT>(sm.mant[(rd + 1) & 1], cv.mant, cv.mwords, k, lw, rd + 1, walk);
    lct__cp_commit();
    lct__pair_sync(bar); /* the reader has handed this round over */
    /* The ring slots the reader is done with get the granules it may read
     * from round rd + 2 on (see lct__read_codes), in flight with the rows. */
    if (rd + 2 < rounds) gfill = lct__code_topup<DT>(sm.code[lane], o, gfill, sm.wa[rd & 1][lane]);
    lct__cp_commit();
    const uint32_t *const syms = &sm.syms[rd & 1][0][lane];
    const uint32_t *row = sm.mant[rd & 1][lane];
    const uint32_t jn = lct__round_elems(cv.nt, rd);
    const uint32_t jw = min(min(n, le) - 32 * rd, 32u); /* lane 0's jn: the warp's */
    for (uint32_t j = 0; j < jw; j += F * G) { /* F store groups, then a flush */
#pragma unroll
      for (uint32_t h = 0; h < F; h++) {
        if (j + h * G + G > jn) continue;
        uint32_t w[4]; /* the group's raw words */
        const uint32_t b0 = (j + h * G) * k;
        if constexpr (W == 2) {
          /* Two elements per word as the reader handed them over: their
           * symbols in place, each mantissa ORed in at its half (the second
           * moved up by 16 - k). */
          const uint32_t up = 16 - k;
#pragma unroll
          for (unsigned i = 0; i < G; i += E) {
            uint32_t mv = lct__mant_window<DT>(row, b0 + i * k, trim);
#pragma unroll
            for (unsigned g = 0; g < E; g += 2) {
              const uint32_t pair = syms[32 * ((j + h * G + i + g) >> 1)];
              w[(i + g) / 2] = (pair & (TAB::SYMS * 0x10001u)) | (mv & kmask) | ((mv << up) & (kmask << 16));
              mv >>= 2 * k;
            }
          }
        } else {
          uint32_t x[G];
#pragma unroll
          for (unsigned g = 0; g < G; g += 2) {
            const uint32_t pair = syms[32 * ((j + h * G + g) >> 1)];
            x[g] = TAB::sym_bits(pair);
            x[g + 1] = TAB::sym_bits(pair >> 16);
          }
          /* Mantissas: E at a time, from a 32-bit window of the row's bits. */
#pragma unroll
          for (unsigned i = 0; i < G; i += E) {
            uint32_t mv = lct__mant_window<DT>(row, b0 + i * k, trim);
#pragma unroll
            for (unsigned g = 0; g < E; g++) {
              x[i + g] |= mv & kmask;
              mv >>= k;
            }
          }
#pragma unroll
          for (unsigned i = 0; i < 4; i++)
            w[i] = W == 4 ? x[i] : x[4 * i] | x[4 * i + 1] << 8 | x[4 * i + 2] << 16 | x[4 * i + 3] << 24;
        }
#pragma unroll
        for (unsigned i = 0; i < 4; i++) {
          chk += w[i] * mw;
          mw += 2 * LCT__CHECK_MUL;
        }
        if (aligned) {
          sm.stage[lct__stage_slot<DT>(lane, h)] = make_uint4(w[0], w[1], w[2], w[3]);
        } else {
          const uint32_t e = e0 + 32 * rd + j + h * G;
#pragma unroll
          for (unsigned g = 0; g < G; g++) lct__store_elem<W>(out, e + g, w[g * W / 4] >> (8 * ((g * W) & 3)));
        }
      }
      if (aligned) {
        __syncwarp();
        lct__flush_stage<DT>(sm.stage, out, n, le, rd, j, lane);
        __syncwarp();
      }
    }
    for (uint32_t j = jn - jn % G; j < jn; j++) { /* the tail of a partial lane */
      const uint32_t e = e0 + 32 * rd + j;
      const uint32_t m = lct__mant_window<DT>(row, j * k, trim) & kmask;
      const uint32_t x = TAB::sym_bits(syms[32 * (j >> 1)] >> (16 * (j & 1))) | m;
      chk += (x << (8 * ((e * W) & 3))) * ((v.mult0 + 2 * ((e * W) >> 2)) * LCT__CHECK_MUL);
      lct__store_elem<W>(out, e, x);
    }
    lct__cp_wait<0>();
    __syncwarp(); /* the next rows have landed; every lane is done with this round's */
  }
  chk = lct__warp_sum(chk);
  lct__pair_sync(bar); /* the reader's verdict */
  return {chk, (talk.tail_word[0] & talk.tail_mask[0]) || talk.bad};
}

/* The warp pair of a part, once the assembler has read the chunk's place and
 * header into talk (lct__chunk_read): both derive the part's view from that
 * one reading (a blob rewritten under them, by a dst overlapping a blob of
 * the launch, cannot send them different ways: the chunk then fails). Both
 * copy their share of a raw chunk; of a coded one the reader reads the codes
 * while the assembler rebuilds the elements. Returns (warp-uniformly) the
 * part's verdict to the assembler. Each warp's role is a compile-time one,
 * so that the registers of one role's rounds are not allotted around the
 * other's. */
template <int DT, bool ASSEMBLER>
__device__ static lct__verdict lct__decode_part(const lct__dec_tensor &T, const lct__part &pt,
                                                const typename lct__dec_tab<DT>::Ent *tab, lct__dec_pair_smem<DT> &sm,
                                                lct__pair_talk &talk, unsigned lane, unsigned bar) {
  constexpr lct__verdict corrupt = {0, 1};
  constexpr bool assembler = ASSEMBLER;
  lct__chunk_view v;
  if (lct__chunk_open<DT>(T, pt, lane, talk, v)) return corrupt;
  if (v.mode == 0) return lct__raw_chunk<DT>(v, T.aligned, lane, assembler, talk, bar);
  lct__coded_view cv;
  if (lct__coded_open<DT>(v, lane, cv)) return corrupt;
  if constexpr (lct__dt<DT>::S > 0) {
    if constexpr (ASSEMBLER) {
      return lct__assemble<DT>(sm, v, cv, T.aligned, lane, talk, bar);
    } else {
      lct__read_codes<DT>(tab, sm, v, cv, lane, talk, bar);
      return {0, 0};
    }
  }
  return corrupt; /* unreachable: lct__coded_open fails every chunk of a raw dtype */
}

/* One unit of the block's blob is done, with status err: the last of the
 * blob's units writes the blob's status. What it needs is read anew from the
 * launch's parameters rather than kept in registers through the decode. */
template <unsigned N> __device__ static void lct__unit_done(const lct__dec_params<N> &p, int err) {
  const lct__dec_tensor &T = p.t[lct__find_tensor(p.t, p.count, blockIdx.x)];
  int *const wst = p.common.ws_status + T.slot;
  if (err) atomicCAS(wst, 0, err);
  __threadfence();
  const uint32_t units = (T.split ? 2 : 1) * lct__chunk_count(T.n_elems);
  if (atomicAdd(p.common.ws_done + T.slot, 1u) == units - 1) {
    __threadfence();
    *T.status = *(volatile int *)wst;
  }
}

/* A chunk's status from the verdicts of its parts. */
__device__ static inline int lct__judge(const lct__verdict &vd, uint32_t stored) {
  return vd.bad ? LCT_ECORRUPT : vd.chk != stored ? LCT_ECHECKSUM : 0;
}

/* A warp pair per unit (lct__part), up to PAIRS units of one blob per block
 * (the launch picks how many: blockDim.x / 64, an even number where a blob
 * is split, so that the two parts of a version 2 chunk meet in the block). A
 * launch of FEW units (every blob split) takes the registers it wants rather
 * than the fewer that fit more blocks per SM. Warp p reads pair
 * p's codes, warp pairs + p assembles them. An SM issues
 * warp w's instructions from its scheduler w % 4, so every scheduler gets as
 * many readers (the critical path) as assemblers; with readers on even
 * warps, two schedulers held all of them. Every unit of a blob counts itself
 * done once; the last one writes the blob's status. */
template <int DT, unsigned N, bool FEW>
__global__ void __launch_bounds__(lct__dec_cfg<DT>::PAIRS * 64, FEW ? 1 : lct__dec_blocks_per_sm<DT>())
    lct__decode_chunk_kernel(const __grid_constant__ lct__dec_params<N> p) {
  extern __shared__ __align__(16) uint8_t lct__dec_shared[];
  using Ent = typename lct__dec_tab<DT>::Ent;
  __shared__ __align__(16) Ent s_tab[lct__dt<DT>::S ? LCT__TABLE_ENTRIES : 1];
  __shared__ int s_known;
  __shared__ uint32_t s_version;
  __shared__ lct__pair_talk s_talk[lct__dec_cfg<DT>::PAIRS];
  __shared__ lct__chunk_join s_join[lct__dec_cfg<DT>::PAIRS / 2];
  auto &sm = *reinterpret_cast<lct__dec_smem<DT> *>(lct__dec_shared);
  const unsigned pairs = blockDim.x >> 6, lane = threadIdx.x & 31, warp = threadIdx.x >> 5, pair = warp % pairs;
  const bool assembler = warp >= pairs;
  const lct__dec_tensor &T = p.t[lct__find_tensor(p.t, p.count, blockIdx.x)];
  const uint32_t n_chunks = lct__chunk_count(T.n_elems), units = (T.split ? 2 : 1) * n_chunks,
                 u = (blockIdx.x - T.begin) * pairs + pair;
  int *const wst = p.common.ws_status + T.slot;
  lct__pair_talk &talk = s_talk[pair];
  /* The blob's version, chunk table and chunk headers are the caller's: read
   * before the header kernel is done, which writes the table and status read
   * after. */
  if (assembler && u < units) {
    lct__version_read(T, lane, talk);
    if (T.split) { /* which chunk is the unit's depends on the version */
      __syncwarp();
      const lct__part pt = lct__part_of(talk.version, u, n_chunks, true);
      if (pt.active) lct__chunk_read<DT>(T, pt.c, n_chunks, lane, talk);
    } else {
      lct__chunk_read<DT>(T, u, n_chunks, lane, talk);
    }
  }
  if (threadIdx.x < pairs / 2) s_join[threadIdx.x] = {0, 0, 0};
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
  if constexpr (lct__dt<DT>::S > 0) {
    const uint4 *tab_g = reinterpret_cast<const uint4 *>(p.common.tables + (size_t)T.slot * LCT__TABLE_BYTES);
    for (unsigned i = threadIdx.x; i < sizeof s_tab / 16; i += blockDim.x)
      reinterpret_cast<uint4 *>(s_tab)[i] = __ldg(tab_g + i);
  }
  /* Skip the work once the blob is known corrupt (read once: both warps of a pair must agree). */
  if (threadIdx.x == 0) {
    s_known = *(volatile int *)wst;
    s_version = *(volatile unsigned *)(p.common.ws_version + T.slot);
  }
  __syncthreads(); /* also hands each pair's reader the assembler's reading */
  if (u >= units) return;
  /* A version read before the header kernel's that differs from it: the blob
   * changed during the launch, and its parts may have gone other ways. */
  const int known = s_known ? s_known : talk.version != s_version ? LCT_ECORRUPT : 0;
  const lct__part pt = lct__part_of(talk.version, u, n_chunks, T.split);
  if (known || !pt.active) {
    if (assembler && lane == 0) lct__unit_done(p, known);
    return;
  }
  if (!assembler) {
    lct__decode_part<DT, false>(T, pt, s_tab, sm.pair[pair], talk, lane, 1 + pair);
    return;
  }
  const lct__verdict vd = lct__decode_part<DT, true>(T, pt, s_tab, sm.pair[pair], talk, lane, 1 + pair);
  if (lane != 0) return;
  int err = 0;
  if (pt.parts == 1) {
    err = lct__judge(vd, talk.hw[1]);
  } else { /* the second part to arrive judges the chunk */
    lct__chunk_join &j = s_join[pair / 2];
    atomicAdd(&j.chk, vd.chk);
    atomicOr(&j.bad, vd.bad);
    __threadfence_block();
    if (atomicAdd(&j.arrived, 1u) == 1) {
      __threadfence_block();
      err = lct__judge({atomicAdd(&j.chk, 0u), atomicOr(&j.bad, 0u)}, talk.hw[1]);
    }
  }
  lct__unit_done(p, err);
}

#endif
