/* lct_client_jobs.c — liblct's background jobs (device batches, host puts and gets): a queue and a thread per client; a job may wait for any client's; small host jobs go out together. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lct_checksum.h"
#include "lct_client_internal.h"

enum { LCT__JOB_DEVICE, LCT__JOB_PUT, LCT__JOB_GET };

/* A job's completion is under its own lock: a job outlives its client, and a
 * job of one client may wait for one of another. Lock order: a client's
 * jobs.mu, then a job's mu. */
struct lct_job {
  pthread_mutex_t mu;
  pthread_cond_t cv; /* done */
  int kind;
  int put;
  const lct_device_tensor *t;
  size_t n;
  void *event;
  /* host jobs: lct_put's or lct_get's arguments */
  const char *key;
  lct_dtype dtype;
  const uint64_t *shape;
  int ndim;
  const void *data;
  void *buf;
  size_t bytes;              /* put: the data's; get: the buffer's */
  lct_tensor_info *info;
  lct_job *after; /* referenced until the thread has looked at it */
  lct_job *next;  /* in the client's queue, under its jobs.mu */
  int done;
  int refs; /* the caller's, and one per job waiting for this one */
  int rc;
  size_t failed;
  char err[sizeof ((lct_client *)0)->err];
};

static void lct__job_ref(lct_job *j) {
  pthread_mutex_lock(&j->mu);
  j->refs++;
  pthread_mutex_unlock(&j->mu);
}

static void lct__job_unref(lct_job *j) {
  pthread_mutex_lock(&j->mu);
  int left = --j->refs;
  pthread_mutex_unlock(&j->mu);
  if (left == 0) {
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j);
  }
}

static void lct__job_finish(lct_job *j, int rc, size_t failed, const char *err) {
  pthread_mutex_lock(&j->mu);
  j->rc = rc;
  j->failed = failed;
  snprintf(j->err, sizeof j->err, "%s", err);
  j->done = 1;
  pthread_cond_broadcast(&j->cv);
  pthread_mutex_unlock(&j->mu);
}

/* Waits until job `after` has finished or the client closes (lct__jobs_stop
 * wakes this wait through after's condition); whether after failed. */
static int lct__job_await(lct_job *after, atomic_int *closing) {
  pthread_mutex_lock(&after->mu);
  while (!after->done && !atomic_load(closing))
    pthread_cond_wait(&after->cv, &after->mu);
  int failed = after->done && after->rc != 0;
  pthread_mutex_unlock(&after->mu);
  return failed;
}

/* A host job one frame carries, which may go out with others. */
static int lct__job_small(const lct_client *c, const lct_job *j) {
  return j->kind != LCT__JOB_DEVICE && j->after == NULL && j->bytes <= c->frame;
}

/* Small host jobs in flight together, by window slot. */
typedef struct lct__batch {
  lct_client *c;
  lct_job *slots[LCT__WINDOW_REQUESTS * LCT__CONNECTIONS_MAX];
} lct__batch;

/* A reply ends its job; its own failure fails only that job. */
static int lct__batch_take(void *arg, size_t slot, lct__reply *r) {
  lct__batch *b = arg;
  lct_client *c = b->c;
  lct_job *j = b->slots[slot];
  b->slots[slot] = NULL;
  int rc = lct__reply_status(c, r);
  if (rc == 0 && r->hdr->meta == NULL)
    rc = lct__fail(c, LCT_EPROTO, "reply without metadata");
  lct_tensor_info got;
  if (rc == 0)
    lct__info_of(r->hdr->meta, &got);
  if (rc == 0 && j->kind == LCT__JOB_GET) {
    if (got.raw_bytes > j->bytes)
      rc = lct__fail(c, LCT_EBUFSIZE, "tensor is %" PRIu64 " bytes; buffer holds %zu", got.raw_bytes, j->bytes);
    else if (r->payload_len != got.raw_bytes || !r->hdr->has_offset || r->hdr->offset != 0)
      rc = lct__fail(c, LCT_EPROTO, "reply does not match the get");
    else if (lct_crc32c(0, r->payload, r->payload_len) != got.checksum)
      rc = lct__fail(c, LCT_ECHECKSUM, "received bytes do not match the stored checksum");
    else if (r->payload_len > 0)
      memcpy(j->buf, r->payload, r->payload_len);
  }
  if ((rc == 0 || rc == LCT_EBUFSIZE) && j->info != NULL)
    *j->info = got;
  lct__job_finish(j, rc, 0, rc != 0 ? c->err : "");
  return 0;
}

