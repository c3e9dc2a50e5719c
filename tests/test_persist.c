/* test_persist.c — persist_dir against a real lctd (cpu backend): foreign entries left alone, periodic saves across SIGKILL, codebooks across restarts, old snapshot files. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>

#include "lctd_harness.h"
#include "test_util.h"

static test_lctd daemon_;
static char tmp_[64];     /* this test's scratch directory */
static char state_[96];   /* its persist_dir */
static char outside_[96]; /* a file outside persist_dir that lctd must never write */

#define OUTSIDE_TEXT "bytes lctd must not touch\n"
#define FOREIGN_NAME "0123456789abcdef0123456789abcdef.lct" /* a snapshot name no key of these tests has */

static int remove_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw) { return remove(path); }

static void setup(void) {
  snprintf(tmp_, sizeof tmp_, "/tmp/lct-persist-XXXXXX");
  cr_assert(mkdtemp(tmp_) != NULL);
  snprintf(state_, sizeof state_, "%s/state", tmp_);
  snprintf(outside_, sizeof outside_, "%s/outside", tmp_);
  cr_assert_eq(mkdir(state_, 0750), 0);
  FILE *f = fopen(outside_, "w");
  cr_assert(f != NULL);
  fputs(OUTSIDE_TEXT, f);
  fclose(f);
}

