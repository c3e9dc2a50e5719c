/* cli_remote.c — `lct put/get/rm/ls/stat/stats/ping/save`: talk to running lctd through liblct, one endpoint or a set.
 *
 * Over an endpoint set (--endpoints, $LCT_ENDPOINTS) a key's command goes to
 * the lctd that holds it (lct_client_set_place); ls merges every endpoint's
 * listing in key order, stats sums them, ping and save ask each. An endpoint
 * that does not answer is an error for its keys (and its part of ls, stats,
 * ping and save) only.
 *
 * Files are raw bytes or .npy. NumPy has no bfloat16 or float8: `get` writes
 * bf16 tensors with descr '|V2' and f8 tensors with '|V1' (view them with
 * ml_dtypes, e.g. a.view(ml_dtypes.bfloat16)); `put` reads '|V2' / '<V2' as
 * bf16 and needs --dtype for '|V1'. A .npy of any other dtype (int32, float64,
 * ...) is stored as dtype raw with the item size as a last dimension, and
 * comes back as '|u1' with that shape. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "cli_coded.h"
#include "cli_npy.h"
#include "lct.h"

/* A decimal number written whole ("4", not "4x" or ""); -1 otherwise. */
static long cli_whole_number(const char *s) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  return end == s || *end != '\0' || errno != 0 ? -1 : v;
}

const char *cli_endpoint;
const char *cli_endpoints;
const char *cli_auth_token_file;

/* The endpoints of this command (one, or a set); their connections live and die with it. */
static lct_client_set *remote_set;

/* Options every remote command accepts, and its positional arguments. */
typedef struct remote_args {
  const char *pos[3];
  int npos;
  const char *dtype;
  const char *shape;
  long limit;
  int prometheus; /* stats: the Prometheus text as lctd sends it */
  int timeout_ms; /* --timeout: the wait for lctd's reply (a save's too); 0: liblct's defaults */
  int coded;      /* put --encode, get --decode: the codec runs here and blobs travel */
  int threads;    /* --threads: for the codec; 0: the CPUs online */
  int remote;     /* --remote: the host path only (lct_options.host_path) */
  int connections; /* --connections: lct_options.connections */
} remote_args;

/* A stored dtype's name; a server newer than this lct may report one it does not know. */
static const char *dtype_label(lct_dtype dtype) {
  const char *name = lct_dtype_name(dtype);
  return name != NULL ? name : "?";
}

static int remote_parse(int argc, char **argv, int max_pos, remote_args *a) {
  memset(a, 0, sizeof *a);
  for (int i = 1; i < argc; i++) {
    const char *arg = argv[i];
    const char **slot = NULL;
    if (strcmp(arg, "--endpoint") == 0) slot = &cli_endpoint;
    else if (strcmp(arg, "--endpoints") == 0) slot = &cli_endpoints;
    else if (strcmp(arg, "--auth-token-file") == 0) slot = &cli_auth_token_file;
    else if (strcmp(arg, "--dtype") == 0) slot = &a->dtype;
    else if (strcmp(arg, "--shape") == 0) slot = &a->shape;
    else if (strcmp(arg, "--encode") == 0 || strcmp(arg, "--decode") == 0 || strcmp(arg, "--remote") == 0) {
      *(arg[2] == 'r' ? &a->remote : &a->coded) = 1;
      continue;
    } else if (strcmp(arg, "--threads") == 0 || strcmp(arg, "--connections") == 0) {
      long v = i + 1 < argc ? cli_whole_number(argv[++i]) : 0, most = arg[2] == 't' ? 64 : LCT_CONNECTIONS_MAX;
      if (v <= 0 || v > most)
        return cli_fail("%s: %s needs a number from 1 to %ld", argv[0], arg, most);
      *(arg[2] == 't' ? &a->threads : &a->connections) = (int)v;
      continue;
    } else if (strcmp(arg, "--prometheus") == 0) {
      a->prometheus = 1;
      continue;
    } else if (strcmp(arg, "--limit") == 0) {
      if (i + 1 >= argc || (a->limit = cli_whole_number(argv[++i])) <= 0)
        return cli_fail("%s: --limit needs a positive number", argv[0]);
      continue;
    } else if (strcmp(arg, "--timeout") == 0) {
      char *end = NULL;
      double s = i + 1 < argc ? strtod(argv[++i], &end) : 0;
      if (end == NULL || *end != '\0' || !(s >= 0.001 && s <= 2e6))
        return cli_fail("%s: --timeout needs a number of seconds (0.001 to 2000000)", argv[0]);
      a->timeout_ms = (int)(s * 1000);
      continue;
    } else if (arg[0] == '-' && arg[1] == '-') {
      return cli_fail("%s: unknown option '%s'", argv[0], arg);
    } else if (a->npos < max_pos) {
      a->pos[a->npos++] = arg;
      continue;
    } else {
      return cli_fail("%s: unexpected argument '%s'", argv[0], arg);
    }
    if (i + 1 >= argc) return cli_fail("%s: %s needs a value", argv[0], arg);
    *slot = argv[++i];
  }
  return 0;
}

