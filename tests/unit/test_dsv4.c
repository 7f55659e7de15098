/* test_dsv4.c — the deepseek_v4 family beyond parity: a make-random checkpoint of every layer
 * type run in one prefill, one token at a time, in uneven chunks and again after a session
 * reset (the compressors' window and overlap state must carry across calls and be emptied
 * by a reset); cache sizes; config errors; damaged checkpoints (hash table out of range,
 * missing fp8 / FP4 scales). Run from the repository root (the fixtures are read). */
#include "check.h"
#include "cinfer.h"
#include "tmpmodel.h"
#include "io/json.h"
#include "models/model.h"
#include "models/registry.h"
#include "cache/cache.h"
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define V4_CFG_X(shape, extra)                                                                             \
    "{\"model_type\": \"deepseek_v4\", \"vocab_size\": 64, \"hidden_size\": 32, \"num_hidden_layers\": 3, "  \
    "\"num_attention_heads\": 2, \"head_dim\": 16, \"q_lora_rank\": 24, " shape ", "                        \
    "\"qk_rope_head_dim\": 4, \"moe_intermediate_size\": 16, \"n_routed_experts\": 4, "                    \
    "\"num_experts_per_tok\": 2, \"n_shared_experts\": 1, \"routed_scaling_factor\": 1.5, "                \
    "\"hc_mult\": 3, \"sliding_window\": 5, \"o_lora_rank\": 8, \"index_n_heads\": 4, "                    \
    "\"index_topk\": 3, \"rms_norm_eps\": 1e-6, \"rope_theta\": 10000.0, "           \
    "\"max_position_embeddings\": 256, \"swiglu_limit\": 1.0" extra "}"
#define V4_SHAPE "\"num_key_value_heads\": 1, \"o_groups\": 2, \"index_head_dim\": 8"
#define V4_CFG(extra) V4_CFG_X(V4_SHAPE, extra)
#define V4_TYPES                                                                                           \
    ", \"layer_types\": [\"compressed_sparse_attention\", \"sliding_attention\", "                          \
    "\"heavily_compressed_attention\"], \"compress_rates\": {\"compressed_sparse_attention\": 4, "          \
    "\"heavily_compressed_attention\": 8}, \"mlp_layer_types\": [\"hash_moe\", \"moe\", \"moe\"]"

static const char *make_random_as(const char *cfg, const char *dtype, char *dir, size_t dn, char *err, size_t errlen) {
    return tm_make_random(cfg, dtype, 5, dir, dn, err, errlen);
}

static const char *make_random(const char *cfg, char *dir, size_t dn, char *err, size_t errlen) {
    return make_random_as(cfg, "f32", dir, dn, err, errlen);
}

#define rm_dir tm_rm_dir
#define expect_load_error tm_expect_load_error

static double max_diff(const float *a, const float *b, size_t n) {
    double md = 0;
    for (size_t i = 0; i < n; i++) md = fmax(md, fabs((double)a[i] - b[i]));
    return md;
}

/* 60 tokens (15 CSA entries > index_topk 3, 7 HCA entries, a 5-token window) three ways;
 * f32 weights, and DeepSeek's own formats as make-random writes them (fp8 matrices with E8M0
 * block scales, FP4 routed experts). */
