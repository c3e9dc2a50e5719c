/* access.c — tenants: the access file's tokens, key prefixes and quotas, and what each tenant has stored. */
#include "access.h"

#include <errno.h>
#include <inttypes.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "auth.h"
#include "config.h"
#include "lct_error.h"
#include "log.h"
#include "server.h"

/* Longest line: a tenant's longest token and prefix with room to spare. */
#define LCT__ACCESS_LINE (LCT_TOKEN_MAX + LCT_KEY_MAX + 256)

static void lct__tenant_clear(lct__tenant *t) {
  if (t->token != NULL)
    sodium_memzero(t->token, t->token_len);
  free(t->token);
  free(t->prefix);
  if (t->usage != NULL && --t->usage->refs == 0)
    free(t->usage);
  memset(t, 0, sizeof *t);
}

void lct__access_ref(lct__access *a) { a->refs++; }

void lct__access_unref(lct__access *a) {
  if (a == NULL || --a->refs > 0)
    return;
  for (size_t i = 0; i < a->n; i++)
    lct__tenant_clear(&a->tenants[i]);
  free(a->tenants);
  free(a);
}

/* Bytewise order, a proper prefix first: keys with a prefix sort after it. */
static int lct__bytes_cmp(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen) {
  int c = memcmp(a, b, alen < blen ? alen : blen);
  return c != 0 ? c : alen < blen ? -1 : alen > blen;
}

static int lct__tenant_cmp(const void *x, const void *y) {
  const lct__tenant *a = x, *b = y;
  return lct__bytes_cmp(a->prefix, a->prefix_len, b->prefix, b->prefix_len);
}

int lct__tenant_has(const lct__tenant *t, const uint8_t *key, size_t len) {
  return len >= t->prefix_len && memcmp(key, t->prefix, t->prefix_len) == 0;
}

const lct__tenant *lct__access_owner(const lct__access *a, const uint8_t *key, size_t len) {
  if (a == NULL || a->n == 0)
    return NULL;
  /* Since no prefix starts another, the only candidate is the greatest
   * prefix that sorts at or before the key. */
  size_t lo = 0, hi = a->n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (lct__bytes_cmp(a->tenants[mid].prefix, a->tenants[mid].prefix_len, key, len) <= 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo > 0 && lct__tenant_has(&a->tenants[lo - 1], key, len) ? &a->tenants[lo - 1] : NULL;
}

/* ---- the file ----------------------------------------------------------- */

typedef struct lct__access_parse {
  const char *path;
  int line;
  char *err;
  size_t errlen;
} lct__access_parse;

static int lct__access_fail(const lct__access_parse *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int lct__access_fail(const lct__access_parse *p, const char *fmt, ...) {
  char what[384];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  if (p->line > 0)
    snprintf(p->err, p->errlen, "access_file: '%s' line %d: %s", p->path, p->line, what);
  else
    snprintf(p->err, p->errlen, "access_file: '%s': %s", p->path, what);
  return LCT_ECONFIG;
}

static int lct__name_ok(const char *s) {
  size_t n = strlen(s);
  if (n == 0 || n > LCT__TENANT_NAME_MAX)
    return 0;
  for (; *s != '\0'; s++)
    if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || *s == '_' ||
          *s == '-' || *s == '.'))
      return 0;
  return 1;
}

static uint8_t *lct__dup_bytes(const char *s, size_t n) {
  uint8_t *p = malloc(n ? n : 1);
  if (p != NULL)
    memcpy(p, s, n);
  return p;
}

