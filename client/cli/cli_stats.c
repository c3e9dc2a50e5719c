/* cli_stats.c — `lct stats` for people: lctd's counters summarized, with ratios by dtype and latency from its metrics. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#define GROUPS_MAX 32 /* label values kept per summary line (dtypes, histogram buckets, reasons, kinds) */

/* One sample of Prometheus text: name{labels} value. */
typedef struct sample {
  const char *name;
  size_t name_len;
  const char *labels; /* between the braces; "" when none */
  size_t labels_len;
  double value;
} sample;

/* The next sample of *text, skipping comments, blank and malformed lines; 0 at the end. */
static int next_sample(const char **text, sample *s) {
  for (const char *line = *text; *line; line = *text) {
    const char *end = strchr(line, '\n');
    *text = end ? end + 1 : line + strlen(line);
    if (*line == '#' || *line == '\n') continue;
    const char *p = line;
    while (p < *text && (*p == '_' || *p == ':' || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                         (p > line && *p >= '0' && *p <= '9')))
      p++;
    s->name = line;
    s->name_len = (size_t)(p - line);
    s->labels = "";
    s->labels_len = 0;
    if (*p == '{') {
      const char *q = ++p;
      for (int quoted = 0; q < *text && (quoted || *q != '}'); q++) {
        if (*q == '\\' && quoted) q++;
        else if (*q == '"') quoted = !quoted;
      }
      if (q >= *text) continue;
      s->labels = p;
      s->labels_len = (size_t)(q - p);
      p = q + 1;
    }
    char *after;
    s->value = strtod(p, &after); /* "+Inf" and "NaN" included */
    if (s->name_len > 0 && after != p && after <= *text) return 1;
  }
  return 0;
}

static int is(const sample *s, const char *name) {
  return s->name_len == strlen(name) && memcmp(s->name, name, s->name_len) == 0;
}

/* The value of label key of s into buf (cap bytes, escapes left as they are); 0 when absent. */
static int label(const sample *s, const char *key, char *buf, size_t cap) {
  size_t klen = strlen(key);
  for (const char *p = s->labels, *end = s->labels + s->labels_len; p < end;) {
    const char *eq = memchr(p, '=', (size_t)(end - p));
    if (eq == NULL || eq + 1 >= end || eq[1] != '"') return 0;
    const char *v = eq + 2, *q = v;
    while (q < end && *q != '"') q += *q == '\\' ? 2 : 1;
    if (q >= end) return 0;
    if ((size_t)(eq - p) == klen && memcmp(p, key, klen) == 0) {
      snprintf(buf, cap, "%.*s", (int)(q - v), v);
      return 1;
    }
    p = q + 1;
    if (p < end && *p == ',') p++;
  }
  return 0;
}

/* Values summed per label value, in the order the values first appear. */
typedef struct groups {
  size_t n;
  char key[GROUPS_MAX][32];
  double a[GROUPS_MAX], b[GROUPS_MAX];
} groups;

static double *group(groups *g, const char *key, int second) {
  size_t i = 0;
  while (i < g->n && strcmp(g->key[i], key) != 0) i++;
  if (i == g->n) {
    if (g->n == GROUPS_MAX) return NULL;
    snprintf(g->key[g->n], sizeof g->key[0], "%s", key);
    g->a[g->n] = g->b[g->n] = 0;
    g->n++;
  }
  return second ? &g->b[i] : &g->a[i];
}

/* Adds s's value to the group of its label key (second: the group's b). */
static void add(groups *g, const sample *s, const char *key, int second) {
  char value[32];
  double *slot;
  if (label(s, key, value, sizeof value) && (slot = group(g, value, second)) != NULL) *slot += s->value;
}

