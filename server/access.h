/* access.h — tenants: the access file's tokens, key prefixes and quotas, and what each tenant has stored. */
#ifndef LCT_SERVER_ACCESS_H
#define LCT_SERVER_ACCESS_H

#include <stddef.h>
#include <stdint.h>

#include "entry.h"
#include "store.h"

#define LCT__TENANT_NAME_MAX 64  /* letters, digits, '_', '-', '.' */
#define LCT__TENANTS_MAX 1024    /* tenants one access file may name */
#define LCT__QUOTA_NONE UINT64_MAX /* "unlimited" */

/* What a tenant holds, shared by every loaded version of the access file
 * that names the tenant, so that a reload keeps the puts in progress. */
typedef struct lct__tenant_usage {
  int refs;
  uint64_t tensors;      /* keys under the tenant's prefix, whoever put them */
  uint64_t raw_bytes;    /* their raw bytes */
  uint64_t stored_bytes; /* their coded bytes in the pool: what the quota bounds */
  uint64_t pending;      /* worst-case coded bytes of the tenant's puts in progress */
} lct__tenant_usage;

typedef struct lct__tenant {
  char name[LCT__TENANT_NAME_MAX + 1];
  uint8_t *token;
  size_t token_len;
  uint8_t *prefix;       /* every key the tenant uses starts with it */
  size_t prefix_len;
  uint64_t quota;        /* stored bytes, or LCT__QUOTA_NONE */
  lct__tenant_usage *usage;
} lct__tenant;

/* One loaded access file. Requests hold a reference while they run, so a
 * reload never pulls a tenant from under one. */
typedef struct lct__access {
  int refs;
  int ipc;               /* ipc endpoints authenticate too (endpoints tcp ipc) */
  size_t n;
  lct__tenant *tenants;  /* sorted by prefix, bytewise; no prefix starts another */
} lct__access;

/* Reads the access file at path (PROTOCOL.md and deploy/README.md give its
 * lines) into *out with one reference; an empty path gives NULL. A token
 * equal to another tenant's or to admin_token (auth_token_file's, admin_len
 * 0 for none) is refused. Returns 0 or LCT_ECONFIG with a one-line message
 * naming access_file, the path, the line and what is expected. */
int lct__access_load(const char *path, const uint8_t *admin_token, size_t admin_len, lct__access **out, char *err,
                     size_t errlen);
void lct__access_ref(lct__access *a);
/* Drops a reference (NULL: nothing); the last frees the tenants, tokens wiped. */
void lct__access_unref(lct__access *a);
/* Whether two loads name the same tenants alike (NULL for none). */
int lct__access_equal(const lct__access *a, const lct__access *b);

/* Readies fresh to replace old (either may be NULL): a tenant old names too
 * keeps its usage (its puts in progress), and the counts of every tenant are
 * taken anew from store, whose entries the prefixes may now divide otherwise. */
void lct__access_adopt(lct__access *fresh, const lct__access *old, const lct__store *store);

/* The tenant whose prefix key starts with; NULL if none. */
const lct__tenant *lct__access_owner(const lct__access *a, const uint8_t *key, size_t len);
/* Whether key starts with t's prefix. */
int lct__tenant_has(const lct__tenant *t, const uint8_t *key, size_t len);

/* The store's observer: counts e (sign +1, published; -1, unpublished) for the
 * tenant whose prefix its key starts with. arg is the lct__server. */
void lct__access_count(void *srv, const lct__entry *e, int sign);

/* Whether t may begin a put that needs up to need coded bytes and replaces
 * a version of replaced stored bytes: 0, or LCT_ENOSPC with why naming the
 * quota, the bytes in use and the need. */
int lct__tenant_room(const lct__tenant *t, uint64_t need, uint64_t replaced, char *why, size_t cap);
/* Counts bytes of a put in progress against t's quota until released. */
void lct__tenant_hold(const lct__tenant *t, uint64_t bytes);
void lct__tenant_release(const lct__tenant *t, uint64_t bytes);

/* Prometheus text of the tenants' gauges (only that tenant's when only is
 * not NULL); malloc'd, NULL when out of memory; "" for no tenants. */
char *lct__access_metrics(const lct__access *a, const lct__tenant *only, size_t *len);

#endif
