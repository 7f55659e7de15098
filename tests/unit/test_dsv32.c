/* test_dsv32.c — the deepseek_v32 family beyond parity: the indexer's top-k selection
 * against a brute-force ranking, prefill in chunks that start mid-way through the dense
 * prefix (a chunk whose first rows still fit in index_topk and whose last rows do not), the
 * make-random round trip with the indexer tensors, the dual cache's size, and config and
 * checkpoint errors. Run from the repository root (the fixtures are read). */
#include "check.h"
#include "tmpmodel.h"
#include "cinfer.h"
#include "io/json.h"
#include "models/model.h"
#include "nn/dsa.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- dsa_select ----------------------------------------------------------------------- */

static uint64_t rng = 88172645463325252ull;
static uint64_t next_u64(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }

/* Position p is kept iff fewer than topk positions rank before it (higher score, or the same
 * score at a lower position; NaN ranks as -inf). */
static int kept_brute(const float *sc, int L, int topk, int p) {
    float sp = isnan(sc[p]) ? -INFINITY : sc[p];
    int before = 0;
    for (int q = 0; q < L; q++) {
        float sq = isnan(sc[q]) ? -INFINITY : sc[q];
        before += sq > sp || (sq == sp && q < p);
    }
    return before < topk;
}

static void test_select(void) {
    float sc[80];
    int32_t sel[80];
    for (int iter = 0; iter < 3000; iter++) {
        int L = 1 + (int)(next_u64() % 70), topk = 1 + (int)(next_u64() % 24);
        int levels = 1 + (int)(next_u64() % 8); /* few levels: many ties */
        for (int i = 0; i < L; i++) {
            uint64_t r = next_u64();
            sc[i] = r % 17 == 0 ? NAN : r % 13 == 0 ? -INFINITY : (float)((int)(r >> 8) % levels) - 2.0f;
        }
        /* the indexer maps NaN to -inf before selecting; dsa_select sees what the caller gives */
        for (int i = 0; i < L; i++)
            if (isnan(sc[i])) sc[i] = -INFINITY;
        int k = dsa_select(sc, L, topk, sel);
        int want = L < topk ? L : topk;
        CHECK(k == want, "L %d topk %d: kept %d", L, topk, k);
        for (int j = 1; j < k; j++) CHECK(sel[j - 1] < sel[j], "not ascending at %d", j);
        for (int j = 0; j < k; j++) CHECK(kept_brute(sc, L, topk, sel[j]), "L %d topk %d: position %d kept", L, topk, sel[j]);
        if (check_case_failed) return;
    }
}

/* ---- chunked prefill ------------------------------------------------------------------ */

static int read_ref(const char *dir, int **toks, float **want, int *V, double *tol) {
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/ref.json", dir);
    json_t *ref = cj_load_file(path, err, sizeof err);
    if (!ref) return 0;
    const json_t *a = json_object_get(ref, "tokens");
    int T = (int)json_array_size(a);
    *V = (int)json_integer_value(json_object_get(ref, "vocab_size"));
    double mr = json_real_value(json_object_get(ref, "max_abs_ref"));
    *tol = 1e-3 * (mr > 1 ? mr : 1);
    *toks = malloc((size_t)T * sizeof **toks);
    for (int i = 0; i < T; i++) (*toks)[i] = (int)json_integer_value(json_array_get(a, (size_t)i));
    json_decref(ref);
    *want = malloc((size_t)T * (size_t)*V * sizeof **want);
    snprintf(path, sizeof path, "%s/ref_logits.f32", dir);
    FILE *f = fopen(path, "rb");
    size_t got = f ? fread(*want, sizeof **want, (size_t)T * (size_t)*V, f) : 0;
    if (f) fclose(f);
    return got == (size_t)T * (size_t)*V ? T : 0;
}

/* The prompt fed in chunks of `chunk` tokens gives the reference logits. With index_topk 8,
 * chunks of 3, 5 and 7 start inside the dense prefix and cross it (rows 6..10, 5..9, 7..13). */
