/* server.h — the daemon's state, owned by the loop thread, and the put source shared by its modules. */
#ifndef LCT_SERVER_SERVER_H
#define LCT_SERVER_SERVER_H

#include <stdint.h>
#include <uv.h>

#include "access.h"
#include "auth.h"
#include "config.h"
#include "lct_decl.h"
#include "lct_wire.h"
#include "pool.h"
#include "stats.h"
#include "store.h"

typedef struct lct__staging lct__staging;     /* staging.h */
typedef struct lct__transport lct__transport; /* transport.h */
typedef struct lct__workers lct__workers;     /* workers.h */
typedef struct lct__saves lct__saves;         /* persist.h */
typedef struct lct__autosave lct__autosave;   /* persist.h */
typedef struct lct__inflight lct__inflight;   /* inflight.h */
typedef struct lct__conns lct__conns;         /* conns.h */
typedef struct lct__health lct__health;       /* health.h */

typedef struct lct__server {
  uv_loop_t *loop;
  lct__config cfg;
  lct__pool *pool;
  lct__store *store;
  lct__staging *staging;
  lct__transport *transport;
  lct__inflight *inflight;  /* requests in flight and their bytes, against the limits */
  lct__stats stats;
  lct__auth auth;              /* token of auth_token_file: every key */
  lct__access *access;         /* tenants of access_file; NULL: none */
  lct__conns *conns;           /* what each connection authenticated as */
  lct__auth_budget auth_budget; /* what checking wrong answers to challenges may still cost */
  const char *backend_name;
  uint8_t boot_id[LCT_BOOT_ID_BYTES]; /* this host's (lct_wire_boot_id); zero if unreadable */
  int threads;            /* codec workers */
  lct__workers *workers;  /* the codec workers (the backend keeps state for each) */
  lct__saves *saves;      /* saves to persist_dir under way and queued */
  lct__autosave *autosave; /* the periodic saves' timer; NULL without persist_dir */
  lct__health *health;    /* whether the backend's device still works */
  uint64_t codebook_ids;  /* the last lct__entry.codebook_id given */
  uint64_t instance;      /* this run's id in every reply: a client tells a restarted lctd by it */
} lct__server;

/* Bytes of a chunked put as they arrived: a payload inside a received
 * nanomsg message, which the put keeps instead of copying it. */
typedef struct lct__piece {
  void *msg;            /* the nanomsg buffer (freed with the put) */
  const uint8_t *bytes; /* the payload within it */
  uint64_t offset;      /* where it goes in the tensor */
  size_t len;
  uint64_t raw_len;     /* the tensor's bytes it holds: len, or what its blobs decode to */
} lct__piece;

/* The raw bytes a put encodes, in host memory: one contiguous buffer, or
 * pieces in offset order that cover [0, raw_bytes) exactly. */
typedef struct lct__put_src {
  const uint8_t *data;
  const lct__piece *pieces;
  size_t n_pieces;
} lct__put_src;

#endif
