/* test_device.c — lct_put_device and lct_get_device against a real lctd: device to device on the cuda backend, the host path (counted) on the cpu backend. */
#include <cuda_runtime_api.h>

#include "lct_checksum.h"
#include "lctd_harness.h"
#include "test_util.h"

/* Real tensor slices: every coded dtype's kinds of training state. */
static const char *const slices[] = {"A_s100_w.bf16.bin", "A_s100_v.bf16.bin", "A_s400_m.f32.bin",
                                     "A_s400_g.f32.bin", "A_s400_act.bf16.bin", "A_s100_w.f32.bin"};
#define N_SLICES (sizeof slices / sizeof slices[0])

#define NEED_GPU()                                                             \
  do {                                                                         \
    int n_ = 0;                                                                \
    if (cudaGetDeviceCount(&n_) != cudaSuccess || n_ == 0) cr_skip_test("no CUDA device"); \
  } while (0)

#define CUDA_CHECK(call) cr_assert_eq((call), cudaSuccess, "%s", #call)

static test_lctd lctd;

/* lctd with backend; a small pool so that the GPU is not reserved whole. */
static void start(const char *backend) {
  setenv("LCT_TEST_BACKEND", backend, 1);
  const char *extra[] = {"--memory", "512M", "--threads", "4", NULL};
  test_lctd_start(&lctd, extra);
}

static void stop(void) { test_lctd_stop(&lctd); }

/* The value of the Prometheus line that starts with series (name, labels and a space). */
static uint64_t metric(lct_client *c, const char *series) {
  char *text, needle[256];
  cr_assert_eq(lct_stats(c, NULL, &text), 0);
  snprintf(needle, sizeof needle, "\n%s", series);
  char *p = strstr(text, needle);
  cr_assert(p != NULL, "no %s in the metrics", series);
  uint64_t v = strtoull(p + strlen(needle), NULL, 10);
  free(text);
  return v;
}

/* Puts each slice from device memory at an odd element offset into one
 * allocation, gets it back into another, and compares the bytes there and
 * through the host path. */
