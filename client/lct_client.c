/* lct_client.c — liblct's core: the connection, a request's round trip, put/get in bounded frames, the other ops. */
#include <errno.h>
#include <inttypes.h>
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <nanomsg/tcp.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "lct_checksum.h"
#include "lct_client_internal.h"
#include "lct_stats_fields.h"

#define LCT__TIMEOUT_DEFAULT 30000
#define LCT__CONNECT_TIMEOUT_DEFAULT 5000
#define LCT__SLICE_MS 100 /* a wait's slice: how often it checks that the connection to lctd stands */
#define LCT__GRACE_MS 1500 /* how long a call waits for a connection to lctd, or a broken one to come back */
#define LCT__STALE_RETRIES 3 /* whole-tensor restarts when a ranged read sees a newer version */
#define LCT__SOCKET_BUFFER (1 << 20) /* NN_SNDBUF / NN_RCVBUF: 128 KiB slows tcp several-fold */

/* lct_options as it first had a size: later fields are read only from callers whose size covers them. */
#define LCT__OPTIONS_SIZE_FIRST (offsetof(lct_options, auth_token_file) + sizeof(const char *))

_Static_assert(LCT_MAX_DIMS == 8, "lct.h and lct_wire.h agree on the rank limit");

void lct__reply_free(lct__reply *r) {
  if (r->hdr != NULL)
    lctpb__reply__free_unpacked(r->hdr, NULL);
  if (r->msg != NULL)
    nn_freemsg(r->msg);
  memset(r, 0, sizeof *r);
}

int lct__fail(lct_client *c, int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->err, sizeof c->err, fmt, ap);
  va_end(ap);
  return rc;
}

/* ---- a request's round trip ---------------------------------------------- */

static uint64_t lct__now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Connections to lctd that broke since the lane was opened. */
static uint64_t lct__lane_breaks(const lct__lane *l) { return nn_get_statistic(l->sock, NN_STAT_BROKEN_CONNECTIONS); }

/* Over every lane. */
static uint64_t lct__breaks(const lct_client *c) {
  uint64_t n = 0;
  for (int i = 0; i < c->connections; i++)
    n += lct__lane_breaks(&c->lanes[i]);
  return n;
}

static int lct__connected(const lct__lane *l) {
  return nn_get_statistic(l->sock, NN_STAT_CURRENT_CONNECTIONS) > 0;
}

/* Whether the lane may carry a request now: no token, or authenticated and unbroken since. */
static int lct__lane_ready(const lct_client *c, const lct__lane *l) {
  return c->token_len == 0 || (l->authenticated && lct__lane_breaks(l) == l->auth_breaks);
}

/* The request id a reply carries back in its SP header; 0 (never sent) for none. */
static uint32_t lct__reply_id(const struct nn_msghdr *mh) {
  const struct nn_cmsghdr *cm = NN_CMSG_FIRSTHDR(mh);
  size_t spsz;
  if (cm == NULL || cm->cmsg_level != PROTO_SP || cm->cmsg_type != SP_HDR ||
      cm->cmsg_len < NN_CMSG_LEN(sizeof spsz + 4))
    return 0;
  const uint8_t *p = NN_CMSG_DATA(cm);
  memcpy(&spsz, p, sizeof spsz);
  p += sizeof spsz;
  return spsz == 4 ? (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3] : 0;
}

/* Sends one message on lane l under a new request id (*id, which becomes
 * the lane's in flight), waiting for a connection as lct__exchange says. 0,
 * LCT_ECONN or LCT_ETIMEDOUT with c->err. */
static int lct__send(lct_client *c, lct__lane *l, struct nn_iovec *iov, int niov, uint64_t start, uint64_t deadline,
                     int timeout_ms, uint32_t *id) {
  uint64_t up = start;
  *id = ++c->request_id | 0x80000000u; /* the top bit ends an SP backtrace */
  union {
    struct nn_cmsghdr h;
    uint8_t bytes[NN_CMSG_SPACE(sizeof(size_t) + 4)];
  } ctl;
  memset(&ctl, 0, sizeof ctl);
  ctl.h.cmsg_len = NN_CMSG_LEN(sizeof(size_t) + 4);
  ctl.h.cmsg_level = PROTO_SP;
  ctl.h.cmsg_type = SP_HDR;
  size_t spsz = 4;
  uint8_t *p = NN_CMSG_DATA(&ctl.h);
  memcpy(p, &spsz, sizeof spsz);
  p += sizeof spsz;
  p[0] = (uint8_t)(*id >> 24), p[1] = (uint8_t)(*id >> 16), p[2] = (uint8_t)(*id >> 8), p[3] = (uint8_t)*id;
  struct nn_msghdr mh = {.msg_iov = iov, .msg_iovlen = niov, .msg_control = &ctl, .msg_controllen = sizeof ctl};
  for (;;) {
    if (nn_sendmsg(l->sock, &mh, 0) >= 0) {
      l->in_flight = *id;
      return 0;
    }
    int e = nn_errno();
    if (e == EINTR)
      continue;
    if (e != ETIMEDOUT)
      return lct__fail(c, LCT_ECONN, "send: %s", nn_strerror(e));
    uint64_t now = lct__now_ms();
    if (lct__connected(l))
      up = now;
    else if (now - up >= (uint64_t)c->grace_ms || now >= deadline)
      return lct__fail(c, LCT_ECONN, "no connection to lctd within %llu ms; the request was not sent",
                       (unsigned long long)(now - start));
    if (now >= deadline)
      return lct__fail(c, LCT_ETIMEDOUT, "the request could not be sent within %d ms", timeout_ms);
  }
}

/* Whether id is one of ids[0..n); *which its index. */
static int lct__among(const uint32_t *ids, size_t n, uint32_t id, size_t *which) {
  for (size_t i = 0; id != 0 && i < n; i++)
    if (ids[i] == id) {
      *which = i;
      return 1;
    }
  return 0;
}

/* Forgets the requests of ids still in flight on their lanes: their replies,
 * should they come, are dropped as late ones. */
static void lct__abandon(lct_client *c, const uint32_t *ids, size_t n) {
  size_t i;
  for (int k = 0; k < c->connections; k++)
    if (lct__among(ids, n, c->lanes[k].in_flight, &i))
      c->lanes[k].in_flight = 0;
}

