/* bench_main.c — lct-bench: benchmark subcommand dispatch. */
#include <stdio.h>
#include <string.h>

#include "bench.h"

static const struct {
  const char *name, *usage;
  int (*run)(int argc, char **argv);
} benches[] = {
    {"codec", "codec [--json] [--out FILE] FILE...   CPU codec: ratio vs order-0 bound and zstd, GB/s", bench_codec},
    {"service", "service [--backend B] [--sizes 4K,1M,...] [--clients 1,4,...] [--full] [--modes M,...] [--out FILE] ...   lctd vs redis and a bare socket",
     bench_service},
    {"soak", "soak [--seconds S] [--clients N] [--keys N] [--max-mib N] [--backend B] [--chaos] [--out FILE]   "
             "verified load on lctd, SIGKILLs and restarts with --chaos",
     bench_soak},
#ifdef LCT_BENCH_GPU
    {"gpu", "gpu [--json] [--out FILE] [--data DIR] [--sizes MiB,...] [--reps N]   GPU codec vs same-run memcpy",
     bench_gpu},
#endif
};

int main(int argc, char **argv) {
  if (argc >= 2) {
    for (size_t i = 0; i < sizeof benches / sizeof benches[0]; i++) {
      if (strcmp(argv[1], benches[i].name) == 0) return benches[i].run(argc - 1, argv + 1);
    }
  }
  fputs("usage: lct-bench BENCHMARK [ARGS]\n", stderr);
  for (size_t i = 0; i < sizeof benches / sizeof benches[0]; i++) fprintf(stderr, "  %s\n", benches[i].usage);
  return 2;
}
