/* test_wire.c — frame prefix and header validation: every malformed frame is an error, never a crash. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "lct_error.h"
#include "lct_wire.h"

/* Builds prefix + packed request + payload of plen zero bytes. */
static uint8_t *frame_of(Lctpb__Request *rq, size_t plen, size_t *len) {
  size_t h = lctpb__request__get_packed_size(rq);
  uint8_t *m = calloc(1, LCT_WIRE_PREFIX_BYTES + h + plen);
  lct_wire_prefix(m, h);
  lctpb__request__pack(rq, m + LCT_WIRE_PREFIX_BYTES);
  *len = LCT_WIRE_PREFIX_BYTES + h + plen;
  return m;
}

static int parse(uint8_t *m, size_t len) {
  lct_wire_frame f;
  int rc = lct_wire_split(m, len, &f);
  if (rc != 0) return rc;
  Lctpb__Request *rq;
  rc = lct_wire_request_parse(&f, &rq);
  if (rc == 0) lctpb__request__free_unpacked(rq, NULL);
  return rc;
}

Test(wire, round_trip) {
  Lctpb__Request rq = LCTPB__REQUEST__INIT;
  rq.op = LCTPB__OP__OP_GET;
  rq.has_key = 1;
  rq.key.data = (uint8_t *)"layer.0.w";
  rq.key.len = 9;
  rq.payload_bytes = 5;
  size_t len;
  uint8_t *m = frame_of(&rq, 5, &len);
  lct_wire_frame f;
  cr_assert_eq(lct_wire_split(m, len, &f), 0);
  cr_assert_eq(f.payload_len, 5);
  cr_assert_eq(f.payload, m + len - 5);
  Lctpb__Request *out;
  cr_assert_eq(lct_wire_request_parse(&f, &out), 0);
  cr_assert_eq(out->op, LCTPB__OP__OP_GET);
  cr_assert_eq(out->key.len, 9);
  cr_assert_eq(memcmp(out->key.data, "layer.0.w", 9), 0);
  lctpb__request__free_unpacked(out, NULL);
  free(m);
}

Test(wire, bad_prefixes) {
  Lctpb__Request rq = LCTPB__REQUEST__INIT;
  rq.op = LCTPB__OP__OP_PING;
  size_t len;
  uint8_t *m = frame_of(&rq, 0, &len);
  for (size_t cut = 0; cut < LCT_WIRE_PREFIX_BYTES; cut++)
    cr_assert_eq(parse(m, cut), LCT_EPROTO, "prefix cut at %zu", cut);
  cr_assert_eq(parse(m, len - 1), LCT_EPROTO, "header cut short");
  m[0] = 'X';
  cr_assert_eq(parse(m, len), LCT_EPROTO, "magic");
  m[0] = 'L';
  m[4] = 2;
  cr_assert_eq(parse(m, len), LCT_EVERSION);
  m[4] = LCT_WIRE_VERSION;
  m[5] = 1;
  cr_assert_eq(parse(m, len), LCT_EPROTO, "flags");
  m[5] = 0;
  m[11] = 0x80; /* header length 2^31 + ... */
  cr_assert_eq(parse(m, len), LCT_EPROTO, "header length past the message");
  m[8] = m[9] = m[10] = m[11] = 0;
  cr_assert_eq(parse(m, len), LCT_EPROTO, "empty header");
  free(m);
}

Test(wire, bad_headers) {
  size_t len;
  uint8_t *m;
  Lctpb__Request rq = LCTPB__REQUEST__INIT;
  rq.op = LCTPB__OP__OP_PUT;
  rq.payload_bytes = 10; /* but the frame carries 4 */
  m = frame_of(&rq, 4, &len);
  cr_assert_eq(parse(m, len), LCT_EPROTO, "payload_bytes disagrees with the frame");
  free(m);

  rq.payload_bytes = 0;
  rq.has_key = 1;
  rq.key.len = 0;
  m = frame_of(&rq, 0, &len);
  cr_assert_eq(parse(m, len), LCT_ENAMETOOLONG, "empty key");
  free(m);

  uint8_t *big = malloc(LCT_KEY_MAX + 1);
  memset(big, 'k', LCT_KEY_MAX + 1);
  rq.key.data = big;
  rq.key.len = LCT_KEY_MAX;
  m = frame_of(&rq, 0, &len);
  cr_assert_eq(parse(m, len), 0, "key of the maximum length");
  free(m);
  rq.key.len = LCT_KEY_MAX + 1;
  m = frame_of(&rq, 0, &len);
  cr_assert_eq(parse(m, len), LCT_ENAMETOOLONG, "key one byte too long");
  free(m);
  big[3] = 0;
  rq.key.len = 10;
  m = frame_of(&rq, 0, &len);
  cr_assert_eq(parse(m, len), LCT_EINVAL, "NUL in key");
  free(m);
  free(big);

  Lctpb__TensorMeta meta = LCTPB__TENSOR_META__INIT;
  uint64_t shape[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
  meta.n_shape = 9;
  meta.shape = shape;
  rq.has_key = 0;
  rq.meta = &meta;
  m = frame_of(&rq, 0, &len);
  cr_assert_eq(parse(m, len), LCT_EPROTO, "nine dimensions");
  free(m);

  /* Protobuf garbage after a valid prefix. */
  uint8_t junk[64];
  lct_wire_prefix(junk, 52);
  memset(junk + 12, 0xff, 52);
  cr_assert_eq(parse(junk, sizeof junk), LCT_EPROTO);
}
