/* test_blob.c — encoded puts and gets (server/blob.c) against a real lctd: blobs from a CPU-encoding client stored as sent, blobs that lie refused. */
#include "lctd_harness.h"
#include "test_util.h"

static test_lctd lctd;
static void start(void) { test_lctd_start(&lctd, NULL); }
static void stop(void) { test_lctd_stop(&lctd); }

TestSuite(blob, .init = start, .fini = stop);

/* The blobs of bf16 data in segments of seg raw bytes, back to back (malloc'd). */
static uint8_t *encode_blobs(const uint8_t *data, size_t bytes, size_t seg, int dtype, size_t *len) {
  size_t esize = lct_dtype_size(dtype), cap = 0;
  for (size_t at = 0; at < bytes || at == 0; at += seg) {
    cap += lct_encode_bound(dtype, (bytes - at < seg ? bytes - at : seg) / esize);
    if (bytes == 0) break;
  }
  lct_codebook cb;
  cr_assert_eq(lct_codebook_from_data(dtype, data, bytes / esize, &cb), 0);
  uint8_t *out = malloc(cap);
  size_t n = 0;
  for (size_t at = 0; at < bytes || at == 0; at += seg) {
    size_t r = bytes - at < seg ? bytes - at : seg;
    lct_encode_stats st;
    cr_assert_eq(lct_encode(dtype, &cb, data + at, r / esize, out + n, cap - n, &st), 0);
    n += st.blob_bytes;
    if (bytes == 0) break;
  }
  *len = n;
  return out;
}

static int put_blobs(lct_client *c, const char *key, int dtype, uint64_t elems, uint32_t crc, const void *b,
                     size_t len) {
  uint64_t shape[1] = {elems};
  return lct_put_encoded(c, key, dtype, shape, 1, crc, b, len, NULL);
}

/* Puts elems bf16 elements encoded in segments of seg; gets them back decoded and encoded. */
static void round_trip(lct_client *c, size_t elems, size_t seg) {
  size_t bytes = elems * 2, len;
  uint8_t *data = test_bf16_data(elems + 7, elems);
  uint8_t *blobs = encode_blobs(data, bytes, seg, LCT_DTYPE_BF16, &len);
  lct_tensor_info info;
  uint64_t shape[1] = {elems};
  int rc = lct_put_encoded(c, "enc", LCT_DTYPE_BF16, shape, 1, lct_checksum(0, data, bytes), blobs, len, &info);
  cr_assert_eq(rc, 0, "%zu elements in %zu-byte segments: %s: %s", elems, seg, lct_strerror(rc), lct_last_error(c));
  cr_assert_eq(info.stored_bytes, len, "stored as sent");
  test_get_equals(c, "enc", data, bytes);
  void *back;
  size_t back_len;
  cr_assert_eq(lct_get_encoded(c, "enc", &back, &back_len, &info), 0, "%s", lct_last_error(c));
  cr_assert_eq(back_len, len);
  cr_assert_eq(memcmp(back, blobs, len), 0, "the stored blobs come back as sent");
  lct_free(back);
  free(blobs);
  free(data);
}

Test(blob, round_trips_at_the_edges) {
  lct_client *c = test_connect(lctd.ipc);
  size_t sizes[] = {0, 1, LCT_CHUNK_ELEMS - 1, LCT_CHUNK_ELEMS, LCT_CHUNK_ELEMS + 1, 32768 * 3 + 5};
  for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
    round_trip(c, sizes[i], 64 << 10);
    round_trip(c, sizes[i], 1 << 20);
  }
  lct_close(c);
}

Test(blob, chunked_and_pipelined_past_a_frame) {
  lct_options o;
  lct_options_init(&o);
  o.endpoint = lctd.tcp;
  o.frame_bytes = 256 << 10; /* many frames, several in flight */
  lct_client *c;
  cr_assert_eq(lct_connect(&o, &c), 0);
  round_trip(c, (3 << 20) + 12345, 64 << 10);
  round_trip(c, 5 << 20, 128 << 10);
  lct_close(c);
}

Test(blob, shared_over_connections) {
  lct_options o;
  lct_options_init(&o);
  o.endpoint = lctd.tcp;
  o.frame_bytes = 256 << 10;
  o.connections = 4;
  lct_client *c;
  cr_assert_eq(lct_connect(&o, &c), 0);
  round_trip(c, 4 << 20, 64 << 10);
  size_t bytes = 6 << 20;
  uint8_t *data = test_bf16_data(3, bytes / 2);
  test_put_ok(c, "raw", LCT_DTYPE_BF16, data, bytes, NULL);
  test_get_equals(c, "raw", data, bytes);
  free(data);
  lct_close(c);
}

