/* test_auth.c — credentials: auth_token_file, the access file's tenants, proofs of a challenge, what connections proved. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "access.h"
#include "auth.h"
#include "conns.h"
#include "lct_error.h"
#include "test_util.h"

static const char *path;

static void write_token_file(const char *contents, size_t len) { path = test_write_tmp("auth", contents, len); }

static void cleanup(void) {
  if (path != NULL) unlink(path);
}

TestSuite(auth, .fini = cleanup);

Test(auth, no_file_configured_no_token) {
  lct__auth a;
  char err[256] = "";
  cr_assert_eq(lct__auth_load("", &a, err, sizeof err), 0);
  cr_assert_eq(a.len, 0);
  cr_assert_eq(lct__auth_plain(&a, NULL, (const uint8_t *)"anything", 8), LCT__WHO_NONE);
}

Test(auth, first_line_is_the_token) {
  write_token_file("0123456789abcdef-secret\r\nsecond line\n", 37);
  lct__auth a;
  char err[256] = "";
  cr_assert_eq(lct__auth_load(path, &a, err, sizeof err), 0, "%s", err);
  cr_assert_eq(a.len, 23);
  const uint8_t *t = a.token;
  cr_assert(lct__token_equal(t, 23, (const uint8_t *)"0123456789abcdef-secret", 23));
  cr_assert_not(lct__token_equal(t, 23, (const uint8_t *)"0123456789abcdef-secreT", 23), "one byte differs");
  cr_assert_not(lct__token_equal(t, 23, (const uint8_t *)"0123456789abcdef-secret!", 24), "longer");
  cr_assert_not(lct__token_equal(t, 23, (const uint8_t *)"0123456789abcdef-secre", 22), "a prefix");
  cr_assert_eq(lct__auth_plain(&a, NULL, (const uint8_t *)"0123456789abcdef-secret", 23), LCT__WHO_ALL);
  cr_assert_eq(lct__auth_plain(&a, NULL, NULL, 0), LCT__WHO_NONE, "no token sent");
}

Test(auth, bad_files_name_key_path_and_rule) {
  lct__auth a;
  char err[512];
  cr_assert_eq(lct__auth_load("/nonexistent/lct/token", &a, err, sizeof err), LCT_ECONFIG);
  cr_assert(strstr(err, "auth_token_file") && strstr(err, "/nonexistent/lct/token") && strstr(err, "cannot read"), "%s",
            err);
  write_token_file("short\n", 6); /* below the minimum length */
  cr_assert_eq(lct__auth_load(path, &a, err, sizeof err), LCT_ECONFIG);
  cr_assert(strstr(err, "auth_token_file") && strstr(err, "bytes"), "%s", err);
  cr_assert_eq(a.len, 0, "a rejected file leaves no token behind");
  write_token_file("\nsecond-line-token-value\n", 25); /* empty first line */
  cr_assert_eq(lct__auth_load(path, &a, err, sizeof err), LCT_ECONFIG);
  size_t big = LCT_TOKEN_MAX + 10;
  char *longtok = malloc(big);
  memset(longtok, 'x', big);
  write_token_file(longtok, big); /* longer than any token */
  cr_assert_eq(lct__auth_load(path, &a, err, sizeof err), LCT_ECONFIG);
  free(longtok);
}

Test(auth, token_file_reader_shared_with_clients) {
  uint8_t token[LCT_TOKEN_MAX];
  size_t len = 0;
  write_token_file("abc\n", 4);
  cr_assert_eq(lct_token_file_read(path, token, &len), 0);
  cr_assert_eq(len, 3);
  cr_assert_arr_eq(token, "abc", 3);
  write_token_file("", 0);
  cr_assert_eq(lct_token_file_read(path, token, &len), LCT_EINVAL);
  cr_assert_eq(lct_token_file_read("/nonexistent/lct/token", token, &len), LCT_EIO);
}

/* ---- the access file ------------------------------------------------------ */

#define TOKEN_A "alice-token-0123456789"
#define TOKEN_B "bob-token-0123456789ab"
#define ADMIN "admin-token-0123456789"

/* Loads contents as an access file: its return code, *out and err. */
static int load_access(const char *contents, lct__access **out, char *err, size_t errlen) {
  write_token_file(contents, strlen(contents));
  chmod(path, 0600);
  return lct__access_load(path, (const uint8_t *)ADMIN, strlen(ADMIN), out, err, errlen);
}

