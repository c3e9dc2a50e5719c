/* work.c — codec jobs on the libuv threadpool: encode a put into segments, decode a range of a stored tensor. */
#include "work.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "lct_checksum.h"
#include "log.h"

/* ---- put ---------------------------------------------------------------- */

enum { LCT__DO_CRC = 1, LCT__DO_HIST = 2, LCT__DO_ENCODE = 4 };

typedef struct lct__put_task {
  uv_work_t work;
  struct lct__put_job *job;
  size_t seg;
  uint32_t crc;
  lct_encode_stats est;
  int rc;
} lct__put_task;

typedef struct lct__put_job {
  lct__server *srv;
  lct__put_decl decl;
  lct__put_src src;
  lct__entry *e;       /* being built; installed at the end */
  int round;           /* LCT__DO_* bits of the current round */
  int reused;          /* the codebook came from the key's previous version */
  int rebuilding;      /* drift detected: this histogram rebuilds */
  size_t hist_len;     /* 2^s counters per segment */
  uint64_t *hists;     /* n_tasks * hist_len, while a histogram round runs */
  size_t pending;
  lct__put_cb cb;
  void *arg;
  uint64_t started;    /* uv_hrtime at the start of the codec work */
  size_t n_tasks;
  lct__put_task tasks[];
} lct__put_job;

/* The raw bytes [off, off + len) of a put: a pointer into the source when
 * they are contiguous there, else gathered into *gathered (malloc'd). */
static const uint8_t *lct__put_bytes(const lct__put_src *src, uint64_t off, uint64_t len,
                                     uint8_t **gathered) {
  *gathered = NULL;
  if (src->data != NULL)
    return src->data + off;
  if (len == 0)
    return (const uint8_t *)""; /* an empty tensor: no piece to point into */
  size_t lo = 0, hi = src->n_pieces; /* the last piece starting at or before off */
  while (hi - lo > 1) {
    size_t mid = (lo + hi) / 2;
    if (src->pieces[mid].offset <= off)
      lo = mid;
    else
      hi = mid;
  }
  const lct__piece *pc = &src->pieces[lo];
  if (off + len <= pc->offset + pc->len)
    return pc->bytes + (off - pc->offset);
  uint8_t *buf = malloc(len);
  if (buf == NULL)
    return NULL;
  for (uint64_t done = 0; done < len; pc++) {
    uint64_t from = off + done - pc->offset;
    uint64_t n = pc->len - from < len - done ? pc->len - from : len - done;
    memcpy(buf + done, pc->bytes + from, n);
    done += n;
  }
  *gathered = buf;
  return buf;
}

static void lct__put_task_run(uv_work_t *w) {
  lct__put_task *t = w->data;
  lct__put_job *job = t->job;
  const lct__segment *sg = &job->e->segments[t->seg];
  uint8_t *gathered;
  const uint8_t *src = lct__put_bytes(&job->src, sg->raw_offset, sg->raw_bytes, &gathered);
  size_t esize = lct_dtype_size(job->decl.dtype);
  uint64_t n = sg->raw_bytes / esize;
  if (src == NULL) {
    t->rc = LCT_ENOMEM;
    return;
  }
  t->rc = 0;
  if (job->round & LCT__DO_CRC)
    t->crc = lct_crc32c(0, src, sg->raw_bytes);
  if (job->round & LCT__DO_HIST) {
    uint64_t *h = job->hists + t->seg * job->hist_len;
    memset(h, 0, job->hist_len * sizeof *h);
    t->rc = lct_histogram(job->decl.dtype, src, n, h);
  }
  if (t->rc == 0 && (job->round & LCT__DO_ENCODE)) {
    const lct__backend *be = lct__pool_backend(job->srv->pool);
    const lct_codebook *cb = job->e->has_codebook ? &job->e->codebook : NULL;
    t->rc = be->ops->encode(be->ctx, job->decl.dtype, cb, src, n, sg->blob, sg->alloc_bytes,
                            &t->est);
  }
  free(gathered);
}

static void lct__put_round(lct__put_job *job, int round);

static void lct__put_finish(lct__put_job *job, int rc, const char *why) {
  lct__server *srv = job->srv;
  free(job->hists);
  job->hists = NULL;
  if (rc != 0) {
    lct__entry_unref(job->e); /* frees the reserved segments */
    job->cb(job->arg, rc, why, NULL);
    free(job);
    return;
  }
  lct__entry *e = job->e;
  lct__entry_publish(srv, e);
  srv->stats.encode_ns += uv_hrtime() - job->started;
  job->cb(job->arg, 0, NULL, e);
  free(job);
}

