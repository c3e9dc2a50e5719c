/* request.h — a request from receipt to reply: parse the frame, dispatch through the op table, answer exactly once. */
#ifndef LCT_SERVER_REQUEST_H
#define LCT_SERVER_REQUEST_H

#include <stddef.h>
#include <stdint.h>

#include "server.h"

/* One request from receipt to reply; owns the nanomsg buffers. */
typedef struct lct__request {
  lct__server *srv;
  int sock;
  uint64_t conn;        /* the connection it came over (lct__conn_id) */
  void *control;        /* routing header, handed back with the reply */
  void *msg;            /* the received message (NULL once an op keeps it) */
  uint32_t op;
  lct_wire_frame frame; /* views into msg */
  Lctpb__Request *hdr;
  const lct__tenant *tenant; /* the sender's tenant, whose keys only it may use; NULL: every key */
  lct__access *access;  /* the access file tenant is from, held while the request runs */
  uint64_t quota_held;  /* bytes of its puts counted against tenant's quota until it ends */
  void *reply_msg;      /* a reply being filled by codec workers (GET) */
  size_t reply_len;
  struct lct__conn_load *load; /* its connection's requests in flight (inflight.h); NULL until admitted */
  uint64_t held;        /* bytes it counts there: its message, and a reply it builds */
  void *op_state;       /* what the op holds until the request ends, */
  void (*op_release)(struct lct__request *rq); /* and how it lets go of it */
  uint64_t received;    /* uv_hrtime at receipt */
} lct__request;

/* The transport's callback (lct__on_message) with the lct__server as arg:
 * every message gets exactly one reply, an error reply for garbage. */
void lct__handle_message(void *srv, int sock, uint64_t conn, void *msg, size_t len, void *control);

/* ---- replies: each ends the request ---- */

/* Packs rp, stamped with srv's instance id, into a new nanomsg buffer with
 * room for plen payload bytes. */
int lct__reply_alloc(const lct__server *srv, Lctpb__Reply *rp, size_t plen, void **msg, size_t *len,
                     uint8_t **payload);
/* Sends a packed reply (status 0 or a positive wire code), counted. */
void lct__reply_send(lct__request *rq, uint32_t status, void *msg, size_t len);
void lct__reply(lct__request *rq, Lctpb__Reply *rp, const void *payload, size_t plen);
void lct__reply_error(lct__request *rq, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* An error reply; item >= 0 names the item of a _MANY request at fault. */
void lct__reply_status(lct__request *rq, int err, long item, const char *text);

/* Counts bytes more against the in-flight bounds while the request lasts (a
 * reply it builds); answers LCT_EBUSY itself and returns 0 when they do not
 * fit. */
int lct__request_hold(lct__request *rq, uint64_t bytes);

/* ---- what several ops check and answer alike ---- */

/* The entry's metadata as the wire carries it (shape borrowed from e). */
void lct__meta_of(const lct__entry *e, Lctpb__TensorMeta *m);
/* A reply of e's metadata. */
void lct__reply_meta(lct__request *rq, const lct__entry *e);
/* Whether the request has a key its sender may use; answers LCT_EINVAL or
 * LCT_EACCES if not. */
int lct__need_key(lct__request *rq);
/* Whether rq's sender may use key: 0, or LCT_EACCES with why naming it (as
 * what: "key", "prefix") and the tenant's prefix. */
int lct__key_allowed(const lct__request *rq, const char *what, const uint8_t *key, size_t len, char *why,
                     size_t cap);
/* A put of key, shaped by d and coded in segments of seg_bytes, against the
 * quota of rq's tenant at its worst-case coded size: 0 (counted while rq
 * lasts when hold is 1), or LCT_ENOSPC with why naming the quota (LCT_E2BIG
 * when the worst case overflows). The version it replaces gives its stored
 * bytes back. */
int lct__quota_check(lct__request *rq, const uint8_t *key, size_t len, const lct_put_decl *d, uint64_t seg_bytes,
                     int hold, char *why, size_t cap);
/* A put's key and declaration against max_key_length and max_tensor_size:
 * 0, or an error code with its reason in why. */
int lct__put_check(const lct__config *cfg, const ProtobufCBinaryData *key, const Lctpb__TensorMeta *meta,
                   lct_put_decl *d, char *why, size_t cap);
/* The entry of key to read, at the version asked for if any: 0, or
 * LCT_ENOENT / LCT_ESTALE with why. */
int lct__entry_to_read(const lct__server *srv, const ProtobufCBinaryData *key, int has_version, uint64_t version,
                       lct__entry **e, char *why, size_t cap);
/* Whether the pool has room now for a put of d in segments of seg_bytes
 * (its worst-case coded size): 0, LCT_E2BIG when that size overflows 64
 * bits, or LCT_ENOSPC when it exceeds the pool's capacity or its free bytes.
 * why names the tensor's size and the pool's, also for 0 (an allocation can
 * still fail where the backend's memory is fragmented). */
int lct__pool_room(const lct__server *srv, const lct_put_decl *d, uint64_t seg_bytes, char *why, size_t cap);

#endif
