/* bench_peers.c — what lct-bench service measures lctd against: a minimal Redis client, and a bare socket server and client (the transport's ceiling). */
#include "bench_peers.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

static void peer_die(const char *what, const char *detail) {
  fprintf(stderr, "lct-bench service: %s: %s\n", what, detail);
  exit(1);
}

int peer_open(const char *unix_path, int port, peer_conn *c) {
  memset(c, 0, sizeof *c);
  if (unix_path) {
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", unix_path);
    if ((c->fd = socket(AF_UNIX, SOCK_STREAM, 0)) < 0) return -1;
    return connect(c->fd, (struct sockaddr *)&a, sizeof a);
  }
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if ((c->fd = socket(AF_INET, SOCK_STREAM, 0)) < 0) return -1;
  int one = 1;
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return connect(c->fd, (struct sockaddr *)&a, sizeof a);
}

void peer_close(peer_conn *c) {
  if (c->fd >= 0) close(c->fd);
  c->fd = -1;
}

/* Writes every byte of iov[0..n); 0, or -1 on a closed or failed socket. */
static int write_all(int fd, struct iovec *iov, int n) {
  while (n > 0) {
    ssize_t w = writev(fd, iov, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    while (n > 0 && (size_t)w >= iov->iov_len) {
      w -= (ssize_t)iov->iov_len;
      iov++, n--;
    }
    if (n > 0) {
      iov->iov_base = (char *)iov->iov_base + w;
      iov->iov_len -= (size_t)w;
    }
  }
  return 0;
}

/* Reads exactly n bytes, first from what is buffered; 0, or -1 on a closed socket. */
static int read_all(peer_conn *c, void *dst, size_t n) {
  size_t from_buf = c->have - c->pos < n ? c->have - c->pos : n;
  memcpy(dst, c->buf + c->pos, from_buf);
  c->pos += from_buf;
  for (size_t got = from_buf; got < n;) {
    ssize_t k = recv(c->fd, (char *)dst + got, n - got, 0);
    if (k <= 0) {
      if (k < 0 && errno == EINTR) continue;
      return -1;
    }
    got += (size_t)k;
  }
  return 0;
}

/* ---- Redis: RESP SET, GET, DEL ------------------------------------------- */

static void redis_line(peer_conn *r, char *line, size_t cap) {
  size_t n = 0;
  for (;;) {
    if (r->pos == r->have) {
      ssize_t k = recv(r->fd, r->buf, sizeof r->buf, 0);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) peer_die("redis", "closed the connection");
      r->have = (size_t)k;
      r->pos = 0;
    }
    char ch = r->buf[r->pos++];
    if (ch == '\n') break;
    if (ch != '\r' && n + 1 < cap) line[n++] = ch;
  }
  line[n] = '\0';
}

void redis_set(peer_conn *r, const char *key, const void *val, size_t n) {
  char head[128];
  int h = snprintf(head, sizeof head, "*3\r\n$3\r\nSET\r\n$%zu\r\n%s\r\n$%zu\r\n", strlen(key), key, n);
  struct iovec iov[3] = {{head, (size_t)h}, {(void *)val, n}, {"\r\n", 2}};
  if (write_all(r->fd, iov, 3) != 0) peer_die("redis write", strerror(errno));
  char line[256];
  redis_line(r, line, sizeof line);
  if (strcmp(line, "+OK") != 0) peer_die("redis SET", line);
}

size_t redis_get(peer_conn *r, const char *key, void *dst, size_t cap) {
  char head[128];
  int h = snprintf(head, sizeof head, "*2\r\n$3\r\nGET\r\n$%zu\r\n%s\r\n", strlen(key), key);
  struct iovec iov[1] = {{head, (size_t)h}};
  if (write_all(r->fd, iov, 1) != 0) peer_die("redis write", strerror(errno));
  char line[256], crlf[2];
  redis_line(r, line, sizeof line);
  if (line[0] != '$') peer_die("redis GET", line);
  size_t n = strtoull(line + 1, NULL, 10);
  if (n > cap) peer_die("redis GET", "value larger than the buffer");
  if (read_all(r, dst, n) != 0 || read_all(r, crlf, 2) != 0) peer_die("redis", "closed the connection");
  return n;
}

