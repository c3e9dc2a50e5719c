/* work.c — host puts and gets on the codec workers: encode a put from host memory into segments, decode a range of a stored tensor into host memory. */
#include "work.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "codebook.h"
#include "lct_checksum.h"
#include "log.h"
#include "workers.h"

int lct__work_here(const lct__server *srv, uint64_t bytes) {
  return lct__pool_backend(srv->pool)->ops->loop_codec && bytes <= srv->cfg.inline_size;
}

void lct__work_submit(lct__server *srv, lct__task *t, int here) {
  if (!here) {
    lct__workers_submit(srv->workers, t);
    return;
  }
  t->run(t, LCT__LOOP_WORKER);
  t->done(t);
}

/* ---- put ---------------------------------------------------------------- */

enum { LCT__DO_CRC = 1, LCT__DO_HIST = 2, LCT__DO_ENCODE = 4 };

typedef struct lct__put_task {
  lct__task task;
  struct lct__put_job *job;
  size_t seg;
  lct_encode_stats est;
  int rc;
} lct__put_task;

typedef struct lct__put_job {
  lct__server *srv;
  lct_put_decl decl;
  lct__put_src src;
  lct__entry *e;       /* being built; installed at the end */
  int round;           /* LCT__DO_* bits of the current round */
  lct__put_step step;  /* how it codes, by the codebook policy */
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

static void lct__put_task_run(lct__task *task, int worker) {
  lct__put_task *t = (lct__put_task *)task;
  lct__put_job *job = t->job;
  lct__segment *sg = &job->e->segments[t->seg];
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
    sg->crc = lct_crc32c(0, src, sg->raw_bytes);
  if (job->round & LCT__DO_HIST) {
    uint64_t *h = job->hists + t->seg * job->hist_len;
    memset(h, 0, job->hist_len * sizeof *h);
    t->rc = lct_histogram(job->decl.dtype, src, n, h);
  }
  if (t->rc == 0 && (job->round & LCT__DO_ENCODE)) {
    const lct__backend *be = lct__pool_backend(job->srv->pool);
    const lct_codebook *cb = job->e->has_codebook ? &job->e->codebook : NULL;
    t->rc = be->ops->encode(be->ctx, worker, job->decl.dtype, cb, src, n, sg->blob, sg->alloc_bytes, &t->est);
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
static void lct__put_task_done(lct__task *task) {
  lct__put_task *t = (lct__put_task *)task;
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
  if (job->round & LCT__DO_CRC) {
    uint32_t crc = lct__entry_crc(e);
    if (job->decl.has_checksum && crc != job->decl.checksum) {
      lct__put_finish(job, LCT_ECHECKSUM, "payload does not match the declared checksum");
      return;
    }
    e->checksum = crc;
  }
  if (job->round & LCT__DO_ENCODE) {
    uint64_t code_bits = 0;
    for (size_t i = 0; i < job->n_tasks; i++) {
      e->segments[i].blob_bytes = job->tasks[i].est.blob_bytes;
      code_bits += job->tasks[i].est.code_bits;
    }
    lct__codebook_coded(e, job->step, code_bits);
  }
  if (job->round & LCT__DO_HIST) { /* a first put's, or counted beside the encode of a drifted key's */
    uint64_t *sum = job->hists;
    for (size_t i = 1; i < job->n_tasks; i++)
      for (size_t k = 0; k < job->hist_len; k++)
        sum[k] += job->hists[i * job->hist_len + k];
    int rc = lct__codebook_build(e, sum);
    if (rc != 0) {
      lct__put_finish(job, rc, "codebook build failed");
      return;
    }
    lct__codebook_adopt(srv, e, job->step);
    free(job->hists);
    job->hists = NULL;
    if (!(job->round & LCT__DO_ENCODE)) {
      lct__put_round(job, LCT__DO_ENCODE);
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
  /* Counted before: the last task's done may end (free) the job when it runs here. */
  size_t n = job->n_tasks;
  int here = lct__work_here(job->srv, job->decl.raw_bytes);
  for (size_t i = 0; i < n; i++) {
    lct__put_task *t = &job->tasks[i];
    t->task.run = lct__put_task_run;
    t->task.done = lct__put_task_done;
    lct__work_submit(job->srv, &t->task, here);
  }
}

int lct__put_start(lct__server *srv, const uint8_t *key, size_t key_len, const lct_put_decl *decl,
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
  job->step = lct__codebook_start(srv, e);
  int round = job->step == LCT__PUT_HISTOGRAM      ? LCT__DO_HIST
              : job->step == LCT__PUT_ENCODE_COUNT ? LCT__DO_ENCODE | LCT__DO_HIST
                                                   : LCT__DO_ENCODE;
  lct__put_round(job, LCT__DO_CRC | round);
  return 0;
}

/* ---- get ---------------------------------------------------------------- */

typedef struct lct__get_task {
  lct__task task;
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

static void lct__get_task_run(lct__task *task, int worker) {
  lct__get_task *t = (lct__get_task *)task;
  lct__get_job *job = t->job;
  const lct__segment *sg = &job->e->segments[t->seg];
  const lct__backend *be = lct__pool_backend(job->srv->pool);
  int dtype = job->e->dtype;
  uint64_t n = sg->raw_bytes / lct_dtype_size(dtype);
  uint64_t a = sg->raw_offset > job->offset ? sg->raw_offset : job->offset;
  uint64_t seg_end = sg->raw_offset + sg->raw_bytes, end = job->offset + job->len;
  uint64_t b = seg_end < end ? seg_end : end;
  if (a == sg->raw_offset && b == seg_end) {
    t->rc = be->ops->decode(be->ctx, worker, dtype, n, sg->blob, sg->blob_bytes, job->dst + (a - job->offset));
    return;
  }
  uint8_t *scratch = malloc(sg->raw_bytes);
  if (scratch == NULL) {
    t->rc = LCT_ENOMEM;
    return;
  }
  t->rc = be->ops->decode(be->ctx, worker, dtype, n, sg->blob, sg->blob_bytes, scratch);
  if (t->rc == 0)
    memcpy(job->dst + (a - job->offset), scratch + (a - sg->raw_offset), b - a);
  free(scratch);
}

static void lct__get_task_done(lct__task *task) {
  lct__get_task *t = (lct__get_task *)task;
  lct__get_job *job = t->job;
  if (--job->pending > 0)
    return;
  int rc = 0;
  size_t bad = 0;
  for (size_t i = 0; i < job->n_tasks && rc == 0; i++) {
    rc = job->tasks[i].rc;
    bad = job->tasks[i].seg;
    job->srv->stats.decoded_bytes += job->e->segments[job->tasks[i].seg].raw_bytes;
  }
  job->srv->stats.decode_ns += uv_hrtime() - job->started;
  if (rc != 0) {
    lct__log_error("get of '%.*s' version %llu: segment %zu of %zu failed to decode: %s",
                   (int)(job->e->key_len > 64 ? 64 : job->e->key_len), (const char *)job->e->key,
                   (unsigned long long)job->e->version, bad, job->e->n_segments, lct_err_name(rc));
    rc = lct__stored_decode_error(rc);
  }
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
    t->task.run = lct__get_task_run;
    t->task.done = lct__get_task_done;
  }
  /* Whole segments are decoded, whatever part of them is asked for: they decide where the work runs. */
  uint64_t decoded = 0;
  for (size_t i = first; i <= last; i++)
    decoded += e->segments[i].raw_bytes;
  /* Prepared first: the last task's done ends (frees) the job when it runs here. */
  int here = lct__work_here(srv, decoded);
  for (size_t i = 0; i < n; i++)
    lct__work_submit(srv, &job->tasks[i].task, here);
  return 0;
}
