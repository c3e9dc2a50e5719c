/* test_codec.c — CPU codec: bit-exact round trips, golden blobs, bounds and corrupt input. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lct_codec.h"
#include "test_util.h"

/* Encodes with a codebook built from the data itself and decodes; returns the blob size. */
static uint64_t roundtrip_with(int dtype, const lct_codebook *cb, const void *src, uint64_t n, lct_encode_stats *st) {
  size_t w = lct_dtype_size(dtype), cap = lct_encode_bound(dtype, n);
  uint8_t *blob = malloc(cap), *out = malloc(n * w + 1);
  cr_assert(blob && out);
  lct_encode_stats local;
  if (!st) st = &local;
  cr_assert_eq(lct_encode(dtype, cb, src, n, blob, cap, st), 0, "encode %s n=%llu", lct_dtype_name(dtype),
               (unsigned long long)n);
  cr_assert_leq(st->blob_bytes, cap);
  cr_assert_eq(lct_decode(blob, st->blob_bytes, out, n * w), 0);
  cr_assert(n == 0 || memcmp(out, src, n * w) == 0, "round trip differs: %s n=%llu", lct_dtype_name(dtype),
            (unsigned long long)n);
  free(blob);
  free(out);
  return st->blob_bytes;
}

static uint64_t roundtrip(int dtype, const void *src, uint64_t n) {
  lct_codebook cb;
  if (dtype != LCT_DTYPE_RAW) cr_assert_eq(lct_codebook_from_data(dtype, src, n, &cb), 0);
  return roundtrip_with(dtype, &cb, src, n, NULL);
}

Test(codec, shared_tensors_roundtrip_and_compress) {
  DIR *dir = opendir(test_data_dir());
  cr_assert(dir);
  int files = 0;
  for (struct dirent *de; (de = readdir(dir));) {
    int dtype = test_dtype_from_name(de->d_name);
    if (dtype < 0 || !strstr(de->d_name, ".bin")) continue;
    size_t len;
    uint8_t *data = test_read_data(de->d_name, &len);
    uint64_t n = len / lct_dtype_size(dtype);
    uint64_t blob = roundtrip(dtype, data, n);
    /* Real training tensors always compress (the sign+exponent field is redundant). */
    cr_expect_lt(blob, len, "%s did not compress: %llu >= %zu", de->d_name, (unsigned long long)blob, len);
    free(data);
    files++;
  }
  closedir(dir);
  cr_assert_geq(files, 18);
}

Test(codec, every_16bit_pattern) {
  uint16_t *v = malloc(65536 * 2 * sizeof *v);
  for (uint32_t i = 0; i < 65536; i++) v[i] = (uint16_t)i;
  test_rng rng = {42};
  for (uint32_t i = 65536; i < 131072; i++) v[i] = (uint16_t)test_rand(&rng); /* and in random order */
  roundtrip(LCT_DTYPE_BF16, v, 131072);
  roundtrip(LCT_DTYPE_F16, v, 131072);
  free(v);
}

Test(codec, every_8bit_pattern) {
  uint8_t v[256 * 3];
  test_rng rng = {7};
  for (int i = 0; i < 256; i++) v[i] = (uint8_t)i;
  for (int i = 256; i < 768; i++) v[i] = (uint8_t)test_rand(&rng);
  roundtrip(LCT_DTYPE_F8E4M3, v, sizeof v);
  roundtrip(LCT_DTYPE_F8E5M2, v, sizeof v);
  roundtrip(LCT_DTYPE_RAW, v, sizeof v);
}

