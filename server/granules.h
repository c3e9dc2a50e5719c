/* granules.h — a reserved address range backed by physical memory in granules as allocations need it: placement, live bytes per granule, a bounded slack of empty mapped granules. */
#ifndef LCT_SERVER_GRANULES_H
#define LCT_SERVER_GRANULES_H

#include <stddef.h>
#include <stdint.h>

#include "ranges.h"

/* What backs the range: the cuda backend's driver calls (cuMemCreate,
 * cuMemMap, cuMemSetAccess; cuMemUnmap), a fake in tests. Granule i is
 * [i * granule, (i + 1) * granule) of the range. */
typedef struct lct__mapper {
  /* Maps granules [first, first + count), none of them mapped yet, and makes
   * them accessible: 0, or an error with none of them mapped. */
  int (*map)(void *ctx, uint64_t first, uint64_t count);
  /* Unmaps one granule, giving its memory back: 0, or an error with it still mapped. */
  int (*unmap)(void *ctx, uint64_t granule);
  void *ctx;
} lct__mapper;

/* Allocations are placed best fit (ranges.h), so holes fill before fresh
 * granules are touched. A granule is mapped while an allocation lies in it;
 * once none does it stays mapped as slack for the next allocations, and
 * beyond slack_max bytes of such empty granules the highest ones are
 * unmapped. So every mapped granule holds live bytes or is slack, and a
 * granule that holds live bytes and free bytes holds an end of a free range:
 *
 *   held <= allocated + slack_max + 2 * granule * (free ranges)
 *
 * (allocated: the bytes taken and not given back; each free range wastes at
 * most the unused part of the two granules its ends lie in). Loop thread
 * only. */
typedef struct lct__granules {
  lct__ranges free;  /* the range's free bytes */
  uint64_t granule;  /* bytes per granule */
  uint64_t n;        /* granules in the range */
  uint64_t keep;     /* empty granules kept mapped: slack_max / granule */
  uint64_t *live;    /* per granule: allocated bytes in it */
  uint64_t *mapped;  /* bitmap: granules mapped */
  uint64_t *empty;   /* bitmap: granules mapped with no live byte (the slack) */
  uint64_t n_mapped, n_empty;
  lct__mapper mapper;
} lct__granules;

/* A range of size bytes (a positive multiple of granule), nothing mapped;
 * LCT_ENOMEM if the tables cannot be allocated. */
int lct__granules_init(lct__granules *gr, uint64_t size, uint64_t granule, uint64_t slack_max,
                       const lct__mapper *mapper);
/* Unmaps every mapped granule and frees the tables; the first unmap error,
 * or 0. */
int lct__granules_destroy(lct__granules *gr);

/* Takes len bytes (len > 0) where ranges.h places them, mapping the
 * granules under them that are not: *off. LCT_ENOSPC when no free range
 * holds len; the mapper's error (nothing taken) when it cannot map. */
int lct__granules_take(lct__granules *gr, uint64_t len, uint64_t *off);
/* Gives back [off, off + len) of a take (all of it, or its tail), then
 * unmaps the highest empty granules beyond slack_max. 0; LCT_ENOMEM if the
 * free ranges cannot grow (those bytes are not placed again, their granules
 * still go); the mapper's error if an unmap failed (that granule stays
 * mapped, counted as held, and is tried again at the next give). */
int lct__granules_give(lct__granules *gr, uint64_t off, uint64_t len);

/* Shrinks [off, off + len) of a take to its first keep bytes (0 < keep <
 * len). In place (*to = off, the tail given back as by a give) when the
 * tail joins free bytes after it, or is at most keep / 16 (a move would copy
 * 16 times what it saves), or no take of keep bytes succeeds. Otherwise the
 * tail would be a hole between allocations that a take of the range's own
 * size cannot use (an encode's worst case, shrunk to its blob, before the
 * next segment's): *to is a take of keep bytes elsewhere, the caller copies
 * the blob there and gives [off, off + len) back, which then holds a later
 * worst case. Errors as for a give, in place. */
int lct__granules_shrink(lct__granules *gr, uint64_t off, uint64_t len, uint64_t keep, uint64_t *to);

/* Bytes mapped: live granules and slack. */
uint64_t lct__granules_held(const lct__granules *gr);

#endif