static void chunking_and_reset(const char *dtype) {
    char dir[64], err[1024] = "";
    if (!make_random_as(V4_CFG(V4_TYPES), dtype, dir, sizeof dir, err, sizeof err)) { CHECK(0, "%s", err); return; }
    enum { T = 60, V = 64 };
    ci_model *m = NULL;
    ci_session *s = NULL;
    ci_model_opts o = { .n_threads = 1 };
    CHECK(ci_model_open(dir, &o, &m, err, sizeof err) == 0, "%s", err);
    if (m && !strcmp(dtype, "fp8-fp4")) {
        ci_model_info info;
        ci_model_get_info(m, &info);
        CHECK(info.bytes_by_dtype[6] > 0 && info.bytes_by_dtype[3] > 0 && info.bytes_by_dtype[5] > 0,
              "fp8-fp4 checkpoint without I8 / F8_E4M3 / F8_E8M0 tensors");
    }
    if (m && ci_session_new(m, T, &s, err, sizeof err) == 0) {
        int toks[T];
        for (int i = 0; i < T; i++) toks[i] = 3 + (i * 11) % 60;
        float *a = malloc(T * V * sizeof *a), *b = malloc(T * V * sizeof *b), *c = malloc(T * V * sizeof *c);
        CHECK(ci_forward(s, toks, T, a, 1, err, sizeof err) == 0, "%s", err);
        ci_session_reset(s);
        for (int t = 0; t < T; t++) CHECK(ci_forward(s, &toks[t], 1, b + t * V, 1, err, sizeof err) == 0, "%s", err);
        CHECK(isfinite(a[0]) && max_diff(a, b, T * V) < 1e-4, "prefill vs steps max|diff| %g", max_diff(a, b, T * V));
        ci_session_reset(s);
        static const int chunk[] = { 3, 7, 1, 13, 2, 9, 25 };
        int at = 0;
        for (int k = 0; at < T; k++) {
            int nn = chunk[k % 7] < T - at ? chunk[k % 7] : T - at;
            CHECK(ci_forward(s, toks + at, nn, c + at * V, 1, err, sizeof err) == 0, "%s", err);
            at += nn;
        }
        CHECK(max_diff(a, c, T * V) < 1e-4, "prefill vs uneven chunks max|diff| %g", max_diff(a, c, T * V));
        CHECK(ci_forward(s, toks, 1, a, 0, err, sizeof err) != 0, "forward past the context accepted");
        CHECK_HAS(err, "deepseek_v4");
        free(a); free(b); free(c);
    } else {
        CHECK(0, "%s", err);
    }
    ci_session_free(s);
    ci_model_free(m);
    rm_dir(dir);
}

static void test_chunking_and_reset(void) {
    chunking_and_reset("f32");
    chunking_and_reset("fp8-fp4");
}

/* A session shorter than index_topk x ratio holds fewer CSA entries than top-k, so its
 * selection rows are narrower than top-k: a 60-token session (15 entries) of a model with
 * index_topk 100 prefilled in one 60-row chunk, then in steps (this wrote past the rows'
 * buffer once). */
static void test_short_session_topk(void) {
    char cfg[2048], dir[64], err[1024] = "";
    snprintf(cfg, sizeof cfg, "%s", V4_CFG(V4_TYPES));
    char *k = strstr(cfg, "\"index_topk\": 3,");
    if (!k) { CHECK(0, "index_topk not in the test config"); return; }
    memcpy(k, "\"index_topk\":99,", strlen("\"index_topk\":99,"));
    if (!make_random(cfg, dir, sizeof dir, err, sizeof err)) { CHECK(0, "%s", err); return; }
    enum { T = 60, V = 64 };
    ci_model *m = NULL;
    ci_session *s = NULL;
    ci_model_opts o = { .n_threads = 1 };
    CHECK(ci_model_open(dir, &o, &m, err, sizeof err) == 0, "%s", err);
    if (m && ci_session_new(m, T, &s, err, sizeof err) == 0) {
        int toks[T];
        for (int i = 0; i < T; i++) toks[i] = 3 + (i * 7) % 60;
        float *a = malloc(T * V * sizeof *a), *b = malloc(T * V * sizeof *b);
        CHECK(ci_forward(s, toks, T, a, 1, err, sizeof err) == 0, "%s", err);
        ci_session_reset(s);
        for (int t = 0; t < T; t++) CHECK(ci_forward(s, &toks[t], 1, b + t * V, 1, err, sizeof err) == 0, "%s", err);
        CHECK(isfinite(a[0]) && max_diff(a, b, T * V) < 1e-4, "prefill vs steps max|diff| %g", max_diff(a, b, T * V));
        free(a); free(b);
    } else {
        CHECK(0, "%s", err);
    }
    ci_session_free(s);
    ci_model_free(m);
    rm_dir(dir);
}

