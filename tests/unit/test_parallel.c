/* test_parallel.c — the pieces tensor parallelism is made of, on the CPU: the communicator's
 * collectives with the ranks as threads (src/parallel/comm.h: sums in rank order, the same
 * bits on every rank, an abort that wakes every waiter), and the sharding arithmetic
 * (src/parallel/shard.h: even splits, grouped-query heads, block-aligned units, row views and
 * column copies that hold exactly the original's elements). */
#include "check.h"
#include "backend/backend.h"
#include "parallel/comm.h"
#include "parallel/shard.h"
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { MAXR = 8, ROUNDS = 40, MAXC = 3000 };

typedef struct {
    ci_comm *c;
    int rank;
    int abort_at;            /* round at which this rank aborts instead of joining (-1: never) */
    int rc_fail;             /* how many collectives returned -1 */
    int bad;                 /* results that differ from the serial sums */
} rank_arg;

/* Rank r's input of round k: deterministic values with real spread. */
static float val(int r, int k, size_t i) {
    uint32_t h = (uint32_t)(r * 2654435761u) ^ (uint32_t)(k * 40503u) ^ (uint32_t)(i * 2246822519u);
    h ^= h >> 13; h *= 0x5bd1e995u; h ^= h >> 15;
    return ((float)(h & 0xffff) / 65536.0f - 0.5f) * (float)(1 + (h >> 28));
}

static void *rank_main(void *p) {
    rank_arg *a = p;
    const int W = ci_comm_world(a->c);
    float *x = malloc(MAXC * sizeof(float)), *g = malloc((size_t)MAXR * MAXC * sizeof(float));
    for (int k = 0; k < ROUNDS; k++) {
        if (k == a->abort_at) { ci_comm_abort(a->c, a->rank, "went away"); break; }
        size_t count = (size_t)(1 + (k * 397) % MAXC);
        for (size_t i = 0; i < count; i++) x[i] = val(a->rank, k, i);
        if (ci_comm_all_reduce(a->c, a->rank, x, count)) { a->rc_fail++; break; }
        for (size_t i = 0; i < count; i++) {
            float s = val(0, k, i);
            for (int r = 1; r < W; r++) s += val(r, k, i);
            if (memcmp(&s, &x[i], sizeof s)) a->bad++;
        }
        /* gather: 3 rows of this rank's width-w slice */
        int w = 1 + k % 7, rows = 3;
        for (int i = 0; i < rows * w; i++) x[i] = (float)(a->rank * 1000 + k * 10 + i);
        if (ci_comm_all_gather_rows(a->c, a->rank, g, x, rows, w)) { a->rc_fail++; break; }
        for (int i = 0; i < rows; i++)
            for (int r = 0; r < W; r++)
                for (int j = 0; j < w; j++)
                    if (g[(size_t)i * W * w + (size_t)r * w + j] != (float)(r * 1000 + k * 10 + i * w + j)) a->bad++;
        x[0] = (float)(a->rank + k);
        if (ci_comm_broadcast(a->c, a->rank, x, 1, k % W)) { a->rc_fail++; break; }
        if (x[0] != (float)(k % W + k)) a->bad++;
    }
    free(x);
    free(g);
    return NULL;
}

static void run_ranks(int world, int abort_rank, int abort_at, rank_arg *args) {
    ci_comm *c = ci_comm_new(world);
    CHECK(c != NULL, "comm of %d", world);
    if (!c) return;
    pthread_t th[MAXR];
    for (int r = 0; r < world; r++) {
        args[r] = (rank_arg){ c, r, r == abort_rank ? abort_at : -1, 0, 0 };
        pthread_create(&th[r], NULL, rank_main, &args[r]);
    }
    for (int r = 0; r < world; r++) pthread_join(th[r], NULL);
    char why[256] = "";
    int failed = ci_comm_error(c, why, sizeof why);
    if (abort_rank >= 0) {
        CHECK(failed && strstr(why, "went away"), "abort recorded: %s", why);
        char want[32];
        snprintf(want, sizeof want, "rank %d", abort_rank);
        CHECK_HAS(why, want);
    } else {
        CHECK(!failed, "no abort: %s", why);
    }
    ci_comm_free(c);
}

static void test_collectives(void) {
    rank_arg a[MAXR];
    for (int world = 1; world <= MAXR; world *= 2) {
        run_ranks(world, -1, -1, a);
        for (int r = 0; r < world; r++)
            CHECK(a[r].bad == 0 && a[r].rc_fail == 0, "world %d rank %d: %d wrong, %d failed", world, r, a[r].bad,
                  a[r].rc_fail);
    }
    CHECK(!ci_comm_new(0) && !ci_comm_new(CI_COMM_MAX + 1), "bad worlds refused");
}

/* A rank that goes away mid-run: every other rank's collective returns -1 (nobody hangs). */
static void test_abort_wakes_everyone(void) {
    rank_arg a[MAXR];
    run_ranks(4, 2, 7, a);
    for (int r = 0; r < 4; r++)
        if (r != 2) CHECK(a[r].rc_fail == 1 && a[r].bad == 0, "rank %d: %d failures, %d wrong", r, a[r].rc_fail, a[r].bad);
    /* and a collective called after the abort fails at once */
    ci_comm *c = ci_comm_new(2);
    ci_comm_abort(c, 1, "gone");
    float x = 1;
    CHECK(ci_comm_all_reduce(c, 0, &x, 1) == -1 && ci_comm_barrier(c, 0) == -1, "after abort");
    CHECK(ci_comm_all_reduce(c, 5, &x, 1) == -1, "bad rank refused");
    ci_comm_free(c);
}

