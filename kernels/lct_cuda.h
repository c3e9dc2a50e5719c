/* lct_cuda.h — the LCT GPU codec: device codebooks, symbol histograms, batched stream-ordered encode and decode. */
#ifndef LCT_CUDA_H
#define LCT_CUDA_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "lct_codec.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Conventions of every function below.
 * - Returns 0 or a negative LCT error code (lct_error.h): LCT_EINVAL for bad
 *   arguments, LCT_EBUFSIZE for a too-small workspace or output, LCT_ECUDA when
 *   a CUDA call or a kernel launch fails.
 * - "device" pointers are addresses in the current device's global memory
 *   (cudaMalloc or a pool carved from it); "pinned" means page-locked host
 *   memory (cudaMallocHost / cudaHostAlloc), which kernels can write.
 * - Encode, decode and histogram only enqueue work on `stream` and return: they
 *   neither allocate nor synchronize, and results are valid once the stream
 *   reaches that point. The workspace (CUB's temp-storage convention: the caller
 *   asks for its size, then passes a device buffer at least that large, 256-byte
 *   aligned) must not be used by other work until then.
 * - Sizes are in bytes unless named n_elems (elements of the dtype). */

/* A codebook resident in device memory (about 5 KiB): the encoder's per-symbol
 * bit patterns and the serialized bytes that go into each blob's header. */
typedef struct lct_cuda_codebook lct_cuda_codebook;

/* Uploads a host codebook (from lct_codebook_build or lct_codebook_parse) to
 * the current device. Allocates and synchronizes: call it once per codebook,
 * not per encode. */
LCT_API int lct_cuda_codebook_create(const lct_codebook *cb, lct_cuda_codebook **out);
/* Replaces the contents of an existing device codebook with cb (any dtype),
 * ordered on stream after the work already queued there: encodes queued
 * before it use the old codebook, later ones the new. Allocates nothing, and
 * does not wait for the stream: the upload leaves from the codebook's own
 * pinned buffer (it waits only for its previous upload to have left it). */
LCT_API int lct_cuda_codebook_set(lct_cuda_codebook *dcb, const lct_codebook *cb, cudaStream_t stream);
/* Frees a device codebook; NULL is a no-op. No encode using it may be pending. */
LCT_API void lct_cuda_codebook_destroy(lct_cuda_codebook *cb);
/* The dtype the codebook was built for. */
LCT_API int lct_cuda_codebook_dtype(const lct_cuda_codebook *cb);

/* Adds the sign+exponent symbol counts of n_elems elements to hist.
 *   src   device, n_elems elements of dtype, aligned to the element size
 *         (16-byte alignment takes the vectorized path)
 *   hist  device, 2^s uint64_t counters (s = lct_dtype_symbol_bits(dtype)),
 *         8-byte aligned; the caller zeroes them (cudaMemsetAsync)
 * The counts equal lct_histogram's on the same data, so lct_codebook_build on
 * them gives the CPU's codebook bit for bit. LCT_EINVAL for dtype raw. */
LCT_API int lct_cuda_histogram(int dtype, const void *src, uint64_t n_elems, uint64_t *hist, cudaStream_t stream);

/* Histogram on the device, then lct_codebook_build on the host: the codebook
 * lct_codebook_from_data would build from the same elements. hist is device
 * scratch of 2^s uint64_t. Synchronizes `stream` (a build, not the hot path). */
LCT_API int lct_cuda_codebook_from_device(int dtype, const void *src, uint64_t n_elems, uint64_t *hist,
                                  cudaStream_t stream, lct_codebook *cb);

/* One tensor to encode. */
typedef struct lct_cuda_encode_item {
  int dtype;                          /* lct_dtype */
  const lct_cuda_codebook *codebook;  /* of this dtype; NULL for raw. Not rebuilt: symbols it lacks escape */
  const void *src;                    /* device, n_elems elements, aligned to the element size (16 bytes: fast path) */
  uint64_t n_elems;                   /* elements */
  void *dst;                          /* device, 8-byte aligned, cap bytes; receives the blob (proto/FORMAT.md) */
  size_t cap;                         /* bytes at dst, >= lct_encode_bound(dtype, n_elems) */
  uint64_t *blob_bytes;               /* device or pinned: receives the blob's size in bytes, 8-byte aligned */
  uint64_t *code_bits;                /* device (or pinned: slow, an atomic per chunk crosses the bus), 8-byte
                                         aligned, or NULL: the kernel adds the item's code bits as
                                         lct_encode_stats.code_bits counts them (the caller zeroes it) */
  uint64_t *hist;                     /* device, 8-byte aligned, 2^s counters, or NULL: the kernel adds the
                                         item's symbol counts as lct_cuda_histogram does (the caller zeroes
                                         them), in the same pass: what a codebook rebuild needs */
} lct_cuda_encode_item;

/* Workspace bytes for encoding these items in one call (16 bytes per chunk).
 * Its contents need no clearing: each launch tags what it writes there. */
LCT_API size_t lct_cuda_encode_workspace_size(const lct_cuda_encode_item *items, size_t count);

/* Encodes count tensors with their precomputed codebooks: the blobs are byte
 * for byte those lct_encode writes with the same codebooks. items is a host
 * array (read before return). All tensors' chunks run in one flattened grid
 * per dtype (at most 256 tensors per launch), so hundreds of small tensors cost
 * a few launches, not hundreds. workspace: device, workspace_bytes >=
 * lct_cuda_encode_workspace_size(items, count). */
