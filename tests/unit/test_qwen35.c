/* test_qwen35.c — the gated-DeltaNet hybrids beyond the parity fixtures.
 *
 *   snapshot/restore: prefill 40 tokens with a cache snapshot at 24; restoring it (into the
 *     same session and into a fresh one) and feeding tokens 24..40 again gives identical logits
 *   chunked vs recurrent: the chunked DeltaNet prefill and the token-by-token recurrence
 *     agree on a 300-token prompt (several ubatches and chunks), and on one mixer whose
 *     heads range from very slow to extreme decay
 *   make-random: the record-mode tensor list of each family loads back and runs
 *   bad input: config and checkpoint errors name the key or tensor; a session cannot move
 *     its recurrent state backwards except through a snapshot
 *
 * With arguments it is a prefill bench instead:
 *   test_qwen35 --bench MODEL_DIR [TOKENS] [THREADS]
 *     prefill tok/s with the chunked DeltaNet and with the recurrence, and the time spent in
 *     the DeltaNet layers (measured through the model's dump hook)
 *   test_qwen35 --bench-core [TOKENS] [THREADS]
 *     the DeltaNet mixer alone at Qwen3.5-35B-A3B head dims
 * One thread measures process CPU time, steadier than wall time on a shared machine. */
#include "check.h"
#include "cinfer.h"
#include "io/json.h"
#include "models/model.h"
#include "models/qwen_hybrid.h"
#include "nn/deltanet.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *FIX = "tests/fixtures/qwen3_5";

static int read_tokens(const char *dir, int *out, int max) {
    char path[1024], err[512];
    snprintf(path, sizeof path, "%s/ref.json", dir);
    json_t *ref = cj_load_file(path, err, sizeof err);
    if (!ref) return 0;
    const json_t *a = json_object_get(ref, "tokens");
    int n = 0;
    for (size_t i = 0; i < json_array_size(a) && n < max; i++) out[n++] = (int)json_integer_value(json_array_get(a, i));
    json_decref(ref);
    return n;
}

static double max_diff(const float *a, const float *b, size_t n) {
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= m)) m = d;
    }
    return m;
}

static void test_snapshot_restore(void) {
    char err[1024];
    int toks[64];
    CHECK(read_tokens(FIX, toks, 64) >= 40, "%s: tokens", FIX);
    ci_model *m = NULL;
    ci_session *s = NULL, *s2 = NULL;
    ci_model_opts o = { .n_threads = 0 };
    CHECK(ci_model_open(FIX, &o, &m, err, sizeof err) == 0, "%s", err);
    if (!m) return;
    const int V = 300, N = 16;
    float *l1 = malloc((size_t)N * V * sizeof(float)), *l2 = malloc((size_t)N * V * sizeof(float));
    float *l3 = malloc((size_t)N * V * sizeof(float)), *l4 = malloc((size_t)N * V * sizeof(float));
    CHECK(ci_session_new(m, 64, &s, err, sizeof err) == 0 && ci_session_new(m, 64, &s2, err, sizeof err) == 0, "%s", err);
    if (s && s2) {
        CHECK(ci_forward(s, toks, 24, NULL, 0, err, sizeof err) == 0, "%s", err);
        cache_snap *snap = qh_snapshot(s, err, sizeof err);
        CHECK(snap && cache_snap_pos(snap) == 24, "snapshot");
        CHECK(ci_forward(s, toks + 24, N, l1, 1, err, sizeof err) == 0, "%s", err);
        CHECK(ci_session_pos(s) == 40, "pos %d", ci_session_pos(s));
        if (snap) {
            /* back to 24 in the same session: identical logits, bit for bit */
            CHECK(qh_session_restore(s, snap, err, sizeof err) == 0 && ci_session_pos(s) == 24, "%s", err);
            CHECK(ci_forward(s, toks + 24, N, l2, 1, err, sizeof err) == 0, "%s", err);
            CHECK(memcmp(l1, l2, (size_t)N * V * sizeof(float)) == 0, "restored logits differ: max|diff| %g",
                  max_diff(l1, l2, (size_t)N * V));
            /* into a fresh session of the same model */
            CHECK(qh_session_restore(s2, snap, err, sizeof err) == 0, "%s", err);
            CHECK(ci_forward(s2, toks + 24, N, l3, 1, err, sizeof err) == 0, "%s", err);
            CHECK(memcmp(l1, l3, (size_t)N * V * sizeof(float)) == 0, "fresh-session logits differ: max|diff| %g",
                  max_diff(l1, l3, (size_t)N * V));
            /* and one token at a time after the restore (the recurrence): same up to rounding */
            CHECK(qh_session_restore(s, snap, err, sizeof err) == 0, "%s", err);
            for (int t = 0; t < N; t++)
                CHECK(ci_forward(s, toks + 24 + t, 1, l4 + (size_t)t * V, 1, err, sizeof err) == 0, "%s", err);
            double d = max_diff(l1, l4, (size_t)N * V);
            CHECK(d < 1e-4, "steps after restore: max|diff| %g", d);
            printf("  snapshot at 24 (%zu bytes): restored prefill identical, restored steps max|diff| %.2g\n",
                   cache_snap_bytes(snap), d);
        }
        cache_snap_free(snap);
    }
    free(l1); free(l2); free(l3); free(l4);
    ci_session_free(s);
    ci_session_free(s2);
    ci_model_free(m);
}