/* After a round: fold the per-segment results and pick the next round. */
static void lct__put_task_done(uv_work_t *w, int status) {
  lct__put_task *t = w->data;
  lct__put_job *job = t->job;
  if (--job->pending > 0)
    return;
  lct__server *srv = job->srv;
  lct__entry *e = job->e;
  for (size_t i = 0; i < job->n_tasks; i++) {
    if (job->tasks[i].rc != 0) {
      lct__put_finish(job, job->tasks[i].rc, "codec failed");
      return;
    }
  }
  if (status != 0) {
    lct__put_finish(job, LCT_ENOMEM, "work cancelled");
    return;
  }
  if (job->round & LCT__DO_CRC) {
    uint32_t crc = 0;
    for (size_t i = 0; i < job->n_tasks; i++)
      crc = i == 0 ? job->tasks[0].crc
                   : lct_crc32c_combine(crc, job->tasks[i].crc, e->segments[i].raw_bytes);
    if (job->decl.has_checksum && crc != job->decl.checksum) {
      lct__put_finish(job, LCT_ECHECKSUM, "payload does not match the declared checksum");
      return;
    }
    e->checksum = crc;
  }
  if (job->round & LCT__DO_HIST) {
    uint64_t *sum = job->hists;
    for (size_t i = 1; i < job->n_tasks; i++)
      for (size_t k = 0; k < job->hist_len; k++)
        sum[k] += job->hists[i * job->hist_len + k];
    int rc = lct__codebook_set(srv, e, sum, job->rebuilding);
    if (rc != 0) {
      lct__put_finish(job, rc, "codebook build failed");
      return;
    }
    free(job->hists);
    job->hists = NULL;
    lct__put_round(job, LCT__DO_ENCODE);
    return;
  }
  if (job->round & LCT__DO_ENCODE) {
    uint64_t code_bits = 0;
    for (size_t i = 0; i < job->n_tasks; i++) {
      e->segments[i].blob_bytes = job->tasks[i].est.blob_bytes;
      code_bits += job->tasks[i].est.code_bits;
    }
    if (job->reused && !job->rebuilding && lct__codebook_drifted(e, code_bits)) {
      lct__log_debug("codebook of '%.*s' drifted: %llu code bits; rebuilding",
                     (int)(e->key_len > 64 ? 64 : e->key_len), (const char *)e->key, (unsigned long long)code_bits);
      job->rebuilding = 1;
      lct__put_round(job, LCT__DO_HIST);
      return;
    }
  }
  lct__put_finish(job, 0, NULL);
}

static void lct__put_round(lct__put_job *job, int round) {
  job->round = round;
  if (round & LCT__DO_HIST) {
    job->hists = malloc(job->n_tasks * job->hist_len * sizeof *job->hists);
    if (job->hists == NULL) {
      lct__put_finish(job, LCT_ENOMEM, "out of memory for histograms");
      return;
    }
  }
  job->pending = job->n_tasks;
  for (size_t i = 0; i < job->n_tasks; i++) {
    lct__put_task *t = &job->tasks[i];
    t->work.data = t;
    int rc = uv_queue_work(job->srv->loop, &t->work, lct__put_task_run, lct__put_task_done);
    assert(rc == 0 && "uv_queue_work with a valid loop and callback");
    (void)rc;
  }
}

void lct__entry_publish(lct__server *srv, lct__entry *e) {
  e->stored_bytes = 0;
  for (size_t i = 0; i < e->n_segments; i++) {
    lct__segment *sg = &e->segments[i];
    sg->alloc_bytes = lct__pool_shrink(srv->pool, &sg->blob, sg->alloc_bytes, sg->blob_bytes);
    e->stored_bytes += sg->blob_bytes;
  }
  srv->stats.encoded_bytes += e->raw_bytes;
  lct__store_install(srv->store, e);
}

int lct__codebook_drifted(const lct__entry *e, uint64_t code_bits) {
  return e->has_codebook && e->n_elems > 0 &&
         (double)code_bits > e->codebook.expected_bits_per_elem * (double)e->n_elems * (1.0 + LCT__DRIFT);
}

int lct__codebook_inherit(lct__server *srv, lct__entry *e) {
  const lct__entry *prev = lct__store_find(srv->store, e->key, e->key_len);
  if (prev == NULL || !prev->has_codebook || prev->dtype != e->dtype)
    return 0;
  e->codebook = prev->codebook;
  e->codebook_id = prev->codebook_id;
  e->has_codebook = 1;
  return prev->codebook_stale ? 2 : 1;
}

