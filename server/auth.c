/* auth.c — the shared token of tcp endpoints: read from auth_token_file, compared in constant time. */
#include "auth.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "lct_error.h"

int lct__auth_load(const char *path, lct__auth *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  if (*path == '\0')
    return 0;
  int rc = lct_token_file_read(path, out->token, &out->len);
  if (rc == LCT_EIO) {
    snprintf(err, errlen, "auth_token_file: '%s' is not allowed: cannot read it (%s)", path, strerror(errno));
    return LCT_ECONFIG;
  }
  if (rc != 0 || out->len < LCT__TOKEN_MIN) {
    memset(out, 0, sizeof *out);
    snprintf(err, errlen,
             "auth_token_file: '%s' is not allowed: expected a file whose first line is a token of %d to %d bytes",
             path, LCT__TOKEN_MIN, LCT_TOKEN_MAX);
    return LCT_ECONFIG;
  }
  return 0;
}

int lct__auth_check(const lct__auth *a, const uint8_t *given, size_t len) {
  if (a->len == 0)
    return 1;
  /* Every byte of the token is visited whatever given holds. */
  volatile uint8_t diff = len != a->len;
  for (size_t i = 0; i < a->len; i++)
    diff |= (uint8_t)(a->token[i] ^ (given != NULL && i < len ? given[i] : 0));
  return diff == 0;
}