static void test_chunked_matches_recurrent(void) {
    char err[1024];
    int toks[300];
    int T = read_tokens(FIX, toks, 300);
    CHECK(T == 300, "%s: %d tokens", FIX, T);
    ci_model *m = NULL;
    ci_session *s = NULL;
    ci_model_opts o = { .n_threads = 0 };
    CHECK(ci_model_open(FIX, &o, &m, err, sizeof err) == 0, "%s", err);
    if (!m) return;
    const int V = 300;
    float *a = malloc((size_t)T * V * sizeof(float)), *b = malloc((size_t)T * V * sizeof(float));
    CHECK(ci_session_new(m, T, &s, err, sizeof err) == 0, "%s", err);
    if (s) {
        CHECK(ci_forward(s, toks, T, a, 1, err, sizeof err) == 0, "%s", err);
        qh_set_deltanet_mode(m, DN_RECURRENT);
        ci_session_reset(s);
        CHECK(ci_forward(s, toks, T, b, 1, err, sizeof err) == 0, "%s", err);
        double d = max_diff(a, b, (size_t)T * V);
        CHECK(d < 1e-4, "chunked vs recurrent prefill: max|diff| %g", d);
        printf("  chunked vs recurrent prefill, %d tokens: max|diff| %.2g\n", T, d);
    }
    free(a); free(b);
    ci_session_free(s);
    ci_model_free(m);
}

/* dn_forward alone, heads from very slow to extreme decay (so full chunks, decay-bounded
 * chunks, short chunks run inline and whole heads run by the recurrence all occur): the
 * chunked prefill, in one call and split in two, matches the recurrence. */