int lct__codebook_set(lct__server *srv, lct__entry *e, const uint64_t *hist, int rebuild) {
  /* O(alphabet) work: a 2^s + 1 symbol Huffman build, not a pass over data. */
  int rc = lct_codebook_build(e->dtype, hist, &e->codebook);
  if (rc == 0)
    lct__codebook_adopt(srv, e, rebuild);
  return rc;
}

void lct__codebook_adopt(lct__server *srv, lct__entry *e, int rebuild) {
  e->has_codebook = 1;
  e->codebook_id = ++srv->codebook_ids;
  if (rebuild)
    srv->stats.codebook_rebuilds++;
  else
    srv->stats.codebook_builds++;
}

uint64_t lct__segment_bytes(const lct__server *srv, uint64_t raw_bytes) {
  const uint64_t align = 64 << 10;
  uint64_t seg = srv->cfg.segment_size, threads = srv->threads > 0 ? (uint64_t)srv->threads : 1;
  uint64_t spread = (raw_bytes / threads + align - 1) / align * align;
  if (spread < LCT__SEGMENT_MIN)
    spread = LCT__SEGMENT_MIN;
  return spread < seg ? spread : seg;
}

uint64_t lct__put_reserve(const lct__server *srv, const lct__put_decl *decl) {
  uint64_t seg_bytes = lct__segment_bytes(srv, decl->raw_bytes), esize = lct_dtype_size(decl->dtype);
  uint64_t full = decl->raw_bytes / seg_bytes, tail = decl->raw_bytes % seg_bytes;
  uint64_t total = full * lct_encode_bound(decl->dtype, seg_bytes / esize);
  if (tail != 0 || full == 0)
    total += lct_encode_bound(decl->dtype, tail / esize);
  return total;
}

int lct__entry_reserve(lct__server *srv, const uint8_t *key, size_t key_len, const lct__put_decl *decl,
                       uint64_t seg_bytes, lct__entry **out) {
  size_t esize = lct_dtype_size(decl->dtype);
  assert(esize != 0 && decl->n_elems * esize == decl->raw_bytes && seg_bytes % (64 << 10) == 0);
  uint64_t n_seg = decl->raw_bytes == 0 ? 1 : (decl->raw_bytes + seg_bytes - 1) / seg_bytes;
  lct__entry *e;
  int rc = lct__entry_new(srv->pool, key, key_len, n_seg, &e);
  if (rc != 0)
    return rc;
  e->dtype = decl->dtype;
  e->ndim = decl->ndim;
  memcpy(e->shape, decl->shape, sizeof e->shape);
  e->n_elems = decl->n_elems;
  e->raw_bytes = decl->raw_bytes;
  for (uint64_t i = 0; i < n_seg; i++) {
    lct__segment *sg = &e->segments[i];
    sg->raw_offset = i * seg_bytes;
    sg->raw_bytes = decl->raw_bytes - sg->raw_offset < seg_bytes ? decl->raw_bytes - sg->raw_offset
                                                                 : seg_bytes;
    size_t bound = lct_encode_bound(decl->dtype, sg->raw_bytes / esize);
    if ((rc = lct__pool_alloc(srv->pool, bound, &sg->blob)) != 0) {
      lct__entry_unref(e);
      return rc;
    }
    sg->alloc_bytes = bound;
  }
  *out = e;
  return 0;
}

int lct__put_start(lct__server *srv, const uint8_t *key, size_t key_len, const lct__put_decl *decl,
                   const lct__put_src *src, lct__put_cb cb, void *arg) {
  lct__entry *e;
  int rc = lct__entry_reserve(srv, key, key_len, decl, lct__segment_bytes(srv, decl->raw_bytes), &e);
  if (rc != 0)
    return rc;
  lct__put_job *job = calloc(1, sizeof *job + e->n_segments * sizeof(lct__put_task));
  if (job == NULL) {
    lct__entry_unref(e);
    return LCT_ENOMEM;
  }
  job->e = e;
  uint64_t n_seg = e->n_segments;
  for (uint64_t i = 0; i < n_seg; i++) {
    job->tasks[i].job = job;
    job->tasks[i].seg = i;
  }
  job->srv = srv;
  job->decl = *decl;
  job->src = *src;
  job->cb = cb;
  job->arg = arg;
  job->n_tasks = n_seg;
  job->started = uv_hrtime();
  unsigned s = lct_dtype_symbol_bits(decl->dtype);
  job->hist_len = s ? (size_t)1 << s : 0;
  int round = LCT__DO_CRC;
  if (s == 0 || (job->reused = lct__codebook_inherit(srv, e)))
    round |= LCT__DO_ENCODE;
  else
    round |= LCT__DO_HIST;
  lct__put_round(job, round);
  return 0;
}

