/* lct_client.c — liblct: requests over a nanomsg REQ socket, large tensors in bounded frames, end-to-end checksums. */
#include "lct.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <nanomsg/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lct_checksum.h"
#include "lct_wire.h"

#ifdef LCT_CLIENT_CUDA
#include <cuda.h> /* types only: driver functions are found through the runtime */
#include <cuda_runtime_api.h>
#endif

#define LCT__TIMEOUT_DEFAULT 30000
#define LCT__CONNECT_TIMEOUT_DEFAULT 5000
#define LCT__STALE_RETRIES 3 /* whole-tensor restarts when a ranged read sees a newer version */
#define LCT__SOCKET_BUFFER (1 << 20) /* NN_SNDBUF / NN_RCVBUF: 128 KiB slows tcp several-fold */

_Static_assert(LCT_MAX_DIMS == 8, "lct.h and lct_wire.h agree on the rank limit");

#ifdef LCT_CLIENT_CUDA
#define LCT__IPC_EXPORTS 32 /* IPC handles of allocations kept, by the driver's buffer id */
#define LCT__GPUS 64        /* device ordinals whose UUID is kept */

/* An allocation's exported IPC handle. */
typedef struct lct__ipc_export {
  unsigned long long buffer_id; /* unique per allocation for the process's life; 0: free slot */
  uint8_t handle[LCT_IPC_HANDLE_BYTES];
} lct__ipc_export;

typedef CUresult (*lct__cu_attrs_fn)(unsigned n, CUpointer_attribute *attrs, void **data, CUdeviceptr ptr);
#endif

struct lct_client {
  int sock;
  size_t frame;          /* payload bytes per message, <= the server's */
  uint8_t *hdr;          /* prefix + packed request header */
  size_t hdr_cap;
  size_t token_len;      /* 0: no auth token */
  uint8_t token[LCT_TOKEN_MAX];
  char err[512];
  size_t failed_item;    /* a failed _MANY request's item at fault (the server's failed_item); SIZE_MAX: none */
#ifdef LCT_CLIENT_CUDA
  lct__ipc_export exports[LCT__IPC_EXPORTS];
  int export_next;                        /* slot the next export replaces */
  uint8_t gpu_uuid[LCT__GPUS][LCT_GPU_UUID_BYTES];
  uint8_t gpu_known[LCT__GPUS];
  lct__cu_attrs_fn pointer_attrs;         /* cuPointerGetAttributes; NULL until first use */
  uint8_t boot_id[LCT_BOOT_ID_BYTES];     /* this host's, read at the first device call */
  int boot_known;
  cudaStream_t sync_stream;               /* NULL: device calls synchronize the whole GPU */
#endif
  /* Background device jobs (lct_submit_device_many), under lct__jobs_mu. */
  lct_job *jobs_head, *jobs_tail;
  pthread_t jobs_thread;
  int jobs_started, jobs_closing;
};

/* A reply: the nanomsg buffer and its unpacked header. */
typedef struct lct__reply {
  void *msg;
  Lctpb__Reply *hdr;
  const uint8_t *payload;
  size_t payload_len;
} lct__reply;

static void lct__reply_free(lct__reply *r) {
  if (r->hdr != NULL)
    lctpb__reply__free_unpacked(r->hdr, NULL);
  if (r->msg != NULL)
    nn_freemsg(r->msg);
  memset(r, 0, sizeof *r);
}

static int lct__fail(lct_client *c, int rc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int lct__fail(lct_client *c, int rc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->err, sizeof c->err, fmt, ap);
  va_end(ap);
  return rc;
}

/* Sends one request (header plus optional payload) and waits for its reply.
 * A reply with a nonzero status becomes its negative code, with the server's
 * message in c->err. */
static int lct__call(lct_client *c, Lctpb__Request *rq, const void *payload, size_t plen,
                     lct__reply *out) {
  memset(out, 0, sizeof *out);
  c->failed_item = SIZE_MAX;
  rq->payload_bytes = plen;
  if (c->token_len > 0) {
    rq->has_auth_token = 1;
    rq->auth_token.data = c->token;
    rq->auth_token.len = c->token_len;
  }
  size_t hlen = lctpb__request__get_packed_size(rq);
  if (hlen > LCT_WIRE_HEADER_MAX)
    return lct__fail(c, LCT_E2BIG, "request header of %zu bytes", hlen);
  if (LCT_WIRE_PREFIX_BYTES + hlen > c->hdr_cap) {
    size_t cap = LCT_WIRE_PREFIX_BYTES + hlen + 256;
    uint8_t *p = realloc(c->hdr, cap);
    if (p == NULL)
      return lct__fail(c, LCT_ENOMEM, "out of memory for a request header");
    c->hdr = p;
    c->hdr_cap = cap;
  }
  lct_wire_prefix(c->hdr, hlen);
  lctpb__request__pack(rq, c->hdr + LCT_WIRE_PREFIX_BYTES);

  struct nn_iovec iov[2] = {{c->hdr, LCT_WIRE_PREFIX_BYTES + hlen}, {(void *)payload, plen}};
  struct nn_msghdr mh;
  memset(&mh, 0, sizeof mh);
  mh.msg_iov = iov;
  mh.msg_iovlen = plen > 0 ? 2 : 1;
  int rc;
  while ((rc = nn_sendmsg(c->sock, &mh, 0)) < 0 && nn_errno() == EINTR)
    ;
  if (rc < 0) {
    int e = nn_errno();
    return lct__fail(c, e == ETIMEDOUT ? LCT_ETIMEDOUT : LCT_ECONN, "send: %s", nn_strerror(e));
  }
  void *msg = NULL;
  int len;
  while ((len = nn_recv(c->sock, &msg, NN_MSG, 0)) < 0 && nn_errno() == EINTR)
    ;
  if (len < 0) {
    int e = nn_errno();
    return lct__fail(c, e == ETIMEDOUT ? LCT_ETIMEDOUT : LCT_ECONN, "no reply: %s",
                     nn_strerror(e));
  }
  lct_wire_frame f;
  rc = lct_wire_split(msg, (size_t)len, &f);
  if (rc == 0)
    rc = lct_wire_reply_parse(&f, &out->hdr);
  if (rc != 0) {
    nn_freemsg(msg);
    return lct__fail(c, rc, "malformed reply from the server");
  }
  out->msg = msg;
  out->payload = f.payload;
  out->payload_len = f.payload_len;
  uint32_t status = out->hdr->status;
  if (status == 0) {
    c->err[0] = '\0';
    return 0;
  }
  rc = status < 64 ? -(int)status : LCT_EPROTO;
  c->failed_item = out->hdr->has_failed_item ? out->hdr->failed_item : SIZE_MAX;
  lct__fail(c, rc, "%s", out->hdr->message != NULL ? out->hdr->message : lct_strerror(rc));
  lct__reply_free(out);
  return rc;
}