Test(auth, access_file_tenants_sorted_by_prefix) {
  lct__access *a;
  char err[512] = "";
  cr_assert_eq(load_access("# who may use lctd\n"
                           "endpoints tcp ipc\n"
                           "tenant bob " TOKEN_B " team/bob/ unlimited   # no quota\n"
                           "\n"
                           "tenant alice\t" TOKEN_A "\tteam/alice/ 64M\n",
                           &a, err, sizeof err),
               0, "%s", err);
  cr_assert_eq(a->n, 2);
  cr_assert(a->ipc);
  cr_assert_str_eq(a->tenants[0].name, "alice");
  cr_assert_eq(a->tenants[0].quota, 64u << 20);
  cr_assert_eq(a->tenants[1].quota, LCT__QUOTA_NONE);
  const uint8_t *k = (const uint8_t *)"team/bob/w";
  cr_assert_eq(lct__access_owner(a, k, 10), &a->tenants[1]);
  cr_assert_eq(lct__access_owner(a, k, 9), &a->tenants[1], "the prefix itself is the tenant's");
  cr_assert_null(lct__access_owner(a, k, 8), "team/bob without its slash is no one's");
  cr_assert_null(lct__access_owner(a, (const uint8_t *)"team/carol/x", 12));
  cr_assert_null(lct__access_owner(a, (const uint8_t *)"zzz", 3));
  cr_assert_eq(lct__access_owner(a, (const uint8_t *)"team/alice/", 11), &a->tenants[0]);
  lct__access *same;
  cr_assert_eq(load_access("endpoints tcp ipc\ntenant alice " TOKEN_A " team/alice/ 64M\n"
                           "tenant bob " TOKEN_B " team/bob/ unlimited\n", &same, err, sizeof err), 0, "%s", err);
  cr_assert(lct__access_equal(a, same));
  lct__access_unref(same);
  cr_assert_eq(load_access("tenant alice " TOKEN_A " team/alice/ 64M\n", &same, err, sizeof err), 0, "%s", err);
  cr_assert_not(lct__access_equal(a, same));
  cr_assert_not(same->ipc, "ipc endpoints stay trusted unless the file says so");
  lct__access_unref(same);
  lct__access_unref(a);
  cr_assert_eq(lct__access_load("", NULL, 0, &a, err, sizeof err), 0);
  cr_assert_null(a, "no access file: no tenants");
}

