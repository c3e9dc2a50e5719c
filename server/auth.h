/* auth.h — credentials: the token of auth_token_file, and which credential a challenge's proof or a plain token is. */
#ifndef LCT_SERVER_AUTH_H
#define LCT_SERVER_AUTH_H

#include <stddef.h>
#include <stdint.h>

#include "lct_wire.h"

#define LCT__TOKEN_MIN 16 /* shortest token accepted: guessing must not be practical */

/* Who a connection or request is: a tenant's index in the access file's
 * (sorted) tenants, or one of these. */
#define LCT__WHO_NONE (-2) /* nobody: no credential matched */
#define LCT__WHO_ALL (-1)  /* every key: auth_token_file's token, or an endpoint that needs none */

typedef struct lct__access lct__access; /* access.h */

typedef struct lct__auth {
  size_t len; /* 0: no token configured */
  uint8_t token[LCT_TOKEN_MAX];
} lct__auth;

/* Reads the token: the first line of path, without its line end. An empty
 * path gives no token. Returns 0 or LCT_ECONFIG with a one-line message
 * naming auth_token_file, the path and what is expected. */
int lct__auth_load(const char *path, lct__auth *out, char *err, size_t errlen);

/* Whether given (glen bytes) is token (len bytes), in time that depends on
 * the lengths only. */
int lct__token_equal(const uint8_t *token, size_t len, const uint8_t *given, size_t glen);

/* Whose token made proof for the challenge server_nonce and the client's
 * client_nonce: LCT__WHO_ALL (a's), a tenant of acc (NULL: none), or
 * LCT__WHO_NONE. Every credential's proof is computed and compared in
 * constant time, so the time says nothing of which matched. */
int lct__auth_prove(const lct__auth *a, const lct__access *acc, const uint8_t server_nonce[LCT_AUTH_NONCE_BYTES],
                    const uint8_t client_nonce[LCT_AUTH_NONCE_BYTES], const uint8_t proof[LCT_AUTH_PROOF_BYTES]);

/* Whose token given is (a client before AUTH, with auth_plain_token on), as
 * lct__auth_prove answers. */
int lct__auth_plain(const lct__auth *a, const lct__access *acc, const uint8_t *given, size_t len);

/* What checking one answer costs: the SHA-256 blocks lct__auth_prove hashes,
 * a proof per credential (a long token hashes more). */
uint64_t lct__auth_cost(const lct__auth *a, const lct__access *acc);

/* Wrong answers cost the loop thread a proof per credential, and an attacker
 * needs no token to send them: their work is bounded by a budget of
 * LCT__AUTH_BLOCKS_PER_S hash blocks a second (at most one second's saved).
 * An answer is checked only when the budget holds its cost; a right one gives
 * the cost back. */
#define LCT__AUTH_BLOCKS_PER_S 65536 /* about 20 ms of one core a second */
typedef struct lct__auth_budget {
  uint64_t blocks; /* what wrong answers may still cost */
  uint64_t at_ms;  /* when it was last refilled */
} lct__auth_budget;
/* Refills b for the time since its last refill (now_ms, a monotonic clock) and
 * takes cost from it: 1, or 0 (nothing taken) when it holds less. */
int lct__auth_budget_take(lct__auth_budget *b, uint64_t now_ms, uint64_t cost);
void lct__auth_budget_refund(lct__auth_budget *b, uint64_t cost);

#endif