/* Each lie is refused with its code, the stored version stays, lctd keeps serving. */
static void refused(lct_client *c, int want, int dtype, uint64_t elems, uint32_t crc, const void *b, size_t len,
                    const uint8_t *kept, size_t kept_bytes, const char *what) {
  int rc = put_blobs(c, "lied", dtype, elems, crc, b, len);
  cr_assert_eq(rc, want, "%s: %s (%s), wanted %s", what, lct_strerror(rc), lct_last_error(c), lct_strerror(want));
  test_get_equals(c, "lied", kept, kept_bytes);
}

Test(blob, lies_are_refused) {
  lct_client *c = test_connect(lctd.ipc);
  size_t elems = 3 * 32768 + 100, bytes = elems * 2, len;
  uint8_t *kept = test_bf16_data(1, 1000);
  test_put_ok(c, "lied", LCT_DTYPE_BF16, kept, 2000, NULL);
  uint8_t *data = test_bf16_data(2, elems);
  uint32_t crc = lct_checksum(0, data, bytes);
  uint8_t *good = encode_blobs(data, bytes, 64 << 10, LCT_DTYPE_BF16, &len);
  uint8_t *bad = malloc(len);

  refused(c, LCT_EDTYPE, LCT_DTYPE_F16, elems, crc, good, len, kept, 2000, "dtype");
  refused(c, LCT_ESIZE, LCT_DTYPE_BF16, elems - 1, crc, good, len, kept, 2000, "shape, one element fewer");
  refused(c, LCT_ESIZE, LCT_DTYPE_BF16, elems + 32768, crc, good, len, kept, 2000, "shape, a segment more");
  refused(c, LCT_ECHECKSUM, LCT_DTYPE_BF16, elems, crc ^ 1, good, len, kept, 2000, "checksum");
  refused(c, LCT_ECORRUPT, LCT_DTYPE_BF16, elems, crc, good, len - 1, kept, 2000, "truncated");
  refused(c, LCT_ECORRUPT, LCT_DTYPE_BF16, elems, crc, good, 39, kept, 2000, "shorter than a header");

  uint64_t first;
  memcpy(&first, good + 32, 8); /* the first blob's size */
  memcpy(bad, good, len);
  uint64_t table = 40 + ((lct_codebook_bytes(LCT_DTYPE_BF16) + 7) & ~(size_t)7), off;
  memcpy(&off, bad + table + 8, 8);
  off += 4; /* chunk 1 starts 4 bytes late */
  memcpy(bad + table + 8, &off, 8);
  refused(c, LCT_ECORRUPT, LCT_DTYPE_BF16, elems, crc, bad, len, kept, 2000, "a bad chunk offset");

  test_rng r = {9};
  for (int flip = 0; flip < 32; flip++) { /* bits of the chunks, past the headers */
    memcpy(bad, good, len);
    size_t at = (size_t)(table + 16 + test_rand(&r) % (first - table - 16));
    bad[at] ^= (uint8_t)(1u << (test_rand(&r) % 8));
    int rc = put_blobs(c, "lied", LCT_DTYPE_BF16, elems, crc, bad, len);
    cr_assert(rc == LCT_ECORRUPT || rc == LCT_ECHECKSUM, "bit flip at %zu: %s", at, lct_strerror(rc));
  }
  test_get_equals(c, "lied", kept, 2000);

  /* Segments that are no multiple of 64 KiB, or larger than lctd's segment_size. */
  uint8_t *odd = encode_blobs(data, bytes, 96 << 10, LCT_DTYPE_BF16, &len);
  refused(c, LCT_ESIZE, LCT_DTYPE_BF16, elems, crc, odd, len, kept, 2000, "96K segments");
  free(odd);
  uint8_t *whole = encode_blobs(data, bytes, bytes, LCT_DTYPE_BF16, &len);
  uint64_t big = 2 << 20, big_bytes = big * 2;
  uint8_t *bigdata = test_bf16_data(4, big);
  free(whole);
  whole = encode_blobs(bigdata, big_bytes, big_bytes, LCT_DTYPE_BF16, &len);
  refused(c, LCT_ESIZE, LCT_DTYPE_BF16, big, lct_checksum(0, bigdata, big_bytes), whole, len, kept, 2000,
          "one blob above segment_size");
  free(whole);
  free(bigdata);

  cr_assert_eq(lct_ping(c, NULL), 0);
  free(bad);
  free(good);
  free(data);
  free(kept);
  lct_close(c);
}