Test(codec, f32_specials_and_random_bits) {
  static const uint32_t specials[] = {
      0x00000000, 0x80000000,             /* +-0 */
      0x7f800000, 0xff800000,             /* +-Inf */
      0x7fc00000, 0xffc00001, 0x7f800001, /* quiet and signalling NaNs with payloads */
      0x7fbfffff, 0xffffffff, 0x00000001, /* largest sNaN payload, all ones, smallest subnormal */
      0x007fffff, 0x80000001, 0x00800000, /* largest subnormal, negative subnormal, smallest normal */
      0x7f7fffff, 0x3f800000, 0xbf800000,
  };
  size_t n = 3 * LCT_CHUNK_ELEMS + 77;
  uint32_t *v = malloc(n * 4);
  test_rng rng = {1234};
  for (size_t i = 0; i < n; i++) {
    v[i] = (i % 3 == 0) ? specials[test_rand(&rng) % (sizeof specials / 4)] : (uint32_t)test_rand(&rng);
  }
  roundtrip(LCT_DTYPE_F32, v, n);
  /* A chunk made only of specials compresses and still round-trips. */
  for (size_t i = 0; i < n; i++) v[i] = specials[i % (sizeof specials / 4)];
  roundtrip(LCT_DTYPE_F32, v, n);
  free(v);
}

Test(codec, awkward_sizes_every_dtype) {
  const uint64_t sizes[] = {0, 1, 2, 3, LCT_LANE_ELEMS - 1, LCT_LANE_ELEMS, LCT_LANE_ELEMS + 1,
                            LCT_CHUNK_ELEMS - 1, LCT_CHUNK_ELEMS, LCT_CHUNK_ELEMS + 1, 2 * LCT_CHUNK_ELEMS + 513};
  size_t len, cap = 4 * (2 * LCT_CHUNK_ELEMS + 513);
  uint8_t *real = test_read_data("A_s100_w.f32.bin", &len), *tiled = malloc(cap);
  for (size_t i = 0; i < cap; i++) tiled[i] = real[i % len];
  for (int dtype = 0; dtype < LCT_DTYPE_COUNT; dtype++) {
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
      roundtrip(dtype, tiled, sizes[k]); /* real bytes reinterpreted: every dtype sees varied symbols */
    }
  }
  free(real);
  free(tiled);
}

Test(codec, unaligned_buffers) {
  size_t len;
  uint8_t *real = test_read_data("A_s400_v.bf16.bin", &len);
  uint64_t n = LCT_CHUNK_ELEMS + 5;
  uint8_t *src = malloc(n * 2 + 3), *blob = malloc(lct_encode_bound(LCT_DTYPE_BF16, n) + 3), *out = malloc(n * 2 + 3);
  for (int off = 1; off <= 3; off++) {
    memcpy(src + off, real, n * 2);
    lct_codebook cb;
    cr_assert_eq(lct_codebook_from_data(LCT_DTYPE_BF16, src + off, n, &cb), 0);
    lct_encode_stats st;
    cr_assert_eq(lct_encode(LCT_DTYPE_BF16, &cb, src + off, n, blob + off, lct_encode_bound(LCT_DTYPE_BF16, n), &st), 0);
    cr_assert_eq(lct_decode(blob + off, st.blob_bytes, out + off, n * 2), 0);
    cr_assert_arr_eq(out + off, real, n * 2);
  }
  free(real);
  free(src);
  free(blob);
  free(out);
}

Test(codec, stale_codebook_is_exact_and_counts_escapes) {
  size_t wl, vl;
  uint8_t *w = test_read_data("A_s100_w.bf16.bin", &wl), *v = test_read_data("A_s400_v.bf16.bin", &vl);
  lct_codebook cb_w, cb_v;
  cr_assert_eq(lct_codebook_from_data(LCT_DTYPE_BF16, w, wl / 2, &cb_w), 0);
  cr_assert_eq(lct_codebook_from_data(LCT_DTYPE_BF16, v, vl / 2, &cb_v), 0);
  lct_encode_stats own, stale;
  roundtrip_with(LCT_DTYPE_BF16, &cb_v, v, vl / 2, &own);
  roundtrip_with(LCT_DTYPE_BF16, &cb_w, v, vl / 2, &stale); /* v coded with w's codebook */
  cr_expect_eq(own.escapes, 0);
  cr_expect_gt(stale.escapes, 0, "weights and Adam v have different exponent ranges");
  cr_expect_gt(stale.code_bits, own.code_bits, "a stale codebook costs ratio");
  /* The drift signal a caller uses: coded bits against the codebook's expectation. */
  double expected = cb_v.expected_bits_per_elem * (double)(vl / 2);
  cr_expect_lt((double)own.code_bits, expected * 1.001);
  cr_expect_gt((double)stale.code_bits, cb_w.expected_bits_per_elem * (double)(vl / 2) * 1.02);

  /* A codebook knowing a single symbol: everything else escapes, still exact. */
  uint64_t hist[LCT_MAX_SYMS] = {0};
  hist[5] = 100;
  lct_codebook tiny;
  cr_assert_eq(lct_codebook_build(LCT_DTYPE_F32, hist, &tiny), 0);
  test_rng rng = {99};
  uint32_t *rnd = malloc(40000 * 4);
  for (int i = 0; i < 40000; i++) rnd[i] = (uint32_t)test_rand(&rng);
  lct_encode_stats esc;
  roundtrip_with(LCT_DTYPE_F32, &tiny, rnd, 40000, &esc);
  cr_expect_eq(esc.raw_chunks, 3, "all-escape chunks are larger than raw and stored raw");
  free(rnd);
  free(w);
  free(v);
}

