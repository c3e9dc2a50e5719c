/* fuzz_wire.c — libFuzzer target: frame split and request/reply parsing on arbitrary bytes. */
#include <stdint.h>
#include <stdlib.h>

#include "lct_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  lct_wire_frame frame;
  if (lct_wire_split(data, size, &frame) != 0) return 0;
  Lctpb__Request *rq;
  if (lct_wire_request_parse(&frame, &rq) == 0) {
    /* What the parser accepted is what the handlers may rely on. */
    if (rq->has_key && lct_wire_key_check(rq->key.data, rq->key.len) != 0) abort();
    if (rq->meta && rq->meta->n_shape > LCT_MAX_DIMS) abort();
    lctpb__request__free_unpacked(rq, NULL);
  }
  Lctpb__Reply *rp;
  if (lct_wire_reply_parse(&frame, &rp) == 0) lctpb__reply__free_unpacked(rp, NULL);
  return 0;
}