/* A stored blob's codebook is the key's: the next put that lctd codes reuses it. */
Test(blob, codebook_taken_over) {
  lct_client *c = test_connect(lctd.ipc);
  size_t elems = 100000, bytes = elems * 2, len;
  uint8_t *data = test_bf16_data(5, elems);
  uint8_t *blobs = encode_blobs(data, bytes, 64 << 10, LCT_DTYPE_BF16, &len);
  cr_assert_eq(put_blobs(c, "k", LCT_DTYPE_BF16, elems, lct_checksum(0, data, bytes), blobs, len), 0);
  uint64_t builds = test_stats(c).codebook_builds;
  test_put_ok(c, "k", LCT_DTYPE_BF16, data, bytes, NULL);
  cr_assert_eq(test_stats(c).codebook_builds, builds, "no histogram pass: the blobs' codebook was reused");
  test_get_equals(c, "k", data, bytes);
  free(blobs);
  free(data);
  lct_close(c);
}

/* Many small puts and gets in flight together through the job thread, and a large one among them. */
Test(blob, jobs_in_flight) {
  lct_client *c = test_connect(lctd.tcp);
  enum { N = 64 };
  uint8_t *data[N], *back[N];
  char keys[N][16];
  lct_job *jobs[N];
  uint64_t shapes[N][1];
  for (int i = 0; i < N; i++) {
    size_t bytes = i == 7 ? (40 << 20) : 4096;
    data[i] = test_bf16_data(100 + i, bytes / 2);
    back[i] = malloc(bytes);
    shapes[i][0] = bytes / 2;
    snprintf(keys[i], sizeof keys[i], "job/%d", i);
    cr_assert_eq(lct_submit_put(c, keys[i], LCT_DTYPE_BF16, shapes[i], 1, data[i], bytes, NULL, NULL, &jobs[i]), 0);
  }
  for (int i = 0; i < N; i++) {
    cr_assert_eq(lct_job_wait(jobs[i], NULL), 0, "put %d: %s", i, lct_job_error(jobs[i]));
    lct_job_free(jobs[i]);
  }
  for (int i = 0; i < N; i++)
    cr_assert_eq(lct_submit_get(c, keys[i], back[i], shapes[i][0] * 2, NULL, NULL, &jobs[i]), 0);
  lct_job *missing;
  cr_assert_eq(lct_submit_get(c, "job/none", back[0], 4096, NULL, NULL, &missing), 0);
  for (int i = 0; i < N; i++) {
    cr_assert_eq(lct_job_wait(jobs[i], NULL), 0, "get %d: %s", i, lct_job_error(jobs[i]));
    cr_assert_eq(memcmp(back[i], data[i], shapes[i][0] * 2), 0, "tensor %d", i);
    lct_job_free(jobs[i]);
    free(data[i]);
    free(back[i]);
  }
  cr_assert_eq(lct_job_wait(missing, NULL), LCT_ENOENT, "a failed job fails alone");
  lct_job_free(missing);
  cr_assert_eq(lct_ping(c, NULL), 0);
  lct_close(c);
}

Test(blob, options) {
  lct_options o;
  lct_options_init(&o);
  o.endpoint = lctd.ipc;
  o.connections = 17;
  lct_client *c;
  cr_assert_eq(lct_connect(&o, &c), LCT_EINVAL, "more connections than liblct spreads over");
  o.connections = 0;
  setenv("LCT_CONNECTIONS", "2", 1);
  cr_assert_eq(lct_connect(&o, &c), 0);
  unsetenv("LCT_CONNECTIONS");
  cr_assert(lct_segment_bytes(c) == (1 << 20), "lctd's segment_size: %llu", (unsigned long long)lct_segment_bytes(c));
  lct_close(c);
}

static void start_tiny(void) {
  const char *extra[] = {"--memory", "1M", NULL};
  test_lctd_start(&lctd, extra);
}

/* An empty tensor's blob into a pool that has no room left: an answer, not a crash. */
Test(blob_full, empty_blob_into_a_full_pool, .init = start_tiny, .fini = stop) {
  lct_client *c = test_connect(lctd.ipc);
  uint8_t one = 7;
  uint64_t shape1[1] = {1};
  char key[32];
  int rc = 0;
  for (int i = 0; rc == 0 && i < 100000; i++) {
    snprintf(key, sizeof key, "f/%d", i);
    rc = lct_put(c, key, LCT_DTYPE_RAW, shape1, 1, &one, 1, NULL);
  }
  cr_assert_eq(rc, LCT_ENOSPC, "the pool fills: %s", lct_strerror(rc));
  uint8_t blob[64];
  lct_encode_stats st;
  cr_assert_eq(lct_encode(LCT_DTYPE_RAW, NULL, "", 0, blob, sizeof blob, &st), 0);
  rc = put_blobs(c, "empty", LCT_DTYPE_RAW, 0, 0, blob, st.blob_bytes);
  cr_assert(rc == 0 || rc == LCT_ENOSPC, "an empty put: %s (%s)", lct_strerror(rc), lct_last_error(c));
  lct_server_info si;
  cr_assert_eq(lct_ping(c, &si), 0, "lctd still serves");
  lct_close(c);
}
