/* staging.c — chunked puts between begin and commit: host buffers, budgets and idle expiry. */
#include "staging.h"

#include <errno.h>
#include <nanomsg/nn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "log.h"

#define LCT__STAGING_BUCKETS 256

struct lct__staging {
  lct__server *srv;
  lct__pending *buckets[LCT__STAGING_BUCKETS];
  uv_timer_t timer;
  int timer_open;
};

static lct__pending **lct__staging_slot(lct__staging *st, uint64_t id) {
  lct__pending **p = &st->buckets[(id ^ (id >> 17)) % LCT__STAGING_BUCKETS];
  while (*p != NULL && (*p)->id != id)
    p = &(*p)->next;
  return p;
}

static void lct__staging_free(lct__staging *st, lct__pending *p) {
  st->srv->stats.staging_bytes -= p->decl.raw_bytes + p->framing;
  for (size_t i = 0; i < p->n_pieces; i++)
    nn_freemsg(p->pieces[i].msg);
  free(p->pieces);
  free(p->key);
  free(p);
}

static void lct__staging_sweep(uv_timer_t *t) {
  lct__staging *st = t->data;
  uint64_t now = uv_now(st->srv->loop), timeout = st->srv->cfg.put_timeout_ms;
  for (size_t b = 0; b < LCT__STAGING_BUCKETS; b++) {
    lct__pending **pp = &st->buckets[b];
    while (*pp != NULL) {
      lct__pending *p = *pp;
      if (now - p->last_active < timeout) {
        pp = &p->next;
        continue;
      }
      *pp = p->next;
      st->srv->stats.pending_puts--;
      st->srv->stats.puts_expired++;
      lct__log_info("put %016llx of '%.*s' expired after %llu of %llu bytes",
                    (unsigned long long)p->id, (int)(p->key_len > 64 ? 64 : p->key_len),
                    (const char *)p->key, (unsigned long long)p->received,
                    (unsigned long long)p->decl.raw_bytes);
      lct__staging_free(st, p);
    }
  }
}

int lct__staging_create(lct__server *srv, lct__staging **out) {
  lct__staging *st = calloc(1, sizeof *st);
  if (st == NULL)
    return LCT_ENOMEM;
  st->srv = srv;
  uint64_t period = srv->cfg.put_timeout_ms / 4;
  period = period < 5 ? 5 : period > 1000 ? 1000 : period;
  uv_timer_init(srv->loop, &st->timer);
  st->timer.data = st;
  st->timer_open = 1;
  uv_timer_start(&st->timer, lct__staging_sweep, period, period);
  uv_unref((uv_handle_t *)&st->timer); /* the sockets, not the sweep, keep the loop alive */
  *out = st;
  return 0;
}

void lct__staging_stop(lct__staging *st) {
  if (!st->timer_open)
    return;
  st->timer_open = 0;
  uv_timer_stop(&st->timer);
  uv_close((uv_handle_t *)&st->timer, NULL);
}

void lct__staging_destroy(lct__staging *st) {
  if (st == NULL)
    return;
  for (size_t b = 0; b < LCT__STAGING_BUCKETS; b++) {
    for (lct__pending *p = st->buckets[b], *next; p != NULL; p = next) {
      next = p->next;
      st->srv->stats.pending_puts--;
      lct__staging_free(st, p);
    }
  }
  free(st);
}

/* Whether bytes more fit the staging budget. */
static int lct__staging_room(const lct__staging *st, uint64_t bytes) {
  uint64_t used = st->srv->stats.staging_bytes, budget = st->srv->cfg.staging_memory;
  return used <= budget && bytes <= budget - used;
}

/* 64 random bits: an id another client cannot guess, nor a stale one from an
 * earlier run find a put. Blocks only before the kernel's generator is first
 * seeded, early in boot. */
static int lct__random_id(uint64_t *id) {
  for (;;) {
    ssize_t n = getrandom(id, sizeof *id, 0);
    if (n == (ssize_t)sizeof *id)
      return 0;
    if (n >= 0 || errno != EINTR)
      return LCT_EIO;
  }
}

