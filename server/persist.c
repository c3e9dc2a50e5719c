/* persist.c — snapshots in persist_dir: one file per tensor, written atomically, restored at start. */
#include "persist.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "lct_checksum.h"
#include "log.h"
#include "notify.h"
#include "snapshot_file.h"

#define LCT__SNAP_SUFFIX ".lct"
#define LCT__SNAP_NAME 36 /* 32 hex digits and the suffix */
#define LCT__SNAP_IO (4u << 20) /* bytes a save copies out of the pool per write */
#define LCT__PROGRESS_S 60 /* what a service manager waits past the last write of a save, or file of a restore */

/* The key's file name: two 64-bit FNV-1a hashes (different offset bases) in hex. */
static void lct__snap_name(const uint8_t *key, size_t len, char name[LCT__SNAP_NAME + 1]) {
  uint64_t a = lct__key_hash(key, len, LCT__FNV_BASIS), b = lct__key_hash(key, len, UINT64_C(0x84222325cbf29ce4));
  snprintf(name, LCT__SNAP_NAME + 1, "%016" PRIx64 "%016" PRIx64 LCT__SNAP_SUFFIX, a, b);
}

static int lct__is_snap_name(const char *name) {
  if (strlen(name) != LCT__SNAP_NAME || strcmp(name + 32, LCT__SNAP_SUFFIX) != 0)
    return 0;
  return strspn(name, "0123456789abcdef") == 32;
}

/* What a directory entry is, for a log line, when it is not a regular file. */
static const char *lct__file_kind(mode_t mode) {
  switch (mode & S_IFMT) {
  case S_IFLNK:
    return "a symbolic link";
  case S_IFDIR:
    return "a directory";
  case S_IFIFO:
    return "a FIFO";
  case S_IFSOCK:
    return "a socket";
  case S_IFCHR:
  case S_IFBLK:
    return "a device";
  default:
    return "not a regular file";
  }
}

/* Opens dir/name for reading when it is a regular file: never through a
 * symbolic link (whose target may lie outside persist_dir), never a FIFO or
 * device (whose open may block or act). Returns the descriptor (sb filled),
 * or -1 with *kind naming any other kind of entry, or -1, *kind NULL and
 * errno when the entry cannot be read. */
static int lct__open_regular(int dir, const char *name, struct stat *sb, const char **kind) {
  *kind = NULL;
  if (fstatat(dir, name, sb, AT_SYMLINK_NOFOLLOW) != 0)
    return -1;
  if (!S_ISREG(sb->st_mode)) {
    *kind = lct__file_kind(sb->st_mode);
    return -1;
  }
  /* The entry may have been replaced since: the flags and a second look hold anyway. */
  int fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ELOOP)
      *kind = lct__file_kind(S_IFLNK);
    return -1;
  }
  int rc = fstat(fd, sb), saved = errno;
  if (rc == 0 && S_ISREG(sb->st_mode))
    return fd;
  if (rc == 0)
    *kind = lct__file_kind(sb->st_mode);
  close(fd);
  errno = saved;
  return -1;
}

static int lct__write_all(int fd, const void *p, size_t len, uint32_t *crc) {
  *crc = lct_crc32c(*crc, p, len);
  for (const uint8_t *b = p; len > 0;) {
    ssize_t n = write(fd, b, len);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return -1;
    b += n;
    len -= (size_t)n;
    lct__notify_progress(LCT__PROGRESS_S); /* a shutdown save outlasts no stop timeout while it writes */
  }
  return 0;
}

/* ---- save ----------------------------------------------------------------- */

struct lct__snapshot {
  const lct__backend *be;
  char *dir_path;    /* persist_dir as the save began (logs) */
  int dir;           /* persist_dir, open */
  uint8_t *buf;      /* host staging for blobs of a device backend */
  lct__entry **entries; /* per stored key as the save began: its entry if not on disk yet (referenced), else NULL */
  uint8_t *written;  /* per entry: written by this save (durable once synced) */
  int synced;        /* the directory was fsynced after the renames */
  char (*names)[LCT__SNAP_NAME + 1]; /* per entry: its file name */
  size_t n, cap;
  int rc;            /* LCT_EIO until written, and when a file or the directory failed */
  lct__persist_result r;
};

