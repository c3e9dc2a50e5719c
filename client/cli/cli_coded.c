/* cli_coded.c — lct put --encode and get --decode: tensors coded on this host's CPU threads, the wire carrying blobs, each batch sent while the next is coded. */
#include "cli_coded.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lct_codec.h"

#define CLI_SEGMENT_MAX (1u << 20) /* raw bytes per blob: lctd's default segment_size */
#define CLI_BATCH_PER_THREAD 4     /* segments each thread codes per batch */

/* One segment's coding, by a thread of a batch. */
typedef struct cli_seg {
  const uint8_t *src;
  size_t src_len;
  uint8_t *dst;
  size_t cap;     /* encode: bytes at dst; decode: raw bytes expected */
  size_t out_len; /* encode: the blob's bytes */
  int rc;
} cli_seg;

typedef struct cli_batch {
  int dtype;
  int encode;             /* else decode */
  const lct_codebook *cb; /* encode; NULL for the raw dtype */
  cli_seg *segs;
  size_t n;
  int threads;
} cli_batch;

typedef struct cli_worker {
  cli_batch *b;
  int index;
} cli_worker;

/* Codes the batch's segments index, index + threads, ... */
static void *cli_code(void *arg) {
  cli_worker *w = arg;
  cli_batch *b = w->b;
  size_t esize = lct_dtype_size(b->dtype);
  for (size_t i = (size_t)w->index; i < b->n; i += (size_t)b->threads) {
    cli_seg *s = &b->segs[i];
    if (b->encode) {
      lct_encode_stats st;
      s->rc = lct_encode(b->dtype, b->cb, s->src, s->src_len / esize, s->dst, s->cap, &st);
      s->out_len = st.blob_bytes;
    } else {
      s->rc = lct_decode(s->src, s->src_len, s->dst, s->cap);
    }
  }
  return NULL;
}

/* Codes the batch on its threads, the caller's one of them; a thread that
 * cannot start has its share coded by the caller. */
static int cli_run(cli_batch *b) {
  pthread_t th[CLI_THREADS_MAX];
  if ((size_t)b->threads > b->n) /* no thread started for nothing: a small tensor codes on the caller's */
    b->threads = b->n > 0 ? (int)b->n : 1;
  cli_worker ws[CLI_THREADS_MAX];
  int started[CLI_THREADS_MAX] = {0};
  for (int t = 0; t < b->threads; t++)
    ws[t] = (cli_worker){b, t};
  for (int t = 1; t < b->threads; t++)
    started[t] = pthread_create(&th[t], NULL, cli_code, &ws[t]) == 0;
  cli_code(&ws[0]);
  for (int t = 1; t < b->threads; t++) {
    if (started[t])
      pthread_join(th[t], NULL);
    else
      cli_code(&ws[t]);
  }
  for (size_t i = 0; i < b->n; i++)
    if (b->segs[i].rc != 0)
      return b->segs[i].rc;
  return 0;
}

int cli_threads(int asked) {
  long n = asked > 0 ? asked : sysconf(_SC_NPROCESSORS_ONLN);
  return n < 1 ? 1 : n > CLI_THREADS_MAX ? CLI_THREADS_MAX : (int)n;
}

