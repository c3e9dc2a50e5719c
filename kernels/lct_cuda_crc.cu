/* lct_cuda_crc.cu — batched CRC-32C of device memory: table CRCs of coalesced words per thread, combined by GF(2) linearity. */
#include <string.h>

#include "lct_cuda_common.cuh"

/* The CRC is linear over GF(2): with R(M) the register after M from 0 (no
 * conditioning), R(A || B) = R(A) x^(8|B|) + R(B), products taken modulo the
 * polynomial. A tensor is split into pieces of rows of kThreads superwords
 * (kWords coalesced 16-byte words each); thread t folds superword t of every
 * row of a piece, moving its register one row on (x^(8 kSuper kThreads)) per
 * row by table. Each piece's value is moved by its distance to the tensor's
 * end, so that pieces combine by XOR alone. The initial value 0xFFFFFFFF
 * enters as the register of the first superword, the final complement at
 * the end. Registers are reflected: bit 31 is x^0. */

#define LCT__CRC_BATCH 512 /* tensors per launch (kernel parameters, 16 KiB) */

namespace {

constexpr uint32_t kPoly = 0x82F63B78u;
constexpr uint32_t kOne = 1u << 31;      /* x^0 */
constexpr unsigned kThreads = 1024;      /* per block, one block per SM; also superwords per row */
constexpr unsigned kWords = 2;           /* 16-byte words per superword */
constexpr unsigned kSuper = 16 * kWords; /* bytes per superword */
constexpr unsigned kMinRows = 2;         /* per piece: 64 KiB at least */

/* Shared memory: the four slicing-by-4 byte tables, 32 copies of each (copy
 * c in bank c, so that lane c's lookups never conflict), entries 256 bytes
 * apart with two tables interleaved (the stride makes an entry's address one
 * byte permute of the register); then the row tables and per-warp partials. */
constexpr unsigned kRowOffset = 2 * 65536, kPartOffset = kRowOffset + 4096;
constexpr unsigned kSmemBytes = kPartOffset + kThreads / 32 * 4;

/* a * b modulo the polynomial (for the tables, at compile time). */
constexpr uint32_t gf_mul(uint32_t a, uint32_t b) {
  uint32_t p = 0;
  for (int i = 0; i < 32; i++) {
    p ^= b & (0u - (a >> 31));
    a <<= 1;
    b = (b >> 1) ^ (kPoly & (0u - (b & 1)));
  }
  return p;
}

constexpr uint32_t gf_pow(uint32_t a, uint64_t n) {
  uint32_t r = kOne;
  for (; n; n >>= 1, a = gf_mul(a, a))
    if (n & 1) r = gf_mul(r, a);
  return r;
}

constexpr uint32_t kX8 = 1u << 23;                   /* x^8: one byte on */
constexpr uint32_t kXInv = kPoly << 1 | 1;           /* x^-1 = (P + 1) / x */
static_assert(gf_mul(kXInv, 1u << 30) == kOne, "x^-1");

struct crc_tables {
  uint32_t byte[4][256];      /* byte[k][i]: register of byte i followed by k zero bytes (slicing tables) */
  uint32_t row[4][256];       /* times x^(8 kSuper kThreads), one table per byte of the register */
  uint32_t col[kThreads];     /* x^(8 kSuper r): a thread's value moved r superwords on */
  uint32_t pow2[64];          /* x^(8 kSuper 2^s) */
  uint32_t unpad[kSuper];     /* x^(-8 k): takes k trailing zero bytes back out */
  uint32_t init[16];          /* 0xFFFFFFFF x^(-8 h): becomes the CRC's initial value after h leading zero bytes */