static void test_deltanet_modes(void) {
    const int H = 8, hk = 2, hv = 4, dk = 16, dv = 24, K = 4, C = 2 * hk * dk + hv * dv, VD = hv * dv, N = 200;
    uint64_t r = 99;
#define RND() (r = r * 6364136223846793005ull + 1442695040888963407ull, (float)((r >> 40) & 0xffffff) / 16777216.0f - 0.5f)
    float *wqkv = malloc(sizeof(float) * C * H), *wz = malloc(sizeof(float) * VD * H), *wb = malloc(sizeof(float) * hv * H);
    float *wa = malloc(sizeof(float) * hv * H), *wo = malloc(sizeof(float) * H * VD), *x = malloc(sizeof(float) * N * H);
    for (int i = 0; i < C * H; i++) wqkv[i] = RND();
    for (int i = 0; i < VD * H; i++) { wz[i] = RND(); wo[i] = 0.3f * RND(); }
    for (int i = 0; i < hv * H; i++) { wb[i] = RND(); wa[i] = RND(); }
    for (int i = 0; i < N * H; i++) x[i] = 2 * RND();
    dn_layer L;
    memset(&L, 0, sizeof L);
    L.hidden = H; L.hk = hk; L.hv = hv; L.dk = dk; L.dv = dv; L.conv_k = K; L.eps = 1e-6f; L.layout = DN_SPLIT;
    ci_mat m[5] = { { wqkv, CI_F32, C, H, 0, 0, 0, 0 }, { wz, CI_F32, VD, H, 0, 0, 0, 0 }, { wb, CI_F32, hv, H, 0, 0, 0, 0 },
                    { wa, CI_F32, hv, H, 0, 0, 0, 0 }, { wo, CI_F32, H, VD, 0, 0, 0, 0 } };
    L.qkv = m[0]; L.z = m[1]; L.b = m[2]; L.a = m[3]; L.out = m[4];
    float negA[4] = { -0.01f, -0.4f, -4.0f, -60.0f }, dtb[4] = { 0, 0, 0, 0 }, nw[24];
    for (int i = 0; i < dv; i++) nw[i] = 1.0f + 0.1f * RND();
    L.conv_w = malloc(sizeof(float) * C * K);
    for (int i = 0; i < C * K; i++) L.conv_w[i] = RND();
    L.neg_A = negA; L.dt_bias = dtb; L.norm_w = nw;
    L.ops = (ci_deltanet){ hk, hv, dk, dv, negA, dtb, nw, 1e-6f };
    ci_backend *be = ci_backend_cpu_new(0, CI_ISA_AUTO);
    dn_scratch s;
    CHECK(be && dn_scratch_init(be, &s, &L, N) == 0, "setup");
    size_t SF = dn_state_floats(&L);
    float *st[3], *out[3];
    for (int v = 0; v < 3; v++) { st[v] = calloc(SF, sizeof(float)); out[v] = malloc(sizeof(float) * N * H); }
    dn_forward(be, &L, &s, st[0], out[0], x, N, DN_RECURRENT);
    dn_forward(be, &L, &s, st[1], out[1], x, N, DN_AUTO);
    dn_forward(be, &L, &s, st[2], out[2], x, 120, DN_AUTO);
    dn_forward(be, &L, &s, st[2], out[2] + 120 * H, x + 120 * H, N - 120, DN_AUTO);
    double d1 = max_diff(out[0], out[1], (size_t)N * H), d2 = max_diff(out[0], out[2], (size_t)N * H);
    double ds1 = max_diff(st[0], st[1], SF), ds2 = max_diff(st[0], st[2], SF), mo = 0;
    for (int i = 0; i < N * H; i++) mo = fmax(mo, fabs(out[0][i]));
    CHECK(mo > 0.01 && d1 < 1e-5 * (1 + mo) && d2 < 1e-5 * (1 + mo), "outputs: max|out| %g, chunked %g, split %g", mo, d1, d2);
    CHECK(ds1 < 1e-5 && ds2 < 1e-5, "states differ: %g %g", ds1, ds2);
    printf("  dn_forward chunked vs recurrent, decays 0.01..60: max|diff| %.2g (split call %.2g), state %.2g\n", d1, d2, ds1);
    for (int v = 0; v < 3; v++) { free(st[v]); free(out[v]); }
    dn_scratch_free(be, &s);
    if (be) be->free(be);
    free(L.conv_w); free(wqkv); free(wz); free(wb); free(wa); free(wo); free(x);
#undef RND
}

static void test_make_random(void) {
    const char *fx[3] = { "tests/fixtures/qwen3_5", "tests/fixtures/qwen3_5_moe_hub", "tests/fixtures/qwen3_next" };
    for (int f = 0; f < 3; f++) {
        char tmpl[] = "/tmp/ci_qwen35_XXXXXX", cfg[1024], err[1024], path[1100];
        char *dir = mkdtemp(tmpl);
        CHECK(dir != NULL, "mkdtemp");
        if (!dir) return;
        snprintf(cfg, sizeof cfg, "%s/config.json", fx[f]);
        CHECK(ci_make_random(cfg, dir, "bf16", 7, 0, err, sizeof err) == 0, "%s: %s", fx[f], err);
        ci_model *m = NULL;
        ci_session *s = NULL;
        ci_model_opts o = { .n_threads = 0 };
        CHECK(ci_model_open(dir, &o, &m, err, sizeof err) == 0, "%s: random checkpoint: %s", fx[f], err);
        if (m && ci_session_new(m, 40, &s, err, sizeof err) == 0) {
            int toks[32];
            for (int i = 0; i < 32; i++) toks[i] = 3 + i * 7;
            float *lg = malloc(300 * sizeof(float));
            CHECK(ci_forward(s, toks, 32, lg, 0, err, sizeof err) == 0, "%s", err);
            int finite = 1;
            for (int i = 0; i < 300; i++) finite &= isfinite(lg[i]) != 0;
            CHECK(finite, "%s: random model gives non-finite logits", fx[f]);
            free(lg);
        }
        ci_session_free(s);
        ci_model_free(m);
        snprintf(path, sizeof path, "%s/config.json", dir); unlink(path);
        snprintf(path, sizeof path, "%s/model.safetensors", dir); unlink(path);
        rmdir(dir);
    }
}

