/* blob.c — encoded puts and gets: a client's blobs checked against the put's declaration, validated on the codec workers and stored as sent; stored blobs sent as they are. */
#include "blob.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lct_checksum.h"
#include "log.h"
#include "work.h"
#include "workers.h"

/* ---- the layout of an encoded put --------------------------------------- */

/* Whether a blob holding r raw bytes may sit at raw offset a. */
static int lct__blob_place(lct__blob_layout *lay, uint64_t a, uint64_t r, char *why, size_t cap) {
  const uint64_t align = 64 << 10, total = lay->decl->raw_bytes;
  if (r > total - a) {
    snprintf(why, cap, "blob of %" PRIu64 " raw bytes at %" PRIu64 " runs past the tensor's %" PRIu64, r, a, total);
    return LCT_ESIZE;
  }
  if (a + r < total) { /* not the tensor's last: a whole segment */
    if (lay->seg == 0) {
      if (r == 0 || r % align != 0 || r > lay->seg_max || a % r != 0) {
        snprintf(why, cap, "blob of %" PRIu64 " raw bytes at %" PRIu64 " is no segment: every blob but the last "
                 "holds the same multiple of 64K raw bytes, at most %" PRIu64 ", at a multiple of it",
                 r, a, lay->seg_max);
        return LCT_ESIZE;
      }
      lay->seg = r;
    } else if (r != lay->seg || a % lay->seg != 0) {
      snprintf(why, cap, "blob of %" PRIu64 " raw bytes at %" PRIu64 " breaks the layout of segments of %" PRIu64,
               r, a, lay->seg);
      return LCT_ESIZE;
    }
    return 0;
  }
  uint64_t limit = lay->seg != 0 ? lay->seg : lay->seg_max;
  if ((r == 0 && total != 0) || r > limit || (lay->seg != 0 && a % lay->seg != 0)) {
    snprintf(why, cap, "last blob of %" PRIu64 " raw bytes at %" PRIu64 " does not end the layout (segments of "
             "%" PRIu64 ", at most %" PRIu64 ")", r, a, lay->seg, lay->seg_max);
    return LCT_ESIZE;
  }
  return 0;
}

int lct__blobs_walk(lct__blob_layout *lay, uint64_t raw_at, const uint8_t *p, size_t len, lct__blob_ref *out,
                    size_t out_cap, size_t *n_out, uint64_t *covered, char *why, size_t cap) {
  const lct_put_decl *d = lay->decl;
  size_t at = 0, n = 0;
  uint64_t raw = raw_at;
  while (at < len) {
    if (len - at < LCT_HEADER_BYTES) {
      snprintf(why, cap, "blob %zu: %zu bytes left, shorter than a header", n, len - at);
      return LCT_ECORRUPT;
    }
    lct_blob_info info;
    int rc = lct_blob_next(p + at, len - at, &info);
    if (rc != 0) {
      snprintf(why, cap, "blob %zu at byte %zu: malformed header (%s)", n, at,
               rc == LCT_ESIZE ? "blob_size past the payload" : lct_err_name(rc));
      return LCT_ECORRUPT;
    }
    uint64_t blob_size = info.blob_bytes;
    if (info.dtype != (int)d->dtype) {
      snprintf(why, cap, "blob %zu holds dtype %s; the put declares %s", n, lct_dtype_name(info.dtype),
               lct_dtype_name(d->dtype));
      return LCT_EDTYPE;
    }
    if (blob_size > lct_encode_bound(info.dtype, info.n_elems)) {
      snprintf(why, cap, "blob %zu of %" PRIu64 " bytes exceeds the format's bound for %" PRIu64 " elements", n,
               blob_size, info.n_elems);
      return LCT_ECORRUPT;
    }
    if ((rc = lct__blob_place(lay, raw, info.raw_bytes, why, cap)) != 0)
      return rc;
    if (out != NULL) {
      if (n == out_cap) {
        snprintf(why, cap, "more blobs than the tensor has segments");
        return LCT_ESIZE;
      }
      out[n] = (lct__blob_ref){p + at, (size_t)blob_size, raw, info.raw_bytes};
    }
    n++;
    raw += info.raw_bytes;
    at += (size_t)blob_size;
    if (d->raw_bytes == 0) /* an empty tensor is one empty blob */
      break;
  }
  if (at != len || n == 0) {
    snprintf(why, cap, n == 0 ? "no blob" : "bytes after the tensor's last blob");
    return n == 0 ? LCT_ECORRUPT : LCT_ESIZE;
  }
  *n_out = n;
  *covered = raw - raw_at;
  return 0;
}

