/* bench_soak.c — lct-bench soak: client threads run mixed, byte-verified operations against an lctd it starts, for a set time; --chaos kills and restarts that lctd at random moments and checks what its snapshots bring back. */
#define _GNU_SOURCE /* pthread_timedjoin_np */
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <libgen.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "bench_soak.h"
#include "lct_checksum.h"

#define SOAK_FRAME (256u << 10) /* lctd's frame_size: larger puts and gets travel in chunks */
#define SOAK_SMALL_MAX (128u << 10)
#define SOAK_LAT_BUCKETS 2048 /* latency buckets, 1 us * 1.01^i: 1% wide, up to ~700 s */
#define SOAK_ERR_CODES 64     /* wire codes counted one by one; larger ones share the last */
#define SOAK_REPORTS 20       /* verification failures described on stderr */
#define SOAK_MARGIN_MIB 64.0  /* the growth check's margin over 1.5x the middle third's median */
#define SOAK_POLL_S 0.1       /* how often --chaos reads lctd's count of completed saves */

enum { OP_PUT, OP_PUT_CHUNKED, OP_GET, OP_STAT, OP_LIST, OP_DELETE, OP_PUT_DEVICE, OP_GET_DEVICE, OP_STATS, N_OPS };
static const char *const op_names[N_OPS] = {"put",    "put_chunked", "get",        "stat", "list",
                                            "delete", "put_device",  "get_device", "stats"};
/* Relative frequency of each client op (stats is the watcher's). */
static const int op_weight[N_OPS] = {25, 8, 30, 12, 5, 6, 7, 7, 0};

typedef struct soak_client {
  struct soak_run *run;
  int index;
  pthread_t thread;
  lct_client *c;
  uint64_t rng;
  soak_key *keys;
  uint8_t *put_buf, *get_buf, *scratch;
  soak_device *dev;
  int epoch;                   /* the lctd incarnation its model is checked against */
  _Atomic uint64_t busy_since; /* ns at the start of the call in flight; 0 between calls */
  _Atomic int busy_op;
  uint64_t lat[N_OPS][SOAK_LAT_BUCKETS];
  uint64_t ops[N_OPS];
  uint64_t errs[N_OPS][SOAK_ERR_CODES][2]; /* [op][code][0: lctd up, 1: the call spanned a kill] */
  uint64_t checks, checked_bytes, wrong_bytes, lost, wrong_meta;
} soak_client;

typedef struct soak_sample {
  double t;
  int epoch;
  double rss_mib, dev_mib; /* dev_mib < 0: not sampled */
} soak_sample;

typedef struct soak_run {
  /* options */
  double seconds, kill_min, kill_max;
  int clients, keys, chaos, save_interval_s, timeout_ms, hang_s, device;
  uint64_t max_bytes, seed;
  const char *backend, *out_path;
  char command[1024];
  /* lctd */
  char lctd[PATH_MAX], dir[64], log[96], persist[96], ipc[128], tcp[64], frame[16], mem[24], interval[16];
  char *argv[24];
  pid_t pid; /* under lock */
  /* the clients, the watcher of lctd's saves and the chaos */
  soak_client *cl;
  lct_client *watcher;
  _Atomic int stop, failed;
  _Atomic int done; /* the last lctd has stopped */
  _Atomic uint64_t stamps;      /* bumped before each poll and SAVE: an entry's stamp is this after its reply */
  _Atomic uint64_t saved_stamp; /* writes stamped below it are in a save this incarnation completed; 0: none */
  _Atomic int epoch;            /* kills so far, bumped before each */
  _Atomic int up;               /* the epoch whose lctd serves */
  _Atomic int resynced;         /* clients that checked their keys against it */
  _Atomic uint64_t watcher_busy_since;
  _Atomic int reports;
  uint64_t killed_saved_stamp; /* the saved stamp of the incarnation the last kill ended */
  uint64_t epoch_stamp;        /* a stamp taken before this incarnation started: none of its saves began earlier */
  pthread_mutex_t lock;        /* a kill, against the record of a completed save and the sampler */
  double t0;
  /* results */
  uint64_t watch_lat[SOAK_LAT_BUCKETS], watch_ops, watch_errs[SOAK_ERR_CODES][2];
  uint64_t saves_seen, save_failures;
  uint64_t restart_lat[SOAK_LAT_BUCKETS];
  int restarts, hang, lctd_died, final_status;
  soak_sample *samples;
  size_t n_samples, cap_samples;
  int have_dev_mem;
} soak_run;

static double now_s(void) { return bench_now(); }

static void sleep_s(double s) {
  struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
  nanosleep(&ts, NULL);
}

static uint64_t rnd(uint64_t *s) {
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

static double rnd_unit(uint64_t *s) { return (double)(rnd(s) >> 11) * 0x1p-53; }

static void lat_add(uint64_t *h, double seconds) {
  double us = seconds * 1e6;
  int b = us <= 1 ? 0 : (int)(log(us) / log(1.01));
  h[b < SOAK_LAT_BUCKETS ? b : SOAK_LAT_BUCKETS - 1]++;
}

/* The q-quantile of h in ms (a bucket's middle); 0 when empty. */
static double lat_quantile(const uint64_t *h, double q) {
  uint64_t n = 0, seen = 0;
  for (int b = 0; b < SOAK_LAT_BUCKETS; b++) n += h[b];
  if (n == 0) return 0;
  uint64_t want = (uint64_t)ceil(q * (double)n);
  for (int b = 0; b < SOAK_LAT_BUCKETS; b++)
    if ((seen += h[b]) >= want) return pow(1.01, b + 0.5) / 1e3;
  return 0;
}

static int err_slot(int rc) { return -rc < SOAK_ERR_CODES ? -rc : SOAK_ERR_CODES - 1; }

/* ---- lctd ------------------------------------------------------------------------ */

static int lctd_ready(soak_run *r, pid_t pid) {
  for (double t0 = now_s(); now_s() - t0 < 60;) {
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      fprintf(stderr, "lct-bench soak: lctd exited at start (status %d); see %s\n", status, r->log);
      return -1;
    }
    lct_options o;
    lct_options_init(&o);
    o.endpoint = r->ipc;
    o.connect_timeout_ms = 100;
    lct_client *c;
    if (lct_connect(&o, &c) == 0) {
      lct_close(c);
      return 0;
    }
  }
  fprintf(stderr, "lct-bench soak: lctd did not answer within 60 s; see %s\n", r->log);
  return -1;
}

