/* transport.h — nanomsg AF_SP_RAW NN_REP sockets driven by the libuv loop through NN_RCVFD. */
#ifndef LCT_SERVER_TRANSPORT_H
#define LCT_SERVER_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <uv.h>

typedef struct lct__transport lct__transport;

/* A received message: msg and control (the routing header) are nanomsg
 * buffers owned by the callee, which passes control back to
 * lct__transport_send or frees both with nn_freemsg. conn names the
 * connection it came over (lct__conn_id), unique while it is open. */
typedef void (*lct__on_message)(void *arg, int sock, uint64_t conn, void *msg, size_t len, void *control);

/* A connection's id: the socket's index above the key nanomsg's raw REP
 * socket gives each of its pipes (31 bits, never reused while the socket
 * lives), which it puts first in the routing header of what it receives. */
static inline uint64_t lct__conn_id(int sock, uint32_t pipe) { return (uint64_t)(uint32_t)sock << 32 | pipe; }

/* Binds one raw REP socket per endpoint with NN_RCVMAXSIZE max_msg and polls
 * them on loop. An ipc socket file gets permission bits ipc_mode and, unless
 * ipc_gid is (gid_t)-1, group ipc_gid. Returns 0 or LCT_EIO with a message
 * naming the endpoint. */
int lct__transport_open(uv_loop_t *loop, char *const *endpoints, int n, int max_msg, int ipc_mode,
                        gid_t ipc_gid, lct__on_message cb, void *arg, lct__transport **out,
                        char *err, size_t errlen);

/* Whether socket sock is a tcp endpoint (where the auth token applies). */
int lct__transport_is_tcp(const lct__transport *t, int sock);
/* Connections currently open over all endpoints. */
uint64_t lct__transport_clients(const lct__transport *t);

/* Sends msg (an nn_allocmsg buffer of len bytes) back along control; takes
 * both. A raw REP socket never blocks: a peer that went away (or is not
 * ready, which a REQ peer with one request in flight never is) loses the
 * reply, as nanomsg's xrep defines. Returns 0 or LCT_EIO. */
int lct__transport_send(lct__transport *t, int sock, void *control, void *msg, size_t len);

/* Stops (paused 1) or resumes reading every socket; replies still go out.
 * While paused, nanomsg holds at most one unread message per connection. */
void lct__transport_pause(lct__transport *t, int paused);

/* Stops polling; call before the loop's last run. */
void lct__transport_stop(lct__transport *t);
#define LCT__LINGER_MS 200 /* what the last replies get to leave before the sockets close */
/* Closes the sockets, once LCT__LINGER_MS have passed since the last send
 * (nanomsg drops what it has not yet written), and frees t; after the loop
 * has ended. */
void lct__transport_free(lct__transport *t);

#endif
