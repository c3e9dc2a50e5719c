/* bench_codec.c — CPU codec benchmark: ratio against the order-0 bound and zstd, encode/decode GB/s. */
#include <stdlib.h>
#include <string.h>
#include <zstd.h>

#include "bench.h"
#include "lct_codec.h"

typedef struct {
  const char *file;
  int dtype;
  size_t raw;
  double sign_exp_entropy, kept_mant_bits, bound, ratio, zstd3, zstd19;
  double enc_gbs, dec_gbs, build_gbs;
} codec_row;

/* Runs fn until at least min_s has passed (and 3 times); returns the best GB/s. */
#define TIME_BEST(bytes, min_s, stmt)                                   \
  ({                                                                    \
    double best_ = 0, start_ = bench_now();                             \
    for (int rep_ = 0; rep_ < 3 || bench_now() - start_ < (min_s); rep_++) { \
      double t0_ = bench_now();                                         \
      stmt;                                                             \
      double gbs_ = (double)(bytes) / (bench_now() - t0_) / 1e9;        \
      if (gbs_ > best_) best_ = gbs_;                                   \
    }                                                                   \
    best_;                                                              \
  })

static int run_file(const char *path, codec_row *r) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  r->file = base;
  r->dtype = -1;
  for (int d = 1; d < LCT_DTYPE_COUNT; d++) {
    char infix[16];
    snprintf(infix, sizeof infix, ".%s.", lct_dtype_name(d));
    if (strstr(base, infix)) r->dtype = d;
  }
  if (r->dtype < 0) {
    fprintf(stderr, "lct-bench: %s: no .f32. / .bf16. / ... infix in the name\n", path);
    return -1;
  }
  uint8_t *data = bench_read_file(path, &r->raw);
  size_t w = lct_dtype_size(r->dtype);
  uint64_t n = r->raw / w;
  r->bound = bench_order0_bound(r->dtype, data, n, &r->sign_exp_entropy, &r->kept_mant_bits);

  lct_codebook cb;
  size_t cap = lct_encode_bound(r->dtype, n);
  uint8_t *blob = malloc(cap), *out = malloc(r->raw);
  lct_encode_stats st;
  r->build_gbs = TIME_BEST(r->raw, 0.2, lct_codebook_from_data(r->dtype, data, n, &cb));
  r->enc_gbs = TIME_BEST(r->raw, 0.5, lct_encode(r->dtype, &cb, data, n, blob, cap, &st));
  r->dec_gbs = TIME_BEST(r->raw, 0.5, lct_decode(blob, st.blob_bytes, out, r->raw));
  if (memcmp(out, data, r->raw) != 0) {
    fprintf(stderr, "lct-bench: %s: round trip differs\n", path);
    return -1;
  }
  r->ratio = (double)r->raw / (double)st.blob_bytes;

  size_t zcap = ZSTD_compressBound(r->raw);
  uint8_t *z = malloc(zcap);
  r->zstd3 = (double)r->raw / (double)ZSTD_compress(z, zcap, data, r->raw, 3);
  r->zstd19 = (double)r->raw / (double)ZSTD_compress(z, zcap, data, r->raw, 19);
  free(z);
  free(blob);
  free(out);
  free(data);
  return 0;
}

int bench_codec(int argc, char **argv) {
  int json = 0, nfiles = 0;
  const char *out_path = NULL;
  codec_row *rows = calloc((size_t)argc, sizeof *rows);
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0) {
      json = 1;
    } else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
      out_path = argv[++i];
    } else if (run_file(argv[i], &rows[nfiles]) == 0) {
      nfiles++;
    } else {
      return 1;
    }
  }
  if (!nfiles) {
    fputs("usage: lct-bench codec [--json] [--out FILE] FILE...\n", stderr);
    return 2;
  }
  char cpu[256];
  bench_cpu_name(cpu, sizeof cpu);
  FILE *jf = json ? stdout : bench_open_out(out_path);
  if (!json) {
    printf("CPU codec, one thread, %s\n", cpu);
    printf("%-22s %5s %6s %6s %7s %7s %6s %6s %7s %7s %7s\n", "file", "dtype", "ratio", "bound", "of bnd",
           "H(s+e)", "zstd3", "zstd19", "enc GB/s", "dec GB/s", "cb GB/s");
    for (int i = 0; i < nfiles; i++) {
      codec_row *r = &rows[i];
      printf("%-22s %5s %6.4f %6.4f %6.2f%% %7.4f %6.4f %6.4f %8.2f %8.2f %7.2f\n", r->file, lct_dtype_name(r->dtype),
             r->ratio, r->bound, 100 * r->ratio / r->bound, r->sign_exp_entropy, r->zstd3, r->zstd19, r->enc_gbs,
             r->dec_gbs, r->build_gbs);
    }
  }
  if (jf) {
    fprintf(jf, "{\"bench\": \"codec\", \"cpu\": \"%s\", \"threads\": 1, \"files\": [\n", cpu);
    for (int i = 0; i < nfiles; i++) {
      codec_row *r = &rows[i];
      fprintf(jf,
              "  {\"file\": \"%s\", \"dtype\": \"%s\", \"raw_bytes\": %zu, \"ratio\": %.5f, \"order0_bound\": %.5f, "
              "\"sign_exp_entropy_bits\": %.4f, \"kept_mantissa_bits\": %.0f, \"zstd3\": %.5f, \"zstd19\": %.5f, "
              "\"encode_gbs\": %.3f, \"decode_gbs\": %.3f, \"codebook_build_gbs\": %.3f}%s\n",
              r->file, lct_dtype_name(r->dtype), r->raw, r->ratio, r->bound, r->sign_exp_entropy, r->kept_mant_bits,
              r->zstd3, r->zstd19, r->enc_gbs, r->dec_gbs, r->build_gbs, i + 1 < nfiles ? "," : "");
    }
    fputs("]}\n", jf);
    if (jf != stdout) fclose(jf);
  }
  free(rows);
  return 0;
}
