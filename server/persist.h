/* persist.h — snapshots in persist_dir: one file per tensor, written atomically, restored at start. */
#ifndef LCT_SERVER_PERSIST_H
#define LCT_SERVER_PERSIST_H

#include <stdint.h>

#include "server.h"

typedef struct lct__persist_result {
  uint64_t written;       /* tensors written by this save */
  uint64_t written_bytes; /* their file bytes */
  uint64_t removed;       /* files of deleted keys removed */
  uint64_t failed;        /* tensors that could not be written (logged) */
} lct__persist_result;

/* A save: every tensor not yet in srv->cfg.persist_dir written (each to a
 * temporary file, fsync'd, renamed over the key's file), the files of keys no
 * longer stored removed, the directory fsync'd. It runs in three steps so
 * that the loop keeps serving while files are written: begin (loop thread)
 * references every entry not on disk yet, as of now; write (any thread, one
 * save at a time: the temporary files of two would collide) does the I/O;
 * end (loop thread) marks what was written, drops the references and frees
 * the snapshot. begin fails only for memory (LCT_ENOMEM). end returns 0, or
 * LCT_EIO when any tensor or the directory failed (the others are still
 * saved; r says how many). */
int lct__persist_begin(lct__server *srv, lct__snapshot **out);
void lct__persist_write(lct__snapshot *sv);
int lct__persist_end(lct__server *srv, lct__snapshot *sv, lct__persist_result *r);
/* Counts a save that failed before it began (no snapshot). */
void lct__persist_failed(lct__server *srv);

/* The three steps in a row, on the calling (loop) thread: at stop. */
int lct__persist_save(lct__server *srv, lct__persist_result *r);

/* Restores every snapshot file of persist_dir into the store with its
 * version, checksum and coded bytes. A corrupt or truncated file is logged,
 * renamed NAME.corrupt and skipped; one that does not fit the pool, or was
 * saved with segments larger than segment_size, is renamed NAME.unloaded; leftover temporary files of an interrupted save are removed.
 * Never fails for a bad file; LCT_EIO only when the directory itself cannot
 * be read or created. */
int lct__persist_load(lct__server *srv, char *err, size_t errlen);

#endif
