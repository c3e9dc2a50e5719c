/* bench_soak.h — lct-bench soak's modules: what each key should hold (the model), its contents, and the device path. */
#ifndef LCT_BENCH_SOAK_H
#define LCT_BENCH_SOAK_H

#include <stddef.h>
#include <stdint.h>

#include "lct.h"

/* A state of a key: absent (seq 0), or the tensor whose contents are
 * soak_fill(key id, seq, ...) — seq counts the key's puts over the whole run,
 * so that no two puts of a key write the same bytes. */
typedef struct soak_tensor {
  uint64_t seq;
  int dtype;
  int ndim;
  uint64_t shape[2];
  uint64_t bytes;
  uint32_t crc;     /* CRC-32C of the contents, computed here */
  uint64_t version; /* the server's; 0 while unknown */
} soak_tensor;

/* One write of a key as its client saw it. */
typedef struct soak_entry {
  soak_tensor t;
  int acked;      /* 1: answered 0, or seen since; 0: its outcome is unknown */
  uint64_t stamp; /* acked: the save counter read after its reply (soak_key_floor) */
} soak_entry;

/* A key and the writes that may still be what the server holds: h[from]
 * or a later entry (h[n - 1] while every write since was answered); after a
 * crash, h[floor] or a later one (h[floor] is on disk, or was superseded by
 * a later snapshot). floor <= from. */
typedef struct soak_key {
  char name[32];
  uint32_t id;
  uint64_t seq; /* puts so far */
  soak_entry *h;
  size_t n, cap, from, floor;
} soak_key;

/* Deterministic contents of bytes of dtype for (key id, seq): floats with a
 * narrow spread of exponents, as a model's weights have (raw: random bytes). */
void soak_fill(uint32_t id, uint64_t seq, int dtype, uint64_t bytes, uint8_t *dst);

/* Starts k absent and answered. */
void soak_key_init(soak_key *k, uint32_t id, const char *name);
void soak_key_free(soak_key *k);
/* Records a write of t (t->seq 0: a delete) as answered (ok) or of unknown
 * outcome; an answered one is what the server holds from then on. */
void soak_key_write(soak_key *k, const soak_tensor *t, int ok, uint64_t stamp);
/* The entry at or after lo that an observation matches: absent (info NULL),
 * or the tensor of info whose bytes (bytes long) are the entry's contents,
 * regenerated into scratch; -1 when none does. */
long soak_key_match(const soak_key *k, size_t lo, const lct_tensor_info *info, const uint8_t *bytes,
                    uint8_t *scratch);
/* The server was seen to hold h[m]: later entries were never applied, h[m]
 * is answered from now (stamp) and carries the server's version. */
void soak_key_seen(soak_key *k, size_t m, uint64_t version, uint64_t stamp);
/* A save counted by stamp completed: every write answered before it was
 * asked for (entry stamp < stamp) is on disk; entries before the floor are
 * dropped (durable 0: no persistence, only h[from] matters). */
void soak_key_floor(soak_key *k, uint64_t saved_stamp, int durable);

/* The device path: a client's own GPU buffers (GPU builds). */
typedef struct soak_device soak_device;
/* 1 when this build and host can take device ops. */
int soak_device_present(void);
/* Buffers for tensors of up to max bytes; NULL if they cannot be had. */
soak_device *soak_device_open(size_t max);
void soak_device_close(soak_device *d);
/* lct_put_device of host's bytes (copied to the GPU first) and
 * lct_get_device (copied back into host, cap bytes); LCT_ECUDA when the copy fails. */
int soak_device_put(soak_device *d, lct_client *c, const char *key, const soak_tensor *t, const void *host,
                    lct_tensor_info *info);
int soak_device_get(soak_device *d, lct_client *c, const char *key, void *host, size_t cap, lct_tensor_info *info);

#endif
