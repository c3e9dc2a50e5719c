/* lct_codec.h — the LCT compressed tensor format (proto/FORMAT.md): codebooks and the CPU reference codec. */
#ifndef LCT_CODEC_H
#define LCT_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "lct_api.h"
#include "lct_dtype.h"
#include "lct_error.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LCT_FORMAT_VERSION 2   /* the version encoders write; decoders read 1 and 2 */
#define LCT_CHUNK_ELEMS 16384  /* elements per chunk */
#define LCT_LANES 64           /* independent code streams per chunk */
#define LCT_LANE_ELEMS 256     /* elements per lane */
#define LCT_LANE_FIELD_BITS 12 /* bits of a lane_bits field: a coded lane takes fewer than 4096 bits */
#define LCT_MAX_CODE_LEN 12    /* decode tables have 2^12 entries */
#define LCT_MAX_SYMS 1025      /* 2^10 symbol values plus ESC */
#define LCT_HEADER_BYTES 40
#define LCT_RAW_CHUNK_HEADER 8
#define LCT_CODED_CHUNK_HEADER 104
/* Format version 1's coded chunks (proto/FORMAT.md, "Version 1"): 32 lanes of
 * 512 elements, u16 lane_bits. */
#define LCT_V1_LANES 32
#define LCT_V1_LANE_ELEMS 512
#define LCT_V1_CODED_CHUNK_HEADER 72


static inline uint64_t lct_chunk_count(uint64_t n_elems) {
  return n_elems / LCT_CHUNK_ELEMS + (n_elems % LCT_CHUNK_ELEMS != 0); /* no n + 16383 to wrap */
}

/* Worst-case blob size for n elements of a dtype: raw bytes plus a bounded
 * header (proto/FORMAT.md, "Size bound"). The macro is a constant-expression
 * upper bound; the function is exact for the reference encoder's worst case,
 * and SIZE_MAX where that does not fit in a size_t (no buffer holds it). */
#define LCT_ENCODE_BOUND(n_elems, elem_size) \
  (LCT_HEADER_BYTES + 520 + 20 * (((n_elems) + LCT_CHUNK_ELEMS - 1) / LCT_CHUNK_ELEMS) + (n_elems) * (elem_size))
LCT_API size_t lct_encode_bound(int dtype, uint64_t n_elems);

/* A canonical, length-limited code for one dtype's sign+exponent alphabet.
 * A plain value (about 4 KiB): build it once from a histogram and reuse it for
 * every later encode of that tensor or class of tensors. Treat as read-only. */
typedef struct lct_codebook {
  uint8_t dtype;
  uint8_t max_len;                 /* longest code, <= LCT_MAX_CODE_LEN */
  uint16_t n_syms;                 /* 2^s + 1; ESC is n_syms - 1 */
  uint8_t len[LCT_MAX_SYMS];       /* code length, 0 = not in the codebook */
  uint16_t code[LCT_MAX_SYMS];     /* bit-reversed canonical code (LSB-first) */
  double expected_bits_per_elem;   /* code bits per element on the build histogram */
} lct_codebook;

/* Adds the symbol histogram of n elements to hist[0 .. 2^s) (caller zeroes it). */
LCT_API int lct_histogram(int dtype, const void *src, uint64_t n_elems, uint64_t *hist);
/* Builds the reference codebook from a histogram of 2^s counts (ESC is added). */
LCT_API int lct_codebook_build(int dtype, const uint64_t *hist, lct_codebook *cb);
/* Histogram plus build in one call. */
LCT_API int lct_codebook_from_data(int dtype, const void *src, uint64_t n_elems, lct_codebook *cb);
/* Serialized codebook size for a dtype (4 bits per symbol); 0 for raw. */
LCT_API size_t lct_codebook_bytes(int dtype);
/* Writes cb's lengths in the blob's codebook form; LCT_EINVAL for a length
 * above LCT_MAX_CODE_LEN, LCT_EBUFSIZE when cap is short. */
