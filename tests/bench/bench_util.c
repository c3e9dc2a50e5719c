/* bench_util.c — timing, file and host-description helpers for lct-bench. */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "lct_codec.h"

double bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

uint8_t *bench_read_file(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    perror(path);
    exit(1);
  }
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
  if (!buf || fread(buf, 1, (size_t)n, f) != (size_t)n) {
    fprintf(stderr, "lct-bench: cannot read %s\n", path);
    exit(1);
  }
  fclose(f);
  *len = (size_t)n;
  return buf;
}

FILE *bench_open_out(const char *path) {
  if (!path) return NULL;
  FILE *f = fopen(path, "w");
  if (!f) {
    perror(path);
    exit(1);
  }
  return f;
}

void bench_cpu_name(char *buf, size_t cap) {
  snprintf(buf, cap, "unknown CPU");
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (f) {
    char line[256];
    while (fgets(line, sizeof line, f)) {
      if (strncmp(line, "model name", 10) == 0) {
        char *v = strchr(line, ':');
        if (v) {
          v += 2;
          v[strcspn(v, "\n")] = 0;
          snprintf(buf, cap, "%s", v);
        }
        break;
      }
    }
    fclose(f);
  }
  size_t used = strlen(buf);
  snprintf(buf + used, cap - used, ", %ld cores", sysconf(_SC_NPROCESSORS_ONLN));
}

double bench_order0_bound(int dtype, const uint8_t *data, uint64_t n, double *entropy, double *kept_bits) {
  const size_t w = lct_dtype_size(dtype);
  const unsigned se_bits = lct_dtype_symbol_bits(dtype) - 1; /* the format codes one mantissa bit more */
  const unsigned mant = 8 * (unsigned)w - se_bits;
  uint64_t *hist = calloc((size_t)1 << se_bits, sizeof *hist);
  uint32_t all = 0;
  for (uint64_t i = 0; i < n; i++) {
    uint32_t x = 0;
    memcpy(&x, data + i * w, w);
    hist[x >> mant]++;
    all |= x;
  }
  double h = 0;
  for (size_t s = 0; s < ((size_t)1 << se_bits); s++) {
    if (hist[s]) {
      double p = (double)hist[s] / (double)n;
      h -= p * log2(p);
    }
  }
  free(hist);
  all &= (1u << mant) - 1;
  const unsigned kept = mant - (all ? (unsigned)__builtin_ctz(all) : mant);
  if (entropy) *entropy = h;
  if (kept_bits) *kept_bits = kept;
  return 8.0 * (double)w / ((double)kept + h);
}

int bench_parse_list(const char *what, const char *arg, uint64_t *out, int max) {
  int n = 0;
  for (const char *p = arg; *p;) {
    char *end;
    errno = 0;
    uint64_t v = strtoull(p, &end, 10);
    if (end == p || errno == ERANGE || (*end != ',' && *end != '\0') || n == max) {
      fprintf(stderr, "lct-bench: %s: expected at most %d comma-separated numbers, not '%s'\n", what, max, arg);
      return -1;
    }
    out[n++] = v;
    p = *end == ',' ? end + 1 : end;
  }
  return n;
}

int bench_free_port(void) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof a;
  int ok = s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(s, (struct sockaddr *)&a, &len) == 0;
  if (s >= 0) close(s);
  return ok ? ntohs(a.sin_port) : -1;
}
