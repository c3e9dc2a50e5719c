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

/* Format version 2 (proto/FORMAT.md, "Lanes"): a lane takes one 32-bit word
 * of E = 4 / width elements in every 32 words of the chunk. */
/* Steps of lane t in a chunk of n elements (version 2). */
static inline uint32_t lct__v2_lane_elems(uint32_t n, unsigned t, unsigned E) {
  const uint32_t rem = n % (32 * E), extra = rem > E * t ? rem - E * t : 0;
  return n / (32 * E) * E + (extra < E ? extra : E);
}

/* v's low n bits in reverse order. */
static inline uint32_t lct__reverse_bits(uint32_t v, unsigned n) {
  uint32_t r = 0;
  for (unsigned i = 0; i < n; i++) r |= ((v >> i) & 1u) << (n - 1 - i);
  return r;
}

#endif
