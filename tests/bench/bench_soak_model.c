/* bench_soak_model.c — lct-bench soak's model: each key's deterministic contents and the writes the server may hold, before and after a crash. */
#include <stdlib.h>
#include <string.h>

#include "bench_soak.h"

static uint64_t soak_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* How far below the top exponent: each step down with probability 1/2, at
 * most steps (a geometric spread, what the codec's Huffman codes exploit). */
static unsigned soak_drop(uint64_t r, unsigned steps) { return (unsigned)__builtin_ctzll(r | (1ull << steps)); }

void soak_fill(uint32_t id, uint64_t seq, int dtype, uint64_t bytes, uint8_t *dst) {
  uint64_t s = soak_mix(((uint64_t)id << 40) ^ seq ^ 0x5EEDull);
  for (uint64_t i = 0; i < bytes;) {
    uint64_t r = soak_mix(s += 0x9E3779B97F4A7C15ull);
    switch (dtype) {
    case LCT_DTYPE_BF16: /* sign, 8-bit exponent around 2^-1, 7-bit mantissa */
    case LCT_DTYPE_F16:  /* sign, 5-bit exponent around 2^-1, 10-bit mantissa */
      for (int k = 0; k < 4 && i < bytes; k++, i += 2, r >>= 16) {
        uint16_t v = dtype == LCT_DTYPE_BF16
                         ? (uint16_t)((r & 0x8000) | (126u - soak_drop(r >> 7, 7)) << 7 | (r & 0x7f))
                         : (uint16_t)((r & 0x8000) | (14u - soak_drop(r >> 10, 5)) << 10 | (r & 0x3ff));
        memcpy(dst + i, &v, 2);
      }
      break;
    case LCT_DTYPE_F32:
      for (int k = 0; k < 2 && i < bytes; k++, i += 4, r >>= 32) {
        uint32_t v = (uint32_t)((r & 0x80000000u) | (126u - soak_drop(r >> 23, 8)) << 23 | (r & 0x7fffff));
        memcpy(dst + i, &v, 4);
      }
      break;
    case LCT_DTYPE_F8E4M3:
      for (int k = 0; k < 8 && i < bytes; k++, i++, r >>= 8)
        dst[i] = (uint8_t)((r & 0x80) | (7u - soak_drop(r >> 3, 4)) << 3 | (r & 7));
      break;
    default: /* raw */
      for (int k = 0; k < 8 && i < bytes; k++, i++, r >>= 8)
        dst[i] = (uint8_t)r;
    }
  }
}

void soak_key_init(soak_key *k, uint32_t id, const char *name) {
  memset(k, 0, sizeof *k);
  k->id = id;
  strncpy(k->name, name, sizeof k->name - 1);
  soak_tensor absent = {0};
  soak_key_write(k, &absent, 1, 0);
}

void soak_key_free(soak_key *k) { free(k->h); }

void soak_key_write(soak_key *k, const soak_tensor *t, int ok, uint64_t stamp) {
  if (k->n == k->cap) {
    k->cap = k->cap ? 2 * k->cap : 8;
    k->h = realloc(k->h, k->cap * sizeof *k->h);
    if (k->h == NULL)
      abort();
  }
  k->h[k->n] = (soak_entry){*t, ok, stamp};
  if (ok)
    k->from = k->n;
  k->n++;
}

static int soak_same_meta(const soak_tensor *t, const lct_tensor_info *info) {
  if (t->seq == 0 || (int)info->dtype != t->dtype || info->ndim != t->ndim || info->raw_bytes != t->bytes ||
      info->checksum != t->crc || (t->version != 0 && info->version != t->version))
    return 0;
  for (int d = 0; d < t->ndim; d++)
    if (info->shape[d] != t->shape[d])
      return 0;
  return 1;
}

long soak_key_match(const soak_key *k, size_t lo, const lct_tensor_info *info, const uint8_t *bytes,
                    uint8_t *scratch) {
  for (size_t m = k->n; m-- > lo;) {
    const soak_tensor *t = &k->h[m].t;
    if (info == NULL) {
      if (t->seq == 0)
        return (long)m;
      continue;
    }
    if (!soak_same_meta(t, info))
      continue;
    if (bytes == NULL)
      return (long)m; /* a stat: the metadata is all there is */
    soak_fill(k->id, t->seq, t->dtype, t->bytes, scratch);
    if (memcmp(scratch, bytes, t->bytes) == 0)
      return (long)m;
  }
  return -1;
}

void soak_key_seen(soak_key *k, size_t m, uint64_t version, uint64_t stamp) {
  k->n = m + 1;
  k->from = m;
  soak_entry *e = &k->h[m];
  if (e->t.seq != 0)
    e->t.version = version;
  if (!e->acked)
    e->stamp = stamp;
  e->acked = 1;
}

void soak_key_floor(soak_key *k, uint64_t saved_stamp, int durable) {
  if (durable) {
    for (size_t m = k->from + 1; m-- > k->floor;)
      if (k->h[m].acked && k->h[m].stamp < saved_stamp) {
        k->floor = m;
        break;
      }
  } else {
    k->floor = k->from;
  }
  if (k->floor == 0)
    return;
  memmove(k->h, k->h + k->floor, (k->n - k->floor) * sizeof *k->h);
  k->n -= k->floor;
  k->from -= k->floor;
  k->floor = 0;
}
