/* main.c — lctd: read the configuration, open backend, pool, store and sockets, run the loop until a signal. */
#include <errno.h>
#include <grp.h>
#include <inttypes.h>
#include <signal.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>
#include <uv.h>

#include "conns.h"
#ifdef LCT_FAULT_INJECTION
#include "fault_inject.h"
#endif
#include "health.h"
#include "http.h"
#include "inflight.h"
#include "log.h"
#include "notify.h"
#include "persist.h"
#include "request.h"
#include "server.h"
#include "staging.h"
#include "transport.h"
#include "workers.h"

#ifndef LCT_VERSION
#define LCT_VERSION "0"
#endif

#define LCT__STOP_MARGIN_S 60 /* asked of a service manager past drain_timeout when a stop begins */

static void lct__usage(FILE *to) {
  fputs("usage: lctd [--config FILE] [--listen ENDPOINT]... [--backend auto|cpu|cuda]\n"
        "            [--memory SIZE] [--device N] [--NAME VALUE]...\n"
        "       lctd --print-config [options]   print the resulting configuration\n"
        "       lctd --example-config            print the commented example (deploy/lctd.conf)\n"
        "       lctd --version | --help\n\n"
        "Serves put/get of named tensors, kept losslessly compressed, over nanomsg.\n"
        "Every setting below may be given as a flag (--NAME VALUE or --NAME=VALUE) or\n"
        "as a 'name value' line in the --config file (file keys spell '-' as '_');\n"
        "flags win over the file.\n\n"
        "signals: SIGTERM or SIGINT stop serving, answer the requests in flight (at most\n"
        "drain_timeout) and exit 0; SIGHUP re-reads the file and flags and applies the\n"
        "settings marked 'reloaded on SIGHUP', logging each change.\n\n"
        "settings:\n",
        to);
  lct__config_usage(to);
}

typedef struct lct__main {
  lct__server srv;
  lct__http *http;
  int argc;
  char **argv;
  uv_signal_t sigint, sigterm, sighup;
  int stopping; /* a stop signal came: a SIGHUP now is ignored, not fatal */
  uv_timer_t drain;
  uv_timer_t ipc_sweep;
} lct__main;

/* Unmaps the client allocations idle for ipc_idle, so that what a trainer frees goes back to the GPU. */
static void lct__ipc_sweep(uv_timer_t *t) {
  lct__server *srv = t->data;
  const lct__backend *be = lct__pool_backend(srv->pool);
  srv->stats.ipc_mapped = be->ops->ipc_trim(be->ctx, srv->cfg.ipc_idle_ms);
}

static void lct__drain_expired(uv_timer_t *t) {
  lct__main *m = t->data;
  lct__server *srv = &m->srv;
  lct__log_warn("drain_timeout: %" PRIu64 " requests still in flight; exiting without their replies",
                srv->stats.in_flight);
  /* A save being written would collide with the final one: it ends first
   * (the final save, too, takes as long as the disk does), and what it wrote
   * is not written again. Its SAVE requests go unanswered, as the others. */
  lct__save_abandon(srv);
  if (lct__health_fault(srv->health) != NULL)
    _exit(LCT__EXIT_DEVICE_LOST); /* no final save from a device that cannot be trusted */
  lct__persist_result r;
  if (*srv->cfg.persist_dir != '\0' && lct__persist_save(srv, &r) != 0)
    _exit(1);
  _exit(0);
}