static void round_trip(lct_client *c) {
  uint8_t *src, *dst;
  CUDA_CHECK(cudaMalloc((void **)&src, 4 << 20));
  CUDA_CHECK(cudaMalloc((void **)&dst, 4 << 20));
  size_t at = 0;
  for (size_t i = 0; i < N_SLICES; i++) {
    size_t bytes;
    uint8_t *host = test_read_data(slices[i], &bytes);
    int dtype = test_dtype_from_name(slices[i]);
    size_t esize = lct_dtype_size(dtype);
    at += esize * 3; /* aligned to the element, not to 16 bytes */
    cr_assert_leq(at + bytes, (size_t)4 << 20);
    CUDA_CHECK(cudaMemcpy(src + at, host, bytes, cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaMemset(dst + at, 0xA5, bytes));
    uint64_t shape[1] = {bytes / esize};
    lct_tensor_info info;
    int rc = lct_put_device(c, slices[i], dtype, shape, 1, src + at, bytes, &info);
    cr_assert_eq(rc, 0, "put_device %s: %s (%s)", slices[i], lct_strerror(rc), lct_last_error(c));
    cr_assert_eq(info.raw_bytes, bytes);
    cr_assert_eq(info.checksum, lct_crc32c(0, host, bytes), "%s: the stored CRC-32C is the bytes'", slices[i]);
    cr_assert_lt(info.stored_bytes, bytes, "%s is compressed", slices[i]);
    rc = lct_get_device(c, slices[i], dst + at, bytes, &info);
    cr_assert_eq(rc, 0, "get_device %s: %s (%s)", slices[i], lct_strerror(rc), lct_last_error(c));
    uint8_t *back = malloc(bytes);
    CUDA_CHECK(cudaMemcpy(back, dst + at, bytes, cudaMemcpyDeviceToHost));
    cr_assert_eq(memcmp(back, host, bytes), 0, "%s: device round trip is byte-identical", slices[i]);
    memset(back, 0, bytes);
    cr_assert_eq(lct_get(c, slices[i], back, bytes, NULL), 0, "host get of a device put: %s", lct_last_error(c));
    cr_assert_eq(memcmp(back, host, bytes), 0, "%s: host get is byte-identical", slices[i]);
    free(back);
    free(host);
    at += bytes;
  }
  CUDA_CHECK(cudaFree(src));
  CUDA_CHECK(cudaFree(dst));
}

Test(device, round_trip_device_to_device, .fini = stop) {
  NEED_GPU();
  start("cuda");
  lct_client *c = test_connect(lctd.ipc);
  round_trip(c);
  lct_server_stats st;
  cr_assert_eq(lct_stats(c, &st, NULL), 0);
  cr_assert_eq(st.device_puts, N_SLICES);
  cr_assert_eq(st.device_gets, N_SLICES);
  cr_assert_eq(st.device_fallbacks, 0, "no fallback: %s", lct_last_error(c));
  cr_assert_eq(metric(c, "lct_device_ops_total{op=\"put\"} "), N_SLICES);
  lct_close(c);
}

Test(device, mapping_cached_and_checked, .fini = stop) {
  NEED_GPU();
  start("cuda");
  lct_client *c = test_connect(lctd.ipc);
  /* 8 MiB of f32: eight segments encoded and decoded in parallel. */
  size_t bytes = 8 << 20, n = bytes / 4;
  float *host = malloc(bytes);
  test_rng rng = {42};
  for (size_t i = 0; i < n; i++) host[i] = (float)(test_rand(&rng) % 20000) / 997.0f - 10.0f;
  float *a, *b;
  CUDA_CHECK(cudaMalloc((void **)&a, bytes));
  CUDA_CHECK(cudaMalloc((void **)&b, bytes));
  CUDA_CHECK(cudaMemcpy(a, host, bytes, cudaMemcpyHostToDevice));
  uint64_t shape[2] = {1024, n / 1024};
  for (int i = 0; i < 5; i++) {
    host[i] += 1.0f; /* a new version each time */
    CUDA_CHECK(cudaMemcpy(a, host, bytes, cudaMemcpyHostToDevice));
    lct_tensor_info info;
    cr_assert_eq(lct_put_device(c, "big", LCT_DTYPE_F32, shape, 2, a, bytes, &info), 0, "%s", lct_last_error(c));
    cr_assert_eq(info.checksum, lct_crc32c(0, host, bytes));
    cr_assert_eq(lct_get_device(c, "big", b, bytes, &info), 0, "%s", lct_last_error(c));
  }
  float *back = malloc(bytes);
  CUDA_CHECK(cudaMemcpy(back, b, bytes, cudaMemcpyDeviceToHost));
  cr_assert_eq(memcmp(back, host, bytes), 0);
  cr_assert_eq(metric(c, "lct_ipc_opens_total "), 2, "each allocation opened once for 10 calls");
  /* Half of a: another offset into the same allocation, the same mapping. */
  uint64_t half[1] = {n / 2};
  cr_assert_eq(lct_put_device(c, "half", LCT_DTYPE_F32, half, 1, a + n / 2, bytes / 2, NULL), 0);
  cr_assert_eq(metric(c, "lct_ipc_opens_total "), 2);
  /* Errors: a too-small buffer, host memory, a size that disagrees with the shape. */
  lct_tensor_info info;
  cr_assert_eq(lct_get_device(c, "big", b, bytes - 4, &info), LCT_EBUFSIZE);
  cr_assert_eq(info.raw_bytes, bytes, "info says the size needed");
  cr_assert_eq(lct_put_device(c, "x", LCT_DTYPE_F32, shape, 2, host, bytes, NULL), LCT_EINVAL);
  cr_assert_eq(lct_put_device(c, "x", LCT_DTYPE_F32, shape, 2, a, bytes - 4, NULL), LCT_ESIZE);
  lct_server_stats st;
  cr_assert_eq(lct_stats(c, &st, NULL), 0);
  cr_assert_eq(st.device_puts, 6);
  cr_assert_eq(st.device_gets, 5);
  cr_assert_eq(st.device_fallbacks, 0);
  free(back);
  free(host);
  CUDA_CHECK(cudaFree(a));
  CUDA_CHECK(cudaFree(b));
  lct_close(c);
}

Test(device, cpu_backend_falls_back, .fini = stop) {
  NEED_GPU();
  start("cpu");
  lct_client *c = test_connect(lctd.ipc);
  round_trip(c);
  lct_server_stats st;
  cr_assert_eq(lct_stats(c, &st, NULL), 0);
  cr_assert_eq(st.device_puts, 0);
  cr_assert_eq(st.device_gets, 0);
  cr_assert_eq(st.device_fallbacks, 2 * N_SLICES);
  cr_assert_eq(metric(c, "lct_device_fallbacks_total{reason=\"cpu_backend\"} "), 2 * N_SLICES);
  cr_assert_eq(metric(c, "lct_device_fallbacks_total{reason=\"ipc_open_failed\"} "), 0);
  lct_close(c);
}
