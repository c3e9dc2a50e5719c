/* conns.c — what each connection has proven: its challenge outstanding, the credential it authenticated with. */
#include "conns.h"

#include <sodium.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "lct_error.h"

typedef struct lct__conn_auth {
  struct lct__conn_auth *chain;       /* the bucket's */
  struct lct__conn_auth *prev, *next; /* its list, most recently used first */
  uint64_t conn;
  int who;                          /* LCT__WHO_NONE: in the challenged list */
  int challenged;
  uint8_t nonce[LCT_AUTH_NONCE_BYTES];
} lct__conn_auth;

typedef struct lct__lru {
  lct__conn_auth *head, *tail;
  size_t n, max;
} lct__lru;

struct lct__conns {
  lct__conn_auth **buckets;
  size_t n_buckets; /* a power of two */
  size_t count;
  lct__lru authenticated, challenged;
};

int lct__conns_create(size_t max_authenticated, size_t max_challenged, lct__conns **out) {
  lct__conns *s = calloc(1, sizeof *s);
  if (s == NULL || (s->buckets = calloc(256, sizeof *s->buckets)) == NULL) {
    free(s);
    return LCT_ENOMEM;
  }
  s->n_buckets = 256;
  s->authenticated.max = max_authenticated;
  s->challenged.max = max_challenged;
  *out = s;
  return 0;
}

static size_t lct__bucket(uint64_t conn, size_t n) { return (size_t)((conn * UINT64_C(0x9E3779B97F4A7C15)) >> 32) & (n - 1); }

static lct__conn_auth **lct__slot(const lct__conns *s, uint64_t conn) {
  lct__conn_auth **p = &s->buckets[lct__bucket(conn, s->n_buckets)];
  while (*p != NULL && (*p)->conn != conn)
    p = &(*p)->chain;
  return p;
}

static lct__lru *lct__list(lct__conns *s, const lct__conn_auth *e) {
  return e->who != LCT__WHO_NONE ? &s->authenticated : &s->challenged;
}

static void lct__unlink(lct__lru *l, lct__conn_auth *e) {
  *(e->prev != NULL ? &e->prev->next : &l->head) = e->next;
  *(e->next != NULL ? &e->next->prev : &l->tail) = e->prev;
  e->prev = e->next = NULL;
  l->n--;
}

static void lct__push(lct__lru *l, lct__conn_auth *e) {
  e->prev = NULL;
  e->next = l->head;
  *(l->head != NULL ? &l->head->prev : &l->tail) = e;
  l->head = e;
  l->n++;
}

static void lct__touch(lct__conns *s, lct__conn_auth *e) {
  lct__lru *l = lct__list(s, e);
  lct__unlink(l, e);
  lct__push(l, e);
}

static void lct__remove(lct__conns *s, lct__conn_auth *e) {
  lct__unlink(lct__list(s, e), e);
  *lct__slot(s, e->conn) = e->chain;
  s->count--;
  sodium_memzero(e->nonce, sizeof e->nonce);
  free(e);
}

/* Forgets the least recently used records past a list's bound. */
static void lct__bound(lct__conns *s, lct__lru *l) {
  while (l->n > l->max && l->tail != NULL)
    lct__remove(s, l->tail);
}

/* Doubles the buckets once records outnumber them; on allocation failure
 * the chains just grow longer. */
static void lct__grow(lct__conns *s) {
  size_t n = s->n_buckets * 2;
  lct__conn_auth **b = calloc(n, sizeof *b);
  if (b == NULL)
    return;
  for (size_t i = 0; i < s->n_buckets; i++)
    for (lct__conn_auth *e = s->buckets[i], *next; e != NULL; e = next) {
      next = e->chain;
      e->chain = b[lct__bucket(e->conn, n)];
      b[lct__bucket(e->conn, n)] = e;
    }
  free(s->buckets);
  s->buckets = b;
  s->n_buckets = n;
}

/* conn's record, created (with no credential) if it has none; NULL when out of memory. */
static lct__conn_auth *lct__get(lct__conns *s, uint64_t conn) {
  lct__conn_auth **p = lct__slot(s, conn);
  if (*p != NULL)
    return *p;
  lct__conn_auth *e = calloc(1, sizeof *e);
  if (e == NULL)
    return NULL;
  e->conn = conn;
  e->who = LCT__WHO_NONE;
  *p = e;
  lct__push(&s->challenged, e);
  if (++s->count > s->n_buckets)
    lct__grow(s);
  return e;
}

int lct__conns_who(lct__conns *s, uint64_t conn) {
  lct__conn_auth *e = *lct__slot(s, conn);
  if (e == NULL || e->who == LCT__WHO_NONE)
    return LCT__WHO_NONE;
  lct__touch(s, e);
  return e->who;
}

int lct__conns_challenge(lct__conns *s, uint64_t conn, uint8_t nonce[LCT_AUTH_NONCE_BYTES]) {
  lct__conn_auth *e = lct__get(s, conn);
  if (e == NULL)
    return LCT_ENOMEM;
  lct_auth_random(e->nonce, sizeof e->nonce);
  e->challenged = 1;
  memcpy(nonce, e->nonce, sizeof e->nonce);
  lct__touch(s, e);
  lct__bound(s, lct__list(s, e));
  return 0;
}

int lct__conns_has_challenge(lct__conns *s, uint64_t conn) {
  const lct__conn_auth *e = *lct__slot(s, conn);
  return e != NULL && e->challenged;
}

int lct__conns_take_challenge(lct__conns *s, uint64_t conn, uint8_t nonce[LCT_AUTH_NONCE_BYTES]) {
  lct__conn_auth *e = *lct__slot(s, conn);
  if (e == NULL || !e->challenged)
    return 0;
  memcpy(nonce, e->nonce, sizeof e->nonce);
  sodium_memzero(e->nonce, sizeof e->nonce);
  e->challenged = 0;
  if (e->who == LCT__WHO_NONE)
    lct__remove(s, e);
  return 1;
}

int lct__conns_set(lct__conns *s, uint64_t conn, int who) {
  if (who == LCT__WHO_NONE) {
    lct__conn_auth *e = *lct__slot(s, conn);
    if (e != NULL)
      lct__remove(s, e);
    return 0;
  }
  lct__conn_auth *e = lct__get(s, conn);
  if (e == NULL)
    return LCT_ENOMEM;
  lct__unlink(lct__list(s, e), e);
  e->who = who;
  lct__push(lct__list(s, e), e);
  lct__bound(s, lct__list(s, e));
  return 0;
}

void lct__conns_clear(lct__conns *s) {
  while (s->authenticated.tail != NULL)
    lct__remove(s, s->authenticated.tail);
  while (s->challenged.tail != NULL)
    lct__remove(s, s->challenged.tail);
}

void lct__conns_destroy(lct__conns *s) {
  if (s == NULL)
    return;
  lct__conns_clear(s);
  free(s->buckets);
  free(s);
}
