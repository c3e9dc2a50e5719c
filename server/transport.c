/* transport.c — nanomsg AF_SP_RAW NN_REP sockets driven by the libuv loop through NN_RCVFD. */
#include "transport.h"

#include <errno.h>
#include <time.h>
#include <nanomsg/nn.h>
#include <nanomsg/reqrep.h>
#include <nanomsg/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lct_error.h"
#include "log.h"

/* Messages taken per poll callback before yielding to other sockets. */
#define LCT__RECV_BATCH 64
/* NN_SNDBUF / NN_RCVBUF (kernel socket buffers for tcp and ipc): nanomsg's
 * 128 KiB default holds 1 MiB tcp transfers to under 1 GB/s on loopback. */
#define LCT__SOCKET_BUFFER (1 << 20)

typedef struct lct__sock {
  struct lct__transport *t;
  int index;
  int fd;          /* nanomsg socket */
  uv_poll_t poll;
  int polling;
  int tcp;         /* a tcp:// endpoint */
  const char *endpoint;
} lct__sock;

struct lct__transport {
  lct__on_message cb;
  void *arg;
  int paused;      /* lct__transport_pause */
  uint64_t last_send_ns; /* uv_hrtime of the last reply handed to nanomsg; 0: none */
  int n;
  lct__sock socks[];
};

/* One message and its routing header, both as nanomsg-owned buffers (NN_MSG):
 * received without a copy, and sent by handing the buffers back. */
static void lct__zero_copy_hdr(struct nn_msghdr *hdr, struct nn_iovec *iov, void **msg, void **control) {
  iov->iov_base = msg;
  iov->iov_len = NN_MSG;
  memset(hdr, 0, sizeof *hdr);
  hdr->msg_iov = iov;
  hdr->msg_iovlen = 1;
  hdr->msg_control = control;
  hdr->msg_controllen = NN_MSG;
}

/* The pipe key at the head of a received message's routing header: the
 * control buffer holds one SP_HDR property, a size_t length and then the
 * header (nanomsg's nn_recvmsg), whose first 4 bytes, big-endian, are the key
 * (xrep.c). 0 where it is missing, which nanomsg never does. */
static uint32_t lct__pipe_of(struct nn_msghdr *hdr) {
  const struct nn_cmsghdr *cm = NN_CMSG_FIRSTHDR(hdr);
  if (cm == NULL || cm->cmsg_level != PROTO_SP || cm->cmsg_type != SP_HDR ||
      cm->cmsg_len < NN_CMSG_LEN(sizeof(size_t) + 4))
    return 0;
  const unsigned char *d = NN_CMSG_DATA(cm);
  size_t sp;
  memcpy(&sp, d, sizeof sp);
  if (sp < 4 || sp > cm->cmsg_len - NN_CMSG_LEN(sizeof(size_t)))
    return 0;
  d += sizeof sp;
  return (uint32_t)d[0] << 24 | (uint32_t)d[1] << 16 | (uint32_t)d[2] << 8 | d[3];
}

static void lct__on_readable(uv_poll_t *h, int status, int events) {
  lct__sock *s = h->data;
  if (status < 0) {
    lct__log_error("%s: poll: %s", s->endpoint, uv_strerror(status));
    return;
  }
  for (int i = 0; i < LCT__RECV_BATCH && s->polling && !s->t->paused; i++) {
    void *msg = NULL, *control = NULL;
    struct nn_iovec iov;
    struct nn_msghdr hdr;
    lct__zero_copy_hdr(&hdr, &iov, &msg, &control);
    int len = nn_recvmsg(s->fd, &hdr, NN_DONTWAIT);
    if (len < 0) {
      int e = nn_errno();
      if (e == EINTR)
        continue;
      if (e != EAGAIN)
        lct__log_error("%s: receive: %s", s->endpoint, nn_strerror(e));
      return;
    }
    s->t->cb(s->t->arg, s->index, lct__conn_id(s->index, lct__pipe_of(&hdr)), msg, (size_t)len, control);
  }
}

/* Undoes a partial open: closes the polls started so far, then the sockets. */
static void lct__transport_abort(uv_loop_t *loop, lct__transport *t) {
  lct__transport_stop(t);
  uv_run(loop, UV_RUN_NOWAIT); /* completes the closes before the handles are freed */
  lct__transport_free(t);
}

/* Gives an ipc endpoint's socket file its mode and group. */
static int lct__ipc_access(const char *endpoint, int mode, gid_t gid, char *err, size_t errlen) {
  const char *path = endpoint + 6; /* after "ipc://" */
  if (chmod(path, (mode_t)mode) != 0 || (gid != (gid_t)-1 && chown(path, (uid_t)-1, gid) != 0)) {
    snprintf(err, errlen, "%s: cannot set mode %04o%s on %s: %s", endpoint, (unsigned)mode,
             gid != (gid_t)-1 ? " and group" : "", path, strerror(errno));
    return errno == EPERM ? LCT_ECONFIG : LCT_EIO; /* ipc_group not one of lctd's: a restart cannot mend it */
  }
  return 0;
}

