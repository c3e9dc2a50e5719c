/* device_batch.c — device puts and gets (PUT_DEVICE, GET_DEVICE and their _MANY forms): the tensors of one request coded in one pass of the GPU codec. */
#include "device_batch.h"

#include <stdlib.h>
#include <string.h>

#include "codebook.h"
#include "lct_checksum.h"
#include "log.h"
#include "workers.h"

/* What a round of a batch does on a worker: a put's rounds take the items
 * whose step (codebook.h) is theirs, a get's one round takes every item. */
enum { LCT__BATCH_HIST, LCT__BATCH_ENCODE, LCT__BATCH_DECODE };

typedef struct lct__batch_job {
  lct__task task;
  lct__server *srv;
  lct__batch_item *items;
  size_t n_items;
  lct__batch_seg *segs;   /* every segment of every item, item by item */
  size_t n_segs;
  size_t *first;          /* per item: its first segment; first[n_items] == n_segs */
  lct__entry **built;     /* put: the entries being coded, installed at the end */
  lct__codebook_use *use; /* put: per item */
  uint8_t *step;          /* put: per item, its lct__put_step */
  uint64_t *hists;        /* HIST round: 2^s counters per item that takes one */
  uint64_t **hist_of;     /* HIST round: per item, its counters (NULL: none) */
  lct__batch_seg *run;    /* the round's segments: those of its items (segs itself for a get) */
  size_t *run_from;       /* put: the index in segs of each of them */
  size_t n_run;
  int round;
  int rc;                 /* worker: the round's error: the codec's, a segment's or a codebook build's */
  size_t failed;          /* worker: the item at fault, n_items for the round as a whole */
  const char *why;        /* worker: what failed */
  lct__batch_cb cb;
  void *arg;
  uint64_t started;
} lct__batch_job;

static void lct__batch_free(lct__batch_job *job) {
  if (job->built != NULL)
    for (size_t i = 0; i < job->n_items; i++)
      if (job->built[i] != NULL)
        lct__entry_unref(job->built[i]);
  if (job->run != job->segs)
    free(job->run);
  free(job->run_from);
  free(job->built);
  free(job->use);
  free(job->step);
  free(job->hists);
  free(job->hist_of);
  free(job->segs);
  free(job->first);
  free(job);
}

static lct__batch_job *lct__batch_new(lct__server *srv, lct__batch_item *items, size_t n, lct__batch_cb cb,
                                      void *arg) {
  lct__batch_job *job = calloc(1, sizeof *job);
  if (job == NULL)
    return NULL;
  job->srv = srv;
  job->items = items;
  job->n_items = n;
  job->cb = cb;
  job->arg = arg;
  job->failed = n;
  job->first = calloc(n + 1, sizeof *job->first);
  if (job->first == NULL) {
    lct__batch_free(job);
    return NULL;
  }
  job->started = uv_hrtime();
  return job;
}

