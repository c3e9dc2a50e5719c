/* lctd_harness.h — starts a real lctd (cpu backend) on a private ipc endpoint and a free tcp port for integration tests. */
#ifndef LCT_LCTD_HARNESS_H
#define LCT_LCTD_HARNESS_H

#include <arpa/inet.h>
#include <criterion/criterion.h>
#include <netinet/in.h>
#include <sys/stat.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lct.h"

typedef struct test_lctd {
  pid_t pid;
  char ipc[128];
  char tcp[64];
} test_lctd;

/* A port the kernel just handed out on 127.0.0.1 (free at that moment). */
static inline int test_free_port(void) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  cr_assert(s >= 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  cr_assert_eq(bind(s, (struct sockaddr *)&a, sizeof a), 0);
  cr_assert_eq(getsockname(s, (struct sockaddr *)&a, &len), 0);
  close(s);
  return ntohs(a.sin_port);
}

static inline void test_sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* The backend under test: $LCT_TEST_BACKEND (cuda on a GPU machine), else cpu. */
static inline const char *test_backend(void) {
  const char *b = getenv("LCT_TEST_BACKEND");
  return b && *b ? b : "cpu";
}

/* Starts lctd with test_backend(), on d's endpoints, and extra flags
 * (NULL-terminated), and waits until it answers a ping. */
static inline void test_lctd_spawn(test_lctd *d, const char *const *extra) {
  const char *argv[64] = {LCT_LCTD_PATH, "--backend", test_backend(), "--listen", d->ipc, "--listen", d->tcp,
                          "--log-level", "warn"};
  int argc = 9;
  for (int i = 0; extra && extra[i] && argc < 62; i++) argv[argc++] = extra[i];
  argv[argc] = NULL;
  d->pid = fork();
  cr_assert(d->pid >= 0);
  if (d->pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive a crashed test */
    execv(argv[0], (char *const *)argv);
    _exit(127);
  }
  for (int tries = 0; tries < 200; tries++) {
    int status;
    cr_assert_eq(waitpid(d->pid, &status, WNOHANG), 0, "lctd exited at start (status %d)", status);
    lct_options o;
    lct_options_init(&o);
    o.endpoint = d->ipc;
    o.connect_timeout_ms = 100;
    lct_client *c;
    int rc = lct_connect(&o, &c);
    if (rc == 0)
      lct_close(c);
    if (rc == 0 || rc == LCT_EACCES) /* it answered; an ipc endpoint may want a token */
      return;
  }
  cr_assert_fail("lctd did not answer within 20 s");
}

/* test_lctd_spawn on a private ipc path and a free tcp port. */
static inline void test_lctd_start(test_lctd *d, const char *const *extra) {
  static int serial;
  snprintf(d->ipc, sizeof d->ipc, "ipc:///tmp/lct-test-%d-%d.sock", (int)getpid(), serial++);
  snprintf(d->tcp, sizeof d->tcp, "tcp://127.0.0.1:%d", test_free_port());
  test_lctd_spawn(d, extra);
}

/* Kills lctd with SIGKILL, as a crash would, and reaps it. */
static inline void test_lctd_kill(test_lctd *d) {
  if (d->pid <= 0) return;
  kill(d->pid, SIGKILL);
  int status;
  cr_assert_eq(waitpid(d->pid, &status, 0), d->pid);
  d->pid = 0;
}

/* Stops lctd with SIGTERM; it must exit cleanly (0: also no leak under ASan). */
static inline void test_lctd_stop(test_lctd *d) {
  if (d->pid <= 0) return;
  kill(d->pid, SIGTERM);
  int status;
  cr_assert_eq(waitpid(d->pid, &status, 0), d->pid);
  d->pid = 0;
  cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "lctd ended with status %d", status);
}

/* A token file for lctd and liblct, /tmp/lct-test-TAG-PID: the token and a
 * newline, mode 0600 as they require; its path goes to path. */
static inline void test_token_file(const char *tag, const char *token, char *path, size_t cap) {
  snprintf(path, cap, "/tmp/lct-test-%s-%d", tag, (int)getpid());
  FILE *f = fopen(path, "w");
  cr_assert(f != NULL, "cannot write %s", path);
  fprintf(f, "%s\n", token);
  fclose(f);
  cr_assert_eq(chmod(path, 0600), 0);
}

static inline lct_client *test_connect(const char *endpoint) {
  lct_options o;
  lct_options_init(&o);
  o.endpoint = endpoint;
  o.timeout_ms = 20000;
  lct_client *c;
  int rc = lct_connect(&o, &c);
  cr_assert_eq(rc, 0, "connect %s: %s", endpoint, lct_strerror(rc));
  return c;
}

/* The server's counters. */
static inline lct_server_stats test_stats(lct_client *c) {
  lct_server_stats s;
  cr_assert_eq(lct_stats(c, &s, NULL), 0);
  return s;
}

/* The value of the Prometheus line that starts with series (name, labels and a space). */
static inline uint64_t test_metric(lct_client *c, const char *series) {
  char *text, needle[256];
  cr_assert_eq(lct_stats(c, NULL, &text), 0);
  snprintf(needle, sizeof needle, "\n%s", series);
  char *p = strstr(text, needle);
  cr_assert(p != NULL, "no %s in the metrics", series);
  uint64_t v = strtoull(p + strlen(needle), NULL, 10);
  lct_free(text);
  return v;
}

/* A one-dimensional put of bytes that must succeed. */
static inline void test_put_ok(lct_client *c, const char *key, lct_dtype dtype, const void *data, size_t bytes,
                               lct_tensor_info *info) {
  uint64_t shape[1] = {bytes / lct_dtype_size(dtype)};
  int rc = lct_put(c, key, dtype, shape, 1, data, bytes, info);
  cr_assert_eq(rc, 0, "put %s (%zu bytes): %s: %s", key, bytes, lct_strerror(rc), lct_last_error(c));
}

/* A get of key that must return exactly want's bytes. */
static inline void test_get_equals(lct_client *c, const char *key, const void *want, size_t bytes) {
  void *got;
  lct_tensor_info info;
  int rc = lct_get_alloc(c, key, &got, &info);
  cr_assert_eq(rc, 0, "get %s: %s: %s", key, lct_strerror(rc), lct_last_error(c));
  cr_assert_eq(info.raw_bytes, bytes, "%s size", key);
  cr_assert(bytes == 0 || memcmp(got, want, bytes) == 0, "%s bytes differ", key);
  lct_free(got);
}

#endif
