/* test_device_peer.c — device puts and gets of a buffer on GPU 0 into an lctd on GPU 1: in place over peer access, else the counted host path. */
#include <cuda_runtime_api.h>

#include "lct_checksum.h"
#include "lctd_harness.h"
#include "test_gpu.h"
#include "test_util.h"

static const char *const slices[] = {"A_s100_w.bf16.bin", "A_s400_v.bf16.bin", "A_s400_m.f32.bin",
                                     "A_s400_g.f32.bin"};
#define N_SLICES (sizeof slices / sizeof slices[0])

static test_lctd lctd;

static void stop(void) { test_lctd_stop(&lctd); }

/* lctd's GPU (1) reaches the trainer's (0), or the test is moot: how many GPUs, and whether it does. */
static int peer_reachable(void) {
  int n = 0, can = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) cr_skip_test("fewer than two CUDA devices");
  CUDA_CHECK(cudaDeviceCanAccessPeer(&can, 1, 0));
  return can;
}

/* Each slice put from GPU 0 (single and _MANY), read back into GPU 0, byte for byte. */
static void round_trip(lct_client *c) {
  CUDA_CHECK(cudaSetDevice(0));
  uint8_t *src, *dst;
  CUDA_CHECK(cudaMalloc((void **)&src, 4 << 20));
  CUDA_CHECK(cudaMalloc((void **)&dst, 4 << 20));
  uint8_t *host[N_SLICES];
  size_t bytes[N_SLICES], at[N_SLICES], off = 0;
  uint64_t shape[N_SLICES][1];
  char keys[N_SLICES][64];
  lct_device_tensor puts[N_SLICES], gets[N_SLICES];
  for (size_t i = 0; i < N_SLICES; i++) {
    host[i] = test_read_data(slices[i], &bytes[i]);
    int dtype = test_dtype_from_name(slices[i]);
    size_t esize = lct_dtype_size(dtype);
    at[i] = off = (off + esize - 1) / esize * esize;
    off += bytes[i];
    cr_assert_leq(off, (size_t)4 << 20);
    shape[i][0] = bytes[i] / esize;
    snprintf(keys[i], sizeof keys[i], "peer/many/%s", slices[i]);
    CUDA_CHECK(cudaMemcpy(src + at[i], host[i], bytes[i], cudaMemcpyHostToDevice));
    puts[i] = (lct_device_tensor){keys[i], dtype, shape[i], 1, src + at[i], bytes[i], NULL};
    gets[i] = (lct_device_tensor){keys[i], LCT_DTYPE_RAW, NULL, 0, dst + at[i], bytes[i], NULL};
    lct_tensor_info info;
    int rc = lct_put_device(c, slices[i], dtype, shape[i], 1, src + at[i], bytes[i], &info);
    cr_assert_eq(rc, 0, "put_device %s: %s (%s)", slices[i], lct_strerror(rc), lct_last_error(c));
    cr_assert_eq(info.checksum, lct_crc32c(0, host[i], bytes[i]), "%s: the stored CRC-32C", slices[i]);
    cr_assert_eq(lct_get_device(c, slices[i], dst + at[i], bytes[i], NULL), 0, "%s", lct_last_error(c));
  }
  size_t failed;
  cr_assert_eq(lct_put_device_many(c, puts, N_SLICES, &failed), 0, "put_device_many: %s", lct_last_error(c));
  uint8_t *back = malloc(4 << 20);
  for (int pass = 0; pass < 2; pass++) {
    CUDA_CHECK(cudaMemcpy(back, dst, off, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < N_SLICES; i++)
      cr_assert_eq(memcmp(back + at[i], host[i], bytes[i]), 0, "%s differs (pass %d)", slices[i], pass);
    CUDA_CHECK(cudaMemset(dst, 0xA5, off));
    if (pass == 0)
      cr_assert_eq(lct_get_device_many(c, gets, N_SLICES, &failed), 0, "get_device_many: %s", lct_last_error(c));
  }
  free(back);
  for (size_t i = 0; i < N_SLICES; i++) free(host[i]);
  CUDA_CHECK(cudaFree(src));
  CUDA_CHECK(cudaFree(dst));
}

Test(device_peer, buffer_on_another_gpu, .fini = stop) {
  int can = peer_reachable();
  setenv("LCT_TEST_BACKEND", "cuda", 1);
  const char *extra[] = {"--memory", "512M", "--threads", "4", "--device", "1", NULL};
  test_lctd_start(&lctd, extra);
  lct_client *c = test_connect(lctd.ipc);
  round_trip(c);
  lct_server_stats st = test_stats(c);
  /* 2 * N_SLICES single calls, then one _MANY request each way. */
  if (can) {
    cr_assert_eq(st.device_puts, 2 * N_SLICES, "peer access: device to device");
    cr_assert_eq(st.device_gets, N_SLICES + N_SLICES);
    cr_assert_eq(st.device_fallbacks, 0, "no fallback over peer access");
    cr_assert_eq(test_metric(c, "lct_device_peer_requests_total "), 2 * N_SLICES + 2);
  } else {
    cr_assert_eq(st.device_puts, 0, "no peer access: the host path");
    cr_assert_eq(test_metric(c, "lct_device_fallbacks_total{reason=\"other_device\"} "), 2 * N_SLICES + 2);
    cr_assert_eq(test_metric(c, "lct_device_peer_requests_total "), 0);
  }
  lct_close(c);
}

/* On lctd's own GPU nothing is a peer request. */
Test(device_peer, same_gpu_is_no_peer_request, .fini = stop) {
  peer_reachable();
  setenv("LCT_TEST_BACKEND", "cuda", 1);
  const char *extra[] = {"--memory", "512M", "--threads", "4", "--device", "0", NULL};
  test_lctd_start(&lctd, extra);
  lct_client *c = test_connect(lctd.ipc);
  round_trip(c);
  cr_assert_eq(test_stats(c).device_fallbacks, 0);
  cr_assert_eq(test_metric(c, "lct_device_peer_requests_total "), 0);
  lct_close(c);
}
