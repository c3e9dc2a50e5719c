/* test_client.c — liblct against a real lctd (cpu backend) over ipc and tcp: every op, real tensors, chunking, concurrency, hostile input. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <inttypes.h>
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <pthread.h>

#include "lct_checksum.h"
#include "lct_wire.h"
#include "lctd_harness.h"
#include "raw_wire.h"
#include "test_util.h"

static test_lctd daemon_;

static void stop(void) { test_lctd_stop(&daemon_); }

/* Small frames and segments, so that modest tensors exercise chunked puts,
 * ranged gets and multi-segment coding. */
static void start_small_frames(void) {
  const char *extra[] = {"--frame-size", "64K", "--segment-size", "64K", NULL};
  test_lctd_start(&daemon_, extra);
}

static void start_default(void) { test_lctd_start(&daemon_, NULL); }

/* ---- raw protocol access, for what liblct would never send ---------------- */

typedef struct raw_conn {
  int sock;
} raw_conn;

static raw_conn raw_open(const char *endpoint) { return (raw_conn){test_raw_open(endpoint)}; }

/* Sends raw bytes; returns the reply's status (0 or a positive LCT code) and
 * optionally the reply (free with lctpb__reply__free_unpacked) and payload. */
static uint32_t raw_bytes(raw_conn *r, const void *msg, size_t len, Lctpb__Reply **reply, void **payload,
                          size_t *plen) {
  return test_raw_send(r->sock, msg, len, reply, payload, plen);
}

static uint32_t raw_call(raw_conn *r, Lctpb__Request *rq, const void *payload, size_t plen, Lctpb__Reply **reply) {
  return test_raw_call(r->sock, rq, payload, plen, reply);
}

static void raw_key(Lctpb__Request *rq, const char *key) {
  rq->has_key = 1;
  rq->key.data = (uint8_t *)key;
  rq->key.len = strlen(key);
}

/* ---- every op -------------------------------------------------------------- */

Test(client, every_op, .init = start_small_frames, .fini = stop) {
  lct_client *c = test_connect(daemon_.ipc);
  lct_server_info si;
  cr_assert_eq(lct_ping(c, &si), 0);
  cr_assert_str_eq(si.backend, test_backend());
  cr_assert_eq(si.frame_bytes, 64 << 10);
  cr_assert(strncmp(si.server, "lctd ", 5) == 0);

  size_t n = 100000;
  uint8_t *w = test_bf16_data(1, n);
  uint64_t shape[2] = {400, 250};
  lct_tensor_info put_info, info;
  cr_assert_eq(lct_put(c, "model/w", LCT_DTYPE_BF16, shape, 2, w, n * 2, &put_info), 0, "%s", lct_last_error(c));
  cr_assert_eq(put_info.raw_bytes, n * 2);
  cr_assert_lt(put_info.stored_bytes, n * 2, "bf16 with 8 exponents compresses");
  cr_assert_eq(put_info.checksum, lct_crc32c(0, w, n * 2));

  cr_assert_eq(lct_stat(c, "model/w", &info), 0);
  cr_assert_eq(info.dtype, LCT_DTYPE_BF16);
  cr_assert_eq(info.ndim, 2);
  cr_assert_eq(info.shape[0], 400);
  cr_assert_eq(info.shape[1], 250);
  cr_assert_eq(info.version, put_info.version);
  cr_assert_eq(info.stored_bytes, put_info.stored_bytes);

  /* Into a caller buffer: exact, too small (EBUFSIZE with the size), larger. */
  uint8_t *buf = malloc(n * 2 + 16);
  cr_assert_eq(lct_get(c, "model/w", buf, n * 2, &info), 0);
  cr_assert_eq(memcmp(buf, w, n * 2), 0);
  cr_assert_eq(lct_get(c, "model/w", buf, n * 2 - 1, &info), LCT_EBUFSIZE);
  cr_assert_eq(info.raw_bytes, n * 2, "EBUFSIZE still reports the size");
  cr_assert_eq(lct_get(c, "model/w", buf, n * 2 + 16, &info), 0);
  cr_assert_eq(memcmp(buf, w, n * 2), 0);

  /* Overwrite: a new version, the new bytes. */
  uint8_t *w2 = test_bf16_data(2, n);
  cr_assert_eq(lct_put(c, "model/w", LCT_DTYPE_BF16, shape, 2, w2, n * 2, &info), 0);
  cr_assert_gt(info.version, put_info.version);
  test_get_equals(c, "model/w", w2, n * 2);

  test_put_ok(c, "model/b", LCT_DTYPE_F32, w, 4000, NULL);
  test_put_ok(c, "opt/m", LCT_DTYPE_RAW, w, 7, NULL);
  lct_list_page *page;
  cr_assert_eq(lct_list(c, "model/", NULL, 0, &page), 0);
  cr_assert_eq(page->n, 2);
  cr_assert_str_eq(page->entries[0].key, "model/b");
  cr_assert_str_eq(page->entries[1].key, "model/w");
  cr_assert_eq(page->entries[1].info.raw_bytes, n * 2);
  cr_assert_null(page->next_cursor);
  lct_list_free(page);

  lct_server_stats st = test_stats(c);
  cr_assert_eq(st.tensors, 3);
  cr_assert_eq(st.raw_bytes, n * 2 + 4000 + 7);
  cr_assert_eq(st.pending_puts, 0);
  cr_assert_eq(st.staging_bytes, 0);
  char *text;
  cr_assert_eq(lct_stats(c, NULL, &text), 0);
  cr_assert(strstr(text, "lct_requests_total{op=\"put_chunk\",status=\"ok\"}"), "the 200 KB put went in chunks");
  lct_free(text);

  cr_assert_eq(lct_delete(c, "model/w"), 0);
  cr_assert_eq(lct_delete(c, "model/w"), LCT_ENOENT);
  cr_assert_eq(lct_stat(c, "model/w", &info), LCT_ENOENT);
  cr_assert_eq(lct_get(c, "model/w", buf, n * 2, &info), LCT_ENOENT);
  cr_assert_eq(test_stats(c).tensors, 2);

  cr_assert_eq(lct_put(c, "", LCT_DTYPE_RAW, NULL, 0, w, 1, NULL), LCT_ENAMETOOLONG);
  cr_assert_eq(lct_put(c, "x", 77, NULL, 0, w, 1, NULL), LCT_EDTYPE);
  uint64_t s3[1] = {3};
  cr_assert_eq(lct_put(c, "x", LCT_DTYPE_F32, s3, 1, w, 8, NULL), LCT_ESIZE);
  free(buf);
  free(w);
  free(w2);
  lct_close(c);
}

/* ---- real tensors over ipc and tcp ------------------------------------------ */

/* single_segment: the daemon keeps tensors of up to 256 KiB in one segment
 * (default segment-size), so their stored size is one reference blob's. */
static void round_trip_data_dir(const char *endpoint, int single_segment) {
  lct_client *c = test_connect(endpoint);
  DIR *dir = opendir(test_data_dir());
  cr_assert_not_null(dir);
  int files = 0;
  for (struct dirent *de; (de = readdir(dir)) != NULL;) {
    const char *name = de->d_name;
    size_t len = strlen(name);
    int dtype = test_dtype_from_name(name);
    if (len < 5 || strcmp(name + len - 4, ".bin") != 0 || dtype < 0) continue;
    size_t bytes;
    uint8_t *data = test_read_data(name, &bytes);
    lct_tensor_info info;
    test_put_ok(c, name, dtype, data, bytes, &info);
    cr_assert_lt(info.stored_bytes, bytes, "%s: real tensors compress", name);
    if (single_segment && bytes <= (256 << 10)) {
      /* One segment: the stored blob is the reference encoder's, byte count for byte count. */
      lct_codebook cb;
      size_t n = bytes / lct_dtype_size(dtype), cap = lct_encode_bound(dtype, n);
      uint8_t *blob = malloc(cap);
      lct_encode_stats es;
      cr_assert_eq(lct_codebook_from_data(dtype, data, n, &cb), 0);
      cr_assert_eq(lct_encode(dtype, &cb, data, n, blob, cap, &es), 0);
      cr_assert_eq(info.stored_bytes, es.blob_bytes, "%s: %s backend stores the reference size", name,
                   test_backend());
      free(blob);
    }
    test_get_equals(c, name, data, bytes);
    /* A second put of the key reuses its codebook and still round-trips. */
    test_put_ok(c, name, dtype, data, bytes, &info);
    test_get_equals(c, name, data, bytes);
    free(data);
    files++;
  }
  closedir(dir);
  cr_assert_gt(files, 0, "tests/data has real tensor slices");
  lct_server_stats st = test_stats(c);
  cr_assert_eq(st.tensors, (uint64_t)files);
  cr_assert_eq(st.codebook_builds, (uint64_t)files, "one build per key; second puts reuse");
  cr_assert_eq(st.codebook_rebuilds, 0);
  lct_close(c);
}

Test(client, real_tensors_ipc, .init = start_small_frames, .fini = stop) {
  round_trip_data_dir(daemon_.ipc, 0);
}

Test(client, real_tensors_tcp, .init = start_default, .fini = stop) {
  round_trip_data_dir(daemon_.tcp, 1);
}

/* ---- sizes around chunks, segments and frames ------------------------------- */

Test(client, sizes, .init = start_small_frames, .fini = stop) {
  lct_client *c = test_connect(daemon_.tcp);
  const size_t chunk = LCT_CHUNK_ELEMS, seg = 32768; /* 64 KiB of bf16 */
  size_t sizes[] = {0, 1, 2, 3, chunk - 1, chunk, chunk + 1, seg - 1, seg, seg + 1, 3 * seg + 17, 500000};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    size_t n = sizes[i];
    uint8_t *d = test_bf16_data(100 + i, n);
    char key[32];
    snprintf(key, sizeof key, "n%zu", n);
    test_put_ok(c, key, LCT_DTYPE_BF16, d, n * 2, NULL);
    test_get_equals(c, key, d, n * 2);
    test_put_ok(c, key, LCT_DTYPE_RAW, d, n * 2, NULL);
    test_get_equals(c, key, d, n * 2);
    test_put_ok(c, key, LCT_DTYPE_F8E4M3, d, n * 2, NULL);
    test_get_equals(c, key, d, n * 2);
    free(d);
  }
  /* A scalar: ndim 0 is one element. */
  float one = 1.0f;
  lct_tensor_info info;
  cr_assert_eq(lct_put(c, "scalar", LCT_DTYPE_F32, NULL, 0, &one, 4, &info), 0);
  cr_assert_eq(info.ndim, 0);
  test_get_equals(c, "scalar", &one, 4);
  lct_close(c);
}