Test(codec, lanes_past_their_length_field_go_raw) {
  const uint64_t n = 2 * LCT_CHUNK_ELEMS + 300;
  lct_codebook cb;
  uint32_t *x = test_escape_only_f32(n, &cb);
  lct_encode_stats st;
  roundtrip_with(LCT_DTYPE_F32, &cb, x, n, &st);
  cr_assert_eq(st.escapes, n);
  cr_assert_eq(st.raw_chunks, 3, "chunks with lanes of 4096 code bits are stored raw");
  free(x);
}

Test(codec, never_larger_than_bound) {
  test_rng rng = {5};
  for (int dtype = 0; dtype < LCT_DTYPE_COUNT; dtype++) {
    uint64_t n = 2 * LCT_CHUNK_ELEMS + 100;
    size_t w = lct_dtype_size(dtype);
    uint8_t *rnd = malloc(n * w);
    for (uint64_t i = 0; i < n * w; i++) rnd[i] = (uint8_t)test_rand(&rng);
    uint64_t blob = roundtrip(dtype, rnd, n);
    cr_assert_leq(blob, lct_encode_bound(dtype, n));
    cr_assert_leq(lct_encode_bound(dtype, n), LCT_ENCODE_BOUND(n, w));
    free(rnd);
  }
}

Test(codec, bound_of_huge_counts_saturates) {
  /* A count from a request may be anything: the bound never wraps to a small size. */
  cr_assert_eq(lct_chunk_count(UINT64_MAX), UINT64_MAX / LCT_CHUNK_ELEMS + 1);
  for (int dtype = 0; dtype < LCT_DTYPE_COUNT; dtype++) {
    cr_assert_eq(lct_encode_bound(dtype, UINT64_MAX), SIZE_MAX, "dtype %d", dtype);
    cr_assert_eq(lct_encode_bound(dtype, UINT64_MAX / lct_dtype_size(dtype)), SIZE_MAX, "dtype %d", dtype);
  }
  uint64_t n = (UINT64_C(1) << 61) / 4; /* 2^61 bytes of f32: the bound fits */
  cr_assert_gt(lct_encode_bound(LCT_DTYPE_F32, n), n * 4);
  cr_assert_lt(lct_encode_bound(LCT_DTYPE_F32, n), SIZE_MAX);
}

Test(codec, argument_errors) {
  uint32_t v[4] = {1, 2, 3, 4};
  uint8_t blob[1024], out[16];
  lct_codebook cb;
  cr_assert_eq(lct_codebook_from_data(LCT_DTYPE_F32, v, 4, &cb), 0);
  cr_assert_eq(lct_encode(LCT_DTYPE_F32, &cb, v, 4, blob, 10, NULL), LCT_EBUFSIZE);
  cr_assert_eq(lct_encode(99, &cb, v, 4, blob, sizeof blob, NULL), LCT_EDTYPE);
  cr_assert_eq(lct_encode(LCT_DTYPE_BF16, &cb, v, 4, blob, sizeof blob, NULL), LCT_EINVAL, "codebook of another dtype");
  lct_encode_stats st;
  cr_assert_eq(lct_encode(LCT_DTYPE_F32, &cb, v, 4, blob, sizeof blob, &st), 0);
  cr_assert_eq(lct_decode(blob, st.blob_bytes, out, 15), LCT_EBUFSIZE);
  cr_assert_eq(lct_decode(blob, st.blob_bytes, out, 16), 0);
  lct_blob_info info;
  cr_assert_eq(lct_blob_info_read(blob, st.blob_bytes, &info), 0);
  cr_assert_eq(info.dtype, LCT_DTYPE_F32);
  cr_assert_eq(info.n_elems, 4);
  cr_assert_eq(info.raw_bytes, 16);
}