/* "512 bytes", "1.5 MiB"; with exact, the byte count follows a rounded size. */
static const char *bytes_text(uint64_t n, int exact, char *buf, size_t cap) {
  static const char *const units[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = (double)n;
  size_t u = 0;
  while (v >= 1024 && u + 1 < sizeof units / sizeof units[0]) v /= 1024, u++;
  if (u == 0) snprintf(buf, cap, "%" PRIu64 " bytes", n);
  else if (exact) snprintf(buf, cap, "%.1f %s (%" PRIu64 " bytes)", v, units[u], n);
  else snprintf(buf, cap, "%.1f %s", v, units[u]);
  return buf;
}

static const char *seconds_text(double s, char *buf, size_t cap) {
  if (s < 1e-3) snprintf(buf, cap, "%.0f us", s * 1e6);
  else if (s < 1) snprintf(buf, cap, "%.3g ms", s * 1e3);
  else snprintf(buf, cap, "%.3g s", s);
  return buf;
}

/* The bound of the histogram bucket holding quantile q of count requests
 * (buckets: cumulative counts summed over ops, by upper bound le). */
static const char *quantile_text(const groups *buckets, double count, double q, char *buf, size_t cap) {
  double bound = INFINITY, top = 0;
  for (size_t i = 0; i < buckets->n; i++) {
    double le = strtod(buckets->key[i], NULL);
    if (!isinf(le) && le > top) top = le;
    if (buckets->a[i] >= q * count && le < bound) bound = le;
  }
  char t[32];
  snprintf(buf, cap, "%s %s", isinf(bound) ? ">" : "<=", seconds_text(isinf(bound) ? top : bound, t, sizeof t));
  return buf;
}

/* The nonzero groups of g as " (name count, ...)"; nothing when none. */
static void print_nonzero(FILE *out, const groups *g) {
  const char *sep = " (";
  for (size_t i = 0; i < g->n; i++) {
    if (g->a[i] == 0) continue;
    fprintf(out, "%s%s %.0f", sep, g->key[i], g->a[i]);
    sep = ", ";
  }
  if (strcmp(sep, ", ") == 0) fputc(')', out);
}

void cli_stats_summary(FILE *out, const lct_server_stats *st, const char *prometheus) {
  groups dtypes = {0}, buckets = {0}, fallbacks = {0}, errors = {0};
  double latency_sum = 0, latency_count = 0;
  sample s;
  for (const char *p = prometheus; next_sample(&p, &s);) {
    if (is(&s, "lct_dtype_raw_bytes")) add(&dtypes, &s, "dtype", 0);
    else if (is(&s, "lct_dtype_stored_bytes")) add(&dtypes, &s, "dtype", 1);
    else if (is(&s, "lct_request_duration_seconds_bucket")) add(&buckets, &s, "le", 0);
    else if (is(&s, "lct_request_duration_seconds_sum")) latency_sum += s.value;
    else if (is(&s, "lct_request_duration_seconds_count")) latency_count += s.value;
    else if (is(&s, "lct_device_fallbacks_total")) add(&fallbacks, &s, "reason", 0);
    else if (is(&s, "lct_errors_total")) add(&errors, &s, "kind", 0);
  }
  char b1[64], b2[64];
  fprintf(out, "tensors:      %" PRIu64 "\n", st->tensors);
  fprintf(out, "raw bytes:    %s\n", bytes_text(st->raw_bytes, 1, b1, sizeof b1));
  fprintf(out, "stored bytes: %s\n", bytes_text(st->stored_bytes, 1, b1, sizeof b1));
  if (st->stored_bytes > 0) fprintf(out, "ratio:        %.3f", (double)st->raw_bytes / (double)st->stored_bytes);
  else fputs("ratio:        -", out);
  const char *sep = " (";
  for (size_t i = 0; i < dtypes.n; i++) {
    if (dtypes.a[i] == 0 || dtypes.b[i] == 0) continue;
    fprintf(out, "%s%s %.3f", sep, dtypes.key[i], dtypes.a[i] / dtypes.b[i]);
    sep = ", ";
  }
  fputs(strcmp(sep, ", ") == 0 ? ")\n" : "\n", out);
  fprintf(out, "pool:         %s used of %s", bytes_text(st->pool_used, 0, b1, sizeof b1),
          bytes_text(st->pool_capacity, 0, b2, sizeof b2));
  if (st->pool_capacity > 0) fprintf(out, " (%.1f%%)", 100.0 * (double)st->pool_used / (double)st->pool_capacity);
  fprintf(out, "\nheld:         %s", bytes_text(st->pool_held, 0, b1, sizeof b1));
  fprintf(out, "\nrequests:     %" PRIu64 "\nerrors:       %" PRIu64, st->requests, st->errors);
  print_nonzero(out, &errors);
  fputc('\n', out);
  if (latency_count > 0) {
    char q50[48], q99[48];
    fprintf(out, "latency:      mean %s, p50 %s, p99 %s\n", seconds_text(latency_sum / latency_count, b1, sizeof b1),
            quantile_text(&buckets, latency_count, 0.5, q50, sizeof q50),
            quantile_text(&buckets, latency_count, 0.99, q99, sizeof q99));
  }
  fprintf(out, "device:       %" PRIu64 " puts, %" PRIu64 " gets, %" PRIu64 " fallbacks to the host path",
          st->device_puts, st->device_gets, st->device_fallbacks);
  print_nonzero(out, &fallbacks);
  fputc('\n', out);
}
