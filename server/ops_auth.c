/* ops_auth.c — who sends each request: the AUTH op's challenge-response, and the admission of every other request by its connection's credential. */
#include <inttypes.h>
#include <sodium.h>

#include "conns.h"
#include "lct_error.h"
#include "log.h"
#include "ops.h"
#include "transport.h"

/* Whether requests on socket sock must come from an authenticated connection:
 * tcp once a token or tenants are configured, ipc when the access file says
 * so (else the socket file's permissions are its access control). */
static int lct__authenticates(const lct__server *srv, int sock) {
  if (lct__transport_is_tcp(srv->transport, sock))
    return srv->auth.len > 0 || srv->access != NULL;
  return srv->access != NULL && srv->access->ipc;
}

/* A reply of status err (0 or an LCT code) and text, carrying a new
 * challenge for the connection when challenge is 1. */
static void lct__reply_auth(lct__request *rq, int err, const char *text, int challenge) {
  lct__server *srv = rq->srv;
  Lctpb__Reply rp = LCTPB__REPLY__INIT;
  uint8_t nonce[LCT_AUTH_NONCE_BYTES];
  rp.status = (uint32_t)-err;
  rp.message = (char *)text;
  if (challenge && lct__conns_challenge(srv->conns, rq->conn, nonce) == 0) {
    rp.has_auth_nonce = 1;
    rp.auth_nonce.data = nonce;
    rp.auth_nonce.len = sizeof nonce;
  }
  void *msg;
  size_t len;
  uint8_t *payload;
  if (lct__reply_alloc(srv, &rp, 0, &msg, &len, &payload) != 0) {
    lct__reply_error(rq, LCT_ENOMEM, "out of memory for the reply");
    return;
  }
  lct__reply_send(rq, rp.status, msg, len);
}

int lct__admit(lct__request *rq) {
  lct__server *srv = rq->srv;
  const Lctpb__Request *h = rq->hdr;
  if (rq->op == LCTPB__OP__OP_AUTH || !lct__authenticates(srv, rq->sock))
    return 1;
  int who = lct__conns_who(srv->conns, rq->conn);
  if (who == LCT__WHO_NONE && h->has_auth_token) {
    if (!srv->cfg.auth_plain_token) {
      lct__reply_auth(rq, LCT_EACCES,
                      "this lctd does not take the token itself (auth_plain_token off): authenticate the "
                      "connection by answering the challenge this reply carries (AUTH); a client too old for "
                      "it needs upgrading", 1);
      return 0;
    }
    who = lct__auth_plain(&srv->auth, srv->access, h->auth_token.data, h->auth_token.len);
    if (who == LCT__WHO_NONE) {
      lct__reply_error(rq, LCT_EACCES, "wrong auth token: neither auth_token_file's nor a tenant's");
      return 0;
    }
  }
  if (who == LCT__WHO_NONE) {
    lct__reply_auth(rq, LCT_EACCES,
                    "authentication required on this endpoint: answer the challenge this reply carries (AUTH) "
                    "with the token of the server's auth_token_file or of a tenant in its access_file", 1);
    return 0;
  }
  if (who >= 0) {
    rq->access = srv->access;
    lct__access_ref(rq->access);
    rq->tenant = &rq->access->tenants[who];
  }
  return 1;
}

void lct__op_auth(lct__request *rq) {
  lct__server *srv = rq->srv;
  const Lctpb__Request *h = rq->hdr;
  if (!lct__authenticates(srv, rq->sock)) {
    lct__reply_auth(rq, 0, NULL, 0); /* no challenge: nothing to prove here */
    return;
  }
  if (!h->has_auth_proof) {
    lct__reply_auth(rq, 0, NULL, 1);
    return;
  }
  if (!h->has_auth_client_nonce) {
    lct__reply_error(rq, LCT_EINVAL, "an answer to a challenge needs auth_client_nonce");
    return;
  }
  if (!lct__conns_has_challenge(srv->conns, rq->conn)) {
    lct__reply_auth(rq, LCT_EACCES,
                    "no challenge outstanding on this connection: answer the one this reply carries", 1);
    return;
  }
  uint64_t cost = lct__auth_cost(&srv->auth, srv->access);
  if (!lct__auth_budget_take(&srv->auth_budget, uv_now(srv->loop), cost)) {
    lct__reply_auth(rq, LCT_EBUSY, "too many wrong answers to challenges lately: answer this one in a second", 0);
    return; /* the challenge stays: it may still be answered */
  }
  uint8_t nonce[LCT_AUTH_NONCE_BYTES];
  lct__conns_take_challenge(srv->conns, rq->conn, nonce);
  int who = lct__auth_prove(&srv->auth, srv->access, nonce, h->auth_client_nonce.data, h->auth_proof.data);
  sodium_memzero(nonce, sizeof nonce);
  /* A wrong answer also ends an earlier authentication of the connection. */
  if (lct__conns_set(srv->conns, rq->conn, who) != 0) {
    lct__auth_budget_refund(&srv->auth_budget, cost);
    lct__reply_error(rq, LCT_ENOMEM, "out of memory recording the connection's authentication");
    return;
  }
  if (who == LCT__WHO_NONE) {
    lct__reply_error(rq, LCT_EACCES, "wrong token: the proof is neither auth_token_file's token's nor a tenant's");
    return;
  }
  lct__auth_budget_refund(&srv->auth_budget, cost);
  lct__log_debug("connection %016" PRIx64 " authenticated: %s%s", rq->conn, who >= 0 ? "tenant " : "every key",
                 who >= 0 ? srv->access->tenants[who].name : "");
  lct__reply_auth(rq, 0, NULL, 0);
}
