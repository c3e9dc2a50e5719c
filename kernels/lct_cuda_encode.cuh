/* lct_cuda_encode.cuh — device code: single-pass chunk encoder (block scan of code lengths, decoupled look-back for chunk offsets). */
#ifndef LCT_CUDA_ENCODE_CUH
#define LCT_CUDA_ENCODE_CUH

#include "lct_cuda_common.cuh"

#define LCT__ENC_THREADS 512 /* one block per chunk; thread i owns chunk elements [32 i, 32 i + 32) */
#define LCT__EPT 32          /* elements per thread: 8 threads make one 256-element lane stream */
#define LCT__LB_AGG (1ull << 62)
#define LCT__LB_INCL (2ull << 62)
#define LCT__LB_VALUE ((1ull << 62) - 1)

/* One tensor of an encode launch. */
struct lct__enc_tensor {
  const uint8_t *src;
  uint8_t *dst;
  const lct__dev_codebook *cb;
  uint64_t n_elems;
  uint64_t *blob_bytes;
  unsigned long long *code_bits; /* or NULL */
  unsigned long long *hist;      /* 2^s symbol counters, or NULL */
  uint32_t begin;   /* its first work item (chunk, or the header of an empty tensor) in the launch */
  uint32_t aligned; /* src is 16-byte aligned */
};

/* A work item's look-back slot: val (a flag, LCT__LB_AGG or LCT__LB_INCL,
 * | a size) counts once tag holds the launch's epoch. Epochs are drawn anew
 * for every launch, so the workspace needs no clearing between launches.
 * Both words are written and read as one .b128 access: PTX models a
 * vector access as one access per element, in no set order, but a scalar
 * 128-bit one as a single access, so a reader sees tag and val of one
 * store, with no fence between them. */
struct __align__(16) lct__lb_slot {
  unsigned long long tag, val;
};

__device__ static inline void lct__lb_store(lct__lb_slot *s, unsigned long long tag, unsigned long long val) {
  asm volatile("{\n.reg .b128 t;\nmov.b128 t, {%1, %2};\nst.relaxed.gpu.global.b128 [%0], t;\n}\n" ::"l"(s), "l"(tag),
               "l"(val)
               : "memory");
}

__device__ static inline lct__lb_slot lct__lb_load(const lct__lb_slot *s) {
  lct__lb_slot v;
  asm volatile("{\n.reg .b128 t;\nld.relaxed.gpu.global.b128 t, [%2];\nmov.b128 {%0, %1}, t;\n}\n"
               : "=l"(v.tag), "=l"(v.val)
               : "l"(s)
               : "memory");
  return v;
}

/* What the tensors of an encode launch share. */
struct lct__enc_common {
  lct__lb_slot *lookback; /* one slot per work item */
  unsigned long long epoch;
};

template <unsigned N> using lct__enc_params = lct__launch_params<lct__enc_tensor, lct__enc_common, N>;

/* Shared-memory word index of chunk word a: one pad word per 32 keeps strided
 * per-thread accesses free of bank conflicts. */
__device__ static inline unsigned lct__pidx(unsigned a) { return a + (a >> 5); }

/* Dynamic shared memory of the encoder: the chunk image (the raw input where
 * it is not loaded straight into registers, then the output chunk, at most
 * 8 + 16384 w bytes), padded. */
template <int DT> constexpr unsigned lct__enc_stage_bytes() {
  constexpr unsigned words = 2 + 4096 * lct__dt<DT>::W;
  return 4 * (words + words / 32 + 1);
}

/* Word j of a chunk's raw bytes (nbytes of them, zero beyond) through loads of
 * the element size, for inputs that are not 16-byte aligned or partial chunks. */
