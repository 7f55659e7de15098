/* test_paged.c — the paged families (dense, DeepSeek V3 / V3.2, the attention layers of the
 * hybrids: LFM2, Qwen3-Next / Qwen3.5, Nemotron-H, and DeepSeek V4's compressed entries) on a
 * shared block pool (model.h ci_model_kv_pool), on the CPU, run from the repository root:
 *  - sessions on one shared pool give the logits of sessions with pools of their own, bit
 *    for bit, prefill and decode, also interleaved with each other and through forward_batch;
 *  - a session that takes another's published blocks (ci_session_match) and runs only the
 *    rest of the prompt gets the logits of a full prefill, bit for bit;
 *  - a hybrid (or V4) session that takes the published blocks and restores a snapshot of
 *    another's states at their end (states only: the rows stay in the blocks) runs the rest of the
 *    prompt to the logits of a session that ran the same two pieces itself, bit for bit; a
 *    states-only snapshot is refused by a session whose blocks do not hold its positions;
 *  - truncating into a shared block with a copy (ci_session_truncate_copy) gives the session
 *    a block of its own holding the kept rows: it runs on as if it had computed them, and
 *    the block's other holder reads its own rows still;
 *  - truncating into a shared block drops it; an exhausted pool is a one-line error naming
 *    the blocks, and the pool is whole again when the sessions end;
 *  - batch steps replayed from recorded graphs (a device) = the same steps run eagerly;
 *  - ci_model_kv_pool refuses a second pool and zero blocks (test_dsv4: a V4 model that cannot page);
 *  - shared = own again with the attention cache in f16 (kv_f16; dense, MoE and hybrids).
 * With CINFER_TEST_DEVICE=cuda (tests/gpu/run.sh) the same on the CUDA backend: shared = own
 * bit for bit still (the same kernels on the same shapes, tables aside); reused blocks + the
 * rest against a full prefill within 1e-3 of the largest logit and the same argmax (the rest's
 * GEMMs have other row counts than the full prompt's). */
#include "check.h"
#include "cinfer.h"
#include "cache/cache.h"
#include "models/model.h"
#include "models/registry.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const fixtures[] = { "tests/fixtures/qwen3_tied", "tests/fixtures/llama_gqa_llama3",
                                        "tests/fixtures/qwen3_moe", "tests/fixtures/deepseek_v3",
                                        "tests/fixtures/deepseek_v32" };
/* families whose caches are restored from snapshots (states, or V4's window ring and
 * compressors' pending tokens; their rows or compressed entries in the blocks) */
static const char *const hybrids[] = { "tests/fixtures/lfm2", "tests/fixtures/lfm2_moe", "tests/fixtures/qwen3_5",
                                       "tests/fixtures/qwen3_next", "tests/fixtures/nemotron_h",
                                       "tests/fixtures/deepseek_v4", "tests/fixtures/deepseek_v4_hub" };

