/* cli_npy.h — NumPy .npy headers: read dtype and shape, write them for a stored tensor. */
#ifndef LCT_CLI_NPY_H
#define LCT_CLI_NPY_H

#include <stddef.h>
#include <stdint.h>

#define CLI_NPY_MAX_DIMS 8

typedef struct cli_npy {
  int dtype;        /* lct dtype; -1 when the descr has no lct equivalent */
  size_t itemsize;  /* bytes per element per the descr */
  int ndim;
  uint64_t shape[CLI_NPY_MAX_DIMS];
  size_t data_offset; /* where the element bytes start */
  char descr[16];
} cli_npy;

/* Whether buf starts with the .npy magic. */
int cli_npy_is(const uint8_t *buf, size_t len);
/* Parses a version 1, 2 or 3 header. Little-endian '<f4' is f32, '<f2' f16,
 * '|V2' / '<V2' bf16 (numpy has no bfloat16: see cli_remote.c); anything else
 * gives dtype -1 with itemsize set. Fortran order and big-endian floats are
 * refused. Returns 0 or an error text. */
const char *cli_npy_parse(const uint8_t *buf, size_t len, cli_npy *out);
/* Writes a version 1 header for descr and shape into dst (cap bytes);
 * returns its length (a multiple of 64) or 0 if cap is too small. */
size_t cli_npy_header(const char *descr, const uint64_t *shape, int ndim, uint8_t *dst, size_t cap);

#endif
