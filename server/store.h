/* store.h — the tensor store: key → refcounted, immutable entry of coded segments. */
#ifndef LCT_SERVER_STORE_H
#define LCT_SERVER_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "lct_codec.h"
#include "lct_wire.h"
#include "pool.h"
#include "stats.h"

/* One independently coded piece of a tensor: raw bytes [raw_offset,
 * raw_offset + raw_bytes) as a blob in pool memory. */
typedef struct lct__segment {
  void *blob;
  size_t blob_bytes;  /* coded bytes */
  size_t alloc_bytes; /* pool bytes held */
  uint64_t raw_offset;
  uint64_t raw_bytes;
} lct__segment;

/* A stored tensor. Immutable once installed; refs and the store's fields are
 * touched on the loop thread only, so a reader holding a reference may pass
 * the entry to threadpool workers while a newer version replaces it. */
typedef struct lct__entry {
  struct lct__entry *next; /* hash chain */
  uint64_t hash;
  int refs;
  lct__pool *pool;
  uint8_t *key;
  size_t key_len;
  int dtype;
  int ndim;
  uint64_t shape[LCT_MAX_DIMS];
  uint64_t n_elems;
  uint64_t raw_bytes;
  uint64_t stored_bytes;
  uint64_t version;
  uint32_t checksum;        /* CRC-32C of the raw bytes */
  int has_codebook;
  lct_codebook codebook;    /* reused by the key's next put */
  uint64_t codebook_id;     /* names codebook server-wide: equal ids, equal codebooks (device codebook caches) */
  int codebook_stale;       /* this version's codes drifted from codebook (a device batch put, which
                               then stores rather than re-encodes): the next batch put rebuilds it */
  size_t n_segments;
  lct__segment *segments;
  int persisted;            /* persist_dir holds this version (the one mutable field) */
} lct__entry;

/* FNV-1a, 64-bit, of a key from basis (LCT__FNV_BASIS, the standard one). */
#define LCT__FNV_BASIS UINT64_C(0xcbf29ce484222325)
uint64_t lct__key_hash(const uint8_t *key, size_t len, uint64_t basis);

/* A new entry holding one reference, with n_segments zeroed segments. */
int lct__entry_new(lct__pool *pool, const uint8_t *key, size_t key_len, size_t n_segments,
                   lct__entry **out);
void lct__entry_ref(lct__entry *e);
/* Drops a reference; the last one frees the segments back to the pool. */
void lct__entry_unref(lct__entry *e);

typedef struct lct__store lct__store;

/* stats receives the tensors, raw_bytes and stored_bytes gauges. */
int lct__store_create(lct__stats *stats, lct__store **out);
void lct__store_destroy(lct__store *store);

/* Borrowed pointer (take a reference to keep it past the current callback). */
lct__entry *lct__store_find(const lct__store *store, const uint8_t *key, size_t len);
/* Publishes e under its key, taking over the caller's reference, giving it
 * the next version (versions come from one server-wide counter, so a key's
 * versions increase and a deleted and re-put key never repeats one), and
 * dropping the entry it replaces. */
void lct__store_install(lct__store *store, lct__entry *e);
/* Publishes e with the version it carries (a snapshot restored at start),
 * taking over the caller's reference; later versions continue above it. A
 * key already present at a higher version keeps it and e is dropped. */
void lct__store_restore(lct__store *store, lct__entry *e);
/* Calls fn on every entry (borrowed), in no particular order; fn must not
 * change the store. */
void lct__store_each(const lct__store *store, void (*fn)(void *arg, lct__entry *e), void *arg);
/* Unpublishes a key; LCT_ENOENT if absent. */
int lct__store_remove(lct__store *store, const uint8_t *key, size_t len);
uint64_t lct__store_count(const lct__store *store);

/* Up to limit entries whose key starts with prefix and sorts (bytewise) after
 * cursor, in key order; *more says whether further ones exist. out needs room
 * for limit pointers, which are borrowed. Returns the count. */
size_t lct__store_list(const lct__store *store, const uint8_t *prefix, size_t prefix_len,
                       const uint8_t *cursor, size_t cursor_len, size_t limit, lct__entry **out,
                       int *more);

#endif