/* A tensor larger than the default 16 MiB frame, with default settings. */
Test(client, larger_than_frame, .init = start_default, .fini = stop) {
  lct_client *c = test_connect(daemon_.ipc);
  size_t n = (20u << 20) / 2 + 12345;
  uint8_t *d = test_bf16_data(9, n);
  lct_tensor_info info;
  test_put_ok(c, "big", LCT_DTYPE_BF16, d, n * 2, &info);
  cr_assert_lt(info.stored_bytes, n * 2);
  test_get_equals(c, "big", d, n * 2);
  char *text;
  cr_assert_eq(lct_stats(c, NULL, &text), 0);
  cr_assert(strstr(text, "op=\"put_commit\",status=\"ok\"} 1\n"), "%s", text);
  lct_free(text);
  free(d);
  lct_close(c);
}

/* Chunks that do not line up with the server's segments: a client frame of
 * 100000 bytes against segments of 64 KiB multiples, and an empty chunked put. */
Test(client, chunks_straddle_segments, .init = start_default, .fini = stop) {
  lct_options o;
  lct_options_init(&o);
  o.endpoint = daemon_.ipc;
  o.frame_bytes = 100000;
  lct_client *c;
  cr_assert_eq(lct_connect(&o, &c), 0);
  size_t n = 700001;
  uint8_t *d = test_bf16_data(12, n);
  test_put_ok(c, "odd", LCT_DTYPE_BF16, d, n * 2, NULL);
  test_get_equals(c, "odd", d, n * 2);
  test_put_ok(c, "odd", LCT_DTYPE_F32, d, (n - 1) * 2, NULL);
  test_get_equals(c, "odd", d, (n - 1) * 2);
  lct_close(c);

  raw_conn r = raw_open(daemon_.ipc);
  Lctpb__TensorMeta m = LCTPB__TENSOR_META__INIT;
  uint64_t shape[1] = {0};
  m.has_dtype = 1;
  m.dtype = LCT_DTYPE_BF16;
  m.n_shape = 1;
  m.shape = shape;
  Lctpb__Request b = LCTPB__REQUEST__INIT;
  b.op = LCTPB__OP__OP_PUT_BEGIN;
  raw_key(&b, "empty");
  b.meta = &m;
  Lctpb__Reply *rp;
  cr_assert_eq(raw_call(&r, &b, NULL, 0, &rp), 0);
  Lctpb__Request cm = LCTPB__REQUEST__INIT;
  cm.op = LCTPB__OP__OP_PUT_COMMIT;
  cm.has_put_id = 1;
  cm.put_id = rp->put_id;
  lctpb__reply__free_unpacked(rp, NULL);
  cr_assert_eq(raw_call(&r, &cm, NULL, 0, NULL), 0, "an empty tensor commits with no chunk");
  nn_close(r.sock);
  c = test_connect(daemon_.ipc);
  test_get_equals(c, "empty", NULL, 0);
  free(d);
  lct_close(c);
}

/* ---- concurrency ------------------------------------------------------------- */

typedef struct worker {
  const char *endpoint;
  int id;
  int failures;
  char why[256];
} worker;

static void *worker_run(void *arg) {
  worker *w = arg;
  lct_options o;
  lct_options_init(&o);
  o.endpoint = w->endpoint;
  o.timeout_ms = 30000;
  lct_client *c;
  if (lct_connect(&o, &c) != 0) {
    w->failures++;
    snprintf(w->why, sizeof w->why, "connect failed");
    return NULL;
  }
  test_rng r = {(uint64_t)w->id * 1000};
  for (int i = 0; i < 100; i++) {
    size_t n = 1 + test_rand(&r) % 60000; /* up to 120 KB: some puts and gets span frames */
    uint8_t *d = test_bf16_data((uint64_t)w->id * 100000 + (uint64_t)i, n);
    char key[32];
    snprintf(key, sizeof key, "w%d/%d", w->id, i % 10);
    uint64_t shape[1] = {n};
    int rc = lct_put(c, key, LCT_DTYPE_BF16, shape, 1, d, n * 2, NULL);
    void *got = NULL;
    lct_tensor_info info;
    if (rc == 0) rc = lct_get_alloc(c, key, &got, &info);
    if (rc != 0 || info.raw_bytes != n * 2 || memcmp(got, d, n * 2) != 0) {
      if (!w->failures)
        snprintf(w->why, sizeof w->why, "%s round %d: %s %s", key, i, lct_strerror(rc), lct_last_error(c));
      w->failures++;
    }
    lct_free(got);
    free(d);
  }
  lct_close(c);
  return NULL;
}

Test(client, eight_concurrent_clients, .init = start_small_frames, .fini = stop) {
  pthread_t th[8];
  worker w[8];
  for (int i = 0; i < 8; i++) {
    w[i] = (worker){i % 2 ? daemon_.tcp : daemon_.ipc, i, 0, ""};
    pthread_create(&th[i], NULL, worker_run, &w[i]);
  }
  for (int i = 0; i < 8; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < 8; i++) cr_assert_eq(w[i].failures, 0, "worker %d: %d failures, first: %s", i, w[i].failures, w[i].why);
  lct_client *c = test_connect(daemon_.ipc);
  lct_server_stats st = test_stats(c);
  cr_assert_eq(st.tensors, 80);
  cr_assert_eq(st.errors, 0);
  lct_close(c);
}

/* ---- pagination --------------------------------------------------------------- */

Test(client, list_pages, .init = start_default, .fini = stop) {
  lct_client *c = test_connect(daemon_.ipc);
  uint8_t byte = 1;
  char key[32];
  for (int i = 0; i < 1234; i++) {
    snprintf(key, sizeof key, "%s/%04d", i % 3 ? "a" : "b", i);
    test_put_ok(c, key, LCT_DTYPE_RAW, &byte, 1, NULL);
  }
  char *cursor = NULL;
  size_t total = 0;
  int pages = 0;
  char last[32] = "";
  do {
    lct_list_page *p;
    cr_assert_eq(lct_list(c, "a/", cursor, 100, &p), 0);
    for (size_t i = 0; i < p->n; i++) {
      cr_assert(strncmp(p->entries[i].key, "a/", 2) == 0);
      cr_assert_gt(strcmp(p->entries[i].key, last), 0, "keys ascend across pages");
      snprintf(last, sizeof last, "%s", p->entries[i].key);
    }
    total += p->n;
    pages++;
    free(cursor);
    cursor = p->next_cursor;
    p->next_cursor = NULL;
    lct_list_free(p);
  } while (cursor);
  cr_assert_eq(total, 822, "1234 keys, two in three under a/");
  cr_assert_eq(pages, 9);
  lct_list_page *p;
  cr_assert_eq(lct_list(c, NULL, NULL, 100000, &p), 0);
  cr_assert_eq(p->n, LCT_LIST_MAX, "the server caps a page");
  cr_assert_not_null(p->next_cursor);
  lct_list_free(p);
  lct_close(c);
}

/* ---- codebooks: reuse and drift ------------------------------------------------- */

Test(client, codebook_reuse_and_rebuild, .init = start_default, .fini = stop) {
  lct_client *c = test_connect(daemon_.ipc);
  size_t n = 200000;
  uint8_t *a = test_bf16_data(1, n), *b = test_bf16_data(2, n);
  test_put_ok(c, "m", LCT_DTYPE_BF16, a, n * 2, NULL);
  test_put_ok(c, "m", LCT_DTYPE_BF16, b, n * 2, NULL); /* same distribution: reused */
  lct_server_stats st = test_stats(c);
  cr_assert_eq(st.codebook_builds, 1);
  cr_assert_eq(st.codebook_rebuilds, 0);
  /* Shift every exponent: the old codebook lacks them all, escapes blow up. */
  uint16_t *s = (uint16_t *)b;
  for (size_t i = 0; i < n; i++) s[i] = (uint16_t)(s[i] - (0x40 << 7));
  lct_tensor_info drifted, counted, refit;
  test_put_ok(c, "m", LCT_DTYPE_BF16, b, n * 2, &drifted);
  st = test_stats(c);
  cr_assert_eq(st.codebook_rebuilds, 0, "a drifted put is stored as coded");
  test_get_equals(c, "m", b, n * 2);
  test_put_ok(c, "m", LCT_DTYPE_BF16, b, n * 2, &counted); /* counts its symbols in its encode pass */
  st = test_stats(c);
  cr_assert_eq(st.codebook_rebuilds, 1, "drift past 2%% rebuilt the codebook at the key's next put");
  test_put_ok(c, "m", LCT_DTYPE_BF16, b, n * 2, &refit);
  cr_assert_lt(refit.stored_bytes, n * 2 * 3 / 4, "the rebuilt codebook codes well");
  cr_assert_lt(refit.stored_bytes, drifted.stored_bytes, "better than the stale codebook");
  st = test_stats(c);
  cr_assert_eq(st.codebook_rebuilds, 1, "reused once rebuilt");
  test_get_equals(c, "m", b, n * 2);
  free(a);
  free(b);
  lct_close(c);
}

/* ---- hostile and malformed input ---------------------------------------------- */

/* The daemon answers and the reference tensor is unchanged. */
static void still_serving(const uint8_t *ref, size_t bytes) {
  lct_client *c = test_connect(daemon_.tcp);
  cr_assert_eq(lct_ping(c, NULL), 0);
  test_get_equals(c, "ref", ref, bytes);
  lct_close(c);
}

