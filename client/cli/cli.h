/* cli.h — subcommands and shared helpers of the lct command line tool. */
#ifndef LCT_CLI_H
#define LCT_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "lct.h"

typedef struct {
  const char *name;
  const char *usage;
  int (*run)(int argc, char **argv); /* argv[0] is the subcommand */
} cli_command;

int cli_pack(int argc, char **argv);
int cli_unpack(int argc, char **argv);
/* Remote subcommands (cli_remote.c): they talk to lctd through liblct. */
int cli_put(int argc, char **argv);
int cli_get(int argc, char **argv);
int cli_rm(int argc, char **argv);
int cli_ls(int argc, char **argv);
int cli_stat(int argc, char **argv);
int cli_stats(int argc, char **argv);
int cli_ping(int argc, char **argv);
int cli_save(int argc, char **argv);
/* `lct stats` without --prometheus: st and the Prometheus text it came with, summarized for people (cli_stats.c). */
void cli_stats_summary(FILE *out, const lct_server_stats *st, const char *prometheus);
/* lctd endpoint from --endpoint; NULL: cli_endpoints, $LCT_ENDPOINTS, $LCT_ENDPOINT or the default. */
extern const char *cli_endpoint;
/* Endpoint set from --endpoints (comma-separated); NULL: none given. */
extern const char *cli_endpoints;
/* Token file from --auth-token-file; NULL: $LCT_AUTH_TOKEN_FILE or none. */
extern const char *cli_auth_token_file;

/* Prints "lct: <message>" on stderr; returns 1 (the exit status). */
int cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Reads a whole file; returns 0 or an errno value. */
int cli_read_file(const char *path, uint8_t **data, size_t *len);
/* Writes a whole file, head_len bytes of head (a header; may be 0) then len of data, through a
 * temporary name and rename; 0 or an errno value. */
int cli_write_file(const char *path, const void *head, size_t head_len, const void *data, size_t len);
/* dtype from a ".f32." / ".bf16." / ... infix of a file name; -1 if none. */
int cli_dtype_from_name(const char *path);
/* The dtype --dtype names into *dtype; 0, or 1 after a message naming the
 * command (cmd) and the dtypes there are. */
int cli_dtype_option(const char *cmd, const char *name, int *dtype);

#endif