/* Opens the command's endpoint set: --endpoint (one), --endpoints, $LCT_ENDPOINTS,
 * $LCT_ENDPOINT or the default. Connects to none yet. */
static int remote_open(const char *cmd, const remote_args *a) {
  if (cli_endpoint != NULL && cli_endpoints != NULL)
    return cli_fail("%s: give --endpoint or --endpoints, not both", cmd);
  lct_options o;
  lct_options_init(&o);
  o.endpoint = cli_endpoint;
  o.auth_token_file = cli_auth_token_file;
  o.timeout_ms = o.save_timeout_ms = a->timeout_ms;
  o.host_path = a->remote;
  o.connections = a->connections;
  int rc = lct_client_set_open(&o, cli_endpoints, &remote_set);
  if (rc == LCT_EINVAL) {
    /* The list the set was given, found as lct_client_set_open finds it. */
    const char *list = cli_endpoints != NULL ? cli_endpoints : cli_endpoint;
    if (list == NULL || *list == '\0')
      list = getenv("LCT_ENDPOINTS");
    if (list == NULL || *list == '\0')
      list = getenv("LCT_ENDPOINT");
    return cli_fail("%s: bad endpoint list '%s': comma-separated tcp://HOST:PORT or ipc:///PATH, each once", cmd,
                    list != NULL ? list : "");
  }
  if (rc) return cli_fail("%s: %s", cmd, lct_strerror(rc));
  return 0;
}

static size_t remote_count(void) { return lct_client_set_size(remote_set); }

static void remote_close(void) {
  lct_client_set_close(remote_set);
  remote_set = NULL;
}

/* " (endpoint I of N)" in a set of several, else "". */
static const char *member_label(size_t i, char *buf, size_t cap) {
  if (remote_count() < 2) return "";
  snprintf(buf, cap, " (endpoint %zu of %zu)", i + 1, remote_count());
  return buf;
}

/* The connection to endpoint i of the set; key: the key it holds, for the message. */
static int remote_member(const char *cmd, size_t i, const char *key, lct_client **c) {
  int rc = lct_client_set_client(remote_set, i, c);
  if (rc == 0) return 0;
  char label[48];
  return cli_fail("%s: cannot reach lctd at %s%s%s%s: %s%s", cmd, lct_client_set_endpoint(remote_set, i),
                  member_label(i, label, sizeof label), key ? ", which holds " : "", key ? key : "",
                  lct_strerror(rc), rc == LCT_EACCES ? " (give the server's token file with --auth-token-file)" : "");
}

/* Opens the set and connects to the endpoint that holds key. */
static int remote_connect(const char *cmd, const remote_args *a, const char *key, lct_client **c) {
  if (remote_open(cmd, a)) return 1;
  if (remote_member(cmd, lct_client_set_place(remote_set, key), remote_count() > 1 ? key : NULL, c) == 0) return 0;
  remote_close();
  return 1;
}

