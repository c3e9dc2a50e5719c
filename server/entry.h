/* entry.h — a stored tensor: its segments of coded bytes in pool memory, reserved before an encode and published after it. */
#ifndef LCT_SERVER_ENTRY_H
#define LCT_SERVER_ENTRY_H

#include <stddef.h>
#include <stdint.h>

#include "lct_codec.h"
#include "lct_decl.h"
#include "pool.h"

typedef struct lct__server lct__server;

/* One independently coded piece of a tensor: raw bytes [raw_offset,
 * raw_offset + raw_bytes) as a blob in pool memory. */
typedef struct lct__segment {
  void *blob;
  size_t blob_bytes;  /* coded bytes */
  size_t alloc_bytes; /* pool bytes held */
  uint64_t raw_offset;
  uint64_t raw_bytes;
  uint32_t crc;       /* CRC-32C of the raw bytes, while the put that makes the entry runs (0 once restored) */
} lct__segment;

/* A stored tensor. Immutable once installed; refs and the store's fields are
 * touched on the loop thread only, so a reader holding a reference may pass
 * the entry to codec workers while a newer version replaces it. */
typedef struct lct__entry {
  struct lct__entry *next; /* the store's hash chain */
  uint64_t hash;
  int refs;
  lct__pool *pool;
  uint8_t *key;
  size_t key_len;
  lct_dtype dtype;
  int ndim;
  uint64_t shape[LCT_MAX_DIMS];
  uint64_t n_elems;
  uint64_t raw_bytes;
  uint64_t stored_bytes;
  uint64_t version;
  uint32_t checksum;        /* CRC-32C of the raw bytes */
  int has_codebook;
  lct_codebook codebook;    /* reused by the key's next put (codebook.h) */
  uint64_t codebook_id;     /* names codebook server-wide: equal ids, equal codebooks (device codebook caches) */
  int codebook_stale;       /* this version's codes drifted from codebook: the next put rebuilds it */
  size_t n_segments;
  lct__segment *segments;
  int persisted;            /* persist_dir holds this version (the one mutable field) */
} lct__entry;

/* A new entry holding one reference, with n_segments zeroed segments. */
int lct__entry_new(lct__pool *pool, const uint8_t *key, size_t key_len, size_t n_segments, lct__entry **out);
/* lct__entry_new with the tensor's dtype, shape and sizes taken from its checked declaration. */
int lct__entry_declared(lct__pool *pool, const uint8_t *key, size_t key_len, const lct_put_decl *decl,
                        size_t n_segments, lct__entry **out);
void lct__entry_ref(lct__entry *e);
/* The CRC-32C of e's raw bytes, from its segments' crc fields. */
uint32_t lct__entry_crc(const lct__entry *e);
/* Drops a reference; the last one frees the segments back to the pool. */
void lct__entry_unref(lct__entry *e);

/* Smallest segment a host put is split into to spread it over the codec
 * workers: keeps the per-segment blob header (about 300 bytes) below 0.12%. */
#define LCT__SEGMENT_MIN (256u << 10)

/* Raw bytes per segment of a host put of raw_bytes: at most segment_size,
 * and small enough (down to LCT__SEGMENT_MIN) that the segments of one tensor
 * keep every codec worker busy. Always a multiple of 64 KiB, so that a
 * segment holds whole 16384-element format chunks for any dtype. */
uint64_t lct__segment_bytes(const lct__server *srv, uint64_t raw_bytes);

/* Pool bytes a put in segments of seg_bytes reserves while it encodes, the
 * sum of its segments' lct_encode_bound, in *out: 0, or LCT_E2BIG when that
 * sum overflows 64 bits. */
int lct__entry_reserve_bytes(const lct_put_decl *decl, uint64_t seg_bytes, uint64_t *out);

/* A new entry for key shaped by decl, split into segments of seg_bytes (a
 * multiple of 64 KiB; the last may be shorter), each holding pool memory for
 * its lct_encode_bound: LCT_ENOSPC (nothing held) when the pool is full. */
int lct__entry_reserve(lct__server *srv, const uint8_t *key, size_t key_len, const lct_put_decl *decl,
                       uint64_t seg_bytes, lct__entry **out);

/* What a failed decode of a stored segment answers: LCT_ECORRUPT for every
 * fault the decoder finds in the blob (its checks, its version byte, sizes
 * that disagree with the entry); out of memory or a device failure as it is. */
int lct__stored_decode_error(int rc);

/* Gives each segment of an encoded entry back its pool memory beyond
 * blob_bytes, counts it, and installs it in the store (taking the caller's
 * reference). */
void lct__entry_publish(lct__server *srv, lct__entry *e);

#endif