LCT_API int lct_codebook_serialize(const lct_codebook *cb, uint8_t *dst, size_t cap);
/* Parses and validates a serialized codebook; LCT_ECORRUPT if invalid. */
LCT_API int lct_codebook_parse(int dtype, const uint8_t *src, size_t len, lct_codebook *cb);
/* Serializes cb into dst (cap bytes) and parses it back into *canon: the
 * codes every decoder derives from those bytes, whatever cb->code holds.
 * LCT_EINVAL for a codebook no decoder would take (not its dtype's symbol
 * count, lengths, Kraft sum, no ESC), LCT_EBUFSIZE when cap is short. */
LCT_API int lct_codebook_canonical(const lct_codebook *cb, uint8_t *dst, size_t cap, lct_codebook *canon);
/* 4096-entry decode table: entry = symbol | len << 11, 0 = invalid code. */
LCT_API void lct_codebook_decode_table(const lct_codebook *cb, uint16_t table[1 << LCT_MAX_CODE_LEN]);

typedef struct lct_encode_stats {
  uint64_t blob_bytes;  /* size of the blob written */
  uint64_t code_bits;   /* code bits the codebook took (ESC payloads included), also for chunks then stored raw */
  uint64_t escapes;     /* elements whose symbol the codebook lacked */
  uint64_t raw_chunks;  /* chunks stored raw */
} lct_encode_stats;

/* Encodes n elements at src (host memory, any alignment) into dst (capacity
 * cap bytes, at least lct_encode_bound). cb must be a codebook of the dtype;
 * it is ignored (may be NULL) for raw. stats may be NULL. Thread-safe.
 * Returns 0 or a negative LCT error code. */
LCT_API int lct_encode(int dtype, const lct_codebook *cb, const void *src, uint64_t n_elems,
               void *dst, size_t cap, lct_encode_stats *stats);

/* Header fields of a blob, validated (magic, version, sizes, header check). */
typedef struct lct_blob_info {
  int dtype;
  uint64_t n_elems;
  uint64_t raw_bytes;
  uint64_t blob_bytes;
  uint32_t n_chunks;
} lct_blob_info;
LCT_API int lct_blob_info_read(const void *blob, size_t len, lct_blob_info *info);
/* The first blob of len bytes holding blobs back to back (a put's payload):
 * lct_blob_info_read over the blob_bytes its header gives; LCT_ESIZE where
 * those run past len. */
LCT_API int lct_blob_next(const void *blobs, size_t len, lct_blob_info *info);

/* Decodes a blob of len bytes into dst (cap bytes, any alignment). Every
 * field is validated: a corrupt blob returns LCT_ECORRUPT or LCT_ECHECKSUM,
 * a too-small dst LCT_EBUFSIZE; nothing outside blob[0, len) or dst[0, cap)
 * is ever touched. Thread-safe. */
LCT_API int lct_decode(const void *blob, size_t len, void *dst, size_t cap);

/* Checks a blob as lct_decode does, every chunk included, without keeping
 * its output: each chunk is decoded into a chunk-sized scratch of its own and
 * handed, in order, to fn (if not NULL) with its raw bytes, so that a caller
 * can checksum what the blob holds. 0, or what lct_decode would return for
 * the blob. Thread-safe; about 64 KiB of stack. */
typedef void (*lct_chunk_fn)(void *arg, const void *raw, size_t bytes);
LCT_API int lct_validate(const void *blob, size_t len, lct_chunk_fn fn, void *arg);

/* The format's check (proto/FORMAT.md, "Checks") over bytes zero-padded to
 * 32-bit words, word index starting at base. */
LCT_API uint32_t lct_check(const void *bytes, size_t len, uint64_t base);

/* The codec's structures, for bindings that lay them out themselves (the
 * Python binding checks each at load). */
typedef enum lct_codec_struct {
  LCT_CODEC_STRUCT_CODEBOOK,
  LCT_CODEC_STRUCT_ENCODE_STATS,
  LCT_CODEC_STRUCT_BLOB_INFO,
} lct_codec_struct;
/* sizeof the structure named; 0 for an unknown name. */
LCT_API size_t lct_codec_struct_size(lct_codec_struct which);

#ifdef __cplusplus
}
#endif
#endif
