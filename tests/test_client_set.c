/* test_client_set.c — endpoint sets: rendezvous placement, list parsing, keys over several lctd, a dead one. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lct.h"
#include "lctd_harness.h"

#define KEYS 2000

static lct_client_set *open_set(const char *list) {
  lct_client_set *s;
  int rc = lct_client_set_open(NULL, list, &s);
  cr_assert_eq(rc, 0, "open '%s': %s", list, lct_strerror(rc));
  return s;
}

static const char *home(const lct_client_set *s, const char *key) {
  return lct_client_set_endpoint(s, lct_client_set_place(s, key));
}

static void key_name(char *buf, size_t cap, int i) { snprintf(buf, cap, "run/%d/exp_avg", i); }

/* Computed by an independent implementation (BLAKE2b-128 of the endpoint as
 * the SipHash-2-4 key of the key's bytes), so that the rule lct.h states is
 * the one liblct follows. */
Test(client_set, golden_placement) {
  lct_client_set *s =
      open_set("tcp://gpu0:7878,tcp://gpu0:7879,tcp://gpu1:7878,ipc:///run/lct/gpu3/lctd.sock");
  char long_key[1025];
  memset(long_key, 'k', 1024);
  long_key[1024] = '\0';
  const char *keys[] = {"opt/0/exp_avg", "opt/0/exp_avg_sq", "run42/adam/17/exp_avg", "a", long_key,
                        "rank1/model/fc.weight", "x/y/z", "ckpt/step-000100"};
  const size_t want[] = {0, 0, 0, 2, 1, 1, 0, 2};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
    cr_expect_eq(lct_client_set_place(s, keys[i]), want[i], "key %.20s: endpoint %zu, expected %zu", keys[i],
                 lct_client_set_place(s, keys[i]), want[i]);
  lct_client_set_close(s);
}

Test(client_set, order_does_not_matter) {
  lct_client_set *a = open_set("tcp://h:1,tcp://h:2,tcp://h:3,tcp://h:4");
  lct_client_set *b = open_set(" tcp://h:3 , tcp://h:1,tcp://h:4,  tcp://h:2 ");
  cr_assert_eq(lct_client_set_size(b), 4);
  cr_assert_str_eq(lct_client_set_endpoint(b, 0), "tcp://h:3");
  cr_assert_null(lct_client_set_endpoint(b, 4));
  for (int i = 0; i < KEYS; i++) {
    char k[64];
    key_name(k, sizeof k, i);
    cr_assert_str_eq(home(a, k), home(b, k), "key %s", k);
  }
  lct_client_set_close(a);
  lct_client_set_close(b);
}

/* Removing an endpoint moves its keys only; adding one moves keys to it only. */
Test(client_set, removal_moves_only_its_keys) {
  lct_client_set *four = open_set("tcp://h:1,tcp://h:2,tcp://h:3,tcp://h:4");
  lct_client_set *three = open_set("tcp://h:1,tcp://h:2,tcp://h:4");
  size_t moved = 0;
  for (int i = 0; i < KEYS; i++) {
    char k[64];
    key_name(k, sizeof k, i);
    const char *before = home(four, k), *after = home(three, k);
    if (strcmp(before, "tcp://h:3") == 0) {
      moved++;
      cr_assert_str_neq(after, "tcp://h:3");
    } else {
      cr_assert_str_eq(before, after, "key %s moved from %s to %s", k, before, after);
    }
  }
  /* A quarter of the keys lived there, within a few percent. */
  cr_assert(moved > KEYS / 4 - KEYS / 20 && moved < KEYS / 4 + KEYS / 20, "%zu of %d keys moved", moved, KEYS);
  lct_client_set_close(four);
  lct_client_set_close(three);
}

Test(client_set, balanced) {
  lct_client_set *s = open_set("tcp://10.0.0.1:7878,tcp://10.0.0.1:7879,tcp://10.0.0.2:7878,tcp://10.0.0.2:7879");
  size_t count[4] = {0};
  for (int i = 0; i < KEYS * 4; i++) {
    char k[64];
    snprintf(k, sizeof k, "model/layer%d/weight", i);
    count[lct_client_set_place(s, k)]++;
  }
  for (int i = 0; i < 4; i++)
    cr_expect(count[i] > KEYS * 85 / 100 && count[i] < KEYS * 115 / 100, "endpoint %d holds %zu of %d keys", i,
              count[i], KEYS * 4);
  lct_client_set_close(s);
}

