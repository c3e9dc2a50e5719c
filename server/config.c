/* config.c — lctd settings: the table, value parsers, config file and command line. */
#include "config.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <grp.h>
#include <uv.h>

#include "lct_error.h"
#include "lct_wire.h"
#include "log.h"

typedef enum {
  LCT__CFG_SIZE,
  LCT__CFG_MS,
  LCT__CFG_INT,
  LCT__CFG_ENUM,
  LCT__CFG_LIST,
  LCT__CFG_STR,
  LCT__CFG_ADDR, /* HOST:PORT with an IP address, or off */
  LCT__CFG_MODE  /* octal permission bits */
} lct__cfg_type;

typedef struct lct__cfg_def {
  const char *name;       /* file key; the flag is --NAME with '-' for '_' */
  lct__cfg_type type;
  size_t offset;          /* field in lct__config */
  uint64_t min, max;      /* bounds for SIZE, MS, INT and MODE; longest STR */
  const char *deflt;      /* default, in the text form a user would write */
  const char *const *choices; /* ENUM names, index = value; NULL-terminated */
  int reloadable;         /* SIGHUP applies a change without a restart */
  const char *service;    /* value deploy/lctd.conf sets for the system service; NULL: the default */
  const char *help;
} lct__cfg_def;

static const char *const lct__backends[] = {"auto", "cpu", "cuda", NULL};
static const char *const lct__levels[] = {"error", "warn", "info", "debug", NULL};
static const char *const lct__off_on[] = {"off", "on", NULL};
static const char *const lct__stagings[] = {"pinned", "pageable", NULL};

#define LCT__OFF(f) offsetof(lct__config, f)
#define LCT__GIB (UINT64_C(1) << 30)

