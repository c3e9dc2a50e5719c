/* backend_cuda.c — the cuda backend: device memory mapped in granules as blobs need it (granules.h), the GPU codec per worker stream, client buffers mapped by CUDA IPC. */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>
#include <stddef.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "granules.h"
#include "lct_cuda.h"
#include "lct_wire.h"
#include "log.h"

#define LCT__CUDA_ALIGN 256 /* blob offsets: the GPU codec needs 8, 256 keeps them cache-line clean */
#define LCT__CUDA_SYMS (LCT_MAX_SYMS - 1) /* histogram counters: 2^s for the widest dtype */
#define LCT__IPC_CACHE 64 /* client allocations kept mapped; the least recently used idle one is closed */
#define LCT__PEERS 64     /* other GPUs of the host whose peer access is known */
#define LCT__BATCH_GROUP 1024 /* segments of a device batch per launch group (one wait each) */
#define LCT__BATCH_CODEBOOKS 2048 /* device codebooks kept for batches, direct-mapped by codebook id */
#define LCT__BATCH_ENCODE_WORK (8u << 20) /* encode workspace of a group: 16 bytes per chunk */
#define LCT__BATCH_HISTS 256 /* tensors whose histograms one wait of a batch collects */
#define LCT__BATCH_CRC_WORK (1u << 20) /* CRC workspace of a group: 4 bytes per 32 KiB or more */
#define LCT__STAGE_PIECE (256u << 10) /* a host put's or get's bytes cross to the GPU in pieces of this size */
#define LCT__STAGE_SLOTS 16 /* pieces of a worker's pinned ring, at most (4 MiB); fewer for smaller segments */

/* What one codec worker uses for host puts and gets, created at open so
 * that nothing on the request path allocates: a stream, device memory for one
 * segment's raw bytes, codec workspace, words for results, and (pinned
 * staging) a ring of pinned pieces that a segment's raw bytes cross the bus
 * through: the worker copies one piece between the request's message and
 * pinned memory while the DMA engine moves the others. A ring that holds
 * the whole segment never makes the worker wait for a DMA before its copy. */
typedef struct lct__cuda_worker {
  cudaStream_t stream;
  void *raw;         /* device, segment_max bytes */
  void *work;        /* device workspace */
  size_t work_bytes;
  uint64_t *bits;    /* device: the code bits the encoder adds up (device atomics, not a bus crossing each) */
  uint64_t *pinned;  /* pinned host: [0] blob bytes, [1] decode status, [2] code bits */
  char *stage;       /* pinned host, slots pieces of LCT__STAGE_PIECE; NULL: the driver stages pageable copies */
  int slots;
  cudaEvent_t staged[LCT__STAGE_SLOTS]; /* the last DMA to or from piece i of the ring */
  lct_cuda_codebook *dcb; /* device copy of the codebook last used, and its source */
  lct_codebook hcb;
} lct__cuda_worker;

/* What device puts (server/device_batch.c) use: one batch at a time, since
 * each fills the GPU. Codebooks stay on the device between batches, keyed by
 * codebook id, so that a training step's puts upload none. */
typedef struct lct__cuda_batch {
  pthread_mutex_t lock;
  cudaStream_t stream;
  void *work;        /* device: encode workspace of a group */
  size_t work_bytes;
  void *crc_work;    /* device */
  size_t crc_work_bytes;
  uint64_t *pinned;  /* pinned host, per group slot: blob bytes, code bits, CRC */
  uint64_t *bits;    /* device: per group slot, the code bits the encoder adds up (device atomics:
                        to pinned memory each would cross the bus) */
  uint64_t *hist;    /* device: LCT__BATCH_HISTS histograms of LCT__CUDA_SYMS counters */
  uint64_t *hist_pinned; /* pinned host: their copy */
  uint64_t *hist_of[LCT__BATCH_HISTS]; /* per slot of the group: the host counters it adds to */
  size_t hist_len[LCT__BATCH_HISTS];   /* and how many (2^s) */
  lct_cuda_codebook *dcb[LCT__BATCH_CODEBOOKS];
  uint64_t dcb_id[LCT__BATCH_CODEBOOKS];    /* the codebook id each holds; 0: none yet */
  uint64_t dcb_group[LCT__BATCH_CODEBOOKS]; /* the last group that used each */
  uint64_t groups;
  lct_cuda_encode_item enc[LCT__BATCH_GROUP];
  lct_cuda_crc_item crc[LCT__BATCH_GROUP];
} lct__cuda_batch;

/* What device gets use, beside the puts' (a get and a put of a trainer's
 * pipeline run at once, each one batch at a time): a stream of the highest
 * priority, since the trainer waits for its gets while its puts run behind. */
typedef struct lct__cuda_gets {
  pthread_mutex_t lock;
  cudaStream_t stream;
  void *work;        /* device: decode workspace of a group */
  size_t work_bytes;
  int *status;       /* pinned host: per group slot, the decode status */
  lct_cuda_decode_item dec[LCT__BATCH_GROUP];
} lct__cuda_gets;

/* A client's GPU allocation opened from its IPC handle. */
typedef struct lct__ipc_map {
  uint8_t handle[LCT_IPC_HANDLE_BYTES];
  uint8_t *base; /* NULL: a free slot */
  uint64_t size;
  int refs;         /* requests using it: never closed while nonzero */
  uint64_t used;    /* tick of the last map, for eviction */
  uint64_t idle_ms; /* monotonic time its last request ended (ipc_trim) */
} lct__ipc_map;

/* The driver calls lctd makes, found through the runtime
 * (cudaGetDriverEntryPointByVersion) so that lctd does not link libcuda and
 * still starts where no driver is: sizing a client's allocation, and the
 * virtual memory management under the pool. */
typedef struct lct__cu {
  PFN_cuMemGetAddressRange_v3020 mem_range;
  PFN_cuMemAddressReserve_v10020 address_reserve;
  PFN_cuMemAddressFree_v10020 address_free;
  PFN_cuMemGetAllocationGranularity_v10020 granularity;
  PFN_cuMemCreate_v10020 create;
  PFN_cuMemRelease_v10020 release;
  PFN_cuMemMap_v10020 map;
  PFN_cuMemSetAccess_v10020 set_access;
  PFN_cuMemUnmap_v10020 unmap;
} lct__cu;

static const struct {
  const char *name;
  size_t offset;
} lct__cu_names[] = {
    {"cuMemGetAddressRange", offsetof(lct__cu, mem_range)},
    {"cuMemAddressReserve", offsetof(lct__cu, address_reserve)},
    {"cuMemAddressFree", offsetof(lct__cu, address_free)},
    {"cuMemGetAllocationGranularity", offsetof(lct__cu, granularity)},
    {"cuMemCreate", offsetof(lct__cu, create)},
    {"cuMemRelease", offsetof(lct__cu, release)},
    {"cuMemMap", offsetof(lct__cu, map)},
    {"cuMemSetAccess", offsetof(lct__cu, set_access)},
    {"cuMemUnmap", offsetof(lct__cu, unmap)},
};

