/* test_codebook.c — dtypes, histograms and canonical length-limited codebooks. */
#include <criterion/criterion.h>
#include <string.h>

#include "lct_codec.h"
#include "test_util.h"

static void assert_valid_prefix_code(const lct_codebook *cb) {
  uint64_t kraft = 0;
  for (unsigned s = 0; s < cb->n_syms; s++) {
    cr_assert_leq(cb->len[s], LCT_MAX_CODE_LEN);
    if (cb->len[s]) kraft += 1u << (LCT_MAX_CODE_LEN - cb->len[s]);
  }
  cr_assert_leq(kraft, 1u << LCT_MAX_CODE_LEN, "Kraft sum above 1");
  cr_assert_gt(cb->len[cb->n_syms - 1], 0, "ESC must have a code");
  /* Prefix-free: in the decode table every coded symbol owns exactly its 2^(12-len) entries. */
  static uint16_t table[1 << LCT_MAX_CODE_LEN];
  lct_codebook_decode_table(cb, table);
  unsigned owned[LCT_MAX_SYMS] = {0};
  for (unsigned i = 0; i < (1u << LCT_MAX_CODE_LEN); i++) {
    if (!table[i]) continue;
    unsigned sym = table[i] & 0x7ff, len = table[i] >> 11;
    cr_assert_eq(len, cb->len[sym]);
    cr_assert_eq(i & ((1u << len) - 1), cb->code[sym], "entry %u does not start with the code of %u", i, sym);
    owned[sym]++;
  }
  for (unsigned s = 0; s < cb->n_syms; s++) {
    if (cb->len[s]) cr_assert_eq(owned[s], 1u << (LCT_MAX_CODE_LEN - cb->len[s]));
  }
}

Test(codebook, dtype_table) {
  cr_assert_eq(lct_dtype_size(LCT_DTYPE_F32), 4);
  cr_assert_eq(lct_dtype_size(LCT_DTYPE_BF16), 2);
  cr_assert_eq(lct_dtype_size(LCT_DTYPE_F8E5M2), 1);
  cr_assert_eq(lct_dtype_size(42), 0);
  cr_assert_eq(lct_dtype_symbol_bits(LCT_DTYPE_BF16), 10);
  cr_assert_eq(lct_dtype_symbol_bits(LCT_DTYPE_RAW), 0);
  lct_dtype d;
  for (int i = 0; i < LCT_DTYPE_COUNT; i++) {
    cr_assert_eq(lct_dtype_parse(lct_dtype_name(i), &d), 0);
    cr_assert_eq((int)d, i);
  }
  cr_assert_eq(lct_dtype_parse("f64", &d), LCT_EDTYPE);
  cr_assert_eq(lct_dtype_parse(NULL, &d), LCT_EDTYPE);
  cr_assert_eq(lct_codebook_bytes(LCT_DTYPE_F32), 513);
  cr_assert_eq(lct_codebook_bytes(LCT_DTYPE_F8E4M3), 33);
  cr_assert_eq(lct_codebook_bytes(LCT_DTYPE_RAW), 0);
}

Test(codebook, histogram_counts_symbols) {
  uint16_t v[5] = {0x3f80, 0x3f81, 0xbf80, 0x0000, 0x3fc0}; /* 1.0, 1.0+ulp, -1.0, 0, 1.5 */
  uint64_t hist[LCT_MAX_SYMS] = {0};
  cr_assert_eq(lct_histogram(LCT_DTYPE_BF16, v, 5, hist), 0);
  cr_assert_eq(hist[0x3f80 >> 6], 2);
  cr_assert_eq(hist[0xbf80 >> 6], 1);
  cr_assert_eq(hist[0], 1);
  cr_assert_eq(hist[0x3fc0 >> 6], 1, "the top mantissa bit is part of the symbol");
  cr_assert_eq(lct_histogram(LCT_DTYPE_RAW, v, 5, hist), LCT_EINVAL);
}

Test(codebook, real_tensor_codebook_is_valid_and_deterministic) {
  size_t len;
  uint8_t *w = test_read_data("A_s400_w.f32.bin", &len);
  lct_codebook a, b;
  cr_assert_eq(lct_codebook_from_data(LCT_DTYPE_F32, w, len / 4, &a), 0);
  cr_assert_eq(lct_codebook_from_data(LCT_DTYPE_F32, w, len / 4, &b), 0);
  cr_assert_arr_eq(a.len, b.len, sizeof a.len);
  cr_assert_arr_eq(a.code, b.code, sizeof a.code);
  assert_valid_prefix_code(&a);
  cr_assert_gt(a.expected_bits_per_elem, 1.0);
  cr_assert_lt(a.expected_bits_per_elem, 8.0);
  free(w);
}

