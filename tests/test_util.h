/* test_util.h — seeded RNG and test-data helpers shared by the Criterion tests. */
#ifndef LCT_TEST_UTIL_H
#define LCT_TEST_UTIL_H

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lct_codec.h"

typedef struct {
  uint64_t s;
} test_rng;

/* splitmix64: deterministic for a seed, good enough to scramble bits. */
static inline uint64_t test_rand(test_rng *r) {
  uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* The data directory: $LCT_TEST_DATA (a build run on another machine), else the configured one. */
/* Seeded bf16-like data: a handful of exponents, random mantissas (malloc'd). */
static inline uint8_t *test_bf16_data(uint64_t seed, size_t n_elems) {
  test_rng r = {seed};
  uint16_t *p = malloc(n_elems * 2 + 1);
  for (size_t i = 0; i < n_elems; i++) {
    uint64_t x = test_rand(&r);
    p[i] = (uint16_t)(((x >> 20) & 1) << 15 | (0x78 + (x & 7)) << 7 | ((x >> 8) & 0x7f));
  }
  return (uint8_t *)p;
}

static inline const char *test_data_dir(void) {
  const char *d = getenv("LCT_TEST_DATA");
  return d && *d ? d : LCT_TEST_DATA;
}

/* Reads test_data_dir()/name whole; fails the test if it cannot. */
static inline uint8_t *test_read_data(const char *name, size_t *len) {
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", test_data_dir(), name);
  FILE *f = fopen(path, "rb");
  cr_assert(f, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc(n ? (size_t)n : 1);
  cr_assert(buf && fread(buf, 1, (size_t)n, f) == (size_t)n);
  fclose(f);
  *len = (size_t)n;
  return buf;
}

/* The format version 1 blob of a version 2 blob (malloc'd, *out_len bytes):
 * the two versions code a chunk's elements into the same mantissa and code
 * sections, version 1 lane t's stream being version 2 lanes 2t and 2t + 1
 * end to end, so only each coded chunk's header (its lane lengths) and what
 * depends on chunk places change (proto/FORMAT.md, "Version 1"). */
static inline uint8_t *test_blob_as_version_1(const uint8_t *blob, size_t len, size_t *out_len) {
  uint32_t n_chunks, cb_bytes;
  memcpy(&n_chunks, blob + 16, 4);
  memcpy(&cb_bytes, blob + 20, 4);
  const size_t table = LCT_HEADER_BYTES + ((cb_bytes + 7) & ~(size_t)7);
  uint8_t *v1 = malloc(len);
  memcpy(v1, blob, table + 8 * (size_t)n_chunks);
  v1[4] = 1;
  const uint32_t hcheck = lct_check(v1, 24, 0) + lct_check(v1 + LCT_HEADER_BYTES, cb_bytes, 6);
  memcpy(v1 + 24, &hcheck, 4);
  uint64_t pos = table + 8 * (uint64_t)n_chunks;
  for (uint32_t c = 0; c < n_chunks; c++) {
    uint64_t at, end = len;
    memcpy(&at, blob + table + 8 * (size_t)c, 8);
    if (c + 1 < n_chunks) memcpy(&end, blob + table + 8 * (size_t)(c + 1), 8);
    memcpy(v1 + table + 8 * (size_t)c, &pos, 8);
    if (blob[at] == 1) { /* coded: u16 lane lengths, each the sum of two 13-bit fields */
      memcpy(v1 + pos, blob + at, 8);
      uint64_t fields = 0;
      unsigned have = 0;
      const uint8_t *f = blob + at + 8;
      for (unsigned lane = 0; lane < LCT_LANES; lane++) {
        while (have < LCT_LANE_FIELD_BITS) {
          fields |= (uint64_t)*f++ << have;
          have += 8;
        }
        const uint16_t bits = (uint16_t)(fields & ((1u << LCT_LANE_FIELD_BITS) - 1));
        fields >>= LCT_LANE_FIELD_BITS;
        have -= LCT_LANE_FIELD_BITS;
        uint16_t sum;
        memcpy(&sum, v1 + pos + 8 + 2 * (lane / 2), 2);
        sum = lane % 2 ? sum + bits : bits;
        memcpy(v1 + pos + 8 + 2 * (lane / 2), &sum, 2);
      }
      memcpy(v1 + pos + LCT_V1_CODED_CHUNK_HEADER, blob + at + LCT_CODED_CHUNK_HEADER,
             end - at - LCT_CODED_CHUNK_HEADER);
      pos += end - at - (LCT_CODED_CHUNK_HEADER - LCT_V1_CODED_CHUNK_HEADER);
    } else {
      memcpy(v1 + pos, blob + at, end - at);
      pos += end - at;
    }
  }
  memcpy(v1 + 32, &pos, 8);
  *out_len = pos;
  return v1;
}

/* f32 data that a codebook of symbols 0..999 codes with ESC alone (symbols
 * 1000..1023), with 16 trimmed mantissa bits: 28 bits per element, less than
 * raw, but lanes of 256 take 4096 code bits or more, past what a lane_bits
 * field holds (proto/FORMAT.md), so every chunk is stored raw. The codebook
 * goes to *cb; the data is malloc'd. */
static inline uint32_t *test_escape_only_f32(uint64_t n, lct_codebook *cb) {
  uint64_t hist[LCT_MAX_SYMS] = {0};
  for (int s = 0; s < 1000; s++) hist[s] = 1000;
  cr_assert_eq(lct_codebook_build(LCT_DTYPE_F32, hist, cb), 0);
  cr_assert_geq(cb->len[cb->n_syms - 1] + 10, 16, "ESC and its symbol take 16 bits or more");
  test_rng rng = {1234};
  uint32_t *x = malloc(n * 4 + 1);
  for (uint64_t i = 0; i < n; i++) {
    const uint64_t r = test_rand(&rng);
    x[i] = (uint32_t)(1000 + r % 24) << 22 | ((uint32_t)(r >> 32) & 0x3f0000u);
  }
  return x;
}

/* dtype from a ".bf16." style infix; -1 if none. */
static inline int test_dtype_from_name(const char *name) {
  for (int d = 0; d < LCT_DTYPE_COUNT; d++) {
    char infix[16];
    snprintf(infix, sizeof infix, ".%s.", lct_dtype_name(d));
    if (strstr(name, infix)) return d;
  }
  return -1;
}

/* A golden vector (tests/data/golden/README.md): NAME.DTYPE.in, its blob
 * NAME.DTYPE.lct (format version 2) and v1/NAME.DTYPE.lct (version 1). */
typedef struct {
  const char *name; /* NAME.DTYPE.lct */
  int dtype;
  uint8_t *in, *blob, *v1;
  size_t in_len, blob_len, v1_len;
} test_golden;

/* Calls fn on every golden vector; returns how many there were. */
static inline int test_each_golden(void (*fn)(const test_golden *g, void *arg), void *arg) {
  char dirpath[1100];
  snprintf(dirpath, sizeof dirpath, "%s/golden", test_data_dir());
  DIR *dir = opendir(dirpath);
  cr_assert(dir, "cannot open %s", dirpath);
  int count = 0;
  for (struct dirent *de; (de = readdir(dir));) {
    const size_t nl = strlen(de->d_name);
    if (nl < 4 || strcmp(de->d_name + nl - 4, ".lct") != 0) continue;
    char path[300];
    test_golden g = {.name = de->d_name, .dtype = test_dtype_from_name(de->d_name)};
    cr_assert_geq(g.dtype, 0, "%s: no dtype in the name", de->d_name);
    snprintf(path, sizeof path, "golden/%.*s.in", (int)(nl - 4), de->d_name);
    g.in = test_read_data(path, &g.in_len);
    snprintf(path, sizeof path, "golden/%s", de->d_name);
    g.blob = test_read_data(path, &g.blob_len);
    snprintf(path, sizeof path, "golden/v1/%s", de->d_name);
    g.v1 = test_read_data(path, &g.v1_len);
    fn(&g, arg);
    free(g.in);
    free(g.blob);
    free(g.v1);
    count++;
  }
  closedir(dir);
  return count;
}

/* Writes len bytes to /tmp/lct-test-TAG-PID (one per process and tag) and
 * returns that path, valid until the next call. */
static inline const char *test_write_tmp(const char *tag, const void *bytes, size_t len) {
  static char path[96];
  snprintf(path, sizeof path, "/tmp/lct-test-%s-%d", tag, (int)getpid());
  FILE *f = fopen(path, "wb");
  cr_assert(f, "cannot write %s", path);
  cr_assert_eq(fwrite(bytes, 1, len, f), len);
  fclose(f);
  return path;
}

#endif
