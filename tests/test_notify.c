/* test_notify.c — the sd_notify datagrams lctd sends to $NOTIFY_SOCKET. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "lct_error.h"
#include "notify.h"

/* A datagram socket bound at name (a path, or '@' for the abstract namespace). */
static int listen_at(const char *name) {
  int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
  cr_assert_geq(fd, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  size_t len = strlen(name);
  memcpy(sa.sun_path, name, len);
  if (name[0] == '@') sa.sun_path[0] = 0;
  cr_assert_eq(bind(fd, (struct sockaddr *)&sa, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len)), 0);
  return fd;
}

static void expect_datagram(int fd, const char *want) {
  char buf[128] = {0};
  ssize_t n = recv(fd, buf, sizeof buf - 1, MSG_DONTWAIT);
  cr_assert_eq(n, (ssize_t)strlen(want), "got %zd bytes", n);
  cr_assert_str_eq(buf, want);
}

Test(notify, without_a_service_manager_nothing_is_sent) {
  unsetenv("NOTIFY_SOCKET");
  cr_assert_eq(lct__notify("READY=1"), 0);
}

/* A datagram socket at a fresh path, named by $NOTIFY_SOCKET (name: its path). */
static int listen_as_notify_socket(char name[64], const char *what) {
  snprintf(name, 64, "/tmp/lct-notify-%s-%d", what, (int)getpid());
  unlink(name);
  int fd = listen_at(name);
  setenv("NOTIFY_SOCKET", name, 1);
  return fd;
}

Test(notify, path_socket_gets_each_state) {
  char name[64];
  int fd = listen_as_notify_socket(name, "test");
  cr_assert_eq(lct__notify("READY=1"), 1);
  expect_datagram(fd, "READY=1");
  cr_assert_eq(lct__notify("STOPPING=1"), 1);
  expect_datagram(fd, "STOPPING=1");
  close(fd);
  unlink(name);
}

Test(notify, abstract_socket) {
  char name[64];
  snprintf(name, sizeof name, "@lct-notify-test-%d", (int)getpid());
  int fd = listen_at(name);
  setenv("NOTIFY_SOCKET", name, 1);
  cr_assert_eq(lct__notify("READY=1"), 1);
  expect_datagram(fd, "READY=1");
  close(fd);
}

Test(notify, unreachable_socket_is_an_error_not_a_crash) {
  setenv("NOTIFY_SOCKET", "/nonexistent/lct/notify", 1);
  cr_assert_lt(lct__notify("READY=1"), 0);
  setenv("NOTIFY_SOCKET", "relative/path", 1);
  cr_assert_lt(lct__notify("READY=1"), 0);
}

Test(notify, progress_extends_the_timeout_at_most_once_a_second) {
  char name[64];
  int fd = listen_as_notify_socket(name, "progress");
  lct__notify_extend(70);
  expect_datagram(fd, "EXTEND_TIMEOUT_USEC=70000000");
  lct__notify_progress(60);
  char none[8];
  cr_assert_lt(recv(fd, none, sizeof none, MSG_DONTWAIT), 0, "no progress sent while running");
  lct__notify_changing(1);
  for (int i = 0; i < 1000; i++)
    lct__notify_progress(60);
  expect_datagram(fd, "EXTEND_TIMEOUT_USEC=60000000");
  char buf[64];
  ssize_t more = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
  if (more > 0) /* the thousand calls crossed into the next second: one more, no third */
    cr_assert_lt(recv(fd, buf, sizeof buf, MSG_DONTWAIT), 0, "a third datagram within two seconds");
  usleep(1100 * 1000);
  lct__notify_progress(60);
  expect_datagram(fd, "EXTEND_TIMEOUT_USEC=60000000");
  lct__notify_changing(0);
  close(fd);
  unlink(name);
}
