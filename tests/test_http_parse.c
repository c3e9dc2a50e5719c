/* test_http_parse.c — the stats endpoint's request parser: when a head is whole, and the route of its request line. */
#include <criterion/criterion.h>

#include "http_parse.h"

Test(http_parse, head_complete) {
  cr_assert(lct__http_head_complete("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"));
  cr_assert(lct__http_head_complete("GET /healthz HTTP/1.0\n\n"));
  cr_assert_not(lct__http_head_complete("GET /metrics HTTP/1.1\r\nHost: x\r\n"));
  cr_assert_not(lct__http_head_complete(""));
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
