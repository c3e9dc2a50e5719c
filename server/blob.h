/* blob.h — encoded puts and gets: a client's blobs checked against the put's declaration, validated on the codec workers and stored as sent; stored blobs sent as they are. */
#ifndef LCT_SERVER_BLOB_H
#define LCT_SERVER_BLOB_H

#include <stddef.h>
#include <stdint.h>

#include "work.h"

/* One blob of an encoded put: its bytes (in a received message) and the raw
 * bytes [raw_offset, raw_offset + raw_bytes) of the tensor it holds. */
typedef struct lct__blob_ref {
  const uint8_t *bytes;
  size_t len;
  uint64_t raw_offset;
  uint64_t raw_bytes;
} lct__blob_ref;

/* How an encoded put lays out its tensor, learnt from its blobs: every blob
 * but the last holds seg raw bytes (0 until a blob says), a multiple of 64
 * KiB up to seg_max (the server's segment_size), and starts at a multiple of
 * it; the last holds the rest. */
typedef struct lct__blob_layout {
  const lct_put_decl *decl;
  uint64_t seg_max;
  uint64_t seg;
} lct__blob_layout;

/* Walks the whole blobs that fill p[0, len), the first holding raw bytes
 * from raw_at: each with a header lct_blob_info_read accepts, the declared
 * dtype, at most lct_encode_bound bytes, and a place in the layout. Their
 * chunks are not looked at (lct__accept_start validates them). Appends them
 * to out (out_cap entries; NULL: only counted) and returns 0 with *n_out and
 * *covered, the raw bytes they hold; else LCT_ECORRUPT (a malformed blob or
 * one cut short), LCT_EDTYPE or LCT_ESIZE (a blob that disagrees with the
 * declaration or the layout), with why. */
int lct__blobs_walk(lct__blob_layout *lay, uint64_t raw_at, const uint8_t *p, size_t len, lct__blob_ref *out,
                    size_t out_cap, size_t *n_out, uint64_t *covered, char *why, size_t cap);

/* Stores the blobs of decl's tensor (in raw order, covering it, as
 * lct__blobs_walk laid them out) as a new entry for key, as put_start
 * stores an encoded one: pool memory of their exact sizes is reserved here
 * (LCT_ENOSPC, cb not called), then each blob is validated in full on a
 * codec worker (lct_validate: every chunk decoded into scratch and
 * discarded) and copied into pool memory; the CRC-32C of what the blobs hold
 * must be the declared checksum (LCT_ECHECKSUM), a corrupt blob is
 * LCT_ECORRUPT. The entry takes the first blob's codebook, marked stale (its
 * expectation is unknown), so the key's next server-coded put counts
 * symbols. The blobs' bytes must stay valid until cb; refs may go at once. */
int lct__accept_start(lct__server *srv, const uint8_t *key, size_t key_len, const lct_put_decl *decl,
                      const lct__blob_ref *refs, size_t n, lct__put_cb cb, void *arg);

/* Copies the stored blobs of segments [first, first + n) of e back to back
 * into host memory dst, on the codec workers. Holds a reference to e until
 * cb. */
int lct__blobs_read_start(lct__server *srv, lct__entry *e, size_t first, size_t n, uint8_t *dst, lct__get_cb cb,
                          void *arg);

#endif
