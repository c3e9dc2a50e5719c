/* fuzz_http.c — libFuzzer target: the stats endpoint's request parser on arbitrary bytes, as http.c holds them. */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http_parse.h"

/* The head names path as its request line's second token, after GET and before HTTP/1.x. */
static int lct__asks_for(const char *head, const char *path) {
  size_t n = strlen(path);
  return strncmp(head, "GET", 3) == 0 && isspace((unsigned char)head[3]) && strncmp(head + 4, path, n) == 0 &&
         isspace((unsigned char)head[4 + n]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char head[8192]; /* http.c's buffer: bytes received, NUL-terminated */
  size_t n = size < sizeof head - 1 ? size : sizeof head - 1;
  memcpy(head, data, n);
  head[n] = '\0';
  /* Looked at in two reads, as http.c may receive it, the head ends where it does in one. */
  size_t whole = 0, parts = 0;
  int ended = lct__http_head_complete(head, n, &whole);
  if ((lct__http_head_complete(head, n / 2, &parts) || lct__http_head_complete(head, n, &parts)) != ended)
    abort();
  switch (lct__http_route_of(head)) {
  case LCT__HTTP_HEALTHZ:
    if (!lct__asks_for(head, "/healthz")) abort();
    break;
  case LCT__HTTP_METRICS:
    if (!lct__asks_for(head, "/metrics")) abort();
    break;
  case LCT__HTTP_BAD:
  case LCT__HTTP_METHOD:
  case LCT__HTTP_NOT_FOUND:
    break;
  default:
    abort();
  }
  return 0;
}