/* The failure rc of a call on c, the connection to endpoint i. */
static int member_fail(const char *cmd, const char *key, size_t i, lct_client *c, int rc) {
  const char *detail = lct_last_error(c);
  if (strcmp(detail, lct_strerror(rc)) == 0) detail = "";
  char where[320] = "";
  if (remote_count() > 1)
    snprintf(where, sizeof where, " (lctd at %s)", lct_client_set_endpoint(remote_set, i));
  return cli_fail("%s%s%s%s: %s%s%s", cmd, *key ? " " : "", key, where, lct_strerror(rc), *detail ? ": " : "",
                  detail);
}

/* The failure rc of a command's call on c, which ends it. */
static int remote_fail(const char *cmd, const char *key, lct_client *c, int rc) {
  size_t i = *key ? lct_client_set_place(remote_set, key) : 0;
  int status = member_fail(cmd, key, i, c, rc);
  remote_close();
  return status;
}

static void format_shape(const lct_tensor_info *info, char *buf, size_t len) {
  size_t n = (size_t)snprintf(buf, len, "[");
  for (int i = 0; i < info->ndim && n < len; i++)
    n += (size_t)snprintf(buf + n, len - n, "%s%" PRIu64, i ? "," : "", info->shape[i]);
  if (n < len) snprintf(buf + n, len - n, "]");
}

static double ratio(const lct_tensor_info *info) {
  return info->stored_bytes ? (double)info->raw_bytes / (double)info->stored_bytes : 0.0;
}

/* "4096x1024" or "4096,1024"; "" is a scalar. Returns the rank or -1. */
static int parse_shape(const char *text, uint64_t *shape) {
  int n = 0;
  const char *p = text;
  while (*p) {
    if (n == LCT_MAX_DIMS || *p < '0' || *p > '9') return -1;
    char *end;
    errno = 0;
    shape[n++] = strtoull(p, &end, 10);
    if (errno) return -1;
    p = end;
    if (*p == 'x' || *p == 'X' || *p == ',') {
      p++;
      if (!*p) return -1;
    } else if (*p) {
      return -1;
    }
  }
  return n;
}

int cli_put(int argc, char **argv) {
  remote_args a;
  if (remote_parse(argc, argv, 2, &a)) return 1;
  if (a.npos != 2) return cli_fail("usage: lct put KEY FILE [--dtype DT] [--shape AxBxC] [--encode [--threads N]]");
  const char *key = a.pos[0], *path = a.pos[1];
  uint8_t *buf;
  size_t len;
  int err = cli_read_file(path, &buf, &len);
  if (err) return cli_fail("put: %s: %s", path, strerror(err));

  int dtype = -1, ndim = -1;
  uint64_t shape[LCT_MAX_DIMS];
  const uint8_t *data = buf;
  size_t bytes = len;
  if (a.dtype && cli_dtype_option("put", a.dtype, &dtype)) {
    free(buf);
    return 1;
  }
  if (cli_npy_is(buf, len)) {
    cli_npy npy;
    const char *why = cli_npy_parse(buf, len, &npy);
    if (why) {
      free(buf);
      return cli_fail("put: %s: %s", path, why);
    }
    data = buf + npy.data_offset;
    bytes = len - npy.data_offset;
    ndim = npy.ndim;
    memcpy(shape, npy.shape, sizeof shape);
    if (dtype < 0 && npy.dtype < 0 && npy.descr[1] == 'V' && npy.itemsize == 1) {
      free(buf);
      return cli_fail("put: %s: descr '%s' is ambiguous: give --dtype (f8e4m3, f8e5m2 or raw)", path, npy.descr);
    }
    if (dtype < 0) dtype = npy.dtype >= 0 ? npy.dtype : LCT_DTYPE_RAW;
    if (dtype == LCT_DTYPE_RAW && npy.itemsize > 1) {
      /* No lct equivalent: raw bytes, the item size as the last dimension. */
      if (ndim == LCT_MAX_DIMS) {
        free(buf);
        return cli_fail("put: %s: too many dimensions to store descr '%s' as raw", path, npy.descr);
      }
      shape[ndim++] = npy.itemsize;
    } else if (dtype != LCT_DTYPE_RAW && lct_dtype_size(dtype) != npy.itemsize) {
      free(buf);
      return cli_fail("put: %s: descr '%s' does not hold %s elements", path, npy.descr, lct_dtype_name(dtype));
    }
  } else if (dtype < 0 && (dtype = cli_dtype_from_name(path)) < 0) {
    free(buf);
    return cli_fail("put: cannot tell the dtype of '%s' from its name: give --dtype", path);
  }
  if (a.shape) {
    if ((ndim = parse_shape(a.shape, shape)) < 0) {
      free(buf);
      return cli_fail("put: bad --shape '%s' (like 4096x1024, at most %d dims)", a.shape, LCT_MAX_DIMS);
    }
  } else if (ndim < 0) {
    size_t w = lct_dtype_size(dtype);
    if (bytes % w != 0) {
      free(buf);
      return cli_fail("put: %s: %zu bytes is not a whole number of %s elements", path, bytes, lct_dtype_name(dtype));
    }
    ndim = 1;
    shape[0] = bytes / w;
  }

  lct_client *c;
  if (remote_connect("put", &a, key, &c)) {
    free(buf);
    return 1;
  }
  lct_tensor_info info;
  int rc = a.coded ? cli_put_encoded(c, key, dtype, shape, ndim, data, bytes, cli_threads(a.threads), &info)
                   : lct_put(c, key, dtype, shape, ndim, data, bytes, &info);
  free(buf);
  if (rc) return remote_fail("put", key, c, rc);
  char sh[128];
  format_shape(&info, sh, sizeof sh);
  printf("%s: version %" PRIu64 ", %s %s, %" PRIu64 " bytes stored as %" PRIu64 " (ratio %.3f)\n", key,
         info.version, dtype_label(info.dtype), sh, info.raw_bytes, info.stored_bytes, ratio(&info));
  remote_close();
  return 0;
}

