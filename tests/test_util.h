/* test_util.h — seeded RNG and test-data helpers shared by the Criterion tests. */
#ifndef LCT_TEST_UTIL_H
#define LCT_TEST_UTIL_H

#include <criterion/criterion.h>
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

/* dtype from a ".bf16." style infix; -1 if none. */
static inline int test_dtype_from_name(const char *name) {
  for (int d = 0; d < LCT_DTYPE_COUNT; d++) {
    char infix[16];
    snprintf(infix, sizeof infix, ".%s.", lct_dtype_name(d));
    if (strstr(name, infix)) return d;
  }
  return -1;
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
