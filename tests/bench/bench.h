/* bench.h — lct-bench subcommands and their shared timing and file helpers. */
#ifndef LCT_BENCH_H
#define LCT_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

int bench_codec(int argc, char **argv);
int bench_service(int argc, char **argv);
int bench_soak(int argc, char **argv);
#ifdef LCT_BENCH_GPU
int bench_gpu(int argc, char **argv);
#endif

/* Order-0 bound of the compression ratio of n elements: raw bits over the
 * mantissa bits kept (those not zero in every element) plus the entropy of
 * the sign+exponent field. entropy and kept_bits may be NULL. */
double bench_order0_bound(int dtype, const uint8_t *data, uint64_t n, double *entropy, double *kept_bits);

/* Monotonic seconds. */
double bench_now(void);
/* Reads a whole file or exits with a message. */
uint8_t *bench_read_file(const char *path, size_t *len);
/* Opens --out FILE for JSON results (NULL path: none). */
FILE *bench_open_out(const char *path);
/* Parses a comma-separated list of at most max unsigned numbers (no empty
 * or partly numeric items): their count, or -1 with a message on stderr. */
int bench_parse_list(const char *what, const char *arg, uint64_t *out, int max);

/* Describes this host's CPU for the results ("model, N cores"). */
void bench_cpu_name(char *buf, size_t cap);
/* A tcp port on 127.0.0.1 free at this moment; -1 if none could be had. */
int bench_free_port(void);

#endif