/* tenant NAME TOKEN PREFIX QUOTA, its words after "tenant". */
static int lct__parse_tenant(const lct__access_parse *p, char **w, int nw, lct__tenant *t) {
  if (nw != 4)
    return lct__access_fail(p, "expected 'tenant NAME TOKEN PREFIX QUOTA'");
  if (!lct__name_ok(w[0]))
    return lct__access_fail(p, "tenant name '%.80s': expected 1 to %d letters, digits, '_', '-' or '.'", w[0],
                            LCT__TENANT_NAME_MAX);
  size_t tlen = strlen(w[1]), plen = strlen(w[2]);
  if (tlen < LCT__TOKEN_MIN || tlen > LCT_TOKEN_MAX)
    return lct__access_fail(p, "tenant '%s': a token of %d to %d bytes expected, not %zu", w[0], LCT__TOKEN_MIN,
                            LCT_TOKEN_MAX, tlen);
  if (plen > LCT_KEY_MAX)
    return lct__access_fail(p, "tenant '%s': a prefix of 1 to %d bytes expected, not %zu", w[0], LCT_KEY_MAX, plen);
  uint64_t quota;
  if (strcmp(w[3], "unlimited") == 0)
    quota = LCT__QUOTA_NONE;
  else if (lct__parse_size(w[3], &quota) != 0 || quota == LCT__QUOTA_NONE)
    return lct__access_fail(p, "tenant '%s': quota '%.80s': expected a size of stored bytes (512M, 40G) or "
                            "'unlimited'", w[0], w[3]);
  snprintf(t->name, sizeof t->name, "%s", w[0]);
  t->token = lct__dup_bytes(w[1], tlen);
  t->token_len = tlen;
  t->prefix = lct__dup_bytes(w[2], plen);
  t->prefix_len = plen;
  t->quota = quota;
  t->usage = calloc(1, sizeof *t->usage);
  if (t->token == NULL || t->prefix == NULL || t->usage == NULL)
    return lct__access_fail(p, "out of memory");
  t->usage->refs = 1;
  return 0;
}

/* What no two tenants may share: a name, a token, a prefix that starts
 * another's (its keys would be both's). Tenants sorted by prefix. */
static int lct__access_distinct(const lct__access_parse *p, const lct__access *a, const uint8_t *admin,
                                size_t admin_len) {
  for (size_t i = 0; i < a->n; i++) {
    const lct__tenant *t = &a->tenants[i];
    if (i + 1 < a->n && lct__tenant_has(t, a->tenants[i + 1].prefix, a->tenants[i + 1].prefix_len))
      return lct__access_fail(p, "the prefix of tenant '%s' starts that of tenant '%s': a key may belong to "
                              "one tenant only", t->name, a->tenants[i + 1].name);
    if (t->token_len == admin_len && memcmp(t->token, admin, admin_len) == 0)
      return lct__access_fail(p, "tenant '%s' has the token of auth_token_file: a token names one tenant, or "
                              "every key", t->name);
    for (size_t j = i + 1; j < a->n; j++) {
      if (strcmp(t->name, a->tenants[j].name) == 0)
        return lct__access_fail(p, "tenant '%s' is named twice", t->name);
      if (t->token_len == a->tenants[j].token_len && memcmp(t->token, a->tenants[j].token, t->token_len) == 0)
        return lct__access_fail(p, "tenants '%s' and '%s' have the same token", t->name, a->tenants[j].name);
    }
  }
  return 0;
}

/* The lines of f into a, each read into line (LCT__ACCESS_LINE bytes); 0
 * or LCT_ECONFIG with p->line set. */
