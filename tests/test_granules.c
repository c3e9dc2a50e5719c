/* test_granules.c — the cuda pool's granules on the CPU with a fake mapper: growth, shrink, the slack bound, fragmentation, a full range, failing maps and unmaps. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "granules.h"
#include "lct_error.h"
#include "test_util.h"

#define G (UINT64_C(2) << 20) /* the granule of current GPUs */

/* Records what is mapped, refuses to map twice or unmap what is not, and
 * fails on demand: maps once fail_map granules are mapped, unmaps while fail_unmap. */
typedef struct fake {
  uint8_t mapped[4096];
  uint64_t n_mapped;
  uint64_t map_calls, unmap_calls;
  uint64_t fail_map; /* 0: never */
  int fail_unmap;
} fake;

static int fake_map(void *ctx, uint64_t first, uint64_t count) {
  fake *f = ctx;
  f->map_calls++;
  cr_assert_gt(count, 0);
  if (f->fail_map != 0 && f->n_mapped + count > f->fail_map) return LCT_ENOMEM;
  for (uint64_t g = first; g < first + count; g++) {
    cr_assert_eq(f->mapped[g], 0, "granule %llu mapped twice", (unsigned long long)g);
    f->mapped[g] = 1;
  }
  f->n_mapped += count;
  return 0;
}

static int fake_unmap(void *ctx, uint64_t g) {
  fake *f = ctx;
  f->unmap_calls++;
  if (f->fail_unmap) return LCT_ECUDA;
  cr_assert_eq(f->mapped[g], 1, "granule %llu unmapped but not mapped", (unsigned long long)g);
  f->mapped[g] = 0;
  f->n_mapped--;
  return 0;
}

static void open_granules(lct__granules *gr, fake *f, uint64_t granules, uint64_t slack) {
  memset(f, 0, sizeof *f);
  lct__mapper m = {fake_map, fake_unmap, f};
  cr_assert_eq(lct__granules_init(gr, granules * G, G, slack, &m), 0);
}

/* The tables agree with the fake and with themselves: mapped granules hold
 * live bytes or are the slack, within its bound, and held is within
 * allocated + slack + 2 granules per free range. */
static void check(const lct__granules *gr, const fake *f, uint64_t allocated) {
  uint64_t live_granules = 0, empty = 0, sum = 0;
  for (uint64_t g = 0; g < gr->n; g++) {
    int mapped = (int)(gr->mapped[g / 64] >> (g % 64) & 1), is_empty = (int)(gr->empty[g / 64] >> (g % 64) & 1);
    cr_assert_eq(mapped, f->mapped[g], "granule %llu", (unsigned long long)g);
    cr_assert(gr->live[g] == 0 || mapped, "granule %llu has live bytes and is not mapped", (unsigned long long)g);
    cr_assert_eq(is_empty, mapped && gr->live[g] == 0);
    cr_assert_leq(gr->live[g], G);
    live_granules += gr->live[g] > 0;
    empty += is_empty;
    sum += gr->live[g];
  }
  cr_assert_eq(sum, allocated);
  cr_assert_eq(gr->n_empty, empty);
  cr_assert_eq(gr->n_mapped, live_granules + empty);
  cr_assert_eq(f->n_mapped, gr->n_mapped);
  cr_assert_leq(empty, gr->keep, "the slack is bounded");
  cr_assert_leq(lct__granules_held(gr), allocated + gr->keep * G + 2 * G * gr->free.n);
}

Test(granules, grows_by_granules) {
  lct__granules gr;
  fake f;
  open_granules(&gr, &f, 16, 0);
  cr_assert_eq(lct__granules_held(&gr), 0, "nothing is mapped before a take");
  uint64_t a, b, c;
  cr_assert_eq(lct__granules_take(&gr, 256, &a), 0);
  cr_assert_eq(a, 0);
  cr_assert_eq(lct__granules_held(&gr), G, "one granule for 256 bytes");
  cr_assert_eq(lct__granules_take(&gr, G - 512, &b), 0);
  cr_assert_eq(b, 256);
  cr_assert_eq(lct__granules_held(&gr), G, "still inside the first granule");
  cr_assert_eq(f.map_calls, 1);
  cr_assert_eq(lct__granules_take(&gr, 3 * G, &c), 0);
  cr_assert_eq(c, G - 256);
  cr_assert_eq(lct__granules_held(&gr), 4 * G, "spans granules 0..3: three more mapped");
  cr_assert_eq(f.map_calls, 2, "a run of unmapped granules is one map");
  check(&gr, &f, 4 * G - 256);
  cr_assert_eq(lct__granules_destroy(&gr), 0);
  cr_assert_eq(f.n_mapped, 0, "destroy unmaps everything");
}