static void lct__on_signal(uv_signal_t *h, int signum) {
  lct__main *m = h->data;
  lct__notify("STOPPING=1");
  lct__notify_changing(1);
  /* The drain may take drain_timeout; the shutdown save then extends the stop as it writes. */
  lct__notify_extend((unsigned)(m->srv.cfg.drain_timeout_ms / 1000) + LCT__STOP_MARGIN_S);
  lct__log_info("signal %d: stopping; %" PRIu64 " requests in flight are answered first", signum,
                m->srv.stats.in_flight);
  lct__transport_stop(m->srv.transport);
  lct__staging_stop(m->srv.staging);
  if (m->http != NULL)
    lct__http_stop(m->http);
  uv_close((uv_handle_t *)&m->sigint, NULL);
  uv_close((uv_handle_t *)&m->sigterm, NULL);
  /* SIGHUP keeps its handler (a closed one falls back to the default action, which kills): the loop
   * ends without waiting for it. */
  m->stopping = 1;
  uv_unref((uv_handle_t *)&m->sighup);
  uv_close((uv_handle_t *)&m->ipc_sweep, NULL);
  lct__autosave_close(&m->srv);
  /* The timer bounds the drain without keeping the loop alive by itself. */
  uv_timer_start(&m->drain, lct__drain_expired, m->srv.cfg.drain_timeout_ms, 0);
  uv_unref((uv_handle_t *)&m->drain);
}

/* Reads the credentials cfg names: auth_token_file's token and the access
 * file's tenants. 0, or LCT_ECONFIG with why in err. */
static int lct__load_credentials(const lct__config *cfg, lct__auth *auth, lct__access **access, char *err,
                                 size_t errlen) {
  int rc = lct__auth_load(cfg->auth_token_file, auth, err, errlen);
  if (rc == 0)
    rc = lct__access_load(cfg->access_file, auth->token, auth->len, access, err, errlen);
  return rc;
}

/* Puts credentials read anew in place. When they changed, every connection
 * authenticates again: a revoked token loses its connections at once. */
static void lct__apply_credentials(lct__server *srv, const lct__auth *auth, lct__access *access) {
  int token_changed = auth->len != srv->auth.len || memcmp(auth->token, srv->auth.token, auth->len) != 0;
  int access_changed = !lct__access_equal(access, srv->access);
  if (token_changed) {
    lct__log_info("reload: auth token replaced");
    srv->auth = *auth;
  }
  if (access_changed) {
    lct__access_adopt(access, srv->access, srv->store);
    lct__access_unref(srv->access);
    srv->access = access;
    lct__log_info("reload: access_file: %zu tenants%s", access != NULL ? access->n : 0,
                  access != NULL && access->ipc ? ", ipc endpoints authenticate" : "");
  } else {
    lct__access_unref(access);
  }
  if (token_changed || access_changed)
    lct__conns_clear(srv->conns);
}

/* SIGHUP: reads the configuration again and applies its reloadable settings;
 * an invalid one (an unreadable or malformed token or access file included)
 * changes nothing. */
static void lct__on_reload(uv_signal_t *h, int signum) {
  lct__main *m = h->data;
  lct__server *srv = &m->srv;
  (void)signum;
  if (m->stopping) {
    lct__log_warn("SIGHUP while stopping: no reload; the stop goes on");
    return;
  }
  lct__notify("RELOADING=1");
  lct__config fresh;
  lct__auth auth;
  lct__access *access = NULL;
  char err[512];
  lct__config_init(&fresh);
  if (lct__config_args(&fresh, m->argc, m->argv, err, sizeof err) != 0 ||
      lct__config_check(&fresh, err, sizeof err) != 0 ||
      lct__load_credentials(&fresh, &auth, &access, err, sizeof err) != 0) {
    lct__log_error("reload refused, running configuration kept: %s", err);
    srv->stats.reload_failures++;
  } else {
    /* The more verbose of the two levels while the changes are logged. */
    lct__log_set_level(fresh.log_level > srv->cfg.log_level ? fresh.log_level : srv->cfg.log_level);
    int n = lct__config_reload(&srv->cfg, &fresh);
    lct__autosave_update(srv);
    lct__apply_credentials(srv, &auth, access);
    srv->stats.reloads++;
    lct__log_info("reload: done (%d settings changed)", n);
    lct__log_set_level(srv->cfg.log_level);
  }
  sodium_memzero(&auth, sizeof auth);
  lct__config_free(&fresh);
  lct__notify("READY=1");
}

