/* test_held.c — the device memory a cuda lctd holds as tensors come and go: lct_pool_held_bytes and STATS' pool_held against the stored bytes, the slack's bound, and the GPU's own count of free memory. */
#include <cuda_runtime_api.h>
#include <stdlib.h>

#include "lctd_harness.h"
#include "test_gpu.h"
#include "test_util.h"

#define N 24               /* tensors */
#define BYTES (16u << 20)  /* raw bytes of each: 16 segments */

static test_lctd lctd;

static void stop(void) { test_lctd_stop(&lctd); }

static void start_idle(const char *slack, const char *ipc_idle) {
  setenv("LCT_TEST_BACKEND", "cuda", 1);
  const char *extra[] = {"--memory", "4G", "--memory-slack", slack, "--threads", "4", "--ipc-idle", ipc_idle, NULL};
  test_lctd_start(&lctd, extra);
}

static void start(const char *slack) { start_idle(slack, "2s"); }

static uint64_t held(lct_client *c) { return test_metric(c, "lct_pool_held_bytes "); }
static uint64_t stored(lct_client *c) { return test_metric(c, "lct_stored_bytes "); }

/* Puts "tiny", one f32 into an empty pool: what lctd then holds is one granule, which it returns. */
static uint64_t put_tiny(lct_client *c) {
  float one = 1.0f;
  test_put_ok(c, "tiny", LCT_DTYPE_F32, &one, sizeof one, NULL);
  return held(c);
}

static uint64_t device_free(void) {
  size_t f, t;
  CUDA_CHECK(cudaMemGetInfo(&f, &t));
  return f;
}

/* Puts tensors t<first>..t<first + n - 1>, each BYTES of seeded bf16 data. */
static void put_all(lct_client *c, int first, int n, uint64_t seed) {
  for (int i = first; i < first + n; i++) {
    uint8_t *data = test_bf16_data(seed + (uint64_t)i, BYTES / 2);
    char key[32];
    snprintf(key, sizeof key, "t%d", i);
    test_put_ok(c, key, LCT_DTYPE_BF16, data, BYTES, NULL);
    free(data);
  }
}

static void delete_all(lct_client *c, int first, int n) {
  for (int i = first; i < first + n; i++) {
    char key[32];
    snprintf(key, sizeof key, "t%d", i);
    cr_assert_eq(lct_delete(c, key), 0);
  }
}

/* Held is stored plus at most a few partly filled granules (no slack). */
static void held_packed(lct_client *c, uint64_t granule, const char *when) {
  uint64_t h = held(c), s = stored(c);
  cr_assert_geq(h, s, "%s: held %llu below stored %llu", when, (unsigned long long)h, (unsigned long long)s);
  cr_assert_leq(h, s + 8 * granule, "%s: held %llu for %llu stored", when, (unsigned long long)h,
                (unsigned long long)s);
}

Test(held, follows_puts_and_deletes, .fini = stop) {
  NEED_GPU();
  CUDA_CHECK(cudaFree(0)); /* this process's own context, before the free memory is first read */
  start("0");
  lct_client *c = test_connect(lctd.ipc);
  cr_assert_eq(held(c), 0, "nothing is mapped before a put");
  /* The same puts and their deletes first: lctd's kernels are loaded (lazily,
   * with their local memory) and its workspaces grown before the free memory is read. */
  put_all(c, 0, N, 1);
  delete_all(c, 0, N);
  cr_assert_eq(held(c), 0, "a delete gives everything back with no slack");
  const uint64_t free0 = device_free();
  const uint64_t G = put_tiny(c);
  cr_assert(G >= 4096 && (G & (G - 1)) == 0, "one granule for a 4-byte tensor: %llu", (unsigned long long)G);
  put_all(c, 0, N, 100);
  held_packed(c, G, "after the puts");
  const uint64_t h = held(c);
  cr_assert_eq(test_stats(c).pool_held, h, "STATS says what /metrics says");
  /* The GPU saw lctd's memory grow by what it reports holding. */
  int64_t seen = (int64_t)free0 - (int64_t)device_free();
  cr_assert(llabs(seen - (int64_t)h) <= (int64_t)(4 * G), "the device lost %lld bytes; lctd holds %llu",
            (long long)seen, (unsigned long long)h);
  /* Overwrites with other data: the old versions go, held stays packed. */
  for (int round = 0; round < 3; round++) {
    put_all(c, 0, N, 1000 * (uint64_t)(round + 1));
    held_packed(c, G, "after overwrites");
  }
  delete_all(c, 0, N / 2);
  held_packed(c, G, "after deleting half");
  delete_all(c, N / 2, N / 2);
  cr_assert_eq(lct_delete(c, "tiny"), 0);
  cr_assert_eq(held(c), 0, "nothing stored, no slack: nothing held");
  seen = (int64_t)free0 - (int64_t)device_free();
  cr_assert(llabs(seen) <= (int64_t)(4 * G), "the device got its memory back (%lld bytes short)", (long long)seen);
  lct_close(c);
}