LCT_API int lct_cuda_encode_batch(const lct_cuda_encode_item *items, size_t count, void *workspace, size_t workspace_bytes,
                          cudaStream_t stream);

/* One tensor: lct_cuda_encode_batch with a single item (code_bits and hist NULL). */
LCT_API int lct_cuda_encode(int dtype, const lct_cuda_codebook *codebook, const void *src, uint64_t n_elems, void *dst,
                    size_t cap, uint64_t *blob_bytes, void *workspace, size_t workspace_bytes, cudaStream_t stream);

/* One blob to decode; dtype and n_elems are what the caller expects (from its
 * metadata) and must match the blob's header. */
typedef struct lct_cuda_decode_item {
  int dtype;             /* lct_dtype expected */
  uint64_t n_elems;      /* elements expected */
  const void *blob;      /* device, 8-byte aligned */
  size_t blob_bytes;     /* bytes of the blob (the blob_size recorded at encode) */
  void *dst;             /* device, n_elems * lct_dtype_size(dtype) bytes, aligned to the element size
                            (16 bytes: vectorized stores), overlapping no blob of the call (where it
                            does, the blobs it overlaps may fail; the call still ends) */
  int *status;           /* device or pinned, 4-byte aligned: receives 0, or LCT_ECORRUPT, LCT_EVERSION,
                            LCT_ECHECKSUM for a blob that fails any check of proto/FORMAT.md "Conformance" */
} lct_cuda_decode_item;

/* Workspace bytes for decoding count blobs in one call (8 KiB and a few bytes per blob). */
LCT_API size_t lct_cuda_decode_workspace_size(size_t count);

/* Decodes count blobs, in two kernels per dtype: one that checks each header
 * and codebook and builds its decode table, and the chunk decoder, launched as
 * its programmatic dependent (it starts reading chunks while the tables are
 * built). Every length and offset read from a blob is checked on
 * the device; a corrupt blob gets an error in its status word (its dst contents
 * are then unspecified) and never causes a read outside [blob, blob + blob_bytes)
 * or a write outside dst's n_elems elements. The return value reports argument
 * and CUDA errors only. items is a host array (read before return).
 * workspace: device, workspace_bytes >= lct_cuda_decode_workspace_size(count). */
LCT_API int lct_cuda_decode_batch(const lct_cuda_decode_item *items, size_t count, void *workspace, size_t workspace_bytes,
                          cudaStream_t stream);

/* One blob: lct_cuda_decode_batch with a single item. */
LCT_API int lct_cuda_decode(int dtype, uint64_t n_elems, const void *blob, size_t blob_bytes, void *dst, int *status,
                    void *workspace, size_t workspace_bytes, cudaStream_t stream);

/* One range of device memory to checksum. */
typedef struct lct_cuda_crc_item {
  const void *src; /* device, bytes bytes, any alignment (NULL only when bytes is 0) */
  uint64_t bytes;  /* at most 2^40 (LCT_E2BIG): piece and row counts are 32-bit */
  uint32_t *crc;   /* device or pinned, 4-byte aligned: receives the CRC-32C (0 for 0 bytes) */
} lct_cuda_crc_item;

/* Workspace bytes for lct_cuda_crc32c over bytes bytes: 4 per 64 KiB of
 * bytes + 15, rounded up (0 for 0 bytes). */
LCT_API size_t lct_cuda_crc32c_workspace_size(uint64_t bytes);

/* Workspace bytes for lct_cuda_crc32c_batch over these items: the sum of
 * their lct_cuda_crc32c_workspace_size. */
LCT_API size_t lct_cuda_crc32c_batch_workspace_size(const lct_cuda_crc_item *items, size_t count);

/* CRC-32C (proto/lct_checksum.h: the value lct_crc32c(0, ...) returns) of
 * each item's bytes into its *crc. items is a host array (read before
 * return). At most two launches per 512 items, whatever their sizes; the
 * kernel takes 132 KiB of shared memory per block. workspace: device, 4-byte
 * aligned, workspace_bytes >= lct_cuda_crc32c_batch_workspace_size(items,
 * count) (NULL when that is 0). */
LCT_API int lct_cuda_crc32c_batch(const lct_cuda_crc_item *items, size_t count, void *workspace, size_t workspace_bytes,
                          cudaStream_t stream);

/* One range: lct_cuda_crc32c_batch with a single item. workspace_bytes >=
 * lct_cuda_crc32c_workspace_size(bytes). */
LCT_API int lct_cuda_crc32c(const void *src, uint64_t bytes, uint32_t *crc, void *workspace, size_t workspace_bytes,
                    cudaStream_t stream);

/* The GPU codec's structures, for bindings that lay them out themselves. */
typedef enum lct_cuda_struct {
  LCT_CUDA_STRUCT_ENCODE_ITEM,
  LCT_CUDA_STRUCT_DECODE_ITEM,
  LCT_CUDA_STRUCT_CRC_ITEM,
} lct_cuda_struct;
/* sizeof the structure named; 0 for an unknown name. */
LCT_API size_t lct_cuda_struct_size(lct_cuda_struct which);

#ifdef __cplusplus
}
#endif
#endif
