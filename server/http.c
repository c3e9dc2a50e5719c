/* http.c — the HTTP stats endpoint: GET /metrics answers lctd's counters as Prometheus text, GET /healthz liveness (503 once the device is lost). */
#include "http.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "health.h"
#include "http_parse.h"
#include "log.h"
#include "stats.h"

#define LCT__HTTP_REQUEST_MAX 8192 /* request head bytes read before answering 431 */
#define LCT__HTTP_CONN_MAX 64      /* open connections; a new one past it closes the oldest still reading */
#define LCT__HTTP_READ_MS 2000     /* from accept to a complete request head: a slow client is closed */
#define LCT__HTTP_WRITE_MS 5000    /* from the request to the reply taken: one that never reads is closed */
#define LCT__HTTP_BACKLOG 128      /* connections the kernel queues for accept */

typedef struct lct__http_conn {
  uv_tcp_t tcp; /* first: the handle's address is the connection's */
  uv_timer_t timer;
  uv_write_t write;
  struct lct__http *http;
  struct lct__http_conn *prev, *next; /* the open connections, oldest first */
  char *reply;
  size_t have;
  size_t scanned; /* bytes of buf searched for the end of the head */
  int reading;    /* the request head is not complete yet */
  int closing;
  int open_handles;
  char buf[LCT__HTTP_REQUEST_MAX];
} lct__http_conn;

struct lct__http {
  lct__server *srv;
  uv_tcp_t listener;
  lct__http_conn *oldest, *newest; /* open connections (not closing), in accept order */
  int n_open;                      /* connections in that list */
  int n_conns;                     /* allocated, until their handles have closed */
  int stopping;
};

static void lct__http_closed(uv_handle_t *h) {
  lct__http_conn *c = h->data;
  if (--c->open_handles > 0)
    return;
  lct__http *http = c->http;
  http->n_conns--;
  free(c->reply);
  free(c);
  if (http->stopping && http->n_conns == 0 && http->listener.data == NULL)
    free(http);
}

static void lct__http_close(lct__http_conn *c) {
  if (c->closing)
    return;
  c->closing = 1;
  lct__http *http = c->http;
  *(c->prev != NULL ? &c->prev->next : &http->oldest) = c->next;
  *(c->next != NULL ? &c->next->prev : &http->newest) = c->prev;
  http->n_open--;
  uv_close((uv_handle_t *)&c->tcp, lct__http_closed);
  uv_close((uv_handle_t *)&c->timer, lct__http_closed);
}

static void lct__http_written(uv_write_t *w, int status) { lct__http_close(w->data); }

/* A connection past its deadline, reading or writing, is closed. */
static void lct__http_expired(uv_timer_t *t) { lct__http_close(t->data); }

static void lct__http_respond(lct__http_conn *c, const char *status, const char *type, const char *body,
                              size_t body_len) {
  uv_read_stop((uv_stream_t *)&c->tcp);
  c->reading = 0;
  uv_timer_start(&c->timer, lct__http_expired, LCT__HTTP_WRITE_MS, 0);
  char head[256];
  int h = snprintf(head, sizeof head,
                   "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n",
                   status, type, body_len);
  c->reply = malloc((size_t)h + body_len);
  if (c->reply == NULL) {
    lct__http_close(c);
    return;
  }
  memcpy(c->reply, head, (size_t)h);
  memcpy(c->reply + h, body, body_len);
  uv_buf_t buf = uv_buf_init(c->reply, (unsigned)((size_t)h + body_len));
  c->write.data = c;
  if (uv_write(&c->write, (uv_stream_t *)&c->tcp, &buf, 1, lct__http_written) != 0)
    lct__http_close(c);
}

static void lct__http_text(lct__http_conn *c, const char *status, const char *text) {
  lct__http_respond(c, status, "text/plain; charset=utf-8", text, strlen(text));
}

