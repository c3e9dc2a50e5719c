/* inflight.h — the bounds on work in flight: requests and their bytes, per connection and over all; reading pauses at the total. */
#ifndef LCT_SERVER_INFLIGHT_H
#define LCT_SERVER_INFLIGHT_H

#include <stddef.h>
#include <stdint.h>

#include "server.h"

/* One connection's requests in flight; exists while it has any. */
typedef struct lct__conn_load lct__conn_load;

/* The bounds of the server's configuration (max_requests, request_memory,
 * max_client_requests, client_request_memory), read at each check so that a
 * reload applies at once. */
int lct__inflight_create(lct__server *srv, lct__inflight **out);
/* After the last request has ended. */
void lct__inflight_destroy(lct__inflight *in);

/* Counts a request of bytes (its message) from connection conn: 0 and its
 * connection's record in *load, or LCT_EBUSY with why naming the bound it
 * would pass. A request alone in flight on its connection, or in the server,
 * is never refused for its bytes there (the frame size bounds those). */
int lct__inflight_admit(lct__inflight *in, uint64_t conn, uint64_t bytes, lct__conn_load **load, char *why,
                        size_t cap);
/* Adds bytes to an admitted request (a reply it builds): 0, or LCT_EBUSY with
 * why as for lct__inflight_admit, and nothing added. */
int lct__inflight_grow(lct__inflight *in, lct__conn_load *load, uint64_t bytes, char *why, size_t cap);
/* Ends an admitted request that held bytes in all. */
void lct__inflight_end(lct__inflight *in, lct__conn_load *load, uint64_t bytes);

#endif
