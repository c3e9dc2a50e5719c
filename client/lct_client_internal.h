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

struct lct_client {
  int sock;              /* a raw NN_REQ socket: liblct numbers its requests and never resends one */
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
  uint8_t token[LCT_TOKEN_MAX]; /* proves itself by challenge-response; never sent */
  int authenticated;     /* a connection authenticated with token (or needing none) */
  uint64_t auth_breaks;  /* broken connections counted when it did: another since, and a new one does again */
  char err[512];
  size_t failed_item;    /* a failed _MANY request's item at fault (the server's failed_item); SIZE_MAX: none */
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