static int lct__key(lct_client *c, const char *key, Lctpb__Request *rq) {
  size_t len = key != NULL ? strlen(key) : 0;
  if (lct_wire_key_check((const uint8_t *)key, len) != 0)
    return lct__fail(c, LCT_ENAMETOOLONG, "key must be 1..%d bytes", LCT_KEY_MAX);
  rq->has_key = 1;
  rq->key.data = (uint8_t *)key;
  rq->key.len = len;
  return 0;
}

static void lct__info_of(const Lctpb__TensorMeta *m, lct_tensor_info *info) {
  memset(info, 0, sizeof *info);
  if (m == NULL)
    return;
  info->dtype = (int)m->dtype;
  info->ndim = (int)m->n_shape; /* <= LCT_MAX_DIMS: lct_wire_reply_parse checked */
  for (size_t i = 0; i < m->n_shape; i++)
    info->shape[i] = m->shape[i];
  info->raw_bytes = m->raw_bytes;
  info->stored_bytes = m->stored_bytes;
  info->version = m->version;
  info->checksum = m->checksum;
}

int lct_connect(const lct_options *opts, lct_client **out) {
  lct_options o = {0};
  if (opts != NULL)
    o = *opts;
  if (o.endpoint == NULL)
    o.endpoint = getenv("LCT_ENDPOINT");
  if (o.endpoint == NULL || *o.endpoint == '\0')
    o.endpoint = LCT_DEFAULT_ENDPOINT;
  int timeout = o.timeout_ms == 0 ? LCT__TIMEOUT_DEFAULT : o.timeout_ms < 0 ? -1 : o.timeout_ms;
  int connect_timeout =
      o.connect_timeout_ms > 0 ? o.connect_timeout_ms : LCT__CONNECT_TIMEOUT_DEFAULT;
  size_t frame = o.frame_bytes == 0 ? LCT_FRAME_DEFAULT : o.frame_bytes;
  if (frame < LCT_FRAME_MIN || frame > LCT_FRAME_MAX)
    return LCT_EINVAL;

  lct_client *c = calloc(1, sizeof *c);
  if (c == NULL)
    return LCT_ENOMEM;
  c->frame = frame;
  const char *token_file = o.auth_token_file != NULL ? o.auth_token_file : getenv("LCT_AUTH_TOKEN_FILE");
  if (token_file != NULL && *token_file != '\0' && lct_token_file_read(token_file, c->token, &c->token_len) != 0) {
    free(c);
    return LCT_EACCES;
  }
  int max_msg = lct_wire_msg_max(frame);
  int resend = INT_MAX; /* no silent resends: a put chunk is not idempotent */
  int one = 1, buf = LCT__SOCKET_BUFFER;
  if ((c->sock = nn_socket(AF_SP, NN_REQ)) < 0) {
    free(c);
    return LCT_ENOMEM;
  }
  if (nn_setsockopt(c->sock, NN_SOL_SOCKET, NN_RCVMAXSIZE, &max_msg, sizeof max_msg) < 0 ||
      nn_setsockopt(c->sock, NN_REQ, NN_REQ_RESEND_IVL, &resend, sizeof resend) < 0 ||
      nn_setsockopt(c->sock, NN_SOL_SOCKET, NN_SNDBUF, &buf, sizeof buf) < 0 ||
      nn_setsockopt(c->sock, NN_SOL_SOCKET, NN_RCVBUF, &buf, sizeof buf) < 0 ||
      nn_setsockopt(c->sock, NN_SOL_SOCKET, NN_SNDTIMEO, &connect_timeout, sizeof(int)) < 0 ||
      nn_setsockopt(c->sock, NN_SOL_SOCKET, NN_RCVTIMEO, &connect_timeout, sizeof(int)) < 0 ||
      (strncmp(o.endpoint, "tcp://", 6) == 0 &&
       nn_setsockopt(c->sock, NN_TCP, NN_TCP_NODELAY, &one, sizeof one) < 0) ||
      nn_connect(c->sock, o.endpoint) < 0) {
    nn_close(c->sock);
    free(c);
    return LCT_EINVAL;
  }
  lct_server_info info;
  int rc = lct_ping(c, &info);
  if (rc == 0 && info.protocol != LCT_WIRE_VERSION)
    rc = LCT_EVERSION;
  if (rc == 0 && (nn_setsockopt(c->sock, NN_SOL_SOCKET, NN_SNDTIMEO, &timeout, sizeof(int)) < 0 ||
                  nn_setsockopt(c->sock, NN_SOL_SOCKET, NN_RCVTIMEO, &timeout, sizeof(int)) < 0))
    rc = LCT_EINVAL;
  if (rc != 0) {
    lct_close(c);
    return rc == LCT_ETIMEDOUT ? LCT_ECONN : rc;
  }
  if (info.frame_bytes >= LCT_FRAME_MIN && info.frame_bytes < c->frame)
    c->frame = info.frame_bytes;
  *out = c;
  return 0;
}

static void lct__jobs_stop(lct_client *c);

void lct_close(lct_client *c) {
  if (c == NULL)
    return;
  lct__jobs_stop(c);
  nn_close(c->sock);
  free(c->hdr);
  free(c);
}

const char *lct_last_error(const lct_client *c) { return c != NULL ? c->err : ""; }

int lct_ping(lct_client *c, lct_server_info *info) {
  Lctpb__Request rq = LCTPB__REQUEST__INIT;
  rq.op = LCTPB__OP__OP_PING;
  lct__reply r;
  int rc = lct__call(c, &rq, NULL, 0, &r);
  if (rc != 0)
    return rc;
  const Lctpb__ServerInfo *si = r.hdr->info;
  if (si == NULL) {
    lct__reply_free(&r);
    return lct__fail(c, LCT_EPROTO, "ping reply without server info");
  }
  if (info != NULL) {
    memset(info, 0, sizeof *info);
    snprintf(info->server, sizeof info->server, "%s", si->server);
    snprintf(info->backend, sizeof info->backend, "%s", si->backend);
    info->protocol = (int)si->protocol;
    info->frame_bytes = si->frame_bytes;
  }
  lct__reply_free(&r);
  return 0;
}

/* ---- put ---------------------------------------------------------------- */