/* Waits for the reply to one of the n requests ids (0: done with), each in
 * flight on its lane, in slices, until deadline: 0 with *which, *msg and
 * *len; LCT_ECONN with *lost when a connection broke since breaks was
 * counted (before the first of them went out), LCT_ETIMEDOUT (the others
 * abandoned then). A reply to another request is dropped. */
static int lct__await(lct_client *c, const uint32_t *ids, size_t n, uint64_t breaks, uint64_t deadline,
                      int timeout_ms, int *lost, size_t *which, void **msg, int *len) {
  for (;;) {
    struct nn_pollfd pf[LCT__CONNECTIONS_MAX];
    lct__lane *pl[LCT__CONNECTIONS_MAX];
    int np = 0;
    for (int k = 0; k < c->connections; k++)
      if (lct__among(ids, n, c->lanes[k].in_flight, which)) {
        pl[np] = &c->lanes[k];
        pf[np++] = (struct nn_pollfd){.fd = c->lanes[k].sock, .events = NN_POLLIN};
      }
    if (np == 0)
      return lct__fail(c, LCT_EPROTO, "no request in flight to wait for");
    /* One lane waits in its own receive; several in a poll, then a receive that cannot block. */
    lct__lane *l = pl[0];
    if (np > 1) {
      int r = nn_poll(pf, np, LCT__SLICE_MS);
      if (r < 0 && nn_errno() != EINTR) {
        lct__abandon(c, ids, n);
        return lct__fail(c, LCT_ECONN, "poll: %s", nn_strerror(nn_errno()));
      }
      l = NULL;
      for (int k = 0; r > 0 && k < np && l == NULL; k++)
        if (pf[k].revents & NN_POLLIN)
          l = pl[k];
    }
    while (l != NULL) {
      void *m = NULL;
      union {
        struct nn_cmsghdr h;
        uint8_t bytes[NN_CMSG_SPACE(sizeof(size_t) + 64)];
      } rctl;
      memset(&rctl, 0, sizeof rctl);
      struct nn_iovec riov = {&m, NN_MSG};
      struct nn_msghdr rmh = {.msg_iov = &riov, .msg_iovlen = 1, .msg_control = &rctl, .msg_controllen = sizeof rctl};
      int got = nn_recvmsg(l->sock, &rmh, np > 1 ? NN_DONTWAIT : 0);
      if (got >= 0) {
        uint32_t id = lct__reply_id(&rmh);
        if (id != 0 && id == l->in_flight && lct__among(ids, n, id, which)) {
          l->in_flight = 0;
          *msg = m;
          *len = got;
          return 0;
        }
        nn_freemsg(m); /* a late reply to an abandoned request: the deadline still holds */
        if (lct__now_ms() < deadline)
          continue;
        break;
      }
      int e = nn_errno();
      if (e == EINTR)
        continue;
      if (e != ETIMEDOUT && e != EAGAIN) {
        lct__abandon(c, ids, n);
        return lct__fail(c, LCT_ECONN, "receive: %s", nn_strerror(e));
      }
      break;
    }
    if (lct__breaks(c) != breaks) {
      *lost = 1;
      lct__abandon(c, ids, n);
      return lct__fail(c, LCT_ECONN, "the connection to lctd broke while the request was in flight");
    }
    if (lct__now_ms() >= deadline) {
      lct__abandon(c, ids, n);
      return lct__fail(c, LCT_ETIMEDOUT, "no reply within %d ms", timeout_ms);
    }
  }
}

static uint64_t lct__deadline(uint64_t start, int timeout_ms) {
  return timeout_ms < 0 ? UINT64_MAX : start + (uint64_t)timeout_ms;
}

/* Sends one message and waits for its reply, in slices of LCT__SLICE_MS so
 * that a broken connection ends the wait. The socket is raw: nothing is ever
 * sent again behind the caller's back, and a reply is matched to its request
 * by the id in its SP header (a late one to an earlier request is dropped).
 * 0 with *msg and *len; LCT_ETIMEDOUT after timeout_ms (< 0: none); LCT_ECONN
 * with *lost 0 when no connection stood for grace_ms so nothing was sent, 1
 * when the connection it went out on broke. Sets c->err, and on a reply
 * c->breaks_seen. */
static int lct__exchange(lct_client *c, lct__lane *l, struct nn_iovec *iov, int niov, int timeout_ms, int *lost,
                         void **msg, int *len) {
  uint64_t start = lct__now_ms(), deadline = lct__deadline(start, timeout_ms);
  *lost = 0;
  /* Counted before the send: a break after it is this request's loss. */
  uint64_t breaks = lct__breaks(c);
  uint32_t id;
  size_t which;
  int rc = lct__send(c, l, iov, niov, start, deadline, timeout_ms, &id);
  if (rc == 0 && (rc = lct__await(c, &id, 1, breaks, deadline, timeout_ms, lost, &which, msg, len)) == 0)
    c->breaks_seen = breaks;
  return rc;
}

/* Packs the frame prefix and rq's header into c->hdr; its length in *len. */
static int lct__pack(lct_client *c, Lctpb__Request *rq, size_t plen, size_t *len) {
  *len = 0;
  rq->payload_bytes = plen;
  size_t hlen = lctpb__request__get_packed_size(rq);
  if (hlen > LCT_WIRE_HEADER_MAX)
    return lct__fail(c, LCT_E2BIG, "request header of %zu bytes", hlen);
  if (LCT_WIRE_PREFIX_BYTES + hlen > c->hdr_cap) {
    size_t cap = LCT_WIRE_PREFIX_BYTES + hlen + 256;
    uint8_t *p = realloc(c->hdr, cap);
    if (p == NULL)
      return lct__fail(c, LCT_ENOMEM, "out of memory for a request header");
    c->hdr = p;
    c->hdr_cap = cap;
  }
  lct_wire_prefix(c->hdr, hlen);
  lctpb__request__pack(rq, c->hdr + LCT_WIRE_PREFIX_BYTES);
  *len = LCT_WIRE_PREFIX_BYTES + hlen;
  return 0;
}

