/* ranges.c — the free ranges of a fixed region: best-fit allocation and coalescing frees (the cuda pool's placement). */
#include "ranges.h"

#include <stdlib.h>
#include <string.h>

#include "lct_error.h"

static void lct__ranges_remove(lct__ranges *f, size_t i) {
  memmove(&f->r[i], &f->r[i + 1], (f->n - i - 1) * sizeof *f->r);
  f->n--;
}

/* The index of the first range at or after off. */
static size_t lct__ranges_find(const lct__ranges *f, uint64_t off) {
  size_t lo = 0, hi = f->n;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    if (f->r[mid].off < off)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

int lct__ranges_free_at(const lct__ranges *f, uint64_t off) {
  size_t i = lct__ranges_find(f, off);
  return i < f->n && f->r[i].off == off;
}

int lct__ranges_give(lct__ranges *f, uint64_t off, uint64_t len) {
  size_t lo = lct__ranges_find(f, off);
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
  }
  return 0;
}

int lct__ranges_take(lct__ranges *f, uint64_t len, uint64_t *off) {
  size_t best = f->n;
  for (size_t i = 0; i < f->n; i++)
    if (f->r[i].len >= len && (best == f->n || f->r[i].len < f->r[best].len))
      best = i;
  if (best == f->n)
    return LCT_ENOSPC;
  lct__range *g = &f->r[best];
  *off = g->off;
  g->off += len;
  g->len -= len;
  if (g->len == 0)
    lct__ranges_remove(f, best);
  return 0;
}

void lct__ranges_free(lct__ranges *f) {
  free(f->r);
  memset(f, 0, sizeof *f);
}
