/* ranges.h — the free ranges of a fixed region: best-fit allocation and coalescing frees (the cuda pool's placement). */
#ifndef LCT_SERVER_RANGES_H
#define LCT_SERVER_RANGES_H

#include <stddef.h>
#include <stdint.h>

/* Free ranges in one array sorted by offset, disjoint and never adjacent
 * (adjacent ones merge): frees find their neighbours by binary search. A
 * take goes to the smallest range that holds it, the lowest of equals (best
 * fit): holes left by shrunk and freed blobs fill first, which over memory
 * mapped in granules (granules.h) wastes about half what first fit by
 * address does (tests/test_granules.c, training_steps_stay_packed). */
typedef struct lct__range {
  uint64_t off, len;
} lct__range;

typedef struct lct__ranges {
  lct__range *r;
  size_t n, cap;
} lct__ranges;

/* Returns [off, off + len) (len > 0, not free) to the ranges, merging it with
 * its neighbours; LCT_ENOMEM if the array cannot grow (the range is then lost). */
int lct__ranges_give(lct__ranges *f, uint64_t off, uint64_t len);
/* Takes len bytes (len > 0) from the start of the smallest free range that
 * holds them: *off. LCT_ENOSPC when no single range does. */
int lct__ranges_take(lct__ranges *f, uint64_t len, uint64_t *off);
/* Whether a free range starts at off. */
int lct__ranges_free_at(const lct__ranges *f, uint64_t off);
void lct__ranges_free(lct__ranges *f);

#endif
