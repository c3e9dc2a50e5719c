/* conns.h — what each connection has proven: its challenge outstanding, the credential it authenticated with. */
#ifndef LCT_SERVER_CONNS_H
#define LCT_SERVER_CONNS_H

#include <stddef.h>
#include <stdint.h>

#include "lct_auth.h"

/* nanomsg does not say when a connection closes, so the table is bounded:
 * past a bound the least recently used record is forgotten, and its
 * connection, if still open, authenticates again. Connections with a
 * challenge only have a bound of their own, so that unauthenticated peers
 * cannot push out those that authenticated. */
#define LCT__CONNS_MAX 65536      /* authenticated connections remembered */
#define LCT__CHALLENGES_MAX 4096  /* connections with a challenge outstanding and no authentication */

typedef struct lct__conns lct__conns;

int lct__conns_create(size_t max_authenticated, size_t max_challenged, lct__conns **out);
void lct__conns_destroy(lct__conns *s);

/* The credential (auth.h's LCT__WHO_*, or a tenant's index) conn
 * authenticated with; LCT__WHO_NONE if it has not. */
int lct__conns_who(lct__conns *s, uint64_t conn);
/* Draws a new challenge for conn into nonce, replacing any outstanding one;
 * an authentication conn has stays until the challenge is answered. 0 or
 * LCT_ENOMEM. */
int lct__conns_challenge(lct__conns *s, uint64_t conn, uint8_t nonce[LCT_AUTH_NONCE_BYTES]);
/* Whether conn has a challenge outstanding. */
int lct__conns_has_challenge(lct__conns *s, uint64_t conn);
/* Takes conn's outstanding challenge, which is good for one answer: 1 and
 * the nonce, or 0 when there is none. */
int lct__conns_take_challenge(lct__conns *s, uint64_t conn, uint8_t nonce[LCT_AUTH_NONCE_BYTES]);
/* Records that conn authenticated as who; LCT__WHO_NONE forgets conn. 0 or
 * LCT_ENOMEM. */
int lct__conns_set(lct__conns *s, uint64_t conn, int who);
/* Forgets every connection (credentials changed: all authenticate again). */
void lct__conns_clear(lct__conns *s);

#endif