static int lct__access_read(lct__access_parse *p, FILE *f, lct__access *a, char *line) {
  int endpoints_seen = 0;
  size_t cap = 0;
  while (fgets(line, LCT__ACCESS_LINE, f) != NULL) {
    p->line++;
    size_t len = strlen(line);
    if (len == LCT__ACCESS_LINE - 1 && line[len - 1] != '\n')
      return lct__access_fail(p, "line longer than %d bytes", LCT__ACCESS_LINE - 2);
    char *hash = strchr(line, '#');
    if (hash != NULL)
      *hash = '\0';
    char *w[7], *save;
    int nw = 0;
    for (char *tok = strtok_r(line, " \t\r\n", &save); tok != NULL; tok = strtok_r(NULL, " \t\r\n", &save)) {
      if (nw == 6)
        return lct__access_fail(p, "too many words");
      w[nw++] = tok;
    }
    if (nw == 0)
      continue;
    if (strcmp(w[0], "endpoints") == 0) {
      int ipc = nw == 3 && strcmp(w[1], "tcp") == 0 && strcmp(w[2], "ipc") == 0;
      if (endpoints_seen++ || !(ipc || (nw == 2 && strcmp(w[1], "tcp") == 0)))
        return lct__access_fail(p, "expected one 'endpoints tcp' or 'endpoints tcp ipc'");
      a->ipc = ipc;
      continue;
    }
    if (strcmp(w[0], "tenant") != 0)
      return lct__access_fail(p, "'%.80s': expected 'tenant NAME TOKEN PREFIX QUOTA' or 'endpoints tcp [ipc]'",
                              w[0]);
    if (a->n == LCT__TENANTS_MAX)
      return lct__access_fail(p, "more than %d tenants", LCT__TENANTS_MAX);
    if (a->n == cap) {
      size_t more = cap ? cap * 2 : 8;
      lct__tenant *grown = realloc(a->tenants, more * sizeof *grown);
      if (grown == NULL)
        return lct__access_fail(p, "out of memory");
      a->tenants = grown;
      cap = more;
    }
    memset(&a->tenants[a->n], 0, sizeof *a->tenants);
    int rc = lct__parse_tenant(p, w + 1, nw - 1, &a->tenants[a->n]);
    a->n++; /* even half-built: freed with a */
    if (rc != 0)
      return rc;
  }
  if (ferror(f))
    return lct__access_fail(p, "cannot read it (%s)", strerror(errno));
  return 0;
}

int lct__access_load(const char *path, const uint8_t *admin_token, size_t admin_len, lct__access **out, char *err,
                     size_t errlen) {
  *out = NULL;
  if (*path == '\0')
    return 0;
  lct__access_parse p = {path, 0, err, errlen};
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return lct__access_fail(&p, "cannot read it (%s)", strerror(errno));
  struct stat st;
  if (fstat(fileno(f), &st) == 0 && (st.st_mode & S_IROTH))
    lct__log_warn("access_file '%s' is readable by every user, and its tokens with it: chmod o-r", path);
  lct__access *a = calloc(1, sizeof *a);
  if (a == NULL) {
    fclose(f);
    return lct__access_fail(&p, "out of memory");
  }
  a->refs = 1;
  /* Tokens pass through stdio's buffer and the line: both ours, both wiped
   * once the file is closed, so that no copy outlives the load in freed memory. */
  char iobuf[LCT__ACCESS_LINE], line[LCT__ACCESS_LINE];
  setvbuf(f, iobuf, _IOFBF, sizeof iobuf);
  int rc = lct__access_read(&p, f, a, line);
  fclose(f);
  sodium_memzero(iobuf, sizeof iobuf);
  sodium_memzero(line, sizeof line);
  if (rc == 0) {
    p.line = 0;
    qsort(a->tenants, a->n, sizeof *a->tenants, lct__tenant_cmp);
    rc = lct__access_distinct(&p, a, admin_token, admin_len);
  }
  if (rc != 0) {
    lct__access_unref(a);
    return rc;
  }
  *out = a;
  return 0;
}

int lct__access_equal(const lct__access *a, const lct__access *b) {
  if (a == NULL || b == NULL)
    return a == b;
  if (a->ipc != b->ipc || a->n != b->n)
    return 0;
  for (size_t i = 0; i < a->n; i++) {
    const lct__tenant *x = &a->tenants[i], *y = &b->tenants[i];
    if (strcmp(x->name, y->name) != 0 || x->quota != y->quota || x->token_len != y->token_len ||
        x->prefix_len != y->prefix_len || memcmp(x->token, y->token, x->token_len) != 0 ||
        memcmp(x->prefix, y->prefix, x->prefix_len) != 0)
      return 0;
  }
  return 1;
}

/* ---- what tenants hold -------------------------------------------------- */

static void lct__usage_count(lct__tenant_usage *u, const lct__entry *e, int sign) {
  u->tensors += (uint64_t)(int64_t)sign;
  u->raw_bytes += (uint64_t)((int64_t)sign * (int64_t)e->raw_bytes);
  u->stored_bytes += (uint64_t)((int64_t)sign * (int64_t)e->stored_bytes);
}