Test(codec, blob_next_walks_blobs_back_to_back) {
  /* Two blobs back to back, as a put's payload carries them: the first is
   * read up to its own end, the second from there; a size past the bytes
   * given is LCT_ESIZE, a short or broken header LCT_ECORRUPT. */
  float v[300];
  for (int i = 0; i < 300; i++) v[i] = (float)i * 0.25f;
  size_t cap = lct_encode_bound(LCT_DTYPE_F32, 200) + lct_encode_bound(LCT_DTYPE_F32, 100);
  uint8_t *blobs = malloc(cap);
  lct_codebook cb;
  cr_assert_eq(lct_codebook_from_data(LCT_DTYPE_F32, v, 300, &cb), 0);
  lct_encode_stats a, b;
  cr_assert_eq(lct_encode(LCT_DTYPE_F32, &cb, v, 200, blobs, cap, &a), 0);
  cr_assert_eq(lct_encode(LCT_DTYPE_F32, &cb, v + 200, 100, blobs + a.blob_bytes, cap - a.blob_bytes, &b), 0);
  size_t len = a.blob_bytes + b.blob_bytes;
  lct_blob_info info;
  cr_assert_eq(lct_blob_next(blobs, len, &info), 0);
  cr_assert_eq(info.blob_bytes, a.blob_bytes);
  cr_assert_eq(info.n_elems, 200);
  cr_assert_eq(lct_blob_next(blobs + a.blob_bytes, b.blob_bytes, &info), 0);
  cr_assert_eq(info.n_elems, 100);
  cr_assert_eq(info.raw_bytes, 400);
  cr_assert_eq(lct_blob_next(blobs + a.blob_bytes, b.blob_bytes - 1, &info), LCT_ESIZE, "its blob_size runs past");
  cr_assert_eq(lct_blob_next(blobs, LCT_HEADER_BYTES - 1, &info), LCT_ECORRUPT, "shorter than a header");
  blobs[a.blob_bytes + 24] ^= 1; /* the second blob's header check */
  cr_assert_eq(lct_blob_next(blobs + a.blob_bytes, b.blob_bytes, &info), LCT_ECORRUPT);
  free(blobs);
}

Test(codec, codebooks_are_taken_by_their_lengths) {
  /* The encoder codes with what the blob's codebook bytes say: a codebook
   * struct whose codes were altered still round-trips, and one whose lengths
   * exceed the limit is refused. */
  size_t len;
  uint16_t *real = (uint16_t *)test_read_data("A_s100_w.bf16.bin", &len);
  uint64_t n = len / 2;
  lct_codebook cb;
  cr_assert_eq(lct_codebook_from_data(LCT_DTYPE_BF16, real, n, &cb), 0);
  lct_codebook forged = cb;
  for (unsigned s = 0; s < forged.n_syms; s++) forged.code[s] ^= 1; /* not the canonical codes */
  roundtrip_with(LCT_DTYPE_BF16, &forged, real, n, NULL);
  uint8_t *blob = malloc(lct_encode_bound(LCT_DTYPE_BF16, n));
  /* 17 would pass a 4-bit field as 1, spilling its high bit into the next symbol's. */
  const uint8_t too_long[] = {LCT_MAX_CODE_LEN + 1, 17};
  for (size_t i = 0; i < sizeof too_long; i++) {
    forged = cb;
    forged.len[0] = too_long[i];
    cr_assert_eq(lct_encode(LCT_DTYPE_BF16, &forged, real, n, blob, lct_encode_bound(LCT_DTYPE_BF16, n), NULL),
                 LCT_EINVAL, "length %u", too_long[i]);
  }
  free(blob);
  free(real);
}