static int ends_with(const char *s, const char *suffix) {
  size_t n = strlen(s), m = strlen(suffix);
  return n >= m && strcmp(s + n - m, suffix) == 0;
}

static const char *npy_descr(lct_dtype dtype) {
  switch (dtype) {
  case LCT_DTYPE_F32: return "<f4";
  case LCT_DTYPE_F16: return "<f2";
  case LCT_DTYPE_BF16: return "|V2";
  case LCT_DTYPE_F8E4M3:
  case LCT_DTYPE_F8E5M2: return "|V1";
  default: return "|u1";
  }
}

int cli_get(int argc, char **argv) {
  remote_args a;
  if (remote_parse(argc, argv, 2, &a)) return 1;
  if (a.npos != 2)
    return cli_fail("usage: lct get KEY OUT [--decode [--threads N]]   (OUT ending in .npy gets a NumPy header)");
  const char *key = a.pos[0], *out = a.pos[1];
  lct_client *c;
  if (remote_connect("get", &a, key, &c)) return 1;
  void *data;
  lct_tensor_info info;
  int rc = a.coded ? cli_get_decoded(c, key, cli_threads(a.threads), &data, &info)
                   : lct_get_alloc(c, key, &data, &info);
  if (rc) return remote_fail("get", key, c, rc);
  remote_close();
  uint8_t header[1024];
  size_t h = 0;
  if (ends_with(out, ".npy") &&
      (h = cli_npy_header(npy_descr(info.dtype), info.shape, info.ndim, header, sizeof header)) == 0) {
    lct_free(data);
    return cli_fail("get: %s: the shape does not fit a .npy header", out);
  }
  int err = cli_write_file(out, header, h, data, info.raw_bytes);
  lct_free(data);
  if (err) return cli_fail("get: %s: %s", out, strerror(err));
  char sh[128];
  format_shape(&info, sh, sizeof sh);
  printf("%s: version %" PRIu64 ", %s %s, %" PRIu64 " bytes -> %s\n", key, info.version,
         dtype_label(info.dtype), sh, info.raw_bytes, out);
  return 0;
}

int cli_rm(int argc, char **argv) {
  remote_args a;
  if (remote_parse(argc, argv, 1, &a)) return 1;
  if (a.npos != 1) return cli_fail("usage: lct rm KEY");
  lct_client *c;
  if (remote_connect("rm", &a, a.pos[0], &c)) return 1;
  int rc = lct_delete(c, a.pos[0]);
  if (rc) return remote_fail("rm", a.pos[0], c, rc);
  remote_close();
  return 0;
}

