/* notify.c — the systemd readiness protocol (sd_notify): state lines as datagrams to $NOTIFY_SOCKET. */
#include "notify.h"

#include <errno.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "lct_error.h"

int lct__notify(const char *state) {
  const char *name = getenv("NOTIFY_SOCKET");
  if (name == NULL || *name == '\0')
    return 0;
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  size_t len = strlen(name);
  if ((name[0] != '/' && name[0] != '@') || len >= sizeof sa.sun_path)
    return LCT_ECONFIG;
  memcpy(sa.sun_path, name, len);
  if (name[0] == '@')
    sa.sun_path[0] = '\0'; /* abstract namespace */
  socklen_t salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len + (name[0] == '/'));
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return LCT_EIO;
  ssize_t n;
  while ((n = sendto(fd, state, strlen(state), MSG_NOSIGNAL, (struct sockaddr *)&sa, salen)) < 0 &&
         errno == EINTR)
    ;
  close(fd);
  return n == (ssize_t)strlen(state) ? 1 : LCT_EIO;
}

void lct__notify_extend(unsigned seconds) {
  char line[48];
  snprintf(line, sizeof line, "EXTEND_TIMEOUT_USEC=%llu", (unsigned long long)seconds * 1000000ull);
  lct__notify(line);
}

static atomic_int lct__changing; /* a start or stop is under way */

void lct__notify_changing(int changing) { atomic_store(&lct__changing, changing); }

void lct__notify_progress(unsigned seconds) {
  static atomic_uint_fast64_t last_s; /* the second of the last datagram, + 1: 0 is "never" */
  if (!atomic_load(&lct__changing))
    return;
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  uint_fast64_t at = (uint_fast64_t)now.tv_sec + 1, seen = atomic_load(&last_s);
  if (seen != at && atomic_compare_exchange_strong(&last_s, &seen, at))
    lct__notify_extend(seconds);
}
