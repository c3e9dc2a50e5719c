/* handlers.h — lctd request handlers: parse a frame, dispatch by op, reply. */
#ifndef LCT_SERVER_HANDLERS_H
#define LCT_SERVER_HANDLERS_H

#include <stddef.h>

/* The transport's callback (lct__on_message) with the lct__server as arg:
 * every message gets exactly one reply, an error reply for garbage. */
void lct__handle_message(void *srv, int sock, void *msg, size_t len, void *control);

struct lct__server;
/* Refreshes the pool gauges and renders every counter as Prometheus text
 * (malloc'd; NULL when out of memory): the STATS payload and GET /metrics. */
char *lct__stats_text(struct lct__server *srv, size_t *len);

/* For a stop that cannot wait for the loop: waits for the save being
 * written, if any, to finish its files and marks what it wrote (its SAVE
 * requests go unanswered). The loop must not run again after it. */
void lct__save_abandon(struct lct__server *srv);

#endif
