/* server.h — the daemon's state, owned by the loop thread, and the put declaration shared by its modules. */
#ifndef LCT_SERVER_SERVER_H
#define LCT_SERVER_SERVER_H

#include <stdint.h>
#include <uv.h>

#include "auth.h"
#include "config.h"
#include "lct_wire.h"
#include "pool.h"
#include "stats.h"
#include "store.h"

typedef struct lct__staging lct__staging;
typedef struct lct__transport lct__transport;

typedef struct lct__snapshot lct__snapshot; /* persist.h */

typedef struct lct__server {
  uv_loop_t *loop;
  lct__config cfg;
  lct__pool *pool;
  lct__store *store;
  lct__staging *staging;
  lct__transport *transport;
  lct__stats stats;
  lct__auth auth;              /* token of auth_token_file (tcp endpoints) */
  const char *backend_name;
  uint8_t boot_id[LCT_BOOT_ID_BYTES]; /* this host's (lct_wire_boot_id); zero if unreadable */
  int threads; /* codec worker threads (the libuv threadpool size) */
  uint64_t codebook_ids; /* the last lct__entry.codebook_id given */
  struct lct__save_job *saving;       /* the save being written (handlers.c), or NULL */
  struct lct__request **save_waiting; /* SAVE requests that came during it: the next save's */
  size_t n_save_waiting;
} lct__server;

/* A tensor a client wants to store, validated: dtype known, at most
 * LCT_MAX_DIMS dims, raw_bytes == product(shape) * dtype size. */
typedef struct lct__put_decl {
  int dtype;
  int ndim;
  uint64_t shape[LCT_MAX_DIMS];
  uint64_t n_elems;
  uint64_t raw_bytes;
  int has_checksum;
  uint32_t checksum;
} lct__put_decl;

/* Bytes of a chunked put as they arrived: a payload inside a received
 * nanomsg message, which the put keeps instead of copying it. */
typedef struct lct__piece {
  void *msg;            /* the nanomsg buffer (freed with the put) */
  const uint8_t *bytes; /* the payload within it */
  uint64_t offset;      /* where it goes in the tensor */
  size_t len;
} lct__piece;

/* The raw bytes a put encodes, in host memory: one contiguous buffer, or
 * pieces in offset order that cover [0, raw_bytes) exactly. */
typedef struct lct__put_src {
  const uint8_t *data;
  const lct__piece *pieces;
  size_t n_pieces;
} lct__put_src;

/* Builds a declaration from wire metadata: LCT_EDTYPE, LCT_E2BIG (product
 * overflows) or LCT_ESIZE (raw_bytes disagrees with dtype and shape). */
int lct__put_decl_parse(const Lctpb__TensorMeta *meta, lct__put_decl *out);

#endif
