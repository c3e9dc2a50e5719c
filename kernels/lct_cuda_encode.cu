/* lct_cuda_encode.cu — launch wrappers for the encoder: argument checks, workspace layout, per-dtype flattened grids. */
#include <string.h>

#include <sys/random.h>

#include <chrono>

#include "lct_cuda_encode.cuh"

namespace {

/* Blocks of one launch stay below the grid's x limit. */
constexpr uint64_t kMaxItemsPerLaunch = 0x7fffffffu;

uint64_t work_items(uint64_t n_elems) {
  const uint64_t chunks = lct_chunk_count(n_elems);
  return chunks ? chunks : 1;
}

int check_item(const lct_cuda_encode_item *it) {
  const size_t w = lct_dtype_size((lct_dtype)it->dtype);
  if (!w) return LCT_EDTYPE;
  if (lct_dtype_symbol_bits((lct_dtype)it->dtype) && (!it->codebook || it->codebook->dtype != it->dtype)) return LCT_EINVAL;
  if (it->n_elems > UINT64_MAX / 8 || lct_chunk_count(it->n_elems) >= kMaxItemsPerLaunch) return LCT_E2BIG;
  if ((it->n_elems && !it->src) || ((uintptr_t)it->src % w)) return LCT_EINVAL;
  if (!it->dst || ((uintptr_t)it->dst & 7) || !it->blob_bytes || ((uintptr_t)it->blob_bytes & 7)) return LCT_EINVAL;
  if ((uintptr_t)it->code_bits & 7 || (uintptr_t)it->hist & 7) return LCT_EINVAL;
  if (it->hist && !lct_dtype_symbol_bits((lct_dtype)it->dtype)) return LCT_EINVAL;
  if (it->cap < lct_encode_bound(it->dtype, it->n_elems)) return LCT_EBUFSIZE;
  return 0;
}

/* A fresh look-back epoch for every launch: a per-process random start, then
 * a counter, so no launch meets a tag of another (nor, but with odds of
 * 2^-64, one that happens to lie in a fresh workspace). */
unsigned long long next_epoch() {
  static const unsigned long long start = [] {
    unsigned long long r = 0;
    if (getrandom(&r, sizeof r, 0) != (ssize_t)sizeof r) /* no entropy source: the clock */
      r = (unsigned long long)std::chrono::steady_clock::now().time_since_epoch().count() * 0x9E3779B97F4A7C15ull;
    return r;
  }();
  static std::atomic<unsigned long long> n{0};
  return start + n.fetch_add(1, std::memory_order_relaxed) * 0x9E3779B97F4A7C15ull; /* odd: no repeat in 2^64 */
}

/* Launches the items of one dtype in groups of at most LCT__BATCH tensors (a
 * lone tensor with the one-tensor parameters). */
struct encode_launch {
  const lct_cuda_encode_item *items;
  size_t count;
  int dtype;
  lct__lb_slot *ws; /* next free look-back slot */
  cudaStream_t stream;

  template <int DT, unsigned N> int launch(const lct__enc_params<N> &p, uint64_t n_items) {
    constexpr unsigned smem = lct__enc_stage_bytes<DT>();
    static std::atomic<uint64_t> attrs_set{0};
    int dev;
    LCT__CUDA_TRY(cudaGetDevice(&dev));
    int rc = lct__smem_attrs((const void *)lct__encode_kernel<DT, N>, smem, false, dev, attrs_set);
    if (rc) return rc;
    lct__encode_kernel<DT, N><<<(unsigned)n_items, LCT__ENC_THREADS, smem, stream>>>(p);
    LCT__LAUNCH_CHECK();
    return 0;
  }

  template <int DT> int flush(lct__enc_params<LCT__BATCH> &p, uint64_t n_items) {
    if (!p.count) return 0;
    p.common = {ws, next_epoch()};
    ws += n_items;
    const int rc = lct__launch_narrowest(p, [&](const auto &q) { return launch<DT>(q, n_items); });
    p.count = 0;
    return rc;
  }

  template <int DT> int run() {
    lct__enc_params<LCT__BATCH> p;
    memset(&p, 0, sizeof p);
    uint64_t n_items = 0;
    for (size_t i = 0; i < count; i++) {
      const lct_cuda_encode_item *it = &items[i];
      if (it->dtype != dtype) continue;
      const uint64_t w = work_items(it->n_elems);
      if (p.count == LCT__BATCH || n_items + w > kMaxItemsPerLaunch) {
        int rc = flush<DT>(p, n_items);
        if (rc) return rc;
        n_items = 0;
      }
      lct__enc_tensor &t = p.t[p.count++];
      t.src = static_cast<const uint8_t *>(it->src);
      t.dst = static_cast<uint8_t *>(it->dst);
      t.cb = it->codebook ? it->codebook->dev : nullptr;
      t.n_elems = it->n_elems;
      t.blob_bytes = it->blob_bytes;
      t.code_bits = reinterpret_cast<unsigned long long *>(it->code_bits);
      t.hist = reinterpret_cast<unsigned long long *>(it->hist);
      t.begin = (uint32_t)n_items;
      t.aligned = ((uintptr_t)it->src & 15) == 0;
      n_items += w;
    }
    return flush<DT>(p, n_items);
  }
};

} // namespace

extern "C" size_t lct_cuda_encode_workspace_size(const lct_cuda_encode_item *items, size_t count) {
  /* A look-back slot per work item. */
  uint64_t slots = 0;
  for (size_t i = 0; i < count; i++) slots += work_items(items[i].n_elems);
  return (size_t)(slots * sizeof(lct__lb_slot));
}

extern "C" int lct_cuda_encode_batch(const lct_cuda_encode_item *items, size_t count, void *workspace,
                                     size_t workspace_bytes, cudaStream_t stream) {
  if (!count) return 0;
  if (!items || !workspace || ((uintptr_t)workspace & 15)) return LCT_EINVAL;
  for (size_t i = 0; i < count; i++) {
    int rc = check_item(&items[i]);
    if (rc) return rc;
  }
  const size_t need = lct_cuda_encode_workspace_size(items, count);
  if (workspace_bytes < need) return LCT_EBUFSIZE;
  encode_launch l = {items, count, 0, static_cast<lct__lb_slot *>(workspace), stream};
  for (int d = 0; d < LCT_DTYPE_COUNT; d++) {
    l.dtype = d;
    int rc = lct__dispatch(d, l);
    if (rc) return rc;
  }
  return 0;
}

extern "C" int lct_cuda_encode(int dtype, const lct_cuda_codebook *codebook, const void *src, uint64_t n_elems,
                               void *dst, size_t cap, uint64_t *blob_bytes, void *workspace, size_t workspace_bytes,
                               cudaStream_t stream) {
  const lct_cuda_encode_item it = {dtype, codebook, src, n_elems, dst, cap, blob_bytes, NULL, NULL};
  return lct_cuda_encode_batch(&it, 1, workspace, workspace_bytes, stream);
}
