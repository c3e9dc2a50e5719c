/* lct_client_internal.h — what liblct's files share: the client's state, a request's round trip, device and job hooks. */
#ifndef LCT_CLIENT_INTERNAL_H
#define LCT_CLIENT_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>

#include "lct.h"
#include "lct_decl.h"
#include "lct_wire.h"

#ifdef LCT_CLIENT_CUDA
#include <cuda.h> /* types only: driver functions are found through the runtime */
#include <cuda_runtime_api.h>

#define LCT__IPC_EXPORTS 32 /* IPC handles of allocations kept, by the driver's buffer id */
#define LCT__GPUS 64        /* device ordinals whose UUID is kept */

/* An allocation's exported IPC handle. */
typedef struct lct__ipc_export {
  unsigned long long buffer_id; /* unique per allocation for the process's life; 0: free slot */
  uint8_t handle[LCT_IPC_HANDLE_BYTES];
} lct__ipc_export;

typedef CUresult (*lct__cu_attrs_fn)(unsigned n, CUpointer_attribute *attrs, void **data, CUdeviceptr ptr);

/* What the device calls keep between calls (lct_client_device.c). */
typedef struct lct__device_state {
  lct__ipc_export exports[LCT__IPC_EXPORTS];
  int export_next;                        /* slot the next export replaces */
  uint8_t gpu_uuid[LCT__GPUS][LCT_GPU_UUID_BYTES];
  uint8_t gpu_known[LCT__GPUS];
  lct__cu_attrs_fn pointer_attrs;         /* cuPointerGetAttributes; NULL until first use */
  uint8_t boot_id[LCT_BOOT_ID_BYTES];     /* this host's, read at the first device call */
  int boot_known;
  cudaStream_t sync_stream;               /* NULL: device calls synchronize the whole GPU */
} lct__device_state;
#endif

/* The client's background jobs (lct_client_jobs.c): its own queue and thread,
 * under its own lock. */
typedef struct lct__jobs {
  pthread_mutex_t mu;
  pthread_cond_t cv;        /* a job queued, or the client closing */
  lct_job *head, *tail;
  lct_job *waiting_on;      /* another job the thread waits for (held by the queue's job); NULL: none */
  pthread_t thread;
  int started;
  atomic_int closing;       /* read under waiting_on's lock too */
} lct__jobs;

/* Requests in flight on one connection: one. lctd's raw REP socket drops a
 * reply to a connection that is still sending an earlier one (nanomsg
 * 1.1.5), so replies must not overlap on a connection; a client pipelines
 * over several. The bytes stay within lctd's default bounds per connection
 * (64 MiB). */
#define LCT__WINDOW_REQUESTS 1
#define LCT__WINDOW_BYTES (48u << 20)
#define LCT__CONNECTIONS_MAX LCT_CONNECTIONS_MAX

/* One connection to lctd: a raw NN_REQ socket of its own (liblct numbers its
 * requests and never resends one), with its own authentication. */
typedef struct lct__lane {
  int sock;
  uint32_t in_flight;    /* the id of its request awaiting a reply; 0: none */
  int authenticated;     /* it authenticated with the token (or needs none) */
  uint64_t auth_breaks;  /* its broken connections counted when it did: another since, and it does again */
} lct__lane;

struct lct_client {
  lct__lane lanes[LCT__CONNECTIONS_MAX]; /* lanes[0] carries every single request; all carry pipelined ones */
  int timeout_ms;        /* a request's; -1: none */
  int save_timeout_ms;   /* a SAVE's; -1: none */
  int grace_ms;          /* how long a call waits for a connection to lctd */
  uint32_t request_id;   /* the last request's id */
  uint64_t instance;     /* the lctd instance of the last reply; 0: none yet */
  uint64_t breaks_seen;  /* broken connections counted when the last reply's request went out */
  size_t frame;          /* payload bytes per message, <= the server's */
  uint8_t *hdr;          /* prefix + packed request header */
  size_t hdr_cap;
  size_t token_len;      /* 0: no auth token */
  uint8_t token[LCT_TOKEN_MAX]; /* proves itself by challenge-response on every lane; never sent */
  char err[512];
  size_t failed_item;    /* a failed _MANY request's item at fault (the server's failed_item); SIZE_MAX: none */
  int host_path;         /* never the device path (lct_options.host_path) */
  int connections;       /* lanes */
  uint64_t segment_bytes; /* lctd's segment_size; 0: it takes no blobs */
#ifdef LCT_CLIENT_CUDA
  lct__device_state device;
#endif
  lct__jobs jobs;
};

/* A reply: the nanomsg buffer and its unpacked header. */
typedef struct lct__reply {
  void *msg;
  Lctpb__Reply *hdr;
  const uint8_t *payload;
  size_t payload_len;
} lct__reply;