/* A small two-chunk bf16 blob of real data with a coded and a raw chunk. */
static uint8_t *small_blob(size_t *blob_len, uint8_t **raw, size_t *raw_len) {
  size_t len;
  uint8_t *real = test_read_data("A_s100_act.bf16.bin", &len);
  uint64_t n = LCT_CHUNK_ELEMS + 700;
  test_rng rng = {77};
  for (uint64_t i = LCT_CHUNK_ELEMS; i < n; i++) ((uint16_t *)real)[i] = (uint16_t)test_rand(&rng);
  lct_codebook cb;
  cr_assert_eq(lct_codebook_from_data(LCT_DTYPE_BF16, real, LCT_CHUNK_ELEMS, &cb), 0);
  uint8_t *blob = malloc(lct_encode_bound(LCT_DTYPE_BF16, n));
  lct_encode_stats st;
  cr_assert_eq(lct_encode(LCT_DTYPE_BF16, &cb, real, n, blob, lct_encode_bound(LCT_DTYPE_BF16, n), &st), 0);
  cr_assert_eq(st.raw_chunks, 1, "the random tail chunk is stored raw");
  *blob_len = st.blob_bytes;
  *raw = real;
  *raw_len = n * 2;
  return blob;
}

Test(codec, every_truncation_rejected) {
  size_t len, raw_len;
  uint8_t *raw, *blob = small_blob(&len, &raw, &raw_len), *out = malloc(raw_len);
  for (size_t cut = 0; cut < len; cut++) {
    uint8_t *copy = malloc(cut ? cut : 1); /* exact-size copy: ASan sees any overread */
    memcpy(copy, blob, cut);
    int rc = lct_decode(copy, cut, out, raw_len);
    cr_assert(rc == LCT_ECORRUPT || rc == LCT_ECHECKSUM, "truncation to %zu bytes: %d", cut, rc);
    free(copy);
  }
  free(blob);
  free(raw);
  free(out);
}

