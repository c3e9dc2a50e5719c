/* backend_cuda.c — the cuda backend: one GPU memory region reserved at start and sub-allocated, the GPU codec per worker stream. */
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "lct_cuda.h"
#include "log.h"

#define LCT__CUDA_ALIGN 256 /* blob offsets: the GPU codec needs 8, 256 keeps them cache-line clean */
#define LCT__CUDA_SYMS (LCT_MAX_SYMS - 1) /* histogram counters: 2^s for the widest dtype */

/* What one threadpool worker uses, created at open so that nothing on the
 * request path allocates: a stream, device memory for one segment's raw
 * bytes, codec workspace, a histogram, and pinned words for results. */
typedef struct lct__cuda_worker {
  cudaStream_t stream;
  void *raw;         /* device, segment_max bytes */
  void *work;        /* device workspace */
  size_t work_bytes;
  uint64_t *hist;    /* device, LCT__CUDA_SYMS counters */
  uint64_t *pinned;  /* pinned host: [0] blob bytes, [1] status, [2..] histogram */
  lct_cuda_codebook *dcb; /* device copy of the codebook last used, and its source */
  lct_codebook hcb;
} lct__cuda_worker;

/* A free range of the region, in a list sorted by offset. */
typedef struct lct__cuda_free {
  uint64_t off, len;
  struct lct__cuda_free *next;
} lct__cuda_free;

typedef struct lct__cuda {
  int device;
  uint8_t *base;      /* the region: cudaMalloc'd once */
  uint64_t capacity;
  uint64_t segment_max;
  lct__cuda_free *free_list;
  int n_workers;
  atomic_int next_worker;
  lct__cuda_worker workers[];
} lct__cuda;

static _Thread_local lct__cuda_worker *lct__tls_worker;

