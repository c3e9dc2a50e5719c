/* cli_npy.c — NumPy .npy headers: read dtype and shape, write them for a stored tensor. */
#include "cli_npy.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lct_dtype.h"

static const uint8_t npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

int cli_npy_is(const uint8_t *buf, size_t len) {
  return len >= 6 && memcmp(buf, npy_magic, 6) == 0;
}

/* Finds 'name': in the header dict and returns the text after the colon. */
static const char *npy_field(const char *h, const char *name) {
  char quoted[32];
  snprintf(quoted, sizeof quoted, "'%s'", name);
  const char *p = strstr(h, quoted);
  if (!p) return NULL;
  p += strlen(quoted);
  while (*p == ' ') p++;
  if (*p != ':') return NULL;
  p++;
  while (*p == ' ') p++;
  return p;
}

const char *cli_npy_parse(const uint8_t *buf, size_t len, cli_npy *out) {
  memset(out, 0, sizeof *out);
  if (!cli_npy_is(buf, len) || len < 10) return "not a .npy file";
  int major = buf[6];
  size_t hlen, start;
  if (major == 1) {
    hlen = (size_t)buf[8] | (size_t)buf[9] << 8;
    start = 10;
  } else if (major == 2 || major == 3) {
    if (len < 12) return "truncated .npy header";
    hlen = (size_t)buf[8] | (size_t)buf[9] << 8 | (size_t)buf[10] << 16 | (size_t)buf[11] << 24;
    start = 12;
  } else {
    return "unsupported .npy version";
  }
  if (hlen > len - start || hlen > (1 << 20)) return "truncated .npy header";
  char *h = malloc(hlen + 1);
  if (!h) return "out of memory";
  memcpy(h, buf + start, hlen);
  h[hlen] = '\0';
  const char *err = NULL;
  const char *d = npy_field(h, "descr"), *f = npy_field(h, "fortran_order"), *s = npy_field(h, "shape");
  size_t dl;
  if (!d || !f || !s || *d != '\'' || (dl = strcspn(d + 1, "'")) == 0 || dl >= sizeof out->descr || d[1 + dl] != '\'') {
    err = "malformed .npy header";
    goto done;
  }
  memcpy(out->descr, d + 1, dl);
  out->descr[dl] = '\0';
  if (strncmp(f, "False", 5) != 0) {
    err = "Fortran-order .npy arrays are not supported (save with C order)";
    goto done;
  }
  if (*s != '(') {
    err = "malformed .npy shape";
    goto done;
  }
  s++;
  for (;;) {
    while (*s == ' ' || *s == ',') s++;
    if (*s == ')') break;
    if (*s < '0' || *s > '9') {
      err = "malformed .npy shape";
      goto done;
    }
    if (out->ndim == CLI_NPY_MAX_DIMS) {
      err = "more than 8 dimensions";
      goto done;
    }
    char *end;
    errno = 0;
    out->shape[out->ndim++] = strtoull(s, &end, 10);
    if (errno == ERANGE || (*end != ',' && *end != ')' && *end != ' ')) {
      err = "malformed .npy shape";
      goto done;
    }
    s = end;
  }
  char order = out->descr[0], kind = out->descr[1];
  char *end;
  long size = strtol(out->descr + 2, &end, 10); /* bytes per item for every kind accepted here */
  if ((order != '<' && order != '|' && order != '>' && order != '=') || !strchr("fiubcV?", kind) || kind == '\0' ||
      *end != '\0' || size <= 0 || size > 64) {
    err = "unsupported .npy descr";
    goto done;
  }
  out->itemsize = (size_t)size;
  out->dtype = -1;
  if (order == '>' && size > 1) {
    err = "big-endian .npy data is not supported";
    goto done;
  }
  if (kind == 'f' && size == 4) out->dtype = LCT_DTYPE_F32;
  else if (kind == 'f' && size == 2) out->dtype = LCT_DTYPE_F16;
  else if (kind == 'V' && size == 2) out->dtype = LCT_DTYPE_BF16;
  out->data_offset = start + hlen;
done:
  free(h);
  return err;
}

/* Appends to the text of *n bytes in buf; 0 if it does not fit (buf is then unspecified). */
static int append(char *buf, size_t cap, size_t *n, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int append(char *buf, size_t cap, size_t *n, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int w = vsnprintf(buf + *n, cap - *n, fmt, ap);
  va_end(ap);
  if (w < 0 || (size_t)w >= cap - *n) return 0;
  *n += (size_t)w;
  return 1;
}

size_t cli_npy_header(const char *descr, const uint64_t *shape, int ndim, uint8_t *dst, size_t cap) {
  char dict[512];
  size_t n = 0;
  int fits = append(dict, sizeof dict, &n, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
  for (int i = 0; i < ndim && fits; i++)
    fits = append(dict, sizeof dict, &n, "%llu%s", (unsigned long long)shape[i],
                  ndim == 1 ? "," : i + 1 < ndim ? ", " : "");
  if (!fits || !append(dict, sizeof dict, &n, "), }")) return 0;
  size_t total = 10 + n + 1; /* magic, version, length, dict, '\n' */
  total = (total + 63) / 64 * 64;
  if (total > cap) return 0;
  memcpy(dst, npy_magic, 6);
  dst[6] = 1;
  dst[7] = 0;
  dst[8] = (uint8_t)(total - 10);
  dst[9] = (uint8_t)((total - 10) >> 8);
  memcpy(dst + 10, dict, n);
  memset(dst + 10 + n, ' ', total - 10 - n - 1);
  dst[total - 1] = '\n';
  return total;
}