/* Starts lctd (its log appended to r->log) and waits until it answers. */
static int lctd_start(soak_run *r) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    int fd = open(r->log, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) dup2(fd, 1), dup2(fd, 2);
    execv(r->lctd, r->argv);
    _exit(127);
  }
  pthread_mutex_lock(&r->lock);
  r->pid = pid;
  pthread_mutex_unlock(&r->lock);
  return lctd_ready(r, pid);
}

/* SIGKILL at this moment, and a new lctd on the same endpoints and persist_dir. */
static int chaos_restart(soak_run *r) {
  pthread_mutex_lock(&r->lock);
  r->killed_saved_stamp = atomic_load(&r->saved_stamp);
  atomic_store(&r->saved_stamp, 0);
  atomic_store(&r->resynced, 0);
  r->epoch_stamp = atomic_fetch_add(&r->stamps, 1) + 1;
  atomic_fetch_add(&r->epoch, 1);
  double t0 = now_s();
  kill(r->pid, SIGKILL);
  int status;
  waitpid(r->pid, &status, 0);
  pthread_mutex_unlock(&r->lock);
  if (lctd_start(r) != 0) return -1;
  lat_add(r->restart_lat, now_s() - t0);
  r->restarts++;
  atomic_store(&r->up, atomic_load(&r->epoch));
  return 0;
}

/* ---- the clients ------------------------------------------------------------------ */

/* Describes a verification failure on stderr (the first SOAK_REPORTS). */
static void report(soak_client *t, const soak_key *k, const char *what, int rc, const lct_tensor_info *info) {
  if (atomic_fetch_add(&t->run->reports, 1) >= SOAK_REPORTS) return;
  const soak_entry *e = &k->h[k->n - 1];
  fprintf(stderr, "lct-bench soak: client %d key %s: %s (rc %s; server: %s version %" PRIu64 " %" PRIu64
          " bytes crc %08x; expected one of %zu writes from seq %" PRIu64 ", the last seq %" PRIu64
          " version %" PRIu64 " %" PRIu64 " bytes crc %08x)\n",
          t->index, k->name, what, lct_err_name(rc), info ? lct_dtype_name(info->dtype) : "-",
          info ? info->version : 0, info ? info->raw_bytes : 0, info ? info->checksum : 0, k->n - k->from,
          k->h[k->from].t.seq, e->t.seq, e->t.version, e->t.bytes, e->t.crc);
}

/* Marks the start and end of a call for the watchdog. Returns the epoch the
 * client's model follows, not the current one: a kill between its last check
 * and this call (or between the pages of a LIST) makes the answer another
 * lctd's as much as one during the call. */
static int call_begin(soak_client *t, int op) {
  atomic_store(&t->busy_op, op);
  atomic_store(&t->busy_since, (uint64_t)(now_s() * 1e9));
  return t->epoch;
}

/* Ends a call: 1 when a kill came since the epoch of call_begin (its answer,
 * or none, may be another lctd's), or liblct says so (LCT_ERESTARTED: the
 * first call that meets the new lctd, run there or not). */
static int call_end(soak_client *t, int op, int epoch0, int rc, double t0) {
  atomic_store(&t->busy_since, 0);
  int span = atomic_load(&t->run->epoch) != epoch0 || rc == LCT_ERESTARTED;
  t->ops[op]++;
  if (rc == 0) lat_add(t->lat[op], now_s() - t0);
  return span;
}

static void count_error(soak_client *t, int op, int rc, int span) { t->errs[op][err_slot(rc)][span]++; }

/* A key whose state the server contradicts starts over: deleted there, absent here. */
static void reset_key(soak_client *t, soak_key *k) {
  lct_delete(t->c, k->name);
  soak_tensor absent = {0};
  soak_key_write(k, &absent, 1, atomic_load(&t->run->stamps));
}

/* Judges an observation of k (info NULL: absent; bytes NULL: a stat) against
 * the writes from lo on; a mismatch is counted and the key reset. */
static void judge(soak_client *t, soak_key *k, size_t lo, int rc, const lct_tensor_info *info, const uint8_t *bytes) {
  long m = soak_key_match(k, lo, info, bytes, t->scratch);
  t->checks++;
  if (m >= 0) {
    t->checked_bytes += bytes != NULL && info != NULL ? info->raw_bytes : 0;
    soak_key_seen(k, (size_t)m, info != NULL ? info->version : 0, atomic_load(&t->run->stamps));
    return;
  }
  /* Which way it is wrong: a tensor gone, bytes under the metadata of a
   * write, an older tensor back, or metadata of no write at all. */
  const char *what = "metadata of no write";
  uint64_t *count = &t->wrong_meta;
  if (info == NULL) {
    what = "tensor lost";
    count = &t->lost;
  } else if (bytes != NULL && soak_key_match(k, lo, info, NULL, NULL) >= 0) {
    what = "wrong bytes";
    count = &t->wrong_bytes;
  } else if (soak_key_match(k, 0, info, NULL, NULL) >= 0) {
    what = "an older tensor came back";
    count = &t->lost;
  }
  (*count)++;
  report(t, k, what, rc, info);
  reset_key(t, k);
}

/* A new tensor for k to put by op: dtype, shape and size drawn, contents in put_buf. */
static void make_tensor(soak_client *t, soak_key *k, int op, soak_tensor *out) {
  static const int dtypes[] = {LCT_DTYPE_BF16, LCT_DTYPE_BF16, LCT_DTYPE_F32, LCT_DTYPE_F16, LCT_DTYPE_F8E4M3,
                               LCT_DTYPE_RAW};
  soak_run *r = t->run;
  soak_tensor s = {.seq = ++k->seq};
  s.dtype = dtypes[rnd(&t->rng) % (sizeof dtypes / sizeof *dtypes)];
  size_t w = lct_dtype_size((lct_dtype)s.dtype);
  int chunked = op == OP_PUT_CHUNKED;
  double lo = chunked ? SOAK_FRAME + 64 : 64, hi = chunked ? (double)r->max_bytes : SOAK_SMALL_MAX;
  uint64_t n = (uint64_t)(exp(log(lo) + rnd_unit(&t->rng) * (log(hi) - log(lo))) / (double)w);
  if (op == OP_PUT && rnd(&t->rng) % 100 == 0) n = 0; /* an empty tensor now and then */
  s.bytes = n * w;
  s.ndim = 1;
  s.shape[0] = n;
  if (n % 16 == 0 && n > 0 && (rnd(&t->rng) & 1)) {
    s.ndim = 2;
    s.shape[0] = 16;
    s.shape[1] = n / 16;
  }
  soak_fill(k->id, s.seq, s.dtype, s.bytes, t->put_buf);
  s.crc = lct_crc32c(0, t->put_buf, s.bytes);
  *out = s;
}

