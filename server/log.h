/* log.h — lctd's log lines on stderr, filtered by level. */
#ifndef LCT_SERVER_LOG_H
#define LCT_SERVER_LOG_H

#include "config.h"

void lct__log_set_level(int level);
/* Writes "<time> <level> <message>" when level is enabled. */
void lct__log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define lct__log_error(...) lct__log(LCT__LOG_ERROR, __VA_ARGS__)
#define lct__log_warn(...) lct__log(LCT__LOG_WARN, __VA_ARGS__)
#define lct__log_info(...) lct__log(LCT__LOG_INFO, __VA_ARGS__)
#define lct__log_debug(...) lct__log(LCT__LOG_DEBUG, __VA_ARGS__)

#endif
