/* stats.c — lctd's counters and gauges, rendered as Prometheus text. */
#include "stats.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lct_error.h"

static const char *const lct__op_names[LCT__OP_SLOTS] = {
    "invalid", "ping", "put", "put_begin", "put_chunk", "put_commit",
    "put_abort", "get", "delete", "stat", "list", "stats"};

void lct__stats_count(lct__stats *st, uint32_t op, uint32_t status) {
  if (op >= LCT__OP_SLOTS)
    op = 0;
  if (status >= LCT__STATUS_SLOTS)
    status = LCT__STATUS_SLOTS - 1;
  st->requests[op][status]++;
}

uint64_t lct__stats_requests(const lct__stats *st) {
  uint64_t n = 0;
  for (int o = 0; o < LCT__OP_SLOTS; o++)
    for (int s = 0; s < LCT__STATUS_SLOTS; s++)
      n += st->requests[o][s];
  return n;
}

uint64_t lct__stats_errors(const lct__stats *st) {
  uint64_t n = 0;
  for (int o = 0; o < LCT__OP_SLOTS; o++)
    for (int s = 1; s < LCT__STATUS_SLOTS; s++)
      n += st->requests[o][s];
  return n;
}

typedef struct lct__buf {
  char *p;
  size_t len, cap;
  int failed;
} lct__buf;

static void lct__bprintf(lct__buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void lct__bprintf(lct__buf *b, const char *fmt, ...) {
  if (b->failed)
    return;
  for (;;) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n < 0) {
      b->failed = 1;
      return;
    }
    if ((size_t)n < b->cap - b->len) {
      b->len += (size_t)n;
      return;
    }
    size_t cap = b->cap * 2 + (size_t)n;
    char *p = realloc(b->p, cap);
    if (p == NULL) {
      b->failed = 1;
      return;
    }
    b->p = p;
    b->cap = cap;
  }
}

static void lct__metric(lct__buf *b, const char *name, const char *type, const char *help,
                        uint64_t v) {
  lct__bprintf(b, "# HELP lct_%s %s\n# TYPE lct_%s %s\nlct_%s %" PRIu64 "\n", name, help, name,
               type, name, v);
}

char *lct__stats_render(const lct__stats *st, const char *backend, size_t *len) {
  lct__buf b = {malloc(4096), 0, 4096, 0};
  if (b.p == NULL)
    return NULL;
  lct__bprintf(&b, "# HELP lct_info Server build and backend.\n# TYPE lct_info gauge\n"
                   "lct_info{backend=\"%s\"} 1\n",
               backend);
  lct__bprintf(&b, "# HELP lct_requests_total Replies sent, by operation and status.\n"
                   "# TYPE lct_requests_total counter\n");
  for (int o = 0; o < LCT__OP_SLOTS; o++) {
    for (int s = 0; s < LCT__STATUS_SLOTS; s++) {
      if (st->requests[o][s] == 0)
        continue;
      const char *status = s == 0 ? "ok" : lct_err_name(-s);
      lct__bprintf(&b, "lct_requests_total{op=\"%s\",status=\"%s\"} %" PRIu64 "\n",
                   lct__op_names[o], status, st->requests[o][s]);
    }
  }
  lct__metric(&b, "received_bytes_total", "counter", "Message bytes received.", st->bytes_in);
  lct__metric(&b, "sent_bytes_total", "counter", "Message bytes sent.", st->bytes_out);
  lct__metric(&b, "tensors", "gauge", "Tensors stored.", st->tensors);
  lct__metric(&b, "raw_bytes", "gauge", "Raw bytes of the stored tensors.", st->raw_bytes);
  lct__metric(&b, "stored_bytes", "gauge", "Coded bytes of the stored tensors.",
              st->stored_bytes);
  lct__metric(&b, "pool_capacity_bytes", "gauge", "Pool capacity.", st->pool_capacity);
  lct__metric(&b, "pool_used_bytes", "gauge", "Pool bytes in use, in-flight encodes included.",
              st->pool_used);
  lct__metric(&b, "staging_bytes", "gauge", "Host bytes held by uncommitted chunked puts.",
              st->staging_bytes);
  lct__metric(&b, "pending_puts", "gauge", "Chunked puts begun and not committed.",
              st->pending_puts);
  lct__metric(&b, "puts_expired_total", "counter", "Chunked puts dropped after put-timeout.",
              st->puts_expired);
  lct__metric(&b, "codebook_builds_total", "counter", "Codebooks built from a histogram.",
              st->codebook_builds);
  lct__metric(&b, "codebook_rebuilds_total", "counter",
              "Codebooks rebuilt because the coded size drifted past 2%.",
              st->codebook_rebuilds);
  lct__metric(&b, "encoded_bytes_total", "counter", "Raw bytes encoded.", st->encoded_bytes);
  lct__metric(&b, "decoded_bytes_total", "counter", "Raw bytes decoded.", st->decoded_bytes);
  if (b.failed) {
    free(b.p);
    return NULL;
  }
  *len = b.len;
  return b.p;
}