static void op_put(soak_client *t, soak_key *k, int op) {
  soak_tensor s;
  make_tensor(t, k, op, &s);
  lct_tensor_info info;
  double t0 = now_s();
  int e0 = call_begin(t, op), rc;
#ifdef LCT_BENCH_GPU
  if (op == OP_PUT_DEVICE)
    rc = soak_device_put(t->dev, t->c, k->name, &s, t->put_buf, &info);
  else
#endif
    rc = lct_put(t->c, k->name, (lct_dtype)s.dtype, s.shape, s.ndim, t->put_buf, s.bytes, &info);
  int span = call_end(t, op, e0, rc, t0);
  if (rc != 0) {
    count_error(t, op, rc, span);
    soak_key_write(k, &s, 0, 0);
    return;
  }
  s.version = info.version;
  soak_key_write(k, &s, 1, atomic_load(&t->run->stamps));
  if (info.raw_bytes != s.bytes || info.checksum != s.crc || (int)info.dtype != s.dtype) {
    t->wrong_meta++;
    report(t, k, "a put answered other metadata", rc, &info);
  }
}

/* GET (host or device) or STAT of k, judged unless the call spanned a kill. */
static void op_read(soak_client *t, soak_key *k, int op) {
  lct_tensor_info info;
  double t0 = now_s();
  int e0 = call_begin(t, op), rc;
#ifdef LCT_BENCH_GPU
  if (op == OP_GET_DEVICE)
    rc = soak_device_get(t->dev, t->c, k->name, t->get_buf, t->run->max_bytes, &info);
  else
#endif
  if (op == OP_STAT)
    rc = lct_stat(t->c, k->name, &info);
  else
    rc = lct_get(t->c, k->name, t->get_buf, t->run->max_bytes, &info);
  int span = call_end(t, op, e0, rc, t0);
  if (rc != 0 && rc != LCT_ENOENT) {
    count_error(t, op, rc, span);
    return;
  }
  if (!span) judge(t, k, k->from, rc, rc == 0 ? &info : NULL, rc == 0 && op != OP_STAT ? t->get_buf : NULL);
}

static void op_delete(soak_client *t, soak_key *k) {
  double t0 = now_s();
  int e0 = call_begin(t, OP_DELETE);
  int rc = lct_delete(t->c, k->name);
  int span = call_end(t, OP_DELETE, e0, rc == LCT_ENOENT ? 0 : rc, t0);
  soak_tensor absent = {0};
  if (rc == LCT_ENOENT && !span) {
    judge(t, k, k->from, rc, NULL, NULL); /* it was absent already */
    return;
  }
  if (rc != 0 && rc != LCT_ENOENT) count_error(t, OP_DELETE, rc, span);
  soak_key_write(k, &absent, rc == 0, atomic_load(&t->run->stamps));
}

/* The client's keys listed page by page against what it knows they hold. */
static void op_list(soak_client *t) {
  char prefix[16], *cursor = NULL;
  snprintf(prefix, sizeof prefix, "c%03d/", t->index);
  int seen[4096] = {0}, span = 0;
  for (;;) {
    lct_list_page *page;
    double t0 = now_s();
    int e0 = call_begin(t, OP_LIST);
    int rc = lct_list(t->c, prefix, cursor, 16, &page);
    span |= call_end(t, OP_LIST, e0, rc, t0);
    free(cursor);
    cursor = NULL;
    if (rc != 0) {
      count_error(t, OP_LIST, rc, span);
      return;
    }
    for (size_t i = 0; i < page->n && !span; i++) {
      int idx = atoi(page->entries[i].key + strlen(prefix));
      soak_key *k = idx >= 0 && idx < t->run->keys ? &t->keys[idx] : NULL;
      const soak_tensor *want = k != NULL ? &k->h[k->n - 1].t : NULL;
      t->checks++;
      if (k == NULL) {
        t->wrong_meta++;
        fprintf(stderr, "lct-bench soak: client %d: LIST names a key it never wrote: %s\n", t->index,
                page->entries[i].key);
        continue;
      }
      seen[idx] = 1;
      if (k->from + 1 != k->n) continue; /* a write of unknown outcome: no expectation */
      const lct_tensor_info *in = &page->entries[i].info;
      if (want->seq == 0 || in->raw_bytes != want->bytes || in->checksum != want->crc ||
          (want->version != 0 && in->version != want->version)) {
        t->wrong_meta++;
        report(t, k, "LIST disagrees", 0, in);
      }
    }
    if (page->next_cursor != NULL) cursor = strdup(page->next_cursor);
    lct_list_free(page);
    if (cursor == NULL) break;
  }
  for (int i = 0; i < t->run->keys && !span; i++) {
    soak_key *k = &t->keys[i];
    if (!seen[i] && k->from + 1 == k->n && k->h[k->n - 1].t.seq != 0) {
      t->lost++;
      report(t, k, "LIST misses a stored key", 0, NULL);
      reset_key(t, k);
    }
  }
}

/* After a restart: every key checked against what the last completed save
 * guarantees (the writes from its floor on). */
