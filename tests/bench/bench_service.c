/* bench_service.c — lct-bench service: put/get GB/s through lctd over ipc and tcp against redis-server SET/GET of the same payloads, same run. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "lct.h"

#ifndef LCT_BENCH_DATA
#define LCT_BENCH_DATA "tests/data/A_s400_w.bf16.bin"
#endif

static void die(const char *fmt, const char *arg) {
  fprintf(stderr, "lct-bench service: ");
  fprintf(stderr, fmt, arg);
  fputc('\n', stderr);
  exit(1);
}

static pid_t spawn(char *const argv[]) {
  pid_t pid = fork();
  if (pid < 0) die("%s", "fork failed");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    int null = open("/dev/null", 1);
    if (null >= 0) dup2(null, 1);
    execvp(argv[0], argv);
    _exit(127);
  }
  return pid;
}

static void stop(pid_t pid) {
  kill(pid, SIGTERM);
  waitpid(pid, NULL, 0);
}

/* ---- a minimal RESP client: SET and GET of one binary value ------------------ */

typedef struct redis_conn {
  int fd;
  char buf[256];
  size_t have, pos;
} redis_conn;

static int redis_open(const char *unix_path, int port, redis_conn *r) {
  memset(r, 0, sizeof *r);
  if (unix_path) {
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", unix_path);
    r->fd = socket(AF_UNIX, SOCK_STREAM, 0);
    return connect(r->fd, (struct sockaddr *)&a, sizeof a);
  }
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  r->fd = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(r->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return connect(r->fd, (struct sockaddr *)&a, sizeof a);
}

static void redis_write(redis_conn *r, struct iovec *iov, int n) {
  while (n > 0) {
    ssize_t w = writev(r->fd, iov, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      die("redis write: %s", strerror(errno));
    }
    while (n > 0 && (size_t)w >= iov->iov_len) {
      w -= (ssize_t)iov->iov_len;
      iov++, n--;
    }
    if (n > 0) {
      iov->iov_base = (char *)iov->iov_base + w;
      iov->iov_len -= (size_t)w;
    }
  }
}

/* Reads exactly n bytes, first from what is buffered. */
static void redis_read(redis_conn *r, void *dst, size_t n) {
  size_t from_buf = r->have - r->pos < n ? r->have - r->pos : n;
  memcpy(dst, r->buf + r->pos, from_buf);
  r->pos += from_buf;
  for (size_t got = from_buf; got < n;) {
    ssize_t k = recv(r->fd, (char *)dst + got, n - got, 0);
    if (k <= 0) {
      if (k < 0 && errno == EINTR) continue;
      die("%s", "redis closed the connection");
    }
    got += (size_t)k;
  }
}

static void redis_line(redis_conn *r, char *line, size_t cap) {
  size_t n = 0;
  for (;;) {
    if (r->pos == r->have) {
      ssize_t k = recv(r->fd, r->buf, sizeof r->buf, 0);
      if (k <= 0) die("%s", "redis closed the connection");
      r->have = (size_t)k;
      r->pos = 0;
    }
    char c = r->buf[r->pos++];
    if (c == '\n') break;
    if (c != '\r' && n + 1 < cap) line[n++] = c;
  }
  line[n] = '\0';
}

static void redis_set(redis_conn *r, const char *key, const void *val, size_t n) {
  char head[128];
  int h = snprintf(head, sizeof head, "*3\r\n$3\r\nSET\r\n$%zu\r\n%s\r\n$%zu\r\n", strlen(key), key, n);
  struct iovec iov[3] = {{head, (size_t)h}, {(void *)val, n}, {"\r\n", 2}};
  redis_write(r, iov, 3);
  char line[256];
  redis_line(r, line, sizeof line);
  if (strcmp(line, "+OK") != 0) die("redis SET: %s", line);
}

static size_t redis_get(redis_conn *r, const char *key, void *dst, size_t cap) {
  char head[128];
  int h = snprintf(head, sizeof head, "*2\r\n$3\r\nGET\r\n$%zu\r\n%s\r\n", strlen(key), key);
  struct iovec iov[1] = {{head, (size_t)h}};
  redis_write(r, iov, 1);
  char line[256];
  redis_line(r, line, sizeof line);
  if (line[0] != '$') die("redis GET: %s", line);
  size_t n = strtoull(line + 1, NULL, 10);
  if (n > cap) die("%s", "redis GET: value larger than the buffer");
  redis_read(r, dst, n);
  char crlf[2];
  redis_read(r, crlf, 2);
  return n;
}

/* ---- timing ------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

typedef struct result {
  double put_gbs, get_gbs;
} result;

static result bench_lct(const char *endpoint, const uint8_t *data, size_t bytes, uint8_t *back, int reps,
                        uint64_t *stored) {
  lct_options o;
  lct_options_init(&o);
  o.endpoint = endpoint;
  o.timeout_ms = 600000;
  lct_client *c;
  int rc = lct_connect(&o, &c);
  if (rc) die("cannot connect to lctd: %s", lct_strerror(rc));
  uint64_t shape[1] = {bytes / 2};
  double put_t[64], get_t[64];
  lct_tensor_info info;
  for (int i = -1; i < reps; i++) { /* i = -1: warm-up */
    double t0 = bench_now();
    if ((rc = lct_put(c, "bench", LCT_DTYPE_BF16, shape, 1, data, bytes, &info)) != 0)
      die("lct_put: %s", lct_last_error(c));
    double t1 = bench_now();
    if ((rc = lct_get(c, "bench", back, bytes, NULL)) != 0) die("lct_get: %s", lct_last_error(c));
    double t2 = bench_now();
    if (i >= 0) put_t[i] = t1 - t0, get_t[i] = t2 - t1;
  }
  if (memcmp(back, data, bytes) != 0) die("%s", "lctd returned different bytes");
  *stored = info.stored_bytes;
  lct_delete(c, "bench");
  lct_close(c);
  return (result){(double)bytes / median(put_t, reps) / 1e9, (double)bytes / median(get_t, reps) / 1e9};
}

