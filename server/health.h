/* health.h — lctd's health: a device its backend reports lost makes lctd refuse every request, answer /healthz 503 and exit for a restart. */
#ifndef LCT_SERVER_HEALTH_H
#define LCT_SERVER_HEALTH_H

#include "server.h"

/* The exit status after a lost device: not 2 (a configuration error, which
 * the unit does not restart), so that systemd's Restart=on-failure restarts
 * lctd from its last snapshot. */
#define LCT__EXIT_DEVICE_LOST 3
/* How long lctd keeps answering (every request with LCT_ECUDA) after the
 * loss before it exits: what is in flight gets its reply, a client its reason. */
#define LCT__HEALTH_GRACE_MS 1000

typedef struct lct__health lct__health;

/* Watches srv's backend once per loop iteration (one atomic load). On a
 * loss: one error line, STATUS= for systemd, periodic saves stopped, and
 * _exit(LCT__EXIT_DEVICE_LOST) after LCT__HEALTH_GRACE_MS, with no final
 * save: a GPU that cannot be trusted must not overwrite the last snapshot.
 * Loop thread. */
int lct__health_start(lct__server *srv, lct__health **out);
/* NULL while healthy; else why lctd is not, from then on. Loop thread. */
const char *lct__health_fault(lct__health *h);
/* Closes its handles (at stop); the loop frees h. */
void lct__health_stop(lct__health *h);

#endif
