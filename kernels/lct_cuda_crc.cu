/* lct_cuda_crc.cu — CRC-32C of device memory: per-piece CRCs in parallel, folded on the device with the combine rule of lct_checksum.h. */
#include "lct_cuda.h"
#include "lct_cuda_common.cuh"

#define LCT__CRC_PIECE 1024u  /* bytes one thread checksums */
#define LCT__CRC_THREADS 256u /* threads per block of the piece kernel */
#define LCT__CRC_FOLD 1024u   /* threads of the single folding block */
#define LCT__CRC_POLY 0x82F63B78u

/* a * b modulo the polynomial, both reflected (bit 31 is x^0). */
__device__ static uint32_t lct__crc_mul(uint32_t a, uint32_t b) {
  uint32_t p = 0;
  for (uint32_t m = 1u << 31; m != 0; m >>= 1) {
    if (a & m) p ^= b;
    b = (b & 1) ? (b >> 1) ^ LCT__CRC_POLY : b >> 1;
  }
  return p;
}

/* CRC(A||B) from CRC(A), CRC(B) and B's length: lct_crc32c_combine. */
__device__ static uint32_t lct__crc_combine(uint32_t a, uint32_t b, uint64_t len_b) {
  uint32_t power = 1u << 23, shift = 1u << 31;
  for (uint64_t n = len_b; n != 0; n >>= 1) {
    if (n & 1) shift = lct__crc_mul(shift, power);
    power = lct__crc_mul(power, power);
  }
  return lct__crc_mul(a, shift) ^ b;
}

/* One thread per LCT__CRC_PIECE bytes: the conditioned CRC-32C of its piece. */
__global__ void lct__crc_pieces(const uint8_t *src, uint64_t bytes, uint64_t pieces, uint32_t *out) {
  __shared__ uint32_t table[256];
  for (unsigned i = threadIdx.x; i < 256; i += blockDim.x) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c & 1) ? (c >> 1) ^ LCT__CRC_POLY : c >> 1;
    table[i] = c;
  }
  __syncthreads();
  const uint64_t piece = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (piece >= pieces) return;
  const uint64_t start = piece * LCT__CRC_PIECE;
  const uint64_t end = bytes - start < LCT__CRC_PIECE ? bytes : start + LCT__CRC_PIECE;
  uint32_t c = 0xFFFFFFFFu;
  for (uint64_t i = start; i < end; i++) c = (c >> 8) ^ table[(c ^ src[i]) & 0xff];
  out[piece] = ~c;
}

/* One block: folds the piece CRCs pairwise, level by level, into *crc. */
__global__ void lct__crc_fold(uint32_t *part, uint64_t bytes, uint64_t pieces, uint32_t *crc) {
  for (uint64_t s = 1; s < pieces; s <<= 1) {
    for (uint64_t i = (uint64_t)threadIdx.x * 2 * s; i < pieces; i += (uint64_t)blockDim.x * 2 * s) {
      const uint64_t r = i + s;
      if (r >= pieces) continue;
      const uint64_t rstart = r * LCT__CRC_PIECE, rlen = s * LCT__CRC_PIECE;
      part[i] = lct__crc_combine(part[i], part[r], bytes - rstart < rlen ? bytes - rstart : rlen);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) *crc = pieces ? part[0] : 0;
}

extern "C" size_t lct_cuda_crc32c_workspace_size(uint64_t bytes) {
  return (size_t)((bytes + LCT__CRC_PIECE - 1) / LCT__CRC_PIECE) * sizeof(uint32_t);
}

extern "C" int lct_cuda_crc32c(const void *src, uint64_t bytes, uint32_t *crc, void *workspace,
                               size_t workspace_bytes, cudaStream_t stream) {
  if (!crc || ((uintptr_t)crc & 3) || (bytes && (!src || !workspace))) return LCT_EINVAL;
  if (workspace_bytes < lct_cuda_crc32c_workspace_size(bytes)) return LCT_EBUFSIZE;
  const uint64_t pieces = (bytes + LCT__CRC_PIECE - 1) / LCT__CRC_PIECE;
  uint32_t *part = static_cast<uint32_t *>(workspace);
  if (pieces) {
    const uint64_t blocks = (pieces + LCT__CRC_THREADS - 1) / LCT__CRC_THREADS;
    if (blocks > 0x7FFFFFFFu) return LCT_E2BIG;
    lct__crc_pieces<<<(unsigned)blocks, LCT__CRC_THREADS, 0, stream>>>(static_cast<const uint8_t *>(src), bytes,
                                                                        pieces, part);
    LCT__LAUNCH_CHECK();
  }
  lct__crc_fold<<<1, LCT__CRC_FOLD, 0, stream>>>(part, bytes, pieces, crc);
  LCT__LAUNCH_CHECK();
  return 0;
}