int cli_put_encoded(lct_client *c, const char *key, lct_dtype dtype, const uint64_t *shape, int ndim,
                    const uint8_t *data, size_t bytes, int threads, lct_tensor_info *info) {
  uint64_t seg = lct_segment_bytes(c);
  if (seg == 0)
    return LCT_EOP;
  seg = seg < CLI_SEGMENT_MAX ? seg : CLI_SEGMENT_MAX;
  size_t esize = lct_dtype_size(dtype), n_segs = bytes == 0 ? 1 : (bytes + seg - 1) / seg;
  lct_codebook cb;
  int coded = lct_dtype_symbol_bits(dtype) != 0;
  int rc = coded ? lct_codebook_from_data(dtype, data, bytes / esize, &cb) : 0;
  if (rc != 0)
    return rc;
  uint32_t crc = lct_checksum(0, data, bytes);
  size_t per_batch = (size_t)threads * CLI_BATCH_PER_THREAD, bound = lct_encode_bound(dtype, seg / esize);
  cli_seg *segs = calloc(per_batch, sizeof *segs);
  uint8_t *out = malloc(per_batch * bound);
  if (segs == NULL || out == NULL) {
    free(segs), free(out);
    return LCT_ENOMEM;
  }
  lct_put_stream *s = NULL;
  /* A tensor whose blobs surely fit one frame goes as one PUT. */
  int single = n_segs <= per_batch && n_segs * bound <= lct_frame_bytes(c);
  if (!single)
    rc = lct_put_stream_open(c, key, dtype, shape, ndim, crc, 1, &s);
  for (size_t at = 0; at < n_segs && rc == 0; at += per_batch) {
    cli_batch b = {dtype, 1, coded ? &cb : NULL, segs, n_segs - at < per_batch ? n_segs - at : per_batch, threads};
    for (size_t i = 0; i < b.n; i++) {
      size_t off = (at + i) * seg;
      segs[i] = (cli_seg){data + off, bytes - off < seg ? bytes - off : seg, out + i * bound, bound, 0, 0};
    }
    if ((rc = cli_run(&b)) != 0)
      break;
    /* Packed back to back: each blob moves down over the slack of the ones before. */
    size_t len = 0;
    for (size_t i = 0; i < b.n; i++) {
      memmove(out + len, segs[i].dst, segs[i].out_len);
      len += segs[i].out_len;
    }
    rc = single ? lct_put_encoded(c, key, dtype, shape, ndim, crc, out, len, info) : lct_put_stream_write(s, out, len);
  }
  if (s != NULL) {
    if (rc == 0)
      rc = lct_put_stream_commit(s, info);
    else
      lct_put_stream_abort(s);
  }
  free(segs);
  free(out);
  return rc;
}

int cli_get_decoded(lct_client *c, const char *key, int threads, void **data, lct_tensor_info *info) {
  void *blobs;
  size_t len;
  int rc = lct_get_encoded(c, key, &blobs, &len, info);
  if (rc != 0)
    return rc;
  size_t n = 0, cap = 16;
  cli_seg *segs = malloc(cap * sizeof *segs);
  uint8_t *raw = malloc(info->raw_bytes ? (size_t)info->raw_bytes : 1);
  uint64_t off = 0;
  if (segs == NULL || raw == NULL)
    rc = LCT_ENOMEM;
  /* The blobs' headers, checked as they are split: the decoders check the rest. */
  for (size_t at = 0; rc == 0 && at < len; n++) {
    lct_blob_info bi;
    if (lct_blob_next((const uint8_t *)blobs + at, len - at, &bi) != 0 || bi.raw_bytes > info->raw_bytes - off) {
      rc = LCT_ECORRUPT;
      break;
    }
    size_t size = (size_t)bi.blob_bytes;
    if (n == cap) {
      cli_seg *more = realloc(segs, 2 * cap * sizeof *segs);
      if (more == NULL) {
        rc = LCT_ENOMEM;
        break;
      }
      segs = more;
      cap *= 2;
    }
    segs[n] = (cli_seg){(const uint8_t *)blobs + at, size, raw + off, (size_t)bi.raw_bytes, 1, 0};
    at += size;
    off += bi.raw_bytes;
  }
  if (rc == 0 && off != info->raw_bytes)
    rc = LCT_ECORRUPT;
  if (rc == 0) {
    cli_batch b = {info->dtype, 0, NULL, segs, n, threads};
    rc = cli_run(&b);
  }
  if (rc == 0 && lct_checksum(0, raw, info->raw_bytes) != info->checksum)
    rc = LCT_ECHECKSUM;
  free(segs);
  lct_free(blobs);
  if (rc != 0) {
    free(raw);
    return rc;
  }
  *data = raw;
  return 0;
}
