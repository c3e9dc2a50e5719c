/* lct_cuda_codebook.cu — device-resident codebooks: the encoder's per-symbol bit patterns and the header bytes. */
#include <stdlib.h>
#include <string.h>

#include "lct_cuda_common.cuh"

/* The device form of cb in host memory: canonical codes as every decoder
 * derives them from the serialized bytes. */
static int lct__codebook_image(const lct_codebook *cb, lct__dev_codebook *h) {
  const unsigned s = lct_dtype_symbol_bits((lct_dtype)cb->dtype);
  uint8_t bytes[4 * LCT__CB_WORDS] = {0};
  const size_t cb_bytes = lct_codebook_bytes(cb->dtype);
  lct_codebook canon;
  if (lct_codebook_canonical(cb, bytes, sizeof bytes, &canon)) return LCT_EINVAL;
  memset(h, 0, sizeof *h);
  const unsigned esc = canon.n_syms - 1, esc_len = canon.len[esc];
  for (unsigned sym = 0; sym < (1u << s); sym++) {
    if (canon.len[sym]) {
      h->enc[sym] = canon.code[sym] | (uint32_t)canon.len[sym] << 24;
    } else {
      h->enc[sym] = (canon.code[esc] | sym << esc_len) | (uint32_t)(esc_len + s) << 24;
    }
  }
  memcpy(h->cb_words, bytes, sizeof h->cb_words);
  h->cb_check = lct_check(bytes, cb_bytes, 6);
  return 0;
}

int lct_cuda_codebook_create(const lct_codebook *cb, lct_cuda_codebook **out) {
  if (!cb || !out) return LCT_EINVAL;
  *out = NULL;
  lct_cuda_codebook *c = (lct_cuda_codebook *)calloc(1, sizeof *c);
  if (!c) return LCT_ENOMEM;
  if (cudaMalloc((void **)&c->dev, sizeof *c->dev) != cudaSuccess) c->dev = NULL;
  if (cudaMallocHost((void **)&c->staging, sizeof *c->staging) != cudaSuccess) c->staging = NULL;
  if (cudaEventCreateWithFlags(&c->staged, cudaEventDisableTiming) != cudaSuccess) c->staged = NULL;
  if (!c->dev || !c->staging || !c->staged) {
    lct_cuda_codebook_destroy(c);
    return LCT_ECUDA;
  }
  int rc = lct_cuda_codebook_set(c, cb, 0);
  if (rc == 0 && cudaStreamSynchronize(0) != cudaSuccess) rc = LCT_ECUDA;
  if (rc) {
    lct_cuda_codebook_destroy(c);
    return rc;
  }
  *out = c;
  return 0;
}

int lct_cuda_codebook_set(lct_cuda_codebook *dcb, const lct_codebook *cb, cudaStream_t stream) {
  if (!dcb || !cb) return LCT_EINVAL;
  lct__dev_codebook h;
  int rc = lct__codebook_image(cb, &h);
  if (rc) return rc;
  /* The previous upload must have left the staging buffer; it was queued long before, as a rule. */
  if (dcb->uploading && cudaEventSynchronize(dcb->staged) != cudaSuccess) return LCT_ECUDA;
  *dcb->staging = h;
  if (cudaMemcpyAsync(dcb->dev, dcb->staging, sizeof h, cudaMemcpyHostToDevice, stream) != cudaSuccess ||
      cudaEventRecord(dcb->staged, stream) != cudaSuccess)
    return LCT_ECUDA;
  dcb->uploading = true;
  dcb->dtype = cb->dtype;
  return 0;
}

void lct_cuda_codebook_destroy(lct_cuda_codebook *cb) {
  if (!cb) return;
  if (cb->uploading) cudaEventSynchronize(cb->staged);
  if (cb->staged) cudaEventDestroy(cb->staged);
  if (cb->staging) cudaFreeHost(cb->staging);
  if (cb->dev) cudaFree(cb->dev);
  free(cb);
}

int lct_cuda_codebook_dtype(const lct_cuda_codebook *cb) { return cb ? cb->dtype : LCT_EINVAL; }

size_t lct_cuda_struct_size(lct_cuda_struct which) {
  switch (which) {
  case LCT_CUDA_STRUCT_ENCODE_ITEM: return sizeof(lct_cuda_encode_item);
  case LCT_CUDA_STRUCT_DECODE_ITEM: return sizeof(lct_cuda_decode_item);
  case LCT_CUDA_STRUCT_CRC_ITEM: return sizeof(lct_cuda_crc_item);
  }
  return 0;
}
