/* store.c — the tensor store: a chained hash table of entries, listed through a bounded heap. */
#include "store.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

struct lct__store {
  lct__entry **buckets;
  size_t n_buckets; /* power of two */
  uint64_t count;
  uint64_t next_version;
  lct__stats *stats;
  lct__store_observer observer;
  void *observer_arg;
};

uint64_t lct__key_hash(const uint8_t *key, size_t len, uint64_t basis) {
  uint64_t h = basis;
  for (size_t i = 0; i < len; i++)
    h = (h ^ key[i]) * UINT64_C(0x100000001b3);
  return h;
}

int lct__store_create(lct__stats *stats, lct__store **out) {
  lct__store *s = calloc(1, sizeof *s);
  if (s == NULL)
    return LCT_ENOMEM;
  s->n_buckets = 1024;
  s->buckets = calloc(s->n_buckets, sizeof *s->buckets);
  if (s->buckets == NULL) {
    free(s);
    return LCT_ENOMEM;
  }
  s->next_version = 1;
  s->stats = stats;
  *out = s;
  return 0;
}

void lct__store_destroy(lct__store *s) {
  if (s == NULL)
    return;
  for (size_t b = 0; b < s->n_buckets; b++) {
    for (lct__entry *e = s->buckets[b], *next; e != NULL; e = next) {
      next = e->next;
      lct__entry_unref(e);
    }
  }
  free(s->buckets);
  free(s);
}

static lct__entry **lct__slot(const lct__store *s, const uint8_t *key, size_t len, uint64_t h) {
  lct__entry **p = &s->buckets[h & (s->n_buckets - 1)];
  while (*p != NULL &&
         !((*p)->hash == h && (*p)->key_len == len && memcmp((*p)->key, key, len) == 0))
    p = &(*p)->next;
  return p;
}

lct__entry *lct__store_find(const lct__store *s, const uint8_t *key, size_t len) {
  return *lct__slot(s, key, len, lct__key_hash(key, len, LCT__FNV_BASIS));
}

/* Doubles the table; on allocation failure the table just stays denser. */
static void lct__grow(lct__store *s) {
  size_t n = s->n_buckets * 2;
  lct__entry **b = calloc(n, sizeof *b);
  if (b == NULL)
    return;
  for (size_t i = 0; i < s->n_buckets; i++) {
    for (lct__entry *e = s->buckets[i], *next; e != NULL; e = next) {
      next = e->next;
      e->next = b[e->hash & (n - 1)];
      b[e->hash & (n - 1)] = e;
    }
  }
  free(s->buckets);
  s->buckets = b;
  s->n_buckets = n;
}

void lct__store_observe(lct__store *s, lct__store_observer fn, void *arg) {
  s->observer = fn;
  s->observer_arg = arg;
}

static void lct__gauges(lct__store *s, const lct__entry *e, int sign) {
  if (s->observer != NULL)
    s->observer(s->observer_arg, e, sign);
  s->stats->tensors += (uint64_t)(int64_t)sign;
  s->stats->raw_bytes += (uint64_t)((int64_t)sign * (int64_t)e->raw_bytes);
  s->stats->stored_bytes += (uint64_t)((int64_t)sign * (int64_t)e->stored_bytes);
  if ((unsigned)e->dtype < LCT_DTYPE_COUNT) {
    s->stats->dtype_tensors[e->dtype] += (uint64_t)(int64_t)sign;
    s->stats->dtype_raw[e->dtype] += (uint64_t)((int64_t)sign * (int64_t)e->raw_bytes);
    s->stats->dtype_stored[e->dtype] += (uint64_t)((int64_t)sign * (int64_t)e->stored_bytes);
  }
}

/* Publishes e (its version set), replacing the key's current entry. */
static void lct__publish(lct__store *s, lct__entry *e) {
  lct__entry **p = lct__slot(s, e->key, e->key_len, e->hash);
  lct__entry *old = *p;
  if (old != NULL) {
    e->next = old->next;
    *p = e;
    lct__gauges(s, old, -1);
    lct__entry_unref(old);
  } else {
    e->next = NULL;
    *p = e;
    if (++s->count > s->n_buckets)
      lct__grow(s);
  }
  lct__gauges(s, e, +1);
}

