/* test_stats.c — lctd's counters: per-op and per-status counting, totals, Prometheus rendering. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "lct_error.h"
#include "stats.h"

Test(stats, count_and_render) {
  lct__stats st;
  memset(&st, 0, sizeof st);
  lct__stats_count(&st, 7, 0);          /* get ok */
  lct__stats_count(&st, 7, 0);
  lct__stats_count(&st, 7, 9);          /* get ENOENT */
  lct__stats_count(&st, 0, 13);         /* garbage frame: EPROTO */
  lct__stats_count(&st, 999, 14);       /* out-of-range op goes to slot 0 */
  lct__stats_count(&st, 2, 1000);       /* out-of-range status is clamped */
  cr_assert_eq(st.requests, 6);
  cr_assert_eq(st.errors, 4);
  st.tensors = 3;
  st.stored_bytes = 12345;
  st.codebook_rebuilds = 2;
  size_t len;
  char *text = lct__stats_render(&st, "cpu", &len);
  cr_assert_not_null(text);
  cr_assert_eq(strlen(text), len);
  cr_assert(strstr(text, "lct_requests_total{op=\"get\",status=\"ok\"} 2\n"), "%s", text);
  cr_assert(strstr(text, "lct_requests_total{op=\"get\",status=\"LCT_ENOENT\"} 1\n"));
  cr_assert(strstr(text, "lct_requests_total{op=\"invalid\",status=\"LCT_EPROTO\"} 1\n"));
  cr_assert(strstr(text, "lct_requests_total{op=\"invalid\",status=\"LCT_EOP\"} 1\n"));
  cr_assert(strstr(text, "lct_tensors 3\n"));
  cr_assert(strstr(text, "lct_stored_bytes 12345\n"));
  cr_assert(strstr(text, "lct_codebook_rebuilds_total 2\n"));
  cr_assert(strstr(text, "lct_build_info{backend=\"cpu\"} 1\n"));
  cr_assert(strstr(text, "# TYPE lct_tensors gauge\n"));
  cr_assert_null(strstr(text, "op=\"put\",status=\"ok\""), "zero counters are not rendered");
  free(text);
}