/* The block pool holds KV_BLOCK / ratio entries a block: a model whose HCA ratio is 6 (not a
 * power of two) cannot page (ci_model_pageable 0, ci_model_kv_pool names the layer and the
 * ratio, one line), one with ratio 8 can; its sessions on the pool give the logits of its own. */
static void test_pool_ratios(void) {
    static const char *const rates[2] = { "6", "8" };
    for (int r = 0; r < 2; r++) {
        char cfg[2048], dir[64], err[1024] = "";
        const char *base = V4_CFG(V4_TYPES), *k = strstr(base, "\"heavily_compressed_attention\": 8}");
        if (!k) { CHECK(0, "the HCA rate not in the test config"); break; }
        snprintf(cfg, sizeof cfg, "%.*s\"heavily_compressed_attention\": %s}%s", (int)(k - base), base, rates[r],
                 k + strlen("\"heavily_compressed_attention\": 8}"));
        if (!make_random(cfg, dir, sizeof dir, err, sizeof err)) { CHECK(0, "%s", err); break; }
        ci_model *m = NULL, *own = NULL;
        ci_model_opts o = { .n_threads = 1 };
        CHECK(ci_model_open(dir, &o, &m, err, sizeof err) == 0 && ci_model_open(dir, &o, &own, err, sizeof err) == 0, "%s",
              err);
        if (m && r == 0) {
            CHECK(!ci_model_pageable(m), "ratio 6 pageable");
            CHECK(ci_model_kv_pool(m, 4, err, sizeof err) != 0, "a pool for ratio 6 accepted");
            CHECK_HAS(err, "layer 2 compresses 6 tokens an entry, not a power of two");
            CHECK(!strchr(err, '\n'), "one line: %s", err);
        }
        if (m && own && r == 1) {
            CHECK(ci_model_pageable(m) && ci_model_kv_pool(m, 4, err, sizeof err) == 0, "ratio 8: %s", err);
            enum { T = 200, V = 64 };
            ci_session *a = NULL, *b = NULL;
            CHECK(!ci_session_new(m, 256, &a, err, sizeof err) && !ci_session_new(own, 256, &b, err, sizeof err), "%s", err);
            if (a && b) {
                int toks[T];
                for (int i = 0; i < T; i++) toks[i] = 3 + (i * 7) % 60;
                float *la = malloc(V * sizeof *la), *lb = malloc(V * sizeof *lb);
                CHECK(!ci_forward(a, toks, T, la, 0, err, sizeof err) && !ci_forward(b, toks, T, lb, 0, err, sizeof err), "%s", err);
                CHECK(ci_session_pages_shared(a) && !memcmp(la, lb, V * sizeof *la), "pool vs own logits max|diff| %g",
                      max_diff(la, lb, V));
                free(la); free(lb);
            }
            ci_session_free(a);
            ci_session_free(b);
            /* snapshot_bytes bounds every snapshot and is reached (position 15: 3 of 4 and 7 of 8
             * tokens pending, the window full), on the pool and off it */
            const ci_family_ops *ops = m->family->ops;
            ci_model *ms[2] = { m, own };
            for (int pooled = 1; pooled >= 0 && ops->snapshot_bytes; pooled--) {
                ci_session *c = NULL;
                CHECK(!ci_session_new(ms[1 - pooled], 256, &c, err, sizeof err), "%s", err);
                const size_t most = ops->snapshot_bytes(ms[1 - pooled], 256, pooled);
                size_t seen = 0;
                int over = -1;
                for (int p = 0; c && p < 24; p++) {
                    int tk = 3 + (p * 7) % 60;
                    CHECK(!ci_forward(c, &tk, 1, NULL, 0, err, sizeof err), "%s", err);
                    cache_snap *sn = ops->snapshot(c, err, sizeof err);
                    const size_t b = sn ? cache_snap_bytes(sn) : 0;
                    if (b > most && over < 0) over = p + 1;
                    if (p + 1 == 15) seen = b;
                    cache_snap_free(sn);
                }
                CHECK(over < 0, "%s: a snapshot at %d over snapshot_bytes %zu", pooled ? "pooled" : "own", over, most);
                if (pooled) CHECK(seen == most, "pooled snapshot at 15: %zu bytes, snapshot_bytes %zu", seen, most);
                ci_session_free(c);
            }
        }
        ci_model_free(m);
        ci_model_free(own);
        rm_dir(dir);
    }
}