static void resync(soak_client *t) {
  soak_run *r = t->run;
  int epoch = atomic_load(&r->epoch);
  while (atomic_load(&r->up) != epoch) {
    if (atomic_load(&r->failed)) return;
    sleep_s(0.01);
  }
  for (int i = 0; i < r->keys; i++) {
    soak_key *k = &t->keys[i];
    soak_key_floor(k, r->killed_saved_stamp, 1);
    lct_tensor_info info;
    int rc;
    do { /* the connection's first call after the restart says so, and a get may be asked again */
      double t0 = now_s();
      int e0 = call_begin(t, OP_GET);
      rc = lct_get(t->c, k->name, t->get_buf, r->max_bytes, &info);
      call_end(t, OP_GET, e0, rc, t0);
      if (rc == LCT_ERESTARTED) count_error(t, OP_GET, rc, 1);
    } while (rc == LCT_ERESTARTED);
    if (rc != 0 && rc != LCT_ENOENT) {
      count_error(t, OP_GET, rc, 0);
      k->from = k->floor; /* unseen: anything the crash may have left */
      continue;
    }
    judge(t, k, k->floor, rc, rc == 0 ? &info : NULL, rc == 0 ? t->get_buf : NULL);
  }
  t->epoch = epoch;
  atomic_fetch_add(&r->resynced, 1);
}

static void *client_main(void *arg) {
  soak_client *t = arg;
  soak_run *r = t->run;
  int total = 0;
  for (int op = 0; op < N_OPS; op++)
    if ((op != OP_PUT_DEVICE && op != OP_GET_DEVICE) || t->dev != NULL) total += op_weight[op];
  while (!atomic_load(&r->stop)) {
    if (atomic_load(&r->epoch) != t->epoch) {
      resync(t);
      continue;
    }
    int pick = (int)(rnd(&t->rng) % (uint64_t)total), op = 0;
    for (; op < N_OPS; op++) {
      if ((op == OP_PUT_DEVICE || op == OP_GET_DEVICE) && t->dev == NULL) continue;
      if ((pick -= op_weight[op]) < 0) break;
    }
    soak_key *k = &t->keys[rnd(&t->rng) % (uint64_t)r->keys];
    soak_key_floor(k, atomic_load(&r->saved_stamp), r->chaos);
    switch (op) {
    case OP_PUT:
    case OP_PUT_DEVICE:
      op_put(t, k, op);
      break;
    case OP_PUT_CHUNKED:
      if (r->max_bytes > SOAK_FRAME) op_put(t, k, op);
      break;
    case OP_GET:
    case OP_STAT:
    case OP_GET_DEVICE:
      op_read(t, k, op);
      break;
    case OP_LIST:
      op_list(t);
      break;
    case OP_DELETE:
      op_delete(t, k);
      break;
    }
  }
  return NULL;
}

/* ---- the watcher, the killer, the sampler --------------------------------------------- */

/* The value of a Prometheus line that starts with series, or 0. */
static uint64_t metric(const char *text, const char *series) {
  const char *p = strstr(text, series);
  return p != NULL ? strtoull(p + strlen(series), NULL, 10) : 0;
}

/* Follows lctd's periodic saves (save_interval) through its count of those
 * completed, polled with STATS: save n began after save n - 1 completed,
 * which was after the last poll that counted fewer than n - 1; so save n
 * holds every write answered before that poll's stamp. An incarnation's
 * polls start from its epoch stamp, as one that counted -1 (no save of it
 * began earlier), and only once the clients have checked their keys after
 * the restart; a failed save stops the incarnation's claims. */
static void *watcher_main(void *arg) {
  soak_run *r = arg;
  int epoch = -1, failed = 0;
  uint64_t *stamp = NULL, failures0 = 0, counted = 0;
  long *count = NULL;
  size_t n = 0, cap = 0;
  while (!atomic_load(&r->stop)) {
    sleep_s(SOAK_POLL_S);
    pthread_mutex_lock(&r->lock);
    int e0 = atomic_load(&r->epoch);
    int ok = atomic_load(&r->up) == e0 && atomic_load(&r->resynced) == r->clients;
    uint64_t g = ok ? atomic_fetch_add(&r->stamps, 1) + 1 : 0, start = r->epoch_stamp;
    pthread_mutex_unlock(&r->lock);
    if (!ok) continue;
    if (e0 != epoch) {
      epoch = e0;
      n = 0, failed = 0, counted = 0;
    }
    char *text;
    double t0 = now_s();
    atomic_store(&r->watcher_busy_since, (uint64_t)(t0 * 1e9));
    int rc = lct_stats(r->watcher, NULL, &text);
    atomic_store(&r->watcher_busy_since, 0);
    int span = atomic_load(&r->epoch) != e0 || rc == LCT_ERESTARTED;
    r->watch_ops++;
    if (rc != 0) {
      r->watch_errs[err_slot(rc)][span]++;
      continue;
    }
    lat_add(r->watch_lat, now_s() - t0);
    uint64_t saves = metric(text, "\nlct_snapshot_saves_total "), failures = metric(text, "\nlct_snapshot_failures_total ");
    lct_free(text);
    if (span) continue; /* the counts may be the next lctd's */
    if (n + 2 > cap) {
      cap = cap ? 2 * cap : 64;
      stamp = realloc(stamp, cap * sizeof *stamp);
      count = realloc(count, cap * sizeof *count);
      if (stamp == NULL || count == NULL) abort();
    }
    if (n == 0) {
      stamp[n] = start, count[n++] = -1;
      failures0 = failures;
    }
    stamp[n] = g, count[n++] = (long)saves;
    r->saves_seen += saves - counted;
    counted = saves;
    if (failures != failures0 && !failed) {
      r->save_failures += failures - failures0;
      failed = 1;
    }
    if (failed || saves == 0) continue;
    size_t p = n - 1;
    while (p > 0 && count[p] >= (long)saves - 1) p--;
    if (count[p] >= (long)saves - 1) continue;
    pthread_mutex_lock(&r->lock);
    if (atomic_load(&r->epoch) == e0 && stamp[p] > atomic_load(&r->saved_stamp)) atomic_store(&r->saved_stamp, stamp[p]);
    pthread_mutex_unlock(&r->lock);
  }
  free(stamp);
  free(count);
  return NULL;
}

/* Kills lctd at random moments, each after every client checked its keys
 * against the last restart. It lives until the run is done: the lctd it
 * started dies with the thread that forked it (PR_SET_PDEATHSIG). */