/* Once the connection to lctd broke: whether the lctd that answers a PING
 * now, within grace_ms (and timeout_ms, if >= 0), is the one of the last
 * reply. 0: the same (or one too old to say); LCT_ERESTARTED: another, whose
 * id c->instance becomes (*was: the old one's); LCT_ECONN: none answered.
 * Leaves c->err to the caller. */
static int lct__probe(lct_client *c, int timeout_ms, uint64_t *was) {
  Lctpb__Request rq = LCTPB__REQUEST__INIT;
  /* With a token, AUTH asking for a challenge: a ping that an lctd which
   * authenticates answers on a new connection without a refusal. */
  rq.op = c->token_len > 0 ? LCTPB__OP__OP_AUTH : LCTPB__OP__OP_PING;
  size_t len;
  int rc = lct__pack(c, &rq, 0, &len);
  if (rc != 0)
    return rc;
  struct nn_iovec iov = {c->hdr, len};
  int lost, n;
  void *msg;
  if (lct__exchange(c, &c->lanes[0], &iov, 1, timeout_ms >= 0 && timeout_ms < c->grace_ms ? timeout_ms : c->grace_ms, &lost,
                    &msg, &n) != 0)
    return LCT_ECONN;
  lct_wire_frame f;
  Lctpb__Reply *hdr;
  rc = lct_wire_split(msg, (size_t)n, &f);
  if (rc == 0)
    rc = lct_wire_reply_parse(&f, &hdr);
  nn_freemsg(msg);
  if (rc != 0)
    return LCT_ECONN;
  uint64_t instance = hdr->has_instance ? hdr->instance : 0;
  lctpb__reply__free_unpacked(hdr, NULL);
  *was = c->instance;
  if (instance == 0 || instance == c->instance)
    return 0;
  c->instance = instance;
  return LCT_ERESTARTED;
}

/* Parses a received message into *out, which then owns it; a malformed one is freed: LCT_EPROTO. */
static int lct__reply_take(lct_client *c, void *msg, int len, lct__reply *out) {
  lct_wire_frame f;
  int rc = lct_wire_split(msg, (size_t)len, &f);
  if (rc == 0)
    rc = lct_wire_reply_parse(&f, &out->hdr);
  if (rc != 0) {
    nn_freemsg(msg);
    return lct__fail(c, rc, "malformed reply from the server");
  }
  out->msg = msg;
  out->payload = f.payload;
  out->payload_len = f.payload_len;
  return 0;
}

/* Packs rq, sends it with plen payload bytes and parses the reply into *out,
 * whatever its status: 0, or lct__exchange's error (and *lost) or
 * LCT_EPROTO. */
static int lct__round_trip(lct_client *c, lct__lane *l, Lctpb__Request *rq, const void *payload, size_t plen,
                           int timeout_ms, int *lost, lct__reply *out) {
  memset(out, 0, sizeof *out);
  *lost = 0;
  size_t len;
  int rc = lct__pack(c, rq, plen, &len);
  if (rc != 0)
    return rc;
  struct nn_iovec iov[2] = {{c->hdr, len}, {(void *)payload, plen}};
  int n;
  void *msg;
  if ((rc = lct__exchange(c, l, iov, plen > 0 ? 2 : 1, timeout_ms, lost, &msg, &n)) != 0)
    return rc;
  return lct__reply_take(c, msg, n, out);
}

/* A reply's nonzero status as the call's error, with the server's words;
 * frees the reply. */
static int lct__status_fail(lct_client *c, lct__reply *r, const char *hint) {
  uint32_t status = r->hdr->status;
  int rc = status < 64 ? -(int)status : LCT_EPROTO;
  c->failed_item = r->hdr->has_failed_item ? r->hdr->failed_item : SIZE_MAX;
  lct__fail(c, rc, "%s%s", r->hdr->message != NULL ? r->hdr->message : lct_strerror(rc), hint);
  lct__reply_free(r);
  return rc;
}

/* Answers the challenge nonce with the token's proof (proto/lct_auth.h): 0
 * once lctd has authenticated the connection. A challenge lctd no longer
 * holds is answered once more, with the new one its refusal carries; one
 * lctd was too busy with wrong answers to check is answered again a second
 * later, within the call's timeout. */
static int lct__answer(lct_client *c, lct__lane *l, const uint8_t nonce[LCT_AUTH_NONCE_BYTES], int timeout_ms) {
  uint8_t server_nonce[LCT_AUTH_NONCE_BYTES], client_nonce[LCT_AUTH_NONCE_BYTES], proof[LCT_AUTH_PROOF_BYTES];
  memcpy(server_nonce, nonce, sizeof server_nonce);
  uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : lct__now_ms() + (uint64_t)timeout_ms;
  for (int attempt = 0;;) {
    lct_auth_random(client_nonce, sizeof client_nonce);
    lct_auth_proof(c->token, c->token_len, server_nonce, client_nonce, proof);
    Lctpb__Request rq = LCTPB__REQUEST__INIT;
    rq.op = LCTPB__OP__OP_AUTH;
    rq.has_auth_client_nonce = rq.has_auth_proof = 1;
    rq.auth_client_nonce = (ProtobufCBinaryData){sizeof client_nonce, client_nonce};
    rq.auth_proof = (ProtobufCBinaryData){sizeof proof, proof};
    lct__reply r;
    int lost, rc = lct__round_trip(c, l, &rq, NULL, 0, timeout_ms, &lost, &r);
    if (rc != 0)
      return rc;
    if (r.hdr->status == 0) {
      lct__reply_free(&r);
      return 0;
    }
    uint64_t now = lct__now_ms();
    if (r.hdr->status == (uint32_t)-LCT_EBUSY && now + 1000 < deadline) {
      lct__reply_free(&r);
      nanosleep(&(struct timespec){1, 0}, NULL);
      continue;
    }
    if (r.hdr->status != (uint32_t)-LCT_EACCES || !r.hdr->has_auth_nonce || attempt++ > 0)
      return lct__status_fail(c, &r, "");
    memcpy(server_nonce, r.hdr->auth_nonce.data, sizeof server_nonce);
    lct__reply_free(&r);
  }
}

/* Authenticates a new connection (the first call's, or one since broken)
 * before a request goes out on it: AUTH asks for a challenge, which the
 * token answers. An endpoint that authenticates nobody answers without one,
 * an lctd from before AUTH with LCT_EOP: nothing to prove there. */
