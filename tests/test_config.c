/* test_config.c — lctd's settings table: defaults, value parsers, bounds, config file and flags. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "config.h"
#include "test_util.h"
#include "lct_error.h"

Test(config, defaults) {
  lct__config c;
  lct__config_init(&c);
  cr_assert_eq(c.n_listen, 2);
  cr_assert_str_eq(c.listen[0], "ipc:///tmp/lctd.sock");
  cr_assert_str_eq(c.listen[1], "tcp://127.0.0.1:7878");
  cr_assert_eq(c.backend, LCT__BACKEND_AUTO);
  cr_assert_eq(c.memory, 0);
  cr_assert_eq(c.frame_size, 16u << 20);
  cr_assert_eq(c.segment_size, 1u << 20);
  cr_assert_eq(c.put_timeout_ms, 30000);
  cr_assert_eq(c.log_level, LCT__LOG_INFO);
  char err[256];
  cr_assert_eq(lct__config_check(&c, err, sizeof err), 0);
  lct__config_free(&c);
}

Test(config, sizes) {
  uint64_t v;
  cr_assert_eq(lct__parse_size("512M", &v), 0);
  cr_assert_eq(v, 512ull << 20);
  cr_assert_eq(lct__parse_size("40G", &v), 0);
  cr_assert_eq(v, 40ull << 30);
  cr_assert_eq(lct__parse_size("64k", &v), 0);
  cr_assert_eq(v, 64ull << 10);
  cr_assert_eq(lct__parse_size("2TiB", &v), 0);
  cr_assert_eq(v, 2ull << 40);
  cr_assert_eq(lct__parse_size("1048576", &v), 0);
  cr_assert_eq(v, 1048576);
  cr_assert_eq(lct__parse_size("12MB", &v), 0);
  cr_assert_eq(v, 12ull << 20);
  const char *bad[] = {"", "M", "-1", "1.5G", "12Q", "99999999999999999999", "16777216T", " 5"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
    cr_assert_neq(lct__parse_size(bad[i], &v), 0, "'%s' accepted", bad[i]);
}

Test(config, durations) {
  uint64_t v;
  cr_assert_eq(lct__parse_ms("250", &v), 0);
  cr_assert_eq(v, 250);
  cr_assert_eq(lct__parse_ms("250ms", &v), 0);
  cr_assert_eq(v, 250);
  cr_assert_eq(lct__parse_ms("30s", &v), 0);
  cr_assert_eq(v, 30000);
  cr_assert_eq(lct__parse_ms("5m", &v), 0);
  cr_assert_eq(v, 300000);
  cr_assert_eq(lct__parse_ms("2h", &v), 0);
  cr_assert_eq(v, 7200000);
  cr_assert_neq(lct__parse_ms("5d", &v), 0);
  cr_assert_neq(lct__parse_ms("s", &v), 0);
}

Test(config, set_and_bounds) {
  lct__config c;
  lct__config_init(&c);
  char err[256];
  cr_assert_eq(lct__config_set(&c, "memory", "512M", 2, err, sizeof err), 0);
  cr_assert_eq(c.memory, 512ull << 20);
  cr_assert_eq(lct__config_set(&c, "backend", "cpu", 2, err, sizeof err), 0);
  cr_assert_eq(c.backend, LCT__BACKEND_CPU);
  cr_assert_eq(lct__config_set(&c, "backend", "tpu", 2, err, sizeof err), LCT_ECONFIG);
  cr_assert(strstr(err, "backend") && strstr(err, "tpu"), "%s", err);
  cr_assert_eq(lct__config_set(&c, "device", "256", 2, err, sizeof err), LCT_ECONFIG);
  cr_assert(strstr(err, "device: '256' is not allowed: expected an integer from 0 to 255"), "%s", err);
  cr_assert_eq(lct__config_set(&c, "device", "255", 2, err, sizeof err), 0);
  cr_assert_eq(lct__config_set(&c, "frame-size", "1K", 2, err, sizeof err), LCT_ECONFIG, "below the minimum");
  cr_assert_eq(lct__config_set(&c, "frame-size", "2G", 2, err, sizeof err), LCT_ECONFIG, "above int range");
  cr_assert_eq(lct__config_set(&c, "frame-size", "64K", 2, err, sizeof err), 0);
  cr_assert_eq(lct__config_set(&c, "no-such", "1", 2, err, sizeof err), LCT_ECONFIG);
  cr_assert(strstr(err, "unknown setting"), "%s", err);
  cr_assert_eq(lct__config_set(&c, "segment-size", "100K", 2, err, sizeof err), 0);
  cr_assert_eq(lct__config_check(&c, err, sizeof err), LCT_ECONFIG, "segment not a multiple of 64K");
  cr_assert_eq(lct__config_set(&c, "segment-size", "128K", 2, err, sizeof err), 0);
  cr_assert_eq(lct__config_check(&c, err, sizeof err), 0);
  lct__config_set(&c, "memory", "4K", 2, err, sizeof err);
  cr_assert_eq(lct__config_check(&c, err, sizeof err), LCT_ECONFIG, "tiny pool");
  lct__config_free(&c);
}

Test(config, save_interval) {
  lct__config c;
  lct__config_init(&c);
  char err[256];
  cr_assert_eq(c.save_interval_ms, 60000, "periodic saves by default wherever persist_dir is set");
  cr_assert_eq(lct__config_set(&c, "save_interval", "500ms", 2, err, sizeof err), 0);
  cr_assert_eq(lct__config_check(&c, err, sizeof err), LCT_ECONFIG, "saves back to back");
  cr_assert(strstr(err, "save_interval: '500ms' is not allowed: expected 0 (off) or at least 1s"), "%s", err);
  cr_assert_eq(lct__config_set(&c, "save_interval", "0", 2, err, sizeof err), 0);
  cr_assert_eq(lct__config_check(&c, err, sizeof err), 0);
  cr_assert_eq(lct__config_set(&c, "save-interval", "1s", 2, err, sizeof err), 0);
  cr_assert_eq(c.save_interval_ms, 1000);
  cr_assert_eq(lct__config_check(&c, err, sizeof err), 0);
  lct__config_free(&c);
}

static const char *write_tmp(const char *text) { return test_write_tmp("config", text, strlen(text)); }

Test(config, file_and_flags) {
  const char *path = write_tmp("# lctd test\n"
                         "memory 1G   # pool\n"
                         "\n"
                         "listen ipc:///tmp/a.sock\n"
                         "listen tcp://0.0.0.0:9000\n"
                         "put-timeout 2s\n");
  lct__config c;
  lct__config_init(&c);
  char err[256];
  char *argv[] = {"lctd", "--memory", "2G", "--config", (char *)path, "--threads=3", NULL};
  cr_assert_eq(lct__config_args(&c, 6, argv, err, sizeof err), 0, "%s", err);
  cr_assert_eq(c.memory, 2ull << 30, "flags win over the file");
  cr_assert_eq(c.threads, 3);
  cr_assert_eq(c.put_timeout_ms, 2000);
  cr_assert_eq(c.n_listen, 2, "the file's list replaced the defaults");
  cr_assert_str_eq(c.listen[0], "ipc:///tmp/a.sock");
  cr_assert_str_eq(c.listen[1], "tcp://0.0.0.0:9000");
  lct__config_free(&c);

  lct__config_init(&c);
  char *argv2[] = {"lctd", "--config", (char *)path, "--listen", "ipc:///tmp/b.sock", NULL};
  cr_assert_eq(lct__config_args(&c, 5, argv2, err, sizeof err), 0, "%s", err);
  cr_assert_eq(c.n_listen, 1, "a flag's list replaced the file's");
  cr_assert_str_eq(c.listen[0], "ipc:///tmp/b.sock");
  lct__config_free(&c);
  unlink(path);
}

/* One configuration for one lctd per GPU: port_offset shifts the tcp ports and metrics, once. */
Test(config, port_offset) {
  const char *path = write_tmp("listen ipc:///run/lct/lctd.sock\n"
                               "listen tcp://0.0.0.0:7878\n"
                               "listen tcp://[::1]:7000\n"
                               "metrics 127.0.0.1:9878\n");
  lct__config c;
  lct__config_init(&c);
  char err[256];
  char *argv[] = {"lctd", "--config", (char *)path, "--port-offset", "3", NULL};
  cr_assert_eq(lct__config_args(&c, 5, argv, err, sizeof err), 0, "%s", err);
  cr_assert_str_eq(c.listen[0], "ipc:///run/lct/lctd.sock", "ipc endpoints keep their path");
  cr_assert_str_eq(c.listen[1], "tcp://0.0.0.0:7881");
  cr_assert_str_eq(c.listen[2], "tcp://[::1]:7003");
  cr_assert_str_eq(c.metrics, "127.0.0.1:9881");
  cr_assert_eq(c.port_offset, 0, "applied once: the printed configuration makes the same ports");
  cr_assert_eq(lct__config_check(&c, err, sizeof err), 0, "%s", err);
  lct__config_free(&c);

  lct__config_init(&c);
  char *past[] = {"lctd", "--listen", "tcp://127.0.0.1:65535", "--port-offset", "1", NULL};
  cr_assert_eq(lct__config_args(&c, 5, past, err, sizeof err), LCT_ECONFIG);
  cr_assert(strstr(err, "65534") != NULL, "%s", err);
  lct__config_free(&c);
  unlink(path);
}