static void chunked(const char *dir, const int *chunks, int n_chunks) {
    char err[1024];
    int *toks = NULL, V = 0;
    float *want = NULL;
    double tol = 0;
    int T = read_ref(dir, &toks, &want, &V, &tol);
    CHECK(T > 0, "%s: reference unreadable", dir);
    ci_model *m = NULL;
    ci_session *s = NULL;
    ci_model_opts o = { .n_threads = 0 };
    if (T > 0 && ci_model_open(dir, &o, &m, err, sizeof err)) CHECK(0, "%s: %s", dir, err);
    if (m && ci_session_new(m, T, &s, err, sizeof err)) CHECK(0, "%s: %s", dir, err);
    float *got = malloc((size_t)(T > 0 ? T : 1) * (size_t)(V > 0 ? V : 1) * sizeof *got);
    for (int c = 0; s && c < n_chunks; c++) {
        ci_session_reset(s);
        int rc = 0;
        for (int off = 0; off < T && !rc; off += chunks[c]) {
            int k = T - off < chunks[c] ? T - off : chunks[c];
            rc = ci_forward(s, toks + off, k, got + (size_t)off * V, 1, err, sizeof err);
        }
        CHECK(rc == 0, "%s", err);
        double md = 0;
        for (size_t i = 0; i < (size_t)T * V; i++) md = fmax(md, fabs((double)got[i] - want[i]));
        CHECK(md <= tol, "%s: chunks of %d: max|diff| %g > %g", dir, chunks[c], md, tol);
    }
    ci_session_free(s);
    ci_model_free(m);
    free(got); free(toks); free(want);
}

static void test_chunked_prefill(void) {
    static const int small[] = { 3, 5, 7, 16 }, big[] = { 100, 37 };
    chunked("tests/fixtures/deepseek_v32", small, 4);
    chunked("tests/fixtures/deepseek_v32_long", big, 2);
}

/* ---- cache export / import ------------------------------------------------------------ */

/* Rows [0, 30) exported after a 30-token prefill, imported into a fresh session, which then
 * takes the rest one token at a time: the logits are bit-identical to the first session's
 * (both caches travel). Importing only the first 20 rows' worth of the same blob (a prefix
 * of a position-major export) and feeding tokens 20.. gives the reference logits. */
static void test_cache_export_import(void) {
    const char *dir = "tests/fixtures/deepseek_v32";
    char err[1024];
    int *toks = NULL, V = 0;
    float *want = NULL;
    double tol = 0;
    int T = read_ref(dir, &toks, &want, &V, &tol);
    CHECK(T == 48, "%s: expected 48 tokens", dir);
    ci_model *m = NULL;
    ci_session *a = NULL, *b = NULL;
    ci_model_opts o = { .n_threads = 0 };
    if (T != 48 || ci_model_open(dir, &o, &m, err, sizeof err)) { CHECK(0, "%s", err); free(toks); free(want); return; }
    const ci_family_ops *ops = m->family->ops;
    CHECK(ops->cache_export && ops->cache_import, "no cache export/import");
    float *la = malloc((size_t)T * V * sizeof *la), *lb = malloc((size_t)T * V * sizeof *lb);
    size_t bytes = ops->cache_bytes_per_token(m) * 30;
    void *blob = malloc(bytes);
    if (ops->cache_export && ci_session_new(m, T, &a, err, sizeof err) == 0 && ci_session_new(m, T, &b, err, sizeof err) == 0) {
        CHECK(ci_forward(a, toks, 30, NULL, 0, err, sizeof err) == 0, "%s", err);
        CHECK(ops->cache_export(a, 31, blob, err, sizeof err) != 0, "export of more rows than held accepted");
        CHECK(ops->cache_export(a, 30, blob, err, sizeof err) == 0, "%s", err);
        CHECK(ops->cache_import(b, 30, blob, err, sizeof err) == 0 && ci_session_pos(b) == 30, "%s", err);
        int rc = 0;
        for (int t = 30; t < T && !rc; t++) {
            rc = ci_forward(a, &toks[t], 1, la + (size_t)t * V, 1, err, sizeof err) ||
                 ci_forward(b, &toks[t], 1, lb + (size_t)t * V, 1, err, sizeof err);
        }
        CHECK(rc == 0, "%s", err);
        CHECK(!memcmp(la + 30 * V, lb + 30 * V, (size_t)(T - 30) * V * sizeof *la), "imported session differs");
        /* position-major export: its first 20 rows' worth is the export of [0, 20) */
        CHECK(ops->cache_import(b, 20, blob, err, sizeof err) == 0 && ci_session_pos(b) == 20, "%s", err);
        CHECK(ci_forward(b, toks + 20, T - 20, lb + 20 * V, 1, err, sizeof err) == 0, "%s", err);
        double md = 0;
        for (size_t i = 20 * (size_t)V; i < (size_t)T * V; i++) md = fmax(md, fabs((double)lb[i] - want[i]));
        CHECK(md <= tol, "after import of 20 rows: max|diff| %g", md);
    } else {
        CHECK(0, "%s", err);
    }
    ci_session_free(a);
    ci_session_free(b);
    ci_model_free(m);
    free(blob); free(la); free(lb); free(toks); free(want);
}

