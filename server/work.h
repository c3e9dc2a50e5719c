/* work.h — host puts and gets on the codec workers: encode a put from host memory into segments, decode a range of a stored tensor into host memory. */
#ifndef LCT_SERVER_WORK_H
#define LCT_SERVER_WORK_H

#include <stddef.h>
#include <stdint.h>

#include "server.h"
#include "workers.h"

/* Whether coding bytes raw bytes runs on the loop thread: the backend
 * allows it and it is within inline_size. */
int lct__work_here(const lct__server *srv, uint64_t bytes);
/* Runs t on a codec worker, or with here at once on the loop thread (run
 * with LCT__LOOP_WORKER, then done: the task's job may be gone when it
 * returns). */
void lct__work_submit(lct__server *srv, lct__task *t, int here);

/* Called on the loop thread when a put job ends: rc 0 and the installed entry
 * (borrowed), or a negative code and a reason. */
typedef void (*lct__put_cb)(void *arg, int rc, const char *why, const lct__entry *installed);

/* Encodes the decl->raw_bytes bytes of src into a new entry for key and
 * installs it; the bytes must stay valid until cb. The checksum is verified
 * (when declared) or computed; the codebook follows codebook.h. Pool memory
 * for every segment is reserved up front (lct__entry_reserve): a full
 * pool fails here with LCT_ENOSPC (cb is not called) and leaves the stored
 * version untouched. */
int lct__put_start(lct__server *srv, const uint8_t *key, size_t key_len, const lct_put_decl *decl,
                   const lct__put_src *src, lct__put_cb cb, void *arg);

/* Called on the loop thread when a get job ends (rc 0 or a negative code). */
typedef void (*lct__get_cb)(void *arg, int rc);

/* Decodes raw bytes [offset, offset + len) of e (len > 0, within the tensor)
 * into host memory dst, decoding the overlapping segments in parallel.
 * Holds a reference to e until cb. */
int lct__get_start(lct__server *srv, lct__entry *e, uint64_t offset, uint64_t len, uint8_t *dst,
                   lct__get_cb cb, void *arg);

#endif
