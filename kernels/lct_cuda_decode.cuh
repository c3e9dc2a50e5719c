/* lct_cuda_decode.cuh — device code: blob header/codebook validation and the chunk decoder (a warp per chunk). */
#ifndef LCT_CUDA_DECODE_CUH
#define LCT_CUDA_DECODE_CUH

#include "lct_cuda_common.cuh"

#define LCT__HDR_THREADS 256
#define LCT__DEC_WARPS 8 /* chunks (warps) per block, sharing one decode table */
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
  uint32_t aligned; /* dst is 16-byte aligned */
};

struct lct__dec_params {
  lct__dec_tensor t[LCT__BATCH];
  uint8_t *tables;   /* workspace: a 4096-entry decode table per slot, LCT__TABLE_BYTES each (see lct__dec_tab) */
  int *ws_status;    /* workspace: status per slot */
  unsigned *ws_done; /* workspace: finished chunk blocks per slot */
  uint32_t count;
};

#define LCT__TABLE_BYTES (LCT__TABLE_ENTRIES * 4) /* workspace per slot: room for the widest entries */

template <bool WIDE> struct lct__dec_entry_type { using T = uint16_t; };
template <> struct lct__dec_entry_type<true> { using T = uint32_t; };

/* Decode table of a dtype, indexed by the next 12 stream bits. Entry: code
 * length in bits 0-3, bit 4 (RARE) set for ESC and for an invalid code (length
 * 0) so that one OR over a round's entries tells whether it met either, and
 * the symbol from bit SH on: SH = M where the symbol fits above those bits, so
 * that an element is (entry & SYMS) | mantissa bits; f32's (M = 22) entries
 * are 32-bit. */
template <int DT> struct lct__dec_tab {
  static constexpr unsigned S = lct__dt<DT>::S, M = lct__dt<DT>::M;
  static constexpr unsigned SH = M >= 5 ? M : 5;
  static constexpr uint32_t RARE = 16, SMASK = (1u << S) - 1, SYMS = SMASK << SH;
  using Ent = typename lct__dec_entry_type<(S + SH > 16)>::T;
  static constexpr unsigned LOG = sizeof(Ent) == 4 ? 2 : 1;                 /* an index to a byte offset */
  static constexpr uint32_t OFFSETS = (LCT__TABLE_ENTRIES - 1) << LOG; /* the byte offset's bits */
  static_assert(S + SH <= 8 * sizeof(Ent) && LCT_MAX_CODE_LEN < 16, "an entry's fields");

  __device__ static Ent entry(unsigned sym, unsigned len, unsigned esc) {
    return (Ent)(sym == esc ? RARE | len : sym << SH | len);
  }
  /* Entry e's symbol at bit M of an element. */
  __device__ static uint32_t sym_bits(uint32_t e) {
    if constexpr (SH == M) {
      return e & SYMS;
    } else {
      return (e >> SH & SMASK) << M;
    }
  }
};

__device__ static inline uint32_t lct__chunk_count(uint64_t n_elems) {
  return (uint32_t)((n_elems + LCT_CHUNK_ELEMS - 1) / LCT_CHUNK_ELEMS);
}

/* One block per blob: validates the header and the codebook against what the
 * caller expects, and builds the blob's decode table into the workspace. */