static int lct__cuda_fail(cudaError_t e, const char *what) {
  lct__log_error("cuda: %s: %s", what, cudaGetErrorString(e));
  return LCT_ECUDA;
}
#define LCT__CUDA_TRY(call)                  \
  do {                                       \
    cudaError_t e_ = (call);                 \
    if (e_ != cudaSuccess)                   \
      return lct__cuda_fail(e_, #call);      \
  } while (0)

int lct__backend_cuda_present(void) {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

/* ---- sub-allocation of the region (loop thread only) ---------------------- */

static uint64_t lct__round_up(uint64_t v) {
  return (v + LCT__CUDA_ALIGN - 1) / LCT__CUDA_ALIGN * LCT__CUDA_ALIGN;
}

/* Returns [off, off + len) to the free list, merging with its neighbours. */
static int lct__cuda_give(lct__cuda *g, uint64_t off, uint64_t len) {
  lct__cuda_free **p = &g->free_list, *prev = NULL;
  while (*p != NULL && (*p)->off < off) {
    prev = *p;
    p = &(*p)->next;
  }
  lct__cuda_free *next = *p;
  if (prev != NULL && prev->off + prev->len == off) {
    prev->len += len;
    if (next != NULL && prev->off + prev->len == next->off) {
      prev->len += next->len;
      prev->next = next->next;
      free(next);
    }
    return 0;
  }
  if (next != NULL && off + len == next->off) {
    next->off = off;
    next->len += len;
    return 0;
  }
  lct__cuda_free *f = malloc(sizeof *f);
  if (f == NULL)
    return LCT_ENOMEM;
  f->off = off;
  f->len = len;
  f->next = next;
  *p = f;
  return 0;
}

static int lct__cuda_alloc(void *ctx, size_t bytes, void **out) {
  lct__cuda *g = ctx;
  uint64_t len = lct__round_up(bytes ? bytes : 1);
  for (lct__cuda_free **p = &g->free_list; *p != NULL; p = &(*p)->next) {
    lct__cuda_free *f = *p;
    if (f->len < len)
      continue;
    *out = g->base + f->off;
    f->off += len;
    f->len -= len;
    if (f->len == 0) {
      *p = f->next;
      free(f);
    }
    return 0;
  }
  return LCT_ENOSPC; /* the pool's accounting had room: the region is fragmented */
}

static int lct__cuda_shrink(void *ctx, void *blob, size_t old_bytes, size_t new_bytes, void **out) {
  lct__cuda *g = ctx;
  uint64_t keep = lct__round_up(new_bytes ? new_bytes : 1), had = lct__round_up(old_bytes ? old_bytes : 1);
  *out = blob;
  if (keep >= had)
    return 0;
  return lct__cuda_give(g, (uint64_t)((uint8_t *)blob - g->base) + keep, had - keep);
}

static void lct__cuda_release(void *ctx, void *blob, size_t bytes) {
  lct__cuda *g = ctx;
  if (lct__cuda_give(g, (uint64_t)((uint8_t *)blob - g->base), lct__round_up(bytes ? bytes : 1)) != 0)
    lct__log_error("cuda: out of host memory tracking a free range; %zu device bytes lost", bytes);
}

/* ---- codec on worker threads ------------------------------------------------ */

static int lct__cuda_worker_get(lct__cuda *g, lct__cuda_worker **out) {
  if (lct__tls_worker == NULL) {
    int i = atomic_fetch_add(&g->next_worker, 1);
    if (i >= g->n_workers)
      return LCT_ECUDA; /* more codec threads than the backend was opened for */
    LCT__CUDA_TRY(cudaSetDevice(g->device));
    lct__tls_worker = &g->workers[i];
  }
  *out = lct__tls_worker;
  return 0;
}

/* Points the worker's device codebook at cb; an upload only when it changed. */
static int lct__cuda_codebook(lct__cuda_worker *w, const lct_codebook *cb) {
  if (w->hcb.dtype == cb->dtype && memcmp(w->hcb.len, cb->len, sizeof cb->len) == 0)
    return 0;
  int rc = lct_cuda_codebook_set(w->dcb, cb, w->stream);
  if (rc == 0)
    w->hcb = *cb;
  return rc;
}

static int lct__cuda_encode(void *ctx, int dtype, const lct_codebook *cb, const void *src, uint64_t n,
                            void *dst, size_t cap, lct_encode_stats *stats) {
  lct__cuda *g = ctx;
  lct__cuda_worker *w;
  int rc = lct__cuda_worker_get(g, &w);
  if (rc != 0)
    return rc;
  size_t bytes = n * lct_dtype_size(dtype);
  unsigned s = lct_dtype_symbol_bits(dtype);
  if (bytes > g->segment_max)
    return LCT_E2BIG;
  if (cb != NULL && (rc = lct__cuda_codebook(w, cb)) != 0)
    return rc;
  LCT__CUDA_TRY(cudaMemcpyAsync(w->raw, src, bytes, cudaMemcpyHostToDevice, w->stream));
  if (cb != NULL && n > 0) {
    /* The exact code bits, for drift detection: a device histogram of the
     * symbols, weighed by the codebook's lengths (ESC plus s bits when absent). */
    LCT__CUDA_TRY(cudaMemsetAsync(w->hist, 0, ((size_t)1 << s) * sizeof(uint64_t), w->stream));
    if ((rc = lct_cuda_histogram(dtype, w->raw, n, w->hist, w->stream)) != 0)
      return rc;
    LCT__CUDA_TRY(cudaMemcpyAsync(w->pinned + 2, w->hist, ((size_t)1 << s) * sizeof(uint64_t),
                                  cudaMemcpyDeviceToHost, w->stream));
  }
  rc = lct_cuda_encode(dtype, cb != NULL ? w->dcb : NULL, w->raw, n, dst, cap, &w->pinned[0], w->work,
                       w->work_bytes, w->stream);
  if (rc != 0)
    return rc;
  LCT__CUDA_TRY(cudaStreamSynchronize(w->stream));
  memset(stats, 0, sizeof *stats);
  stats->blob_bytes = w->pinned[0];
  if (cb != NULL && n > 0) {
    unsigned esc = cb->len[cb->n_syms - 1];
    for (size_t sym = 0; sym < ((size_t)1 << s); sym++) {
      uint64_t c = w->pinned[2 + sym];
      if (c == 0)
        continue;
      if (cb->len[sym] != 0) {
        stats->code_bits += c * cb->len[sym];
      } else {
        stats->code_bits += c * (esc + s);
        stats->escapes += c;
      }
    }
  }
  return stats->blob_bytes <= cap ? 0 : LCT_ECUDA;
}

static int lct__cuda_decode(void *ctx, int dtype, uint64_t n, const void *blob, size_t len, void *dst) {
  lct__cuda *g = ctx;
  lct__cuda_worker *w;
  int rc = lct__cuda_worker_get(g, &w);
  if (rc != 0)
    return rc;
  size_t bytes = n * lct_dtype_size(dtype);
  if (bytes > g->segment_max)
    return LCT_E2BIG;
  int *status = (int *)&w->pinned[1];
  if ((rc = lct_cuda_decode(dtype, n, blob, len, w->raw, status, w->work, w->work_bytes, w->stream)) != 0)
    return rc;
  LCT__CUDA_TRY(cudaMemcpyAsync(dst, w->raw, bytes, cudaMemcpyDeviceToHost, w->stream));
  LCT__CUDA_TRY(cudaStreamSynchronize(w->stream));
  return *status;
}

/* ---- open and close ---------------------------------------------------------- */

static void lct__cuda_destroy(void *ctx) {
  lct__cuda *g = ctx;
  if (g == NULL)
    return;
  cudaSetDevice(g->device);
  for (int i = 0; i < g->n_workers; i++) {
    lct__cuda_worker *w = &g->workers[i];
    lct_cuda_codebook_destroy(w->dcb);
    cudaFree(w->raw);
    cudaFree(w->work);
    cudaFree(w->hist);
    cudaFreeHost(w->pinned);
    if (w->stream != NULL)
      cudaStreamDestroy(w->stream);
  }
  cudaFree(g->base);
  for (lct__cuda_free *f = g->free_list, *next; f != NULL; f = next) {
    next = f->next;
    free(f);
  }
  free(g);
}

static int lct__cuda_read(void *ctx, const void *blob, size_t len, void *dst) {
  lct__cuda *g = ctx;
  LCT__CUDA_TRY(cudaSetDevice(g->device));
  LCT__CUDA_TRY(cudaMemcpy(dst, blob, len, cudaMemcpyDeviceToHost));
  return 0;
}

static int lct__cuda_write(void *ctx, const void *src, size_t len, void *blob) {
  lct__cuda *g = ctx;
  LCT__CUDA_TRY(cudaSetDevice(g->device));
  LCT__CUDA_TRY(cudaMemcpy(blob, src, len, cudaMemcpyHostToDevice));
  return 0;
}

static const lct__backend_ops lct__cuda_ops = {
    "cuda", lct__cuda_alloc, lct__cuda_shrink, lct__cuda_release,
    lct__cuda_encode, lct__cuda_decode, lct__cuda_destroy, lct__cuda_read, lct__cuda_write,
};

static int lct__cuda_worker_open(lct__cuda_worker *w, uint64_t segment_max) {
  /* The workspace serves both directions: the larger of an encode of the
   * most chunks a segment can hold (1-byte elements) and a decode of one blob. */
  lct_cuda_encode_item item = {LCT_DTYPE_F8E4M3, NULL, NULL, segment_max, NULL, 0, NULL};
  size_t enc = lct_cuda_encode_workspace_size(&item, 1), dec = lct_cuda_decode_workspace_size(1);
  w->work_bytes = enc > dec ? enc : dec;
  LCT__CUDA_TRY(cudaStreamCreateWithFlags(&w->stream, cudaStreamNonBlocking));
  LCT__CUDA_TRY(cudaMalloc(&w->raw, segment_max));
  LCT__CUDA_TRY(cudaMalloc(&w->work, w->work_bytes ? w->work_bytes : 1));
  LCT__CUDA_TRY(cudaMalloc((void **)&w->hist, LCT__CUDA_SYMS * sizeof(uint64_t)));
  LCT__CUDA_TRY(cudaMallocHost((void **)&w->pinned, (2 + LCT__CUDA_SYMS) * sizeof(uint64_t)));
  /* The device codebook is allocated here, once; requests only rewrite it. A
   * placeholder fills it until the first encode (hcb's raw dtype never matches). */
  uint64_t none[LCT_MAX_SYMS] = {0};
  lct_codebook placeholder;
  memset(&w->hcb, 0, sizeof w->hcb);
  if (lct_codebook_build(LCT_DTYPE_BF16, none, &placeholder) != 0)
    return LCT_EINVAL;
  return lct_cuda_codebook_create(&placeholder, &w->dcb);
}

int lct__backend_cuda_open(int device, uint64_t memory, int threads, uint64_t segment_max,
                           lct__backend *out) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || device >= count) {
    lct__log_error("cuda: no device %d (%d found)", device, count);
    return LCT_ENODEV;
  }
  LCT__CUDA_TRY(cudaSetDevice(device));
  lct__cuda *g = calloc(1, sizeof *g + (size_t)threads * sizeof(lct__cuda_worker));
  if (g == NULL)
    return LCT_ENOMEM;
  g->device = device;
  g->segment_max = segment_max;
  g->n_workers = threads;
  int rc = 0;
  for (int i = 0; i < threads && rc == 0; i++)
    rc = lct__cuda_worker_open(&g->workers[i], segment_max);
  size_t free_b = 0, total_b = 0;
  if (rc == 0 && cudaMemGetInfo(&free_b, &total_b) != cudaSuccess)
    rc = LCT_ECUDA;
  if (rc == 0) {
    g->capacity = memory != 0 ? memory : (uint64_t)((double)free_b * 0.9) / LCT__CUDA_ALIGN * LCT__CUDA_ALIGN;
    if (g->capacity > free_b) {
      lct__log_error("cuda: memory %llu bytes asked, %zu free on device %d", (unsigned long long)g->capacity,
                     free_b, device);
      rc = LCT_ENOMEM;
    } else if (cudaMalloc((void **)&g->base, g->capacity) != cudaSuccess) {
      rc = LCT_ENOMEM;
    } else {
      rc = lct__cuda_give(g, 0, g->capacity);
    }
  }
  if (rc != 0) {
    lct__cuda_destroy(g);
    return rc;
  }
  struct cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, device) == cudaSuccess)
    lct__log_info("cuda: device %d, %s, %zu MiB, %zu MiB free before the pool", device, prop.name,
                  total_b >> 20, free_b >> 20);
  out->ops = &lct__cuda_ops;
  out->ctx = g;
  out->capacity = g->capacity;
  return 0;
}