Test(client, bad_frames, .init = start_small_frames, .fini = stop) {
  size_t n = 50000;
  uint8_t *ref = test_bf16_data(5, n);
  lct_client *c = test_connect(daemon_.ipc);
  test_put_ok(c, "ref", LCT_DTYPE_BF16, ref, n * 2, NULL);
  lct_close(c);
  raw_conn r = raw_open(daemon_.ipc);

  cr_assert_eq(raw_bytes(&r, "hello", 5, NULL, NULL, NULL), 13, "garbage: EPROTO");
  still_serving(ref, n * 2);
  cr_assert_eq(raw_bytes(&r, "", 0, NULL, NULL, NULL), 13, "empty message");
  uint8_t pre[40];
  lct_wire_prefix(pre, 100); /* announces 100 header bytes, carries 28 */
  memset(pre + 12, 0x08, 28);
  cr_assert_eq(raw_bytes(&r, pre, sizeof pre, NULL, NULL, NULL), 13, "truncated header");
  lct_wire_prefix(pre, 28);
  memset(pre + 12, 0xff, 28);
  cr_assert_eq(raw_bytes(&r, pre, sizeof pre, NULL, NULL, NULL), 13, "header is not protobuf");
  lct_wire_prefix(pre, 4);
  pre[4] = 9;
  cr_assert_eq(raw_bytes(&r, pre, 16, NULL, NULL, NULL), 4, "protocol version 9: EVERSION");
  still_serving(ref, n * 2);

  Lctpb__Request rq = LCTPB__REQUEST__INIT;
  rq.op = 99;
  cr_assert_eq(raw_call(&r, &rq, NULL, 0, NULL), 14, "unknown op: EOP");
  rq.op = LCTPB__OP__OP_GET;
  cr_assert_eq(raw_call(&r, &rq, NULL, 0, NULL), 1, "get without a key: EINVAL");
  raw_key(&rq, "");
  cr_assert_eq(raw_call(&r, &rq, NULL, 0, NULL), 11, "empty key: ENAMETOOLONG");
  char *huge = malloc(65536 + 1);
  memset(huge, 'k', 65536);
  huge[65536] = 0;
  raw_key(&rq, huge);
  rq.op = LCTPB__OP__OP_PUT;
  cr_assert_eq(raw_call(&r, &rq, "abcd", 4, NULL), 11, "64 KiB key: ENAMETOOLONG");
  free(huge);

  /* Payload size against dtype and shape. */
  Lctpb__TensorMeta m = LCTPB__TENSOR_META__INIT;
  uint64_t shape[2] = {10, 1};
  m.has_dtype = 1;
  m.dtype = LCT_DTYPE_F32;
  m.n_shape = 2;
  m.shape = shape;
  raw_key(&rq, "ref");
  rq.meta = &m;
  uint8_t payload[64] = {0};
  cr_assert_eq(raw_call(&r, &rq, payload, 39, NULL), 8, "39 bytes for 10 f32: ESIZE");
  m.has_raw_bytes = 1;
  m.raw_bytes = 44;
  cr_assert_eq(raw_call(&r, &rq, payload, 44, NULL), 8, "raw_bytes 44 for 10 f32: ESIZE");
  m.has_raw_bytes = 0;
  m.dtype = 42;
  cr_assert_eq(raw_call(&r, &rq, payload, 40, NULL), 5, "dtype 42: EDTYPE");
  m.dtype = LCT_DTYPE_F32;
  uint64_t huge_shape[3] = {1ull << 40, 1ull << 40, 16};
  m.shape = huge_shape;
  m.n_shape = 3;
  cr_assert_eq(raw_call(&r, &rq, payload, 40, NULL), 12, "shape product overflow: E2BIG");
  m.shape = shape;
  m.n_shape = 2;
  m.has_checksum = 1;
  m.checksum = 12345;
  cr_assert_eq(raw_call(&r, &rq, payload, 40, NULL), 6, "wrong checksum: ECHECKSUM");
  still_serving(ref, n * 2);

  /* Ranged reads. */
  Lctpb__Request g = LCTPB__REQUEST__INIT;
  g.op = LCTPB__OP__OP_GET;
  raw_key(&g, "ref");
  g.has_offset = 1;
  g.offset = n * 2 + 1;
  cr_assert_eq(raw_call(&r, &g, NULL, 0, NULL), 1, "offset past the end: EINVAL");
  g.offset = 1001;
  g.has_length = 1;
  g.length = 70001;
  Lctpb__Reply *rp;
  cr_assert_eq(raw_call(&r, &g, NULL, 0, &rp), 0);
  lctpb__reply__free_unpacked(rp, NULL);
  g.has_version = 1;
  g.version = 999999;
  cr_assert_eq(raw_call(&r, &g, NULL, 0, NULL), 23, "version moved on: ESTALE");
  nn_close(r.sock);

  /* An odd byte range comes back exactly (through a second socket). */
  raw_conn r2 = raw_open(daemon_.tcp);
  g.has_version = 0;
  void *bytes;
  size_t blen;
  g.payload_bytes = 0;
  size_t h = lctpb__request__get_packed_size(&g);
  uint8_t *msg = malloc(LCT_WIRE_PREFIX_BYTES + h);
  lct_wire_prefix(msg, h);
  lctpb__request__pack(&g, msg + LCT_WIRE_PREFIX_BYTES);
  cr_assert_eq(raw_bytes(&r2, msg, LCT_WIRE_PREFIX_BYTES + h, NULL, &bytes, &blen), 0);
  cr_assert_eq(blen, 64 << 10, "a range is capped at the frame size");
  cr_assert_eq(memcmp(bytes, ref + 1001, blen), 0);
  free(bytes);
  free(msg);
  nn_close(r2.sock);
  still_serving(ref, n * 2);
  free(ref);
}

Test(client, oversized_message_drops_only_that_peer, .init = start_small_frames, .fini = stop) {
  uint8_t ref[100] = {1, 2, 3};
  lct_client *c = test_connect(daemon_.ipc);
  test_put_ok(c, "ref", LCT_DTYPE_RAW, ref, sizeof ref, NULL);
  raw_conn r = raw_open(daemon_.ipc);
  int t = 1000;
  nn_setsockopt(r.sock, NN_SOL_SOCKET, NN_RCVTIMEO, &t, sizeof t);
  size_t len = (64 << 10) + LCT_WIRE_HEADER_MAX + LCT_WIRE_PREFIX_BYTES + 1;
  uint8_t *big = calloc(1, len);
  cr_assert_eq(nn_send(r.sock, big, len, 0), (int)len);
  void *buf;
  cr_assert_lt(nn_recv(r.sock, &buf, NN_MSG, 0), 0, "no reply to a message past NN_RCVMAXSIZE");
  free(big);
  nn_close(r.sock);
  test_get_equals(c, "ref", ref, sizeof ref);
  lct_close(c);
  still_serving(ref, sizeof ref);
}

Test(client, chunked_put_protocol_errors, .init = start_small_frames, .fini = stop) {
  uint8_t ref[1000];
  memset(ref, 7, sizeof ref);
  lct_client *c = test_connect(daemon_.ipc);
  test_put_ok(c, "ref", LCT_DTYPE_RAW, ref, sizeof ref, NULL);
  raw_conn r = raw_open(daemon_.ipc);
  Lctpb__TensorMeta m = LCTPB__TENSOR_META__INIT;
  uint64_t shape[1] = {1000};
  m.has_dtype = 1;
  m.dtype = LCT_DTYPE_RAW;
  m.n_shape = 1;
  m.shape = shape;
  Lctpb__Request b = LCTPB__REQUEST__INIT;
  b.op = LCTPB__OP__OP_PUT_BEGIN;
  raw_key(&b, "staged");
  b.meta = &m;
  cr_assert_eq(raw_call(&r, &b, ref, 10, NULL), 1, "begin carries no payload: EINVAL");
  Lctpb__Reply *rp;
  cr_assert_eq(raw_call(&r, &b, NULL, 0, &rp), 0);
  cr_assert(rp->has_put_id);
  uint64_t id = rp->put_id;
  lctpb__reply__free_unpacked(rp, NULL);

  Lctpb__Request k = LCTPB__REQUEST__INIT;
  k.op = LCTPB__OP__OP_PUT_CHUNK;
  k.has_put_id = 1;
  k.put_id = id;
  k.has_offset = 1;
  k.offset = 10;
  cr_assert_eq(raw_call(&r, &k, ref, 100, NULL), 1, "chunk out of order: EINVAL");
  k.offset = 0;
  cr_assert_eq(raw_call(&r, &k, ref, 600, NULL), 0);
  k.offset = 600;
  cr_assert_eq(raw_call(&r, &k, ref, 401, NULL), 8, "chunk past the end: ESIZE");
  Lctpb__Request cm = LCTPB__REQUEST__INIT;
  cm.op = LCTPB__OP__OP_PUT_COMMIT;
  cm.has_put_id = 1;
  cm.put_id = id;
  cr_assert_eq(raw_call(&r, &cm, NULL, 0, NULL), 8, "commit of an incomplete put: ESIZE");
  raw_key(&cm, "other");
  cr_assert_eq(raw_call(&r, &cm, NULL, 0, NULL), 1, "commit naming another key: EINVAL");
  cm.has_key = 0;
  cr_assert_eq(lct_stat(c, "staged", NULL), LCT_ENOENT, "an uncommitted put is invisible");
  Lctpb__Request ab = LCTPB__REQUEST__INIT;
  ab.op = LCTPB__OP__OP_PUT_ABORT;
  ab.has_put_id = 1;
  ab.put_id = id;
  cr_assert_eq(raw_call(&r, &ab, NULL, 0, NULL), 0);
  cr_assert_eq(raw_call(&r, &k, ref, 400, NULL), 9, "chunk after abort: ENOENT");
  cr_assert_eq(raw_call(&r, &cm, NULL, 0, NULL), 9, "commit after abort: ENOENT");
  lct_server_stats st = test_stats(c);
  cr_assert_eq(st.pending_puts, 0);
  cr_assert_eq(st.staging_bytes, 0);
  nn_close(r.sock);
  test_get_equals(c, "ref", ref, sizeof ref);
  lct_close(c);
}

