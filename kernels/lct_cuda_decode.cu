/* lct_cuda_decode.cu — launch wrappers for the decoder: argument checks, workspace layout, per-dtype flattened grids. */
#include <string.h>

#include "lct_cuda_decode.cuh"

namespace {

constexpr uint64_t kMaxBlocksPerLaunch = 0x7fffffffu;
constexpr size_t kTableBytes = LCT__TABLE_BYTES;

int check_item(const lct_cuda_decode_item *it) {
  const size_t w = lct_dtype_size((lct_dtype)it->dtype);
  if (!w) return LCT_EDTYPE;
  if (it->n_elems > UINT64_MAX / 8 || lct_chunk_count(it->n_elems) >= kMaxBlocksPerLaunch) return LCT_E2BIG;
  if (!it->blob || ((uintptr_t)it->blob & 7)) return LCT_EINVAL;
  if ((it->n_elems && !it->dst) || ((uintptr_t)it->dst % w)) return LCT_EINVAL;
  if (!it->status || ((uintptr_t)it->status & 3)) return LCT_EINVAL;
  return 0;
}

/* Launches the blobs of one dtype in groups of at most LCT__BATCH: the header
 * kernel (one block per blob), then, as its programmatic dependent, the chunk
 * kernel (one or two units per chunk, a warp pair each, `pairs` units of one
 * blob per block). A lone blob goes with the one-blob parameters. */
struct decode_launch {
  const lct_cuda_decode_item *items;
  size_t count;
  int dtype;
  uint8_t *tables;
  int *status;
  unsigned *done;
  unsigned *version;
  cudaStream_t stream;
  unsigned pairs; /* units per block of the dtype's launches */
  bool few;       /* a launch of few units: every blob split (lct__part) */

  /* Sets the shared memory attributes of a chunk kernel, once per device. */
  template <int DT, unsigned N, bool FEW> static int chunk_attrs(int dev) {
    constexpr size_t smem = lct__dec_smem_bytes<DT>();
    if (!smem) return 0;
    /* past the default limit for some dtypes; shared memory over L1, for residency, for all */
    static std::atomic<uint64_t> attrs_set{0};
    return lct__smem_attrs((const void *)lct__decode_chunk_kernel<DT, N, FEW>, (int)smem, true, dev, attrs_set);
  }

  template <int DT, unsigned N, bool FEW> int launch_chunks(const lct__dec_params<N> &p, uint64_t n_blocks) {
    int dev;
    LCT__CUDA_TRY(cudaGetDevice(&dev));
    int rc = chunk_attrs<DT, N, FEW>(dev);
    if (rc) return rc;
    return lct__launch_dependent(lct__decode_chunk_kernel<DT, N, FEW>, (unsigned)n_blocks, pairs * 64,
                                 lct__dec_smem_bytes<DT>(pairs), stream, p);
  }

  template <int DT, unsigned N> int launch(const lct__dec_params<N> &p, uint64_t n_blocks) {
    lct__decode_header_kernel<DT, N><<<p.count, LCT__HDR_THREADS, 0, stream>>>(p);
    LCT__LAUNCH_CHECK();
    if (!n_blocks) return 0;
    return few ? launch_chunks<DT, N, true>(p, n_blocks) : launch_chunks<DT, N, false>(p, n_blocks);
  }