void lct__store_install(lct__store *s, lct__entry *e) {
  e->hash = lct__key_hash(e->key, e->key_len, LCT__FNV_BASIS);
  e->version = s->next_version++;
  lct__publish(s, e);
}

void lct__store_restore(lct__store *s, lct__entry *e) {
  e->hash = lct__key_hash(e->key, e->key_len, LCT__FNV_BASIS);
  const lct__entry *cur = *lct__slot(s, e->key, e->key_len, e->hash);
  if (cur != NULL && cur->version >= e->version) {
    lct__entry_unref(e);
    return;
  }
  if (e->version >= s->next_version)
    s->next_version = e->version + 1;
  lct__publish(s, e);
}

void lct__store_each(const lct__store *s, void (*fn)(void *arg, lct__entry *e), void *arg) {
  for (size_t b = 0; b < s->n_buckets; b++)
    for (lct__entry *e = s->buckets[b]; e != NULL; e = e->next)
      fn(arg, e);
}

int lct__store_remove(lct__store *s, const uint8_t *key, size_t len) {
  lct__entry **p = lct__slot(s, key, len, lct__key_hash(key, len, LCT__FNV_BASIS));
  lct__entry *e = *p;
  if (e == NULL)
    return LCT_ENOENT;
  *p = e->next;
  s->count--;
  lct__gauges(s, e, -1);
  lct__entry_unref(e);
  return 0;
}

uint64_t lct__store_count(const lct__store *s) { return s->count; }

/* Bytewise order, a proper prefix first. */
static int lct__keycmp(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen) {
  int c = memcmp(a, b, alen < blen ? alen : blen);
  if (c != 0)
    return c;
  return alen < blen ? -1 : alen > blen;
}

static int lct__entry_cmp(const lct__entry *a, const lct__entry *b) {
  return lct__keycmp(a->key, a->key_len, b->key, b->key_len);
}

/* Max-heap on key order holding the smallest keys seen so far. */
static void lct__sift_down(lct__entry **h, size_t n, size_t i) {
  for (;;) {
    size_t l = 2 * i + 1, r = l + 1, m = i;
    if (l < n && lct__entry_cmp(h[l], h[m]) > 0)
      m = l;
    if (r < n && lct__entry_cmp(h[r], h[m]) > 0)
      m = r;
    if (m == i)
      return;
    lct__entry *t = h[i];
    h[i] = h[m];
    h[m] = t;
    i = m;
  }
}

static void lct__sift_up(lct__entry **h, size_t i) {
  while (i > 0) {
    size_t p = (i - 1) / 2;
    if (lct__entry_cmp(h[i], h[p]) <= 0)
      return;
    lct__entry *t = h[i];
    h[i] = h[p];
    h[p] = t;
    i = p;
  }
}

size_t lct__store_list(const lct__store *s, const uint8_t *prefix, size_t prefix_len,
                       const uint8_t *cursor, size_t cursor_len, size_t limit, lct__entry **out,
                       int *more) {
  size_t n = 0;
  *more = 0;
  for (size_t b = 0; b < s->n_buckets; b++) {
    for (lct__entry *e = s->buckets[b]; e != NULL; e = e->next) {
      if (e->key_len < prefix_len || (prefix_len && memcmp(e->key, prefix, prefix_len) != 0))
        continue;
      if (cursor != NULL && lct__keycmp(e->key, e->key_len, cursor, cursor_len) <= 0)
        continue;
      if (n < limit) {
        out[n] = e;
        lct__sift_up(out, n++);
      } else {
        *more = 1;
        if (limit > 0 && lct__entry_cmp(e, out[0]) < 0) {
          out[0] = e;
          lct__sift_down(out, n, 0);
        }
      }
    }
  }
  /* Heap sort in place: ascending key order. */
  for (size_t end = n; end > 1; end--) {
    lct__entry *t = out[0];
    out[0] = out[end - 1];
    out[end - 1] = t;
    lct__sift_down(out, end - 1, 0);
  }
  return n;
}
