/* test_device.c — lct_put_device and lct_get_device against a real lctd: device to device on the cuda backend, the host path (counted) on the cpu backend. */
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <pthread.h>

#include "lct_checksum.h"
#include "lctd_harness.h"
#include "test_gpu.h"
#include "test_util.h"

/* Real tensor slices: every coded dtype's kinds of training state. */
static const char *const slices[] = {"A_s100_w.bf16.bin", "A_s100_v.bf16.bin", "A_s400_m.f32.bin",
                                     "A_s400_g.f32.bin", "A_s400_act.bf16.bin", "A_s100_w.f32.bin"};
#define N_SLICES (sizeof slices / sizeof slices[0])

static test_lctd lctd;

/* lctd with backend; a small pool so that the GPU is not reserved whole. */
static void start(const char *backend) {
  setenv("LCT_TEST_BACKEND", backend, 1);
  const char *extra[] = {"--memory", "512M", "--threads", "4", NULL};
  test_lctd_start(&lctd, extra);
}

/* The same with 64 KiB segments: each 128 KiB slice spans two. */
static void start_segmented(void) {
  setenv("LCT_TEST_BACKEND", "cuda", 1);
  const char *extra[] = {"--memory", "512M", "--threads", "4", "--segment-size", "64K", NULL};
  test_lctd_start(&lctd, extra);
}

#define SEGMENT (64u << 10)

static void stop(void) { test_lctd_stop(&lctd); }

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
    at = (at + esize - 1) / esize * esize + esize * 3; /* aligned to the element, not to 16 bytes */
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
  lct_server_stats st = test_stats(c);
  cr_assert_eq(st.device_puts, N_SLICES);
  cr_assert_eq(st.device_gets, N_SLICES);
  cr_assert_eq(st.device_fallbacks, 0, "no fallback: %s", lct_last_error(c));
  cr_assert_eq(test_metric(c, "lct_device_ops_total{op=\"put\"} "), N_SLICES);
  lct_close(c);
}

/* A client over tcp held to the host path, as one on another host. */
static lct_client *connect_remote(void) {
  lct_options o;
  lct_options_init(&o);
  o.endpoint = lctd.tcp;
  o.host_path = 1;
  lct_client *c;
  cr_assert_eq(lct_connect(&o, &c), 0);
  return c;
}

/* A client held to the host path (as one on another host) moves every byte
 * through the socket, though lctd could go device to device. */
Test(device, remote_mode_takes_the_host_path, .fini = stop) {
  NEED_GPU();
  start("cuda");
  lct_client *c = connect_remote();
  round_trip(c);
  lct_server_stats st = test_stats(c);
  cr_assert_eq(st.device_puts + st.device_gets + st.device_fallbacks, 0, "nothing went device to device");
  cr_assert_geq(st.bytes_in, 4000, "the tensors crossed the socket");
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
  cr_assert_eq(test_metric(c, "lct_ipc_opens_total "), 2, "each allocation opened once for 10 calls");
  /* Half of a: another offset into the same allocation, the same mapping. */
  uint64_t half[1] = {n / 2};
  cr_assert_eq(lct_put_device(c, "half", LCT_DTYPE_F32, half, 1, a + n / 2, bytes / 2, NULL), 0);
  cr_assert_eq(test_metric(c, "lct_ipc_opens_total "), 2);
  /* Errors: a too-small buffer, host memory, a size that disagrees with the shape. */
  lct_tensor_info info;
  cr_assert_eq(lct_get_device(c, "big", b, bytes - 4, &info), LCT_EBUFSIZE);
  cr_assert_eq(info.raw_bytes, bytes, "info says the size needed");
  cr_assert_eq(lct_put_device(c, "x", LCT_DTYPE_F32, shape, 2, host, bytes, NULL), LCT_EINVAL);
  cr_assert_eq(lct_put_device(c, "x", LCT_DTYPE_F32, shape, 2, a, bytes - 4, NULL), LCT_ESIZE);
  lct_server_stats st = test_stats(c);
  cr_assert_eq(st.device_puts, 6);
  cr_assert_eq(st.device_gets, 5);
  cr_assert_eq(st.device_fallbacks, 0);
  free(back);
  free(host);
  CUDA_CHECK(cudaFree(a));
  CUDA_CHECK(cudaFree(b));
  lct_close(c);
}

/* With a stream set, the device calls wait for that stream only: bytes it is
 * still copying in when the put is called are the bytes stored. */
