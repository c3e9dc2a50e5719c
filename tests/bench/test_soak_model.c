/* test_soak_model.c — lct-bench soak's model: what it accepts as a key's state before and after a crash, and what it rejects. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "bench_soak.h"
#include "lct_checksum.h"

static uint8_t bytes[4096], scratch[4096];

/* A bf16 tensor of key k's next put, its contents in bytes. */
static soak_tensor next(soak_key *k, uint64_t version) {
  soak_tensor t = {.seq = ++k->seq, .dtype = LCT_DTYPE_BF16, .ndim = 1, .shape = {2048}, .bytes = 4096};
  soak_fill(k->id, t.seq, t.dtype, t.bytes, bytes);
  t.crc = lct_crc32c(0, bytes, t.bytes);
  t.version = version;
  return t;
}

/* What a server holding t answers to a get. */
static lct_tensor_info info_of(const soak_tensor *t) {
  lct_tensor_info i = {.dtype = (lct_dtype)t->dtype, .ndim = 1, .shape = {2048}, .raw_bytes = t->bytes,
                       .version = t->version, .checksum = t->crc};
  return i;
}

static long match(soak_key *k, size_t lo, const soak_tensor *t) {
  if (t == NULL) return soak_key_match(k, lo, NULL, NULL, scratch);
  lct_tensor_info i = info_of(t);
  soak_fill(k->id, t->seq, t->dtype, t->bytes, bytes);
  return soak_key_match(k, lo, &i, bytes, scratch);
}

Test(soak_model, contents_are_deterministic_and_distinct) {
  static uint8_t a[4096], b[4096];
  for (int dtype = 0; dtype < LCT_DTYPE_COUNT; dtype++) {
    soak_fill(7, 3, dtype, sizeof a, a);
    soak_fill(7, 3, dtype, sizeof b, b);
    cr_assert_eq(memcmp(a, b, sizeof a), 0);
    soak_fill(7, 4, dtype, sizeof b, b);
    cr_assert_neq(memcmp(a, b, sizeof a), 0, "another put of the key");
    soak_fill(8, 3, dtype, sizeof b, b);
    cr_assert_neq(memcmp(a, b, sizeof a), 0, "another key");
  }
}

Test(soak_model, answered_writes_are_exact) {
  soak_key k;
  soak_key_init(&k, 1, "k");
  cr_assert_eq(match(&k, k.from, NULL), 0, "a new key is absent");
  soak_tensor a = next(&k, 1);
  soak_key_write(&k, &a, 1, 0);
  soak_tensor b = next(&k, 2);
  soak_key_write(&k, &b, 1, 0);
  cr_assert_eq(match(&k, k.from, &b), 2);
  cr_assert_eq(match(&k, k.from, &a), -1, "an older tensor is wrong");
  cr_assert_eq(match(&k, k.from, NULL), -1, "a lost one too");
  lct_tensor_info i = info_of(&b);
  soak_fill(k.id, b.seq, b.dtype, b.bytes, bytes);
  bytes[100] ^= 1;
  cr_assert_eq(soak_key_match(&k, k.from, &i, bytes, scratch), -1, "one flipped bit");
  i.version = 9;
  cr_assert_eq(soak_key_match(&k, k.from, &i, NULL, NULL), -1, "another version");
  soak_key_free(&k);
}

Test(soak_model, an_unknown_outcome_allows_both_until_seen) {
  soak_key k;
  soak_key_init(&k, 2, "k");
  soak_tensor a = next(&k, 1);
  soak_key_write(&k, &a, 1, 0);
  soak_tensor b = next(&k, 0);
  soak_key_write(&k, &b, 0, 0); /* a timeout: applied or not */
  cr_assert_eq(match(&k, k.from, &a), 1);
  cr_assert_eq(match(&k, k.from, &b), 2);
  soak_key_seen(&k, 1, 1, 5);
  cr_assert_eq(match(&k, k.from, &b), -1, "seen without it: never applied");
  soak_key_free(&k);
}

/* Stamps: a write answered before save g was asked for has stamp < g. */
Test(soak_model, a_crash_keeps_the_last_completed_save) {
  soak_key k;
  soak_key_init(&k, 3, "k");
  soak_tensor a = next(&k, 1), b = next(&k, 2), c = next(&k, 3);
  soak_key_write(&k, &a, 1, 0);
  soak_key_write(&k, &b, 1, 1);
  soak_key_floor(&k, 2, 1); /* save 2 completed: b is on disk */
  soak_key_write(&k, &c, 1, 2);
  cr_assert_eq(match(&k, k.floor, &a), -1, "older than the save");
  cr_assert_eq(match(&k, k.floor, NULL), -1, "lost");
  cr_assert_geq(match(&k, k.floor, &b), 0, "the save's");
  cr_assert_geq(match(&k, k.floor, &c), 0, "a later save cut by the crash may have written it");
  soak_key_floor(&k, 3, 1);
  cr_assert_eq(match(&k, k.floor, &b), -1, "save 3 has c");
  soak_key_free(&k);
}

Test(soak_model, deletes_are_states_too) {
  soak_key k;
  soak_key_init(&k, 4, "k");
  soak_tensor a = next(&k, 1), absent = {0};
  soak_key_write(&k, &a, 1, 0);
  soak_key_floor(&k, 1, 1);
  soak_key_write(&k, &absent, 1, 1);
  cr_assert_geq(match(&k, k.from, NULL), 0);
  cr_assert_eq(match(&k, k.from, &a), -1);
  cr_assert_geq(match(&k, k.floor, &a), 0, "the delete was not saved");
  soak_key_free(&k);
}
