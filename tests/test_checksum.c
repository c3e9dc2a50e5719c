/* test_checksum.c — CRC-32C: published check values, incremental use, combination of pieces. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lct_checksum.h"
#include "test_util.h"

Test(checksum, check_values) {
  cr_assert_eq(lct_crc32c(0, "123456789", 9), 0xE3069283u);
  cr_assert_eq(lct_crc32c(0, "", 0), 0u);
  uint8_t zeros[32] = {0}, ones[32], inc[32];
  memset(ones, 0xff, sizeof ones);
  for (int i = 0; i < 32; i++) inc[i] = (uint8_t)i;
  /* RFC 3720, appendix B.4. */
  cr_assert_eq(lct_crc32c(0, zeros, 32), 0x8A9136AAu);
  cr_assert_eq(lct_crc32c(0, ones, 32), 0x62A8AB43u);
  cr_assert_eq(lct_crc32c(0, inc, 32), 0x46DD794Eu);
}

Test(checksum, incremental_and_unaligned) {
  test_rng rng = {42};
  size_t n = 100003;
  uint8_t *buf = malloc(n + 8);
  for (size_t i = 0; i < n + 8; i++) buf[i] = (uint8_t)test_rand(&rng);
  uint32_t whole = lct_crc32c(0, buf + 3, n);
  for (size_t cut = 0; cut <= 17; cut++) {
    uint32_t c = lct_crc32c(0, buf + 3, cut);
    cr_assert_eq(lct_crc32c(c, buf + 3 + cut, n - cut), whole, "cut %zu", cut);
  }
  /* The same bytes at another alignment give the same value. */
  memmove(buf, buf + 3, n);
  cr_assert_eq(lct_crc32c(0, buf, n), whole);
  buf[n / 2] ^= 1;
  cr_assert_neq(lct_crc32c(0, buf, n), whole);
  free(buf);
}

Test(checksum, combine) {
  test_rng rng = {7};
  size_t n = 70000;
  uint8_t *buf = malloc(n);
  for (size_t i = 0; i < n; i++) buf[i] = (uint8_t)test_rand(&rng);
  uint32_t whole = lct_crc32c(0, buf, n);
  size_t cuts[] = {0, 1, 7, 8, 4095, 4096, 65536, n - 1, n};
  for (size_t k = 0; k < sizeof cuts / sizeof cuts[0]; k++) {
    size_t a = cuts[k];
    uint32_t ca = lct_crc32c(0, buf, a), cb = lct_crc32c(0, buf + a, n - a);
    cr_assert_eq(lct_crc32c_combine(ca, cb, n - a), whole, "split at %zu", a);
  }
  /* Three pieces, folded left to right as lctd folds its segments. */
  uint32_t c = lct_crc32c(0, buf, 1000);
  c = lct_crc32c_combine(c, lct_crc32c(0, buf + 1000, 30000), 30000);
  c = lct_crc32c_combine(c, lct_crc32c(0, buf + 31000, n - 31000), n - 31000);
  cr_assert_eq(c, whole);
  /* Equal power-of-two pieces and a shorter tail, as lctd joins segments. */
  c = lct_crc32c(0, buf, 4096);
  size_t at = 4096;
  for (; at + 4096 <= n; at += 4096)
    c = lct_crc32c_combine(c, lct_crc32c(0, buf + at, 4096), 4096);
  c = lct_crc32c_combine(c, lct_crc32c(0, buf + at, n - at), n - at);
  cr_assert_eq(c, whole, "4 KiB pieces and a tail");
  cr_assert_eq(lct_crc32c_combine(whole, 0, 0), whole, "an empty piece");
  free(buf);
}