Test(config, file_errors) {
  lct__config c;
  char err[256];
  const char *path = write_tmp("memory 1G\nframe-size\n");
  lct__config_init(&c);
  cr_assert_eq(lct__config_load(&c, path, err, sizeof err), LCT_ECONFIG);
  cr_assert(strstr(err, ":2:"), "line number in '%s'", err);
  lct__config_free(&c);

  path = write_tmp("memory lots\n");
  lct__config_init(&c);
  cr_assert_eq(lct__config_load(&c, path, err, sizeof err), LCT_ECONFIG);
  cr_assert(strstr(err, ":1:") && strstr(err, "memory"), "%s", err);
  lct__config_free(&c);
  unlink(path);

  lct__config_init(&c);
  cr_assert_eq(lct__config_load(&c, "/nonexistent/lctd.conf", err, sizeof err), LCT_ECONFIG);
  char *argv[] = {"lctd", "--memory", NULL};
  cr_assert_eq(lct__config_args(&c, 2, argv, err, sizeof err), LCT_ECONFIG, "flag without value");
  char *argv2[] = {"lctd", "stray", NULL};
  cr_assert_eq(lct__config_args(&c, 2, argv2, err, sizeof err), LCT_ECONFIG);
  lct__config_free(&c);
}

Test(config, listen_limit) {
  lct__config c;
  lct__config_init(&c);
  char err[256], ep[64];
  for (int i = 0; i < LCT__LISTEN_MAX; i++) {
    snprintf(ep, sizeof ep, "ipc:///tmp/l%d.sock", i);
    cr_assert_eq(lct__config_set(&c, "listen", ep, 2, err, sizeof err), 0);
  }
  cr_assert_eq(lct__config_set(&c, "listen", "ipc:///tmp/one-more.sock", 2, err, sizeof err), LCT_ECONFIG);
  cr_assert_eq(c.n_listen, LCT__LISTEN_MAX);
  lct__config_free(&c);
}