static void test_split_and_heads(void) {
    shd_range r;
    CHECK(shd_split(96, 1, 4, 3, &r) == 0 && r.lo == 72 && r.hi == 96, "96/4 rank 3: [%lld, %lld)", (long long)r.lo,
          (long long)r.hi);
    CHECK(shd_split(96, 16, 2, 1, &r) == 0 && r.lo == 48 && r.hi == 96, "units of 16");
    CHECK(shd_split(96, 16, 4, 0, &r) == -1, "6 units over 4 refused");
    CHECK(shd_split(100, 16, 1, 0, &r) == -1, "unit not dividing refused");
    CHECK(shd_split(8, 1, 2, 2, &r) == -1, "rank out of range refused");
    char err[256];
    shd_range q, kv;
    /* split kv heads: 32 q / 8 kv over 4 */
    CHECK(shd_gqa(32, 8, 4, 1, &q, &kv, "x", err, sizeof err) == 0 && q.lo == 8 && q.hi == 16 && kv.lo == 2 &&
          kv.hi == 4, "32/8 over 4");
    /* shared kv heads: 16 q / 2 kv over 8: ranks 0..3 read kv 0, 4..7 kv 1 */
    for (int rk = 0; rk < 8; rk++) {
        CHECK(shd_gqa(16, 2, 8, rk, &q, &kv, "x", err, sizeof err) == 0 && q.hi - q.lo == 2 && kv.lo == rk / 4 &&
              kv.hi == rk / 4 + 1, "16/2 over 8, rank %d: kv [%lld, %lld)", rk, (long long)kv.lo, (long long)kv.hi);
        /* every local query head's key head is inside the rank's */
        for (int64_t h = q.lo; h < q.hi; h++) CHECK(h / 8 >= kv.lo && h / 8 < kv.hi, "head %lld", (long long)h);
    }
    CHECK(shd_gqa(12, 6, 4, 0, &q, &kv, "layer 3", err, sizeof err) == -1, "6 kv over 4 refused");
    CHECK_HAS(err, "layer 3");
    CHECK_HAS(err, "6 key/value heads");
    CHECK(shd_gqa(6, 6, 4, 0, &q, &kv, "m", err, sizeof err) == -1, "6 heads over 4 refused");
    CHECK_HAS(err, "6 attention heads");
}

static void test_views_hold_the_parts(void) {
    enum { R = 256, C = 384, B = 128 };
    uint16_t *bf = malloc(sizeof(uint16_t) * R * C);
    uint8_t *f8 = malloc(R * C);
    float *sc = malloc(sizeof(float) * (R / B) * (C / B));
    for (int i = 0; i < R * C; i++) {
        bf[i] = (uint16_t)(0x3c00 + (i * 37) % 0x700);
        f8[i] = (uint8_t)((i * 13) % 0x7e);
    }
    for (int i = 0; i < (R / B) * (C / B); i++) sc[i] = 0.5f + (float)i;
    ci_mat Wb = { .data = bf, .dtype = CI_BF16, .rows = R, .cols = C };
    ci_mat Wf = { .data = f8, .dtype = CI_F8_E4M3, .rows = R, .cols = C, .scale = sc, .scale_dtype = CI_F32,
                  .block = B };
    CHECK(shd_unit(&Wb, 1, 64) == 64 && shd_unit(&Wf, 1, 64) == 128 && shd_unit(&Wf, 0, 64) == 64 &&
          shd_unit(&Wf, 1, 96) == 384, "units");
    const ci_mat *Ws[2] = { &Wb, &Wf };
    char err[256];
    for (int w = 0; w < 2; w++) {
        const ci_mat *W = Ws[w];
        ci_mat v;
        shd_rows(W, 100, 200, &v);   /* rows any offset: fp8 through scale_row0 */
        int bad = 0;
        for (int r = 0; r < 100; r++)
            for (int c = 0; c < C; c += 7) bad += ci_mat_get(&v, r, c) != ci_mat_get(W, 100 + r, c);
        CHECK(v.rows == 100 && bad == 0, "%s rows: %d differ", w ? "fp8" : "bf16", bad);
        void *o = NULL, *os = NULL;
        ci_mat vr, vc;
        shd_rows(W, 130, 250, &vr);   /* a row view's columns: fp8 scale rows from the view's scale_row0 */
        CHECK(shd_cols(&vr, 128, 384, &vc, &o, &os, "t", err, sizeof err) == 0, "cols: %s", err);
        bad = 0;
        for (int r = 0; r < 120; r++)
            for (int c = 0; c < 256; c += 5) bad += ci_mat_get(&vc, r, c) != ci_mat_get(W, 130 + r, 128 + c);
        CHECK(vc.cols == 256 && vc.rows == 120 && bad == 0, "%s cols: %d differ", w ? "fp8" : "bf16", bad);
        free(o);
        free(os);
    }
    ci_mat v;
    void *o, *os;
    CHECK(shd_cols(&Wf, 64, 192, &v, &o, &os, "model.layers.0.mlp.down_proj", err, sizeof err) == -1 && !o,
          "fp8 columns off the block refused");
    CHECK_HAS(err, "model.layers.0.mlp.down_proj");
    ci_qdesc qd = { .mode = CI_Q_AFFINE, .bits = 4, .group = 64 };
    ci_mat Wq = { .data = bf, .dtype = CI_U32, .rows = 8, .cols = 128, .scale = &qd };
    CHECK(shd_cols(&Wq, 0, 64, &v, &o, &os, "q", err, sizeof err) == -1, "MLX columns refused");
    CHECK_HAS(err, "MLX");
    free(bf);
    free(f8);
    free(sc);
}

int main(void) {
    TEST_RUN(test_collectives);
    TEST_RUN(test_abort_wakes_everyone);
    TEST_RUN(test_split_and_heads);
    TEST_RUN(test_views_hold_the_parts);
    TEST_EXIT();
}
