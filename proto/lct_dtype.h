/* lct_dtype.h — the element types of the format and the protocol: one table, the enum and its facts. */
#ifndef LCT_DTYPE_H
#define LCT_DTYPE_H

#include <stddef.h>

#include "lct_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* X(ID, name, wire value, bytes per element, symbol bits): the symbol is the
 * sign, the exponent and the top mantissa bit, Huffman-coded; 0 symbol bits
 * stores the bytes as they are (proto/FORMAT.md). */
#define LCT_DTYPE_MAP(X)          \
  X(RAW, raw, 0, 1, 0)            \
  X(F32, f32, 1, 4, 10)           \
  X(BF16, bf16, 2, 2, 10)         \
  X(F16, f16, 3, 2, 7)            \
  X(F8E4M3, f8e4m3, 4, 1, 6)      \
  X(F8E5M2, f8e5m2, 5, 1, 7)

typedef enum {
#define LCT__DTYPE_ENUM(id, name, value, width, sym_bits) LCT_DTYPE_##id = value,
  LCT_DTYPE_MAP(LCT__DTYPE_ENUM)
#undef LCT__DTYPE_ENUM
} lct_dtype;

enum {
#define LCT__DTYPE_ONE(id, name, value, width, sym_bits) +1
  LCT_DTYPE_COUNT = 0 LCT_DTYPE_MAP(LCT__DTYPE_ONE)
#undef LCT__DTYPE_ONE
};

/* Bytes per element (1 for raw); 0 for an unknown dtype. */
LCT_API size_t lct_dtype_size(lct_dtype dtype);
/* Symbol bits coded per element (0 for raw and unknown dtypes). */
LCT_API unsigned lct_dtype_symbol_bits(lct_dtype dtype);
/* "f32", "bf16", "f16", "f8e4m3", "f8e5m2", "raw"; NULL if unknown. */
LCT_API const char *lct_dtype_name(lct_dtype dtype);
/* Parses a dtype name; LCT_EDTYPE if unknown. */
LCT_API int lct_dtype_parse(const char *name, lct_dtype *out);

#ifdef __cplusplus
}
#endif
#endif
