/* workers.c — lctd's codec workers: threads it owns, each with an index that keys its backend state, reporting back on the loop. */
#include "workers.h"

#include <stdlib.h>

#include "lct_error.h"
#include "log.h"

/* A FIFO of tasks, linked through lct__task.next. */
typedef struct lct__task_fifo {
  lct__task *head, *tail;
} lct__task_fifo;

typedef struct lct__worker {
  struct lct__workers *pool;
  uv_thread_t thread;
  int index;
} lct__worker;

struct lct__workers {
  uv_loop_t *loop;
  uv_async_t finished; /* a worker's word to the loop that tasks are done */
  uv_mutex_t lock;
  uv_cond_t wake;
  lct__task_fifo queued; /* under lock */
  lct__task_fifo done;   /* under lock */
  int idle;              /* under lock: workers waiting for a task */
  int stopping;          /* under lock */
  size_t in_flight;      /* loop thread: submitted, done not yet called */
  int n;
  lct__worker workers[];
};

static void lct__fifo_push(lct__task_fifo *q, lct__task *t) {
  t->next = NULL;
  if (q->tail != NULL)
    q->tail->next = t;
  else
    q->head = t;
  q->tail = t;
}

static lct__task *lct__fifo_pop(lct__task_fifo *q) {
  lct__task *t = q->head;
  if (t != NULL && (q->head = t->next) == NULL)
    q->tail = NULL;
  return t;
}

static void lct__worker_main(void *arg) {
  lct__worker *self = arg;
  lct__workers *w = self->pool;
  uv_mutex_lock(&w->lock);
  for (;;) {
    lct__task *t = lct__fifo_pop(&w->queued);
    if (t == NULL) {
      if (w->stopping)
        break;
      w->idle++;
      uv_cond_wait(&w->wake, &w->lock);
      w->idle--;
      continue;
    }
    uv_mutex_unlock(&w->lock);
    t->run(t, self->index);
    uv_mutex_lock(&w->lock);
    lct__fifo_push(&w->done, t);
    uv_mutex_unlock(&w->lock);
    uv_async_send(&w->finished);
    uv_mutex_lock(&w->lock);
  }
  uv_mutex_unlock(&w->lock);
}

/* On the loop: the done callbacks of what the workers finished, in order. */
static void lct__workers_finished(uv_async_t *a) {
  lct__workers *w = a->data;
  uv_mutex_lock(&w->lock);
  lct__task_fifo done = w->done;
  w->done = (lct__task_fifo){0};
  uv_mutex_unlock(&w->lock);
  for (lct__task *t; (t = lct__fifo_pop(&done)) != NULL;) {
    if (--w->in_flight == 0)
      uv_unref((uv_handle_t *)&w->finished);
    t->done(t);
  }
}

int lct__workers_start(uv_loop_t *loop, int n, lct__workers **out) {
  lct__workers *w = calloc(1, sizeof *w + (size_t)n * sizeof(lct__worker));
  if (w == NULL)
    return LCT_ENOMEM;
  w->loop = loop;
  w->n = n;
  if (uv_mutex_init(&w->lock) != 0) {
    free(w);
    return LCT_ENOMEM;
  }
  if (uv_cond_init(&w->wake) != 0 || uv_async_init(loop, &w->finished, lct__workers_finished) != 0) {
    uv_mutex_destroy(&w->lock);
    free(w);
    return LCT_ENOMEM;
  }
  w->finished.data = w;
  uv_unref((uv_handle_t *)&w->finished);
  for (int i = 0; i < n; i++) {
    w->workers[i] = (lct__worker){.pool = w, .index = i};
    if (uv_thread_create(&w->workers[i].thread, lct__worker_main, &w->workers[i]) != 0) {
      lct__log_error("cannot start codec worker %d of %d", i + 1, n);
      w->n = i;
      lct__workers_stop(w);
      return LCT_ENOMEM;
    }
  }
  *out = w;
  return 0;
}

void lct__workers_submit(lct__workers *w, lct__task *t) {
  if (w->in_flight++ == 0)
    uv_ref((uv_handle_t *)&w->finished);
  uv_mutex_lock(&w->lock);
  lct__fifo_push(&w->queued, t);
  if (w->idle > 0)
    uv_cond_signal(&w->wake);
  uv_mutex_unlock(&w->lock);
}

int lct__workers_count(const lct__workers *w) { return w->n; }

static void lct__workers_closed(uv_handle_t *h) { free(h->data); }

void lct__workers_stop(lct__workers *w) {
  /* Done callbacks may submit more (a put's next round): run until none is in flight. */
  while (w->in_flight > 0)
    uv_run(w->loop, UV_RUN_ONCE);
  uv_mutex_lock(&w->lock);
  w->stopping = 1;
  uv_cond_broadcast(&w->wake);
  uv_mutex_unlock(&w->lock);
  for (int i = 0; i < w->n; i++)
    uv_thread_join(&w->workers[i].thread);
  uv_cond_destroy(&w->wake);
  uv_mutex_destroy(&w->lock);
  uv_close((uv_handle_t *)&w->finished, lct__workers_closed);
  uv_run(w->loop, UV_RUN_NOWAIT);
}