static void *killer_main(void *arg) {
  soak_run *r = arg;
  while (!atomic_load(&r->stop)) {
    double wait = r->kill_min + rnd_unit(&r->seed) * (r->kill_max - r->kill_min);
    for (double t0 = now_s(); now_s() - t0 < wait && !atomic_load(&r->stop);) sleep_s(0.01);
    while (atomic_load(&r->resynced) < r->clients && !atomic_load(&r->stop)) sleep_s(0.01);
    if (atomic_load(&r->stop)) break;
    if (chaos_restart(r) != 0) {
      atomic_store(&r->failed, 1);
      atomic_store(&r->stop, 1);
    }
  }
  while (!atomic_load(&r->done)) sleep_s(0.01);
  return NULL;
}

static double rss_mib(pid_t pid) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  double kib = -1;
  while (f != NULL && fgets(line, sizeof line, f))
    if (strncmp(line, "VmRSS:", 6) == 0) kib = atof(line + 6);
  if (f != NULL) fclose(f);
  return kib / 1024;
}

/* Device memory of pid in MiB from nvidia-smi; -1 when it has none to show. */
static double dev_mib(pid_t pid) {
  FILE *p = popen("nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits 2>/dev/null", "r");
  double mib = -1;
  char line[256];
  while (p != NULL && fgets(line, sizeof line, p)) {
    int got;
    double used;
    if (sscanf(line, "%d , %lf", &got, &used) == 2 && got == (int)pid) mib = used;
  }
  if (p != NULL) pclose(p);
  return mib;
}

/* Once a second: lctd's RSS (and device memory every 5 s), calls that hang,
 * an lctd that ended by itself, progress every minute. */
static void *sampler_main(void *arg) {
  soak_run *r = arg;
  for (int tick = 0; !atomic_load(&r->stop); tick++) {
    sleep_s(1);
    pthread_mutex_lock(&r->lock);
    pid_t pid = r->pid;
    int status;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      fprintf(stderr, "lct-bench soak: lctd ended by itself (status %d); see %s\n", status, r->log);
      r->lctd_died = 1;
      atomic_store(&r->stop, 1);
    }
    pthread_mutex_unlock(&r->lock);
    soak_sample s = {now_s() - r->t0, atomic_load(&r->epoch), rss_mib(pid), -1};
    if (r->device && tick % 5 == 0) s.dev_mib = dev_mib(pid);
    r->have_dev_mem |= s.dev_mib >= 0;
    if (r->n_samples == r->cap_samples) {
      r->cap_samples = r->cap_samples ? 2 * r->cap_samples : 1024;
      r->samples = realloc(r->samples, r->cap_samples * sizeof *r->samples);
      if (r->samples == NULL) abort();
    }
    r->samples[r->n_samples++] = s;
    uint64_t limit = (uint64_t)r->hang_s * 1000000000ull;
    for (int i = 0; i < r->clients; i++) {
      uint64_t since = atomic_load(&r->cl[i].busy_since), now = (uint64_t)(now_s() * 1e9);
      if (since != 0 && now > since + limit && !r->hang) {
        fprintf(stderr, "lct-bench soak: client %d: %s has not returned for %d s\n", i,
                op_names[atomic_load(&r->cl[i].busy_op)], r->hang_s);
        r->hang = 1;
        atomic_store(&r->stop, 1);
      }
    }
    uint64_t watcher = atomic_load(&r->watcher_busy_since);
    if (watcher != 0 && (uint64_t)(now_s() * 1e9) > watcher + limit && !r->hang) {
      fprintf(stderr, "lct-bench soak: a STATS has not returned for %d s\n", r->hang_s);
      r->hang = 1;
      atomic_store(&r->stop, 1);
    }
    if ((tick + 1) % 60 == 0) {
      uint64_t ops = 0, bad = 0;
      for (int i = 0; i < r->clients; i++) {
        for (int op = 0; op < N_OPS; op++) ops += r->cl[i].ops[op];
        bad += r->cl[i].wrong_bytes + r->cl[i].lost + r->cl[i].wrong_meta;
      }
      fprintf(stderr, "[%5.0f s] %" PRIu64 " ops, %" PRIu64 " wrong, %d restarts, lctd RSS %.0f MiB\n", s.t, ops,
              bad, r->restarts, s.rss_mib);
    }
  }
  return NULL;
}

/* ---- the run ------------------------------------------------------------------------- */

static int usage(void) {
  fputs("usage: lct-bench soak [--seconds S] [--clients N] [--keys N] [--max-mib N] [--backend cpu|cuda]\n"
        "                      [--timeout-ms MS] [--hang-s S] [--seed N] [--out FILE]\n"
        "                      [--chaos [--kill-every MIN,MAX] [--save-interval S]]\n"
        "  N client threads (one connection each, ipc and tcp alternately) run mixed puts (single-frame,\n"
        "  chunked, device), gets, stats, lists and deletes of their own keys against an lctd started from\n"
        "  this binary's directory, every byte checked; --chaos gives lctd a persist_dir saved every\n"
        "  --save-interval s and SIGKILLs it every MIN..MAX s, checking after each restart that every\n"
        "  tensor acknowledged before the last completed save is back bit-exact.\n",
        stderr);
  return 2;
}

static int parse(soak_run *r, int argc, char **argv) {
  r->seconds = 600;
  r->clients = 4;
  r->keys = 32;
  r->max_bytes = 4u << 20;
  r->backend = "cpu";
  r->timeout_ms = 5000;
  r->hang_s = 60;
  r->seed = 1;
  r->kill_min = 5;
  r->kill_max = 20;
  r->save_interval_s = 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (strcmp(a, "--chaos") == 0) {
      r->chaos = 1;
      continue;
    }
    if (v == NULL) return usage();
    i++;
    if (strcmp(a, "--seconds") == 0) r->seconds = atof(v);
    else if (strcmp(a, "--clients") == 0) r->clients = atoi(v);
    else if (strcmp(a, "--keys") == 0) r->keys = atoi(v);
    else if (strcmp(a, "--max-mib") == 0) r->max_bytes = (uint64_t)(atof(v) * (1 << 20));
    else if (strcmp(a, "--backend") == 0) r->backend = v;
    else if (strcmp(a, "--timeout-ms") == 0) r->timeout_ms = atoi(v);
    else if (strcmp(a, "--hang-s") == 0) r->hang_s = atoi(v);
    else if (strcmp(a, "--seed") == 0) r->seed = strtoull(v, NULL, 10);
    else if (strcmp(a, "--out") == 0) r->out_path = v;
    else if (strcmp(a, "--save-interval") == 0) r->save_interval_s = atoi(v);
    else if (strcmp(a, "--kill-every") == 0) {
      if (sscanf(v, "%lf,%lf", &r->kill_min, &r->kill_max) != 2) return usage();
    } else return usage();
  }
  if (r->seconds <= 0 || r->clients < 1 || r->clients > 256 || r->keys < 1 || r->keys > 4096 ||
      r->max_bytes < 64 || r->timeout_ms < 100 || r->hang_s < 1 || r->save_interval_s < 1 || r->kill_min < 0.1 ||
      r->kill_max < r->kill_min || (strcmp(r->backend, "cpu") != 0 && strcmp(r->backend, "cuda") != 0))
    return usage();
  size_t used = 0;
  for (int i = 0; i < argc && used < sizeof r->command; i++)
    used += (size_t)snprintf(r->command + used, sizeof r->command - used, "%s%s", i ? " " : "lct-bench ", argv[i]);
  return 0;
}