template <unsigned W> __device__ static inline uint32_t lct__load_word(const uint8_t *p, uint32_t j, uint32_t nbytes) {
  const uint32_t b = 4 * j;
  uint32_t v = 0;
  if (W == 4) {
    if (b < nbytes) v = __ldg(reinterpret_cast<const uint32_t *>(p + b));
  } else if (W == 2) {
    if (b < nbytes) v = __ldg(reinterpret_cast<const uint16_t *>(p + b));
    if (b + 2 < nbytes) v |= (uint32_t)__ldg(reinterpret_cast<const uint16_t *>(p + b + 2)) << 16;
  } else {
#pragma unroll
    for (unsigned i = 0; i < 4; i++) {
      if (b + i < nbytes) v |= (uint32_t)__ldg(p + b + i) << (8 * i);
    }
  }
  return v;
}

/* Blob bytes [0, 32) and the codebook (blob_size at 32 is the last chunk's). */
template <int DT>
__device__ static void lct__write_header(uint8_t *dst, uint64_t n_elems, uint32_t n_chunks,
                                         const lct__dev_codebook *cb, unsigned tid) {
  using L = lct__layout_of<DT>;
  uint32_t *w = reinterpret_cast<uint32_t *>(dst);
  if (tid == 0) {
    const uint32_t h[6] = {LCT__MAGIC, LCT_FORMAT_VERSION | (uint32_t)DT << 8 | (uint32_t)LCT_MAX_CODE_LEN << 16,
                           (uint32_t)n_elems, (uint32_t)(n_elems >> 32), n_chunks, L::CB_BYTES};
    uint32_t check = 0;
    if constexpr (L::CB_BYTES > 0) check = cb->cb_check;
#pragma unroll
    for (unsigned j = 0; j < 6; j++) {
      w[j] = h[j];
      check += h[j] * lct__mult(j);
    }
    w[6] = check;
    w[7] = 0;
  }
  if constexpr (L::CB_BYTES > 0) {
    for (unsigned j = tid; j < L::CB_PAD / 4; j += LCT__ENC_THREADS) w[10 + j] = cb->cb_words[j];
  }
}

/* One thread: publishes this chunk's size for its successors' look-back, as
 * soon as it is known (the tensor's first chunk: its inclusive sum). */
__device__ static inline void lct__lookback_publish(lct__lb_slot *lb, unsigned long long epoch, uint32_t first,
                                                    uint32_t item, uint32_t size) {
  lct__lb_store(lb + item, epoch, (item == first ? LCT__LB_INCL : LCT__LB_AGG) | size);
}

/* Warp 0, after lct__lookback_publish: returns the sum of the sizes of the
 * tensor's earlier chunks (decoupled look-back over items [first, item)) and
 * publishes this chunk's inclusive sum. Work items are block indices, and
 * blocks are dispatched in index order (as single-pass scans rely on), so
 * every awaited predecessor is resident or done. */
__device__ static inline uint64_t lct__lookback(lct__lb_slot *lb, unsigned long long epoch, uint32_t first,
                                                uint32_t item, uint32_t size, unsigned lane) {
  if (item == first) return 0;
  uint64_t excl = 0;
  int64_t pos = (int64_t)item - 1;
  for (;;) {
    const int64_t idx = pos - (int64_t)lane;
    uint64_t v = LCT__LB_INCL; /* before the tensor's first chunk: an inclusive zero */
    if (idx >= (int64_t)first) {
      lct__lb_slot s;
      do {
        s = lct__lb_load(lb + idx);
      } while (s.tag != epoch);
      v = s.val;
    }
    const uint32_t incl = __ballot_sync(LCT__FULL, (v >> 62) == 2);
    uint64_t val = v & LCT__LB_VALUE;
    if (incl) {
      if (lane > (unsigned)(__ffs(incl) - 1)) val = 0;
      excl += lct__warp_sum64(val);
      break;
    }
    excl += lct__warp_sum64(val);
    pos -= 32;
  }
  if (lane == 0) lct__lb_store(lb + item, epoch, LCT__LB_INCL | (excl + size));
  return excl;
}

/* Packs this thread's 32 mantissas, K bits each after dropping M - K trimmed
 * bits, into its K words of the mantissa section (words >= mwords are the
 * chunk tail's, not stored). K is a compile-time constant: fixed shifts. */
