/* stats.c — lctd's counters and gauges, rendered as Prometheus text. */
#include "stats.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lct_codec.h"
#include "lct_error.h"
#include "lct_stats_fields.h"
#include "server.h"
#include "transport.h"

const double lct__latency_bounds[LCT__LATENCY_BUCKETS] = {
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.1, 0.5, 2.5, 10};

/* An op's label: its lct.proto name, lower case, without "OP_" ("put_begin");
 * "invalid" for slot 0. */
static const char *lct__op_name(int op, char name[32]) {
  const ProtobufCEnumValue *v = protobuf_c_enum_descriptor_get_value(&lctpb__op__descriptor, op);
  const char *from = v == NULL ? "invalid" : strncmp(v->name, "OP_", 3) == 0 ? v->name + 3 : v->name;
  size_t i = 0;
  for (; from[i] != '\0' && i < 31; i++)
    name[i] = (char)tolower((unsigned char)from[i]);
  name[i] = '\0';
  return name;
}

static const char *const lct__fallback_names[LCT__FALLBACK_SLOTS] = {
    "cpu_backend", "other_host", "other_device", "ipc_open_failed"};

void lct__stats_count(lct__stats *st, uint32_t op, uint32_t status) {
  if (op >= LCT__OP_SLOTS)
    op = 0;
  if (status >= LCT__STATUS_SLOTS)
    status = LCT__STATUS_SLOTS - 1;
  st->replies[op][status]++;
  st->requests++;
  st->errors += status != 0;
}

void lct__stats_fallback(lct__stats *st, int reason) {
  st->device_fallback_reasons[reason]++;
  st->device_fallbacks++;
}

void lct__stats_summarize(const lct__stats *st, Lctpb__StatsSummary *sum) {
  lctpb__stats_summary__init(sum);
#define LCT__SUMMARY_FIELD(name, what) sum->has_##name = 1, sum->name = st->name;
  LCT_STATS_FIELDS(LCT__SUMMARY_FIELD)
#undef LCT__SUMMARY_FIELD
}

