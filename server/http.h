/* http.h — the HTTP stats endpoint: GET /metrics answers lctd's counters as Prometheus text, GET /healthz liveness. */
#ifndef LCT_SERVER_HTTP_H
#define LCT_SERVER_HTTP_H

#include <stddef.h>

#include "server.h"

typedef struct lct__http lct__http;

/* Listens on addr ("HOST:PORT", IPv4 or IPv6 literal) on the server's loop.
 * Returns 0 or LCT_ECONFIG / LCT_EIO with a message. */
int lct__http_open(lct__server *srv, const char *addr, lct__http **out, char *err, size_t errlen);
/* Closes the listener and every connection; the loop frees them. */
void lct__http_stop(lct__http *h);

#endif