static void stream_scoped_round_trip(lct_client *c) {
  size_t bytes = 64 << 20, n = bytes / 4;
  float *host, *back, *a, *b;
  CUDA_CHECK(cudaMallocHost((void **)&host, bytes));
  CUDA_CHECK(cudaMallocHost((void **)&back, bytes));
  test_rng rng = {9};
  for (size_t i = 0; i < n; i++) host[i] = (float)(test_rand(&rng) % 40000) / 1999.0f - 10.0f;
  CUDA_CHECK(cudaMalloc((void **)&a, bytes));
  CUDA_CHECK(cudaMalloc((void **)&b, bytes));
  cudaStream_t s;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CUDA_CHECK(cudaMemcpyAsync(a, host, bytes, cudaMemcpyHostToDevice, s));
  cr_assert_eq(lct_set_device_stream(c, s), 0);
  uint64_t half[1] = {n / 2};
  lct_tensor_info info[2];
  lct_device_tensor t[2] = {{"lo", LCT_DTYPE_F32, half, 1, a, bytes / 2, &info[0]},
                            {"hi", LCT_DTYPE_F32, half, 1, a + n / 2, bytes / 2, &info[1]}};
  size_t failed;
  cr_assert_eq(lct_put_device_many(c, t, 2, &failed), 0, "%s", lct_last_error(c));
  cr_assert_eq(info[0].checksum, lct_crc32c(0, host, bytes / 2), "the copy on the stream landed first");
  cr_assert_eq(info[1].checksum, lct_crc32c(0, host + n / 2, bytes / 2));
  /* A get into b, then a copy out on the same stream, with no other wait. */
  t[0].dptr = b, t[1].dptr = b + n / 2;
  cr_assert_eq(lct_get_device_many(c, t, 2, &failed), 0, "%s", lct_last_error(c));
  CUDA_CHECK(cudaMemcpyAsync(back, b, bytes, cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  cr_assert_eq(memcmp(back, host, bytes), 0);
  cr_assert_eq(lct_set_device_stream(c, NULL), 0, "the whole GPU again");
  cr_assert_eq(lct_get_device(c, "lo", b, bytes / 2, NULL), 0, "%s", lct_last_error(c));
  CUDA_CHECK(cudaStreamDestroy(s));
  CUDA_CHECK(cudaFree(a));
  CUDA_CHECK(cudaFree(b));
  CUDA_CHECK(cudaFreeHost(host));
  CUDA_CHECK(cudaFreeHost(back));
}

Test(device, stream_scoped_synchronization, .fini = stop) {
  NEED_GPU();
  start("cuda");
  lct_client *c = test_connect(lctd.ipc);
  stream_scoped_round_trip(c);
  lct_close(c);
}

/* The same held to the host path: its copies through host memory wait for the stream too. */
Test(device, stream_scoped_synchronization_on_the_host_path, .fini = stop) {
  NEED_GPU();
  start("cuda");
  lct_client *c = connect_remote();
  stream_scoped_round_trip(c);
  cr_assert_eq(test_stats(c).device_puts, 0, "nothing went device to device");
  lct_close(c);
}

Test(device, cpu_backend_falls_back, .fini = stop) {
  NEED_GPU();
  start("cpu");
  lct_client *c = test_connect(lctd.ipc);
  round_trip(c);
  lct_server_stats st = test_stats(c);
  cr_assert_eq(st.device_puts, 0);
  cr_assert_eq(st.device_gets, 0);
  cr_assert_eq(st.device_fallbacks, 2 * N_SLICES);
  cr_assert_eq(test_metric(c, "lct_device_fallbacks_total{reason=\"cpu_backend\"} "), 2 * N_SLICES);
  cr_assert_eq(test_metric(c, "lct_device_fallbacks_total{reason=\"ipc_open_failed\"} "), 0);
  lct_close(c);
}

/* ---- many tensors per request (lct_put_device_many, lct_get_device_many) ---- */

/* The slices at element-aligned offsets of one allocation. */
typedef struct slice_set {
  uint8_t *host[N_SLICES];
  size_t bytes[N_SLICES], at[N_SLICES];
  uint64_t shape[N_SLICES][1];
  int dtype[N_SLICES];
  size_t total;
} slice_set;

static void slices_load(slice_set *s) {
  s->total = 0;
  for (size_t i = 0; i < N_SLICES; i++) {
    s->host[i] = test_read_data(slices[i], &s->bytes[i]);
    s->dtype[i] = test_dtype_from_name(slices[i]);
    size_t esize = lct_dtype_size(s->dtype[i]);
    s->total = (s->total + esize - 1) / esize * esize + esize; /* aligned to the element only */
    s->at[i] = s->total;
    s->shape[i][0] = s->bytes[i] / esize;
    s->total += s->bytes[i];
  }
}

static void slices_free(slice_set *s) {
  for (size_t i = 0; i < N_SLICES; i++) free(s->host[i]);
}

/* The set's bytes at their offsets of a new device allocation *src, and an
 * allocation *dst of the same size. */
static void slices_to_device(const slice_set *s, uint8_t **src, uint8_t **dst) {
  CUDA_CHECK(cudaMalloc((void **)src, s->total));
  CUDA_CHECK(cudaMalloc((void **)dst, s->total));
  for (size_t i = 0; i < N_SLICES; i++)
    CUDA_CHECK(cudaMemcpy(*src + s->at[i], s->host[i], s->bytes[i], cudaMemcpyHostToDevice));
}

/* The set's tensors as items keyed prefix+slice in buf. */
static void slices_items(const slice_set *s, const char *prefix, uint8_t *buf, char keys[][128],
                         lct_tensor_info *info, lct_device_tensor *t) {
  for (size_t i = 0; i < N_SLICES; i++) {
    snprintf(keys[i], 128, "%s%s", prefix, slices[i]);
    t[i] = (lct_device_tensor){keys[i], s->dtype[i], s->shape[i], 1, buf + s->at[i], s->bytes[i], &info[i]};
  }
}

Test(device, many_round_trip_and_drift, .fini = stop) {
  NEED_GPU();
  start_segmented();
  lct_client *c = test_connect(lctd.ipc);
  slice_set s;
  slices_load(&s);
  uint8_t *src, *dst;
  slices_to_device(&s, &src, &dst);
  char keys[N_SLICES][128];
  lct_tensor_info info[N_SLICES];
  lct_device_tensor put[N_SLICES], get[N_SLICES];
  slices_items(&s, "many/", src, keys, info, put);
  size_t failed = 99;
  lct_server_stats st0 = test_stats(c);
  /* First put builds the codebooks; the second reuses them; a drifted third rebuilds. */
  for (int round = 0; round < 2; round++) {
    int rc = lct_put_device_many(c, put, N_SLICES, &failed);
    cr_assert_eq(rc, 0, "put_device_many: %s (%s), item %zu", lct_strerror(rc), lct_last_error(c), failed);
    cr_assert_eq(failed, N_SLICES);
    for (size_t i = 0; i < N_SLICES; i++) {
      cr_assert_eq(info[i].raw_bytes, s.bytes[i]);
      cr_assert_eq(info[i].checksum, lct_crc32c(0, s.host[i], s.bytes[i]), "%s: CRC-32C of the bytes", slices[i]);
      cr_assert_lt(info[i].stored_bytes, s.bytes[i], "%s is compressed", slices[i]);
    }
  }
  lct_server_stats st1 = test_stats(c);
  cr_assert_eq(st1.codebook_builds - st0.codebook_builds, N_SLICES, "built once per key, then reused");
  cr_assert_eq(st1.device_puts - st0.device_puts, 2 * N_SLICES);
  slices_items(&s, "many/", dst, keys, info, get);
  CUDA_CHECK(cudaMemset(dst, 0xA5, s.total));
  cr_assert_eq(lct_get_device_many(c, get, N_SLICES, &failed), 0, "%s", lct_last_error(c));
  uint8_t *back = malloc(s.total);
  CUDA_CHECK(cudaMemcpy(back, dst, s.total, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < N_SLICES; i++) {
    cr_assert_eq(memcmp(back + s.at[i], s.host[i], s.bytes[i]), 0, "%s: device round trip", slices[i]);
    uint8_t *h = malloc(s.bytes[i]);
    cr_assert_eq(lct_get(c, keys[i], h, s.bytes[i], NULL), 0, "host get of a batch put: %s", lct_last_error(c));
    cr_assert_eq(memcmp(h, s.host[i], s.bytes[i]), 0, "%s: host get", slices[i]);
    free(h);
  }
  /* Drift: with the sign and high exponent bits flipped, no slice fits its codebook. */
  for (size_t i = 0; i < N_SLICES; i++) {
    uint8_t *h = s.host[i];
    size_t esize = lct_dtype_size(s.dtype[i]);
    for (size_t k = 0; k + esize <= s.bytes[i]; k += esize) {
      h[k + esize - 1] ^= 0x95;       /* the sign and three exponent bits */
    }
    CUDA_CHECK(cudaMemcpy(src + s.at[i], h, s.bytes[i], cudaMemcpyHostToDevice));
  }
  /* The drifted put is stored as coded (with its stale codebooks); the next
   * put of the keys takes histograms in the same pass and rebuilds them, and
   * the put after that codes the data at the ratio of a fitting codebook. */
  uint64_t drifted[N_SLICES], refit[N_SLICES];
  for (int round = 0; round < 3; round++) {
    cr_assert_eq(lct_put_device_many(c, put, N_SLICES, &failed), 0, "%s", lct_last_error(c));
    for (size_t i = 0; i < N_SLICES; i++) {
      if (round == 0) drifted[i] = info[i].stored_bytes;
      if (round == 2) refit[i] = info[i].stored_bytes;
    }
  }
  lct_server_stats st2 = test_stats(c);
  cr_assert_eq(st2.codebook_rebuilds - st1.codebook_rebuilds, N_SLICES, "drift rebuilds every codebook once");
  int smaller = 0;
  for (size_t i = 0; i < N_SLICES; i++) {
    smaller += refit[i] < drifted[i];
    /* The rebuilt codebook is the one the CPU builds from the whole tensor
     * (its segments' counts added up), each segment coded with it. */
    const size_t esize = lct_dtype_size(s.dtype[i]);
    lct_codebook cb;
    cr_assert_eq(lct_codebook_from_data(s.dtype[i], s.host[i], s.bytes[i] / esize, &cb), 0);
    uint64_t expect = 0;
    cr_assert_gt(s.bytes[i], SEGMENT, "%s spans segments", slices[i]);
    for (size_t at = 0; at < s.bytes[i]; at += SEGMENT) {
      const uint64_t n = (s.bytes[i] - at < SEGMENT ? s.bytes[i] - at : SEGMENT) / esize;
      size_t cap = lct_encode_bound(s.dtype[i], n);
      uint8_t *blob = malloc(cap);
      lct_encode_stats est;
      cr_assert_eq(lct_encode(s.dtype[i], &cb, s.host[i] + at, n, blob, cap, &est), 0);
      expect += est.blob_bytes;
      free(blob);
    }
    cr_assert_eq(refit[i], expect, "%s: stored %llu bytes after the rebuild, the CPU's codebook %llu", slices[i],
                 (unsigned long long)refit[i], (unsigned long long)expect);
  }
  cr_assert_geq(smaller, 1, "a rebuilt codebook codes the data tighter than the stale one");
  cr_assert_eq(lct_get_device_many(c, get, N_SLICES, &failed), 0, "%s", lct_last_error(c));
  CUDA_CHECK(cudaMemcpy(back, dst, s.total, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < N_SLICES; i++) {
    cr_assert_eq(memcmp(back + s.at[i], s.host[i], s.bytes[i]), 0, "%s: after a rebuild", slices[i]);
    cr_assert_eq(info[i].checksum, lct_crc32c(0, s.host[i], s.bytes[i]));
  }
  cr_assert_eq(st2.device_fallbacks, 0, "no fallback");
  free(back);
  slices_free(&s);
  CUDA_CHECK(cudaFree(src));
  CUDA_CHECK(cudaFree(dst));
  lct_close(c);
}

/* One client's batch puts, on a thread of their own. */
typedef struct put_loop {
  lct_client *c;
  lct_device_tensor *items;
  int rounds;
  int rc;
  size_t failed;
} put_loop;

static void *put_loop_run(void *arg) {
  put_loop *p = arg;
  for (int r = 0; r < p->rounds && p->rc == 0; r++)
    p->rc = lct_put_device_many(p->c, p->items, N_SLICES, &p->failed);
  return NULL;
}

/* lctd decodes a get while it encodes a put (their own streams and
 * workspaces): one client puts a set over and over while another gets a
 * second set back, and every get and the last put hold the right bytes. */
Test(device, gets_beside_puts, .fini = stop) {
  NEED_GPU();
  start("cuda");
  enum { ROUNDS = 20 };
  lct_client *putter = test_connect(lctd.ipc), *getter = test_connect(lctd.ipc);
  slice_set s;
  slices_load(&s);
  uint8_t *src, *dst;
  slices_to_device(&s, &src, &dst);
  char put_keys[N_SLICES][128], get_keys[N_SLICES][128];
  lct_tensor_info put_info[N_SLICES], get_info[N_SLICES];
  lct_device_tensor put[N_SLICES], get[N_SLICES];
  slices_items(&s, "beside/put/", src, put_keys, put_info, put);
  slices_items(&s, "beside/get/", src, get_keys, get_info, get);
  size_t failed = N_SLICES;
  cr_assert_eq(lct_put_device_many(getter, get, N_SLICES, &failed), 0, "%s", lct_last_error(getter));
  slices_items(&s, "beside/get/", dst, get_keys, get_info, get);

  put_loop p = {putter, put, ROUNDS, 0, N_SLICES};
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, put_loop_run, &p), 0);
  uint8_t *back = malloc(s.total);
  int rc = 0, copied = 0;
  long wrong = -1; /* round * N_SLICES + slice of the first get that differs */
  for (int r = 0; r < ROUNDS && rc == 0 && wrong < 0; r++) {
    if ((rc = lct_get_device_many(getter, get, N_SLICES, &failed)) != 0)
      break;
    copied = cudaMemcpy(back, dst, s.total, cudaMemcpyDeviceToHost) == cudaSuccess;
    if (!copied)
      break;
    for (size_t i = 0; i < N_SLICES && wrong < 0; i++)
      if (memcmp(back + s.at[i], s.host[i], s.bytes[i]) != 0)
        wrong = (long)(r * N_SLICES + i);
  }
  pthread_join(th, NULL);
  cr_assert_eq(rc, 0, "get beside puts: %s (%s), item %zu", lct_strerror(rc), lct_last_error(getter), failed);
  cr_assert(copied, "cudaMemcpy of the gets' bytes");
  cr_assert_eq(wrong, -1, "round %ld: %s differs", wrong / (long)N_SLICES,
               wrong < 0 ? "" : slices[wrong % (long)N_SLICES]);
  cr_assert_eq(p.rc, 0, "put beside gets: %s (%s), item %zu", lct_strerror(p.rc), lct_last_error(putter), p.failed);

  slices_items(&s, "beside/put/", dst, put_keys, put_info, get);
  CUDA_CHECK(cudaMemset(dst, 0xA5, s.total));
  cr_assert_eq(lct_get_device_many(getter, get, N_SLICES, &failed), 0, "%s", lct_last_error(getter));
  CUDA_CHECK(cudaMemcpy(back, dst, s.total, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < N_SLICES; i++)
    cr_assert_eq(memcmp(back + s.at[i], s.host[i], s.bytes[i]), 0, "%s: the last put's bytes", slices[i]);
  lct_server_stats st = test_stats(getter);
  cr_assert_eq(st.device_puts, (ROUNDS + 1) * N_SLICES);
  cr_assert_eq(st.device_gets, (ROUNDS + 1) * N_SLICES);
  free(back);
  slices_free(&s);
  CUDA_CHECK(cudaFree(src));
  CUDA_CHECK(cudaFree(dst));
  lct_close(putter);
  lct_close(getter);
}

Test(device, many_errors_and_all_or_nothing, .fini = stop) {
  NEED_GPU();
  setenv("LCT_TEST_BACKEND", "cuda", 1);
  const char *extra[] = {"--memory", "6M", "--threads", "2", NULL};
  test_lctd_start(&lctd, extra);
  lct_client *c = test_connect(lctd.ipc);
  /* Three 2 MiB tensors of random f32 bits (incompressible): the pool holds two. */
  size_t bytes = 2 << 20;
  uint32_t *host = malloc(3 * bytes);
  test_rng rng = {7};
  for (size_t i = 0; i < 3 * bytes / 4; i++) host[i] = (uint32_t)test_rand(&rng);
  uint8_t *a, *b;
  CUDA_CHECK(cudaMalloc((void **)&a, 3 * bytes));
  CUDA_CHECK(cudaMalloc((void **)&b, 3 * bytes));
  CUDA_CHECK(cudaMemcpy(a, host, 3 * bytes, cudaMemcpyHostToDevice));
  uint64_t shape[1] = {bytes / 4};
  lct_device_tensor t[3];
  const char *keys[3] = {"x0", "x1", "x2"};
  for (int i = 0; i < 3; i++) t[i] = (lct_device_tensor){keys[i], LCT_DTYPE_F32, shape, 1, a + i * bytes, bytes, NULL};
  size_t failed;
  cr_assert_eq(lct_put_device_many(c, t, 1, &failed), 0, "%s", lct_last_error(c));
  lct_tensor_info before;
  cr_assert_eq(lct_stat(c, "x0", &before), 0);
  /* x0 again with x1 and x2: the pool cannot take them all, and none is stored. */
  t[0].dptr = a + 2 * bytes;
  cr_assert_eq(lct_put_device_many(c, t, 3, &failed), LCT_ENOSPC);
  cr_assert_lt(failed, 3);
  lct_tensor_info after;
  cr_assert_eq(lct_stat(c, "x0", &after), 0);
  cr_assert_eq(after.version, before.version, "x0 keeps its version");
  cr_assert_eq(lct_stat(c, "x1", &after), LCT_ENOENT, "x1 was not stored");
  /* Repeated keys, a missing key, a small buffer, host memory. */
  t[1].key = "x0";
  cr_assert_eq(lct_put_device_many(c, t, 2, &failed), LCT_EINVAL);
  cr_assert_eq(failed, 1);
  lct_device_tensor g[2] = {{"x0", 0, NULL, 0, b, bytes, NULL}, {"nope", 0, NULL, 0, b + bytes, bytes, NULL}};
  cr_assert_eq(lct_get_device_many(c, g, 2, &failed), LCT_ENOENT);
  cr_assert_eq(failed, 1);
  g[1].key = "x0";
  g[0].key = "x0b";
  cr_assert_eq(lct_put_device_many(c, g, 2, &failed), LCT_ESIZE, "a scalar shape for 2 MiB");
  cr_assert_eq(failed, 0);
  g[0].key = "x0";
  g[0].bytes = bytes - 4;
  cr_assert_eq(lct_get_device_many(c, g, 1, &failed), LCT_EBUFSIZE);
  cr_assert_eq(failed, 0);
  g[0].dptr = host;
  g[0].bytes = bytes;
  cr_assert_eq(lct_get_device_many(c, g, 1, &failed), LCT_EINVAL, "host memory is not a device buffer");
  free(host);
  CUDA_CHECK(cudaFree(a));
  CUDA_CHECK(cudaFree(b));
  lct_close(c);
}

Test(device, many_cpu_backend_falls_back, .fini = stop) {
  NEED_GPU();
  start("cpu");
  lct_client *c = test_connect(lctd.ipc);
  slice_set s;
  slices_load(&s);
  uint8_t *src, *dst;
  slices_to_device(&s, &src, &dst);
  char keys[N_SLICES][128];
  lct_tensor_info info[N_SLICES];
  lct_device_tensor put[N_SLICES], get[N_SLICES];
  slices_items(&s, "fb/", src, keys, info, put);
  slices_items(&s, "fb/", dst, keys, info, get);
  size_t failed;
  cr_assert_eq(lct_put_device_many(c, put, N_SLICES, &failed), 0, "%s", lct_last_error(c));
  cr_assert_eq(lct_get_device_many(c, get, N_SLICES, &failed), 0, "%s", lct_last_error(c));
  uint8_t *back = malloc(s.total);
  CUDA_CHECK(cudaMemcpy(back, dst, s.total, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < N_SLICES; i++) {
    cr_assert_eq(memcmp(back + s.at[i], s.host[i], s.bytes[i]), 0, "%s through the host path", slices[i]);
    cr_assert_eq(info[i].checksum, lct_crc32c(0, s.host[i], s.bytes[i]));
  }
  lct_server_stats st = test_stats(c);
  cr_assert_eq(st.device_fallbacks, 2, "one fallback per request");
  free(back);
  slices_free(&s);
  CUDA_CHECK(cudaFree(src));
  CUDA_CHECK(cudaFree(dst));
  lct_close(c);
}

/* ---- a blob corrupted at rest ------------------------------------------------- */

/* Plants fault in the first blob of snapshot file path (deploy/README.md,
 * Persistence) and makes the file's own CRC-32C right again, so that it is
 * restored and only the decoder finds the fault. */
static void corrupt_snapshot(const char *path, const char *fault) {
  FILE *f = fopen(path, "r+b");
  cr_assert_not_null(f, "%s", path);
  fseek(f, 0, SEEK_END);
  long len = ftell(f);
  uint8_t *d = malloc((size_t)len);
  fseek(f, 0, SEEK_SET);
  cr_assert_eq(fread(d, 1, (size_t)len, f), (size_t)len);
  uint32_t key_len, n_seg, flags;
  memcpy(&key_len, d + 8, 4);
  memcpy(&n_seg, d + 20, 4);
  memcpy(&flags, d + 108, 4);
  cr_assert_eq(flags & 1, 0, "a raw tensor's file holds no codebook");
  size_t blob = 112 + key_len + 24 * (size_t)n_seg;
  uint64_t first;
  memcpy(&first, d + blob + 40, 8); /* the chunk table follows the 40-byte header (raw: no codebook) */
  size_t chunk = blob + (size_t)first;
  if (strcmp(fault, "bad-version") == 0)
    d[blob + 4] = 3;       /* a format version no decoder knows */
  else if (strcmp(fault, "bad-check") == 0)
    d[chunk + 4] ^= 0x01;  /* a raw chunk's check */
  else
    d[chunk] = 9;          /* an unknown chunk mode */
  uint32_t crc = lct_crc32c(0, d, (size_t)len - 4);
  memcpy(d + len - 4, &crc, 4);
  fseek(f, 0, SEEK_SET);
  cr_assert_eq(fwrite(d, 1, (size_t)len, f), (size_t)len);
  fclose(f);
  free(d);
}

Test(device, corrupt_blob_is_ecorrupt, .fini = stop) {
  NEED_GPU();
  char dir[] = "/tmp/lct-test-corrupt-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  setenv("LCT_TEST_BACKEND", "cuda", 1);
  const char *extra[] = {"--memory", "512M", "--threads", "4", "--persist-dir", dir, NULL};
  test_lctd_start(&lctd, extra);
  const char *faults[] = {"bad-version", "bad-check", "bad-structure"};
  uint8_t data[3072];
  for (size_t i = 0; i < sizeof data; i++) data[i] = (uint8_t)i;
  uint64_t shape[1] = {sizeof data};
  lct_client *c = test_connect(lctd.ipc);
  for (int i = 0; i < 3; i++)
    cr_assert_eq(lct_put(c, faults[i], LCT_DTYPE_RAW, shape, 1, data, sizeof data, NULL), 0, "%s", lct_last_error(c));
  lct_close(c);
  test_lctd_stop(&lctd); /* saves */
  DIR *dd = opendir(dir);
  cr_assert_not_null(dd);
  int planted = 0;
  for (struct dirent *de; (de = readdir(dd)) != NULL;) {
    if (de->d_name[0] == '.')
      continue;
    char path[512], key[64] = "";
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    FILE *f = fopen(path, "rb");
    uint8_t head[112 + 32];
    size_t got = fread(head, 1, sizeof head, f);
    fclose(f);
    uint32_t key_len;
    memcpy(&key_len, head + 8, 4);
    cr_assert(got == sizeof head && key_len < sizeof key);
    memcpy(key, head + 112, key_len);
    corrupt_snapshot(path, key);
    planted++;
  }
  closedir(dd);
  cr_assert_eq(planted, 3);
  test_lctd_start(&lctd, extra);
  c = test_connect(lctd.ipc);
  uint8_t *dev;
  CUDA_CHECK(cudaMalloc((void **)&dev, sizeof data));
  for (int i = 0; i < 3; i++) {
    int rc = lct_get_device(c, faults[i], dev, sizeof data, NULL);
    cr_assert_eq(rc, LCT_ECORRUPT, "device get of %s: %s (%s)", faults[i], lct_strerror(rc), lct_last_error(c));
    uint8_t back[sizeof data];
    rc = lct_get(c, faults[i], back, sizeof back, NULL);
    cr_assert_eq(rc, LCT_ECORRUPT, "host get of %s: %s (%s)", faults[i], lct_strerror(rc), lct_last_error(c));
  }
  cr_assert_eq(test_metric(c, "lct_errors_total{kind=\"LCT_ECORRUPT\"} "), 6);
  CUDA_CHECK(cudaFree(dev));
  lct_close(c);
  test_lctd_stop(&lctd);
  dd = opendir(dir);
  for (struct dirent *de; dd != NULL && (de = readdir(dd)) != NULL;) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    if (de->d_name[0] != '.')
      unlink(path);
  }
  if (dd != NULL)
    closedir(dd);
  rmdir(dir);
}
