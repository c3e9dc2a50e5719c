/* main.c — the lct command line tool: subcommand dispatch. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const cli_command commands[] = {
    {"pack", "pack [--dtype DT] IN OUT    compress a raw tensor file (no daemon)", cli_pack},
    {"unpack", "unpack IN OUT               restore the exact bytes of a packed file", cli_unpack},
    {"put", "put KEY FILE [--dtype DT] [--shape AxBxC] [--encode [--threads N]]   store a raw or .npy file in lctd\n"
            "                              (--encode: coded here on N threads, default the CPUs, and sent as blobs)", cli_put},
    {"get", "get KEY OUT [--decode [--threads N]]   fetch a tensor (OUT ending in .npy gets a NumPy header;\n"
            "                              --decode: the stored blobs travel and are decoded here)", cli_get},
    {"rm", "rm KEY                      delete a tensor", cli_rm},
    {"ls", "ls [PREFIX] [--limit N]     list tensors: dtype, shape, raw, stored, ratio, version, key", cli_ls},
    {"stat", "stat KEY                    show a tensor's metadata", cli_stat},
    {"stats", "stats [--prometheus]        a summary of the server's counters, or all of them as Prometheus text",
     cli_stats},
    {"ping", "ping                        check that lctd answers", cli_ping},
    {"save", "save [--timeout SECONDS]    have lctd write its tensors to its persist_dir now", cli_save},
};

static int usage(FILE *to) {
  fputs("usage: lct [--endpoint EP | --endpoints EP,EP...] [--auth-token-file FILE] COMMAND [ARGS]\n\ncommands:\n",
        to);
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) fprintf(to, "  %s\n", commands[i].usage);
  fputs("\nDT is f32, bf16, f16, f8e4m3, f8e5m2 or raw; by default it comes from a .f32. / .bf16. / ... infix\n"
        "in the input file name (or the .npy header).\n"
        "EP is lctd's nanomsg endpoint (tcp://HOST:PORT or ipc:///PATH); default $LCT_ENDPOINTS, else\n"
        "$LCT_ENDPOINT, else ipc:///tmp/lctd.sock.\n"
        "Over an endpoint set (--endpoints, $LCT_ENDPOINTS: one lctd per GPU or host) each key lives on\n"
        "the endpoint rendezvous hashing gives it; ls and stats cover every endpoint, ping and save ask each.\n"
        "FILE holds a token of the lctd (its auth_token_file's or a tenant's; first line), proven by\n"
        "challenge-response on endpoints that authenticate (tcp) and never sent;\n"
        "default $LCT_AUTH_TOKEN_FILE.\n"
        "Every command that talks to lctd takes --timeout SECONDS: how long to wait for its reply\n"
        "(default 30, save none). A killed or restarted lctd ends the wait within about 2 s.\n"
        "And --remote (the host path only, as from another host; $LCT_HOST_PATH=1) and --connections N\n"
        "(connections a large tensor's frames spread over; $LCT_CONNECTIONS).\n",
        to);
  return to == stderr ? 2 : 0;
}

int main(int argc, char **argv) {
  static const struct {
    const char *flag;
    const char **slot;
  } globals[] = {
      {"--endpoint", &cli_endpoint}, {"--endpoints", &cli_endpoints}, {"--auth-token-file", &cli_auth_token_file}};
  for (size_t g = 0; argc >= 2 && g < sizeof globals / sizeof globals[0]; g++) {
    size_t n = strlen(globals[g].flag);
    if (strncmp(argv[1], globals[g].flag, n) != 0 || (argv[1][n] != '=' && argv[1][n] != '\0'))
      continue;
    if (argv[1][n] == '=') {
      *globals[g].slot = argv[1] + n + 1;
    } else if (argc >= 3) {
      *globals[g].slot = argv[2];
      argc--, argv++;
    } else {
      return usage(stderr);
    }
    argc--, argv++;
    g = (size_t)-1; /* the global options come in any order */
  }
  if (argc < 2) return usage(stderr);
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) return usage(stdout);
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
    if (strcmp(argv[1], commands[i].name) == 0) return commands[i].run(argc - 1, argv + 1);
  }
  fprintf(stderr, "lct: unknown command '%s'\n", argv[1]);
  return usage(stderr);
}