Test(config, names_and_errors) {
  lct__config c;
  lct__config_init(&c);
  char err[256];
  cr_assert_eq(lct__config_set(&c, "frame_size", "1M", 1, err, sizeof err), 0, "file spelling");
  cr_assert_eq(lct__config_set(&c, "frame-size", "2M", 2, err, sizeof err), 0, "flag spelling");
  cr_assert_eq(c.frame_size, 2u << 20);
  cr_assert_str_eq(c.metrics, "", "the stats endpoint is off unless configured");
  cr_assert_eq(c.ipc_mode, 0660);
  struct {
    const char *name, *value, *want;
  } bad[] = {
      {"log_level", "loud", "log_level: 'loud' is not allowed: expected one of error, warn, info, debug"},
      {"metrics", "localhost:80", "metrics: 'localhost:80' is not allowed: expected off, or HOST:PORT"},
      {"ipc_mode", "8", "ipc_mode: '8' is not allowed: expected octal permission bits"},
      {"max_key_length", "0", "max_key_length: '0' is not allowed: expected an integer from 1 to 1024"},
      {"listen", "udp://x", "listen: 'udp://x' is not allowed: expected tcp://HOST:PORT or ipc:///PATH"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    cr_assert_eq(lct__config_set(&c, bad[i].name, bad[i].value, 2, err, sizeof err), LCT_ECONFIG);
    cr_assert(strstr(err, bad[i].want) && !strchr(err, '\n'), "'%s'", err);
  }
  cr_assert_eq(lct__config_set(&c, "metrics", "[::1]:9878", 2, err, sizeof err), 0, "%s", err);
  cr_assert_eq(lct__config_set(&c, "metrics", "off", 2, err, sizeof err), 0);
  cr_assert_str_eq(c.metrics, "");
  lct__config_free(&c);
}

Test(config, reload_takes_reloadable_settings_only) {
  lct__config cur, fresh;
  lct__config_init(&cur);
  lct__config_init(&fresh);
  char err[256];
  cr_assert_eq(lct__config_set(&fresh, "log_level", "debug", 1, err, sizeof err), 0);
  cr_assert_eq(lct__config_set(&fresh, "auth_token_file", "/etc/lct/token", 1, err, sizeof err), 0);
  cr_assert_eq(lct__config_set(&fresh, "frame_size", "1M", 1, err, sizeof err), 0);
  cr_assert_eq(lct__config_reload(&cur, &fresh), 2);
  cr_assert_eq(cur.log_level, LCT__LOG_DEBUG);
  cr_assert_str_eq(cur.auth_token_file, "/etc/lct/token");
  cr_assert_eq(cur.frame_size, 16u << 20, "frame_size needs a restart");
  cr_assert_eq(lct__config_reload(&cur, &fresh), 0, "nothing left to take");
  lct__config_free(&cur);
  lct__config_free(&fresh);
}

Test(config, example_lists_every_setting) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  lct__config_example(f);
  fclose(f);
  const char *keys[] = {"listen", "backend", "memory", "frame_size", "metrics", "auth_token_file",
                        "ipc_mode", "ipc_group", "max_key_length", "max_tensor_size", "drain_timeout"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    char line[64];
    snprintf(line, sizeof line, "\n%s", keys[i]);
    char commented[64];
    snprintf(commented, sizeof commented, "\n# %s", keys[i]);
    cr_assert(strstr(buf, line) || strstr(buf, commented), "%s missing", keys[i]);
  }
  cr_assert(strstr(buf, "\nmetrics 127.0.0.1:9878\n"), "the service turns the stats endpoint on, on loopback");
  free(buf);
}
