/* helper_partial_put.c — a client process that begins a chunked put, sends some chunks, says "ready" and waits to be killed. */
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lct_wire.h"

/* One request and its reply status; exits on transport failure. */
static uint32_t call(int s, Lctpb__Request *rq, const void *payload, size_t plen, uint64_t *put_id) {
  rq->payload_bytes = plen;
  size_t h = lctpb__request__get_packed_size(rq);
  uint8_t *m = malloc(LCT_WIRE_PREFIX_BYTES + h + plen);
  lct_wire_prefix(m, h);
  lctpb__request__pack(rq, m + LCT_WIRE_PREFIX_BYTES);
  if (plen > 0) memcpy(m + LCT_WIRE_PREFIX_BYTES + h, payload, plen);
  if (nn_send(s, m, LCT_WIRE_PREFIX_BYTES + h + plen, 0) < 0) exit(3);
  free(m);
  void *buf;
  int n = nn_recv(s, &buf, NN_MSG, 0);
  lct_wire_frame f;
  Lctpb__Reply *rp;
  if (n < 0 || lct_wire_split(buf, (size_t)n, &f) != 0 || lct_wire_reply_parse(&f, &rp) != 0) exit(4);
  uint32_t status = rp->status;
  if (put_id) *put_id = rp->put_id;
  lctpb__reply__free_unpacked(rp, NULL);
  nn_freemsg(buf);
  return status;
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s ENDPOINT KEY TOTAL_BYTES CHUNK_BYTES\n", argv[0]);
    return 2;
  }
  uint64_t total = strtoull(argv[3], NULL, 10), chunk = strtoull(argv[4], NULL, 10);
  int s = nn_socket(AF_SP, NN_REQ);
  int t = 10000;
  nn_setsockopt(s, NN_SOL_SOCKET, NN_RCVTIMEO, &t, sizeof t);
  if (s < 0 || nn_connect(s, argv[1]) < 0) return 3;
  Lctpb__TensorMeta m = LCTPB__TENSOR_META__INIT;
  m.has_dtype = 1;
  m.dtype = 0; /* raw */
  m.n_shape = 1;
  m.shape = &total;
  Lctpb__Request b = LCTPB__REQUEST__INIT;
  b.op = LCTPB__OP__OP_PUT_BEGIN;
  b.has_key = 1;
  b.key.data = (uint8_t *)argv[2];
  b.key.len = strlen(argv[2]);
  b.meta = &m;
  uint64_t id;
  if (call(s, &b, NULL, 0, &id) != 0) return 5;
  uint8_t *d = calloc(1, chunk);
  Lctpb__Request k = LCTPB__REQUEST__INIT;
  k.op = LCTPB__OP__OP_PUT_CHUNK;
  k.has_put_id = 1;
  k.put_id = id;
  k.has_offset = 1;
  for (k.offset = 0; k.offset + chunk < total; k.offset += chunk)
    if (call(s, &k, d, chunk, NULL) != 0) return 6;
  puts("ready");
  fflush(stdout);
  for (;;) pause();
}
