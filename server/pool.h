/* pool.h — blob memory with capacity accounting on top of a backend; a full pool is LCT_ENOSPC. */
#ifndef LCT_SERVER_POOL_H
#define LCT_SERVER_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"

typedef struct lct__pool lct__pool;

/* Takes the backend (destroyed with the pool); capacity is the backend's. */
int lct__pool_create(const lct__backend *backend, lct__pool **out);
void lct__pool_destroy(lct__pool *pool);

/* Loop thread only. Reserves and allocates bytes; LCT_ENOSPC when the
 * capacity would be exceeded (nothing is allocated then). */
int lct__pool_alloc(lct__pool *pool, size_t bytes, void **out);
/* Returns the unused tail of an allocation to the pool; the result is the
 * size now allocated (old_bytes if the backend could not shrink). */
size_t lct__pool_shrink(lct__pool *pool, void **blob, size_t old_bytes, size_t new_bytes);
/* Waits until blobs the shrinks before it moved hold their bytes: before
 * anything reads them. */
void lct__pool_settle(lct__pool *pool);
void lct__pool_free(lct__pool *pool, void *blob, size_t bytes);

uint64_t lct__pool_capacity(const lct__pool *pool);
uint64_t lct__pool_used(const lct__pool *pool);
/* Memory the blobs hold from the device or host (the backend's held; used
 * where the backend allocates exactly that). */
uint64_t lct__pool_held(const lct__pool *pool);
/* Whether bytes could be allocated now. */
int lct__pool_fits(const lct__pool *pool, uint64_t bytes);
const lct__backend *lct__pool_backend(const lct__pool *pool);

#endif