static int lct__put_meta(lct_client *c, int dtype, const uint64_t *shape, int ndim, size_t bytes,
                         Lctpb__TensorMeta *m) {
  size_t w = lct_dtype_size(dtype);
  if (w == 0)
    return lct__fail(c, LCT_EDTYPE, "unknown dtype %d", dtype);
  if (ndim < 0 || ndim > LCT_MAX_DIMS || (ndim > 0 && shape == NULL))
    return lct__fail(c, LCT_EINVAL, "ndim %d outside 0..%d", ndim, LCT_MAX_DIMS);
  uint64_t n = 1;
  for (int i = 0; i < ndim; i++) {
    if (shape[i] != 0 && n > UINT64_MAX / shape[i])
      return lct__fail(c, LCT_E2BIG, "shape product overflows");
    n *= shape[i];
  }
  if (n > UINT64_MAX / w || n * w != bytes)
    return lct__fail(c, LCT_ESIZE, "%zu bytes given; dtype %s and shape make %llu elements", bytes,
                     lct_dtype_name(dtype), (unsigned long long)n);
  lctpb__tensor_meta__init(m);
  m->has_dtype = 1;
  m->dtype = (uint32_t)dtype;
  m->n_shape = (size_t)ndim;
  m->shape = (uint64_t *)shape;
  m->has_raw_bytes = 1;
  m->raw_bytes = bytes;
  return 0;
}

int lct_put(lct_client *c, const char *key, int dtype, const uint64_t *shape, int ndim,
            const void *data, size_t bytes, lct_tensor_info *info) {
  Lctpb__Request rq = LCTPB__REQUEST__INIT;
  Lctpb__TensorMeta m;
  int rc;
  if ((rc = lct__key(c, key, &rq)) != 0 || (rc = lct__put_meta(c, dtype, shape, ndim, bytes, &m)))
    return rc;
  if (data == NULL && bytes > 0)
    return lct__fail(c, LCT_EINVAL, "no data");
  m.has_checksum = 1;
  m.checksum = lct_crc32c(0, data, bytes);
  rq.meta = &m;
  lct__reply r;
  if (bytes <= c->frame) {
    rq.op = LCTPB__OP__OP_PUT;
    if ((rc = lct__call(c, &rq, data, bytes, &r)) != 0)
      return rc;
  } else {
    rq.op = LCTPB__OP__OP_PUT_BEGIN;
    if ((rc = lct__call(c, &rq, NULL, 0, &r)) != 0)
      return rc;
    if (!r.hdr->has_put_id) {
      lct__reply_free(&r);
      return lct__fail(c, LCT_EPROTO, "put-begin reply without a put id");
    }
    Lctpb__Request ch = LCTPB__REQUEST__INIT;
    ch.has_put_id = 1;
    ch.put_id = r.hdr->put_id;
    lct__reply_free(&r);
    ch.op = LCTPB__OP__OP_PUT_CHUNK;
    ch.has_offset = 1;
    for (size_t off = 0; off < bytes; off += c->frame) {
      size_t n = bytes - off < c->frame ? bytes - off : c->frame;
      ch.offset = off;
      if ((rc = lct__call(c, &ch, (const uint8_t *)data + off, n, &r)) != 0)
        break;
      lct__reply_free(&r);
    }
    if (rc == 0) {
      ch.op = LCTPB__OP__OP_PUT_COMMIT;
      ch.has_offset = 0;
      rc = lct__call(c, &ch, NULL, 0, &r);
    }
    if (rc != 0) {
      /* Best effort: free the server's staging now rather than at put-timeout. */
      char saved[sizeof c->err];
      memcpy(saved, c->err, sizeof saved);
      lct__reply abort_reply;
      ch.op = LCTPB__OP__OP_PUT_ABORT;
      ch.has_offset = 0;
      if (rc != LCT_ETIMEDOUT && rc != LCT_ECONN && lct__call(c, &ch, NULL, 0, &abort_reply) == 0)
        lct__reply_free(&abort_reply);
      memcpy(c->err, saved, sizeof saved);
      return rc;
    }
  }
  if (info != NULL)
    lct__info_of(r.hdr->meta, info);
  lct__reply_free(&r);
  return 0;
}

/* ---- get ---------------------------------------------------------------- */

/* Reads the whole tensor, frame by frame. With alloc, *data receives a new
 * buffer; else the bytes go to buf (cap bytes). */
static int lct__get_once(lct_client *c, const char *key, void *buf, size_t cap, int alloc,
                         void **data, lct_tensor_info *info) {
  Lctpb__Request rq = LCTPB__REQUEST__INIT;
  int rc = lct__key(c, key, &rq);
  if (rc != 0)
    return rc;
  rq.op = LCTPB__OP__OP_GET;
  rq.has_offset = 1;
  rq.has_length = 1;
  uint8_t *dst = alloc ? NULL : buf;
  uint64_t off = 0, total = 0;
  uint32_t crc = 0;
  lct_tensor_info first;
  memset(&first, 0, sizeof first);
  for (;;) {
    rq.offset = off;
    /* The first request asks only what fits, so a small cap costs no transfer. */
    rq.length = !alloc && off == 0 && cap < c->frame ? cap : c->frame;
    lct__reply r;
    if ((rc = lct__call(c, &rq, NULL, 0, &r)) != 0)
      break;
    const Lctpb__TensorMeta *m = r.hdr->meta;
    if (m == NULL || !r.hdr->has_offset || r.hdr->offset != off ||
        r.payload_len > (m->raw_bytes - (off < m->raw_bytes ? off : m->raw_bytes)) ||
        (off > 0 && (m->version != first.version || m->raw_bytes != total))) {
      lct__reply_free(&r);
      rc = lct__fail(c, LCT_EPROTO, "reply does not match the ranged get");
      break;
    }
    if (off == 0) {
      lct__info_of(m, &first);
      total = m->raw_bytes;
      if (info != NULL)
        *info = first;
      if (alloc) {
        if (total > SIZE_MAX || (dst = malloc(total ? (size_t)total : 1)) == NULL) {
          lct__reply_free(&r);
          rc = lct__fail(c, LCT_ENOMEM, "cannot allocate %llu bytes", (unsigned long long)total);
          break;
        }
      } else if (total > cap) {
        lct__reply_free(&r);
        rc = lct__fail(c, LCT_EBUFSIZE, "tensor is %llu bytes; buffer holds %zu",
                       (unsigned long long)total, cap);
        break;
      }
      rq.has_version = 1;
      rq.version = first.version;
    }
    if (r.payload_len == 0 && off < total) {
      lct__reply_free(&r);
      rc = lct__fail(c, LCT_EPROTO, "server sent an empty range");
      break;
    }
    if (r.payload_len > 0)
      memcpy(dst + off, r.payload, r.payload_len);
    crc = lct_crc32c(crc, r.payload, r.payload_len);
    off += r.payload_len;
    lct__reply_free(&r);
    if (off == total)
      break;
  }
  if (rc == 0 && crc != first.checksum)
    rc = lct__fail(c, LCT_ECHECKSUM, "received bytes do not match the stored checksum");
  if (alloc) {
    if (rc == 0)
      *data = dst;
    else
      free(dst);
  }
  return rc;
}

