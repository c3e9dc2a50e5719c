/* test_auth.c — the tcp token: reading auth_token_file and the constant-time comparison. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "lct_error.h"
#include "test_util.h"

static const char *path;

static void write_token_file(const char *contents, size_t len) { path = test_write_tmp("auth", contents, len); }

static void cleanup(void) {
  if (path != NULL) unlink(path);
}

TestSuite(auth, .fini = cleanup);

Test(auth, no_file_configured_lets_everything_pass) {
  lct__auth a;
  char err[256] = "";
  cr_assert_eq(lct__auth_load("", &a, err, sizeof err), 0);
  cr_assert_eq(a.len, 0);
  cr_assert(lct__auth_check(&a, NULL, 0));
  cr_assert(lct__auth_check(&a, (const uint8_t *)"anything", 8));
}

Test(auth, first_line_is_the_token) {
  write_token_file("0123456789abcdef-secret\r\nsecond line\n", 37);
  lct__auth a;
  char err[256] = "";
  cr_assert_eq(lct__auth_load(path, &a, err, sizeof err), 0, "%s", err);
  cr_assert_eq(a.len, 23);
  cr_assert(lct__auth_check(&a, (const uint8_t *)"0123456789abcdef-secret", 23));
  cr_assert_not(lct__auth_check(&a, (const uint8_t *)"0123456789abcdef-secreT", 23), "one byte differs");
  cr_assert_not(lct__auth_check(&a, (const uint8_t *)"0123456789abcdef-secret!", 24), "longer");
  cr_assert_not(lct__auth_check(&a, (const uint8_t *)"0123456789abcdef-secre", 22), "a prefix");
  cr_assert_not(lct__auth_check(&a, NULL, 0), "no token sent");
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