/* A copy of a fixture with its config edited by `edit` (a key set to a JSON value). */
static int open_edited(const char *fixture, const char *key, const char *json_value, char *err, size_t errlen) {
    char tmpl[] = "/tmp/ci_qwen35_XXXXXX", path[1100], src[1100];
    char *dir = mkdtemp(tmpl);
    if (!dir) return snprintf(err, errlen, "mkdtemp failed"), -2;
    snprintf(path, sizeof path, "%s/config.json", fixture);
    json_t *root = cj_load_file(path, err, errlen);
    if (!root) return -2;
    json_t *tc = json_object_get(root, "text_config");
    json_error_t je;
    json_object_set_new(tc ? tc : root, key, json_loads(json_value, JSON_DECODE_ANY, &je));
    snprintf(path, sizeof path, "%s/config.json", dir);
    json_dump_file(root, path, 0);
    json_decref(root);
    char cwd[900];
    if (!getcwd(cwd, sizeof cwd)) return -2;
    snprintf(src, sizeof src, "%s/%s/model.safetensors", cwd, fixture);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    if (symlink(src, path)) return -2;
    ci_model *m = NULL;
    ci_model_opts o = { .n_threads = 0 };
    int rc = ci_model_open(dir, &o, &m, err, errlen);
    ci_model_free(m);
    unlink(path);
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    rmdir(dir);
    return rc;
}

static void test_bad_input(void) {
    char err[1024];
    CHECK(open_edited("tests/fixtures/qwen3_5", "layer_types", "[\"linear_attention\", \"mamba\", \"x\", \"y\"]", err,
                      sizeof err) == -1, "bad layer type accepted");
    CHECK_HAS(err, "qwen3_5");
    CHECK_HAS(err, "layer_types[1] = 'mamba'");
    CHECK(open_edited("tests/fixtures/qwen3_5", "linear_num_value_heads", "3", err, sizeof err) == -1, "3 value heads accepted");
    CHECK_HAS(err, "linear_num_value_heads 3 is not a multiple of linear_num_key_heads 2");
    CHECK(open_edited("tests/fixtures/qwen3_5_moe_hub", "linear_conv_kernel_dim", "3", err, sizeof err) == -1,
          "conv kernel 3 accepted");
    CHECK_HAS(err, "qwen3_5_moe: tensor 'model.language_model.layers.0.linear_attn.conv1d.weight'");
    CHECK_HAS(err, "expected [160, 1, 3]");
    CHECK(open_edited("tests/fixtures/qwen3_next", "shared_expert_intermediate_size", "40", err, sizeof err) == -1,
          "wrong shared expert width accepted");
    CHECK_HAS(err, "qwen3_next: tensor 'model.layers.0.mlp.shared_expert.gate_proj.weight'");
    CHECK(open_edited("tests/fixtures/qwen3_next", "num_experts", "null", err, sizeof err) == -1, "missing experts accepted");
    CHECK_HAS(err, "'num_experts'");
    CHECK(open_edited("tests/fixtures/qwen3_5", "full_attention_interval", "2", err, sizeof err) == 0,
          "layer_types must win over full_attention_interval: %s", err);
    CHECK(open_edited("tests/fixtures/qwen3_5", "layer_types", "null", err, sizeof err) == -1,
          "full_attention_interval default 4 should not match this checkpoint");
    CHECK_HAS(err, "model.layers.2.linear_attn");

    /* the recurrent state cannot be moved back except by reset or snapshot */
    ci_model *m = NULL;
    ci_session *s = NULL;
    ci_model_opts o = { .n_threads = 0 };
    CHECK(ci_model_open(FIX, &o, &m, err, sizeof err) == 0, "%s", err);
    if (m && ci_session_new(m, 32, &s, err, sizeof err) == 0) {
        int toks[8] = { 5, 6, 7, 8, 9, 10, 11, 12 };
        CHECK(ci_forward(s, toks, 8, NULL, 0, err, sizeof err) == 0, "%s", err);
        s->pos = 4; /* what a caller rewinding a KV cache would do */
        CHECK(ci_forward(s, toks, 1, NULL, 0, err, sizeof err) != 0, "rewind accepted");
        CHECK_HAS(err, "qwen3_5: session at position 4 but its recurrent state is at 8");
        ci_session_reset(s);
        CHECK(ci_forward(s, toks, 8, NULL, 0, err, sizeof err) == 0, "after reset: %s", err);
        CHECK(ci_forward(s, toks, 32, NULL, 0, err, sizeof err) != 0, "context overflow accepted");
        CHECK_HAS(err, "exceed the context of 32");
    }
    ci_session_free(s);
    ci_model_free(m);
}