/* Begins a chunked put of bytes raw bytes of key over r (shared: its chunks in any order); returns its id. */
static uint64_t raw_begin(raw_conn *r, const char *key, uint64_t *shape, int shared) {
  Lctpb__TensorMeta m = LCTPB__TENSOR_META__INIT;
  m.has_dtype = 1;
  m.dtype = LCT_DTYPE_RAW;
  m.n_shape = 1;
  m.shape = shape;
  Lctpb__Request b = LCTPB__REQUEST__INIT;
  b.op = LCTPB__OP__OP_PUT_BEGIN;
  raw_key(&b, key);
  b.meta = &m;
  b.has_shared = b.shared = shared;
  Lctpb__Reply *rp;
  cr_assert_eq(raw_call(r, &b, NULL, 0, &rp), 0, "put-begin of %s", key);
  cr_assert(rp->has_put_id);
  uint64_t id = rp->put_id;
  lctpb__reply__free_unpacked(rp, NULL);
  return id;
}

/* A put-chunk, put-commit or put-abort of put id (offset 0 for a chunk). */
static Lctpb__Request put_op(uint32_t op, uint64_t id) {
  Lctpb__Request rq = LCTPB__REQUEST__INIT;
  rq.op = op;
  rq.has_put_id = 1;
  rq.put_id = id;
  rq.has_offset = op == LCTPB__OP__OP_PUT_CHUNK;
  return rq;
}

/* A shared put takes its chunks in any order but each part once: a chunk over one received is refused, and
 * the put still completes with the part missing. */
Test(client, shared_put_refuses_overlapping_chunks, .init = start_default, .fini = stop) {
  raw_conn r = raw_open(daemon_.ipc);
  uint8_t data[1000];
  for (size_t i = 0; i < sizeof data; i++)
    data[i] = (uint8_t)(i * 7);
  uint64_t shape[1] = {sizeof data}, id = raw_begin(&r, "shared", shape, 1);
  const uint64_t offsets[] = {500, 500, 250, 0};
  const uint32_t want[] = {0, (uint32_t)-LCT_EINVAL, (uint32_t)-LCT_EINVAL, 0};
  for (size_t i = 0; i < 4; i++) {
    Lctpb__Request k = put_op(LCTPB__OP__OP_PUT_CHUNK, id);
    k.offset = offsets[i];
    cr_assert_eq(raw_call(&r, &k, data + offsets[i], 500, NULL), want[i], "chunk %zu at %llu", i,
                 (unsigned long long)offsets[i]);
  }
  Lctpb__Request cm = put_op(LCTPB__OP__OP_PUT_COMMIT, id);
  cr_assert_eq(raw_call(&r, &cm, NULL, 0, NULL), 0, "the put completes");
  nn_close(r.sock);
  lct_client *c = test_connect(daemon_.ipc);
  test_get_equals(c, "shared", data, sizeof data);
  lct_close(c);
}

Test(client, put_ids_unguessable_and_owned, .init = start_default, .fini = stop) {
  raw_conn owner = raw_open(daemon_.ipc), other = raw_open(daemon_.ipc), remote = raw_open(daemon_.tcp);
  uint8_t data[1000];
  memset(data, 5, sizeof data);
  uint64_t shape[1] = {sizeof data}, ids[8];
  char key[16];
  for (int i = 0; i < 8; i++) {
    snprintf(key, sizeof key, "owned%d", i);
    ids[i] = raw_begin(&owner, key, shape, 0);
    for (int j = 0; j < i; j++) {
      uint64_t d = ids[i] > ids[j] ? ids[i] - ids[j] : ids[j] - ids[i];
      cr_assert_gt(d, UINT64_C(1) << 32, "put ids %016" PRIx64 " and %016" PRIx64 " are close: guessable", ids[j],
                   ids[i]);
    }
  }
  /* Another connection, on the same endpoint or another, finds none of them. */
  raw_conn *strangers[] = {&other, &remote};
  for (int s = 0; s < 2; s++) {
    Lctpb__Request k = put_op(LCTPB__OP__OP_PUT_CHUNK, ids[0]), cm = put_op(LCTPB__OP__OP_PUT_COMMIT, ids[0]),
                   ab = put_op(LCTPB__OP__OP_PUT_ABORT, ids[1]);
    Lctpb__Reply *rp;
    cr_assert_eq(raw_call(strangers[s], &k, data, sizeof data, &rp), (uint32_t)-LCT_ENOENT, "a stranger's chunk");
    cr_assert(strstr(rp->message, "no such put"), "%s", rp->message);
    lctpb__reply__free_unpacked(rp, NULL);
    cr_assert_eq(raw_call(strangers[s], &cm, NULL, 0, NULL), (uint32_t)-LCT_ENOENT, "a stranger's commit");
    cr_assert_eq(raw_call(strangers[s], &ab, NULL, 0, NULL), (uint32_t)-LCT_ENOENT, "a stranger's abort");
  }
  /* The owner's puts are as they were. */
  Lctpb__Request k = put_op(LCTPB__OP__OP_PUT_CHUNK, ids[0]), cm = put_op(LCTPB__OP__OP_PUT_COMMIT, ids[0]),
                 ab = put_op(LCTPB__OP__OP_PUT_ABORT, ids[1]);
  Lctpb__Reply *rp;
  cr_assert_eq(raw_call(&owner, &k, data, sizeof data, &rp), 0);
  cr_assert_eq(rp->received, sizeof data, "no stranger's chunk was added");
  lctpb__reply__free_unpacked(rp, NULL);
  cr_assert_eq(raw_call(&owner, &cm, NULL, 0, NULL), 0);
  cr_assert_eq(raw_call(&owner, &ab, NULL, 0, NULL), 0);
  lct_client *c = test_connect(daemon_.ipc);
  test_get_equals(c, "owned0", data, sizeof data);
  cr_assert_eq(test_stats(c).pending_puts, 6);
  lct_close(c);
  nn_close(owner.sock);
  nn_close(other.sock);
  nn_close(remote.sock);
}

/* ---- a full pool ------------------------------------------------------------- */

static void full_pool_checks(const char *endpoint) {
  lct_client *c = test_connect(endpoint);
  test_rng rng = {3};
  size_t bytes = 600 << 10;
  uint8_t *a = malloc(bytes), *b = malloc(bytes);
  for (size_t i = 0; i < bytes; i++) a[i] = (uint8_t)test_rand(&rng), b[i] = (uint8_t)test_rand(&rng);
  test_put_ok(c, "a", LCT_DTYPE_RAW, a, bytes, NULL);
  uint64_t shape[1] = {bytes};
  cr_assert_eq(lct_put(c, "a", LCT_DTYPE_RAW, shape, 1, b, bytes, NULL), LCT_ENOSPC, "overwrite needs room for both");
  cr_assert(strstr(lct_last_error(c), "in use"), "message: %s", lct_last_error(c));
  test_get_equals(c, "a", a, bytes);
  cr_assert_eq(lct_put(c, "b", LCT_DTYPE_RAW, shape, 1, b, bytes, NULL), LCT_ENOSPC);
  cr_assert_eq(lct_stat(c, "b", NULL), LCT_ENOENT);
  lct_server_stats st = test_stats(c);
  cr_assert_eq(st.tensors, 1);
  cr_assert_eq(st.pool_used, st.stored_bytes, "nothing leaked from the refused puts");
  cr_assert_eq(st.staging_bytes, 0);
  cr_assert_eq(lct_delete(c, "a"), 0);
  test_put_ok(c, "b", LCT_DTYPE_RAW, b, bytes, NULL);
  test_get_equals(c, "b", b, bytes);
  free(a);
  free(b);
  lct_close(c);
}

static void start_full_pool(void) {
  const char *extra[] = {"--memory", "1M", NULL};
  test_lctd_start(&daemon_, extra);
}

static void start_full_pool_chunked(void) {
  const char *extra[] = {"--memory", "1M", "--frame-size", "64K", "--segment-size", "64K", NULL};
  test_lctd_start(&daemon_, extra);
}

Test(client, full_pool_single_frame, .init = start_full_pool, .fini = stop) {
  full_pool_checks(daemon_.ipc);
}

Test(client, full_pool_chunked, .init = start_full_pool_chunked, .fini = stop) {
  full_pool_checks(daemon_.tcp);
}

/* ---- clients that never read their replies ------------------------------------ */

/* A figure of /proc/PID/status in KiB (VmRSS: resident now, VmHWM: peak). */
static uint64_t proc_kib(pid_t pid, const char *field) {
  char path[64], line[256];
  snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
  FILE *f = fopen(path, "r");
  cr_assert_not_null(f);
  uint64_t v = 0;
  size_t n = strlen(field);
  while (fgets(line, sizeof line, f) != NULL)
    if (strncmp(line, field, n) == 0 && line[n] == ':')
      v = strtoull(line + n + 1, NULL, 10);
  fclose(f);
  cr_assert_gt(v, 0, "no %s in %s", field, path);
  return v;
}

/* Sends a whole-tensor GET of key and returns without reading the reply. */
static void send_get(int sock, const char *key) {
  Lctpb__Request g = LCTPB__REQUEST__INIT;
  g.op = LCTPB__OP__OP_GET;
  raw_key(&g, key);
  size_t h = lctpb__request__get_packed_size(&g);
  uint8_t m[256];
  cr_assert_leq(LCT_WIRE_PREFIX_BYTES + h, sizeof m);
  lct_wire_prefix(m, h);
  lctpb__request__pack(&g, m + LCT_WIRE_PREFIX_BYTES);
  cr_assert_eq(nn_send(sock, m, LCT_WIRE_PREFIX_BYTES + h, 0), (int)(LCT_WIRE_PREFIX_BYTES + h));
}

/* One codec thread: the clients' sockets keep up with the replies. Under
 * AddressSanitizer lctd's resident memory means what it holds only when
 * freed blocks are reused at once, not quarantined. */
