/* health.c — lctd's health: a device its backend reports lost makes lctd refuse every request, answer /healthz 503 and exit for a restart. */
#include "health.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "log.h"
#include "notify.h"
#include "persist.h"

struct lct__health {
  lct__server *srv;
  uv_check_t check;
  uv_timer_t exit;
  int open_handles;
  char why[256]; /* empty while healthy */
};

static void lct__health_exit(uv_timer_t *t) {
  lct__log_info("exiting with status %d for a restart from the last snapshot", LCT__EXIT_DEVICE_LOST);
  /* Not exit(): the workers may be inside the driver, and nothing of the
   * CUDA context is worth tearing down. */
  _exit(LCT__EXIT_DEVICE_LOST);
}

const char *lct__health_fault(lct__health *h) {
  if (h->why[0] != '\0')
    return h->why;
  const lct__backend *be = lct__pool_backend(h->srv->pool);
  if (be->ops->fault == NULL || !be->ops->fault(be->ctx, h->why, sizeof h->why)) {
    h->why[0] = '\0';
    return NULL;
  }
  lct__log_error("unhealthy: %s; refusing every request, exiting with status %d without a final save (the "
                 "last snapshot stands)",
                 h->why, LCT__EXIT_DEVICE_LOST);
  char status[320];
  snprintf(status, sizeof status, "STATUS=unhealthy: %s", h->why);
  lct__notify(status);
  lct__autosave_close(h->srv); /* no periodic save from a device that cannot be trusted either */
  uv_timer_start(&h->exit, lct__health_exit, LCT__HEALTH_GRACE_MS, 0);
  return h->why;
}

static void lct__health_check(uv_check_t *c) { lct__health_fault(c->data); }

int lct__health_start(lct__server *srv, lct__health **out) {
  lct__health *h = calloc(1, sizeof *h);
  if (h == NULL)
    return LCT_ENOMEM;
  h->srv = srv;
  uv_check_init(srv->loop, &h->check);
  uv_timer_init(srv->loop, &h->exit);
  h->check.data = h->exit.data = h;
  h->open_handles = 2;
  uv_check_start(&h->check, lct__health_check);
  uv_unref((uv_handle_t *)&h->check); /* watching keeps no loop alive */
  *out = h;
  return 0;
}

static void lct__health_closed(uv_handle_t *handle) {
  lct__health *h = handle->data;
  if (--h->open_handles == 0)
    free(h);
}

void lct__health_stop(lct__health *h) {
  uv_close((uv_handle_t *)&h->check, lct__health_closed);
  uv_close((uv_handle_t *)&h->exit, lct__health_closed);
}