static int lct__authenticate(lct_client *c, lct__lane *l, int timeout_ms) {
  uint64_t breaks = lct__lane_breaks(l);
  Lctpb__Request rq = LCTPB__REQUEST__INIT;
  rq.op = LCTPB__OP__OP_AUTH;
  lct__reply r;
  int lost, rc = lct__round_trip(c, l, &rq, NULL, 0, timeout_ms, &lost, &r);
  if (rc != 0)
    return rc;
  if (r.hdr->status == 0 && r.hdr->has_auth_nonce) {
    uint8_t nonce[LCT_AUTH_NONCE_BYTES];
    memcpy(nonce, r.hdr->auth_nonce.data, sizeof nonce);
    lct__reply_free(&r);
    rc = lct__answer(c, l, nonce, timeout_ms);
  } else if (r.hdr->status == 0 || r.hdr->status == (uint32_t)-LCT_EOP) {
    lct__reply_free(&r);
  } else {
    rc = lct__status_fail(c, &r,
                          r.hdr->status == (uint32_t)-LCT_EACCES
                              ? " (an lctd from before challenge-response wants the token itself, which liblct "
                                "never sends: upgrade lctd)"
                              : "");
  }
  if (rc == 0) {
    l->authenticated = 1;
    l->auth_breaks = breaks;
  }
  return rc;
}

/* lct__call with a timeout of its own. */
static int lct__call_within(lct_client *c, Lctpb__Request *rq, const void *payload, size_t plen, int timeout_ms,
                            lct__reply *out) {
  memset(out, 0, sizeof *out);
  c->failed_item = SIZE_MAX;
  uint64_t was;
  int rc;
  /* The connection to lctd broke since its last reply: ask who answers now
   * before a request goes to an lctd that lost what the caller stored. */
  if (c->instance != 0 && lct__breaks(c) != c->breaks_seen && (rc = lct__probe(c, timeout_ms, &was)) != 0) {
    if (rc == LCT_ERESTARTED)
      return lct__fail(c, rc,
                       "lctd restarted (instance %016" PRIx64 ", before %016" PRIx64 "): this request was not "
                       "sent; what the old one held and had not saved is gone",
                       c->instance, was);
    if (rc == LCT_ECONN)
      lct__fail(c, rc, "the connection to lctd broke and none answered within %d ms; this request was not sent",
                c->grace_ms);
    return rc;
  }
  lct__lane *l = &c->lanes[0];
  if (!lct__lane_ready(c, l) && (rc = lct__authenticate(c, l, timeout_ms)) != 0)
    return rc;
  for (int attempt = 0;; attempt++) {
    int lost;
    rc = lct__round_trip(c, l, rq, payload, plen, timeout_ms, &lost, out);
    if (rc != 0 && lost) {
      int probe = lct__probe(c, -1, &was);
      if (probe == LCT_ERESTARTED)
        return lct__fail(c, probe,
                         "lctd restarted (instance %016" PRIx64 ", before %016" PRIx64 ") while this request was "
                         "in flight: it may or may not have run on the old one, and was not sent again",
                         c->instance, was);
      return lct__fail(c, rc,
                       "the connection to lctd broke while this request was in flight: it may or may not have "
                       "run%s", probe == 0 ? ", and was not sent again" : "; lctd has not answered since");
    }
    if (rc != 0)
      return rc;
    if (out->hdr->has_instance && out->hdr->instance != c->instance) {
      was = c->instance;
      c->instance = out->hdr->instance;
      if (was != 0) {
        lct__reply_free(out);
        return lct__fail(c, LCT_ERESTARTED,
                         "lctd restarted (instance %016" PRIx64 ", before %016" PRIx64 "): this request ran on "
                         "the new one; what the old one held and had not saved is gone",
                         c->instance, was);
      }
    }
    uint32_t status = out->hdr->status;
    if (status == 0) {
      c->err[0] = '\0';
      return 0;
    }
    if (status != (uint32_t)-LCT_EACCES || !out->hdr->has_auth_nonce || c->token_len == 0 || attempt > 0)
      return lct__status_fail(c, out,
                              out->hdr->has_auth_nonce && c->token_len == 0
                                  ? " (no token given: lct_options.auth_token_file or $LCT_AUTH_TOKEN_FILE)"
                                  : "");
    /* The connection is not (or no longer) authenticated: lctd refused the
     * request without running it, so it goes again once the challenge its
     * refusal carries is answered. */
    uint8_t nonce[LCT_AUTH_NONCE_BYTES];
    memcpy(nonce, out->hdr->auth_nonce.data, sizeof nonce);
    lct__reply_free(out);
    uint64_t breaks = lct__lane_breaks(l);
    if ((rc = lct__answer(c, l, nonce, timeout_ms)) != 0)
      return rc;
    l->authenticated = 1;
    l->auth_breaks = breaks;
  }
}

int lct__call(lct_client *c, Lctpb__Request *rq, const void *payload, size_t plen, lct__reply *out) {
  return lct__call_within(c, rq, payload, plen, c->timeout_ms, out);
}

int lct__post(lct_client *c, Lctpb__Request *rq, const void *payload, size_t plen, uint32_t *id) {
  lct__lane *l = NULL;
  for (int k = 0; k < c->connections && l == NULL; k++)
    if (c->lanes[k].in_flight == 0)
      l = &c->lanes[k];
  if (l == NULL)
    return lct__fail(c, LCT_EBUSY, "every connection to lctd has a request in flight");
  /* A lane met for the first time (or broken since) proves the token before it carries a request. Its
   * exchange must not mark a break of another lane, with requests in flight, as seen. */
  uint64_t seen = c->breaks_seen;
  int rc = lct__lane_ready(c, l) ? 0 : lct__authenticate(c, l, c->timeout_ms);
  c->breaks_seen = seen;
  size_t len;
  if (rc != 0 || (rc = lct__pack(c, rq, plen, &len)) != 0)
    return rc;
  struct nn_iovec iov[2] = {{c->hdr, len}, {(void *)payload, plen}};
  uint64_t start = lct__now_ms();
  return lct__send(c, l, iov, plen > 0 ? 2 : 1, start, lct__deadline(start, c->timeout_ms), c->timeout_ms, id);
}