/* ---- get ---------------------------------------------------------------- */

typedef struct lct__get_task {
  uv_work_t work;
  struct lct__get_job *job;
  size_t seg;
  int rc;
} lct__get_task;

typedef struct lct__get_job {
  lct__server *srv;
  lct__entry *e;
  uint64_t offset, len;
  uint8_t *dst;
  size_t pending;
  lct__get_cb cb;
  void *arg;
  uint64_t started; /* uv_hrtime when the decode was queued */
  size_t n_tasks;
  lct__get_task tasks[];
} lct__get_job;

static void lct__get_task_run(uv_work_t *w) {
  lct__get_task *t = w->data;
  lct__get_job *job = t->job;
  const lct__segment *sg = &job->e->segments[t->seg];
  const lct__backend *be = lct__pool_backend(job->srv->pool);
  int dtype = job->e->dtype;
  uint64_t n = sg->raw_bytes / lct_dtype_size(dtype);
  uint64_t a = sg->raw_offset > job->offset ? sg->raw_offset : job->offset;
  uint64_t seg_end = sg->raw_offset + sg->raw_bytes, end = job->offset + job->len;
  uint64_t b = seg_end < end ? seg_end : end;
  if (a == sg->raw_offset && b == seg_end) {
    t->rc = be->ops->decode(be->ctx, dtype, n, sg->blob, sg->blob_bytes, job->dst + (a - job->offset));
    return;
  }
  uint8_t *scratch = malloc(sg->raw_bytes);
  if (scratch == NULL) {
    t->rc = LCT_ENOMEM;
    return;
  }
  t->rc = be->ops->decode(be->ctx, dtype, n, sg->blob, sg->blob_bytes, scratch);
  if (t->rc == 0)
    memcpy(job->dst + (a - job->offset), scratch + (a - sg->raw_offset), b - a);
  free(scratch);
}

static void lct__get_task_done(uv_work_t *w, int status) {
  lct__get_task *t = w->data;
  lct__get_job *job = t->job;
  if (status != 0 && t->rc == 0)
    t->rc = LCT_ENOMEM;
  if (--job->pending > 0)
    return;
  int rc = 0;
  for (size_t i = 0; i < job->n_tasks && rc == 0; i++) {
    rc = job->tasks[i].rc;
    job->srv->stats.decoded_bytes += job->e->segments[job->tasks[i].seg].raw_bytes;
  }
  job->srv->stats.decode_ns += uv_hrtime() - job->started;
  if (rc != 0)
    lct__log_error("decoding '%.*s' version %llu failed: %s",
                   (int)(job->e->key_len > 64 ? 64 : job->e->key_len), (const char *)job->e->key,
                   (unsigned long long)job->e->version, lct_strerror(rc));
  lct__entry_unref(job->e);
  job->cb(job->arg, rc);
  free(job);
}

int lct__get_start(lct__server *srv, lct__entry *e, uint64_t offset, uint64_t len, uint8_t *dst,
                   lct__get_cb cb, void *arg) {
  assert(len > 0 && offset + len <= e->raw_bytes && e->n_segments > 0);
  uint64_t seg_bytes = e->segments[0].raw_bytes; /* every segment but the last has this size */
  size_t first = (size_t)(offset / seg_bytes), last = (size_t)((offset + len - 1) / seg_bytes);
  size_t n = last - first + 1;
  lct__get_job *job = calloc(1, sizeof *job + n * sizeof(lct__get_task));
  if (job == NULL)
    return LCT_ENOMEM;
  job->srv = srv;
  job->e = e;
  lct__entry_ref(e);
  job->offset = offset;
  job->len = len;
  job->dst = dst;
  job->cb = cb;
  job->arg = arg;
  job->n_tasks = n;
  job->pending = n;
  job->started = uv_hrtime();
  for (size_t i = 0; i < n; i++) {
    lct__get_task *t = &job->tasks[i];
    t->job = job;
    t->seg = first + i;
    t->work.data = t;
    int rc = uv_queue_work(srv->loop, &t->work, lct__get_task_run, lct__get_task_done);
    assert(rc == 0 && "uv_queue_work with a valid loop and callback");
    (void)rc;
  }
  return 0;
}
