/* cli_offline.c — `lct pack` and `lct unpack`: the CPU codec on files, no daemon. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "lct_codec.h"

int cli_pack(int argc, char **argv) {
  const char *dtype_name = NULL, *in = NULL, *out = NULL;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--dtype") == 0 && i + 1 < argc) {
      dtype_name = argv[++i];
    } else if (argv[i][0] == '-' && argv[i][1]) {
      return cli_fail("pack: unknown option '%s'", argv[i]);
    } else if (!in) {
      in = argv[i];
    } else if (!out) {
      out = argv[i];
    } else {
      return cli_fail("pack: unexpected argument '%s'", argv[i]);
    }
  }
  if (!in || !out) return cli_fail("usage: lct pack [--dtype DT] IN OUT");

  int dtype;
  if (dtype_name) {
    if (cli_dtype_option("pack", dtype_name, &dtype)) return 1;
  } else if ((dtype = cli_dtype_from_name(in)) < 0) {
    return cli_fail("pack: cannot tell the dtype of '%s' from its name: give --dtype", in);
  }

  uint8_t *raw;
  size_t raw_len;
  int err = cli_read_file(in, &raw, &raw_len);
  if (err) return cli_fail("pack: %s: %s", in, strerror(err));
  size_t w = lct_dtype_size(dtype);
  if (raw_len % w) {
    free(raw);
    return cli_fail("pack: %s: %zu bytes is not a whole number of %s elements (%zu bytes each)", in, raw_len,
                    lct_dtype_name(dtype), w);
  }
  uint64_t n = raw_len / w;
  size_t cap = lct_encode_bound(dtype, n);
  uint8_t *blob = malloc(cap);
  lct_codebook cb;
  lct_encode_stats st;
  int rc = blob ? 0 : LCT_ENOMEM;
  if (!rc && dtype != LCT_DTYPE_RAW) rc = lct_codebook_from_data(dtype, raw, n, &cb);
  if (!rc) rc = lct_encode(dtype, &cb, raw, n, blob, cap, &st);
  free(raw);
  if (rc) {
    free(blob);
    return cli_fail("pack: %s: %s", in, lct_strerror(rc));
  }
  err = cli_write_file(out, NULL, 0, blob, st.blob_bytes);
  free(blob);
  if (err) return cli_fail("pack: %s: %s", out, strerror(err));
  printf("%s: %s, %llu elements, %zu -> %llu bytes (ratio %.4f)\n", in, lct_dtype_name(dtype),
         (unsigned long long)n, raw_len, (unsigned long long)st.blob_bytes,
         st.blob_bytes ? (double)raw_len / (double)st.blob_bytes : 0.0);
  return 0;
}

int cli_unpack(int argc, char **argv) {
  if (argc != 3) return cli_fail("usage: lct unpack IN OUT");
  const char *in = argv[1], *out = argv[2];
  uint8_t *blob;
  size_t len;
  int err = cli_read_file(in, &blob, &len);
  if (err) return cli_fail("unpack: %s: %s", in, strerror(err));
  lct_blob_info info;
  int rc = lct_blob_info_read(blob, len, &info);
  uint8_t *raw = NULL;
  if (!rc) {
    raw = malloc(info.raw_bytes ? info.raw_bytes : 1);
    rc = raw ? lct_decode(blob, len, raw, info.raw_bytes) : LCT_ENOMEM;
  }
  free(blob);
  if (rc) {
    free(raw);
    return cli_fail("unpack: %s: %s", in, lct_strerror(rc));
  }
  err = cli_write_file(out, NULL, 0, raw, info.raw_bytes);
  free(raw);
  if (err) return cli_fail("unpack: %s: %s", out, strerror(err));
  return 0;
}