static result bench_redis(const char *unix_path, int port, const uint8_t *data, size_t bytes, uint8_t *back,
                          int reps) {
  redis_conn r;
  if (redis_open(unix_path, port, &r) != 0) die("cannot connect to redis-server: %s", strerror(errno));
  double put_t[64], get_t[64];
  for (int i = -1; i < reps; i++) {
    double t0 = bench_now();
    redis_set(&r, "bench", data, bytes);
    double t1 = bench_now();
    if (redis_get(&r, "bench", back, bytes) != bytes) die("%s", "redis GET size");
    double t2 = bench_now();
    if (i >= 0) put_t[i] = t1 - t0, get_t[i] = t2 - t1;
  }
  if (memcmp(back, data, bytes) != 0) die("%s", "redis returned different bytes");
  close(r.fd);
  return (result){(double)bytes / median(put_t, reps) / 1e9, (double)bytes / median(get_t, reps) / 1e9};
}

static int wait_lctd(const char *endpoint) {
  for (int i = 0; i < 100; i++) {
    lct_options o;
    lct_options_init(&o);
    o.endpoint = endpoint;
    o.connect_timeout_ms = 100;
    lct_client *c;
    if (lct_connect(&o, &c) == 0) {
      lct_close(c);
      return 0;
    }
  }
  return -1;
}

static int wait_redis(int port) {
  for (int i = 0; i < 100; i++) {
    redis_conn r;
    int ok = redis_open(NULL, port, &r) == 0;
    close(r.fd);
    if (ok) return 0;
    usleep(50000);
  }
  return -1;
}

