/* workers.h — lctd's codec workers: threads it owns, each with an index that keys its backend state, reporting back on the loop. */
#ifndef LCT_SERVER_WORKERS_H
#define LCT_SERVER_WORKERS_H

#include <uv.h>

/* A unit of codec work: run on a worker thread, then done on the loop thread.
 * The task's memory is the submitter's until done is called. */
typedef struct lct__task lct__task;
/* The worker index of a task run on the loop thread itself (work.h's lct__work_submit). */
#define LCT__LOOP_WORKER (-1)
struct lct__task {
  void (*run)(lct__task *t, int worker); /* worker is 0..count-1, one thread's own, or LCT__LOOP_WORKER */
  void (*done)(lct__task *t);
  lct__task *next;
};

typedef struct lct__workers lct__workers;

/* Starts n threads whose results come back on loop. While tasks are in
 * flight they keep the loop alive, as libuv's own work requests do. */
int lct__workers_start(uv_loop_t *loop, int n, lct__workers **out);
/* Queues t; tasks start in the order submitted. Loop thread. */
void lct__workers_submit(lct__workers *w, lct__task *t);
int lct__workers_count(const lct__workers *w);
/* Runs what is queued to its end (its done callbacks included), joins the
 * threads and frees w. Loop thread, after uv_run has returned. */
void lct__workers_stop(lct__workers *w);

#endif
