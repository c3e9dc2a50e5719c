/* lct_error.h — LCT's error codes: one table, shared by the codec, lctd, liblct and the wire. */
#ifndef LCT_ERROR_H
#define LCT_ERROR_H

#include "lct_api.h"

#ifdef __cplusplus
extern "C" {
#endif

/* XX(name, wire code, message). Functions return the negative wire code;
 * the positive code travels in replies (proto/PROTOCOL.md). Codes are stable:
 * append, never renumber. */
#define LCT_ERRNO_MAP(XX)                                                     \
  XX(EINVAL, 1, "invalid argument")                                           \
  XX(ENOMEM, 2, "out of memory")                                              \
  XX(ECORRUPT, 3, "corrupt or truncated blob")                                \
  XX(EVERSION, 4, "unsupported format or protocol version")                   \
  XX(EDTYPE, 5, "unknown dtype")                                              \
  XX(ECHECKSUM, 6, "checksum mismatch")                                       \
  XX(EBUFSIZE, 7, "buffer too small")                                         \
  XX(ESIZE, 8, "size does not match dtype and shape")                         \
  XX(ENOENT, 9, "no such key")                                                \
  XX(ENOSPC, 10, "memory pool full")                                          \
  XX(ENAMETOOLONG, 11, "key empty or too long")                               \
  XX(E2BIG, 12, "tensor or frame too large")                                  \
  XX(EPROTO, 13, "malformed message")                                         \
  XX(EOP, 14, "unknown operation")                                            \
  XX(EACCES, 15, "authentication required or failed")                         \
  XX(ETIMEDOUT, 16, "timed out")                                              \
  XX(ECONN, 17, "cannot connect or connection lost")                          \
  XX(EBUSY, 18, "server busy: too much in flight, retry later")               \
  XX(ECUDA, 19, "CUDA error")                                                 \
  XX(ENODEV, 20, "no usable GPU")                                             \
  XX(EIO, 21, "I/O error")                                                    \
  XX(ECONFIG, 22, "invalid configuration")                                    \
  XX(ESTALE, 23, "tensor changed during a ranged read")                       \
  XX(ENOIPC, 24, "no device-to-device path to this server")                   \
  XX(ECANCELED, 25, "canceled: the job it waited for failed, or its client closed") \
  XX(ERESTARTED, 26, "lctd restarted: another instance of it answered")

typedef enum {
#define LCT__ERR_ENUM(name, code, msg) LCT_##name = -(code),
  LCT_ERRNO_MAP(LCT__ERR_ENUM)
#undef LCT__ERR_ENUM
  LCT_OK = 0
} lct_errno;

/* Message for a negative LCT error code (or 0); never NULL. */
LCT_API const char *lct_strerror(int err);

/* Symbolic name ("LCT_ENOENT") for a negative LCT error code; never NULL. */
LCT_API const char *lct_err_name(int err);

#ifdef __cplusplus
}
#endif
#endif
