/* lct_error.c — messages and names generated from LCT_ERRNO_MAP. */
#include "lct_error.h"

const char *lct_strerror(int err) {
  switch (err) {
  case 0:
    return "success";
#define LCT__ERR_MSG(name, code, msg) \
  case -(code):                       \
    return msg;
    LCT_ERRNO_MAP(LCT__ERR_MSG)
#undef LCT__ERR_MSG
  }
  return "unknown error";
}

const char *lct_err_name(int err) {
  switch (err) {
  case 0:
    return "LCT_OK";
#define LCT__ERR_NAME(name, code, msg) \
  case -(code):                        \
    return "LCT_" #name;
    LCT_ERRNO_MAP(LCT__ERR_NAME)
#undef LCT__ERR_NAME
  }
  return "LCT_EUNKNOWN";
}
