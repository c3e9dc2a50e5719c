/* lct_api.h — LCT_API marks the functions LCT's shared libraries (liblct, liblct_codec) export; everything else in them is hidden. */
#ifndef LCT_API_H
#define LCT_API_H

#if defined(__GNUC__) || defined(__clang__)
#define LCT_API __attribute__((visibility("default")))
#else
#define LCT_API
#endif

#endif
