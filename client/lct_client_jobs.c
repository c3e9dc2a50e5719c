/* lct_client_jobs.c — liblct's background device jobs: a queue and a thread per client; a job may wait for any client's. */
#include <stdio.h>
#include <stdlib.h>

#include "lct_client_internal.h"

/* A job's completion is under its own lock: a job outlives its client, and a
 * job of one client may wait for one of another. Lock order: a client's
 * jobs.mu, then a job's mu. */
struct lct_job {
  pthread_mutex_t mu;
  pthread_cond_t cv; /* done */
  int put;
  const lct_device_tensor *t;
  size_t n;
  void *event;
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
    pthread_mutex_unlock(&q->mu);
    size_t failed = 0;
    int rc = lct__device_many(c, j->put, j->t, j->n, j->event, &failed);
    lct__job_finish(j, rc, failed, rc != 0 ? c->err : "");
    pthread_mutex_lock(&q->mu);
  }
  pthread_mutex_unlock(&q->mu);
  return NULL;
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
  if (pthread_mutex_init(&j->mu, NULL) != 0) {
    free(j);
    return LCT_ENOMEM;
  }
  if (pthread_cond_init(&j->cv, NULL) != 0) {
    pthread_mutex_destroy(&j->mu);
    free(j);
    return LCT_ENOMEM;
  }
  j->put = put;
  j->t = t;
  j->n = n;
  j->event = event;
  j->after = after;
  j->refs = 1;
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