static const lct__cfg_def lct__cfg_table[] = {
    {"listen", LCT__CFG_LIST, LCT__OFF(listen), 1, LCT__LISTEN_MAX,
     "ipc:///tmp/lctd.sock tcp://127.0.0.1:7878", NULL, 0,
     "ipc:///run/lct/lctd.sock tcp://127.0.0.1:7878",
     "nanomsg endpoint to bind, tcp://HOST:PORT or ipc:///PATH (repeat for several; the first use replaces the defaults)"},
    {"backend", LCT__CFG_ENUM, LCT__OFF(backend), 0, 0, "auto", lct__backends, 0, NULL,
     "where tensors live: auto (cuda when a GPU is usable, else cpu), cpu, cuda"},
    {"memory", LCT__CFG_SIZE, LCT__OFF(memory), 0, UINT64_C(1) << 50, "0", NULL, 0, NULL,
     "pool capacity (512M, 40G), for cuda the most device memory it maps as blobs need it; 0: half the host memory "
     "(cpu) or 90% of free GPU memory (cuda)"},
    {"memory_slack", LCT__CFG_SIZE, LCT__OFF(memory_slack), 0, UINT64_C(1) << 50, "256M", NULL, 0, NULL,
     "cuda: device memory the pool keeps mapped beyond its blobs, in whole granules (2M on current GPUs), for the "
     "next puts; the pool maps device memory as blobs need it, up to memory, and unmaps what is freed beyond this"},
    {"ipc_idle", LCT__CFG_MS, LCT__OFF(ipc_idle_ms), 10, UINT64_C(86400000), "2s", NULL, 0, NULL,
     "cuda: a client's GPU allocation that lctd maps for device puts and gets (CUDA IPC) is unmapped after this "
     "long unused; until then, memory the client frees stays allocated on the GPU"},
    {"device", LCT__CFG_INT, LCT__OFF(device), 0, 255, "0", NULL, 0, NULL, "CUDA device ordinal"},
    {"host_staging", LCT__CFG_ENUM, LCT__OFF(host_staging), 0, 0, "pinned", lct__stagings, 0, NULL,
     "cuda: how the raw bytes of host-path puts and gets that lctd codes cross the bus: pinned (each codec "
     "worker copies them in 256K pieces through a pinned ring of its segment's size, 512K to 4M, its copies "
     "overlapping the DMA) or pageable (the driver stages them)"},
    {"frame_size", LCT__CFG_SIZE, LCT__OFF(frame_size), LCT_FRAME_MIN, LCT_FRAME_MAX, "16M", NULL, 0,
     NULL, "largest payload of one message; larger tensors travel in several"},
    {"segment_size", LCT__CFG_SIZE, LCT__OFF(segment_size), 64 << 10, LCT_FRAME_MAX, "1M", NULL, 0,
     NULL, "largest raw bytes coded as one blob (multiple of 64K); segments encode and decode in parallel"},
    {"staging_memory", LCT__CFG_SIZE, LCT__OFF(staging_memory), 0, UINT64_C(1) << 50, "4G", NULL, 1,
     NULL, "host bytes that chunked puts may hold before they commit"},
    {"max_pending_puts", LCT__CFG_INT, LCT__OFF(max_pending_puts), 1, 1 << 20, "1024", NULL, 1, NULL,
     "chunked puts begun and not yet committed or aborted"},
    {"put_timeout", LCT__CFG_MS, LCT__OFF(put_timeout_ms), 10, UINT64_C(86400000), "30s", NULL, 0,
     NULL, "a begun put idle this long is dropped and its memory reclaimed"},
    {"max_key_length", LCT__CFG_INT, LCT__OFF(max_key_length), 1, LCT_KEY_MAX, "1024", NULL, 1, NULL,
     "longest key (bytes) a put accepts; longer ones fail with LCT_ENAMETOOLONG"},
    {"max_tensor_size", LCT__CFG_SIZE, LCT__OFF(max_tensor_size), 0, UINT64_C(1) << 50, "0", NULL, 1,
     NULL, "largest raw tensor a put accepts (LCT_E2BIG beyond); 0: no limit"},
    {"max_requests", LCT__CFG_INT, LCT__OFF(max_requests), 1, 1 << 20, "1024", NULL, 1, NULL,
     "requests in flight (received, not yet answered) over all connections; at the limit lctd stops reading more"},
    {"request_memory", LCT__CFG_SIZE, LCT__OFF(request_memory), 1 << 20, UINT64_C(1) << 50, "1G", NULL, 1, NULL,
     "bytes in flight over all connections (request messages held, replies being built); lctd stops reading while "
     "less than one largest message (frame_size + 1M) is left"},
    {"max_client_requests", LCT__CFG_INT, LCT__OFF(max_client_requests), 1, 1 << 20, "16", NULL, 1, NULL,
     "requests in flight on one connection; more are answered LCT_EBUSY"},
    {"client_request_memory", LCT__CFG_SIZE, LCT__OFF(client_request_memory), 1 << 20, UINT64_C(1) << 50, "64M",
     NULL, 1, NULL,
     "bytes in flight on one connection; a request beyond them is answered LCT_EBUSY, unless it is the connection's only one"},
    {"threads", LCT__CFG_INT, LCT__OFF(threads), 0, 1024, "0", NULL, 0, NULL,
     "codec worker threads; 0: one per CPU"},
    {"inline_size", LCT__CFG_SIZE, LCT__OFF(inline_size), 0, 1 << 20, "64K", NULL, 1, NULL,
     "cpu backend: a put or get of up to this many raw bytes is coded on the loop thread, which costs less than "
     "the hand-off to a codec worker and back; 0: every one on the workers"},
    {"log_level", LCT__CFG_ENUM, LCT__OFF(log_level), 0, 0, "info", lct__levels, 1, NULL,
     "error, warn, info or debug"},
    {"metrics", LCT__CFG_ADDR, LCT__OFF(metrics), 0, 255, "off", NULL, 0, "127.0.0.1:9878",
     "HOST:PORT serving /metrics (Prometheus text) and /healthz over HTTP, or off; keep HOST loopback"},
    {"port_offset", LCT__CFG_INT, LCT__OFF(port_offset), 0, 1000, "0", NULL, 0, NULL,
     "added to the port of every tcp listen endpoint and of metrics once every file and flag is read: one "
     "configuration for one lctd per GPU (lctd@N.service passes N); --print-config shows the ports it makes"},
    {"auth_token_file", LCT__CFG_STR, LCT__OFF(auth_token_file), 0, 4095, "", NULL, 1, NULL,
     "file whose first line is a token that gives every key on endpoints that authenticate (tcp); clients "
     "prove it by challenge-response; empty: no token"},
    {"access_file", LCT__CFG_STR, LCT__OFF(access_file), 0, 4095, "", NULL, 1, NULL,
     "tenants: file of 'tenant NAME TOKEN PREFIX QUOTA' lines, each token confined to keys starting with its "
     "prefix and to a quota of stored bytes, and 'endpoints tcp [ipc]'; empty: no tenants"},
    {"auth_plain_token", LCT__CFG_ENUM, LCT__OFF(auth_plain_token), 0, 0, "off", lct__off_on, 1, NULL,
     "on: also accept a token sent as it is (clients before challenge-response; it travels in clear); "
     "off: only challenge-response"},
    {"ipc_mode", LCT__CFG_MODE, LCT__OFF(ipc_mode), 0, 0777, "0660", NULL, 0, NULL,
     "permission bits of ipc sockets (who may connect)"},
    {"ipc_group", LCT__CFG_STR, LCT__OFF(ipc_group), 0, 255, "", NULL, 0, NULL,
     "group owning ipc sockets; empty: the daemon's group"},
    {"persist_dir", LCT__CFG_STR, LCT__OFF(persist_dir), 0, 4095, "", NULL, 0, "/var/lib/lct",
     "directory where tensors are saved on shutdown, every save_interval and on the save op, and restored from "
     "at start; empty: none"},
    {"save_interval", LCT__CFG_MS, LCT__OFF(save_interval_ms), 0, UINT64_C(86400000), "60s", NULL, 1, NULL,
     "with persist_dir, how often the tensors changed since the last save are saved in the background "
     "(at least 1s); 0: only at stop and on the save op"},
    {"drain_timeout", LCT__CFG_MS, LCT__OFF(drain_timeout_ms), 100, UINT64_C(3600000), "10s", NULL, 0,
     NULL, "on SIGTERM or SIGINT, how long in-flight requests may take before lctd exits anyway"},
};
#define LCT__CFG_COUNT (sizeof lct__cfg_table / sizeof lct__cfg_table[0])