static void start_bounded(void) {
  const char *asan = getenv("ASAN_OPTIONS");
  char opts[512];
  snprintf(opts, sizeof opts, "%s%squarantine_size_mb=0", asan ? asan : "", asan && *asan ? ":" : "");
  setenv("ASAN_OPTIONS", opts, 1);
  const char *extra[] = {"--request-memory", "24M", "--threads", "1", NULL};
  test_lctd_start(&daemon_, extra);
}

Test(client, unread_replies_bounded, .init = start_bounded, .fini = stop) {
  lct_client *c = test_connect(daemon_.ipc);
  size_t n = 2u << 20; /* 4 MiB of bf16: its decode takes a while */
  uint8_t *big = test_bf16_data(21, n), *small = test_bf16_data(22, 32768);
  test_put_ok(c, "big", LCT_DTYPE_BF16, big, n * 2, NULL);
  /* The peak from here on (writing 5 resets VmHWM to VmRSS). */
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/clear_refs", (int)daemon_.pid);
  FILE *f = fopen(path, "w");
  cr_assert_not_null(f);
  fputs("5", f);
  fclose(f);
  uint64_t base = proc_kib(daemon_.pid, "VmRSS");
  /* 96 connections each ask for the whole tensor and never read the reply. */
  enum { N = 96 };
  int socks[N];
  for (int i = 0; i < N; i++) {
    socks[i] = nn_socket(AF_SP, NN_REQ);
    cr_assert(socks[i] >= 0 && nn_connect(socks[i], daemon_.ipc) >= 0);
    send_get(socks[i], "big");
  }
  /* Meanwhile a client that reads its replies is served, every time. */
  uint64_t rss_max = 0;
  for (int i = 0; i < 20; i++) {
    test_put_ok(c, "small", LCT_DTYPE_BF16, small, 65536, NULL);
    test_get_equals(c, "small", small, 65536);
    uint64_t rss = proc_kib(daemon_.pid, "VmRSS");
    rss_max = rss > rss_max ? rss : rss_max;
  }
  /* Every GET answered (20 of them this client's): only this STATS request is left in flight. */
  const char *ok = "lct_requests_total{op=\"get\",status=\"ok\"} ";
  for (int i = 0; i < 1000 && test_metric(c, ok) < N + 20; i++) test_sleep_ms(10);
  cr_assert_eq(test_metric(c, ok), N + 20, "the unread GETs were served, not refused");
  cr_assert_eq(test_metric(c, "lct_requests_in_flight "), 1);
  uint64_t peak = proc_kib(daemon_.pid, "VmHWM");
  rss_max = rss_max > peak ? rss_max : peak;
  /* 96 replies of 4 MiB would be 384 MiB; request_memory holds lctd to 24 MiB of them being built, and
   * the replies nanomsg still sends add a few (before the bound, lctd grew by 280 to 350 MiB here). */
  cr_assert_lt(rss_max - base, 96 << 10, "lctd grew by %" PRIu64 " KiB (from %" PRIu64 " KiB)", rss_max - base, base);
  cr_assert_lt(test_metric(c, "lct_in_flight_bytes "), 4096, "in-flight bytes return to the STATS request's own");
  cr_assert_gt(test_metric(c, "lct_reads_paused_total "), 0, "lctd stopped reading at request_memory");
  for (int i = 0; i < N; i++) nn_close(socks[i]);
  free(big);
  free(small);
  lct_close(c);
}

static void start_one_thread(void) {
  const char *extra[] = {"--threads", "1", "--max-client-requests", "2", NULL};
  test_lctd_start(&daemon_, extra);
}

Test(client, requests_per_connection_bounded, .init = start_one_thread, .fini = stop) {
  lct_client *c = test_connect(daemon_.ipc);
  size_t n = 8u << 20; /* 16 MiB of bf16: one codec thread takes a while over each */
  uint8_t *big = test_bf16_data(23, n);
  test_put_ok(c, "big", LCT_DTYPE_BF16, big, n * 2, NULL);
  /* A raw socket need not wait for replies: it sends 8 GETs at once. */
  int s = nn_socket(AF_SP_RAW, NN_REQ);
  cr_assert(s >= 0 && nn_connect(s, daemon_.ipc) >= 0);
  int t = 1000, max = -1;
  nn_setsockopt(s, NN_SOL_SOCKET, NN_RCVTIMEO, &t, sizeof t);
  nn_setsockopt(s, NN_SOL_SOCKET, NN_RCVMAXSIZE, &max, sizeof max);
  test_sleep_ms(50); /* connected: a raw socket drops what it cannot send yet */
  for (uint32_t i = 0; i < 8; i++) {
    uint8_t m[256];
    Lctpb__Request g = LCTPB__REQUEST__INIT;
    g.op = LCTPB__OP__OP_GET;
    raw_key(&g, "big");
    size_t h = lctpb__request__get_packed_size(&g);
    uint32_t id = htonl(0x80000000u | i); /* the request id a REQ socket puts first */
    memcpy(m, &id, 4);
    lct_wire_prefix(m + 4, h);
    lctpb__request__pack(&g, m + 4 + LCT_WIRE_PREFIX_BYTES);
    cr_assert_eq(nn_send(s, m, 4 + LCT_WIRE_PREFIX_BYTES + h, 0), (int)(4 + LCT_WIRE_PREFIX_BYTES + h));
  }
  /* Every GET is answered: two at a time served, the others refused. */
  const char *ok = "lct_requests_total{op=\"get\",status=\"ok\"} ";
  const char *busy = "lct_requests_total{op=\"get\",status=\"LCT_EBUSY\"} ";
  uint64_t served = 0, refused = 0;
  for (int i = 0; i < 1000 && served + refused < 8; i++) {
    test_sleep_ms(10);
    char *text;
    cr_assert_eq(lct_stats(c, NULL, &text), 0);
    const char *p = strstr(text, ok), *q = strstr(text, busy);
    served = p != NULL ? strtoull(p + strlen(ok), NULL, 10) : 0;
    refused = q != NULL ? strtoull(q + strlen(busy), NULL, 10) : 0;
    lct_free(text);
  }
  cr_assert_eq(served + refused, 8);
  cr_assert_geq(served, 2, "the first two are served");
  cr_assert_gt(refused, 0, "GETs past max_client_requests are refused");
  /* The replies that reach the socket (nanomsg drops those sent while it
   * still receives another) are whole tensors or refusals naming the bound. */
  for (;;) {
    void *buf;
    int len = nn_recv(s, &buf, NN_MSG, 0);
    if (len < 0)
      break;
    lct_wire_frame f;
    Lctpb__Reply *rp;
    cr_assert_eq(lct_wire_split(buf, (size_t)len, &f), 0); /* the request id is in the routing header */
    cr_assert_eq(lct_wire_reply_parse(&f, &rp), 0);
    if (rp->status == (uint32_t)-LCT_EBUSY)
      cr_assert(strstr(rp->message, "max_client_requests 2"), "%s", rp->message);
    else
      cr_assert(rp->status == 0 && f.payload_len == n * 2, "status %u: %s", rp->status, rp->message);
    lctpb__reply__free_unpacked(rp, NULL);
    nn_freemsg(buf);
  }
  /* Another connection is not held to this one's bound. */
  test_get_equals(c, "big", big, n * 2);
  nn_close(s);
  free(big);
  lct_close(c);
}

/* ---- declarations too large for any pool ------------------------------------- */

/* A put-begin of dtype and shape: its status, its message in msg. */
static uint32_t begin_status(raw_conn *r, uint32_t dtype, uint64_t *shape, size_t ndim, char *msg, size_t cap) {
  Lctpb__TensorMeta m = LCTPB__TENSOR_META__INIT;
  m.has_dtype = 1;
  m.dtype = dtype;
  m.n_shape = ndim;
  m.shape = shape;
  Lctpb__Request b = LCTPB__REQUEST__INIT;
  b.op = LCTPB__OP__OP_PUT_BEGIN;
  raw_key(&b, "huge");
  b.meta = &m;
  Lctpb__Reply *rp;
  uint32_t s = raw_call(r, &b, NULL, 0, &rp);
  snprintf(msg, cap, "%s", rp->message ? rp->message : "");
  lctpb__reply__free_unpacked(rp, NULL);
  return s;
}

Test(client, huge_declarations_report_their_size, .init = start_full_pool, .fini = stop) {
  raw_conn r = raw_open(daemon_.ipc);
  struct {
    uint32_t dtype;
    uint64_t shape[2];
    size_t ndim;
    const char *bytes; /* raw_bytes in decimal */
    uint32_t status;
  } cases[] = {
      {LCT_DTYPE_RAW, {UINT64_MAX}, 1, "18446744073709551615", (uint32_t)-LCT_E2BIG},
      {LCT_DTYPE_F32, {(UINT64_C(1) << 62) - 1}, 1, "18446744073709551612", (uint32_t)-LCT_E2BIG},
      {LCT_DTYPE_BF16, {UINT64_C(1) << 62, 2}, 2, "18446744073709551616", (uint32_t)-LCT_E2BIG}, /* product overflows */
      {LCT_DTYPE_BF16, {UINT64_C(1) << 40, UINT64_C(1) << 20}, 2, "2305843009213693952", (uint32_t)-LCT_ENOSPC},
      {LCT_DTYPE_RAW, {UINT64_C(1) << 40}, 1, "1099511627776", (uint32_t)-LCT_ENOSPC},
  };
  char msg[512];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    uint32_t s = begin_status(&r, cases[i].dtype, cases[i].shape, cases[i].ndim, msg, sizeof msg);
    cr_assert_eq(s, cases[i].status, "case %zu: status %u: %s", i, s, msg);
    if (i == 2) /* the shape product itself overflows: no size to name */
      continue;
    cr_assert(strstr(msg, cases[i].bytes), "case %zu names %s bytes: %s", i, cases[i].bytes, msg);
    if (s == (uint32_t)-LCT_ENOSPC)
      cr_assert(strstr(msg, "1048576"), "case %zu names the pool's capacity: %s", i, msg);
    /* Every number it names is one of the tensor's, the pool's, or a worst case above the tensor's size. */
    for (const char *p = msg; *p; p++) {
      if (*p < '0' || *p > '9' || (p > msg && p[-1] >= '0' && p[-1] <= '9'))
        continue;
      unsigned long long v = strtoull(p, NULL, 10);
      cr_assert(v == 0 || v == 1048576 || v >= strtoull(cases[i].bytes, NULL, 10) || v == 64,
                "case %zu: %llu is no size of this put: %s", i, v, msg);
    }
  }
  lct_client *c = test_connect(daemon_.ipc);
  lct_server_stats st = test_stats(c);
  cr_assert_eq(st.pending_puts, 0);
  cr_assert_eq(st.pool_used, 0);
  lct_close(c);
  nn_close(r.sock);
}

