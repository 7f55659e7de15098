/* test_batch.c — the serving ops of registry.h (forward_batch, cache_export / cache_import)
 * against the plain per-session forward, for every family that has them (the hybrids'
 * forward_batch at the end).
 *
 * For the demo model and each dense / MLA fixture: five sessions prefilled with prompts of
 * different lengths (so every row sits at another position), then eight decode steps taken
 * twice: one session at a time through ci_forward, and all five through forward_batch.
 * The logits must agree bit for bit (the server's determinism — the same seed gives the same
 * text alone or beside others — rests on it; the CPU matmul gives a token row the same bits
 * whatever the batch, tests/unit/test_determinism.c), fp8 block-scaled weights included. Then prefix
 * reuse: rows exported from one session and imported into a fresh one (a prefix of them),
 * or a session cut back to a shorter prefix, must continue exactly as the original. */
#include "../unit/check.h"
#include "cinfer.h"
#include "models/model.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NS = 5, STEPS = 8, CTX = 96 };

static const char *dirs[] = { "models/demo", "tests/fixtures/llama_gqa_llama3", "tests/fixtures/qwen3_bf16",
                              "tests/fixtures/qwen3_moe", "tests/fixtures/deepseek_v3", "tests/fixtures/deepseek_v3_nolora",
                              "tests/fixtures/deepseek_v3_fp8", "tests/fixtures/deepseek_v32",
                              "tests/fixtures/deepseek_v32_long", NULL };

static int tok_at(int i, int j, int V) { return (int)((uint64_t)(i * 7919 + j * 104729 + 13) % (uint64_t)V); }

static void one_model(const char *dir) {
    char err[1024];
    ci_model *m = NULL;
    ci_model_opts o = { .n_threads = 0 };
    if (ci_model_open(dir, &o, &m, err, sizeof err)) { CHECK(0, "%s: %s", dir, err); return; }
    const ci_family_ops *ops = m->family->ops;
    CHECK(ops->forward_batch && ops->cache_export && ops->cache_import, "%s: %s lacks the serving ops", dir, m->family->name);
    if (!ops->forward_batch || !ops->cache_export || !ops->cache_import) { ci_model_free(m); return; }
    const int V = (int)m->cfg.vocab_size;
    ci_session *a[NS] = { 0 }, *b[NS] = { 0 };
    float *la = malloc((size_t)NS * V * sizeof(float)), *lb = malloc((size_t)NS * V * sizeof(float));
    int toks[NS];
    for (int i = 0; i < NS && la && lb; i++) {
        if (ci_session_new(m, CTX, &a[i], err, sizeof err) || ci_session_new(m, CTX, &b[i], err, sizeof err)) { CHECK(0, "%s: %s", dir, err); goto done; }
        int n = 3 + 9 * i, ids[64];
        for (int j = 0; j < n; j++) ids[j] = tok_at(i, j, V);
        if (ci_forward(a[i], ids, n, la, 0, err, sizeof err) || ci_forward(b[i], ids, n, lb, 0, err, sizeof err)) { CHECK(0, "%s: %s", dir, err); goto done; }
    }
    double md = 0;
    int differ = 0;
    for (int step = 0; step < STEPS; step++) {
        for (int i = 0; i < NS; i++) toks[i] = tok_at(i + 11, step, V);
        for (int i = 0; i < NS; i++)
            if (ci_forward(a[i], &toks[i], 1, la + (size_t)i * V, 0, err, sizeof err)) { CHECK(0, "%s: %s", dir, err); goto done; }
        if (ops->forward_batch(b, toks, NS, lb, err, sizeof err)) { CHECK(0, "%s: %s", dir, err); goto done; }
        for (size_t k = 0; k < (size_t)NS * V; k++) {
            double dd = fabs((double)la[k] - lb[k]);
            if (dd > md) md = dd;
            differ |= la[k] != lb[k];
        }
        for (int i = 0; i < NS; i++) CHECK(a[i]->pos == b[i]->pos, "%s: positions %d vs %d", dir, a[i]->pos, b[i]->pos);
    }
    CHECK(!differ, "%s: forward_batch differs from forward: max|diff| %g", dir, md);

    /* export all rows of a[3], import the first 20 of them into a fresh session (a prefix
     * of an export is the export of the prefix), cut a[3] back to 20: both continue from
     * position 20 with the same next logits */
    {
        ci_session *c = NULL;
        int held = a[3]->pos;
        size_t bytes = ops->cache_bytes_per_token(m) * (size_t)held;
        void *blob = malloc(bytes);
        int t = tok_at(99, 1, V);
        float *lc = malloc((size_t)V * sizeof(float));
        if (!blob || !lc || ci_session_new(m, CTX, &c, err, sizeof err)) CHECK(0, "%s: %s", dir, err);
        else if (ops->cache_export(a[3], held, blob, err, sizeof err) || ops->cache_import(c, 20, blob, err, sizeof err)) CHECK(0, "%s: %s", dir, err);
        else {
            CHECK(c->pos == 20, "%s: import left pos %d", dir, c->pos);
            a[3]->pos = 20;
            if (ci_forward(a[3], &t, 1, la, 0, err, sizeof err) || ci_forward(c, &t, 1, lc, 0, err, sizeof err)) CHECK(0, "%s: %s", dir, err);
            else CHECK(!memcmp(la, lc, (size_t)V * sizeof(float)), "%s: imported rows continue differently", dir);
        }
        free(blob);
        free(lc);
        ci_session_free(c);
    }
done:
    for (int i = 0; i < NS; i++) { ci_session_free(a[i]); ci_session_free(b[i]); }
    free(la);
    free(lb);
    ci_model_free(m);
}