static int lct__open_backend(const lct__config *cfg, int workers, lct__backend *be,
                             const char **name) {
#ifdef LCT_HAVE_CUDA
  if (cfg->backend == LCT__BACKEND_CUDA ||
      (cfg->backend == LCT__BACKEND_AUTO && lct__backend_cuda_present())) {
    int rc = lct__backend_cuda_open(cfg->device, cfg->memory, cfg->memory_slack, workers, cfg->segment_size,
                                    cfg->host_staging == LCT__STAGING_PINNED, be);
    if (rc == 0) {
      *name = "cuda";
      return 0;
    }
    if (cfg->backend == LCT__BACKEND_CUDA)
      return rc;
    lct__log_warn("backend auto: cuda unavailable (%s); using cpu", lct_strerror(rc));
  }
#else
  if (cfg->backend == LCT__BACKEND_CUDA) {
    lct__log_error("backend cuda: this lctd was built without CUDA (LCT_CUDA=OFF)");
    return LCT_ECONFIG; /* a restart cannot mend it */
  }
#endif
  *name = "cpu";
  return lct__backend_cpu_open(cfg->memory, be);
}

static void lct__human(uint64_t v, char *buf, size_t len) {
  const char *units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double x = (double)v;
  int u = 0;
  while (x >= 1024 && u < 4) {
    x /= 1024;
    u++;
  }
  snprintf(buf, len, "%.1f %s", x, units[u]);
}

/* The flags that print and exit: their exit status, or -1 to go on. Drops
 * --print-config from argv (*print_config set) so the settings parse without it. */
static int lct__informational_flags(int *argc, char **argv, int *print_config) {
  for (int i = 1; i < *argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      lct__usage(stdout);
      return 0;
    }
    if (strcmp(argv[i], "--version") == 0) {
      printf("lctd %s (protocol %d, format %d)\n", LCT_VERSION, LCT_WIRE_VERSION, LCT_FORMAT_VERSION);
      return 0;
    }
    if (strcmp(argv[i], "--example-config") == 0) {
      lct__config_example(stdout);
      return 0;
    }
    if (strcmp(argv[i], "--print-config") == 0) {
      *print_config = 1;
      memmove(&argv[i], &argv[i + 1], (size_t)(*argc - i) * sizeof *argv);
      (*argc)--;
      i--;
    }
  }
  return -1;
}

/* This run's instance id: random, so that a client tells a restarted lctd
 * from the one it spoke to, and never 0, which clients read as none. */
static int lct__draw_instance(uint64_t *id) {
  *id = 0;
  while (*id == 0) {
    ssize_t n = getrandom(id, sizeof *id, 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n != (ssize_t)sizeof *id) {
      fprintf(stderr, "lctd: getrandom: %s\n", n < 0 ? strerror(errno) : "short read");
      return LCT_EIO;
    }
  }
  return 0;
}

/* Backend, pool, codec workers, store, staging and the snapshot restore:
 * everything before the sockets. Prints why on failure. */
static int lct__open_state(lct__server *srv, char *err, size_t errlen) {
  if (lct__draw_instance(&srv->instance) != 0)
    return LCT_EIO;
  long cpus = uv_available_parallelism();
  srv->threads = srv->cfg.threads > 0 ? srv->cfg.threads : (int)(cpus > 0 ? cpus : 4);
  lct__backend be;
  int rc = lct__open_backend(&srv->cfg, srv->threads, &be, &srv->backend_name);
#ifdef LCT_FAULT_INJECTION
  if (rc == 0)
    lct__fault_inject(&be); /* lctd-faults only: tests make the device fail */
#endif
  if (rc == 0 && (rc = lct__pool_create(&be, &srv->pool)) != 0)
    be.ops->destroy(be.ctx);
  if (rc != 0) {
    fprintf(stderr, "lctd: backend: %s\n", lct_strerror(rc));
    return rc;
  }
  if (lct_wire_boot_id(srv->boot_id) != 0) {
    memset(srv->boot_id, 0, sizeof srv->boot_id);
    lct__log_warn("cannot read this host's boot id: device puts and gets will take the host path");
  }
  srv->loop = uv_default_loop();
  if ((rc = lct__workers_start(srv->loop, srv->threads, &srv->workers)) != 0 ||
      (rc = lct__store_create(&srv->stats, &srv->store)) != 0 ||
      (rc = lct__staging_create(srv, &srv->staging)) != 0 ||
      (rc = lct__inflight_create(srv, &srv->inflight)) != 0 ||
      (rc = lct__conns_create(LCT__CONNS_MAX, LCT__CHALLENGES_MAX, &srv->conns)) != 0 ||
      (rc = lct__health_start(srv, &srv->health)) != 0) {
    fprintf(stderr, "lctd: %s\n", lct_strerror(rc));
    return rc;
  }
  lct__store_observe(srv->store, lct__access_count, srv); /* restored tensors count for their tenants too */
  if (*srv->cfg.persist_dir != '\0' && (rc = lct__persist_load(srv, err, errlen)) != 0) {
    fprintf(stderr, "lctd: %s\n", err);
    return rc;
  }
  return 0;
}