/* Sends the request of a small host job into the window. */
static int lct__batch_post(lct_client *c, lct__window *w, lct__batch *b, lct_job *j) {
  Lctpb__Request rq = LCTPB__REQUEST__INIT;
  lct_put_decl d;
  Lctpb__TensorMeta m;
  int rc = lct__key_of(c, j->key, &rq);
  if (rc != 0)
    return rc;
  if (j->kind == LCT__JOB_PUT) {
    if ((rc = lct__put_decl(c, j->dtype, j->shape, j->ndim, j->bytes, &d, &m)) != 0)
      return rc;
    if (j->data == NULL && j->bytes > 0)
      return lct__fail(c, LCT_EINVAL, "no data");
    m.has_checksum = 1;
    m.checksum = lct_crc32c(0, j->data, j->bytes);
    rq.meta = &m;
    rq.op = LCTPB__OP__OP_PUT;
  } else {
    if (j->buf == NULL && j->bytes > 0)
      return lct__fail(c, LCT_EINVAL, "no buffer");
    rq.op = LCTPB__OP__OP_GET;
    rq.has_offset = rq.has_length = 1;
    rq.length = j->bytes;
  }
  size_t slot;
  rc = lct__window_post(c, w, &rq, j->kind == LCT__JOB_PUT ? j->data : NULL, j->kind == LCT__JOB_PUT ? j->bytes : 0,
                        j->bytes, lct__batch_take, b, &slot);
  if (rc == 0)
    b->slots[slot] = j;
  return rc;
}

/* Takes every reply still in the window; a job whose request left it without
 * one (a lost connection, or a wait that failed, empties the window) fails
 * with that loss. */
static void lct__batch_end(lct_client *c, lct__window *w, lct__batch *b) {
  lct__window_drain(c, w, lct__batch_take, b);
  for (size_t i = 0; i < sizeof b->slots / sizeof *b->slots; i++)
    if (b->slots[i] != NULL && w->ids[i] == 0) {
      lct__job_finish(b->slots[i], w->lost != 0 ? w->lost : LCT_ECONN, 0, c->err);
      b->slots[i] = NULL;
    }
}

/* Whether a job on j's key is in flight: lctd may finish requests in flight together in any order, so a
 * job waits for the earlier ones on its key. */
static int lct__batch_has_key(const lct__batch *b, const lct_job *j) {
  if (j->key == NULL)
    return 0; /* refused when posted */
  for (size_t i = 0; i < sizeof b->slots / sizeof *b->slots; i++)
    if (b->slots[i] != NULL && strcmp(b->slots[i]->key, j->key) == 0)
      return 1;
  return 0;
}

/* Runs head j and the small host jobs queued behind it with requests in
 * flight together. Called and returns with q->mu held. */
static void lct__jobs_batch(lct_client *c, lct_job *j) {
  lct__jobs *q = &c->jobs;
  lct__batch b = {.c = c};
  lct__window w;
  lct__window_init(c, &w);
  int pipelined = lct__pipeline_ready(c);
  for (;;) {
    pthread_mutex_unlock(&q->mu);
    /* A connection not yet met (or broken since) goes through lct__call first: its
     * authentication and restart checks, on a lane the window must no longer use. */
    if (!pipelined || lct__batch_has_key(&b, j))
      lct__batch_end(c, &w, &b);
    int rc = pipelined ? lct__batch_post(c, &w, &b, j)
                       : j->kind == LCT__JOB_PUT ? lct_put(c, j->key, j->dtype, j->shape, j->ndim, j->data, j->bytes, j->info)
                                                 : lct_get(c, j->key, j->buf, j->bytes, j->info);
    if (!pipelined || rc != 0)
      lct__job_finish(j, rc, 0, rc != 0 ? c->err : "");
    if (pipelined && rc != 0) /* a lost connection took the window's requests with it */
      lct__batch_end(c, &w, &b);
    pipelined = lct__pipeline_ready(c);
    pthread_mutex_lock(&q->mu);
    j = q->head;
    if (j == NULL || atomic_load(&q->closing) || !lct__job_small(c, j))
      break;
    q->head = j->next;
    if (q->head == NULL)
      q->tail = NULL;
  }
  pthread_mutex_unlock(&q->mu);
  lct__batch_end(c, &w, &b);
  pthread_mutex_lock(&q->mu);
}