static int lct__get(lct_client *c, const char *key, void *buf, size_t cap, int alloc, void **data,
                    lct_tensor_info *info) {
  int rc;
  for (int attempt = 0;; attempt++) {
    rc = lct__get_once(c, key, buf, cap, alloc, data, info);
    if (rc != LCT_ESTALE || attempt == LCT__STALE_RETRIES)
      return rc;
  }
}

int lct_get(lct_client *c, const char *key, void *buf, size_t cap, lct_tensor_info *info) {
  if (buf == NULL && cap > 0)
    return lct__fail(c, LCT_EINVAL, "no buffer");
  return lct__get(c, key, buf, cap, 0, NULL, info);
}

int lct_get_alloc(lct_client *c, const char *key, void **data, lct_tensor_info *info) {
  if (data == NULL)
    return lct__fail(c, LCT_EINVAL, "no output pointer");
  return lct__get(c, key, NULL, 0, 1, data, info);
}

/* ---- device buffers ------------------------------------------------------ */

#ifdef LCT_CLIENT_CUDA
/* A CUDA allocation, as the driver names it. */
typedef struct lct__alloc {
  int device;
  CUdeviceptr start;
  size_t range;
  unsigned long long id; /* unique per allocation for the process's life */
} lct__alloc;

static int lct__cuda_fail(lct_client *c, cudaError_t e, const char *what) {
  cudaGetLastError(); /* not sticky: cleared so that the caller's next CUDA call does not see it */
  return lct__fail(c, LCT_ECUDA, "%s: %s", what, cudaGetErrorString(e));
}

/* Whether [p, p + bytes) lies in allocation a. */
static int lct__alloc_holds(const lct__alloc *a, const void *p, size_t bytes) {
  uint64_t off = (uint64_t)((uintptr_t)p - (uintptr_t)a->start);
  return (uintptr_t)p >= (uintptr_t)a->start && off <= a->range && bytes <= a->range - off;
}

/* Finds the allocation holding [dptr, dptr + bytes) (the driver's
 * cuPointerGetAttributes, looked up through the runtime: liblct does not
 * link libcuda). */
static int lct__device_locate(lct_client *c, const void *dptr, size_t bytes, lct__alloc *a) {
  if (c->pointer_attrs == NULL) {
    enum cudaDriverEntryPointQueryResult found;
    cudaError_t e = cudaGetDriverEntryPointByVersion("cuPointerGetAttributes", (void **)&c->pointer_attrs, 12000,
                                                     cudaEnableDefault, &found);
    if (e != cudaSuccess || found != cudaDriverEntryPointSuccess) {
      c->pointer_attrs = NULL;
      return e != cudaSuccess ? lct__cuda_fail(c, e, "no CUDA driver")
                              : lct__fail(c, LCT_ECUDA, "the CUDA driver has no cuPointerGetAttributes");
    }
  }
  CUmemorytype type = 0;
  int ordinal = -1;
  CUdeviceptr base = 0;
  size_t range = 0;
  unsigned long long id = 0;
  CUpointer_attribute attrs[] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                 CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, CU_POINTER_ATTRIBUTE_RANGE_SIZE,
                                 CU_POINTER_ATTRIBUTE_BUFFER_ID};
  void *data[] = {&type, &ordinal, &base, &range, &id};
  CUresult r = c->pointer_attrs(5, attrs, data, (CUdeviceptr)(uintptr_t)dptr);
  if (r != CUDA_SUCCESS || type != CU_MEMORYTYPE_DEVICE || ordinal < 0)
    return lct__fail(c, LCT_EINVAL, "%p is not CUDA device memory", dptr);
  *a = (lct__alloc){ordinal, base, range, id};
  if (!lct__alloc_holds(a, dptr, bytes))
    return lct__fail(c, LCT_EINVAL, "%zu bytes at %p run past their allocation", bytes, dptr);
  return 0;
}

/* Waits for the work a device call follows: the job's event, else the
 * stream set, else the whole current GPU. */
static int lct__device_sync(lct_client *c, cudaEvent_t event) {
  cudaError_t e = event != NULL           ? cudaEventSynchronize(event)
                  : c->sync_stream != NULL ? cudaStreamSynchronize(c->sync_stream)
                                           : cudaDeviceSynchronize();
  if (e == cudaSuccess)
    return 0;
  return lct__cuda_fail(c, e, event != NULL             ? "waiting for the job's event"
                              : c->sync_stream != NULL ? "synchronizing the device stream"
                                                       : "synchronizing the buffer's device");
}

/* Synchronizes (with sync: lct__device_sync) the GPU of allocation a, and
 * describes the buffer [dptr, dptr + bytes) in it for lctd: the
 * allocation's IPC handle (exported once per allocation), the offset into
 * it, the GPU's UUID and this host's boot id (each looked up once per
 * client); msg's fields point into the client, valid until its next device
 * call. LCT_ENOIPC when the buffer cannot be shared by IPC (the host path
 * applies). */