/* The nanomsg endpoints, the metrics endpoint and the signals. */
static int lct__open_endpoints(lct__main *m, char *err, size_t errlen) {
  lct__server *srv = &m->srv;
  gid_t gid = (gid_t)-1;
  if (*srv->cfg.ipc_group != '\0') {
    const struct group *g = getgrnam(srv->cfg.ipc_group);
    gid = g != NULL ? g->gr_gid : gid; /* lct__config_check found it */
  }
  int rc = lct__transport_open(srv->loop, srv->cfg.listen, srv->cfg.n_listen, lct_wire_msg_max(srv->cfg.frame_size),
                               srv->cfg.ipc_mode, gid, lct__handle_message, srv, &srv->transport, err, errlen);
  if (rc == 0 && *srv->cfg.metrics != '\0')
    rc = lct__http_open(srv, srv->cfg.metrics, &m->http, err, errlen);
  if (rc != 0) {
    fprintf(stderr, "lctd: %s\n", err);
    return rc;
  }
  m->sigint.data = m->sigterm.data = m->sighup.data = m->drain.data = m;
  uv_signal_init(srv->loop, &m->sigint);
  uv_signal_init(srv->loop, &m->sigterm);
  uv_signal_init(srv->loop, &m->sighup);
  uv_timer_init(srv->loop, &m->drain);
  uv_signal_start(&m->sigint, lct__on_signal, SIGINT);
  uv_signal_start(&m->sigterm, lct__on_signal, SIGTERM);
  uv_signal_start(&m->sighup, lct__on_reload, SIGHUP);
  uv_timer_init(srv->loop, &m->ipc_sweep);
  m->ipc_sweep.data = srv;
  if (lct__pool_backend(srv->pool)->ops->ipc_trim != NULL) {
    uint64_t period = srv->cfg.ipc_idle_ms / 4 > 1000 ? 1000 : srv->cfg.ipc_idle_ms / 4;
    uv_timer_start(&m->ipc_sweep, lct__ipc_sweep, period, period);
    uv_unref((uv_handle_t *)&m->ipc_sweep); /* the sockets, not the sweep, keep the loop alive */
  }
  return 0;
}

static void lct__announce(const lct__main *m) {
  const lct__server *srv = &m->srv;
  char pool[32], frame[32];
  lct__human(lct__pool_capacity(srv->pool), pool, sizeof pool);
  lct__human(srv->cfg.frame_size, frame, sizeof frame);
  lct__log_info("lctd %s: instance %016" PRIx64 ", backend %s, pool %s, frame %s, %d codec workers", LCT_VERSION,
                srv->instance, srv->backend_name, pool, frame, srv->threads);
  for (int i = 0; i < srv->cfg.n_listen; i++)
    lct__log_info("listening on %s", srv->cfg.listen[i]);
  if (m->http != NULL)
    lct__log_info("stats on http://%s/metrics", srv->cfg.metrics);
  if (srv->auth.len > 0)
    lct__log_info("tcp endpoints authenticate: the token of %s gives every key", srv->cfg.auth_token_file);
  if (srv->access != NULL)
    lct__log_info("tcp%s endpoints authenticate: %zu tenants of %s", srv->access->ipc ? " and ipc" : "",
                  srv->access->n, srv->cfg.access_file);
  if (srv->cfg.request_memory / 2 < (uint64_t)lct_wire_msg_max(srv->cfg.frame_size))
    lct__log_warn("request_memory %" PRIu64 " holds fewer than two messages of frame_size + 1M: while one that "
                  "large is in flight, no other request is read", srv->cfg.request_memory);
  /* Every endpoint is bound and the pool reserved: ready for a service manager. */
  lct__notify_changing(0);
  int rc = lct__notify("READY=1");
  if (rc < 0)
    lct__log_warn("cannot notify $NOTIFY_SOCKET of readiness: %s", lct_strerror(rc));
}

