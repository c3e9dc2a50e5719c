/* lct_cuda_decode.cuh — device code: blob header/codebook validation and the chunk decoder (one warp per 32 lane streams). */
#ifndef LCT_CUDA_DECODE_CUH
#define LCT_CUDA_DECODE_CUH

#include "lct_cuda_common.cuh"

#define LCT__HDR_THREADS 256
#define LCT__CODE_CAP 4096 /* code-section words staged in shared memory; longer sections are read in place */
#define LCT__TABLE_ENTRIES (1u << LCT_MAX_CODE_LEN)

/* One blob of a decode launch. */
struct lct__dec_tensor {
  const uint8_t *blob;
  uint64_t blob_bytes;
  uint8_t *dst;
  uint64_t n_elems;
  int *status;
  uint32_t begin;   /* its first chunk block in the launch */
  uint32_t slot;    /* its index in the workspace arrays */
  uint32_t aligned; /* dst is 16-byte aligned */
};

struct lct__dec_params {
  lct__dec_tensor t[LCT__BATCH];
  uint16_t *tables;  /* workspace: a 4096-entry decode table per slot, entry = symbol | length << 11 */
  int *ws_status;    /* workspace: status per slot */
  unsigned *ws_done; /* workspace: finished chunk blocks per slot */
  uint32_t count;
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
      } else if (blob_size != len || L::TABLE + 8ull * n_chunks > len) {
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
    uint16_t *tab = p.tables + (size_t)T.slot * LCT__TABLE_ENTRIES;
    for (unsigned idx = tid; idx < LCT__TABLE_ENTRIES; idx += LCT__HDR_THREADS) {
      const unsigned v = __brev(idx) >> (32 - CL);
      uint16_t entry = 0;
      for (unsigned l = 1; l <= CL; l++) {
        const unsigned d = (v >> (CL - l)) - s_first[l];
        if (d < s_count[l]) {
          entry = (uint16_t)(s_sorted[s_offset[l] + d] | l << 11);
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

/* A lane's code stream reader: the bit buffer holds stream bits [pos, 32 wi),
 * nb = 32 wi - pos >= 32 before each symbol; nw is word wi, loaded one refill
 * ahead. Branch-free: selects and predicated loads, so an unrolled group of
 * symbols is one basic block the compiler interleaves. */
struct lct__code_reader {
  uint64_t buf;
  uint32_t nb, wi, nw, minent;
};

template <int DT>
__device__ static inline uint32_t lct__next_symbol(lct__code_reader &r, const uint16_t *tab, const uint32_t *code,
                                                   uint32_t hwords) {
  constexpr unsigned S = lct__dt<DT>::S;
  constexpr uint32_t ESC = 1u << S, SMASK = (1u << S) - 1;
  const uint32_t ent = tab[(uint32_t)r.buf & (LCT__TABLE_ENTRIES - 1)];
  r.minent = min(r.minent, ent); /* 0: an invalid code */
  const uint32_t l = ent >> 11, coded = ent & 0x7ff;
  const bool esc = coded == ESC;
  const uint32_t sym = esc ? (uint32_t)(r.buf >> l) & SMASK : coded, adv = esc ? l + S : l;
  r.buf >>= adv;
  r.nb -= adv;
  const bool refill = r.nb < 32;
  r.buf |= refill ? (uint64_t)r.nw << r.nb : 0ull;
  r.nb += refill ? 32 : 0;
  r.wi += refill;
  r.nw = lct__ld_if(refill && r.wi < hwords, code + r.wi, refill ? 0 : r.nw);
  return sym;
}

/* Mantissa words of round r (elements [64 r, 64 r + 64) of every lane
 * stream: 2k words each, lane stream t's at word 16 k t + 2 k r) into rows. */
template <unsigned ROW>
__device__ static inline void lct__fetch_mant(uint32_t (*rows)[ROW], const uint32_t *mant, uint32_t mwords,
                                             uint32_t k, uint32_t r, unsigned lane) {
  for (uint32_t t = 0; t < 32; t++) {
    for (uint32_t i = lane; i < 2 * k; i += 32) {
      const uint32_t g = 16 * k * t + 2 * k * r + i;
      lct__cp_async4(&rows[t][i], mant + (g < mwords ? g : 0), g < mwords);
    }
  }
  lct__cp_commit();
}

/* Shared memory of one chunk's warp. */
template <int DT> struct lct__dec_smem {
  static constexpr unsigned M = lct__dt<DT>::M, ROW = 2 * M + 2; /* 2k words and one to spare */
  uint16_t tab[LCT__TABLE_ENTRIES];
  uint32_t code[LCT__CODE_CAP];
  uint32_t mant[2][32][ROW];
};

/* The warp of chunk c: validates its place in the chunk table and its header,
 * then lane t rebuilds elements [512 t, 512 t + 512) and stores them. Returns
 * (warp-uniformly) 0, LCT_ECORRUPT or LCT_ECHECKSUM. */
template <int DT>
__device__ static int lct__decode_chunk_warp(const lct__dec_tensor &T, const uint16_t *tab_g, lct__dec_smem<DT> &sm,
                                             uint32_t c, uint32_t n_chunks, unsigned lane) {
  using L = lct__layout_of<DT>;
  constexpr unsigned W = lct__dt<DT>::W, S = lct__dt<DT>::S, M = lct__dt<DT>::M;
  constexpr unsigned G = 16 / W; /* elements per 16-byte store */
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

    /* Coalesced asynchronous copies: the decode table, the code section (when
     * it fits) and the first round's mantissas. */
    for (unsigned i = lane; i < LCT__TABLE_ENTRIES / 8; i += 32)
      lct__cp_async16(reinterpret_cast<uint4 *>(sm.tab) + i, reinterpret_cast<const uint4 *>(tab_g) + i);
    const bool staged = hwords <= LCT__CODE_CAP;
    if (staged) {
      for (uint32_t q = lane; q < hwords; q += 32) lct__cp_async4(&sm.code[q], code_g + q, true);
    }
    lct__cp_commit();
    lct__fetch_mant(sm.mant[0], mant, mwords, k, 0, lane);
    lct__cp_wait<0>();
    __syncwarp();
    const uint32_t *code = staged ? sm.code : code_g;

    lct__code_reader r;
    const uint32_t q = start >> 5;
    r.buf = ((uint64_t)(q + 1 < hwords ? code[q + 1] : 0) << 32 | (q < hwords ? code[q] : 0)) >> (start & 31);
    r.nb = 64 - (start & 31);
    r.wi = q + 2;
    r.nw = r.wi < hwords ? code[r.wi] : 0;
    r.minent = 0xffff;

    const uint32_t kmask = (1u << k) - 1, e0 = lane * LCT_LANE_ELEMS;
    const uint32_t rounds = (min(n, (uint32_t)LCT_LANE_ELEMS) + 63) / 64;
    uint32_t chk = 0;
    for (uint32_t rd = 0; rd < rounds; rd++) {
      if (rd + 1 < rounds) { /* the next round's mantissas while this one decodes */
        lct__fetch_mant(sm.mant[(rd + 1) & 1], mant, mwords, k, rd + 1, lane);
        lct__cp_wait<1>();
      } else {
        lct__cp_wait<0>();
      }
      __syncwarp();
      const uint32_t *row = sm.mant[rd & 1][lane];
      const uint32_t jn = nt > 64 * rd ? min(nt - 64 * rd, 64u) : 0;
      uint32_t j = 0;
      for (; j + G <= jn; j += G) { /* 16 bytes at a time */
        uint32_t x[G], w[4];
#pragma unroll
        for (unsigned g = 0; g < G; g++) {
          const uint32_t b = (j + g) * k;
          const uint32_t m = __funnelshift_r(row[b >> 5], row[(b >> 5) + 1], b) & kmask;
          x[g] = lct__next_symbol<DT>(r, sm.tab, code, hwords) << M | m << trim;
        }
#pragma unroll
        for (unsigned i = 0; i < 4; i++) {
          if (W == 4) {
            w[i] = x[i];
          } else if (W == 2) {
            w[i] = x[2 * i] | x[2 * i + 1] << 16;
          } else {
            w[i] = x[4 * i] | x[4 * i + 1] << 8 | x[4 * i + 2] << 16 | x[4 * i + 3] << 24;
          }
        }
        const uint32_t e = e0 + 64 * rd + j, word = e * W / 4;
#pragma unroll
        for (unsigned i = 0; i < 4; i++) chk += w[i] * ((mult0 + 2 * (word + i)) * LCT__CHECK_MUL);
        if (T.aligned) {
          *reinterpret_cast<uint4 *>(out + (size_t)e * W) = make_uint4(w[0], w[1], w[2], w[3]);
        } else {
#pragma unroll
          for (unsigned g = 0; g < G; g++) lct__store_elem<W>(out, e + g, x[g]);
        }
      }
      for (; j < jn; j++) { /* the tail of a partial lane */
        const uint32_t b = j * k, e = e0 + 64 * rd + j;
        const uint32_t m = __funnelshift_r(row[b >> 5], row[(b >> 5) + 1], b) & kmask;
        const uint32_t x = lct__next_symbol<DT>(r, sm.tab, code, hwords) << M | m << trim;
        chk += (x << (8 * ((e * W) & 3))) * ((mult0 + 2 * ((e * W) >> 2)) * LCT__CHECK_MUL);
        lct__store_elem<W>(out, e, x);
      }
      __syncwarp(); /* every lane is done with this buffer before it is refilled */
    }
    /* The lane consumed exactly lane_bits; no invalid code; zero padding. */
    uint32_t bad = r.minent == 0 || 32 * r.wi - r.nb - start != lb;
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

/* One warp (block) per chunk. */
template <int DT>
__global__ void __launch_bounds__(32) lct__decode_chunk_kernel(const __grid_constant__ lct__dec_params p) {
  __shared__ __align__(16) lct__dec_smem<DT> sm;
  const unsigned lane = threadIdx.x;
  const lct__dec_tensor &T = p.t[lct__find_tensor(p.t, p.count, blockIdx.x)];
  const uint32_t n_chunks = lct__chunk_count(T.n_elems), c = blockIdx.x - T.begin;
  int *const wst = p.ws_status + T.slot;
  const int err = *(volatile int *)wst == 0
                      ? lct__decode_chunk_warp<DT>(T, p.tables + (size_t)T.slot * LCT__TABLE_ENTRIES, sm, c,
                                                   n_chunks, lane)
                      : 0;
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
