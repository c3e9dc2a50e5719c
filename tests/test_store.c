/* test_store.c — the tensor store: install and versions, replace and remove with pool accounting, refcounts, listing. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store.h"

static lct__pool *pool;
static lct__stats stats;
static lct__store *store;

static void setup(void) {
  lct__backend be;
  cr_assert_eq(lct__backend_cpu_open(1 << 30, &be), 0);
  cr_assert_eq(lct__pool_create(&be, &pool), 0);
  memset(&stats, 0, sizeof stats);
  cr_assert_eq(lct__store_create(&stats, &store), 0);
}

static void teardown(void) {
  lct__store_destroy(store);
  cr_assert_eq(lct__pool_used(pool), 0, "every segment went back to the pool");
  lct__pool_destroy(pool);
}

/* An entry for key with one segment of blob_bytes pool bytes. */
static lct__entry *entry(const char *key, uint64_t raw, size_t blob_bytes) {
  lct__entry *e;
  cr_assert_eq(lct__entry_new(pool, (const uint8_t *)key, strlen(key), 1, &e), 0);
  cr_assert_eq(lct__pool_alloc(pool, blob_bytes, &e->segments[0].blob), 0);
  e->segments[0].blob_bytes = e->segments[0].alloc_bytes = blob_bytes;
  e->segments[0].raw_bytes = raw;
  e->raw_bytes = raw;
  e->stored_bytes = blob_bytes;
  e->dtype = LCT_DTYPE_RAW;
  return e;
}

static lct__entry *find(const char *key) {
  return lct__store_find(store, (const uint8_t *)key, strlen(key));
}

TestSuite(store, .init = setup, .fini = teardown);

Test(store, install_find_versions) {
  cr_assert_null(find("a"));
  lct__store_install(store, entry("a", 100, 60));
  lct__store_install(store, entry("b", 200, 150));
  cr_assert_eq(find("a")->version, 1);
  cr_assert_eq(find("b")->version, 2);
  cr_assert_eq(stats.tensors, 2);
  cr_assert_eq(stats.raw_bytes, 300);
  cr_assert_eq(stats.stored_bytes, 210);
  cr_assert_eq(lct__pool_used(pool), 210);

  lct__store_install(store, entry("a", 400, 300));
  cr_assert_eq(find("a")->version, 3, "a key's versions increase");
  cr_assert_eq(find("a")->raw_bytes, 400);
  cr_assert_eq(stats.tensors, 2);
  cr_assert_eq(stats.raw_bytes, 600);
  cr_assert_eq(lct__pool_used(pool), 450, "the replaced version was freed");
  cr_assert_null(find("ab"));
  cr_assert_null(find(""));
}

Test(store, remove_and_reput) {
  lct__store_install(store, entry("k", 10, 10));
  cr_assert_eq(lct__store_remove(store, (const uint8_t *)"k", 1), 0);
  cr_assert_eq(lct__store_remove(store, (const uint8_t *)"k", 1), LCT_ENOENT);
  cr_assert_null(find("k"));
  cr_assert_eq(stats.tensors, 0);
  cr_assert_eq(stats.stored_bytes, 0);
  cr_assert_eq(lct__pool_used(pool), 0);
  lct__store_install(store, entry("k", 10, 10));
  cr_assert_eq(find("k")->version, 2, "a re-put key never repeats a version");
}

Test(store, reader_reference_outlives_replace) {
  lct__store_install(store, entry("k", 10, 64));
  lct__entry *old = find("k");
  lct__entry_ref(old); /* as a get job does */
  lct__store_install(store, entry("k", 20, 32));
  cr_assert_eq(lct__pool_used(pool), 96, "the old version stays while referenced");
  cr_assert_eq(old->raw_bytes, 10);
  lct__store_remove(store, (const uint8_t *)"k", 1);
  cr_assert_eq(lct__pool_used(pool), 64);
  lct__entry_unref(old);
  cr_assert_eq(lct__pool_used(pool), 0);
}

