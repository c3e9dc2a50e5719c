/* codebook.h — the codebook policy every put follows: reuse the key's codebook, build one on a first put, and after drift rebuild it from the next put's symbols, counted in its encode pass. */
#ifndef LCT_SERVER_CODEBOOK_H
#define LCT_SERVER_CODEBOOK_H

#include <stdint.h>

#include "entry.h"

/* A reused codebook has drifted when a put's code bits exceed its
 * expected_bits_per_elem * n by more than this fraction. */
#define LCT__DRIFT 0.02

/* How a put codes its entry. A drifted put is stored as coded (a stale
 * codebook costs ratio, never correctness: its blobs stay within the format's
 * bound), so that every put takes one pass over the data, however its
 * symbols move: what a training loop that stores every step needs. */
typedef enum {
  LCT__PUT_HISTOGRAM,    /* no codebook yet: count the symbols, build one, then encode with it */
  LCT__PUT_ENCODE,       /* encode with the key's codebook (none for the raw dtype) */
  LCT__PUT_ENCODE_COUNT, /* the key's codebook drifted at its last put: encode with it and count the
                            symbols in the same pass; they rebuild the codebook the next put uses */
} lct__put_step;

/* Before a put codes e (not yet installed): gives it the codebook of its
 * key's stored version when that has one of e's dtype, and says how to code
 * it. Loop thread. */
lct__put_step lct__codebook_start(const lct__server *srv, lct__entry *e);

/* After e was coded in code_bits with a codebook it reused (step ENCODE):
 * marks it stale when the codes took more than LCT__DRIFT above what it
 * expects, so that the key's next put counts. Loop thread. */
void lct__codebook_coded(lct__entry *e, lct__put_step step, uint64_t code_bits);

/* Builds e's codebook from a put's symbol histogram (2^s counters): an
 * O(alphabet) Huffman build, not a pass over the data. Any thread. */
int lct__codebook_build(lct__entry *e, const uint64_t *hist);

/* Makes the codebook just built e's, under a new server-wide codebook_id,
 * and counts a build (step HISTOGRAM) or a rebuild (ENCODE_COUNT). Loop
 * thread. */
void lct__codebook_adopt(lct__server *srv, lct__entry *e, lct__put_step step);

#endif