/* Writes one entry to a temporary file and renames it into place. The
 * temporary file is created afresh, so that whatever stands at its name (a
 * save's leftover, a symbolic link) is replaced rather than written through. */
static int lct__save_entry(lct__snapshot *sv, const lct__entry *e, const char *name) {
  char tmp[LCT__SNAP_NAME + 8];
  snprintf(tmp, sizeof tmp, ".%s.tmp", name);
  if (unlinkat(sv->dir, tmp, 0) != 0 && errno != ENOENT)
    return -1;
  int fd = openat(sv->dir, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0640);
  if (fd < 0)
    return -1;
  uint8_t head[LCT__SNAPSHOT_HEAD_MAX];
  size_t head_bytes = lct__snapshot_head(e, head);
  uint32_t crc = 0;
  uint64_t bytes = head_bytes + 4;
  int rc = lct__write_all(fd, head, head_bytes, &crc);
  for (size_t i = 0; rc == 0 && i < e->n_segments; i++) {
    uint8_t row[LCT__SNAPSHOT_ROW];
    lct__snapshot_row_write(&e->segments[i], row);
    rc = lct__write_all(fd, row, sizeof row, &crc);
    bytes += sizeof row + e->segments[i].blob_bytes;
  }
  for (size_t i = 0; rc == 0 && i < e->n_segments; i++) {
    const lct__segment *sg = &e->segments[i];
    for (size_t off = 0; rc == 0 && off < sg->blob_bytes; off += LCT__SNAP_IO) {
      size_t n = sg->blob_bytes - off < LCT__SNAP_IO ? sg->blob_bytes - off : LCT__SNAP_IO;
      rc = sv->be->ops->read(sv->be->ctx, (const uint8_t *)sg->blob + off, n, sv->buf) != 0 ||
           lct__write_all(fd, sv->buf, n, &crc);
    }
  }
  uint8_t trailer[4] = {(uint8_t)crc, (uint8_t)(crc >> 8), (uint8_t)(crc >> 16), (uint8_t)(crc >> 24)};
  if (rc == 0)
    rc = lct__write_all(fd, trailer, 4, &crc);
  if (rc == 0)
    rc = fsync(fd);
  if (close(fd) != 0)
    rc = -1;
  if (rc == 0)
    rc = renameat(sv->dir, tmp, sv->dir, name);
  if (rc != 0) {
    int saved = errno;
    unlinkat(sv->dir, tmp, 0);
    errno = saved;
    return -1;
  }
  sv->r.written_bytes += bytes;
  return 0;
}

static void lct__snapshot_add(void *arg, lct__entry *e) {
  lct__snapshot *sv = arg;
  if (sv->n == sv->cap)
    return; /* cap is the store's count, taken on this thread just before */
  lct__snap_name(e->key, e->key_len, sv->names[sv->n]);
  sv->entries[sv->n++] = e->persisted ? NULL : e;
  if (!e->persisted)
    lct__entry_ref(e); /* only what the save reads: the rest may leave the pool meanwhile */
}

static void lct__snapshot_free(lct__snapshot *sv) {
  for (size_t i = 0; i < sv->n; i++)
    if (sv->entries[i] != NULL)
      lct__entry_unref(sv->entries[i]);
  if (sv->dir >= 0)
    close(sv->dir);
  free(sv->dir_path);
  free(sv->buf);
  free(sv->entries);
  free(sv->written);
  free(sv->names);
  free(sv);
}

int lct__persist_begin(lct__server *srv, lct__snapshot **out) {
  *out = NULL;
  lct__snapshot *sv = calloc(1, sizeof *sv);
  if (sv == NULL)
    return LCT_ENOMEM;
  sv->dir = -1;
  sv->be = lct__pool_backend(srv->pool);
  sv->cap = lct__store_count(srv->store);
  size_t slots = sv->cap ? sv->cap : 1;
  sv->dir_path = strdup(srv->cfg.persist_dir);
  sv->buf = malloc(LCT__SNAP_IO);
  sv->entries = malloc(slots * sizeof *sv->entries);
  sv->written = calloc(slots, 1);
  sv->names = malloc(slots * sizeof *sv->names);
  if (sv->dir_path == NULL || sv->buf == NULL || sv->entries == NULL || sv->written == NULL || sv->names == NULL) {
    lct__snapshot_free(sv);
    return LCT_ENOMEM;
  }
  lct__store_each(srv->store, lct__snapshot_add, sv);
  sv->rc = LCT_EIO; /* until written: a snapshot ended unwritten counts as a failed save */
  *out = sv;
  return 0;
}