/* ---- accepting a put's blobs -------------------------------------------- */

typedef struct lct__accept_task {
  lct__task task;
  struct lct__accept_job *job;
  size_t seg;
  const uint8_t *src;
  int rc;
} lct__accept_task;

typedef struct lct__accept_job {
  lct__server *srv;
  lct_put_decl decl;
  lct__entry *e;
  size_t pending;
  lct__put_cb cb;
  void *arg;
  uint64_t started;
  size_t n_tasks;
  lct__accept_task tasks[];
} lct__accept_job;

static void lct__crc_chunk(void *arg, const void *raw, size_t bytes) {
  uint32_t *crc = arg;
  *crc = lct_crc32c(*crc, raw, bytes);
}

static void lct__accept_run(lct__task *task, int worker) {
  (void)worker;
  lct__accept_task *t = (lct__accept_task *)task;
  lct__accept_job *job = t->job;
  lct__segment *sg = &job->e->segments[t->seg];
  const lct__backend *be = lct__pool_backend(job->srv->pool);
  sg->crc = 0;
  t->rc = lct_validate(t->src, sg->blob_bytes, lct__crc_chunk, &sg->crc);
  if (t->rc == 0)
    t->rc = be->ops->write(be->ctx, t->src, sg->blob_bytes, sg->blob);
}

static void lct__accept_done(lct__task *task) {
  lct__accept_task *t = (lct__accept_task *)task;
  lct__accept_job *job = t->job;
  if (--job->pending > 0)
    return;
  lct__server *srv = job->srv;
  lct__entry *e = job->e;
  int rc = 0;
  char why[160] = "";
  for (size_t i = 0; i < job->n_tasks && rc == 0; i++) {
    if ((rc = job->tasks[i].rc) != 0) {
      /* What the decoder finds in a client's blob is a corrupt blob, whatever part it fails. */
      if (rc != LCT_ENOMEM && rc != LCT_ECUDA)
        rc = LCT_ECORRUPT;
      snprintf(why, sizeof why, "blob %zu (raw bytes from %" PRIu64 ") fails validation: %s", i,
               e->segments[i].raw_offset, lct_err_name(job->tasks[i].rc));
    }
  }
  uint32_t crc = rc == 0 ? lct__entry_crc(e) : 0;
  if (rc == 0 && crc != job->decl.checksum) {
    rc = LCT_ECHECKSUM;
    snprintf(why, sizeof why, "the blobs hold data whose CRC-32C is %08" PRIx32 "; the put declares %08" PRIx32, crc,
             job->decl.checksum);
  }
  if (rc == 0 && lct_dtype_symbol_bits(e->dtype) != 0) {
    const uint8_t *b = job->tasks[0].src; /* validated: its codebook parses */
    uint32_t cb_bytes;
    memcpy(&cb_bytes, b + 20, sizeof cb_bytes);
    rc = lct_codebook_parse(e->dtype, b + LCT_HEADER_BYTES, cb_bytes, &e->codebook);
    e->has_codebook = rc == 0;
    e->codebook_stale = 1;
    e->codebook_id = ++srv->codebook_ids;
  }
  if (rc != 0) {
    lct__entry_unref(e);
    job->cb(job->arg, rc, why, NULL);
    free(job);
    return;
  }
  e->checksum = crc;
  lct__entry_publish(srv, e);
  srv->stats.encode_ns += uv_hrtime() - job->started;
  job->cb(job->arg, 0, NULL, e);
  free(job);
}

