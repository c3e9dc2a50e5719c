/* test_lost_lctd.c — liblct when its lctd dies or restarts: nothing replayed, a dead lctd noticed within 2 s, long saves not cut off. */
#include <criterion/criterion.h>
#include <pthread.h>

#include "lctd_harness.h"

static test_lctd daemon_;
static char persist_dir[64];

static void start_persisting(void) {
  snprintf(persist_dir, sizeof persist_dir, "/tmp/lct-test-lost-%d-XXXXXX", (int)getpid());
  cr_assert_not_null(mkdtemp(persist_dir));
  const char *extra[] = {"--persist-dir", persist_dir, NULL};
  test_lctd_start(&daemon_, extra);
}

/* lctd again, on the same endpoints and persist_dir, as a supervisor restarts it. */
static void restart(void) {
  const char *extra[] = {"--persist-dir", persist_dir, NULL};
  test_lctd_spawn(&daemon_, extra);
}

static void stop(void) {
  test_lctd_stop(&daemon_);
  char cmd[128];
  snprintf(cmd, sizeof cmd, "rm -rf %s", persist_dir);
  cr_assert_eq(system(cmd), 0);
}

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static lct_client *connect_to(const char *endpoint, int timeout_ms) {
  lct_options o;
  lct_options_init(&o);
  o.endpoint = endpoint;
  o.timeout_ms = timeout_ms;
  lct_client *c;
  int rc = lct_connect(&o, &c);
  cr_assert_eq(rc, 0, "connect %s: %s", endpoint, lct_strerror(rc));
  return c;
}

/* Replies the server sent to requests of op, whatever their status. */
static uint64_t requests_of(lct_client *c, const char *op) {
  char *text, needle[64];
  cr_assert_eq(lct_stats(c, NULL, &text), 0);
  snprintf(needle, sizeof needle, "\nlct_requests_total{op=\"%s\",", op);
  uint64_t n = 0;
  for (const char *p = strstr(text, needle); p != NULL; p = strstr(p + 1, needle))
    n += strtoull(strchr(p, '}') + 1, NULL, 10);
  lct_free(text);
  return n;
}

/* A call made on another thread, so that lctd can be stopped, killed or
 * restarted under it. */
typedef struct call {
  lct_client *c;
  const char *op; /* "put", "delete", "stat" or "save" */
  const char *key;
  int rc;
  double ended;
  pthread_t thread;
} call;

static void *call_run(void *arg) {
  call *k = arg;
  static const uint8_t bytes[4096];
  uint64_t shape[1] = {sizeof bytes};
  if (strcmp(k->op, "put") == 0)
    k->rc = lct_put(k->c, k->key, LCT_DTYPE_RAW, shape, 1, bytes, sizeof bytes, NULL);
  else if (strcmp(k->op, "delete") == 0)
    k->rc = lct_delete(k->c, k->key);
  else if (strcmp(k->op, "stat") == 0)
    k->rc = lct_stat(k->c, k->key, NULL);
  else
    k->rc = lct_save(k->c, NULL);
  k->ended = now_s();
  return NULL;
}

static void call_start(call *k, lct_client *c, const char *op, const char *key) {
  k->c = c;
  k->op = op;
  k->key = key;
  cr_assert_eq(pthread_create(&k->thread, NULL, call_run, k), 0);
}

static int call_join(call *k) {
  cr_assert_eq(pthread_join(k->thread, NULL), 0);
  return k->rc;
}

static void put_key(lct_client *c, const char *key) {
  uint8_t b[100] = {7};
  uint64_t shape[1] = {sizeof b};
  cr_assert_eq(lct_put(c, key, LCT_DTYPE_RAW, shape, 1, b, sizeof b, NULL), 0, "%s", lct_last_error(c));
}

/* ---- no request runs twice -------------------------------------------------- */

/* op of key is in flight (lctd stopped after receiving nothing of it) when
 * lctd is killed and restarted on the same endpoint: the call fails with
 * LCT_ERESTARTED, the new lctd never sees the request, and the client's next
 * call works. */