static int lct__cfg_err(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return LCT_ECONFIG;
}

/* Flags spell '_' as '-'; the file may use either. */
static int lct__cfg_name_eq(const char *a, const char *b) {
  for (; *a != '\0' && *b != '\0'; a++, b++)
    if (*a != *b && !((*a == '-' || *a == '_') && (*b == '-' || *b == '_')))
      return 0;
  return *a == *b;
}

static const lct__cfg_def *lct__cfg_find(const char *name) {
  for (size_t i = 0; i < LCT__CFG_COUNT; i++)
    if (lct__cfg_name_eq(lct__cfg_table[i].name, name))
      return &lct__cfg_table[i];
  return NULL;
}

/* What a setting accepts, for error messages and --help. */
static void lct__cfg_allowed(const lct__cfg_def *d, char *buf, size_t len) {
  switch (d->type) {
  case LCT__CFG_SIZE:
    snprintf(buf, len, "a size from %" PRIu64 " to %" PRIu64 " bytes, e.g. 64K, 16M, 40G", d->min,
             d->max);
    return;
  case LCT__CFG_MS:
    snprintf(buf, len, "a duration from %" PRIu64 "ms to %" PRIu64 "ms, e.g. 500ms, 30s, 5m, 2h",
             d->min, d->max);
    return;
  case LCT__CFG_INT:
    snprintf(buf, len, "an integer from %" PRIu64 " to %" PRIu64, d->min, d->max);
    return;
  case LCT__CFG_ENUM: {
    size_t n = (size_t)snprintf(buf, len, "one of");
    for (int i = 0; d->choices[i] != NULL && n < len; i++)
      n += (size_t)snprintf(buf + n, len - n, "%s %s", i ? "," : "", d->choices[i]);
    return;
  }
  case LCT__CFG_LIST:
    snprintf(buf, len, "tcp://HOST:PORT or ipc:///PATH, at most %" PRIu64 " endpoints", d->max);
    return;
  case LCT__CFG_STR:
    snprintf(buf, len, "at most %" PRIu64 " characters", d->max);
    return;
  case LCT__CFG_ADDR:
    snprintf(buf, len, "off, or HOST:PORT with an IPv4 or [IPv6] address and a port 1..65535");
    return;
  case LCT__CFG_MODE:
    snprintf(buf, len, "octal permission bits from 0000 to %04" PRIo64, d->max);
    return;
  }
}