  /* A unit's decode takes as long as its lanes' chains of lookups, however
   * few units share its SM. Where the chunks' halves all fit on the GPU at
   * once, the launch splits every blob's version 2 chunks in two units
   * (lct__part), and spreads its units over every SM in smaller blocks
   * rather than filling a few SMs with full ones; a fuller launch decodes
   * chunks whole, as more units would only queue behind each other, but for
   * blobs whose halves all fit in one block (see run). */
  template <int DT> int pick_shape() {
    constexpr unsigned PAIRS = lct__dec_cfg<DT>::PAIRS;
    uint64_t chunks = 0;
    for (size_t i = 0; i < count; i++)
      if (items[i].dtype == dtype) chunks += lct_chunk_count(items[i].n_elems);
    few = false;
    pairs = PAIRS;
    if (!chunks) return 0;
    int dev, sms;
    LCT__CUDA_TRY(cudaGetDevice(&dev));
    LCT__CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    /* The few-unit kernel's blocks per SM, with the registers it takes: asked once per device. */
    static std::atomic<int> few_blocks[64];
    int blocks = dev < 64 ? few_blocks[dev].load(std::memory_order_relaxed) : 0;
    if (!blocks) {
      int rc = chunk_attrs<DT, LCT__BATCH, true>(dev);
      if (rc) return rc;
      LCT__CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &blocks, lct__decode_chunk_kernel<DT, LCT__BATCH, true>, PAIRS * 64, lct__dec_smem_bytes<DT>()));
      if (dev < 64) few_blocks[dev].store(blocks, std::memory_order_relaxed);
    }
    few = 2 * chunks <= (uint64_t)sms * blocks * PAIRS;
    const uint64_t units = (few ? 2 : 1) * chunks;
    while (pairs > (few ? 2u : 1u) && units < (uint64_t)pairs * sms) pairs /= 2;
    return 0;
  }

  template <int DT> int flush(lct__dec_params<LCT__BATCH> &p, uint64_t n_blocks) {
    if (!p.count) return 0;
    const int rc = lct__launch_narrowest(p, [&](const auto &q) { return launch<DT>(q, n_blocks); });
    p.count = 0;
    return rc;
  }

  template <int DT> int run() {
    int rc = pick_shape<DT>();
    if (rc) return rc;
    lct__dec_params<LCT__BATCH> p;
    memset(&p, 0, sizeof p);
    p.common = {tables, status, done, version};
    uint64_t n_blocks = 0;
    for (size_t i = 0; i < count; i++) {
      const lct_cuda_decode_item *it = &items[i];
      if (it->dtype != dtype) continue;
      /* A blob takes whole blocks: one of too few chunks to fill its block
       * whole is split, so that lanes of more than 256 elements hold the
       * block half as long. */
      const uint64_t chunks = lct_chunk_count(it->n_elems);
      const bool split = few || 2 * chunks <= pairs;
      const uint64_t blocks = ((split ? 2 : 1) * chunks + pairs - 1) / pairs;
      if (p.count == LCT__BATCH || n_blocks + blocks > kMaxBlocksPerLaunch) {
        rc = flush<DT>(p, n_blocks);
        if (rc) return rc;
        n_blocks = 0;
      }
      lct__dec_tensor &t = p.t[p.count++];
      t.blob = static_cast<const uint8_t *>(it->blob);
      t.blob_bytes = it->blob_bytes;
      t.dst = static_cast<uint8_t *>(it->dst);
      t.n_elems = it->n_elems;
      t.status = it->status;
      t.begin = (uint32_t)n_blocks;
      t.slot = (uint32_t)i;
      t.aligned = ((uintptr_t)it->dst & 15) == 0;
      t.split = split;
      n_blocks += blocks;
    }
    return flush<DT>(p, n_blocks);
  }
};

} // namespace

extern "C" size_t lct_cuda_decode_workspace_size(size_t count) {
  return count * (kTableBytes + sizeof(int) + 2 * sizeof(unsigned));
}

extern "C" int lct_cuda_decode_batch(const lct_cuda_decode_item *items, size_t count, void *workspace,
                                     size_t workspace_bytes, cudaStream_t stream) {
  if (!count) return 0;
  if (!items || !workspace || ((uintptr_t)workspace & 15)) return LCT_EINVAL;
  for (size_t i = 0; i < count; i++) {
    int rc = check_item(&items[i]);
    if (rc) return rc;
  }
  if (workspace_bytes < lct_cuda_decode_workspace_size(count)) return LCT_EBUFSIZE;
  uint8_t *ws = static_cast<uint8_t *>(workspace);
  int *status = reinterpret_cast<int *>(ws + count * kTableBytes);
  unsigned *done = reinterpret_cast<unsigned *>(status + count);
  decode_launch l = {items, count, 0, ws, status, done, done + count, stream, 2, true};
  for (int d = 0; d < LCT_DTYPE_COUNT; d++) {
    l.dtype = d;
    int rc = lct__dispatch(d, l);
    if (rc) return rc;
  }
  return 0;
}

extern "C" int lct_cuda_decode(int dtype, uint64_t n_elems, const void *blob, size_t blob_bytes, void *dst,
                               int *status, void *workspace, size_t workspace_bytes, cudaStream_t stream) {
  const lct_cuda_decode_item it = {dtype, n_elems, blob, blob_bytes, dst, status};
  return lct_cuda_decode_batch(&it, 1, workspace, workspace_bytes, stream);
}