static void in_flight_across_restart(const char *endpoint, const char *op, const char *key) {
  lct_client *c = connect_to(endpoint, 20000);
  put_key(c, "keep");
  cr_assert_eq(lct_save(c, NULL), 0, "%s", lct_last_error(c));
  lct_server_info before;
  cr_assert_eq(lct_ping(c, &before), 0);
  cr_assert_neq(before.instance, 0, "every lctd names its instance");

  kill(daemon_.pid, SIGSTOP);
  call k;
  call_start(&k, c, op, key);
  test_sleep_ms(300); /* the request sits in the stopped lctd's socket */
  test_lctd_kill(&daemon_);
  restart();
  cr_assert_eq(call_join(&k), LCT_ERESTARTED, "%s in flight: %s: %s", op, lct_strerror(k.rc), lct_last_error(c));
  cr_assert(strstr(lct_last_error(c), "in flight") != NULL, "%s", lct_last_error(c));

  lct_client *fresh = connect_to(daemon_.ipc, 20000);
  cr_assert_eq(requests_of(fresh, op), 0, "the new lctd never received the %s", op);
  cr_assert_eq(lct_stat(fresh, "keep", NULL), 0, "restored, and not deleted by a replay");
  cr_assert_eq(lct_stat(fresh, "fresh", NULL), LCT_ENOENT, "a put in flight was not stored by the new lctd");
  lct_close(fresh);

  lct_server_info after;
  cr_assert_eq(lct_ping(c, &after), 0, "the next call works: %s", lct_last_error(c));
  cr_assert_neq(after.instance, before.instance, "another instance");
  cr_assert_neq(after.instance, 0);
  put_key(c, "later");
  cr_assert_eq(lct_stat(c, "later", NULL), 0);
  lct_close(c);
}

Test(lost_lctd, put_in_flight_not_replayed_ipc, .init = start_persisting, .fini = stop) {
  in_flight_across_restart(daemon_.ipc, "put", "fresh");
}

Test(lost_lctd, put_in_flight_not_replayed_tcp, .init = start_persisting, .fini = stop) {
  in_flight_across_restart(daemon_.tcp, "put", "fresh");
}

Test(lost_lctd, delete_in_flight_not_replayed_ipc, .init = start_persisting, .fini = stop) {
  in_flight_across_restart(daemon_.ipc, "delete", "keep");
}

Test(lost_lctd, delete_in_flight_not_replayed_tcp, .init = start_persisting, .fini = stop) {
  in_flight_across_restart(daemon_.tcp, "delete", "keep");
}

/* lctd restarts between two calls: the first call after it fails unsent with
 * LCT_ERESTARTED, the next works. */
Test(lost_lctd, restart_between_calls, .init = start_persisting, .fini = stop) {
  lct_client *c = connect_to(daemon_.ipc, 20000);
  put_key(c, "keep");
  cr_assert_eq(lct_save(c, NULL), 0);
  test_lctd_kill(&daemon_);
  restart();
  cr_assert_eq(lct_delete(c, "keep"), LCT_ERESTARTED, "%s", lct_last_error(c));
  cr_assert(strstr(lct_last_error(c), "not sent") != NULL, "%s", lct_last_error(c));
  cr_assert_eq(requests_of(c, "delete"), 0, "the delete never reached the new lctd");
  cr_assert_eq(lct_stat(c, "keep", NULL), 0);
  cr_assert_eq(lct_delete(c, "keep"), 0);
  lct_close(c);
}

/* ---- a dead lctd is noticed within 2 s ------------------------------------------ */

/* lctd dies (SIGKILL) while a call waits for its reply, and nothing takes
 * its place: the call fails with LCT_ECONN within 2 s of the death, though
 * its timeout is 20 s. */
static void dies_in_flight(const char *endpoint) {
  lct_client *c = connect_to(endpoint, 20000);
  put_key(c, "k");
  kill(daemon_.pid, SIGSTOP);
  call k;
  call_start(&k, c, "stat", "k");
  test_sleep_ms(300);
  double killed = now_s();
  test_lctd_kill(&daemon_);
  cr_assert_eq(call_join(&k), LCT_ECONN, "%s: %s", lct_strerror(k.rc), lct_last_error(c));
  cr_assert_lt(k.ended - killed, 3.0, "noticed %.1f s after the death", k.ended - killed);
  cr_assert(strstr(lct_last_error(c), "in flight") != NULL, "%s", lct_last_error(c));
  /* And the next call, with no lctd at all, fails as fast. */
  double t0 = now_s();
  cr_assert_eq(lct_stat(c, "k", NULL), LCT_ECONN);
  cr_assert_lt(now_s() - t0, 3.0);
  lct_close(c);
}

Test(lost_lctd, dies_in_flight_ipc, .init = start_persisting, .fini = stop) { dies_in_flight(daemon_.ipc); }

Test(lost_lctd, dies_in_flight_tcp, .init = start_persisting, .fini = stop) { dies_in_flight(daemon_.tcp); }

