/* device_batch.c — device puts and gets (PUT_DEVICE, GET_DEVICE and their _MANY forms): the tensors of one request coded in one pass of the GPU codec. */
#include "device_batch.h"

#include <stdlib.h>
#include <string.h>

#include "codebook.h"
#include "log.h"
#include "workers.h"

/* What a round of a batch does on a worker: the HIST round counts the
 * symbols of first puts (codebook.h's HISTOGRAM step); the ENCODE round codes
 * every item, and counts those of ENCODE_COUNT items in the same pass. The
 * worker builds the codebooks into the (not yet installed) entries; the loop
 * thread only adopts them. */
enum { LCT__BATCH_HIST, LCT__BATCH_ENCODE, LCT__BATCH_DECODE };

/* A put item's codebook step, and its counters when it takes a histogram. */
typedef struct lct__batch_hist {
  uint8_t step;     /* lct__put_step */
  uint64_t *counts; /* 2^s counters in the job's hists, when it takes one */
} lct__batch_hist;

typedef struct lct__batch_job {
  lct__task task;
  lct__server *srv;
  lct__batch_item *items;
  size_t n_items;
  lct__batch_seg *segs;   /* every segment of every item, item by item */
  size_t n_segs;
  size_t *first;          /* per item: its first segment; first[n_items] == n_segs */
  lct__entry **built;     /* put: the entries being encoded, installed at the end */
  lct__batch_hist *hist;  /* put: per item, its codebook step and histogram */
  uint64_t *hists;        /* put: the counters of the items that take a histogram */
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
  free(job->built);
  free(job->hist);
  free(job->hists);
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

static void lct__batch_done(lct__task *task);

/* The first segment error of the batch, as (code, item). */
static int lct__batch_seg_error(const lct__batch_job *job, size_t *failed) {
  for (size_t i = 0; i < job->n_items; i++)
    for (size_t s = job->first[i]; s < job->first[i + 1]; s++)
      if (job->segs[s].rc != 0) {
        *failed = i;
        return job->segs[s].rc;
      }
  return 0;
}

/* Builds the codebooks of the items at step that took a histogram. */
static void lct__batch_build(lct__batch_job *job, lct__put_step step) {
  for (size_t i = 0; i < job->n_items && job->rc == 0; i++)
    if (job->hist[i].step == step && (job->rc = lct__codebook_build(job->built[i], job->hist[i].counts)) != 0) {
      job->failed = i;
      job->why = "codebook build failed";
    }
}

/* The round's codec pass (rc), then its segments' errors. */
static void lct__batch_codec_end(lct__batch_job *job, int rc, const char *why) {
  job->why = why;
  if ((job->rc = rc) == 0)
    job->rc = lct__batch_seg_error(job, &job->failed);
}

static void lct__batch_run(lct__task *task, int worker) {
  lct__batch_job *job = (lct__batch_job *)task;
  const lct__backend *be = lct__pool_backend(job->srv->pool);
  switch (job->round) {
  case LCT__BATCH_DECODE:
    lct__batch_codec_end(job, be->ops->decode_batch(be->ctx, worker, job->segs, job->n_segs),
                         "stored tensor failed to decode");
    return;
  case LCT__BATCH_HIST:
    job->why = "codec failed";
    if ((job->rc = be->ops->hist_batch(be->ctx, worker, job->segs, job->n_segs)) == 0)
      lct__batch_build(job, LCT__PUT_HISTOGRAM);
    return;
  default: /* the counted histograms in the same pass; their codebooks replace the ones just used */
    lct__batch_codec_end(job, be->ops->encode_batch(be->ctx, worker, job->segs, job->n_segs), "codec failed");
    lct__batch_build(job, LCT__PUT_ENCODE_COUNT); /* nothing when a segment failed */
  }
}

static void lct__batch_queue(lct__batch_job *job, int round) {
  job->round = round;
  /* The histograms this round takes: first puts' in HIST, counted ones with the encode. */
  lct__put_step step = round == LCT__BATCH_HIST ? LCT__PUT_HISTOGRAM : LCT__PUT_ENCODE_COUNT;
  for (size_t i = 0; job->hist != NULL && i < job->n_items; i++) {
    for (size_t s = job->first[i]; s < job->first[i + 1]; s++)
      job->segs[s].hist = job->hist[i].step == step ? job->hist[i].counts : NULL;
  }
  job->task.run = lct__batch_run;
  job->task.done = lct__batch_done;
  lct__workers_submit(job->srv->workers, &job->task);
}

static void lct__batch_end(lct__batch_job *job, int rc, size_t failed, const char *why) {
  job->cb(job->arg, rc, failed, why);
  lct__batch_free(job);
}

/* Points the segments of item i at its entry's codebook (after a build). */
static void lct__batch_codebook(lct__batch_job *job, size_t i) {
  const lct__entry *e = job->built[i];
  for (size_t s = job->first[i]; s < job->first[i + 1]; s++) {
    job->segs[s].cb = e->has_codebook ? &e->codebook : NULL;
    job->segs[s].codebook_id = e->codebook_id;
  }
}

/* Each item's CRC-32C, from its segments', into its entry; LCT_ECHECKSUM
 * (*failed: the item) when one differs from a checksum its put declared. */
static int lct__batch_checksums(lct__batch_job *job, size_t *failed) {
  for (size_t i = 0; i < job->n_items; i++) {
    lct__entry *e = job->built[i];
    for (size_t k = 0; k < e->n_segments; k++)
      e->segments[k].crc = job->segs[job->first[i] + k].crc;
    e->checksum = lct__entry_crc(e);
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

/* After the encode: a counted item adopts the codebook built from its
 * symbols, for its key's next put; the others are checked for drift. */
static void lct__batch_codebooks_next(lct__batch_job *job) {
  for (size_t i = 0; i < job->n_items; i++) {
    lct__entry *e = job->built[i];
    if (job->hist[i].step == LCT__PUT_ENCODE_COUNT) {
      lct__codebook_adopt(job->srv, e, LCT__PUT_ENCODE_COUNT);
      continue;
    }
    uint64_t bits = 0;
    for (size_t s = job->first[i]; s < job->first[i + 1]; s++)
      bits += job->segs[s].code_bits;
    lct__codebook_coded(e, (lct__put_step)job->hist[i].step, bits);
  }
}

static void lct__batch_done(lct__task *task) {
  lct__batch_job *job = (lct__batch_job *)task;
  lct__server *srv = job->srv;
  size_t failed = job->n_items;
  int rc = job->rc;
  if (rc != 0) {
    if (job->round == LCT__BATCH_DECODE && job->failed < job->n_items) {
      const lct__entry *e = job->items[job->failed].entry;
      lct__log_error("device get of '%.*s' version %llu (item %zu of %zu) failed to decode: %s",
                     (int)(e->key_len > 64 ? 64 : e->key_len), (const char *)e->key, (unsigned long long)e->version,
                     job->failed, job->n_items, lct_err_name(rc));
      rc = lct__stored_decode_error(rc);
    } else if (job->round == LCT__BATCH_DECODE) {
      lct__log_error("a device batch of %zu tensors failed to decode: %s", job->n_items, lct_strerror(rc));
    }
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
      if (job->hist[i].step != LCT__PUT_HISTOGRAM)
        continue;
      lct__codebook_adopt(srv, job->built[i], LCT__PUT_HISTOGRAM);
      lct__batch_codebook(job, i);
      job->hist[i].step = LCT__PUT_ENCODE;
    }
    lct__batch_queue(job, LCT__BATCH_ENCODE);
    return;
  case LCT__BATCH_ENCODE:
    if ((rc = lct__batch_checksums(job, &failed)) != 0) {
      lct__batch_end(job, rc, failed, "bytes do not match the declared checksum");
      return;
    }
    lct__batch_codebooks_next(job);
    lct__batch_install(job);
    lct__batch_end(job, 0, job->n_items, NULL);
    return;
  }
}

int lct__batch_put_start(lct__server *srv, lct__batch_item *items, size_t n, lct__batch_cb cb, void *arg,
                         size_t *failed) {
  *failed = n;
  size_t n_segs = 0;
  lct__batch_job *job = lct__batch_new(srv, items, n, cb, arg);
  if (job == NULL || (job->built = calloc(n, sizeof *job->built)) == NULL ||
      (job->hist = calloc(n, sizeof *job->hist)) == NULL) {
    if (job != NULL)
      lct__batch_free(job);
    return LCT_ENOMEM;
  }
  /* One segment per segment_size: the GPU spreads each over its SMs. */
  int rc = 0, first_puts = 0;
  size_t takers = 0, hist_len = 0; /* items that take a histogram; counters each: the widest alphabet's */
  for (size_t i = 0; i < n && rc == 0; i++) {
    if ((rc = lct__entry_reserve(srv, items[i].key, items[i].key_len, &items[i].decl, srv->cfg.segment_size,
                                 &job->built[i])) != 0) {
      *failed = i;
      break;
    }
    n_segs += job->built[i]->n_segments;
    lct__put_step step = lct__codebook_start(srv, job->built[i]);
    job->hist[i].step = (uint8_t)step;
    if (step == LCT__PUT_ENCODE)
      continue;
    first_puts |= step == LCT__PUT_HISTOGRAM;
    size_t len = (size_t)1 << lct_dtype_symbol_bits(items[i].decl.dtype);
    takers++;
    if (len > hist_len)
      hist_len = len;
  }
  if (rc == 0 && (job->segs = calloc(n_segs, sizeof *job->segs)) == NULL)
    rc = LCT_ENOMEM;
  if (rc == 0 && takers > 0 && (job->hists = calloc(takers * hist_len, sizeof *job->hists)) == NULL)
    rc = LCT_ENOMEM;
  for (size_t i = 0, at = 0; rc == 0 && i < n; i++)
    if (job->hist[i].step != LCT__PUT_ENCODE)
      job->hist[i].counts = job->hists + hist_len * at++;
  if (rc != 0) {
    lct__batch_free(job);
    return rc;
  }
  job->n_segs = n_segs;
  lct__batch_seg *segs = job->segs;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    const lct__entry *e = job->built[i];
    job->first[i] = k;
    for (size_t s = 0; s < e->n_segments; s++, k++) {
      const lct__segment *sg = &e->segments[s];
      lct__batch_seg *bs = &segs[k];
      bs->dtype = e->dtype;
      bs->n = sg->raw_bytes / lct_dtype_size(e->dtype);
      bs->src = items[i].device + sg->raw_offset;
      bs->dst = sg->blob;
      bs->cap = sg->alloc_bytes;
    }
  }
  job->first[n] = k;
  for (size_t i = 0; i < n; i++)
    lct__batch_codebook(job, i);
  lct__batch_queue(job, first_puts ? LCT__BATCH_HIST : LCT__BATCH_ENCODE);
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
  lct__batch_queue(job, LCT__BATCH_DECODE);
  return 0;
}
