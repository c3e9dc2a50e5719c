/* auth.h — the shared token of tcp endpoints: read from auth_token_file, compared in constant time. */
#ifndef LCT_SERVER_AUTH_H
#define LCT_SERVER_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "lct_wire.h"

#define LCT__TOKEN_MIN 16 /* shortest token accepted: guessing must not be practical */

typedef struct lct__auth {
  size_t len; /* 0: no token configured, every request passes */
  uint8_t token[LCT_TOKEN_MAX];
} lct__auth;

/* Reads the token: the first line of path, without its line end. An empty
 * path gives no token. Returns 0 or LCT_ECONFIG with a one-line message
 * naming auth_token_file, the path and what is expected. */
int lct__auth_load(const char *path, lct__auth *out, char *err, size_t errlen);

/* Whether given (len bytes, NULL when absent) matches the token, in time
 * that depends on the lengths only. Always 1 when no token is configured. */
int lct__auth_check(const lct__auth *a, const uint8_t *given, size_t len);

#endif
