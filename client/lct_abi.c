/* lct_abi.c — what liblct says of itself, for programs and bindings: its version, its structures' sizes, the stats fields. */
#include "lct.h"

unsigned lct_version_number(void) { return LCT_VERSION_NUMBER; }

const char *lct_version_string(void) { return LCT_VERSION_STRING; }

size_t lct_struct_size(lct_struct which) {
  switch (which) {
  case LCT_STRUCT_OPTIONS: return sizeof(lct_options);
  case LCT_STRUCT_TENSOR_INFO: return sizeof(lct_tensor_info);
  case LCT_STRUCT_DEVICE_TENSOR: return sizeof(lct_device_tensor);
  case LCT_STRUCT_LIST_ENTRY: return sizeof(lct_list_entry);
  case LCT_STRUCT_LIST_PAGE: return sizeof(lct_list_page);
  case LCT_STRUCT_SERVER_STATS: return sizeof(lct_server_stats);
  case LCT_STRUCT_SERVER_INFO: return sizeof(lct_server_info);
  }
  return 0;
}

static const char *const lct__stats_fields[] = {
#define LCT__STATS_NAME(name, what) #name,
    LCT_STATS_FIELDS(LCT__STATS_NAME)
#undef LCT__STATS_NAME
};

_Static_assert(sizeof(lct_server_stats) == sizeof lct__stats_fields / sizeof lct__stats_fields[0] * sizeof(uint64_t),
               "lct_server_stats holds one uint64_t per field");

const char *lct_stats_field_name(size_t i) {
  return i < sizeof lct__stats_fields / sizeof lct__stats_fields[0] ? lct__stats_fields[i] : NULL;
}