static void lct__access_count_in(void *arg, lct__entry *e) {
  const lct__tenant *t = lct__access_owner(arg, e->key, e->key_len);
  if (t != NULL)
    lct__usage_count(t->usage, e, +1);
}

void lct__access_count(void *arg, const lct__entry *e, int sign) {
  const lct__server *srv = arg;
  const lct__tenant *t = lct__access_owner(srv->access, e->key, e->key_len);
  if (t != NULL)
    lct__usage_count(t->usage, e, sign);
}

void lct__access_adopt(lct__access *fresh, const lct__access *old, const lct__store *store) {
  if (fresh == NULL)
    return;
  for (size_t i = 0; i < fresh->n; i++) {
    lct__tenant *t = &fresh->tenants[i];
    for (size_t j = 0; old != NULL && j < old->n; j++) {
      if (strcmp(t->name, old->tenants[j].name) == 0) {
        free(t->usage); /* fresh from the file: never shared */
        t->usage = old->tenants[j].usage;
        t->usage->refs++;
        break;
      }
    }
    t->usage->tensors = t->usage->raw_bytes = t->usage->stored_bytes = 0;
  }
  lct__store_each(store, lct__access_count_in, fresh);
}

int lct__tenant_room(const lct__tenant *t, uint64_t need, uint64_t replaced, char *why, size_t cap) {
  if (t->quota == LCT__QUOTA_NONE)
    return 0;
  const lct__tenant_usage *u = t->usage;
  uint64_t used = u->stored_bytes + u->pending;
  uint64_t after = used - (replaced < used ? replaced : used);
  if (need <= t->quota && after <= t->quota - need)
    return 0;
  int n = snprintf(why, cap, "tenant '%s' quota of %" PRIu64 " bytes: %" PRIu64 " in use, this put needs %" PRIu64
                   " (its worst-case coded size)", t->name, t->quota, used, need);
  if (replaced > 0 && n > 0 && (size_t)n < cap)
    snprintf(why + n, cap - (size_t)n, " and gives back the %" PRIu64 " of the version it replaces", replaced);
  return LCT_ENOSPC;
}

void lct__tenant_hold(const lct__tenant *t, uint64_t bytes) { t->usage->pending += bytes; }

void lct__tenant_release(const lct__tenant *t, uint64_t bytes) {
  t->usage->pending -= bytes < t->usage->pending ? bytes : t->usage->pending;
}

char *lct__access_metrics(const lct__access *a, const lct__tenant *only, size_t *len) {
  char *text = NULL;
  FILE *f = open_memstream(&text, len);
  if (f == NULL)
    return NULL;
  static const struct {
    const char *name, *help;
  } gauges[] = {
      {"tensors", "Tensors stored under the tenant's prefix."},
      {"raw_bytes", "Raw bytes of the tensors under the tenant's prefix."},
      {"stored_bytes", "Coded bytes of the tensors under the tenant's prefix: what its quota bounds."},
      {"used_bytes", "Stored bytes plus the worst-case coded size of the tenant's puts in progress."},
      {"quota_bytes", "The tenant's quota of stored bytes (tenants with one)."},
  };
  for (size_t g = 0; a != NULL && a->n > 0 && g < sizeof gauges / sizeof *gauges; g++) {
    fprintf(f, "# HELP lct_tenant_%s %s\n# TYPE lct_tenant_%s gauge\n", gauges[g].name, gauges[g].help,
            gauges[g].name);
    for (size_t i = 0; i < a->n; i++) {
      const lct__tenant *t = &a->tenants[i];
      const lct__tenant_usage *u = t->usage;
      const uint64_t v[] = {u->tensors, u->raw_bytes, u->stored_bytes, u->stored_bytes + u->pending, t->quota};
      if ((only == NULL || only == t) && (g != 4 || t->quota != LCT__QUOTA_NONE))
        fprintf(f, "lct_tenant_%s{tenant=\"%s\"} %" PRIu64 "\n", gauges[g].name, t->name, v[g]);
    }
  }
  if (fclose(f) != 0) {
    free(text);
    return NULL;
  }
  return text;
}