static void test_forward_batch_matches_forward(void) {
    for (int i = 0; dirs[i]; i++) one_model(dirs[i]);
}

/* The hybrids: the batched step keeps each row's recurrent state (DeltaNet, short conv,
 * Mamba2; DeepSeek V4's window rings and compressors) per session and batches the rest;
 * logits bit for bit as one session at a time, and the state left behind continues the
 * same way (a last single step compared too). */
static const char *hybrid_dirs[] = { "tests/fixtures/qwen3_next", "tests/fixtures/qwen3_5", "tests/fixtures/qwen3_5_moe_hub",
                                     "tests/fixtures/lfm2", "tests/fixtures/lfm2_moe", "tests/fixtures/nemotron_h",
                                     "tests/fixtures/nemotron_h_latent", "tests/fixtures/deepseek_v4",
                                     "tests/fixtures/deepseek_v4_hub", "tests/fixtures/deepseek_v4_rates",
                                     "tests/fixtures/deepseek_v4_fp8", NULL };

static void one_hybrid(const char *dir) {
    char err[1024];
    ci_model *m = NULL;
    ci_model_opts o = { .n_threads = 0 };
    if (ci_model_open(dir, &o, &m, err, sizeof err)) { CHECK(0, "%s: %s", dir, err); return; }
    const ci_family_ops *ops = m->family->ops;
    CHECK(ops->forward_batch != NULL, "%s: %s has no forward_batch", dir, m->family->name);
    if (!ops->forward_batch) { ci_model_free(m); return; }
    const int V = (int)m->cfg.vocab_size;
    ci_session *a[NS] = { 0 }, *b[NS] = { 0 };
    float *la = malloc((size_t)NS * V * sizeof(float)), *lb = malloc((size_t)NS * V * sizeof(float));
    int toks[NS], differ = 0;
    double md = 0;
    for (int i = 0; i < NS && la && lb; i++) {
        if (ci_session_new(m, CTX, &a[i], err, sizeof err) || ci_session_new(m, CTX, &b[i], err, sizeof err)) { CHECK(0, "%s: %s", dir, err); goto done; }
        int n = 3 + 9 * i, ids[64];
        for (int j = 0; j < n; j++) ids[j] = tok_at(i, j, V);
        if (ci_forward(a[i], ids, n, la, 0, err, sizeof err) || ci_forward(b[i], ids, n, lb, 0, err, sizeof err)) { CHECK(0, "%s: %s", dir, err); goto done; }
    }
    for (int step = 0; step <= STEPS; step++) {
        for (int i = 0; i < NS; i++) toks[i] = tok_at(i + 11, step, V);
        for (int i = 0; i < NS; i++)
            if (ci_forward(a[i], &toks[i], 1, la + (size_t)i * V, 0, err, sizeof err)) { CHECK(0, "%s: %s", dir, err); goto done; }
        if (step < STEPS) {
            /* rows in another order than the sessions were made in: state follows the session */
            ci_session *bs[NS];
            int bt[NS];
            float *lr = malloc((size_t)NS * V * sizeof(float));
            if (!lr) goto done;
            for (int i = 0; i < NS; i++) { bs[i] = b[(i + step) % NS]; bt[i] = toks[(i + step) % NS]; }
            int rc = ops->forward_batch(bs, bt, NS, lr, err, sizeof err);
            for (int i = 0; i < NS && !rc; i++)
                memcpy(lb + (size_t)((i + step) % NS) * V, lr + (size_t)i * V, (size_t)V * sizeof(float));
            free(lr);
            if (rc) { CHECK(0, "%s: %s", dir, err); goto done; }
        } else {   /* one more plain step on the batched sessions */
            for (int i = 0; i < NS; i++)
                if (ci_forward(b[i], &toks[i], 1, lb + (size_t)i * V, 0, err, sizeof err)) { CHECK(0, "%s: %s", dir, err); goto done; }
        }
        for (size_t k = 0; k < (size_t)NS * V; k++) {
            double dd = fabs((double)la[k] - lb[k]);
            if (dd > md) md = dd;
            differ |= la[k] != lb[k];
        }
        for (int i = 0; i < NS; i++) CHECK(a[i]->pos == b[i]->pos, "%s: positions %d vs %d", dir, a[i]->pos, b[i]->pos);
    }
    CHECK(!differ, "%s: forward_batch differs from forward: max|diff| %g", dir, md);
    /* a session moved back without a snapshot is refused, and nothing moves */
    {
        int p1 = b[1]->pos, t2[2] = { 1, 2 };
        ci_session *bs[2] = { b[0], b[1] };
        b[1]->pos = 3;
        CHECK(ops->forward_batch(bs, t2, 2, lb, err, sizeof err) != 0, "%s: a rewound recurrent session was accepted", dir);
        CHECK(b[0]->pos == a[0]->pos, "%s: a refused step moved a session", dir);
        b[1]->pos = p1;
        bs[1] = b[0];
        CHECK(ops->forward_batch(bs, t2, 2, lb, err, sizeof err) != 0, "%s: one session twice in a batch accepted", dir);
        CHECK_HAS(err, "twice");
    }
done:
    for (int i = 0; i < NS; i++) { ci_session_free(a[i]); ci_session_free(b[i]); }
    free(la);
    free(lb);
    ci_model_free(m);
}

