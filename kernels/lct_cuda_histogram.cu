/* lct_cuda_histogram.cu — launch wrappers: device histogram and the host codebook build on its counts. */
#include <string.h>

#include "lct_cuda_histogram.cuh"

namespace {
struct histogram_launch {
  const void *src;
  uint64_t n;
  unsigned long long *hist;
  cudaStream_t stream;

  template <int DT> int run() {
    if constexpr (lct__dt<DT>::S == 0) {
      return LCT_EINVAL;
    } else {
      return launch<DT>();
    }
  }

  template <int DT> int launch() {
    if (!n) return 0;
    int dev, sms;
    LCT__CUDA_TRY(cudaGetDevice(&dev));
    LCT__CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    /* Enough blocks to fill the GPU, each with under 2^32 elements (u32 counters). */
    const uint64_t per_block_min = (uint64_t)LCT__HIST_THREADS * 16;
    uint64_t blocks = (n + per_block_min - 1) / per_block_min;
    if (blocks > (uint64_t)sms * 4) blocks = (uint64_t)sms * 4;
    if (blocks < (n >> 31) + 1) blocks = (n >> 31) + 1;
    const int aligned = ((uintptr_t)src & 15) == 0;
    lct__histogram_kernel<DT><<<(unsigned)blocks, LCT__HIST_THREADS, 0, stream>>>(
        static_cast<const uint8_t *>(src), n, aligned, hist);
    LCT__LAUNCH_CHECK();
    return 0;
  }
};
} // namespace

extern "C" int lct_cuda_histogram(int dtype, const void *src, uint64_t n_elems, uint64_t *hist, cudaStream_t stream) {
  const size_t w = lct_dtype_size((lct_dtype)dtype);
  if (!w) return LCT_EDTYPE;
  if (!hist || ((uintptr_t)hist & 7) || (n_elems && !src) || ((uintptr_t)src % w)) return LCT_EINVAL;
  histogram_launch l = {src, n_elems, reinterpret_cast<unsigned long long *>(hist), stream};
  return lct__dispatch(dtype, l);
}

extern "C" int lct_cuda_codebook_from_device(int dtype, const void *src, uint64_t n_elems, uint64_t *hist,
                                             cudaStream_t stream, lct_codebook *cb) {
  const unsigned s = lct_dtype_symbol_bits((lct_dtype)dtype);
  if (!s || !cb) return lct_dtype_size((lct_dtype)dtype) ? LCT_EINVAL : LCT_EDTYPE;
  uint64_t host[1u << LCT__MAX_SYM_BITS];
  const size_t bytes = sizeof(uint64_t) << s;
  LCT__CUDA_TRY(cudaMemsetAsync(hist, 0, bytes, stream));
  int rc = lct_cuda_histogram(dtype, src, n_elems, hist, stream);
  if (rc) return rc;
  LCT__CUDA_TRY(cudaMemcpyAsync(host, hist, bytes, cudaMemcpyDeviceToHost, stream));
  LCT__CUDA_TRY(cudaStreamSynchronize(stream));
  return lct_codebook_build(dtype, host, cb);
}
