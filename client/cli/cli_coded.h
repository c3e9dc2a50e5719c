/* cli_coded.h — lct put --encode and get --decode: tensors coded on this host's CPU threads, the wire carrying blobs. */
#ifndef LCT_CLI_CODED_H
#define LCT_CLI_CODED_H

#include <stddef.h>
#include <stdint.h>

#include "lct.h"

#define CLI_THREADS_MAX 64

/* Threads to code on: asked (> 0), else the CPUs online; 1..CLI_THREADS_MAX. */
int cli_threads(int asked);

/* lct_put of data, encoded here in segments of lctd's segment size (at most
 * 1 MiB) with a codebook built from it, on threads threads, and sent as blobs
 * (lct_put_encoded, or a put stream whose batches travel while the next is
 * encoded). 0 or a negative LCT code (LCT_EOP from an lctd that takes no
 * blobs). */
int cli_put_encoded(lct_client *c, const char *key, lct_dtype dtype, const uint64_t *shape, int ndim,
                    const uint8_t *data, size_t bytes, int threads, lct_tensor_info *info);

/* lct_get_alloc of key with its stored blobs sent as they are and decoded
 * here on threads threads; the CRC-32C of the result is checked. *data is
 * malloc'd (free()). */
int cli_get_decoded(lct_client *c, const char *key, int threads, void **data, lct_tensor_info *info);

#endif
