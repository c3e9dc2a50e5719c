/* lct_stats_fields.h — the server counters a STATS reply summarizes: one table for lct.proto's StatsSummary, lctd and liblct. */
#ifndef LCT_STATS_FIELDS_H
#define LCT_STATS_FIELDS_H

/* X(name, what): every field is a uint64_t, in StatsSummary's field order. */
#define LCT_STATS_FIELDS(X)                                                                     \
  X(tensors, "keys stored")                                                                   \
  X(raw_bytes, "raw bytes of the stored tensors")                                             \
  X(stored_bytes, "their coded bytes")                                                        \
  X(pool_capacity, "pool bytes available for blobs")                                          \
  X(pool_used, "pool bytes in use (stored plus in-flight encodes)")                           \
  X(staging_bytes, "host bytes held by chunked puts")                                         \
  X(pending_puts, "chunked puts begun and not committed")                                     \
  X(codebook_builds, "codebooks built for a key's first put or a new dtype")                  \
  X(codebook_rebuilds, "codebooks rebuilt after the coded size drifted")                      \
  X(requests, "replies sent")                                                                 \
  X(errors, "error replies sent")                                                             \
  X(bytes_in, "message bytes received")                                                       \
  X(bytes_out, "message bytes sent")                                                          \
  X(puts_expired, "chunked puts dropped by put-timeout")                                      \
  X(device_puts, "tensors stored device to device")                                           \
  X(device_gets, "tensors read device to device")                                             \
  X(device_fallbacks, "device calls sent to the host path (LCT_ENOIPC)")                     \
  X(pool_held, "memory the pool holds: cuda, device memory mapped; cpu, pool_used")

#endif
