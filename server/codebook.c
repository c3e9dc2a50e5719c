/* codebook.c — the codebook policy every put follows: reuse the key's codebook, build one on a first put, and after drift rebuild it from the next put's symbols, counted in its encode pass. */
#include "codebook.h"

#include "log.h"
#include "server.h"

lct__put_step lct__codebook_start(const lct__server *srv, lct__entry *e) {
  if (lct_dtype_symbol_bits(e->dtype) == 0)
    return LCT__PUT_ENCODE;
  const lct__entry *prev = lct__store_find(srv->store, e->key, e->key_len);
  if (prev == NULL || !prev->has_codebook || prev->dtype != e->dtype)
    return LCT__PUT_HISTOGRAM;
  e->codebook = prev->codebook;
  e->codebook_id = prev->codebook_id;
  e->has_codebook = 1;
  return prev->codebook_stale ? LCT__PUT_ENCODE_COUNT : LCT__PUT_ENCODE;
}

void lct__codebook_coded(lct__entry *e, lct__put_step step, uint64_t code_bits) {
  if (step != LCT__PUT_ENCODE || !e->has_codebook || e->n_elems == 0)
    return;
  e->codebook_stale =
      (double)code_bits > e->codebook.expected_bits_per_elem * (double)e->n_elems * (1.0 + LCT__DRIFT);
  if (e->codebook_stale)
    lct__log_debug("codebook of '%.*s' drifted: %llu code bits for %llu elements; the next put rebuilds it",
                   (int)(e->key_len > 64 ? 64 : e->key_len), (const char *)e->key, (unsigned long long)code_bits,
                   (unsigned long long)e->n_elems);
}

int lct__codebook_build(lct__entry *e, const uint64_t *hist) {
  return lct_codebook_build(e->dtype, hist, &e->codebook);
}

void lct__codebook_adopt(lct__server *srv, lct__entry *e, lct__put_step step) {
  e->has_codebook = 1;
  e->codebook_stale = 0;
  e->codebook_id = ++srv->codebook_ids;
  if (step == LCT__PUT_ENCODE_COUNT)
    srv->stats.codebook_rebuilds++;
  else
    srv->stats.codebook_builds++;
}