static void test_forward_batch_hybrids(void) {
    for (int i = 0; hybrid_dirs[i]; i++) one_hybrid(hybrid_dirs[i]);
}

/* DeepSeek V4 sessions whose contexts are shorter than the sliding window keep shorter
 * window rings (the step indexes every row's ring with the longest one's length): a batched
 * step of sessions of different contexts gives every row the bits of its own single step. */
static void test_forward_batch_v4_contexts(void) {
    char err[1024];
    ci_model *m = NULL;
    ci_model_opts o = { .n_threads = 0 };
    const char *dir = "tests/fixtures/deepseek_v4";   /* sliding_window 8 */
    if (ci_model_open(dir, &o, &m, err, sizeof err)) { CHECK(0, "%s: %s", dir, err); return; }
    const int V = (int)m->cfg.vocab_size, ctx[3] = { 6, 64, 7 };
    ci_session *a[3] = { 0 }, *b[3] = { 0 };
    float *la = malloc(3 * (size_t)V * sizeof(float)), *lb = malloc(3 * (size_t)V * sizeof(float));
    int differ = 0;
    for (int i = 0; i < 3 && la && lb; i++) {
        int ids[3] = { tok_at(i, 0, V), tok_at(i, 1, V), tok_at(i, 2, V) };
        if (ci_session_new(m, ctx[i], &a[i], err, sizeof err) || ci_session_new(m, ctx[i], &b[i], err, sizeof err) ||
            ci_forward(a[i], ids, 3, la, 0, err, sizeof err) || ci_forward(b[i], ids, 3, lb, 0, err, sizeof err)) {
            CHECK(0, "%s: %s", dir, err);
            goto done;
        }
    }
    for (int step = 0; step < 3 && la && lb; step++) {
        int toks[3];
        for (int i = 0; i < 3; i++) {
            toks[i] = tok_at(i + 5, step, V);
            if (ci_forward(a[i], &toks[i], 1, la + (size_t)i * V, 0, err, sizeof err)) { CHECK(0, "%s: %s", dir, err); goto done; }
        }
        if (m->family->ops->forward_batch(b, toks, 3, lb, err, sizeof err)) { CHECK(0, "%s: %s", dir, err); goto done; }
        differ |= memcmp(la, lb, 3 * (size_t)V * sizeof(float)) != 0;
    }
    CHECK(!differ, "%s: a batched step of sessions of different contexts differs from their own steps", dir);
done:
    for (int i = 0; i < 3; i++) { ci_session_free(a[i]); ci_session_free(b[i]); }
    free(la);
    free(lb);
    ci_model_free(m);
}

static void test_forward_batch_errors(void) {
    char err[1024];
    ci_model *m = NULL;
    ci_model_opts o = { .n_threads = 0 };
    if (ci_model_open("models/demo", &o, &m, err, sizeof err)) { CHECK(0, "%s", err); return; }
    ci_session *s[2] = { 0 };
    float *lg = malloc(2 * (size_t)m->cfg.vocab_size * sizeof(float));
    if (ci_session_new(m, 2, &s[0], err, sizeof err) || ci_session_new(m, 2, &s[1], err, sizeof err)) CHECK(0, "%s", err);
    else {
        int bad[2] = { 1, 1 << 30 };
        CHECK(m->family->ops->forward_batch(s, bad, 2, lg, err, sizeof err) != 0, "out-of-vocabulary id accepted");
        CHECK_HAS(err, "outside the vocabulary");
        int ok[2] = { 1, 2 };
        s[1]->pos = 2;
        CHECK(m->family->ops->forward_batch(s, ok, 2, lg, err, sizeof err) != 0, "full context accepted");
        CHECK_HAS(err, "exceeds the context");
        CHECK(s[0]->pos == 0, "a refused step moved a session");
    }
    free(lg);
    ci_session_free(s[0]);
    ci_session_free(s[1]);
    ci_model_free(m);
}

int main(void) {
    TEST_RUN(test_forward_batch_matches_forward);
    TEST_RUN(test_forward_batch_hybrids);
    TEST_RUN(test_forward_batch_v4_contexts);
    TEST_RUN(test_forward_batch_errors);
    TEST_EXIT();
}
