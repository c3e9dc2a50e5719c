/* raw_wire.h — what the tests that speak lctd's protocol by hand share: a REQ socket, a request packed and sent, the reply parsed. */
#ifndef LCT_TEST_RAW_WIRE_H
#define LCT_TEST_RAW_WIRE_H

#include <criterion/criterion.h>
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <stdlib.h>
#include <string.h>

#include "lct.pb-c.h"
#include "lct_wire.h"

/* A cooked REQ socket connected to endpoint: 5 s timeouts, replies of any size. */
static inline int test_raw_open(const char *endpoint) {
  int s = nn_socket(AF_SP, NN_REQ), t = 5000, max = -1;
  cr_assert(s >= 0);
  nn_setsockopt(s, NN_SOL_SOCKET, NN_RCVTIMEO, &t, sizeof t);
  nn_setsockopt(s, NN_SOL_SOCKET, NN_SNDTIMEO, &t, sizeof t);
  nn_setsockopt(s, NN_SOL_SOCKET, NN_RCVMAXSIZE, &max, sizeof max);
  cr_assert(nn_connect(s, endpoint) >= 0);
  return s;
}

/* Sends len bytes as they are; returns the reply's status (0 or a positive
 * LCT code). reply (free with lctpb__reply__free_unpacked) and payload (a
 * malloc'd copy, plen bytes) when not NULL. */
static inline uint32_t test_raw_send(int s, const void *msg, size_t len, Lctpb__Reply **reply, void **payload,
                                     size_t *plen) {
  cr_assert_eq(nn_send(s, msg, len, 0), (int)len);
  void *buf = NULL;
  int n = nn_recv(s, &buf, NN_MSG, 0);
  cr_assert(n >= 0, "no reply: %s", nn_strerror(nn_errno()));
  lct_wire_frame f;
  cr_assert_eq(lct_wire_split(buf, (size_t)n, &f), 0, "reply frame");
  Lctpb__Reply *rp;
  cr_assert_eq(lct_wire_reply_parse(&f, &rp), 0, "reply header");
  uint32_t status = rp->status;
  if (status != 0)
    cr_assert(rp->message && *rp->message, "an error reply carries a message");
  if (payload) {
    *payload = malloc(f.payload_len + 1);
    cr_assert_not_null(*payload);
    memcpy(*payload, f.payload, f.payload_len);
    *plen = f.payload_len;
  }
  if (reply)
    *reply = rp;
  else
    lctpb__reply__free_unpacked(rp, NULL);
  nn_freemsg(buf);
  return status;
}

/* Packs rq with plen payload bytes and sends it: test_raw_send's status and reply. */
static inline uint32_t test_raw_call(int s, Lctpb__Request *rq, const void *payload, size_t plen,
                                     Lctpb__Reply **reply) {
  rq->payload_bytes = plen;
  size_t h = lctpb__request__get_packed_size(rq);
  uint8_t *m = malloc(LCT_WIRE_PREFIX_BYTES + h + plen);
  cr_assert_not_null(m);
  lct_wire_prefix(m, h);
  lctpb__request__pack(rq, m + LCT_WIRE_PREFIX_BYTES);
  if (plen)
    memcpy(m + LCT_WIRE_PREFIX_BYTES + h, payload, plen);
  uint32_t status = test_raw_send(s, m, LCT_WIRE_PREFIX_BYTES + h + plen, reply, NULL, NULL);
  free(m);
  return status;
}

#endif