Test(granules, shrink_and_free_give_granules_back) {
  lct__granules gr;
  fake f;
  open_granules(&gr, &f, 16, 0);
  uint64_t a, b;
  cr_assert_eq(lct__granules_take(&gr, 6 * G, &a), 0);
  cr_assert_eq(lct__granules_take(&gr, G / 2, &b), 0);
  cr_assert_eq(lct__granules_held(&gr), 7 * G);
  /* An encode's worst case shrunk to its blob: the whole granules of the tail go. */
  cr_assert_eq(lct__granules_give(&gr, a + G + 100, 5 * G - 100), 0);
  check(&gr, &f, G + 100 + G / 2);
  cr_assert_eq(lct__granules_held(&gr), 3 * G, "granules 0, 1 (100 bytes) and 6 (b)");
  cr_assert_eq(lct__granules_give(&gr, b, G / 2), 0);
  cr_assert_eq(lct__granules_held(&gr), 2 * G);
  cr_assert_eq(lct__granules_give(&gr, a, G + 100), 0);
  cr_assert_eq(lct__granules_held(&gr), 0, "no slack: nothing stays mapped");
  check(&gr, &f, 0);
  cr_assert_eq(gr.free.n, 1, "the free ranges merged back to one");
  lct__granules_destroy(&gr);
}

Test(granules, slack_is_kept_up_to_its_bound) {
  lct__granules gr;
  fake f;
  open_granules(&gr, &f, 32, 3 * G + G / 2); /* 3.5 granules: 3 kept */
  cr_assert_eq(gr.keep, 3);
  uint64_t off[10];
  for (int i = 0; i < 10; i++) cr_assert_eq(lct__granules_take(&gr, G, &off[i]), 0);
  cr_assert_eq(lct__granules_held(&gr), 10 * G);
  for (int i = 0; i < 10; i++) {
    cr_assert_eq(lct__granules_give(&gr, off[i], G), 0);
    check(&gr, &f, (uint64_t)(9 - i) * G);
  }
  cr_assert_eq(lct__granules_held(&gr), 3 * G, "three empty granules stay mapped");
  for (uint64_t g = 0; g < 3; g++) cr_assert_eq(f.mapped[g], 1, "the lowest are kept: first fit places there next");
  uint64_t maps = f.map_calls, x;
  cr_assert_eq(lct__granules_take(&gr, 2 * G, &x), 0);
  cr_assert_eq(x, 0);
  cr_assert_eq(f.map_calls, maps, "a take inside the slack maps nothing");
  check(&gr, &f, 2 * G);
  cr_assert_eq(lct__granules_held(&gr), 3 * G);
  lct__granules_destroy(&gr);
}

Test(granules, a_full_range) {
  lct__granules gr;
  fake f;
  open_granules(&gr, &f, 4, G);
  uint64_t a, b, c;
  cr_assert_eq(lct__granules_take(&gr, 3 * G, &a), 0);
  cr_assert_eq(lct__granules_take(&gr, G + 1, &b), LCT_ENOSPC);
  cr_assert_eq(lct__granules_held(&gr), 3 * G, "a refused take maps nothing");
  cr_assert_eq(lct__granules_take(&gr, G, &b), 0, "exactly the rest");
  cr_assert_eq(lct__granules_take(&gr, 1, &c), LCT_ENOSPC);
  check(&gr, &f, 4 * G);
  cr_assert_eq(lct__granules_give(&gr, a + G, G), 0); /* a hole of one granule in the middle */
  cr_assert_eq(lct__granules_take(&gr, 2 * G, &c), LCT_ENOSPC, "two granules free, not together");
  cr_assert_eq(lct__granules_take(&gr, G, &c), 0);
  cr_assert_eq(c, G);
  lct__granules_destroy(&gr);
}

Test(granules, a_failing_map_takes_nothing) {
  /* The device is out of memory (another process holds it) below the ceiling. */
  lct__granules gr;
  fake f;
  open_granules(&gr, &f, 16, 0);
  uint64_t a, b;
  cr_assert_eq(lct__granules_take(&gr, G / 2, &a), 0);
  f.fail_map = 3;
  cr_assert_eq(lct__granules_take(&gr, 4 * G, &b), LCT_ENOMEM);
  check(&gr, &f, G / 2);
  cr_assert_eq(lct__granules_held(&gr), G, "nothing held beyond the live granule");
  cr_assert_eq(lct__granules_take(&gr, 2 * G, &b), 0, "a smaller take still fits");
  cr_assert_eq(b, G / 2);
  check(&gr, &f, G / 2 + 2 * G);
  f.fail_map = 0;
  /* A run mapped before a later one fails goes back too: a hole in the
   * middle makes two runs. */
  cr_assert_eq(lct__granules_give(&gr, b, 2 * G), 0);
  uint64_t c, d;
  cr_assert_eq(lct__granules_take(&gr, 2 * G, &c), 0); /* granules 0..2 */
  cr_assert_eq(lct__granules_take(&gr, G, &d), 0);     /* granules 2..3 */
  cr_assert_eq(lct__granules_give(&gr, c, 2 * G), 0);  /* granule 1 empties; 0 and 2 keep live bytes */
  cr_assert_eq(lct__granules_take(&gr, 5 * G, &b), 0);
  cr_assert_eq(lct__granules_give(&gr, b, 5 * G), 0);
  check(&gr, &f, G / 2 + G);
  lct__granules_destroy(&gr);
}