void lct__reply_free(lct__reply *r);

/* Sets c's error text; returns rc. */
int lct__fail(lct_client *c, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Sends one request (header plus optional payload) and waits for its reply.
 * A reply with a nonzero status becomes its negative code, with the server's
 * message in c->err. */
int lct__call(lct_client *c, Lctpb__Request *rq, const void *payload, size_t plen, lct__reply *out);

/* opts as lct_connect reads them into o (defaults for fields the caller's liblct lacked): 0, or
 * LCT_EINVAL when opts was not set up by lct_options_init or sets fields this liblct lacks. */
int lct__options_read(const lct_options *opts, lct_options *o);

/* Pipelined requests, after a lct__call has authenticated the first lane and
 * met its lctd: lct__post sends one (header plus optional payload, which
 * nanomsg copies: it may be reused at once) under a new id on a lane with
 * none in flight (authenticating the lane first where it must; LCT_EBUSY
 * when every lane is busy) and returns without its reply; lct__collect
 * waits for the reply to any of the n ids
 * (0 for those already taken), *which, and parses it (its status is the
 * caller's: lct__reply_status). A broken connection since the last
 * lct__call's reply is LCT_ECONN, another lctd instance LCT_ERESTARTED. */
int lct__post(lct_client *c, Lctpb__Request *rq, const void *payload, size_t plen, uint32_t *id);
int lct__collect(lct_client *c, const uint32_t *ids, size_t n, size_t *which, lct__reply *out);
/* 0 for a reply of status 0; else its negative code, with the server's
 * words in c->err, and the reply freed. */
int lct__reply_status(lct_client *c, lct__reply *r);
/* Sets rq's key: 0, or LCT_ENAMETOOLONG for one of no or too many bytes. */
int lct__key_of(lct_client *c, const char *key, Lctpb__Request *rq);

/* The requests in flight of a pipelined transfer (lct_client_pipe.c). */
typedef struct lct__window {
  uint32_t ids[LCT__WINDOW_REQUESTS * LCT__CONNECTIONS_MAX]; /* 0: a free slot */
  uint64_t bytes[LCT__WINDOW_REQUESTS * LCT__CONNECTIONS_MAX];
  size_t n, cap;
  uint64_t in_bytes, cap_bytes;
  int lost; /* the error of the last wait that emptied the window (its requests' replies will not come), or 0 */
} lct__window;

void lct__window_init(const lct_client *c, lct__window *w);
/* Posts rq with its payload once the window has room for bytes (the
 * request's and its reply's), taking replies meanwhile: each to take(arg,
 * slot, reply), which returns 0 or an error that ends the transfer (and
 * frees the reply either way). *slot receives the request's slot. After an
 * error, the caller drains the window. */
typedef int (*lct__take_fn)(void *arg, size_t slot, lct__reply *r);
int lct__window_post(lct_client *c, lct__window *w, Lctpb__Request *rq, const void *payload, size_t plen,
                     uint64_t bytes, lct__take_fn take, void *arg, size_t *slot);
/* Takes every reply still in flight, whatever fails (a lane left with one would refuse the next request),
 * and returns the first error; a lost connection ends it (its requests went with it). */
int lct__window_drain(lct_client *c, lct__window *w, lct__take_fn take, void *arg);
/* Whether requests may be pipelined now: the first lane authenticated (or
 * needing none) and no lane broken since the last reply. */
int lct__pipeline_ready(const lct_client *c);

/* A put's checked declaration and its TensorMeta (lct__fail on a bad one). */
int lct__put_meta(lct_client *c, lct_dtype dtype, const uint64_t *shape, int ndim, lct_put_decl *d,
                  Lctpb__TensorMeta *meta);
/* A put's declaration, checked as lctd checks it: bytes must be what dtype
 * and shape make. meta's shape points into *d. */
int lct__put_decl(lct_client *c, lct_dtype dtype, const uint64_t *shape, int ndim, size_t bytes, lct_put_decl *d,
                  Lctpb__TensorMeta *meta);

/* What a reply's metadata says of a tensor (zeros for none). */
void lct__info_of(const Lctpb__TensorMeta *m, lct_tensor_info *info);

/* lct_put_device_many (put) or lct_get_device_many of t[0..n); event: a
 * job's cudaEvent_t (NULL: as lct_set_device_stream says). */
int lct__device_many(lct_client *c, int put, const lct_device_tensor *t, size_t n, void *event, size_t *failed);

/* Prepares c's job state; 0 or LCT_ENOMEM. */
int lct__jobs_init(lct_client *c);
/* Lets the running job finish, cancels the queued ones, joins the thread and
 * releases the job state. */
void lct__jobs_stop(lct_client *c);

#endif
