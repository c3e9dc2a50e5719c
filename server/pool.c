/* pool.c — blob memory with capacity accounting on top of a backend. */
#include "pool.h"

#include <assert.h>
#include <stdlib.h>

struct lct__pool {
  lct__backend backend;
  uint64_t capacity;
  uint64_t used;
};

int lct__pool_create(const lct__backend *backend, lct__pool **out) {
  lct__pool *pool = calloc(1, sizeof *pool);
  if (pool == NULL)
    return LCT_ENOMEM;
  pool->backend = *backend;
  pool->capacity = backend->capacity;
  *out = pool;
  return 0;
}

void lct__pool_destroy(lct__pool *pool) {
  if (pool == NULL)
    return;
  pool->backend.ops->destroy(pool->backend.ctx);
  free(pool);
}

int lct__pool_alloc(lct__pool *pool, size_t bytes, void **out) {
  if (!lct__pool_fits(pool, bytes))
    return LCT_ENOSPC;
  int rc = pool->backend.ops->alloc(pool->backend.ctx, bytes, out);
  if (rc != 0)
    return rc;
  pool->used += bytes;
  return 0;
}

size_t lct__pool_shrink(lct__pool *pool, void **blob, size_t old_bytes, size_t new_bytes) {
  assert(new_bytes <= old_bytes && old_bytes <= pool->used);
  void *moved = *blob;
  if (new_bytes == old_bytes ||
      pool->backend.ops->shrink(pool->backend.ctx, *blob, old_bytes, new_bytes, &moved) != 0)
    return old_bytes;
  *blob = moved;
  pool->used -= old_bytes - new_bytes;
  return new_bytes;
}

void lct__pool_settle(lct__pool *pool) {
  if (pool->backend.ops->settle != NULL)
    pool->backend.ops->settle(pool->backend.ctx);
}

void lct__pool_free(lct__pool *pool, void *blob, size_t bytes) {
  assert(bytes <= pool->used);
  pool->backend.ops->release(pool->backend.ctx, blob, bytes);
  pool->used -= bytes;
}

uint64_t lct__pool_capacity(const lct__pool *pool) { return pool->capacity; }
uint64_t lct__pool_used(const lct__pool *pool) { return pool->used; }
uint64_t lct__pool_held(const lct__pool *pool) {
  return pool->backend.ops->held != NULL ? pool->backend.ops->held(pool->backend.ctx) : pool->used;
}
int lct__pool_fits(const lct__pool *pool, uint64_t bytes) {
  return bytes <= pool->capacity - pool->used;
}
const lct__backend *lct__pool_backend(const lct__pool *pool) { return &pool->backend; }
