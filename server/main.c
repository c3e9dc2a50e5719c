/* main.c — lctd: read the configuration, open backend, pool, store and sockets, run the loop until a signal. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "handlers.h"
#include "http.h"
#include "log.h"
#include "server.h"
#include "staging.h"
#include "transport.h"

#ifndef LCT_VERSION
#define LCT_VERSION "0"
#endif

static void lct__usage(FILE *to) {
  fputs("usage: lctd [--config FILE] [--listen ENDPOINT]... [--backend auto|cpu|cuda]\n"
        "            [--memory SIZE] [--device N] [--NAME VALUE]...\n"
        "       lctd --print-config [options]   print the resulting configuration\n"
        "       lctd --version | --help\n\n"
        "Serves put/get of named tensors, kept losslessly compressed, over nanomsg.\n"
        "Every setting below may be given as a flag (--NAME VALUE or --NAME=VALUE) or\n"
        "as a 'NAME VALUE' line in the --config file; flags win over the file.\n\n"
        "settings:\n",
        to);
  lct__config_usage(to);
}

typedef struct lct__main {
  lct__server srv;
  lct__http *http;
  uv_signal_t sigint, sigterm;
} lct__main;

static void lct__on_signal(uv_signal_t *h, int signum) {
  lct__main *m = h->data;
  lct__log_info("signal %d: stopping (in-flight requests finish first)", signum);
  lct__transport_stop(m->srv.transport);
  lct__staging_stop(m->srv.staging);
  if (m->http != NULL)
    lct__http_stop(m->http);
  uv_close((uv_handle_t *)&m->sigint, NULL);
  uv_close((uv_handle_t *)&m->sigterm, NULL);
}

static int lct__open_backend(const lct__config *cfg, int threads, lct__backend *be,
                             const char **name) {
#ifdef LCT_HAVE_CUDA
  if (cfg->backend == LCT__BACKEND_CUDA ||
      (cfg->backend == LCT__BACKEND_AUTO && lct__backend_cuda_present())) {
    int rc = lct__backend_cuda_open(cfg->device, cfg->memory, threads, cfg->segment_size, be);
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
    return LCT_ENODEV;
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

int main(int argc, char **argv) {
  int print_config = 0;
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      lct__usage(stdout);
      return 0;
    }
    if (strcmp(argv[i], "--version") == 0) {
      printf("lctd %s (protocol %d, format %d)\n", LCT_VERSION, LCT_WIRE_VERSION,
             LCT_FORMAT_VERSION);
      return 0;
    }
    if (strcmp(argv[i], "--print-config") == 0) {
      print_config = 1;
      memmove(&argv[i], &argv[i + 1], (size_t)(argc - i) * sizeof *argv);
      argc--;
      i--;
    }
  }

  static lct__main m;
  lct__server *srv = &m.srv;
  char err[512];
  lct__config_init(&srv->cfg);
  if (lct__config_args(&srv->cfg, argc, argv, err, sizeof err) != 0 ||
      lct__config_check(&srv->cfg, err, sizeof err) != 0) {
    fprintf(stderr, "lctd: %s\n", err);
    fprintf(stderr, "lctd: try 'lctd --help'\n");
    return 2;
  }
  if (print_config) {
    lct__config_dump(&srv->cfg, stdout);
    return 0;
  }
  lct__log_set_level(srv->cfg.log_level);
  signal(SIGPIPE, SIG_IGN);

  /* The libuv threadpool is sized once, at its first use. */
  long cpus = uv_available_parallelism();
  int threads = srv->cfg.threads > 0 ? srv->cfg.threads : (int)(cpus > 0 ? cpus : 4);
  srv->threads = threads;
  char nthreads[16];
  snprintf(nthreads, sizeof nthreads, "%d", threads);
  setenv("UV_THREADPOOL_SIZE", nthreads, 1);

  lct__backend be;
  int rc = lct__open_backend(&srv->cfg, srv->threads, &be, &srv->backend_name);
  if (rc == 0 && (rc = lct__pool_create(&be, &srv->pool)) != 0)
    be.ops->destroy(be.ctx);
  if (rc != 0) {
    fprintf(stderr, "lctd: backend: %s\n", lct_strerror(rc));
    return 1;
  }
  srv->loop = uv_default_loop();
  if ((rc = lct__store_create(&srv->stats, &srv->store)) != 0 ||
      (rc = lct__staging_create(srv, &srv->staging)) != 0) {
    fprintf(stderr, "lctd: %s\n", lct_strerror(rc));
    return 1;
  }
  if ((rc = lct__transport_open(srv->loop, srv->cfg.listen, srv->cfg.n_listen,
                                lct_wire_msg_max(srv->cfg.frame_size), lct__handle_message, srv,
                                &srv->transport, err, sizeof err)) != 0) {
    fprintf(stderr, "lctd: %s\n", err);
    return 1;
  }
  if (*srv->cfg.http != '\0' && lct__http_open(srv, srv->cfg.http, &m.http, err, sizeof err) != 0) {
    fprintf(stderr, "lctd: %s\n", err);
    return 1;
  }
  m.sigint.data = m.sigterm.data = &m;
  uv_signal_init(srv->loop, &m.sigint);
  uv_signal_init(srv->loop, &m.sigterm);
  uv_signal_start(&m.sigint, lct__on_signal, SIGINT);
  uv_signal_start(&m.sigterm, lct__on_signal, SIGTERM);

  char pool[32], frame[32];
  lct__human(lct__pool_capacity(srv->pool), pool, sizeof pool);
  lct__human(srv->cfg.frame_size, frame, sizeof frame);
  lct__log_info("lctd %s: backend %s, pool %s, frame %s, %d codec threads", LCT_VERSION,
                srv->backend_name, pool, frame, srv->threads);
  for (int i = 0; i < srv->cfg.n_listen; i++)
    lct__log_info("listening on %s", srv->cfg.listen[i]);
  if (m.http != NULL)
    lct__log_info("stats on http://%s/metrics", srv->cfg.http);

  uv_run(srv->loop, UV_RUN_DEFAULT);

  lct__transport_free(srv->transport);
  lct__staging_destroy(srv->staging);
  lct__store_destroy(srv->store);
  lct__pool_destroy(srv->pool);
  uv_loop_close(srv->loop);
  lct__config_free(&srv->cfg);
  lct__log_info("stopped");
  return 0;
}