/* The pool: room for every key at its largest, coded bytes at worst, and a margin. */
static void lctd_argv(soak_run *r) {
  char self[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  self[n > 0 ? n : 0] = '\0';
  snprintf(r->lctd, sizeof r->lctd, "%s/lctd", dirname(self));
  snprintf(r->dir, sizeof r->dir, "/tmp/lct-soak-%d", (int)getpid());
  mkdir(r->dir, 0700);
  snprintf(r->log, sizeof r->log, "%s/lctd.log", r->dir);
  snprintf(r->ipc, sizeof r->ipc, "ipc://%s/lctd.sock", r->dir);
  snprintf(r->tcp, sizeof r->tcp, "tcp://127.0.0.1:%d", bench_free_port());
  snprintf(r->frame, sizeof r->frame, "%u", SOAK_FRAME);
  snprintf(r->mem, sizeof r->mem, "%" PRIu64, (uint64_t)r->clients * (uint64_t)r->keys * r->max_bytes * 2 + (256u << 20));
  char *fixed[] = {r->lctd, "--backend", (char *)r->backend, "--listen", r->ipc, "--listen", r->tcp,
                   "--frame-size", r->frame, "--memory", r->mem, "--log-level", "warn"};
  int k = 0;
  for (; k < (int)(sizeof fixed / sizeof *fixed); k++) r->argv[k] = fixed[k];
  if (r->chaos) {
    snprintf(r->persist, sizeof r->persist, "%s/persist", r->dir);
    snprintf(r->interval, sizeof r->interval, "%ds", r->save_interval_s);
    r->argv[k++] = "--persist-dir";
    r->argv[k++] = r->persist;
    r->argv[k++] = "--save-interval";
    r->argv[k++] = r->interval;
  }
  r->argv[k] = NULL;
}

static int clients_open(soak_run *r) {
  r->cl = calloc((size_t)r->clients, sizeof *r->cl);
  if (r->cl == NULL) return -1;
  for (int i = 0; i < r->clients; i++) {
    soak_client *t = &r->cl[i];
    t->run = r;
    t->index = i;
    t->rng = r->seed * 1000003u + (uint64_t)i;
    t->keys = calloc((size_t)r->keys, sizeof *t->keys);
    t->put_buf = malloc(r->max_bytes);
    t->get_buf = malloc(r->max_bytes);
    t->scratch = malloc(r->max_bytes);
    if (t->keys == NULL || t->put_buf == NULL || t->get_buf == NULL || t->scratch == NULL) return -1;
    for (int k = 0; k < r->keys; k++) {
      char name[32];
      snprintf(name, sizeof name, "c%03d/%04d", i, k);
      soak_key_init(&t->keys[k], (uint32_t)(i * 4096 + k), name);
    }
    lct_options o;
    lct_options_init(&o);
    o.endpoint = i % 2 ? r->tcp : r->ipc;
    o.timeout_ms = r->timeout_ms;
    int rc = lct_connect(&o, &t->c);
    if (rc != 0) {
      fprintf(stderr, "lct-bench soak: client %d cannot connect to %s: %s\n", i, o.endpoint, lct_strerror(rc));
      return -1;
    }
#ifdef LCT_BENCH_GPU
    if (r->device && (t->dev = soak_device_open(r->max_bytes)) == NULL) {
      fprintf(stderr, "lct-bench soak: no GPU buffers for client %d\n", i);
      return -1;
    }
#endif
  }
  return 0;
}

static void clients_close(soak_run *r) {
  for (int i = 0; r->cl != NULL && i < r->clients; i++) {
    soak_client *t = &r->cl[i];
    for (int k = 0; t->keys != NULL && k < r->keys; k++) soak_key_free(&t->keys[k]);
    free(t->keys);
    free(t->put_buf), free(t->get_buf), free(t->scratch);
#ifdef LCT_BENCH_GPU
    soak_device_close(t->dev);
#endif
    if (t->c != NULL) lct_close(t->c);
  }
  free(r->cl);
}

/* The end of a chaos run: a save every write was acknowledged before, a
 * last kill, and every key checked against it exactly. */
static int chaos_final(soak_run *r) {
  for (int i = 0; i < r->clients; i++)
    if (r->cl[i].epoch != atomic_load(&r->epoch)) resync(&r->cl[i]);
  uint64_t g = atomic_fetch_add(&r->stamps, 1) + 1;
  int rc;
  while ((rc = lct_save(r->watcher, NULL)) == LCT_ERESTARTED) /* its first call since the last restart */
    ;
  if (rc != 0) {
    fprintf(stderr, "lct-bench soak: the final save failed: %s\n", lct_last_error(r->watcher));
    return -1;
  }
  atomic_store(&r->saved_stamp, g);
  if (chaos_restart(r) != 0) return -1;
  for (int i = 0; i < r->clients; i++) resync(&r->cl[i]);
  return 0;
}

static int remove_one(const char *path, const struct stat *st, int type, struct FTW *ftw) { return remove(path); }

/* Every key once more, exactly as last acknowledged (plain runs). */
static void plain_final(soak_run *r) {
  for (int i = 0; i < r->clients; i++)
    for (int k = 0; k < r->keys; k++) op_read(&r->cl[i], &r->cl[i].keys[k], OP_GET);
}

/* Growth of a resource over the samples of one incarnation: the end against
 * 1.5x the median of the middle third plus a margin. 1 ok, 0 grown, -1 too
 * few samples to say. */
static double sample_of(const soak_sample *s, int dev) { return dev ? s->dev_mib : s->rss_mib; }

static int growth(const soak_run *r, int dev, double *median, double *end, double *limit) {
  int best = -1;
  size_t best_n = 0;
  for (int e = 0; e <= r->restarts; e++) {
    size_t n = 0;
    for (size_t i = 0; i < r->n_samples; i++) n += r->samples[i].epoch == e && sample_of(&r->samples[i], dev) >= 0;
    if (n > best_n) best = e, best_n = n;
  }
  double *v = malloc((best_n + 1) * sizeof *v);
  size_t n = 0;
  for (size_t i = 0; v != NULL && i < r->n_samples; i++)
    if (r->samples[i].epoch == best && sample_of(&r->samples[i], dev) >= 0) v[n++] = sample_of(&r->samples[i], dev);
  if (n < 30) {
    free(v);
    return -1;
  }
  *end = v[n - 1];
  size_t a = n / 3, b = 2 * n / 3;
  for (size_t i = a; i < b; i++) /* insertion sort of the middle third */
    for (size_t j = i; j > a && v[j - 1] > v[j]; j--) {
      double x = v[j];
      v[j] = v[j - 1];
      v[j - 1] = x;
    }
  *median = v[a + (b - a) / 2];
  *limit = 1.5 * *median + SOAK_MARGIN_MIB;
  free(v);
  return *end <= *limit;
}

int bench_soak(int argc, char **argv) {
  static soak_run run;
  soak_run *r = &run;
  if (parse(r, argc, argv) != 0) return 2;
  pthread_mutex_init(&r->lock, NULL);
  lctd_argv(r);
#ifdef LCT_BENCH_GPU
  r->device = soak_device_present();
#endif
  r->t0 = now_s();
  if (lctd_start(r) != 0) return 1;
  lct_options o;
  lct_options_init(&o);
  o.endpoint = r->ipc;
  o.timeout_ms = r->timeout_ms * 6; /* the final save writes everything changed since the last */
  if (clients_open(r) != 0 || (r->chaos && lct_connect(&o, &r->watcher) != 0)) {
    kill(r->pid, SIGKILL);
    return 1;
  }
  atomic_store(&r->resynced, r->clients);
  pthread_t sampler, watcher, killer;
  for (int i = 0; i < r->clients; i++) pthread_create(&r->cl[i].thread, NULL, client_main, &r->cl[i]);
  pthread_create(&sampler, NULL, sampler_main, r);
  if (r->chaos) {
    pthread_create(&watcher, NULL, watcher_main, r);
    pthread_create(&killer, NULL, killer_main, r);
  }
  while (now_s() - r->t0 < r->seconds && !atomic_load(&r->stop)) sleep_s(0.1);
  atomic_store(&r->stop, 1);
  double elapsed = now_s() - r->t0;
  int joined = 1;
  for (int i = 0; i < r->clients; i++) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += r->hang_s + 10;
    if (pthread_timedjoin_np(r->cl[i].thread, NULL, &until) != 0) joined = 0;
  }
  if (!joined) {
    fprintf(stderr, "lct-bench soak: a client never returned: a hang\n");
    kill(r->pid, SIGKILL);
    return 1;
  }
  pthread_join(sampler, NULL);
  if (r->chaos) pthread_join(watcher, NULL);
  int final_ok = 1;
  if (!r->lctd_died && !atomic_load(&r->failed) && !r->hang) {
    if (r->chaos) final_ok = chaos_final(r) == 0;
    else plain_final(r);
  }
  /* A clean stop is part of the run: exit 0 after its drain and save. */
  kill(r->pid, SIGTERM);
  int status = 0;
  waitpid(r->pid, &status, 0);
  r->final_status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  atomic_store(&r->done, 1);
  if (r->chaos) pthread_join(killer, NULL);

  /* ---- the report ---- */
  uint64_t ops[N_OPS] = {0}, errs[N_OPS][2] = {{0}}, checks = 0, checked = 0, wrong = 0, lost = 0, meta = 0;
  static uint64_t lat[N_OPS][SOAK_LAT_BUCKETS];
  for (int i = 0; i < r->clients; i++) {
    soak_client *t = &r->cl[i];
    for (int op = 0; op < N_OPS; op++) {
      ops[op] += t->ops[op];
      for (int b = 0; b < SOAK_LAT_BUCKETS; b++) lat[op][b] += t->lat[op][b];
      for (int e = 0; e < SOAK_ERR_CODES; e++) errs[op][0] += t->errs[op][e][0], errs[op][1] += t->errs[op][e][1];
    }
    checks += t->checks, checked += t->checked_bytes;
    wrong += t->wrong_bytes, lost += t->lost, meta += t->wrong_meta;
  }
  ops[OP_STATS] = r->watch_ops;
  for (int e = 0; e < SOAK_ERR_CODES; e++) errs[OP_STATS][0] += r->watch_errs[e][0], errs[OP_STATS][1] += r->watch_errs[e][1];
  memcpy(lat[OP_STATS], r->watch_lat, sizeof r->watch_lat);
  uint64_t unexpected = 0;
  for (int op = 0; op < N_OPS; op++) unexpected += errs[op][0];
  double rss_med = 0, rss_end = 0, rss_lim = 0, dev_med = 0, dev_end = 0, dev_lim = 0;
  int rss_ok = growth(r, 0, &rss_med, &rss_end, &rss_lim);
  int dev_ok = r->have_dev_mem ? growth(r, 1, &dev_med, &dev_end, &dev_lim) : -1;
  int pass = wrong == 0 && lost == 0 && meta == 0 && unexpected == 0 && r->save_failures == 0 && !r->hang && !r->lctd_died &&
             !atomic_load(&r->failed) && final_ok && rss_ok != 0 && dev_ok != 0 && r->final_status == 0;

  char cpu[256];
  bench_cpu_name(cpu, sizeof cpu);
  printf("lct-bench soak: %.0f s, %d clients x %d keys (up to %.1f MiB), %s backend%s, %s\n", elapsed, r->clients,
         r->keys, (double)r->max_bytes / (1 << 20), r->backend, r->device ? ", device ops" : "", cpu);
  if (r->chaos)
    printf("chaos: SIGKILL every %.0f-%.0f s, save_interval %d s\n", r->kill_min, r->kill_max, r->save_interval_s);
  printf("%-12s %10s %9s %9s %9s %8s %8s\n", "op", "count", "ops/s", "p50 ms", "p99 ms", "errors", "restart");
  for (int op = 0; op < N_OPS; op++) {
    if (ops[op] == 0) continue;
    printf("%-12s %10" PRIu64 " %9.1f %9.3f %9.3f %8" PRIu64 " %8" PRIu64 "\n", op_names[op], ops[op],
           (double)ops[op] / elapsed, lat_quantile(lat[op], 0.5), lat_quantile(lat[op], 0.99), errs[op][0],
           errs[op][1]);
  }
  printf("errors by kind:");
  int any = 0;
  for (int op = 0; op < N_OPS; op++)
    for (int e = 1; e < SOAK_ERR_CODES; e++)
      for (int s = 0; s < 2; s++) {
        uint64_t n = op == OP_STATS ? r->watch_errs[e][s] : 0;
        for (int i = 0; op != OP_STATS && i < r->clients; i++) n += r->cl[i].errs[op][e][s];
        if (n == 0) continue;
        printf("%s %s %s %" PRIu64 "%s", any ? "," : "", op_names[op], lct_err_name(-e), n,
               s ? " (across a restart)" : "");
        any = 1;
      }
  printf("%s\n", any ? "" : " none");
  if (r->chaos)
    printf("restarts: %d (kill to serving: p50 %.0f ms, p99 %.0f ms); periodic saves completed: %" PRIu64
           ", failed: %" PRIu64 "\n",
           r->restarts, lat_quantile(r->restart_lat, 0.5), lat_quantile(r->restart_lat, 0.99), r->saves_seen,
           r->save_failures);
  printf("verified: %" PRIu64 " observations, %.2f GB of tensor bytes compared; wrong bytes %" PRIu64
         ", lost %" PRIu64 ", wrong metadata %" PRIu64 ", errors outside a restart %" PRIu64 ", hangs %d\n",
         checks, (double)checked / 1e9, wrong, lost, meta, unexpected, r->hang);
  if (rss_ok >= 0)
    printf("lctd RSS: middle-third median %.0f MiB, end %.0f MiB, limit %.0f MiB: %s\n", rss_med, rss_end, rss_lim,
           rss_ok ? "ok" : "GROWN");
  if (dev_ok >= 0)
    printf("lctd device memory: middle-third median %.0f MiB, end %.0f MiB, limit %.0f MiB: %s\n", dev_med,
           dev_end, dev_lim, dev_ok ? "ok" : "GROWN");
  printf("lctd stop: exit %d; %s\n", r->final_status, pass ? "PASS" : "FAIL");

  FILE *out = bench_open_out(r->out_path);
  if (out != NULL) {
    fprintf(out, "{\"bench\": \"soak\", \"command\": \"%s\", \"cpu\": \"%s\", \"backend\": \"%s\", \"chaos\": %s, "
            "\"seconds\": %.1f, \"clients\": %d, \"keys\": %d, \"max_bytes\": %" PRIu64 ", \"device_ops\": %s,\n",
            r->command, cpu, r->backend, r->chaos ? "true" : "false", elapsed, r->clients, r->keys, r->max_bytes,
            r->device ? "true" : "false");
    fprintf(out, " \"ops\": {");
    for (int op = 0, first = 1; op < N_OPS; op++) {
      if (ops[op] == 0) continue;
      fprintf(out, "%s\n  \"%s\": {\"count\": %" PRIu64 ", \"ops_per_s\": %.2f, \"p50_ms\": %.4f, \"p99_ms\": %.4f, "
              "\"errors\": %" PRIu64 ", \"errors_across_restart\": %" PRIu64 "}",
              first ? "" : ",", op_names[op], ops[op], (double)ops[op] / elapsed, lat_quantile(lat[op], 0.5),
              lat_quantile(lat[op], 0.99), errs[op][0], errs[op][1]);
      first = 0;
    }
    fprintf(out, "},\n \"verified\": {\"observations\": %" PRIu64 ", \"bytes\": %" PRIu64 ", \"wrong_bytes\": %" PRIu64
            ", \"lost\": %" PRIu64 ", \"wrong_metadata\": %" PRIu64 ", \"errors_outside_restart\": %" PRIu64
            ", \"hangs\": %d},\n",
            checks, checked, wrong, lost, meta, unexpected, r->hang);
    fprintf(out, " \"restarts\": %d, \"restart_p50_ms\": %.1f, \"restart_p99_ms\": %.1f, \"saves_completed\": %" PRIu64
            ", \"save_failures\": %" PRIu64 ",\n",
            r->restarts, lat_quantile(r->restart_lat, 0.5), lat_quantile(r->restart_lat, 0.99), r->saves_seen,
            r->save_failures);
    fprintf(out, " \"rss_check\": %d, \"device_memory_check\": %d, \"lctd_exit\": %d, \"pass\": %s,\n", rss_ok,
            dev_ok, r->final_status, pass ? "true" : "false");
    fprintf(out, " \"samples\": [");
    for (size_t i = 0; i < r->n_samples; i++)
      fprintf(out, "%s[%.0f, %d, %.1f, %.0f]", i ? ", " : "", r->samples[i].t, r->samples[i].epoch,
              r->samples[i].rss_mib, r->samples[i].dev_mib);
    fprintf(out, "],\n \"samples_are\": [\"seconds\", \"restarts before\", \"lctd rss MiB\", \"device MiB (-1: none)\"]}\n");
    fclose(out);
  }
  if (r->watcher != NULL) lct_close(r->watcher);
  clients_close(r);
  free(r->samples);
  if (pass)
    nftw(r->dir, remove_one, 8, FTW_DEPTH | FTW_PHYS);
  else {
    fprintf(stderr, "lct-bench soak: lctd's log and persist_dir are kept in %s\n", r->dir);
  }
  return pass ? 0 : 1;
}
