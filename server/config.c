/* config.c — lctd settings: the table, value parsers, config file and command line. */
#include "config.h"

#include <assert.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "lct_error.h"
#include "lct_wire.h"

typedef enum { LCT__CFG_SIZE, LCT__CFG_MS, LCT__CFG_INT, LCT__CFG_ENUM, LCT__CFG_LIST, LCT__CFG_STR } lct__cfg_type;

typedef struct lct__cfg_def {
  const char *name;
  lct__cfg_type type;
  size_t offset;          /* field in lct__config */
  uint64_t min, max;      /* bounds for SIZE, MS and INT */
  const char *deflt;      /* default, in the text form a user would write */
  const char *const *choices; /* ENUM names, index = value; NULL-terminated */
  const char *help;
} lct__cfg_def;

static const char *const lct__backends[] = {"auto", "cpu", "cuda", NULL};
static const char *const lct__levels[] = {"error", "warn", "info", "debug", NULL};

#define LCT__OFF(f) offsetof(lct__config, f)
#define LCT__GIB (UINT64_C(1) << 30)

static const lct__cfg_def lct__cfg_table[] = {
    {"listen", LCT__CFG_LIST, LCT__OFF(listen), 1, LCT__LISTEN_MAX,
     "ipc:///tmp/lctd.sock tcp://127.0.0.1:7878", NULL,
     "nanomsg endpoint to bind (repeat for several; the first use replaces the defaults)"},
    {"backend", LCT__CFG_ENUM, LCT__OFF(backend), 0, 0, "auto", lct__backends,
     "where tensors live: auto (cuda when a GPU is usable, else cpu), cpu, cuda"},
    {"memory", LCT__CFG_SIZE, LCT__OFF(memory), 0, UINT64_C(1) << 50, "0", NULL,
     "pool capacity (512M, 40G); 0: half the host memory (cpu) or 90% of free GPU memory (cuda)"},
    {"device", LCT__CFG_INT, LCT__OFF(device), 0, 255, "0", NULL, "CUDA device ordinal"},
    {"frame-size", LCT__CFG_SIZE, LCT__OFF(frame_size), LCT_FRAME_MIN, LCT_FRAME_MAX, "16M", NULL,
     "largest payload of one message; larger tensors travel in several"},
    {"segment-size", LCT__CFG_SIZE, LCT__OFF(segment_size), 64 << 10, LCT_FRAME_MAX, "1M", NULL,
     "largest raw bytes coded as one blob (multiple of 64K); segments encode and decode in parallel"},
    {"staging-memory", LCT__CFG_SIZE, LCT__OFF(staging_memory), 0, UINT64_C(1) << 50, "4G", NULL,
     "host bytes that chunked puts may hold before they commit"},
    {"max-pending-puts", LCT__CFG_INT, LCT__OFF(max_pending_puts), 1, 1 << 20, "1024", NULL,
     "chunked puts begun and not yet committed or aborted"},
    {"put-timeout", LCT__CFG_MS, LCT__OFF(put_timeout_ms), 10, UINT64_C(86400000), "30s", NULL,
     "a begun put idle this long is dropped and its memory reclaimed"},
    {"threads", LCT__CFG_INT, LCT__OFF(threads), 0, 1024, "0", NULL,
     "codec worker threads; 0: one per CPU"},
    {"log-level", LCT__CFG_ENUM, LCT__OFF(log_level), 0, 0, "info", lct__levels,
     "error, warn, info or debug"},
    {"http", LCT__CFG_STR, LCT__OFF(http), 0, 255, "", NULL,
     "HOST:PORT serving GET /metrics (Prometheus text), e.g. 127.0.0.1:9878; empty: off"},
};
#define LCT__CFG_COUNT (sizeof lct__cfg_table / sizeof lct__cfg_table[0])

static int lct__cfg_err(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return LCT_ECONFIG;
}

static const lct__cfg_def *lct__cfg_find(const char *name) {
  for (size_t i = 0; i < LCT__CFG_COUNT; i++)
    if (strcmp(lct__cfg_table[i].name, name) == 0)
      return &lct__cfg_table[i];
  return NULL;
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
    if (rc != 0)
      return lct__cfg_err(err, errlen, "%s: cannot parse '%s'", d->name, value);
    if (v < d->min || v > d->max)
      return lct__cfg_err(err, errlen, "%s: %s is outside [%" PRIu64 ", %" PRIu64 "]", d->name,
                          value, d->min, d->max);
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
    return lct__cfg_err(err, errlen, "%s: unknown value '%s'", d->name, value);
  case LCT__CFG_LIST:
    if (cfg->listen_source != source) {
      lct__listen_clear(cfg);
      cfg->listen_source = source;
    }
    if (*value == '\0')
      return lct__cfg_err(err, errlen, "%s: empty value", d->name);
    if ((uint64_t)cfg->n_listen >= d->max)
      return lct__cfg_err(err, errlen, "%s: more than %d endpoints", d->name, (int)d->max);
    if ((cfg->listen[cfg->n_listen] = strdup(value)) == NULL)
      return lct__cfg_err(err, errlen, "out of memory");
    cfg->n_listen++;
    return 0;
  case LCT__CFG_STR: {
    if (strlen(value) > d->max)
      return lct__cfg_err(err, errlen, "%s: longer than %d characters", d->name, (int)d->max);
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
    if (lct__cfg_table[i].type == LCT__CFG_STR) {
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
  return 0;
}

int lct__config_check(const lct__config *cfg, char *err, size_t errlen) {
  if (cfg->segment_size % (64 << 10) != 0)
    return lct__cfg_err(err, errlen, "segment-size must be a multiple of 64K");
  if (cfg->memory != 0 && cfg->memory < (1 << 20))
    return lct__cfg_err(err, errlen, "memory must be 0 (automatic) or at least 1M");
  if (cfg->n_listen == 0)
    return lct__cfg_err(err, errlen, "no listen endpoint");
  return 0;
}

static void lct__cfg_value(const lct__config *cfg, const lct__cfg_def *d, FILE *to) {
  const char *field = (const char *)cfg + d->offset;
  switch (d->type) {
  case LCT__CFG_SIZE:
  case LCT__CFG_MS:
    fprintf(to, "%" PRIu64 "%s", *(const uint64_t *)field, d->type == LCT__CFG_MS ? "ms" : "");
    break;
  case LCT__CFG_INT:
    fprintf(to, "%d", *(const int *)field);
    break;
  case LCT__CFG_ENUM:
    fputs(d->choices[*(const int *)field], to);
    break;
  case LCT__CFG_STR:
    fputs(*(char *const *)field, to);
    break;
  case LCT__CFG_LIST:
    break;
  }
}

void lct__config_usage(FILE *to) {
  for (size_t i = 0; i < LCT__CFG_COUNT; i++) {
    const lct__cfg_def *d = &lct__cfg_table[i];
    fprintf(to, "  --%-18s %s\n  %-20s default: %s\n", d->name, d->help, "", *d->deflt ? d->deflt : "(empty)");
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
    if (d->type == LCT__CFG_STR && **(char *const *)((const char *)cfg + d->offset) == '\0') {
      fprintf(to, "# %s (empty)\n", d->name);
      continue;
    }
    fprintf(to, "%s ", d->name);
    lct__cfg_value(cfg, d, to);
    fputc('\n', to);
  }
}
