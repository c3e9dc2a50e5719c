/* backend.h — where coded tensors live and how they are coded: the interface a cpu or cuda backend implements. */
#ifndef LCT_SERVER_BACKEND_H
#define LCT_SERVER_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "lct_codec.h"
#include "lct_error.h"

/* One segment of a device batch (PUT_DEVICE_MANY, GET_DEVICE_MANY). */
typedef struct lct__batch_seg {
  int dtype;
  uint64_t n;                 /* elements */
  const lct_codebook *cb;     /* encode: NULL for the raw dtype */
  uint64_t codebook_id;       /* encode: cb's lct__entry.codebook_id, the device codebook cache's key */
  const uint8_t *src;         /* encode: the raw bytes; decode: the blob */
  size_t src_bytes;           /* decode: blob bytes */
  uint8_t *dst;               /* encode: blob memory; decode: where the raw bytes go */
  size_t cap;                 /* encode: bytes at dst, at least lct_encode_bound */
  /* results */
  int rc;
  uint64_t blob_bytes;        /* encode */
  uint64_t code_bits;         /* encode: as lct_encode_stats.code_bits */
  uint32_t crc;               /* encode: CRC-32C of the raw bytes */
  uint64_t *hist;             /* hist_batch, encode_batch: host counters (2^s) the segment's symbol counts
                                 are added to (consecutive segments of one tensor share them), or NULL */
} lct__batch_seg;

/* A backend owns blob memory (host memory for cpu; for cuda an address range
 * reserved at start, with device memory mapped in granules as blobs need it
 * and unmapped as they go: granules.h) and runs the codec between caller
 * host buffers and that memory. alloc/shrink/release/held run on the loop
 * thread only, and a release or shrink may unmap at once: every codec call
 * has finished with the blobs it was handed when it returns. The codec
 * runs on lctd's codec workers (workers.h), several at once: each call names
 * its worker (0..workers-1, as the backend was opened for), whose state it
 * may use without a lock. Capacity accounting is the pool's (server/pool.c),
 * not the backend's. */
