/* lct_dtype.c — dtype facts from the one table of lct_dtype.h. */
#include "lct_dtype.h"

#include <stdint.h>
#include <string.h>

#include "lct_error.h"

static const struct {
  const char *name;
  uint8_t width;
  uint8_t sym_bits;
} lct__dtypes[LCT_DTYPE_COUNT] = {
#define LCT__DTYPE_ROW(id, name, value, width, sym_bits) [value] = {#name, width, sym_bits},
    LCT_DTYPE_MAP(LCT__DTYPE_ROW)
#undef LCT__DTYPE_ROW
};

static int lct__dtype_known(lct_dtype dtype) { return (unsigned)dtype < LCT_DTYPE_COUNT; }

size_t lct_dtype_size(lct_dtype dtype) { return lct__dtype_known(dtype) ? lct__dtypes[dtype].width : 0; }

unsigned lct_dtype_symbol_bits(lct_dtype dtype) {
  return lct__dtype_known(dtype) ? lct__dtypes[dtype].sym_bits : 0;
}

const char *lct_dtype_name(lct_dtype dtype) { return lct__dtype_known(dtype) ? lct__dtypes[dtype].name : NULL; }

int lct_dtype_parse(const char *name, lct_dtype *out) {
  for (int d = 0; name != NULL && d < LCT_DTYPE_COUNT; d++) {
    if (strcmp(name, lct__dtypes[d].name) == 0) {
      *out = (lct_dtype)d;
      return 0;
    }
  }
  return LCT_EDTYPE;
}
