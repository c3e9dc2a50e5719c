/* http_parse.c — the stats endpoint's request parser: whether a request head is whole, and what it asks for. */
#include "http_parse.h"

#include <stdio.h>
#include <string.h>

int lct__http_head_complete(const char *received, size_t len, size_t *scanned) {
  const char *b = received;
  for (size_t i = *scanned; i < len; i++)
    if (b[i] == '\n' && i > 0 && (b[i - 1] == '\n' || (i > 1 && b[i - 1] == '\r' && b[i - 2] == '\n')))
      return 1;
  *scanned = len;
  return 0;
}

lct__http_route lct__http_route_of(const char *head) {
  char method[8], path[256], version[16], line[sizeof method + sizeof path + sizeof version];
  /* The request line alone: a token on a later line must not complete it. */
  size_t len = strcspn(head, "\r\n");
  if (len >= sizeof line)
    return LCT__HTTP_BAD;
  memcpy(line, head, len);
  line[len] = '\0';
  if (sscanf(line, "%7s %255s %15s", method, path, version) != 3 || strncmp(version, "HTTP/1.", 7) != 0 ||
      len != strlen(method) + strlen(path) + strlen(version) + 2)
    return LCT__HTTP_BAD;
  if (strcmp(method, "GET") != 0)
    return LCT__HTTP_METHOD;
  if (strcmp(path, "/healthz") == 0)
    return LCT__HTTP_HEALTHZ;
  if (strcmp(path, "/metrics") == 0)
    return LCT__HTTP_METRICS;
  return LCT__HTTP_NOT_FOUND;
}
