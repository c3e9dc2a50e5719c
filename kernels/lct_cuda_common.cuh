/* lct_cuda_common.cuh — device-side format constants, dtype traits and helpers shared by the CUDA codec modules. */
#ifndef LCT_CUDA_COMMON_CUH
#define LCT_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include <atomic>

#include "lct_cuda.h"

/* Every CUDA call is checked; a failure becomes LCT_ECUDA for the caller. */
#define LCT__CUDA_TRY(call)                    \
  do {                                         \
    if ((call) != cudaSuccess) return LCT_ECUDA; \
  } while (0)
/* After every launch: configuration and launch errors. */
#define LCT__LAUNCH_CHECK() LCT__CUDA_TRY(cudaGetLastError())

/* Gives kernel smem bytes of dynamic shared memory (and, with max_carveout,
 * shared memory over L1, for residency) on device dev (the current one),
 * once per device: the attributes persist, and each call costs a driver call on the
 * launch path. set: the devices done, one bit each (those past 63 every time);
 * they hold for each device's primary context, which lives as long as the
 * process unless it calls cudaDeviceReset. */
static inline int lct__smem_attrs(const void *kernel, int smem, bool max_carveout, int dev,
                                  std::atomic<uint64_t> &set) {
  const uint64_t bit = dev < 64 ? 1ull << dev : 0;
  if (set.load(std::memory_order_acquire) & bit) return 0;
  LCT__CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  if (max_carveout)
    LCT__CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                       cudaSharedmemCarveoutMaxShared));
  set.fetch_or(bit, std::memory_order_release);
  return 0;
}

/* Launches kernel behind the stream's previous kernel as its programmatic
 * dependent: it may start once that one has run griddepcontrol.launch_dependents,
 * and waits for it (and its memory) at its own griddepcontrol.wait. Where the
 * launch attribute is refused, an ordinary launch. */
template <typename P>
static inline int lct__launch_dependent(void (*kernel)(P), unsigned grid, unsigned block, size_t smem,
                                        cudaStream_t stream, const P &params) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(grid);
  cfg.blockDim = dim3(block);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  if (cudaLaunchKernelEx(&cfg, kernel, params) == cudaSuccess) return 0;
  (void)cudaGetLastError();
  cfg.numAttrs = 0;
  LCT__CUDA_TRY(cudaLaunchKernelEx(&cfg, kernel, params));
  LCT__LAUNCH_CHECK();
  return 0;
}

#define LCT__CHECK_MUL 0x9E3779B1u
#define LCT__MAGIC 0x5A54434Cu          /* "LCTZ" read as a little-endian u32 */
#define LCT__MAX_SYM_BITS 10            /* the widest symbol of lct_dtype.h's table */
#define LCT__CB_WORDS ((((1u << (LCT__MAX_SYM_BITS - 1)) + 1 + 7) & ~7u) / 4) /* pad8(ceil((2^s + 1) / 2)) / 4 */
#define LCT__BATCH 256                  /* tensors per launch (kernel parameters, 14-16 KiB) */
#define LCT__BATCH_SMALL 32             /* tensors per launch of a small batch (about 2 KiB) */
#define LCT__FULL 0xffffffffu

/* A launch's parameters: what its tensors share, and the tensors, at most N
 * (1, LCT__BATCH_SMALL or LCT__BATCH). Parameters are copied at every
 * launch, 7 KiB of them for about 2.4 us, so a launch takes the narrowest
 * form that holds its tensors; but every launch of a call ends in a partly
 * filled wave of blocks, so a batch of a model's tensors wants them all in
 * one launch. */
template <typename Tensor, typename Common, unsigned N> struct lct__launch_params {
  Common common;
  uint32_t count;
  Tensor t[N];
};

/* launch(p), with p in the narrowest form that holds its tensors. */
template <typename Tensor, typename Common, typename F>
static inline int lct__launch_narrowest(const lct__launch_params<Tensor, Common, LCT__BATCH> &p, F &&launch) {
  static_assert(sizeof p <= 32764, "past the kernel parameter limit");
  if (p.count == 1) {
    const lct__launch_params<Tensor, Common, 1> one = {p.common, 1, {p.t[0]}};
    return launch(one);
  }
  if (p.count <= LCT__BATCH_SMALL) {
    lct__launch_params<Tensor, Common, LCT__BATCH_SMALL> few{};
    few.common = p.common;
    few.count = p.count;
    memcpy(few.t, p.t, p.count * sizeof p.t[0]);
    return launch(few);
  }
  return launch(p);
}

/* Per dtype, from lct_dtype.h's table: element bytes W, symbol bits S,
 * mantissa bits M (proto/FORMAT.md). */
