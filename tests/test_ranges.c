/* test_ranges.c — the free ranges under the cuda pool: best fit, coalescing, exhaustion, and a random model check. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "lct_error.h"
#include "ranges.h"
#include "test_util.h"

/* The ranges are sorted, disjoint, never adjacent, and add up to free. */
static void check_invariants(const lct__ranges *f, uint64_t free_bytes) {
  uint64_t sum = 0;
  for (size_t i = 0; i < f->n; i++) {
    cr_assert_gt(f->r[i].len, 0);
    if (i > 0) cr_assert_gt(f->r[i].off, f->r[i - 1].off + f->r[i - 1].len, "range %zu is apart from the one before", i);
    sum += f->r[i].len;
  }
  cr_assert_eq(sum, free_bytes);
}

Test(ranges, take_give_and_coalesce) {
  lct__ranges f = {0};
  uint64_t a, b, c, d;
  cr_assert_eq(lct__ranges_give(&f, 0, 1000), 0);
  cr_assert_eq(lct__ranges_take(&f, 100, &a), 0);
  cr_assert_eq(lct__ranges_take(&f, 200, &b), 0);
  cr_assert_eq(lct__ranges_take(&f, 300, &c), 0);
  cr_assert_eq(a, 0);
  cr_assert_eq(b, 100);
  cr_assert_eq(c, 300);
  check_invariants(&f, 400);
  cr_assert_eq(lct__ranges_take(&f, 401, &d), LCT_ENOSPC);
  cr_assert_eq(lct__ranges_give(&f, b, 200), 0); /* a hole between a and c */
  check_invariants(&f, 600);
  cr_assert_eq(f.n, 2);
  cr_assert_eq(lct__ranges_give(&f, a, 100), 0); /* joins the hole */
  cr_assert_eq(f.n, 2);
  cr_assert_eq(lct__ranges_give(&f, c, 300), 0); /* joins both sides: one range again */
  cr_assert_eq(f.n, 1);
  cr_assert_eq(f.r[0].off, 0);
  cr_assert_eq(f.r[0].len, 1000);
  /* Exactly the whole: the last range goes. */
  cr_assert_eq(lct__ranges_take(&f, 1000, &d), 0);
  cr_assert_eq(f.n, 0);
  cr_assert_eq(lct__ranges_take(&f, 1, &d), LCT_ENOSPC);
  lct__ranges_free(&f);
}

Test(ranges, best_fit_fills_the_smallest_hole) {
  /* Blobs shrunk after encoding leave small holes behind; a take goes to the
   * smallest that holds it (the lowest of equals), so holes fill first. */
  lct__ranges f = {0};
  cr_assert_eq(lct__ranges_give(&f, 0, 100000), 0);
  uint64_t off[50];
  for (int i = 0; i < 50; i++) cr_assert_eq(lct__ranges_take(&f, 1000, &off[i]), 0);
  for (int i = 0; i < 50; i++) cr_assert_eq(lct__ranges_give(&f, off[i] + 1000 - 10 * (i + 1), 10 * (i + 1)), 0); /* shrunk */
  cr_assert_eq(f.n, 50, "49 holes, and the last one joined to the tail");
  uint64_t next;
  cr_assert_eq(lct__ranges_take(&f, 1000, &next), 0);
  cr_assert_eq(next, 49 * 1000 + 500, "no hole holds 1000: the tail");
  cr_assert_eq(lct__ranges_take(&f, 95, &next), 0);
  cr_assert_eq(next, 9 * 1000 + 900, "the hole of 100 bytes, the smallest that holds 95");
  cr_assert_eq(lct__ranges_take(&f, 5, &next), 0);
  cr_assert_eq(next, 9 * 1000 + 995, "its rest of 5 bytes is now the smallest");
  cr_assert_eq(lct__ranges_take(&f, 10, &next), 0);
  cr_assert_eq(next, 990, "the first hole, of 10 bytes");
  check_invariants(&f, 100000 - 50 * 1000 + 10 * 50 * 51 / 2 - 1000 - 110);
  lct__ranges_free(&f);
}

Test(ranges, random_model_check) {
  /* Random takes and gives over a 4096-unit region, against a map of which
   * units are free: every take lands at the start of the smallest free run
   * that holds it, every give is accepted, and a take fails only when no free
   * run is long enough. */
  enum { UNITS = 4096, SLOTS = 256 };
  lct__ranges f = {0};
  uint8_t used[UNITS] = {0};
  uint64_t at[SLOTS], len[SLOTS] = {0};
  uint64_t free_units = UNITS;
  cr_assert_eq(lct__ranges_give(&f, 0, UNITS), 0);
  test_rng rng = {99};
  for (int step = 0; step < 200000; step++) {
    size_t s = test_rand(&rng) % SLOTS;
    if (len[s] == 0) {
      uint64_t want = 1 + test_rand(&rng) % 64, got;
      int rc = lct__ranges_take(&f, want, &got);
      if (rc == 0) {
        cr_assert_leq(got + want, UNITS);
        /* The free runs are the ranges: got starts the smallest that holds want, the lowest of equals. */
        uint64_t best_at = UNITS, best_len = UINT64_MAX;
        for (uint64_t u = 0; u < UNITS;) {
          uint64_t v = u;
          while (v < UNITS && !used[v]) v++;
          if (v - u >= want && v - u < best_len) best_at = u, best_len = v - u;
          u = v == u ? u + 1 : v;
        }
        cr_assert_eq(got, best_at, "step %d: best fit", step);
        for (uint64_t u = got; u < got + want; u++) cr_assert_eq(used[u], 0, "step %d: unit %llu taken twice", step, (unsigned long long)u);
        memset(used + got, 1, want);
        at[s] = got;
        len[s] = want;
        free_units -= want;
      } else {
        cr_assert_eq(rc, LCT_ENOSPC);
        uint64_t run = 0, best = 0;
        for (int u = 0; u < UNITS; u++) {
          run = used[u] ? 0 : run + 1;
          best = run > best ? run : best;
        }
        cr_assert_lt(best, want, "step %d: a free run of %llu was not found for %llu", step, (unsigned long long)best,
                     (unsigned long long)want);
      }
    } else {
      /* Give back the whole slot, or only its tail (a shrink). */
      uint64_t keep = test_rand(&rng) % 2 ? 0 : test_rand(&rng) % len[s];
      cr_assert_eq(lct__ranges_give(&f, at[s] + keep, len[s] - keep), 0);
      memset(used + at[s] + keep, 0, len[s] - keep);
      free_units += len[s] - keep;
      len[s] = keep;
    }
    if (step % 1000 == 0) check_invariants(&f, free_units);
  }
  check_invariants(&f, free_units);
  lct__ranges_free(&f);
}
