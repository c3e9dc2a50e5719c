/* log.c — lctd's log lines on stderr, one per event, filtered by level. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <time.h>

static int lct__log_level = LCT__LOG_INFO;

void lct__log_set_level(int level) { lct__log_level = level; }

void lct__log(int level, const char *fmt, ...) {
  static const char *const names[] = {"error", "warn", "info", "debug"};
  if (level > lct__log_level)
    return;
  struct timespec ts;
  struct tm tm;
  clock_gettime(CLOCK_REALTIME, &ts);
  localtime_r(&ts.tv_sec, &tm);
  char stamp[32];
  strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  /* One event, one line: control bytes (from keys, paths) cannot split it. */
  for (char *p = line; *p != '\0'; p++)
    if ((unsigned char)*p < 0x20 || *p == 0x7f)
      *p = '?';
  fprintf(stderr, "%s.%03ld lctd %s: %s\n", stamp, ts.tv_nsec / 1000000, names[level], line);
}
