/* lct_decl.c — a put's declaration (dtype, shape, size, checksum), checked the same way by liblct and lctd. */
#include "lct_decl.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "lct_error.h"

int lct_put_decl_make(int dtype, const uint64_t *shape, int ndim, lct_put_decl *d, char *why, size_t cap) {
  memset(d, 0, sizeof *d);
  size_t width = lct_dtype_size((lct_dtype)dtype);
  if (width == 0) {
    snprintf(why, cap, "unknown dtype %d", dtype);
    return LCT_EDTYPE;
  }
  if (ndim < 0 || ndim > LCT_MAX_DIMS || (ndim > 0 && shape == NULL)) {
    snprintf(why, cap, "ndim %d outside 0..%d", ndim, LCT_MAX_DIMS);
    return LCT_EINVAL;
  }
  uint64_t n = 1;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] != 0 && n > UINT64_MAX / shape[i]) {
      snprintf(why, cap, "shape product overflows");
      return LCT_E2BIG;
    }
    n *= shape[i];
    d->shape[i] = shape[i];
  }
  if (n > (uint64_t)SIZE_MAX / width) {
    snprintf(why, cap, "%" PRIu64 " elements of %s overflow a byte count", n, lct_dtype_name((lct_dtype)dtype));
    return LCT_E2BIG;
  }
  d->dtype = (lct_dtype)dtype;
  d->ndim = ndim;
  d->n_elems = n;
  d->raw_bytes = n * width;
  return 0;
}

int lct_put_decl_from_meta(const Lctpb__TensorMeta *m, lct_put_decl *d, char *why, size_t cap) {
  if (m == NULL || !m->has_dtype) {
    memset(d, 0, sizeof *d);
    snprintf(why, cap, "put needs meta with a dtype (and shape)");
    return LCT_EINVAL;
  }
  int dtype = m->dtype < LCT_DTYPE_COUNT ? (int)m->dtype : -1;
  int ndim = m->n_shape <= LCT_MAX_DIMS ? (int)m->n_shape : -1; /* lct_wire_request_parse bounds it too */
  int rc = lct_put_decl_make(dtype, m->shape, ndim, d, why, cap);
  if (rc == LCT_EDTYPE)
    snprintf(why, cap, "unknown dtype %" PRIu32, m->dtype);
  if (rc != 0)
    return rc;
  if (m->has_raw_bytes && m->raw_bytes != d->raw_bytes) {
    snprintf(why, cap, "raw_bytes %" PRIu64 " disagrees with dtype and shape (%" PRIu64 ")", m->raw_bytes,
             d->raw_bytes);
    return LCT_ESIZE;
  }
  d->has_checksum = m->has_checksum;
  d->checksum = m->checksum;
  return 0;
}

void lct_put_decl_to_meta(const lct_put_decl *d, Lctpb__TensorMeta *m) {
  lctpb__tensor_meta__init(m);
  m->has_dtype = 1;
  m->dtype = (uint32_t)d->dtype;
  m->n_shape = (size_t)d->ndim;
  m->shape = (uint64_t *)d->shape;
  m->has_raw_bytes = 1;
  m->raw_bytes = d->raw_bytes;
  m->has_checksum = d->has_checksum;
  m->checksum = d->checksum;
}
