/* persist.h — snapshots in persist_dir: one file per tensor, written atomically, restored at start. */
#ifndef LCT_SERVER_PERSIST_H
#define LCT_SERVER_PERSIST_H

#include <stddef.h>
#include <stdint.h>

#include "server.h"

typedef struct lct__snapshot lct__snapshot;

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

/* Called on the loop thread when a save asked for with lct__save_request
 * ends: rc 0, LCT_ENOMEM (it could not start) or LCT_EIO (r: what was
 * written and what failed). */
typedef void (*lct__save_cb)(void *arg, int rc, const lct__persist_result *r);

/* A save on a thread of its own, so that the loop keeps serving puts and
 * gets while files are written. One save runs at a time: one asked for
 * while another runs is done by the next save, since its tensors may be
 * newer than the running save's snapshot. LCT_ENOMEM (cb not called) when
 * the request cannot be queued. Loop thread. */
int lct__save_request(lct__server *srv, lct__save_cb cb, void *arg);

/* Periodic saves: every save_interval (0: none), the save lct__save_request
 * makes, unless one is under way (the next tick saves what it would have).
 * open once the tensors are restored; update after a reload, to take a new
 * interval; close at stop. Loop thread. */
int lct__autosave_open(lct__server *srv);
void lct__autosave_update(lct__server *srv);
void lct__autosave_close(lct__server *srv);

/* At a stop that cannot wait: lets a save being written finish, so that the
 * final save does not collide with it; its callbacks and the queued ones are
 * never called. */
void lct__save_abandon(lct__server *srv);

/* Restores every snapshot file of persist_dir (server/snapshot_file.h) into
 * the store with its version, checksum, codebook and coded bytes. A corrupt
 * or truncated file is logged, renamed NAME.corrupt and skipped; one that
 * cannot be opened, does not fit the pool, or was saved with segments larger
 * than segment_size, is renamed NAME.unloaded (NAME.corrupt.N or
 * NAME.unloaded.N, N = 1..15, where that name is taken); leftover temporary files of an interrupted
 * save are removed. Anything at a snapshot's name that is not a regular file
 * (a symbolic link, FIFO, directory) is logged, counted as skipped and left
 * alone. With err saying why: LCT_EIO when the directory cannot be created
 * or listed, LCT_ECONFIG when a file that did not load cannot be renamed
 * aside (a save would take it for a deleted key's file and remove it). */
int lct__persist_load(lct__server *srv, char *err, size_t errlen);

#endif