Test(store, many_keys_grow) {
  char key[32];
  for (int i = 0; i < 5000; i++) {
    snprintf(key, sizeof key, "t/%05d", i);
    lct__store_install(store, entry(key, 1, 1));
  }
  cr_assert_eq(lct__store_count(store), 5000);
  for (int i = 0; i < 5000; i += 7) {
    snprintf(key, sizeof key, "t/%05d", i);
    cr_assert_not_null(find(key), "%s", key);
  }
}

Test(store, list_order_prefix_cursor) {
  const char *keys[] = {"m/b", "m/a", "w/1", "m/c/x", "m", "z", "m/c", "a"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) lct__store_install(store, entry(keys[i], 1, 1));
  lct__entry *out[16];
  int more;
  size_t n = lct__store_list(store, NULL, 0, NULL, 0, 16, out, &more);
  cr_assert_eq(n, 8);
  cr_assert_not(more);
  const char *sorted[] = {"a", "m", "m/a", "m/b", "m/c", "m/c/x", "w/1", "z"};
  for (size_t i = 0; i < n; i++)
    cr_assert(out[i]->key_len == strlen(sorted[i]) && memcmp(out[i]->key, sorted[i], out[i]->key_len) == 0,
              "position %zu", i);

  n = lct__store_list(store, (const uint8_t *)"m/", 2, NULL, 0, 2, out, &more);
  cr_assert_eq(n, 2);
  cr_assert(more);
  cr_assert_eq(memcmp(out[0]->key, "m/a", 3), 0);
  cr_assert_eq(memcmp(out[1]->key, "m/b", 3), 0);
  n = lct__store_list(store, (const uint8_t *)"m/", 2, out[1]->key, out[1]->key_len, 2, out, &more);
  cr_assert_eq(n, 2);
  cr_assert_not(more, "m/c and m/c/x were the last two");
  cr_assert(out[0]->key_len == 3 && memcmp(out[0]->key, "m/c", 3) == 0);
  cr_assert(out[1]->key_len == 5 && memcmp(out[1]->key, "m/c/x", 5) == 0);

  n = lct__store_list(store, (const uint8_t *)"q", 1, NULL, 0, 4, out, &more);
  cr_assert_eq(n, 0);
  cr_assert_not(more);
}

Test(store, list_pages_cover_everything_once) {
  char key[32];
  for (int i = 0; i < 1000; i++) {
    snprintf(key, sizeof key, "k%04d", (i * 7919) % 1000);
    lct__store_install(store, entry(key, 1, 1));
  }
  lct__entry *out[64];
  uint8_t cursor[32];
  size_t clen = 0, total = 0;
  int more = 1, pages = 0;
  while (more) {
    size_t n = lct__store_list(store, NULL, 0, clen ? cursor : NULL, clen, 64, out, &more);
    for (size_t i = 0; i < n; i++) {
      snprintf(key, sizeof key, "k%04zu", total + i);
      cr_assert(out[i]->key_len == 5 && memcmp(out[i]->key, key, 5) == 0, "page %d entry %zu", pages, i);
    }
    total += n;
    memcpy(cursor, out[n - 1]->key, out[n - 1]->key_len);
    clen = out[n - 1]->key_len;
    pages++;
  }
  cr_assert_eq(total, 1000);
  cr_assert_eq(pages, 16);
}

static void count_entry(void *arg, lct__entry *e) { (*(int *)arg)++; }

Test(store, restore_keeps_versions) {
  lct__entry *e = entry("a", 10, 4);
  e->version = 41;
  lct__store_restore(store, e);
  cr_assert_eq(find("a")->version, 41);
  e = entry("a", 10, 4);
  e->version = 7;
  lct__store_restore(store, e); /* older than the one present: dropped */
  cr_assert_eq(find("a")->version, 41);
  lct__store_install(store, entry("b", 10, 4));
  cr_assert_eq(find("b")->version, 42, "new versions continue above the restored ones");
  cr_assert_eq(stats.tensors, 2);
  cr_assert_eq(stats.dtype_tensors[LCT_DTYPE_RAW], 2);
  cr_assert_eq(stats.dtype_stored[LCT_DTYPE_RAW], 8);
  int n = 0;
  lct__store_each(store, count_entry, &n);
  cr_assert_eq(n, 2);
}