int cli_stat(int argc, char **argv) {
  remote_args a;
  if (remote_parse(argc, argv, 1, &a)) return 1;
  if (a.npos != 1) return cli_fail("usage: lct stat KEY");
  lct_client *c;
  if (remote_connect("stat", &a, a.pos[0], &c)) return 1;
  lct_tensor_info info;
  int rc = lct_stat(c, a.pos[0], &info);
  if (rc) return remote_fail("stat", a.pos[0], c, rc);
  remote_close();
  char sh[128];
  format_shape(&info, sh, sizeof sh);
  printf("key:          %s\ndtype:        %s\nshape:        %s\nraw bytes:    %" PRIu64
         "\nstored bytes: %" PRIu64 "\nratio:        %.4f\nversion:      %" PRIu64
         "\nchecksum:     %08" PRIx32 " (crc32c)\n",
         a.pos[0], dtype_label(info.dtype), sh, info.raw_bytes, info.stored_bytes, ratio(&info),
         info.version, info.checksum);
  return 0;
}

/* One endpoint's listing, merged into ls's: its current page and where in it. */
typedef struct ls_source {
  lct_client *c;
  lct_list_page *page; /* NULL: done */
  size_t at;
} ls_source;

/* Endpoint i's next page after cursor (NULL: its first) into src; 1 after a failure message. */
static int ls_fetch(ls_source *src, size_t i, const char *prefix, const char *cursor, long left) {
  lct_list_page *page;
  size_t want = left > 0 ? (size_t)left : 0; /* the server caps it, and 0 takes its default */
  int rc = lct_list(src->c, prefix, cursor, want, &page);
  lct_list_free(src->page);
  src->page = NULL;
  src->at = 0;
  if (rc) return member_fail("ls", prefix ? prefix : "", i, src->c, rc);
  if (page->n == 0) lct_list_free(page); /* an empty page ends the listing whatever it says */
  else src->page = page;
  return 0;
}

int cli_ls(int argc, char **argv) {
  remote_args a;
  if (remote_parse(argc, argv, 1, &a)) return 1;
  const char *prefix = a.npos ? a.pos[0] : NULL;
  if (remote_open("ls", &a)) return 1;
  size_t n = remote_count();
  ls_source *src = calloc(n, sizeof *src);
  if (src == NULL) {
    remote_close();
    return cli_fail("ls: out of memory");
  }
  long left = a.limit > 0 ? a.limit : -1;
  int status = 0;
  for (size_t i = 0; i < n; i++)
    if (remote_member("ls", i, NULL, &src[i].c) || ls_fetch(&src[i], i, prefix, NULL, left)) status = 1;
  /* Every endpoint's keys in bytewise order: the smallest head first. */
  while (left != 0) {
    ls_source *first = NULL;
    size_t fi = 0;
    for (size_t i = 0; i < n; i++)
      if (src[i].page != NULL &&
          (first == NULL || strcmp(src[i].page->entries[src[i].at].key, first->page->entries[first->at].key) < 0))
        first = &src[i], fi = i;
    if (first == NULL) break;
    const lct_list_entry *e = &first->page->entries[first->at];
    char sh[128];
    format_shape(&e->info, sh, sizeof sh);
    printf("%-6s %-20s %12" PRIu64 " %12" PRIu64 " %6.3f %6" PRIu64 "  %s\n", dtype_label(e->info.dtype), sh,
           e->info.raw_bytes, e->info.stored_bytes, ratio(&e->info), e->info.version, e->key);
    if (left > 0) left--;
    if (++first->at < first->page->n) continue;
    char *cursor = first->page->next_cursor;
    if (cursor == NULL || left == 0) {
      lct_list_free(first->page);
      first->page = NULL;
      continue;
    }
    first->page->next_cursor = NULL;
    if (ls_fetch(first, fi, prefix, cursor, left)) status = 1;
    free(cursor);
  }
  for (size_t i = 0; i < n; i++) lct_list_free(src[i].page);
  free(src);
  remote_close();
  return status;
}