/* The one-line error for a value a setting does not accept. */
static int lct__cfg_bad(char *err, size_t errlen, const lct__cfg_def *d, const char *value) {
  char allowed[160];
  lct__cfg_allowed(d, allowed, sizeof allowed);
  return lct__cfg_err(err, errlen, "%s: '%s' is not allowed: expected %s", d->name, value, allowed);
}

int lct__config_parse_addr(const char *addr, struct sockaddr_storage *sa) {
  char host[256];
  const char *colon = strrchr(addr, ':');
  size_t hl = colon ? (size_t)(colon - addr) : 0;
  if (colon == NULL || hl == 0 || hl >= sizeof host)
    return LCT_ECONFIG;
  memcpy(host, addr, hl);
  host[hl] = '\0';
  int bracketed = host[0] == '[' && hl >= 2 && host[hl - 1] == ']';
  if (bracketed) { /* [::1]:9878 */
    memmove(host, host + 1, hl - 2);
    host[hl - 2] = '\0';
  }
  char *end;
  errno = 0;
  long port = strtol(colon + 1, &end, 10);
  if (errno != 0 || end == colon + 1 || *end != '\0' || port <= 0 || port > 65535)
    return LCT_ECONFIG;
  memset(sa, 0, sizeof *sa);
  if (!bracketed && uv_ip4_addr(host, (int)port, (struct sockaddr_in *)sa) == 0)
    return 0;
  if (uv_ip6_addr(host, (int)port, (struct sockaddr_in6 *)sa) == 0)
    return 0;
  return LCT_ECONFIG;
}

/* Parses a non-negative decimal integer and a unit suffix. */
static int lct__parse_scaled(const char *text, const char *const *units, const uint64_t *scale,
                             uint64_t *out) {
  if (text == NULL || *text < '0' || *text > '9')
    return LCT_EINVAL;
  errno = 0;
  char *end;
  unsigned long long v = strtoull(text, &end, 10);
  if (errno != 0)
    return LCT_EINVAL;
  for (size_t i = 0; units[i] != NULL; i++) {
    if (strcasecmp(end, units[i]) == 0) {
      if (scale[i] != 0 && v > UINT64_MAX / scale[i])
        return LCT_EINVAL;
      *out = (uint64_t)v * scale[i];
      return 0;
    }
  }
  return LCT_EINVAL;
}

int lct__parse_size(const char *text, uint64_t *out) {
  static const char *const units[] = {"",   "b",   "k",   "kb",  "kib", "m", "mb", "mib",
                                      "g",  "gb",  "gib", "t",   "tb",  "tib", NULL};
  static const uint64_t scale[] = {1,       1,       1 << 10, 1 << 10, 1 << 10,
                                   1 << 20, 1 << 20, 1 << 20, LCT__GIB, LCT__GIB,
                                   LCT__GIB, LCT__GIB << 10, LCT__GIB << 10, LCT__GIB << 10};
  return lct__parse_scaled(text, units, scale, out);
}

int lct__parse_ms(const char *text, uint64_t *out) {
  static const char *const units[] = {"", "ms", "s", "m", "h", NULL};
  static const uint64_t scale[] = {1, 1, 1000, 60000, 3600000};
  return lct__parse_scaled(text, units, scale, out);
}

static void lct__listen_clear(lct__config *cfg) {
  for (int i = 0; i < cfg->n_listen; i++)
    free(cfg->listen[i]);
  cfg->n_listen = 0;
}