int lct__collect(lct_client *c, const uint32_t *ids, size_t n, size_t *which, lct__reply *out) {
  memset(out, 0, sizeof *out);
  int lost = 0, len = 0;
  void *msg = NULL;
  int rc = lct__await(c, ids, n, c->breaks_seen, lct__deadline(lct__now_ms(), c->timeout_ms), c->timeout_ms, &lost,
                      which, &msg, &len);
  if (rc != 0)
    return lost ? lct__fail(c, rc, "the connection to lctd broke with requests in flight: they may or may not "
                            "have run") : rc;
  /* A reply that cannot be read, or from another lctd, ends the exchange: the others of ids are
   * abandoned with it, so that no lane stays busy with a request nobody collects. */
  if ((rc = lct__reply_take(c, msg, len, out)) != 0) {
    lct__abandon(c, ids, n);
    return rc;
  }
  if (out->hdr->has_instance && out->hdr->instance != c->instance) {
    uint64_t was = c->instance;
    c->instance = out->hdr->instance;
    lct__reply_free(out);
    lct__abandon(c, ids, n);
    return lct__fail(c, LCT_ERESTARTED, "lctd restarted (instance %016" PRIx64 ", before %016" PRIx64 ") while "
                     "requests were in flight", c->instance, was);
  }
  return 0;
}

int lct__reply_status(lct_client *c, lct__reply *r) {
  return r->hdr->status == 0 ? 0 : lct__status_fail(c, r, "");
}

int lct__pipeline_ready(const lct_client *c) {
  return lct__breaks(c) == c->breaks_seen && lct__lane_ready(c, &c->lanes[0]);
}


static int lct__key(lct_client *c, const char *key, Lctpb__Request *rq) {
  size_t len = key != NULL ? strlen(key) : 0;
  if (lct_wire_key_check((const uint8_t *)key, len) != 0)
    return lct__fail(c, LCT_ENAMETOOLONG, "key must be 1..%d bytes", LCT_KEY_MAX);
  rq->has_key = 1;
  rq->key.data = (uint8_t *)key;
  rq->key.len = len;
  return 0;
}

int lct__key_of(lct_client *c, const char *key, Lctpb__Request *rq) { return lct__key(c, key, rq); }

void lct__info_of(const Lctpb__TensorMeta *m, lct_tensor_info *info) {
  memset(info, 0, sizeof *info);
  if (m == NULL)
    return;
  info->dtype = (lct_dtype)m->dtype;
  info->ndim = (int)m->n_shape; /* <= LCT_MAX_DIMS: lct_wire_reply_parse checked */
  for (size_t i = 0; i < m->n_shape; i++)
    info->shape[i] = m->shape[i];
  info->raw_bytes = m->raw_bytes;
  info->stored_bytes = m->stored_bytes;
  info->version = m->version;
  info->checksum = m->checksum;
}

void lct_options_init_sized(lct_options *o, size_t size) {
  memset(o, 0, size);
  if (size >= sizeof o->size)
    o->size = size;
}

/* Reads the caller's options, of whatever liblct's header it was built with:
 * fields it lacks keep their defaults, fields this liblct lacks must be 0. */
int lct__options_read(const lct_options *opts, lct_options *o) {
  lct_options_init(o);
  if (opts == NULL)
    return 0;
  if (opts->size < LCT__OPTIONS_SIZE_FIRST)
    return LCT_EINVAL; /* not set up by lct_options_init */
  for (size_t i = sizeof *o; i < opts->size; i++)
    if (((const uint8_t *)opts)[i] != 0)
      return LCT_EINVAL;
  memcpy(o, opts, opts->size < sizeof *o ? opts->size : sizeof *o);
  o->size = sizeof *o;
  return 0;
}

/* Opens lane l to endpoint: 0, or -1 (the socket closed again). */
static int lct__lane_open(lct__lane *l, const char *endpoint, size_t frame) {
  int max_msg = lct_wire_msg_max(frame);
  int one = 1, buf = LCT__SOCKET_BUFFER, slice = LCT__SLICE_MS;
  memset(l, 0, sizeof *l);
  /* Raw: a cooked REQ socket sends a request again, unasked, when its
   * connection drops (to a restarted lctd, say) or a resend interval passes. */
  if ((l->sock = nn_socket(AF_SP_RAW, NN_REQ)) < 0)
    return -1;
  if (nn_setsockopt(l->sock, NN_SOL_SOCKET, NN_RCVMAXSIZE, &max_msg, sizeof max_msg) < 0 ||
      nn_setsockopt(l->sock, NN_SOL_SOCKET, NN_SNDBUF, &buf, sizeof buf) < 0 ||
      nn_setsockopt(l->sock, NN_SOL_SOCKET, NN_RCVBUF, &buf, sizeof buf) < 0 ||
      nn_setsockopt(l->sock, NN_SOL_SOCKET, NN_SNDTIMEO, &slice, sizeof slice) < 0 ||
      nn_setsockopt(l->sock, NN_SOL_SOCKET, NN_RCVTIMEO, &slice, sizeof slice) < 0 ||
      (strncmp(endpoint, "tcp://", 6) == 0 && nn_setsockopt(l->sock, NN_TCP, NN_TCP_NODELAY, &one, sizeof one) < 0) ||
      nn_connect(l->sock, endpoint) < 0) {
    nn_close(l->sock);
    return -1;
  }
  return 0;
}

static void lct__lanes_close(lct_client *c, int n) {
  for (int i = 0; i < n; i++)
    nn_close(c->lanes[i].sock);
}