Test(client_set, bad_lists) {
  const char *bad[] = {",tcp://h:1", "tcp://h:1,", "tcp://h:1,,tcp://h:2", "tcp://h:1, tcp://h:1",
                       "h:1", "tcp://", "://h"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    lct_client_set *s = (lct_client_set *)1;
    cr_expect_eq(lct_client_set_open(NULL, bad[i], &s), LCT_EINVAL, "'%s' accepted", bad[i]);
    cr_expect_null(s);
  }
  size_t cap = (LCT_ENDPOINTS_MAX + 1) * 16;
  char *many = malloc(cap);
  size_t n = 0;
  for (int i = 0; i <= LCT_ENDPOINTS_MAX; i++)
    n += (size_t)snprintf(many + n, cap - n, "%stcp://h:%d", i ? "," : "", i);
  lct_client_set *s;
  cr_expect_eq(lct_client_set_open(NULL, many, &s), LCT_EINVAL, "more than LCT_ENDPOINTS_MAX accepted");
  free(many);
  lct_options o;
  lct_options_init(&o);
  o.size = 4;
  cr_expect_eq(lct_client_set_open(&o, "tcp://h:1", &s), LCT_EINVAL, "options not set up accepted");
}

Test(client_set, environment) {
  setenv("LCT_ENDPOINTS", "tcp://e:1,tcp://e:2", 1);
  lct_client_set *s = open_set(NULL);
  cr_assert_eq(lct_client_set_size(s), 2);
  cr_assert_str_eq(lct_client_set_endpoint(s, 1), "tcp://e:2");
  lct_client_set_close(s);
  /* An endpoint the program gives wins over the environment. */
  lct_options o;
  lct_options_init(&o);
  o.endpoint = "tcp://given:1";
  cr_assert_eq(lct_client_set_open(&o, NULL, &s), 0);
  cr_assert_eq(lct_client_set_size(s), 1);
  cr_assert_str_eq(lct_client_set_endpoint(s, 0), "tcp://given:1");
  lct_client_set_close(s);
  /* Without it, the one endpoint lct_connect would take. */
  unsetenv("LCT_ENDPOINTS");
  setenv("LCT_ENDPOINT", "tcp://single:7", 1);
  s = open_set("");
  cr_assert_eq(lct_client_set_size(s), 1);
  cr_assert_str_eq(lct_client_set_endpoint(s, 0), "tcp://single:7");
  cr_assert_eq(lct_client_set_place(s, "any"), 0);
  lct_client_set_close(s);
}

/* ---- against real lctd processes ---- */

#define LCTDS 3
#define STORED 60

static test_lctd lctds[LCTDS];

static void start_all(char *list, size_t cap) {
  size_t n = 0;
  for (int i = 0; i < LCTDS; i++) {
    test_lctd_start(&lctds[i], NULL);
    n += (size_t)snprintf(list + n, cap - n, "%s%s", i ? "," : "", lctds[i].tcp);
  }
}

static void stop_all(void) {
  for (int i = 0; i < LCTDS; i++) test_lctd_stop(&lctds[i]);
}

static lct_client_set *open_live(const char *list) {
  lct_options o;
  lct_options_init(&o);
  o.timeout_ms = 20000;
  o.connect_timeout_ms = 300;
  lct_client_set *s;
  cr_assert_eq(lct_client_set_open(&o, list, &s), 0);
  return s;
}

/* Puts STORED keys through the set; each value is its index. */
static void put_all(lct_client_set *s) {
  for (uint32_t i = 0; i < STORED; i++) {
    char k[64];
    key_name(k, sizeof k, (int)i);
    lct_client *c;
    int rc = lct_client_set_for_key(s, k, &c);
    cr_assert_eq(rc, 0, "%s: %s", k, lct_client_set_last_error(s));
    test_put_ok(c, k, LCT_DTYPE_RAW, &i, sizeof i, NULL);
  }
}