int bench_service(int argc, char **argv) {
  const char *data_path = LCT_BENCH_DATA, *out_path = NULL, *sizes_arg = "1,64,1024", *backend = "cpu";
  int reps_arg = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--data") == 0 && i + 1 < argc) data_path = argv[++i];
    else if (strcmp(argv[i], "--sizes") == 0 && i + 1 < argc) sizes_arg = argv[++i];
    else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps_arg = atoi(argv[++i]);
    else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) out_path = argv[++i];
    else if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc) backend = argv[++i];
    else {
      fputs("usage: lct-bench service [--backend cpu|cuda] [--sizes MiB,...] [--reps N] [--data FILE.bf16.bin] "
            "[--out FILE]\n",
            stderr);
      return 2;
    }
  }
  size_t src_len;
  uint8_t *src = bench_read_file(data_path, &src_len);
  if (src_len < 2 || src_len % 2) die("%s: not a bf16 tensor file", data_path);

  char self[PATH_MAX], lctd[PATH_MAX + 8], ipc[128], tcp[64], redis_sock[128], port_s[16], rport_s[16];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) die("%s", "cannot find the lctd binary");
  self[n] = '\0';
  snprintf(lctd, sizeof lctd, "%s/lctd", dirname(self));
  snprintf(ipc, sizeof ipc, "ipc:///tmp/lct-bench-%d.sock", (int)getpid());
  int port = bench_free_port(), rport = bench_free_port();
  if (port < 0 || rport < 0) die("%s", "cannot find a free port");
  snprintf(tcp, sizeof tcp, "tcp://127.0.0.1:%d", port);
  snprintf(port_s, sizeof port_s, "%d", port);
  snprintf(rport_s, sizeof rport_s, "%d", rport);
  snprintf(redis_sock, sizeof redis_sock, "/tmp/lct-bench-redis-%d.sock", (int)getpid());

  char *lctd_argv[] = {lctd, "--backend", (char *)backend, "--listen", ipc, "--listen", tcp, "--log-level", "warn",
                       NULL};
  char *redis_argv[] = {"redis-server", "--port", rport_s, "--bind", "127.0.0.1", "--unixsocket", redis_sock,
                        "--save", "", "--appendonly", "no", "--proto-max-bulk-len", "4gb",
                        "--client-query-buffer-limit", "4gb", NULL};
  uint64_t sizes[32];
  int n_sizes = bench_parse_list("--sizes", sizes_arg, sizes, 32);
  if (n_sizes < 0) return 1;
  pid_t lpid = spawn(lctd_argv), rpid = spawn(redis_argv);
  if (wait_lctd(ipc) != 0) die("%s did not start", lctd);
  if (wait_redis(rport) != 0) die("%s", "redis-server did not start (is it installed?)");

  char cpu[256];
  bench_cpu_name(cpu, sizeof cpu);
  FILE *out = bench_open_out(out_path);
  printf("lctd (%s backend) put/get vs redis-server SET/GET, same payloads, same run (%s)\n", backend, cpu);
  printf("one client, one request in flight; GB/s of raw tensor bytes, median of the reps\n");
  printf("data: %s tiled (bf16)\n\n", data_path);
  printf("%8s %5s %7s | %-16s | %-16s | %-16s | %-16s\n", "size", "reps", "ratio", "lctd ipc put/get",
         "redis unix SET/GET", "lctd tcp put/get", "redis tcp SET/GET");
  if (out)
    fprintf(out, "{\"bench\": \"service\", \"backend\": \"%s\", \"cpu\": \"%s\", \"data\": \"%s\", \"rows\": [",
            backend, cpu, data_path);

  int first = 1;
  for (int si = 0; si < n_sizes; si++) {
    size_t mib = sizes[si];
    if (mib == 0) continue;
    size_t bytes = mib << 20;
    int reps = reps_arg > 0 ? reps_arg : mib <= 1 ? 50 : mib <= 64 ? 10 : 3;
    if (reps > 64) reps = 64;
    uint8_t *data = malloc(bytes), *back = malloc(bytes);
    if (!data || !back) die("%s", "out of memory");
    for (size_t off = 0; off < bytes; off += src_len)
      memcpy(data + off, src, bytes - off < src_len ? bytes - off : src_len);
    uint64_t stored;
    result li = bench_lct(ipc, data, bytes, back, reps, &stored);
    result ru = bench_redis(redis_sock, 0, data, bytes, back, reps);
    result lt = bench_lct(tcp, data, bytes, back, reps, &stored);
    result rt = bench_redis(NULL, rport, data, bytes, back, reps);
    double ratio = (double)bytes / (double)stored;
    printf("%5zu MiB %5d %7.3f | %7.2f %7.2f  | %7.2f %7.2f   | %7.2f %7.2f  | %7.2f %7.2f\n", mib, reps, ratio,
           li.put_gbs, li.get_gbs, ru.put_gbs, ru.get_gbs, lt.put_gbs, lt.get_gbs, rt.put_gbs, rt.get_gbs);
    fflush(stdout);
    if (out)
      fprintf(out,
              "%s\n {\"mib\": %zu, \"reps\": %d, \"ratio\": %.4f, \"lctd_ipc_put\": %.3f, \"lctd_ipc_get\": %.3f, "
              "\"redis_unix_set\": %.3f, \"redis_unix_get\": %.3f, \"lctd_tcp_put\": %.3f, \"lctd_tcp_get\": %.3f, "
              "\"redis_tcp_set\": %.3f, \"redis_tcp_get\": %.3f}",
              first ? "" : ",", mib, reps, ratio, li.put_gbs, li.get_gbs, ru.put_gbs, ru.get_gbs, lt.put_gbs,
              lt.get_gbs, rt.put_gbs, rt.get_gbs);
    first = 0;
    free(data);
    free(back);
  }
  if (out) {
    fprintf(out, "\n]}\n");
    fclose(out);
  }
  stop(lpid);
  stop(rpid);
  unlink(redis_sock);
  free(src);
  return 0;
}
