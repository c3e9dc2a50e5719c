/* fault_inject.c — test builds only (lctd-faults): the backend's Nth codec call meets a lost device ($LCT_FAULT_AT). */
#include "fault_inject.h"

#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"

static const lct__backend_ops *lct__real;
static lct__backend_ops lct__wrapped;
static uint64_t lct__fault_at;
static _Atomic uint64_t lct__calls;
static _Atomic int lct__injected; /* cpu: the loss is ours to report */

/* Counts a codec call; 1 when it must fail as the injected loss's. */
static int lct__fault_tick(void) {
  uint64_t k = atomic_fetch_add(&lct__calls, 1) + 1;
  if (k == lct__fault_at) {
    lct__log_warn("fault injection: codec call %" PRIu64 " meets a lost device", k);
#ifdef LCT_HAVE_CUDA
    if (lct__real->fault != NULL) {
      lct__fault_cuda();
      return 0; /* the backend meets the real error itself */
    }
#endif
    atomic_store(&lct__injected, 1);
  }
  return atomic_load(&lct__injected);
}

static int lct__fi_encode(void *ctx, int worker, int dtype, const lct_codebook *cb, const void *src, uint64_t n,
                          void *dst, size_t cap, lct_encode_stats *stats) {
  return lct__fault_tick() ? LCT_EIO : lct__real->encode(ctx, worker, dtype, cb, src, n, dst, cap, stats);
}

static int lct__fi_decode(void *ctx, int worker, int dtype, uint64_t n, const void *blob, size_t len, void *dst) {
  return lct__fault_tick() ? LCT_EIO : lct__real->decode(ctx, worker, dtype, n, blob, len, dst);
}

static int lct__fi_encode_batch(void *ctx, int worker, lct__batch_seg *segs, size_t n) {
  return lct__fault_tick() ? LCT_EIO : lct__real->encode_batch(ctx, worker, segs, n);
}

static int lct__fi_decode_batch(void *ctx, int worker, lct__batch_seg *segs, size_t n) {
  return lct__fault_tick() ? LCT_EIO : lct__real->decode_batch(ctx, worker, segs, n);
}

static int lct__fi_hist_batch(void *ctx, int worker, lct__batch_seg *segs, size_t n) {
  return lct__fault_tick() ? LCT_EIO : lct__real->hist_batch(ctx, worker, segs, n);
}

static int lct__fi_fault(void *ctx, char *why, size_t cap) {
  if (atomic_load(&lct__injected)) {
    snprintf(why, cap, "injected fault at codec call %" PRIu64 " (LCT_FAULT_AT)", lct__fault_at);
    return 1;
  }
  return lct__real->fault != NULL && lct__real->fault(ctx, why, cap);
}

void lct__fault_inject(lct__backend *be) {
  const char *at = getenv("LCT_FAULT_AT");
  char *end;
  if (at == NULL || (lct__fault_at = strtoull(at, &end, 10)) == 0 || *end != '\0')
    return;
  lct__real = be->ops;
  lct__wrapped = *be->ops;
  lct__wrapped.encode = lct__fi_encode;
  lct__wrapped.decode = lct__fi_decode;
  lct__wrapped.encode_batch = lct__real->encode_batch != NULL ? lct__fi_encode_batch : NULL;
  lct__wrapped.decode_batch = lct__real->decode_batch != NULL ? lct__fi_decode_batch : NULL;
  lct__wrapped.hist_batch = lct__real->hist_batch != NULL ? lct__fi_hist_batch : NULL;
  lct__wrapped.fault = lct__fi_fault;
  be->ops = &lct__wrapped;
  lct__log_warn("fault injection armed: codec call %" PRIu64 " of the %s backend meets a lost device",
                lct__fault_at, be->ops->name);
}
