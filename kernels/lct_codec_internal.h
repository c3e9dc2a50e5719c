/* lct_codec_internal.h — layout helpers shared by the CPU codec modules. */
#ifndef LCT_CODEC_INTERNAL_H
#define LCT_CODEC_INTERNAL_H

#include <stdint.h>
#include <string.h>

typedef struct {
  unsigned width;     /* bytes per element */
  unsigned sym_bits;  /* s: sign+exponent bits, 0 for raw */
  unsigned mant_bits; /* m */
  unsigned n_syms;    /* 2^s + 1 */
} lct__layout;

int lct__dtype_layout(int dtype, lct__layout *lay);

/* Element i of a little-endian array of width-byte elements, any alignment. */
static inline uint32_t lct__load_elem(const uint8_t *p, uint64_t i, unsigned width) {
  if (width == 4) {
    uint32_t v;
    memcpy(&v, p + 4 * i, 4);
    return v;
  }
  if (width == 2) {
    uint16_t v;
    memcpy(&v, p + 2 * i, 2);
    return v;
  }
  return p[i];
}

#endif
