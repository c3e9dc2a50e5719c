/* fuzz_decode.c — libFuzzer target: lct_decode on arbitrary bytes must fail cleanly or round-trip. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lct_codec.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  lct_blob_info info;
  if (lct_blob_info_read(data, size, &info) != 0 || info.raw_bytes > (64u << 20)) return 0;
  uint8_t *out = malloc(info.raw_bytes ? info.raw_bytes : 1);
  if (!out) return 0;
  if (lct_decode(data, size, out, info.raw_bytes) == 0 && info.dtype != LCT_DTYPE_RAW) {
    /* A blob that decodes must be what the encoder makes of its output with its own codebook. */
    lct_codebook cb;
    size_t cap = lct_encode_bound(info.dtype, info.n_elems);
    uint8_t *again = malloc(cap);
    if (again && lct_codebook_parse(info.dtype, data + LCT_HEADER_BYTES, lct_codebook_bytes(info.dtype), &cb) == 0) {
      lct_encode_stats st;
      if (lct_encode(info.dtype, &cb, out, info.n_elems, again, cap, &st) != 0) abort();
      uint8_t *back = malloc(info.raw_bytes ? info.raw_bytes : 1);
      if (!back || lct_decode(again, st.blob_bytes, back, info.raw_bytes) != 0 ||
          memcmp(back, out, info.raw_bytes) != 0)
        abort();
      free(back);
    }
    free(again);
  }
  free(out);
  return 0;
}
