/* test_lanes.c — liblct's lanes against a real lctd: several connections per client, each authenticated, carrying a large tensor's frames and queued jobs with requests in flight together. */
#include <sys/stat.h>

#include "lctd_harness.h"
#include "test_util.h"

#define TOKEN "lanes-token-0123456789abcdef"

static test_lctd lctd;
static char token_path[96];

/* lctd with a token, and a setting of the test's own (NULL: none). */
static void start_with(const char *setting, const char *value) {
  test_token_file("lanes-token", TOKEN, token_path, sizeof token_path);
  const char *extra[] = {"--auth-token-file", token_path, setting, value, NULL};
  test_lctd_start(&lctd, extra);
}

static void start(void) { start_with(NULL, NULL); }

static void stop(void) {
  test_lctd_stop(&lctd);
  unlink(token_path);
}

TestSuite(lanes, .init = start, .fini = stop);

static lct_client *connect_lanes(int lanes, size_t frame) {
  lct_options o;
  lct_options_init(&o);
  o.endpoint = lctd.tcp;
  o.auth_token_file = token_path;
  o.connections = lanes;
  o.frame_bytes = frame;
  lct_client *c;
  int rc = lct_connect(&o, &c);
  cr_assert_eq(rc, 0, "%d lanes: %s", lanes, lct_strerror(rc));
  return c;
}

/* Whether lctd refused any request for want of authentication. */
static int refused_any(lct_client *c) {
  char *text;
  cr_assert_eq(lct_stats(c, NULL, &text), 0);
  int refused = strstr(text, "kind=\"LCT_EACCES\"") != NULL;
  lct_free(text);
  return refused;
}

Test(lanes, each_authenticates_and_carries_frames) {
  lct_client *c = connect_lanes(4, 256 << 10);
  size_t bytes = (6 << 20) + 2 * 777; /* 25 frames, the last short */
  uint8_t *data = test_bf16_data(11, bytes / 2);
  test_put_ok(c, "big", LCT_DTYPE_BF16, data, bytes, NULL);
  test_get_equals(c, "big", data, bytes);
  cr_assert_geq(test_metric(c, "lct_clients "), 4, "one connection per lane");
  cr_assert(!refused_any(c), "every lane proved the token before it carried a request");
  free(data);
  lct_close(c);
}

Test(lanes, a_wrong_token_fails_at_connect) {
  const char *bad = test_write_tmp("lanes-bad-token", "not-the-token\n", 14);
  chmod(bad, 0600); /* readable as a token file: the proof is what fails */
  lct_options o;
  lct_options_init(&o);
  o.endpoint = lctd.tcp;
  o.auth_token_file = bad;
  o.connections = 4;
  lct_client *c;
  cr_assert_eq(lct_connect(&o, &c), LCT_EACCES);
  unlink(bad);
}

Test(lanes, queued_jobs_in_flight_together) {
  enum { N = 48, ELEMS = 2048 };
  lct_client *c = connect_lanes(4, 0);
  lct_client *check = connect_lanes(1, 0);
  uint8_t *data[N], *back[N];
  char keys[N][16];
  lct_job *puts[N], *gets[N];
  uint64_t shape[1] = {ELEMS};
  for (int i = 0; i < N; i++) {
    snprintf(keys[i], sizeof keys[i], "small/%d", i);
    data[i] = test_bf16_data(100 + (uint64_t)i, ELEMS);
    back[i] = malloc(ELEMS * 2);
    cr_assert_eq(lct_submit_put(c, keys[i], LCT_DTYPE_BF16, shape, 1, data[i], ELEMS * 2, NULL, NULL, &puts[i]), 0);
  }
  for (int i = 0; i < N; i++)
    cr_assert_eq(lct_submit_get(c, keys[i], back[i], ELEMS * 2, NULL, puts[i], &gets[i]), 0);
  for (int i = 0; i < N; i++) {
    cr_assert_eq(lct_job_wait(puts[i], NULL), 0, "put %d: %s", i, lct_job_error(puts[i]));
    cr_assert_eq(lct_job_wait(gets[i], NULL), 0, "get %d: %s", i, lct_job_error(gets[i]));
    cr_assert_eq(memcmp(back[i], data[i], ELEMS * 2), 0, "key %d", i);
    test_get_equals(check, keys[i], data[i], ELEMS * 2);
    lct_job_free(puts[i]);
    lct_job_free(gets[i]);
    free(data[i]);
    free(back[i]);
  }
  cr_assert(!refused_any(check));
  lct_close(check);
  lct_close(c);
}