  constexpr crc_tables() : byte(), row(), col(), pow2(), unpad(), init() {
    for (uint32_t i = 0; i < 256; i++) {
      uint32_t c = i;
      for (int k = 0; k < 8; k++) c = (c >> 1) ^ (kPoly & (0u - (c & 1)));
      byte[0][i] = c;
    }
    for (unsigned k = 1; k < 4; k++)
      for (uint32_t i = 0; i < 256; i++) byte[k][i] = (byte[k - 1][i] >> 8) ^ byte[0][byte[k - 1][i] & 0xff];
    const uint32_t step = gf_pow(kX8, (uint64_t)kSuper * kThreads);
    for (uint32_t k = 0; k < 4; k++)
      for (uint32_t b = 0; b < 256; b++) row[k][b] = gf_mul(b << (8 * k), step);
    const uint32_t super = gf_pow(kX8, kSuper);
    col[0] = kOne;
    for (unsigned r = 1; r < kThreads; r++) col[r] = gf_mul(col[r - 1], super);
    pow2[0] = super;
    for (unsigned s = 1; s < 64; s++) pow2[s] = gf_mul(pow2[s - 1], pow2[s - 1]);
    const uint32_t back = gf_pow(kXInv, 8);
    unpad[0] = kOne;
    for (unsigned k = 1; k < kSuper; k++) unpad[k] = gf_mul(unpad[k - 1], back);
    init[0] = 0xFFFFFFFFu;
    for (unsigned h = 1; h < 16; h++) init[h] = gf_mul(init[h - 1], back);
  }
};

__device__ const crc_tables kTables;

/* One tensor of a launch: the 16-byte-aligned frame around it, split into
 * superwords, the leading and trailing bytes outside it read as zeros. */
struct crc_desc {
  const uint8_t *base; /* src rounded down to 16 bytes */
  uint64_t bytes;
  uint32_t *crc;
  uint32_t begin;      /* its first piece in the launch */
  uint32_t head;       /* src - base */
};

struct crc_params {
  crc_desc d[LCT__CRC_BATCH];
  uint32_t *part; /* workspace: one value per piece */
  uint64_t rows;  /* per piece, the same for every tensor of the launch */
  uint32_t count;
  uint32_t pieces;
  uint32_t direct; /* every tensor is one piece: its block writes the CRC */
};
static_assert(sizeof(crc_params) <= 32764, "kernel parameters");

__host__ __device__ uint64_t superwords(uint64_t bytes, unsigned head) { return (head + bytes + kSuper - 1) / kSuper; }

uint64_t piece_count(uint64_t bytes, unsigned head, uint64_t rows) {
  const uint64_t per = kThreads * rows;
  return bytes ? (superwords(bytes, head) + per - 1) / per : 0;
}

__device__ __forceinline__ uint32_t row_step(const uint32_t *row, uint32_t a) {
  return row[a & 0xff] ^ row[256 + ((a >> 8) & 0xff)] ^ row[512 + ((a >> 16) & 0xff)] ^ row[768 + (a >> 24)];
}

/* Entry of byte table K for byte B of s, in lane4 / 4's copy. */
template <unsigned K, unsigned B>
__device__ __forceinline__ uint32_t lookup(const uint8_t *smem, uint32_t s, uint32_t lane4) {
  const uint32_t at = __byte_perm(s, lane4, 0x5504 | B << 4); /* byte B of s << 8 | lane4 */
  return *reinterpret_cast<const uint32_t *>(smem + (K >> 1) * 65536 + (K & 1) * 128 + at);
}

/* Folds 4 bytes into the register (slicing-by-4). */
__device__ __forceinline__ uint32_t fold32(const uint8_t *smem, uint32_t lane4, uint32_t s, uint32_t v) {
  s ^= v;
  return lookup<3, 0>(smem, s, lane4) ^ lookup<2, 1>(smem, s, lane4) ^ lookup<1, 2>(smem, s, lane4) ^
         lookup<0, 3>(smem, s, lane4);
}

__device__ __forceinline__ uint32_t fold_super(const uint8_t *smem, uint32_t lane4, uint32_t s,
                                               const uint4 (&w)[kWords]) {
#pragma unroll
  for (unsigned k = 0; k < kWords; k++) {
    s = fold32(smem, lane4, s, w[k].x);
    s = fold32(smem, lane4, s, w[k].y);
    s = fold32(smem, lane4, s, w[k].z);
    s = fold32(smem, lane4, s, w[k].w);
  }
  return s;
}

/* a * b on the device: b x^8, b x^16, b x^24 one byte-table step apart,
 * then four independent 8-bit products, a quarter of gf_mul's latency. */
__device__ __forceinline__ uint32_t mul(const uint8_t *smem, uint32_t lane4, uint32_t a, uint32_t b) {
  uint32_t c[4], p[4] = {0, 0, 0, 0};
  c[0] = b;
#pragma unroll
  for (unsigned k = 1; k < 4; k++) c[k] = (c[k - 1] >> 8) ^ lookup<0, 0>(smem, c[k - 1], lane4);
#pragma unroll
  for (unsigned i = 0; i < 8; i++) {
#pragma unroll
    for (unsigned k = 0; k < 4; k++) {
      p[k] ^= c[k] & (0u - ((a >> (31 - 8 * k - i)) & 1));
      c[k] = (c[k] >> 1) ^ (kPoly & (0u - (c[k] & 1)));
    }
  }
  return p[0] ^ p[1] ^ p[2] ^ p[3];
}

/* 16 bytes at base + at, those outside [lo, hi) zeros and never read. */
__device__ __noinline__ uint4 load_edge(const uint8_t *base, uint64_t at, uint64_t lo, uint64_t hi) {
  uint32_t v[4];
#pragma unroll
  for (unsigned q = 0; q < 4; q++) {
    v[q] = 0;
#pragma unroll
    for (unsigned b = 0; b < 4; b++) {
      const uint64_t pos = at + 4 * q + b;
      if (pos >= lo && pos < hi) v[q] |= (uint32_t)base[pos] << (8 * b);
    }
  }
  return make_uint4(v[0], v[1], v[2], v[3]);
}

/* Superword j of a tensor's frame: bytes outside [head, head + bytes) are
 * zeros and never read (only the first and last superwords have such). */
__device__ __forceinline__ void load_super(const crc_desc &D, uint64_t j, uint4 (&w)[kWords]) {
  const uint64_t at = j * kSuper, lo = D.head, hi = D.head + D.bytes;
  if (at >= lo && at + kSuper <= hi) {
    const uint4 *p = reinterpret_cast<const uint4 *>(D.base + at);
#pragma unroll
    for (unsigned k = 0; k < kWords; k++) w[k] = __ldg(p + k);
  } else {
#pragma unroll
    for (unsigned k = 0; k < kWords; k++) w[k] = load_edge(D.base, at + 16 * k, lo, hi);
  }
}

/* x^(8 kSuper m) x^(-8 pad) across the warp: lane s holds the factor of bit
 * s (and s + 32) of m, then a butterfly multiplies them; every lane returns it. */
__device__ uint32_t piece_factor(const uint8_t *smem, uint32_t lane4, uint64_t m, unsigned pad, unsigned lane) {
  uint32_t f = (m >> lane) & 1 ? kTables.pow2[lane] : kOne;
  if (lane == 31 && !(m >> 31)) f = kTables.unpad[pad]; /* a free lane */
  if (m >> 31) {
    if ((m >> 32 >> lane) & 1) f = mul(smem, lane4, f, kTables.pow2[32 + lane]);
    if (lane == 0) f = mul(smem, lane4, f, kTables.unpad[pad]);
  }
  for (unsigned o = 1; o < 32; o <<= 1) f = mul(smem, lane4, f, __shfl_xor_sync(LCT__FULL, f, o));
  return f;
}

/* Persistent blocks take the launch's pieces in turn. A piece is rows of
 * kThreads superwords; thread t folds superword t of each row. */
__global__ void __launch_bounds__(kThreads, 1) crc_pieces(const __grid_constant__ crc_params p) {
  extern __shared__ __align__(16) uint8_t smem[];
  uint32_t *s_row = reinterpret_cast<uint32_t *>(smem + kRowOffset);
  uint32_t *s_part = reinterpret_cast<uint32_t *>(smem + kPartOffset);
  const unsigned tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const uint32_t lane4 = lane * 4;
  /* One load per entry; the 32 copies rotate through the banks. */
  for (unsigned i = tid; i < 4 * 256; i += kThreads) {
    const unsigned k = i >> 8, e = i & 255;
    const uint32_t v = kTables.byte[k][e];
    uint32_t *at = reinterpret_cast<uint32_t *>(smem + (k >> 1) * 65536 + (k & 1) * 128 + e * 256);
#pragma unroll 8
    for (unsigned c = 0; c < 32; c++) at[(c + e) & 31] = v;
  }
  for (unsigned i = tid; i < 4 * 256; i += kThreads) s_row[i] = (&kTables.row[0][0])[i];
  __syncthreads();

  for (uint32_t unit = blockIdx.x; unit < p.pieces; unit += gridDim.x) {
    const crc_desc &D = p.d[lct__find_tensor(p.d, p.count, unit)];
    const uint64_t nsw = superwords(D.bytes, D.head);
    const uint64_t per = kThreads * p.rows, first = (unit - D.begin) * per;
    const uint32_t n = (uint32_t)(nsw - first < per ? nsw - first : per); /* superwords in this piece */
    /* Warp 0 first finds the move from the piece's end to the tensor's end and
     * back over the frame's trailing zeros (its latency hides under the rows). */
    uint32_t f = 0;
    if (warp == 0) f = piece_factor(smem, lane4, nsw - first - n, (unsigned)(nsw * kSuper - D.head - D.bytes), lane);

    uint32_t acc = 0;
    uint32_t j = tid;
    for (; j + kThreads < n; j += 2 * kThreads) { /* two rows at a time: independent chains */
      uint4 w0[kWords], w1[kWords];
      load_super(D, first + j, w0);
      load_super(D, first + j + kThreads, w1);
      const uint32_t s0 = fold_super(smem, lane4, first + j == 0 ? kTables.init[D.head] : 0, w0);
      const uint32_t s1 = fold_super(smem, lane4, 0, w1);
      acc = row_step(s_row, row_step(s_row, acc) ^ s0) ^ s1;
    }
    if (j < n) {
      uint4 w0[kWords];
      load_super(D, first + j, w0);
      acc = row_step(s_row, acc) ^ fold_super(smem, lane4, first + j == 0 ? kTables.init[D.head] : 0, w0);
    }
    /* Move the thread's value to the piece's end, then XOR the block. */
    uint32_t v = tid < n ? mul(smem, lane4, acc, kTables.col[(n - 1 - tid) % kThreads]) : 0;
#pragma unroll
    for (int o = 16; o; o >>= 1) v ^= __shfl_xor_sync(LCT__FULL, v, o);
    if (lane == 0) s_part[warp] = v;
    __syncthreads();
    if (warp == 0) {
      v = lane < kThreads / 32 ? s_part[lane] : 0;
#pragma unroll
      for (int o = 16; o; o >>= 1) v ^= __shfl_xor_sync(LCT__FULL, v, o);
      if (lane == 0) {
        v = mul(smem, lane4, v, f);
        if (p.direct) {
          *D.crc = ~v;
        } else {
          p.part[unit] = v;
        }
      }
    }
    __syncthreads(); /* s_part is reused */
  }
}

/* A warp per tensor: XOR of its pieces, then the final complement. */
__global__ void crc_finish(const __grid_constant__ crc_params p) {
  const unsigned lane = threadIdx.x & 31;
  const uint32_t i = (blockIdx.x * blockDim.x + threadIdx.x) >> 5;
  if (i >= p.count) return;
  const crc_desc &D = p.d[i];
  const uint32_t end = i + 1 < p.count ? p.d[i + 1].begin : p.pieces;
  uint32_t v = 0;
  for (uint32_t u = D.begin + lane; u < end; u += 32) v ^= p.part[u];
#pragma unroll
  for (int o = 16; o; o >>= 1) v ^= __shfl_xor_sync(LCT__FULL, v, o);
  if (lane == 0) *D.crc = D.bytes ? ~v : 0;
}

} // namespace

