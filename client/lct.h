/* lct.h — liblct: the client of lctd, which keeps named tensors losslessly compressed in (GPU or host) memory. */
#ifndef LCT_H
#define LCT_H

#include <stddef.h>
#include <stdint.h>

#include "lct_api.h"          /* LCT_API */
#include "lct_dtype.h"        /* lct_dtype, lct_dtype_size/name/parse */
#include "lct_error.h"        /* LCT_E* codes, lct_strerror */
#include "lct_stats_fields.h" /* LCT_STATS_FIELDS: lct_server_stats's fields */
#include "lct_version.h"      /* LCT_VERSION_MAJOR/MINOR/PATCH/STRING/NUMBER: this header's */

#ifdef __cplusplus
extern "C" {
#endif

#define LCT_DEFAULT_ENDPOINT "ipc:///tmp/lctd.sock"
#define LCT_MAX_DIMS 8 /* most dimensions of a tensor's shape */

/* The version of the liblct loaded, as LCT_VERSION_NUMBER and
 * LCT_VERSION_STRING give the header's: MAJOR * 10000 + MINOR * 100 + PATCH,
 * and "MAJOR.MINOR.PATCH". */
LCT_API unsigned lct_version_number(void);
LCT_API const char *lct_version_string(void);

/* A connection to one lctd. Not thread-safe: use one client per thread.
 * Every function returns 0 or a negative LCT_E* code; lct_strerror() names
 * it and lct_last_error() gives the detail (often the server's words).
 *
 * A lost lctd: liblct never sends a request twice. A call whose connection
 * to lctd breaks while its request is in flight (lctd killed, say) fails
 * within about 2 s, whatever its timeout: LCT_ERESTARTED when another lctd
 * answers on the endpoint by then, else LCT_ECONN; the request may or may not
 * have run. A call that finds no connection to lctd for 1.5 s fails with
 * LCT_ECONN, unsent. Every reply names the lctd instance that sent it: the
 * first call answered by another instance than the last reply's (a restarted
 * lctd, which holds only what it restored) fails with LCT_ERESTARTED, unsent
 * when liblct saw the connection break first; the next call goes ahead. An
 * lctd that is alive but stopped or hung keeps its connections: the timeout
 * bounds the wait for it. */
typedef struct lct_client lct_client;

typedef struct lct_options {
  size_t size;            /* sizeof(lct_options) as its user was compiled: set by lct_options_init */
  const char *endpoint;   /* NULL: $LCT_ENDPOINT, else LCT_DEFAULT_ENDPOINT; "tcp://host:port" or "ipc:///path" */
  int timeout_ms;         /* per request; 0: 30000; negative: wait forever (a lost lctd still ends a call) */
  int connect_timeout_ms; /* for the ping lct_connect sends; 0: 5000 */
  size_t frame_bytes;     /* payload bytes per message; 0: 16 MiB. Lowered to the server's
                             limit; tensors larger than a frame travel in several */
  const char *auth_token_file; /* NULL: $LCT_AUTH_TOKEN_FILE, else none. A file whose first line is
                             a token of the server (its auth_token_file's, or a tenant's of its
                             access_file), which liblct proves by challenge-response on every new
                             connection and never sends; unreadable or malformed: lct_connect fails
                             with LCT_EACCES */
  int save_timeout_ms;    /* for lct_save, which takes as long as lctd's disk needs; 0 or negative: no
                             limit (the default: a lost lctd still ends it) */
  int host_path;          /* 1: the host path only, as a client on another host: the device calls copy through
                             host memory and every byte crosses the socket (what a remote trainer measures on
                             lctd's own host); negative: device to device where lctd can, whatever
                             $LCT_HOST_PATH says; 0: $LCT_HOST_PATH ("1" sets it), else device to device */
  int connections;        /* connections to lctd (lanes, each a socket of its own that proves the token by
                             itself) that the frames of a large tensor and queued host jobs spread over, one
                             request in flight on each; 0: $LCT_CONNECTIONS, else 1; at most
                             LCT_CONNECTIONS_MAX */
} lct_options;
#define LCT_CONNECTIONS_MAX 16

/* Sets every field to its default (0 or NULL, as each says) and o->size.
 * Start from it: a later liblct may add fields, which default to 0 and which
 * it reads only from callers whose size covers them. Bindings that cannot
 * call the inline function pass their struct's size to lct_options_init_sized. */
LCT_API void lct_options_init_sized(lct_options *o, size_t size);
static inline void lct_options_init(lct_options *o) { lct_options_init_sized(o, sizeof *o); }

/* What the server holds for a key. */
typedef struct lct_tensor_info {
  lct_dtype dtype;                /* a server newer than this header may report one it does not name */
  int ndim;
  uint64_t shape[LCT_MAX_DIMS];
  uint64_t raw_bytes;             /* product(shape) * lct_dtype_size(dtype) */
  uint64_t stored_bytes;          /* compressed bytes resident in the server */
  uint64_t version;               /* increases with every put of the key */
  uint32_t checksum;              /* CRC-32C of the raw bytes */
} lct_tensor_info;

/* Connects and pings the server: LCT_ECONN if it does not answer within
 * connect_timeout_ms, LCT_EINVAL for a malformed endpoint or options not set
 * up by lct_options_init (or asking for fields this liblct lacks), LCT_EACCES
 * when the endpoint authenticates and no token was given or it is wrong (or
 * the token file cannot be read). opts may be NULL: the defaults.
 *
 * A tenant's token confines every call to the keys that start with the
 * tenant's prefix (LCT_EACCES for others; lct_list lists only them) and its
 * puts to the tenant's quota of stored bytes (LCT_ENOSPC past it); lct_stats
 * reports the tenant's own tensors and quota, and lct_save is LCT_EACCES. */
LCT_API int lct_connect(const lct_options *opts, lct_client **out);
LCT_API void lct_close(lct_client *c);
/* Releases memory liblct handed out (lct_get_alloc data, lct_stats text); NULL is a no-op. */
LCT_API void lct_free(void *p);
/* Detail of the last failure on c ("" if none); valid until the next call. */
LCT_API const char *lct_last_error(const lct_client *c);

/* Stores bytes bytes of host memory data as key, atomically: the tensor is
 * visible only once complete, and a failed put (LCT_ENOSPC when the server's
 * pool is full, a lost connection, ...) leaves the previous version intact.
 * bytes must equal product(shape[0..ndim)) * lct_dtype_size(dtype) (ndim 0
 * is a scalar). Keys are 1..1024 bytes. info, if not NULL, receives what was
 * stored (version, stored_bytes, ...). */
LCT_API int lct_put(lct_client *c, const char *key, lct_dtype dtype, const uint64_t *shape, int ndim,
                    const void *data, size_t bytes, lct_tensor_info *info);

/* Reads key into buf (cap bytes); LCT_EBUFSIZE if it does not fit (info is
 * filled then, so the caller can retry with info->raw_bytes). The checksum
 * is verified (LCT_ECHECKSUM). info may be NULL. */
LCT_API int lct_get(lct_client *c, const char *key, void *buf, size_t cap, lct_tensor_info *info);
/* Same, into a buffer of info->raw_bytes bytes that liblct allocates (free with lct_free()). */
LCT_API int lct_get_alloc(lct_client *c, const char *key, void **data, lct_tensor_info *info);

/* Large tensors travel in frames, spread over lct_options.connections
 * connections, one request in flight on each (lctd's nanomsg socket drops
 * a reply that overlaps an earlier one on its connection).
 *
 * Encoded tensors: the bytes on the wire are blobs of proto/FORMAT.md, which
 * lctd validates in full and stores as sent (no encode on its side), and
 * sends back as stored; liblct does not code them (the codec library, the
 * `lct` tool and the Python binding do). A tensor's blobs lie back to back:
 * every blob but the last holds the same number of raw bytes, a multiple of
 * 64 KiB of at most lct_segment_bytes(c), the last the rest (an empty tensor
 * is one empty blob); each must fit in a frame. checksum is the CRC-32C of
 * the raw tensor. lctd refuses blobs that disagree with dtype and shape
 * (LCT_EDTYPE, LCT_ESIZE), that are malformed anywhere (LCT_ECORRUPT), or
 * whose data does not match checksum (LCT_ECHECKSUM); an lctd too old to
 * take blobs is LCT_EOP, unsent. */
/* The CRC-32C (Castagnoli) of len bytes, continuing crc (0 to start): the
 * checksum an encoded put declares for its raw tensor. */
LCT_API uint32_t lct_checksum(uint32_t crc, const void *bytes, size_t len);
LCT_API int lct_put_encoded(lct_client *c, const char *key, lct_dtype dtype, const uint64_t *shape, int ndim,
                            uint32_t checksum, const void *blobs, size_t len, lct_tensor_info *info);
/* The stored blobs of key, back to back in a buffer liblct allocates (*len
 * bytes; free with lct_free()); info (not NULL) says what they hold. A
 * reader decodes each blob and checks the CRC-32C of the result against
 * info->checksum. */
LCT_API int lct_get_encoded(lct_client *c, const char *key, void **blobs, size_t *len, lct_tensor_info *info);
/* The most raw bytes one blob of an encoded put from this client may hold:
 * lctd's segment_size, lowered to the largest multiple of 64 KiB whose blob
 * surely fits a frame (64 KiB at least); 0 when lctd takes no blobs. */
LCT_API uint64_t lct_segment_bytes(const lct_client *c);
/* The payload bytes per message this client sends and accepts (its frame,
 * lowered to lctd's). */
LCT_API size_t lct_frame_bytes(const lct_client *c);

/* A put written as it is produced: raw bytes (encoded 0) or whole blobs
 * (encoded 1, laid out as for lct_put_encoded) in order, each write sent at
 * once with earlier ones still in flight, so that the caller produces the
 * next piece (encodes it, say) while the last travels. The caller's bytes
 * may be reused when a write returns. Nothing is visible until
 * lct_put_stream_commit, which stores the tensor atomically (checksum as for
 * lct_put_encoded; for raw bytes lctd checks it too) and frees the stream;
 * lct_put_stream_abort drops it. The client serves nothing else meanwhile.
 * A write's error ends the stream: commit or abort it to free it. */
typedef struct lct_put_stream lct_put_stream;
LCT_API int lct_put_stream_open(lct_client *c, const char *key, lct_dtype dtype, const uint64_t *shape, int ndim,
                                uint32_t checksum, int encoded, lct_put_stream **out);
LCT_API int lct_put_stream_write(lct_put_stream *s, const void *bytes, size_t len);
LCT_API int lct_put_stream_commit(lct_put_stream *s, lct_tensor_info *info);
LCT_API void lct_put_stream_abort(lct_put_stream *s);

/* GPU buffers. lct_put_device and lct_get_device take a pointer into CUDA
 * device memory (cudaMalloc'd, directly or through an allocator such as
 * PyTorch's) instead of host memory. When lctd runs on the same host with the
 * cuda backend on the buffer's GPU, or on another that reaches it by peer
 * access (NVLink or PCIe), the tensor moves device to device and no byte
 * passes through the socket or host memory: liblct sends the CUDA IPC handle
 * of the allocation the buffer lies in (exported once per allocation and
 * cached), and lctd, which keeps the mapping open in a bounded cache, encodes
 * straight from the buffer and decodes straight into it. Otherwise (a
 * cpu-backend or remote lctd, a GPU without peer access to the buffer's,
 * memory that cannot be shared by IPC such as cudaMallocAsync pools, an older
 * server) the call falls back to the host path by itself: a copy to host
 * memory and lct_put, or lct_get and a copy back. lctd counts the calls it served (lct_device_ops_total) and those
 * it sent to the host path, by reason (lct_device_fallbacks_total).
 *
 * Synchronization: both calls first synchronize the GPU holding the buffer
 * (cudaDeviceSynchronize, every stream; the caller's current device is
 * restored; lct_set_device_stream narrows it to one stream), so work queued
 * before the call that writes the buffer (put) or uses it (get) has
 * completed. When they return, lctd is done with the buffer: after a put it
 * may be overwritten; after a get the tensor is in place for any later work,
 * on any stream. The device get does not re-check the CRC-32C on the host
 * (the bytes never reach it); lctd's decoder checks every blob. dptr must not
 * be freed during the call.
 *
 * A liblct built without CUDA (LCT_CUDA=OFF, or no toolkit; lct_device_path
 * says so) returns LCT_ENODEV; a dptr that is not device memory is
 * LCT_EINVAL. Otherwise the arguments and results are those of lct_put and
 * lct_get (cap: bytes at dptr). */
LCT_API int lct_put_device(lct_client *c, const char *key, lct_dtype dtype, const uint64_t *shape, int ndim,
                           const void *dptr, size_t bytes, lct_tensor_info *info);
LCT_API int lct_get_device(lct_client *c, const char *key, void *dptr, size_t cap, lct_tensor_info *info);

/* 1 when this liblct has the device path (it was built with CUDA): the
 * device calls and jobs below are served, device to device where lctd can,
 * else through host memory; 0 when every one of them answers LCT_ENODEV, and
 * a caller with device buffers copies them through host memory itself. */
LCT_API int lct_device_path(const lct_client *c);

/* Many device tensors in few requests: what an optimizer moves every step.
 * Consecutive items whose buffers lie in one CUDA allocation (a scratch
 * buffer, say) travel in one request, up to LCT_DEVICE_ITEMS_MAX (1024) items,
 * which lctd codes in one pass of its GPU codec; a request's puts are
 * installed all or none. Where lctd cannot go device to device the items take
 * the host path one by one (each put atomic by itself). Synchronization and
 * errors are as for lct_put_device and lct_get_device; buffers must be
 * aligned to their element size, and keys distinct within a call. On failure
 * *failed (if not NULL) is the index of the item at fault, or of the first
 * item of the request that failed as a whole, and lct_last_error() says why.
 * Items of earlier requests are done (their puts stored); the failed
 * request's puts are stored none, or on the host path those before *failed;
 * later items were not sent. On success *failed is n. */
typedef struct lct_device_tensor {
  const char *key;
  lct_dtype dtype;         /* put */
  const uint64_t *shape;   /* put: ndim element counts */
  int ndim;                /* put */
  void *dptr;              /* device memory: the source (put) or destination (get) */
  size_t bytes;            /* put: the tensor's bytes; get: the bytes at dptr */
  lct_tensor_info *info;   /* NULL, or receives what was stored or read */
} lct_device_tensor;

LCT_API int lct_put_device_many(lct_client *c, const lct_device_tensor *t, size_t n, size_t *failed);
LCT_API int lct_get_device_many(lct_client *c, const lct_device_tensor *t, size_t n, size_t *failed);

/* Narrows the synchronization of this client's later device calls (single
 * and _many) from the whole GPU to one CUDA stream (a cudaStream_t; NULL, the
 * default, restores the whole GPU): each call then waits for the work queued
 * on that stream only, so a trainer's other streams keep running while lctd
 * codes its buffers. Work on other streams that writes a put's buffer or uses
 * a get's must be ordered before the call by the caller (an event the stream
 * waits on, say). The stream must belong to the buffers' GPU and outlive its
 * use here. The host path (where lctd cannot go device to device) still
 * synchronizes the whole GPU around its copies. LCT_ENODEV from a liblct
 * built without CUDA. */
LCT_API int lct_set_device_stream(lct_client *c, void *stream);

/* Device batches in the background: what an optimizer runs beside its
 * updates without a thread of its own. lct_submit_put_device_many queues a
 * lct_put_device_many of t[0..n) on this client's job thread (started at the
 * first job) and returns at once; lct_submit_get_device_many, a
 * lct_get_device_many. Each client has its own queue and thread, which runs
 * the client's jobs in order. For each it first waits for `after`
 * (a job of any client, or NULL) to finish; if that one failed, this one
 * fails with LCT_ECANCELED and sends nothing. It then makes the call as the
 * synchronous one would, except that it waits for the CUDA event `event` (a
 * cudaEvent_t recorded after the work that writes a put's buffers or last
 * uses a get's) instead of synchronizing the GPU; NULL synchronizes as
 * lct_set_device_stream says. The items, their keys, shapes and infos, the
 * buffers and the event must stay valid until the job has finished. While a
 * client has unfinished jobs, only the submit calls and lct_close may be
 * called on it (lct_last_error included: a job's error is its own).
 *
 * lct_job_wait blocks until the job has finished and returns what the call
 * returned, *failed (if not NULL) as the call sets it (n for a canceled
 * job; LCT_EINVAL for no job); lct_job_error is the job's lct_last_error()
 * text ("" until it has finished, and for no job). lct_job_free waits for
 * the job and releases it (a job another job waits for lives on until that
 * one has looked at it). lct_close lets
 * the running job finish (one still waiting for another client's job is
 * canceled), fails the queued ones with LCT_ECANCELED and stops the thread;
 * their handles stay the caller's to free. The submit calls return
 * LCT_EINVAL (no job handle, or no items with n > 0), LCT_ENOMEM (no job
 * or thread) or LCT_ENODEV (a liblct without the device path) without
 * touching lct_last_error(). */
typedef struct lct_job lct_job;

LCT_API int lct_submit_put_device_many(lct_client *c, const lct_device_tensor *t, size_t n, void *event,
                                       lct_job *after, lct_job **job);
LCT_API int lct_submit_get_device_many(lct_client *c, const lct_device_tensor *t, size_t n, void *event,
                                       lct_job *after, lct_job **job);
LCT_API int lct_job_wait(lct_job *job, size_t *failed);
LCT_API const char *lct_job_error(const lct_job *job);
LCT_API void lct_job_free(lct_job *job);

/* Host puts and gets in the background: lct_submit_put
 * queues a lct_put, lct_submit_get a lct_get, on the client's job thread
 * (the queue of the device jobs above, with the same rules: `after`, waits,
 * errors, lct_close; data, buf and info stay valid until the job has
 * finished), in order, while the caller goes on. Jobs that fit one frame
 * and wait for no other go out together, several requests in flight, except
 * that a job on a key waits for the earlier ones on that key: jobs on one
 * key take effect in the order submitted, jobs on different keys may finish
 * in any order. */
LCT_API int lct_submit_put(lct_client *c, const char *key, lct_dtype dtype, const uint64_t *shape, int ndim,
                           const void *data, size_t bytes, lct_tensor_info *info, lct_job *after, lct_job **job);
LCT_API int lct_submit_get(lct_client *c, const char *key, void *buf, size_t cap, lct_tensor_info *info,
                           lct_job *after, lct_job **job);

/* LCT_ENOENT if the key does not exist. */
LCT_API int lct_delete(lct_client *c, const char *key);
LCT_API int lct_stat(lct_client *c, const char *key, lct_tensor_info *info);

typedef struct lct_list_entry {
  char *key;
  lct_tensor_info info;
} lct_list_entry;

typedef struct lct_list_page {
  size_t n;
  lct_list_entry *entries; /* in bytewise key order */
  char *next_cursor;       /* pass to the next lct_list; NULL on the last page */
} lct_list_page;

/* Keys starting with prefix (NULL: all) after cursor (NULL: from the start),
 * at most limit (0: 100; the server caps it at 512). Free with lct_list_free. */
LCT_API int lct_list(lct_client *c, const char *prefix, const char *cursor, size_t limit, lct_list_page **out);
LCT_API void lct_list_free(lct_list_page *page);

/* The server's summary counters, one uint64_t per row of lct_stats_fields.h
 * (which says what each counts), in its order: tensors, raw_bytes,
 * stored_bytes, pool_capacity, pool_used, ..., device_puts, device_gets
 * (tensors served device to device), device_fallbacks (device calls the
 * server sent to the host path), pool_held (memory the server's pool holds:
 * on a cuda server the device memory it has mapped). */
typedef struct lct_server_stats {
#define LCT__STATS_MEMBER(name, what) uint64_t name;
  LCT_STATS_FIELDS(LCT__STATS_MEMBER)
#undef LCT__STATS_MEMBER
} lct_server_stats;

/* Server counters; text, if not NULL, receives all of them as Prometheus
 * text (NUL-terminated; free with lct_free()). out may be NULL. */
LCT_API int lct_stats(lct_client *c, lct_server_stats *out, char **text);
/* The name of lct_server_stats's i-th field; NULL past the last. */
LCT_API const char *lct_stats_field_name(size_t i);

/* Asks the server to write its tensors to its persist_dir now (those changed
 * since the last save; the files of deleted keys are removed). written, if not
 * NULL, receives the number of tensor files written. LCT_ECONFIG when the
 * server has no persist_dir, LCT_EIO when some could not be written. It waits
 * save_timeout_ms (lct_options), not timeout_ms: no limit by default. */
LCT_API int lct_save(lct_client *c, uint64_t *written);

typedef struct lct_server_info {
  char server[64];     /* "lctd 0.1.0" */
  char backend[16];    /* "cpu" or "cuda" */
  int protocol;        /* wire protocol version */
  uint64_t frame_bytes; /* the server's frame limit */
  uint64_t instance;   /* this run of lctd: random, drawn at its start; another after a restart
                          (0 from an lctd too old to say). Fields are only appended. */
} lct_server_info;

/* One round trip; info may be NULL. */
LCT_API int lct_ping(lct_client *c, lct_server_info *info);

/* Endpoint sets: one lctd per GPU (or per host), each key held by one of
 * them. A set places a key by rendezvous (highest random weight) hashing
 * over its endpoint strings: the same key always goes to the same endpoint,
 * whatever the order of the list; removing an endpoint moves only the keys it
 * held (each to the endpoint of next highest weight), and adding one moves to
 * it only the keys it now wins. Clients that share keys must list the same
 * endpoint strings (an lctd reached as tcp://gpu0:7878 by some and
 * tcp://10.0.0.5:7878 by others is two endpoints). The weight of endpoint e
 * for key k is SipHash-2-4 of k's bytes under the 16-byte key
 * BLAKE2b-128(e's bytes) (unkeyed), read as a little-endian uint64; the
 * highest wins, a tie goes to the bytewise smaller endpoint.
 *
 * A set connects to an endpoint at its first use and keeps the connection; a
 * dead endpoint fails the calls for its keys only (LCT_ECONN after
 * connect_timeout_ms, retried at each use: a restarted lctd is found again),
 * and never sends its keys elsewhere. A set, like a client, is for one thread
 * at a time; lct_client_set_place, lct_client_set_size and
 * lct_client_set_endpoint only read it. */
typedef struct lct_client_set lct_client_set;

#define LCT_ENDPOINTS_MAX 1024 /* most endpoints in a set */

/* Opens a set over endpoints, a list separated by commas (blanks around each
 * ignored); NULL or "" takes the one endpoint opts->endpoint if given, else
 * the list $LCT_ENDPOINTS, else the one endpoint $LCT_ENDPOINT, else the default.
 * Connects to none: opts (NULL: the defaults) serve each connection, its
 * endpoint field aside. LCT_EINVAL for an empty entry, a duplicate, one that
 * is not "scheme://address", more than LCT_ENDPOINTS_MAX, or options not set
 * up by lct_options_init; LCT_ENOMEM. */
LCT_API int lct_client_set_open(const lct_options *opts, const char *endpoints, lct_client_set **out);
/* Closes every connection of the set (lct_close); NULL is a no-op. */
LCT_API void lct_client_set_close(lct_client_set *s);
LCT_API size_t lct_client_set_size(const lct_client_set *s);
/* The i-th endpoint, as listed; NULL past the last. */
LCT_API const char *lct_client_set_endpoint(const lct_client_set *s, size_t i);
/* The index of the endpoint that holds key (a NUL-terminated key of 1..1024 bytes). */
LCT_API size_t lct_client_set_place(const lct_client_set *s, const char *key);
/* The connection to the i-th endpoint, opened at its first use (lct_connect);
 * it stays the set's: never lct_close it. LCT_EINVAL past the last endpoint,
 * or lct_connect's error, with lct_client_set_last_error naming the endpoint. */
LCT_API int lct_client_set_client(lct_client_set *s, size_t i, lct_client **out);
/* lct_client_set_client of the endpoint that holds key; an error names the key too. */
LCT_API int lct_client_set_for_key(lct_client_set *s, const char *key, lct_client **out);
/* Detail of the set's last failure ("" if none); valid until its next call. */
LCT_API const char *lct_client_set_last_error(const lct_client_set *s);

/* The structures above, for bindings that declare them by hand. */
typedef enum lct_struct {
  LCT_STRUCT_OPTIONS = 1,
  LCT_STRUCT_TENSOR_INFO,
  LCT_STRUCT_DEVICE_TENSOR,
  LCT_STRUCT_LIST_ENTRY,
  LCT_STRUCT_LIST_PAGE,
  LCT_STRUCT_SERVER_STATS,
  LCT_STRUCT_SERVER_INFO,
} lct_struct;

/* sizeof the structure in this liblct; 0 for one it does not know. */
LCT_API size_t lct_struct_size(lct_struct which);

#ifdef __cplusplus
}
#endif
#endif