static int lct__device_describe(lct_client *c, const lct__alloc *a, const void *dptr, size_t bytes, int sync,
                                cudaEvent_t event, Lctpb__DeviceBuffer *msg) {
  int rc, prev;
  cudaError_t e = cudaGetDevice(&prev);
  if (e != cudaSuccess || (e = cudaSetDevice(a->device)) != cudaSuccess)
    return lct__cuda_fail(c, e, "selecting the buffer's device");
  if (sync && (rc = lct__device_sync(c, event)) != 0) {
    cudaSetDevice(prev); /* best effort: the synchronization's error is the one to report */
    return rc;
  }
  int slot = -1;
  for (int i = 0; i < LCT__IPC_EXPORTS && slot < 0; i++)
    if (c->exports[i].buffer_id == a->id && a->id != 0)
      slot = i;
  rc = 0;
  if (slot < 0) {
    cudaIpcMemHandle_t h;
    if ((e = cudaIpcGetMemHandle(&h, (void *)(uintptr_t)a->start)) != cudaSuccess) {
      cudaGetLastError();
      rc = lct__fail(c, LCT_ENOIPC, "cannot export the buffer's allocation: %s", cudaGetErrorString(e));
    } else {
      slot = c->export_next;
      c->export_next = (c->export_next + 1) % LCT__IPC_EXPORTS;
      c->exports[slot].buffer_id = a->id;
      memcpy(c->exports[slot].handle, h.reserved, LCT_IPC_HANDLE_BYTES);
    }
  }
  if (rc == 0 && a->device < LCT__GPUS && !c->gpu_known[a->device]) {
    struct cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, a->device)) != cudaSuccess) {
      rc = lct__cuda_fail(c, e, "reading the buffer's device");
    } else {
      memcpy(c->gpu_uuid[a->device], prop.uuid.bytes, LCT_GPU_UUID_BYTES);
      c->gpu_known[a->device] = 1;
    }
  }
  if (rc == 0 && a->device >= LCT__GPUS)
    rc = lct__fail(c, LCT_ENOIPC, "device %d: beyond the %d this liblct tracks", a->device, LCT__GPUS);
  if (rc == 0 && !c->boot_known) {
    if (lct_wire_boot_id(c->boot_id) != 0)
      rc = lct__fail(c, LCT_ENOIPC, "cannot read this host's boot id");
    c->boot_known = rc == 0;
  }
  if ((e = cudaSetDevice(prev)) != cudaSuccess && rc == 0)
    rc = lct__cuda_fail(c, e, "restoring the current device");
  if (rc != 0)
    return rc;
  lctpb__device_buffer__init(msg);
  msg->ipc_handle.data = c->exports[slot].handle;
  msg->ipc_handle.len = LCT_IPC_HANDLE_BYTES;
  msg->offset = (uint64_t)((uintptr_t)dptr - (uintptr_t)a->start);
  msg->size = bytes;
  msg->gpu_uuid.data = c->gpu_uuid[a->device];
  msg->gpu_uuid.len = LCT_GPU_UUID_BYTES;
  msg->boot_id.data = c->boot_id;
  msg->boot_id.len = LCT_BOOT_ID_BYTES;
  return 0;
}

/* Copies bytes between a device buffer on device and host memory, and waits
 * for the copy to land (a pageable copy to the device may return before). */
static int lct__device_copy(lct_client *c, int device, void *dst, const void *src, size_t bytes) {
  int prev;
  cudaError_t e = cudaGetDevice(&prev);
  if (e == cudaSuccess && (e = cudaSetDevice(device)) == cudaSuccess) {
    if ((e = cudaMemcpy(dst, src, bytes, cudaMemcpyDefault)) == cudaSuccess)
      e = cudaDeviceSynchronize();
    cudaError_t restore = cudaSetDevice(prev);
    if (e == cudaSuccess)
      e = restore;
  }
  return e == cudaSuccess ? 0 : lct__cuda_fail(c, e, "copying between the device buffer and host memory");
}

/* The host path of a device call: the server or the buffer cannot go device to device. */
static int lct__fallback(int rc) { return rc == LCT_ENOIPC || rc == LCT_EOP; }
#endif

/* ---- many device buffers ------------------------------------------------- */

#ifdef LCT_CLIENT_CUDA
/* Header bytes kept for one request's items: well under LCT_WIRE_HEADER_MAX. */
#define LCT__MANY_HEADER_BUDGET (LCT_WIRE_HEADER_MAX / 2)

/* Items [from, to) of t that one request carries: they lie in the allocation
 * of t[from] (*a; consecutive items in one allocation travel together), at
 * most LCT_DEVICE_ITEMS_MAX of them and within the header budget (items:
 * their request items, keys and metas filled in). */
static int lct__many_group(lct_client *c, const lct_device_tensor *t, Lctpb__DeviceItem *const *items,
                           size_t from, size_t n, size_t *to, lct__alloc *a) {
  int rc = lct__device_locate(c, t[from].dptr, t[from].bytes, a);
  if (rc != 0)
    return rc;
  size_t header = 0, i = from;
  for (; i < n && i - from < LCT_DEVICE_ITEMS_MAX; i++) {
    header += items[i]->key.len + 64 + 10 * (items[i]->meta != NULL ? items[i]->meta->n_shape : 0);
    if (header > LCT__MANY_HEADER_BUDGET && i > from)
      break;
    if (i > from && !lct__alloc_holds(a, t[i].dptr, t[i].bytes))
      break; /* another allocation, or none: the group it starts sorts it out */
  }
  *to = i;
  return 0;
}

/* Copies a device tensor through host memory: the host path of one item. */
static int lct__many_host(lct_client *c, int put, int device, const lct_device_tensor *t) {
  if (put && t->bytes == 0)
    return lct_put(c, t->key, t->dtype, t->shape, t->ndim, NULL, 0, t->info);
  void *host = NULL;
  lct_tensor_info got;
  int rc;
  if (put) {
    if ((host = malloc(t->bytes)) == NULL)
      return lct__fail(c, LCT_ENOMEM, "cannot allocate %zu bytes for the host path", t->bytes);
    if ((rc = lct__device_copy(c, device, host, t->dptr, t->bytes)) == 0)
      rc = lct_put(c, t->key, t->dtype, t->shape, t->ndim, host, t->bytes, t->info);
    free(host);
    return rc;
  }
  if (t->bytes > 0 && (host = malloc(t->bytes)) == NULL)
    return lct__fail(c, LCT_ENOMEM, "cannot allocate %zu bytes for the host path", t->bytes);
  rc = lct_get(c, t->key, host, t->bytes, &got); /* LCT_EBUFSIZE, with got, when it does not fit */
  if (t->info != NULL && (rc == 0 || rc == LCT_EBUFSIZE))
    *t->info = got;
  if (rc == 0 && got.raw_bytes > 0)
    rc = lct__device_copy(c, device, t->dptr, host, (size_t)got.raw_bytes);
  free(host);
  return rc;
}

/* One PUT_DEVICE_MANY or GET_DEVICE_MANY for items [from, to) of one
 * allocation, their request items (keys and metas filled in) at items[from];
 * on failure *failed_item is the index (from `from`) of the item the server
 * named, else 0: the request as a whole. */