static int lct__cfg_apply(lct__config *cfg, const lct__cfg_def *d, const char *value, int source,
                          char *err, size_t errlen) {
  char *field = (char *)cfg + d->offset;
  uint64_t v;
  switch (d->type) {
  case LCT__CFG_SIZE:
  case LCT__CFG_MS:
  case LCT__CFG_INT: {
    int rc = d->type == LCT__CFG_SIZE ? lct__parse_size(value, &v)
             : d->type == LCT__CFG_MS ? lct__parse_ms(value, &v)
                                      : lct__parse_scaled(value, (const char *const[]){"", NULL},
                                                          (const uint64_t[]){1}, &v);
    if (rc != 0 || v < d->min || v > d->max)
      return lct__cfg_bad(err, errlen, d, value);
    if (d->type == LCT__CFG_INT)
      *(int *)field = (int)v;
    else
      *(uint64_t *)field = v;
    return 0;
  }
  case LCT__CFG_ENUM:
    for (int i = 0; d->choices[i] != NULL; i++) {
      if (strcmp(d->choices[i], value) == 0) {
        *(int *)field = i;
        return 0;
      }
    }
    return lct__cfg_bad(err, errlen, d, value);
  case LCT__CFG_MODE: {
    char *end;
    errno = 0;
    unsigned long m = strtoul(value, &end, 8);
    if (*value < '0' || *value > '7' || errno != 0 || *end != '\0' || m > d->max)
      return lct__cfg_bad(err, errlen, d, value);
    *(int *)field = (int)m;
    return 0;
  }
  case LCT__CFG_LIST:
    if (cfg->listen_source != source) {
      lct__listen_clear(cfg);
      cfg->listen_source = source;
    }
    if ((strncmp(value, "tcp://", 6) != 0 && strncmp(value, "ipc:///", 7) != 0) ||
        value[6] == '\0' || strlen(value) > 255 || (uint64_t)cfg->n_listen >= d->max)
      return lct__cfg_bad(err, errlen, d, value);
    if ((cfg->listen[cfg->n_listen] = strdup(value)) == NULL)
      return lct__cfg_err(err, errlen, "out of memory");
    cfg->n_listen++;
    return 0;
  case LCT__CFG_STR:
  case LCT__CFG_ADDR: {
    struct sockaddr_storage sa;
    if (strlen(value) > d->max)
      return lct__cfg_bad(err, errlen, d, value);
    if (d->type == LCT__CFG_ADDR && strcmp(value, "off") == 0)
      value = "";
    else if (d->type == LCT__CFG_ADDR && *value != '\0' && lct__config_parse_addr(value, &sa) != 0)
      return lct__cfg_bad(err, errlen, d, value);
    char *copy = strdup(value);
    if (copy == NULL)
      return lct__cfg_err(err, errlen, "out of memory");
    free(*(char **)field);
    *(char **)field = copy;
    return 0;
  }
  }
  return lct__cfg_err(err, errlen, "%s: bad table entry", d->name);
}

int lct__config_set(lct__config *cfg, const char *name, const char *value, int source, char *err,
                    size_t errlen) {
  const lct__cfg_def *d = lct__cfg_find(name);
  if (d == NULL)
    return lct__cfg_err(err, errlen, "unknown setting '%s'", name);
  return lct__cfg_apply(cfg, d, value, source, err, errlen);
}

