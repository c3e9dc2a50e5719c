/* bench_gpu.c — GPU codec benchmark: encode/decode/CRC-32C against a same-run device-to-device memcpy, ratio, batches. */
#include <cuda_runtime_api.h>
#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "lct_checksum.h"
#include "lct_cuda.h"

#define GPU_TRY(call)                                                                        \
  do {                                                                                       \
    cudaError_t e_ = (call);                                                                 \
    if (e_ != cudaSuccess) {                                                                 \
      fprintf(stderr, "lct-bench gpu: %s: %s\n", #call, cudaGetErrorString(e_));             \
      exit(1);                                                                               \
    }                                                                                        \
  } while (0)
#define LCT_TRY(call)                                                                        \
  do {                                                                                       \
    int rc_ = (call);                                                                        \
    if (rc_) {                                                                               \
      fprintf(stderr, "lct-bench gpu: %s: %s\n", #call, lct_strerror(rc_));                  \
      exit(1);                                                                               \
    }                                                                                        \
  } while (0)

#define MIB (1024.0 * 1024.0)
#define MAX_ROWS 64
#define BATCH_TENSORS 200

typedef struct {
  int dtype;
  char data[24];                 /* "mix" or the tensor kind */
  uint64_t raw, blob;            /* bytes */
  double copy_ms, enc_ms, dec_ms, crc_ms; /* medians */
  double hist_ms, build_ms;       /* histogram kernel; host codebook build */
  double bound;                   /* order-0 bound of the ratio (0: not computed) */
  int verified_cpu;               /* blob compared with lct_encode's */
} gpu_row;

typedef struct {
  cudaStream_t stream;
  cudaEvent_t e0, e1;
  int reps;
  const char *dir;
} bench_ctx;

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* One timed operation; kind selects which. */
enum {
  OP_COPY,
  OP_ENCODE,
  OP_DECODE,
  OP_HIST,
  OP_CRC,
  OP_ENCODE_BATCH,
  OP_DECODE_BATCH,
  OP_CRC_BATCH,
  OP_ENCODE_EACH,
  OP_DECODE_EACH,
  OP_CRC_EACH
};
typedef struct {
  int dtype;
  const void *src;
  void *dst, *blob, *ws;
  uint64_t n, bytes, cap, *d_size, blob_bytes, *hist;
  size_t ws_bytes;
  int *d_status;
  const lct_cuda_codebook *cb;
  const lct_cuda_encode_item *enc;
  const lct_cuda_decode_item *dec;
  const lct_cuda_crc_item *crc;
  size_t count;
  uint32_t *d_crc;
  void *crc_ws;
  size_t crc_ws_bytes;
} op_args;

static void run_op(const bench_ctx *c, int op, const op_args *a) {
  switch (op) {
  case OP_COPY:
    GPU_TRY(cudaMemcpyAsync(a->dst, a->src, a->bytes, cudaMemcpyDeviceToDevice, c->stream));
    break;
  case OP_ENCODE:
    LCT_TRY(lct_cuda_encode(a->dtype, a->cb, a->src, a->n, a->blob, a->cap, a->d_size, a->ws, a->ws_bytes, c->stream));
    break;
  case OP_DECODE:
    LCT_TRY(lct_cuda_decode(a->dtype, a->n, a->blob, a->blob_bytes, a->dst, a->d_status, a->ws, a->ws_bytes, c->stream));
    break;
  case OP_HIST:
    GPU_TRY(cudaMemsetAsync(a->hist, 0, sizeof(uint64_t) << lct_dtype_symbol_bits(a->dtype), c->stream));
    LCT_TRY(lct_cuda_histogram(a->dtype, a->src, a->n, a->hist, c->stream));
    break;
  case OP_CRC:
    LCT_TRY(lct_cuda_crc32c(a->src, a->bytes, a->d_crc, a->crc_ws, a->crc_ws_bytes, c->stream));
    break;
  case OP_ENCODE_BATCH:
    LCT_TRY(lct_cuda_encode_batch(a->enc, a->count, a->ws, a->ws_bytes, c->stream));
    break;
  case OP_DECODE_BATCH:
    LCT_TRY(lct_cuda_decode_batch(a->dec, a->count, a->ws, a->ws_bytes, c->stream));
    break;
  case OP_CRC_BATCH:
    LCT_TRY(lct_cuda_crc32c_batch(a->crc, a->count, a->crc_ws, a->crc_ws_bytes, c->stream));
    break;
  case OP_ENCODE_EACH:
    for (size_t i = 0; i < a->count; i++) LCT_TRY(lct_cuda_encode_batch(&a->enc[i], 1, a->ws, a->ws_bytes, c->stream));
    break;
  case OP_DECODE_EACH:
    for (size_t i = 0; i < a->count; i++) LCT_TRY(lct_cuda_decode_batch(&a->dec[i], 1, a->ws, a->ws_bytes, c->stream));
    break;
  case OP_CRC_EACH:
    for (size_t i = 0; i < a->count; i++)
      LCT_TRY(lct_cuda_crc32c_batch(&a->crc[i], 1, a->crc_ws, a->crc_ws_bytes, c->stream));
    break;
  }
}

/* Median milliseconds of c->reps runs after two warm-ups, timed with events;
 * with host_us, also the median microseconds the host spends in the call,
 * the stream idle before it (each run waits for the last): the launches'
 * cost, which the call's work waits for. */
static double time_op_host(const bench_ctx *c, int op, const op_args *a, double *host_us) {
  double t[64], h[64];
  int reps = c->reps < 64 ? c->reps : 64;
  for (int i = 0; i < 2; i++) run_op(c, op, a);
  for (int i = 0; i < reps; i++) {
    float ms;
    GPU_TRY(cudaEventRecord(c->e0, c->stream));
    const double t0 = bench_now();
    run_op(c, op, a);
    h[i] = (bench_now() - t0) * 1e6;
    GPU_TRY(cudaEventRecord(c->e1, c->stream));
    GPU_TRY(cudaEventSynchronize(c->e1));
    GPU_TRY(cudaEventElapsedTime(&ms, c->e0, c->e1));
    t[i] = ms;
  }
  qsort(t, (size_t)reps, sizeof t[0], cmp_double);
  qsort(h, (size_t)reps, sizeof h[0], cmp_double);
  if (host_us) *host_us = h[reps / 2];
  return t[reps / 2];
}

static double time_op(const bench_ctx *c, int op, const op_args *a) { return time_op_host(c, op, a, NULL); }

/* Times a CRC op (OP_CRC: a->bytes into a->d_crc; the others: a->crc's
 * items) over tensors whose bytes lie in host back to back, their results
 * cleared first and then checked against lct_crc32c's. */
static double time_checked_crc(const bench_ctx *c, int op, const op_args *a, const uint8_t *host, const char *what) {
  const lct_cuda_crc_item one = {a->src, a->bytes, a->d_crc};
  const lct_cuda_crc_item *items = op == OP_CRC ? &one : a->crc;
  const size_t n = op == OP_CRC ? 1 : a->count;
  for (size_t i = 0; i < n; i++) GPU_TRY(cudaMemset(items[i].crc, 0xff, sizeof(uint32_t)));
  const double ms = time_op(c, op, a);
  for (size_t i = 0, at = 0; i < n; at += items[i].bytes, i++) {
    uint32_t crc;
    GPU_TRY(cudaMemcpy(&crc, items[i].crc, sizeof crc, cudaMemcpyDeviceToHost));
    if (crc != lct_crc32c(0, host + at, items[i].bytes)) {
      fprintf(stderr, "lct-bench gpu: %s, tensor %zu: CRC-32C differs from lct_crc32c's\n", what, i);
      exit(1);
    }
  }
  return ms;
}

/* ---- data: the shared tensors, tiled; other dtypes derived from f32 ---- */

typedef struct {
  uint8_t *p;
  size_t len;
} pool;

static void pool_add(pool *pl, const uint8_t *d, size_t len) {
  pl->p = realloc(pl->p, pl->len + len);
  if (!pl->p) {
    fputs("lct-bench gpu: out of memory\n", stderr);
    exit(1);
  }
  memcpy(pl->p + pl->len, d, len);
  pl->len += len;
}

/* Concatenates DIR's *.<name>.bin files whose name contains `kind` (NULL: all). */
static pool load_pool(const char *dir, const char *dtype_name, const char *kind) {
  pool pl = {NULL, 0};
  DIR *d = opendir(dir);
  if (!d) {
    perror(dir);
    exit(1);
  }
  char infix[32];
  snprintf(infix, sizeof infix, ".%s.bin", dtype_name);
  char **names = NULL;
  size_t n = 0;
  for (struct dirent *de; (de = readdir(d));) {
    if (!strstr(de->d_name, infix)) continue;
    if (kind) {
      char tag[32];
      snprintf(tag, sizeof tag, "_%s.", kind);
      if (!strstr(de->d_name, tag)) continue;
    }
    names = realloc(names, (n + 1) * sizeof *names);
    names[n++] = strdup(de->d_name);
  }
  closedir(d);
  for (size_t i = 0; i < n; i++) { /* a fixed order, whatever readdir's */
    for (size_t j = i + 1; j < n; j++) {
      if (strcmp(names[j], names[i]) < 0) {
        char *t = names[i];
        names[i] = names[j];
        names[j] = t;
      }
    }
  }
  for (size_t i = 0; i < n; i++) {
    char path[1024];
    size_t len;
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    uint8_t *buf = bench_read_file(path, &len);
    pool_add(&pl, buf, len);
    free(buf);
    free(names[i]);
  }
  free(names);
  return pl;
}

static uint16_t f32_to_f16(uint32_t x) {
  float f;
  memcpy(&f, &x, 4);
  _Float16 h = (_Float16)f;
  uint16_t r;
  memcpy(&r, &h, 2);
  return r;
}

/* Round-toward-zero f32 -> fp8 with `eb` exponent and `mb` mantissa bits (saturating). */
static uint8_t f32_to_f8(uint32_t x, unsigned eb, unsigned mb) {
  const int bias = (1 << (eb - 1)) - 1, maxe = (1 << eb) - 1;
  const uint8_t sign = (uint8_t)(x >> 31 << (eb + mb));
  int e = (int)((x >> 23) & 0xff) - 127 + bias;
  uint32_t m = (x & 0x7fffff) >> (23 - mb);
  if (e <= 0) return sign; /* flush tiny values to zero */
  if (e >= maxe) {
    e = maxe;
    m = (1u << mb) - 2; /* the largest value below the NaN / Inf codes */
  }
  return (uint8_t)(sign | (uint32_t)e << mb | m);
}

/* A pool of dtype elements: bf16 and f32 straight from the files, the others
 * converted from the f32 tensors. */
static pool dtype_pool(const char *dir, int dtype, const char *kind) {
  if (dtype == LCT_DTYPE_F32 || dtype == LCT_DTYPE_BF16) return load_pool(dir, lct_dtype_name(dtype), kind);
  pool f = load_pool(dir, "f32", kind), out = {NULL, 0};
  const size_t n = f.len / 4, w = lct_dtype_size(dtype);
  out.p = malloc(n * w);
  out.len = n * w;
  for (size_t i = 0; i < n; i++) {
    uint32_t x;
    memcpy(&x, f.p + 4 * i, 4);
    if (dtype == LCT_DTYPE_F16) {
      uint16_t h = f32_to_f16(x);
      memcpy(out.p + 2 * i, &h, 2);
    } else if (dtype == LCT_DTYPE_F8E4M3) {
      out.p[i] = f32_to_f8(x, 4, 3);
    } else {
      out.p[i] = f32_to_f8(x, 5, 2);
    }
  }
  free(f.p);
  return out;
}

static void tile(uint8_t *dst, size_t bytes, const pool *pl) {
  for (size_t at = 0; at < bytes; at += pl->len) memcpy(dst + at, pl->p, bytes - at < pl->len ? bytes - at : pl->len);
}

/* Measures one tensor of `bytes` raw bytes. */
static void measure(const bench_ctx *c, int dtype, const uint8_t *host, uint64_t bytes, const char *data, int bound,
                    gpu_row *r) {
  const size_t w = lct_dtype_size(dtype);
  const uint64_t n = bytes / w;
  memset(r, 0, sizeof *r);
  r->dtype = dtype;
  snprintf(r->data, sizeof r->data, "%s", data);
  r->raw = n * w;

  op_args a;
  memset(&a, 0, sizeof a);
  a.dtype = dtype;
  a.n = n;
  a.bytes = n * w;
  a.cap = lct_encode_bound(dtype, n);
  void *src;
  GPU_TRY(cudaMalloc(&src, a.bytes));
  GPU_TRY(cudaMalloc(&a.dst, a.bytes));
  GPU_TRY(cudaMalloc(&a.blob, a.cap));
  GPU_TRY(cudaMalloc((void **)&a.d_size, 8));
  GPU_TRY(cudaMalloc((void **)&a.d_status, sizeof(int)));
  GPU_TRY(cudaMalloc((void **)&a.hist, sizeof(uint64_t) << 10));
  GPU_TRY(cudaMalloc((void **)&a.d_crc, sizeof(uint32_t)));
  a.crc_ws_bytes = lct_cuda_crc32c_workspace_size(a.bytes);
  GPU_TRY(cudaMalloc(&a.crc_ws, a.crc_ws_bytes ? a.crc_ws_bytes : 1));
  GPU_TRY(cudaMemcpy(src, host, a.bytes, cudaMemcpyHostToDevice));
  a.src = src;

  /* Codebook: device histogram (timed), then the host build (timed). */
  r->hist_ms = time_op(c, OP_HIST, &a);
  uint64_t hist[1024];
  GPU_TRY(cudaMemcpy(hist, a.hist, sizeof(uint64_t) << lct_dtype_symbol_bits(dtype), cudaMemcpyDeviceToHost));
  lct_codebook cb;
  double best = 1e30;
  for (int i = 0; i < 5; i++) {
    double t0 = bench_now();
    LCT_TRY(lct_codebook_build(dtype, hist, &cb));
    double t = bench_now() - t0;
    if (t < best) best = t;
  }
  r->build_ms = best * 1e3;
  lct_cuda_codebook *dcb;
  LCT_TRY(lct_cuda_codebook_create(&cb, &dcb));
  a.cb = dcb;
  lct_cuda_encode_item it = {dtype, dcb, src, n, a.blob, a.cap, a.d_size, NULL, NULL};
  a.ws_bytes = lct_cuda_encode_workspace_size(&it, 1);
  if (lct_cuda_decode_workspace_size(1) > a.ws_bytes) a.ws_bytes = lct_cuda_decode_workspace_size(1);
  GPU_TRY(cudaMalloc(&a.ws, a.ws_bytes));

  r->copy_ms = time_op(c, OP_COPY, &a);
  r->enc_ms = time_op(c, OP_ENCODE, &a);
  GPU_TRY(cudaMemcpy(&r->blob, a.d_size, 8, cudaMemcpyDeviceToHost));
  a.blob_bytes = r->blob;
  r->dec_ms = time_op(c, OP_DECODE, &a);
  r->crc_ms = time_checked_crc(c, OP_CRC, &a, host, "GPU CRC-32C");

  /* Correctness of what was timed: status, round trip, and for moderate sizes
   * the blob against the CPU reference. */
  int status;
  GPU_TRY(cudaMemcpy(&status, a.d_status, sizeof status, cudaMemcpyDeviceToHost));
  uint8_t *back = malloc(a.bytes);
  GPU_TRY(cudaMemcpy(back, a.dst, a.bytes, cudaMemcpyDeviceToHost));
  if (status || memcmp(back, host, a.bytes) != 0) {
    fprintf(stderr, "lct-bench gpu: %s %s %.0f MiB: round trip failed (status %d)\n", lct_dtype_name(dtype), data,
            (double)bytes / MIB, status);
    exit(1);
  }
  free(back);
  if (a.bytes <= (64u << 20)) {
    uint8_t *gpu = malloc(r->blob), *cpu = malloc(a.cap);
    GPU_TRY(cudaMemcpy(gpu, a.blob, r->blob, cudaMemcpyDeviceToHost));
    lct_encode_stats st;
    LCT_TRY(lct_encode(dtype, &cb, host, n, cpu, a.cap, &st));
    if (st.blob_bytes != r->blob || memcmp(gpu, cpu, r->blob) != 0) {
      fprintf(stderr, "lct-bench gpu: %s %s: GPU blob differs from lct_encode's\n", lct_dtype_name(dtype), data);
      exit(1);
    }
    r->verified_cpu = 1;
    free(gpu);
    free(cpu);
  }
  if (bound) r->bound = bench_order0_bound(dtype, host, n, NULL, NULL);

  lct_cuda_codebook_destroy(dcb);
  GPU_TRY(cudaFree(a.crc_ws));
  GPU_TRY(cudaFree(a.d_crc));
  GPU_TRY(cudaFree(a.ws));
  GPU_TRY(cudaFree(a.hist));
  GPU_TRY(cudaFree(a.d_status));
  GPU_TRY(cudaFree(a.d_size));
  GPU_TRY(cudaFree(a.blob));
  GPU_TRY(cudaFree(a.dst));
  GPU_TRY(cudaFree(src));
}

/* ---- batches: a GPT's parameter tensors against one tensor of the same bytes ---- */

typedef struct {
  uint64_t total_bytes;
  size_t count;
  double enc_batch_ms, dec_batch_ms, enc_each_ms, dec_each_ms, enc_one_ms, dec_one_ms, copy_ms;
  double crc_batch_ms, crc_each_ms, crc_one_ms;
  double enc_batch_submit_us, dec_batch_submit_us, enc_one_submit_us, dec_one_submit_us;
  double ratio;
} batch_result;

/* 200 parameter shapes of a GPT (d = 768, vocab 50257): embeddings, per-layer
 * tensors (layer norms, attention, MLP, with biases) layer after layer, the
 * final layer norm. */
static size_t gpt_shapes(uint64_t *elems) {
  const uint64_t d = 768, vocab = 50257, ctx = 1024;
  const uint64_t layer[12] = {d, d, d * 3 * d, 3 * d, d * d, d, d, d, d * 4 * d, 4 * d, 4 * d * d, d};
  size_t k = 0;
  elems[k++] = vocab * d;
  elems[k++] = ctx * d;
  for (size_t i = 0; k < BATCH_TENSORS - 2; i++) elems[k++] = layer[i % 12];
  elems[k++] = d;
  elems[k++] = d;
  return k;
}


static void measure_batch(const bench_ctx *c, const pool *pl, batch_result *b) {
  const int dtype = LCT_DTYPE_BF16;
  uint64_t elems[BATCH_TENSORS];
  b->count = gpt_shapes(elems);
  uint64_t total = 0, cap_total = 0;
  for (size_t i = 0; i < b->count; i++) {
    total += elems[i];
    cap_total += (lct_encode_bound(dtype, elems[i]) + 255) & ~(uint64_t)255;
  }
  b->total_bytes = total * 2;
  uint8_t *host = malloc(b->total_bytes);
  tile(host, b->total_bytes, pl);

  uint8_t *src, *dst, *blobs, *one_blob;
  uint64_t *sizes;
  int *status;
  GPU_TRY(cudaMalloc((void **)&src, b->total_bytes + 256 * b->count));
  GPU_TRY(cudaMalloc((void **)&dst, b->total_bytes + 256 * b->count));
  GPU_TRY(cudaMalloc((void **)&blobs, cap_total));
  GPU_TRY(cudaMalloc((void **)&one_blob, lct_encode_bound(dtype, total)));
  GPU_TRY(cudaMalloc((void **)&sizes, 8 * (b->count + 1)));
  GPU_TRY(cudaMalloc((void **)&status, sizeof(int) * (b->count + 1)));

  lct_cuda_encode_item *enc = calloc(b->count, sizeof *enc);
  lct_cuda_decode_item *dec = calloc(b->count, sizeof *dec);
  lct_cuda_crc_item *crc = calloc(b->count, sizeof *crc);
  lct_cuda_codebook **cbs = calloc(b->count, sizeof *cbs);
  uint32_t *d_crc;
  GPU_TRY(cudaMalloc((void **)&d_crc, sizeof(uint32_t) * (b->count + 1)));
  uint64_t at = 0, src_at = 0, blob_at = 0;
  for (size_t i = 0; i < b->count; i++) {
    const uint64_t bytes = elems[i] * 2;
    lct_codebook cb;
    LCT_TRY(lct_codebook_from_data(dtype, host + at, elems[i], &cb));
    LCT_TRY(lct_cuda_codebook_create(&cb, &cbs[i]));
    GPU_TRY(cudaMemcpy(src + src_at, host + at, bytes, cudaMemcpyHostToDevice));
    enc[i] = (lct_cuda_encode_item){dtype, cbs[i], src + src_at, elems[i], blobs + blob_at,
                                    lct_encode_bound(dtype, elems[i]), sizes + i, NULL, NULL};
    dec[i] = (lct_cuda_decode_item){dtype, elems[i], blobs + blob_at, 0, dst + src_at, status + i};
    crc[i] = (lct_cuda_crc_item){src + src_at, bytes, d_crc + i};
    at += bytes;
    src_at += (bytes + 255) & ~(uint64_t)255;
    blob_at += (lct_encode_bound(dtype, elems[i]) + 255) & ~(uint64_t)255;
  }
  size_t ws_bytes = lct_cuda_encode_workspace_size(enc, b->count);
  if (lct_cuda_decode_workspace_size(b->count) > ws_bytes) ws_bytes = lct_cuda_decode_workspace_size(b->count);
  void *ws, *crc_ws;
  GPU_TRY(cudaMalloc(&ws, ws_bytes));
  size_t crc_ws_bytes = lct_cuda_crc32c_batch_workspace_size(crc, b->count);
  if (lct_cuda_crc32c_workspace_size(b->total_bytes) > crc_ws_bytes)
    crc_ws_bytes = lct_cuda_crc32c_workspace_size(b->total_bytes);
  GPU_TRY(cudaMalloc(&crc_ws, crc_ws_bytes));

  op_args a;
  memset(&a, 0, sizeof a);
  a.enc = enc;
  a.dec = dec;
  a.crc = crc;
  a.count = b->count;
  a.ws = ws;
  a.ws_bytes = ws_bytes;
  a.crc_ws = crc_ws;
  a.crc_ws_bytes = crc_ws_bytes;
  b->enc_batch_ms = time_op_host(c, OP_ENCODE_BATCH, &a, &b->enc_batch_submit_us);
  uint64_t *h_sizes = malloc(8 * b->count), blob_sum = 0;
  GPU_TRY(cudaMemcpy(h_sizes, sizes, 8 * b->count, cudaMemcpyDeviceToHost));
  for (size_t i = 0; i < b->count; i++) {
    dec[i].blob_bytes = h_sizes[i];
    blob_sum += h_sizes[i];
  }
  b->ratio = (double)b->total_bytes / (double)blob_sum;
  b->dec_batch_ms = time_op_host(c, OP_DECODE_BATCH, &a, &b->dec_batch_submit_us);
  b->enc_each_ms = time_op(c, OP_ENCODE_EACH, &a);
  b->dec_each_ms = time_op(c, OP_DECODE_EACH, &a);
  b->crc_batch_ms = time_checked_crc(c, OP_CRC_BATCH, &a, host, "batched CRC");
  b->crc_each_ms = time_checked_crc(c, OP_CRC_EACH, &a, host, "CRC per tensor");
  int *h_status = malloc(sizeof(int) * b->count);
  GPU_TRY(cudaMemcpy(h_status, status, sizeof(int) * b->count, cudaMemcpyDeviceToHost));
  at = src_at = 0;
  uint8_t *back = malloc(b->total_bytes);
  for (size_t i = 0; i < b->count; i++) {
    const uint64_t bytes = elems[i] * 2;
    GPU_TRY(cudaMemcpy(back + at, dst + src_at, bytes, cudaMemcpyDeviceToHost));
    if (h_status[i]) {
      fprintf(stderr, "lct-bench gpu: batch tensor %zu: status %d\n", i, h_status[i]);
      exit(1);
    }
    at += bytes;
    src_at += (bytes + 255) & ~(uint64_t)255;
  }
  if (memcmp(back, host, b->total_bytes) != 0) {
    fputs("lct-bench gpu: batch round trip differs\n", stderr);
    exit(1);
  }

  /* The same bytes as one tensor (codebook from all of it). */
  op_args o;
  memset(&o, 0, sizeof o);
  lct_codebook cb;
  LCT_TRY(lct_codebook_from_data(dtype, host, total, &cb));
  lct_cuda_codebook *one_cb;
  LCT_TRY(lct_cuda_codebook_create(&cb, &one_cb));
  GPU_TRY(cudaMemcpy(src, host, b->total_bytes, cudaMemcpyHostToDevice));
  o.dtype = dtype;
  o.src = src;
  o.dst = dst;
  o.blob = one_blob;
  o.n = total;
  o.bytes = b->total_bytes;
  o.cap = lct_encode_bound(dtype, total);
  o.d_size = sizes + b->count;
  o.d_status = status + b->count;
  o.cb = one_cb;
  o.ws = ws;
  o.ws_bytes = ws_bytes;
  o.d_crc = d_crc + b->count;
  o.crc_ws = crc_ws;
  o.crc_ws_bytes = crc_ws_bytes;
  b->copy_ms = time_op(c, OP_COPY, &o);
  b->enc_one_ms = time_op_host(c, OP_ENCODE, &o, &b->enc_one_submit_us);
  GPU_TRY(cudaMemcpy(&o.blob_bytes, o.d_size, 8, cudaMemcpyDeviceToHost));
  b->dec_one_ms = time_op_host(c, OP_DECODE, &o, &b->dec_one_submit_us);
  b->crc_one_ms = time_checked_crc(c, OP_CRC, &o, host, "CRC of one tensor");

  lct_cuda_codebook_destroy(one_cb);
  for (size_t i = 0; i < b->count; i++) lct_cuda_codebook_destroy(cbs[i]);
  GPU_TRY(cudaFree(crc_ws));
  GPU_TRY(cudaFree(d_crc));
  GPU_TRY(cudaFree(ws));
  GPU_TRY(cudaFree(status));
  GPU_TRY(cudaFree(sizes));
  GPU_TRY(cudaFree(one_blob));
  GPU_TRY(cudaFree(blobs));
  GPU_TRY(cudaFree(dst));
  GPU_TRY(cudaFree(src));
  free(back);
  free(h_status);
  free(h_sizes);
  free(cbs);
  free(crc);
  free(dec);
  free(enc);
  free(host);
}

/* ---- output ---- */

static double gbs(uint64_t bytes, double ms) { return ms > 0 ? (double)bytes / (ms * 1e6) : 0; }

static void print_rows(const gpu_row *rows, int n) {
  printf("%-7s %-5s %9s %7s %9s %9s %6s %9s %6s %9s %6s %8s %8s %6s\n", "dtype", "data", "MiB", "ratio", "copy GB/s",
         "enc GB/s", "enc%", "dec GB/s", "dec%", "crc GB/s", "crc%", "hist ms", "build ms", "of bnd");
  for (int i = 0; i < n; i++) {
    const gpu_row *r = &rows[i];
    char ofb[16] = "-";
    if (r->bound > 0) snprintf(ofb, sizeof ofb, "%.1f%%", 100.0 * ((double)r->raw / (double)r->blob) / r->bound);
    printf("%-7s %-5s %9.0f %7.4f %9.1f %9.1f %5.0f%% %9.1f %5.0f%% %9.1f %5.0f%% %8.3f %8.3f %6s\n",
           lct_dtype_name(r->dtype), r->data, (double)r->raw / MIB, (double)r->raw / (double)r->blob,
           gbs(r->raw, r->copy_ms), gbs(r->raw, r->enc_ms), 100 * r->copy_ms / r->enc_ms, gbs(r->raw, r->dec_ms),
           100 * r->copy_ms / r->dec_ms, gbs(r->raw, r->crc_ms), 100 * r->copy_ms / r->crc_ms, r->hist_ms, r->build_ms,
           ofb);
  }
}

static void json_rows(FILE *f, const char *key, const gpu_row *rows, int n) {
  fprintf(f, "  \"%s\": [\n", key);
  for (int i = 0; i < n; i++) {
    const gpu_row *r = &rows[i];
    fprintf(f,
            "    {\"dtype\": \"%s\", \"data\": \"%s\", \"raw_bytes\": %llu, \"blob_bytes\": %llu, \"ratio\": %.5f, "
            "\"order0_bound\": %.5f, \"memcpy_ms\": %.5f, \"encode_ms\": %.5f, \"decode_ms\": %.5f, "
            "\"crc32c_ms\": %.5f, \"memcpy_gbs\": %.2f, \"encode_gbs\": %.2f, \"decode_gbs\": %.2f, "
            "\"crc32c_gbs\": %.2f, \"encode_of_memcpy\": %.4f, \"decode_of_memcpy\": %.4f, "
            "\"crc32c_of_memcpy\": %.4f, \"histogram_ms\": %.5f, \"codebook_build_ms\": %.5f, "
            "\"blob_equals_cpu\": %s}%s\n",
            lct_dtype_name(r->dtype), r->data, (unsigned long long)r->raw, (unsigned long long)r->blob,
            (double)r->raw / (double)r->blob, r->bound, r->copy_ms, r->enc_ms, r->dec_ms, r->crc_ms,
            gbs(r->raw, r->copy_ms), gbs(r->raw, r->enc_ms), gbs(r->raw, r->dec_ms), gbs(r->raw, r->crc_ms),
            r->copy_ms / r->enc_ms, r->copy_ms / r->dec_ms, r->copy_ms / r->crc_ms, r->hist_ms, r->build_ms,
            r->verified_cpu ? "true" : "false", i + 1 < n ? "," : "");
  }
  fprintf(f, "  ]");
}

int bench_gpu(int argc, char **argv) {
  int json = 0, batch_only = 0;
  const char *out_path = NULL, *sizes_arg = "1,16,64,256,1024", *dtypes_arg = "bf16,f32,f16,f8e4m3,f8e5m2";
  bench_ctx c = {0};
  c.reps = 15;
  c.dir = "tests/data";
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--json") == 0) {
      json = 1;
    } else if (strcmp(argv[i], "--out") == 0 && i + 1 < argc) {
      out_path = argv[++i];
    } else if (strcmp(argv[i], "--data") == 0 && i + 1 < argc) {
      c.dir = argv[++i];
    } else if (strcmp(argv[i], "--sizes") == 0 && i + 1 < argc) {
      sizes_arg = argv[++i];
    } else if (strcmp(argv[i], "--dtypes") == 0 && i + 1 < argc) {
      dtypes_arg = argv[++i];
    } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
      c.reps = atoi(argv[++i]);
      if (c.reps < 1) c.reps = 1;
    } else if (strcmp(argv[i], "--batch-only") == 0) {
      batch_only = 1; /* the batch's kernels first and alone, for a profiler's launch count */
    } else {
      fputs("usage: lct-bench gpu [--json] [--out FILE] [--data DIR] [--sizes MiB,...] [--dtypes NAME,...] [--reps N] "
            "[--batch-only]\n",
            stderr);
      return 2;
    }
  }
  int n_dev = 0;
  if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev == 0) {
    printf("lct-bench gpu: no CUDA device: skipped\n");
    return 0;
  }
  struct cudaDeviceProp prop;
  int driver = 0, runtime = 0;
  GPU_TRY(cudaGetDeviceProperties(&prop, 0));
  GPU_TRY(cudaDriverGetVersion(&driver));
  GPU_TRY(cudaRuntimeGetVersion(&runtime));
  GPU_TRY(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking));
  GPU_TRY(cudaEventCreate(&c.e0));
  GPU_TRY(cudaEventCreate(&c.e1));

  uint64_t sizes[16];
  int n_sizes = bench_parse_list("--sizes", sizes_arg, sizes, 16);
  if (n_sizes < 0) return 1;
  if (batch_only) n_sizes = 0;
  for (int i = 0; i < n_sizes; i++) sizes[i] <<= 20;

  static gpu_row rows[MAX_ROWS], kinds[MAX_ROWS];
  int n_rows = 0, n_kinds = 0;
  uint64_t max_size = 0;
  for (int i = 0; i < n_sizes; i++) max_size = sizes[i] > max_size ? sizes[i] : max_size;
  uint8_t *host = malloc(max_size > (64u << 20) ? max_size : (64u << 20));
  /* bf16 and f32 at every size; the other dtypes at 64 MiB. */
  int dtypes[LCT_DTYPE_COUNT], n_dtypes = 0, with_bf16 = 0;
  char names[128];
  snprintf(names, sizeof names, "%s", dtypes_arg);
  for (char *save, *tok = strtok_r(names, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    lct_dtype d;
    if (lct_dtype_parse(tok, &d) != 0 || d == LCT_DTYPE_RAW || n_dtypes == LCT_DTYPE_COUNT) {
      fprintf(stderr, "lct-bench gpu: --dtypes: '%s' is not a coded dtype\n", tok);
      return 1;
    }
    dtypes[n_dtypes++] = (int)d;
    with_bf16 |= d == LCT_DTYPE_BF16;
  }
  if (batch_only) {
    n_dtypes = 0;
    with_bf16 = 1;
  }
  for (int d = 0; d < n_dtypes; d++) {
    pool pl = dtype_pool(c.dir, dtypes[d], NULL);
    if (!pl.len) {
      fprintf(stderr, "lct-bench gpu: no %s tensors in %s\n", lct_dtype_name(dtypes[d]), c.dir);
      return 1;
    }
    const int all_sizes = dtypes[d] == LCT_DTYPE_BF16 || dtypes[d] == LCT_DTYPE_F32;
    for (int i = 0; i < n_sizes && n_rows < MAX_ROWS; i++) {
      const uint64_t bytes = all_sizes ? sizes[i] : (64u << 20);
      tile(host, bytes, &pl);
      measure(&c, dtypes[d], host, bytes, "mix", 0, &rows[n_rows++]);
      if (!all_sizes) break;
    }
    free(pl.p);
  }
  /* Each kind of training tensor alone, 64 MiB, with its order-0 bound. */
  static const char *kind_names[] = {"w", "g", "m", "v", "act"};
  for (int d = 0; d < n_dtypes; d++) {
    if (dtypes[d] != LCT_DTYPE_BF16 && dtypes[d] != LCT_DTYPE_F32) continue;
    for (size_t k = 0; k < sizeof kind_names / sizeof kind_names[0]; k++) {
      pool pl = dtype_pool(c.dir, dtypes[d], kind_names[k]);
      if (!pl.len) continue;
      tile(host, 64u << 20, &pl);
      measure(&c, dtypes[d], host, 64u << 20, kind_names[k], 1, &kinds[n_kinds++]);
      free(pl.p);
    }
  }
  batch_result b;
  memset(&b, 0, sizeof b);
  if (with_bf16) {
    pool wpl = dtype_pool(c.dir, LCT_DTYPE_BF16, "w");
    if (!wpl.len) {
      fprintf(stderr, "lct-bench gpu: no bf16 weight tensors (*_w.bf16.bin) in %s\n", c.dir);
      return 1;
    }
    measure_batch(&c, &wpl, &b);
    free(wpl.p);
  }
  free(host);

  if (!json) {
    printf("GPU codec: %s, %d SMs, CUDA driver %d.%d, runtime %d.%d; median of %d after 2 warm-ups; data: %s\n",
           prop.name, prop.multiProcessorCount, driver / 1000, driver % 1000 / 10, runtime / 1000,
           runtime % 1000 / 10, c.reps, c.dir);
    printf("GB/s are raw tensor bytes per second; enc%%/dec%%/crc%% = same-run device-to-device memcpy time / codec "
           "time (crc: CRC-32C of the raw bytes)\n");
    if (n_rows) print_rows(rows, n_rows);
    if (n_kinds) {
      printf("\nEach tensor kind alone (64 MiB tiles), against the order-0 bound of the ratio:\n");
      print_rows(kinds, n_kinds);
    }
    if (b.count) {
      printf("\nBatch: %zu bf16 GPT parameter tensors, %.1f MiB, ratio %.4f; memcpy of the same bytes %.3f ms\n",
             b.count, (double)b.total_bytes / MIB, b.ratio, b.copy_ms);
      printf("  %-28s %10s %10s %10s\n", "", "encode ms", "decode ms", "crc ms");
      printf("  %-28s %10.3f %10.3f %10.3f\n", "one batched call", b.enc_batch_ms, b.dec_batch_ms, b.crc_batch_ms);
      printf("  %-28s %10.3f %10.3f %10.3f\n", "one call per tensor", b.enc_each_ms, b.dec_each_ms, b.crc_each_ms);
      printf("  %-28s %10.3f %10.3f %10.3f\n", "one tensor of the same bytes", b.enc_one_ms, b.dec_one_ms,
             b.crc_one_ms);
      printf("  host time in the call, us: batched %.1f / %.1f, one tensor %.1f / %.1f (encode / decode)\n",
             b.enc_batch_submit_us, b.dec_batch_submit_us, b.enc_one_submit_us, b.dec_one_submit_us);
    }
  }
  FILE *jf = json ? stdout : bench_open_out(out_path);
  if (jf) {
    fprintf(jf, "{\"bench\": \"gpu\", \"gpu\": \"%s\", \"sms\": %d, \"cuda_driver\": %d, \"cuda_runtime\": %d, "
                "\"reps\": %d, \"data\": \"%s\",\n",
            prop.name, prop.multiProcessorCount, driver, runtime, c.reps, c.dir);
    json_rows(jf, "sizes", rows, n_rows);
    fputs(",\n", jf);
    json_rows(jf, "kinds", kinds, n_kinds);
    fprintf(jf,
            ",\n  \"batch\": {\"tensors\": %zu, \"raw_bytes\": %llu, \"ratio\": %.5f, \"memcpy_ms\": %.5f, "
            "\"encode_batch_ms\": %.5f, \"decode_batch_ms\": %.5f, \"encode_each_ms\": %.5f, \"decode_each_ms\": %.5f, "
            "\"encode_one_tensor_ms\": %.5f, \"decode_one_tensor_ms\": %.5f, \"crc32c_batch_ms\": %.5f, "
            "\"crc32c_each_ms\": %.5f, \"crc32c_one_tensor_ms\": %.5f, \"encode_batch_submit_us\": %.2f, "
            "\"decode_batch_submit_us\": %.2f, \"encode_one_tensor_submit_us\": %.2f, "
            "\"decode_one_tensor_submit_us\": %.2f}\n}\n",
            b.count, (unsigned long long)b.total_bytes, b.ratio, b.copy_ms, b.enc_batch_ms, b.dec_batch_ms,
            b.enc_each_ms, b.dec_each_ms, b.enc_one_ms, b.dec_one_ms, b.crc_batch_ms, b.crc_each_ms, b.crc_one_ms,
            b.enc_batch_submit_us, b.dec_batch_submit_us, b.enc_one_submit_us, b.dec_one_submit_us);
    if (jf != stdout) fclose(jf);
  }
  GPU_TRY(cudaEventDestroy(c.e0));
  GPU_TRY(cudaEventDestroy(c.e1));
  GPU_TRY(cudaStreamDestroy(c.stream));
  return 0;
}