static int lct__many_call(lct_client *c, int put, const lct__alloc *a, const lct_device_tensor *t,
                          Lctpb__DeviceItem **items, size_t from, size_t to, int sync, cudaEvent_t event,
                          size_t *failed_item) {
  size_t k = to - from;
  *failed_item = 0;
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  for (size_t i = from; i < to; i++) {
    uintptr_t p = (uintptr_t)t[i].dptr;
    lo = p < lo ? p : lo;
    hi = p + t[i].bytes > hi ? p + t[i].bytes : hi;
  }
  Lctpb__DeviceBuffer buffer;
  int rc = lct__device_describe(c, a, (const void *)lo, hi - lo, sync, event, &buffer);
  if (rc != 0)
    return rc;
  for (size_t i = from; i < to; i++)
    items[i]->offset = (uint64_t)((uintptr_t)t[i].dptr - lo);
  Lctpb__Request rq = LCTPB__REQUEST__INIT;
  rq.op = put ? LCTPB__OP__OP_PUT_DEVICE_MANY : LCTPB__OP__OP_GET_DEVICE_MANY;
  rq.device = &buffer;
  rq.n_items = k;
  rq.items = items + from;
  lct__reply r;
  rc = lct__call(c, &rq, NULL, 0, &r);
  if (rc != 0) {
    *failed_item = c->failed_item < k ? c->failed_item : 0;
    return rc;
  }
  if (r.hdr->n_metas != k) {
    rc = lct__fail(c, LCT_EPROTO, "%zu metas in the reply to %zu items", r.hdr->n_metas, k);
  } else {
    /* Each tensor's size as the server recorded it: a put's bytes, a get's
     * within its buffer. */
    for (size_t j = 0; j < k && rc == 0; j++) {
      const Lctpb__TensorMeta *m = r.hdr->metas[j];
      const uint64_t bytes = t[from + j].bytes;
      if (!m->has_raw_bytes || (put ? m->raw_bytes != bytes : m->raw_bytes > bytes)) {
        rc = lct__fail(c, LCT_EPROTO, "item %zu: the reply has %" PRIu64 " bytes for a buffer of %" PRIu64, j,
                       m->raw_bytes, bytes);
        *failed_item = j;
      }
    }
    for (size_t j = 0; j < k && rc == 0; j++)
      if (t[from + j].info != NULL)
        lct__info_of(r.hdr->metas[j], t[from + j].info);
  }
  lct__reply_free(&r);
  return rc;
}

/* The request items of t[0..n), checked before any is sent (into the one
 * block *block, freed by the caller): keys, buffers, and a put's metas.
 * *at: the item at fault. */
static int lct__many_items(lct_client *c, int put, const lct_device_tensor *t, size_t n, void **block,
                           Lctpb__DeviceItem ***items, size_t *at) {
  *block = malloc(n * (sizeof(Lctpb__DeviceItem *) + sizeof(Lctpb__DeviceItem) + (put ? sizeof(Lctpb__TensorMeta) : 0)));
  if (*block == NULL)
    return lct__fail(c, LCT_ENOMEM, "out of memory for %zu items", n);
  Lctpb__DeviceItem **ptrs = *block;
  Lctpb__DeviceItem *its = (Lctpb__DeviceItem *)(ptrs + n);
  Lctpb__TensorMeta *metas = (Lctpb__TensorMeta *)(its + n);
  for (size_t i = 0; i < n; i++) {
    *at = i;
    size_t len = t[i].key != NULL ? strlen(t[i].key) : 0;
    if (t[i].key == NULL || lct_wire_key_check((const uint8_t *)t[i].key, len) != 0)
      return lct__fail(c, LCT_ENAMETOOLONG, "key must be 1..%d bytes", (int)LCT_KEY_MAX);
    if (t[i].dptr == NULL && t[i].bytes > 0)
      return lct__fail(c, LCT_EINVAL, "no buffer");
    lctpb__device_item__init(&its[i]);
    its[i].key.data = (uint8_t *)t[i].key;
    its[i].key.len = len;
    its[i].size = t[i].bytes;
    if (put) {
      int rc = lct__put_meta(c, t[i].dtype, t[i].shape, t[i].ndim, t[i].bytes, &metas[i]);
      if (rc != 0)
        return rc;
      its[i].meta = &metas[i];
    }
    ptrs[i] = &its[i];
  }
  *at = n;
  *items = ptrs;
  return 0;
}

/* lct_put_device_many / lct_get_device_many; event: a job's (NULL: as
 * lct_set_device_stream says). */
static int lct__many(lct_client *c, int put, const lct_device_tensor *t, size_t n, void *event, size_t *failed) {
  size_t at = n;
  int synced = -1;
  void *block = NULL;
  Lctpb__DeviceItem **items = NULL;
  int rc = n > 0 ? lct__many_items(c, put, t, n, &block, &items, &at) : 0;
  for (size_t from = 0, to; from < n && rc == 0; from = to) {
    lct__alloc a = {0};
    to = from + 1;
    if (t[from].bytes == 0) {
      rc = lct__many_host(c, put, -1, &t[from]); /* nothing to map */
    } else if ((rc = lct__many_group(c, t, items, from, n, &to, &a)) == 0) {
      size_t item;
      /* Work queued on the buffers' GPU completes first: one synchronization per device. */
      rc = lct__many_call(c, put, &a, t, items, from, to, a.device != synced, (cudaEvent_t)event, &item);
      synced = a.device;
      if (lct__fallback(rc)) { /* the host path, item by item */
        rc = 0;
        for (size_t i = from; i < to && rc == 0; i++)
          if ((rc = lct__many_host(c, put, a.device, &t[i])) != 0)
            item = i - from;
      }
      if (rc != 0)
        at = from + item;
    }
    if (rc != 0 && at == n) /* a failure of the group as a whole: its first item */
      at = from;
  }
  free(block);
  if (failed != NULL)
    *failed = rc == 0 ? n : at;
  return rc;
}
#else
/* A liblct without CUDA: every device call answers LCT_ENODEV. */
static int lct__many(lct_client *c, int put, const lct_device_tensor *t, size_t n, void *event, size_t *failed) {
  (void)t, (void)n, (void)event;
  if (failed != NULL)
    *failed = 0;
  return lct__fail(c, LCT_ENODEV, "this liblct was built without CUDA: no device buffers (use %s)",
                   put ? "lct_put" : "lct_get");
}
#endif

int lct_put_device(lct_client *c, const char *key, int dtype, const uint64_t *shape, int ndim,
                   const void *dptr, size_t bytes, lct_tensor_info *info) {
  lct_device_tensor t = {key, dtype, shape, ndim, (void *)dptr, bytes, info};
  return lct__many(c, 1, &t, 1, NULL, NULL);
}