static void *lct__jobs_run(void *arg) {
  lct_client *c = arg;
  lct__jobs *q = &c->jobs;
  pthread_mutex_lock(&q->mu);
  for (;;) {
    while (q->head == NULL && !atomic_load(&q->closing))
      pthread_cond_wait(&q->cv, &q->mu);
    lct_job *j = q->head;
    if (j == NULL)
      break; /* closing, nothing left */
    q->head = j->next;
    if (q->head == NULL)
      q->tail = NULL;
    int after_failed = 0;
    if (j->after != NULL) {
      q->waiting_on = j->after;
      pthread_mutex_unlock(&q->mu);
      after_failed = lct__job_await(j->after, &q->closing);
      pthread_mutex_lock(&q->mu);
      q->waiting_on = NULL;
      lct__job_unref(j->after);
      j->after = NULL;
    }
    /* A closing client does not wait for another client's job, nor run its queue. */
    const char *cancel = atomic_load(&q->closing) ? "canceled: its client was closed"
                         : after_failed           ? "canceled: the job it waited for failed"
                                                  : NULL;
    if (cancel != NULL) {
      lct__job_finish(j, LCT_ECANCELED, j->n, cancel);
      continue;
    }
    if (lct__job_small(c, j)) {
      lct__jobs_batch(c, j); /* unlocks and locks q->mu */
      continue;
    }
    pthread_mutex_unlock(&q->mu);
    size_t failed = 0;
    int rc = j->kind == LCT__JOB_PUT   ? lct_put(c, j->key, j->dtype, j->shape, j->ndim, j->data, j->bytes, j->info)
             : j->kind == LCT__JOB_GET ? lct_get(c, j->key, j->buf, j->bytes, j->info)
                                       : lct__device_many(c, j->put, j->t, j->n, j->event, &failed);
    lct__job_finish(j, rc, failed, rc != 0 ? c->err : "");
    pthread_mutex_lock(&q->mu);
  }
  pthread_mutex_unlock(&q->mu);
  return NULL;
}

/* Queues j (its kind's fields set; freed on failure). Its errors leave
 * lct_last_error alone: the job thread may be writing it. */
static int lct__enqueue(lct_client *c, lct_job *j, lct_job *after, lct_job **job) {
  j->after = after;
  j->refs = 1;
  if (pthread_mutex_init(&j->mu, NULL) != 0) {
    free(j);
    return LCT_ENOMEM;
  }
  if (pthread_cond_init(&j->cv, NULL) != 0) {
    pthread_mutex_destroy(&j->mu);
    free(j);
    return LCT_ENOMEM;
  }
  lct__jobs *q = &c->jobs;
  pthread_mutex_lock(&q->mu);
  if (!q->started) {
    if (pthread_create(&q->thread, NULL, lct__jobs_run, c) != 0) {
      pthread_mutex_unlock(&q->mu);
      lct__job_unref(j);
      return LCT_ENOMEM;
    }
    q->started = 1;
  }
  if (after != NULL)
    lct__job_ref(after);
  if (q->tail != NULL)
    q->tail->next = j;
  else
    q->head = j;
  q->tail = j;
  pthread_cond_broadcast(&q->cv);
  pthread_mutex_unlock(&q->mu);
  *job = j;
  return 0;
}

int lct_submit_put(lct_client *c, const char *key, lct_dtype dtype, const uint64_t *shape, int ndim,
                   const void *data, size_t bytes, lct_tensor_info *info, lct_job *after, lct_job **job) {
  if (job == NULL)
    return LCT_EINVAL;
  *job = NULL;
  lct_job *j = calloc(1, sizeof *j);
  if (j == NULL)
    return LCT_ENOMEM;
  *j = (lct_job){.kind = LCT__JOB_PUT, .key = key, .dtype = dtype, .shape = shape, .ndim = ndim, .data = data,
                 .bytes = bytes, .info = info};
  return lct__enqueue(c, j, after, job);
}

