/* test_backend_cuda.c — the cuda backend on a GPU: device memory mapped in granules as blobs come and go, encode/decode round trips, the CPU codec's bytes and code bits. */
#include <criterion/criterion.h>
#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "test_util.h"

static lct__backend be;
static int have_gpu;

/* Every test runs only where a CUDA device is present (CI builds, then skips). */
#define NEED_GPU()                                 \
  do {                                             \
    if (!have_gpu) cr_skip_test("no CUDA device"); \
  } while (0)

static void open_backend(void) {
  if (!(have_gpu = lct__backend_cuda_present())) return;
  int rc = lct__backend_cuda_open(0, 64 << 20, 0, 4, 1 << 20, 1, &be); /* no slack: held is what blobs touch */
  cr_assert_eq(rc, 0, "cuda backend: %s", lct_strerror(rc));
  cr_assert_eq(be.capacity, 64 << 20);
}

static void close_backend(void) {
  if (have_gpu) be.ops->destroy(be.ctx);
}

TestSuite(backend_cuda, .init = open_backend, .fini = close_backend);

/* Fills len bytes at blob with byte on the device and reads them back. */
static void device_fill_check(void *blob, size_t len, int byte) {
  uint8_t *host = malloc(len);
  cr_assert_eq(cudaMemset(blob, byte, len), cudaSuccess, "the mapped memory is writable");
  cr_assert_eq(cudaMemcpy(host, blob, len, cudaMemcpyDeviceToHost), cudaSuccess, "and readable");
  for (size_t i = 0; i < len; i++)
    if (host[i] != (uint8_t)byte) cr_assert_fail("byte %zu of %zu is %d, not %d", i, len, host[i], byte);
  free(host);
}