void lct__config_init(lct__config *cfg) {
  memset(cfg, 0, sizeof *cfg);
  char err[128];
  for (size_t i = 0; i < LCT__CFG_COUNT; i++) {
    const lct__cfg_def *d = &lct__cfg_table[i];
    if (d->type != LCT__CFG_LIST) {
      int rc = lct__cfg_apply(cfg, d, d->deflt, 0, err, sizeof err);
      assert(rc == 0 && "table default out of its own bounds");
      (void)rc;
      continue;
    }
    /* The default list is space-separated. */
    char buf[256];
    snprintf(buf, sizeof buf, "%s", d->deflt);
    for (char *save, *tok = strtok_r(buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
      int rc = lct__cfg_apply(cfg, d, tok, 0, err, sizeof err);
      assert(rc == 0 && "table default out of its own bounds");
      (void)rc;
    }
  }
}

void lct__config_free(lct__config *cfg) {
  lct__listen_clear(cfg);
  for (size_t i = 0; i < LCT__CFG_COUNT; i++)
    if (lct__cfg_table[i].type == LCT__CFG_STR || lct__cfg_table[i].type == LCT__CFG_ADDR) {
      char **field = (char **)((char *)cfg + lct__cfg_table[i].offset);
      free(*field);
      *field = NULL;
    }
}

int lct__config_load(lct__config *cfg, const char *path, char *err, size_t errlen) {
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return lct__cfg_err(err, errlen, "%s: %s", path, strerror(errno));
  char line[4096];
  int lineno = 0, rc = 0;
  while (rc == 0 && fgets(line, sizeof line, f) != NULL) {
    lineno++;
    size_t n = strlen(line);
    if (n == sizeof line - 1 && line[n - 1] != '\n') {
      rc = lct__cfg_err(err, errlen, "%s:%d: line too long", path, lineno);
      break;
    }
    char *hash = strchr(line, '#');
    if (hash != NULL)
      *hash = '\0';
    char *save, *name = strtok_r(line, " \t\r\n", &save);
    if (name == NULL)
      continue;
    char *value = strtok_r(NULL, " \t\r\n", &save);
    if (value == NULL || strtok_r(NULL, " \t\r\n", &save) != NULL) {
      rc = lct__cfg_err(err, errlen, "%s:%d: expected 'name value'", path, lineno);
      break;
    }
    char sub[512];
    if ((rc = lct__config_set(cfg, name, value, 1, sub, sizeof sub)) != 0)
      lct__cfg_err(err, errlen, "%s:%d: %s", path, lineno, sub);
  }
  fclose(f);
  return rc;
}

/* *text with port_offset added to the port after its last ':' (setting: its name, for errors). */
static int lct__port_shift(char **text, int offset, const char *setting, char *err, size_t errlen) {
  char *colon = strrchr(*text, ':');
  char *end;
  errno = 0;
  unsigned long port = colon != NULL ? strtoul(colon + 1, &end, 10) : 0;
  if (colon == NULL || end == colon + 1 || *end != '\0' || errno != 0 || port + (unsigned long)offset > 65535)
    return lct__cfg_err(err, errlen, "%s: '%s': port_offset %d needs a port of at most %d", setting, *text, offset,
                        65535 - offset);
  size_t len = (size_t)(colon - *text) + 7;
  char *shifted = malloc(len);
  if (shifted == NULL)
    return lct__cfg_err(err, errlen, "out of memory");
  snprintf(shifted, len, "%.*s:%lu", (int)(colon - *text), *text, port + (unsigned long)offset);
  free(*text);
  *text = shifted;
  return 0;
}

/* Applies port_offset to the tcp endpoints and metrics, once: it is 0 afterwards, so
 * that --print-config's output, read again, makes the same ports. */
static int lct__config_offset_ports(lct__config *cfg, char *err, size_t errlen) {
  int offset = cfg->port_offset;
  int rc = 0;
  for (int i = 0; i < cfg->n_listen && rc == 0 && offset != 0; i++)
    if (strncmp(cfg->listen[i], "tcp://", 6) == 0)
      rc = lct__port_shift(&cfg->listen[i], offset, "listen", err, errlen);
  if (rc == 0 && offset != 0 && *cfg->metrics != '\0')
    rc = lct__port_shift(&cfg->metrics, offset, "metrics", err, errlen);
  cfg->port_offset = 0;
  return rc;
}

int lct__config_args(lct__config *cfg, int argc, char **argv, char *err, size_t errlen) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--config") == 0) {
      if (i + 1 >= argc)
        return lct__cfg_err(err, errlen, "--config needs a file");
      int rc = lct__config_load(cfg, argv[++i], err, errlen);
      if (rc != 0)
        return rc;
    } else if (strncmp(argv[i], "--config=", 9) == 0) {
      int rc = lct__config_load(cfg, argv[i] + 9, err, errlen);
      if (rc != 0)
        return rc;
    }
  }
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    if (strncmp(arg, "--", 2) != 0)
      return lct__cfg_err(err, errlen, "unexpected argument '%s'", arg);
    arg += 2;
    char name[64];
    const char *value;
    const char *eq = strchr(arg, '=');
    if (eq != NULL) {
      if ((size_t)(eq - arg) >= sizeof name)
        return lct__cfg_err(err, errlen, "unknown option '%s'", argv[i]);
      memcpy(name, arg, (size_t)(eq - arg));
      name[eq - arg] = '\0';
      value = eq + 1;
    } else {
      if (strlen(arg) >= sizeof name)
        return lct__cfg_err(err, errlen, "unknown option '%s'", argv[i]);
      strcpy(name, arg);
      if (i + 1 >= argc)
        return lct__cfg_err(err, errlen, "--%s needs a value", name);
      value = argv[++i];
    }
    if (strcmp(name, "config") == 0)
      continue;
    int rc = lct__config_set(cfg, name, value, 2, err, errlen);
    if (rc != 0)
      return rc;
  }
  return lct__config_offset_ports(cfg, err, errlen);
}

