/* test_cuda_codec.c — GPU codec: byte equality with the CPU codec, round trips, batches, histograms, corrupt blobs. */
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <math.h>

#include "lct_checksum.h"
#include "lct_cuda.h"
#include "test_util.h"

/* Every test runs only where a CUDA device is present (CI builds, then skips). */
#define REQUIRE_GPU()                                                    \
  do {                                                                   \
    int n_dev_ = 0;                                                      \
    if (cudaGetDeviceCount(&n_dev_) != cudaSuccess || n_dev_ == 0)       \
      cr_skip_test("no CUDA device");                                    \
  } while (0)

#define CUDA_OK(call)                                                                       \
  do {                                                                                      \
    cudaError_t e_ = (call);                                                                \
    cr_assert_eq(e_, cudaSuccess, "%s: %s", #call, cudaGetErrorString(e_));                 \
  } while (0)

/* Lanes, chunk halves (a version 2 chunk's two parts) and chunks, partial and whole. */
static const uint64_t kSizes[] = {0,   1,   255, 257, 511, 513, LCT_CHUNK_ELEMS / 2 - 1, LCT_CHUNK_ELEMS / 2 + 1,
                                  LCT_CHUNK_ELEMS - 1, LCT_CHUNK_ELEMS, LCT_CHUNK_ELEMS + 1};

/* Test tensors. kind 0: random bits; 1: trained-like (few exponents near the
 * top of the range, random mantissas); 2: special values (NaN payloads, Inf,
 * zeros, subnormals, extremes) among trained-like ones; 3: trained-like with the
 * low half of the mantissa zero (autocast gradients: trimmed); 4: one value. */
#define KINDS 5
static void gen(int dtype, int kind, uint64_t seed, void *dst, uint64_t n) {
  static const unsigned ebits[] = {0, 8, 8, 5, 4, 5}, mbits[] = {0, 23, 7, 10, 3, 2};
  const size_t w = lct_dtype_size(dtype);
  uint8_t *out = dst;
  test_rng rng = {seed * 1000003u + (uint64_t)dtype * 101u + (uint64_t)kind};
  const unsigned E = ebits[dtype], Mt = mbits[dtype], bias = E ? (1u << (E - 1)) - 1 : 0;
  const uint32_t fixed = (uint32_t)test_rand(&rng);
  for (uint64_t i = 0; i < n; i++) {
    uint64_t r = test_rand(&rng);
    uint32_t x;
    if (kind == 0 || dtype == LCT_DTYPE_RAW) {
      x = (uint32_t)r;
    } else if (kind == 4) {
      x = fixed;
    } else {
      unsigned geo = (unsigned)__builtin_ctzll(r | (1ull << 63)) / 2;
      int e = (int)bias - 3 - (int)geo;
      if (e < 0) e = 0;
      uint32_t mant = (uint32_t)(r >> 40) & ((1u << Mt) - 1);
      if (kind == 3) mant &= ~((1u << (Mt / 2)) - 1);
      x = (uint32_t)((r >> 39) & 1) << (E + Mt) | (uint32_t)e << Mt | mant;
      if (kind == 2 && (r & 7) == 0) {
        const uint32_t all = (1u << (E + Mt)) - 1, inf = ((1u << E) - 1) << Mt;
        switch ((r >> 3) % 8) {
        case 0: x = inf; break;                                     /* +Inf (e4m3: a NaN) */
        case 1: x = inf | 1u << (E + Mt); break;                    /* -Inf */
        case 2: x = inf | ((uint32_t)(r >> 20) & ((1u << Mt) - 1)) | 1; break; /* NaN, payload */
        case 3: x = 1u << (E + Mt); break;                          /* -0 */
        case 4: x = 0; break;                                       /* +0 */
        case 5: x = 1; break;                                       /* smallest subnormal */
        case 6: x = all; break;                                     /* all ones */
        default: x = all & ~(1u << Mt); break;                      /* largest finite */
        }
      }
    }
    memcpy(out + i * w, &x, w);
  }
}

/* A device copy of len bytes at `shift` bytes past a fresh allocation. */
typedef struct {
  uint8_t *base, *p;
} dbuf;

static dbuf dput(const void *h, size_t len, size_t shift) {
  dbuf b;
  CUDA_OK(cudaMalloc((void **)&b.base, len + shift + 16));
  b.p = b.base + shift;
  if (len && h) CUDA_OK(cudaMemcpy(b.p, h, len, cudaMemcpyHostToDevice));
  return b;
}

/* Encodes on the GPU; returns a malloc'd copy of the blob and its size.
 * With bits, a batch item receives the code bits (added to a nonzero start,
 * then subtracted); without, the one-tensor call runs (no code bits). */
static uint8_t *gpu_encode(int dtype, const lct_codebook *cb, const void *src, uint64_t n, size_t shift,
                           uint64_t *size, uint64_t *bits) {
  const size_t w = lct_dtype_size(dtype), cap = lct_encode_bound(dtype, n);
  lct_cuda_codebook *dcb = NULL;
  if (dtype != LCT_DTYPE_RAW) cr_assert_eq(lct_cuda_codebook_create(cb, &dcb), 0);
  dbuf in = dput(src, n * w, shift);
  uint8_t *d_blob;
  uint64_t *d_size;
  CUDA_OK(cudaMalloc((void **)&d_blob, cap));
  CUDA_OK(cudaMemset(d_blob, 0xA5, cap)); /* poison: every byte of the blob must be written */
  const uint64_t start = 1000003;
  CUDA_OK(cudaMalloc((void **)&d_size, 2 * sizeof *d_size)); /* blob size, code bits */
  CUDA_OK(cudaMemset(d_size, 0xff, sizeof *d_size));
  CUDA_OK(cudaMemcpy(d_size + 1, &start, sizeof start, cudaMemcpyHostToDevice));
  lct_cuda_encode_item it = {dtype, dcb, in.p, n, d_blob, cap, d_size, d_size + 1, NULL};
  size_t ws_bytes = lct_cuda_encode_workspace_size(&it, 1);
  void *ws;
  CUDA_OK(cudaMalloc(&ws, ws_bytes));
  CUDA_OK(cudaMemset(ws, 0xA5, ws_bytes)); /* the workspace needs no clearing */
  if (bits) {
    cr_assert_eq(lct_cuda_encode_batch(&it, 1, ws, ws_bytes, 0), 0);
  } else {
    cr_assert_eq(lct_cuda_encode(dtype, dcb, in.p, n, d_blob, cap, d_size, ws, ws_bytes, 0), 0);
  }
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpy(size, d_size, sizeof *size, cudaMemcpyDeviceToHost));
  if (bits) {
    CUDA_OK(cudaMemcpy(bits, d_size + 1, sizeof *bits, cudaMemcpyDeviceToHost));
    *bits -= start;
  }
  cr_assert_leq(*size, cap, "%s n=%llu: blob size %llu beyond the bound %zu", lct_dtype_name(dtype),
                (unsigned long long)n, (unsigned long long)*size, cap);
  uint8_t *blob = malloc(cap);
  CUDA_OK(cudaMemcpy(blob, d_blob, *size, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaFree(ws));
  CUDA_OK(cudaFree(d_size));
  CUDA_OK(cudaFree(d_blob));
  CUDA_OK(cudaFree(in.base));
  lct_cuda_codebook_destroy(dcb);
  return blob;
}

/* Decodes on the GPU into out (n elements); returns the status word. */
static int gpu_decode(int dtype, uint64_t n, const void *blob, uint64_t len, void *out, size_t shift) {
  const size_t w = lct_dtype_size(dtype);
  dbuf b = dput(blob, len, 0), o = dput(NULL, n * w, shift);
  CUDA_OK(cudaMemset(o.base, 0x5A, n * w + shift + 16)); /* poison: every element must be written */
  int *d_status, status = 12345;
  CUDA_OK(cudaMalloc((void **)&d_status, sizeof *d_status));
  CUDA_OK(cudaMemset(d_status, 0x7f, sizeof *d_status));
  size_t ws_bytes = lct_cuda_decode_workspace_size(1);
  void *ws;
  CUDA_OK(cudaMalloc(&ws, ws_bytes));
  cr_assert_eq(lct_cuda_decode(dtype, n, b.p, len, o.p, d_status, ws, ws_bytes, 0), 0);
  CUDA_OK(cudaDeviceSynchronize());
  CUDA_OK(cudaMemcpy(&status, d_status, sizeof status, cudaMemcpyDeviceToHost));
  if (n) CUDA_OK(cudaMemcpy(out, o.p, n * w, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaFree(ws));
  CUDA_OK(cudaFree(d_status));
  CUDA_OK(cudaFree(o.base));
  CUDA_OK(cudaFree(b.base));
  return status;
}

/* Where byte `at` of a blob lies, for failure messages. */
static void describe(const uint8_t *blob, uint64_t len, int dtype, uint64_t at, char *buf, size_t cap) {
  const uint64_t table = LCT_HEADER_BYTES + ((lct_codebook_bytes(dtype) + 7) & ~(size_t)7);
  uint32_t n_chunks;
  memcpy(&n_chunks, blob + 16, 4);
  if (at < LCT_HEADER_BYTES) {
    snprintf(buf, cap, "header byte %llu", (unsigned long long)at);
    return;
  }
  if (at < table) {
    snprintf(buf, cap, "codebook byte %llu", (unsigned long long)(at - LCT_HEADER_BYTES));
    return;
  }
  if (at < table + 8ull * n_chunks) {
    snprintf(buf, cap, "chunk table entry %llu", (unsigned long long)((at - table) / 8));
    return;
  }
  for (uint32_t c = 0; c < n_chunks; c++) {
    uint64_t off, end = len;
    memcpy(&off, blob + table + 8 * c, 8);
    if (c + 1 < n_chunks) memcpy(&end, blob + table + 8 * (c + 1), 8);
    if (at >= off && at < end) {
      snprintf(buf, cap, "chunk %u (mode %u, trim %u) byte %llu of %llu", c, blob[off], blob[off + 1],
               (unsigned long long)(at - off), (unsigned long long)(end - off));
      return;
    }
  }
  snprintf(buf, cap, "beyond the chunks");
}

/* The GPU blob equals lct_encode's byte for byte, its code bits equal the
 * CPU's count, and both codecs decode it. */
static lct_encode_stats check_same(int dtype, const lct_codebook *cb, const void *src, uint64_t n, size_t shift,
                                   const char *what) {
  const size_t w = lct_dtype_size(dtype), cap = lct_encode_bound(dtype, n);
  uint8_t *cpu = malloc(cap);
  lct_encode_stats st;
  cr_assert_eq(lct_encode(dtype, cb, src, n, cpu, cap, &st), 0);
  uint64_t gsize, gbits;
  uint8_t *gpu = gpu_encode(dtype, cb, src, n, shift, &gsize, &gbits);
  uint64_t first = 0;
  while (first < gsize && first < st.blob_bytes && gpu[first] == cpu[first]) first++;
  if (gsize != st.blob_bytes || first < gsize) {
    char where[160];
    describe(cpu, st.blob_bytes, dtype, first, where, sizeof where);
    cr_assert_fail("%s %s n=%llu shift=%zu: GPU blob %llu bytes, CPU %llu; first difference at %llu (%s): gpu %02x cpu %02x",
                   what, lct_dtype_name(dtype), (unsigned long long)n, shift, (unsigned long long)gsize,
                   (unsigned long long)st.blob_bytes, (unsigned long long)first, where,
                   first < gsize ? gpu[first] : 0, first < st.blob_bytes ? cpu[first] : 0);
  }
  cr_assert_eq(gbits, st.code_bits, "%s %s n=%llu: GPU code bits %llu, CPU %llu (%llu escapes, %llu raw chunks)", what,
               lct_dtype_name(dtype), (unsigned long long)n, (unsigned long long)gbits,
               (unsigned long long)st.code_bits, (unsigned long long)st.escapes, (unsigned long long)st.raw_chunks);
  uint8_t *out = malloc(n * w + 1);
  int status = gpu_decode(dtype, n, gpu, gsize, out, shift);
  cr_assert_eq(status, 0, "%s %s n=%llu: GPU decode status %d (%s)", what, lct_dtype_name(dtype),
               (unsigned long long)n, status, lct_strerror(status));
  cr_assert(n == 0 || memcmp(out, src, n * w) == 0, "%s %s n=%llu: GPU round trip differs", what,
            lct_dtype_name(dtype), (unsigned long long)n);
  /* The same tensor as format version 1 wrote it decodes too. */
  size_t v1_len;
  uint8_t *v1 = test_blob_as_version_1(cpu, st.blob_bytes, &v1_len);
  memset(out, 0, n * w);
  status = gpu_decode(dtype, n, v1, v1_len, out, shift);
  cr_assert_eq(status, 0, "%s %s n=%llu: GPU decode of version 1 status %d (%s)", what, lct_dtype_name(dtype),
               (unsigned long long)n, status, lct_strerror(status));
  cr_assert(n == 0 || memcmp(out, src, n * w) == 0, "%s %s n=%llu: GPU decode of version 1 differs", what,
            lct_dtype_name(dtype), (unsigned long long)n);
  free(v1);
  free(out);
  free(gpu);
  free(cpu);
  return st;
}

static void codebook_for(int dtype, const void *src, uint64_t n, lct_codebook *cb) {
  if (dtype != LCT_DTYPE_RAW) cr_assert_eq(lct_codebook_from_data(dtype, src, n, cb), 0);
}

Test(cuda_codec, every_dtype_kind_and_size) {
  REQUIRE_GPU();
  const uint64_t max_n = LCT_CHUNK_ELEMS + 1;
  uint8_t *src = malloc(max_n * 4);
  for (int dtype = 0; dtype < LCT_DTYPE_COUNT; dtype++) {
    for (int kind = 0; kind < KINDS; kind++) {
      for (size_t k = 0; k < sizeof kSizes / sizeof kSizes[0]; k++) {
        const uint64_t n = kSizes[k];
        gen(dtype, kind, k + 1, src, n);
        lct_codebook cb;
        codebook_for(dtype, src, n, &cb);
        char what[32];
        snprintf(what, sizeof what, "kind %d", kind);
        check_same(dtype, &cb, src, n, 0, what);
      }
    }
  }
  free(src);
}

Test(cuda_codec, several_mib_every_dtype) {
  REQUIRE_GPU();
  for (int dtype = 0; dtype < LCT_DTYPE_COUNT; dtype++) {
    const size_t w = lct_dtype_size(dtype);
    const uint64_t n = (3u << 20) / w + 4097; /* a few MiB, a partial last chunk */
    uint8_t *src = malloc(n * w);
    for (int kind = 0; kind < 4; kind++) {
      gen(dtype, kind, 7, src, n);
      lct_codebook cb;
      codebook_for(dtype, src, n, &cb);
      check_same(dtype, &cb, src, n, 0, "MiB");
    }
    free(src);
  }
}

Test(cuda_codec, unaligned_input_and_output) {
  REQUIRE_GPU();
  const uint64_t n = 2 * LCT_CHUNK_ELEMS + 777;
  uint8_t *src = malloc(n * 4);
  for (int dtype = 0; dtype < LCT_DTYPE_COUNT; dtype++) {
    const size_t w = lct_dtype_size(dtype);
    gen(dtype, 1, 3, src, n);
    lct_codebook cb;
    codebook_for(dtype, src, n, &cb);
    for (size_t shift = w; shift < 16; shift += w) check_same(dtype, &cb, src, n, shift, "shifted");
  }
  free(src);
}

/* A codebook built on other data: symbols it lacks escape, bytes still match. */
Test(cuda_codec, stale_codebook) {
  REQUIRE_GPU();
  const uint64_t n = 3 * LCT_CHUNK_ELEMS + 5;
  uint8_t *a = malloc(n * 4), *b = malloc(n * 4);
  for (int dtype = 1; dtype < LCT_DTYPE_COUNT; dtype++) {
    gen(dtype, 1, 11, a, n);
    gen(dtype, 0, 12, b, n);
    lct_codebook cb;
    codebook_for(dtype, a, n, &cb);
    cr_assert_gt(check_same(dtype, &cb, b, n, 0, "stale").escapes, 0);
    /* One known symbol: (nearly) every element escapes. */
    uint64_t hist[LCT_MAX_SYMS] = {0};
    hist[1] = 1;
    cr_assert_eq(lct_codebook_build(dtype, hist, &cb), 0);
    cr_assert_gt(check_same(dtype, &cb, a, n, 0, "one-symbol").escapes, n / 2);
  }
  free(a);
  free(b);
}

/* Lanes of 4096 code bits or more: the GPU encoder stores their chunks raw too. */
Test(cuda_codec, lanes_past_their_length_field_go_raw) {
  REQUIRE_GPU();
  const uint64_t n = 2 * LCT_CHUNK_ELEMS + 300;
  lct_codebook cb;
  uint32_t *x = test_escape_only_f32(n, &cb);
  cr_assert_eq(check_same(LCT_DTYPE_F32, &cb, x, n, 0, "escapes only").raw_chunks, 3);
  free(x);
}

/* Code bits count for chunks whose codes did not pay (random bits: stored
 * raw) but not for chunks too short to hold a coded header (the tail). */
Test(cuda_codec, code_bits_of_raw_chunks) {
  REQUIRE_GPU();
  const uint64_t n = 3 * LCT_CHUNK_ELEMS + 5;
  uint8_t *src = malloc(n * 4);
  for (int dtype = 1; dtype < LCT_DTYPE_COUNT; dtype++) {
    gen(dtype, 0, 21, src, n);
    lct_codebook cb;
    codebook_for(dtype, src, n, &cb);
    const lct_encode_stats st = check_same(dtype, &cb, src, n, 0, "raw chunks");
    const size_t cap = lct_encode_bound(dtype, 3 * LCT_CHUNK_ELEMS);
    uint8_t *blob = malloc(cap);
    lct_encode_stats full;
    cr_assert_eq(lct_encode(dtype, &cb, src, 3 * LCT_CHUNK_ELEMS, blob, cap, &full), 0);
    cr_assert_eq(st.raw_chunks, 4, "%s: %llu raw chunks", lct_dtype_name(dtype), (unsigned long long)st.raw_chunks);
    cr_assert_gt(st.code_bits, 0);
    cr_assert_eq(st.code_bits, full.code_bits, "%s: the 5-element tail counts no code bits", lct_dtype_name(dtype));
    free(blob);
  }
  free(src);
}

Test(cuda_codec, shared_tensor_slices) {
  REQUIRE_GPU();
  DIR *dir = opendir(test_data_dir());
  cr_assert(dir, "cannot open %s", test_data_dir());
  int files = 0;
  uint64_t *d_hist;
  CUDA_OK(cudaMalloc((void **)&d_hist, sizeof(uint64_t) << 10));
  for (struct dirent *de; (de = readdir(dir));) {
    const int dtype = test_dtype_from_name(de->d_name);
    if (dtype <= 0 || !strstr(de->d_name, ".bin")) continue;
    size_t len;
    uint8_t *data = test_read_data(de->d_name, &len);
    const uint64_t n = len / lct_dtype_size(dtype);
    lct_codebook cpu_cb, gpu_cb;
    cr_assert_eq(lct_codebook_from_data(dtype, data, n, &cpu_cb), 0);
    dbuf d = dput(data, len, 0);
    cr_assert_eq(lct_cuda_codebook_from_device(dtype, d.p, n, d_hist, 0, &gpu_cb), 0);
    cr_assert_arr_eq(gpu_cb.len, cpu_cb.len, sizeof cpu_cb.len, "%s: GPU-histogram codebook differs", de->d_name);
    CUDA_OK(cudaFree(d.base));
    check_same(dtype, &cpu_cb, data, n, 0, de->d_name);
    free(data);
    files++;
  }
  closedir(dir);
  CUDA_OK(cudaFree(d_hist));
  cr_assert_geq(files, 1, "no *.DTYPE.bin slices in %s", test_data_dir());
}

/* tests/data/golden: the blob each NAME.DTYPE.in encodes to with the codebook it carries. */
static void gpu_golden_encodes_to_its_blob(const test_golden *g, void *arg) {
  (void)arg;
  lct_codebook cb;
  if (g->dtype != LCT_DTYPE_RAW)
    cr_assert_eq(lct_codebook_parse(g->dtype, g->blob + LCT_HEADER_BYTES, lct_codebook_bytes(g->dtype), &cb), 0);
  const uint64_t n = g->in_len / lct_dtype_size(g->dtype);
  uint64_t gsize;
  uint8_t *gpu = gpu_encode(g->dtype, &cb, g->in, n, 0, &gsize, NULL);
  cr_assert_eq(gsize, g->blob_len, "%s: GPU blob %llu bytes, golden %zu", g->name, (unsigned long long)gsize,
               g->blob_len);
  cr_assert_arr_eq(gpu, g->blob, g->blob_len, "%s: GPU blob differs from the golden one", g->name);
  uint8_t *out = malloc(g->in_len + 1);
  cr_assert_eq(gpu_decode(g->dtype, n, g->blob, g->blob_len, out, 0), 0, "%s: GPU decode", g->name);
  cr_assert(g->in_len == 0 || memcmp(out, g->in, g->in_len) == 0, "%s: GPU decode differs", g->name);
  free(out);
  free(gpu);
}

Test(cuda_codec, golden_blobs) {
  REQUIRE_GPU();
  cr_assert_geq(test_each_golden(gpu_golden_encodes_to_its_blob, NULL), 6);
}

/* Version 1 golden blobs (tests/data/golden/v1/) decode on the GPU to the
 * inputs they were written from. */
static void gpu_golden_version_1_decodes(const test_golden *g, void *arg) {
  (void)arg;
  cr_assert_eq(g->v1[4], 1);
  uint8_t *out = malloc(g->in_len + 1);
  cr_assert_eq(gpu_decode(g->dtype, g->in_len / lct_dtype_size(g->dtype), g->v1, g->v1_len, out, 0), 0,
               "%s: GPU decode", g->name);
  cr_assert(g->in_len == 0 || memcmp(out, g->in, g->in_len) == 0, "%s: GPU decode differs", g->name);
  free(out);
}

Test(cuda_codec, golden_version_1_blobs_decode) {
  REQUIRE_GPU();
  cr_assert_geq(test_each_golden(gpu_golden_version_1_decodes, NULL), 6);
}

Test(cuda_codec, histogram_matches_cpu) {
  REQUIRE_GPU();
  const uint64_t n = 5 * LCT_CHUNK_ELEMS + 3;
  uint8_t *src = malloc(n * 4);
  uint64_t *d_hist, cpu[1024], gpu[1024];
  CUDA_OK(cudaMalloc((void **)&d_hist, sizeof cpu));
  for (int dtype = 1; dtype < LCT_DTYPE_COUNT; dtype++) {
    const size_t w = lct_dtype_size(dtype), bins = (size_t)1 << lct_dtype_symbol_bits(dtype);
    for (int kind = 0; kind < KINDS; kind++) {
      for (size_t shift = 0; shift < 16; shift += 16 - w) {
        gen(dtype, kind, 5, src, n);
        memset(cpu, 0, sizeof cpu);
        cr_assert_eq(lct_histogram(dtype, src, n, cpu), 0);
        dbuf d = dput(src, n * w, shift);
        CUDA_OK(cudaMemset(d_hist, 0, sizeof cpu));
        cr_assert_eq(lct_cuda_histogram(dtype, d.p, n, d_hist, 0), 0);
        CUDA_OK(cudaMemcpy(gpu, d_hist, bins * 8, cudaMemcpyDeviceToHost));
        cr_assert_arr_eq(gpu, cpu, bins * 8, "%s kind %d shift %zu: histogram differs", lct_dtype_name(dtype), kind,
                         shift);
        CUDA_OK(cudaFree(d.base));
      }
    }
  }
  cr_assert_eq(lct_cuda_histogram(LCT_DTYPE_RAW, src, 1, d_hist, 0), LCT_EINVAL);
  CUDA_OK(cudaFree(d_hist));
  free(src);
}

/* Hundreds of tensors of mixed dtypes and sizes in one call: each blob and
 * code-bit count equals the CPU's (so the single call's; every fifth item
 * asks for no count), every third coded item's histogram, taken in the same
 * pass, equals lct_histogram's, and a batched decode restores them all. */
Test(cuda_codec, batch_equals_single) {
  REQUIRE_GPU();
  enum { COUNT = 300 };
  static lct_cuda_encode_item enc[COUNT];
  static lct_cuda_decode_item dec[COUNT];
  static lct_cuda_codebook *cbs[COUNT];
  static uint8_t *host[COUNT];
  static lct_codebook cb[COUNT];
  test_rng rng = {31337};
  size_t total_in = 0, total_cap = 0;
  for (int i = 0; i < COUNT; i++) {
    const int dtype = (int)(test_rand(&rng) % LCT_DTYPE_COUNT);
    const uint64_t sizes[] = {0, 1, 513, LCT_CHUNK_ELEMS, 3 * LCT_CHUNK_ELEMS + 17, test_rand(&rng) % 70000};
    const uint64_t n = sizes[test_rand(&rng) % 6];
    const size_t w = lct_dtype_size(dtype);
    host[i] = malloc(n * w + 1);
    gen(dtype, i % KINDS, (uint64_t)i, host[i], n);
    codebook_for(dtype, host[i], n, &cb[i]);
    cbs[i] = NULL;
    if (dtype != LCT_DTYPE_RAW) cr_assert_eq(lct_cuda_codebook_create(&cb[i], &cbs[i]), 0);
    enc[i] = (lct_cuda_encode_item){dtype, cbs[i], NULL, n, NULL, lct_encode_bound(dtype, n), NULL, NULL, NULL};
    total_in += (n * w + 255) & ~(size_t)255;
    total_cap += (enc[i].cap + 255) & ~(size_t)255;
  }
  uint8_t *d_in, *d_blobs, *d_out;
  uint64_t *d_sizes, sizes[COUNT], *d_bits, bits[COUNT], *d_hist, hist[LCT_MAX_SYMS], cpu_hist[LCT_MAX_SYMS];
  int *d_status, status[COUNT];
  const size_t bins = LCT_MAX_SYMS - 1; /* 2^s for the widest alphabet */
  CUDA_OK(cudaMalloc((void **)&d_hist, COUNT * bins * sizeof *d_hist));
  CUDA_OK(cudaMemset(d_hist, 0, COUNT * bins * sizeof *d_hist));
  CUDA_OK(cudaMalloc((void **)&d_in, total_in + 256));
  CUDA_OK(cudaMalloc((void **)&d_out, total_in + 256));
  CUDA_OK(cudaMalloc((void **)&d_blobs, total_cap + 256));
  CUDA_OK(cudaMalloc((void **)&d_sizes, sizeof sizes));
  CUDA_OK(cudaMalloc((void **)&d_bits, sizeof bits));
  CUDA_OK(cudaMemset(d_bits, 0, sizeof bits));
  CUDA_OK(cudaMalloc((void **)&d_status, sizeof status));
  size_t in_at = 0, blob_at = 0;
  for (int i = 0; i < COUNT; i++) {
    const size_t bytes = enc[i].n_elems * lct_dtype_size(enc[i].dtype);
    enc[i].src = d_in + in_at;
    if (bytes) CUDA_OK(cudaMemcpy(d_in + in_at, host[i], bytes, cudaMemcpyHostToDevice));
    enc[i].dst = d_blobs + blob_at;
    enc[i].blob_bytes = d_sizes + i;
    enc[i].code_bits = i % 5 == 4 ? NULL : d_bits + i;
    enc[i].hist = i % 3 == 0 && lct_dtype_symbol_bits(enc[i].dtype) ? d_hist + i * bins : NULL;
    dec[i] = (lct_cuda_decode_item){enc[i].dtype, enc[i].n_elems, enc[i].dst, 0, d_out + in_at, d_status + i};
    in_at += (bytes + 255) & ~(size_t)255;
    blob_at += (enc[i].cap + 255) & ~(size_t)255;
  }
  size_t ws_bytes = lct_cuda_encode_workspace_size(enc, COUNT);
  if (lct_cuda_decode_workspace_size(COUNT) > ws_bytes) ws_bytes = lct_cuda_decode_workspace_size(COUNT);
  void *ws;
  CUDA_OK(cudaMalloc(&ws, ws_bytes));
  /* The workspace is reused as a service reuses it: a launch before, over
   * other bytes, leaves other chunk sizes in the look-back slots, which the
   * real launch must not take for its own. */
  lct_cuda_encode_item other[COUNT];
  memcpy(other, enc, sizeof other);
  CUDA_OK(cudaMemset(d_out, 0x3c, total_in + 256));
  for (int i = 0; i < COUNT; i++) other[i].src = d_out + ((const uint8_t *)enc[i].src - d_in);
  cr_assert_eq(lct_cuda_encode_batch(other, COUNT, ws, ws_bytes, 0), 0);
  CUDA_OK(cudaMemset(d_bits, 0, sizeof bits));
  CUDA_OK(cudaMemset(d_hist, 0, COUNT * bins * sizeof *d_hist));
  cr_assert_eq(lct_cuda_encode_batch(enc, COUNT, ws, ws_bytes, 0), 0);
  CUDA_OK(cudaMemcpy(sizes, d_sizes, sizeof sizes, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(bits, d_bits, sizeof bits, cudaMemcpyDeviceToHost));
  for (int i = 0; i < COUNT; i++) {
    const int dtype = enc[i].dtype;
    uint8_t *cpu = malloc(enc[i].cap), *gpu = malloc(enc[i].cap);
    lct_encode_stats st;
    cr_assert_eq(lct_encode(dtype, &cb[i], host[i], enc[i].n_elems, cpu, enc[i].cap, &st), 0);
    cr_assert_eq(sizes[i], st.blob_bytes, "tensor %d (%s, n=%llu): batched blob size %llu, CPU %llu", i,
                 lct_dtype_name(dtype), (unsigned long long)enc[i].n_elems, (unsigned long long)sizes[i],
                 (unsigned long long)st.blob_bytes);
    CUDA_OK(cudaMemcpy(gpu, enc[i].dst, sizes[i], cudaMemcpyDeviceToHost));
    cr_assert_arr_eq(gpu, cpu, sizes[i], "tensor %d (%s, n=%llu): batched blob differs", i, lct_dtype_name(dtype),
                     (unsigned long long)enc[i].n_elems);
    cr_assert_eq(bits[i], enc[i].code_bits ? st.code_bits : 0,
                 "tensor %d (%s, n=%llu): batched code bits %llu, CPU %llu", i, lct_dtype_name(dtype),
                 (unsigned long long)enc[i].n_elems, (unsigned long long)bits[i], (unsigned long long)st.code_bits);
    if (enc[i].hist) {
      const size_t nb = (size_t)1 << lct_dtype_symbol_bits(dtype);
      memset(cpu_hist, 0, sizeof cpu_hist);
      cr_assert_eq(lct_histogram(dtype, host[i], enc[i].n_elems, cpu_hist), 0);
      CUDA_OK(cudaMemcpy(hist, enc[i].hist, nb * sizeof *hist, cudaMemcpyDeviceToHost));
      cr_assert_arr_eq(hist, cpu_hist, nb * sizeof *hist, "tensor %d (%s, n=%llu): the encoder's histogram differs", i,
                       lct_dtype_name(dtype), (unsigned long long)enc[i].n_elems);
    }
    dec[i].blob_bytes = sizes[i];
    free(cpu);
    free(gpu);
  }
  CUDA_OK(cudaMemset(d_status, 0x7f, sizeof status));
  cr_assert_eq(lct_cuda_decode_batch(dec, COUNT, ws, ws_bytes, 0), 0);
  CUDA_OK(cudaMemcpy(status, d_status, sizeof status, cudaMemcpyDeviceToHost));
  for (int i = 0; i < COUNT; i++) {
    const size_t bytes = enc[i].n_elems * lct_dtype_size(enc[i].dtype);
    cr_assert_eq(status[i], 0, "tensor %d: batched decode status %d", i, status[i]);
    uint8_t *back = malloc(bytes + 1);
    CUDA_OK(cudaMemcpy(back, dec[i].dst, bytes, cudaMemcpyDeviceToHost));
    cr_assert(bytes == 0 || memcmp(back, host[i], bytes) == 0, "tensor %d: batched round trip differs", i);
    free(back);
    free(host[i]);
    lct_cuda_codebook_destroy(cbs[i]);
  }
  CUDA_OK(cudaFree(ws));
  CUDA_OK(cudaFree(d_status));
  CUDA_OK(cudaFree(d_bits));
  CUDA_OK(cudaFree(d_hist));
  CUDA_OK(cudaFree(d_sizes));
  CUDA_OK(cudaFree(d_blobs));
  CUDA_OK(cudaFree(d_out));
  CUDA_OK(cudaFree(d_in));
}

/* A batch too big to split every blob's chunks in two (the decoder then
 * decodes chunks whole) still splits its blobs too small to fill a block:
 * small version 2 and version 1 blobs, beside large ones, decode exactly as
 * they would alone, and corrupt ones (a codebook, a split chunk) fail alone. */
Test(cuda_codec, full_batch_with_small_blobs) {
  REQUIRE_GPU();
  int dev, sms;
  CUDA_OK(cudaGetDevice(&dev));
  CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const uint64_t C = LCT_CHUNK_ELEMS;
  /* More chunk halves than the GPU holds at once: at most two blocks of 8
   * pairs (2-byte dtypes) or three of 4 (f32) per SM. */
  const uint64_t large = (uint64_t)sms * 9 * C + 99;
  enum { CORRUPT_CHUNK = 1, CORRUPT_CODEBOOK = 2 };
  static const struct {
    int version, corrupt;
    uint64_t n;
  } spec[] = {
      {2, 0, 1}, {2, CORRUPT_CHUNK, C}, {2, CORRUPT_CODEBOOK, 768}, {2, 0, 513}, {2, 0, C / 2 + 1},
      {2, 0, C}, {2, 0, 2 * C + 5}, {2, 0, 3 * C + 17}, {2, 0, 4 * C}, {1, 0, 1}, {1, 0, 513},
      {1, 0, 768}, {1, 0, C / 2 + 1}, {1, 0, C}, {1, 0, 2 * C + 5}, {1, 0, 3 * C + 17}, {2, 0, 5 * C + 1},
  };
  enum { SPECS = sizeof spec / sizeof spec[0], COUNT = SPECS + 2 };
  const int dtypes[] = {LCT_DTYPE_BF16, LCT_DTYPE_F32};
  for (size_t d = 0; d < 2; d++) {
    const int dtype = dtypes[d];
    const size_t w = lct_dtype_size(dtype);
    uint64_t n[COUNT];
    int corrupt[COUNT];
    uint8_t *host[COUNT], *blob[COUNT];
    size_t len[COUNT];
    for (int i = 0; i < COUNT; i++) { /* a large blob first and last, the small ones between */
      const int s = i - 1, inner = i > 0 && i <= SPECS;
      n[i] = inner ? spec[s].n : large - (uint64_t)i;
      corrupt[i] = inner ? spec[s].corrupt : 0;
      host[i] = malloc(n[i] * w + 1);
      gen(dtype, 1 + i % 3, (uint64_t)i, host[i], n[i]);
      lct_codebook cb;
      codebook_for(dtype, host[i], n[i], &cb);
      const size_t cap = lct_encode_bound(dtype, n[i]);
      lct_encode_stats st;
      blob[i] = malloc(cap);
      cr_assert_eq(lct_encode(dtype, &cb, host[i], n[i], blob[i], cap, &st), 0);
      len[i] = st.blob_bytes;
      if (inner && spec[s].version == 1) {
        uint8_t *v1 = test_blob_as_version_1(blob[i], len[i], &len[i]);
        free(blob[i]);
        blob[i] = v1;
      }
      if (corrupt[i] == CORRUPT_CHUNK) blob[i][len[i] - 64] ^= 0x10; /* a code or mantissa word of a split chunk */
      if (corrupt[i] == CORRUPT_CODEBOOK) blob[i][LCT_HEADER_BYTES + 3] ^= 0x10;
    }
    size_t blob_total = 0, out_total = 0;
    for (int i = 0; i < COUNT; i++) {
      blob_total += (len[i] + 255) & ~(size_t)255;
      out_total += (n[i] * w + 255) & ~(size_t)255;
    }
    uint8_t *d_blobs, *d_out;
    int *d_status, status[COUNT];
    CUDA_OK(cudaMalloc((void **)&d_blobs, blob_total));
    CUDA_OK(cudaMalloc((void **)&d_out, out_total));
    CUDA_OK(cudaMemset(d_out, 0x5A, out_total));
    CUDA_OK(cudaMalloc((void **)&d_status, sizeof status));
    CUDA_OK(cudaMemset(d_status, 0x7f, sizeof status));
    lct_cuda_decode_item dec[COUNT];
    size_t blob_at = 0, out_at = 0;
    for (int i = 0; i < COUNT; i++) {
      CUDA_OK(cudaMemcpy(d_blobs + blob_at, blob[i], len[i], cudaMemcpyHostToDevice));
      dec[i] = (lct_cuda_decode_item){dtype, n[i], d_blobs + blob_at, len[i], d_out + out_at, d_status + i};
      blob_at += (len[i] + 255) & ~(size_t)255;
      out_at += (n[i] * w + 255) & ~(size_t)255;
    }
    const size_t ws_bytes = lct_cuda_decode_workspace_size(COUNT);
    void *ws;
    CUDA_OK(cudaMalloc(&ws, ws_bytes));
    cr_assert_eq(lct_cuda_decode_batch(dec, COUNT, ws, ws_bytes, 0), 0);
    CUDA_OK(cudaMemcpy(status, d_status, sizeof status, cudaMemcpyDeviceToHost));
    for (int i = 0; i < COUNT; i++) {
      const size_t bytes = n[i] * w;
      if (corrupt[i]) {
        cr_assert(status[i] == LCT_ECORRUPT || status[i] == LCT_ECHECKSUM, "%s blob %d (n=%llu, corrupt): status %d",
                  lct_dtype_name(dtype), i, (unsigned long long)n[i], status[i]);
      } else {
        cr_assert_eq(status[i], 0, "%s blob %d (n=%llu): status %d", lct_dtype_name(dtype), i,
                     (unsigned long long)n[i], status[i]);
        uint8_t *back = malloc(bytes);
        CUDA_OK(cudaMemcpy(back, dec[i].dst, bytes, cudaMemcpyDeviceToHost));
        cr_assert(memcmp(back, host[i], bytes) == 0, "%s blob %d (n=%llu): round trip differs",
                  lct_dtype_name(dtype), i, (unsigned long long)n[i]);
        free(back);
      }
      free(host[i]);
      free(blob[i]);
    }
    CUDA_OK(cudaFree(ws));
    CUDA_OK(cudaFree(d_status));
    CUDA_OK(cudaFree(d_out));
    CUDA_OK(cudaFree(d_blobs));
  }
}

Test(cuda_codec, argument_errors) {
  REQUIRE_GPU();
  uint32_t v[4] = {1, 2, 3, 4};
  lct_codebook cb;
  cr_assert_eq(lct_codebook_from_data(LCT_DTYPE_F32, v, 4, &cb), 0);
  lct_cuda_codebook *dcb;
  cr_assert_eq(lct_cuda_codebook_create(&cb, &dcb), 0);
  cr_assert_eq(lct_cuda_codebook_dtype(dcb), LCT_DTYPE_F32);
  uint8_t *d;
  CUDA_OK(cudaMalloc((void **)&d, 4096));
  uint64_t *sz = (uint64_t *)(d + 2048);
  const size_t bound = lct_encode_bound(LCT_DTYPE_F32, 4);
  cr_assert_eq(lct_cuda_encode(LCT_DTYPE_F32, dcb, d, 4, d + 1024, bound - 1, sz, d + 3072, 1024, 0), LCT_EBUFSIZE);
  cr_assert_eq(lct_cuda_encode(LCT_DTYPE_BF16, dcb, d, 4, d + 1024, bound, sz, d + 3072, 1024, 0), LCT_EINVAL);
  cr_assert_eq(lct_cuda_encode(99, dcb, d, 4, d + 1024, bound, sz, d + 3072, 1024, 0), LCT_EDTYPE);
  cr_assert_eq(lct_cuda_encode(LCT_DTYPE_F32, dcb, d + 2, 4, d + 1024, bound, sz, d + 3072, 1024, 0), LCT_EINVAL);
  cr_assert_eq(lct_cuda_encode(LCT_DTYPE_F32, dcb, d, 4, d + 1028, bound, sz, d + 3072, 1024, 0), LCT_EINVAL);
  cr_assert_eq(lct_cuda_encode(LCT_DTYPE_F32, dcb, d, 4, d + 1024, bound, sz, d + 3072, 8, 0), LCT_EBUFSIZE);
  lct_cuda_encode_item it = {LCT_DTYPE_F32, dcb, d, 4, d + 1024, bound, sz, (uint64_t *)(d + 2060), NULL};
  cr_assert_eq(lct_cuda_encode_batch(&it, 1, d + 3072, 1024, 0), LCT_EINVAL);
  it.code_bits = NULL;
  it.hist = (uint64_t *)(d + 2060); /* misaligned */
  cr_assert_eq(lct_cuda_encode_batch(&it, 1, d + 3072, 1024, 0), LCT_EINVAL);
  it = (lct_cuda_encode_item){LCT_DTYPE_RAW, NULL, d, 4, d + 1024, bound, sz, NULL, (uint64_t *)(d + 2048)};
  cr_assert_eq(lct_cuda_encode_batch(&it, 1, d + 3072, 1024, 0), LCT_EINVAL); /* raw has no symbols */
  cr_assert_eq(lct_cuda_decode(LCT_DTYPE_F32, 4, d + 1028, 100, d, (int *)sz, d + 3072, 16, 0), LCT_EINVAL);
  cr_assert_eq(lct_cuda_decode(LCT_DTYPE_F32, 4, d + 1024, 100, d, (int *)sz, d + 3072, 16, 0), LCT_EBUFSIZE);
  cr_assert_eq(lct_cuda_decode(LCT_DTYPE_F32, 4, d + 1024, 100, d + 1, (int *)sz, d, 1 << 20, 0), LCT_EINVAL);
  CUDA_OK(cudaFree(d));
  lct_cuda_codebook_destroy(dcb);
  uint64_t hist[LCT_MAX_SYMS] = {0};
  lct_codebook bad;
  cr_assert_eq(lct_codebook_build(LCT_DTYPE_F32, hist, &bad), 0);
  bad.len[0] = 13;
  cr_assert_eq(lct_cuda_codebook_create(&bad, &dcb), LCT_EINVAL);
}

/* Decodes `count` corrupt variants of one blob in one batched call, each from
 * an exactly sized allocation (so a sanitizer sees any overread); every one
 * must get an error status, the CPU decoder agreeing that it is corrupt. With
 * one corruption the error is the CPU's; with several in different chunks
 * either decoder may name another chunk's first. */
static void expect_rejected(int dtype, uint64_t n, uint8_t *const *blobs, const size_t *lens, int count,
                            int same_code, const char *what) {
  const size_t w = lct_dtype_size(dtype);
  lct_cuda_decode_item *items = calloc((size_t)count, sizeof *items);
  uint8_t **d_blobs = calloc((size_t)count, sizeof *d_blobs);
  uint8_t *d_out, *cpu_out = malloc(n * w + 1);
  int *d_status, *status = malloc((size_t)count * sizeof *status);
  CUDA_OK(cudaMalloc((void **)&d_out, n * w * (size_t)count + 16));
  CUDA_OK(cudaMalloc((void **)&d_status, (size_t)count * sizeof *status));
  CUDA_OK(cudaMemset(d_status, 0x7f, (size_t)count * sizeof *status));
  for (int i = 0; i < count; i++) {
    CUDA_OK(cudaMalloc((void **)&d_blobs[i], lens[i] ? lens[i] : 1));
    if (lens[i]) CUDA_OK(cudaMemcpy(d_blobs[i], blobs[i], lens[i], cudaMemcpyHostToDevice));
    items[i] = (lct_cuda_decode_item){dtype, n, d_blobs[i], lens[i], d_out + n * w * (size_t)i, d_status + i};
  }
  size_t ws_bytes = lct_cuda_decode_workspace_size((size_t)count);
  void *ws;
  CUDA_OK(cudaMalloc(&ws, ws_bytes));
  cr_assert_eq(lct_cuda_decode_batch(items, (size_t)count, ws, ws_bytes, 0), 0);
  CUDA_OK(cudaMemcpy(status, d_status, (size_t)count * sizeof *status, cudaMemcpyDeviceToHost));
  for (int i = 0; i < count; i++) {
    int cpu = lct_decode(blobs[i], lens[i], cpu_out, n * w);
    cr_assert(status[i] == LCT_ECORRUPT || status[i] == LCT_ECHECKSUM || status[i] == LCT_EVERSION,
              "%s #%d (%zu bytes): GPU status %d, CPU %d", what, i, lens[i], status[i], cpu);
    cr_assert_lt(cpu, 0, "%s #%d: the CPU decoder accepts it", what, i);
    if (same_code) cr_assert_eq(status[i], cpu, "%s #%d: GPU says %s, CPU %s", what, i, lct_strerror(status[i]),
                                lct_strerror(cpu));
  }
  for (int i = 0; i < count; i++) CUDA_OK(cudaFree(d_blobs[i]));
  CUDA_OK(cudaFree(ws));
  CUDA_OK(cudaFree(d_status));
  CUDA_OK(cudaFree(d_out));
  free(status);
  free(cpu_out);
  free(d_blobs);
  free(items);
}

/* A real bf16 slice of two chunks plus a random raw third chunk, CPU-encoded. */
static uint8_t *corrupt_base(uint64_t *n, size_t *len) {
  size_t raw_len;
  uint8_t *real = test_read_data("A_s100_act.bf16.bin", &raw_len);
  *n = 2 * LCT_CHUNK_ELEMS + 600;
  cr_assert_geq(raw_len, *n * 2);
  test_rng rng = {77};
  for (uint64_t i = 2 * LCT_CHUNK_ELEMS; i < *n; i++) ((uint16_t *)real)[i] = (uint16_t)test_rand(&rng);
  lct_codebook cb;
  cr_assert_eq(lct_codebook_from_data(LCT_DTYPE_BF16, real, LCT_CHUNK_ELEMS, &cb), 0);
  const size_t cap = lct_encode_bound(LCT_DTYPE_BF16, *n);
  uint8_t *blob = malloc(cap);
  lct_encode_stats st;
  cr_assert_eq(lct_encode(LCT_DTYPE_BF16, &cb, real, *n, blob, cap, &st), 0);
  cr_assert_eq(st.raw_chunks, 1);
  *len = st.blob_bytes;
  free(real);
  return blob;
}

Test(cuda_codec, truncated_blobs_rejected) {
  REQUIRE_GPU();
  uint64_t n;
  size_t len;
  uint8_t *blob = corrupt_base(&n, &len);
  enum { MAX = 2000 };
  uint8_t *blobs[MAX];
  size_t lens[MAX];
  int count = 0;
  for (size_t cut = 0; cut < len && count < MAX; cut += cut < 700 ? 1 : cut + 80 < len ? 97 : 1) {
    blobs[count] = blob;
    lens[count++] = cut;
  }
  expect_rejected(LCT_DTYPE_BF16, n, blobs, lens, count, 1, "truncation");
  free(blob);
}

Test(cuda_codec, empty_blob_with_trailing_bytes_rejected) {
  /* An empty tensor's blob ends at its (empty) chunk table: bytes after it,
   * even with blob_size saying so, are refused by both decoders. */
  REQUIRE_GPU();
  lct_codebook cb;
  uint16_t one = 0x3f80;
  cr_assert_eq(lct_codebook_from_data(LCT_DTYPE_BF16, &one, 1, &cb), 0);
  size_t cap = lct_encode_bound(LCT_DTYPE_BF16, 0);
  uint8_t *blob = calloc(1, cap + 8);
  lct_encode_stats st;
  cr_assert_eq(lct_encode(LCT_DTYPE_BF16, &cb, &one, 0, blob, cap, &st), 0);
  size_t len = st.blob_bytes + 8;
  for (int b = 0; b < 8; b++) blob[32 + b] = (uint8_t)((uint64_t)len >> (8 * b)); /* the blob_size field */
  uint8_t *blobs[1] = {blob};
  expect_rejected(LCT_DTYPE_BF16, 0, blobs, &len, 1, 1, "an empty blob with 8 more bytes");
  free(blob);
}

Test(cuda_codec, bit_flips_rejected) {
  REQUIRE_GPU();
  uint64_t n;
  size_t len;
  uint8_t *blob = corrupt_base(&n, &len);
  enum { BATCH = 512 };
  uint8_t *blobs[BATCH];
  size_t lens[BATCH];
  for (int i = 0; i < BATCH; i++) {
    blobs[i] = malloc(len);
    lens[i] = len;
  }
  /* Every bit of the header, codebook, chunk table and chunk headers; a
   * stride through the payloads. */
  int count = 0;
  for (size_t bit = 0; bit < 8 * len; bit += bit < 8 * 1200 ? 1 : 61) {
    memcpy(blobs[count], blob, len);
    blobs[count][bit / 8] ^= (uint8_t)(1u << (bit % 8));
    if (++count == BATCH) {
      expect_rejected(LCT_DTYPE_BF16, n, blobs, lens, count, 1, "bit flip");
      count = 0;
    }
  }
  if (count) expect_rejected(LCT_DTYPE_BF16, n, blobs, lens, count, 1, "bit flip");
  for (int i = 0; i < BATCH; i++) free(blobs[i]);
  free(blob);
}

/* Garbage bytes in the chunk area (the header left intact): an error or, only
 * if nothing changed, the original; never a fault. */
Test(cuda_codec, random_garbage_never_faults) {
  REQUIRE_GPU();
  uint64_t n;
  size_t len;
  uint8_t *blob = corrupt_base(&n, &len);
  const size_t head = LCT_HEADER_BYTES + 520;
  enum { COUNT = 400 };
  static uint8_t *blobs[COUNT];
  static size_t lens[COUNT];
  test_rng rng = {4242};
  int count = 0;
  for (int i = 0; i < COUNT; i++) {
    uint8_t *b = malloc(len);
    memcpy(b, blob, len);
    int hits = 1 + (int)(test_rand(&rng) % 24);
    for (int h = 0; h < hits; h++) b[head + test_rand(&rng) % (len - head)] = (uint8_t)test_rand(&rng);
    if (memcmp(b, blob, len) == 0) {
      free(b);
      continue;
    }
    blobs[count] = b;
    lens[count++] = len;
  }
  expect_rejected(LCT_DTYPE_BF16, n, blobs, lens, count, 0, "garbage");
  for (int i = 0; i < count; i++) free(blobs[i]);
  free(blob);
}

/* Expectations the caller supplies are checked against the header. */
Test(cuda_codec, wrong_expectations_rejected) {
  REQUIRE_GPU();
  uint64_t n;
  size_t len;
  uint8_t *blob = corrupt_base(&n, &len);
  uint8_t *out = malloc(n * 4);
  cr_assert_eq(gpu_decode(LCT_DTYPE_BF16, n, blob, len, out, 0), 0);
  cr_assert_eq(gpu_decode(LCT_DTYPE_BF16, n - 1, blob, len, out, 0), LCT_ECORRUPT);
  cr_assert_eq(gpu_decode(LCT_DTYPE_F16, n, blob, len, out, 0), LCT_ECORRUPT);
  cr_assert_eq(gpu_decode(LCT_DTYPE_BF16, n, blob, len - 4, out, 0), LCT_ECORRUPT);
  free(out);
  free(blob);
}

/* Random bytes on the device and their host copy. */
static uint8_t *crc_buffer(uint64_t len, uint8_t **dev) {
  uint8_t *host = malloc(len);
  test_rng rng = {77};
  for (uint64_t i = 0; i < len; i++) host[i] = (uint8_t)test_rand(&rng);
  CUDA_OK(cudaMalloc((void **)dev, len));
  CUDA_OK(cudaMemcpy(*dev, host, len, cudaMemcpyHostToDevice));
  return host;
}

/* lct_cuda_crc32c and lct_cuda_crc32c_batch are lct_crc32c: sizes around the
 * 16- and 32-byte loads up to tensors of many pieces, at every start offset
 * mod 16 (and 17), one call each and all in one batch. */
Test(cuda_codec, crc32c_matches_cpu) {
  REQUIRE_GPU();
  static const uint64_t sizes[] = {0, 1, 3, 15, 16, 17, 1023, 1024, 1025, 65535, 1 << 20, (5 << 20) + 7};
  enum { NS = sizeof sizes / sizeof sizes[0], OFFS = 18, COUNT = NS * OFFS };
  const uint64_t max = (5 << 20) + 7 + OFFS;
  uint8_t *dev, *host = crc_buffer(max, &dev);
  static lct_cuda_crc_item items[COUNT];
  uint32_t *crc;
  CUDA_OK(cudaMallocHost((void **)&crc, 2 * COUNT * sizeof *crc));
  for (int i = 0; i < COUNT; i++) items[i] = (lct_cuda_crc_item){dev + i % OFFS, sizes[i / OFFS], crc + COUNT + i};
  size_t ws_bytes = lct_cuda_crc32c_batch_workspace_size(items, COUNT);
  cr_assert_geq(ws_bytes, lct_cuda_crc32c_workspace_size(max));
  void *ws;
  CUDA_OK(cudaMalloc(&ws, ws_bytes));
  for (int i = 0; i < 2 * COUNT; i++) crc[i] = 0xDEADBEEF;
  for (int i = 0; i < COUNT; i++) {
    const size_t need = lct_cuda_crc32c_workspace_size(items[i].bytes);
    cr_assert_eq(lct_cuda_crc32c(items[i].src, items[i].bytes, crc + i, ws, need, 0), 0);
  }
  cr_assert_eq(lct_cuda_crc32c_batch(items, COUNT, ws, ws_bytes, 0), 0);
  CUDA_OK(cudaStreamSynchronize(0));
  for (int i = 0; i < COUNT; i++) {
    const uint32_t want = lct_crc32c(0, host + (i % OFFS), items[i].bytes);
    cr_assert_eq(crc[i], want, "%llu bytes at +%d: %08x, want %08x", (unsigned long long)items[i].bytes, i % OFFS,
                 crc[i], want);
    cr_assert_eq(crc[COUNT + i], want, "batched, %llu bytes at +%d: %08x, want %08x",
                 (unsigned long long)items[i].bytes, i % OFFS, crc[COUNT + i], want);
  }
  CUDA_OK(cudaFreeHost(crc));
  CUDA_OK(cudaFree(ws));
  CUDA_OK(cudaFree(dev));
  free(host);
}

/* Mixed sizes and offsets in one batch, overlapping ranges included; then
 * more items than one launch takes. */
Test(cuda_codec, crc32c_batch_mixed) {
  REQUIRE_GPU();
  const uint64_t max = 8 << 20;
  uint8_t *dev, *host = crc_buffer(max, &dev);
  enum { MIXED = 300, MANY = 1300 };
  static lct_cuda_crc_item items[MANY];
  uint32_t *crc;
  CUDA_OK(cudaMallocHost((void **)&crc, MANY * sizeof *crc));
  test_rng rng = {4711};
  for (int i = 0; i < MANY; i++) {
    const uint64_t r = test_rand(&rng), kind = r % 5;
    uint64_t len = kind == 0 ? 0 : kind == 1 ? r >> 8 & 63 : kind == 2 ? r >> 8 & 0xffff : r >> 8 & 0x3fffff;
    if (i >= MIXED) len = r >> 8 & 4095; /* many small ones */
    const uint64_t at = test_rand(&rng) % (max - len + 1);
    items[i] = (lct_cuda_crc_item){dev + at, len, crc + i};
  }
  for (int pass = 0; pass < 2; pass++) {
    const int count = pass ? MANY : MIXED;
    size_t ws_bytes = lct_cuda_crc32c_batch_workspace_size(items, count);
    void *ws;
    CUDA_OK(cudaMalloc(&ws, ws_bytes ? ws_bytes : 1));
    for (int i = 0; i < count; i++) crc[i] = 0xDEADBEEF;
    cr_assert_eq(lct_cuda_crc32c_batch(items, count, ws, ws_bytes, 0), 0);
    CUDA_OK(cudaStreamSynchronize(0));
    for (int i = 0; i < count; i++) {
      const uint8_t *src = host + ((const uint8_t *)items[i].src - dev);
      const uint32_t want = lct_crc32c(0, src, items[i].bytes);
      cr_assert_eq(crc[i], want, "item %d of %d (%llu bytes at %td): %08x, want %08x", i, count,
                   (unsigned long long)items[i].bytes, (const uint8_t *)items[i].src - dev, crc[i], want);
    }
    CUDA_OK(cudaFree(ws));
  }
  CUDA_OK(cudaFreeHost(crc));
  CUDA_OK(cudaFree(dev));
  free(host);
}

Test(cuda_codec, crc32c_argument_errors) {
  REQUIRE_GPU();
  const uint64_t len = 3 << 20;
  uint8_t *dev, *host = crc_buffer(len, &dev);
  uint32_t *crc;
  CUDA_OK(cudaMallocHost((void **)&crc, 4 * sizeof *crc));
  const size_t ws_bytes = lct_cuda_crc32c_workspace_size(len);
  void *ws;
  CUDA_OK(cudaMalloc(&ws, ws_bytes));
  cr_assert_eq(lct_cuda_crc32c(dev, len, NULL, ws, ws_bytes, 0), LCT_EINVAL);
  cr_assert_eq(lct_cuda_crc32c(dev, len, (uint32_t *)((uint8_t *)crc + 2), ws, ws_bytes, 0), LCT_EINVAL);
  cr_assert_eq(lct_cuda_crc32c(NULL, len, crc, ws, ws_bytes, 0), LCT_EINVAL);
  cr_assert_eq(lct_cuda_crc32c(dev, len, crc, NULL, ws_bytes, 0), LCT_EINVAL);
  cr_assert_eq(lct_cuda_crc32c(dev, len, crc, ws, ws_bytes - 4, 0), LCT_EBUFSIZE);
  const lct_cuda_crc_item two[2] = {{dev, len, crc}, {dev + 1, len - 1, crc + 1}};
  cr_assert_eq(lct_cuda_crc32c_batch(two, 2, ws, ws_bytes, 0), LCT_EBUFSIZE);
  cr_assert_eq(lct_cuda_crc32c_batch(NULL, 2, ws, ws_bytes, 0), LCT_EINVAL);
  cr_assert_eq(lct_cuda_crc32c_batch(two, 0, NULL, 0, 0), 0);
  /* Zero bytes need no workspace and give 0. */
  crc[0] = 0xDEADBEEF;
  cr_assert_eq(lct_cuda_crc32c_workspace_size(0), 0);
  cr_assert_eq(lct_cuda_crc32c(NULL, 0, crc, NULL, 0, 0), 0);
  CUDA_OK(cudaStreamSynchronize(0));
  cr_assert_eq(crc[0], 0);
  CUDA_OK(cudaFreeHost(crc));
  CUDA_OK(cudaFree(ws));
  CUDA_OK(cudaFree(dev));
  free(host);
}