/* ---- make-random, cache size, errors -------------------------------------------------- */

#define V32_CFG_TQ(type, q_lora, extra)                                                                              \
    "{\"model_type\": \"" type "\", \"vocab_size\": 64, \"hidden_size\": 32, \"intermediate_size\": 48, "      \
    "\"moe_intermediate_size\": 16, \"num_hidden_layers\": 2, \"num_attention_heads\": 2, "                        \
    "\"num_key_value_heads\": 2, \"q_lora_rank\": " q_lora ", \"kv_lora_rank\": 16, \"qk_nope_head_dim\": 8, "             \
    "\"qk_rope_head_dim\": 4, \"v_head_dim\": 8, \"n_routed_experts\": 4, \"num_experts_per_tok\": 2, "            \
    "\"n_shared_experts\": 1, \"first_k_dense_replace\": 1, \"moe_layer_freq\": 1, \"rms_norm_eps\": 1e-6, "        \
    "\"rope_theta\": 10000.0, \"max_position_embeddings\": 256" extra "}"
#define V32_CFG_Q(q_lora, extra) V32_CFG_TQ("deepseek_v32", q_lora, extra)
#define V32_CFG(extra) V32_CFG_Q("24", extra)
#define V32_INDEXER ", \"index_n_heads\": 4, \"index_head_dim\": 12, \"index_topk\": 4"

static const char *make_random(const char *cfg, char *dir, size_t dn, char *err, size_t errlen) {
    return tm_make_random(cfg, "f32", 11, dir, dn, err, errlen);
}

#define rm_dir tm_rm_dir

static void write_config(const char *dir, const char *cfg) {
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (f) { fputs(cfg, f); fclose(f); }
}

/* make-random writes the indexer tensors; the folder loads (also as deepseek_v3_2, there with
 * the interleaved indexer rope), runs 20 tokens (past index_topk 4) in one prefill and one by
 * one with the same logits, and says its cache costs n_layers · (kv_lora + rope +
 * index_head_dim) floats per token. */
