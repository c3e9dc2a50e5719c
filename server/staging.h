/* staging.h — chunked puts between begin and commit: host buffers, budgets and idle expiry. */
#ifndef LCT_SERVER_STAGING_H
#define LCT_SERVER_STAGING_H

#include <stdint.h>
#include <uv.h>

#include "server.h"

typedef struct lct__pending {
  struct lct__pending *next; /* hash chain */
  uint64_t id;        /* random: known only to the connection that began it */
  uint64_t conn;      /* that connection (lct__conn_id) */
  uint8_t *key;
  size_t key_len;
  lct_put_decl decl;
  lct__piece *pieces; /* the chunks received, in order (a shared put's: as they came) */
  size_t n_pieces, cap_pieces;
  uint64_t received;  /* raw bytes [0, received) have arrived, in order (a shared put's: how many) */
  int encoded;        /* its payloads are blobs (blob.h), laid out as seg says */
  int shared;         /* chunks in any order, from any connection that may use the key */
  uint64_t seg;       /* an encoded put's segment raw bytes; 0 until a blob says */
  uint64_t framing;   /* bytes of the kept messages beyond their payloads (prefixes, headers) */
  uint64_t last_active; /* uv_now() of the last chunk */
} lct__pending;

/* Staging with the server's budgets (staging-memory, max-pending-puts,
 * put-timeout); a timer on loop drops puts idle longer than the timeout and
 * counts them in stats.puts_expired. */
int lct__staging_create(lct__server *srv, lct__staging **out);
/* Closes the expiry timer, so the loop can end. */
void lct__staging_stop(lct__staging *st);
/* Frees every pending put and the staging; after the loop has ended. */
void lct__staging_destroy(lct__staging *st);

/* Opens a put for connection conn under a random 64-bit id: LCT_ENOMEM when
 * the staging budget (decl.raw_bytes is reserved for it) or the count of
 * pending puts (stats.pending_puts) would be exceeded, LCT_EIO when the
 * kernel gives no random bytes. */
int lct__staging_begin(lct__staging *st, uint64_t conn, const uint8_t *key, size_t key_len,
                       const lct_put_decl *decl, lct__pending **out);
/* The open put id of connection conn; NULL for an id that is not open or
 * that another connection began (unless the put is shared). */
lct__pending *lct__staging_find(lct__staging *st, uint64_t id, uint64_t conn);
/* The piece already received whose raw bytes meet [offset, offset +
 * raw_len), or NULL: a binary search over p's pieces, kept in offset order. */
const lct__piece *lct__staging_overlap(const lct__pending *p, uint64_t offset, uint64_t raw_len);
/* Adds the len bytes of a chunk that sit in the nanomsg message msg of
 * msg_bytes and hold the tensor's raw_len raw bytes from offset (raw_len is
 * len but for an encoded put's blobs), in offset order among p's pieces (a
 * shared put's chunks come in any order); the put takes msg over on success (0).
 * The message's bytes beyond those raw bytes count against the staging
 * budget too: LCT_ENOMEM when they do not fit (or out of memory). */
int lct__staging_add(lct__staging *st, lct__pending *p, void *msg, size_t msg_bytes, const uint8_t *bytes,
                     size_t len, uint64_t offset, uint64_t raw_len);
/* Unlinks a put so no chunk can reach it; its bytes stay counted until
 * lct__staging_release. */
void lct__staging_take(lct__staging *st, lct__pending *p);
/* Frees a taken put and returns its bytes to the budget. */
void lct__staging_release(lct__staging *st, lct__pending *p);
/* Records activity so the put does not expire. */
void lct__staging_touch(lct__staging *st, lct__pending *p);

#endif
