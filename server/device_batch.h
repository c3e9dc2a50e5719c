/* device_batch.h — device puts and gets (PUT_DEVICE, GET_DEVICE and their _MANY forms): the tensors of one request coded in one pass of the GPU codec. */
#ifndef LCT_SERVER_DEVICE_BATCH_H
#define LCT_SERVER_DEVICE_BATCH_H

#include <stddef.h>
#include <stdint.h>

#include "server.h"

/* One tensor of a device batch; the caller's array outlives the job. */
typedef struct lct__batch_item {
  const uint8_t *key; /* put: the key to install */
  size_t key_len;
  lct_put_decl decl; /* put: the tensor declared */
  uint8_t *device;    /* its bytes in the mapped client buffer, aligned to the element size */
  lct__entry *entry;  /* get: the entry read, referenced by the caller until the callback;
                         put: set by the callback on success, the installed entry (borrowed) */
} lct__batch_item;

/* Called on the loop thread when a batch ends: rc 0, or a negative code with
 * the index of the item at fault (n when none is) and a reason. */
typedef void (*lct__batch_cb)(void *arg, int rc, size_t failed, const char *why);

/* Encodes the n items (distinct keys, device put declarations checked by the
 * caller) and installs them all, or none: the stored versions are untouched
 * on failure. Pool memory for all is reserved up front: LCT_ENOSPC here
 * (*failed: the first item that did not fit; cb is not called). Codebooks
 * follow codebook.h, as for every put. */
int lct__batch_put_start(lct__server *srv, lct__batch_item *items, size_t n, lct__batch_cb cb, void *arg,
                         size_t *failed);

/* Decodes the entries of the n items into their device buffers (each holds
 * at least the entry's raw_bytes). */
int lct__batch_get_start(lct__server *srv, lct__batch_item *items, size_t n, lct__batch_cb cb, void *arg);

#endif
