/* codebook.c — the codebook policy every put follows: reuse the key's codebook, build one on a first put, rebuild it and code again on drift. */
#include "codebook.h"

#include "log.h"
#include "server.h"

lct__put_step lct__codebook_start(const lct__server *srv, lct__entry *e, lct__codebook_use *use) {
  *use = (lct__codebook_use){0};
  if (lct_dtype_symbol_bits(e->dtype) == 0)
    return LCT__PUT_ENCODE;
  const lct__entry *prev = lct__store_find(srv->store, e->key, e->key_len);
  if (prev == NULL || !prev->has_codebook || prev->dtype != e->dtype)
    return LCT__PUT_HISTOGRAM;
  e->codebook = prev->codebook;
  e->codebook_id = prev->codebook_id;
  e->has_codebook = 1;
  use->reused = 1;
  return LCT__PUT_ENCODE;
}

lct__put_step lct__codebook_after_encode(const lct__entry *e, lct__codebook_use *use, uint64_t code_bits) {
  int drifted = use->reused && !use->rebuild && e->has_codebook && e->n_elems > 0 &&
                (double)code_bits > e->codebook.expected_bits_per_elem * (double)e->n_elems * (1.0 + LCT__DRIFT);
  if (!drifted)
    return LCT__PUT_PUBLISH;
  lct__log_debug("codebook of '%.*s' drifted: %llu code bits for %llu elements; rebuilding",
                 (int)(e->key_len > 64 ? 64 : e->key_len), (const char *)e->key, (unsigned long long)code_bits,
                 (unsigned long long)e->n_elems);
  use->rebuild = 1;
  return LCT__PUT_HISTOGRAM;
}

int lct__codebook_build(lct__entry *e, const uint64_t *hist) {
  return lct_codebook_build(e->dtype, hist, &e->codebook);
}

void lct__codebook_adopt(lct__server *srv, lct__entry *e, const lct__codebook_use *use) {
  e->has_codebook = 1;
  e->codebook_id = ++srv->codebook_ids;
  if (use->rebuild)
    srv->stats.codebook_rebuilds++;
  else
    srv->stats.codebook_builds++;
}