typedef struct lct__backend_ops {
  const char *name;
  /* 1: encode, decode, read and write keep no per-worker state and wait on
   * no device, so lctd may run small ones on its loop thread (worker
   * LCT__LOOP_WORKER) rather than pay a hand-off to a worker and back. */
  int loop_codec;
  /* Blob memory of at least bytes; LCT_ENOMEM (host memory, or the device's
   * when it has none left to map) or LCT_ENOSPC (the range is fragmented)
   * on failure. */
  int (*alloc)(void *ctx, size_t bytes, void **out);
  /* Gives back the tail of a blob after encoding; may move it (*out), its
   * bytes there once settle returns, which the caller runs before anything
   * reads the blob. On failure the blob stays valid at its old size. */
  int (*shrink)(void *ctx, void *blob, size_t old_bytes, size_t new_bytes, void **out);
  /* Waits for the moves of the shrinks before it; NULL where shrinks never move (cpu). */
  void (*settle)(void *ctx);
  void (*release)(void *ctx, void *blob, size_t bytes);
  /* Bytes of memory blob memory holds now (cuda: the mapped granules, blobs
   * plus bounded slack); NULL where that is what is allocated (cpu). */
  uint64_t (*held)(void *ctx);
  /* Encodes n elements from host memory src into blob memory dst (cap bytes,
   * at least lct_encode_bound). cb is NULL for the raw dtype. Fills
   * stats->blob_bytes and stats->code_bits, what drift detection compares
   * with the codebook's expected_bits_per_elem (the GPU encoder counts them
   * as lct_encode does; escapes are left 0). */
  int (*encode)(void *ctx, int worker, int dtype, const lct_codebook *cb, const void *src, uint64_t n,
                void *dst, size_t cap, lct_encode_stats *stats);
  /* Decodes a blob of len bytes in blob memory, expected to hold n elements
   * of dtype, into host memory dst (n * dtype size bytes). */
  int (*decode)(void *ctx, int worker, int dtype, uint64_t n, const void *blob, size_t len, void *dst);
  void (*destroy)(void *ctx);
  /* Copies len bytes of blob memory to host memory dst (a save's writer
   * thread), and host memory src into blob memory (the restore at start). */
  int (*read)(void *ctx, const void *blob, size_t len, void *dst);
  int (*write)(void *ctx, const void *src, size_t len, void *blob);
  /* 1, with why, once the backend's device can no longer be trusted (a
   * sticky CUDA error: an illegal address, an uncorrectable ECC error, ...):
   * from then on every call fails and only a new process recovers; 0 while
   * it works. NULL in a backend that has no device to lose (cpu). Any thread. */
  int (*fault)(void *ctx, char *why, size_t cap);
  /* ---- the device path: NULL in a backend without one (cpu) ----
   * Maps a client's GPU allocation by its CUDA IPC handle
   * (LCT_IPC_HANDLE_BYTES), from a bounded cache of open handles keyed by
   * the handle's bytes: *base and *size are the allocation as mapped here,
   * *opened is 1 when this call opened it (a cache miss). LCT_ENOIPC if the
   * handle cannot be opened (or every cached mapping is in use). Each map is
   * paired with an unmap of the same base; a mapping in use is never closed.
   * Loop thread. */
  int (*ipc_map)(void *ctx, const uint8_t *handle, uint8_t **base, uint64_t *size, int *opened);
  void (*ipc_unmap)(void *ctx, const uint8_t *base);
  /* Closes the cached mappings no request has used for idle_ms (UINT64_MAX:
   * none) and returns the bytes still mapped. While lctd maps a client's
   * allocation, memory the client frees stays allocated on the GPU: this is
   * what gives it back. Loop thread. */
  uint64_t (*ipc_trim)(void *ctx, uint64_t idle_ms);
  /* 1 when the GPU of gpu_uuid (LCT_GPU_UUID_BYTES) is another one of this
   * host that the backend's device reaches by peer access (NVLink or PCIe):
   * ipc_map then maps its allocations with peer access enabled, and the
   * batches below read and write them in place; 0 otherwise. Loop thread. */
  int (*peer)(void *ctx, const uint8_t *gpu_uuid);
  /* Device puts and gets (server/device_batch.c): many segments in one pass
   * of the GPU codec (a few launches and one wait per group, whatever their
   * number) straight from and into mapped client buffers, aligned to the
   * element size; hist_batch, and encode_batch in the same pass, add the
   * symbol counts of the segments that have a hist to it.
   * Worker thread; returns an argument or CUDA error, per-segment failures in
   * their rc. A decode_batch may run while an encode_batch or hist_batch
   * does (a trainer's fetch beside its store). */
  int (*encode_batch)(void *ctx, int worker, lct__batch_seg *segs, size_t n);
  int (*decode_batch)(void *ctx, int worker, lct__batch_seg *segs, size_t n);
  int (*hist_batch)(void *ctx, int worker, lct__batch_seg *segs, size_t n);
} lct__backend_ops;

typedef struct lct__backend {
  const lct__backend_ops *ops;
  void *ctx;
  uint64_t capacity; /* bytes the backend can hold; the pool's default capacity */
  uint8_t gpu_uuid[16]; /* the GPU of the device path (cudaDeviceProp.uuid); zero without one */
} lct__backend;

/* Host memory and the CPU reference codec; always available. memory 0 picks
 * half of the host's physical memory. */
int lct__backend_cpu_open(uint64_t memory, lct__backend *out);

#ifdef LCT_HAVE_CUDA
/* Whether a CUDA device is usable (for --backend auto). */
int lct__backend_cuda_present(void);
/* GPU memory of one device, up to memory bytes (0: 90% of what is free after
 * the workers' buffers; at most the device's total): an address range
 * reserved once, device memory mapped in granules as blobs need it, and
 * empty granules beyond slack bytes unmapped (granules.h); the GPU codec
 * (kernels/lct_cuda.h). Each of the workers codec workers gets a stream and
 * device buffers for segments of up to segment_max raw bytes, and with
 * pinned_staging a ring of pinned pieces that host puts' and gets' bytes
 * cross the bus through (else the driver stages them). LCT_ENODEV, LCT_ENOMEM or
 * LCT_ECUDA on failure. */
int lct__backend_cuda_open(int device, uint64_t memory, uint64_t slack, int workers, uint64_t segment_max,
                           int pinned_staging, lct__backend *out);
#endif

#endif
