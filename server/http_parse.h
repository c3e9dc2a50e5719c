/* http_parse.h — the stats endpoint's request parser: whether a request head is whole, and what it asks for. */
#ifndef LCT_SERVER_HTTP_PARSE_H
#define LCT_SERVER_HTTP_PARSE_H

#include <stddef.h>

/* What a request head asks for, and so the answer. */
typedef enum {
  LCT__HTTP_BAD,       /* 400: not METHOD PATH HTTP/1.x */
  LCT__HTTP_METHOD,    /* 405: not GET */
  LCT__HTTP_NOT_FOUND, /* 404: another path */
  LCT__HTTP_HEALTHZ,   /* GET /healthz */
  LCT__HTTP_METRICS,   /* GET /metrics */
} lct__http_route;

/* Whether the len bytes received so far hold a whole request head: an empty
 * line ("\r\n\r\n" or "\n\n") ends it. *scanned counts the bytes earlier
 * calls on the same head have looked at (0 at first): each byte is looked at
 * once, so a head that arrives a byte at a time costs its length, not its
 * square. */
int lct__http_head_complete(const char *received, size_t len, size_t *scanned);

/* The route of a whole request head (NUL-terminated) by its request line
 * alone: METHOD PATH HTTP/1.x, one blank between them. */
lct__http_route lct__http_route_of(const char *head);

#endif
