/* lct_decl.h — a put's declaration (dtype, shape, size, checksum), checked the same way by liblct and lctd. */
#ifndef LCT_DECL_H
#define LCT_DECL_H

#include <stddef.h>
#include <stdint.h>

#include "lct_dtype.h"
#include "lct_wire.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A tensor to store, validated: dtype known, at most LCT_MAX_DIMS dims,
 * raw_bytes == product(shape) * dtype size without overflow. */
typedef struct lct_put_decl {
  lct_dtype dtype;
  int ndim;
  uint64_t shape[LCT_MAX_DIMS];
  uint64_t n_elems;
  uint64_t raw_bytes;
  int has_checksum;
  uint32_t checksum; /* CRC-32C of the raw bytes */
} lct_put_decl;

/* From a dtype and shape (ndim 0: a scalar; shape may be NULL then). Returns
 * 0, LCT_EDTYPE, LCT_EINVAL (rank) or LCT_E2BIG (the byte count overflows),
 * with the reason in why (cap bytes). */
int lct_put_decl_make(int dtype, const uint64_t *shape, int ndim, lct_put_decl *d, char *why, size_t cap);

/* From a request's metadata: as lct_put_decl_make, and LCT_EINVAL when meta
 * or its dtype is missing, LCT_ESIZE when a raw_bytes it carries disagrees. */
int lct_put_decl_from_meta(const Lctpb__TensorMeta *meta, lct_put_decl *d, char *why, size_t cap);

/* The metadata a request carries for d; its shape points into d. */
void lct_put_decl_to_meta(const lct_put_decl *d, Lctpb__TensorMeta *meta);

#ifdef __cplusplus
}
#endif
#endif
