/* snapshot_file.h — the layout of one tensor's snapshot file in persist_dir: the bytes a save writes and the checked parse a restore reads. */
#ifndef LCT_SERVER_SNAPSHOT_FILE_H
#define LCT_SERVER_SNAPSHOT_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "entry.h"
#include "lct_codec.h"
#include "lct_decl.h"

/* The format saves write; format 1 (no codebook) is still read. */
#define LCT__SNAPSHOT_FORMAT 2
#define LCT__SNAPSHOT_HEADER 112
#define LCT__SNAPSHOT_ROW 24 /* one segment table row */
/* Most bytes lct__snapshot_head writes: header, key, codebook. */
#define LCT__SNAPSHOT_HEAD_MAX (LCT__SNAPSHOT_HEADER + LCT_KEY_MAX + 8 + (LCT_MAX_SYMS + 1) / 2)

/* A snapshot file, parsed and checked; its pointers are into the bytes parsed. */
typedef struct lct__snapshot_file {
  uint32_t format;
  const uint8_t *key;
  size_t key_len;
  lct_put_decl decl;        /* dtype, shape, n_elems, raw_bytes */
  uint64_t version;         /* 1 .. 2^63-1 */
  uint32_t checksum;        /* CRC-32C of the raw bytes */
  int has_codebook;
  int codebook_stale;
  lct_codebook codebook;
  uint32_t n_segments;      /* >= 1 */
  const uint8_t *table;     /* n_segments rows: read them with lct__snapshot_row_read */
  const uint8_t *blobs;     /* the segments' blobs back to back */
} lct__snapshot_file;

typedef struct lct__snapshot_row {
  uint64_t raw_offset;
  uint64_t raw_bytes;
  uint64_t blob_bytes;
} lct__snapshot_row;

/* Parses a whole snapshot file of len bytes: every length bounded by len,
 * the header against dtype and shape, the key, the codebook, the segment
 * table (contiguous segments covering raw_bytes, all of the first one's size
 * but a shorter last one, blobs filling the file exactly), then the file's
 * CRC. Returns 0 or LCT_ECORRUPT with *why naming the failed check. Pure:
 * reads only bytes[0, len). */
int lct__snapshot_parse(const uint8_t *bytes, size_t len, lct__snapshot_file *out, const char **why);

/* Row i (< n_segments) of a parsed file's segment table. */
lct__snapshot_row lct__snapshot_row_read(const lct__snapshot_file *f, uint32_t i);

/* Writes e's header, key and codebook (LCT__SNAPSHOT_HEAD_MAX bytes at most)
 * to out; the bytes written. The segment rows, the blobs and the CRC-32C of
 * all before it follow in the file. */
size_t lct__snapshot_head(const lct__entry *e, uint8_t *out);

/* Writes segment sg's table row. */
void lct__snapshot_row_write(const lct__segment *sg, uint8_t out[LCT__SNAPSHOT_ROW]);

#endif