static void test_make_random_round_trip(void) {
    char dir[64], err[1024] = "";
    if (!make_random(V32_CFG(V32_INDEXER), dir, sizeof dir, err, sizeof err)) { CHECK(0, "%s", err); return; }
    for (int alias = 0; alias < 2; alias++) {
        if (alias) write_config(dir, V32_CFG_TQ("deepseek_v3_2", "24", V32_INDEXER ", \"indexer_rope_interleave\": true"));
        ci_model *m = NULL;
        ci_session *s = NULL;
        ci_model_opts o = { .n_threads = 1 };
        CHECK(ci_model_open(dir, &o, &m, err, sizeof err) == 0, "%s", err);
        if (!m) break;
        ci_model_info info;
        ci_model_get_info(m, &info);
        CHECK(info.cache_bytes_per_token == 2 * (16 + 4 + 12) * sizeof(float), "cache bytes per token %zu",
              info.cache_bytes_per_token);
        int toks[20];
        for (int i = 0; i < 20; i++) toks[i] = 3 + (i * 7) % 60;
        float *a = malloc(20 * 64 * sizeof *a), *b = malloc(20 * 64 * sizeof *b);
        if (!ci_session_new(m, 20, &s, err, sizeof err)) {
            CHECK(ci_forward(s, toks, 20, a, 1, err, sizeof err) == 0, "%s", err);
            ci_session_reset(s);
            for (int t = 0; t < 20; t++) CHECK(ci_forward(s, &toks[t], 1, b + t * 64, 1, err, sizeof err) == 0, "%s", err);
            double md = 0;
            for (int i = 0; i < 20 * 64; i++) md = fmax(md, fabs((double)a[i] - b[i]));
            CHECK(isfinite(a[0]) && md < 1e-4, "prefill vs steps max|diff| %g", md);
            CHECK(ci_forward(s, toks, 1, a, 0, err, sizeof err) != 0, "forward past the context accepted");
            CHECK_HAS(err, "deepseek_v32: 1 tokens at position 20 exceed the context of 20");
        } else {
            CHECK(0, "%s", err);
        }
        free(a); free(b);
        ci_session_free(s);
        ci_model_free(m);
    }
    rm_dir(dir);
}

#define expect_load_error tm_expect_load_error

static void test_config_errors(void) {
    expect_load_error(V32_CFG(", \"index_n_heads\": 4, \"index_head_dim\": 12"), "required key 'index_topk' is missing");
    expect_load_error(V32_CFG(", \"index_topk\": 4, \"index_head_dim\": 12"), "required key 'index_n_heads' is missing");
    expect_load_error(V32_CFG_Q("null", V32_INDEXER),
                      "deepseek_v32: q_lora_rank is required (the DSA indexer reads the q latent)");
    expect_load_error(V32_CFG(", \"index_n_heads\": 4, \"index_head_dim\": 2, \"index_topk\": 4"),
                      "deepseek_v32: index_head_dim 2 is smaller than qk_rope_head_dim 4");
    expect_load_error(V32_CFG(V32_INDEXER ", \"mlp_layer_types\": [\"dense\"]"),
                      "deepseek_v32: 'mlp_layer_types' must be a list of 2 strings");
    expect_load_error(V32_CFG(V32_INDEXER ", \"mlp_layer_types\": [\"dense\", \"moe\"]"),
                      "deepseek_v32: mlp_layer_types[1] is 'moe', expected 'dense' or 'sparse'");
    expect_load_error(V32_CFG(V32_INDEXER ", \"indexer_rope_interleave\": 3"), "indexer_rope_interleave");
}

/* A checkpoint whose indexer is narrower than the config says is refused, naming the tensor. */
static void test_bad_indexer_shape(void) {
    char dir[64], err[1024] = "";
    if (!make_random(V32_CFG(V32_INDEXER), dir, sizeof dir, err, sizeof err)) { CHECK(0, "%s", err); return; }
    write_config(dir, V32_CFG(", \"index_n_heads\": 4, \"index_head_dim\": 16, \"index_topk\": 4"));
    ci_model *m = NULL;
    ci_model_opts o = { .n_threads = 1 };
    CHECK(ci_model_open(dir, &o, &m, err, sizeof err) < 0, "index_head_dim 16 accepted a 12-wide indexer");
    CHECK_HAS(err, "deepseek_v32");
    CHECK_HAS(err, "model.layers.0.self_attn.indexer.wq_b.weight");
    ci_model_free(m);
    rm_dir(dir);
}

int main(void) {
    TEST_RUN(test_select);
    TEST_RUN(test_chunked_prefill);
    TEST_RUN(test_cache_export_import);
    TEST_RUN(test_make_random_round_trip);
    TEST_RUN(test_config_errors);
    TEST_RUN(test_bad_indexer_shape);
    TEST_EXIT();
}
