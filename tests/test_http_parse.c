/* test_http_parse.c — the stats endpoint's request parser: when a head is whole, and the route of its request line. */
#include <criterion/criterion.h>

#include "http_parse.h"

/* Whether head, looked at whole, is complete. */
static int complete(const char *head) {
  size_t scanned = 0;
  return lct__http_head_complete(head, strlen(head), &scanned);
}

Test(http_parse, head_complete) {
  cr_assert(complete("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"));
  cr_assert(complete("GET /healthz HTTP/1.0\n\n"));
  cr_assert_not(complete("GET /metrics HTTP/1.1\r\nHost: x\r\n"));
  cr_assert_not(complete(""));
}

Test(http_parse, head_complete_a_byte_at_a_time) {
  /* The empty line split across reads still ends the head, at its last byte. */
  const char *heads[] = {"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", "GET /healthz HTTP/1.0\n\n"};
  for (size_t h = 0; h < 2; h++) {
    size_t len = strlen(heads[h]), scanned = 0;
    for (size_t n = 0; n < len; n++)
      cr_assert_not(lct__http_head_complete(heads[h], n, &scanned), "head %zu ended after %zu bytes", h, n);
    cr_assert_eq(scanned, len - 1, "each byte looked at once");
    cr_assert(lct__http_head_complete(heads[h], len, &scanned));
  }
}

Test(http_parse, routes) {
  cr_assert_eq(lct__http_route_of("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"), LCT__HTTP_METRICS);
  cr_assert_eq(lct__http_route_of("GET /healthz HTTP/1.0\n\n"), LCT__HTTP_HEALTHZ);
  cr_assert_eq(lct__http_route_of("GET /other HTTP/1.1\r\n\r\n"), LCT__HTTP_NOT_FOUND);
  cr_assert_eq(lct__http_route_of("POST /metrics HTTP/1.1\r\n\r\n"), LCT__HTTP_METHOD);
  cr_assert_eq(lct__http_route_of("GET /metrics HTTP/2\r\n\r\n"), LCT__HTTP_BAD);
  cr_assert_eq(lct__http_route_of("GET  /metrics HTTP/1.1\r\n\r\n"), LCT__HTTP_BAD, "two blanks");
  cr_assert_eq(lct__http_route_of(" GET /metrics HTTP/1.1\r\n\r\n"), LCT__HTTP_BAD, "a leading blank");
  cr_assert_eq(lct__http_route_of("GET /metrics HTTP/1.1 x\r\n\r\n"), LCT__HTTP_BAD, "a fourth token");
  cr_assert_eq(lct__http_route_of("GETTING /metrics HTTP/1.1\r\n\r\n"), LCT__HTTP_METHOD);
}

/* A request line without its version took one from a later line (found by fuzz_http). */
Test(http_parse, version_on_a_later_line) {
  cr_assert_eq(lct__http_route_of("GET /metrics\r\n\r\nHTTP/1.1\r"), LCT__HTTP_BAD);
  cr_assert_eq(lct__http_route_of("GET /metrics\r\nHost: HTTP/1.1\r\n\r\n"), LCT__HTTP_BAD);
  cr_assert_eq(lct__http_route_of("GET\n/metrics\nHTTP/1.1\n\n"), LCT__HTTP_BAD);
}

Test(http_parse, long_lines) {
  char head[600];
  memset(head, 'a', sizeof head);
  memcpy(head, "GET /", 5);
  strcpy(head + 500, " HTTP/1.1\r\n\r\n");
  cr_assert_eq(lct__http_route_of(head), LCT__HTTP_BAD, "a path beyond 255 bytes");
}