int lct__staging_begin(lct__staging *st, uint64_t conn, const uint8_t *key, size_t key_len,
                       const lct_put_decl *decl, lct__pending **out) {
  lct__stats *stats = &st->srv->stats;
  if (stats->pending_puts >= (uint64_t)st->srv->cfg.max_pending_puts || !lct__staging_room(st, decl->raw_bytes))
    return LCT_ENOMEM;
  lct__pending *p = calloc(1, sizeof *p);
  if (p == NULL)
    return LCT_ENOMEM;
  if ((p->key = malloc(key_len)) == NULL) {
    free(p);
    return LCT_ENOMEM;
  }
  memcpy(p->key, key, key_len);
  p->key_len = key_len;
  p->decl = *decl;
  p->conn = conn;
  do {
    if (lct__random_id(&p->id) != 0) {
      free(p->key);
      free(p);
      return LCT_EIO;
    }
  } while (p->id == 0 || *lct__staging_slot(st, p->id) != NULL);
  p->last_active = uv_now(st->srv->loop);
  lct__pending **slot = lct__staging_slot(st, p->id);
  *slot = p;
  stats->pending_puts++;
  stats->staging_bytes += decl->raw_bytes;
  *out = p;
  return 0;
}

lct__pending *lct__staging_find(lct__staging *st, uint64_t id, uint64_t conn) {
  lct__pending *p = *lct__staging_slot(st, id);
  return p != NULL && (p->conn == conn || p->shared) ? p : NULL;
}

/* The index of p's first piece starting after offset. */
static size_t lct__piece_after(const lct__pending *p, uint64_t offset) {
  size_t lo = 0, hi = p->n_pieces;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (p->pieces[mid].offset <= offset)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo;
}

const lct__piece *lct__staging_overlap(const lct__pending *p, uint64_t offset, uint64_t raw_len) {
  size_t i = lct__piece_after(p, offset); /* pieces before i start at or before offset, disjoint */
  if (i > 0 && p->pieces[i - 1].offset + p->pieces[i - 1].raw_len > offset)
    return &p->pieces[i - 1];
  if (i < p->n_pieces && p->pieces[i].offset < offset + raw_len)
    return &p->pieces[i];
  return NULL;
}

int lct__staging_add(lct__staging *st, lct__pending *p, void *msg, size_t msg_bytes, const uint8_t *bytes,
                     size_t len, uint64_t offset, uint64_t raw_len) {
  lct__stats *stats = &st->srv->stats;
  /* Kept beyond the raw bytes begin reserved: counted, or tiny chunks with big headers (or blobs
   * larger than what they hold) would hold far more memory than the budget. */
  uint64_t framing = msg_bytes > raw_len ? msg_bytes - raw_len : 0;
  if (!lct__staging_room(st, framing))
    return LCT_ENOMEM;
  if (p->n_pieces == p->cap_pieces) {
    size_t cap = p->cap_pieces ? 2 * p->cap_pieces : 8;
    lct__piece *pieces = realloc(p->pieces, cap * sizeof *pieces);
    if (pieces == NULL)
      return LCT_ENOMEM;
    p->pieces = pieces;
    p->cap_pieces = cap;
  }
  size_t at = lct__piece_after(p, offset); /* the end, for chunks in order */
  memmove(&p->pieces[at + 1], &p->pieces[at], (p->n_pieces - at) * sizeof *p->pieces);
  p->pieces[at] = (lct__piece){msg, bytes, offset, len, raw_len};
  p->n_pieces++;
  p->received += raw_len;
  p->framing += framing;
  stats->staging_bytes += framing;
  return 0;
}

void lct__staging_take(lct__staging *st, lct__pending *p) {
  lct__pending **slot = lct__staging_slot(st, p->id);
  if (*slot == p) {
    *slot = p->next;
    p->next = NULL;
    st->srv->stats.pending_puts--;
  }
}

void lct__staging_release(lct__staging *st, lct__pending *p) { lct__staging_free(st, p); }

void lct__staging_touch(lct__staging *st, lct__pending *p) {
  p->last_active = uv_now(st->srv->loop);
}