int lct_connect(const lct_options *opts, lct_client **out) {
  lct_options o;
  if (lct__options_read(opts, &o) != 0)
    return LCT_EINVAL;
  if (o.endpoint == NULL)
    o.endpoint = getenv("LCT_ENDPOINT");
  if (o.endpoint == NULL || *o.endpoint == '\0')
    o.endpoint = LCT_DEFAULT_ENDPOINT;
  int timeout = o.timeout_ms == 0 ? LCT__TIMEOUT_DEFAULT : o.timeout_ms < 0 ? -1 : o.timeout_ms;
  int connect_timeout =
      o.connect_timeout_ms > 0 ? o.connect_timeout_ms : LCT__CONNECT_TIMEOUT_DEFAULT;
  int save_timeout = o.save_timeout_ms > 0 ? o.save_timeout_ms : -1;
  size_t frame = o.frame_bytes == 0 ? LCT_FRAME_DEFAULT : o.frame_bytes;
  if (frame < LCT_FRAME_MIN || frame > LCT_FRAME_MAX)
    return LCT_EINVAL;
  const char *env = getenv("LCT_HOST_PATH");
  int host_path = o.host_path > 0 || (o.host_path == 0 && env != NULL && strcmp(env, "1") == 0);
  env = getenv("LCT_CONNECTIONS");
  int connections = o.connections != 0 ? o.connections : env != NULL && *env != '\0' ? atoi(env) : 1;
  if (connections < 1 || connections > LCT__CONNECTIONS_MAX)
    return LCT_EINVAL;

  lct_client *c = calloc(1, sizeof *c);
  if (c == NULL)
    return LCT_ENOMEM;
  c->frame = frame;
  c->host_path = host_path;
  c->connections = connections;
  /* The first ping may wait the whole connect timeout for lctd to come up. */
  c->timeout_ms = c->grace_ms = connect_timeout;
  const char *token_file = o.auth_token_file != NULL ? o.auth_token_file : getenv("LCT_AUTH_TOKEN_FILE");
  if (token_file != NULL && *token_file != '\0' &&
      (lct_token_file_read(token_file, c->token, &c->token_len) != 0 || lct_auth_init() != 0)) {
    sodium_memzero(c->token, sizeof c->token);
    free(c);
    return LCT_EACCES;
  }
  for (int i = 0; i < connections; i++)
    if (lct__lane_open(&c->lanes[i], o.endpoint, frame) != 0) {
      lct__lanes_close(c, i);
      sodium_memzero(c->token, sizeof c->token);
      free(c);
      return LCT_EINVAL;
    }
  if (lct__jobs_init(c) != 0) {
    lct__lanes_close(c, connections);
    sodium_memzero(c->token, sizeof c->token);
    free(c);
    return LCT_ENOMEM;
  }
  lct_server_info info;
  int rc = lct_ping(c, &info);
  if (rc == 0 && info.protocol != LCT_WIRE_VERSION)
    rc = LCT_EVERSION;
  if (rc != 0) {
    lct_close(c);
    return rc == LCT_ETIMEDOUT ? LCT_ECONN : rc;
  }
  if (info.frame_bytes >= LCT_FRAME_MIN && info.frame_bytes < c->frame)
    c->frame = info.frame_bytes;
  c->timeout_ms = timeout;
  c->save_timeout_ms = save_timeout;
  c->grace_ms = LCT__GRACE_MS;
  *out = c;
  return 0;
}

void lct_close(lct_client *c) {
  if (c == NULL)
    return;
  lct__jobs_stop(c);
  lct__lanes_close(c, c->connections);
  free(c->hdr);
  sodium_memzero(c->token, sizeof c->token);
  free(c);
}

const char *lct_last_error(const lct_client *c) { return c != NULL ? c->err : ""; }

int lct_ping(lct_client *c, lct_server_info *info) {
  Lctpb__Request rq = LCTPB__REQUEST__INIT;
  rq.op = LCTPB__OP__OP_PING;
  lct__reply r;
  int rc = lct__call(c, &rq, NULL, 0, &r);
  if (rc != 0)
    return rc;
  const Lctpb__ServerInfo *si = r.hdr->info;
  if (si == NULL) {
    lct__reply_free(&r);
    return lct__fail(c, LCT_EPROTO, "ping reply without server info");
  }
  /* lctd's segment size, as its configuration bounds it (else the client treats it as taking no blobs). */
  uint64_t seg = si->has_segment_bytes ? si->segment_bytes : 0;
  c->segment_bytes = seg % (64 << 10) == 0 && seg <= LCT_FRAME_MAX ? seg : 0;
  if (info != NULL) {
    memset(info, 0, sizeof *info);
    snprintf(info->server, sizeof info->server, "%s", si->server);
    snprintf(info->backend, sizeof info->backend, "%s", si->backend);
    info->protocol = (int)si->protocol;
    info->frame_bytes = si->frame_bytes;
    info->instance = si->has_instance ? si->instance : r.hdr->has_instance ? r.hdr->instance : 0;
  }
  lct__reply_free(&r);
  return 0;
}

/* ---- put ---------------------------------------------------------------- */

int lct__put_meta(lct_client *c, lct_dtype dtype, const uint64_t *shape, int ndim, lct_put_decl *d,
                  Lctpb__TensorMeta *meta) {
  char why[sizeof c->err];
  int rc = lct_put_decl_make(dtype, shape, ndim, d, why, sizeof why);
  if (rc != 0)
    return lct__fail(c, rc, "%s", why);
  lct_put_decl_to_meta(d, meta);
  return 0;
}

int lct__put_decl(lct_client *c, lct_dtype dtype, const uint64_t *shape, int ndim, size_t bytes, lct_put_decl *d,
                  Lctpb__TensorMeta *meta) {
  int rc = lct__put_meta(c, dtype, shape, ndim, d, meta);
  if (rc == 0 && d->raw_bytes != bytes)
    rc = lct__fail(c, LCT_ESIZE, "%zu bytes given; dtype %s and shape make %" PRIu64 " elements", bytes,
                   lct_dtype_name(dtype), d->n_elems);
  return rc;
}

int lct_put(lct_client *c, const char *key, lct_dtype dtype, const uint64_t *shape, int ndim, const void *data,
            size_t bytes, lct_tensor_info *info) {
  Lctpb__Request rq = LCTPB__REQUEST__INIT;
  lct_put_decl d;
  Lctpb__TensorMeta m;
  int rc;
  if ((rc = lct__key(c, key, &rq)) != 0 || (rc = lct__put_decl(c, dtype, shape, ndim, bytes, &d, &m)) != 0)
    return rc;
  if (data == NULL && bytes > 0)
    return lct__fail(c, LCT_EINVAL, "no data");
  m.has_checksum = 1;
  m.checksum = lct_crc32c(0, data, bytes);
  rq.meta = &m;
  lct__reply r;
  if (bytes <= c->frame) {
    rq.op = LCTPB__OP__OP_PUT;
    if ((rc = lct__call(c, &rq, data, bytes, &r)) != 0)
      return rc;
  } else {
    /* Frames pipelined: the next one travels while lctd takes the last. */
    lct_put_stream *s;
    if ((rc = lct_put_stream_open(c, key, dtype, shape, ndim, m.checksum, 0, &s)) != 0)
      return rc;
    if ((rc = lct_put_stream_write(s, data, bytes)) != 0) {
      lct_put_stream_abort(s);
      return rc;
    }
    return lct_put_stream_commit(s, info);
  }
  if (info != NULL)
    lct__info_of(r.hdr->meta, info);
  lct__reply_free(&r);
  return 0;
}

