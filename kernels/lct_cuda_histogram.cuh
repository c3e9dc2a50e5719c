/* lct_cuda_histogram.cuh — device code: sign+exponent symbol histogram with per-warp shared-memory counters. */
#ifndef LCT_CUDA_HISTOGRAM_CUH
#define LCT_CUDA_HISTOGRAM_CUH

#include "lct_cuda_common.cuh"

#define LCT__HIST_THREADS 256

/* Grid-stride over the tensor: 16-byte loads when src is 16-byte aligned,
 * element loads for the rest; each warp counts into its own shared copy of the
 * bins (fewer collisions on the few hot exponents), merged into hist at the end. */
template <int DT>
__global__ void __launch_bounds__(LCT__HIST_THREADS)
    lct__histogram_kernel(const uint8_t *__restrict__ src, uint64_t n, int aligned, unsigned long long *hist) {
  constexpr unsigned W = lct__dt<DT>::W, M = lct__dt<DT>::M, NB = 1u << lct__dt<DT>::S;
  constexpr unsigned WARPS = LCT__HIST_THREADS / 32;
  __shared__ uint32_t s_h[WARPS][NB];
  for (unsigned i = threadIdx.x; i < WARPS * NB; i += LCT__HIST_THREADS) (&s_h[0][0])[i] = 0;
  __syncthreads();

  uint32_t *h = s_h[threadIdx.x >> 5];
  const uint64_t tid = (uint64_t)blockIdx.x * LCT__HIST_THREADS + threadIdx.x;
  const uint64_t stride = (uint64_t)gridDim.x * LCT__HIST_THREADS;
  uint64_t done = 0;
  if (aligned) {
    constexpr unsigned PER = 16 / W;
    const uint64_t units = n / PER;
    const uint4 *s4 = reinterpret_cast<const uint4 *>(src);
    for (uint64_t u = tid; u < units; u += stride) {
      const uint4 v = __ldg(s4 + u);
      const uint32_t x[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
      for (unsigned e = 0; e < PER; e++) atomicAdd(&h[lct__elem<W>(x, e) >> M], 1u);
    }
    done = units * PER;
  }
  for (uint64_t i = done + tid; i < n; i += stride) {
    uint32_t x;
    if (W == 4) {
      x = __ldg(reinterpret_cast<const uint32_t *>(src) + i);
    } else if (W == 2) {
      x = __ldg(reinterpret_cast<const uint16_t *>(src) + i);
    } else {
      x = __ldg(src + i);
    }
    atomicAdd(&h[x >> M], 1u);
  }
  __syncthreads();
  for (unsigned b = threadIdx.x; b < NB; b += LCT__HIST_THREADS) {
    uint32_t sum = 0;
#pragma unroll
    for (unsigned w = 0; w < WARPS; w++) sum += s_h[w][b];
    if (sum) atomicAdd(&hist[b], (unsigned long long)sum);
  }
}

#endif