template <unsigned W, unsigned M, unsigned K>
__device__ static inline void lct__pack_mant(const uint32_t *x, uint32_t *stage, unsigned word0, unsigned mwords) {
  uint32_t cur = 0;
#pragma unroll
  for (unsigned e = 0; e < LCT__EPT; e++) {
    const uint32_t v = (lct__elem<W>(x, e) >> (M - K)) & ((1u << K) - 1);
    const unsigned bit = e * K, q = bit / 32, sh = bit % 32;
    cur |= v << sh;
    if (sh + K >= 32) { /* word q is complete */
      if (word0 + q < mwords) stage[lct__pidx(LCT_CODED_CHUNK_HEADER / 4 + word0 + q)] = cur;
      cur = sh + K > 32 ? v >> (32 - sh) : 0;
    }
  }
}

/* lct__pack_mant for the runtime k (1..M). */
template <unsigned W, unsigned M, unsigned K = 1>
__device__ static inline void lct__pack_mant_k(unsigned k, const uint32_t *x, uint32_t *stage, unsigned word0,
                                               unsigned mwords) {
  if constexpr (K <= M) {
    if (k == K) {
      lct__pack_mant<W, M, K>(x, stage, word0, mwords);
    } else {
      lct__pack_mant_k<W, M, K + 1>(k, x, stage, word0, mwords);
    }
  }
}

/* Counts the symbols of this thread's first nv elements into the block's bins. */
template <unsigned W, unsigned M>
__device__ static inline void lct__count_symbols(const uint32_t *x, uint32_t *bins, unsigned nv) {
#pragma unroll
  for (unsigned e = 0; e < LCT__EPT; e++) {
    if (e < nv) atomicAdd(&bins[lct__elem<W>(x, e) >> M], 1u);
  }
}

/* Sum of the code bits of this thread's first nv elements (FULL: all 32);
 * *wide gets whether any of them writes 16 bits or more. */
template <unsigned W, unsigned M, bool FULL>
__device__ static inline uint32_t lct__code_bits(const uint32_t *x, const uint32_t *enc, unsigned nv, bool *wide) {
  uint32_t bits = 0, counts = 0;
#pragma unroll
  for (unsigned e = 0; e < LCT__EPT; e++) {
    if (FULL || e < nv) {
      const uint32_t ent = enc[lct__elem<W>(x, e) >> M];
      bits += ent >> 24;
      counts |= ent;
    }
  }
  *wide = counts >> 28; /* a count of 16 or more has bit 4 set */
  return bits;
}

/* Where bits >= 32: ORs v into the shared-memory word at address saddr. As
 * C's `if` around an atomic, the address arithmetic went behind the branch
 * too; under a PTX predicate it is done unconditionally, though ptxas still
 * branches around the atomic itself (a BSSY/BRA/BSYNC per word, by Nsight
 * Compute's SASS). */
__device__ static inline void lct__or_if_full(uint32_t bits, uint32_t saddr, uint32_t v) {
  asm volatile("{\n\t.reg .pred p;\n\tsetp.ge.u32 p, %0, 32;\n\t@p red.shared.or.b32 [%1], %2;\n\t}\n" ::"r"(bits),
               "r"(saddr), "r"(v)
               : "memory");
}

/* A thread's code bits on their way into the staged code section: acc holds
 * the first na bits of word q, which it shares with the thread before. */
struct lct__code_sink {
  uint32_t base, q, na, acc;
};

/* Appends code, len bits with len + na < 64 (so that it spills at most one
 * word: its part past the word is one funnel shift), ORing the word in once
 * it is full. Straight-line code but for the flush. */