int lct__config_check(const lct__config *cfg, char *err, size_t errlen) {
  if (cfg->segment_size % (64 << 10) != 0)
    return lct__cfg_err(err, errlen, "segment_size: '%" PRIu64 "' is not allowed: expected a multiple of 64K",
                        cfg->segment_size);
  if (cfg->memory != 0 && cfg->memory < (1 << 20))
    return lct__cfg_err(err, errlen, "memory: '%" PRIu64 "' is not allowed: expected 0 (automatic) or at least 1M",
                        cfg->memory);
  if (cfg->save_interval_ms != 0 && cfg->save_interval_ms < 1000)
    return lct__cfg_err(err, errlen,
                        "save_interval: '%" PRIu64 "ms' is not allowed: expected 0 (off) or at least 1s",
                        cfg->save_interval_ms);
  if (cfg->n_listen == 0)
    return lct__cfg_err(err, errlen, "listen: no endpoint: expected tcp://HOST:PORT or ipc:///PATH");
  if (*cfg->ipc_group != '\0' && getgrnam(cfg->ipc_group) == NULL)
    return lct__cfg_err(err, errlen, "ipc_group: '%s' is not allowed: expected the name of an existing group",
                        cfg->ipc_group);
  return 0;
}

/* The value of a setting in config-file syntax (a list space-separated). */
static void lct__cfg_value(const lct__config *cfg, const lct__cfg_def *d, char *buf, size_t len) {
  const char *field = (const char *)cfg + d->offset;
  switch (d->type) {
  case LCT__CFG_SIZE:
    snprintf(buf, len, "%" PRIu64, *(const uint64_t *)field);
    return;
  case LCT__CFG_MS:
    snprintf(buf, len, "%" PRIu64 "ms", *(const uint64_t *)field);
    return;
  case LCT__CFG_INT:
    snprintf(buf, len, "%d", *(const int *)field);
    return;
  case LCT__CFG_MODE:
    snprintf(buf, len, "%04o", (unsigned)*(const int *)field);
    return;
  case LCT__CFG_ENUM:
    snprintf(buf, len, "%s", d->choices[*(const int *)field]);
    return;
  case LCT__CFG_STR:
  case LCT__CFG_ADDR: {
    const char *v = *(char *const *)field;
    snprintf(buf, len, "%s", d->type == LCT__CFG_ADDR && *v == '\0' ? "off" : v);
    return;
  }
  case LCT__CFG_LIST: {
    size_t n = 0;
    buf[0] = '\0';
    for (int j = 0; j < cfg->n_listen && n < len; j++)
      n += (size_t)snprintf(buf + n, len - n, "%s%s", j ? " " : "", cfg->listen[j]);
    return;
  }
  }
}

static void lct__cfg_flag(const lct__cfg_def *d, char *buf, size_t len) {
  snprintf(buf, len, "--%s", d->name);
  for (char *p = buf; *p; p++)
    if (*p == '_')
      *p = '-';
}

