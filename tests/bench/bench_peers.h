/* bench_peers.h — what lct-bench service measures lctd against: a minimal Redis client, and a bare socket server and client (the transport's ceiling). */
#ifndef LCT_BENCH_PEERS_H
#define LCT_BENCH_PEERS_H

#include <stddef.h>
#include <stdint.h>

/* A stream connection with a small read buffer: to redis-server or to the plain server. */
typedef struct peer_conn {
  int fd;
  char buf[256];
  size_t have, pos;
} peer_conn;

/* Connects to a unix socket path, or to 127.0.0.1:port when path is NULL
 * (TCP_NODELAY). 0, or -1 with errno. */
int peer_open(const char *unix_path, int port, peer_conn *c);
void peer_close(peer_conn *c);

/* Redis SET, GET (the value's size, at most cap, into dst) and DEL of one
 * binary value; a protocol error ends the process with a message. */
void redis_set(peer_conn *r, const char *key, const void *val, size_t n);
size_t redis_get(peer_conn *r, const char *key, void *dst, size_t cap);
void redis_del(peer_conn *r, const char *key);

/* The plain server: one thread per connection, which keeps the last payload
 * put on it. A request is a 16-byte header (op 'P' or 'G', 7 zero bytes, the
 * payload's length as a little-endian u64) and for 'P' the payload; the
 * reply is an 8-byte length (0 for 'P') and for 'G' the bytes kept. Runs in
 * a child process (killed with the parent) on unix_path and 127.0.0.1:port;
 * returns its pid once both accept. */
int plain_server_start(const char *unix_path, int port);
void plain_put(peer_conn *c, const void *val, size_t n);
size_t plain_get(peer_conn *c, void *dst, size_t cap);

#endif