Test(granules, a_failing_unmap_stays_held) {
  lct__granules gr;
  fake f;
  open_granules(&gr, &f, 8, 0);
  uint64_t a;
  cr_assert_eq(lct__granules_take(&gr, 2 * G, &a), 0);
  f.fail_unmap = 1;
  cr_assert_eq(lct__granules_give(&gr, a, 2 * G), LCT_ECUDA);
  cr_assert_eq(lct__granules_held(&gr), 2 * G, "what could not be unmapped is still counted");
  cr_assert_eq(gr.n_empty, 2);
  f.fail_unmap = 0;
  uint64_t b;
  cr_assert_eq(lct__granules_take(&gr, G / 4, &b), 0);
  cr_assert_eq(b, 0, "the empty granule is reused as it is");
  cr_assert_eq(lct__granules_give(&gr, b, G / 4), 0);
  cr_assert_eq(lct__granules_held(&gr), 0, "the next give retries the unmap");
  check(&gr, &f, 0);
  lct__granules_destroy(&gr);
}

/* Random takes, shrinks and gives of sizes from 256 bytes to several
 * granules against a model of what is allocated: check() after each. */
Test(granules, random_model_check) {
  enum { SLOTS = 200 };
  lct__granules gr;
  fake f;
  open_granules(&gr, &f, 512, 4 * G);
  uint64_t at[SLOTS], len[SLOTS] = {0}, allocated = 0;
  test_rng rng = {1913};
  for (int step = 0; step < 40000; step++) {
    size_t s = test_rand(&rng) % SLOTS;
    if (len[s] == 0) {
      uint64_t want = test_rand(&rng) % 4 == 0 ? 1 + test_rand(&rng) % (6 * G) : 1 + test_rand(&rng) % (G / 8);
      want = (want + 255) / 256 * 256;
      if (lct__granules_take(&gr, want, &at[s]) == 0) {
        len[s] = want;
        allocated += want;
      }
    } else {
      uint64_t keep = test_rand(&rng) % 2 ? 0 : test_rand(&rng) % len[s] / 256 * 256;
      cr_assert_eq(lct__granules_give(&gr, at[s] + keep, len[s] - keep), 0);
      allocated -= len[s] - keep;
      len[s] = keep;
    }
    if (step % 97 == 0) check(&gr, &f, allocated);
  }
  check(&gr, &f, allocated);
  for (size_t s = 0; s < SLOTS; s++)
    if (len[s] > 0) cr_assert_eq(lct__granules_give(&gr, at[s], len[s]), 0);
  check(&gr, &f, 0);
  cr_assert_eq(lct__granules_held(&gr), 4 * G, "all freed: only the slack is held");
  lct__granules_destroy(&gr);
}

Test(granules, a_shrink_moves_a_blob_out_of_a_closed_hole) {
  lct__granules gr;
  fake f;
  open_granules(&gr, &f, 16, 0);
  const uint64_t bound = G / 2 + 512;
  uint64_t a, b, to;
  cr_assert_eq(lct__granules_take(&gr, bound, &a), 0);
  cr_assert_eq(lct__granules_take(&gr, bound, &b), 0);
  /* b's tail joins the free bytes after it: in place. */
  cr_assert_eq(lct__granules_shrink(&gr, b, bound, G / 4, &to), 0);
  cr_assert_eq(to, b);
  check(&gr, &f, bound + G / 4);
  /* a's tail would be a hole before b: a moves, to the free bytes after b. */
  cr_assert_eq(lct__granules_shrink(&gr, a, bound, G / 4, &to), 0);
  cr_assert_eq(to, b + G / 4);
  check(&gr, &f, bound + G / 2);
  cr_assert_eq(lct__granules_give(&gr, a, bound), 0); /* the copy done: a's whole range goes back */
  check(&gr, &f, G / 2);
  uint64_t c;
  cr_assert_eq(lct__granules_take(&gr, bound, &c), 0);
  cr_assert_eq(c, a, "the next worst case fits where a was");
  /* A small tail stays: moving would copy far more than it saves. */
  cr_assert_eq(lct__granules_shrink(&gr, c, bound, bound - 1024, &to), 0);
  cr_assert_eq(to, c);
  check(&gr, &f, G / 2 + bound - 1024);
  lct__granules_destroy(&gr);
}