int lct_submit_get(lct_client *c, const char *key, void *buf, size_t cap, lct_tensor_info *info, lct_job *after,
                   lct_job **job) {
  if (job == NULL)
    return LCT_EINVAL;
  *job = NULL;
  lct_job *j = calloc(1, sizeof *j);
  if (j == NULL)
    return LCT_ENOMEM;
  *j = (lct_job){.kind = LCT__JOB_GET, .key = key, .buf = buf, .bytes = cap, .info = info};
  return lct__enqueue(c, j, after, job);
}

/* Its errors leave lct_last_error alone: the job thread may be writing it. */
static int lct__submit(lct_client *c, int put, const lct_device_tensor *t, size_t n, void *event, lct_job *after,
                       lct_job **job) {
  if (job == NULL || (t == NULL && n > 0))
    return LCT_EINVAL;
  *job = NULL;
  if (!lct_device_path(c))
    return LCT_ENODEV; /* no device buffers: the caller takes the host path */
  lct_job *j = calloc(1, sizeof *j);
  if (j == NULL)
    return LCT_ENOMEM;
  j->kind = LCT__JOB_DEVICE;
  j->put = put;
  j->t = t;
  j->n = n;
  j->event = event;
  return lct__enqueue(c, j, after, job);
}


int lct_submit_put_device_many(lct_client *c, const lct_device_tensor *t, size_t n, void *event, lct_job *after,
                               lct_job **job) {
  return lct__submit(c, 1, t, n, event, after, job);
}

int lct_submit_get_device_many(lct_client *c, const lct_device_tensor *t, size_t n, void *event, lct_job *after,
                               lct_job **job) {
  return lct__submit(c, 0, t, n, event, after, job);
}

int lct_job_wait(lct_job *job, size_t *failed) {
  if (job == NULL)
    return LCT_EINVAL;
  pthread_mutex_lock(&job->mu);
  while (!job->done)
    pthread_cond_wait(&job->cv, &job->mu);
  int rc = job->rc;
  if (failed != NULL)
    *failed = job->failed;
  pthread_mutex_unlock(&job->mu);
  return rc;
}

const char *lct_job_error(const lct_job *job) {
  if (job == NULL)
    return "";
  lct_job *j = (lct_job *)job; /* its lock, not its state, changes */
  pthread_mutex_lock(&j->mu);
  const char *err = j->done ? j->err : "";
  pthread_mutex_unlock(&j->mu);
  return err;
}

void lct_job_free(lct_job *job) {
  if (job == NULL)
    return;
  lct_job_wait(job, NULL);
  lct__job_unref(job);
}

int lct__jobs_init(lct_client *c) {
  lct__jobs *q = &c->jobs;
  if (pthread_mutex_init(&q->mu, NULL) != 0)
    return LCT_ENOMEM;
  if (pthread_cond_init(&q->cv, NULL) != 0) {
    pthread_mutex_destroy(&q->mu);
    return LCT_ENOMEM;
  }
  q->head = q->tail = q->waiting_on = NULL;
  q->started = 0;
  atomic_init(&q->closing, 0);
  return 0;
}

void lct__jobs_stop(lct_client *c) {
  lct__jobs *q = &c->jobs;
  pthread_mutex_lock(&q->mu);
  atomic_store(&q->closing, 1);
  pthread_cond_broadcast(&q->cv);
  if (q->waiting_on != NULL) {
    /* The thread waits under that job's lock: woken there, it sees closing. */
    pthread_mutex_lock(&q->waiting_on->mu);
    pthread_cond_broadcast(&q->waiting_on->cv);
    pthread_mutex_unlock(&q->waiting_on->mu);
  }
  int started = q->started;
  pthread_mutex_unlock(&q->mu);
  if (started)
    pthread_join(q->thread, NULL);
  pthread_cond_destroy(&q->cv);
  pthread_mutex_destroy(&q->mu);
}