/* sliding_window comes from config.json alone: at its largest (2^24) a 16-token session
 * once sized each layer's ring and the key buffer by the window (a 2 GB malloc for 64-dim
 * rows, fuzz_model); they follow the context now, and the logits match a window of 16. */
static void test_huge_window(void) {
    enum { T = 16, V = 64 };
    float *lg[2] = { calloc(T * V, sizeof(float)), calloc(T * V, sizeof(float)) };
    static const char *const windows[2] = { "16777216", "16" };
    for (int w = 0; w < 2; w++) {
        char cfg[2048], dir[64], err[1024] = "";
        const char *base = V4_CFG(V4_TYPES), *k = strstr(base, "\"sliding_window\": 5,");
        if (!k) { CHECK(0, "sliding_window not in the test config"); break; }
        snprintf(cfg, sizeof cfg, "%.*s\"sliding_window\": %s,%s", (int)(k - base), base, windows[w],
                 k + strlen("\"sliding_window\": 5,"));
        if (!make_random(cfg, dir, sizeof dir, err, sizeof err)) { CHECK(0, "%s", err); break; }
        ci_model *m = NULL;
        ci_session *s = NULL;
        ci_model_opts o = { .n_threads = 1 };
        CHECK(ci_model_open(dir, &o, &m, err, sizeof err) == 0, "%s", err);
        if (m) CHECK(ci_model_cache_bytes(m, T) < (1u << 20), "cache of a %d-token session: %zu bytes", T, ci_model_cache_bytes(m, T));
        if (m && ci_session_new(m, T, &s, err, sizeof err) == 0) {
            int toks[T];
            for (int i = 0; i < T; i++) toks[i] = 3 + (i * 7) % 60;
            CHECK(ci_forward(s, toks, T, lg[w], 1, err, sizeof err) == 0, "%s", err);
        } else {
            CHECK(0, "%s", err);
        }
        ci_session_free(s);
        ci_model_free(m);
        rm_dir(dir);
    }
    CHECK(isfinite(lg[0][0]) && max_diff(lg[0], lg[1], T * V) == 0, "window 2^24 vs 16 max|diff| %g", max_diff(lg[0], lg[1], T * V));
    free(lg[0]); free(lg[1]);
}

/* Cache bytes: per token, the compressed entries (CSA: D/4 + Di/4 floats, HCA: D/8 floats);
 * a session also holds each layer's window ring and the compressors' window buffers. */
static void test_cache_bytes(void) {
    char dir[64], err[1024] = "";
    if (!make_random(V4_CFG(V4_TYPES), dir, sizeof dir, err, sizeof err)) { CHECK(0, "%s", err); return; }
    ci_model *m = NULL;
    ci_model_opts o = { .n_threads = 1 };
    CHECK(ci_model_open(dir, &o, &m, err, sizeof err) == 0, "%s", err);
    if (m) {
        ci_model_info info;
        ci_model_get_info(m, &info);
        size_t per = (size_t)ceil((16.0 / 4 + 8.0 / 4 + 16.0 / 8) * sizeof(float));
        CHECK(info.cache_bytes_per_token == per, "cache bytes per token %zu, expected %zu", info.cache_bytes_per_token, per);
        size_t a = ci_model_cache_bytes(m, 1000), b = ci_model_cache_bytes(m, 2000);
        CHECK(b > a && b - a >= 1000 * per - 64 && b - a <= 1000 * per + 256, "1k -> 2k tokens grows by %zu", b - a);
    }
    ci_model_free(m);
    rm_dir(dir);
}