Test(granules, a_shrink_with_no_room_stays) {
  lct__granules gr;
  fake f;
  open_granules(&gr, &f, 2, 0);
  uint64_t a, b, to;
  cr_assert_eq(lct__granules_take(&gr, G, &a), 0);
  cr_assert_eq(lct__granules_take(&gr, G, &b), 0);
  cr_assert_eq(lct__granules_shrink(&gr, a, G, G / 2, &to), 0);
  cr_assert_eq(to, a, "the range is full: in place");
  check(&gr, &f, G + G / 2);
  f.fail_map = 2;
  cr_assert_eq(lct__granules_give(&gr, b, G), 0);
  cr_assert_eq(lct__granules_take(&gr, G / 4, &b), 0);
  cr_assert_eq(b, G / 2, "best fit: the hole in granule 0");
  cr_assert_eq(lct__granules_shrink(&gr, b, G / 4, G / 8, &to), 0);
  cr_assert_eq(to, b, "its tail joins free bytes");
  lct__granules_destroy(&gr);
}

/* A trainer's offload: every step overwrites each key. A put reserves each
 * of its segments' worst case (raw bytes and a header) at once, shrinks each
 * to its coded blob as lctd publishes it (moving those lct__granules_shrink
 * moves, the old ranges given back after), and then the old version goes.
 * Partly filled granules then waste up to a sixth of what is stored (the
 * blobs left in place, never moved, waste twice that). */
Test(granules, training_steps_stay_packed) {
  enum { KEYS = 300, STEPS = 100, SEGS = 16 };
  const uint64_t seg = 1 << 20, slack = 64 << 20;
  lct__granules gr;
  fake f;
  open_granules(&gr, &f, 2048, slack); /* a 4 GiB ceiling */
  static uint64_t at[KEYS][SEGS], len[KEYS][SEGS];
  uint64_t raw[KEYS], nseg[KEYS], stored = 0, total_raw = 0, worst = 0, moved = 0, blobs = 0;
  test_rng rng = {20};
  for (int k = 0; k < KEYS; k++) { /* tensors of 4 KiB to 16 MiB in 1 MiB segments (the default) */
    raw[k] = (UINT64_C(4) << 10) << test_rand(&rng) % 13;
    nseg[k] = (raw[k] + seg - 1) / seg;
    total_raw += raw[k];
  }
  for (int step = 0; step < STEPS; step++) {
    for (int k = 0; k < KEYS; k++) {
      uint64_t new_at[SEGS], new_len[SEGS], bound[SEGS];
      for (uint64_t i = 0; i < nseg[k]; i++) {
        uint64_t r = raw[k] - i * seg < seg ? raw[k] - i * seg : seg;
        bound[i] = (r + 512 + 255) / 256 * 256;
        cr_assert_eq(lct__granules_take(&gr, bound[i], &new_at[i]), 0);
        new_len[i] = (r * 10 / (13 + test_rand(&rng) % 4) + 255) / 256 * 256; /* coded at 1.3 to 1.6 */
      }
      for (uint64_t i = 0; i < nseg[k]; i++) {
        uint64_t to;
        cr_assert_eq(lct__granules_shrink(&gr, new_at[i], bound[i], new_len[i], &to), 0);
        if (to != new_at[i]) {
          cr_assert_eq(lct__granules_give(&gr, new_at[i], bound[i]), 0);
          moved++;
        }
        blobs++;
        new_at[i] = to;
        stored += new_len[i];
      }
      for (uint64_t i = 0; i < nseg[k]; i++) {
        if (len[k][i] != 0) {
          cr_assert_eq(lct__granules_give(&gr, at[k][i], len[k][i]), 0);
          stored -= len[k][i];
        }
        at[k][i] = new_at[i];
        len[k][i] = new_len[i];
      }
      /* What partly filled granules waste, beside the empty ones of the
       * slack, once the first steps have laid the keys out. */
      uint64_t waste = lct__granules_held(&gr) - gr.n_empty * G - stored;
      if (step >= 10)
        worst = waste > worst ? waste : worst;
    }
    check(&gr, &f, stored);
  }
  cr_log_info("%d keys, %.0f MiB raw, %.0f MiB stored, %.0f%% of blobs moved: partly filled granules wasted at "
              "most %.1f MiB after the first steps", KEYS, (double)total_raw / (1 << 20), (double)stored / (1 << 20),
              100.0 * (double)moved / (double)blobs, (double)worst / (1 << 20));
  cr_assert_leq(worst, stored / 5, "%.1f of %.1f MiB stored wasted", (double)worst / (1 << 20),
                (double)stored / (1 << 20));
  lct__granules_destroy(&gr);
}