/* Jobs on one key take effect in the order submitted, though independent ones are in flight together: a
 * large put that lctd codes on a worker, then a small one it codes at once, leave the small one stored. */
Test(lanes, queued_jobs_on_one_key_keep_their_order) {
  enum { ROUNDS = 8, BIG = 1 << 19, SMALL = 64 };
  lct_client *c = connect_lanes(4, 0);
  uint8_t *big = test_bf16_data(31, BIG), *small = test_bf16_data(32, SMALL);
  uint64_t big_shape[1] = {BIG}, small_shape[1] = {SMALL};
  for (int r = 0; r < ROUNDS; r++) {
    char key[16];
    snprintf(key, sizeof key, "order/%d", r);
    lct_job *first, *second;
    cr_assert_eq(lct_submit_put(c, key, LCT_DTYPE_BF16, big_shape, 1, big, BIG * 2, NULL, NULL, &first), 0);
    cr_assert_eq(lct_submit_put(c, key, LCT_DTYPE_BF16, small_shape, 1, small, SMALL * 2, NULL, NULL, &second), 0);
    cr_assert_eq(lct_job_wait(first, NULL), 0, "%s", lct_job_error(first));
    cr_assert_eq(lct_job_wait(second, NULL), 0, "%s", lct_job_error(second));
    lct_job_free(first);
    lct_job_free(second);
  }
  for (int r = 0; r < ROUNDS; r++) {
    char key[16];
    snprintf(key, sizeof key, "order/%d", r);
    test_get_equals(c, key, small, SMALL * 2);
  }
  free(big);
  free(small);
  lct_close(c);
}

/* A job without a key, queued between two that go out together, fails alone. */
Test(lanes, a_job_without_a_key_fails_alone) {
  lct_client *c = connect_lanes(4, 0);
  uint8_t v[64] = {0};
  uint64_t shape[1] = {32};
  const char *keys[3] = {"keyed/0", NULL, "keyed/2"};
  lct_job *jobs[3];
  for (int i = 0; i < 3; i++)
    cr_assert_eq(lct_submit_put(c, keys[i], LCT_DTYPE_BF16, shape, 1, v, sizeof v, NULL, NULL, &jobs[i]), 0);
  for (int i = 0; i < 3; i++) {
    int rc = lct_job_wait(jobs[i], NULL);
    if (keys[i] != NULL)
      cr_assert_eq(rc, 0, "job %d: %s", i, lct_job_error(jobs[i]));
    else
      cr_assert_neq(rc, 0, "the job without a key failed");
    lct_job_free(jobs[i]);
  }
  test_get_equals(c, "keyed/2", v, sizeof v);
  lct_close(c);
}

static void start_small_staging(void) { start_with("--staging-memory", "4M"); }

/* A transfer that fails with requests in flight on other lanes takes their replies: the lanes stay free for
 * the next request, which succeeds (no LCT_EBUSY). */
Test(lanes_failed, a_failed_transfer_leaves_no_lane_busy, .init = start_small_staging, .fini = stop) {
  lct_client *c = connect_lanes(4, 64 << 10);
  size_t bytes = 4u << 20; /* more than the staging holds once the frames' headers are counted */
  uint8_t *data = test_bf16_data(21, bytes / 2);
  uint64_t shape[1] = {bytes / 2};
  for (int i = 0; i < 3; i++) {
    int rc = lct_put(c, "too-big", LCT_DTYPE_BF16, shape, 1, data, bytes, NULL);
    cr_assert_eq(rc, LCT_ENOMEM, "staging full, each time: %s (%s)", lct_strerror(rc), lct_last_error(c));
  }
  test_put_ok(c, "fits", LCT_DTYPE_BF16, data, 1u << 20, NULL);
  test_get_equals(c, "fits", data, 1u << 20);
  free(data);
  lct_close(c);
}