void redis_del(peer_conn *r, const char *key) {
  char head[128], line[256];
  int h = snprintf(head, sizeof head, "*2\r\n$3\r\nDEL\r\n$%zu\r\n%s\r\n", strlen(key), key);
  struct iovec iov[1] = {{head, (size_t)h}};
  if (write_all(r->fd, iov, 1) != 0) peer_die("redis write", strerror(errno));
  redis_line(r, line, sizeof line);
  if (line[0] != ':') peer_die("redis DEL", line);
}

/* ---- the plain server ------------------------------------------------------- */

#define PLAIN_HEADER 16
#define PLAIN_MAX ((uint64_t)4 << 30) /* the largest payload it keeps */

/* Serves one connection until it closes or sends what is not a request. */
static void *plain_conn(void *arg) {
  peer_conn c = {.fd = (int)(intptr_t)arg};
  uint8_t *kept = NULL;
  uint64_t kept_len = 0, cap = 0;
  for (;;) {
    uint8_t h[PLAIN_HEADER];
    uint64_t n;
    if (read_all(&c, h, sizeof h) != 0) break;
    memcpy(&n, h + 8, sizeof n);
    if (h[0] == 'P' && n <= PLAIN_MAX) {
      if (n > cap) {
        uint8_t *more = realloc(kept, n);
        if (more == NULL) break;
        kept = more, cap = n;
      }
      if (read_all(&c, kept, n) != 0) break;
      kept_len = n;
      uint64_t zero = 0;
      struct iovec iov[1] = {{&zero, sizeof zero}};
      if (write_all(c.fd, iov, 1) != 0) break;
    } else if (h[0] == 'G') {
      struct iovec iov[2] = {{&kept_len, sizeof kept_len}, {kept, kept_len}};
      if (write_all(c.fd, iov, kept_len > 0 ? 2 : 1) != 0) break;
    } else {
      break;
    }
  }
  free(kept);
  close(c.fd);
  return NULL;
}

static void *plain_accept(void *arg) {
  int ls = (int)(intptr_t)arg;
  for (;;) {
    int fd = accept(ls, NULL, NULL);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return NULL;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one); /* fails harmlessly on unix sockets */
    pthread_t t;
    if (pthread_create(&t, NULL, plain_conn, (void *)(intptr_t)fd) != 0)
      close(fd);
    else
      pthread_detach(t);
  }
}

int plain_server_start(const char *unix_path, int port) {
  struct sockaddr_un ua = {.sun_family = AF_UNIX};
  snprintf(ua.sun_path, sizeof ua.sun_path, "%s", unix_path);
  struct sockaddr_in ta = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int one = 1, us = socket(AF_UNIX, SOCK_STREAM, 0), ts = socket(AF_INET, SOCK_STREAM, 0);
  unlink(unix_path);
  if (us < 0 || ts < 0 || setsockopt(ts, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      bind(us, (struct sockaddr *)&ua, sizeof ua) != 0 || bind(ts, (struct sockaddr *)&ta, sizeof ta) != 0 ||
      listen(us, 64) != 0 || listen(ts, 64) != 0)
    peer_die("plain server", strerror(errno));
  /* Listening before the fork: the parent's first connect finds it. */
  pid_t pid = fork();
  if (pid < 0) peer_die("plain server", "fork failed");
  if (pid > 0) {
    close(us);
    close(ts);
    return pid;
  }
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  pthread_t t;
  if (pthread_create(&t, NULL, plain_accept, (void *)(intptr_t)us) != 0) _exit(1);
  plain_accept((void *)(intptr_t)ts);
  _exit(0);
}

void plain_put(peer_conn *c, const void *val, size_t n) {
  uint8_t h[PLAIN_HEADER] = {'P'};
  uint64_t len = n, ack;
  memcpy(h + 8, &len, sizeof len);
  struct iovec iov[2] = {{h, sizeof h}, {(void *)val, n}};
  if (write_all(c->fd, iov, 2) != 0 || read_all(c, &ack, sizeof ack) != 0 || ack != 0)
    peer_die("plain put", "the server closed the connection");
}

size_t plain_get(peer_conn *c, void *dst, size_t cap) {
  uint8_t h[PLAIN_HEADER] = {'G'};
  uint64_t n;
  struct iovec iov[1] = {{h, sizeof h}};
  if (write_all(c->fd, iov, 1) != 0 || read_all(c, &n, sizeof n) != 0)
    peer_die("plain get", "the server closed the connection");
  if (n > cap) peer_die("plain get", "value larger than the buffer");
  if (read_all(c, dst, n) != 0) peer_die("plain get", "the server closed the connection");
  return n;
}