/* ---- bench ---------------------------------------------------------------------------- */

/* Wall time, or with one thread the process CPU time (steadier on a shared machine). */
static clockid_t bench_clock = CLOCK_MONOTONIC;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(bench_clock, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct {
    double last, dn;        /* time of the previous dump; seconds in DeltaNet mixers */
} bench_ctx;

static void bench_dump(void *ctx, const char *name, int layer, const float *x, int n, int dim) {
    (void)layer; (void)x; (void)n; (void)dim;
    bench_ctx *b = ctx;
    double t = now_s();
    if (!strcmp(name, "linear_attn")) b->dn += t - b->last;   /* norm + DeltaNet mixer */
    b->last = t;
}

static int bench(const char *dir, int T, int threads) {
    char err[1024];
    ci_model *m = NULL;
    ci_session *s = NULL;
    ci_model_opts o = { .n_threads = threads };
    if (threads == 1) bench_clock = CLOCK_PROCESS_CPUTIME_ID;
    if (ci_model_open(dir, &o, &m, err, sizeof err) || ci_session_new(m, T, &s, err, sizeof err)) {
        fprintf(stderr, "bench: %s\n", err);
        ci_model_free(m);
        return 1;
    }
    ci_model_info info;
    ci_model_get_info(m, &info);
    int *toks = malloc((size_t)T * sizeof *toks);
    uint64_t r = 12345;
    for (int i = 0; i < T; i++) { r = r * 6364136223846793005ull + 1442695040888963407ull; toks[i] = (int)((r >> 33) % (uint64_t)info.vocab_size); }
    float *lg = malloc((size_t)info.vocab_size * sizeof(float));
    printf("bench %s: %s, %d layers, backend %s, %d prompt tokens, %s\n", dir, info.family, info.n_layers, info.backend,
           T, threads == 1 ? "1 thread, CPU time" : "wall time");
    /* warm-up: the first pass faults the mapped weights in (most experts see a token) */
    if (ci_forward(s, toks, T < 512 ? T : 512, lg, 0, err, sizeof err)) fprintf(stderr, "bench: %s\n", err);
    double tps[2] = { 0, 0 }, dns[2] = { 0, 0 };
    for (int mode = 0; mode < 2; mode++) {
        qh_set_deltanet_mode(m, mode ? DN_RECURRENT : DN_AUTO);
        bench_ctx bc = { 0, 0 };
        m->dump = bench_dump;
        m->dump_ctx = &bc;
        ci_session_reset(s);
        double t0 = now_s();
        bc.last = t0;
        if (ci_forward(s, toks, T, lg, 0, err, sizeof err)) { fprintf(stderr, "bench: %s\n", err); break; }
        double dt = now_s() - t0;
        tps[mode] = T / dt;
        dns[mode] = bc.dn;
        printf("  %-10s prefill %7.1f tok/s (%.2f s), DeltaNet layers %.2f s\n", mode ? "recurrent" : "chunked", tps[mode],
               dt, bc.dn);
        m->dump = NULL;
    }
    if (tps[1] > 0 && dns[0] > 0)
        printf("  chunked/recurrent: prefill x%.2f, DeltaNet layers x%.2f\n", tps[0] / tps[1], dns[1] / dns[0]);
    free(toks);
    free(lg);
    ci_session_free(s);
    ci_model_free(m);
    return 0;
}

/* The DeltaNet mixer alone at Qwen3.5-35B-A3B head dims (16 key heads, 32 value heads,
 * Dk = Dv = 128, conv 4) with a 16-wide hidden size, so the projections are negligible and
 * what is timed is conv + gates + the core. Decays as trained models have them: A in
 * [1, 16], dt in [0.001, 0.1] log-uniform, g = -A dt (the a projection is zero). */
static int bench_core(int T, int threads) {
    const int H = 16, hk = 16, hv = 32, dk = 128, dv = 128, K = 4, C = 2 * hk * dk + hv * dv, VD = hv * dv, NB = 256;
    uint64_t r = 7;
#define RND() (r = r * 6364136223846793005ull + 1442695040888963407ull, (double)((r >> 11) & ((1ull << 53) - 1)) / 9007199254740992.0)
    float *wqkv = malloc(sizeof(float) * C * H), *wz = malloc(sizeof(float) * VD * H), *wb = malloc(sizeof(float) * hv * H);
    float *wa = calloc((size_t)hv * H, sizeof(float)), *wo = malloc(sizeof(float) * H * VD), *x = malloc(sizeof(float) * NB * H);
    float negA[32], dtb[32], nw[128];
    for (int i = 0; i < C * H; i++) wqkv[i] = (float)(RND() - 0.5);
    for (int i = 0; i < VD * H; i++) { wz[i] = (float)(RND() - 0.5); wo[i] = (float)(0.1 * (RND() - 0.5)); }
    for (int i = 0; i < hv * H; i++) wb[i] = (float)(RND() - 0.5);
    for (int i = 0; i < NB * H; i++) x[i] = (float)(2 * RND() - 1);
    for (int h = 0; h < hv; h++) {
        double dt = exp(log(1e-3) + RND() * (log(1e-1) - log(1e-3)));
        negA[h] = (float)-(1 + 15 * RND());
        dtb[h] = (float)(dt + log(-expm1(-dt)));
    }
    for (int i = 0; i < dv; i++) nw[i] = 1.0f;
    dn_layer L;
    memset(&L, 0, sizeof L);
    L.hidden = H; L.hk = hk; L.hv = hv; L.dk = dk; L.dv = dv; L.conv_k = K; L.eps = 1e-6f; L.layout = DN_SPLIT;
    ci_mat m[5] = { { wqkv, CI_F32, C, H, 0, 0, 0, 0 }, { wz, CI_F32, VD, H, 0, 0, 0, 0 }, { wb, CI_F32, hv, H, 0, 0, 0, 0 },
                    { wa, CI_F32, hv, H, 0, 0, 0, 0 }, { wo, CI_F32, H, VD, 0, 0, 0, 0 } };
    L.qkv = m[0]; L.z = m[1]; L.b = m[2]; L.a = m[3]; L.out = m[4];
    L.conv_w = malloc(sizeof(float) * C * K);
    for (int i = 0; i < C * K; i++) L.conv_w[i] = (float)(RND() - 0.5);
    L.neg_A = negA; L.dt_bias = dtb; L.norm_w = nw;
    L.ops = (ci_deltanet){ hk, hv, dk, dv, negA, dtb, nw, 1e-6f };
#undef RND
    if (threads == 1) bench_clock = CLOCK_PROCESS_CPUTIME_ID;
    ci_backend *be = ci_backend_cpu_new(threads, CI_ISA_AUTO);
    dn_scratch s;
    if (!be || dn_scratch_init(be, &s, &L, NB)) { fprintf(stderr, "bench: out of memory\n"); return 1; }
    float *state = calloc(dn_state_floats(&L), sizeof(float)), *out = malloc(sizeof(float) * NB * H);
    printf("bench DeltaNet mixer, Qwen3.5-35B-A3B head dims, hidden %d, %d tokens in %d-token calls, %s, %s\n", H, T, NB,
           be->name, threads == 1 ? "1 thread, CPU time" : "wall time");
    double tps[2];
    for (int mode = 1; mode >= 0; mode--) {
        dn_forward(be, &L, &s, state, out, x, NB, mode ? DN_RECURRENT : DN_AUTO);   /* warm-up */
        memset(state, 0, dn_state_floats(&L) * sizeof(float));
        double t0 = now_s();
        for (int done = 0; done < T; done += NB) dn_forward(be, &L, &s, state, out, x, NB, mode ? DN_RECURRENT : DN_AUTO);
        double dt = now_s() - t0;
        tps[mode] = T / dt;
        printf("  %-10s %8.1f tok/s (%.2f s)\n", mode ? "recurrent" : "chunked", tps[mode], dt);
    }
    printf("  chunked/recurrent: x%.2f\n", tps[0] / tps[1]);
    dn_scratch_free(be, &s);
    be->free(be);
    free(state); free(out); free(L.conv_w); free(wqkv); free(wz); free(wb); free(wa); free(wo); free(x);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 3 && !strcmp(argv[1], "--bench"))
        return bench(argv[2], argc > 3 ? atoi(argv[3]) : 4096, argc > 4 ? atoi(argv[4]) : 0);
    if (argc >= 2 && !strcmp(argv[1], "--bench-core"))
        return bench_core(argc > 2 ? atoi(argv[2]) : 4096, argc > 3 ? atoi(argv[3]) : 0);
    TEST_RUN(test_snapshot_restore);
    TEST_RUN(test_chunked_matches_recurrent);
    TEST_RUN(test_deltanet_modes);
    TEST_RUN(test_make_random);
    TEST_RUN(test_bad_input);
    TEST_EXIT();
}
