/* test_fold_ops.c — how the nn blocks call a backend's optional folded ops (backend.h
 * mla_prepare, moe_norm_experts with a shared expert), on the CPU, which has neither: the CPU
 * backend is given stand-ins that compose its own ops, as a device's one launch stands for
 * them, and the DeepSeek fixtures' logits are taken a token at a time (prefill, then steps):
 *  - mla_prepare storing the latent rows itself (mla_attend then must not store them again,
 *    nor may they go missing): the bits of the run without it;
 *  - moe_norm_experts declining a call with a shared expert (returns 0: nn composes the block
 *    as without the op): the same bits;
 *  - moe_norm_experts taking it (x += the routed sum, then += the shared expert's product: on
 *    DeepSeek the order the family composes, on Nemotron-H (relu², the block's own shared expert)
 *    and Qwen3-Next / Qwen3.5-MoE (σ-gated) another rounding than their routed + shared first):
 *    within 1e-5 of the logits' scale, and the
 *    argmax of every row the same;
 * and that the stand-ins were called (mla_prepare at every layer of every forward on DeepSeek,
 * with a cache but on V3.2, whose indexer stores its own rows; moe_norm_experts with the shared
 * expert at the MoE layers). The device's own
 * kernels are tests/gpu/test_cuda_ops.c's (mla_prepare, moe_norm_experts shared). */
#include "check.h"
#include "cinfer.h"
#include "backend/backend.h"
#include "models/model.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static ci_backend cpu_ops;   /* the CPU backend's own table, called with the real backend */
static int prep_calls, prep_stores, shared_calls, shared_mode;   /* shared_mode 0: decline, 1: take */

static void fake_mla_prepare(ci_backend *be, float *qcat, float *lat, float *q, const float *kv_norm, float eps, int n,
                             int n_heads, int nope, int rope, int kv_lora, const int32_t *pos, const float *inv_freq,
                             float mscale, ci_rope_style style, const ci_mat *w_uk, float *cache, float *const *tab,
                             const ci_pages *pages) {
    const int latw = kv_lora + rope;
    prep_calls++;
    cpu_ops.mla_rope(be, lat, q, kv_norm, eps, n, n_heads, nope, rope, kv_lora, pos, inv_freq, mscale, style);
    cpu_ops.mla_absorb_q(be, qcat, q, n, n_heads, nope, rope, kv_lora, w_uk);
    if (cache || tab) {
        prep_stores++;
        cpu_ops.kv_store_paged(be, cache, tab, 1, latw, lat, latw, n, pos, pages);
    }
}

static int fake_moe_norm_experts(ci_backend *be, float *out, float *xn, float *logits, int32_t *sel, float *w,
                                 const float *x, const float *norm_w, float eps, const int32_t *ids, int n,
                                 const ci_mat *W, const ci_moe *m, int acc) {
    if (m->sh_down) {
        shared_calls++;
        if (!shared_mode) return 0;
    }
    cpu_ops.norm_matmul_keep(be, xn, logits, x, norm_w, eps, n, W);
    cpu_ops.moe_route(be, sel, w, logits, ids, n, m);
    cpu_ops.moe_experts(be, out, xn, n, sel, w, m, acc);
    if (m->sh_down) {   /* out += the shared expert of xn */
        const size_t SI = (size_t)m->shared_inter;
        float *g = malloc((size_t)n * SI * sizeof *g), *u = malloc((size_t)n * SI * sizeof *u);
        float *tmp = malloc((size_t)n * m->hidden * sizeof *tmp);
        if (m->relu2) {
            cpu_ops.matmul(be, g, xn, n, m->sh_up);
            cpu_ops.relu2(be, g, (int64_t)n * SI);
        } else if (m->act_limit > 0) cpu_ops.matmul_swiglu_clamp(be, g, u, xn, n, m->sh_gate, m->sh_up, m->act_limit);
        else cpu_ops.matmul_swiglu(be, g, u, xn, n, m->sh_gate, m->sh_up);
        if (m->sh_router) {   /* σ-gated (Qwen3-Next / Qwen3.5-MoE) */
            float *gl = malloc((size_t)n * sizeof *gl);
            cpu_ops.matmul(be, tmp, g, n, m->sh_down);
            cpu_ops.matmul(be, gl, xn, n, m->sh_router);
            cpu_ops.sigmoid_gate_add(be, out, tmp, gl, n, m->hidden);
            free(gl);
        } else {
            cpu_ops.matmul_acc(be, out, g, n, m->sh_down, tmp);
        }
        free(g); free(u); free(tmp);
    }
    return 1;
}

/* the fixture's logits [T, V] over its tokens, the first T/2 as one prefill then one step each;
 * fold: 0 none, 1 mla_prepare, 2 + moe_norm_experts declining the shared expert, 3 taking it */
