/* notify.h — the systemd readiness protocol (sd_notify): state lines as datagrams to $NOTIFY_SOCKET. */
#ifndef LCT_SERVER_NOTIFY_H
#define LCT_SERVER_NOTIFY_H

/* Sends state ("READY=1", "STOPPING=1", ...) to the unix datagram socket
 * named by $NOTIFY_SOCKET (a path, or an abstract name starting with '@').
 * Returns 1 when sent, 0 when the variable is unset (not started by a service
 * manager), or a negative LCT_EIO / LCT_ECONFIG when sending failed. */
int lct__notify(const char *state);

#endif
