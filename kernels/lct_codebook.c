/* lct_codebook.c — symbol histograms and canonical length-limited Huffman codebooks. */
#include <stdlib.h>
#include <string.h>

#include "lct_codec.h"
#include "lct_codec_internal.h"

int lct__dtype_layout(int dtype, lct__layout *lay) {
  lay->width = (unsigned)lct_dtype_size((lct_dtype)dtype);
  if (!lay->width) return LCT_EDTYPE;
  lay->sym_bits = lct_dtype_symbol_bits((lct_dtype)dtype);
  lay->mant_bits = lay->sym_bits ? 8 * lay->width - lay->sym_bits : 0;
  lay->n_syms = lay->sym_bits ? (1u << lay->sym_bits) + 1 : 0;
  return 0;
}

int lct_histogram(int dtype, const void *src, uint64_t n_elems, uint64_t *hist) {
  lct__layout lay;
  int rc = lct__dtype_layout(dtype, &lay);
  if (rc) return rc;
  if (!lay.sym_bits) return LCT_EINVAL;
  if (n_elems && !src) return LCT_EINVAL;
  const uint8_t *p = src;
  /* Four partial histograms break the store-to-load dependency on repeats. */
  uint32_t part[4][LCT_MAX_SYMS - 1];
  memset(part, 0, sizeof part);
  uint64_t i = 0;
  while (i < n_elems) {
    uint64_t stop = n_elems - i > (1u << 30) ? i + (1u << 30) : n_elems; /* keep u32 counts exact */
    uint64_t j = i;
    for (; j + 4 <= stop; j += 4) {
      for (int u = 0; u < 4; u++) part[u][lct__load_elem(p, j + u, lay.width) >> lay.mant_bits]++;
    }
    for (; j < stop; j++) part[0][lct__load_elem(p, j, lay.width) >> lay.mant_bits]++;
    for (unsigned s = 0; s < (1u << lay.sym_bits); s++) {
      hist[s] += (uint64_t)part[0][s] + part[1][s] + part[2][s] + part[3][s];
    }
    memset(part, 0, sizeof part);
    i = stop;
  }
  return 0;
}

/* Huffman code lengths for n weighted symbols (weights > 0), ties broken by
 * symbol index so that every build of the same histogram is identical. */
typedef struct {
  uint64_t weight;
  uint16_t sym;
} weighted_sym;

static int by_weight_then_sym(const void *a, const void *b) {
  const weighted_sym *x = a, *y = b;
  if (x->weight != y->weight) return x->weight < y->weight ? -1 : 1;
  return (int)x->sym - (int)y->sym;
}

static void huffman_lengths(const weighted_sym *leaves, unsigned n, uint8_t *depth_out) {
  /* Two-queue construction over leaves sorted by weight: internal nodes are
   * created in non-decreasing weight order, so a second FIFO suffices. */
  uint64_t node_w[2 * LCT_MAX_SYMS];
  int parent[2 * LCT_MAX_SYMS];
  unsigned next_leaf = 0, next_node = n, made = n;
  for (unsigned i = 0; i < n; i++) node_w[i] = leaves[i].weight;
  while (made < 2 * n - 1) {
    unsigned pick[2];
    for (int k = 0; k < 2; k++) {
      if (next_leaf < n && (next_node >= made || node_w[next_leaf] <= node_w[next_node])) {
        pick[k] = next_leaf++;
      } else {
        pick[k] = next_node++;
      }
    }
    node_w[made] = node_w[pick[0]] + node_w[pick[1]];
    parent[pick[0]] = parent[pick[1]] = (int)made;
    made++;
  }
  uint8_t depth[2 * LCT_MAX_SYMS];
  depth[2 * n - 2] = 0;
  for (int i = (int)(2 * n - 3); i >= 0; i--) depth[i] = depth[parent[i]] + 1;
  for (unsigned i = 0; i < n; i++) depth_out[i] = depth[i];
}

/* Limits code lengths to LCT_MAX_CODE_LEN: clamp, then pay back the Kraft
 * excess by lengthening the least frequent codes that are still short. */
static void limit_lengths(const weighted_sym *leaves, unsigned n, uint8_t *len) {
  const unsigned L = LCT_MAX_CODE_LEN;
  int64_t kraft = 0; /* sum of 2^(L - len), target 2^L */
  for (unsigned i = 0; i < n; i++) {
    if (len[i] > L) len[i] = L;
    kraft += (int64_t)1 << (L - len[i]);
  }
  while (kraft > ((int64_t)1 << L)) {
    /* leaves are sorted by increasing weight: the first one with the longest
     * length below L is the cheapest to lengthen. */
    unsigned best = n;
    for (unsigned i = 0; i < n; i++) {
      if (len[i] < L && (best == n || len[i] > len[best])) best = i;
    }
    kraft -= (int64_t)1 << (L - len[best] - 1);
    len[best]++;
  }
}

/* Canonical codes from lengths, bit-reversed for the LSB-first stream. */
static void assign_codes(lct_codebook *cb) {
  unsigned count[LCT_MAX_CODE_LEN + 1] = {0};
  for (unsigned s = 0; s < cb->n_syms; s++) count[cb->len[s]]++;
  count[0] = 0;
  unsigned next[LCT_MAX_CODE_LEN + 2];
  unsigned code = 0;
  for (unsigned l = 1; l <= LCT_MAX_CODE_LEN; l++) {
    code = (code + count[l - 1]) << 1;
    next[l] = code;
  }
  cb->max_len = 0;
  for (unsigned s = 0; s < cb->n_syms; s++) {
    unsigned l = cb->len[s];
    cb->code[s] = 0;
    if (!l) continue;
    unsigned c = next[l]++, rev = 0;
    for (unsigned b = 0; b < l; b++) rev |= ((c >> b) & 1u) << (l - 1 - b);
    cb->code[s] = (uint16_t)rev;
    if (l > cb->max_len) cb->max_len = (uint8_t)l;
  }
}