template <int DT>
__global__ void __launch_bounds__(LCT__HDR_THREADS)
    lct__decode_header_kernel(const __grid_constant__ lct__dec_params p) {
  using L = lct__layout_of<DT>;
  constexpr unsigned S = lct__dt<DT>::S, NSYM = S ? (1u << S) + 1 : 1;
  constexpr unsigned CL = LCT_MAX_CODE_LEN;
  __shared__ int s_err;
  __shared__ uint32_t s_chk, s_hcheck, s_kraft, s_bad;
  __shared__ uint8_t s_len[NSYM];
  __shared__ uint16_t s_rank[NSYM], s_sorted[NSYM];
  __shared__ uint32_t s_count[CL + 1], s_first[CL + 1], s_offset[CL + 1];

  const lct__dec_tensor &T = p.t[blockIdx.x];
  const unsigned tid = threadIdx.x;
  const uint32_t n_chunks = lct__chunk_count(T.n_elems);
  if (tid == 0) {
    int err = 0;
    const uint64_t len = T.blob_bytes;
    if (len < LCT_HEADER_BYTES) {
      err = LCT_ECORRUPT;
    } else {
      const uint32_t *h = reinterpret_cast<const uint32_t *>(T.blob);
      uint32_t hw[10];
#pragma unroll
      for (unsigned j = 0; j < 10; j++) hw[j] = h[j];
      const uint64_t n_elems = hw[2] | (uint64_t)hw[3] << 32, blob_size = hw[8] | (uint64_t)hw[9] << 32;
      if (hw[0] != LCT__MAGIC) {
        err = LCT_ECORRUPT;
      } else if ((hw[1] & 0xff) != LCT_FORMAT_VERSION) {
        err = LCT_EVERSION;
      } else if (((hw[1] >> 8) & 0xff) != DT || ((hw[1] >> 16) & 0xff) != CL || (hw[1] >> 24) || hw[7]) {
        err = LCT_ECORRUPT;
      } else if (n_elems != T.n_elems || hw[4] != n_chunks || hw[5] != L::CB_BYTES) {
        err = LCT_ECORRUPT;
      } else if (blob_size != len || L::TABLE + 8ull * n_chunks > len || (n_chunks == 0 && len != L::TABLE)) {
        err = LCT_ECORRUPT;
      } else {
        uint32_t chk = 0;
#pragma unroll
        for (unsigned j = 0; j < 6; j++) chk += hw[j] * lct__mult(j);
        s_chk = chk;
        s_hcheck = hw[6];
      }
    }
    s_err = err;
    s_kraft = 0;
    s_bad = 0;
  }
  __syncthreads();

  if constexpr (L::CB_BYTES > 0) {
    if (!s_err) { /* codebook bytes: header check, padding, lengths, Kraft sum */
      const uint32_t *cbw = reinterpret_cast<const uint32_t *>(T.blob + LCT_HEADER_BYTES);
      uint32_t chk = 0, kraft = 0, bad = 0;
      for (unsigned j = tid; j < L::CB_PAD / 4; j += LCT__HDR_THREADS) {
        const uint32_t v = cbw[j];
        const unsigned valid = L::CB_BYTES > 4 * j ? min(4u, L::CB_BYTES - 4 * j) : 0;
        const uint32_t mask = valid == 4 ? ~0u : (1u << (8 * valid)) - 1;
        chk += (v & mask) * lct__mult(6 + j);
        bad |= v & ~mask;
#pragma unroll
        for (unsigned q = 0; q < 8; q++) {
          const unsigned sym = 8 * j + q, l = (v >> (4 * q)) & 15;
          if (sym < NSYM) {
            s_len[sym] = (uint8_t)l;
            bad |= l > CL;
            kraft += l && l <= CL ? 1u << (CL - l) : 0;
          } else if (sym == NSYM) {
            bad |= l; /* the padding nibble */
          }
        }
      }
      if (chk) atomicAdd(&s_chk, chk);
      if (kraft) atomicAdd(&s_kraft, kraft);
      if (bad) atomicOr(&s_bad, 1u);
    }
  }
  __syncthreads();
  if (tid == 0 && !s_err) {
    if (s_chk != s_hcheck || s_bad) {
      s_err = LCT_ECORRUPT;
    } else if (S && (!s_len[NSYM - 1] || s_kraft > (1u << CL))) {
      s_err = LCT_ECORRUPT;
    }
  }
  __syncthreads();

  if (S && !s_err) {
    /* Canonical codes: rank of each symbol among those of its length, by a
     * warp sweep in symbol order. */
    if (tid < 32) {
      if (tid <= CL) s_count[tid] = 0;
      __syncwarp();
      for (unsigned base = 0; base < NSYM; base += 32) {
        const unsigned i = base + tid, l = i < NSYM ? s_len[i] : 0;
        const unsigned same = __match_any_sync(LCT__FULL, l);
        const unsigned rank = s_count[l] + __popc(same & ((1u << tid) - 1));
        if (i < NSYM) s_rank[i] = (uint16_t)rank;
        __syncwarp();
        if (tid == 31u - __clz(same)) s_count[l] += __popc(same);
        __syncwarp();
      }
    }
    __syncthreads();
    if (tid == 0) {
      unsigned code = 0, off = 0;
      for (unsigned l = 1; l <= CL; l++) {
        s_first[l] = code;
        s_offset[l] = off;
        off += s_count[l];
        code = (code + s_count[l]) << 1;
      }
    }
    __syncthreads();
    for (unsigned i = tid; i < NSYM; i += LCT__HDR_THREADS) {
      if (s_len[i]) s_sorted[s_offset[s_len[i]] + s_rank[i]] = (uint16_t)i;
    }
    __syncthreads();
    /* Entry idx holds the next 12 stream bits (LSB-first): the code read MSB
     * first is their bit reversal. */
    using TAB = lct__dec_tab<DT>;
    auto *tab = reinterpret_cast<typename TAB::Ent *>(p.tables + (size_t)T.slot * LCT__TABLE_BYTES);
    for (unsigned idx = tid; idx < LCT__TABLE_ENTRIES; idx += LCT__HDR_THREADS) {
      const unsigned v = __brev(idx) >> (32 - CL);
      typename TAB::Ent entry = (typename TAB::Ent)TAB::RARE; /* an invalid code: length 0 */
      for (unsigned l = 1; l <= CL; l++) {
        const unsigned d = (v >> (CL - l)) - s_first[l];
        if (d < s_count[l]) {
          entry = TAB::entry(s_sorted[s_offset[l] + d], l, NSYM - 1);
          break;
        }
      }
      tab[idx] = entry;
    }
  }
  if (tid == 0) {
    p.ws_status[T.slot] = s_err;
    p.ws_done[T.slot] = 0;
    if (n_chunks == 0) *T.status = s_err;
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

/* Per-dtype shape of the chunk decoder. Each warp keeps only small windows of
 * its chunk in shared memory (a ring of code words per lane, two rounds of
 * mantissa rows, 32 staged output bytes per lane, the reader state at the
 * round's start), so that with the block's one decode table 16-24 warps stay
 * resident per SM: the per-symbol work is a chain of dependent shared loads,
 * and only many warps hide it. */
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
  /* Code ring per lane, in 16-byte granules: 8 stay a round ahead of streams
   * of up to ~12 bits per symbol. */
  static constexpr unsigned RG = 8;
  static constexpr unsigned RW = 4 * RG;
  static constexpr unsigned MROW = M | 1; /* mantissa row stride, odd: a warp reading one word per row hits 32 banks */
  static_assert(4 * RG >= G + 4, "a full ring must hold the words a store group may read");
  static_assert(4 * RG >= 12 + 4, "a full ring must hold the words a round without ESC may read");
};

/* Shared memory of one warp: output staging (lane t's two latest store
 * groups), lane t's reader state at the round's start (for a round decoded
 * again), lane t's code ring, and round rows of mantissas (row t: lane t's k
 * words of the round). */
template <int DT> struct lct__dec_warp_smem {
  uint4 stage[64];
  uint4 saved[2][32]; /* lane t's reader, check and multiplier at the round's start */
  uint32_t code[32][lct__dec_cfg<DT>::RW];
  uint32_t mant[2][32][lct__dec_cfg<DT>::MROW];
};

template <int DT> struct lct__dec_smem {
  lct__dec_warp_smem<DT> warp[LCT__DEC_WARPS];
};

/* Dynamic shared memory of a chunk block (none for dtype raw: no codes); the
 * decode table is static shared memory, at an address the compiler knows. */
template <int DT> constexpr size_t lct__dec_smem_bytes() { return lct__dt<DT>::S ? sizeof(lct__dec_smem<DT>) : 0; }
template <int DT> constexpr size_t lct__dec_table_bytes() {
  return lct__dt<DT>::S ? LCT__TABLE_ENTRIES * sizeof(typename lct__dec_tab<DT>::Ent) : 0;
}

/* Blocks per SM the register budget is set for: as many as shared memory
 * admits (228 KiB, 1 KiB reserved per block), at most 4 (32 warps), 3 for
 * fp8 (its 16-element store groups need more than 64 registers). */
template <int DT> constexpr unsigned lct__dec_blocks_per_sm() {
  constexpr unsigned cap = lct__dt<DT>::W == 1 ? 3 : 4,
                     fit = (228u << 10) / (lct__dec_smem_bytes<DT>() + lct__dec_table_bytes<DT>() + 1024);
  return fit < cap ? fit : cap;
}

/* A lane's code stream reader. Reader word v is cbase[v], cbase being the
 * code section's start rounded down to 16 bytes; the ring holds words in
 * 16-byte granules, granule g in slot g % RG. The reader stands at stream bit
 * 32 (wa - 2) + pos, pos < 32: lo and hi are words wa - 2 and wa - 1, nw is
 * word wa, read from the ring one advance ahead. win is the 32 stream bits
 * from there on (one funnel shift, no 64-bit shifts), with the used bits taken
 * since shifted out. bad: an invalid code was read. */
struct lct__code_reader {
  uint32_t lo, hi, nw, pos, wa, win, used, bad;
};

/* Moves the reader past the used bits (at most 32) and refreshes the window.
 * Without a branch: lanes diverging here would run both paths one after the
 * other. */
template <int DT> __device__ static inline void lct__commit(lct__code_reader &r, const uint32_t *ring) {
  r.pos += r.used;
  const bool adv = r.pos >= 32;
  r.lo = adv ? r.hi : r.lo;
  r.hi = adv ? r.nw : r.hi;
  r.pos &= 31;
  r.wa += adv;
  if (adv) r.nw = ring[r.wa & (lct__dec_cfg<DT>::RW - 1)];
  r.win = __funnelshift_r(r.lo, r.hi, r.pos);
  r.used = 0;
}

/* Takes one symbol, ESC and invalid codes included, and returns it at bit M
 * of an element: the exact reader, for rounds that met either and for the
 * tail of a partial lane. A code takes
 * at most 12 bits, so a fresh window covers two, and the symbol loop commits
 * once per pair; ESC's raw symbol may need more bits than are left, so that
 * path commits before it and again after, leaving a fresh window as a commit
 * does. */
template <int DT>
__device__ static inline uint32_t lct__take_symbol(lct__code_reader &r, const typename lct__dec_tab<DT>::Ent *tab,
                                                   const uint32_t *ring) {
  using TAB = lct__dec_tab<DT>;
  static_assert(2 * LCT_MAX_CODE_LEN <= 32, "a window holds the two codes of a pair");
  static_assert(LCT_MAX_CODE_LEN + TAB::S <= 32, "a window holds an ESC code and its raw symbol");
  const uint32_t ent = (uint32_t)tab[r.win & (LCT__TABLE_ENTRIES - 1)], l = ent & 15;
  if (__builtin_expect(!(ent & TAB::RARE), 1)) {
    r.win >>= l;
    r.used += l;
    return TAB::sym_bits(ent);
  }
  r.bad |= l == 0;
  lct__commit<DT>(r, ring);
  const uint32_t sym = (r.win >> l) & TAB::SMASK;
  r.used = l + TAB::S;
  lct__commit<DT>(r, ring);
  return sym << TAB::M;
}

/* Takes two symbols from a fresh window as if neither were ESC or invalid,
 * without a branch: returns the OR of their entries (RARE set: the round is
 * decoded again by lct__take_symbol) and their symbols at bit M. The window
 * is shifted to byte offsets once (it loses its top bits; the pair reads at
 * most 24), so that each lookup is one AND from its shared load. */
template <int DT>
__device__ static inline uint32_t lct__take_pair(lct__code_reader &r, const typename lct__dec_tab<DT>::Ent *tab,
                                                 uint32_t &x0, uint32_t &x1) {
  using TAB = lct__dec_tab<DT>;
  using Ent = typename TAB::Ent;
  const char *base = reinterpret_cast<const char *>(tab);
  const uint32_t wb = r.win << TAB::LOG;
  const uint32_t e0 = *reinterpret_cast<const Ent *>(base + (wb & TAB::OFFSETS)), l0 = e0 & 15;
  const uint32_t e1 = *reinterpret_cast<const Ent *>(base + ((wb >> l0) & TAB::OFFSETS));
  r.used = l0 + (e1 & 15);
  x0 = TAB::sym_bits(e0);
  x1 = TAB::sym_bits(e1);
  return e0 | e1;
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

/* Fetches granules from gfill on into the slots the reader is done with (the
 * granules before the one holding word wa); returns the new gfill. */
template <int DT>
__device__ static inline uint32_t lct__code_topup(uint32_t *ring, const uint32_t *cbase, uint32_t cend, uint32_t gfill,
                                                  uint32_t wa) {
#pragma unroll 1
  for (; gfill < (wa >> 2) + lct__dec_cfg<DT>::RG; gfill++) lct__fetch_granule<DT>(ring, cbase, gfill, cend);
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

/* Mantissas of round rd: row t gets words [16 k t + k rd, 16 k t + k rd + k)
 * (lane t's elements [32 rd, 32 rd + 32)), copied by the whole warp, k words
 * per lane, coalesced. */
template <int DT>
__device__ static inline void lct__fetch_mant(uint32_t (*rows)[lct__dec_cfg<DT>::MROW], const uint32_t *mant,
                                             uint32_t mwords, uint32_t k, uint32_t rd, const lct__mant_walk &m) {
  uint32_t t = m.t0, c = m.c0;
  for (uint32_t i = 0; i < k; i++) {
    const uint32_t g = 16 * k * t + k * rd + c;
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

/* Slot of half h (a store group) of lane t's staged 32 bytes, swizzled so that
 * both a lane-per-row write and a two-threads-per-row read hit 8 distinct
 * 16-byte bank groups per quarter warp. */
__device__ static inline uint32_t lct__stage_slot(uint32_t t, uint32_t h) { return 2 * t + (h ^ ((t >> 2) & 1)); }

/* Writes the staged store groups j / G and j / G + 1 of round rd of every
 * lane that has them in full: two threads per lane, so each store instruction
 * writes whole 32-byte sectors (16-byte stores of 32 lanes 1 KiB apart leave
 * every sector half-written, which the memory system turns into
 * read-modify-writes). */
template <int DT>
__device__ static inline void lct__flush_stage(const uint4 *stage, uint8_t *out, uint32_t n, uint32_t rd, uint32_t j,
                                               unsigned lane) {
  constexpr unsigned W = lct__dt<DT>::W, G = lct__dec_cfg<DT>::G;
  /* Half h of lanes t and t + 16: their slots are 32 apart, their elements 16 lanes. */
  const uint32_t t = lane >> 1, h = lane & 1, e = t * LCT_LANE_ELEMS + 32 * rd + j + h * G;
  const uint32_t slot = lct__stage_slot(t, h);
  uint4 *dst = reinterpret_cast<uint4 *>(out + (size_t)e * W);
  if (e + G <= n) dst[0] = stage[slot];
  if (e + 16 * LCT_LANE_ELEMS + G <= n) dst[16 * LCT_LANE_ELEMS * W / 16] = stage[slot + 32];
}

/* Slow path, when the ring may hold fewer landed words than the next
 * `words` (a lane far longer than its neighbours, many ESCs): top it up and
 * wait for it. */
template <int DT>
__device__ static inline void lct__code_ensure(const lct__code_reader &r, uint32_t *ring, const uint32_t *cbase,
                                               uint32_t cend, uint32_t &gfill, uint32_t &gdone, uint32_t words) {
  if (r.wa + words + 1 > 4 * gdone) {
    gfill = lct__code_topup<DT>(ring, cbase, cend, gfill, r.wa);
    lct__cp_commit();
    lct__cp_wait<0>();
    gdone = gfill;
  }
}

/* The warp of chunk c: validates its place in the chunk table and its header,
 * then lane t rebuilds elements [512 t, 512 t + 512) and stores them. Returns
 * (warp-uniformly) 0, LCT_ECORRUPT or LCT_ECHECKSUM. */
template <int DT>
__device__ static int lct__decode_chunk_warp(const lct__dec_tensor &T, const typename lct__dec_tab<DT>::Ent *tab,
                                            lct__dec_warp_smem<DT> &sm,
                                             uint32_t c, uint32_t n_chunks, unsigned lane) {
  using L = lct__layout_of<DT>;
  using C = lct__dec_cfg<DT>;
  constexpr unsigned W = C::W, S = C::S, M = C::M, G = C::G, E = C::E;
  const uint8_t *blob = T.blob;
  const uint64_t len = T.blob_bytes, first_elem = (uint64_t)c * LCT_CHUNK_ELEMS;
  const uint32_t n = T.n_elems - first_elem < LCT_CHUNK_ELEMS ? (uint32_t)(T.n_elems - first_elem) : LCT_CHUNK_ELEMS;
  uint8_t *const out = T.dst + first_elem * W;
  const uint32_t mult0 = (uint32_t)(2 * (first_elem * W / 4) + 1); /* lct__mult(base + g) = (mult0 + 2g) * MUL */

  uint64_t off = 0, end = 0;
  if (lane == 0) {
    const uint64_t *table = reinterpret_cast<const uint64_t *>(blob + L::TABLE);
    off = table[c];
    end = c + 1 < n_chunks ? table[c + 1] : len;
  }
  off = __shfl_sync(LCT__FULL, off, 0);
  end = __shfl_sync(LCT__FULL, end, 0);
  if ((c == 0 && off != L::TABLE + 8ull * n_chunks) || (off & 3) || end < off || end > len ||
      end - off < LCT_RAW_CHUNK_HEADER)
    return LCT_ECORRUPT;
  const uint64_t size = end - off;
  const uint32_t *ch = reinterpret_cast<const uint32_t *>(blob + off);
  const uint32_t hw = lane < LCT_CODED_CHUNK_HEADER / 4 && 4 * lane + 4 <= size ? __ldg(ch + lane) : 0;
  const uint32_t h0 = __shfl_sync(LCT__FULL, hw, 0), stored = __shfl_sync(LCT__FULL, hw, 1);
  const uint32_t mode = h0 & 0xff, trim = (h0 >> 8) & 0xff;
  if (h0 >> 16) return LCT_ECORRUPT;

  if (mode == 0) { /* raw chunk: copy, verify padding and check */
    const uint32_t nbytes = n * W, rw = (uint32_t)lct__pad4(nbytes) / 4;
    if (trim || size != LCT_RAW_CHUNK_HEADER + 4ull * rw) return LCT_ECORRUPT;
    uint32_t chk = 0, bad = 0;
    for (uint32_t j = lane; j < rw; j += 32) {
      const uint32_t v = __ldg(ch + 2 + j), b = 4 * j;
      chk += v * ((mult0 + 2 * j) * LCT__CHECK_MUL);
      if (b + 4 > nbytes) bad |= v >> (8 * (nbytes - b));
      lct__store_word<W>(out, b, v, nbytes, T.aligned);
    }
    if (__any_sync(LCT__FULL, bad)) return LCT_ECORRUPT;
    return lct__warp_sum(chk) != stored ? LCT_ECHECKSUM : 0;
  }
  if (mode != 1 || S == 0 || trim > M || size < LCT_CODED_CHUNK_HEADER) return LCT_ECORRUPT;
  if constexpr (S > 0) {
    const uint32_t nt = n > lane * LCT_LANE_ELEMS ? min(n - lane * LCT_LANE_ELEMS, (uint32_t)LCT_LANE_ELEMS) : 0;
    const uint32_t lb = (__shfl_sync(LCT__FULL, hw, 2 + lane / 2) >> (16 * (lane & 1))) & 0xffff;
    uint32_t start = lb;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const uint32_t y = __shfl_up_sync(LCT__FULL, start, o);
      if ((int)lane >= o) start += y;
    }
    const uint32_t total = __shfl_sync(LCT__FULL, start, 31);
    start -= lb;
    const uint32_t k = M - trim, mwords = (n * k + 31) / 32, hwords = (total + 31) / 32;
    if (__any_sync(LCT__FULL, nt == 0 && lb != 0) ||
        size != LCT_CODED_CHUNK_HEADER + 4ull * mwords + 4ull * hwords)
      return LCT_ECORRUPT;
    const uint32_t *mant = ch + LCT_CODED_CHUNK_HEADER / 4, *code_g = mant + mwords;

    /* Lane t's code stream starts at reader bit bit0; the ring starts full. */
    const uint32_t *cbase = reinterpret_cast<const uint32_t *>((uintptr_t)code_g & ~(uintptr_t)15);
    const uint32_t phase = (uint32_t)(code_g - cbase), cend = phase + hwords, bit0 = 32 * phase + start;
    uint32_t *const ring = sm.code[lane];
    uint32_t gfill = lct__code_topup<DT>(ring, cbase, cend, bit0 >> 7, bit0 >> 5);
    const lct__mant_walk walk = lct__mant_walk_of(k, lane);
    lct__fetch_mant<DT>(sm.mant[0], mant, mwords, k, 0, walk);
    lct__cp_commit();
    lct__cp_wait<0>();
    __syncwarp();
    uint32_t gdone = gfill; /* granules below gdone have landed */

    lct__code_reader r;
    const uint32_t w0 = bit0 >> 5;
    r.lo = ring[w0 & (C::RW - 1)];
    r.hi = ring[(w0 + 1) & (C::RW - 1)];
    r.wa = w0 + 2;
    r.nw = ring[r.wa & (C::RW - 1)];
    r.pos = bit0 & 31;
    r.win = __funnelshift_r(r.lo, r.hi, r.pos);
    r.used = 0;
    r.bad = 0;

    const uint32_t kmask = ((1u << k) - 1) << trim, e0 = lane * LCT_LANE_ELEMS;
    const uint32_t slot0 = lct__stage_slot(lane, 0); /* lct__stage_slot(lane, h) == slot0 ^ h */
    const uint32_t rounds = (min(n, (uint32_t)LCT_LANE_ELEMS) + 31) / 32;
    uint32_t chk = 0, mw = (mult0 + 2 * (e0 * W / 4)) * LCT__CHECK_MUL; /* multiplier of the lane's next word */
    for (uint32_t rd = 0; rd < rounds; rd++) {
      /* In flight while this round decodes: the next round's rows and the
       * granules that refill the ring. */
      if (rd + 1 < rounds) lct__fetch_mant<DT>(sm.mant[(rd + 1) & 1], mant, mwords, k, rd + 1, walk);
      gfill = lct__code_topup<DT>(ring, cbase, cend, gfill, r.wa);
      lct__cp_commit();

      const uint32_t *row = sm.mant[rd & 1][lane];
      const uint32_t jn = nt > 32 * rd ? min(nt - 32 * rd, 32u) : 0;
      const uint32_t jw = min(min(n, (uint32_t)LCT_LANE_ELEMS) - 32 * rd, 32u); /* lane 0's jn: the warp's */
      /* The round's whole store groups, by take_pair (EXACT false: returns
       * the OR of the entries it read) or by take_symbol. */
      auto whole_groups = [&](auto exact) -> uint32_t {
        constexpr bool EXACT = decltype(exact)::value;
        uint32_t seen = 0;
        /* Without ESC a symbol takes at most 12 bits: the round's codes at most 12 words. */
        if constexpr (!EXACT) lct__code_ensure<DT>(r, ring, cbase, cend, gfill, gdone, 12);
        for (uint32_t j = 0; j < jw; j += 2 * G) { /* pairs of store groups, then a flush */
#pragma unroll 1
          for (uint32_t h = 0; h < 2 && j + h * G + G <= jn; h++) {
            /* G symbols take at most G words: one, ESC and raw symbol included, is under 32 bits. */
            if constexpr (EXACT) lct__code_ensure<DT>(r, ring, cbase, cend, gfill, gdone, G);
            uint32_t x[G], w[4];
#pragma unroll
            for (unsigned g = 0; g < G; g += 2) {
              if constexpr (EXACT) {
                x[g] = lct__take_symbol<DT>(r, tab, ring);
                x[g + 1] = lct__take_symbol<DT>(r, tab, ring);
              } else {
                seen |= lct__take_pair<DT>(r, tab, x[g], x[g + 1]);
              }
              lct__commit<DT>(r, ring);
            }
            /* Mantissas: E at a time, from a 32-bit window of the row's bits. */
            const uint32_t b0 = (j + h * G) * k;
#pragma unroll
            for (unsigned i = 0; i < G; i += E) {
              const uint32_t b = b0 + i * k;
              uint32_t mv = lct__mant_window<DT>(row, b, trim);
#pragma unroll
              for (unsigned g = 0; g < E; g++) {
                x[i + g] |= mv & kmask;
                mv >>= k;
              }
            }
#pragma unroll
            for (unsigned i = 0; i < 4; i++) {
              if (W == 4) {
                w[i] = x[i];
              } else if (W == 2) {
                w[i] = __byte_perm(x[2 * i], x[2 * i + 1], 0x5410); /* the low halves */
              } else {
                w[i] = x[4 * i] | x[4 * i + 1] << 8 | x[4 * i + 2] << 16 | x[4 * i + 3] << 24;
              }
              chk += w[i] * mw;
              mw += 2 * LCT__CHECK_MUL;
            }
            if (T.aligned) {
              sm.stage[slot0 ^ h] = make_uint4(w[0], w[1], w[2], w[3]);
            } else {
              const uint32_t e = e0 + 32 * rd + j + h * G;
#pragma unroll
              for (unsigned g = 0; g < G; g++) lct__store_elem<W>(out, e + g, x[g]);
            }
          }
          if (T.aligned) {
            __syncwarp();
            lct__flush_stage<DT>(sm.stage, out, n, rd, j, lane);
            __syncwarp();
          }
        }
        return seen;
      };
      /* Most rounds hold no ESC and no invalid code: decoded without a branch
       * per symbol. A round where any lane met one is decoded again, by the
       * whole warp, from the state saved here (the first pass refills no
       * ring slot: its one top-up comes before its first symbol). */
      sm.saved[0][lane] = make_uint4(r.lo, r.hi, r.nw, r.pos);
      sm.saved[1][lane] = make_uint4(r.wa, chk, mw, 0);
      if (__any_sync(LCT__FULL, whole_groups(lct__bool<false>()) & lct__dec_tab<DT>::RARE)) {
        const uint4 a = sm.saved[0][lane], b = sm.saved[1][lane];
        r.lo = a.x, r.hi = a.y, r.nw = a.z, r.pos = a.w, r.wa = b.x, chk = b.y, mw = b.z;
        r.win = __funnelshift_r(r.lo, r.hi, r.pos);
        r.used = 0;
        whole_groups(lct__bool<true>());
      }
      if (jn % G) { /* the tail of a partial lane, by the exact reader */
        lct__code_ensure<DT>(r, ring, cbase, cend, gfill, gdone, G);
        for (uint32_t j = jn - jn % G; j < jn; j++) {
          const uint32_t b = j * k, e = e0 + 32 * rd + j;
          const uint32_t m = lct__mant_window<DT>(row, b, trim) & kmask;
          const uint32_t x = lct__take_symbol<DT>(r, tab, ring) | m;
          lct__commit<DT>(r, ring);
          chk += (x << (8 * ((e * W) & 3))) * ((mult0 + 2 * ((e * W) >> 2)) * LCT__CHECK_MUL);
          lct__store_elem<W>(out, e, x);
        }
      }
      lct__cp_wait<0>();
      __syncwarp(); /* the next rows have landed; every lane is done with this round's */
      gdone = gfill;
    }
    /* The lane consumed exactly lane_bits; no invalid code; zero padding. */
    uint32_t bad = r.bad || 32 * (r.wa - 2) + r.pos - bit0 != lb;
    if (lane == 0) {
      const uint32_t used = n * k;
      if (used & 31) bad |= __ldg(mant + mwords - 1) >> (used & 31);
      if (total & 31) bad |= __ldg(code_g + hwords - 1) >> (total & 31);
    }
    chk = lct__warp_sum(chk);
    if (__any_sync(LCT__FULL, bad)) return LCT_ECORRUPT;
    return chk != stored ? LCT_ECHECKSUM : 0;
  }
  return LCT_ECORRUPT;
}

/* A warp per chunk, LCT__DEC_WARPS chunks of one blob per block. */
template <int DT>
__global__ void __launch_bounds__(LCT__DEC_WARPS * 32, lct__dec_blocks_per_sm<DT>())
    lct__decode_chunk_kernel(const __grid_constant__ lct__dec_params p) {
  extern __shared__ __align__(16) uint8_t lct__dec_shared[];
  using Ent = typename lct__dec_tab<DT>::Ent;
  __shared__ __align__(16) Ent s_tab[lct__dt<DT>::S ? LCT__TABLE_ENTRIES : 1];
  auto &sm = *reinterpret_cast<lct__dec_smem<DT> *>(lct__dec_shared);
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const lct__dec_tensor &T = p.t[lct__find_tensor(p.t, p.count, blockIdx.x)];
  const uint32_t n_chunks = lct__chunk_count(T.n_elems), c = (blockIdx.x - T.begin) * LCT__DEC_WARPS + warp;
  int *const wst = p.ws_status + T.slot;
  if constexpr (lct__dt<DT>::S > 0) {
    const uint4 *tab_g = reinterpret_cast<const uint4 *>(p.tables + (size_t)T.slot * LCT__TABLE_BYTES);
    for (unsigned i = threadIdx.x; i < sizeof s_tab / 16; i += LCT__DEC_WARPS * 32)
      reinterpret_cast<uint4 *>(s_tab)[i] = __ldg(tab_g + i);
    __syncthreads();
  }
  if (c >= n_chunks) return;
  /* Skip the work once the blob is known corrupt (read once: the warp must agree). */
  const int known = __shfl_sync(LCT__FULL, lane == 0 ? *(volatile int *)wst : 0, 0);
  const int err = known == 0 ? lct__decode_chunk_warp<DT>(T, s_tab, sm.warp[warp], c, n_chunks, lane) : 0;
  if (lane == 0) {
    if (err) atomicCAS(wst, 0, err);
    __threadfence();
    if (atomicAdd(p.ws_done + T.slot, 1u) == n_chunks - 1) {
      __threadfence();
      *T.status = *(volatile int *)wst;
    }
  }
}

#endif