static void test_config_errors(void) {
    expect_load_error(V4_CFG(", \"layer_types\": [\"sliding_attention\", \"full_attention\", \"sliding_attention\"]"),
                      "deepseek_v4: layer_types[1] is 'full_attention', expected sliding_attention");
    expect_load_error(V4_CFG(", \"compress_ratios\": [0, 3, 128, 0]"), "deepseek_v4: compress_ratios[1] must be 0, 4 or 128");
    expect_load_error(V4_CFG(", \"compress_ratios\": [0, 4]"), "'compress_ratios' must be a list of at least 3 integers");
    expect_load_error(V4_CFG(", \"mlp_layer_types\": [\"moe\", \"dense\", \"moe\"]"),
                      "deepseek_v4: mlp_layer_types[1] is 'dense', expected 'hash_moe' or 'moe'");
    expect_load_error(V4_CFG(", \"scoring_func\": \"softmax\""), "scoring_func 'softmax' is not supported");
    expect_load_error(V4_CFG(", \"hidden_act\": \"gelu\""), "hidden_act 'gelu' is not supported");
    expect_load_error(V4_CFG_X("\"num_key_value_heads\": 2, \"o_groups\": 2, \"index_head_dim\": 8", ""),
                      "key 'num_key_value_heads'");
    expect_load_error(V4_CFG_X("\"o_groups\": 3, \"index_head_dim\": 8", ""), "o_groups 3 must divide");
    expect_load_error(V4_CFG(", \"compress_rates\": {\"compressed_sparse_attention\": 0}"),
                      "compress_rates.compressed_sparse_attention must be a positive integer");
    expect_load_error(V4_CFG_X("\"o_groups\": 2, \"index_head_dim\": 2", ""), "qk_rope_head_dim 4 must be even and at most");
}

/* ---- damaged checkpoints: a copy of a fixture with one byte range or name changed ---------- */

/* Byte offset of a tensor's data in a safetensors file (-1 if absent). */
static long tensor_offset(const char *path, const char *tensor) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    uint64_t hl = 0;
    long off = -1;
    if (fread(&hl, 8, 1, f) == 1 && hl < (1u << 24)) {
        char *h = malloc(hl + 1), err[256];
        if (h && fread(h, 1, hl, f) == hl) {
            json_t *j = cj_parse(h, hl, path, err, sizeof err);
            const json_t *e = j ? json_object_get(j, tensor) : NULL;
            const json_t *o = e ? json_object_get(e, "data_offsets") : NULL;
            if (o) off = (long)(8 + hl + (uint64_t)json_integer_value(json_array_get(o, 0)));
            if (j) json_decref(j);
        }
        free(h);
    }
    fclose(f);
    return off;
}

static int patch(const char *path, long off, const void *bytes, size_t n) {
    FILE *f = fopen(path, "r+b");
    if (!f) return -1;
    int ok = fseek(f, off, SEEK_SET) == 0 && fwrite(bytes, 1, n, f) == n;
    return fclose(f) || !ok ? -1 : 0;
}

/* Renames a tensor in the header to a same-length name (the data stays where it was). */
static int rename_tensor(const char *path, const char *from, const char *to) {
    FILE *f = fopen(path, "r+b");
    if (!f) return -1;
    uint64_t hl = 0;
    int rc = -1;
    if (fread(&hl, 8, 1, f) == 1 && hl < (1u << 24) && strlen(from) == strlen(to)) {
        char *h = calloc(1, hl + 1);
        char q[300];
        snprintf(q, sizeof q, "\"%s\"", from);
        char *at = h && fread(h, 1, hl, f) == hl ? strstr(h, q) : NULL;
        if (at && fseek(f, 8 + (at - h) + 1, SEEK_SET) == 0 && fwrite(to, 1, strlen(to), f) == strlen(to)) rc = 0;
        free(h);
    }
    return fclose(f) || rc ? -1 : 0;
}

