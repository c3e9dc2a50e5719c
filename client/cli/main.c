/* main.c — the lct command line tool: subcommand dispatch. */
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const cli_command commands[] = {
    {"pack", "pack [--dtype DT] IN OUT    compress a raw tensor file (no daemon)", cli_pack},
    {"unpack", "unpack IN OUT               restore the exact bytes of a packed file", cli_unpack},
};

static int usage(FILE *to) {
  fputs("usage: lct COMMAND [ARGS]\n\ncommands:\n", to);
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) fprintf(to, "  %s\n", commands[i].usage);
  fputs("\nDT is f32, bf16, f16, f8e4m3, f8e5m2 or raw; by default it comes from a .f32. / .bf16. / ... infix\n"
        "in the input file name.\n",
        to);
  return to == stderr ? 2 : 0;
}

int main(int argc, char **argv) {
  if (argc < 2) return usage(stderr);
  if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) return usage(stdout);
  for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++) {
    if (strcmp(argv[1], commands[i].name) == 0) return commands[i].run(argc - 1, argv + 1);
  }
  fprintf(stderr, "lct: unknown command '%s'\n", argv[1]);
  return usage(stderr);
}
