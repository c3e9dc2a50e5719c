/* ranges.c — the free ranges of a fixed region: next-fit allocation and coalescing frees (the cuda backend's sub-allocator). */
#include "ranges.h"

#include <stdlib.h>
#include <string.h>

#include "lct_error.h"

/* Removes range i, keeping the rover on the range that followed it. */
static void lct__ranges_remove(lct__ranges *f, size_t i) {
  memmove(&f->r[i], &f->r[i + 1], (f->n - i - 1) * sizeof *f->r);
  f->n--;
  if (f->rover > i)
    f->rover--;
  if (f->rover >= f->n)
    f->rover = 0;
}

int lct__ranges_give(lct__ranges *f, uint64_t off, uint64_t len) {
  size_t lo = 0, hi = f->n; /* the first range after off */
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (f->r[mid].off < off)
      lo = mid + 1;
    else
      hi = mid;
  }
  int join_prev = lo > 0 && f->r[lo - 1].off + f->r[lo - 1].len == off;
  int join_next = lo < f->n && off + len == f->r[lo].off;
  if (join_prev && join_next) {
    f->r[lo - 1].len += len + f->r[lo].len;
    lct__ranges_remove(f, lo);
  } else if (join_prev) {
    f->r[lo - 1].len += len;
  } else if (join_next) {
    f->r[lo].off = off;
    f->r[lo].len += len;
  } else {
    if (f->n == f->cap) {
      size_t cap = f->cap ? 2 * f->cap : 256;
      lct__range *grown = realloc(f->r, cap * sizeof *grown);
      if (grown == NULL)
        return LCT_ENOMEM;
      f->r = grown;
      f->cap = cap;
    }
    memmove(&f->r[lo + 1], &f->r[lo], (f->n - lo) * sizeof *f->r);
    f->r[lo] = (lct__range){off, len};
    f->n++;
    if (f->rover >= lo && f->n > 1)
      f->rover++;
  }
  return 0;
}

int lct__ranges_take(lct__ranges *f, uint64_t len, uint64_t *off) {
  for (size_t k = 0; k < f->n; k++) {
    size_t i = (f->rover + k) % f->n;
    lct__range *g = &f->r[i];
    if (g->len < len)
      continue;
    *off = g->off;
    g->off += len;
    g->len -= len;
    f->rover = i;
    if (g->len == 0)
      lct__ranges_remove(f, i);
    return 0;
  }
  return LCT_ENOSPC;
}

void lct__ranges_free(lct__ranges *f) {
  free(f->r);
  memset(f, 0, sizeof *f);
}