extern "C" size_t lct_cuda_crc32c_workspace_size(uint64_t bytes) {
  return (size_t)piece_count(bytes, 15, kMinRows) * sizeof(uint32_t);
}

extern "C" size_t lct_cuda_crc32c_batch_workspace_size(const lct_cuda_crc_item *items, size_t count) {
  size_t total = 0;
  for (size_t i = 0; i < count; i++) total += lct_cuda_crc32c_workspace_size(items[i].bytes);
  return total;
}

extern "C" int lct_cuda_crc32c_batch(const lct_cuda_crc_item *items, size_t count, void *workspace,
                                     size_t workspace_bytes, cudaStream_t stream) {
  if (!count) return 0;
  if (!items) return LCT_EINVAL;
  for (size_t i = 0; i < count; i++) {
    const lct_cuda_crc_item *it = &items[i];
    if (!it->crc || ((uintptr_t)it->crc & 3) || (it->bytes && !it->src)) return LCT_EINVAL;
    if (it->bytes > ((uint64_t)1 << 40)) return LCT_E2BIG;
  }
  const size_t need = lct_cuda_crc32c_batch_workspace_size(items, count);
  if (need && (!workspace || ((uintptr_t)workspace & 3))) return LCT_EINVAL;
  if (workspace_bytes < need) return LCT_EBUFSIZE;
  int dev, sms;
  LCT__CUDA_TRY(cudaGetDevice(&dev));
  LCT__CUDA_TRY(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const uint64_t blocks = (uint64_t)sms;
  static std::atomic<uint64_t> attrs_set{0};
  int rc = lct__smem_attrs((const void *)crc_pieces, kSmemBytes, true, dev, attrs_set);
  if (rc) return rc;

  crc_params p;
  memset(&p, 0, sizeof p);
  p.part = static_cast<uint32_t *>(workspace);
  for (size_t at = 0; at < count; at += p.count) {
    const size_t group = count - at < LCT__CRC_BATCH ? count - at : LCT__CRC_BATCH;
    /* Pieces of one size for the whole launch: one per block for a single
     * tensor, about four per block for several, which evens out their mix. */
    uint64_t total = 0;
    for (size_t i = at; i < at + group; i++)
      total += superwords(items[i].bytes, (unsigned)((uintptr_t)items[i].src & 15));
    const uint64_t split = kThreads * blocks * (group == 1 ? 1 : 4);
    p.rows = (total + split - 1) / split;
    if (p.rows < kMinRows) p.rows = kMinRows;
    p.count = 0;
    p.pieces = 0;
    p.direct = 1;
    for (size_t i = at; i < at + group; i++) {
      const lct_cuda_crc_item *it = &items[i];
      crc_desc &d = p.d[p.count++];
      d.head = (uint32_t)((uintptr_t)it->src & 15);
      d.base = static_cast<const uint8_t *>(it->src) - d.head;
      d.bytes = it->bytes;
      d.crc = it->crc;
      d.begin = p.pieces;
      const uint64_t n = piece_count(it->bytes, d.head, p.rows);
      p.pieces += (uint32_t)n;
      p.direct &= n == 1;
    }
    if (p.pieces) {
      crc_pieces<<<(unsigned)(p.pieces < blocks ? p.pieces : blocks), kThreads, kSmemBytes, stream>>>(p);
      LCT__LAUNCH_CHECK();
    }
    if (!p.direct) {
      crc_finish<<<(p.count * 32 + 255) / 256, 256, 0, stream>>>(p);
      LCT__LAUNCH_CHECK();
    }
    p.part += p.pieces;
  }
  return 0;
}

extern "C" int lct_cuda_crc32c(const void *src, uint64_t bytes, uint32_t *crc, void *workspace,
                               size_t workspace_bytes, cudaStream_t stream) {
  const lct_cuda_crc_item it = {src, bytes, crc};
  return lct_cuda_crc32c_batch(&it, 1, workspace, workspace_bytes, stream);
}
