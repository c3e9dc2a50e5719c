/* codebook.h — the codebook policy every put follows: reuse the key's codebook, build one on a first put, rebuild it and code again on drift. */
#ifndef LCT_SERVER_CODEBOOK_H
#define LCT_SERVER_CODEBOOK_H

#include <stdint.h>

#include "entry.h"

/* A reused codebook has drifted when a put's code bits exceed its
 * expected_bits_per_elem * n by more than this fraction. */
#define LCT__DRIFT 0.02

/* What a put does next with its entry. */
typedef enum {
  LCT__PUT_ENCODE,    /* encode with the entry's codebook (none for the raw dtype) */
  LCT__PUT_HISTOGRAM, /* count the put's symbols, lct__codebook_build, then encode */
  LCT__PUT_PUBLISH,   /* coded: publish the entry */
} lct__put_step;

/* A put's standing with its codebook, from lct__codebook_start on. */
typedef struct lct__codebook_use {
  uint8_t reused;  /* the codebook came from the key's stored version */
  uint8_t rebuild; /* a histogram taken now rebuilds a drifted codebook (counted as a rebuild) */
} lct__codebook_use;

/* Before a put codes e (not yet installed): gives it the codebook of its
 * key's stored version when that has one of e's dtype (ENCODE, no histogram
 * pass); else HISTOGRAM, or ENCODE for the raw dtype. Loop thread. */
lct__put_step lct__codebook_start(const lct__server *srv, lct__entry *e, lct__codebook_use *use);

/* After e was coded in code_bits: PUBLISH, or HISTOGRAM when the codebook it
 * reused drifted, so that the put is coded again with a codebook of its own
 * symbols (a put rebuilds at most once). Loop thread. */
lct__put_step lct__codebook_after_encode(const lct__entry *e, lct__codebook_use *use, uint64_t code_bits);

/* Builds e's codebook from the put's symbol histogram (2^s counters): an
 * O(alphabet) Huffman build, not a pass over the data. Any thread. */
int lct__codebook_build(lct__entry *e, const uint64_t *hist);

/* Makes the codebook just built e's, under a new server-wide codebook_id,
 * and counts a build or a rebuild. Loop thread. */
void lct__codebook_adopt(lct__server *srv, lct__entry *e, const lct__codebook_use *use);

#endif