Test(held, the_slack_bounds_what_stays, .fini = stop) {
  NEED_GPU();
  start("32M");
  lct_client *c = test_connect(lctd.ipc);
  const uint64_t G = put_tiny(c);
  cr_assert_eq(lct_delete(c, "tiny"), 0);
  cr_assert_eq(held(c), G, "one empty granule, within the slack, stays mapped");
  put_all(c, 0, N, 7);
  cr_assert_gt(held(c), 32 << 20);
  delete_all(c, 0, N);
  const uint64_t slack = held(c);
  cr_assert_eq(slack, (32 << 20) / G * G, "empty granules up to memory_slack stay mapped, the rest go");
  put_all(c, 0, 1, 7);
  cr_assert_eq(held(c), slack, "a put that fits the slack maps nothing");
  lct_close(c);
}

Test(held, device_puts_and_gets, .fini = stop) {
  /* The device path encodes into and decodes from the mapped granules. */
  NEED_GPU();
  start("0");
  lct_client *c = test_connect(lctd.ipc);
  const uint64_t G = put_tiny(c);
  uint8_t *host = test_bf16_data(5, BYTES / 2), *back = malloc(BYTES);
  void *src, *dst;
  CUDA_CHECK(cudaMalloc(&src, BYTES));
  CUDA_CHECK(cudaMalloc(&dst, BYTES));
  CUDA_CHECK(cudaMemcpy(src, host, BYTES, cudaMemcpyHostToDevice));
  uint64_t shape[1] = {BYTES / 2};
  for (int i = 0; i < 4; i++) {
    char key[32];
    snprintf(key, sizeof key, "d%d", i);
    cr_assert_eq(lct_put_device(c, key, LCT_DTYPE_BF16, shape, 1, src, BYTES, NULL), 0, "%s", lct_last_error(c));
  }
  cr_assert_eq(test_stats(c).device_fallbacks, 0, "device to device");
  held_packed(c, G, "after the device puts");
  cr_assert_eq(lct_get_device(c, "d3", dst, BYTES, NULL), 0, "%s", lct_last_error(c));
  CUDA_CHECK(cudaMemcpy(back, dst, BYTES, cudaMemcpyDeviceToHost));
  cr_assert_eq(memcmp(back, host, BYTES), 0, "the bytes came back");
  for (int i = 0; i < 4; i++) {
    char key[32];
    snprintf(key, sizeof key, "d%d", i);
    cr_assert_eq(lct_delete(c, key), 0);
  }
  cr_assert_eq(lct_delete(c, "tiny"), 0);
  cr_assert_eq(held(c), 0);
  CUDA_CHECK(cudaFree(src));
  CUDA_CHECK(cudaFree(dst));
  free(host);
  free(back);
  lct_close(c);
}

Test(held, freed_client_buffers_go_back, .fini = stop) {
  /* lctd keeps a client's allocation mapped between its device requests; once the client has freed it and
   * ipc_idle has passed, lctd unmaps it and the GPU has the memory back. */
  NEED_GPU();
  CUDA_CHECK(cudaFree(0));
  start_idle("0", "200ms");
  lct_client *c = test_connect(lctd.ipc);
  const size_t bytes = 256u << 20;
  const uint64_t before = device_free();
  void *buf;
  CUDA_CHECK(cudaMalloc(&buf, bytes));
  CUDA_CHECK(cudaMemset(buf, 0x3c, bytes));
  uint64_t shape[1] = {bytes / 2};
  cr_assert_eq(lct_put_device(c, "scratch", LCT_DTYPE_BF16, shape, 1, buf, bytes, NULL), 0, "%s", lct_last_error(c));
  cr_assert_eq(test_stats(c).device_fallbacks, 0, "device to device");
  cr_assert_geq(test_metric(c, "lct_ipc_mapped_bytes "), bytes, "the client's allocation is mapped");
  cr_assert_eq(lct_delete(c, "scratch"), 0);
  CUDA_CHECK(cudaFree(buf));
  uint64_t mapped = 1;
  for (int i = 0; i < 100 && mapped != 0; i++) {
    usleep(50 * 1000);
    mapped = test_metric(c, "lct_ipc_mapped_bytes ");
  }
  cr_assert_eq(mapped, 0, "unmapped after ipc_idle");
  const uint64_t after = device_free();
  cr_assert_geq(after + (16u << 20), before, "the GPU has the freed buffer back: %llu MiB free, %llu before",
                (unsigned long long)(after >> 20), (unsigned long long)(before >> 20));
  lct_close(c);
}