/* One endpoint's line of `lct stats` over a set. */
static void stats_line(const char *endpoint, const lct_server_stats *st) {
  printf("%s: %" PRIu64 " tensors, %" PRIu64 " bytes stored as %" PRIu64, endpoint, st->tensors, st->raw_bytes,
         st->stored_bytes);
  if (st->stored_bytes > 0) printf(" (ratio %.3f)", (double)st->raw_bytes / (double)st->stored_bytes);
  printf(", pool %" PRIu64 " of %" PRIu64 " bytes used\n", st->pool_used, st->pool_capacity);
}

int cli_stats(int argc, char **argv) {
  remote_args a;
  if (remote_parse(argc, argv, 0, &a)) return 1;
  if (remote_open("stats", &a)) return 1;
  size_t n = remote_count(), answered = 0;
  lct_server_stats sum;
  memset(&sum, 0, sizeof sum);
  char *texts = NULL; /* every endpoint's Prometheus text, one after the other: the summary adds them up */
  size_t texts_len = 0;
  int status = 0;
  for (size_t i = 0; i < n; i++) {
    lct_client *c;
    lct_server_stats st;
    char *text;
    int rc;
    if (remote_member("stats", i, NULL, &c)) {
      status = 1;
      continue;
    }
    if ((rc = lct_stats(c, &st, &text)) != 0) {
      status = member_fail("stats", "", i, c, rc);
      continue;
    }
    const char *ep = lct_client_set_endpoint(remote_set, i);
    if (a.prometheus && n > 1) printf("# lctd at %s\n", ep);
    if (a.prometheus) fputs(text, stdout);
    else if (n > 1) stats_line(ep, &st);
    size_t len = strlen(text);
    char *grown = realloc(texts, texts_len + len + 2);
    if (grown == NULL) {
      lct_free(text);
      free(texts);
      remote_close();
      return cli_fail("stats: out of memory");
    }
    texts = grown;
    memcpy(texts + texts_len, text, len);
    texts_len += len;
    texts[texts_len++] = '\n';
    texts[texts_len] = '\0';
    lct_free(text);
#define ADD_FIELD(name, what) sum.name += st.name;
    LCT_STATS_FIELDS(ADD_FIELD)
#undef ADD_FIELD
    answered++;
  }
  if (!a.prometheus && answered > 0) {
    if (n > 1) printf("\nall %zu endpoints%s:\n", answered, answered < n ? " that answered" : "");
    cli_stats_summary(stdout, &sum, texts);
  }
  free(texts);
  remote_close();
  return status;
}

int cli_ping(int argc, char **argv) {
  remote_args a;
  if (remote_parse(argc, argv, 0, &a)) return 1;
  if (remote_open("ping", &a)) return 1;
  int status = 0;
  for (size_t i = 0; i < remote_count(); i++) {
    lct_client *c;
    if (remote_member("ping", i, NULL, &c)) {
      status = 1;
      continue;
    }
    lct_server_info info;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = lct_ping(c, &info);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (rc) {
      status = member_fail("ping", "", i, c, rc);
      continue;
    }
    double us = (double)(t1.tv_sec - t0.tv_sec) * 1e6 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e3;
    if (remote_count() > 1) printf("%s: ", lct_client_set_endpoint(remote_set, i));
    printf("%s, backend %s, protocol %d, frame %" PRIu64 " bytes: %.0f us\n", info.server, info.backend,
           info.protocol, info.frame_bytes, us);
  }
  remote_close();
  return status;
}

int cli_save(int argc, char **argv) {
  remote_args a;
  if (remote_parse(argc, argv, 0, &a)) return 1;
  if (remote_open("save", &a)) return 1;
  int status = 0;
  for (size_t i = 0; i < remote_count(); i++) {
    lct_client *c;
    uint64_t written;
    int rc;
    if (remote_member("save", i, NULL, &c)) {
      status = 1;
    } else if ((rc = lct_save(c, &written)) != 0) {
      status = member_fail("save", "", i, c, rc);
    } else {
      if (remote_count() > 1) printf("%s: ", lct_client_set_endpoint(remote_set, i));
      printf("saved: %" PRIu64 " tensors written\n", written);
    }
  }
  remote_close();
  return status;
}
