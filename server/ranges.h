/* ranges.h — the free ranges of a fixed region: next-fit allocation and coalescing frees (the cuda backend's sub-allocator). */
#ifndef LCT_SERVER_RANGES_H
#define LCT_SERVER_RANGES_H

#include <stddef.h>
#include <stdint.h>

/* Free ranges in one array sorted by offset, disjoint and never adjacent
 * (adjacent ones merge): frees find their neighbours by binary search. A
 * training step frees and takes thousands of blobs, and shrinking each blob
 * after encoding leaves small holes; a take scans from where the last one
 * ended (next fit) rather than past every hole from the start. */
typedef struct lct__range {
  uint64_t off, len;
} lct__range;

typedef struct lct__ranges {
  lct__range *r;
  size_t n, cap;
  size_t rover; /* where the next take starts looking */
} lct__ranges;

/* Returns [off, off + len) (len > 0, not free) to the ranges, merging it with
 * its neighbours; LCT_ENOMEM if the array cannot grow (the range is then lost). */
int lct__ranges_give(lct__ranges *f, uint64_t off, uint64_t len);
/* Takes len bytes (len > 0) from the first free range that holds them, from
 * the rover on and around: *off. LCT_ENOSPC when no single range does. */
int lct__ranges_take(lct__ranges *f, uint64_t len, uint64_t *off);
void lct__ranges_free(lct__ranges *f);

#endif
