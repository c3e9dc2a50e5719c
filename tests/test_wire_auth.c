/* test_wire_auth.c — what authentication puts on the wire: never the token, and nothing a replay on another connection can use. */
#define _GNU_SOURCE /* memmem */
#include <criterion/criterion.h>
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <pthread.h>
#include <sys/stat.h>

#include "lct_wire.h"
#include "lctd_harness.h"
#include "raw_wire.h"

#define TOKEN "wire-token-0123456789abcdef-secret"
#define CAPTURED_MAX 64

static test_lctd daemon_;
static char token_path_[96];

static void start(void) {
  test_token_file("wire-token", TOKEN, token_path_, sizeof token_path_);
  const char *extra[] = {"--auth-token-file", token_path_, NULL};
  test_lctd_start(&daemon_, extra);
}

static void stop(void) {
  test_lctd_stop(&daemon_);
  unlink(token_path_);
}

/* A relay between liblct and lctd that keeps a copy of every request:
 * a raw REP socket where the client connects, a raw REQ socket to lctd, and
 * the SP headers passed along as nn_device passes them. */
typedef struct relay {
  char front[128];
  int rep, req;
  pthread_t thread;
  volatile int stop;
  pthread_mutex_t mu;
  size_t n;
  uint8_t *msgs[CAPTURED_MAX];
  size_t lens[CAPTURED_MAX];
} relay;

/* Moves one message, with its SP header, from socket from to socket to;
 * keeps a copy when capture is set. */
static void relay_one(relay *r, int from, int to, int capture) {
  void *msg = NULL, *control = NULL;
  struct nn_iovec iov = {&msg, NN_MSG};
  struct nn_msghdr hdr = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = &control, .msg_controllen = NN_MSG};
  int n = nn_recvmsg(from, &hdr, NN_DONTWAIT);
  if (n < 0)
    return;
  if (capture) {
    pthread_mutex_lock(&r->mu);
    if (r->n < CAPTURED_MAX) {
      r->msgs[r->n] = malloc((size_t)n);
      memcpy(r->msgs[r->n], msg, (size_t)n);
      r->lens[r->n++] = (size_t)n;
    }
    pthread_mutex_unlock(&r->mu);
  }
  if (nn_sendmsg(to, &hdr, 0) < 0) {
    nn_freemsg(msg);
    nn_freemsg(control);
  }
}

static void *relay_run(void *arg) {
  relay *r = arg;
  while (!r->stop) {
    struct nn_pollfd p[2] = {{r->rep, NN_POLLIN, 0}, {r->req, NN_POLLIN, 0}};
    if (nn_poll(p, 2, 50) <= 0)
      continue;
    if (p[0].revents & NN_POLLIN)
      relay_one(r, r->rep, r->req, 1);
    if (p[1].revents & NN_POLLIN)
      relay_one(r, r->req, r->rep, 0);
  }
  return NULL;
}

static void relay_start(relay *r, const char *front, const char *back) {
  memset(r, 0, sizeof *r);
  snprintf(r->front, sizeof r->front, "%s", front);
  pthread_mutex_init(&r->mu, NULL);
  int max = -1;
  cr_assert((r->rep = nn_socket(AF_SP_RAW, NN_REP)) >= 0);
  cr_assert((r->req = nn_socket(AF_SP_RAW, NN_REQ)) >= 0);
  nn_setsockopt(r->rep, NN_SOL_SOCKET, NN_RCVMAXSIZE, &max, sizeof max);
  nn_setsockopt(r->req, NN_SOL_SOCKET, NN_RCVMAXSIZE, &max, sizeof max);
  cr_assert(nn_bind(r->rep, front) >= 0, "bind %s: %s", front, nn_strerror(nn_errno()));
  cr_assert(nn_connect(r->req, back) >= 0);
  cr_assert_eq(pthread_create(&r->thread, NULL, relay_run, r), 0);
}

/* Stops relaying and closes both sockets: lctd sees its connection end. */
static void relay_stop(relay *r) {
  r->stop = 1;
  pthread_join(r->thread, NULL);
  nn_close(r->rep);
  nn_close(r->req);
}

static void relay_free(relay *r) {
  for (size_t i = 0; i < r->n; i++)
    free(r->msgs[i]);
  pthread_mutex_destroy(&r->mu);
}

/* The captured request i's header (free with lctpb__request__free_unpacked). */
static Lctpb__Request *captured(const relay *r, size_t i) {
  lct_wire_frame f;
  Lctpb__Request *rq;
  cr_assert_eq(lct_wire_split(r->msgs[i], r->lens[i], &f), 0);
  cr_assert_eq(lct_wire_request_parse(&f, &rq), 0);
  return rq;
}

/* The index of the first captured request of op (with a proof, for AUTH's answer). */
static size_t find_captured(const relay *r, uint32_t op, int with_proof) {
  for (size_t i = 0; i < r->n; i++) {
    Lctpb__Request *rq = captured(r, i);
    int hit = rq->op == op && (!with_proof || rq->has_auth_proof);
    lctpb__request__free_unpacked(rq, NULL);
    if (hit)
      return i;
  }
  cr_assert_fail("no captured request of op %u%s", op, with_proof ? " with a proof" : "");
  return 0;
}

/* Sends msg as it is on socket s (a new connection to lctd); the reply's
 * status, and whether it carries a challenge. */
