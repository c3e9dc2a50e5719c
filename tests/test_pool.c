/* test_pool.c — pool accounting over the cpu backend: capacity, LCT_ENOSPC, shrink and free; the backend's codec. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "pool.h"
#include "test_util.h"

static lct__pool *pool_of(uint64_t capacity) {
  lct__backend be;
  cr_assert_eq(lct__backend_cpu_open(capacity, &be), 0);
  lct__pool *p;
  cr_assert_eq(lct__pool_create(&be, &p), 0);
  return p;
}

Test(pool, accounting) {
  lct__pool *p = pool_of(1 << 20);
  cr_assert_eq(lct__pool_capacity(p), 1 << 20);
  void *a, *b, *c;
  cr_assert_eq(lct__pool_alloc(p, 600 << 10, &a), 0);
  cr_assert_eq(lct__pool_used(p), 600 << 10);
  cr_assert_eq(lct__pool_alloc(p, 600 << 10, &b), LCT_ENOSPC);
  cr_assert_eq(lct__pool_used(p), 600 << 10, "a refused allocation reserves nothing");
  memset(a, 0x5a, 600 << 10);
  size_t held = lct__pool_shrink(p, &a, 600 << 10, 100 << 10);
  cr_assert_eq(held, 100 << 10);
  cr_assert_eq(lct__pool_used(p), 100 << 10);
  lct__pool_settle(p);
  cr_assert_eq(((uint8_t *)a)[(100 << 10) - 1], 0x5a, "shrink keeps the head");
  cr_assert_eq(lct__pool_held(p), 100 << 10, "the cpu backend holds what is in use");
  cr_assert_eq(lct__pool_alloc(p, 900 << 10, &b), 0, "the tail went back to the pool");
  cr_assert(lct__pool_fits(p, (1 << 20) - (1000 << 10)));
  cr_assert_not(lct__pool_fits(p, (1 << 20) - (1000 << 10) + 1));
  cr_assert_eq(lct__pool_alloc(p, 0, &c), 0, "zero bytes fit a full pool");
  lct__pool_free(p, c, 0);
  lct__pool_free(p, a, held);
  lct__pool_free(p, b, 900 << 10);
  cr_assert_eq(lct__pool_used(p), 0);
  lct__pool_destroy(p);
}

Test(pool, automatic_capacity) {
  lct__backend be;
  cr_assert_eq(lct__backend_cpu_open(0, &be), 0);
  cr_assert_gt(be.capacity, 0, "memory 0 picks half of the host memory");
  cr_assert_str_eq(be.ops->name, "cpu");
}

Test(pool, cpu_backend_codec) {
  lct__pool *p = pool_of(64 << 20);
  const lct__backend *be = lct__pool_backend(p);
  size_t n = 3 * LCT_CHUNK_ELEMS + 5;
  test_rng rng = {11};
  uint16_t *src = malloc(n * 2), *back = malloc(n * 2);
  for (size_t i = 0; i < n; i++) src[i] = (uint16_t)(0x3f00 + (test_rand(&rng) & 0x1ff));
  lct_codebook cb;
  cr_assert_eq(lct_codebook_from_data(LCT_DTYPE_BF16, src, n, &cb), 0);
  size_t cap = lct_encode_bound(LCT_DTYPE_BF16, n);
  void *blob;
  cr_assert_eq(lct__pool_alloc(p, cap, &blob), 0);
  lct_encode_stats st;
  cr_assert_eq(be->ops->encode(be->ctx, 0, LCT_DTYPE_BF16, &cb, src, n, blob, cap, &st), 0);
  cr_assert_lt(st.blob_bytes, n * 2, "bf16 with 9 exponent values compresses");
  size_t held = lct__pool_shrink(p, &blob, cap, st.blob_bytes);
  cr_assert_eq(be->ops->decode(be->ctx, 0, LCT_DTYPE_BF16, n, blob, st.blob_bytes, back), 0);
  cr_assert_eq(be->ops->decode(be->ctx, 0, LCT_DTYPE_F16, n, blob, st.blob_bytes, back), LCT_ECORRUPT,
               "a blob that is not what the entry says is refused");
  cr_assert_eq(memcmp(src, back, n * 2), 0);
  lct__pool_free(p, blob, held);
  free(src);
  free(back);
  lct__pool_destroy(p);
}
