/* notify.h — the systemd readiness protocol (sd_notify): state lines as datagrams to $NOTIFY_SOCKET. */
#ifndef LCT_SERVER_NOTIFY_H
#define LCT_SERVER_NOTIFY_H

/* Sends state ("READY=1", "STOPPING=1", ...) to the unix datagram socket
 * named by $NOTIFY_SOCKET (a path, or an abstract name starting with '@').
 * Returns 1 when sent, 0 when the variable is unset (not started by a service
 * manager), or a negative LCT_EIO / LCT_ECONFIG when sending failed. */
int lct__notify(const char *state);

/* Asks the service manager for `seconds` more, counted from now, before it
 * gives up on the start or stop under way (EXTEND_TIMEOUT_USEC; ignored while
 * the service runs). */
void lct__notify_extend(unsigned seconds);
/* lct__notify_extend from work that makes progress (a restore, a save) as it
 * goes, while a start or stop is under way (lct__notify_changing): one
 * datagram a second at most, so that a stall still times out. Thread-safe. */
void lct__notify_progress(unsigned seconds);
/* Whether a start or a stop is under way: progress extends a timeout only then
 * (one sent while running would stretch RuntimeMaxSec=). */
void lct__notify_changing(int changing);

#endif