void lct__config_usage(FILE *to) {
  for (size_t i = 0; i < LCT__CFG_COUNT; i++) {
    const lct__cfg_def *d = &lct__cfg_table[i];
    char flag[64], allowed[160];
    lct__cfg_flag(d, flag, sizeof flag);
    lct__cfg_allowed(d, allowed, sizeof allowed);
    fprintf(to, "  %s VALUE  (file key: %s%s)\n      %s\n      allowed: %s\n      default: %s\n", flag,
            d->name, d->reloadable ? "; reloaded on SIGHUP" : "", d->help, allowed,
            *d->deflt ? d->deflt : "(empty)");
  }
}

void lct__config_dump(const lct__config *cfg, FILE *to) {
  for (size_t i = 0; i < LCT__CFG_COUNT; i++) {
    const lct__cfg_def *d = &lct__cfg_table[i];
    if (d->type == LCT__CFG_LIST) {
      for (int j = 0; j < cfg->n_listen; j++)
        fprintf(to, "%s %s\n", d->name, cfg->listen[j]);
      continue;
    }
    char v[4200];
    lct__cfg_value(cfg, d, v, sizeof v);
    if (*v == '\0')
      fprintf(to, "# %s (empty)\n", d->name);
    else
      fprintf(to, "%s %s\n", d->name, v);
  }
}

void lct__config_example(FILE *to) {
  fputs("# lctd.conf — lctd's configuration as installed for the system service (deploy/install.sh puts it\n"
        "# in /etc/lct/lctd.conf). Every line is `name value`; '#' starts a comment. Each setting is also a\n"
        "# flag, --name-with-dashes VALUE, and flags win over this file. Settings marked 'reloadable' take\n"
        "# effect on SIGHUP (systemctl reload lctd); the others at the next start.\n"
        "#\n"
        "# Generated by `lctd --example-config` from the settings table (server/config.c); a test fails\n"
        "# when the two disagree. Commented lines show the built-in default.\n",
        to);
  for (size_t i = 0; i < LCT__CFG_COUNT; i++) {
    const lct__cfg_def *d = &lct__cfg_table[i];
    char allowed[160];
    lct__cfg_allowed(d, allowed, sizeof allowed);
    fprintf(to, "\n# %s\n# allowed: %s%s\n", d->help, allowed, d->reloadable ? "; reloadable" : "");
    const char *v = d->service != NULL ? d->service : d->deflt;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", v);
    const char *lead = d->service != NULL ? "" : "# ";
    if (*buf == '\0') {
      fprintf(to, "%s%s\n", lead, d->name);
      continue;
    }
    for (char *save, *tok = strtok_r(buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save))
      fprintf(to, "%s%s %s\n", lead, d->name, tok);
  }
}

int lct__config_reload(lct__config *cfg, const lct__config *fresh) {
  int taken = 0;
  for (size_t i = 0; i < LCT__CFG_COUNT; i++) {
    const lct__cfg_def *d = &lct__cfg_table[i];
    char was[4200], now[4200];
    lct__cfg_value(cfg, d, was, sizeof was);
    lct__cfg_value(fresh, d, now, sizeof now);
    if (strcmp(was, now) == 0)
      continue;
    if (!d->reloadable) {
      lct__log_warn("reload: %s changed ('%s' -> '%s'); it takes effect at the next start", d->name, was,
                    now);
      continue;
    }
    char *dst = (char *)cfg + d->offset;
    const char *src = (const char *)fresh + d->offset;
    if (d->type == LCT__CFG_STR || d->type == LCT__CFG_ADDR) {
      char *copy = strdup(*(char *const *)src);
      if (copy == NULL) {
        lct__log_error("reload: %s: out of memory; kept '%s'", d->name, was);
        continue;
      }
      free(*(char **)dst);
      *(char **)dst = copy;
    } else if (d->type == LCT__CFG_SIZE || d->type == LCT__CFG_MS) {
      *(uint64_t *)dst = *(const uint64_t *)src;
    } else {
      *(int *)dst = *(const int *)src;
    }
    lct__log_info("reload: %s '%s' -> '%s'", d->name, was, now);
    taken++;
  }
  return taken;
}