int lct__transport_open(uv_loop_t *loop, char *const *endpoints, int n, int max_msg, int ipc_mode,
                        gid_t ipc_gid, lct__on_message cb, void *arg, lct__transport **out,
                        char *err, size_t errlen) {
  lct__transport *t = calloc(1, sizeof *t + (size_t)n * sizeof(lct__sock));
  if (t == NULL)
    return LCT_ENOMEM;
  t->cb = cb;
  t->arg = arg;
  for (int i = 0; i < n; i++)
    t->socks[i].fd = -1;
  t->n = n;
  for (int i = 0; i < n; i++) {
    lct__sock *s = &t->socks[i];
    s->t = t;
    s->index = i;
    s->endpoint = endpoints[i];
    s->tcp = strncmp(s->endpoint, "tcp://", 6) == 0;
    int ipc = strncmp(s->endpoint, "ipc://", 6) == 0;
    /* The socket file is created by the bind: no moment with wider access. */
    mode_t mask = ipc ? umask((mode_t)(~ipc_mode & 0777)) : 0;
    const char *what = "socket";
    int fd = -1;
    size_t sz = sizeof fd;
    int one = 1, buf = LCT__SOCKET_BUFFER;
    if ((s->fd = nn_socket(AF_SP_RAW, NN_REP)) < 0 ||
        (what = "NN_RCVMAXSIZE",
         nn_setsockopt(s->fd, NN_SOL_SOCKET, NN_RCVMAXSIZE, &max_msg, sizeof max_msg) < 0) ||
        (what = "NN_SNDBUF", nn_setsockopt(s->fd, NN_SOL_SOCKET, NN_SNDBUF, &buf, sizeof buf) < 0) ||
        (what = "NN_RCVBUF", nn_setsockopt(s->fd, NN_SOL_SOCKET, NN_RCVBUF, &buf, sizeof buf) < 0) ||
        (s->tcp &&
         (what = "NN_TCP_NODELAY",
          nn_setsockopt(s->fd, NN_TCP, NN_TCP_NODELAY, &one, sizeof one) < 0)) ||
        (what = "bind", nn_bind(s->fd, s->endpoint) < 0) ||
        (what = "NN_RCVFD", nn_getsockopt(s->fd, NN_SOL_SOCKET, NN_RCVFD, &fd, &sz) < 0)) {
      snprintf(err, errlen, "%s: %s: %s", s->endpoint, what, nn_strerror(nn_errno()));
      if (ipc)
        umask(mask);
      lct__transport_abort(loop, t);
      return LCT_EIO;
    }
    if (ipc) {
      umask(mask);
      int rc = lct__ipc_access(s->endpoint, ipc_mode, ipc_gid, err, errlen);
      if (rc != 0) {
        lct__transport_abort(loop, t);
        return rc;
      }
    }
    int rc = uv_poll_init(loop, &s->poll, fd);
    if (rc == 0) {
      s->poll.data = s;
      s->polling = 1;
      rc = uv_poll_start(&s->poll, UV_READABLE, lct__on_readable);
    }
    if (rc != 0) {
      snprintf(err, errlen, "%s: poll: %s", s->endpoint, uv_strerror(rc));
      lct__transport_abort(loop, t);
      return LCT_EIO;
    }
  }
  *out = t;
  return 0;
}

int lct__transport_send(lct__transport *t, int sock, void *control, void *msg, size_t len) {
  lct__sock *s = &t->socks[sock];
  struct nn_iovec iov;
  struct nn_msghdr hdr;
  lct__zero_copy_hdr(&hdr, &iov, &msg, &control);
  int rc;
  while ((rc = nn_sendmsg(s->fd, &hdr, NN_DONTWAIT)) < 0 && nn_errno() == EINTR)
    ;
  if (rc < 0) {
    lct__log_warn("%s: send of %zu bytes: %s", s->endpoint, len, nn_strerror(nn_errno()));
    nn_freemsg(msg);
    nn_freemsg(control);
    return LCT_EIO;
  }
  t->last_send_ns = uv_hrtime();
  return 0;
}

int lct__transport_is_tcp(const lct__transport *t, int sock) { return t->socks[sock].tcp; }

uint64_t lct__transport_clients(const lct__transport *t) {
  uint64_t n = 0;
  for (int i = 0; i < t->n; i++) {
    uint64_t c = nn_get_statistic(t->socks[i].fd, NN_STAT_CURRENT_CONNECTIONS);
    if (c != (uint64_t)-1)
      n += c;
  }
  return n;
}

void lct__transport_pause(lct__transport *t, int paused) {
  t->paused = paused;
  for (int i = 0; i < t->n; i++) {
    lct__sock *s = &t->socks[i];
    if (!s->polling) /* stopped for good */
      continue;
    if (paused)
      uv_poll_stop(&s->poll);
    else /* NN_RCVFD stays readable while messages wait: the poll fires for them */
      uv_poll_start(&s->poll, UV_READABLE, lct__on_readable);
  }
}

void lct__transport_stop(lct__transport *t) {
  for (int i = 0; i < t->n; i++) {
    lct__sock *s = &t->socks[i];
    if (s->polling) {
      s->polling = 0;
      uv_close((uv_handle_t *)&s->poll, NULL);
    }
  }
}

void lct__transport_free(lct__transport *t) {
  if (t == NULL)
    return;
  /* nanomsg writes a message from its own thread and drops what it has not written when its socket closes
   * (it keeps no linger): the last replies get LCT__LINGER_MS to leave. */
  uint64_t linger = LCT__LINGER_MS * 1000000ull;
  uint64_t since = t->last_send_ns != 0 ? uv_hrtime() - t->last_send_ns : linger;
  if (since < linger)
    nanosleep(&(struct timespec){0, (long)(linger - since)}, NULL);
  for (int i = 0; i < t->n; i++)
    if (t->socks[i].fd >= 0)
      nn_close(t->socks[i].fd);
  free(t);
}