/* Another GPU of the host, and whether the backend's device reaches its memory by peer access. */
typedef struct lct__cuda_peer {
  uint8_t uuid[16];
  int reachable;
} lct__cuda_peer;

typedef struct lct__cuda {
  int device;
  lct__cu cu;
  lct__cuda_peer peers[LCT__PEERS]; /* the other GPUs visible here, found at open */
  int n_peers;
  lct__ipc_map ipc[LCT__IPC_CACHE]; /* loop thread only */
  uint64_t ipc_tick;
  CUdeviceptr va;     /* the pool's address range, reserved once: capacity rounded up to granules */
  uint64_t va_bytes;
  CUmemAllocationProp prop;  /* a granule: pinned memory of the device */
  CUmemAccessDesc access;    /* read and write by the device */
  lct__granules pool;        /* placement and mapping over va (loop thread) */
  cudaStream_t moves;        /* copies of blobs a shrink moved */
  lct__range *moved;         /* the ranges they left, given back at the settle */
  size_t n_moved, cap_moved;
  uint64_t capacity;
  uint64_t segment_max;
  lct__cuda_batch *batch;
  lct__cuda_gets *gets;
  int n_workers;
  lct__cuda_worker workers[];
} lct__cuda;

/* Errors after which this process's CUDA context cannot be trusted: the
 * sticky ones, after which the runtime fails every later call with the same
 * error ("the process must be terminated and relaunched", driver_types.h),
 * and hardware faults whose data was not corrected. */
static int lct__cuda_sticky(cudaError_t e) {
  switch (e) {
  case cudaErrorIllegalAddress:
  case cudaErrorLaunchTimeout:
  case cudaErrorAssert:
  case cudaErrorHardwareStackError:
  case cudaErrorIllegalInstruction:
  case cudaErrorMisalignedAddress:
  case cudaErrorInvalidAddressSpace:
  case cudaErrorInvalidPc:
  case cudaErrorLaunchFailure:
  case cudaErrorTensorMemoryLeak:
  case cudaErrorContained:
  case cudaErrorExternalDevice:
  case cudaErrorMpsClientTerminated:
  case cudaErrorECCUncorrectable:
  case cudaErrorNvlinkUncorrectable:
  case cudaErrorUnknown:
    return 1;
  default:
    return 0;
  }
}

/* The first such error this process saw, 0 while none: the context is
 * per process, so one loss is every backend's. */
static _Atomic int lct__cuda_lost;

/* A failed CUDA call, logged with its text (the kernels' LCT__CUDA_TRY only
 * returns LCT_ECUDA: lctd's log is where an operator finds why). Once the
 * device is lost every call fails alike: only the first is worth a line. */
static int lct__cuda_fail(cudaError_t e, const char *what) {
  int none = 0;
  if (lct__cuda_sticky(e) && atomic_compare_exchange_strong(&lct__cuda_lost, &none, (int)e))
    lct__log_error("cuda: %s: %s (%s): the device is lost", what, cudaGetErrorString(e), cudaGetErrorName(e));
  else if (atomic_load(&lct__cuda_lost) != 0)
    lct__log_debug("cuda: %s: %s", what, cudaGetErrorString(e));
  else
    lct__log_error("cuda: %s: %s", what, cudaGetErrorString(e));
  return LCT_ECUDA;
}

/* rc of a kernel wrapper, whose LCT_ECUDA does not say which error: the
 * stream then tells whether the device is lost (a sticky error fails every
 * later call, this one too). */
