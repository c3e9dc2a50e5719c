/* test_faults.c — a lost device (lctd-faults, $LCT_FAULT_AT): every request refused, /healthz 503, exit 3 without a final save, the restart from the last snapshot. */
#include <dirent.h>
#include <sys/stat.h>

#include "lctd_harness.h"
#include "test_util.h"

#ifdef LCT_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

/* The status of GET path on 127.0.0.1:port, its body in body. */
static int http_get(int port, const char *path, char *body, size_t cap) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  cr_assert_eq(connect(s, (struct sockaddr *)&a, sizeof a), 0, "the metrics endpoint is not listening");
  char req[128];
  int n = snprintf(req, sizeof req, "GET %s HTTP/1.1\r\nHost: lctd\r\n\r\n", path);
  cr_assert_eq(write(s, req, (size_t)n), n);
  char buf[4096];
  size_t have = 0;
  ssize_t k;
  while ((k = read(s, buf + have, sizeof buf - 1 - have)) > 0)
    have += (size_t)k;
  buf[have] = '\0';
  close(s);
  int status = 0;
  cr_assert_eq(sscanf(buf, "HTTP/1.1 %d", &status), 1, "not an HTTP reply: %s", buf);
  const char *b = strstr(buf, "\r\n\r\n");
  snprintf(body, cap, "%s", b != NULL ? b + 4 : "");
  return status;
}

static void remove_dir(const char *path) {
  DIR *d = opendir(path);
  if (d == NULL) return;
  struct dirent *e;
  char file[512];
  while ((e = readdir(d)) != NULL) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    snprintf(file, sizeof file, "%s/%s", path, e->d_name);
    unlink(file);
  }
  closedir(d);
  rmdir(path);
}

/* Starts lctd-faults on backend with the third codec call failing, saves
 * after the first put, loses the device at the third and checks what lctd
 * does then, and what a restart brings back. */
static void lose_device(const char *backend, const char *reason) {
  char dir[] = "/tmp/lct-test-faults-XXXXXX";
  cr_assert_not_null(mkdtemp(dir));
  int port = test_free_port();
  char metrics[32];
  snprintf(metrics, sizeof metrics, "127.0.0.1:%d", port);
  /* A small pool: the restart must not wait for the lost process's GPU memory to come back. */
  const char *extra[] = {"--backend", backend, "--memory", "256M", "--persist-dir", dir, "--metrics", metrics, NULL};
  setenv("LCT_FAULT_AT", "3", 1);
  test_lctd d;
  test_lctd_start(&d, extra);
  lct_client *c = test_connect(d.ipc);

  uint16_t a[32768], back[32768];
  test_rng rng = {7};
  for (size_t i = 0; i < 32768; i++) a[i] = (uint16_t)(0x3c00 + test_rand(&rng) % 0x800); /* bf16 near 1 */
  uint64_t shape[1] = {32768};
  /* Codec calls: one encode per put of a one-segment tensor. */
  cr_assert_eq(lct_put(c, "saved", LCT_DTYPE_BF16, shape, 1, a, sizeof a, NULL), 0);              /* 1 */
  cr_assert_eq(lct_save(c, NULL), 0);
  cr_assert_eq(lct_put(c, "acknowledged", LCT_DTYPE_BF16, shape, 1, a, sizeof a, NULL), 0);       /* 2 */
  char body[512];
  cr_assert_eq(http_get(port, "/healthz", body, sizeof body), 200);
  cr_assert_neq(lct_put(c, "lost", LCT_DTYPE_BF16, shape, 1, a, sizeof a, NULL), 0, "the device failed"); /* 3 */

  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int rc = lct_ping(c, NULL);
  cr_assert_eq(rc, LCT_ECUDA, "a request after the loss: %s", lct_strerror(rc));
  cr_assert(strstr(lct_last_error(c), "unhealthy") && strstr(lct_last_error(c), reason), "refused with: %s",
            lct_last_error(c));
  cr_assert_eq(lct_get(c, "saved", back, sizeof back, NULL), LCT_ECUDA, "no answer from a lost device");
  cr_assert_eq(http_get(port, "/healthz", body, sizeof body), 503);
  cr_assert(strstr(body, reason), "/healthz says: %s", body);
  lct_close(c);

  int status = 0;
  for (int ms = 0; waitpid(d.pid, &status, WNOHANG) == 0; ms += 10) {
    cr_assert(ms < 10000, "lctd still runs 10 s after losing its device");
    test_sleep_ms(10);
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 3, "lctd ended with status %d, not exit 3", status);
  double waited = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  cr_assert(waited > 0.5, "it answered for a grace first (exited after %.2f s)", waited);

  /* A restart, as systemd's Restart=on-failure does: the last snapshot, and no save after it. */
  unsetenv("LCT_FAULT_AT");
  test_lctd again;
  const char *restart[] = {"--backend", backend, "--memory", "256M", "--persist-dir", dir, NULL};
  test_lctd_start(&again, restart);
  c = test_connect(again.ipc);
  cr_assert_eq(lct_get(c, "saved", back, sizeof back, NULL), 0);
  cr_assert_eq(memcmp(back, a, sizeof a), 0);
  lct_tensor_info info;
  cr_assert_eq(lct_stat(c, "acknowledged", &info), LCT_ENOENT, "no final save from a lost device");
  cr_assert_eq(lct_stat(c, "lost", &info), LCT_ENOENT);
  lct_close(c);
  test_lctd_stop(&again);
  remove_dir(dir);
}

TestSuite(faults);

/* Runs everywhere: the cpu backend cannot lose a device, the injection reports one. */
Test(faults, cpu_injected_loss) { lose_device("cpu", "injected fault"); }

#ifdef LCT_HAVE_CUDA
/* A real sticky error: a kernel writes through a null pointer before the third codec call. */
Test(faults, cuda_illegal_address) {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) cr_skip_test("no CUDA device");
  lose_device("cuda", "cudaErrorIllegalAddress");
}
#endif
