/* backend_cpu.c — the cpu backend: blobs in host memory, coded by the CPU reference codec. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend.h"

static int lct__cpu_alloc(void *ctx, size_t bytes, void **out) {
  void *p = malloc(bytes ? bytes : 1);
  if (p == NULL)
    return LCT_ENOMEM;
  *out = p;
  return 0;
}

static int lct__cpu_shrink(void *ctx, void *blob, size_t old_bytes, size_t new_bytes, void **out) {
  void *p = realloc(blob, new_bytes ? new_bytes : 1);
  if (p == NULL)
    return LCT_ENOMEM; /* the larger block stays valid */
  *out = p;
  return 0;
}

static void lct__cpu_release(void *ctx, void *blob, size_t bytes) { free(blob); }

static int lct__cpu_encode(void *ctx, int worker, int dtype, const lct_codebook *cb, const void *src,
                           uint64_t n, void *dst, size_t cap, lct_encode_stats *stats) {
  return lct_encode(dtype, cb, src, n, dst, cap, stats);
}

static int lct__cpu_decode(void *ctx, int worker, int dtype, uint64_t n, const void *blob, size_t len,
                           void *dst) {
  lct_blob_info info;
  int rc = lct_blob_info_read(blob, len, &info);
  if (rc != 0)
    return rc;
  if (info.dtype != dtype || info.n_elems != n)
    return LCT_ECORRUPT;
  return lct_decode(blob, len, dst, n * lct_dtype_size(dtype));
}

static void lct__cpu_destroy(void *ctx) {}

static int lct__cpu_read(void *ctx, const void *blob, size_t len, void *dst) {
  memcpy(dst, blob, len);
  return 0;
}

static int lct__cpu_write(void *ctx, const void *src, size_t len, void *blob) {
  memcpy(blob, src, len);
  return 0;
}

/* No device path: device puts and gets fall back to the host path. */
static const lct__backend_ops lct__cpu_ops = {
    .name = "cpu",
    .loop_codec = 1,
    .alloc = lct__cpu_alloc,
    .shrink = lct__cpu_shrink,
    .release = lct__cpu_release,
    .encode = lct__cpu_encode,
    .decode = lct__cpu_decode,
    .destroy = lct__cpu_destroy,
    .read = lct__cpu_read,
    .write = lct__cpu_write,
};
int lct__backend_cpu_open(uint64_t memory, lct__backend *out) {
  if (memory == 0) {
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    memory = pages > 0 && page > 0 ? (uint64_t)pages * (uint64_t)page / 2 : UINT64_C(1) << 30;
  }
  out->ops = &lct__cpu_ops;
  out->ctx = NULL;
  out->capacity = memory;
  memset(out->gpu_uuid, 0, sizeof out->gpu_uuid);
  return 0;
}