Test(codec, every_single_bit_flip_rejected) {
  size_t len, raw_len;
  uint8_t *raw, *blob = small_blob(&len, &raw, &raw_len), *out = malloc(raw_len);
  uint8_t *copy = malloc(len);
  for (size_t bit = 0; bit < 8 * len; bit++) {
    memcpy(copy, blob, len);
    copy[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    int rc = lct_decode(copy, len, out, raw_len);
    cr_assert(rc < 0, "flip of bit %zu went undetected", bit);
    cr_assert(rc == LCT_ECORRUPT || rc == LCT_ECHECKSUM || rc == LCT_EVERSION, "bit %zu: %s", bit, lct_strerror(rc));
  }
  free(copy);
  free(blob);
  free(raw);
  free(out);
}

Test(codec, random_garbage_never_crashes) {
  size_t len, raw_len;
  uint8_t *raw, *blob = small_blob(&len, &raw, &raw_len), *out = malloc(raw_len);
  uint8_t *copy = malloc(len);
  test_rng rng = {2024};
  for (int round = 0; round < 3000; round++) {
    memcpy(copy, blob, len);
    int hits = 1 + (int)(test_rand(&rng) % 16);
    for (int h = 0; h < hits; h++) copy[test_rand(&rng) % len] = (uint8_t)test_rand(&rng);
    int rc = lct_decode(copy, len, out, raw_len);
    /* Only a change that leaves the blob identical may decode. */
    if (rc == 0) cr_assert_arr_eq(copy, blob, len);
  }
  free(copy);
  free(blob);
  free(raw);
  free(out);
}

Test(codec, check_known_answer) {
  /* Two words: 1 * (1 * 0x9E3779B1) + 2 * (3 * 0x9E3779B1) mod 2^32. */
  uint8_t bytes[8] = {1, 0, 0, 0, 2, 9, 9, 9};
  cr_assert_eq(lct_check(bytes, 8, 0), (uint32_t)(0x9E3779B1u * 1u + 0x09090902u * 3u * 0x9E3779B1u));
  /* A trailing partial word is zero-padded; base shifts the multipliers. */
  cr_assert_eq(lct_check(bytes, 5, 0), (uint32_t)(0x9E3779B1u * 7u));
  cr_assert_eq(lct_check(bytes, 4, 10), (uint32_t)(0x9E3779B1u * 21u));
}

/* Coded chunks of a blob (mode byte 1), read through its chunk table. */
static unsigned coded_chunks(const uint8_t *blob, size_t len) {
  lct_blob_info info;
  cr_assert_eq(lct_blob_info_read(blob, len, &info), 0);
  const size_t cb = lct_codebook_bytes(info.dtype), table = LCT_HEADER_BYTES + ((cb + 7) & ~(size_t)7);
  unsigned coded = 0;
  for (uint32_t c = 0; c < info.n_chunks; c++) {
    uint64_t at;
    memcpy(&at, blob + table + 8 * c, 8);
    coded += blob[at] == 1;
  }
  return coded;
}

/* Golden vectors (tests/data/golden/README.md): NAME.DTYPE.in is a raw tensor,
 * NAME.DTYPE.lct its blob, coded with the codebook the blob carries. Encoding
 * the input with that codebook must give the blob byte for byte, and back. */
static void golden_encodes_to_its_blob(const test_golden *g, void *arg) {
  (void)arg;
  lct_codebook cb;
  if (g->dtype != LCT_DTYPE_RAW) {
    cr_assert_gt(g->blob_len, LCT_HEADER_BYTES + lct_codebook_bytes(g->dtype));
    cr_assert_eq(lct_codebook_parse(g->dtype, g->blob + LCT_HEADER_BYTES, lct_codebook_bytes(g->dtype), &cb), 0);
  }
  const uint64_t n = g->in_len / lct_dtype_size(g->dtype);
  const size_t cap = lct_encode_bound(g->dtype, n);
  uint8_t *mine = malloc(cap), *out = malloc(g->in_len + 1);
  lct_encode_stats st;
  cr_assert_eq(lct_encode(g->dtype, &cb, g->in, n, mine, cap, &st), 0);
  cr_assert_eq(st.blob_bytes, g->blob_len, "%s: size differs", g->name);
  cr_assert_arr_eq(mine, g->blob, g->blob_len, "%s: bytes differ", g->name);
  cr_assert_eq(lct_decode(g->blob, g->blob_len, out, g->in_len), 0);
  cr_assert(g->in_len == 0 || memcmp(out, g->in, g->in_len) == 0);
  free(mine);
  free(out);
}

Test(codec, golden_blobs) { cr_assert_geq(test_each_golden(golden_encodes_to_its_blob, NULL), 6); }

/* Version 1 golden blobs (tests/data/golden/v1/) decode to the inputs they
 * were written from, and the version 2 blob of each input carries the same
 * sections: with its lane lengths summed in pairs into version 1's header it
 * is the version 1 blob byte for byte (proto/FORMAT.md, "Version 1"). */
static void golden_version_1_decodes(const test_golden *g, void *arg) {
  (void)arg;
  cr_assert_eq(g->v1[4], 1, "%s: a version 1 blob", g->name);
  cr_assert_eq(g->blob[4], 2, "%s: a version 2 blob", g->name);
  const unsigned coded = coded_chunks(g->v1, g->v1_len);
  cr_assert_eq(g->blob_len, g->v1_len + 32 * coded, "%s: version 2 adds 32 bytes per coded chunk", g->name);
  size_t as_v1_len;
  uint8_t *as_v1 = test_blob_as_version_1(g->blob, g->blob_len, &as_v1_len);
  cr_assert_eq(as_v1_len, g->v1_len, "%s", g->name);
  cr_assert_arr_eq(as_v1, g->v1, g->v1_len, "%s: version 2's sections differ from version 1's", g->name);
  free(as_v1);
  uint8_t *out = malloc(g->in_len + 1);
  cr_assert_eq(lct_decode(g->v1, g->v1_len, out, g->in_len), 0, "%s", g->name);
  cr_assert(g->in_len == 0 || memcmp(out, g->in, g->in_len) == 0, "%s: decoded bytes differ", g->name);
  cr_assert_eq(lct_validate(g->v1, g->v1_len, NULL, NULL), 0);
  free(out);
}

Test(codec, golden_version_1_blobs_decode) { cr_assert_geq(test_each_golden(golden_version_1_decodes, NULL), 6); }

/* The corruption tests above, on a chunk with empty lanes (1000 elements)
 * in both versions: every truncation and every single bit flip is rejected,
 * a nonzero length of an empty lane included. */
Test(codec, partial_chunk_corruption_rejected_in_both_versions) {
  const char *paths[] = {"golden/adam_v_1000.bf16.lct", "golden/v1/adam_v_1000.bf16.lct"};
  size_t raw_len;
  uint8_t *raw = test_read_data("golden/adam_v_1000.bf16.in", &raw_len), *out = malloc(raw_len);
  for (size_t p = 0; p < 2; p++) {
    size_t len;
    uint8_t *blob = test_read_data(paths[p], &len);
    cr_assert_eq(coded_chunks(blob, len), 1);
    cr_assert_eq(lct_decode(blob, len, out, raw_len), 0);
    cr_assert_arr_eq(out, raw, raw_len);
    for (size_t cut = 0; cut < len; cut++) {
      uint8_t *copy = malloc(cut ? cut : 1);
      memcpy(copy, blob, cut);
      int rc = lct_decode(copy, cut, out, raw_len);
      cr_assert(rc == LCT_ECORRUPT || rc == LCT_ECHECKSUM, "%s: truncation to %zu bytes: %d", paths[p], cut, rc);
      free(copy);
    }
    uint8_t *copy = malloc(len);
    for (size_t bit = 0; bit < 8 * len; bit++) {
      memcpy(copy, blob, len);
      copy[bit / 8] ^= (uint8_t)(1u << (bit % 8));
      int rc = lct_decode(copy, len, out, raw_len);
      cr_assert(rc == LCT_ECORRUPT || rc == LCT_ECHECKSUM || rc == LCT_EVERSION, "%s: flip of bit %zu: %d",
                paths[p], bit, rc);
    }
    free(copy);
    free(blob);
  }
  free(raw);
  free(out);
}

/* lct_validate decodes every chunk without keeping it: the raw bytes reach
 * the callback in order, and a fault anywhere is lct_decode's error. */
static void gather(void *arg, const void *raw, size_t bytes) {
  uint8_t **at = arg;
  memcpy(*at, raw, bytes);
  *at += bytes;
}

Test(codec, validate_sees_every_chunk) {
  size_t n = 3 * LCT_CHUNK_ELEMS + 17, bytes = n * 2;
  uint8_t *data = test_bf16_data(11, n), *seen = malloc(bytes), *at = seen;
  lct_codebook cb;
  cr_assert_eq(lct_codebook_from_data(LCT_DTYPE_BF16, data, n, &cb), 0);
  size_t cap = lct_encode_bound(LCT_DTYPE_BF16, n);
  uint8_t *blob = malloc(cap);
  lct_encode_stats st;
  cr_assert_eq(lct_encode(LCT_DTYPE_BF16, &cb, data, n, blob, cap, &st), 0);
  cr_assert_eq(lct_validate(blob, st.blob_bytes, gather, &at), 0);
  cr_assert_eq((size_t)(at - seen), bytes);
  cr_assert_eq(memcmp(seen, data, bytes), 0);
  cr_assert_eq(lct_validate(blob, st.blob_bytes, NULL, NULL), 0);
  test_rng r = {5};
  for (int i = 0; i < 64; i++) {
    size_t pos = LCT_HEADER_BYTES + test_rand(&r) % (st.blob_bytes - LCT_HEADER_BYTES);
    blob[pos] ^= (uint8_t)(1u << (test_rand(&r) % 8));
    uint8_t *out = malloc(bytes);
    int want = lct_decode(blob, st.blob_bytes, out, bytes);
    cr_assert_neq(want, 0, "a flipped bit at %zu is found", pos);
    cr_assert_eq(lct_validate(blob, st.blob_bytes, NULL, NULL), want, "as lct_decode finds it");
    free(out);
  }
  cr_assert_eq(lct_validate(blob, st.blob_bytes - 1, NULL, NULL), LCT_ECORRUPT, "a truncated blob");
  free(blob);
  free(data);
  free(seen);
}