static int lct__name_cmp(const void *a, const void *b) { return strcmp(a, b); }

/* Removes the files of keys deleted before the save began; 0, or -1 when
 * the directory cannot be listed (the files stay until a later save). The
 * names are sorted in place: nothing reads them by entry after the writes. */
static int lct__remove_deleted(lct__snapshot *sv) {
  int dfd = dup(sv->dir);
  DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
  if (d == NULL) {
    if (dfd >= 0)
      close(dfd);
    lct__log_error("persist: cannot list %s: %s", sv->dir_path, strerror(errno));
    return -1;
  }
  qsort(sv->names, sv->n, sizeof *sv->names, lct__name_cmp);
  for (struct dirent *de; (de = readdir(d)) != NULL;) {
    struct stat sb;
    if (lct__is_snap_name(de->d_name) &&
        bsearch(de->d_name, sv->names, sv->n, sizeof *sv->names, lct__name_cmp) == NULL &&
        fstatat(sv->dir, de->d_name, &sb, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(sb.st_mode)) {
      if (unlinkat(sv->dir, de->d_name, 0) == 0)
        sv->r.removed++;
      else
        lct__log_error("persist: cannot remove %s/%s: %s", sv->dir_path, de->d_name, strerror(errno));
    }
  }
  closedir(d);
  return 0;
}

void lct__persist_write(lct__snapshot *sv) {
  sv->dir = open(sv->dir_path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (sv->dir < 0) {
    lct__log_error("persist: cannot save to %s: %s", sv->dir_path, strerror(errno));
    return;
  }
  for (size_t i = 0; i < sv->n; i++) {
    const lct__entry *e = sv->entries[i];
    if (e == NULL)
      continue; /* on disk already */
    if (lct__save_entry(sv, e, sv->names[i]) != 0) {
      lct__log_error("persist: cannot write '%.*s' version %" PRIu64 " to %s/%s: %s",
                     (int)(e->key_len > 64 ? 64 : e->key_len), (const char *)e->key, e->version, sv->dir_path,
                     sv->names[i], strerror(errno));
      sv->r.failed++;
      continue;
    }
    sv->written[i] = 1;
    sv->r.written++;
  }
  int listed = lct__remove_deleted(sv) == 0;
  /* The renames last only once the directory is synced: until then no entry counts as on disk. */
  if (fsync(sv->dir) != 0) {
    lct__log_error("persist: fsync %s: %s", sv->dir_path, strerror(errno));
    return;
  }
  sv->synced = 1;
  sv->rc = sv->r.failed == 0 && listed ? 0 : LCT_EIO;
}

void lct__persist_failed(lct__server *srv) {
  srv->stats.persist_saves++;
  srv->stats.persist_failures++;
}

int lct__persist_end(lct__server *srv, lct__snapshot *sv, lct__persist_result *r) {
  for (size_t i = 0; i < sv->n; i++)
    if (sv->written[i] && sv->synced)
      sv->entries[i]->persisted = 1;
  *r = sv->r;
  int rc = sv->rc;
  lct__stats *st = &srv->stats;
  st->persist_saves++;
  st->persist_written += r->written;
  st->persist_failures += r->failed + (rc != 0 && r->failed == 0);
  lct__snapshot_free(sv);
  return rc;
}

int lct__persist_save(lct__server *srv, lct__persist_result *r) {
  memset(r, 0, sizeof *r);
  lct__snapshot *sv;
  int rc = lct__persist_begin(srv, &sv);
  if (rc != 0) {
    lct__log_error("persist: cannot save to %s: out of memory", srv->cfg.persist_dir);
    lct__persist_failed(srv);
    return LCT_EIO;
  }
  lct__persist_write(sv);
  return lct__persist_end(srv, sv, r);
}

/* ---- load ----------------------------------------------------------------- */

/* Restores one parsed snapshot file into a new entry: LCT_E2BIG (segments
 * above segment_size), the pool's LCT_ENOSPC / LCT_ENOMEM, or LCT_EIO (the
 * copy into the pool failed); why says which. */
static int lct__restore_file(lct__server *srv, const lct__snapshot_file *f, lct__entry **out, const char **why) {
  /* A file whose first (largest) segment exceeds segment_size was saved
   * under a larger one: intact, set aside. */
  if (lct__snapshot_row_read(f, 0).raw_bytes > srv->cfg.segment_size) {
    *why = "segment larger than segment_size (decoders hold one segment at a time)";
    return LCT_E2BIG;
  }
  const lct__backend *be = lct__pool_backend(srv->pool);
  lct__entry *e;
  *why = "out of memory for its entry";
  int rc = lct__entry_new(srv->pool, f->key, f->key_len, f->n_segments, &e);
  if (rc != 0)
    return rc;
  e->dtype = f->decl.dtype;
  e->ndim = f->decl.ndim;
  memcpy(e->shape, f->decl.shape, sizeof e->shape);
  e->n_elems = f->decl.n_elems;
  e->raw_bytes = f->decl.raw_bytes;
  e->version = f->version;
  e->checksum = f->checksum;
  e->persisted = 1;
  if (f->has_codebook) {
    e->has_codebook = 1;
    e->codebook = f->codebook;
    e->codebook_stale = f->codebook_stale;
    e->codebook_id = ++srv->codebook_ids;
  }
  const uint8_t *blob = f->blobs;
  for (uint32_t i = 0; i < f->n_segments; i++) {
    lct__snapshot_row r = lct__snapshot_row_read(f, i);
    lct__segment *sg = &e->segments[i];
    sg->raw_offset = r.raw_offset;
    sg->raw_bytes = r.raw_bytes;
    sg->blob_bytes = (size_t)r.blob_bytes;
    *why = "the pool has no room for it";
    if ((rc = lct__pool_alloc(srv->pool, sg->blob_bytes, &sg->blob)) != 0)
      goto fail;
    sg->alloc_bytes = sg->blob_bytes;
    lct__notify_progress(LCT__PROGRESS_S); /* a file of many segments, too */
    if (be->ops->write(be->ctx, blob, sg->blob_bytes, sg->blob) != 0) {
      rc = LCT_EIO;
      *why = "cannot copy into the pool";
      goto fail;
    }
    blob += sg->blob_bytes;
    e->stored_bytes += sg->blob_bytes;
  }
  *out = e;
  return 0;
fail:
  lct__entry_unref(e);
  return rc;
}

/* Loads one snapshot file, open as fd, of size bytes: LCT_ECORRUPT when its
 * parse fails, else as lct__restore_file. The file is mapped, not read into
 * a buffer its size: its blobs go from the page cache into the pool. */
static int lct__load_file(lct__server *srv, int fd, uint64_t size, lct__entry **out, const char **why) {
  if ((size_t)size != size) {
    *why = "too large to map";
    return LCT_E2BIG;
  }
  void *map = NULL; /* an empty file is not mapped: the parse rejects it unread */
  if (size > 0 && (map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0)) == MAP_FAILED) {
    *why = strerror(errno);
    return LCT_EIO;
  }
  if (map != NULL)
    madvise(map, (size_t)size, MADV_SEQUENTIAL);
  lct__snapshot_file *f = malloc(sizeof *f); /* a codebook: kilobytes */
  int rc = LCT_ENOMEM;
  *why = "out of memory";
  if (f != NULL && (rc = lct__snapshot_parse(map, (size_t)size, f, why)) == 0)
    rc = lct__restore_file(srv, f, out, why);
  free(f);
  if (map != NULL)
    munmap(map, (size_t)size);
  return rc;
}

/* Moves a file that failed to load aside, so that saves never remove it:
 * to name + suffix, or the first of name + suffix + ".1" .. ".15" that is
 * free, so that an older file set aside for the same key stays. Returns 0,
 * or -1 with errno when the file stays at its name. */
static int lct__set_aside(int dir, const char *name, const char *suffix, char to[LCT__SNAP_NAME + 24]) {
  for (int k = 0; k < 16; k++) {
    if (k == 0)
      snprintf(to, LCT__SNAP_NAME + 24, "%s%s", name, suffix);
    else
      snprintf(to, LCT__SNAP_NAME + 24, "%s%s.%d", name, suffix, k);
    struct stat sb;
    if (fstatat(dir, to, &sb, AT_SYMLINK_NOFOLLOW) == 0)
      continue;
    return errno == ENOENT ? renameat(dir, name, dir, to) : -1;
  }
  errno = EEXIST;
  return -1;
}

int lct__persist_load(lct__server *srv, char *err, size_t errlen) {
  const char *path = srv->cfg.persist_dir;
  if (mkdir(path, 0750) != 0 && errno != EEXIST) {
    snprintf(err, errlen, "persist_dir: cannot create %s: %s", path, strerror(errno));
    return LCT_EIO;
  }
  int dir = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int dfd = dir >= 0 ? dup(dir) : -1;
  DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
  if (d == NULL) {
    snprintf(err, errlen, "persist_dir: cannot read %s: %s", path, strerror(errno));
    if (dfd >= 0)
      close(dfd);
    if (dir >= 0)
      close(dir);
    return LCT_EIO;
  }
  uint64_t restored = 0, skipped = 0;
  int rc = 0;
  for (struct dirent *de; (errno = 0, de = readdir(d)) != NULL;) {
    const char *name = de->d_name;
    size_t len = strlen(name);
    int tmp = name[0] == '.' && len > 4 && strcmp(name + len - 4, ".tmp") == 0;
    if (!tmp && !lct__is_snap_name(name))
      continue;
    lct__notify_progress(LCT__PROGRESS_S); /* a long restore outlasts no start timeout while it reads */
    /* Only regular files are lctd's: anything else is left as it is. */
    struct stat sb;
    const char *kind;
    int fd = lct__open_regular(dir, name, &sb, &kind);
    if (fd < 0 && kind != NULL) {
      lct__log_error("persist: %s/%s is %s; skipped and left alone", path, name, kind);
      skipped++;
      continue;
    }
    const char *why = "", *aside = NULL;
    if (fd < 0 && errno == ENOENT) {
      lct__log_warn("persist: %s/%s went away while the restore read the directory; skipped", path, name);
      continue;
    }
    if (fd < 0) {
      why = strerror(errno);
      aside = ".unloaded";
    }
    if (tmp) {
      if (fd >= 0)
        close(fd);
      lct__log_warn("persist: removing %s/%s, left by an interrupted save", path, name);
      unlinkat(dir, name, 0);
      continue;
    }
    const char *what = "cannot be read";
    char because[192];
    if (fd >= 0) {
      lct__entry *e = NULL;
      int lrc = lct__load_file(srv, fd, (uint64_t)sb.st_size, &e, &why);
      close(fd);
      char want[LCT__SNAP_NAME + 1];
      if (lrc == 0) {
        lct__snap_name(e->key, e->key_len, want);
        if (strcmp(want, name) == 0) {
          lct__store_restore(srv->store, e);
          restored++;
          continue;
        }
        lct__entry_unref(e);
        what = "holds another key's tensor", aside = ".corrupt";
      } else if (lrc == LCT_ECORRUPT) {
        what = "is corrupt or partial", aside = ".corrupt";
      } else {
        /* Intact, but not loaded now: the pool is full, the file's segments
         * are larger than segment_size, or the copy into the pool failed. */
        snprintf(because, sizeof because, "%s: %s", lct_strerror(lrc), why);
        what = lrc == LCT_EIO ? "could not be loaded" : "does not fit", aside = ".unloaded", why = because;
      }
    }
    char to[LCT__SNAP_NAME + 24];
    if (lct__set_aside(dir, name, aside, to) == 0) {
      lct__log_error("persist: %s/%s %s (%s); skipped and renamed %s", path, name, what, why, to);
    } else if (errno == ENOENT) {
      lct__log_warn("persist: %s/%s %s (%s) and went away before it could be renamed aside; skipped", path,
                    name, what, why);
    } else {
      /* Left at its name, the next save would remove it as a deleted key's. */
      snprintf(err, errlen, "persist: %s/%s %s (%s) and cannot be renamed aside (%s): move it out of %s",
               path, name, what, why, strerror(errno), path);
      rc = LCT_ECONFIG; /* the operator's to mend: restarting cannot */
      break;
    }
    skipped++;
  }
  if (rc == 0 && errno != 0) {
    /* The files not yet read would look like deleted keys' to the next save. */
    snprintf(err, errlen, "persist_dir: cannot list %s: %s", path, strerror(errno));
    rc = LCT_EIO;
  }
  closedir(d);
  close(dir);
  if (rc != 0)
    return rc;
  srv->stats.persist_restored = restored;
  srv->stats.persist_skipped = skipped;
  lct__log_info("persist: restored %" PRIu64 " tensors from %s%s", restored, path,
                skipped ? " (some files skipped: see above)" : "");
  return 0;
}

/* ---- saves on request: a writer thread of their own, one save at a time ---- */

/* Who asked for a save. */
typedef struct lct__save_waiter {
  lct__save_cb cb;
  void *arg;
} lct__save_waiter;

typedef struct lct__waiters {
  lct__save_waiter *at;
  size_t n;
} lct__waiters;

/* The save being written: its snapshot and those it answers (all that asked
 * before it began, so their tensors are all in it). */
typedef struct lct__save_job {
  uv_thread_t writer;  /* not a codec worker: puts and gets go on */
  int threaded;        /* writer was started (else the save fails unwritten) */
  uv_async_t written;  /* the writer's word to the loop that it is done */
  lct__server *srv;
  lct__snapshot *snap;
  lct__waiters answers;
} lct__save_job;

struct lct__saves {
  lct__save_job *running; /* or NULL */
  lct__waiters next;      /* asked during the running save: the next save's */
};

static void lct__waiters_call(lct__waiters *w, int rc, const lct__persist_result *r) {
  for (size_t i = 0; i < w->n; i++)
    w->at[i].cb(w->at[i].arg, rc, r);
  free(w->at);
  *w = (lct__waiters){0};
}

static void lct__save_start(lct__server *srv, lct__waiters answers);

static void lct__save_write(void *arg) {
  lct__save_job *job = arg;
  lct__persist_write(job->snap);
  uv_async_send(&job->written);
}

/* The save is over (its handle closed): answer it, start the next. */
static void lct__save_end(uv_handle_t *h) {
  lct__save_job *job = h->data;
  lct__server *srv = job->srv;
  lct__persist_result r;
  int rc = lct__persist_end(srv, job->snap, &r);
  /* Periodic saves that find nothing changed stay out of the log. */
  lct__log(rc != 0 || r.written > 0 || r.removed > 0 ? LCT__LOG_INFO : LCT__LOG_DEBUG,
           "save: %" PRIu64 " tensors written (%" PRIu64 " bytes), %" PRIu64 " removed%s", r.written, r.written_bytes,
           r.removed, rc != 0 ? "; some could not be written" : "");
  lct__waiters_call(&job->answers, rc, &r); /* a save asked for meanwhile waits for the next */
  free(job);
  lct__saves *saves = srv->saves;
  lct__waiters next = saves->next;
  saves->running = NULL;
  saves->next = (lct__waiters){0};
  if (next.n > 0)
    lct__save_start(srv, next);
  if (saves->running == NULL) { /* idle: nothing of the saves outlives them */
    free(saves);
    srv->saves = NULL;
  }
}

static void lct__save_written(uv_async_t *a) {
  lct__save_job *job = a->data;
  if (job->threaded)
    uv_thread_join(&job->writer);
  uv_close((uv_handle_t *)&job->written, lct__save_end);
}

static void lct__save_start(lct__server *srv, lct__waiters answers) {
  lct__save_job *job = calloc(1, sizeof *job);
  int rc = job == NULL ? LCT_ENOMEM : lct__persist_begin(srv, &job->snap);
  if (rc != 0) {
    lct__persist_failed(srv);
  } else if (uv_async_init(srv->loop, &job->written, lct__save_written) != 0) {
    lct__persist_result ignored;
    lct__persist_end(srv, job->snap, &ignored); /* unwritten: counted as a failed save */
    rc = LCT_ENOMEM;
  }
  if (rc != 0) {
    lct__persist_result none = {0};
    free(job);
    lct__waiters_call(&answers, rc, &none);
    return;
  }
  job->srv = srv;
  job->answers = answers;
  job->written.data = job;
  srv->saves->running = job;
  job->threaded = uv_thread_create(&job->writer, lct__save_write, job) == 0;
  if (!job->threaded) { /* never on the loop: it would stop serving for the whole write */
    lct__log_error("persist: cannot start a thread for the save; it fails unwritten");
    uv_async_send(&job->written);
  }
}

static int lct__waiters_add(lct__waiters *w, lct__save_cb cb, void *arg) {
  lct__save_waiter *grown = realloc(w->at, (w->n + 1) * sizeof *grown);
  if (grown == NULL)
    return LCT_ENOMEM;
  w->at = grown;
  w->at[w->n++] = (lct__save_waiter){cb, arg};
  return 0;
}

int lct__save_request(lct__server *srv, lct__save_cb cb, void *arg) {
  if (srv->saves == NULL && (srv->saves = calloc(1, sizeof *srv->saves)) == NULL)
    return LCT_ENOMEM;
  if (srv->saves->running != NULL)
    return lct__waiters_add(&srv->saves->next, cb, arg);
  lct__waiters answers = {0};
  int rc = lct__waiters_add(&answers, cb, arg);
  if (rc == 0)
    lct__save_start(srv, answers);
  if (srv->saves->running == NULL) { /* failed before it began (cb told) */
    free(srv->saves);
    srv->saves = NULL;
  }
  return rc;
}

void lct__save_abandon(lct__server *srv) {
  lct__save_job *job = srv->saves != NULL ? srv->saves->running : NULL;
  if (job == NULL)
    return;
  if (job->threaded)
    uv_thread_join(&job->writer);
  lct__persist_result r;
  lct__persist_end(srv, job->snap, &r);
  job->snap = NULL;
  srv->saves->running = NULL; /* the job and its handle go with the process, which exits next */
}

/* ---- periodic saves ----------------------------------------------------------- */

struct lct__autosave {
  uv_timer_t timer;
  uint64_t interval_ms; /* the timer's, to tell a reload's change */
};

/* The save logs its outcome and counts a failure itself. */
static void lct__autosave_done(void *arg, int rc, const lct__persist_result *r) {}

static void lct__autosave_tick(uv_timer_t *t) {
  lct__server *srv = t->data;
  if (srv->saves != NULL)
    return; /* one under way, from SAVE or the last tick, may predate changes: the next tick has them */
  if (lct__save_request(srv, lct__autosave_done, NULL) != 0)
    lct__log_error("persist: cannot start a periodic save: out of memory");
}

int lct__autosave_open(lct__server *srv) {
  lct__autosave *a = calloc(1, sizeof *a);
  if (a == NULL)
    return LCT_ENOMEM;
  uv_timer_init(srv->loop, &a->timer);
  a->timer.data = srv;
  srv->autosave = a;
  lct__autosave_update(srv);
  return 0;
}

void lct__autosave_update(lct__server *srv) {
  lct__autosave *a = srv->autosave;
  uint64_t ms = srv->cfg.save_interval_ms;
  if (a == NULL || ms == a->interval_ms) /* open leaves it 0, the timer stopped */
    return;
  a->interval_ms = ms;
  if (ms == 0) {
    uv_timer_stop(&a->timer);
    lct__log_info("persist: periodic saves off");
    return;
  }
  uv_timer_start(&a->timer, lct__autosave_tick, ms, ms);
  lct__log_info("persist: saving changed tensors to %s every %" PRIu64 " ms", srv->cfg.persist_dir, ms);
}

static void lct__autosave_closed(uv_handle_t *h) { free(h); }

void lct__autosave_close(lct__server *srv) {
  if (srv->autosave == NULL)
    return;
  uv_close((uv_handle_t *)&srv->autosave->timer, lct__autosave_closed); /* the timer is the struct's first member */
  srv->autosave = NULL;
}