/* ---- get ---------------------------------------------------------------- */

/* The ranges of a get after its first, in flight together. */
typedef struct lct__ranges {
  lct_client *c;
  uint8_t *dst;
  uint64_t first, total, version; /* raw bytes of the first reply; the tensor's */
  uint32_t *crcs;                 /* per range after the first */
  size_t slot_range[LCT__WINDOW_REQUESTS * LCT__CONNECTIONS_MAX];
} lct__ranges;

static uint64_t lct__range_at(const lct__ranges *g, size_t k) { return g->first + (uint64_t)k * g->c->frame; }

static int lct__range_take(void *arg, size_t slot, lct__reply *r) {
  lct__ranges *g = arg;
  size_t k = g->slot_range[slot];
  int rc = lct__reply_status(g->c, r);
  if (rc != 0)
    return rc;
  uint64_t at = lct__range_at(g, k), want = g->total - at < g->c->frame ? g->total - at : g->c->frame;
  const Lctpb__TensorMeta *m = r->hdr->meta;
  if (m == NULL || !r->hdr->has_offset || r->hdr->offset != at || r->payload_len != want ||
      m->version != g->version || m->raw_bytes != g->total)
    return lct__fail(g->c, LCT_EPROTO, "reply does not match the ranged get");
  memcpy(g->dst + at, r->payload, r->payload_len);
  g->crcs[k] = lct_crc32c(0, r->payload, r->payload_len);
  return 0;
}

/* Reads the whole tensor: the first frame, which says its size and version,
 * then the others pipelined. With alloc, *data receives a new buffer; else
 * the bytes go to buf (cap bytes). */
static int lct__get_once(lct_client *c, const char *key, void *buf, size_t cap, int alloc,
                         void **data, lct_tensor_info *info) {
  Lctpb__Request rq = LCTPB__REQUEST__INIT;
  int rc = lct__key(c, key, &rq);
  if (rc != 0)
    return rc;
  rq.op = LCTPB__OP__OP_GET;
  rq.has_offset = 1;
  rq.has_length = 1;
  rq.offset = 0;
  /* The first request asks only what fits, so a small cap costs no transfer. */
  rq.length = !alloc && cap < c->frame ? cap : c->frame;
  lct__reply r;
  if ((rc = lct__call(c, &rq, NULL, 0, &r)) != 0)
    return rc;
  const Lctpb__TensorMeta *m = r.hdr->meta;
  if (m == NULL || !r.hdr->has_offset || r.hdr->offset != 0 || r.payload_len > m->raw_bytes ||
      (r.payload_len == 0 && m->raw_bytes > 0 && rq.length > 0)) {
    lct__reply_free(&r);
    return lct__fail(c, LCT_EPROTO, "reply does not match the ranged get");
  }
  lct_tensor_info first;
  lct__info_of(m, &first);
  if (info != NULL)
    *info = first;
  uint8_t *dst = buf;
  if (first.raw_bytes > (alloc ? SIZE_MAX : cap)) {
    lct__reply_free(&r);
    return alloc ? lct__fail(c, LCT_ENOMEM, "cannot allocate %" PRIu64 " bytes", first.raw_bytes)
                 : lct__fail(c, LCT_EBUFSIZE, "tensor is %" PRIu64 " bytes; buffer holds %zu", first.raw_bytes, cap);
  }
  if (alloc && (dst = malloc(first.raw_bytes ? (size_t)first.raw_bytes : 1)) == NULL) {
    lct__reply_free(&r);
    return lct__fail(c, LCT_ENOMEM, "cannot allocate %" PRIu64 " bytes", first.raw_bytes);
  }
  if (r.payload_len > 0)
    memcpy(dst, r.payload, r.payload_len);
  uint32_t crc = lct_crc32c(0, r.payload, r.payload_len);
  lct__ranges g = {.c = c, .dst = dst, .first = r.payload_len, .total = first.raw_bytes, .version = first.version};
  lct__reply_free(&r);
  size_t n = g.first < g.total ? (size_t)((g.total - g.first + c->frame - 1) / c->frame) : 0;
  if (n > 0 && (g.crcs = malloc(n * sizeof *g.crcs)) == NULL)
    rc = lct__fail(c, LCT_ENOMEM, "out of memory for a ranged get");
  lct__window w;
  lct__window_init(c, &w);
  rq.has_version = 1;
  rq.version = first.version;
  rq.length = c->frame;
  for (size_t k = 0; k < n && rc == 0; k++) {
    size_t slot;
    rq.offset = lct__range_at(&g, k);
    if ((rc = lct__window_post(c, &w, &rq, NULL, 0, c->frame, lct__range_take, &g, &slot)) == 0)
      g.slot_range[slot] = k;
  }
  int drained = lct__window_drain(c, &w, lct__range_take, &g);
  if (rc == 0)
    rc = drained;
  for (size_t k = 0; k < n && rc == 0; k++) {
    uint64_t at = lct__range_at(&g, k);
    crc = lct_crc32c_combine(crc, g.crcs[k], g.total - at < c->frame ? g.total - at : c->frame);
  }
  free(g.crcs);
  if (rc == 0 && crc != first.checksum)
    rc = lct__fail(c, LCT_ECHECKSUM, "received bytes do not match the stored checksum");
  if (alloc) {
    if (rc == 0)
      *data = dst;
    else
      free(dst);
  }
  return rc;
}

static int lct__get(lct_client *c, const char *key, void *buf, size_t cap, int alloc, void **data,
                    lct_tensor_info *info) {
  int rc;
  for (int attempt = 0;; attempt++) {
    rc = lct__get_once(c, key, buf, cap, alloc, data, info);
    if (rc != LCT_ESTALE || attempt == LCT__STALE_RETRIES)
      return rc;
  }
}