/* Answers once the request head is complete: GET of /metrics or /healthz. */
static void lct__http_request(lct__http_conn *c) {
  switch (lct__http_route_of(c->buf)) {
  case LCT__HTTP_BAD:
    lct__http_text(c, "400 Bad Request", "bad request\n");
    return;
  case LCT__HTTP_METHOD:
    lct__http_text(c, "405 Method Not Allowed", "only GET\n");
    return;
  case LCT__HTTP_HEALTHZ: {
    const char *fault = lct__health_fault(c->http->srv->health);
    char text[320];
    snprintf(text, sizeof text, "unhealthy: %s\n", fault != NULL ? fault : "");
    lct__http_text(c, fault != NULL ? "503 Service Unavailable" : "200 OK", fault != NULL ? text : "ok\n");
    return;
  }
  case LCT__HTTP_NOT_FOUND:
    lct__http_text(c, "404 Not Found", "lctd serves /metrics and /healthz\n");
    return;
  case LCT__HTTP_METRICS:
    break;
  }
  size_t len;
  char *text = lct__server_stats_text(c->http->srv, &len);
  if (text == NULL) {
    lct__http_text(c, "500 Internal Server Error", "out of memory\n");
    return;
  }
  lct__http_respond(c, "200 OK", "text/plain; version=0.0.4; charset=utf-8", text, len);
  free(text);
}

static void lct__http_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  lct__http_conn *c = h->data;
  *buf = uv_buf_init(c->buf + c->have, (unsigned)(sizeof c->buf - 1 - c->have));
}

static void lct__http_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  lct__http_conn *c = s->data;
  if (n < 0) {
    lct__http_close(c);
    return;
  }
  c->have += (size_t)n;
  c->buf[c->have] = '\0';
  if (lct__http_head_complete(c->buf, c->have, &c->scanned))
    lct__http_request(c);
  else if (c->have == sizeof c->buf - 1)
    lct__http_text(c, "431 Request Header Fields Too Large", "request too large\n");
}

/* Makes room for a new connection: closes the oldest one still reading its
 * request (a slow or stalled client), or returns 0 when every open one is
 * being answered. At most LCT__HTTP_CONN_MAX to look at. */
static int lct__http_make_room(lct__http *http) {
  if (http->n_open < LCT__HTTP_CONN_MAX)
    return 1;
  for (lct__http_conn *c = http->oldest; c != NULL; c = c->next) {
    if (c->reading) {
      lct__http_close(c);
      return 1;
    }
  }
  return 0;
}

static void lct__http_accept(uv_stream_t *server, int status) {
  lct__http *http = server->data;
  if (status < 0)
    return;
  lct__http_conn *c = calloc(1, sizeof *c);
  if (c == NULL)
    return;
  c->http = http;
  uv_tcp_init(server->loop, &c->tcp);
  uv_timer_init(server->loop, &c->timer);
  c->tcp.data = c->timer.data = c;
  c->open_handles = 2;
  c->reading = 1;
  /* Accepted even when refused, so that the kernel's queue drains. */
  int room = uv_accept(server, (uv_stream_t *)&c->tcp) == 0 && lct__http_make_room(http);
  c->prev = http->newest;
  *(http->newest != NULL ? &http->newest->next : &http->oldest) = c;
  http->newest = c;
  http->n_conns++;
  http->n_open++;
  if (!room || uv_read_start((uv_stream_t *)&c->tcp, lct__http_alloc, lct__http_read) != 0) {
    lct__http_close(c);
    return;
  }
  uv_timer_start(&c->timer, lct__http_expired, LCT__HTTP_READ_MS, 0);
}

int lct__http_open(lct__server *srv, const char *addr, lct__http **out, char *err, size_t errlen) {
  struct sockaddr_storage sa;
  if (lct__config_parse_addr(addr, &sa) != 0) {
    snprintf(err, errlen, "metrics: '%s' is not HOST:PORT", addr);
    return LCT_ECONFIG;
  }
  lct__http *h = calloc(1, sizeof *h);
  if (h == NULL)
    return LCT_ENOMEM;
  h->srv = srv;
  uv_tcp_init(srv->loop, &h->listener);
  h->listener.data = h;
  int rc = uv_tcp_bind(&h->listener, (const struct sockaddr *)&sa, 0);
  if (rc == 0)
    rc = uv_listen((uv_stream_t *)&h->listener, LCT__HTTP_BACKLOG, lct__http_accept);
  if (rc != 0) {
    snprintf(err, errlen, "metrics: cannot listen on %s: %s", addr, uv_strerror(rc));
    h->stopping = 1;
    lct__http_stop(h);
    return LCT_EIO;
  }
  *out = h;
  return 0;
}

static void lct__http_listener_closed(uv_handle_t *l) {
  lct__http *http = l->data;
  http->listener.data = NULL;
  if (http->n_conns == 0)
    free(http);
}

void lct__http_stop(lct__http *h) {
  h->stopping = 1;
  while (h->oldest != NULL)
    lct__http_close(h->oldest);
  uv_close((uv_handle_t *)&h->listener, lct__http_listener_closed);
}
