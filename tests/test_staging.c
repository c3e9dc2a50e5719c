/* test_staging.c — chunked puts before commit: budgets, take/release accounting, idle expiry on the loop. */
#include <criterion/criterion.h>
#include <nanomsg/nn.h>
#include <string.h>

#include "staging.h"

static lct__server srv;
static uv_loop_t loop;

static void setup(void) {
  memset(&srv, 0, sizeof srv);
  cr_assert_eq(uv_loop_init(&loop), 0);
  srv.loop = &loop;
  lct__config_init(&srv.cfg);
  srv.cfg.staging_memory = 1000;
  srv.cfg.max_pending_puts = 3;
  srv.cfg.put_timeout_ms = 50;
  cr_assert_eq(lct__staging_create(&srv, &srv.staging), 0);
}

static void teardown(void) {
  lct__staging_stop(srv.staging);
  uv_run(&loop, UV_RUN_DEFAULT);
  lct__staging_destroy(srv.staging);
  cr_assert_eq(srv.stats.staging_bytes, 0);
  cr_assert_eq(srv.stats.pending_puts, 0);
  cr_assert_eq(uv_loop_close(&loop), 0);
  lct__config_free(&srv.cfg);
}

static lct_put_decl decl(uint64_t bytes) {
  lct_put_decl d;
  memset(&d, 0, sizeof d);
  d.dtype = LCT_DTYPE_RAW;
  d.ndim = 1;
  d.shape[0] = d.n_elems = d.raw_bytes = bytes;
  return d;
}

TestSuite(staging, .init = setup, .fini = teardown);

Test(staging, budgets) {
  lct_put_decl d600 = decl(600), d500 = decl(500), d400 = decl(400), d0 = decl(0);
  lct__pending *a, *b, *c, *e;
  cr_assert_eq(lct__staging_begin(srv.staging, 7, (const uint8_t *)"a", 1, &d600, &a), 0);
  cr_assert_eq(srv.stats.staging_bytes, 600);
  cr_assert_eq(lct__staging_begin(srv.staging, 7, (const uint8_t *)"b", 1, &d500, &b), LCT_ENOMEM, "over the byte budget");
  cr_assert_eq(lct__staging_begin(srv.staging, 7, (const uint8_t *)"b", 1, &d400, &b), 0);
  cr_assert_eq(lct__staging_begin(srv.staging, 7, (const uint8_t *)"c", 1, &d0, &c), 0);
  cr_assert_eq(lct__staging_begin(srv.staging, 7, (const uint8_t *)"e", 1, &d0, &e), LCT_ENOMEM, "over the count");
  cr_assert_eq(srv.stats.pending_puts, 3);
  cr_assert_neq(a->id, b->id);
  cr_assert_eq(lct__staging_find(srv.staging, b->id, 7), b);
  cr_assert_null(lct__staging_find(srv.staging, 0, 7), "0 is never an id");
  cr_assert_null(lct__staging_find(srv.staging, c->id + 1000, 7));
  cr_assert_null(lct__staging_find(srv.staging, b->id, 8), "another connection's put is not found");

  /* Commit path: taken puts are unreachable but still hold their bytes. */
  lct__staging_take(srv.staging, a);
  cr_assert_null(lct__staging_find(srv.staging, a->id, 7));
  cr_assert_eq(srv.stats.pending_puts, 2);
  cr_assert_eq(srv.stats.staging_bytes, 1000);
  lct__staging_release(srv.staging, a);
  cr_assert_eq(srv.stats.staging_bytes, 400);
  cr_assert_eq(lct__staging_begin(srv.staging, 7, (const uint8_t *)"e", 1, &d0, &e), 0);
}

Test(staging, message_framing_counts) {
  /* A chunk's message is kept whole: its bytes beyond the payload count, so
   * that small chunks with large headers cannot hold more than the budget. */
  lct_put_decl d = decl(600);
  lct__pending *p;
  cr_assert_eq(lct__staging_begin(srv.staging, 7, (const uint8_t *)"a", 1, &d, &p), 0);
  void *m1 = nn_allocmsg(300, 0), *m2 = nn_allocmsg(500, 0);
  cr_assert_eq(lct__staging_add(srv.staging, p, m1, 300, (const uint8_t *)m1 + 200, 100, 0, 100), 0);
  cr_assert_eq(srv.stats.staging_bytes, 800, "600 declared and 200 of framing");
  cr_assert_eq(lct__staging_add(srv.staging, p, m2, 500, (const uint8_t *)m2 + 300, 200, 100, 200), LCT_ENOMEM,
               "300 more of framing exceed the budget of 1000");
  nn_freemsg(m2); /* refused: the caller keeps it */
  cr_assert_eq(srv.stats.staging_bytes, 800);
  cr_assert_eq(p->received, 100);
  lct__staging_take(srv.staging, p);
  lct__staging_release(srv.staging, p);
}

static void stop_loop(uv_timer_t *t) { uv_stop(t->loop); }

Test(staging, idle_puts_expire) {
  lct_put_decl d = decl(100);
  lct__pending *idle, *busy;
  cr_assert_eq(lct__staging_begin(srv.staging, 7, (const uint8_t *)"idle", 4, &d, &idle), 0);
  cr_assert_eq(lct__staging_begin(srv.staging, 7, (const uint8_t *)"busy", 4, &d, &busy), 0);
  uint64_t busy_id = busy->id, idle_id = idle->id;
  uv_timer_t t;
  uv_timer_init(&loop, &t);
  /* Keep "busy" active for 150 ms (3 timeouts) while "idle" sits. */
  for (int i = 0; i < 15; i++) {
    uv_timer_start(&t, stop_loop, 10, 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    lct__pending *p = lct__staging_find(srv.staging, busy_id, 7);
    cr_assert_not_null(p, "an active put does not expire (round %d)", i);
    lct__staging_touch(srv.staging, p);
  }
  cr_assert_null(lct__staging_find(srv.staging, idle_id, 7), "the idle put expired");
  cr_assert_eq(srv.stats.puts_expired, 1);
  cr_assert_eq(srv.stats.pending_puts, 1);
  cr_assert_eq(srv.stats.staging_bytes, 100, "its memory was reclaimed");
  uv_close((uv_handle_t *)&t, NULL);
  uv_run(&loop, UV_RUN_DEFAULT); /* finishes the close while t is in scope */
}