/* lctd dies between calls: the next call fails with LCT_ECONN within 2 s. */
static void dies_between_calls(const char *endpoint) {
  lct_client *c = connect_to(endpoint, 20000);
  put_key(c, "k");
  test_lctd_kill(&daemon_);
  double t0 = now_s();
  cr_assert_eq(lct_stat(c, "k", NULL), LCT_ECONN, "%s", lct_last_error(c));
  cr_assert_lt(now_s() - t0, 3.0, "noticed after %.1f s", now_s() - t0);
  lct_close(c);
}

Test(lost_lctd, dies_between_calls_ipc, .init = start_persisting, .fini = stop) { dies_between_calls(daemon_.ipc); }

Test(lost_lctd, dies_between_calls_tcp, .init = start_persisting, .fini = stop) { dies_between_calls(daemon_.tcp); }

/* ---- a live lctd is waited for ---------------------------------------------------- */

/* An lctd that answers late (stopped for longer than the liveness checks
 * take) but keeps its connection: the call waits for it. */
Test(lost_lctd, slow_lctd_not_cut_off, .init = start_persisting, .fini = stop) {
  lct_client *c = connect_to(daemon_.tcp, 20000);
  put_key(c, "k");
  kill(daemon_.pid, SIGSTOP);
  call k;
  call_start(&k, c, "stat", "k");
  test_sleep_ms(2500);
  kill(daemon_.pid, SIGCONT);
  cr_assert_eq(call_join(&k), 0, "%s", lct_last_error(c));
  lct_close(c);
}

/* A save that takes longer than timeout_ms (lctd stopped for a second during
 * it) succeeds: SAVE waits save_timeout_ms, no limit by default. Other calls
 * still time out after timeout_ms, and their late replies do not answer
 * later requests. */
Test(lost_lctd, save_outlives_timeout, .init = start_persisting, .fini = stop) {
  lct_client *c = connect_to(daemon_.ipc, 300);
  put_key(c, "k");
  kill(daemon_.pid, SIGSTOP);
  double t0 = now_s();
  cr_assert_eq(lct_stat(c, "k", NULL), LCT_ETIMEDOUT, "%s", lct_last_error(c));
  cr_assert_lt(now_s() - t0, 2.0);
  call k;
  call_start(&k, c, "save", NULL);
  test_sleep_ms(1000);
  kill(daemon_.pid, SIGCONT);
  cr_assert_eq(call_join(&k), 0, "save: %s: %s", lct_strerror(k.rc), lct_last_error(c));
  cr_assert_gt(k.ended - t0, 1.0, "the save outlived timeout_ms");
  lct_close(c);

  /* A save_timeout_ms shorter than the save ends the call. */
  lct_options o;
  lct_options_init(&o);
  o.endpoint = daemon_.ipc;
  o.save_timeout_ms = 300;
  cr_assert_eq(lct_connect(&o, &c), 0);
  kill(daemon_.pid, SIGSTOP);
  t0 = now_s();
  cr_assert_eq(lct_save(c, NULL), LCT_ETIMEDOUT);
  cr_assert_lt(now_s() - t0, 2.0);
  kill(daemon_.pid, SIGCONT);
  lct_close(c);
}

/* Small jobs queued together when lctd dies under them: each ends with an error, none waits for good
 * (the second meets the loss while the first is in flight, so the first's request leaves the window
 * without a reply). */
Test(lost_lctd, queued_jobs_end_when_lctd_dies, .init = start_persisting, .fini = stop) {
  lct_client *c = connect_to(daemon_.tcp, 3000);
  float v[256] = {0};
  uint64_t shape[1] = {256};
  test_put_ok(c, "met", LCT_DTYPE_F32, v, sizeof v, NULL); /* the lane is met: the jobs go out together */
  kill(daemon_.pid, SIGSTOP);
  enum { JOBS = 4 };
  lct_job *jobs[JOBS];
  char keys[JOBS][16]; /* a job reads its key until it ends */
  for (int i = 0; i < JOBS; i++) {
    snprintf(keys[i], sizeof keys[i], "job%d", i);
    cr_assert_eq(lct_submit_put(c, keys[i], LCT_DTYPE_F32, shape, 1, v, sizeof v, NULL, NULL, &jobs[i]), 0);
  }
  usleep(200 * 1000); /* the first is in flight, the second waits for its reply */
  test_lctd_kill(&daemon_);
  for (int i = 0; i < JOBS; i++) {
    cr_assert_neq(lct_job_wait(jobs[i], NULL), 0, "job %d ended without an error", i);
    lct_job_free(jobs[i]);
  }
  lct_close(c);
}
