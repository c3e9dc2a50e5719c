/* lct_client_set.c — endpoint sets: keys placed over several lctd by rendezvous hashing, connections opened at first use. */
#include <ctype.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lct_client_internal.h"

typedef struct lct__member {
  char *endpoint;
  uint8_t hash_key[crypto_shorthash_KEYBYTES]; /* BLAKE2b-128 of the endpoint: its SipHash key */
  lct_client *client;                          /* NULL until its first use */
} lct__member;

struct lct_client_set {
  lct_options opts;      /* each connection's, endpoint aside */
  char *auth_token_file; /* opts.auth_token_file's copy */
  size_t n;
  lct__member *members;
  char err[768];
};

_Static_assert(crypto_shorthash_BYTES == 8, "SipHash-2-4 gives a 64-bit weight");

static int lct__set_fail(lct_client_set *s, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int lct__set_fail(lct_client_set *s, int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->err, sizeof s->err, fmt, ap);
  va_end(ap);
  return rc;
}

/* "scheme://address": letters for the scheme, something after it. */
static int lct__endpoint_ok(const char *e) {
  const char *p = e;
  while (isalpha((unsigned char)*p))
    p++;
  return p > e && strncmp(p, "://", 3) == 0 && p[3] != '\0';
}

/* Splits list into s's members: entries separated by commas, blanks around each dropped. */
static int lct__set_parse(lct_client_set *s, const char *list) {
  size_t n = 1;
  for (const char *p = list; *p != '\0'; p++)
    n += *p == ',';
  if (n > LCT_ENDPOINTS_MAX)
    return LCT_EINVAL;
  if ((s->members = calloc(n, sizeof *s->members)) == NULL)
    return LCT_ENOMEM;
  for (const char *p = list;; p++) {
    const char *end = strchr(p, ',');
    if (end == NULL)
      end = p + strlen(p);
    while (p < end && isspace((unsigned char)*p))
      p++;
    const char *last = end;
    while (last > p && isspace((unsigned char)last[-1]))
      last--;
    char *e = strndup(p, (size_t)(last - p));
    if (e == NULL)
      return LCT_ENOMEM;
    s->members[s->n++].endpoint = e;
    if (!lct__endpoint_ok(e))
      return LCT_EINVAL;
    for (size_t i = 0; i + 1 < s->n; i++)
      if (strcmp(s->members[i].endpoint, e) == 0)
        return LCT_EINVAL;
    crypto_generichash(s->members[s->n - 1].hash_key, sizeof s->members[0].hash_key, (const uint8_t *)e,
                       strlen(e), NULL, 0);
    if (*end == '\0')
      return 0;
    p = end;
  }
}

int lct_client_set_open(const lct_options *opts, const char *endpoints, lct_client_set **out) {
  *out = NULL;
  lct_options o;
  if (lct__options_read(opts, &o) != 0)
    return LCT_EINVAL;
  const char *list = endpoints;
  if (list == NULL || *list == '\0')
    list = o.endpoint;
  if (list == NULL || *list == '\0')
    list = getenv("LCT_ENDPOINTS");
  if (list == NULL || *list == '\0')
    list = getenv("LCT_ENDPOINT");
  if (list == NULL || *list == '\0')
    list = LCT_DEFAULT_ENDPOINT;
  if (sodium_init() < 0)
    return LCT_ENOMEM;
  lct_client_set *s = calloc(1, sizeof *s);
  if (s == NULL)
    return LCT_ENOMEM;
  s->opts = o;
  s->opts.endpoint = NULL;
  int rc = 0;
  if (o.auth_token_file != NULL && (s->auth_token_file = strdup(o.auth_token_file)) == NULL)
    rc = LCT_ENOMEM;
  s->opts.auth_token_file = s->auth_token_file;
  if (rc == 0)
    rc = lct__set_parse(s, list);
  if (rc != 0) {
    lct_client_set_close(s);
    return rc;
  }
  *out = s;
  return 0;
}

void lct_client_set_close(lct_client_set *s) {
  if (s == NULL)
    return;
  for (size_t i = 0; i < s->n; i++) {
    lct_close(s->members[i].client);
    free(s->members[i].endpoint);
  }
  free(s->members);
  free(s->auth_token_file);
  free(s);
}

size_t lct_client_set_size(const lct_client_set *s) { return s->n; }

const char *lct_client_set_endpoint(const lct_client_set *s, size_t i) {
  return i < s->n ? s->members[i].endpoint : NULL;
}

size_t lct_client_set_place(const lct_client_set *s, const char *key) {
  size_t best = 0;
  uint64_t best_w = 0;
  size_t len = strlen(key);
  for (size_t i = 0; i < s->n; i++) {
    uint8_t h[crypto_shorthash_BYTES];
    crypto_shorthash(h, (const uint8_t *)key, len, s->members[i].hash_key);
    uint64_t w = 0;
    for (int b = 7; b >= 0; b--)
      w = w << 8 | h[b];
    if (i == 0 || w > best_w || (w == best_w && strcmp(s->members[i].endpoint, s->members[best].endpoint) < 0)) {
      best = i;
      best_w = w;
    }
  }
  return best;
}

/* The connection to member i, opened if need be; what names the caller's
 * subject in an error ("lctd" or a key). */
static int lct__set_connect(lct_client_set *s, size_t i, const char *key, lct_client **out) {
  *out = NULL;
  if (i >= s->n)
    return lct__set_fail(s, LCT_EINVAL, "endpoint %zu of a set of %zu", i, s->n);
  lct__member *m = &s->members[i];
  if (m->client == NULL) {
    lct_options o = s->opts;
    o.endpoint = m->endpoint;
    int rc = lct_connect(&o, &m->client);
    if (rc != 0) {
      m->client = NULL;
      const char *why = rc == LCT_ECONN ? "no answer" : lct_strerror(rc);
      if (key != NULL)
        return lct__set_fail(s, rc, "key '%.200s' lives at %s (endpoint %zu of %zu): %s", key, m->endpoint, i + 1,
                             s->n, why);
      return lct__set_fail(s, rc, "lctd at %s (endpoint %zu of %zu): %s", m->endpoint, i + 1, s->n, why);
    }
  }
  s->err[0] = '\0';
  *out = m->client;
  return 0;
}

int lct_client_set_client(lct_client_set *s, size_t i, lct_client **out) { return lct__set_connect(s, i, NULL, out); }

int lct_client_set_for_key(lct_client_set *s, const char *key, lct_client **out) {
  *out = NULL;
  if (lct_wire_key_check((const uint8_t *)key, key != NULL ? strlen(key) : 0) != 0)
    return lct__set_fail(s, LCT_ENAMETOOLONG, "key must be 1..%d bytes", LCT_KEY_MAX);
  return lct__set_connect(s, lct_client_set_place(s, key), key, out);
}

const char *lct_client_set_last_error(const lct_client_set *s) { return s != NULL ? s->err : ""; }