static uint32_t send_raw(int s, const void *msg, size_t len, int *challenge) {
  Lctpb__Reply *rp;
  uint32_t status = test_raw_send(s, msg, len, &rp, NULL, NULL);
  if (challenge != NULL)
    *challenge = rp->has_auth_nonce;
  lctpb__reply__free_unpacked(rp, NULL);
  return status;
}

static lct_client *client_through(const char *endpoint) {
  lct_options o;
  lct_options_init(&o);
  o.endpoint = endpoint;
  o.auth_token_file = token_path_;
  o.timeout_ms = 10000;
  lct_client *c;
  int rc = lct_connect(&o, &c);
  cr_assert_eq(rc, 0, "connect through the relay: %s", lct_strerror(rc));
  return c;
}

Test(wire_auth, the_token_never_travels, .init = start, .fini = stop) {
  relay r;
  char front[128];
  snprintf(front, sizeof front, "ipc:///tmp/lct-wire-relay-%d.sock", (int)getpid());
  relay_start(&r, front, daemon_.tcp);
  lct_client *c = client_through(front);
  uint8_t data[256];
  memset(data, 3, sizeof data);
  uint64_t shape[1] = {sizeof data};
  cr_assert_eq(lct_put(c, "k", LCT_DTYPE_RAW, shape, 1, data, sizeof data, NULL), 0, "%s", lct_last_error(c));
  uint8_t back[256];
  cr_assert_eq(lct_get(c, "k", back, sizeof back, NULL), 0, "%s", lct_last_error(c));
  lct_close(c);
  relay_stop(&r);
  find_captured(&r, LCTPB__OP__OP_AUTH, 1); /* it did authenticate through the relay */
  for (size_t i = 0; i < r.n; i++) /* not even the token's first 16 bytes */
    cr_assert_null(memmem(r.msgs[i], r.lens[i], TOKEN, 16), "request %zu carries the token", i);
  relay_free(&r);
  unlink(front + 6);
}

Test(wire_auth, captured_requests_replayed_elsewhere_refused, .init = start, .fini = stop) {
  relay r;
  char front[128];
  snprintf(front, sizeof front, "ipc:///tmp/lct-wire-relay-%d.sock", (int)getpid());
  relay_start(&r, front, daemon_.tcp);
  lct_client *c = client_through(front);
  uint8_t data[64] = {1};
  uint64_t shape[1] = {sizeof data};
  cr_assert_eq(lct_put(c, "k", LCT_DTYPE_RAW, shape, 1, data, sizeof data, NULL), 0, "%s", lct_last_error(c));
  lct_close(c);
  relay_stop(&r);
  size_t answer = find_captured(&r, LCTPB__OP__OP_AUTH, 1), put = find_captured(&r, LCTPB__OP__OP_PUT, 0);

  /* A new connection: the answer belongs to a challenge it never had. */
  int s = test_raw_open(daemon_.tcp), challenge;
  cr_assert_eq(send_raw(s, r.msgs[answer], r.lens[answer], &challenge), (uint32_t)-LCT_EACCES);
  cr_assert(challenge, "the refusal carries a challenge of the connection's own");
  /* With a challenge of its own outstanding, the old answer is still wrong. */
  Lctpb__Request hello = LCTPB__REQUEST__INIT;
  hello.op = LCTPB__OP__OP_AUTH;
  uint8_t m[64];
  size_t h = lctpb__request__get_packed_size(&hello);
  lct_wire_prefix(m, h);
  lctpb__request__pack(&hello, m + LCT_WIRE_PREFIX_BYTES);
  cr_assert_eq(send_raw(s, m, LCT_WIRE_PREFIX_BYTES + h, &challenge), 0);
  cr_assert(challenge);
  cr_assert_eq(send_raw(s, r.msgs[answer], r.lens[answer], NULL), (uint32_t)-LCT_EACCES);
  /* And a captured request of an authenticated connection does not run. */
  cr_assert_eq(send_raw(s, r.msgs[put], r.lens[put], &challenge), (uint32_t)-LCT_EACCES);
  cr_assert(challenge);
  nn_close(s);
  lct_client *ipc = test_connect(daemon_.ipc);
  lct_tensor_info info;
  cr_assert_eq(lct_stat(ipc, "k", &info), 0);
  cr_assert_eq(info.version, 1, "the replayed put did not run");
  lct_close(ipc);
  relay_free(&r);
  unlink(front + 6);
}

Test(wire_auth, a_new_connection_authenticates_again, .init = start, .fini = stop) {
  relay r;
  char front[128];
  snprintf(front, sizeof front, "ipc:///tmp/lct-wire-relay-%d.sock", (int)getpid());
  relay_start(&r, front, daemon_.tcp);
  lct_client *c = client_through(front);
  uint8_t data[64] = {2};
  uint64_t shape[1] = {sizeof data};
  cr_assert_eq(lct_put(c, "a", LCT_DTYPE_RAW, shape, 1, data, sizeof data, NULL), 0, "%s", lct_last_error(c));
  /* The relay goes and comes back: the client's connection, and the one to
   * lctd, are new; lctd knows nothing of the new one. */
  relay_stop(&r);
  relay_free(&r);
  unlink(front + 6);
  test_sleep_ms(200); /* the client sees its connection end before its next call */
  relay_start(&r, front, daemon_.tcp);
  cr_assert_eq(lct_put(c, "b", LCT_DTYPE_RAW, shape, 1, data, sizeof data, NULL), 0, "%s", lct_last_error(c));
  lct_close(c);
  relay_stop(&r);
  find_captured(&r, LCTPB__OP__OP_AUTH, 1);
  relay_free(&r);
  unlink(front + 6);
}
