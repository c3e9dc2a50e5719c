/* inflight.c — the bounds on work in flight: requests and their bytes, per connection and over all; reading pauses at the total. */
#include "inflight.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "transport.h"

#define LCT__LOADS_MIN 64 /* buckets to start with; doubled as connections with requests grow past them */

struct lct__conn_load {
  struct lct__conn_load *next; /* hash chain */
  uint64_t conn;
  uint64_t requests;
  uint64_t bytes;
};

struct lct__inflight {
  lct__server *srv;
  lct__conn_load **buckets;
  size_t n_buckets; /* a power of two */
  size_t n_loads;
  uint64_t requests, bytes; /* over all connections */
  int paused;               /* the transport is not reading */
};

static size_t lct__bucket(uint64_t conn, size_t n_buckets) {
  return (size_t)((conn * UINT64_C(0x9E3779B97F4A7C15)) >> 32) & (n_buckets - 1);
}

int lct__inflight_create(lct__server *srv, lct__inflight **out) {
  lct__inflight *in = calloc(1, sizeof *in);
  if (in == NULL || (in->buckets = calloc(LCT__LOADS_MIN, sizeof *in->buckets)) == NULL) {
    free(in);
    return LCT_ENOMEM;
  }
  in->srv = srv;
  in->n_buckets = LCT__LOADS_MIN;
  *out = in;
  return 0;
}

void lct__inflight_destroy(lct__inflight *in) {
  if (in == NULL)
    return;
  for (size_t b = 0; b < in->n_buckets; b++)
    for (lct__conn_load *l = in->buckets[b], *next; l != NULL; l = next) {
      next = l->next;
      free(l);
    }
  free(in->buckets);
  free(in);
}

/* Doubles the buckets once the records outnumber them; stays as it is when
 * out of memory (chains grow longer, nothing fails). */
static void lct__inflight_grow_table(lct__inflight *in) {
  if (in->n_loads <= in->n_buckets)
    return;
  size_t n = in->n_buckets * 2;
  lct__conn_load **buckets = calloc(n, sizeof *buckets);
  if (buckets == NULL)
    return;
  for (size_t b = 0; b < in->n_buckets; b++)
    for (lct__conn_load *l = in->buckets[b], *next; l != NULL; l = next) {
      next = l->next;
      size_t k = lct__bucket(l->conn, n);
      l->next = buckets[k];
      buckets[k] = l;
    }
  free(in->buckets);
  in->buckets = buckets;
  in->n_buckets = n;
}

static lct__conn_load **lct__slot(lct__inflight *in, uint64_t conn) {
  lct__conn_load **p = &in->buckets[lct__bucket(conn, in->n_buckets)];
  while (*p != NULL && (*p)->conn != conn)
    p = &(*p)->next;
  return p;
}

/* Reading stops while the next message might not fit: at max_requests, or
 * with less than the largest message's bytes left of request_memory. Never
 * with nothing in flight, so that a small request_memory serves one request
 * at a time rather than none. */
static void lct__inflight_update(lct__inflight *in) {
  lct__server *srv = in->srv;
  const lct__config *cfg = &srv->cfg;
  uint64_t room = cfg->request_memory > in->bytes ? cfg->request_memory - in->bytes : 0;
  int full = in->requests > 0 && (in->requests >= (uint64_t)cfg->max_requests ||
                                  room < (uint64_t)lct_wire_msg_max(cfg->frame_size));
  srv->stats.inflight_bytes = in->bytes;
  if (full == in->paused)
    return;
  in->paused = full;
  srv->stats.reads_paused += (uint64_t)full;
  if (srv->transport != NULL)
    lct__transport_pause(srv->transport, full);
}

/* Whether bytes more fit the bounds, for connection l (NULL: none yet) with
 * conn_others requests in flight besides this one, and all_others over all;
 * why names the bound when not. */
static int lct__bytes_fit(const lct__inflight *in, const lct__conn_load *l, uint64_t conn_others,
                          uint64_t all_others, uint64_t bytes, char *why, size_t cap) {
  const lct__config *cfg = &in->srv->cfg;
  uint64_t held = l != NULL ? l->bytes : 0;
  if (conn_others > 0 && (held > cfg->client_request_memory || bytes > cfg->client_request_memory - held)) {
    snprintf(why, cap, "server busy: this connection has %" PRIu64 " bytes in flight; %" PRIu64
             " more would pass client_request_memory %" PRIu64, held, bytes, cfg->client_request_memory);
    return 0;
  }
  if (all_others > 0 && (in->bytes > cfg->request_memory || bytes > cfg->request_memory - in->bytes)) {
    snprintf(why, cap, "server busy: %" PRIu64 " bytes in flight; %" PRIu64 " more would pass request_memory %" PRIu64,
             in->bytes, bytes, cfg->request_memory);
    return 0;
  }
  return 1;
}

int lct__inflight_admit(lct__inflight *in, uint64_t conn, uint64_t bytes, lct__conn_load **load, char *why,
                        size_t cap) {
  const lct__config *cfg = &in->srv->cfg;
  lct__conn_load **slot = lct__slot(in, conn), *l = *slot;
  uint64_t mine = l != NULL ? l->requests : 0;
  if (mine >= (uint64_t)cfg->max_client_requests) {
    snprintf(why, cap, "server busy: this connection has %" PRIu64 " requests in flight, max_client_requests %d",
             mine, cfg->max_client_requests);
    return LCT_EBUSY;
  }
  if (in->requests >= (uint64_t)cfg->max_requests) {
    snprintf(why, cap, "server busy: %" PRIu64 " requests in flight, max_requests %d", in->requests,
             cfg->max_requests);
    return LCT_EBUSY;
  }
  if (!lct__bytes_fit(in, l, mine, in->requests, bytes, why, cap))
    return LCT_EBUSY;
  if (l == NULL) {
    if ((l = calloc(1, sizeof *l)) == NULL) {
      snprintf(why, cap, "out of memory counting a connection's requests");
      return LCT_ENOMEM;
    }
    l->conn = conn;
    *slot = l;
    in->n_loads++;
    lct__inflight_grow_table(in);
  }
  l->requests++;
  l->bytes += bytes;
  in->requests++;
  in->bytes += bytes;
  lct__inflight_update(in);
  *load = l;
  return 0;
}

int lct__inflight_grow(lct__inflight *in, lct__conn_load *l, uint64_t bytes, char *why, size_t cap) {
  if (!lct__bytes_fit(in, l, l->requests - 1, in->requests - 1, bytes, why, cap))
    return LCT_EBUSY;
  l->bytes += bytes;
  in->bytes += bytes;
  lct__inflight_update(in);
  return 0;
}

void lct__inflight_end(lct__inflight *in, lct__conn_load *l, uint64_t bytes) {
  l->bytes -= bytes;
  in->bytes -= bytes;
  in->requests--;
  if (--l->requests == 0) {
    lct__conn_load **slot = lct__slot(in, l->conn);
    *slot = l->next;
    in->n_loads--;
    free(l);
  }
  lct__inflight_update(in);
}