__device__ static inline void lct__sink_put(lct__code_sink &s, uint32_t code, uint32_t len) {
  s.acc |= code << s.na;
  const uint32_t spill = __funnelshift_l(code, 0, s.na); /* code >> (32 - na); 0 when na is 0 */
  s.na += len;
  const bool full = s.na >= 32;
  lct__or_if_full(s.na, s.base + 4 * lct__pidx(s.q), s.acc);
  s.acc = full ? spill : s.acc;
  s.q += full;
  s.na &= 31;
}

/* The last, partial word. */
__device__ static inline void lct__sink_close(lct__code_sink &s, uint32_t *stage) {
  if (s.na) atomicOr(&stage[lct__pidx(s.q)], s.acc);
}

/* ORs the codes of this thread's first nv elements (at most 24 bits each)
 * into the staged code section from word q, bit na on. */
template <unsigned W, unsigned M, bool FULL>
__device__ static inline void lct__emit_codes(const uint32_t *x, const uint32_t *enc, uint32_t *stage, unsigned q,
                                              unsigned na, unsigned nv) {
  lct__code_sink s{(uint32_t)__cvta_generic_to_shared(stage), q, na, 0};
#pragma unroll
  for (unsigned e = 0; e < LCT__EPT; e++) {
    if (FULL || e < nv) {
      const uint32_t ent = enc[lct__elem<W>(x, e) >> M];
      lct__sink_put(s, ent & 0xffffffu, ent >> 24);
    }
  }
  lct__sink_close(s, stage);
}

/* lct__emit_codes for all 32 elements of a thread none of whose codes takes
 * 16 bits or more: two codes at a time (at most 30 bits), half the flushes,
 * which are most of the emission's instructions. */
template <unsigned W, unsigned M>
__device__ static inline void lct__emit_code_pairs(const uint32_t *x, const uint32_t *enc, uint32_t *stage,
                                                   unsigned q, unsigned na) {
  lct__code_sink s{(uint32_t)__cvta_generic_to_shared(stage), q, na, 0};
#pragma unroll
  for (unsigned e = 0; e < LCT__EPT; e += 2) {
    const uint32_t e0 = enc[lct__elem<W>(x, e) >> M], e1 = enc[lct__elem<W>(x, e + 1) >> M], l0 = e0 >> 24;
    lct__sink_put(s, (e0 & 0xffffffu) | (e1 & 0xffffffu) << l0, l0 + (e1 >> 24));
  }
  lct__sink_close(s, stage);
}

/* Blocks per SM the register budget is sized for: 3 (42 registers) where the
 * raw words fit, 2 for f32's 32 words per thread. */
template <int DT> constexpr int lct__enc_min_blocks() { return lct__dt<DT>::W == 4 ? 2 : 3; }