static void expect_open_error(const char *dir, const char *n1, const char *n2) {
    ci_model *m = NULL;
    ci_model_opts o = { .n_threads = 1 };
    char err[1024] = "";
    CHECK(ci_model_open(dir, &o, &m, err, sizeof err) < 0, "damaged checkpoint %s accepted", dir);
    CHECK_HAS(err, "deepseek_v4");
    CHECK_HAS(err, n1);
    if (n2) CHECK_HAS(err, n2);
    ci_model_free(m);
}

static void test_damaged(void) {
    char dir[64], st[600];
    /* a hash table entry naming expert 99 of 8 */
    if (tm_copy_fixture("deepseek_v4_hub", dir, sizeof dir)) { CHECK(0, "copy failed"); return; }
    snprintf(st, sizeof st, "%s/model.safetensors", dir);
    long off = tensor_offset(st, "layers.0.ffn.gate.tid2eid");
    int32_t bad = 99;
    CHECK(off > 0 && patch(st, off + 5 * 2 * 4 + 4, &bad, 4) == 0, "patch failed");
    expect_open_error(dir, "tensor 'layers.0.ffn.gate.tid2eid' entry [5, 1] is 99, expected a value in [0, 8)", NULL);
    rm_dir(dir);
    /* an FP4 expert without its scales, an fp8 matrix without its block scales */
    if (tm_copy_fixture("deepseek_v4_fp8", dir, sizeof dir)) { CHECK(0, "copy failed"); return; }
    snprintf(st, sizeof st, "%s/model.safetensors", dir);
    CHECK(rename_tensor(st, "layers.2.ffn.experts.3.w2.scale", "layers.2.ffn.experts.3.w2.scalf") == 0, "rename failed");
    expect_open_error(dir, "'layers.2.ffn.experts.3.w2.weight' is I8 (FP4 codes) but 'layers.2.ffn.experts.3.w2.scale'",
                      "is missing");
    rm_dir(dir);
    if (tm_copy_fixture("deepseek_v4_fp8", dir, sizeof dir)) { CHECK(0, "copy failed"); return; }
    snprintf(st, sizeof st, "%s/model.safetensors", dir);
    CHECK(rename_tensor(st, "layers.1.attn.wq_b.scale", "layers.1.attn.wq_b.scalf") == 0, "rename failed");
    expect_open_error(dir, "tensor 'layers.1.attn.wq_b.weight' is F8_E4M3 but its block scales 1x1", "layers.1.attn.wq_b.scale");
    rm_dir(dir);
    /* a compressor position bias of the wrong window length */
    if (tm_copy_fixture("deepseek_v4", dir, sizeof dir)) { CHECK(0, "copy failed"); return; }
    char cfg[600];
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    char err[256];
    json_t *c = cj_load_file(cfg, err, sizeof err);
    CHECK(c != NULL, "%s", err);
    if (c) {
        json_t *r = json_object_get(c, "compress_rates");
        json_object_set_new(r, "heavily_compressed_attention", json_integer(16));
        CHECK(json_dump_file(c, cfg, 0) == 0, "cannot write %s", cfg);
        json_decref(c);
        expect_open_error(dir, "model.layers.2.attn.compressor.ape", "expected [16, 32]");
    }
    rm_dir(dir);
}

/* Batched decode steps (the server's forward_batch) give each sequence exactly the logits
 * of stepping it alone: three sequences at different points of their windows (9, 17 and 30
 * prompt tokens; CSA windows of 4, HCA of 8), 12 steps. */