static float *logits_of(const char *dir, const int *toks, int T, int V, int fold) {
    char err[1024];
    ci_model_opts o = { .isa = CI_ISA_AUTO };
    ci_model *m = NULL;
    ci_session *s = NULL;
    float *got = malloc((size_t)T * V * sizeof *got);
    if (ci_model_open(dir, &o, &m, err, sizeof err)) {
        CHECK(0, "%s: %s", dir, err);
        free(got);
        return NULL;
    }
    cpu_ops = *m->be;
    CHECK(!m->be->mla_prepare && !m->be->moe_norm_experts, "%s: the CPU backend now has its own folded ops: this test "
          "stands in for them", dir);
    if (fold >= 1) m->be->mla_prepare = fake_mla_prepare;
    if (fold >= 2) m->be->moe_norm_experts = fake_moe_norm_experts;
    shared_mode = fold == 3;
    int rc = ci_session_new(m, T, &s, err, sizeof err);
    const int first = T / 2;
    if (!rc) rc = ci_forward(s, toks, first, got, 1, err, sizeof err);
    for (int t = first; t < T && !rc; t++) rc = ci_forward(s, &toks[t], 1, got + (size_t)t * V, 1, err, sizeof err);
    CHECK(rc == 0, "%s fold %d: %s", dir, fold, err);
    ci_session_free(s);
    *m->be = cpu_ops;
    ci_model_free(m);
    if (rc) { free(got); return NULL; }
    return got;
}

/* mla: the family runs MLA (mla_prepare at every layer); stores: without the indexer (DSA stores its own) */
static void one(const char *name, int mla, int stores) {
    char dir[512];
    snprintf(dir, sizeof dir, "tests/fixtures/%s", name);
    const int T = 10, V_MAX = 1 << 20;
    int toks[10];
    for (int t = 0; t < T; t++) toks[t] = (t * 37 + 5) % 97;
    char err[1024];
    ci_model_opts o = { .isa = CI_ISA_AUTO };
    ci_model *m = NULL;
    if (ci_model_open(dir, &o, &m, err, sizeof err)) { CHECK(0, "%s: %s", dir, err); return; }
    const int V = (int)m->cfg.vocab_size, L = (int)m->cfg.n_layers;
    ci_model_free(m);
    CHECK(V > 0 && V < V_MAX, "%s: vocabulary %d", dir, V);
    float *base = logits_of(dir, toks, T, V, 0);
    prep_calls = prep_stores = shared_calls = 0;
    float *prep = logits_of(dir, toks, T, V, 1);
    /* one prefill and T - T/2 steps: a call a layer each, every one storing */
    const int forwards = 1 + T - T / 2, preps = prep_calls;
    CHECK(prep_calls == mla * forwards * L && prep_stores == stores * prep_calls, "%s: mla_prepare called %d times (%d "
          "storing), want %d (%s)", name, prep_calls, prep_stores, mla * forwards * L, stores ? "all storing" : "none");
    float *decl = logits_of(dir, toks, T, V, 2);
    const int declined = shared_calls;
    float *take = logits_of(dir, toks, T, V, 3);
    CHECK(declined > 0 && shared_calls == 2 * declined, "%s: moe_norm_experts asked with the shared expert %d times, "
          "then %d", name, declined, shared_calls - declined);
    if (base && prep && decl && take) {
        const size_t nv = (size_t)T * V;
        CHECK(!memcmp(base, prep, nv * sizeof *base), "%s: logits with mla_prepare differ from the composed ops'", name);
        CHECK(!memcmp(base, decl, nv * sizeof *base), "%s: logits with moe_norm_experts declining differ", name);
        double scale = 0, md = 0;
        for (size_t i = 0; i < nv; i++) {
            scale = fmax(scale, fabs(base[i]));
            md = fmax(md, fabs((double)take[i] - base[i]));
        }
        CHECK(md <= 1e-5 * (scale > 1 ? scale : 1), "%s: logits with the shared expert folded: max|diff| %.3g (scale %.3g)",
              name, md, scale);
        for (int t = 0; t < T; t++) {
            int a = 0, b = 0;
            for (int v = 1; v < V; v++) {
                if (base[(size_t)t * V + v] > base[(size_t)t * V + a]) a = v;
                if (take[(size_t)t * V + v] > take[(size_t)t * V + b]) b = v;
            }
            CHECK(a == b, "%s: row %d's argmax %d with the shared expert folded, %d without", name, t, b, a);
        }
        printf("NOTE %s: mla_prepare %d calls, the shared expert asked %d times, folded max|diff| %.2g\n", name,
               preps, declined, md);
    }
    free(base); free(prep); free(decl); free(take);
}

static void test_deepseek_v3(void) { one("deepseek_v3", 1, 1); }
static void test_deepseek_v3_nolora(void) { one("deepseek_v3_nolora", 1, 1); }
static void test_deepseek_v3_fp8(void) { one("deepseek_v3_fp8", 1, 1); }
static void test_deepseek_v32(void) { one("deepseek_v32", 1, 0); }
static void test_nemotron_h(void) { one("nemotron_h", 0, 0); }
static void test_qwen3_next(void) { one("qwen3_next", 0, 0); }
static void test_qwen3_5_moe(void) { one("qwen3_5_moe_hub", 0, 0); }

int main(void) {
    TEST_RUN(test_deepseek_v3);
    TEST_RUN(test_deepseek_v3_nolora);
    TEST_RUN(test_deepseek_v3_fp8);
    TEST_RUN(test_deepseek_v32);
    TEST_RUN(test_nemotron_h);
    TEST_RUN(test_qwen3_next);
    TEST_RUN(test_qwen3_5_moe);
    TEST_EXIT();
}
