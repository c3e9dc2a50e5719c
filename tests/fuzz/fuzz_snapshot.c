/* fuzz_snapshot.c — libFuzzer target: a snapshot file's parse on arbitrary bytes, and past its CRC with the bytes' own CRC-32C. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "lct_checksum.h"
#include "snapshot_file.h"

/* What the restore relies on in a file the parse accepted, and the writer's
 * head for the parsed fields parsing back to them. */
static void lct__check(const uint8_t *bytes, size_t size) {
  lct__snapshot_file f;
  const char *why = NULL;
  if (lct__snapshot_parse(bytes, size, &f, &why) != 0) {
    if (why == NULL) abort();
    return;
  }
  if (f.key < bytes || f.key + f.key_len > f.table || f.table + (size_t)f.n_segments * LCT__SNAPSHOT_ROW != f.blobs)
    abort();
  uint64_t raw = 0, blobs = 0, first = lct__snapshot_row_read(&f, 0).raw_bytes;
  for (uint32_t i = 0; i < f.n_segments; i++) {
    lct__snapshot_row r = lct__snapshot_row_read(&f, i);
    if (r.raw_offset != raw || r.raw_bytes > first) abort();
    raw += r.raw_bytes;
    blobs += r.blob_bytes;
  }
  if (raw != f.decl.raw_bytes || f.blobs + blobs != bytes + size - 4) abort();
  if (f.has_codebook && lct_codebook_bytes(f.decl.dtype) == 0) abort();

  lct__entry e = {0};
  e.key = (uint8_t *)f.key;
  e.key_len = f.key_len;
  e.dtype = f.decl.dtype;
  e.ndim = f.decl.ndim;
  memcpy(e.shape, f.decl.shape, sizeof e.shape);
  e.raw_bytes = f.decl.raw_bytes;
  e.version = f.version;
  e.checksum = f.checksum;
  e.has_codebook = f.has_codebook;
  e.codebook = f.codebook;
  e.codebook_stale = f.codebook_stale;
  e.n_segments = f.n_segments;
  size_t rest = size - (size_t)(f.table - bytes) - 4;
  uint8_t *again = malloc(LCT__SNAPSHOT_HEAD_MAX + rest + 4);
  if (again == NULL) return;
  size_t n = lct__snapshot_head(&e, again);
  memcpy(again + n, f.table, rest);
  uint32_t crc = lct_crc32c(0, again, n + rest);
  for (int i = 0; i < 4; i++) again[n + rest + i] = (uint8_t)(crc >> (8 * i));
  lct__snapshot_file g;
  if (lct__snapshot_parse(again, n + rest + 4, &g, &why) != 0 || g.format != LCT__SNAPSHOT_FORMAT ||
      g.key_len != f.key_len || memcmp(g.key, f.key, f.key_len) != 0 || memcmp(&g.decl, &f.decl, sizeof g.decl) != 0 ||
      g.version != f.version || g.checksum != f.checksum || g.has_codebook != f.has_codebook ||
      g.codebook_stale != f.codebook_stale || g.n_segments != f.n_segments ||
      (f.has_codebook && (memcmp(g.codebook.len, f.codebook.len, sizeof g.codebook.len) != 0 ||
                          memcmp(&g.codebook.expected_bits_per_elem, &f.codebook.expected_bits_per_elem, 8) != 0)))
    abort();
  free(again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  lct__check(data, size);
  if (size < 4) return 0;
  /* The CRC stops almost every mutation: check the same bytes made whole. */
  uint8_t *whole = malloc(size);
  if (whole == NULL) return 0;
  memcpy(whole, data, size);
  uint32_t crc = lct_crc32c(0, whole, size - 4);
  for (int i = 0; i < 4; i++) whole[size - 4 + i] = (uint8_t)(crc >> (8 * i));
  lct__check(whole, size);
  free(whole);
  return 0;
}