template <int DT, unsigned N>
__global__ void __launch_bounds__(LCT__ENC_THREADS, lct__enc_min_blocks<DT>())
    lct__encode_kernel(const __grid_constant__ lct__enc_params<N> p) {
  using D = lct__dt<DT>;
  using L = lct__layout_of<DT>;
  constexpr unsigned W = D::W, S = D::S, M = D::M;
  constexpr unsigned WPT = LCT__EPT * W / 4; /* raw words per thread */
  constexpr unsigned CHUNK_WORDS = LCT_CHUNK_ELEMS * W / 4;
  constexpr uint32_t MMASK = (1u << M) - 1;

  extern __shared__ uint32_t stage[];
  __shared__ uint32_t s_enc[S ? 1u << S : 1];
  __shared__ uint32_t s_hist[S ? 1u << S : 1]; /* the chunk's symbol counts, when the tensor takes them */
  __shared__ uint4 s_warp[LCT__ENC_THREADS / 32]; /* per warp: code bits, check, mantissa OR */
  __shared__ uint32_t s_lane_bits[LCT_LANES];
  __shared__ uint64_t s_excl;

  const unsigned tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const uint32_t item = blockIdx.x;
  /* The block's tensor, found once for all its threads (a search of every
   * thread kept its results live too, and the register budget spilled). */
  __shared__ uint32_t s_tensor;
  if (tid == 0) s_tensor = lct__find_tensor(p.t, p.count, item);
  __syncthreads();
  const lct__enc_tensor &T = p.t[s_tensor];
  const uint64_t n_elems = T.n_elems;
  const uint32_t n_chunks = (uint32_t)((n_elems + LCT_CHUNK_ELEMS - 1) / LCT_CHUNK_ELEMS);
  const uint64_t data_start = L::TABLE + 8ull * n_chunks;
  uint8_t *const dst = T.dst;

  if (n_chunks == 0) { /* an empty tensor: header and codebook only */
    lct__write_header<DT>(dst, 0, 0, T.cb, tid);
    if (tid == 0) {
      *reinterpret_cast<uint64_t *>(dst + 32) = data_start;
      *T.blob_bytes = data_start;
    }
    return;
  }

  const uint32_t c = item - T.begin;
  const uint64_t first_elem = (uint64_t)c * LCT_CHUNK_ELEMS;
  const uint32_t n = n_elems - first_elem < LCT_CHUNK_ELEMS ? (uint32_t)(n_elems - first_elem) : LCT_CHUNK_ELEMS;
  const uint8_t *src = T.src + first_elem * W;

  if (c == 0) lct__write_header<DT>(dst, n_elems, n_chunks, T.cb, tid);
  if constexpr (S > 0) {
    for (unsigned i = tid; i < (1u << S); i += LCT__ENC_THREADS) s_enc[i] = T.cb->enc[i];
    if (T.hist)
      for (unsigned i = tid; i < (1u << S); i += LCT__ENC_THREADS) s_hist[i] = 0;
  }
  /* Each thread's 32 consecutive elements into registers: a full aligned
   * chunk of 1- and 2-byte elements straight from global memory (a warp's
   * 16-byte loads, 32 or 64 bytes apart, cover whole sectors between them,
   * and L1 keeps the parts the next load takes; f32's 128 bytes per thread
   * outgrow it), any other through shared memory, where a raw chunk keeps its
   * bytes (after its 8-byte header). */
  uint32_t x[WPT];
  const bool direct = W <= 2 && T.aligned && n == LCT_CHUNK_ELEMS; /* the same for the whole block */
  if (direct) {
    const uint4 *s4 = reinterpret_cast<const uint4 *>(src) + tid * (WPT / 4);
#pragma unroll
    for (unsigned r = 0; r < WPT / 4; r++) {
      const uint4 v = __ldg(s4 + r);
      x[4 * r] = v.x;
      x[4 * r + 1] = v.y;
      x[4 * r + 2] = v.z;
      x[4 * r + 3] = v.w;
    }
  } else if (W == 4 && T.aligned && n == LCT_CHUNK_ELEMS) { /* coalesced */
    constexpr unsigned UNITS = CHUNK_WORDS / 4 / LCT__ENC_THREADS;
    const uint4 *s4 = reinterpret_cast<const uint4 *>(src);
    uint4 v[UNITS];
#pragma unroll
    for (unsigned r = 0; r < UNITS; r++) v[r] = __ldg(s4 + tid + r * LCT__ENC_THREADS);
#pragma unroll
    for (unsigned r = 0; r < UNITS; r++) {
      const unsigned a = 2 + 4 * (tid + r * LCT__ENC_THREADS);
      stage[lct__pidx(a)] = v[r].x;
      stage[lct__pidx(a + 1)] = v[r].y;
      stage[lct__pidx(a + 2)] = v[r].z;
      stage[lct__pidx(a + 3)] = v[r].w;
    }
  } else {
    const uint32_t nbytes = n * W;
    for (unsigned j = tid; j < CHUNK_WORDS; j += LCT__ENC_THREADS)
      stage[lct__pidx(2 + j)] = lct__load_word<W>(src, j, nbytes);
  }
  __syncthreads();
  if (!direct) {
#pragma unroll
    for (unsigned j = 0; j < WPT; j++) x[j] = stage[lct__pidx(2 + tid * WPT + j)];
  }

  /* Check, mantissa OR and code bits of this thread's elements. */
  const uint64_t word0 = (uint64_t)c * CHUNK_WORDS + tid * WPT;
  uint32_t chk = 0, mul = lct__mult(word0);
#pragma unroll
  for (unsigned j = 0; j < WPT; j++, mul += 2 * LCT__CHECK_MUL) chk += x[j] * mul;
  const unsigned e0 = tid * LCT__EPT;
  const unsigned nv = n > e0 ? min(n - e0, (unsigned)LCT__EPT) : 0;
  uint32_t mor = 0, tbits = 0;
  bool wide = true; /* some code of the thread's takes 16 bits or more */
  if constexpr (S > 0) {
#pragma unroll
    for (unsigned j = 0; j < WPT; j++) mor |= x[j];
    if (W == 2) mor |= mor >> 16;
    if (W == 1) mor |= mor >> 8 | mor >> 16 | mor >> 24;
    mor &= MMASK;
    if (T.hist) lct__count_symbols<W, M>(x, s_hist, nv);
    tbits = nv == LCT__EPT ? lct__code_bits<W, M, true>(x, s_enc, nv, &wide)
                           : lct__code_bits<W, M, false>(x, s_enc, nv, &wide);
  }
  /* Block scan of code bits (thread order is stream order), lane-stream sums. */
  uint32_t incl = tbits;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t y = __shfl_up_sync(LCT__FULL, incl, o);
    if ((int)lane >= o) incl += y;
  }
  constexpr unsigned TPL = LCT_LANE_ELEMS / LCT__EPT; /* threads per lane */
  static_assert(TPL * LCT__EPT == LCT_LANE_ELEMS && TPL <= 32 && (TPL & (TPL - 1)) == 0, "lanes of whole warps' parts");
  uint32_t lbits = tbits;