/* ---- a client that dies mid-put ------------------------------------------------ */

static void start_short_timeout(void) {
  const char *extra[] = {"--frame-size", "64K", "--put-timeout", "300ms", NULL};
  test_lctd_start(&daemon_, extra);
}

Test(client, empty_chunks_do_not_keep_a_put_alive, .init = start_short_timeout, .fini = stop) {
  /* A put's staging is held until it completes or stops making progress: chunks without bytes, sent more
   * often than put_timeout, are answered but do not hold it past the timeout. */
  uint8_t data[4096];
  memset(data, 3, sizeof data);
  raw_conn r = raw_open(daemon_.ipc);
  uint64_t shape[1] = {sizeof data}, id = raw_begin(&r, "idle", shape, 0);
  Lctpb__Request k = put_op(LCTPB__OP__OP_PUT_CHUNK, id);
  cr_assert_eq(raw_call(&r, &k, data, 1000, NULL), 0, "a chunk with bytes");
  k.offset = 1000;
  uint32_t s = 0;
  for (int i = 0; i < 40 && (s = raw_call(&r, &k, data, 0, NULL)) == 0; i++) test_sleep_ms(50);
  cr_assert_eq(s, 9, "2 s of empty chunks every 50 ms: the put expired after its 300 ms (ENOENT), got %u", s);
  lct_client *c = test_connect(daemon_.ipc);
  lct_server_stats st = test_stats(c);
  cr_assert_eq(st.pending_puts, 0);
  cr_assert_eq(st.puts_expired, 1);
  cr_assert_eq(st.staging_bytes, 0, "its staging was given back");
  lct_close(c);
  nn_close(r.sock);
}

Test(client, client_killed_mid_put, .init = start_short_timeout, .fini = stop) {
  size_t n = 300000;
  uint8_t *ref = test_bf16_data(8, n);
  lct_client *c = test_connect(daemon_.ipc);
  test_put_ok(c, "ref", LCT_DTYPE_BF16, ref, n * 2, NULL);
  /* A separate client process begins a 2 MiB put, sends all but the last
   * chunk, and is killed. */
  int out[2];
  cr_assert_eq(pipe(out), 0);
  pid_t pid = fork();
  cr_assert(pid >= 0);
  if (pid == 0) {
    dup2(out[1], 1);
    close(out[0]);
    execl(LCT_HELPER_PARTIAL_PUT, LCT_HELPER_PARTIAL_PUT, daemon_.tcp, "ref", "2097152", "65536", (char *)NULL);
    _exit(127);
  }
  close(out[1]);
  char line[16] = "";
  cr_assert_gt(read(out[0], line, sizeof line - 1), 0, "the helper reported nothing");
  cr_assert(strncmp(line, "ready", 5) == 0, "helper said '%s'", line);
  close(out[0]);
  kill(pid, SIGKILL);
  int status;
  cr_assert_eq(waitpid(pid, &status, 0), pid);
  cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "helper status %d", status);
  lct_server_stats st = test_stats(c);
  cr_assert_eq(st.pending_puts, 1);
  /* The declared bytes, and the framing of the chunks received (a few dozen bytes each). */
  cr_assert_geq(st.staging_bytes, 2 << 20);
  cr_assert_lt(st.staging_bytes, (2 << 20) + (2 << 20) / 65536 * 256);
  test_get_equals(c, "ref", ref, n * 2); /* the partial put is not visible */
  for (int i = 0; i < 100 && test_stats(c).pending_puts != 0; i++) test_sleep_ms(20);
  st = test_stats(c);
  cr_assert_eq(st.pending_puts, 0, "the abandoned put expired");
  cr_assert_eq(st.puts_expired, 1);
  cr_assert_eq(st.staging_bytes, 0, "its memory was reclaimed");
  test_get_equals(c, "ref", ref, n * 2);
  test_put_ok(c, "after", LCT_DTYPE_BF16, ref, n * 2, NULL);
  test_get_equals(c, "after", ref, n * 2);
  free(ref);
  lct_close(c);
}

Test(client, connect_failures) {
  lct_options o;
  lct_options_init(&o);
  o.endpoint = "ipc:///tmp/lct-test-nobody-listens.sock";
  o.connect_timeout_ms = 200;
  lct_client *c;
  cr_assert_eq(lct_connect(&o, &c), LCT_ECONN);
  o.endpoint = "bogus://x";
  cr_assert_eq(lct_connect(&o, &c), LCT_EINVAL);
  o.endpoint = NULL;
  o.frame_bytes = 100;
  cr_assert_eq(lct_connect(&o, &c), LCT_EINVAL, "frame below the minimum");
}

/* ---- what liblct says of itself, and options from other headers -------------- */

Test(client, abi) {
  cr_assert_eq(lct_version_number(), LCT_VERSION_NUMBER);
  cr_assert_str_eq(lct_version_string(), LCT_VERSION_STRING);
  const struct {
    lct_struct which;
    size_t size;
  } structs[] = {
      {LCT_STRUCT_OPTIONS, sizeof(lct_options)},           {LCT_STRUCT_TENSOR_INFO, sizeof(lct_tensor_info)},
      {LCT_STRUCT_DEVICE_TENSOR, sizeof(lct_device_tensor)}, {LCT_STRUCT_LIST_ENTRY, sizeof(lct_list_entry)},
      {LCT_STRUCT_LIST_PAGE, sizeof(lct_list_page)},         {LCT_STRUCT_SERVER_STATS, sizeof(lct_server_stats)},
      {LCT_STRUCT_SERVER_INFO, sizeof(lct_server_info)},
  };
  for (size_t i = 0; i < sizeof structs / sizeof structs[0]; i++)
    cr_assert_eq(lct_struct_size(structs[i].which), structs[i].size, "lct_struct %d", (int)structs[i].which);
  cr_assert_eq(lct_struct_size((lct_struct)0), 0, "an unknown structure");
  size_t fields = 0;
  while (lct_stats_field_name(fields) != NULL)
    fields++;
  cr_assert_eq(fields * sizeof(uint64_t), sizeof(lct_server_stats));
  cr_assert_str_eq(lct_stats_field_name(0), "tensors");
  cr_assert_str_eq(lct_stats_field_name(fields - 1), "pool_held");
}

Test(client, options_of_other_sizes, .init = start_default, .fini = stop) {
  lct_client *c;
  lct_options o;
  lct_options_init(&o);
  cr_assert_eq(o.size, sizeof o);
  o.endpoint = daemon_.ipc;
  cr_assert_eq(lct_connect(&o, &c), 0);
  lct_close(c);
  o.size = 0;
  cr_assert_eq(lct_connect(&o, &c), LCT_EINVAL, "options not set up by lct_options_init");
  size_t first = offsetof(lct_options, auth_token_file) + sizeof(const char *);
  o.size = first - 1;
  cr_assert_eq(lct_connect(&o, &c), LCT_EINVAL, "smaller than any lct_options there was");
  o.size = first; /* a caller built with the first lct.h that had a size: later fields keep their defaults */
  cr_assert_eq(lct_connect(&o, &c), 0);
  lct_close(c);
  /* A caller built with a later lct.h, one more field: fine while that field is 0. */
  union {
    lct_options o;
    unsigned char bytes[sizeof(lct_options) + 8];
  } later;
  memset(&later, 0xff, sizeof later);
  lct_options_init_sized(&later.o, sizeof later);
  cr_assert_eq(later.o.size, sizeof later);
  cr_assert_eq(later.bytes[sizeof(lct_options)], 0, "the field this liblct lacks is 0 too");
  later.o.endpoint = daemon_.ipc;
  cr_assert_eq(lct_connect(&later.o, &c), 0);
  lct_close(c);
  later.bytes[sizeof(lct_options) + 7] = 1;
  cr_assert_eq(lct_connect(&later.o, &c), LCT_EINVAL, "a field this liblct lacks, set");
}

/* ---- the HTTP stats endpoint --------------------------------------------------- */

static int http_port;

static void start_http(void) {
  static char addr[32];
  http_port = test_free_port();
  snprintf(addr, sizeof addr, "127.0.0.1:%d", http_port);
  const char *extra[] = {"--metrics", addr, NULL};
  test_lctd_start(&daemon_, extra);
}

/* Sends request bytes and returns what the server answered before closing. */
static char *http_exchange(const char *request, size_t len) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)http_port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  cr_assert_eq(connect(s, (struct sockaddr *)&a, sizeof a), 0);
  for (size_t off = 0; off < len;) {
    ssize_t w = send(s, request + off, len - off, MSG_NOSIGNAL);
    if (w <= 0) break; /* the server may answer (and close) before reading it all */
    off += (size_t)w;
  }
  size_t cap = 1 << 16, have = 0;
  char *out = malloc(cap + 1);
  ssize_t r;
  while (have < cap && (r = recv(s, out + have, cap - have, 0)) > 0) have += (size_t)r;
  out[have] = '\0';
  close(s);
  return out;
}