static int same(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

static int on_device(void) {
    const char *d = getenv("CINFER_TEST_DEVICE");
    return d && !strcmp(d, "cuda");
}

/* Bit for bit on the CPU; on the device within 1e-3 of the largest |logit|, same argmax. */
static int close_logits(const float *a, const float *b, int n) {
    if (!on_device()) return same(a, b, (size_t)n);
    float mx = 0, md = 0;
    int ia = 0, ib = 0;
    for (int i = 0; i < n; i++) {
        mx = fabsf(a[i]) > mx ? fabsf(a[i]) : mx;
        md = fabsf(a[i] - b[i]) > md ? fabsf(a[i] - b[i]) : md;
        if (a[i] > a[ia]) ia = i;
        if (b[i] > b[ib]) ib = i;
    }
    return md <= 1e-3f * mx && ia == ib;
}

static int kv16;   /* open_model's models with the attention cache in f16 (ci_model_opts.kv_f16) */

static ci_model *open_model(const char *dir, int pool_blocks) {
    char err[512];
    ci_model_opts o = { .n_threads = 2, .device = on_device(), .kv_f16 = kv16 };
    ci_model *m;
    if (ci_model_open(dir, &o, &m, err, sizeof err)) { CHECK(0, "%s: %s", dir, err); return NULL; }
    if (pool_blocks && ci_model_kv_pool(m, pool_blocks, err, sizeof err)) { CHECK(0, "%s: %s", dir, err); ci_model_free(m); return NULL; }
    return m;
}

/* A prompt of n ids below V. */
static void prompt_of(int *t, int n, int V, int seed) {
    for (int i = 0; i < n; i++) t[i] = (int)((seed * 131u + (unsigned)i * 97u) % (unsigned)V);
}

static void shared_equals_own(const char *const *fixtures, size_t nf) {
    char err[512];
    for (size_t f = 0; f < nf; f++) {
        ci_model *own = open_model(fixtures[f], 0), *sh = open_model(fixtures[f], 12);
        if (!own || !sh) { ci_model_free(own); ci_model_free(sh); return; }
        const int V = (int)own->cfg.vocab_size, P = 300;
        ci_session *a = NULL, *b = NULL, *x = NULL, *y = NULL;
        CHECK(!ci_session_new(own, 600, &a, err, sizeof err) && !ci_session_new(own, 600, &b, err, sizeof err) &&
              !ci_session_new(sh, 600, &x, err, sizeof err) && !ci_session_new(sh, 600, &y, err, sizeof err), "%s", err);
        if (!a || !b || !x || !y) goto done;
        CHECK(ci_session_paged(x) && x->pool == sh->kv_pool && a->own_pool, "pools");
        int pa[300], pb[300];
        prompt_of(pa, P, V, 1);
        prompt_of(pb, P, V, 2);
        float *l1 = malloc((size_t)V * 4 * 2), *l2 = malloc((size_t)V * 4 * 2);
        /* interleaved prefills: the shared pool hands the two sessions alternating blocks */
        for (int c = 0; c < P; c += 100) {
            CHECK(!ci_forward(a, pa + c, 100, l1, 0, err, sizeof err) && !ci_forward(x, pa + c, 100, l2, 0, err, sizeof err), "%s", err);
            CHECK(same(l1, l2, (size_t)V), "%s: prefill chunk %d of a", fixtures[f], c);
            CHECK(!ci_forward(b, pb + c, 100, l1, 0, err, sizeof err) && !ci_forward(y, pb + c, 100, l2, 0, err, sizeof err), "%s", err);
            CHECK(same(l1, l2, (size_t)V), "%s: prefill chunk %d of b", fixtures[f], c);
        }
        int ok = 1;
        for (int step = 0; step < 40 && ok; step++) {   /* decode across a block edge, batched */
            int tk[2] = { (step * 37) % V, (step * 53 + 1) % V };
            ci_session *o2[2] = { a, b }, *s2[2] = { x, y };
            if (a->m->family->ops->forward_batch(o2, tk, 2, l1, err, sizeof err) ||
                x->m->family->ops->forward_batch(s2, tk, 2, l2, err, sizeof err)) {
                CHECK(0, "%s", err);
                break;
            }
            ok = same(l1, l2, (size_t)2 * V);
        }
        CHECK(ok, "%s: batched decode on the shared pool differs", fixtures[f]);
        free(l1); free(l2);
    done:
        ci_session_free(a); ci_session_free(b); ci_session_free(x); ci_session_free(y);
        if (sh->kv_pool) {
            kv_pool_stats st;
            kvp_stats(sh->kv_pool, &st);
            CHECK(st.in_use == 0 && st.free + st.cached == 12, "%s: pool whole after the sessions: %d in use", fixtures[f], st.in_use);
        }
        ci_model_free(own); ci_model_free(sh);
    }
}

static void test_shared_equals_own(void) { shared_equals_own(fixtures, sizeof fixtures / sizeof *fixtures); }
static void test_hybrid_shared_equals_own(void) { shared_equals_own(hybrids, sizeof hybrids / sizeof *hybrids); }
/* the same with the attention cache in f16 (the CPU; families with GQA attention layers) */
static void test_kv_f16_shared_equals_own(void) {
    static const char *const gqa[] = { "tests/fixtures/qwen3_tied", "tests/fixtures/qwen3_moe", "tests/fixtures/lfm2",
                                       "tests/fixtures/qwen3_5", "tests/fixtures/nemotron_h" };
    if (on_device()) return;
    kv16 = 1;
    shared_equals_own(gqa, sizeof gqa / sizeof *gqa);
    kv16 = 0;
}

/* A hybrid: a runs 256 + 94 tokens, its states snapshot at 256 with its blocks published; b
 * matches the two blocks and restores the snapshot, then runs the 94; c (own pool) runs the
 * two pieces itself: b's logits are c's. */
static void test_hybrid_blocks_and_states(void) {
    char err[512];
    for (size_t f = 0; f < sizeof hybrids / sizeof *hybrids; f++) {
        ci_model *m = open_model(hybrids[f], 10), *o = open_model(hybrids[f], 0);
        if (!m || !o) { ci_model_free(m); ci_model_free(o); return; }
        const ci_family_ops *ops = m->family->ops;
        const int V = (int)m->cfg.vocab_size, P = 350;
        int p[350];
        prompt_of(p, P, V, 7);
        ci_session *a = NULL, *b = NULL, *c = NULL, *e = NULL;
        CHECK(!ci_session_new(m, 512, &a, err, sizeof err) && !ci_session_new(m, 512, &b, err, sizeof err) &&
              !ci_session_new(o, 512, &c, err, sizeof err) && !ci_session_new(m, 512, &e, err, sizeof err), "%s", err);
        float *want = malloc((size_t)V * 4), *got = malloc((size_t)V * 4);
        cache_snap *snap = NULL, *own_snap = NULL;
        if (!a || !b || !c || !e) goto done;
        CHECK(!ci_forward(a, p, 256, got, 0, err, sizeof err), "%s", err);
        snap = ops->snapshot(a, err, sizeof err);
        CHECK(snap != NULL, "%s: %s", hybrids[f], err);
        CHECK(!ci_forward(a, p + 256, P - 256, got, 0, err, sizeof err), "%s", err);   /* a moves on past the snapshot */
        ci_session_publish(a, p, P, 0);
        CHECK(!ci_forward(c, p, 256, want, 0, err, sizeof err) && !ci_forward(c, p + 256, P - 256, want, 0, err, sizeof err),
              "%s", err);
        own_snap = ops->snapshot(c, err, sizeof err);   /* an own pool's snapshot keeps its rows */
        CHECK(own_snap && cache_snap_bytes(own_snap) > cache_snap_bytes(snap), "%s: own-pool snapshot %zu bytes, states-only %zu",
              hybrids[f], own_snap ? cache_snap_bytes(own_snap) : 0, snap ? cache_snap_bytes(snap) : 0);
        if (!snap) goto done;
        /* e holds no blocks: a states-only snapshot cannot stand in for its rows */
        CHECK(ops->restore(e, snap, err, sizeof err) != 0, "%s: states-only restore without blocks accepted", hybrids[f]);
        CHECK_HAS(err, "match its prefix first");
        CHECK(!strchr(err, '\n'), "one line: %s", err);
        CHECK(ci_session_match(b, p, P, P - 1) == 256, "%s: matched %d", hybrids[f], b->pos);
        CHECK(!ops->restore(b, snap, err, sizeof err) && b->pos == 256, "%s: %s", hybrids[f], err);
        CHECK(!ci_forward(b, p + 256, P - 256, got, 0, err, sizeof err), "%s", err);
        CHECK(close_logits(want, got, V), "%s: reused blocks + restored states differ from the same pieces run", hybrids[f]);
        if (own_snap) {
            CHECK(ops->restore(b, own_snap, err, sizeof err) != 0, "%s: an own pool's snapshot restored on the shared pool", hybrids[f]);
            CHECK_HAS(err, "another shape");
        }
    done:
        cache_snap_free(snap);
        cache_snap_free(own_snap);
        free(want); free(got);
        ci_session_free(a); ci_session_free(b); ci_session_free(c); ci_session_free(e);
        if (m->kv_pool) {
            kv_pool_stats st;
            kvp_stats(m->kv_pool, &st);
            CHECK(st.in_use == 0 && st.free + st.cached == 10, "%s: pool whole: %d in use", hybrids[f], st.in_use);
        }
        ci_model_free(m); ci_model_free(o);
    }
}

/* Copy on write: a runs 200 tokens (a hybrid: its states snapshot there), then 100 more, and
 * names its two full blocks; b takes them and truncates to 200, inside the shared second
 * block: that block's 72 rows are copied into one of b's own (ci_session_truncate_copy), the
 * states restored, and b runs on to 350 with the logits of c, which ran 200 + 150 on its
 * own pool; a, whose block b did not write, decodes on with the logits of d, which ran
 * a's 300 on its own pool. Then e, whose prompt q parts from p after 200 tokens, gets the
 * same copy from its match (kvs_match_copy) and runs q to the logits of f (own pool). */
static void copy_on_write(const char *dir) {
    char err[512];
    ci_model *m = open_model(dir, 10), *o = open_model(dir, 0);
    if (!m || !o) { ci_model_free(m); ci_model_free(o); return; }
    const ci_family_ops *ops = m->family->ops;
    const int V = (int)m->cfg.vocab_size, P = 350;
    int p[350], tk = 3;
    prompt_of(p, P, V, 11);
    ci_session *a = NULL, *b = NULL, *c = NULL, *d = NULL, *e = NULL, *f = NULL;
    CHECK(!ci_session_new(m, 512, &a, err, sizeof err) && !ci_session_new(m, 512, &b, err, sizeof err) &&
          !ci_session_new(o, 512, &c, err, sizeof err) && !ci_session_new(o, 512, &d, err, sizeof err) &&
          !ci_session_new(m, 512, &e, err, sizeof err) && !ci_session_new(o, 512, &f, err, sizeof err), "%s", err);
    float *want = malloc((size_t)V * 4), *got = malloc((size_t)V * 4);
    cache_snap *snap = NULL;
    if (!a || !b || !c || !d || !e || !f) goto done;
    CHECK(!ci_forward(a, p, 200, got, 0, err, sizeof err), "%s", err);
    if (ops->snapshot) CHECK((snap = ops->snapshot(a, err, sizeof err)) != NULL, "%s: %s", dir, err);
    CHECK(!ci_forward(a, p + 200, 100, got, 0, err, sizeof err), "%s", err);
    ci_session_publish(a, p, 300, 0);
    CHECK(ci_session_match(b, p, P, P - 1) == 256, "%s: matched %d", dir, b->pos);
    const int shared = b->pages.tab[1];
    CHECK(ci_session_truncate_copy(b, 200) == 200 && b->pages.n == 2 && b->pages.tab[0] == a->pages.tab[0] &&
          b->pages.tab[1] != shared && a->pages.tab[1] == shared, "%s: copy on write kept %d", dir, b->pos);
    if (snap) CHECK(!ops->restore(b, snap, err, sizeof err) && b->pos == 200, "%s: %s", dir, err);
    CHECK(!ci_forward(b, p + 200, P - 200, got, 0, err, sizeof err), "%s", err);
    CHECK(!ci_forward(c, p, 200, want, 0, err, sizeof err) && !ci_forward(c, p + 200, P - 200, want, 0, err, sizeof err),
          "%s", err);
    CHECK(close_logits(want, got, V), "%s: the copied block's rows + the rest differ from the same pieces run", dir);
    CHECK(!ci_forward(a, &tk, 1, got, 0, err, sizeof err), "%s", err);
    CHECK(!ci_forward(d, p, 200, want, 0, err, sizeof err) && !ci_forward(d, p + 200, 100, want, 0, err, sizeof err) &&
          !ci_forward(d, &tk, 1, want, 0, err, sizeof err), "%s", err);
    CHECK(close_logits(want, got, V), "%s: the block's first holder reads other rows after the copy", dir);
    /* e's prompt shares p's first 200 tokens: the match itself copies the shared start of
     * the second block (kvs_match_copy); e runs on to 350 like f, which ran q on its own pool */
    int q[350];
    memcpy(q, p, 200 * sizeof(int));
    prompt_of(q + 200, P - 200, V, 12);
    CHECK(ci_session_match(e, q, P, P - 1) == 200 && e->pages.n == 2 && e->pages.tab[1] != shared, "%s: match with a copy gave %d",
          dir, e->pos);
    if (snap) CHECK(!ops->restore(e, snap, err, sizeof err), "%s: %s", dir, err);
    CHECK(!ci_forward(e, q + 200, P - 200, got, 0, err, sizeof err), "%s", err);
    CHECK(!ci_forward(f, q, 200, want, 0, err, sizeof err) && !ci_forward(f, q + 200, P - 200, want, 0, err, sizeof err),
          "%s", err);
    CHECK(close_logits(want, got, V), "%s: a match's copied start + the rest differ from the same pieces run", dir);
done:
    cache_snap_free(snap);
    free(want); free(got);
    ci_session_free(a); ci_session_free(b); ci_session_free(c); ci_session_free(d); ci_session_free(e); ci_session_free(f);
    if (m->kv_pool) {
        kv_pool_stats st;
        kvp_stats(m->kv_pool, &st);
        CHECK(st.in_use == 0 && st.free + st.cached == 10, "%s: pool whole: %d in use", dir, st.in_use);
    }
    ci_model_free(m); ci_model_free(o);
}

static void test_copy_on_write(void) {
    copy_on_write(fixtures[0]);
    copy_on_write("tests/fixtures/deepseek_v32");   /* two buffers: latent rows and indexer keys */
    for (size_t f = 0; f < sizeof hybrids / sizeof *hybrids; f++) copy_on_write(hybrids[f]);
}

static void test_match_reuses_blocks(void) {
    char err[512];
    for (size_t f = 0; f < sizeof fixtures / sizeof *fixtures; f++) {
        ci_model *m = open_model(fixtures[f], 10);
        if (!m) return;
        const int V = (int)m->cfg.vocab_size, P = 350;
        int p[350];
        prompt_of(p, P, V, 5);
        ci_session *a = NULL, *b = NULL, *c = NULL;
        CHECK(!ci_session_new(m, 512, &a, err, sizeof err) && !ci_session_new(m, 512, &b, err, sizeof err) &&
              !ci_session_new(m, 512, &c, err, sizeof err), "%s", err);
        float *full = malloc((size_t)V * 4), *re = malloc((size_t)V * 4);
        if (!a || !b || !c) goto done;
        CHECK(!ci_forward(a, p, 300, full, 0, err, sizeof err), "%s", err);
        ci_session_publish(a, p, 300, 0);                 /* two full blocks of 128 named */
        CHECK(ci_session_match(b, p, P, P - 1) == 256 && b->pos == 256, "%s: matched %d", fixtures[f], b->pos);
        CHECK(b->pages.tab[0] == a->pages.tab[0] && b->pages.tab[1] == a->pages.tab[1], "blocks shared");
        CHECK(!ci_forward(b, p + 256, P - 256, re, 0, err, sizeof err), "%s", err);
        CHECK(!ci_forward(c, p, P, full, 0, err, sizeof err), "%s", err);
        CHECK(close_logits(full, re, V), "%s: logits after reused blocks differ from a full prefill", fixtures[f]);
        /* b cuts into its second (shared) block: dropped, 128 kept; a still reads its rows */
        CHECK(ci_session_truncate(b, 200) == 128 && b->pages.n == 1, "%s: truncate kept %d", fixtures[f], b->pos);
        /* the pool is 10 blocks: a holds 3, b 1, c 3; a 4th-block request of 400 more fails */
        ci_session *d = NULL;
        CHECK(!ci_session_new(m, 1024, &d, err, sizeof err), "%s", err);
        if (d) {
            int big[1000];
            prompt_of(big, 1000, V, 9);
            CHECK(ci_forward(d, big, 1000, full, 0, err, sizeof err) != 0, "%s: 8 blocks from 3 free accepted", fixtures[f]);
            CHECK_HAS(err, "out of cache blocks");
            CHECK(!strchr(err, '\n') && d->pos == 0, "one line, nothing run: %s", err);
            ci_session_free(d);
        }
    done:
        free(full); free(re);
        ci_session_free(a); ci_session_free(b); ci_session_free(c);
        kv_pool_stats st;
        kvp_stats(m->kv_pool, &st);
        CHECK(st.in_use == 0 && st.free + st.cached == 10, "%s: pool whole: %d in use", fixtures[f], st.in_use);
        ci_model_free(m);
    }
}

/* A batch step replayed from its recorded graph (ci_runner_batch_step; a device) gives the
 * logits of the same steps run eagerly (no_graphs), bit for bit: 3 sequences on the shared
 * pool of contexts 400, 300 and 500, 12 steps across a block edge (the rows' tables change
 * under the graph), the rows in another order from step 6 (another session first: DeepSeek
 * V4's steps are served by the longest context's runner, the others' by the first row's),
 * then 2 rows (another graph). On the CPU both run eagerly. */
static void test_batch_graphs(void) {
    static const char *const dirs[] = { "tests/fixtures/qwen3_tied", "tests/fixtures/deepseek_v3",
                                        "tests/fixtures/deepseek_v32", "tests/fixtures/qwen3_5",
                                        "tests/fixtures/lfm2", "tests/fixtures/nemotron_h",
                                        "tests/fixtures/deepseek_v4" };
    static const int ctx[3] = { 400, 300, 500 }, order[2][3] = { { 0, 1, 2 }, { 2, 0, 1 } };
    char err[512];
    for (size_t f = 0; f < sizeof dirs / sizeof *dirs; f++) {
        ci_model *m[2] = { NULL, NULL };
        for (int g = 0; g < 2; g++) {
            ci_model_opts o = { .n_threads = 2, .device = on_device(), .no_graphs = g };
            if (ci_model_open(dirs[f], &o, &m[g], err, sizeof err) || ci_model_kv_pool(m[g], 12, err, sizeof err)) {
                CHECK(0, "%s: %s", dirs[f], err);
                ci_model_free(m[0]); ci_model_free(m[1]);
                return;
            }
        }
        const int V = (int)m[0]->cfg.vocab_size;
        ci_session *s[2][3] = { { NULL } };
        float *l[2] = { malloc((size_t)3 * V * 4), malloc((size_t)3 * V * 4) };
        int ok = 1;
        for (int g = 0; g < 2; g++)
            for (int i = 0; i < 3; i++) {
                int p[130];
                prompt_of(p, 120 + 5 * i, V, 20 + i);
                ok &= !ci_session_new(m[g], ctx[i], &s[g][i], err, sizeof err) &&
                      !ci_forward(s[g][i], p, 120 + 5 * i, l[g], 0, err, sizeof err);
            }
        CHECK(ok, "%s: %s", dirs[f], err);
        for (int step = 0; step < 14 && ok; step++) {
            const int n = step < 12 ? 3 : 2;
            int tk[3] = { (step * 37) % V, (step * 53 + 1) % V, (step * 11 + 2) % V };
            for (int g = 0; g < 2 && ok; g++) {
                ci_session *rows[3];
                for (int i = 0; i < 3; i++) rows[i] = s[g][order[step >= 6][i]];
                ok = !m[g]->family->ops->forward_batch(rows, tk, n, l[g], err, sizeof err);
            }
            CHECK(ok, "%s: %s", dirs[f], err);
            if (ok && !same(l[0], l[1], (size_t)n * V)) {
                CHECK(0, "%s: batch step %d (%d rows) replayed differs from eager", dirs[f], step, n);
                ok = 0;
            }
        }
        for (int g = 0; g < 2; g++) {
            for (int i = 0; i < 3; i++) ci_session_free(s[g][i]);
            free(l[g]);
            ci_model_free(m[g]);
        }
    }
}

static void test_pool_refusals(void) {
    char err[512];
    if (on_device()) return;   /* nothing of the device's */
    ci_model *m = open_model(fixtures[0], 0);
    if (!m) return;
    CHECK(ci_model_kv_pool(m, 0, err, sizeof err) != 0, "zero blocks accepted");
    CHECK_HAS(err, "at least one block");
    CHECK(ci_model_kv_pool(m, 4, err, sizeof err) == 0, "%s", err);
    CHECK(ci_model_kv_pool(m, 4, err, sizeof err) != 0, "a second pool accepted");
    CHECK_HAS(err, "has a block pool already");
    ci_model_free(m);
}

int main(void) {
    TEST_RUN(test_shared_equals_own);
    TEST_RUN(test_hybrid_shared_equals_own);
    TEST_RUN(test_kv_f16_shared_equals_own);
    TEST_RUN(test_hybrid_blocks_and_states);
    TEST_RUN(test_copy_on_write);
    TEST_RUN(test_match_reuses_blocks);
    TEST_RUN(test_batch_graphs);
    TEST_RUN(test_pool_refusals);
    TEST_EXIT();
}