static void test_forward_batch(void) {
    char dir[64], err[1024] = "";
    if (!make_random(V4_CFG(V4_TYPES), dir, sizeof dir, err, sizeof err)) { CHECK(0, "%s", err); return; }
    enum { V = 64, NS = 3, STEPS = 12 };
    ci_model *m = NULL;
    ci_model_opts o = { .n_threads = 1 };
    CHECK(ci_model_open(dir, &o, &m, err, sizeof err) == 0, "%s", err);
    ci_session *a[NS] = { 0 }, *b[NS] = { 0 };
    const int plen[NS] = { 9, 17, 30 };
    int ok = m != NULL && m->family->ops->forward_batch != NULL;
    CHECK(ok, "no model or no forward_batch");
    for (int i = 0; ok && i < NS; i++) {
        ok = !ci_session_new(m, 64, &a[i], err, sizeof err) && !ci_session_new(m, 64, &b[i], err, sizeof err);
        int toks[30];
        for (int t = 0; t < plen[i]; t++) toks[t] = 3 + (t * 13 + i * 7) % 60;
        ok = ok && !ci_forward(a[i], toks, plen[i], NULL, 0, err, sizeof err) &&
             !ci_forward(b[i], toks, plen[i], NULL, 0, err, sizeof err);
    }
    CHECK(ok, "%s", err);
    float la[NS * V], lb[V];
    int tok[NS] = { 5, 6, 7 };
    for (int step = 0; ok && step < STEPS; step++) {
        CHECK(m->family->ops->forward_batch(a, tok, NS, la, err, sizeof err) == 0, "%s", err);
        for (int i = 0; i < NS; i++) {
            CHECK(ci_forward(b[i], &tok[i], 1, lb, 0, err, sizeof err) == 0, "%s", err);
            CHECK(memcmp(la + i * V, lb, sizeof lb) == 0, "step %d sequence %d: batched logits differ", step, i);
            CHECK(ci_session_pos(a[i]) == ci_session_pos(b[i]), "positions differ");
            tok[i] = 3 + (tok[i] * 17 + step) % 60;
        }
        if (check_case_failed) break;
    }
    ci_session *twice[2] = { a[0], a[0] };
    CHECK(m && m->family->ops->forward_batch(twice, tok, 2, la, err, sizeof err) != 0, "a session twice accepted");
    CHECK_HAS(err, "deepseek_v4: forward_batch: sequence 1 appears twice");
    for (int i = 0; i < NS; i++) { ci_session_free(a[i]); ci_session_free(b[i]); }
    ci_model_free(m);
    rm_dir(dir);
}

/* Snapshots: a session snapshotted at 23 tokens, restored into another session, continues
 * exactly as the original does (the window ring, the pending windows, the overlap state and
 * the entries all come back); a session moved back without a restore is refused. */
static void test_snapshot(void) {
    char dir[64], err[1024] = "";
    if (!make_random(V4_CFG(V4_TYPES), dir, sizeof dir, err, sizeof err)) { CHECK(0, "%s", err); return; }
    enum { V = 64, P = 23, N = 10 };
    ci_model *m = NULL;
    ci_model_opts o = { .n_threads = 1 };
    ci_session *a = NULL, *b = NULL;
    cache_snap *snap = NULL;
    CHECK(ci_model_open(dir, &o, &m, err, sizeof err) == 0, "%s", err);
    if (m && !ci_session_new(m, 64, &a, err, sizeof err) && !ci_session_new(m, 40, &b, err, sizeof err)) {
        int toks[P + N];
        for (int t = 0; t < P + N; t++) toks[t] = 3 + (t * 19) % 60;
        float la[N * V], lb[N * V];
        CHECK(ci_forward(b, toks + 5, 7, NULL, 0, err, sizeof err) == 0, "%s", err);   /* b holds something else */
        CHECK(ci_forward(a, toks, P, NULL, 0, err, sizeof err) == 0, "%s", err);
        snap = m->family->ops->snapshot(a, err, sizeof err);
        CHECK(snap != NULL, "%s", err);
        CHECK(ci_forward(a, toks + P, N, la, 1, err, sizeof err) == 0, "%s", err);
        if (snap) {
            CHECK(m->family->ops->restore(b, snap, err, sizeof err) == 0, "%s", err);
            CHECK(ci_session_pos(b) == P, "restored position %d", ci_session_pos(b));
            CHECK(ci_forward(b, toks + P, N, lb, 1, err, sizeof err) == 0, "%s", err);
            CHECK(memcmp(la, lb, sizeof la) == 0, "the restored session continues differently");
        }
        a->pos = 5;
        CHECK(ci_forward(a, toks, 1, NULL, 0, err, sizeof err) != 0, "a rewound session was accepted");
        CHECK_HAS(err, "deepseek_v4: session at position 5 but its cache is at 33");
        ci_session_reset(a);
        CHECK(ci_forward(a, toks, 3, NULL, 0, err, sizeof err) == 0, "after a reset: %s", err);
    } else {
        CHECK(0, "%s", err);
    }
    cache_snap_free(snap);
    ci_session_free(a);
    ci_session_free(b);
    ci_model_free(m);
    rm_dir(dir);
}