int lct_get_device(lct_client *c, const char *key, void *dptr, size_t cap, lct_tensor_info *info) {
  lct_device_tensor t = {key, 0, NULL, 0, dptr, cap, info};
  int rc = lct__many(c, 0, &t, 1, NULL, NULL);
  if (rc == LCT_EBUFSIZE && info != NULL) {
    /* As lct_get: info tells the size needed (a device reply carries none). */
    char saved[sizeof c->err];
    memcpy(saved, c->err, sizeof saved);
    lct_stat(c, key, info);
    memcpy(c->err, saved, sizeof saved);
  }
  return rc;
}

int lct_put_device_many(lct_client *c, const lct_device_tensor *t, size_t n, size_t *failed) {
  return lct__many(c, 1, t, n, NULL, failed);
}

int lct_get_device_many(lct_client *c, const lct_device_tensor *t, size_t n, size_t *failed) {
  return lct__many(c, 0, t, n, NULL, failed);
}

/* Background device jobs. One mutex and one condition serve every client's
 * queue and every job's completion: jobs are few (an optimizer's handful per
 * step), and a broadcast wakes whoever waits to recheck. */
static pthread_mutex_t lct__jobs_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t lct__jobs_cv = PTHREAD_COND_INITIALIZER;

struct lct_job {
  int put;
  const lct_device_tensor *t;
  size_t n;
  void *event;
  lct_job *after;
  lct_job *next; /* in the client's queue */
  int done;
  int refs; /* the caller's, and one per job waiting for this one */
  int rc;
  size_t failed;
  char err[sizeof ((lct_client *)0)->err];
};

/* Drops a reference; under lct__jobs_mu. */
static void lct__job_unref(lct_job *j) {
  if (--j->refs == 0)
    free(j);
}

/* Ends a job; under lct__jobs_mu. */
static void lct__job_finish(lct_job *j, int rc, size_t failed, const char *err) {
  j->rc = rc;
  j->failed = failed;
  snprintf(j->err, sizeof j->err, "%s", err);
  j->done = 1;
  pthread_cond_broadcast(&lct__jobs_cv);
}

static void *lct__jobs_run(void *arg) {
  lct_client *c = arg;
  pthread_mutex_lock(&lct__jobs_mu);
  for (;;) {
    while (c->jobs_head == NULL && !c->jobs_closing)
      pthread_cond_wait(&lct__jobs_cv, &lct__jobs_mu);
    lct_job *j = c->jobs_head;
    if (j == NULL)
      break; /* closing, nothing left */
    c->jobs_head = j->next;
    if (c->jobs_head == NULL)
      c->jobs_tail = NULL;
    /* A closing client does not wait for another client's job. */
    while (j->after != NULL && !j->after->done && !c->jobs_closing)
      pthread_cond_wait(&lct__jobs_cv, &lct__jobs_mu);
    const char *cancel = c->jobs_closing                        ? "canceled: its client was closed"
                         : j->after != NULL && j->after->rc != 0 ? "canceled: the job it waited for failed"
                                                                 : NULL;
    if (j->after != NULL) {
      lct__job_unref(j->after);
      j->after = NULL;
    }
    if (cancel != NULL) {
      lct__job_finish(j, LCT_ECANCELED, j->n, cancel);
      continue;
    }
    pthread_mutex_unlock(&lct__jobs_mu);
    size_t failed = 0;
    int rc = lct__many(c, j->put, j->t, j->n, j->event, &failed);
    pthread_mutex_lock(&lct__jobs_mu);
    lct__job_finish(j, rc, failed, rc != 0 ? c->err : "");
  }
  pthread_mutex_unlock(&lct__jobs_mu);
  return NULL;
}

/* Its errors leave lct_last_error alone: the job thread may be writing it. */
int lct_submit_device_many(lct_client *c, int put, const lct_device_tensor *t, size_t n, void *event,
                           lct_job *after, lct_job **job) {
  if (job == NULL || (t == NULL && n > 0))
    return LCT_EINVAL;
  *job = NULL;
#ifndef LCT_CLIENT_CUDA
  (void)c, (void)put, (void)event, (void)after;
  return LCT_ENODEV; /* no device buffers: the caller takes the host path */
#endif
  lct_job *j = malloc(sizeof *j);
  if (j == NULL)
    return LCT_ENOMEM;
  *j = (lct_job){.put = put != 0, .t = t, .n = n, .event = event, .after = after, .refs = 1};
  pthread_mutex_lock(&lct__jobs_mu);
  if (!c->jobs_started) {
    if (pthread_create(&c->jobs_thread, NULL, lct__jobs_run, c) != 0) {
      pthread_mutex_unlock(&lct__jobs_mu);
      free(j);
      return LCT_ENOMEM;
    }
    c->jobs_started = 1;
  }
  if (after != NULL)
    after->refs++;
  if (c->jobs_tail != NULL)
    c->jobs_tail->next = j;
  else
    c->jobs_head = j;
  c->jobs_tail = j;
  pthread_cond_broadcast(&lct__jobs_cv);
  pthread_mutex_unlock(&lct__jobs_mu);
  *job = j;
  return 0;
}

int lct_job_wait(lct_job *job, size_t *failed) {
  if (job == NULL)
    return LCT_EINVAL;
  pthread_mutex_lock(&lct__jobs_mu);
  while (!job->done)
    pthread_cond_wait(&lct__jobs_cv, &lct__jobs_mu);
  pthread_mutex_unlock(&lct__jobs_mu);
  if (failed != NULL)
    *failed = job->failed;
  return job->rc;
}

const char *lct_job_error(const lct_job *job) {
  if (job == NULL)
    return "";
  pthread_mutex_lock(&lct__jobs_mu);
  const char *err = job->done ? job->err : "";
  pthread_mutex_unlock(&lct__jobs_mu);
  return err;
}

void lct_job_free(lct_job *job) {
  if (job == NULL)
    return;
  lct_job_wait(job, NULL);
  pthread_mutex_lock(&lct__jobs_mu);
  lct__job_unref(job);
  pthread_mutex_unlock(&lct__jobs_mu);
}

/* Lets the running job finish, cancels the queued ones, joins the thread. */
static void lct__jobs_stop(lct_client *c) {
  pthread_mutex_lock(&lct__jobs_mu);
  int started = c->jobs_started;
  c->jobs_closing = 1;
  pthread_cond_broadcast(&lct__jobs_cv);
  pthread_mutex_unlock(&lct__jobs_mu);
  if (started)
    pthread_join(c->jobs_thread, NULL);
}

