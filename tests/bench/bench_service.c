/* bench_service.c — lct-bench service: put/get through lctd (ipc, tcp, host path, blobs coded by the client) against Redis and a bare socket pair, same payloads, same run, 1..16 clients. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"
#include "bench_peers.h"
#include "cli_coded.h"
#include "lct.h"

#ifndef LCT_BENCH_DATA
#define LCT_BENCH_DATA "tests/data/A_s400_w.bf16.bin"
#endif

#define MAX_CLIENTS 64
#define MAX_SIZES 32
#define SMALL_REPS 4000 /* most timed operations per client and phase, up to 64 KiB */
#define LARGE_REPS 64   /* above */
#define MIN_REPS 3

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
    int null = open("/dev/null", O_WRONLY);
    if (null >= 0) dup2(null, 1);
    execvp(argv[0], argv);
    _exit(127);
  }
  return pid;
}

static void stop(pid_t pid) {
  if (pid <= 0) return;
  kill(pid, SIGTERM);
  waitpid(pid, NULL, 0);
}

/* ---- what is measured ------------------------------------------------------- */

typedef enum mode {
  M_LCTD_IPC, M_LCTD_TCP, M_LCTD_REMOTE, M_LCTD_ENC, M_BASE_TCP, M_REDIS_UNIX, M_REDIS_TCP, M_PLAIN_UNIX,
  M_PLAIN_TCP, M_COUNT
} mode;

static const char *mode_name[M_COUNT] = {"lctd ipc", "lctd tcp", "lctd tcp remote", "lctd tcp enc", "base tcp",
                                         "redis unix", "redis tcp", "plain unix", "plain tcp"};
static const char *mode_key[M_COUNT] = {"lctd_ipc", "lctd_tcp", "lctd_remote", "lctd_enc", "base_tcp",
                                        "redis_unix", "redis_tcp", "plain_unix", "plain_tcp"};

typedef struct setup {
  char ipc[128], tcp[64], base_tcp[64], redis_sock[128], plain_sock[128];
  int redis_port, plain_port;
  int connections; /* lct_options.connections of the lctd modes */
  int threads;     /* coding threads per client of the enc mode */
} setup;

/* One client's connection, whatever it talks to. */
typedef struct conn {
  mode m;
  lct_client *lc;
  peer_conn pc;
} conn;

static void conn_open(const setup *s, mode m, conn *c) {
  memset(c, 0, sizeof *c);
  c->m = m;
  c->pc.fd = -1;
  if (m <= M_BASE_TCP) {
    lct_options o;
    lct_options_init(&o);
    o.endpoint = m == M_LCTD_IPC ? s->ipc : m == M_BASE_TCP ? s->base_tcp : s->tcp;
    o.timeout_ms = 600000;
    o.host_path = m == M_LCTD_REMOTE;
    o.connections = s->connections;
    int rc = lct_connect(&o, &c->lc);
    if (rc) die("cannot connect to lctd: %s", lct_strerror(rc));
    return;
  }
  int unix_sock = m == M_REDIS_UNIX || m == M_PLAIN_UNIX;
  const char *path = m == M_REDIS_UNIX ? s->redis_sock : m == M_PLAIN_UNIX ? s->plain_sock : NULL;
  int port = m == M_REDIS_TCP ? s->redis_port : s->plain_port;
  if (peer_open(unix_sock ? path : NULL, port, &c->pc) != 0) die("cannot connect to %s", mode_name[m]);
}

static void conn_close(conn *c, const char *key) {
  if (c->lc) {
    lct_delete(c->lc, key);
    lct_close(c->lc);
  } else {
    if (c->m == M_REDIS_UNIX || c->m == M_REDIS_TCP) redis_del(&c->pc, key);
    peer_close(&c->pc);
  }
}