Test(client_set, keys_live_where_placed) {
  char list[512];
  start_all(list, sizeof list);
  lct_client_set *s = open_live(list);
  put_all(s);
  /* Each lctd, asked by itself, holds exactly the keys placed on it. */
  size_t total = 0;
  for (size_t e = 0; e < LCTDS; e++) {
    lct_client *direct = test_connect(lctds[e].ipc);
    lct_list_page *page;
    cr_assert_eq(lct_list(direct, "run/", NULL, 512, &page), 0);
    for (size_t j = 0; j < page->n; j++)
      cr_assert_eq(lct_client_set_place(s, page->entries[j].key), e, "%s on endpoint %zu", page->entries[j].key, e);
    cr_assert(page->n > 0, "endpoint %zu holds no key of %d", e, STORED);
    total += page->n;
    lct_list_free(page);
    lct_close(direct);
  }
  cr_assert_eq(total, STORED);
  for (uint32_t i = 0; i < STORED; i++) {
    char k[64];
    key_name(k, sizeof k, (int)i);
    lct_client *c;
    cr_assert_eq(lct_client_set_for_key(s, k, &c), 0);
    test_get_equals(c, k, &i, sizeof i);
  }
  lct_client *c;
  cr_assert_eq(lct_client_set_client(s, LCTDS, &c), LCT_EINVAL);
  lct_client_set_close(s);
  stop_all();
}

/* One dead lctd: its keys fail with an error naming it and the key, never
 * served elsewhere; the others' keys are served; once back, it is found again. */
Test(client_set, dead_endpoint) {
  char list[512];
  start_all(list, sizeof list);
  lct_client_set *s = open_live(list);
  put_all(s);
  lct_client_set_close(s);
  s = open_live(list); /* a fresh set: no connection to the dead one yet */
  test_lctd_kill(&lctds[1]);
  int on_dead = 0;
  for (uint32_t i = 0; i < STORED; i++) {
    char k[64];
    key_name(k, sizeof k, (int)i);
    lct_client *c;
    int rc = lct_client_set_for_key(s, k, &c);
    if (lct_client_set_place(s, k) == 1) {
      on_dead++;
      cr_assert_eq(rc, LCT_ECONN, "%s: %s", k, lct_strerror(rc));
      cr_assert_null(c);
      const char *err = lct_client_set_last_error(s);
      cr_assert(strstr(err, lctds[1].tcp) != NULL && strstr(err, k) != NULL, "error '%s' names neither", err);
    } else {
      cr_assert_eq(rc, 0, "%s: %s", k, lct_client_set_last_error(s));
      test_get_equals(c, k, &i, sizeof i);
    }
  }
  cr_assert(on_dead > 0);
  /* Back on the same endpoint (empty: nothing persisted): reached again, and the keys are simply absent. */
  test_lctd_spawn(&lctds[1], NULL);
  for (uint32_t i = 0; i < STORED; i++) {
    char k[64];
    key_name(k, sizeof k, (int)i);
    if (lct_client_set_place(s, k) != 1) continue;
    lct_client *c;
    cr_assert_eq(lct_client_set_for_key(s, k, &c), 0, "%s", lct_client_set_last_error(s));
    lct_tensor_info info;
    cr_assert_eq(lct_stat(c, k, &info), LCT_ENOENT);
    break;
  }
  lct_client_set_close(s);
  stop_all();
}

/* A connection that was up when its lctd died: that key's call fails, the other endpoints' do not. */
Test(client_set, endpoint_dies_after_use) {
  char list[512];
  start_all(list, sizeof list);
  lct_client_set *s = open_live(list);
  put_all(s);
  test_lctd_kill(&lctds[2]);
  int dead_seen = 0;
  for (uint32_t i = 0; i < STORED; i++) {
    char k[64];
    key_name(k, sizeof k, (int)i);
    int dead = lct_client_set_place(s, k) == 2;
    if (dead && dead_seen++) continue; /* each call there waits out liblct's grace: one tells */
    lct_client *c;
    cr_assert_eq(lct_client_set_for_key(s, k, &c), 0, "an open connection is returned as it is");
    lct_tensor_info info;
    int rc = lct_stat(c, k, &info);
    if (dead)
      cr_assert_eq(rc, LCT_ECONN, "%s: %s", k, lct_strerror(rc));
    else
      cr_assert_eq(rc, 0, "%s: %s", k, lct_last_error(c));
  }
  cr_assert(dead_seen > 0);
  lct_client_set_close(s);
  stop_all();
}
