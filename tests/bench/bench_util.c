/* bench_util.c — timing, file and host-description helpers for lct-bench. */
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"

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