Test(backend_cuda, granules_follow_blobs) {
  NEED_GPU();
  cr_assert_eq(be.ops->held(be.ctx), 0, "nothing is mapped before a blob needs it");
  void *a, *b, *c, *d;
  cr_assert_eq(be.ops->alloc(be.ctx, 1, &a), 0);
  const uint64_t G = be.ops->held(be.ctx); /* one granule, 2 MiB on current GPUs */
  cr_assert(G >= 4096 && (G & (G - 1)) == 0 && (64u << 20) % G == 0, "a granule of %llu bytes", (unsigned long long)G);
  cr_assert_eq((uintptr_t)a % 256, 0);
  /* 3 granules after a's 256 bytes: granules 0..3, every byte writable. */
  cr_assert_eq(be.ops->alloc(be.ctx, 3 * G, &b), 0);
  cr_assert_eq((uint8_t *)b, (uint8_t *)a + 256);
  cr_assert_eq(be.ops->held(be.ctx), 4 * G);
  device_fill_check(b, 3 * G, 0x5a);
  /* A shrink gives back the granules past the blob's new end. */
  void *moved;
  cr_assert_eq(be.ops->shrink(be.ctx, b, 3 * G, G / 2, &moved), 0);
  cr_assert_eq(moved, b, "a shrink stays in place");
  cr_assert_eq(be.ops->held(be.ctx), G, "granules 1..3 unmapped");
  device_fill_check(b, G / 2, 0x11);
  be.ops->release(be.ctx, b, G / 2);
  be.ops->release(be.ctx, a, 1);
  cr_assert_eq(be.ops->held(be.ctx), 0, "no blob, no slack: nothing held");
  /* The same addresses mapped again are backed and accessible anew. */
  cr_assert_eq(be.ops->alloc(be.ctx, 2 * G, &c), 0);
  cr_assert_eq(c, a, "the range's start again");
  cr_assert_eq(be.ops->held(be.ctx), 2 * G);
  device_fill_check(c, 2 * G, 0xa5);
  be.ops->release(be.ctx, c, 2 * G);
  /* A blob whose tail would be a hole before another moves past it. */
  void *x, *y, *x2;
  cr_assert_eq(be.ops->alloc(be.ctx, G, &x), 0);
  cr_assert_eq(be.ops->alloc(be.ctx, G, &y), 0);
  cr_assert_eq((uint8_t *)y, (uint8_t *)x + G);
  device_fill_check(x, G / 4, 0x42);
  cr_assert_eq(be.ops->shrink(be.ctx, x, G, G / 4, &x2), 0);
  cr_assert_eq((uint8_t *)x2, (uint8_t *)y + G, "moved to the free bytes after y");
  be.ops->settle(be.ctx);
  uint8_t *host = malloc(G / 4);
  cr_assert_eq(cudaMemcpy(host, x2, G / 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (size_t i = 0; i < G / 4; i++)
    if (host[i] != 0x42) cr_assert_fail("byte %zu of the moved blob is %d", i, host[i]);
  free(host);
  cr_assert_eq(be.ops->held(be.ctx), 2 * G, "x's granule went back at the settle; y's and x2's held");
  be.ops->release(be.ctx, x2, G / 4);
  be.ops->release(be.ctx, y, G);
  cr_assert_eq(be.ops->held(be.ctx), 0);
  /* The whole ceiling, and nothing past it. */
  cr_assert_eq(be.ops->alloc(be.ctx, 64 << 20, &d), 0);
  cr_assert_eq(be.ops->held(be.ctx), 64 << 20);
  cr_assert_eq(be.ops->alloc(be.ctx, 1, &c), LCT_ENOSPC);
  device_fill_check(d, 64 << 20, 0x3c);
  be.ops->release(be.ctx, d, 64 << 20);
  cr_assert_eq(be.ops->held(be.ctx), 0);
}

Test(backend_cuda, a_full_device_is_enomem) {
  /* A trainer holds the GPU: the pool cannot grow below its ceiling, and
   * grows again once the memory is back. */
  NEED_GPU();
  size_t free_b, total_b;
  cr_assert_eq(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
  lct__backend big;
  int rc = lct__backend_cuda_open(0, total_b, 64 << 20, 1, 1 << 20, 1, &big);
  cr_assert_eq(rc, 0, "a ceiling of the whole device reserves no memory: %s", lct_strerror(rc));
  cr_assert_eq(big.ops->held(big.ctx), 0);
  cr_assert_eq(cudaMemGetInfo(&free_b, &total_b), cudaSuccess);
  void *trainer, *blob;
  size_t leave = 256 << 20;
  cr_assert_eq(cudaMalloc(&trainer, free_b - leave), cudaSuccess);
  cr_assert_eq(big.ops->alloc(big.ctx, 2 * leave, &blob), LCT_ENOMEM, "the device has no memory to map");
  cr_assert_eq(big.ops->held(big.ctx), 0, "a failed map holds nothing beyond the slack");
  cr_assert_eq(big.ops->alloc(big.ctx, leave / 2, &blob), 0, "what is free still maps");
  device_fill_check(blob, leave / 2, 0x77);
  big.ops->release(big.ctx, blob, leave / 2);
  cr_assert_eq(cudaFree(trainer), cudaSuccess);
  cr_assert_eq(big.ops->alloc(big.ctx, 2 * leave, &blob), 0, "the memory is back");
  device_fill_check(blob, 2 * leave, 0x78);
  big.ops->release(big.ctx, blob, 2 * leave);
  cr_assert_leq(big.ops->held(big.ctx), 64 << 20, "what is freed goes back beyond the slack");
  big.ops->destroy(big.ctx);
}

/* Encodes on b's GPU, compares with the CPU codec, decodes back. */
static void round_trip(lct__backend *b, int dtype, const void *src, uint64_t n, const lct_codebook *cb) {
  size_t bytes = n * lct_dtype_size(dtype), cap = lct_encode_bound(dtype, n);
  void *blob;
  cr_assert_eq(b->ops->alloc(b->ctx, cap, &blob), 0);
  lct_encode_stats gs, cs;
  int rc = b->ops->encode(b->ctx, 0, dtype, cb, src, n, blob, cap, &gs);
  cr_assert_eq(rc, 0, "gpu encode %s n=%llu: %s", lct_dtype_name(dtype), (unsigned long long)n, lct_strerror(rc));
  uint8_t *ref = malloc(cap), *got = malloc(gs.blob_bytes ? gs.blob_bytes : 1), *back = malloc(bytes + 1);
  cr_assert_eq(lct_encode(dtype, cb, src, n, ref, cap, &cs), 0);
  cr_assert_eq(gs.blob_bytes, cs.blob_bytes, "%s n=%llu", lct_dtype_name(dtype), (unsigned long long)n);
  /* The GPU encoder counts code bits as the CPU's does (drift detection
   * compares them with the codebook's expectation); escapes are not counted. */
  cr_assert_eq(gs.code_bits, cs.code_bits, "the backend's code bits are the encoder's");
  cr_assert_eq(cudaMemcpy(got, blob, gs.blob_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  cr_assert_eq(memcmp(got, ref, gs.blob_bytes), 0, "the GPU writes the CPU codec's bytes");
  cr_assert_eq(b->ops->decode(b->ctx, 0, dtype, n, blob, gs.blob_bytes, back), 0);
  cr_assert(bytes == 0 || memcmp(back, src, bytes) == 0, "%s n=%llu decodes to its input", lct_dtype_name(dtype),
            (unsigned long long)n);
  b->ops->release(b->ctx, blob, cap);
  free(ref);
  free(got);
  free(back);
}

/* Round trips of every size class on b, whose segments are segment bytes:
 * none, one element, a chunk's edges, the pinned pieces' edges (256 KiB) and
 * a whole segment, with a fitting and a stale codebook and raw. */
static void round_trips(lct__backend *b, size_t segment) {
  size_t bytes;
  uint8_t *w = test_read_data("A_s400_w.bf16.bin", &bytes), *tiled = malloc(segment);
  for (size_t off = 0; off < segment; off += bytes)
    memcpy(tiled + off, w, segment - off < bytes ? segment - off : bytes);
  lct_codebook cb;
  cr_assert_eq(lct_codebook_from_data(LCT_DTYPE_BF16, w, bytes / 2, &cb), 0);
  const uint64_t piece = (256u << 10) / 2;
  uint64_t sizes[] = {0, 1, LCT_CHUNK_ELEMS - 1, LCT_CHUNK_ELEMS + 1, piece - 1, piece + 1, 3 * piece - 1, segment / 2};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) round_trip(b, LCT_DTYPE_BF16, tiled, sizes[i], &cb);
  /* A stale codebook: another tensor's symbols escape. */
  size_t gbytes;
  uint8_t *g = test_read_data("A_s400_g.f32.bin", &gbytes);
  lct_codebook fcb;
  cr_assert_eq(lct_codebook_from_data(LCT_DTYPE_F32, g, 1000, &fcb), 0);
  round_trip(b, LCT_DTYPE_F32, g, gbytes / 4, &fcb);
  round_trip(b, LCT_DTYPE_RAW, g, 12345, NULL);
  free(w);
  free(tiled);
  free(g);
}

Test(backend_cuda, codec_matches_cpu) {
  NEED_GPU();
  round_trips(&be, 1u << 20);
}

Test(backend_cuda, pageable_staging_matches_cpu) {
  /* host_staging = pageable: the driver stages the host bytes; the same results. */
  NEED_GPU();
  lct__backend pageable;
  int rc = lct__backend_cuda_open(0, 64 << 20, 0, 1, 1 << 20, 0, &pageable);
  cr_assert_eq(rc, 0, "cuda backend: %s", lct_strerror(rc));
  round_trips(&pageable, 1u << 20);
  pageable.ops->destroy(pageable.ctx);
}

Test(backend_cuda, pinned_ring_wraps) {
  /* 8 MiB segments: 32 pieces through a ring of 16, each slot reused once its DMA is done. */
  NEED_GPU();
  lct__backend big;
  int rc = lct__backend_cuda_open(0, 64 << 20, 0, 1, 8u << 20, 1, &big);
  cr_assert_eq(rc, 0, "cuda backend: %s", lct_strerror(rc));
  round_trips(&big, 8u << 20);
  big.ops->destroy(big.ctx);
}

/* One worker of worker_threads, on a thread of its own. */
typedef struct worker_run {
  int worker;
  void *blob; /* allocated on the test's thread: alloc and release are the loop thread's */
  int failures;
} worker_run;

/* One thread of worker_threads: ten of round_trip's checks as its worker,
 * counted into its failures (Criterion's asserts belong to the test's own
 * thread). */
static void *encode_in_thread(void *arg) {
  const int worker = ((worker_run *)arg)->worker;
  int *failures = &((worker_run *)arg)->failures;
  size_t bytes;
  uint8_t *w = test_read_data("A_s100_w.bf16.bin", &bytes);
  uint64_t n = bytes / 2;
  size_t cap = lct_encode_bound(LCT_DTYPE_BF16, n);
  uint8_t *ref = malloc(cap), *got = malloc(cap), *back = malloc(bytes);
  lct_codebook cb;
  lct_encode_stats gs, cs;
  *failures += lct_codebook_from_data(LCT_DTYPE_BF16, w, n, &cb) != 0 ||
               lct_encode(LCT_DTYPE_BF16, &cb, w, n, ref, cap, &cs) != 0;
  void *blob = ((worker_run *)arg)->blob;
  for (int i = 0; i < 10 && *failures == 0; i++) {
    *failures += be.ops->encode(be.ctx, worker, LCT_DTYPE_BF16, &cb, w, n, blob, cap, &gs) != 0 ||
                 gs.blob_bytes != cs.blob_bytes ||
                 cudaMemcpy(got, blob, gs.blob_bytes, cudaMemcpyDeviceToHost) != cudaSuccess ||
                 memcmp(got, ref, gs.blob_bytes) != 0 ||
                 be.ops->decode(be.ctx, worker, LCT_DTYPE_BF16, n, blob, gs.blob_bytes, back) != 0 || memcmp(back, w, bytes) != 0;
  }
  free(ref);
  free(got);
  free(back);
  free(w);
  return NULL;
}

Test(backend_cuda, worker_threads) {
  NEED_GPU();
  pthread_t t[4];
  worker_run runs[4];
  size_t bytes;
  free(test_read_data("A_s100_w.bf16.bin", &bytes));
  const size_t cap = lct_encode_bound(LCT_DTYPE_BF16, bytes / 2);
  for (int i = 0; i < 4; i++) {
    runs[i] = (worker_run){.worker = i};
    cr_assert_eq(be.ops->alloc(be.ctx, cap, &runs[i].blob), 0);
    cr_assert_eq(pthread_create(&t[i], NULL, encode_in_thread, &runs[i]), 0);
  }
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < 4; i++) be.ops->release(be.ctx, runs[i].blob, cap);
  for (int i = 0; i < 4; i++)
    cr_assert_eq(runs[i].failures, 0, "worker %d: a GPU round trip differed from the CPU codec", i);
}
