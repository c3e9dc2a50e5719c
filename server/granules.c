/* granules.c — a reserved address range backed by physical memory in granules as allocations need it: placement, live bytes per granule, a bounded slack of empty mapped granules. */
#include "granules.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "lct_error.h"

static int lct__bit(const uint64_t *bits, uint64_t i) { return (int)(bits[i / 64] >> (i % 64) & 1); }
static void lct__bit_set(uint64_t *bits, uint64_t i) { bits[i / 64] |= UINT64_C(1) << (i % 64); }
static void lct__bit_clear(uint64_t *bits, uint64_t i) { bits[i / 64] &= ~(UINT64_C(1) << (i % 64)); }

int lct__granules_init(lct__granules *gr, uint64_t size, uint64_t granule, uint64_t slack_max,
                       const lct__mapper *mapper) {
  assert(granule > 0 && size > 0 && size % granule == 0);
  memset(gr, 0, sizeof *gr);
  gr->granule = granule;
  gr->n = size / granule;
  gr->keep = slack_max / granule;
  gr->mapper = *mapper;
  size_t words = (size_t)((gr->n + 63) / 64);
  gr->live = calloc((size_t)gr->n, sizeof *gr->live);
  gr->mapped = calloc(words, sizeof *gr->mapped);
  gr->empty = calloc(words, sizeof *gr->empty);
  if (gr->live == NULL || gr->mapped == NULL || gr->empty == NULL || lct__ranges_give(&gr->free, 0, size) != 0) {
    lct__granules_destroy(gr);
    return LCT_ENOMEM;
  }
  return 0;
}

static int lct__granule_unmap(lct__granules *gr, uint64_t g) {
  int rc = gr->mapper.unmap(gr->mapper.ctx, g);
  if (rc != 0)
    return rc;
  lct__bit_clear(gr->mapped, g);
  lct__bit_clear(gr->empty, g);
  gr->n_mapped--;
  gr->n_empty--;
  return 0;
}

/* The highest empty granule (n_empty > 0). */
static uint64_t lct__highest_empty(const lct__granules *gr) {
  uint64_t w = (gr->n - 1) / 64;
  while (gr->empty[w] == 0)
    w--;
  return w * 64 + 63 - (uint64_t)__builtin_clzll(gr->empty[w]);
}

/* Unmaps the highest empty granules beyond keep: they lie in the free range
 * at the top, the largest, which best fit takes from last. */
static int lct__trim(lct__granules *gr, uint64_t keep) {
  while (gr->n_empty > keep) {
    int rc = lct__granule_unmap(gr, lct__highest_empty(gr));
    if (rc != 0)
      return rc;
  }
  return 0;
}

int lct__granules_destroy(lct__granules *gr) {
  int rc = 0;
  for (uint64_t g = 0; gr->mapped != NULL && g < gr->n; g++) {
    if (!lct__bit(gr->mapped, g))
      continue;
    int e = gr->mapper.unmap(gr->mapper.ctx, g);
    rc = rc != 0 ? rc : e;
  }
  lct__ranges_free(&gr->free);
  free(gr->live);
  free(gr->mapped);
  free(gr->empty);
  memset(gr, 0, sizeof *gr);
  return rc;
}

/* Adds (add) or subtracts the bytes of [off, off + len) to the live bytes of the granules under it. */
static void lct__count(lct__granules *gr, uint64_t off, uint64_t len, int add) {
  for (uint64_t g = off / gr->granule; g * gr->granule < off + len; g++) {
    uint64_t lo = g * gr->granule > off ? g * gr->granule : off;
    uint64_t hi = (g + 1) * gr->granule < off + len ? (g + 1) * gr->granule : off + len;
    if (add) {
      if (gr->live[g] == 0) {
        lct__bit_clear(gr->empty, g);
        gr->n_empty--;
      }
      gr->live[g] += hi - lo;
    } else {
      assert(gr->live[g] >= hi - lo);
      gr->live[g] -= hi - lo;
      if (gr->live[g] == 0) {
        lct__bit_set(gr->empty, g);
        gr->n_empty++;
      }
    }
  }
}

int lct__granules_take(lct__granules *gr, uint64_t len, uint64_t *off) {
  assert(len > 0);
  uint64_t at;
  int rc = lct__ranges_take(&gr->free, len, &at);
  if (rc != 0)
    return rc;
  /* Map the runs of unmapped granules under it; they join as empty, and the
   * count below makes them live. */
  uint64_t first = at / gr->granule, end = (at + len - 1) / gr->granule + 1;
  for (uint64_t g = first; g < end && rc == 0;) {
    if (lct__bit(gr->mapped, g)) {
      g++;
      continue;
    }
    uint64_t h = g + 1;
    while (h < end && !lct__bit(gr->mapped, h))
      h++;
    if ((rc = gr->mapper.map(gr->mapper.ctx, g, h - g)) != 0)
      break;
    for (; g < h; g++) {
      lct__bit_set(gr->mapped, g);
      lct__bit_set(gr->empty, g);
      gr->n_mapped++;
      gr->n_empty++;
    }
  }
  if (rc != 0) {
    /* Runs mapped before the failure are empty: the slack bound takes them
     * back. A give of a range just taken cannot need to grow the array. */
    lct__ranges_give(&gr->free, at, len);
    lct__trim(gr, gr->keep);
    return rc;
  }
  lct__count(gr, at, len, 1);
  *off = at;
  return 0;
}

int lct__granules_give(lct__granules *gr, uint64_t off, uint64_t len) {
  int rc = lct__ranges_give(&gr->free, off, len);
  lct__count(gr, off, len, 0);
  int trimmed = lct__trim(gr, gr->keep);
  return rc != 0 ? rc : trimmed;
}

int lct__granules_shrink(lct__granules *gr, uint64_t off, uint64_t len, uint64_t keep, uint64_t *to) {
  assert(0 < keep && keep < len);
  uint64_t end = off + len;
  if (len - keep > keep / 16 && end < gr->n * gr->granule && !lct__ranges_free_at(&gr->free, end) &&
      lct__granules_take(gr, keep, to) == 0)
    return 0;
  *to = off;
  return lct__granules_give(gr, off + keep, len - keep);
}

uint64_t lct__granules_held(const lct__granules *gr) { return gr->n_mapped * gr->granule; }