int lct_codebook_build(int dtype, const uint64_t *hist, lct_codebook *cb) {
  lct__layout lay;
  int rc = lct__dtype_layout(dtype, &lay);
  if (rc) return rc;
  if (!lay.sym_bits || !hist || !cb) return LCT_EINVAL;
  memset(cb, 0, sizeof *cb);
  cb->dtype = (uint8_t)dtype;
  cb->n_syms = (uint16_t)lay.n_syms;
  const unsigned esc = lay.n_syms - 1;

  weighted_sym leaves[LCT_MAX_SYMS];
  unsigned n = 0;
  uint64_t total = 0;
  for (unsigned s = 0; s < esc; s++) {
    if (hist[s]) leaves[n++] = (weighted_sym){hist[s], (uint16_t)s};
    total += hist[s];
  }
  leaves[n++] = (weighted_sym){1, (uint16_t)esc}; /* ESC always has a code */
  qsort(leaves, n, sizeof leaves[0], by_weight_then_sym);

  uint8_t len[LCT_MAX_SYMS];
  if (n == 1) {
    len[0] = 1; /* only ESC: a one-bit code */
  } else {
    huffman_lengths(leaves, n, len);
  }
  limit_lengths(leaves, n, len);
  uint64_t bits = 0;
  for (unsigned i = 0; i < n; i++) {
    cb->len[leaves[i].sym] = len[i];
    if (leaves[i].sym != esc) bits += leaves[i].weight * len[i];
  }
  assign_codes(cb);
  cb->expected_bits_per_elem = total ? (double)bits / (double)total : 0.0;
  return 0;
}

int lct_codebook_from_data(int dtype, const void *src, uint64_t n_elems, lct_codebook *cb) {
  uint64_t hist[LCT_MAX_SYMS] = {0};
  int rc = lct_histogram(dtype, src, n_elems, hist);
  return rc ? rc : lct_codebook_build(dtype, hist, cb);
}

size_t lct_codebook_bytes(int dtype) {
  lct__layout lay;
  if (lct__dtype_layout(dtype, &lay)) return 0;
  return (lay.n_syms + 1) / 2;
}

int lct_codebook_serialize(const lct_codebook *cb, uint8_t *dst, size_t cap) {
  if (cb->n_syms > LCT_MAX_SYMS) return LCT_EINVAL;
  size_t need = (cb->n_syms + 1u) / 2;
  if (cap < need) return LCT_EBUFSIZE;
  memset(dst, 0, need);
  for (unsigned s = 0; s < cb->n_syms; s++) {
    if (cb->len[s] > LCT_MAX_CODE_LEN) return LCT_EINVAL; /* would spill into the next symbol's nibble */
    dst[s / 2] |= (uint8_t)(cb->len[s] << (4 * (s & 1)));
  }
  return 0;
}

int lct_codebook_canonical(const lct_codebook *cb, uint8_t *dst, size_t cap, lct_codebook *canon) {
  lct__layout lay;
  if (lct__dtype_layout(cb->dtype, &lay) || !lay.sym_bits || cb->n_syms != lay.n_syms) return LCT_EINVAL;
  int rc = lct_codebook_serialize(cb, dst, cap); /* LCT_EBUFSIZE below the dtype's codebook bytes */
  if (rc) return rc;
  return lct_codebook_parse(cb->dtype, dst, lct_codebook_bytes(cb->dtype), canon) ? LCT_EINVAL : 0;
}

int lct_codebook_parse(int dtype, const uint8_t *src, size_t len, lct_codebook *cb) {
  lct__layout lay;
  int rc = lct__dtype_layout(dtype, &lay);
  if (rc) return rc;
  if (!lay.sym_bits) return LCT_EINVAL;
  if (len != (lay.n_syms + 1) / 2) return LCT_ECORRUPT;
  memset(cb, 0, sizeof *cb);
  cb->dtype = (uint8_t)dtype;
  cb->n_syms = (uint16_t)lay.n_syms;
  uint32_t kraft = 0;
  for (unsigned s = 0; s < lay.n_syms; s++) {
    unsigned l = (src[s / 2] >> (4 * (s & 1))) & 15u;
    if (l > LCT_MAX_CODE_LEN) return LCT_ECORRUPT;
    cb->len[s] = (uint8_t)l;
    if (l) kraft += 1u << (LCT_MAX_CODE_LEN - l);
  }
  if (lay.n_syms & 1 && src[len - 1] >> 4) return LCT_ECORRUPT; /* padding nibble */
  if (!cb->len[lay.n_syms - 1] || kraft > (1u << LCT_MAX_CODE_LEN)) return LCT_ECORRUPT;
  assign_codes(cb);
  return 0;
}

void lct_codebook_decode_table(const lct_codebook *cb, uint16_t table[1 << LCT_MAX_CODE_LEN]) {
  memset(table, 0, sizeof(uint16_t) << LCT_MAX_CODE_LEN);
  for (unsigned s = 0; s < cb->n_syms; s++) {
    unsigned l = cb->len[s];
    if (!l) continue;
    uint16_t entry = (uint16_t)(s | l << 11);
    for (unsigned hi = 0; hi < (1u << (LCT_MAX_CODE_LEN - l)); hi++) table[cb->code[s] | hi << l] = entry;
  }
}