template <int DT> struct lct__dt;
#define LCT__DT_TRAITS(id, name, value, width, sym_bits)                   \
  template <> struct lct__dt<LCT_DTYPE_##id> {                             \
    static constexpr unsigned W = width, S = sym_bits, M = S ? 8 * W - S : 0; \
  };
LCT_DTYPE_MAP(LCT__DT_TRAITS)
#undef LCT__DT_TRAITS
#define LCT__DT_FITS(id, name, value, width, sym_bits) \
  static_assert(sym_bits <= LCT__MAX_SYM_BITS, "a symbol wider than the device codebook's tables");
LCT_DTYPE_MAP(LCT__DT_FITS)
#undef LCT__DT_FITS

/* Blob layout constants of a dtype. */
template <int DT> struct lct__layout_of {
  static constexpr unsigned S = lct__dt<DT>::S;
  static constexpr unsigned CB_BYTES = S ? (1u << (S - 1)) + 1 : 0; /* ceil((2^s + 1) / 2) */
  static constexpr unsigned CB_PAD = (CB_BYTES + 7) & ~7u;
  static constexpr unsigned TABLE = LCT_HEADER_BYTES + CB_PAD; /* chunk table offset T */
};

/* The device half of lct_cuda_codebook. */
struct lct__dev_codebook {
  uint32_t enc[1u << LCT__MAX_SYM_BITS]; /* per symbol: the bits it writes (ESC code and raw symbol when
                                            it has no code), LSB-first, | bit count << 24 */
  uint32_t cb_words[LCT__CB_WORDS];      /* serialized codebook, zero-padded to pad8 */
  uint32_t cb_check;                     /* check of the serialized codebook at word base 6 */
};

struct lct_cuda_codebook {
  int dtype;
  lct__dev_codebook *dev;
  lct__dev_codebook *staging; /* pinned: an upload from pageable memory could wait for the stream */
  cudaEvent_t staged;         /* recorded after the last upload from staging */
  bool uploading;             /* staged was recorded */
};

__host__ __device__ static inline uint64_t lct__pad4(uint64_t x) { return (x + 3) & ~(uint64_t)3; }

/* Multiplier of word index i in the format's check. */
__device__ static inline uint32_t lct__mult(uint64_t i) { return (uint32_t)(2 * i + 1) * LCT__CHECK_MUL; }

__device__ static inline uint32_t lct__warp_sum(uint32_t v) {
#pragma unroll
  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(LCT__FULL, v, o);
  return v;
}

__device__ static inline uint64_t lct__warp_sum64(uint64_t v) {
#pragma unroll
  for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(LCT__FULL, v, o);
  return v;
}

__device__ static inline uint32_t lct__warp_or(uint32_t v) {
#pragma unroll
  for (int o = 16; o; o >>= 1) v |= __shfl_xor_sync(LCT__FULL, v, o);
  return v;
}

/* Asynchronous global-to-shared copy of 4 bytes (zero-filled when !valid:
 * nothing is read then); completion by group. */
__device__ static inline void lct__cp_async4(void *smem, const void *gmem, bool valid) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(gmem), "r"(valid ? 4 : 0) : "memory");
}

/* Asynchronous global-to-shared copy (cp.async) of 16 aligned bytes; completion by group. */
__device__ static inline void lct__cp_async16(void *smem, const void *gmem) {
  const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(gmem) : "memory");
}
__device__ static inline void lct__cp_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
/* Waits until at most N of this thread's groups are still in flight. */
template <int N> __device__ static inline void lct__cp_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }

/* A compile-time flag as a value, for generic lambdas. */
template <bool B> struct lct__bool {
  static constexpr bool value = B;
};

/* Element e (compile-time under unrolling) of a register array of raw words. */
template <unsigned W> __device__ static inline uint32_t lct__elem(const uint32_t *x, unsigned e) {
  if (W == 4) return x[e];
  if (W == 2) return (x[e >> 1] >> (16 * (e & 1))) & 0xffffu;
  return (x[e >> 2] >> (8 * (e & 3))) & 0xffu;
}

/* Index of the tensor whose range starts at or before `index` (begin[] ascending). */
template <typename T>
__device__ static inline unsigned lct__find_tensor(const T *t, unsigned count, uint32_t index) {
  unsigned lo = 0, hi = count - 1;
  while (lo < hi) {
    unsigned mid = (lo + hi + 1) >> 1;
    if (t[mid].begin <= index) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

/* Calls f.template run<DT>() for a runtime dtype; LCT_EDTYPE if unknown. */
template <typename F> static inline int lct__dispatch(int dtype, F &f) {
  switch (dtype) {
#define LCT__DT_CASE(id, name, value, width, sym_bits) \
  case LCT_DTYPE_##id: return f.template run<LCT_DTYPE_##id>();
    LCT_DTYPE_MAP(LCT__DT_CASE)
#undef LCT__DT_CASE
  }
  return LCT_EDTYPE;
}

#endif
