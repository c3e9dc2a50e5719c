/* work.h — codec jobs on the libuv threadpool: encode a put into segments, decode a range of a stored tensor. */
#ifndef LCT_SERVER_WORK_H
#define LCT_SERVER_WORK_H

#include <stddef.h>
#include <stdint.h>

#include "server.h"

/* Drift threshold: a reused codebook is rebuilt when the code bits of a put
 * exceed its expected_bits_per_elem * n by more than this fraction. */
#define LCT__DRIFT 0.02

/* Called on the loop thread when a put job ends: rc 0 and the installed entry
 * (borrowed), or a negative code and a reason. */
typedef void (*lct__put_cb)(void *arg, int rc, const char *why, const lct__entry *installed);

/* Encodes the decl->raw_bytes bytes of src into a new entry for key and
 * installs it; the bytes must stay valid until cb. The checksum is verified (when declared)
 * or computed; the key's codebook is reused, built on a first put, and
 * rebuilt on drift. Pool memory for every segment is reserved up front: a
 * full pool fails here with LCT_ENOSPC (cb is not called) and leaves the
 * stored version untouched. */
int lct__put_start(lct__server *srv, const uint8_t *key, size_t key_len, const lct__put_decl *decl,
                   const lct__put_src *src, lct__put_cb cb, void *arg);

/* A new entry for key shaped by decl, split into segments of seg_bytes (a
 * multiple of 64 KiB; the last may be shorter), each holding pool memory for
 * its lct_encode_bound: LCT_ENOSPC (nothing held) when the pool is full. */
int lct__entry_reserve(lct__server *srv, const uint8_t *key, size_t key_len, const lct__put_decl *decl,
                       uint64_t seg_bytes, lct__entry **out);

/* Gives each segment of an encoded entry back its pool memory beyond
 * blob_bytes, counts it, and installs it (taking the caller's reference). */
void lct__entry_publish(lct__server *srv, lct__entry *e);

/* Whether code_bits for e's elements exceed what its codebook expects by more
 * than LCT__DRIFT. */
int lct__codebook_drifted(const lct__entry *e, uint64_t code_bits);

/* Gives e (not yet installed) the codebook of its key's stored version when
 * that has one of e's dtype: returns 0 if it has none, 1 if it did, 2 if it
 * did and that codebook is stale (the stored version drifted from it). */
int lct__codebook_inherit(lct__server *srv, lct__entry *e);
/* Builds e's codebook from a symbol histogram of its data and adopts it. */
int lct__codebook_set(lct__server *srv, lct__entry *e, const uint64_t *hist, int rebuild);
/* Marks the codebook just built into e->codebook (lct_codebook_build, on any
 * thread) as e's, with a new codebook_id; counts a build, or a rebuild
 * (drift). Loop thread. */
void lct__codebook_adopt(lct__server *srv, lct__entry *e, int rebuild);

/* Smallest segment a tensor is split into to spread it over the codec
 * threads: keeps the per-segment blob header (about 300 bytes) below 0.12%. */
#define LCT__SEGMENT_MIN (256u << 10)

/* Raw bytes per segment for a tensor of raw_bytes: at most segment-size, and
 * small enough (down to LCT__SEGMENT_MIN) that the segments of one tensor
 * keep every codec thread busy. Always a multiple of 64 KiB, so that a
 * segment holds whole 16384-element format chunks for any dtype. */
uint64_t lct__segment_bytes(const lct__server *srv, uint64_t raw_bytes);

/* Pool bytes a put reserves while it encodes: the sum of its segments'
 * lct_encode_bound. */
uint64_t lct__put_reserve(const lct__server *srv, const lct__put_decl *decl);

/* Called on the loop thread when a get job ends (rc 0 or a negative code). */
typedef void (*lct__get_cb)(void *arg, int rc);

/* Decodes raw bytes [offset, offset + len) of e (len > 0, within the tensor)
 * into host memory dst, decoding the overlapping segments in parallel.
 * Holds a reference to e until cb. */
int lct__get_start(lct__server *srv, lct__entry *e, uint64_t offset, uint64_t len, uint8_t *dst,
                   lct__get_cb cb, void *arg);

#endif