Test(client, http_metrics, .init = start_http, .fini = stop) {
  lct_client *c = test_connect(daemon_.ipc);
  uint8_t byte = 1;
  test_put_ok(c, "k", LCT_DTYPE_RAW, &byte, 1, NULL);
  /* An idle connection does not hold up the others. */
  int idle = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)http_port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  cr_assert_eq(connect(idle, (struct sockaddr *)&a, sizeof a), 0);

  const char *get = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
  char *r = http_exchange(get, strlen(get));
  cr_assert(strncmp(r, "HTTP/1.1 200 OK\r\n", 17) == 0, "%s", r);
  cr_assert(strstr(r, "\r\nlct_tensors 1\n") || strstr(r, "\nlct_tensors 1\n"), "%s", r);
  cr_assert(strstr(r, "lct_requests_total{op=\"put\",status=\"ok\"} 1\n"), "%s", r);
  free(r);
  struct {
    const char *req, *status;
  } bad[] = {{"GET /nope HTTP/1.1\r\n\r\n", "404"},
             {"POST /metrics HTTP/1.1\r\n\r\n", "405"},
             {"\x01\x02garbage\r\n\r\n", "400"}};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    r = http_exchange(bad[i].req, strlen(bad[i].req));
    cr_assert(strncmp(r + 9, bad[i].status, 3) == 0, "'%s' got '%.40s'", bad[i].req, r);
    free(r);
  }
  char *huge = malloc(20000);
  memset(huge, 'a', 20000);
  memcpy(huge, "GET /", 5);
  r = http_exchange(huge, 20000);
  cr_assert(strncmp(r + 9, "431", 3) == 0, "oversized request got '%.40s'", r);
  free(r);
  free(huge);
  close(idle);
  cr_assert_eq(lct_ping(c, NULL), 0);
  lct_close(c);
}

/* ---- PUT_DEVICE_MANY / GET_DEVICE_MANY checks (any backend) ----------------- */

/* A device buffer description; its handle is never opened by these checks. */
static Lctpb__DeviceBuffer fake_device(uint64_t size) {
  static uint8_t handle[LCT_IPC_HANDLE_BYTES], uuid[LCT_GPU_UUID_BYTES], boot[LCT_BOOT_ID_BYTES];
  Lctpb__DeviceBuffer d = LCTPB__DEVICE_BUFFER__INIT;
  cr_assert_eq(lct_wire_boot_id(boot), 0);
  d.ipc_handle = (ProtobufCBinaryData){sizeof handle, handle};
  d.gpu_uuid = (ProtobufCBinaryData){sizeof uuid, uuid};
  d.boot_id = (ProtobufCBinaryData){sizeof boot, boot};
  d.size = size;
  return d;
}

/* Sends rq; returns its status and the reply's failed_item (-1: absent). */
static uint32_t item_call(raw_conn *r, Lctpb__Request *rq, long *failed) {
  Lctpb__Reply *rp;
  uint32_t s = raw_call(r, rq, NULL, 0, &rp);
  *failed = rp->has_failed_item ? (long)rp->failed_item : -1;
  lctpb__reply__free_unpacked(rp, NULL);
  return s;
}

/* Sends a _MANY request of n items over dev. */
static uint32_t many_call(raw_conn *r, uint32_t op, Lctpb__DeviceBuffer *dev, Lctpb__DeviceItem **items, size_t n,
                          long *failed) {
  Lctpb__Request rq = LCTPB__REQUEST__INIT;
  rq.op = op;
  rq.device = dev;
  rq.items = items;
  rq.n_items = n;
  return item_call(r, &rq, failed);
}

Test(client, device_many_requests_checked, .init = start_default, .fini = stop) {
  lct_client *c = test_connect(daemon_.ipc);
  raw_conn r = raw_open(daemon_.ipc);
  enum { N = LCT_DEVICE_ITEMS_MAX + 1 };
  static Lctpb__DeviceItem items[N];
  static Lctpb__DeviceItem *ptrs[N];
  static Lctpb__TensorMeta metas[N];
  static char keys[N][16];
  uint64_t shape[1] = {256};
  for (size_t i = 0; i < N; i++) {
    lctpb__device_item__init(&items[i]);
    lctpb__tensor_meta__init(&metas[i]);
    metas[i].has_dtype = 1;
    metas[i].dtype = LCT_DTYPE_F32;
    metas[i].n_shape = 1;
    metas[i].shape = shape;
    snprintf(keys[i], sizeof keys[i], "m%zu", i);
    items[i].key = (ProtobufCBinaryData){strlen(keys[i]), (uint8_t *)keys[i]};
    items[i].meta = &metas[i];
    items[i].offset = 1024 * (uint64_t)i;
    items[i].size = 1024;
    ptrs[i] = &items[i];
  }
  Lctpb__DeviceBuffer dev = fake_device(1024 * (uint64_t)N);
  long failed;
  const uint32_t PUT = LCTPB__OP__OP_PUT_DEVICE_MANY, GET = LCTPB__OP__OP_GET_DEVICE_MANY;
  cr_assert_eq(many_call(&r, PUT, &dev, ptrs, 0, &failed), (uint32_t)-LCT_EINVAL, "no items");
  cr_assert_eq(many_call(&r, PUT, &dev, ptrs, N, &failed), (uint32_t)-LCT_E2BIG, "more than LCT_DEVICE_ITEMS_MAX");
  cr_assert_eq(many_call(&r, PUT, NULL, ptrs, 2, &failed), (uint32_t)-LCT_EINVAL, "no device buffer");
  items[2].key = items[0].key;
  cr_assert_eq(many_call(&r, PUT, &dev, ptrs, 3, &failed), (uint32_t)-LCT_EINVAL, "a repeated key");
  cr_assert_eq(failed, 2);
  items[2].key = (ProtobufCBinaryData){strlen(keys[2]), (uint8_t *)keys[2]};
  items[1].offset = dev.size - 512;
  cr_assert_eq(many_call(&r, PUT, &dev, ptrs, 3, &failed), (uint32_t)-LCT_EINVAL, "past the buffer");
  cr_assert_eq(failed, 1);
  items[1].offset = 1024;
  metas[2].dtype = 99;
  cr_assert_eq(many_call(&r, PUT, &dev, ptrs, 3, &failed), (uint32_t)-LCT_EDTYPE);
  cr_assert_eq(failed, 2);
  metas[2].dtype = LCT_DTYPE_F32;
  items[0].size = 1020;
  cr_assert_eq(many_call(&r, PUT, &dev, ptrs, 3, &failed), (uint32_t)-LCT_ESIZE, "size is not the tensor's");
  cr_assert_eq(failed, 0);
  items[0].size = 1024;
  /* Well-formed: the cpu backend sends it to the host path, counted once. */
  uint64_t fallbacks = test_stats(c).device_fallbacks;
  cr_assert_eq(many_call(&r, PUT, &dev, ptrs, 3, &failed), (uint32_t)-LCT_ENOIPC);
  cr_assert_eq(failed, -1, "no item is at fault");
  cr_assert_eq(test_stats(c).device_fallbacks, fallbacks + 1);
  /* Gets are checked against what is stored. */
  uint8_t data[1024] = {0};
  test_put_ok(c, "m0", LCT_DTYPE_F32, data, sizeof data, NULL);
  test_put_ok(c, "m2", LCT_DTYPE_F32, data, sizeof data, NULL);
  cr_assert_eq(many_call(&r, GET, &dev, ptrs, 3, &failed), (uint32_t)-LCT_ENOENT);
  cr_assert_eq(failed, 1);
  test_put_ok(c, "m1", LCT_DTYPE_F32, data, sizeof data, NULL);
  items[2].size = 1000;
  cr_assert_eq(many_call(&r, GET, &dev, ptrs, 3, &failed), (uint32_t)-LCT_EBUFSIZE);
  cr_assert_eq(failed, 2);
  items[2].size = 1024;
  items[1].has_version = 1;
  items[1].version = 1;
  cr_assert_eq(many_call(&r, GET, &dev, ptrs, 3, &failed), (uint32_t)-LCT_ESTALE);
  cr_assert_eq(failed, 1);
  items[1].has_version = 0;
  cr_assert_eq(many_call(&r, GET, &dev, ptrs, 3, &failed), (uint32_t)-LCT_ENOIPC);
  /* Keys inside items obey the key rules of the wire (checked at parse). */
  items[0].key = (ProtobufCBinaryData){3, (uint8_t *)"a\0b"};
  cr_assert_eq(many_call(&r, PUT, &dev, ptrs, 1, &failed), (uint32_t)-LCT_EINVAL);
  nn_close(r.sock);
  lct_close(c);
}

/* Sends PUT_DEVICE (meta: a put) or GET_DEVICE of key over dev; a single op
 * names no item, whatever its status. */
static uint32_t one_call(raw_conn *r, const char *key, Lctpb__TensorMeta *meta, Lctpb__DeviceBuffer *dev) {
  Lctpb__Request rq = LCTPB__REQUEST__INIT;
  rq.op = meta != NULL ? LCTPB__OP__OP_PUT_DEVICE : LCTPB__OP__OP_GET_DEVICE;
  raw_key(&rq, key);
  rq.meta = meta;
  rq.device = dev;
  long failed;
  uint32_t s = item_call(r, &rq, &failed);
  cr_assert_eq(failed, -1, "'%s' (%s): a single op named item %ld", key, meta != NULL ? "put" : "get", failed);
  return s;
}

Test(client, device_single_requests_checked, .init = start_default, .fini = stop) {
  /* PUT_DEVICE and GET_DEVICE take the checks of their _MANY ops, with the
   * request's key, meta and version over the whole device buffer. */
  lct_client *c = test_connect(daemon_.ipc);
  raw_conn r = raw_open(daemon_.ipc);
  uint64_t shape[1] = {256};
  Lctpb__TensorMeta meta = LCTPB__TENSOR_META__INIT;
  meta.has_dtype = 1;
  meta.dtype = LCT_DTYPE_F32;
  meta.n_shape = 1;
  meta.shape = shape;
  Lctpb__DeviceBuffer dev = fake_device(1024);
  cr_assert_eq(one_call(&r, "s", &meta, NULL), (uint32_t)-LCT_EINVAL, "no device buffer");
  dev.size = 1020;
  cr_assert_eq(one_call(&r, "s", &meta, &dev), (uint32_t)-LCT_ESIZE, "size is not the tensor's");
  dev.size = 1024;
  dev.offset = 2;
  cr_assert_eq(one_call(&r, "s", &meta, &dev), (uint32_t)-LCT_EINVAL, "not aligned to its elements");
  dev.offset = 0;
  uint64_t fallbacks = test_stats(c).device_fallbacks;
  cr_assert_eq(one_call(&r, "s", &meta, &dev), (uint32_t)-LCT_ENOIPC, "well-formed: the host path");
  cr_assert_eq(test_stats(c).device_fallbacks, fallbacks + 1);
  cr_assert_eq(one_call(&r, "s", NULL, &dev), (uint32_t)-LCT_ENOENT);
  uint8_t data[1024] = {0};
  test_put_ok(c, "s", LCT_DTYPE_F32, data, sizeof data, NULL);
  dev.size = 1000;
  cr_assert_eq(one_call(&r, "s", NULL, &dev), (uint32_t)-LCT_EBUFSIZE);
  dev.size = 4096; /* a larger buffer serves a get */
  cr_assert_eq(one_call(&r, "s", NULL, &dev), (uint32_t)-LCT_ENOIPC);
  nn_close(r.sock);
  lct_close(c);
}