static int lct__cuda_kernel_rc(int rc, cudaStream_t stream) {
  if (rc == LCT_ECUDA) {
    cudaError_t e = cudaStreamQuery(stream);
    if (lct__cuda_sticky(e))
      lct__cuda_fail(e, "a kernel launch");
  }
  return rc;
}
#define LCT__CUDA_LOGGED(call)               \
  do {                                       \
    cudaError_t e_ = (call);                 \
    if (e_ != cudaSuccess)                   \
      return lct__cuda_fail(e_, #call);      \
  } while (0)

int lct__backend_cuda_present(void) {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

/* ---- the pool's memory (loop thread only) ----------------------------------- */

/* A failed driver call, logged as lct__cuda_fail does: the runtime's error
 * codes are the driver's for every error that function tells apart. */
static int lct__cu_fail(CUresult r, const char *what) { return lct__cuda_fail((cudaError_t)r, what); }

/* granules.h's mapper: maps granules [first, first + count) of the range,
 * each a physical allocation of its own so that each can be unmapped alone;
 * the mapping keeps the memory, so the handle is released at once. */
static int lct__cuda_map(void *ctx, uint64_t first, uint64_t count) {
  lct__cuda *g = ctx;
  LCT__CUDA_LOGGED(cudaSetDevice(g->device));
  const size_t gran = (size_t)g->pool.granule;
  const CUdeviceptr at = g->va + first * gran;
  CUresult r = CUDA_SUCCESS;
  const char *what = NULL;
  uint64_t mapped = 0;
  for (; mapped < count; mapped++) {
    CUmemGenericAllocationHandle h;
    if ((r = g->cu.create(&h, gran, &g->prop, 0)) != CUDA_SUCCESS) {
      what = "cuMemCreate";
      break;
    }
    r = g->cu.map(at + mapped * gran, gran, 0, h, 0);
    CUresult released = g->cu.release(h);
    if (r != CUDA_SUCCESS) {
      what = "cuMemMap";
      break;
    }
    if (released != CUDA_SUCCESS) {
      r = released;
      what = "cuMemRelease";
      mapped++;
      break;
    }
  }
  if (r == CUDA_SUCCESS && (r = g->cu.set_access(at, count * gran, &g->access, 1)) != CUDA_SUCCESS)
    what = "cuMemSetAccess";
  if (r == CUDA_SUCCESS)
    return 0;
  for (uint64_t i = 0; i < mapped; i++) {
    CUresult u = g->cu.unmap(at + i * gran, gran);
    if (u != CUDA_SUCCESS)
      lct__cu_fail(u, "cuMemUnmap(after a failed map)");
  }
  if (r == CUDA_ERROR_OUT_OF_MEMORY) {
    lct__log_warn("cuda: device %d has no memory for %llu more MiB (the pool holds %llu MiB)", g->device,
                  (unsigned long long)(count * gran >> 20), (unsigned long long)(lct__granules_held(&g->pool) >> 20));
    return LCT_ENOMEM;
  }
  return lct__cu_fail(r, what);
}

static int lct__cuda_unmap(void *ctx, uint64_t granule) {
  lct__cuda *g = ctx;
  LCT__CUDA_LOGGED(cudaSetDevice(g->device));
  CUresult r = g->cu.unmap(g->va + granule * g->pool.granule, (size_t)g->pool.granule);
  return r == CUDA_SUCCESS ? 0 : lct__cu_fail(r, "cuMemUnmap");
}

/* The range bytes a blob of v bytes takes: aligned, and one unit for an empty one. */
static uint64_t lct__span(uint64_t v) {
  return v == 0 ? LCT__CUDA_ALIGN : (v + LCT__CUDA_ALIGN - 1) / LCT__CUDA_ALIGN * LCT__CUDA_ALIGN;
}

static uint64_t lct__offset(const lct__cuda *g, const void *blob) { return (uint64_t)(uintptr_t)blob - g->va; }

static int lct__cuda_alloc(void *ctx, size_t bytes, void **out) {
  lct__cuda *g = ctx;
  uint64_t off;
  int rc = lct__granules_take(&g->pool, lct__span(bytes), &off);
  if (rc != 0)
    return rc; /* LCT_ENOSPC: the pool's accounting had room, the range is fragmented; LCT_ENOMEM: the device is full */
  *out = (void *)(uintptr_t)(g->va + off);
  return 0;
}

/* A give of len bytes that failed leaves them, or a granule, held (an
 * unmap's failure is logged where it happens): nothing else to do. */
static void lct__cuda_gave(int rc, uint64_t len) {
  if (rc == LCT_ENOMEM)
    lct__log_error("cuda: out of host memory tracking a free range; %llu pool bytes are not placed again",
                   (unsigned long long)len);
}

static void lct__cuda_give(lct__cuda *g, uint64_t off, uint64_t len) {
  lct__cuda_gave(lct__granules_give(&g->pool, off, len), len);
}

/* Room for one more moved range; 0 or LCT_ENOMEM. */
static int lct__moved_room(lct__cuda *g) {
  if (g->n_moved < g->cap_moved)
    return 0;
  size_t cap = g->cap_moved ? 2 * g->cap_moved : 256;
  lct__range *grown = realloc(g->moved, cap * sizeof *grown);
  if (grown == NULL)
    return LCT_ENOMEM;
  g->moved = grown;
  g->cap_moved = cap;
  return 0;
}

/* In place, or moved where granules.h packs it better: the copy is queued on
 * the moves stream and the range it leaves is given back at the settle. */
static int lct__cuda_shrink(void *ctx, void *blob, size_t old_bytes, size_t new_bytes, void **out) {
  lct__cuda *g = ctx;
  uint64_t keep = lct__span(new_bytes), had = lct__span(old_bytes), off = lct__offset(g, blob), to;
  *out = blob;
  if (keep >= had)
    return 0;
  if (lct__moved_room(g) != 0) {
    lct__cuda_give(g, off + keep, had - keep);
    return 0;
  }
  int rc = lct__granules_shrink(&g->pool, off, had, keep, &to);
  if (to == off) {
    lct__cuda_gave(rc, had - keep);
    return 0;
  }
  cudaError_t e = cudaSetDevice(g->device);
  if (e == cudaSuccess)
    e = cudaMemcpyAsync((void *)(uintptr_t)(g->va + to), blob, new_bytes, cudaMemcpyDeviceToDevice, g->moves);
  if (e != cudaSuccess) {
    lct__cuda_fail(e, "cudaMemcpyAsync(a blob moved)");
    lct__cuda_give(g, to, keep);
    lct__cuda_give(g, off + keep, had - keep);
    return 0;
  }
  g->moved[g->n_moved++] = (lct__range){off, had};
  *out = (void *)(uintptr_t)(g->va + to);
  return 0;
}

static void lct__cuda_settle(void *ctx) {
  lct__cuda *g = ctx;
  if (g->n_moved == 0)
    return;
  cudaError_t e = cudaStreamSynchronize(g->moves);
  if (e != cudaSuccess)
    lct__cuda_fail(e, "cudaStreamSynchronize(blobs moved)");
  for (size_t i = 0; i < g->n_moved; i++)
    lct__cuda_give(g, g->moved[i].off, g->moved[i].len);
  g->n_moved = 0;
}

static void lct__cuda_release(void *ctx, void *blob, size_t bytes) {
  lct__cuda *g = ctx;
  lct__cuda_give(g, lct__offset(g, blob), lct__span(bytes));
}

static uint64_t lct__cuda_held(void *ctx) { return lct__granules_held(&((lct__cuda *)ctx)->pool); }

/* ---- codec on worker threads ------------------------------------------------ */

/* Points the worker's device codebook at cb; an upload only when it changed. */
static int lct__cuda_codebook(lct__cuda_worker *w, const lct_codebook *cb) {
  if (w->hcb.dtype == cb->dtype && memcmp(w->hcb.len, cb->len, sizeof cb->len) == 0)
    return 0;
  int rc = lct_cuda_codebook_set(w->dcb, cb, w->stream);
  if (rc == 0)
    w->hcb = *cb;
  return rc;
}

/* The state of worker index, for n elements of dtype (at most segment_max bytes). */
static int lct__cuda_worker_for(lct__cuda *g, int index, int dtype, uint64_t n, lct__cuda_worker **w) {
  if (index < 0 || index >= g->n_workers)
    return LCT_EINVAL; /* more codec workers than the backend was opened for */
  *w = &g->workers[index];
  LCT__CUDA_LOGGED(cudaSetDevice(g->device));
  return n * lct_dtype_size(dtype) > g->segment_max ? LCT_E2BIG : 0;
}

/* The end of a codec call on stream: after a failure it waits for what the
 * call queued, so that no kernel still reads or writes blobs and client
 * buffers the caller releases next (a release may unmap a granule), and
 * notes a lost device. */
static int lct__queue_end(cudaStream_t stream, int rc) {
  if (rc != 0) {
    cudaError_t e = cudaStreamSynchronize(stream);
    if (lct__cuda_sticky(e))
      lct__cuda_fail(e, "cudaStreamSynchronize(after a failed call)");
    else if (e != cudaSuccess)
      cudaGetLastError(); /* the failure is already reported by rc */
  }
  return rc;
}

/* The bytes of the staging piece at off of a copy of bytes. */
static size_t lct__piece_len(size_t bytes, size_t off) {
  return bytes - off < LCT__STAGE_PIECE ? bytes - off : LCT__STAGE_PIECE;
}

/* Queues the copy of bytes from the host message src to dev on w's stream;
 * src may be reused once the call returns. */
static int lct__stage_in(lct__cuda_worker *w, void *dev, const void *src, size_t bytes) {
  if (w->stage == NULL) {
    LCT__CUDA_LOGGED(cudaMemcpyAsync(dev, src, bytes, cudaMemcpyHostToDevice, w->stream));
    return 0;
  }
  for (size_t off = 0, k = 0; off < bytes; off += LCT__STAGE_PIECE, k++) {
    size_t len = lct__piece_len(bytes, off), slot = k % (size_t)w->slots;
    char *piece = w->stage + slot * LCT__STAGE_PIECE;
    LCT__CUDA_LOGGED(cudaEventSynchronize(w->staged[slot])); /* the piece's last DMA has read it */
    memcpy(piece, (const char *)src + off, len);
    LCT__CUDA_LOGGED(cudaMemcpyAsync((char *)dev + off, piece, len, cudaMemcpyHostToDevice, w->stream));
    LCT__CUDA_LOGGED(cudaEventRecord(w->staged[slot], w->stream));
  }
  return 0;
}

/* Queues piece k of a download from dev into its slot of the ring. */
static int lct__stage_piece_out(lct__cuda_worker *w, const void *dev, size_t bytes, size_t k) {
  size_t off = k * LCT__STAGE_PIECE, len = lct__piece_len(bytes, off), slot = k % (size_t)w->slots;
  LCT__CUDA_LOGGED(cudaMemcpyAsync(w->stage + slot * LCT__STAGE_PIECE, (const char *)dev + off, len,
                                   cudaMemcpyDeviceToHost, w->stream));
  LCT__CUDA_LOGGED(cudaEventRecord(w->staged[slot], w->stream));
  return 0;
}

/* Copies bytes from dev, after what w's stream has queued, to the host
 * message dst; returns once dst holds them. */
static int lct__stage_out(lct__cuda_worker *w, void *dst, const void *dev, size_t bytes) {
  if (w->stage == NULL) {
    LCT__CUDA_LOGGED(cudaMemcpyAsync(dst, dev, bytes, cudaMemcpyDeviceToHost, w->stream));
    LCT__CUDA_LOGGED(cudaStreamSynchronize(w->stream));
    return 0;
  }
  size_t pieces = (bytes + LCT__STAGE_PIECE - 1) / LCT__STAGE_PIECE, slots = (size_t)w->slots;
  int rc = 0;
  for (size_t k = 0; k < pieces && k < slots && rc == 0; k++)
    rc = lct__stage_piece_out(w, dev, bytes, k);
  for (size_t k = 0; k < pieces && rc == 0; k++) {
    size_t off = k * LCT__STAGE_PIECE, len = lct__piece_len(bytes, off);
    LCT__CUDA_LOGGED(cudaEventSynchronize(w->staged[k % slots]));
    memcpy((char *)dst + off, w->stage + k % slots * LCT__STAGE_PIECE, len); /* while the next pieces land */
    if (k + slots < pieces)
      rc = lct__stage_piece_out(w, dev, bytes, k + slots);
  }
  return rc;
}

static int lct__worker_encode(lct__cuda_worker *w, int dtype, const lct_codebook *cb, const void *src, uint64_t n,
                              void *dst, size_t cap, lct_encode_stats *stats) {
  int rc;
  if (cb != NULL && (rc = lct__cuda_codebook(w, cb)) != 0)
    return lct__cuda_kernel_rc(rc, w->stream);
  if ((rc = lct__stage_in(w, w->raw, src, n * lct_dtype_size(dtype))) != 0)
    return rc;
  LCT__CUDA_LOGGED(cudaMemsetAsync(w->bits, 0, sizeof *w->bits, w->stream));
  lct_cuda_encode_item item = {dtype, cb != NULL ? w->dcb : NULL, w->raw, n, dst, cap, &w->pinned[0], w->bits, NULL};
  if ((rc = lct_cuda_encode_batch(&item, 1, w->work, w->work_bytes, w->stream)) != 0)
    return lct__cuda_kernel_rc(rc, w->stream);
  LCT__CUDA_LOGGED(cudaMemcpyAsync(&w->pinned[2], w->bits, sizeof *w->bits, cudaMemcpyDeviceToHost, w->stream));
  LCT__CUDA_LOGGED(cudaStreamSynchronize(w->stream));
  memset(stats, 0, sizeof *stats);
  stats->blob_bytes = w->pinned[0];
  stats->code_bits = w->pinned[2];
  return stats->blob_bytes <= cap ? 0 : LCT_ECUDA;
}

static int lct__cuda_encode(void *ctx, int worker, int dtype, const lct_codebook *cb, const void *src, uint64_t n,
                            void *dst, size_t cap, lct_encode_stats *stats) {
  lct__cuda_worker *w;
  int rc = lct__cuda_worker_for(ctx, worker, dtype, n, &w);
  return rc != 0 ? rc : lct__queue_end(w->stream, lct__worker_encode(w, dtype, cb, src, n, dst, cap, stats));
}

static int lct__worker_decode(lct__cuda_worker *w, int dtype, uint64_t n, const void *blob, size_t len, void *dst) {
  int rc;
  int *status = (int *)&w->pinned[1];
  if ((rc = lct_cuda_decode(dtype, n, blob, len, w->raw, status, w->work, w->work_bytes, w->stream)) != 0)
    return lct__cuda_kernel_rc(rc, w->stream);
  if ((rc = lct__stage_out(w, dst, w->raw, n * lct_dtype_size(dtype))) != 0)
    return rc;
  LCT__CUDA_LOGGED(cudaStreamSynchronize(w->stream));
  return *status;
}

static int lct__cuda_decode(void *ctx, int worker, int dtype, uint64_t n, const void *blob, size_t len, void *dst) {
  lct__cuda_worker *w;
  int rc = lct__cuda_worker_for(ctx, worker, dtype, n, &w);
  return rc != 0 ? rc : lct__queue_end(w->stream, lct__worker_decode(w, dtype, n, blob, len, dst));
}

/* ---- device batches ------------------------------------------------------------ */

/* The device codebook of seg for the current group: its cache slot, uploaded
 * on a miss. NULL when the slot already holds another codebook this group
 * uses (the group must end before seg). */
static int lct__batch_codebook(lct__cuda_batch *b, const lct__batch_seg *seg, lct_cuda_codebook **out) {
  size_t slot = (size_t)(seg->codebook_id % LCT__BATCH_CODEBOOKS);
  *out = NULL;
  if (b->dcb_id[slot] == seg->codebook_id) {
    b->dcb_group[slot] = b->groups;
    *out = b->dcb[slot];
    return 0;
  }
  if (b->dcb_group[slot] == b->groups)
    return 0; /* taken in this group */
  int rc = lct_cuda_codebook_set(b->dcb[slot], seg->cb, b->stream);
  b->dcb_id[slot] = rc == 0 ? seg->codebook_id : 0;
  if (rc != 0)
    return rc;
  b->dcb_group[slot] = b->groups;
  *out = b->dcb[slot];
  return 0;
}

/* Counts seg's histogram h into a group's slots (consecutive segments of a
 * tensor share one); 0 when it would need a slot past LCT__BATCH_HISTS. */
static int lct__hist_slot(const uint64_t **last, size_t *slots, const uint64_t *h) {
  if (h == NULL || h == *last)
    return 1;
  if (*slots == LCT__BATCH_HISTS)
    return 0;
  ++*slots;
  *last = h;
  return 1;
}

/* The device slot of a group's next segment seg, walking the group in order
 * (*slots: those taken so far, 0 at its start), each slot recording the host
 * counters it adds to; NULL when seg takes no histogram. */
static uint64_t *lct__hist_dev(lct__cuda_batch *b, const lct__batch_seg *seg, size_t *slots) {
  if (seg->hist == NULL)
    return NULL;
  if (*slots == 0 || b->hist_of[*slots - 1] != seg->hist) {
    b->hist_of[*slots] = seg->hist;
    b->hist_len[*slots] = (size_t)1 << lct_dtype_symbol_bits(seg->dtype);
    ++*slots;
  }
  return b->hist + (*slots - 1) * LCT__CUDA_SYMS;
}

/* The bytes of a group's first slots (0 when none). */
static size_t lct__hist_bytes(size_t slots) { return slots * LCT__CUDA_SYMS * sizeof(uint64_t); }

/* After the wait: adds the counts copied back into hist_pinned to the slots' host counters. */
static void lct__hist_add(lct__cuda_batch *b, size_t slots) {
  for (size_t s = 0; s < slots; s++)
    for (size_t j = 0; j < b->hist_len[s]; j++)
      b->hist_of[s][j] += b->hist_pinned[s * LCT__CUDA_SYMS + j];
}

/* First puts' histograms, before their codebooks exist: the histogram kernel. */
static int lct__batch_hist(lct__cuda_batch *b, lct__batch_seg *segs, size_t n) {
  for (size_t done = 0; done < n;) {
    size_t k = 0, slots = 0;
    const uint64_t *last = NULL;
    while (done + k < n && lct__hist_slot(&last, &slots, segs[done + k].hist))
      k++;
    const size_t bytes = lct__hist_bytes(slots);
    if (bytes > 0)
      LCT__CUDA_LOGGED(cudaMemsetAsync(b->hist, 0, bytes, b->stream));
    int rc = 0;
    slots = 0;
    for (size_t i = 0; i < k && rc == 0; i++) {
      const lct__batch_seg *sg = &segs[done + i];
      uint64_t *dev = lct__hist_dev(b, sg, &slots);
      if (dev != NULL && sg->n > 0)
        rc = lct_cuda_histogram(sg->dtype, sg->src, sg->n, dev, b->stream);
    }
    if (rc != 0)
      return rc;
    if (bytes > 0) {
      LCT__CUDA_LOGGED(cudaMemcpyAsync(b->hist_pinned, b->hist, bytes, cudaMemcpyDeviceToHost, b->stream));
      LCT__CUDA_LOGGED(cudaStreamSynchronize(b->stream));
      lct__hist_add(b, slots);
    }
    done += k;
  }
  return 0;
}

/* Encodes segs[0..k) (k <= LCT__BATCH_GROUP), a group whose codebooks are in
 * place and whose histograms fit its slots, and waits once; fills their
 * results, and their hists from the encoder's counts. */
static int lct__batch_encode_group(lct__cuda_batch *b, lct__batch_seg *segs, size_t k) {
  uint64_t *blob = b->pinned, *bits = b->pinned + LCT__BATCH_GROUP;
  uint32_t *crc = (uint32_t *)(b->pinned + 2 * LCT__BATCH_GROUP);
  size_t slots = 0;
  for (size_t i = 0; i < k; i++) {
    b->enc[i].blob_bytes = &blob[i];
    b->enc[i].code_bits = &b->bits[i];
    b->enc[i].hist = lct__hist_dev(b, &segs[i], &slots);
    b->crc[i] = (lct_cuda_crc_item){segs[i].src, segs[i].n * lct_dtype_size(segs[i].dtype), &crc[i]};
  }
  if (lct_cuda_crc32c_batch_workspace_size(b->crc, k) > b->crc_work_bytes ||
      lct_cuda_encode_workspace_size(b->enc, k) > b->work_bytes)
    return LCT_EBUFSIZE; /* the caller splits the group */
  const size_t hist_bytes = lct__hist_bytes(slots);
  if (hist_bytes > 0)
    LCT__CUDA_LOGGED(cudaMemsetAsync(b->hist, 0, hist_bytes, b->stream));
  int rc;
  if ((rc = lct_cuda_crc32c_batch(b->crc, k, b->crc_work, b->crc_work_bytes, b->stream)) != 0)
    return rc;
  LCT__CUDA_LOGGED(cudaMemsetAsync(b->bits, 0, k * sizeof *b->bits, b->stream));
  if ((rc = lct_cuda_encode_batch(b->enc, k, b->work, b->work_bytes, b->stream)) != 0)
    return rc;
  LCT__CUDA_LOGGED(cudaMemcpyAsync(bits, b->bits, k * sizeof *bits, cudaMemcpyDeviceToHost, b->stream));
  if (hist_bytes > 0)
    LCT__CUDA_LOGGED(cudaMemcpyAsync(b->hist_pinned, b->hist, hist_bytes, cudaMemcpyDeviceToHost, b->stream));
  LCT__CUDA_LOGGED(cudaStreamSynchronize(b->stream));
  for (size_t i = 0; i < k; i++) {
    segs[i].blob_bytes = blob[i];
    segs[i].code_bits = bits[i];
    segs[i].crc = crc[i];
    segs[i].rc = blob[i] <= segs[i].cap ? 0 : LCT_ECUDA;
  }
  lct__hist_add(b, slots);
  return 0;
}

static int lct__batch_encode(lct__cuda_batch *b, lct__batch_seg *segs, size_t n) {
  int rc = 0;
  for (size_t done = 0; done < n && rc == 0;) {
    b->groups++;
    size_t k = 0, slots = 0;
    const uint64_t *last = NULL;
    while (done + k < n && k < LCT__BATCH_GROUP && lct__hist_slot(&last, &slots, segs[done + k].hist)) {
      const lct__batch_seg *sg = &segs[done + k];
      lct_cuda_codebook *dcb = NULL;
      if (sg->cb != NULL) {
        if ((rc = lct__batch_codebook(b, sg, &dcb)) != 0)
          break;
        if (dcb == NULL)
          break; /* its cache slot serves an earlier segment of this group */
      }
      b->enc[k] = (lct_cuda_encode_item){sg->dtype, dcb, sg->src, sg->n, sg->dst, sg->cap, NULL, NULL, NULL};
      k++;
    }
    if (rc != 0)
      break;
    while ((rc = lct__batch_encode_group(b, segs + done, k)) == LCT_EBUFSIZE && k > 1)
      k /= 2; /* more chunks than the workspace holds: a smaller group */
    done += k;
  }
  return rc;
}

static int lct__batch_decode(lct__cuda_gets *d, lct__batch_seg *segs, size_t n) {
  int rc = 0;
  for (size_t done = 0; done < n && rc == 0;) {
    size_t k = n - done < LCT__BATCH_GROUP ? n - done : LCT__BATCH_GROUP;
    for (size_t i = 0; i < k; i++) {
      const lct__batch_seg *sg = &segs[done + i];
      d->dec[i] = (lct_cuda_decode_item){sg->dtype, sg->n, sg->src, sg->src_bytes, sg->dst, &d->status[i]};
    }
    if ((rc = lct_cuda_decode_batch(d->dec, k, d->work, d->work_bytes, d->stream)) != 0)
      break;
    cudaError_t e = cudaStreamSynchronize(d->stream);
    if (e != cudaSuccess) {
      rc = lct__cuda_fail(e, "cudaStreamSynchronize(batch decode)");
      break;
    }
    for (size_t i = 0; i < k; i++)
      segs[done + i].rc = d->status[i];
    done += k;
  }
  return rc;
}

/* The end of a pass that held lock (lct__queue_end, then the unlock). */
static int lct__pass_end(pthread_mutex_t *lock, cudaStream_t stream, int rc) {
  rc = lct__queue_end(stream, rc);
  pthread_mutex_unlock(lock);
  return rc;
}

/* Runs a put pass on the backend's device, one at a time (each fills the GPU). */
static int lct__batch_with(lct__cuda *g, lct__batch_seg *segs, size_t n,
                           int (*pass)(lct__cuda_batch *, lct__batch_seg *, size_t)) {
  LCT__CUDA_LOGGED(cudaSetDevice(g->device));
  lct__cuda_batch *b = g->batch;
  pthread_mutex_lock(&b->lock);
  return lct__pass_end(&b->lock, b->stream, pass(b, segs, n));
}

static int lct__cuda_encode_batch(void *ctx, int worker, lct__batch_seg *segs, size_t n) {
  return lct__batch_with(ctx, segs, n, lct__batch_encode);
}

static int lct__cuda_hist_batch(void *ctx, int worker, lct__batch_seg *segs, size_t n) {
  return lct__batch_with(ctx, segs, n, lct__batch_hist);
}

static int lct__cuda_decode_batch(void *ctx, int worker, lct__batch_seg *segs, size_t n) {
  lct__cuda *g = ctx;
  LCT__CUDA_LOGGED(cudaSetDevice(g->device));
  lct__cuda_gets *d = g->gets;
  pthread_mutex_lock(&d->lock);
  return lct__pass_end(&d->lock, d->stream, lct__batch_decode(d, segs, n));
}

static void lct__batch_close(lct__cuda_batch *b) {
  if (b == NULL)
    return;
  for (int i = 0; i < LCT__BATCH_CODEBOOKS; i++)
    lct_cuda_codebook_destroy(b->dcb[i]);
  cudaFree(b->work);
  cudaFree(b->crc_work);
  cudaFree(b->bits);
  cudaFree(b->hist);
  cudaFreeHost(b->hist_pinned);
  cudaFreeHost(b->pinned);
  if (b->stream != NULL)
    cudaStreamDestroy(b->stream);
  pthread_mutex_destroy(&b->lock);
  free(b);
}

/* A device codebook allocated once, holding a placeholder until its first
 * upload: requests only rewrite it. */
static int lct__device_codebook_new(lct_cuda_codebook **out) {
  uint64_t none[LCT_MAX_SYMS] = {0};
  lct_codebook placeholder;
  if (lct_codebook_build(LCT_DTYPE_BF16, none, &placeholder) != 0)
    return LCT_EINVAL;
  return lct_cuda_codebook_create(&placeholder, out);
}

static void lct__gets_close(lct__cuda_gets *d) {
  if (d == NULL)
    return;
  cudaFree(d->work);
  cudaFreeHost(d->status);
  if (d->stream != NULL)
    cudaStreamDestroy(d->stream);
  pthread_mutex_destroy(&d->lock);
  free(d);
}

static int lct__gets_open(lct__cuda_gets **out) {
  lct__cuda_gets *d = calloc(1, sizeof *d);
  if (d == NULL)
    return LCT_ENOMEM;
  pthread_mutex_init(&d->lock, NULL);
  *out = d;
  int least, greatest;
  LCT__CUDA_LOGGED(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  LCT__CUDA_LOGGED(cudaStreamCreateWithPriority(&d->stream, cudaStreamNonBlocking, greatest));
  d->work_bytes = lct_cuda_decode_workspace_size(LCT__BATCH_GROUP);
  LCT__CUDA_LOGGED(cudaMalloc(&d->work, d->work_bytes));
  LCT__CUDA_LOGGED(cudaMallocHost((void **)&d->status, LCT__BATCH_GROUP * sizeof *d->status));
  return 0;
}

static int lct__batch_open(lct__cuda_batch **out) {
  lct__cuda_batch *b = calloc(1, sizeof *b);
  if (b == NULL)
    return LCT_ENOMEM;
  pthread_mutex_init(&b->lock, NULL);
  *out = b;
  b->work_bytes = LCT__BATCH_ENCODE_WORK;
  b->crc_work_bytes = LCT__BATCH_CRC_WORK;
  LCT__CUDA_LOGGED(cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking));
  LCT__CUDA_LOGGED(cudaMalloc(&b->work, b->work_bytes));
  LCT__CUDA_LOGGED(cudaMalloc(&b->crc_work, b->crc_work_bytes));
  LCT__CUDA_LOGGED(cudaMallocHost((void **)&b->pinned, 3 * LCT__BATCH_GROUP * sizeof(uint64_t)));
  LCT__CUDA_LOGGED(cudaMalloc((void **)&b->bits, LCT__BATCH_GROUP * sizeof(uint64_t)));
  /* Every cached device codebook is allocated here (no codebook id is 0: none matches yet). */
  for (int i = 0; i < LCT__BATCH_CODEBOOKS; i++) {
    int rc = lct__device_codebook_new(&b->dcb[i]);
    if (rc != 0)
      return rc;
  }
  LCT__CUDA_LOGGED(cudaMalloc((void **)&b->hist, LCT__BATCH_HISTS * LCT__CUDA_SYMS * sizeof(uint64_t)));
  LCT__CUDA_LOGGED(cudaMallocHost((void **)&b->hist_pinned, LCT__BATCH_HISTS * LCT__CUDA_SYMS * sizeof(uint64_t)));
  return 0;
}

/* ---- client buffers by CUDA IPC (loop thread) ------------------------------- */

static int lct__cuda_ipc_map(void *ctx, const uint8_t *handle, uint8_t **base, uint64_t *size, int *opened) {
  lct__cuda *g = ctx;
  lct__ipc_map *slot = NULL;
  *opened = 0;
  for (int i = 0; i < LCT__IPC_CACHE; i++) {
    lct__ipc_map *m = &g->ipc[i];
    if (m->base != NULL && memcmp(m->handle, handle, LCT_IPC_HANDLE_BYTES) == 0) {
      m->refs++;
      m->used = ++g->ipc_tick;
      *base = m->base;
      *size = m->size;
      return 0;
    }
    /* A free slot, else the least recently used idle mapping. */
    if (m->refs == 0 && (slot == NULL || (slot->base != NULL && (m->base == NULL || m->used < slot->used))))
      slot = m;
  }
  if (slot == NULL) {
    lct__log_warn("cuda: all %d client mappings are in use; refusing another", LCT__IPC_CACHE);
    return LCT_ENOIPC;
  }
  LCT__CUDA_LOGGED(cudaSetDevice(g->device));
  if (slot->base != NULL) {
    LCT__CUDA_LOGGED(cudaIpcCloseMemHandle(slot->base));
    slot->base = NULL;
  }
  cudaIpcMemHandle_t h;
  memcpy(h.reserved, handle, LCT_IPC_HANDLE_BYTES);
  void *p;
  cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
  if (lct__cuda_sticky(e))
    return lct__cuda_fail(e, "cudaIpcOpenMemHandle");
  if (e != cudaSuccess) {
    cudaGetLastError(); /* not sticky: clear it so that it is not reported by a later call */
    lct__log_debug("cuda: cannot open a client's IPC handle: %s", cudaGetErrorString(e));
    return LCT_ENOIPC;
  }
  CUdeviceptr start;
  size_t len;
  CUresult cr = g->cu.mem_range(&start, &len, (CUdeviceptr)(uintptr_t)p);
  if (cr != CUDA_SUCCESS || start != (CUdeviceptr)(uintptr_t)p) {
    lct__log_error("cuda: cannot size a client's mapped allocation (driver error %d)", (int)cr);
    LCT__CUDA_LOGGED(cudaIpcCloseMemHandle(p));
    return LCT_ECUDA;
  }
  memcpy(slot->handle, handle, LCT_IPC_HANDLE_BYTES);
  slot->base = p;
  slot->size = len;
  slot->refs = 1;
  slot->used = ++g->ipc_tick;
  *base = slot->base;
  *size = slot->size;
  *opened = 1;
  return 0;
}

/* The other GPUs this process sees, and which of them the backend's device
 * reaches by peer access: a client's buffer there is mapped (IPC with
 * cudaIpcMemLazyEnablePeerAccess) and coded in place, with no host copy. */
static void lct__cuda_find_peers(lct__cuda *g, int count) {
  for (int d = 0; d < count && g->n_peers < LCT__PEERS; d++) {
    struct cudaDeviceProp prop;
    int can = 0;
    if (d == g->device)
      continue;
    if (cudaGetDeviceProperties(&prop, d) != cudaSuccess ||
        cudaDeviceCanAccessPeer(&can, g->device, d) != cudaSuccess) {
      cudaGetLastError(); /* not sticky: that GPU is simply not reachable */
      lct__log_warn("cuda: cannot tell whether device %d reaches device %d by peer access", g->device, d);
      continue;
    }
    lct__cuda_peer *p = &g->peers[g->n_peers++];
    memcpy(p->uuid, prop.uuid.bytes, sizeof p->uuid);
    p->reachable = can;
    lct__log_info("cuda: device %d (%s): client buffers there are %s", d, prop.name,
                  can ? "reached by peer access" : "copied through host memory (no peer access)");
  }
}

static int lct__cuda_reaches(void *ctx, const uint8_t *gpu_uuid) {
  const lct__cuda *g = ctx;
  for (int i = 0; i < g->n_peers; i++)
    if (memcmp(g->peers[i].uuid, gpu_uuid, sizeof g->peers[i].uuid) == 0)
      return g->peers[i].reachable;
  return 0;
}

static uint64_t lct__monotonic_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void lct__cuda_ipc_unmap(void *ctx, const uint8_t *base) {
  lct__cuda *g = ctx;
  for (int i = 0; i < LCT__IPC_CACHE; i++) {
    if (g->ipc[i].base == base && g->ipc[i].refs > 0) {
      if (--g->ipc[i].refs == 0)
        g->ipc[i].idle_ms = lct__monotonic_ms();
      return;
    }
  }
}

static uint64_t lct__cuda_ipc_trim(void *ctx, uint64_t idle_ms) {
  lct__cuda *g = ctx;
  uint64_t now = lct__monotonic_ms(), mapped = 0;
  for (int i = 0; i < LCT__IPC_CACHE; i++) {
    lct__ipc_map *m = &g->ipc[i];
    if (m->base == NULL)
      continue;
    if (m->refs == 0 && idle_ms != UINT64_MAX && now - m->idle_ms >= idle_ms) {
      cudaError_t e = cudaSetDevice(g->device);
      if (e == cudaSuccess)
        e = cudaIpcCloseMemHandle(m->base);
      if (e == cudaSuccess) {
        m->base = NULL;
        continue;
      }
      lct__cuda_fail(e, "closing an idle client mapping"); /* it stays mapped, and counted */
    }
    mapped += m->size;
  }
  return mapped;
}

/* ---- open and close ---------------------------------------------------------- */

static void lct__cuda_destroy(void *ctx) {
  lct__cuda *g = ctx;
  if (g == NULL)
    return;
  cudaSetDevice(g->device);
  for (int i = 0; i < LCT__IPC_CACHE; i++)
    if (g->ipc[i].base != NULL && cudaIpcCloseMemHandle(g->ipc[i].base) != cudaSuccess)
      lct__log_error("cuda: closing a client mapping failed");
  for (int i = 0; i < g->n_workers; i++) {
    lct__cuda_worker *w = &g->workers[i];
    lct_cuda_codebook_destroy(w->dcb);
    cudaFree(w->raw);
    cudaFree(w->work);
    cudaFree(w->bits);
    cudaFreeHost(w->pinned);
    cudaFreeHost(w->stage);
    for (int k = 0; k < w->slots; k++)
      if (w->staged[k] != NULL)
        cudaEventDestroy(w->staged[k]);
    if (w->stream != NULL)
      cudaStreamDestroy(w->stream);
  }
  lct__batch_close(g->batch);
  lct__gets_close(g->gets);
  if (g->moves != NULL) {
    cudaStreamSynchronize(g->moves);
    cudaStreamDestroy(g->moves);
  }
  free(g->moved);
  if (lct__granules_destroy(&g->pool) != 0)
    lct__log_error("cuda: unmapping the pool at close failed");
  if (g->va != 0 && g->cu.address_free(g->va, g->va_bytes) != CUDA_SUCCESS)
    lct__log_error("cuda: freeing the pool's address range failed");
  free(g);
}

static int lct__cuda_read(void *ctx, const void *blob, size_t len, void *dst) {
  lct__cuda *g = ctx;
  LCT__CUDA_LOGGED(cudaSetDevice(g->device));
  LCT__CUDA_LOGGED(cudaMemcpy(dst, blob, len, cudaMemcpyDeviceToHost));
  return 0;
}

static int lct__cuda_write(void *ctx, const void *src, size_t len, void *blob) {
  lct__cuda *g = ctx;
  LCT__CUDA_LOGGED(cudaSetDevice(g->device));
  LCT__CUDA_LOGGED(cudaMemcpy(blob, src, len, cudaMemcpyHostToDevice));
  /* From pageable memory the copy may return before its last DMA lands; a
   * release right after (a restore that fails) could unmap under it. The
   * copy ran on the legacy default stream, which the codec workers' streams
   * (non-blocking) do not join: waiting for it waits for no encode or batch. */
  LCT__CUDA_LOGGED(cudaStreamSynchronize(cudaStreamLegacy));
  return 0;
}

static int lct__cuda_fault(void *ctx, char *why, size_t cap) {
  const lct__cuda *g = ctx;
  cudaError_t e = (cudaError_t)atomic_load(&lct__cuda_lost);
  if (e == cudaSuccess)
    return 0;
  snprintf(why, cap, "CUDA device %d lost: %s (%s)", g->device, cudaGetErrorString(e), cudaGetErrorName(e));
  return 1;
}

static const lct__backend_ops lct__cuda_ops = {
    .name = "cuda",
    .alloc = lct__cuda_alloc,
    .shrink = lct__cuda_shrink,
    .release = lct__cuda_release,
    .held = lct__cuda_held,
    .settle = lct__cuda_settle,
    .encode = lct__cuda_encode,
    .decode = lct__cuda_decode,
    .destroy = lct__cuda_destroy,
    .read = lct__cuda_read,
    .write = lct__cuda_write,
    .ipc_map = lct__cuda_ipc_map,
    .ipc_unmap = lct__cuda_ipc_unmap,
    .ipc_trim = lct__cuda_ipc_trim,
    .peer = lct__cuda_reaches,
    .encode_batch = lct__cuda_encode_batch,
    .decode_batch = lct__cuda_decode_batch,
    .hist_batch = lct__cuda_hist_batch,
    .fault = lct__cuda_fault,
};
static int lct__cuda_worker_open(lct__cuda_worker *w, uint64_t segment_max, int pinned_staging) {
  /* The workspace serves both directions: the larger of an encode of the
   * most chunks a segment can hold (1-byte elements) and a decode of one blob. */
  lct_cuda_encode_item item = {LCT_DTYPE_F8E4M3, NULL, NULL, segment_max, NULL, 0, NULL, NULL, NULL};
  size_t enc = lct_cuda_encode_workspace_size(&item, 1), dec = lct_cuda_decode_workspace_size(1);
  w->work_bytes = enc > dec ? enc : dec;
  LCT__CUDA_LOGGED(cudaStreamCreateWithFlags(&w->stream, cudaStreamNonBlocking));
  LCT__CUDA_LOGGED(cudaMalloc(&w->raw, segment_max));
  LCT__CUDA_LOGGED(cudaMalloc(&w->work, w->work_bytes ? w->work_bytes : 1));
  LCT__CUDA_LOGGED(cudaMalloc((void **)&w->bits, sizeof *w->bits));
  LCT__CUDA_LOGGED(cudaMallocHost((void **)&w->pinned, 3 * sizeof(uint64_t)));
  if (pinned_staging) {
    /* The whole segment where it fits the ring, and two pieces at least (a get's copy overlaps the next DMA). */
    uint64_t pieces = (segment_max + LCT__STAGE_PIECE - 1) / LCT__STAGE_PIECE;
    w->slots = pieces < 2 ? 2 : pieces > LCT__STAGE_SLOTS ? LCT__STAGE_SLOTS : (int)pieces;
    LCT__CUDA_LOGGED(cudaMallocHost((void **)&w->stage, (size_t)w->slots * LCT__STAGE_PIECE));
    for (int k = 0; k < w->slots; k++)
      LCT__CUDA_LOGGED(cudaEventCreateWithFlags(&w->staged[k], cudaEventDisableTiming));
  }
  memset(&w->hcb, 0, sizeof w->hcb); /* raw dtype: never matches a codebook, so the first encode uploads */
  return lct__device_codebook_new(&w->dcb);
}

/* Finds the driver calls lct__cu names. */
static int lct__cu_open(lct__cu *cu) {
  for (size_t i = 0; i < sizeof lct__cu_names / sizeof lct__cu_names[0]; i++) {
    enum cudaDriverEntryPointQueryResult found;
    if (cudaGetDriverEntryPointByVersion(lct__cu_names[i].name, (void **)((char *)cu + lct__cu_names[i].offset),
                                         12000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      lct__log_error("cuda: the driver has no %s", lct__cu_names[i].name);
      return LCT_ECUDA;
    }
  }
  return 0;
}

/* Reserves the pool's address range for capacity bytes (0: 90% of free_b),
 * at most the device's total_b; nothing is mapped until blobs need it. */
static int lct__cuda_pool_open(lct__cuda *g, uint64_t memory, uint64_t slack, size_t free_b, size_t total_b) {
  g->prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  g->prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  g->prop.location.id = g->device;
  g->access.location = g->prop.location;
  g->access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  size_t gran;
  CUresult r = g->cu.granularity(&gran, &g->prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (r != CUDA_SUCCESS)
    return lct__cu_fail(r, "cuMemGetAllocationGranularity");
  g->capacity = memory != 0 ? memory : (uint64_t)((double)free_b * 0.9) / gran * gran;
  if (g->capacity == 0 || g->capacity > total_b) {
    lct__log_error("cuda: memory %llu bytes asked, device %d has %zu", (unsigned long long)g->capacity, g->device,
                   total_b);
    return LCT_ENOMEM;
  }
  LCT__CUDA_LOGGED(cudaStreamCreateWithFlags(&g->moves, cudaStreamNonBlocking));
  g->va_bytes = (g->capacity + gran - 1) / gran * gran;
  if ((r = g->cu.address_reserve(&g->va, g->va_bytes, gran, 0, 0)) != CUDA_SUCCESS) {
    g->va = 0;
    return lct__cu_fail(r, "cuMemAddressReserve");
  }
  lct__mapper m = {lct__cuda_map, lct__cuda_unmap, g};
  return lct__granules_init(&g->pool, g->va_bytes, gran, slack, &m);
}

int lct__backend_cuda_open(int device, uint64_t memory, uint64_t slack, int workers, uint64_t segment_max,
                           int pinned_staging, lct__backend *out) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || device >= count) {
    lct__log_error("cuda: no device %d (%d found)", device, count);
    return LCT_ENODEV;
  }
  LCT__CUDA_LOGGED(cudaSetDevice(device));
  lct__cuda *g = calloc(1, sizeof *g + (size_t)workers * sizeof(lct__cuda_worker));
  if (g == NULL)
    return LCT_ENOMEM;
  g->device = device;
  g->segment_max = segment_max;
  g->n_workers = workers;
  int rc = lct__cu_open(&g->cu);
  for (int i = 0; i < workers && rc == 0; i++)
    rc = lct__cuda_worker_open(&g->workers[i], segment_max, pinned_staging);
  if (rc == 0)
    rc = lct__batch_open(&g->batch);
  if (rc == 0)
    rc = lct__gets_open(&g->gets);
  size_t free_b = 0, total_b = 0;
  if (rc == 0 && cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
    rc = LCT_ECUDA;
  if (rc == 0)
    rc = lct__cuda_pool_open(g, memory, slack, free_b, total_b);
  if (rc != 0) {
    lct__cuda_destroy(g);
    return rc;
  }
  struct cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, device) != cudaSuccess) {
    lct__cuda_destroy(g);
    return LCT_ECUDA;
  }
  memcpy(out->gpu_uuid, prop.uuid.bytes, sizeof out->gpu_uuid);
  lct__log_info("cuda: device %d, %s, %zu MiB, %zu MiB free; the pool maps up to %llu MiB in granules of %llu KiB "
                "as blobs need them, and keeps up to %llu MiB of empty ones",
                device, prop.name, total_b >> 20, free_b >> 20, (unsigned long long)(g->capacity >> 20),
                (unsigned long long)(g->pool.granule >> 10), (unsigned long long)(g->pool.keep * g->pool.granule >> 20));
  lct__cuda_find_peers(g, count);
  out->ops = &lct__cuda_ops;
  out->ctx = g;
  out->capacity = g->capacity;
  return 0;
}