#pragma unroll
  for (int o = TPL / 2; o; o >>= 1) lbits += __shfl_xor_sync(LCT__FULL, lbits, o);
  chk = lct__warp_sum(chk);
  mor = lct__warp_or(mor);
  /* The OR of the warp's lane lengths: a lane of 4096 bits or more has no
   * field for its length, and its chunk is stored raw. */
  const uint32_t lor = __reduce_or_sync(LCT__FULL, lbits);
  if (lane == 31) s_warp[warp] = make_uint4(incl, chk, mor, lor);
  if (lane % TPL == 0) s_lane_bits[tid / TPL] = lbits;
  __syncthreads();
  uint32_t total = 0, before = 0, bchk = 0, bor = 0, blor = 0;
#pragma unroll
  for (unsigned w = 0; w < LCT__ENC_THREADS / 32; w++) {
    const uint4 v = s_warp[w];
    before += w < warp ? v.x : 0;
    total += v.x;
    bchk += v.y;
    bor |= v.z;
    blor |= v.w;
  }
  const uint32_t bitpos = before + incl - tbits; /* this thread's first bit in the code section */
  if constexpr (S > 0) {
    if (T.hist) {
      for (unsigned i = tid; i < (1u << S); i += LCT__ENC_THREADS)
        if (s_hist[i]) atomicAdd(&T.hist[i], (unsigned long long)s_hist[i]);
    }
  }

  unsigned trim = 0, k = 0;
  if constexpr (S > 0) {
    trim = bor ? (unsigned)__ffs(bor) - 1 : M;
    k = M - trim;
  }
  const uint32_t raw_size = 8 + (uint32_t)lct__pad4((uint64_t)n * W);
  const uint32_t mbytes = (uint32_t)lct__pad4(((uint64_t)n * k + 7) / 8), hbytes = (uint32_t)lct__pad4((total + 7) / 8);
  const bool coded = S > 0 && LCT_CODED_CHUNK_HEADER + mbytes + hbytes < raw_size && !(blor >> LCT_LANE_FIELD_BITS);
  const uint32_t size = coded ? LCT_CODED_CHUNK_HEADER + mbytes + hbytes : raw_size;
  /* lct_encode_stats.code_bits: counted once the mantissas leave room for
   * codes, also when the codes then do not pay and the chunk goes raw. */
  if (S > 0 && tid == 0 && T.code_bits && LCT_CODED_CHUNK_HEADER + mbytes < raw_size)
    atomicAdd(T.code_bits, (unsigned long long)total);

  if (tid == 0) lct__lookback_publish(p.common.lookback, p.common.epoch, T.begin, item, size);
  /* Build the chunk image in shared memory (for a coded chunk over the raw
   * input, which every thread holds in registers by now); the look-back waits
   * for the chunk's predecessors only once it is built, when they have most
   * likely published their sizes. */
  const unsigned mwords = mbytes / 4, code0 = LCT_CODED_CHUNK_HEADER / 4 + mwords;
  if (coded) {
    for (unsigned q = tid; q < hbytes / 4; q += LCT__ENC_THREADS) stage[lct__pidx(code0 + q)] = 0;
    if (tid == 0) {
      stage[lct__pidx(0)] = 1u | trim << 8;
      stage[lct__pidx(1)] = bchk;
    }
    /* lane_bits: 12-bit fields, field t at bit 12 t; word q gathers the fields that reach into it. */
    constexpr unsigned FB = LCT_LANE_FIELD_BITS, FIELD_WORDS = LCT_LANES * FB / 32;
    static_assert(LCT_CODED_CHUNK_HEADER == 8 + 4 * FIELD_WORDS, "the coded header is its fields");
    if (tid < FIELD_WORDS) {
      uint32_t w = 0;
      for (unsigned t = 32 * tid / FB; t < LCT_LANES && FB * t < 32 * tid + 32; t++) {
        const int sh = (int)(FB * t) - (int)(32 * tid);
        w |= sh >= 0 ? s_lane_bits[t] << sh : s_lane_bits[t] >> -sh;
      }
      stage[lct__pidx(2 + tid)] = w;
    }
    /* 32 elements of k bits: exactly k words, word-aligned. */
    if constexpr (S > 0) lct__pack_mant_k<W, M>(k, x, stage, tid * k, mwords);
  } else { /* a raw chunk: the raw bytes, zero-padded, behind the header */
    if (tid == 0) {
      stage[lct__pidx(0)] = 0;
      stage[lct__pidx(1)] = bchk;
    }
    if (direct) {
#pragma unroll
      for (unsigned j = 0; j < WPT; j++) stage[lct__pidx(2 + tid * WPT + j)] = x[j];
    }
  }
  __syncthreads(); /* code words zeroed */
  if constexpr (S > 0) {
    if (coded && tbits) { /* neighbours share boundary words: OR them in */
      const unsigned q = code0 + (bitpos >> 5), na = bitpos & 31;
      if (nv == LCT__EPT && !wide) {
        lct__emit_code_pairs<W, M>(x, s_enc, stage, q, na);
      } else if (nv == LCT__EPT) {
        lct__emit_codes<W, M, true>(x, s_enc, stage, q, na, nv);
      } else {
        lct__emit_codes<W, M, false>(x, s_enc, stage, q, na, nv);
      }
    }
  }
  if (warp == 0) {
    const uint64_t excl = lct__lookback(p.common.lookback, p.common.epoch, T.begin, item, size, lane);
    if (lane == 0) s_excl = excl;
  }
  __syncthreads(); /* codes in place; s_excl published */
  const uint64_t off = data_start + s_excl;
  if (tid == 0) {
    reinterpret_cast<uint64_t *>(dst + L::TABLE)[c] = off;
    if (c == n_chunks - 1) {
      *reinterpret_cast<uint64_t *>(dst + 32) = off + size;
      *T.blob_bytes = off + size;
    }
  }
  uint32_t *out = reinterpret_cast<uint32_t *>(dst + off);
  for (unsigned a = tid; a < size / 4; a += LCT__ENC_THREADS) out[a] = stage[lct__pidx(a)];
}

#endif