int lct_get(lct_client *c, const char *key, void *buf, size_t cap, lct_tensor_info *info) {
  if (buf == NULL && cap > 0)
    return lct__fail(c, LCT_EINVAL, "no buffer");
  return lct__get(c, key, buf, cap, 0, NULL, info);
}

int lct_get_alloc(lct_client *c, const char *key, void **data, lct_tensor_info *info) {
  if (data == NULL)
    return lct__fail(c, LCT_EINVAL, "no output pointer");
  return lct__get(c, key, NULL, 0, 1, data, info);
}

/* ---- delete, stat, list, stats ------------------------------------------ */

int lct_delete(lct_client *c, const char *key) {
  Lctpb__Request rq = LCTPB__REQUEST__INIT;
  int rc = lct__key(c, key, &rq);
  if (rc != 0)
    return rc;
  rq.op = LCTPB__OP__OP_DELETE;
  lct__reply r;
  if ((rc = lct__call(c, &rq, NULL, 0, &r)) == 0)
    lct__reply_free(&r);
  return rc;
}

int lct_stat(lct_client *c, const char *key, lct_tensor_info *info) {
  Lctpb__Request rq = LCTPB__REQUEST__INIT;
  int rc = lct__key(c, key, &rq);
  if (rc != 0)
    return rc;
  rq.op = LCTPB__OP__OP_STAT;
  lct__reply r;
  if ((rc = lct__call(c, &rq, NULL, 0, &r)) != 0)
    return rc;
  if (r.hdr->meta == NULL)
    rc = lct__fail(c, LCT_EPROTO, "stat reply without metadata");
  else if (info != NULL)
    lct__info_of(r.hdr->meta, info);
  lct__reply_free(&r);
  return rc;
}

static char *lct__strndup(const uint8_t *p, size_t n) {
  char *s = malloc(n + 1);
  if (s != NULL) {
    memcpy(s, p, n);
    s[n] = '\0';
  }
  return s;
}

void lct_free(void *p) { free(p); }

void lct_list_free(lct_list_page *page) {
  if (page == NULL)
    return;
  for (size_t i = 0; i < page->n; i++)
    free(page->entries[i].key);
  free(page->entries);
  free(page->next_cursor);
  free(page);
}

int lct_list(lct_client *c, const char *prefix, const char *cursor, size_t limit,
             lct_list_page **out) {
  Lctpb__Request rq = LCTPB__REQUEST__INIT;
  rq.op = LCTPB__OP__OP_LIST;
  if (prefix != NULL && *prefix != '\0') {
    rq.has_prefix = 1;
    rq.prefix.data = (uint8_t *)prefix;
    rq.prefix.len = strlen(prefix);
  }
  if (cursor != NULL) {
    rq.has_cursor = 1;
    rq.cursor.data = (uint8_t *)cursor;
    rq.cursor.len = strlen(cursor);
  }
  if ((prefix != NULL && rq.prefix.len > LCT_KEY_MAX) || (cursor != NULL && rq.cursor.len > LCT_KEY_MAX))
    return lct__fail(c, LCT_ENAMETOOLONG, "prefix or cursor longer than %d bytes", LCT_KEY_MAX);
  rq.has_limit = limit > 0;
  rq.limit = limit > UINT32_MAX ? UINT32_MAX : (uint32_t)limit;
  lct__reply r;
  int rc = lct__call(c, &rq, NULL, 0, &r);
  if (rc != 0)
    return rc;
  lct_list_page *page = calloc(1, sizeof *page);
  if (page == NULL ||
      (page->entries = calloc(r.hdr->n_entries ? r.hdr->n_entries : 1, sizeof *page->entries)) ==
          NULL) {
    free(page);
    lct__reply_free(&r);
    return lct__fail(c, LCT_ENOMEM, "out of memory for a list page");
  }
  for (size_t i = 0; i < r.hdr->n_entries && rc == 0; i++) {
    const Lctpb__ListEntry *le = r.hdr->entries[i]; /* keys and shapes checked by lct_wire_reply_parse */
    if ((page->entries[i].key = lct__strndup(le->key.data, le->key.len)) == NULL) {
      rc = lct__fail(c, LCT_ENOMEM, "out of memory for a list page");
      break;
    }
    lct__info_of(le->meta, &page->entries[i].info);
    page->n = i + 1;
  }
  if (rc == 0 && r.hdr->has_next_cursor &&
      (page->next_cursor = lct__strndup(r.hdr->next_cursor.data, r.hdr->next_cursor.len)) == NULL)
    rc = lct__fail(c, LCT_ENOMEM, "out of memory for a list page");
  lct__reply_free(&r);
  if (rc != 0) {
    lct_list_free(page);
    return rc;
  }
  *out = page;
  return 0;
}

int lct_save(lct_client *c, uint64_t *written) {
  Lctpb__Request rq = LCTPB__REQUEST__INIT;
  rq.op = LCTPB__OP__OP_SAVE;
  lct__reply r;
  int rc = lct__call_within(c, &rq, NULL, 0, c->save_timeout_ms, &r);
  if (rc != 0)
    return rc;
  if (written != NULL)
    *written = r.hdr->has_saved_tensors ? r.hdr->saved_tensors : 0;
  lct__reply_free(&r);
  return 0;
}

int lct_stats(lct_client *c, lct_server_stats *out, char **text) {
  Lctpb__Request rq = LCTPB__REQUEST__INIT;
  rq.op = LCTPB__OP__OP_STATS;
  lct__reply r;
  int rc = lct__call(c, &rq, NULL, 0, &r);
  if (rc != 0)
    return rc;
  const Lctpb__StatsSummary *s = r.hdr->stats;
  if (s == NULL) {
    lct__reply_free(&r);
    return lct__fail(c, LCT_EPROTO, "stats reply without a summary");
  }
  if (out != NULL) {
#define LCT__STATS_COPY(name, what) out->name = s->name;
    LCT_STATS_FIELDS(LCT__STATS_COPY)
#undef LCT__STATS_COPY
  }
  if (text != NULL && (*text = lct__strndup(r.payload, r.payload_len)) == NULL)
    rc = lct__fail(c, LCT_ENOMEM, "out of memory for the stats text");
  lct__reply_free(&r);
  return rc;
}