void lct__stats_latency(lct__stats *st, uint32_t op, uint64_t ns) {
  if (op >= LCT__OP_SLOTS)
    op = 0;
  double sec = (double)ns / 1e9;
  int b = 0;
  while (b < LCT__LATENCY_BUCKETS && sec > lct__latency_bounds[b])
    b++;
  st->latency[op][b]++;
  st->latency_ns[op] += ns;
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

static void lct__head(lct__buf *b, const char *name, const char *type, const char *help) {
  lct__bprintf(b, "# HELP lct_%s %s\n# TYPE lct_%s %s\n", name, help, name, type);
}

static void lct__seconds(lct__buf *b, const char *name, const char *help, uint64_t ns) {
  lct__head(b, name, "counter", help);
  lct__bprintf(b, "lct_%s %.9f\n", name, (double)ns / 1e9);
}

char *lct__stats_render(const lct__stats *st, const char *backend, size_t *len) {
  lct__buf b = {malloc(16384), 0, 16384, 0};
  if (b.p == NULL)
    return NULL;
  lct__head(&b, "build_info", "gauge", "Always 1; the backend in use as a label.");
  lct__bprintf(&b, "lct_build_info{backend=\"%s\"} 1\n", backend);
  char op[32];

  lct__head(&b, "requests_total", "counter", "Replies sent, by operation and status.");
  for (int o = 0; o < LCT__OP_SLOTS; o++) {
    for (int s = 0; s < LCT__STATUS_SLOTS; s++) {
      if (st->replies[o][s] == 0)
        continue;
      const char *status = s == 0 ? "ok" : lct_err_name(-s);
      lct__bprintf(&b, "lct_requests_total{op=\"%s\",status=\"%s\"} %" PRIu64 "\n",
                   lct__op_name(o, op), status, st->replies[o][s]);
    }
  }
  lct__head(&b, "errors_total", "counter",
            "Requests answered with an error, by kind (LCT_EACCES: refused for want of authentication, or a key "
            "outside the sender's tenant).");
  for (int s = 1; s < LCT__STATUS_SLOTS; s++) {
    uint64_t n = 0;
    for (int o = 0; o < LCT__OP_SLOTS; o++)
      n += st->replies[o][s];
    if (n > 0)
      lct__bprintf(&b, "lct_errors_total{kind=\"%s\"} %" PRIu64 "\n", lct_err_name(-s), n);
  }
  lct__head(&b, "request_duration_seconds", "histogram",
            "Time from receiving a request to sending its reply, by operation.");
  for (int o = 0; o < LCT__OP_SLOTS; o++) {
    uint64_t cum = 0;
    for (int k = 0; k <= LCT__LATENCY_BUCKETS; k++)
      cum += st->latency[o][k];
    if (cum == 0)
      continue;
    cum = 0;
    for (int k = 0; k < LCT__LATENCY_BUCKETS; k++) {
      cum += st->latency[o][k];
      lct__bprintf(&b, "lct_request_duration_seconds_bucket{op=\"%s\",le=\"%g\"} %" PRIu64 "\n",
                   lct__op_name(o, op), lct__latency_bounds[k], cum);
    }
    cum += st->latency[o][LCT__LATENCY_BUCKETS];
    lct__bprintf(&b, "lct_request_duration_seconds_bucket{op=\"%s\",le=\"+Inf\"} %" PRIu64 "\n",
                 lct__op_name(o, op), cum);
    lct__bprintf(&b, "lct_request_duration_seconds_sum{op=\"%s\"} %.9f\n", lct__op_name(o, op),
                 (double)st->latency_ns[o] / 1e9);
    lct__bprintf(&b, "lct_request_duration_seconds_count{op=\"%s\"} %" PRIu64 "\n", lct__op_name(o, op), cum);
  }
  lct__metric(&b, "requests_in_flight", "gauge", "Requests received and not yet answered.", st->in_flight);
  lct__metric(&b, "in_flight_bytes", "gauge",
              "Request messages held and replies being built, over all connections (bounded by request_memory).",
              st->inflight_bytes);
  lct__metric(&b, "reads_paused_total", "counter",
              "Times lctd stopped reading requests because max_requests or request_memory was reached.",
              st->reads_paused);
  lct__metric(&b, "clients", "gauge", "Connections open on the nanomsg endpoints.", st->clients);
  lct__metric(&b, "received_bytes_total", "counter", "Message bytes received.", st->bytes_in);
  lct__metric(&b, "sent_bytes_total", "counter", "Message bytes sent.", st->bytes_out);
  lct__metric(&b, "tensors", "gauge", "Tensors stored.", st->tensors);
  lct__metric(&b, "raw_bytes", "gauge", "Raw bytes of the stored tensors.", st->raw_bytes);
  lct__metric(&b, "stored_bytes", "gauge", "Coded bytes of the stored tensors.", st->stored_bytes);
  lct__head(&b, "dtype_tensors", "gauge", "Tensors stored, by dtype.");
  for (int d = 0; d < LCT_DTYPE_COUNT; d++)
    lct__bprintf(&b, "lct_dtype_tensors{dtype=\"%s\"} %" PRIu64 "\n", lct_dtype_name(d), st->dtype_tensors[d]);
  lct__head(&b, "dtype_raw_bytes", "gauge", "Raw bytes of the stored tensors, by dtype.");
  for (int d = 0; d < LCT_DTYPE_COUNT; d++)
    lct__bprintf(&b, "lct_dtype_raw_bytes{dtype=\"%s\"} %" PRIu64 "\n", lct_dtype_name(d), st->dtype_raw[d]);
  lct__head(&b, "dtype_stored_bytes", "gauge", "Coded bytes of the stored tensors, by dtype.");
  for (int d = 0; d < LCT_DTYPE_COUNT; d++)
    lct__bprintf(&b, "lct_dtype_stored_bytes{dtype=\"%s\"} %" PRIu64 "\n", lct_dtype_name(d),
                 st->dtype_stored[d]);
  lct__head(&b, "compression_ratio", "gauge",
            "Raw over coded bytes of the stored tensors, by dtype (1 when none are stored).");
  for (int d = 0; d < LCT_DTYPE_COUNT; d++)
    lct__bprintf(&b, "lct_compression_ratio{dtype=\"%s\"} %.6f\n", lct_dtype_name(d),
                 st->dtype_stored[d] ? (double)st->dtype_raw[d] / (double)st->dtype_stored[d] : 1.0);
  lct__metric(&b, "pool_capacity_bytes", "gauge", "Pool capacity.", st->pool_capacity);
  lct__metric(&b, "pool_used_bytes", "gauge", "Pool bytes in use, in-flight encodes included.",
              st->pool_used);
  lct__metric(&b, "pool_free_bytes", "gauge", "Pool bytes free.",
              st->pool_capacity > st->pool_used ? st->pool_capacity - st->pool_used : 0);
  lct__metric(&b, "pool_held_bytes", "gauge",
              "Memory the pool holds: on cuda the device memory mapped (granules holding blobs, and empty ones up to "
              "memory_slack), on cpu its bytes in use.",
              st->pool_held);
  lct__metric(&b, "ipc_mapped_bytes", "gauge",
              "Client GPU allocations mapped for device puts and gets (CUDA IPC); what a client frees of them stays "
              "allocated on the GPU until unmapped, ipc_idle after their last use.",
              st->ipc_mapped);
  lct__metric(&b, "staging_bytes", "gauge", "Host bytes held by uncommitted chunked puts.",
              st->staging_bytes);
  lct__metric(&b, "pending_puts", "gauge", "Chunked puts begun and not committed.", st->pending_puts);
  lct__metric(&b, "puts_expired_total", "counter", "Chunked puts dropped after put_timeout.",
              st->puts_expired);
  lct__metric(&b, "codebook_builds_total", "counter", "Codebooks built from a histogram.",
              st->codebook_builds);
  lct__metric(&b, "codebook_rebuilds_total", "counter",
              "Codebooks rebuilt because the coded size drifted past 2%.", st->codebook_rebuilds);
  lct__metric(&b, "encoded_bytes_total", "counter", "Raw bytes encoded.", st->encoded_bytes);
  lct__metric(&b, "decoded_bytes_total", "counter", "Raw bytes decoded.", st->decoded_bytes);
  lct__seconds(&b, "encode_seconds_total",
               "Wall time of put encodes (encoded_bytes_total over it is the encode throughput).",
               st->encode_ns);
  lct__seconds(&b, "decode_seconds_total",
               "Wall time of get decodes (decoded_bytes_total over it is the decode throughput).",
               st->decode_ns);
  lct__head(&b, "device_ops_total", "counter",
            "Tensors stored and read device to device (CUDA IPC; the items of the _MANY ops count one each).");
  lct__bprintf(&b, "lct_device_ops_total{op=\"put\"} %" PRIu64 "\n", st->device_puts);
  lct__bprintf(&b, "lct_device_ops_total{op=\"get\"} %" PRIu64 "\n", st->device_gets);
  lct__head(&b, "device_fallbacks_total", "counter",
            "Device puts and gets refused with LCT_ENOIPC (the client used the host path), by reason.");
  for (int r = 0; r < LCT__FALLBACK_SLOTS; r++)
    lct__bprintf(&b, "lct_device_fallbacks_total{reason=\"%s\"} %" PRIu64 "\n", lct__fallback_names[r],
                 st->device_fallback_reasons[r]);
  lct__metric(&b, "device_peer_requests_total", "counter",
              "Device requests whose buffer lies on another GPU of the host, coded in place over peer access "
              "(NVLink or PCIe) with no host copy.",
              st->device_peer_requests);
  lct__metric(&b, "ipc_opens_total", "counter",
              "Client GPU allocations opened from their CUDA IPC handle (mapping cache misses).", st->ipc_opens);
  lct__metric(&b, "config_reloads_total", "counter", "Configuration reloads (SIGHUP) applied.", st->reloads);
  lct__metric(&b, "config_reload_failures_total", "counter",
              "Configuration reloads (SIGHUP) refused because the new configuration was invalid.",
              st->reload_failures);
  lct__metric(&b, "snapshot_saves_total", "counter",
              "Snapshot saves to persist_dir (save op, save_interval, shutdown).", st->persist_saves);
  lct__metric(&b, "snapshot_tensors_written_total", "counter", "Tensor files written by snapshot saves.",
              st->persist_written);
  lct__metric(&b, "snapshot_failures_total", "counter",
              "Tensors (or the directory) a snapshot save could not write.", st->persist_failures);
  lct__metric(&b, "snapshot_restored_tensors", "gauge", "Tensors restored from persist_dir at start.",
              st->persist_restored);
  lct__metric(&b, "snapshot_skipped_files", "gauge",
              "Snapshot files skipped at start: corrupt, partial, too large for the pool, or not regular files.",
              st->persist_skipped);
  if (b.failed) {
    free(b.p);
    return NULL;
  }
  *len = b.len;
  return b.p;
}

char *lct__server_stats_text(lct__server *srv, size_t *len) {
  srv->stats.pool_capacity = lct__pool_capacity(srv->pool);
  srv->stats.pool_used = lct__pool_used(srv->pool);
  srv->stats.pool_held = lct__pool_held(srv->pool);
  const lct__backend *be = lct__pool_backend(srv->pool);
  if (be->ops->ipc_trim != NULL)
    srv->stats.ipc_mapped = be->ops->ipc_trim(be->ctx, UINT64_MAX);
  srv->stats.clients = lct__transport_clients(srv->transport);
  size_t tlen;
  char *text = lct__stats_render(&srv->stats, srv->backend_name, len);
  char *tenants = lct__access_metrics(srv->access, NULL, &tlen);
  char *both = text != NULL && tenants != NULL ? realloc(text, *len + tlen + 1) : NULL;
  if (both == NULL) {
    free(text);
    free(tenants);
    return NULL;
  }
  memcpy(both + *len, tenants, tlen + 1);
  *len += tlen;
  free(tenants);
  return both;
}