int lct__accept_start(lct__server *srv, const uint8_t *key, size_t key_len, const lct_put_decl *decl,
                      const lct__blob_ref *refs, size_t n, lct__put_cb cb, void *arg) {
  lct__entry *e;
  int rc = lct__entry_declared(srv->pool, key, key_len, decl, n, &e);
  if (rc != 0)
    return rc;
  lct__accept_job *job = calloc(1, sizeof *job + n * sizeof(lct__accept_task));
  if (job == NULL) {
    lct__entry_unref(e);
    return LCT_ENOMEM;
  }
  for (size_t i = 0; i < n; i++) {
    lct__segment *sg = &e->segments[i];
    sg->raw_offset = refs[i].raw_offset;
    sg->raw_bytes = refs[i].raw_bytes;
    sg->blob_bytes = refs[i].len;
    if ((rc = lct__pool_alloc(srv->pool, refs[i].len, &sg->blob)) != 0) {
      lct__entry_unref(e);
      free(job);
      return rc;
    }
    sg->alloc_bytes = refs[i].len;
    job->tasks[i] = (lct__accept_task){.job = job, .seg = i, .src = refs[i].bytes};
  }
  job->srv = srv;
  job->decl = *decl;
  job->e = e;
  job->cb = cb;
  job->arg = arg;
  job->n_tasks = job->pending = n;
  job->started = uv_hrtime();
  for (size_t i = 0; i < n; i++) {
    job->tasks[i].task.run = lct__accept_run;
    job->tasks[i].task.done = lct__accept_done;
  }
  /* Prepared first: the last task's done ends (frees) the job when it runs here. */
  int here = lct__work_here(srv, decl->raw_bytes);
  for (size_t i = 0; i < n; i++)
    lct__work_submit(srv, &job->tasks[i].task, here);
  return 0;
}

/* ---- sending stored blobs ----------------------------------------------- */

typedef struct lct__read_task {
  lct__task task;
  struct lct__read_job *job;
  size_t seg;
  uint8_t *dst;
  int rc;
} lct__read_task;

typedef struct lct__read_job {
  lct__entry *e;
  const lct__backend *be;
  size_t pending;
  lct__get_cb cb;
  void *arg;
  size_t n_tasks;
  lct__read_task tasks[];
} lct__read_job;

static void lct__read_run(lct__task *task, int worker) {
  (void)worker;
  lct__read_task *t = (lct__read_task *)task;
  const lct__segment *sg = &t->job->e->segments[t->seg];
  t->rc = t->job->be->ops->read(t->job->be->ctx, sg->blob, sg->blob_bytes, t->dst);
}

static void lct__read_done(lct__task *task) {
  lct__read_task *t = (lct__read_task *)task;
  lct__read_job *job = t->job;
  if (--job->pending > 0)
    return;
  int rc = 0;
  for (size_t i = 0; i < job->n_tasks && rc == 0; i++)
    rc = job->tasks[i].rc;
  lct__entry_unref(job->e);
  job->cb(job->arg, rc);
  free(job);
}

int lct__blobs_read_start(lct__server *srv, lct__entry *e, size_t first, size_t n, uint8_t *dst, lct__get_cb cb,
                          void *arg) {
  lct__read_job *job = calloc(1, sizeof *job + n * sizeof(lct__read_task));
  if (job == NULL)
    return LCT_ENOMEM;
  job->e = e;
  lct__entry_ref(e);
  job->be = lct__pool_backend(srv->pool);
  job->cb = cb;
  job->arg = arg;
  job->n_tasks = job->pending = n;
  uint64_t bytes = 0;
  for (size_t i = 0; i < n; i++) {
    job->tasks[i] = (lct__read_task){.job = job, .seg = first + i, .dst = dst};
    dst += e->segments[first + i].blob_bytes;
    bytes += e->segments[first + i].blob_bytes;
    job->tasks[i].task.run = lct__read_run;
    job->tasks[i].task.done = lct__read_done;
  }
  /* Prepared first: the last task's done ends (frees) the job when it runs here. */
  int here = lct__work_here(srv, bytes);
  for (size_t i = 0; i < n; i++)
    lct__work_submit(srv, &job->tasks[i].task, here);
  return 0;
}
