/* config.h — lctd settings: one table of name, type, bounds and default, read from a file and flags. */
#ifndef LCT_SERVER_CONFIG_H
#define LCT_SERVER_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>

#define LCT__LISTEN_MAX 16

enum { LCT__BACKEND_AUTO, LCT__BACKEND_CPU, LCT__BACKEND_CUDA };
enum { LCT__LOG_ERROR, LCT__LOG_WARN, LCT__LOG_INFO, LCT__LOG_DEBUG };
enum { LCT__STAGING_PINNED, LCT__STAGING_PAGEABLE };

typedef struct lct__config {
  char *listen[LCT__LISTEN_MAX]; /* nanomsg endpoints to bind */
  int n_listen;
  int backend;                   /* LCT__BACKEND_* */
  uint64_t memory;               /* pool capacity in bytes; 0: automatic */
  uint64_t memory_slack;         /* cuda: device bytes of empty granules the pool keeps mapped */
  uint64_t ipc_idle_ms;          /* cuda: a client allocation mapped by CUDA IPC and unused this long is unmapped */
  int device;                    /* CUDA device ordinal */
  int host_staging;              /* cuda: LCT__STAGING_*, how host puts' and gets' bytes cross the bus */
  uint64_t frame_size;           /* payload bytes per frame */
  uint64_t segment_size;         /* raw bytes per independently coded segment */
  uint64_t staging_memory;       /* bytes of chunked puts held before commit */
  int max_pending_puts;          /* chunked puts begun and not committed */
  uint64_t put_timeout_ms;       /* idle time after which a begun put is dropped */
  int threads;                   /* codec worker threads; 0: one per CPU */
  uint64_t inline_size;          /* raw bytes up to which a request's coding runs on the loop thread */
  int log_level;                 /* LCT__LOG_* */
  char *metrics;                 /* HOST:PORT of the HTTP stats endpoint; "" when off */
  int port_offset;               /* added to tcp listen and metrics ports by lct__config_args (then 0) */
  char *auth_token_file;         /* file holding the token of every key over authenticated endpoints; "": none */
  char *access_file;             /* tenants: their tokens, key prefixes and quotas; "": none */
  int auth_plain_token;          /* 1: the token itself is accepted in Request.auth_token too (clients before AUTH) */
  int ipc_mode;                  /* permission bits of ipc sockets */
  char *ipc_group;               /* group of ipc sockets; "": the daemon's */
  int max_key_length;            /* longest key a put accepts */
  uint64_t max_tensor_size;      /* largest raw tensor a put accepts; 0: no limit */
  int max_requests;              /* requests in flight over all connections */
  uint64_t request_memory;       /* their bytes: messages held, replies being built */
  int max_client_requests;       /* requests in flight on one connection */
  uint64_t client_request_memory; /* their bytes */
  uint64_t drain_timeout_ms;     /* how long a stop waits for in-flight requests */
  char *persist_dir;             /* directory of tensor snapshots; "": no persistence */
  uint64_t save_interval_ms;     /* periodic saves to persist_dir; 0: none */
  int listen_source;             /* internal: which source last set listen */
} lct__config;

/* Fills cfg with the table's defaults. Free with lct__config_free. */
void lct__config_init(lct__config *cfg);
void lct__config_free(lct__config *cfg);

/* Sets one setting by name ('-' and '_' are the same) from its text form. source distinguishes the file
 * from flags so that the first `listen` of a source replaces the earlier list
 * and later ones append. Returns 0 or LCT_ECONFIG with a message in err. */
int lct__config_set(lct__config *cfg, const char *name, const char *value, int source, char *err,
                    size_t errlen);

/* Reads "name value" lines ('#' starts a comment; blank lines ignored). */
int lct__config_load(lct__config *cfg, const char *path, char *err, size_t errlen);

/* Applies argv: --config FILE is loaded first, then every --NAME VALUE (or
 * --NAME=VALUE) flag in order, then port_offset to the tcp listen and
 * metrics ports. Returns 0 or LCT_ECONFIG with a message. */
int lct__config_args(lct__config *cfg, int argc, char **argv, char *err, size_t errlen);

/* Checks relations between settings (segment vs frame size and so on). */
int lct__config_check(const lct__config *cfg, char *err, size_t errlen);

/* Prints every setting with its bounds, default and help, for --help. */
void lct__config_usage(FILE *to);
/* Prints the current values in config-file syntax. */
void lct__config_dump(const lct__config *cfg, FILE *to);
/* Prints the commented example configuration (deploy/lctd.conf): every
 * setting with its help and default, set to the service's value where the
 * service differs from the default. */
void lct__config_example(FILE *to);

/* Takes the reloadable settings of fresh into cfg, logging each change, and
 * logs a warning for every other setting that differs (it needs a restart).
 * Returns the number of settings taken. */
int lct__config_reload(lct__config *cfg, const lct__config *fresh);

/* Parses HOST:PORT (an IPv4 address, or an IPv6 one in brackets) into sa:
 * 0 or LCT_ECONFIG. */
int lct__config_parse_addr(const char *addr, struct sockaddr_storage *sa);

/* "512M", "40G", "64k", "1048576": binary multiples K, M, G, T (optional B or iB). */
int lct__parse_size(const char *text, uint64_t *out);
/* "500ms", "30s", "5m", "2h", or plain milliseconds. */
int lct__parse_ms(const char *text, uint64_t *out);

#endif