/* The item a segment of the round belongs to. */
static size_t lct__run_item(const lct__batch_job *job, size_t k) {
  size_t s = job->run_from != NULL ? job->run_from[k] : k, lo = 0, hi = job->n_items;
  while (hi - lo > 1) { /* the last item whose first segment is at or before s */
    size_t mid = (lo + hi) / 2;
    if (job->first[mid] <= s)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

/* The round's codec pass (rc), then its segments' errors. */
static void lct__batch_codec_end(lct__batch_job *job, int rc, const char *why) {
  job->why = why;
  if ((job->rc = rc) != 0)
    return;
  for (size_t k = 0; k < job->n_run; k++) {
    if (job->run[k].rc != 0) {
      job->rc = job->run[k].rc;
      job->failed = lct__run_item(job, k);
      return;
    }
  }
}

/* Builds the codebooks of the items that took a histogram. */
static void lct__batch_build(lct__batch_job *job) {
  for (size_t i = 0; i < job->n_items && job->rc == 0; i++) {
    if (job->hist_of[i] != NULL && (job->rc = lct__codebook_build(job->built[i], job->hist_of[i])) != 0) {
      job->failed = i;
      job->why = "codebook build failed";
    }
  }
}

static void lct__batch_run(lct__task *task, int worker) {
  lct__batch_job *job = (lct__batch_job *)task;
  const lct__backend *be = lct__pool_backend(job->srv->pool);
  switch (job->round) {
  case LCT__BATCH_DECODE:
    lct__batch_codec_end(job, be->ops->decode_batch(be->ctx, worker, job->run, job->n_run),
                         "stored tensor failed to decode");
    return;
  case LCT__BATCH_HIST:
    lct__batch_codec_end(job, be->ops->hist_batch(be->ctx, worker, job->run, job->n_run), "codec failed");
    lct__batch_build(job);
    return;
  default:
    lct__batch_codec_end(job, be->ops->encode_batch(be->ctx, worker, job->run, job->n_run), "codec failed");
  }
}

static void lct__batch_done(lct__task *task);

static void lct__batch_end(lct__batch_job *job, int rc, size_t failed, const char *why) {
  job->cb(job->arg, rc, failed, why);
  lct__batch_free(job);
}

/* Gathers the segments of the items at step into the round's run (with the
 * item's codebook and, for a histogram, its zeroed counters) and queues it. */
static void lct__batch_queue_put(lct__batch_job *job, int round, lct__put_step step) {
  size_t n_run = 0, takers = 0, hist_len = 0;
  for (size_t i = 0; i < job->n_items; i++) {
    if (job->step[i] != step)
      continue;
    n_run += job->first[i + 1] - job->first[i];
    takers++;
    size_t len = (size_t)1 << lct_dtype_symbol_bits(job->built[i]->dtype);
    hist_len = len > hist_len ? len : hist_len;
  }
  free(job->run);
  free(job->run_from);
  free(job->hists);
  job->hists = NULL;
  job->run = malloc((n_run ? n_run : 1) * sizeof *job->run);
  job->run_from = malloc((n_run ? n_run : 1) * sizeof *job->run_from);
  if (round == LCT__BATCH_HIST)
    job->hists = calloc(takers * hist_len, sizeof *job->hists);
  if (job->run == NULL || job->run_from == NULL || (round == LCT__BATCH_HIST && job->hists == NULL)) {
    lct__batch_end(job, LCT_ENOMEM, job->n_items, "out of memory");
    return;
  }
  size_t k = 0, at = 0;
  for (size_t i = 0; i < job->n_items; i++) {
    const lct__entry *e = job->built[i];
    job->hist_of[i] = NULL;
    if (job->step[i] != step)
      continue;
    if (round == LCT__BATCH_HIST)
      job->hist_of[i] = job->hists + hist_len * at++;
    for (size_t s = job->first[i]; s < job->first[i + 1]; s++, k++) {
      job->run[k] = job->segs[s];
      job->run[k].cb = e->has_codebook ? &e->codebook : NULL;
      job->run[k].codebook_id = e->codebook_id;
      job->run[k].hist = job->hist_of[i];
      job->run_from[k] = s;
    }
  }
  job->n_run = n_run;
  job->round = round;
  job->task.run = lct__batch_run;
  job->task.done = lct__batch_done;
  lct__workers_submit(job->srv->workers, &job->task);
}

/* Each item's CRC-32C, from its segments', into its entry; LCT_ECHECKSUM
 * (*failed: the item) when one differs from a checksum its put declared. */
static int lct__batch_checksums(lct__batch_job *job, size_t *failed) {
  for (size_t i = 0; i < job->n_items; i++) {
    lct__entry *e = job->built[i];
    for (size_t k = 0; k < e->n_segments; k++) {
      const lct__batch_seg *bs = &job->segs[job->first[i] + k];
      e->checksum = k == 0 ? bs->crc : lct_crc32c_combine(e->checksum, bs->crc, e->segments[k].raw_bytes);
    }
    if (job->items[i].decl.has_checksum && e->checksum != job->items[i].decl.checksum) {
      *failed = i;
      return LCT_ECHECKSUM;
    }
  }
  return 0;
}

static void lct__batch_install(lct__batch_job *job) {
  lct__server *srv = job->srv;
  for (size_t i = 0; i < job->n_items; i++) {
    lct__entry *e = job->built[i];
    for (size_t k = 0; k < e->n_segments; k++)
      e->segments[k].blob_bytes = job->segs[job->first[i] + k].blob_bytes;
    lct__entry_publish(srv, e); /* takes the job's reference */
    job->built[i] = NULL;
    job->items[i].entry = e;
  }
  srv->stats.encode_ns += uv_hrtime() - job->started;
  srv->stats.device_puts += job->n_items;
}

/* After an encode round: its results into segs, and each item's next step. */
static int lct__batch_encoded(lct__batch_job *job) {
  for (size_t k = 0; k < job->n_run; k++) {
    lct__batch_seg *sg = &job->segs[job->run_from[k]];
    sg->blob_bytes = job->run[k].blob_bytes;
    sg->code_bits = job->run[k].code_bits;
    sg->crc = job->run[k].crc;
  }
  int again = 0;
  for (size_t i = 0; i < job->n_items; i++) {
    if (job->step[i] != LCT__PUT_ENCODE)
      continue;
    uint64_t bits = 0;
    for (size_t s = job->first[i]; s < job->first[i + 1]; s++)
      bits += job->segs[s].code_bits;
    job->step[i] = (uint8_t)lct__codebook_after_encode(job->built[i], &job->use[i], bits);
    again |= job->step[i] == LCT__PUT_HISTOGRAM;
  }
  return again;
}

static void lct__batch_done(lct__task *task) {
  lct__batch_job *job = (lct__batch_job *)task;
  lct__server *srv = job->srv;
  size_t failed = job->n_items;
  int rc = job->rc;
  if (rc != 0) {
    if (job->round == LCT__BATCH_DECODE)
      lct__log_error("a device batch of %zu tensors failed to decode: %s", job->n_items, lct_strerror(rc));
    lct__batch_end(job, rc, job->failed, job->why);
    return;
  }
  switch (job->round) {
  case LCT__BATCH_DECODE:
    for (size_t s = 0; s < job->n_segs; s++)
      srv->stats.decoded_bytes += job->segs[s].n * lct_dtype_size(job->segs[s].dtype);
    srv->stats.decode_ns += uv_hrtime() - job->started;
    srv->stats.device_gets += job->n_items;
    lct__batch_end(job, 0, job->n_items, NULL);
    return;
  case LCT__BATCH_HIST:
    for (size_t i = 0; i < job->n_items; i++) {
      if (job->step[i] != LCT__PUT_HISTOGRAM)
        continue;
      lct__codebook_adopt(srv, job->built[i], &job->use[i]);
      job->step[i] = LCT__PUT_ENCODE;
    }
    lct__batch_queue_put(job, LCT__BATCH_ENCODE, LCT__PUT_ENCODE);
    return;
  case LCT__BATCH_ENCODE:
    if (lct__batch_encoded(job)) {
      lct__batch_queue_put(job, LCT__BATCH_HIST, LCT__PUT_HISTOGRAM);
      return;
    }
    if ((rc = lct__batch_checksums(job, &failed)) != 0) {
      lct__batch_end(job, rc, failed, "bytes do not match the declared checksum");
      return;
    }
    lct__batch_install(job);
    lct__batch_end(job, 0, job->n_items, NULL);
    return;
  }
}

int lct__batch_put_start(lct__server *srv, lct__batch_item *items, size_t n, lct__batch_cb cb, void *arg,
                         size_t *failed) {
  *failed = n;
  lct__batch_job *job = lct__batch_new(srv, items, n, cb, arg);
  if (job == NULL || (job->built = calloc(n, sizeof *job->built)) == NULL ||
      (job->use = calloc(n, sizeof *job->use)) == NULL || (job->step = calloc(n, sizeof *job->step)) == NULL ||
      (job->hist_of = calloc(n, sizeof *job->hist_of)) == NULL) {
    if (job != NULL)
      lct__batch_free(job);
    return LCT_ENOMEM;
  }
  /* One segment per segment_size: the GPU spreads each over its SMs. */
  int rc = 0, first_puts = 0;
  size_t n_segs = 0;
  for (size_t i = 0; i < n && rc == 0; i++) {
    if ((rc = lct__entry_reserve(srv, items[i].key, items[i].key_len, &items[i].decl, srv->cfg.segment_size,
                                 &job->built[i])) != 0) {
      *failed = i;
      break;
    }
    n_segs += job->built[i]->n_segments;
    job->step[i] = (uint8_t)lct__codebook_start(srv, job->built[i], &job->use[i]);
    first_puts |= job->step[i] == LCT__PUT_HISTOGRAM;
  }
  if (rc == 0 && (job->segs = calloc(n_segs, sizeof *job->segs)) == NULL)
    rc = LCT_ENOMEM;
  if (rc != 0) {
    lct__batch_free(job);
    return rc;
  }
  job->n_segs = n_segs;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    const lct__entry *e = job->built[i];
    job->first[i] = k;
    for (size_t s = 0; s < e->n_segments; s++, k++) {
      const lct__segment *sg = &e->segments[s];
      lct__batch_seg *bs = &job->segs[k];
      bs->dtype = e->dtype;
      bs->n = sg->raw_bytes / lct_dtype_size(e->dtype);
      bs->src = items[i].device + sg->raw_offset;
      bs->dst = sg->blob;
      bs->cap = sg->alloc_bytes;
    }
  }
  job->first[n] = k;
  if (first_puts)
    lct__batch_queue_put(job, LCT__BATCH_HIST, LCT__PUT_HISTOGRAM);
  else
    lct__batch_queue_put(job, LCT__BATCH_ENCODE, LCT__PUT_ENCODE);
  return 0;
}

int lct__batch_get_start(lct__server *srv, lct__batch_item *items, size_t n, lct__batch_cb cb, void *arg) {
  size_t n_segs = 0;
  for (size_t i = 0; i < n; i++)
    if (items[i].entry->raw_bytes > 0)
      n_segs += items[i].entry->n_segments;
  lct__batch_job *job = lct__batch_new(srv, items, n, cb, arg);
  if (job == NULL || (job->segs = calloc(n_segs ? n_segs : 1, sizeof *job->segs)) == NULL) {
    if (job != NULL)
      lct__batch_free(job);
    return LCT_ENOMEM;
  }
  job->n_segs = n_segs;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    const lct__entry *e = items[i].entry;
    job->first[i] = k;
    if (e->raw_bytes == 0)
      continue; /* nothing to write */
    for (size_t s = 0; s < e->n_segments; s++, k++) {
      const lct__segment *sg = &e->segments[s];
      lct__batch_seg *bs = &job->segs[k];
      bs->dtype = e->dtype;
      bs->n = sg->raw_bytes / lct_dtype_size(e->dtype);
      bs->src = sg->blob;
      bs->src_bytes = sg->blob_bytes;
      bs->dst = items[i].device + sg->raw_offset;
    }
  }
  job->first[n] = k;
  job->run = job->segs;
  job->n_run = n_segs;
  job->round = LCT__BATCH_DECODE;
  job->task.run = lct__batch_run;
  job->task.done = lct__batch_done;
  lct__workers_submit(srv->workers, &job->task);
  return 0;
}