/* ---- background device jobs ------------------------------------------------- */

/* n zero-byte f32 items "<prefix><i>": they take the host path without a GPU,
 * so a job's whole course (queue, requests, completion) runs on any machine. */
typedef struct empty_items {
  char keys[8][24];
  lct_tensor_info infos[8];
  lct_device_tensor t[8];
} empty_items;

static const uint64_t empty_shape[1] = {0};

/* Whether this liblct has the device path (a build without CUDA answers
 * every device call with LCT_ENODEV, and refuses jobs with it). */
static int device_path(lct_client *c) {
  int device = lct_device_path(c);
  cr_assert_eq(device, lct_put_device_many(c, NULL, 0, NULL) != LCT_ENODEV, "lct_device_path says what the calls do");
  return device;
}

static void empty_items_init(empty_items *e, const char *prefix, size_t n) {
  cr_assert_leq(n, sizeof e->t / sizeof e->t[0]);
  for (size_t i = 0; i < n; i++) {
    snprintf(e->keys[i], sizeof e->keys[i], "%s%zu", prefix, i);
    e->t[i] = (lct_device_tensor){e->keys[i], LCT_DTYPE_F32, empty_shape, 1, NULL, 0, &e->infos[i]};
  }
}

Test(client, jobs_run_in_order, .init = start_default, .fini = stop) {
  lct_client *c = test_connect(daemon_.ipc);
  int device = device_path(c); /* asked before any job: a client with jobs takes no other call */
  empty_items put, get;
  empty_items_init(&put, "job/", 3);
  empty_items_init(&get, "job/", 3);
  lct_job *p = NULL, *g;
  if (!device) { /* no job: the caller takes the host path, as the call itself would */
    cr_assert_eq(lct_submit_put_device_many(c, put.t, 3, NULL, NULL, &p), LCT_ENODEV);
    cr_assert_null(p);
    lct_close(c);
    return;
  }
  cr_assert_eq(lct_submit_put_device_many(c, put.t, 3, NULL, NULL, &p), 0);
  cr_assert_eq(lct_submit_get_device_many(c, get.t, 3, NULL, NULL, &g), 0);
  size_t failed = 0;
  int rc = lct_job_wait(g, &failed); /* the get ran after the put: the keys exist */
  cr_assert_eq(rc, 0, "get job: %s: %s", lct_strerror(rc), lct_job_error(g));
  cr_assert_eq(failed, 3);
  cr_assert_eq(lct_job_wait(p, NULL), 0, "%s", lct_job_error(p));
  for (size_t i = 0; i < 3; i++) {
    cr_assert_eq(get.infos[i].dtype, LCT_DTYPE_F32, "%s", get.keys[i]);
    cr_assert_eq(get.infos[i].version, put.infos[i].version, "%s", get.keys[i]);
  }
  lct_job_free(p);
  lct_job_free(g);
  lct_tensor_info info; /* the client serves plain calls again */
  cr_assert_eq(lct_stat(c, "job/2", &info), 0, "%s", lct_last_error(c));
  lct_close(c);
}

Test(client, failed_job_cancels_its_dependents, .init = start_default, .fini = stop) {
  lct_client *fetch = test_connect(daemon_.ipc), *store = test_connect(daemon_.ipc);
  int device = device_path(store);
  empty_items missing, put;
  empty_items_init(&missing, "absent/", 1);
  empty_items_init(&put, "after/", 2);
  lct_job *a, *b;
  cr_assert_eq(lct_job_wait(NULL, NULL), LCT_EINVAL);
  cr_assert_str_eq(lct_job_error(NULL), "");
  if (!device) {
    lct_close(fetch);
    lct_close(store);
    cr_skip_test("this liblct has no device path: it takes no job");
  }
  cr_assert_eq(lct_submit_get_device_many(fetch, missing.t, 1, NULL, NULL, &a), 0);
  cr_assert_eq(lct_submit_put_device_many(store, put.t, 2, NULL, a, &b), 0);
  lct_job_free(a); /* b still holds it until it has looked */
  size_t failed = 99;
  cr_assert_eq(lct_job_wait(b, &failed), LCT_ECANCELED, "%s", lct_job_error(b));
  cr_assert_eq(failed, 2, "a canceled job names no item");
  cr_assert(strstr(lct_job_error(b), "waited for failed") != NULL, "%s", lct_job_error(b));
  lct_tensor_info info;
  cr_assert_eq(lct_stat(store, "after/0", &info), LCT_ENOENT, "a canceled job sends nothing");
  lct_job_free(b);

  lct_job *c;
  cr_assert_eq(lct_submit_get_device_many(fetch, missing.t, 1, NULL, NULL, &c), 0);
  cr_assert_eq(lct_job_wait(c, NULL), LCT_ENOENT);
  cr_assert(*lct_job_error(c) != '\0', "the job keeps its error text");
  lct_job_free(c);
  lct_close(fetch);
  lct_close(store);
}

Test(client, close_cancels_queued_jobs, .init = start_default, .fini = stop) {
  lct_client *slow = test_connect(daemon_.ipc), *c = test_connect(daemon_.ipc);
  if (!device_path(c)) {
    lct_close(slow), lct_close(c);
    cr_skip_test("this liblct has no device path: no job takes long enough to queue others behind it");
  }
  /* A job of hundreds of one-by-one puts keeps c's first job waiting while c closes. */
  enum { N = 400 };
  static char keys[N][16];
  static lct_device_tensor many[N];
  for (size_t i = 0; i < N; i++) {
    snprintf(keys[i], sizeof keys[i], "slow/%zu", i);
    many[i] = (lct_device_tensor){keys[i], LCT_DTYPE_F32, empty_shape, 1, NULL, 0, NULL};
  }
  empty_items first, later;
  empty_items_init(&first, "first/", 1);
  empty_items_init(&later, "later/", 2);
  lct_job *x, *j1, *j2, *j3;
  cr_assert_eq(lct_submit_put_device_many(slow, many, N, NULL, NULL, &x), 0);
  cr_assert_eq(lct_submit_put_device_many(c, first.t, 1, NULL, x, &j1), 0);
  cr_assert_eq(lct_submit_put_device_many(c, later.t, 1, NULL, NULL, &j2), 0);
  cr_assert_eq(lct_submit_put_device_many(c, later.t + 1, 1, NULL, NULL, &j3), 0);
  lct_close(c); /* j1 may be running (it finishes), j2 and j3 wait behind it */
  int rc1 = lct_job_wait(j1, NULL);
  cr_assert(rc1 == 0 || rc1 == LCT_ECANCELED, "%s", lct_strerror(rc1));
  cr_assert_eq(lct_job_wait(j2, NULL), LCT_ECANCELED, "%s", lct_job_error(j2));
  cr_assert_eq(lct_job_wait(j3, NULL), LCT_ECANCELED);
  cr_assert_eq(lct_job_wait(x, NULL), 0, "%s", lct_job_error(x));
  lct_tensor_info info;
  cr_assert_eq(lct_stat(slow, "later/0", &info), LCT_ENOENT);
  cr_assert_eq(lct_stat(slow, "slow/399", &info), 0);
  lct_job_free(x), lct_job_free(j1), lct_job_free(j2), lct_job_free(j3);
  lct_close(slow);
}

/* An encoded GET's length bounds the segments it returns: at least one, then only whole ones it covers. */
/* One codec worker, so that the put is not spread over more segments than segment_size makes on a host of
 * many cores. */
Test(client, encoded_get_length_bounds_the_segments, .init = start_one_thread, .fini = stop) {
  lct_client *c = test_connect(daemon_.ipc);
  const size_t bytes = 3u << 20; /* three default (1 MiB) segments */
  uint8_t *data = test_bf16_data(4, bytes / 2);
  test_put_ok(c, "three", LCT_DTYPE_BF16, data, bytes, NULL);
  raw_conn r = raw_open(daemon_.ipc);
  const uint64_t asks[] = {1, 1u << 20, (1u << 20) + 1, 2u << 20, UINT64_MAX};
  const uint64_t gets[] = {1u << 20, 1u << 20, 1u << 20, 2u << 20, 3u << 20};
  for (size_t i = 0; i < sizeof asks / sizeof asks[0]; i++) {
    Lctpb__Request rq = LCTPB__REQUEST__INIT;
    rq.op = LCTPB__OP__OP_GET;
    raw_key(&rq, "three");
    rq.has_encoded = rq.encoded = 1;
    rq.has_offset = 1;
    rq.has_length = asks[i] != UINT64_MAX;
    rq.length = asks[i];
    Lctpb__Reply *rp;
    cr_assert_eq(raw_call(&r, &rq, NULL, 0, &rp), 0);
    cr_assert_eq(rp->length, gets[i], "length %llu: %llu raw bytes of blobs, not %llu",
                 (unsigned long long)asks[i], (unsigned long long)rp->length, (unsigned long long)gets[i]);
    lctpb__reply__free_unpacked(rp, NULL);
  }
  nn_close(r.sock);
  free(data);
  lct_close(c);
}