/* After the loop: the final save, then everything in reverse. The exit
 * status: LCT__EXIT_DEVICE_LOST, and no save, when the device was lost. */
static int lct__close(lct__main *m) {
  lct__server *srv = &m->srv;
  int lost = lct__health_fault(srv->health) != NULL;
  lct__health_stop(srv->health);
  uv_close((uv_handle_t *)&m->drain, NULL);
  uv_run(srv->loop, UV_RUN_NOWAIT);
  lct__workers_stop(srv->workers);
  int status = lost ? LCT__EXIT_DEVICE_LOST : 0;
  if (*srv->cfg.persist_dir != '\0' && !lost) {
    lct__persist_result r;
    status = lct__persist_save(srv, &r) == 0 ? 0 : 1;
    lct__log_info("persist: %" PRIu64 " tensors written to %s (%" PRIu64 " bytes), %" PRIu64 " removed%s",
                  r.written, srv->cfg.persist_dir, r.written_bytes, r.removed,
                  status ? "; some could not be written" : "");
  }
  lct__transport_free(srv->transport);
  srv->transport = NULL;
  lct__inflight_destroy(srv->inflight);
  lct__staging_destroy(srv->staging);
  lct__store_destroy(srv->store);
  lct__conns_destroy(srv->conns);
  lct__access_unref(srv->access);
  lct__pool_destroy(srv->pool);
  /* The SIGHUP handle stays to the end (a closed one restores the default action, which kills), so the loop
   * is not closed: the process ends next. */
  lct__config_free(&srv->cfg);
  lct__log_info("stopped");
  return status;
}

int main(int argc, char **argv) {
  int print_config = 0;
  int rc = lct__informational_flags(&argc, argv, &print_config);
  if (rc >= 0)
    return rc;
  static lct__main m;
  lct__server *srv = &m.srv;
  char err[512];
  lct__config_init(&srv->cfg);
  m.argc = argc;
  m.argv = argv;
  if (lct__config_args(&srv->cfg, argc, argv, err, sizeof err) != 0 ||
      lct__config_check(&srv->cfg, err, sizeof err) != 0 ||
      lct__load_credentials(&srv->cfg, &srv->auth, &srv->access, err, sizeof err) != 0) {
    fprintf(stderr, "lctd: configuration: %s (see lctd --help)\n", err);
    lct__config_free(&srv->cfg);
    return 2;
  }
  if (print_config) {
    lct__config_dump(&srv->cfg, stdout);
    return 0;
  }
  lct__log_set_level(srv->cfg.log_level);
  signal(SIGPIPE, SIG_IGN);
  if (lct_auth_init() != 0) {
    fprintf(stderr, "lctd: libsodium cannot start\n");
    return 1;
  }
  lct__notify_changing(1); /* the restore extends the start as it reads */
  /* Exit 2 where a restart cannot mend it (RestartPreventExitStatus=2), as for a configuration error. */
  if ((rc = lct__open_state(srv, err, sizeof err)) != 0 || (rc = lct__open_endpoints(&m, err, sizeof err)) != 0)
    return rc == LCT_ECONFIG ? 2 : 1;
  if (*srv->cfg.persist_dir != '\0' && lct__autosave_open(srv) != 0) {
    fprintf(stderr, "lctd: out of memory\n");
    return 1;
  }
  lct__announce(&m);
  uv_run(srv->loop, UV_RUN_DEFAULT);
  return lct__close(&m);
}