Test(codebook, length_limit_on_fibonacci_weights) {
  /* Fibonacci weights give a maximally deep Huffman tree: lengths must be capped at 12. */
  uint64_t hist[LCT_MAX_SYMS] = {0}, a = 1, b = 1;
  for (int s = 0; s < 60; s++) {
    hist[s] = a;
    uint64_t t = a + b;
    a = b;
    b = t;
  }
  lct_codebook cb;
  cr_assert_eq(lct_codebook_build(LCT_DTYPE_BF16, hist, &cb), 0);
  assert_valid_prefix_code(&cb);
  cr_assert_eq(cb.max_len, LCT_MAX_CODE_LEN);
  for (int s = 0; s < 60; s++) cr_assert_gt(cb.len[s], 0);
}

Test(codebook, degenerate_histograms) {
  uint64_t hist[LCT_MAX_SYMS] = {0};
  lct_codebook cb;
  cr_assert_eq(lct_codebook_build(LCT_DTYPE_F16, hist, &cb), 0, "empty histogram: ESC alone");
  assert_valid_prefix_code(&cb);
  cr_assert_eq(cb.len[cb.n_syms - 1], 1);
  hist[3] = 1000;
  cr_assert_eq(lct_codebook_build(LCT_DTYPE_F8E4M3, hist, &cb), 0);
  assert_valid_prefix_code(&cb);
  cr_assert_eq(cb.len[3], 1);
  for (unsigned s = 0; s < (1u << 7); s++) hist[s] = 1; /* uniform */
  cr_assert_eq(lct_codebook_build(LCT_DTYPE_F16, hist, &cb), 0);
  assert_valid_prefix_code(&cb);
}

Test(codebook, serialize_parse_roundtrip) {
  size_t len;
  uint8_t *v = test_read_data("A_s100_v.bf16.bin", &len);
  lct_codebook cb, back;
  cr_assert_eq(lct_codebook_from_data(LCT_DTYPE_BF16, v, len / 2, &cb), 0);
  uint8_t ser[LCT_MAX_SYMS];
  cr_assert_eq(lct_codebook_serialize(&cb, ser, 10), LCT_EBUFSIZE);
  cr_assert_eq(lct_codebook_serialize(&cb, ser, sizeof ser), 0);
  cr_assert_eq(lct_codebook_parse(LCT_DTYPE_BF16, ser, 513, &back), 0);
  cr_assert_arr_eq(back.len, cb.len, sizeof cb.len);
  cr_assert_arr_eq(back.code, cb.code, sizeof cb.code);
  /* The canonical form checks what it serializes: a buffer that holds the
   * codebook, and the dtype's symbol count (a short one would have it read
   * past the bytes it wrote). */
  lct_codebook canon;
  cr_assert_eq(lct_codebook_canonical(&cb, ser, 512, &canon), LCT_EBUFSIZE);
  cr_assert_eq(lct_codebook_canonical(&cb, ser, sizeof ser, &canon), 0);
  cr_assert_arr_eq(canon.code, cb.code, sizeof cb.code);
  lct_codebook short_cb = cb;
  short_cb.n_syms = 1;
  cr_assert_eq(lct_codebook_canonical(&short_cb, ser, 1, &canon), LCT_EINVAL);
  free(v);
}

Test(codebook, parse_rejects_invalid) {
  uint64_t hist[LCT_MAX_SYMS] = {0};
  hist[1] = 10;
  hist[2] = 5;
  lct_codebook cb, out;
  cr_assert_eq(lct_codebook_build(LCT_DTYPE_F8E5M2, hist, &cb), 0);
  uint8_t ser[65], bad[65];
  cr_assert_eq(lct_codebook_serialize(&cb, ser, sizeof ser), 0);
  cr_assert_eq(lct_codebook_parse(LCT_DTYPE_F8E5M2, ser, sizeof ser, &out), 0);
  cr_assert_eq(lct_codebook_parse(LCT_DTYPE_F8E5M2, ser, sizeof ser - 1, &out), LCT_ECORRUPT, "wrong size");
  memcpy(bad, ser, sizeof bad);
  bad[0] = 0xDD; /* lengths 13 */
  cr_assert_eq(lct_codebook_parse(LCT_DTYPE_F8E5M2, bad, sizeof bad, &out), LCT_ECORRUPT);
  memset(bad, 0x11, sizeof bad); /* every symbol length 1: Kraft sum 64 */
  cr_assert_eq(lct_codebook_parse(LCT_DTYPE_F8E5M2, bad, sizeof bad, &out), LCT_ECORRUPT);
  memcpy(bad, ser, sizeof bad);
  bad[64] &= 0xF0; /* ESC (symbol 128, low nibble of byte 64) without a code */
  cr_assert_eq(lct_codebook_parse(LCT_DTYPE_F8E5M2, bad, sizeof bad, &out), LCT_ECORRUPT);
  memcpy(bad, ser, sizeof bad);
  bad[64] |= 0x10; /* padding nibble */
  cr_assert_eq(lct_codebook_parse(LCT_DTYPE_F8E5M2, bad, sizeof bad, &out), LCT_ECORRUPT);
}
