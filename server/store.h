/* store.h — the tensor store: key → the current version's entry (entry.h), listed in key order. */
#ifndef LCT_SERVER_STORE_H
#define LCT_SERVER_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "entry.h"
#include "stats.h"

/* FNV-1a, 64-bit, of a key from basis (LCT__FNV_BASIS, the standard one). */
#define LCT__FNV_BASIS UINT64_C(0xcbf29ce484222325)
uint64_t lct__key_hash(const uint8_t *key, size_t len, uint64_t basis);

typedef struct lct__store lct__store;

/* stats receives the tensors, raw_bytes and stored_bytes gauges. */
int lct__store_create(lct__stats *stats, lct__store **out);
void lct__store_destroy(lct__store *store);

/* Called with +1 for every entry published and -1 for every one unpublished
 * (replaced or removed), as the store's own gauges are: the tenants' counts. */
typedef void (*lct__store_observer)(void *arg, const lct__entry *e, int sign);
void lct__store_observe(lct__store *store, lct__store_observer fn, void *arg);

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