static void teardown(void) {
  if (daemon_.pid > 0) {
    kill(daemon_.pid, SIGKILL);
    waitpid(daemon_.pid, NULL, 0);
  }
  nftw(tmp_, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* lctd on state_ with extra flags (NULL-terminated, up to 8). */
static void start(const char *const *extra) {
  const char *argv[16] = {"--persist-dir", state_};
  int n = 2;
  for (int i = 0; extra && extra[i] && n < 15; i++) argv[n++] = extra[i];
  argv[n] = NULL;
  test_lctd_start(&daemon_, argv);
}

static void crash(void) {
  cr_assert_eq(kill(daemon_.pid, SIGKILL), 0);
  cr_assert_eq(waitpid(daemon_.pid, NULL, 0), daemon_.pid);
  daemon_.pid = 0;
}

static void get_missing(lct_client *c, const char *key) {
  void *got;
  cr_assert_eq(lct_get_alloc(c, key, &got, NULL), LCT_ENOENT, "%s should not be stored", key);
}

static void save_ok(lct_client *c) {
  uint64_t written;
  int rc = lct_save(c, &written);
  cr_assert_eq(rc, 0, "save: %s: %s", lct_strerror(rc), lct_last_error(c));
}

static uint64_t skipped(lct_client *c) { return test_metric(c, "lct_snapshot_skipped_files "); }

/* The mode of state_/name, not following a symbolic link (0 if absent). */
static mode_t kind_of(const char *name) {
  char path[256];
  struct stat sb;
  snprintf(path, sizeof path, "%s/%s", state_, name);
  return lstat(path, &sb) == 0 ? sb.st_mode & S_IFMT : 0;
}

/* Reads a whole file; *len its size. */
static uint8_t *slurp(const char *path, size_t *len) {
  FILE *f = fopen(path, "rb");
  cr_assert(f != NULL, "cannot open %s", path);
  uint8_t *buf = NULL;
  size_t n = 0, cap = 0;
  for (;;) {
    if (n == cap) buf = realloc(buf, cap = cap ? 2 * cap : 4096);
    size_t got = fread(buf + n, 1, cap - n, f);
    if (got == 0) break;
    n += got;
  }
  fclose(f);
  *len = n;
  return buf;
}

static void assert_outside_untouched(void) {
  size_t len;
  uint8_t *b = slurp(outside_, &len);
  cr_assert(len == strlen(OUTSIDE_TEXT) && memcmp(b, OUTSIDE_TEXT, len) == 0, "the file outside persist_dir changed");
  free(b);
}

/* The name of the one snapshot file in state_ that is a regular file. */
static void the_snapshot(char name[64]) {
  DIR *d = opendir(state_);
  cr_assert(d != NULL);
  int n = 0;
  for (struct dirent *de; (de = readdir(d)) != NULL;) {
    size_t len = strlen(de->d_name);
    if (len == 36 && strcmp(de->d_name + 32, ".lct") == 0 && kind_of(de->d_name) == S_IFREG) {
      snprintf(name, 64, "%s", de->d_name);
      n++;
    }
  }
  closedir(d);
  cr_assert_eq(n, 1, "%d snapshot files in %s", n, state_);
}

/* Puts, gets, saves and restarts around whatever foreign entry the test
 * placed: the daemon serves and persists as usual. */
static void serves_and_persists(uint64_t skipped_files) {
  lct_client *c = test_connect(daemon_.ipc);
  cr_assert_eq(skipped(c), skipped_files);
  size_t n = 50000;
  uint8_t *a = test_bf16_data(7, n);
  test_put_ok(c, "a", LCT_DTYPE_BF16, a, n * 2, NULL);
  test_get_equals(c, "a", a, n * 2);
  save_ok(c);
  lct_close(c);
  test_lctd_stop(&daemon_);
  start(NULL);
  c = test_connect(daemon_.ipc);
  test_get_equals(c, "a", a, n * 2);
  cr_assert_eq(skipped(c), skipped_files);
  lct_close(c);
  test_lctd_stop(&daemon_);
  free(a);
}

/* ---- entries of persist_dir that are not regular files ------------------------ */

Test(persist, fifo_is_skipped_not_opened, .init = setup, .fini = teardown) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", state_, FOREIGN_NAME);
  cr_assert_eq(mkfifo(path, 0640), 0);
  start(NULL); /* opening the FIFO to read it would block the start for good */
  serves_and_persists(1);
  cr_assert_eq(kind_of(FOREIGN_NAME), S_IFIFO, "the FIFO is left in place");
}

Test(persist, symlink_is_not_followed, .init = setup, .fini = teardown) {
  /* A valid snapshot file of key "secret", moved outside persist_dir and linked back in. */
  start(NULL);
  lct_client *c = test_connect(daemon_.ipc);
  test_put_ok(c, "secret", LCT_DTYPE_RAW, "restored through a link", 23, NULL);
  lct_close(c);
  test_lctd_stop(&daemon_);
  char name[64], path[256];
  the_snapshot(name);
  snprintf(path, sizeof path, "%s/%s", state_, name);
  cr_assert_eq(rename(path, outside_), 0);
  cr_assert_eq(symlink(outside_, path), 0);
  size_t want_len;
  uint8_t *want = slurp(outside_, &want_len);

  start(NULL);
  c = test_connect(daemon_.ipc);
  get_missing(c, "secret");
  lct_close(c);
  serves_and_persists(1);
  cr_assert_eq(kind_of(name), S_IFLNK, "the link is left in place");

  start(NULL); /* a save of the key whose name the link holds replaces the link, not its target */
  c = test_connect(daemon_.ipc);
  test_put_ok(c, "secret", LCT_DTYPE_RAW, "stored in persist_dir", 21, NULL);
  save_ok(c);
  lct_close(c);
  test_lctd_stop(&daemon_);
  cr_assert_eq(kind_of(name), S_IFREG);
  size_t len;
  uint8_t *now = slurp(outside_, &len);
  cr_assert(len == want_len && memcmp(now, want, len) == 0, "the link's target changed");
  free(want);
  free(now);
}

Test(persist, symlink_at_temporary_name_is_not_followed, .init = setup, .fini = teardown) {
  start(NULL);
  lct_client *c = test_connect(daemon_.ipc);
  test_put_ok(c, "k", LCT_DTYPE_RAW, "version one", 11, NULL);
  save_ok(c);
  char name[64], tmp[256];
  the_snapshot(name);
  snprintf(tmp, sizeof tmp, "%s/.%s.tmp", state_, name);
  cr_assert_eq(symlink(outside_, tmp), 0); /* where the next save of "k" writes first */
  test_put_ok(c, "k", LCT_DTYPE_RAW, "version two", 11, NULL);
  save_ok(c);
  lct_close(c);
  assert_outside_untouched();
  cr_assert_eq(kind_of(name), S_IFREG, "the snapshot is a file of its own");
  test_lctd_stop(&daemon_);
  start(NULL);
  c = test_connect(daemon_.ipc);
  test_get_equals(c, "k", "version two", 11);
  lct_close(c);
  test_lctd_stop(&daemon_);
  assert_outside_untouched();
}

Test(persist, directory_is_left_alone, .init = setup, .fini = teardown) {
  char path[256];
  snprintf(path, sizeof path, "%s/%s", state_, FOREIGN_NAME);
  cr_assert_eq(mkdir(path, 0750), 0);
  snprintf(path, sizeof path, "%s/%s/inside", state_, FOREIGN_NAME);
  FILE *f = fopen(path, "w");
  cr_assert(f != NULL);
  fclose(f);
  start(NULL);
  serves_and_persists(1);
  cr_assert_eq(kind_of(FOREIGN_NAME), S_IFDIR, "the directory keeps its name");
  cr_assert_eq(access(path, F_OK), 0, "and its contents");
}

/* ---- periodic saves ---------------------------------------------------------- */

Test(persist, save_interval_bounds_what_sigkill_loses, .init = setup, .fini = teardown) {
  const char *extra[] = {"--save-interval", "1s", NULL};
  start(extra);
  lct_client *c = test_connect(daemon_.ipc);
  size_t n = 300000;
  uint8_t *a = test_bf16_data(1, n), *b = test_bf16_data(2, n), *b2 = test_bf16_data(3, n);
  test_put_ok(c, "a", LCT_DTYPE_BF16, a, n * 2, NULL);
  test_put_ok(c, "b", LCT_DTYPE_BF16, b, n * 2, NULL);
  test_put_ok(c, "gone", LCT_DTYPE_RAW, "deleted later", 13, NULL);
  test_sleep_ms(2500); /* one interval, a save, and margin */
  test_put_ok(c, "b", LCT_DTYPE_BF16, b2, n * 2, NULL); /* the next save writes only what changed */
  test_put_ok(c, "c", LCT_DTYPE_RAW, "new", 3, NULL);
  cr_assert_eq(lct_delete(c, "gone"), 0);
  lct_tensor_info before;
  cr_assert_eq(lct_stat(c, "b", &before), 0);
  test_sleep_ms(2500);
  lct_close(c);
  crash();

  start(extra);
  c = test_connect(daemon_.ipc);
  test_get_equals(c, "a", a, n * 2);
  test_get_equals(c, "b", b2, n * 2);
  test_get_equals(c, "c", "new", 3);
  get_missing(c, "gone");
  lct_tensor_info after;
  cr_assert_eq(lct_stat(c, "b", &after), 0);
  cr_assert_eq(after.version, before.version);
  cr_assert_eq(after.checksum, before.checksum);
  lct_close(c);
  test_lctd_stop(&daemon_);
  free(a);
  free(b);
  free(b2);
}

Test(persist, save_interval_reloads_on_sighup, .init = setup, .fini = teardown) {
  char conf[256];
  snprintf(conf, sizeof conf, "%s/lctd.conf", tmp_);
  FILE *f = fopen(conf, "w");
  cr_assert(f != NULL);
  fputs("save_interval 0\n", f); /* off: only stops and SAVE write */
  fclose(f);
  const char *extra[] = {"--config", conf, NULL};
  start(extra);
  lct_client *c = test_connect(daemon_.ipc);
  test_put_ok(c, "lost", LCT_DTYPE_RAW, "never saved", 11, NULL);
  test_sleep_ms(1500);
  lct_close(c);
  crash();

  start(extra);
  c = test_connect(daemon_.ipc);
  get_missing(c, "lost");
  test_put_ok(c, "kept", LCT_DTYPE_RAW, "saved by the timer", 18, NULL);
  f = fopen(conf, "w");
  cr_assert(f != NULL);
  fputs("save_interval 1s\n", f);
  fclose(f);
  cr_assert_eq(kill(daemon_.pid, SIGHUP), 0);
  test_sleep_ms(2500);
  lct_close(c);
  crash();

  start(extra);
  c = test_connect(daemon_.ipc);
  test_get_equals(c, "kept", "saved by the timer", 18);
  lct_close(c);
  test_lctd_stop(&daemon_);
}

/* ---- codebooks ------------------------------------------------------------------ */

/* The bytes of a snapshot file after its header and key: codebook, segment
 * table and blobs (the trailing CRC covers the header, which holds the version). */
static uint8_t *coded_part(const char *name, size_t key_len, size_t *len) {
  char path[256];
  size_t n;
  snprintf(path, sizeof path, "%s/%s", state_, name);
  uint8_t *b = slurp(path, &n);
  cr_assert_gt(n, 112 + key_len + 4);
  *len = n - 112 - key_len - 4;
  memmove(b, b + 112 + key_len, *len);
  return b;
}

Test(persist, codebook_survives_restart, .init = setup, .fini = teardown) {
  start(NULL);
  lct_client *c = test_connect(daemon_.ipc);
  size_t n = 600000;
  uint8_t *a = test_bf16_data(11, n);
  lct_tensor_info first, again;
  test_put_ok(c, "m", LCT_DTYPE_BF16, a, n * 2, &first);
  cr_assert_eq(test_stats(c).codebook_builds, 1);
  lct_close(c);
  test_lctd_stop(&daemon_);
  char name[64];
  the_snapshot(name);
  size_t len1, len2;
  uint8_t *coded1 = coded_part(name, 1, &len1);

  start(NULL);
  c = test_connect(daemon_.ipc);
  test_put_ok(c, "m", LCT_DTYPE_BF16, a, n * 2, &again);
  lct_server_stats st = test_stats(c);
  cr_assert_eq(st.codebook_builds, 0, "the restored codebook is reused");
  cr_assert_eq(st.codebook_rebuilds, 0);
  cr_assert_eq(again.stored_bytes, first.stored_bytes);
  cr_assert_eq(again.checksum, first.checksum);
  cr_assert_gt(again.version, first.version);
  test_get_equals(c, "m", a, n * 2);
  save_ok(c);
  lct_close(c);
  test_lctd_stop(&daemon_);
  uint8_t *coded2 = coded_part(name, 1, &len2);
  cr_assert(len1 == len2 && memcmp(coded1, coded2, len1) == 0, "the same codebook codes the same bytes");
  free(coded1);
  free(coded2);
  free(a);
}

Test(persist, stale_codebook_survives_restart, .init = setup, .fini = teardown) {
  start(NULL);
  lct_client *c = test_connect(daemon_.ipc);
  size_t n = 200000;
  uint8_t *a = test_bf16_data(1, n), *b = test_bf16_data(2, n);
  test_put_ok(c, "m", LCT_DTYPE_BF16, a, n * 2, NULL);
  uint16_t *s = (uint16_t *)b; /* every exponent shifted: the codebook drifts */
  for (size_t i = 0; i < n; i++) s[i] = (uint16_t)(s[i] - (0x40 << 7));
  lct_tensor_info drifted, refit;
  test_put_ok(c, "m", LCT_DTYPE_BF16, b, n * 2, &drifted);
  lct_close(c);
  test_lctd_stop(&daemon_);

  start(NULL);
  c = test_connect(daemon_.ipc);
  test_put_ok(c, "m", LCT_DTYPE_BF16, b, n * 2, NULL); /* counts its symbols: the codebook was stale */
  lct_server_stats st = test_stats(c);
  cr_assert_eq(st.codebook_builds, 0);
  cr_assert_eq(st.codebook_rebuilds, 1, "the restored stale mark rebuilt the codebook");
  test_put_ok(c, "m", LCT_DTYPE_BF16, b, n * 2, &refit);
  cr_assert_lt(refit.stored_bytes, drifted.stored_bytes);
  test_get_equals(c, "m", b, n * 2);
  lct_close(c);
  test_lctd_stop(&daemon_);
  free(a);
  free(b);
}

/* tests/data/snapshot_v1: key "fixture/v1", bf16 [64, 128], saved by an lctd of
 * snapshot format 1 (no codebook); its values follow this formula. */
#define V1_NAME "fa6e93dc999fb7f615921690fc848553.lct"
static void v1_values(uint16_t v[8192]) {
  for (unsigned i = 0; i < 8192; i++)
    v[i] = (uint16_t)((i % 3 == 0) << 15 | (0x78 + (i * 7) % 6) << 7 | ((i * 37 + (i >> 3)) & 0x7f));
}

Test(persist, format_1_file_loads, .init = setup, .fini = teardown) {
  char from[512], to[256];
  snprintf(from, sizeof from, "%s/snapshot_v1/%s", test_data_dir(), V1_NAME);
  snprintf(to, sizeof to, "%s/%s", state_, V1_NAME);
  size_t len;
  uint8_t *file = slurp(from, &len);
  FILE *f = fopen(to, "wb");
  cr_assert(f != NULL && fwrite(file, 1, len, f) == len);
  fclose(f);
  free(file);
  uint16_t v[8192];
  v1_values(v);

  start(NULL);
  lct_client *c = test_connect(daemon_.ipc);
  cr_assert_eq(skipped(c), 0);
  test_get_equals(c, "fixture/v1", v, sizeof v);
  lct_tensor_info info;
  cr_assert_eq(lct_stat(c, "fixture/v1", &info), 0);
  cr_assert_eq(info.dtype, LCT_DTYPE_BF16);
  cr_assert(info.ndim == 2 && info.shape[0] == 64 && info.shape[1] == 128);
  uint64_t shape[2] = {64, 128};
  cr_assert_eq(lct_put(c, "fixture/v1", LCT_DTYPE_BF16, shape, 2, v, sizeof v, NULL), 0);
  cr_assert_eq(test_stats(c).codebook_builds, 1, "a format 1 file holds no codebook");
  lct_close(c);
  test_lctd_stop(&daemon_);
  file = slurp(to, &len);
  cr_assert(len > 8 && file[4] == 2, "saved again in format 2");
  free(file);

  start(NULL);
  c = test_connect(daemon_.ipc);
  cr_assert_eq(lct_put(c, "fixture/v1", LCT_DTYPE_BF16, shape, 2, v, sizeof v, NULL), 0);
  cr_assert_eq(test_stats(c).codebook_builds, 0);
  lct_close(c);
  test_lctd_stop(&daemon_);
}