Test(auth, access_file_errors_name_file_line_and_rule) {
  static const struct {
    const char *contents, *says;
  } bad[] = {
      {"tenant alice " TOKEN_A " a/\n", "expected 'tenant NAME TOKEN PREFIX QUOTA'"},
      {"tenant al!ce " TOKEN_A " a/ 1M\n", "tenant name"},
      {"tenant alice short a/ 1M\n", "a token of 16 to 4096 bytes"},
      {"tenant alice " TOKEN_A " a/ lots\n", "quota 'lots'"},
      {"user alice " TOKEN_A " a/ 1M\n", "'user'"},
      {"endpoints ipc\n", "'endpoints tcp'"},
      {"endpoints tcp\nendpoints tcp ipc\n", "one 'endpoints"},
      {"tenant alice " TOKEN_A " a/ 1M\ntenant alice " TOKEN_B " b/ 1M\n", "named twice"},
      {"tenant alice " TOKEN_A " a/ 1M\ntenant bob " TOKEN_A " b/ 1M\n", "the same token"},
      {"tenant alice " ADMIN " a/ 1M\n", "the token of auth_token_file"},
      {"tenant alice " TOKEN_A " team/ 1M\ntenant bob " TOKEN_B " team/bob/ 1M\n", "starts that of tenant 'bob'"},
      {"tenant alice " TOKEN_A " a/ 1M\ntenant bob " TOKEN_B " a/ 1M\n", "starts that of tenant"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
    lct__access *a = (lct__access *)1;
    char err[512] = "";
    cr_assert_eq(load_access(bad[i].contents, &a, err, sizeof err), LCT_ECONFIG, "case %zu loaded", i);
    cr_assert_null(a);
    cr_assert(strstr(err, "access_file") && strstr(err, path) && strstr(err, bad[i].says), "case %zu: %s", i, err);
  }
  char err[512];
  lct__access *a;
  cr_assert_eq(load_access("\n\ntenant alice\n", &a, err, sizeof err), LCT_ECONFIG);
  cr_assert(strstr(err, "line 3"), "%s", err);
  cr_assert_eq(lct__access_load("/nonexistent/lct/access", NULL, 0, &a, err, sizeof err), LCT_ECONFIG);
  cr_assert(strstr(err, "/nonexistent/lct/access") && strstr(err, "cannot read"), "%s", err);
  size_t big = LCT_TOKEN_MAX + LCT_KEY_MAX + 512;
  char *line = malloc(big + 1);
  memset(line, 'x', big);
  line[big] = '\0';
  cr_assert_eq(load_access(line, &a, err, sizeof err), LCT_ECONFIG);
  cr_assert(strstr(err, "line longer than"), "%s", err);
  free(line);
}

Test(auth, proofs_name_the_credential_that_made_them) {
  lct__access *acc;
  char err[512] = "";
  cr_assert_eq(load_access("tenant bob " TOKEN_B " b/ 1M\ntenant alice " TOKEN_A " a/ 1M\n", &acc, err, sizeof err),
               0, "%s", err);
  lct__auth admin = {strlen(ADMIN), {0}};
  memcpy(admin.token, ADMIN, admin.len);
  uint8_t server_nonce[LCT_AUTH_NONCE_BYTES], client_nonce[LCT_AUTH_NONCE_BYTES], proof[LCT_AUTH_PROOF_BYTES];
  cr_assert_eq(lct_auth_init(), 0);
  lct_auth_random(server_nonce, sizeof server_nonce);
  lct_auth_random(client_nonce, sizeof client_nonce);
  lct_auth_proof((const uint8_t *)TOKEN_B, strlen(TOKEN_B), server_nonce, client_nonce, proof);
  cr_assert_eq(lct__auth_prove(&admin, acc, server_nonce, client_nonce, proof), 1, "bob sorts after alice");
  lct_auth_proof((const uint8_t *)ADMIN, strlen(ADMIN), server_nonce, client_nonce, proof);
  cr_assert_eq(lct__auth_prove(&admin, acc, server_nonce, client_nonce, proof), LCT__WHO_ALL);
  cr_assert_eq(lct__auth_prove(&admin, NULL, server_nonce, client_nonce, proof), LCT__WHO_ALL);
  server_nonce[0] ^= 1; /* the proof of another challenge */
  cr_assert_eq(lct__auth_prove(&admin, acc, server_nonce, client_nonce, proof), LCT__WHO_NONE);
  cr_assert_eq(lct__auth_plain(&admin, acc, (const uint8_t *)TOKEN_A, strlen(TOKEN_A)), 0);
  cr_assert_eq(lct__auth_plain(&admin, acc, (const uint8_t *)TOKEN_A, strlen(TOKEN_A) - 1), LCT__WHO_NONE);
  lct__access_unref(acc);
}

Test(auth, quota_counts_stored_bytes_and_puts_in_progress) {
  lct__access *acc;
  char err[512] = "";
  cr_assert_eq(load_access("tenant alice " TOKEN_A " a/ 1000\n", &acc, err, sizeof err), 0, "%s", err);
  const lct__tenant *t = &acc->tenants[0];
  t->usage->stored_bytes = 600;
  char why[256];
  cr_assert_eq(lct__tenant_room(t, 400, 0, why, sizeof why), 0, "exactly the quota");
  lct__tenant_hold(t, 300);
  cr_assert_eq(lct__tenant_room(t, 400, 0, why, sizeof why), LCT_ENOSPC);
  cr_assert(strstr(why, "tenant 'alice' quota of 1000 bytes: 900 in use, this put needs 400"), "%s", why);
  cr_assert_eq(lct__tenant_room(t, 400, 300, why, sizeof why), 0, "an overwrite gives its version's bytes back");
  cr_assert_eq(lct__tenant_room(t, UINT64_MAX, 0, why, sizeof why), LCT_ENOSPC, "no overflow");
  lct__tenant_release(t, 300);
  cr_assert_eq(lct__tenant_room(t, 400, 0, why, sizeof why), 0);
  lct__access_unref(acc);
}

/* ---- what connections proved -------------------------------------------- */

Test(auth, a_challenge_answers_once) {
  lct__conns *s;
  cr_assert_eq(lct_auth_init(), 0);
  cr_assert_eq(lct__conns_create(4, 4, &s), 0);
  uint8_t n1[LCT_AUTH_NONCE_BYTES], n2[LCT_AUTH_NONCE_BYTES], got[LCT_AUTH_NONCE_BYTES];
  cr_assert_eq(lct__conns_take_challenge(s, 7, got), 0, "none outstanding");
  cr_assert_eq(lct__conns_challenge(s, 7, n1), 0);
  cr_assert_eq(lct__conns_challenge(s, 7, n2), 0);
  cr_assert(memcmp(n1, n2, sizeof n1) != 0, "a fresh nonce each time");
  cr_assert_eq(lct__conns_take_challenge(s, 8, got), 0, "another connection's is not this one's");
  cr_assert_eq(lct__conns_take_challenge(s, 7, got), 1);
  cr_assert_arr_eq(got, n2, sizeof n2, "the latest replaces the earlier");
  cr_assert_eq(lct__conns_take_challenge(s, 7, got), 0, "good for one answer");
  cr_assert_eq(lct__conns_who(s, 7), LCT__WHO_NONE);
  cr_assert_eq(lct__conns_set(s, 7, 3), 0);
  cr_assert_eq(lct__conns_who(s, 7), 3);
  cr_assert_eq(lct__conns_challenge(s, 7, n1), 0);
  cr_assert_eq(lct__conns_who(s, 7), 3, "a new challenge keeps the authentication until answered");
  cr_assert_eq(lct__conns_set(s, 7, LCT__WHO_NONE), 0);
  cr_assert_eq(lct__conns_who(s, 7), LCT__WHO_NONE, "a wrong answer ends it");
  cr_assert_eq(lct__conns_take_challenge(s, 7, got), 0);
  lct__conns_destroy(s);
}

Test(auth, connections_bounded_challenges_apart) {
  lct__conns *s;
  uint8_t nonce[LCT_AUTH_NONCE_BYTES];
  cr_assert_eq(lct__conns_create(3, 2, &s), 0);
  for (uint64_t c = 1; c <= 3; c++)
    cr_assert_eq(lct__conns_set(s, c, LCT__WHO_ALL), 0);
  for (uint64_t c = 100; c < 1100; c++) /* a flood of unauthenticated connections */
    cr_assert_eq(lct__conns_challenge(s, c, nonce), 0);
  for (uint64_t c = 1; c <= 3; c++)
    cr_assert_eq(lct__conns_who(s, c), LCT__WHO_ALL, "challenges never push out authentications");
  cr_assert_eq(lct__conns_take_challenge(s, 100, nonce), 0, "the oldest challenges were forgotten");
  cr_assert_eq(lct__conns_take_challenge(s, 1099, nonce), 1);
  cr_assert_eq(lct__conns_who(s, 1), LCT__WHO_ALL); /* used since 2 and 3 */
  cr_assert_eq(lct__conns_set(s, 4, 0), 0);
  cr_assert_eq(lct__conns_who(s, 2), LCT__WHO_NONE, "the least recently used authentication goes first");
  cr_assert_eq(lct__conns_who(s, 1), LCT__WHO_ALL);
  cr_assert_eq(lct__conns_who(s, 4), 0);
  lct__conns_clear(s);
  cr_assert_eq(lct__conns_who(s, 4), LCT__WHO_NONE);
  lct__conns_destroy(s);
  cr_assert_eq(lct__conns_create(LCT__CONNS_MAX, LCT__CHALLENGES_MAX, &s), 0);
  for (uint64_t c = 0; c < 5000; c++) /* past the first buckets: the table grows */
    cr_assert_eq(lct__conns_set(s, c << 32 | c, (int)(c % 7)), 0);
  for (uint64_t c = 0; c < 5000; c += 499)
    cr_assert_eq(lct__conns_who(s, c << 32 | c), (int)(c % 7));
  lct__conns_destroy(s);
}

Test(auth, wrong_answers_spend_a_budget_refilled_each_second) {
  lct__auth admin = {strlen(ADMIN), {0}};
  memcpy(admin.token, ADMIN, admin.len);
  cr_assert_eq(lct__auth_cost(&admin, NULL), 5, "a short token's proof hashes five blocks");
  lct__auth long_token = {LCT_TOKEN_MAX, {0}};
  cr_assert_eq(lct__auth_cost(&long_token, NULL), 5 + 65, "a 4096-byte key is hashed first");
  lct__auth_budget b = {0, 0};
  uint64_t t = 5000, taken = 0;
  while (lct__auth_budget_take(&b, t, 5))
    taken++;
  cr_assert_eq(taken, LCT__AUTH_BLOCKS_PER_S / 5, "a second's budget, full at the start");
  cr_assert(!lct__auth_budget_take(&b, t + 1, 100), "1 ms brings 65 blocks back, not 100");
  cr_assert(lct__auth_budget_take(&b, t + 2, 100), "2 ms do");
  lct__auth_budget_refund(&b, 100);
  cr_assert_eq(b.blocks, 131, "a right answer gives its cost back");
  cr_assert(lct__auth_budget_take(&b, t + 10000, 2 * LCT__AUTH_BLOCKS_PER_S), "over a second's cost: once full");
  cr_assert(!lct__auth_budget_take(&b, t + 10000, 1), "then nothing until it refills");
}