static void op_put(const setup *s, conn *c, const char *key, const uint8_t *data, size_t bytes) {
  uint64_t shape[1] = {bytes / 2};
  int rc = 0;
  switch (c->m) {
  case M_LCTD_ENC:
    rc = cli_put_encoded(c->lc, key, LCT_DTYPE_BF16, shape, 1, data, bytes, s->threads, NULL);
    break;
  case M_REDIS_UNIX: case M_REDIS_TCP: redis_set(&c->pc, key, data, bytes); break;
  case M_PLAIN_UNIX: case M_PLAIN_TCP: plain_put(&c->pc, data, bytes); break;
  default: rc = lct_put(c->lc, key, LCT_DTYPE_BF16, shape, 1, data, bytes, NULL);
  }
  if (rc) die("put: %s", lct_last_error(c->lc));
}

/* Gets into back (bytes); the enc mode decodes into a buffer of its own, copied there. */
static void op_get(const setup *s, conn *c, const char *key, uint8_t *back, size_t bytes) {
  int rc = 0;
  size_t got = bytes;
  switch (c->m) {
  case M_LCTD_ENC: {
    void *raw;
    lct_tensor_info info;
    if ((rc = cli_get_decoded(c->lc, key, s->threads, &raw, &info)) == 0) {
      got = info.raw_bytes;
      memcpy(back, raw, got < bytes ? got : bytes);
      free(raw);
    }
    break;
  }
  case M_REDIS_UNIX: case M_REDIS_TCP: got = redis_get(&c->pc, key, back, bytes); break;
  case M_PLAIN_UNIX: case M_PLAIN_TCP: got = plain_get(&c->pc, back, bytes); break;
  default: rc = lct_get(c->lc, key, back, bytes, NULL);
  }
  if (rc) die("get: %s", lct_last_error(c->lc));
  if (got != bytes) die("%s", "get returned another size");
}

/* ---- one cell: a mode, a size, some clients ------------------------------------ */

typedef struct cell {
  const setup *s;
  mode m;
  const uint8_t *data;
  size_t bytes;
  int clients, reps;
  pthread_barrier_t start, phase, done;
} cell;

typedef struct client_run {
  cell *cl;
  int index;
  double *put_t, *get_t; /* reps each */
  double warm;           /* seconds of the warm-up put + get */
} client_run;

/* A client: connects, warms up (one put and get), then on the cell's
 * barriers runs its puts, then its gets, each timed, and checks the last get. */
