/* cli_util.c — file and error helpers shared by the lct subcommands. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "lct_dtype.h"

int cli_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("lct: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  return 1;
}

int cli_read_file(const char *path, uint8_t **data, size_t *len) {
  FILE *f = fopen(path, "rb");
  if (!f) return errno;
  struct stat st;
  int err = fstat(fileno(f), &st) != 0 ? errno : S_ISDIR(st.st_mode) ? EISDIR : S_ISREG(st.st_mode) ? 0 : EINVAL;
  if (err != 0) {
    fclose(f);
    return err;
  }
  size_t n = (size_t)st.st_size;
  uint8_t *buf = malloc(n ? n : 1);
  if (!buf) {
    fclose(f);
    return ENOMEM;
  }
  if (fread(buf, 1, n, f) != n) {
    int err = ferror(f) ? EIO : EINVAL;
    free(buf);
    fclose(f);
    return err;
  }
  fclose(f);
  *data = buf;
  *len = n;
  return 0;
}

int cli_write_file(const char *path, const void *head, size_t head_len, const void *data, size_t len) {
  size_t plen = strlen(path);
  char *tmp = malloc(plen + 16);
  if (!tmp) return ENOMEM;
  snprintf(tmp, plen + 16, "%s.tmp%ld", path, (long)getpid());
  FILE *f = fopen(tmp, "wb");
  if (!f) {
    int err = errno;
    free(tmp);
    return err;
  }
  int err = 0;
  if ((head_len > 0 && fwrite(head, 1, head_len, f) != head_len) ||
      (len > 0 && fwrite(data, 1, len, f) != len) || fflush(f) != 0)
    err = errno ? errno : EIO;
  if (fclose(f) != 0 && !err) err = errno;
  if (!err && rename(tmp, path) != 0) err = errno;
  if (err) unlink(tmp);
  free(tmp);
  return err;
}

int cli_dtype_from_name(const char *path) {
  const char *base = strrchr(path, '/');
  base = base ? base + 1 : path;
  for (int d = 0; d < LCT_DTYPE_COUNT; d++) {
    char infix[16];
    snprintf(infix, sizeof infix, ".%s.", lct_dtype_name(d));
    if (strstr(base, infix)) return d;
  }
  return -1;
}

int cli_dtype_option(const char *cmd, const char *name, int *dtype) {
  lct_dtype d;
  if (lct_dtype_parse(name, &d) != 0)
    return cli_fail("%s: unknown dtype '%s' (f32, bf16, f16, f8e4m3, f8e5m2, raw)", cmd, name);
  *dtype = (int)d;
  return 0;
}