int lct_set_device_stream(lct_client *c, void *stream) {
#ifdef LCT_CLIENT_CUDA
  c->sync_stream = (cudaStream_t)stream;
  return 0;
#else
  (void)stream;
  return lct__fail(c, LCT_ENODEV, "this liblct was built without CUDA: no device streams");
#endif
}

/* ---- delete, stat, list, stats ------------------------------------------ */

int lct_delete(lct_client *c, const char *key) {
  Lctpb__Request rq = LCTPB__REQUEST__INIT;
  int rc = lct__key(c, key, &rq);
  if (rc != 0)
    return rc;
  rq.op = LCTPB__OP__OP_DELETE;
  lct__reply r;
  if ((rc = lct__call(c, &rq, NULL, 0, &r)) == 0)
    lct__reply_free(&r);
  return rc;
}

int lct_stat(lct_client *c, const char *key, lct_tensor_info *info) {
  Lctpb__Request rq = LCTPB__REQUEST__INIT;
  int rc = lct__key(c, key, &rq);
  if (rc != 0)
    return rc;
  rq.op = LCTPB__OP__OP_STAT;
  lct__reply r;
  if ((rc = lct__call(c, &rq, NULL, 0, &r)) != 0)
    return rc;
  if (r.hdr->meta == NULL)
    rc = lct__fail(c, LCT_EPROTO, "stat reply without metadata");
  else if (info != NULL)
    lct__info_of(r.hdr->meta, info);
  lct__reply_free(&r);
  return rc;
}

static char *lct__strndup(const uint8_t *p, size_t n) {
  char *s = malloc(n + 1);
  if (s != NULL) {
    memcpy(s, p, n);
    s[n] = '\0';
  }
  return s;
}

void lct_free(void *p) { free(p); }

void lct_list_free(lct_list_page *page) {
  if (page == NULL)
    return;
  for (size_t i = 0; i < page->n; i++)
    free(page->entries[i].key);
  free(page->entries);
  free(page->next_cursor);
  free(page);
}

int lct_list(lct_client *c, const char *prefix, const char *cursor, size_t limit,
             lct_list_page **out) {
  Lctpb__Request rq = LCTPB__REQUEST__INIT;
  rq.op = LCTPB__OP__OP_LIST;
  if (prefix != NULL && *prefix != '\0') {
    rq.has_prefix = 1;
    rq.prefix.data = (uint8_t *)prefix;
    rq.prefix.len = strlen(prefix);
  }
  if (cursor != NULL) {
    rq.has_cursor = 1;
    rq.cursor.data = (uint8_t *)cursor;
    rq.cursor.len = strlen(cursor);
  }
  if ((prefix != NULL && rq.prefix.len > LCT_KEY_MAX) || (cursor != NULL && rq.cursor.len > LCT_KEY_MAX))
    return lct__fail(c, LCT_ENAMETOOLONG, "prefix or cursor longer than %d bytes", LCT_KEY_MAX);
  rq.has_limit = limit > 0;
  rq.limit = limit > UINT32_MAX ? UINT32_MAX : (uint32_t)limit;
  lct__reply r;
  int rc = lct__call(c, &rq, NULL, 0, &r);
  if (rc != 0)
    return rc;
  lct_list_page *page = calloc(1, sizeof *page);
  if (page == NULL ||
      (page->entries = calloc(r.hdr->n_entries ? r.hdr->n_entries : 1, sizeof *page->entries)) ==
          NULL) {
    free(page);
    lct__reply_free(&r);
    return lct__fail(c, LCT_ENOMEM, "out of memory for a list page");
  }
  for (size_t i = 0; i < r.hdr->n_entries && rc == 0; i++) {
    const Lctpb__ListEntry *le = r.hdr->entries[i]; /* keys and shapes checked by lct_wire_reply_parse */
    if ((page->entries[i].key = lct__strndup(le->key.data, le->key.len)) == NULL) {
      rc = lct__fail(c, LCT_ENOMEM, "out of memory for a list page");
      break;
    }
    lct__info_of(le->meta, &page->entries[i].info);
    page->n = i + 1;
  }
  if (rc == 0 && r.hdr->has_next_cursor &&
      (page->next_cursor = lct__strndup(r.hdr->next_cursor.data, r.hdr->next_cursor.len)) == NULL)
    rc = lct__fail(c, LCT_ENOMEM, "out of memory for a list page");
  lct__reply_free(&r);
  if (rc != 0) {
    lct_list_free(page);
    return rc;
  }
  *out = page;
  return 0;
}

int lct_save(lct_client *c, uint64_t *written) {
  Lctpb__Request rq = LCTPB__REQUEST__INIT;
  rq.op = LCTPB__OP__OP_SAVE;
  lct__reply r;
  int rc = lct__call(c, &rq, NULL, 0, &r);
  if (rc != 0)
    return rc;
  if (written != NULL)
    *written = r.hdr->has_saved_tensors ? r.hdr->saved_tensors : 0;
  lct__reply_free(&r);
  return 0;
}

int lct_stats(lct_client *c, lct_server_stats *out, char **text) {
  Lctpb__Request rq = LCTPB__REQUEST__INIT;
  rq.op = LCTPB__OP__OP_STATS;
  lct__reply r;
  int rc = lct__call(c, &rq, NULL, 0, &r);
  if (rc != 0)
    return rc;
  const Lctpb__StatsSummary *s = r.hdr->stats;
  if (s == NULL) {
    lct__reply_free(&r);
    return lct__fail(c, LCT_EPROTO, "stats reply without a summary");
  }
  if (out != NULL) {
    out->tensors = s->tensors;
    out->raw_bytes = s->raw_bytes;
    out->stored_bytes = s->stored_bytes;
    out->pool_capacity = s->pool_capacity;
    out->pool_used = s->pool_used;
    out->staging_bytes = s->staging_bytes;
    out->pending_puts = s->pending_puts;
    out->puts_expired = s->puts_expired;
    out->codebook_builds = s->codebook_builds;
    out->codebook_rebuilds = s->codebook_rebuilds;
    out->requests = s->requests;
    out->errors = s->errors;
    out->bytes_in = s->bytes_in;
    out->bytes_out = s->bytes_out;
    out->device_puts = s->device_puts;
    out->device_gets = s->device_gets;
    out->device_fallbacks = s->device_fallbacks;
  }
  if (text != NULL && (*text = lct__strndup(r.payload, r.payload_len)) == NULL)
    rc = lct__fail(c, LCT_ENOMEM, "out of memory for the stats text");
  lct__reply_free(&r);
  return rc;
}