static void *client_main(void *arg) {
  client_run *r = arg;
  cell *cl = r->cl;
  char key[32];
  snprintf(key, sizeof key, "bench/%d", r->index);
  conn c;
  conn_open(cl->s, cl->m, &c);
  uint8_t *back = malloc(cl->bytes ? cl->bytes : 1);
  if (!back) die("%s", "out of memory");
  double t0 = bench_now();
  op_put(cl->s, &c, key, cl->data, cl->bytes);
  op_get(cl->s, &c, key, back, cl->bytes);
  r->warm = bench_now() - t0;
  pthread_barrier_wait(&cl->start); /* the driver sets reps from the warm-ups */
  pthread_barrier_wait(&cl->phase);
  for (int i = 0; i < cl->reps; i++) {
    double a = bench_now();
    op_put(cl->s, &c, key, cl->data, cl->bytes);
    r->put_t[i] = bench_now() - a;
  }
  pthread_barrier_wait(&cl->phase);
  pthread_barrier_wait(&cl->phase);
  for (int i = 0; i < cl->reps; i++) {
    double a = bench_now();
    op_get(cl->s, &c, key, back, cl->bytes);
    r->get_t[i] = bench_now() - a;
  }
  pthread_barrier_wait(&cl->phase);
  if (memcmp(back, cl->data, cl->bytes) != 0) die("%s returned different bytes", mode_name[cl->m]);
  free(back);
  conn_close(&c, key);
  pthread_barrier_wait(&cl->done);
  return NULL;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double pct(const double *sorted, size_t n, double p) {
  size_t i = (size_t)(p * (double)(n - 1) + 0.5);
  return sorted[i < n ? i : n - 1];
}

typedef struct result {
  double put_gbs, get_gbs;         /* raw bytes of every client over the phase's wall time */
  double put_p50, put_p99, get_p50, get_p99; /* seconds per operation, over every client's */
  int reps;
} result;

static result run_cell(const setup *s, mode m, const uint8_t *data, size_t bytes, int clients, double budget,
                       int reps_max) {
  cell cl = {.s = s, .m = m, .data = data, .bytes = bytes, .clients = clients};
  client_run runs[MAX_CLIENTS];
  pthread_t th[MAX_CLIENTS];
  pthread_barrier_init(&cl.start, NULL, (unsigned)clients + 1);
  pthread_barrier_init(&cl.phase, NULL, (unsigned)clients + 1);
  pthread_barrier_init(&cl.done, NULL, (unsigned)clients + 1);
  int cap = reps_max;
  for (int i = 0; i < clients; i++) {
    runs[i] = (client_run){.cl = &cl, .index = i};
    runs[i].put_t = malloc((size_t)cap * sizeof(double));
    runs[i].get_t = malloc((size_t)cap * sizeof(double));
    if (!runs[i].put_t || !runs[i].get_t) die("%s", "out of memory");
    if (pthread_create(&th[i], NULL, client_main, &runs[i]) != 0) die("%s", "cannot start a client thread");
  }
  pthread_barrier_wait(&cl.start);
  double warm = 0;
  for (int i = 0; i < clients; i++)
    warm = runs[i].warm > warm ? runs[i].warm : warm;
  /* Each phase within about half the budget, judged by the slowest warm-up. */
  double fit = warm > 0 ? 2 * budget / warm : cap;
  cl.reps = fit < MIN_REPS ? MIN_REPS : fit > cap ? cap : (int)fit;
  double t[4];
  pthread_barrier_wait(&cl.phase);
  t[0] = bench_now();
  pthread_barrier_wait(&cl.phase);
  t[1] = bench_now();
  pthread_barrier_wait(&cl.phase);
  t[2] = bench_now();
  pthread_barrier_wait(&cl.phase);
  t[3] = bench_now();
  pthread_barrier_wait(&cl.done);
  for (int i = 0; i < clients; i++) pthread_join(th[i], NULL);
  size_t n = (size_t)clients * (size_t)cl.reps;
  double *put = malloc(n * sizeof *put), *get = malloc(n * sizeof *get);
  if (!put || !get) die("%s", "out of memory");
  for (int i = 0; i < clients; i++) {
    memcpy(put + (size_t)i * cl.reps, runs[i].put_t, (size_t)cl.reps * sizeof *put);
    memcpy(get + (size_t)i * cl.reps, runs[i].get_t, (size_t)cl.reps * sizeof *get);
    free(runs[i].put_t);
    free(runs[i].get_t);
  }
  qsort(put, n, sizeof *put, cmp_double);
  qsort(get, n, sizeof *get, cmp_double);
  double total = (double)bytes * (double)n;
  result r = {total / (t[1] - t[0]) / 1e9, total / (t[3] - t[2]) / 1e9, pct(put, n, 0.5), pct(put, n, 0.99),
              pct(get, n, 0.5), pct(get, n, 0.99), cl.reps};
  free(put);
  free(get);
  pthread_barrier_destroy(&cl.start);
  pthread_barrier_destroy(&cl.phase);
  pthread_barrier_destroy(&cl.done);
  return r;
}

/* ---- setup ---------------------------------------------------------------------- */

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

static int wait_peer(int port) {
  for (int i = 0; i < 100; i++) {
    peer_conn r;
    int ok = peer_open(NULL, port, &r) == 0;
    peer_close(&r);
    if (ok) return 0;
    usleep(50000);
  }
  return -1;
}

/* Sizes with an optional K, M or G suffix (KiB, MiB, GiB; none: bytes). */
static int parse_sizes(const char *arg, uint64_t *out, int max) {
  int n = 0;
  for (const char *p = arg; *p;) {
    char *end;
    errno = 0;
    uint64_t v = strtoull(p, &end, 10);
    int shift = *end == 'K' ? 10 : *end == 'M' ? 20 : *end == 'G' ? 30 : 0;
    if (shift) end++;
    if (end == p || errno == ERANGE || (*end != ',' && *end != '\0') || n == max || v == 0 || v > (4ull << 30) >> shift) {
      fprintf(stderr, "lct-bench service: --sizes: expected up to %d sizes such as 4K,1M,1G, not '%s'\n", max, arg);
      return -1;
    }
    out[n++] = v << shift;
    p = *end == ',' ? end + 1 : end;
  }
  return n;
}

static void size_name(uint64_t b, char *buf, size_t cap) {
  if (b >= (1u << 30) && b % (1u << 30) == 0) snprintf(buf, cap, "%llu GiB", (unsigned long long)(b >> 30));
  else if (b >= (1u << 20) && b % (1u << 20) == 0) snprintf(buf, cap, "%llu MiB", (unsigned long long)(b >> 20));
  else if (b >= 1024 && b % 1024 == 0) snprintf(buf, cap, "%llu KiB", (unsigned long long)(b >> 10));
  else snprintf(buf, cap, "%llu B", (unsigned long long)b);
}

static const char usage[] =
    "usage: lct-bench service [--backend cpu|cuda] [--sizes 4K,64K,1M,...] [--clients 1,4,...] [--full]\n"
    "         [--modes NAME,...] [--time SECONDS] [--max-total SIZE] [--connections N] [--threads N]\n"
    "         [--base-args 'ARGS'] [--data FILE.bf16.bin] [--out FILE]\n"
    "  modes: lctd_ipc lctd_tcp lctd_remote lctd_enc redis_unix redis_tcp plain_unix plain_tcp (default all),\n"
    "         base_tcp: a second lctd started with --base-args (a setting off, say), only when given\n"
    "  --full: sizes 4K,64K,1M,16M,64M,256M,1G and clients 1,4,16; cells over --max-total (clients x size,\n"
    "         default 2G) are skipped; each phase of a cell runs about --time / 2 seconds (default 1)\n";

int bench_service(int argc, char **argv) {
  const char *data_path = LCT_BENCH_DATA, *out_path = NULL, *sizes_arg = "4K,64K,1M,16M,64M", *backend = "cpu",
             *clients_arg = "1,4", *modes_arg = NULL, *base_args = NULL;
  double budget = 1.0;
  uint64_t max_total = 2ull << 30;
  setup s = {.connections = 0, .threads = 0};
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--full") == 0) sizes_arg = "4K,64K,1M,16M,64M,256M,1G", clients_arg = "1,4,16";
    else if (!v) return fputs(usage, stderr), 2;
    else if (strcmp(a, "--data") == 0) data_path = v, i++;
    else if (strcmp(a, "--sizes") == 0) sizes_arg = v, i++;
    else if (strcmp(a, "--clients") == 0) clients_arg = v, i++;
    else if (strcmp(a, "--modes") == 0) modes_arg = v, i++;
    else if (strcmp(a, "--time") == 0) budget = atof(v), i++;
    else if (strcmp(a, "--connections") == 0) s.connections = atoi(v), i++;
    else if (strcmp(a, "--threads") == 0) s.threads = atoi(v), i++;
    else if (strcmp(a, "--base-args") == 0) base_args = v, i++;
    else if (strcmp(a, "--out") == 0) out_path = v, i++;
    else if (strcmp(a, "--backend") == 0) backend = v, i++;
    else if (strcmp(a, "--max-total") == 0) {
      uint64_t t[1];
      if (parse_sizes(v, t, 1) != 1) return 2;
      max_total = t[0], i++;
    } else return fputs(usage, stderr), 2;
  }
  if (budget <= 0 || budget > 60) die("%s", "--time: 0 to 60 seconds");
  int on[M_COUNT] = {0};
  if (modes_arg) {
    for (const char *p = modes_arg; *p;) {
      size_t len = strcspn(p, ",");
      int found = 0;
      for (int m = 0; m < M_COUNT; m++)
        if (strlen(mode_key[m]) == len && strncmp(p, mode_key[m], len) == 0) on[m] = found = 1;
      if (!found) die("--modes: unknown mode in '%s'", modes_arg);
      p += len + (p[len] == ',');
    }
  } else {
    for (int m = 0; m < M_COUNT; m++) on[m] = m != M_BASE_TCP;
  }
  on[M_BASE_TCP] = on[M_BASE_TCP] || base_args != NULL;
  if (on[M_BASE_TCP] && !base_args) die("%s", "base_tcp needs --base-args");
  uint64_t sizes[MAX_SIZES], clients[8];
  int n_sizes = parse_sizes(sizes_arg, sizes, MAX_SIZES);
  int n_clients = bench_parse_list("--clients", clients_arg, clients, 8);
  if (n_sizes < 0 || n_clients < 0) return 2;
  for (int i = 0; i < n_clients; i++)
    if (clients[i] < 1 || clients[i] > MAX_CLIENTS) die("--clients: 1 to 64 each, not '%s'", clients_arg);

  size_t src_len;
  uint8_t *src = bench_read_file(data_path, &src_len);
  if (src_len < 2 || src_len % 2) die("%s: not a bf16 tensor file", data_path);
  uint64_t biggest = 0;
  for (int i = 0; i < n_sizes; i++) {
    if (sizes[i] % 2) die("%s", "--sizes: whole bf16 elements (even bytes)");
    biggest = sizes[i] > biggest ? sizes[i] : biggest;
  }
  uint8_t *data = malloc(biggest);
  if (!data) die("%s", "out of memory");
  for (size_t off = 0; off < biggest; off += src_len)
    memcpy(data + off, src, biggest - off < src_len ? biggest - off : src_len);
  free(src);

  char self[PATH_MAX], lctd[PATH_MAX + 8], port_s[16], base_port_s[16], rport_s[16];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n <= 0) die("%s", "cannot find the lctd binary");
  self[n] = '\0';
  snprintf(lctd, sizeof lctd, "%s/lctd", dirname(self));
  int pid = (int)getpid(), port = bench_free_port(), base_port = bench_free_port();
  s.redis_port = bench_free_port();
  s.plain_port = bench_free_port();
  if (port < 0 || base_port < 0 || s.redis_port < 0 || s.plain_port < 0) die("%s", "cannot find a free port");
  snprintf(s.ipc, sizeof s.ipc, "ipc:///tmp/lct-bench-%d.sock", pid);
  snprintf(s.tcp, sizeof s.tcp, "tcp://127.0.0.1:%d", port);
  snprintf(s.base_tcp, sizeof s.base_tcp, "tcp://127.0.0.1:%d", base_port);
  snprintf(s.redis_sock, sizeof s.redis_sock, "/tmp/lct-bench-redis-%d.sock", pid);
  snprintf(s.plain_sock, sizeof s.plain_sock, "/tmp/lct-bench-plain-%d.sock", pid);
  snprintf(port_s, sizeof port_s, "%d", port);
  snprintf(base_port_s, sizeof base_port_s, "%d", base_port);
  snprintf(rport_s, sizeof rport_s, "%d", s.redis_port);

  char *lctd_argv[] = {lctd, "--backend", (char *)backend, "--listen", s.ipc, "--listen", s.tcp, "--log-level",
                       "warn", NULL};
  char *redis_argv[] = {"redis-server", "--port", rport_s, "--bind", "127.0.0.1", "--unixsocket", s.redis_sock,
                        "--save", "", "--appendonly", "no", "--proto-max-bulk-len", "4gb",
                        "--client-query-buffer-limit", "4gb", NULL};
  pid_t lpid = spawn(lctd_argv), bpid = 0, rpid = 0, ppid = 0;
  if (on[M_BASE_TCP]) {
    /* The base lctd: the same binary with base_args appended (split at blanks). */
    char *bargv[64] = {lctd, "--backend", (char *)backend, "--listen", s.base_tcp, "--log-level", "warn"};
    int bn = 7;
    char *copy = strdup(base_args);
    for (char *tok = strtok(copy, " "); tok && bn < 63; tok = strtok(NULL, " ")) bargv[bn++] = tok;
    bargv[bn] = NULL;
    bpid = spawn(bargv);
    if (wait_lctd(s.base_tcp) != 0) die("the base lctd (%s) did not start", base_args);
  }
  if (on[M_REDIS_UNIX] || on[M_REDIS_TCP]) {
    rpid = spawn(redis_argv);
    if (wait_peer(s.redis_port) != 0) die("%s", "redis-server did not start (is it installed?)");
  }
  if (on[M_PLAIN_UNIX] || on[M_PLAIN_TCP]) ppid = plain_server_start(s.plain_sock, s.plain_port);
  if (wait_lctd(s.ipc) != 0) die("%s did not start", lctd);
  if (s.threads <= 0) s.threads = 0; /* per cell: the CPUs shared by the clients */

  char cpu[256];
  bench_cpu_name(cpu, sizeof cpu);
  FILE *out = bench_open_out(out_path);
  printf("lctd (%s backend) against redis-server and a bare socket pair, same payloads, same run (%s)\n", backend,
         cpu);
  printf("GB/s of raw tensor bytes (all clients' bytes over the phase's wall time); put / get\n");
  printf("data: %s tiled (bf16); lctd connections per client: %d%s%s\n\n", data_path,
         s.connections ? s.connections : 1, base_args ? "; base: lctd " : "", base_args ? base_args : "");
  if (out)
    fprintf(out, "{\"bench\": \"service\", \"backend\": \"%s\", \"cpu\": \"%s\", \"data\": \"%s\", \"base_args\": "
                 "\"%s\", \"rows\": [", backend, cpu, data_path, base_args ? base_args : "");
  int first = 1;
  long cpus = sysconf(_SC_NPROCESSORS_ONLN);
  static result lat[MAX_SIZES][M_COUNT];
  for (int ci = 0; ci < n_clients; ci++) {
    int nc = (int)clients[ci];
    printf("%d client%s\n%9s", nc, nc > 1 ? "s" : "", "size");
    for (int m = 0; m < M_COUNT; m++)
      if (on[m]) printf(" | %15s", mode_name[m]);
    printf("\n");
    for (int si = 0; si < n_sizes; si++) {
      size_t bytes = sizes[si];
      char name[32];
      size_name(bytes, name, sizeof name);
      printf("%9s", name);
      if ((uint64_t)nc * bytes > max_total) {
        printf(" | skipped: %d x %s is over --max-total\n", nc, name);
        continue;
      }
      setup cs = s;
      if (cs.threads == 0) cs.threads = cpus / nc > 1 ? (int)(cpus / nc) : 1;
      int reps_max = bytes <= (64u << 10) ? SMALL_REPS : LARGE_REPS;
      for (int m = 0; m < M_COUNT; m++) {
        if (!on[m]) continue;
        result r = run_cell(&cs, (mode)m, data, bytes, nc, budget / 2, reps_max);
        printf(" | %7.3f %7.3f", r.put_gbs, r.get_gbs);
        fflush(stdout);
        if (out)
          fprintf(out,
                  "%s\n {\"clients\": %d, \"bytes\": %zu, \"mode\": \"%s\", \"reps\": %d, \"put_gbs\": %.4f, "
                  "\"get_gbs\": %.4f, \"put_p50_us\": %.1f, \"put_p99_us\": %.1f, \"get_p50_us\": %.1f, "
                  "\"get_p99_us\": %.1f}",
                  first ? "" : ",", nc, bytes, mode_key[m], r.reps, r.put_gbs, r.get_gbs, r.put_p50 * 1e6,
                  r.put_p99 * 1e6, r.get_p50 * 1e6, r.get_p99 * 1e6);
        first = 0;
        lat[si][m] = r;
      }
      printf("\n");
    }
    /* Latency where it is what matters: the small sizes. */
    for (int si = 0; si < n_sizes; si++) {
      if (sizes[si] > (64u << 10) || (uint64_t)nc * sizes[si] > max_total) continue;
      char name[32];
      size_name(sizes[si], name, sizeof name);
      printf("%9s latency, us       put p50     p99 |   get p50     p99\n", name);
      for (int m = 0; m < M_COUNT; m++)
        if (on[m])
          printf("%9s %-16s %9.1f %7.1f | %9.1f %7.1f\n", "", mode_name[m], lat[si][m].put_p50 * 1e6,
                 lat[si][m].put_p99 * 1e6, lat[si][m].get_p50 * 1e6, lat[si][m].get_p99 * 1e6);
    }
    printf("\n");
  }
  if (out) {
    fprintf(out, "\n]}\n");
    fclose(out);
  }
  stop(lpid);
  stop(bpid);
  stop(rpid);
  stop(ppid);
  unlink(s.redis_sock);
  unlink(s.plain_sock);
  free(data);
  return 0;
}
