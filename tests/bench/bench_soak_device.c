/* bench_soak_device.c — lct-bench soak's device ops: a client's tensors through lct_put_device and lct_get_device from and into its own GPU buffers. */
#include <cuda_runtime_api.h>
#include <stdlib.h>

#include "bench_soak.h"

struct soak_device {
  void *buf;
  size_t cap;
};

int soak_device_present(void) {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

soak_device *soak_device_open(size_t max) {
  soak_device *d = calloc(1, sizeof *d);
  if (d == NULL || cudaMalloc(&d->buf, max) != cudaSuccess) {
    free(d);
    return NULL;
  }
  d->cap = max;
  return d;
}

void soak_device_close(soak_device *d) {
  if (d == NULL)
    return;
  cudaFree(d->buf);
  free(d);
}

int soak_device_put(soak_device *d, lct_client *c, const char *key, const soak_tensor *t, const void *host,
                    lct_tensor_info *info) {
  if (cudaMemcpy(d->buf, host, t->bytes, cudaMemcpyHostToDevice) != cudaSuccess)
    return LCT_ECUDA;
  return lct_put_device(c, key, (lct_dtype)t->dtype, t->shape, t->ndim, d->buf, t->bytes, info);
}

int soak_device_get(soak_device *d, lct_client *c, const char *key, void *host, size_t cap, lct_tensor_info *info) {
  int rc = lct_get_device(c, key, d->buf, cap < d->cap ? cap : d->cap, info);
  if (rc == 0 && cudaMemcpy(host, d->buf, info->raw_bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
    return LCT_ECUDA;
  return rc;
}
