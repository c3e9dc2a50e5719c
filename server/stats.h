/* stats.h — lctd's counters and gauges: one struct, rendered as Prometheus text. */
#ifndef LCT_SERVER_STATS_H
#define LCT_SERVER_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "lct_dtype.h"
#include "lct_wire.h"

#define LCT__OP_SLOTS 18     /* index = wire op (1..17); 0 = unparsable or unknown op */
#define LCT__STATUS_SLOTS 32 /* index = wire status: 0 ok, else the positive LCT code */
#define LCT__LATENCY_BUCKETS 12 /* finite upper bounds of the latency histogram */

/* Why a PUT_DEVICE or GET_DEVICE was answered LCT_ENOIPC (the client then
 * takes the host path); lct_device_fallbacks_total's reason label. */
enum {
  LCT__FALLBACK_CPU_BACKEND,   /* tensors live in host memory */
  LCT__FALLBACK_OTHER_HOST,    /* the client's boot id is not this host's */
  LCT__FALLBACK_OTHER_DEVICE,  /* the buffer is on another GPU that the server's cannot reach by peer access */
  LCT__FALLBACK_IPC_OPEN,      /* cudaIpcOpenMemHandle refused the handle */
  LCT__FALLBACK_SLOTS
};

/* Upper bounds (seconds) of the request latency histogram's buckets. */
extern const double lct__latency_bounds[LCT__LATENCY_BUCKETS];

typedef struct lct__stats {
  uint64_t replies[LCT__OP_SLOTS][LCT__STATUS_SLOTS]; /* replies sent, by op and status */
  uint64_t requests;          /* replies sent */
  uint64_t errors;            /* error replies sent */
  uint64_t bytes_in;          /* message bytes received */
  uint64_t bytes_out;         /* message bytes sent */
  uint64_t tensors;           /* keys stored */
  uint64_t raw_bytes;         /* raw bytes of the stored tensors */
  uint64_t stored_bytes;      /* their coded bytes */
  uint64_t pool_capacity;     /* pool bytes available for blobs */
  uint64_t pool_used;         /* pool bytes in use (stored plus in-flight encodes) */
  uint64_t pool_held;         /* memory the pool holds (cuda: device memory mapped) */
  uint64_t ipc_mapped;        /* client GPU allocations mapped by CUDA IPC, as of the last request or sweep */
  uint64_t staging_bytes;     /* host bytes held by chunked puts */
  uint64_t pending_puts;      /* chunked puts begun and not committed */
  uint64_t puts_expired;      /* chunked puts dropped by put-timeout */
  uint64_t codebook_builds;   /* codebooks built for a key's first put or a new dtype */
  uint64_t codebook_rebuilds; /* codebooks rebuilt after coded size drifted > 2% */
  uint64_t encoded_bytes;     /* raw bytes encoded */
  uint64_t decoded_bytes;     /* raw bytes decoded */
  uint64_t encode_ns;         /* wall time of put encodes, start of codec work to publication */
  uint64_t decode_ns;         /* wall time of get decodes */
  /* request latency, receipt to reply, by op: counts per bucket (the last one
   * for beyond the largest bound), and the sum in nanoseconds */
  uint64_t latency[LCT__OP_SLOTS][LCT__LATENCY_BUCKETS + 1];
  uint64_t latency_ns[LCT__OP_SLOTS];
  uint64_t dtype_tensors[LCT_DTYPE_COUNT]; /* stored tensors by dtype */
  uint64_t dtype_raw[LCT_DTYPE_COUNT];     /* their raw bytes */
  uint64_t dtype_stored[LCT_DTYPE_COUNT];  /* their coded bytes */
  uint64_t in_flight;         /* requests received and not yet answered */
  uint64_t inflight_bytes;    /* request messages held and replies being built (inflight.c) */
  uint64_t reads_paused;      /* times reading stopped at max_requests or request_memory */
  uint64_t clients;           /* connections open on the nanomsg endpoints */
  uint64_t reloads;           /* SIGHUP reloads that succeeded */
  uint64_t reload_failures;   /* SIGHUP reloads refused (bad configuration) */
  uint64_t persist_saves;     /* snapshot saves to persist_dir (save op, save_interval, shutdown) */
  uint64_t persist_written;   /* tensor files written by them */
  uint64_t persist_failures;  /* tensors or directories a save could not write */
  uint64_t persist_restored;  /* tensors restored from persist_dir at start */
  uint64_t persist_skipped;   /* files skipped at start: corrupt, partial, too large, not regular files */
  uint64_t device_puts;       /* tensors stored device to device (PUT_DEVICE, PUT_DEVICE_MANY items) */
  uint64_t device_gets;       /* tensors read device to device (GET_DEVICE, GET_DEVICE_MANY items) */
  uint64_t device_fallback_reasons[LCT__FALLBACK_SLOTS]; /* device ops answered LCT_ENOIPC, by reason */
  uint64_t device_fallbacks;  /* their sum */
  uint64_t ipc_opens;         /* client GPU allocations mapped (IPC handle cache misses) */
  uint64_t device_peer_requests; /* device requests whose buffer is on another GPU, reached by peer access */
} lct__stats;

/* Adds a reply to the per-op, per-status counters (out-of-range values go to slot 0). */
void lct__stats_count(lct__stats *st, uint32_t op, uint32_t status);
/* Adds a request's latency (receipt to reply) to op's histogram. */
void lct__stats_latency(lct__stats *st, uint32_t op, uint64_t ns);
/* Counts a device op answered LCT_ENOIPC for reason (LCT__FALLBACK_*). */
void lct__stats_fallback(lct__stats *st, int reason);

/* The STATS reply's summary: every field of lct_stats_fields.h, from st. */
void lct__stats_summarize(const lct__stats *st, Lctpb__StatsSummary *sum);

struct lct__server;
/* Refreshes the server's pool and client gauges and renders every counter
 * (lct__stats_render) and the tenants' gauges: the STATS payload and GET
 * /metrics. */
char *lct__server_stats_text(struct lct__server *srv, size_t *len);

/* Renders Prometheus text exposition; returns a malloc'd string (NULL if out
 * of memory) and its length in *len. */
char *lct__stats_render(const lct__stats *st, const char *backend, size_t *len);

#endif