/* A snapshot whose window wraps around the ring (ring rows = window 5 + 256: positions 260..263
 * at rows 260, 0, 1, 2), on the block pool and off it: restored into another session (pooled:
 * after taking a's blocks), the same logits as the uninterrupted run. */
static void test_snapshot_wrap(void) {
    char dir[64], err[1024] = "";
    if (!make_random(V4_CFG(V4_TYPES), dir, sizeof dir, err, sizeof err)) { CHECK(0, "%s", err); return; }
    enum { V = 64, P = 264, N = 6 };
    for (int pooled = 0; pooled < 2; pooled++) {
        ci_model *m = NULL;
        ci_model_opts o = { .n_threads = 1 };
        ci_session *a = NULL, *b = NULL;
        cache_snap *snap = NULL;
        CHECK(ci_model_open(dir, &o, &m, err, sizeof err) == 0 && (!pooled || !ci_model_kv_pool(m, 8, err, sizeof err)),
              "%s", err);
        if (m && !ci_session_new(m, 300, &a, err, sizeof err) && !ci_session_new(m, 300, &b, err, sizeof err)) {
            int toks[P + N];
            for (int t = 0; t < P + N; t++) toks[t] = 3 + (t * 19) % 60;
            float la[N * V], lb[N * V];
            CHECK(ci_forward(a, toks, P, NULL, 0, err, sizeof err) == 0, "%s", err);
            snap = m->family->ops->snapshot(a, err, sizeof err);
            CHECK(snap != NULL, "%s", err);
            CHECK(ci_forward(a, toks + P, N, la, 1, err, sizeof err) == 0, "%s", err);
            /* pooled: a names its blocks up to P, the partly filled third too (its entries of
             * positions 256..263: two CSA, one HCA), and lets them go, as a server's slot does;
             * b takes them */
            if (pooled) {
                ci_session_publish(a, toks, P, 1);
                ci_session_truncate(a, 0);
                CHECK(ci_session_match(b, toks, P + N, P) == P, "matched %d", ci_session_pos(b));
            }
            if (snap) {
                CHECK(m->family->ops->restore(b, snap, err, sizeof err) == 0, "%s", err);
                CHECK(ci_forward(b, toks + P, N, lb, 1, err, sizeof err) == 0, "%s", err);
                CHECK(memcmp(la, lb, sizeof la) == 0, "%s: the restored session continues differently",
                      pooled ? "pooled" : "own");
            }
        } else {
            CHECK(0, "%s", err);
        }
        cache_snap_free(snap);
        ci_session_free(a);
        ci_session_free(b);
        ci_model_free(m);
    }
    rm_dir(dir);
}

int main(void) {
    TEST_RUN(test_chunking_and_reset);
    TEST_RUN(test_snapshot_wrap);
    TEST_RUN(test_short_session_topk);
    TEST_RUN(test_cache_bytes);
    TEST_RUN(test_huge_window);
    TEST_RUN(test_pool_ratios);
    TEST_RUN(test_config_errors);
    TEST_RUN(test_damaged);
    TEST_RUN(test_forward_batch);
    TEST_RUN(test_snapshot);
    TEST_EXIT();
}
