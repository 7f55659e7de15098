/* test_lfm2.c — the LFM2 families beyond parity: the session cache (snapshot / restore,
 * chunked prefill), the config dialects' derived shapes, and make-random round trips.
 *
 * Snapshot / restore: prefill 24 tokens, snapshot, continue with 16; restore the snapshot
 * (into the same session and into a fresh one) and feed the same 16 tokens: the logits must
 * be bit-identical, in one prefill and one token at a time. Run from the repository root. */
#include "check.h"
#include "tmpmodel.h"
#include "cinfer.h"
#include "io/config.h"
#include "io/json.h"
#include "models/lfm2.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int read_tokens(const char *dir, int *toks, int max) {
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/ref.json", dir);
    json_t *ref = cj_load_file(path, err, sizeof err);
    if (!ref) return 0;
    const json_t *a = json_object_get(ref, "tokens");
    int n = (int)json_array_size(a);
    if (n > max) n = max;
    for (int i = 0; i < n; i++) toks[i] = (int)json_integer_value(json_array_get(a, (size_t)i));
    json_decref(ref);
    return n;
}

static void snapshot_restore(const char *dir) {
    char err[1024];
    int toks[40];
    CHECK(read_tokens(dir, toks, 40) == 40, "%s: needs 40 tokens in ref.json", dir);
    ci_model *m = NULL;
    ci_session *s = NULL, *s2 = NULL;
    ci_model_opts o = { .n_threads = 0 };
    if (ci_model_open(dir, &o, &m, err, sizeof err)) { CHECK(0, "%s: %s", dir, err); return; }
    ci_model_info info;
    ci_model_get_info(m, &info);
    const int V = info.vocab_size, N = 16;
    float *a = malloc((size_t)N * V * sizeof *a), *b = malloc((size_t)N * V * sizeof *b);
    CHECK(ci_session_new(m, 64, &s, err, sizeof err) == 0 && ci_session_new(m, 64, &s2, err, sizeof err) == 0, "%s", err);
    for (int step = 0; s && s2 && step < 2; step++) {
        ci_session_reset(s);
        CHECK(ci_forward(s, toks, 24, NULL, 0, err, sizeof err) == 0, "%s", err);
        cache_snap *snap = lfm2_snapshot(s, err, sizeof err);
        CHECK(snap != NULL, "%s", err);
        if (!snap) break;
        CHECK(cache_snap_pos(snap) == 24, "snapshot at %d", cache_snap_pos(snap));
        CHECK(tm_feed(s, toks + 24, N, step, a, V, err, sizeof err) == 0, "%s", err);
        CHECK(ci_session_pos(s) == 40, "pos %d after 40 tokens", ci_session_pos(s));
        /* the same session, rewound by the snapshot */
        CHECK(lfm2_restore(s, snap, err, sizeof err) == 0, "%s", err);
        CHECK(ci_session_pos(s) == 24, "pos %d after restore", ci_session_pos(s));
        CHECK(tm_feed(s, toks + 24, N, step, b, V, err, sizeof err) == 0, "%s", err);
        CHECK(!memcmp(a, b, (size_t)N * V * sizeof *a), "%s step=%d: logits after restore differ", dir, step);
        /* another session that has seen other tokens */
        ci_session_reset(s2);
        CHECK(ci_forward(s2, toks + 10, 30, NULL, 0, err, sizeof err) == 0, "%s", err);
        CHECK(lfm2_restore(s2, snap, err, sizeof err) == 0, "%s", err);
        memset(b, 0, (size_t)N * V * sizeof *b);
        CHECK(tm_feed(s2, toks + 24, N, step, b, V, err, sizeof err) == 0, "%s", err);
        CHECK(!memcmp(a, b, (size_t)N * V * sizeof *a), "%s step=%d: logits in a restored fresh session differ", dir, step);
        cache_snap_free(snap);
    }
    ci_session_free(s);
    ci_session_free(s2);
    ci_model_free(m);
    free(a);
    free(b);
}

static void test_snapshot_restore_lfm2(void) { snapshot_restore("tests/fixtures/lfm2"); }
static void test_snapshot_restore_lfm2_moe(void) { snapshot_restore("tests/fixtures/lfm2_moe"); }

static void test_snapshot_errors(void) {
    char err[1024] = "";
    ci_model_opts o = { .n_threads = 0 };
    ci_model *a = NULL, *b = NULL, *q = NULL;
    ci_session *sa = NULL, *sb = NULL, *sq = NULL, *small = NULL;
    int toks[8] = { 5, 6, 7, 8, 9, 10, 11, 12 };
    CHECK(ci_model_open("tests/fixtures/lfm2", &o, &a, err, sizeof err) == 0, "%s", err);
    CHECK(ci_model_open("tests/fixtures/lfm2_hub", &o, &b, err, sizeof err) == 0, "%s", err);
    CHECK(ci_model_open("tests/fixtures/qwen3_tied", &o, &q, err, sizeof err) == 0, "%s", err);
    if (!a || !b || !q) goto done;
    CHECK(ci_session_new(a, 32, &sa, err, sizeof err) == 0 && ci_session_new(b, 32, &sb, err, sizeof err) == 0 &&
          ci_session_new(q, 32, &sq, err, sizeof err) == 0 && ci_session_new(a, 4, &small, err, sizeof err) == 0, "%s", err);
    if (!sa || !sb || !sq || !small) goto done;
    CHECK(ci_forward(sa, toks, 8, NULL, 0, err, sizeof err) == 0, "%s", err);
    cache_snap *snap = lfm2_snapshot(sa, err, sizeof err);
    CHECK(snap != NULL, "%s", err);
    if (snap) {
        CHECK(lfm2_restore(sb, snap, err, sizeof err) < 0, "5-layer snapshot restored into a 3-layer session");
        CHECK_HAS(err, "lfm2: cache restore: the snapshot was taken from a cache of another shape");
        CHECK(lfm2_restore(small, snap, err, sizeof err) < 0, "snapshot at 8 restored into a 4-token session");
        CHECK_HAS(err, "exceeds the context of 4");
        CHECK(lfm2_restore(sq, snap, err, sizeof err) < 0, "restored into a qwen3 session");
        CHECK_HAS(err, "qwen3: not an lfm2 / lfm2_moe session");
        cache_snap_free(snap);
    }
    CHECK(lfm2_snapshot(sq, err, sizeof err) == NULL, "snapshot of a qwen3 session");
    CHECK_HAS(err, "qwen3: not an lfm2 / lfm2_moe session");
    CHECK(lfm2_set_chunk(sa, 0, err, sizeof err) < 0, "chunk 0 accepted");
    CHECK_HAS(err, "lfm2: prefill chunk 0 is outside 1..256");
done:
    ci_session_free(sa); ci_session_free(sb); ci_session_free(sq); ci_session_free(small);
    ci_model_free(a); ci_model_free(b); ci_model_free(q);
}

/* The 300-token prompt in chunks of 256 (the default), 7 and 1: every chunking gives the
 * reference logits, i.e. the conv state and KV rows carry across chunk boundaries. */
static void test_chunked_prefill(void) {
    const char *dir = "tests/fixtures/lfm2";
    char err[1024], path[512];
    static int toks[300];
    int T = read_tokens(dir, toks, 300);
    CHECK(T == 300, "expected 300 tokens, got %d", T);
    ci_model_opts o = { .n_threads = 0 };
    ci_model *m = NULL;
    ci_session *s = NULL;
    if (T != 300 || ci_model_open(dir, &o, &m, err, sizeof err)) { CHECK(m, "%s", err); return; }
    const int V = 300;
    float *got = malloc((size_t)T * V * sizeof *got), *want = malloc((size_t)T * V * sizeof *want);
    snprintf(path, sizeof path, "%s/ref_logits.f32", dir);
    FILE *f = fopen(path, "rb");
    CHECK(f && fread(want, sizeof *want, (size_t)T * V, f) == (size_t)T * V, "%s unreadable", path);
    if (f) fclose(f);
    double maxref = 0;
    for (size_t i = 0; i < (size_t)T * V; i++) maxref = fmax(maxref, fabs(want[i]));
    CHECK(ci_session_new(m, T, &s, err, sizeof err) == 0, "%s", err);
    const int chunks[3] = { 256, 7, 1 };
    for (int i = 0; s && i < 3; i++) {
        CHECK(lfm2_set_chunk(s, chunks[i], err, sizeof err) == 0, "%s", err);
        ci_session_reset(s);
        CHECK(ci_forward(s, toks, T, got, 1, err, sizeof err) == 0, "%s", err);
        double md = 0;
        for (size_t k = 0; k < (size_t)T * V; k++) md = fmax(md, fabs((double)got[k] - want[k]));
        CHECK(md <= 1e-3 * fmax(1, maxref), "chunk %d: max|diff| %g", chunks[i], md);
    }
    ci_session_free(s);
    ci_model_free(m);
    free(got);
    free(want);
}

/* ---- config dialects, through make-random (the binder's record mode) ------------------- */

/* Writes cfg to a temp dir, runs make-random into it and returns the folder (or NULL with err). */
static const char *make_random(const char *cfg, char *dir, size_t dn, char *err, size_t errlen) {
    return tm_make_random(cfg, "f32", 7, dir, dn, err, errlen);
}

#define rm_dir tm_rm_dir

/* Shape of tensor name in dir/model.safetensors ("[a, b]"), by reading its header. */
static void shape_of(const char *dir, const char *name, char *out, size_t n) {
    char path[600], err[256];
    snprintf(out, n, "absent");
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = fopen(path, "rb");
    if (!f) return;
    unsigned char len8[8];
    size_t hl = 0;
    if (fread(len8, 1, 8, f) == 8) for (int i = 7; i >= 0; i--) hl = hl << 8 | len8[i];
    char *h = hl && hl < (1u << 24) ? malloc(hl) : NULL;
    if (h && fread(h, 1, hl, f) == hl) {
        json_t *j = cj_parse(h, hl, path, err, sizeof err);
        const json_t *t = j ? json_object_get(json_object_get(j, name), "shape") : NULL;
        if (t) {
            int o = snprintf(out, n, "[");
            for (size_t i = 0; i < json_array_size(t); i++)
                o += snprintf(out + o, n - (size_t)o, "%s%lld", i ? ", " : "", (long long)json_integer_value(json_array_get(t, i)));
            snprintf(out + o, n - (size_t)o, "]");
        }
        json_decref(j);
    }
    free(h);
    fclose(f);
}

#define HUB_BASE "\"model_type\": \"lfm2\", \"vocab_size\": 64, \"num_attention_heads\": 4, " \
                 "\"num_key_value_heads\": 2, \"conv_L_cache\": 3, \"full_attn_idxs\": [1], \"tie_embedding\": true, \"theta\": 1000000.0"

/* Runs the family's load in record mode (no checkpoint, as make-random does) and returns
 * the recorded shape of tensor `name` ("[a, b]") in out. */
static void recorded_shape(const char *cfg, const char *name, char *out, size_t n, char *err, size_t errlen) {
    snprintf(out, n, "absent");
    ci_model *m = calloc(1, sizeof *m);
    if (!m || cfg_parse(cfg, strlen(cfg), "cfg.json", &m->cfg, err, errlen)) { free(m); snprintf(out, n, "error"); return; }
    m->family = m->cfg.family;
    if (m->family->ops->load(m, err, errlen)) snprintf(out, n, "error");
    for (int i = 0; i < m->n_specs; i++) {
        if (strcmp(m->specs[i].name, name)) continue;
        int o = snprintf(out, n, "[");
        for (int d = 0; d < m->specs[i].ndim; d++)
            o += snprintf(out + o, n - (size_t)o, "%s%lld", d ? ", " : "", (long long)m->specs[i].shape[d]);
        snprintf(out + o, n - (size_t)o, "]");
    }
    if (m->impl) m->family->ops->unload(m);
    free(m->specs);
    cfg_free(&m->cfg);
    free(m);
}

static void expect_ff(const char *cfg, const char *want_w1, const char *what) {
    char err[1024] = "", got[64];
    recorded_shape(cfg, "model.layers.0.feed_forward.w1.weight", got, sizeof got, err, sizeof err);
    CHECK(!strcmp(got, want_w1), "%s: w1 %s, want %s (%s)", what, got, want_w1, err);
}

static void test_ff_dims(void) {
    /* LFM2-1.2B: 2·12288/3 = 8192, ×1.0, multiple of 256 */
    expect_ff("{" HUB_BASE ", \"hidden_size\": 2048, \"num_hidden_layers\": 16, \"block_ff_dim\": 12288, "
              "\"block_ffn_dim_multiplier\": 1.0, \"block_multiple_of\": 256, \"block_auto_adjust_ff_dim\": true}",
              "[8192, 2048]", "lfm2-1.2b");
    /* LFM2-350M: int(2·6656/3) = 4437 -> 4608 */
    expect_ff("{" HUB_BASE ", \"hidden_size\": 1024, \"num_hidden_layers\": 16, \"block_ff_dim\": 6656, "
              "\"block_ffn_dim_multiplier\": 1.0, \"block_multiple_of\": 256, \"block_auto_adjust_ff_dim\": true}",
              "[4608, 1024]", "lfm2-350m");
    /* multiplier 1.5 and rounding: int(2·130/3) = 86, int(1.5·86) = 129 -> 144 */
    expect_ff("{" HUB_BASE ", \"hidden_size\": 64, \"num_hidden_layers\": 2, \"intermediate_size\": 130, "
              "\"block_ffn_dim_multiplier\": 1.5, \"block_multiple_of\": 16}", "[144, 64]", "multiplier");
    /* null multiplier: no multiplier, no rounding (the modeling code's branch) */
    expect_ff("{" HUB_BASE ", \"hidden_size\": 64, \"num_hidden_layers\": 2, \"block_ff_dim\": 160, "
              "\"block_ffn_dim_multiplier\": null}", "[106, 64]", "null multiplier");
    /* no auto-adjust: the width as given; block_ff_dim wins over intermediate_size */
    expect_ff("{" HUB_BASE ", \"hidden_size\": 64, \"num_hidden_layers\": 2, \"intermediate_size\": 50, "
              "\"block_ff_dim\": 100, \"block_auto_adjust_ff_dim\": false}", "[100, 64]", "no adjust");
    /* lfm2_moe dense layers use intermediate_size as is; experts moe_intermediate_size */
    const char *moe = "{\"model_type\": \"lfm2_moe\", \"vocab_size\": 64, \"hidden_size\": 64, \"num_hidden_layers\": 2, "
                      "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"layer_types\": [\"conv\", \"full_attention\"], "
                      "\"intermediate_size\": 130, \"moe_intermediate_size\": 24, \"num_dense_layers\": 1, "
                      "\"num_experts\": 4, \"num_experts_per_tok\": 2}";
    expect_ff(moe, "[130, 64]", "lfm2_moe dense");
    char err[1024] = "", got[64];
    recorded_shape(moe, "model.layers.1.feed_forward.experts.3.w2.weight", got, sizeof got, err, sizeof err);
    CHECK(!strcmp(got, "[64, 24]"), "lfm2_moe expert w2 %s (%s)", got, err);
    recorded_shape(moe, "model.layers.1.feed_forward.expert_bias", got, sizeof got, err, sizeof err);
    CHECK(!strcmp(got, "[4]"), "lfm2_moe expert_bias %s (%s)", got, err);
}

/* make-random writes the conv kernel [H, 1, K] and the folder loads and runs. */
static void test_make_random_round_trip(void) {
    char dir[64], err[1024] = "", got[64];
    const char *cfg = "{" HUB_BASE ", \"hidden_size\": 64, \"num_hidden_layers\": 3, \"block_ff_dim\": 96, "
                      "\"block_multiple_of\": 16, \"conv_bias\": true}";
    if (!make_random(cfg, dir, sizeof dir, err, sizeof err)) { CHECK(0, "%s", err); return; }
    shape_of(dir, "model.layers.2.conv.conv.weight", got, sizeof got);
    CHECK(!strcmp(got, "[64, 1, 3]"), "conv.weight %s", got);
    shape_of(dir, "model.layers.2.conv.in_proj.bias", got, sizeof got);
    CHECK(!strcmp(got, "[192]"), "in_proj.bias %s", got);
    shape_of(dir, "model.layers.1.self_attn.q_layernorm.weight", got, sizeof got);
    CHECK(!strcmp(got, "[16]"), "layer 1 q_layernorm %s", got);
    shape_of(dir, "lm_head.weight", got, sizeof got);
    CHECK(!strcmp(got, "absent"), "tied head written as lm_head %s", got);
    ci_model *m = NULL;
    ci_session *s = NULL;
    ci_model_opts o = { .n_threads = 1 };
    int toks[3] = { 1, 2, 3 };
    CHECK(ci_model_open(dir, &o, &m, err, sizeof err) == 0, "%s", err);
    if (m && !ci_session_new(m, 8, &s, err, sizeof err)) {
        float lg[64];
        CHECK(ci_forward(s, toks, 3, lg, 0, err, sizeof err) == 0 && isfinite(lg[0]), "%s", err);
    }
    ci_session_free(s);
    ci_model_free(m);
    rm_dir(dir);
}

#define expect_load_error tm_expect_load_error

static void test_config_errors(void) {
    expect_load_error("{\"model_type\": \"lfm2_moe\", \"vocab_size\": 64, \"hidden_size\": 64, \"num_hidden_layers\": 2, "
                      "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"num_experts\": 4, \"num_experts_per_tok\": 2}",
                      "lfm2_moe: required key 'layer_types' is missing");
    expect_load_error("{\"model_type\": \"lfm2\", \"vocab_size\": 64, \"hidden_size\": 64, \"num_hidden_layers\": 2, "
                      "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"layer_types\": [\"conv\", \"mamba\"]}",
                      "layer_types[1] is 'mamba', expected 'conv' or 'full_attention'");
    expect_load_error("{\"model_type\": \"lfm2\", \"vocab_size\": 64, \"hidden_size\": 64, \"num_hidden_layers\": 2, "
                      "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"layer_types\": [\"conv\"]}",
                      "layer_types must be a list of 2 entries");
    expect_load_error("{\"model_type\": \"lfm2_moe\", \"vocab_size\": 64, \"hidden_size\": 64, \"num_hidden_layers\": 1, "
                      "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"layer_types\": [\"conv\"], "
                      "\"num_experts\": 2, \"num_experts_per_tok\": 3}",
                      "num_experts_per_tok 3 exceeds num_experts 2");
    expect_load_error("{\"model_type\": \"lfm2\", \"vocab_size\": 64, \"hidden_size\": 64, \"num_hidden_layers\": 1, "
                      "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"conv_L_cache\": 0}",
                      "conv_L_cache");
}

/* A checkpoint whose conv kernel has the wrong shape is refused, naming the tensor. */
static void test_bad_conv_shape(void) {
    char dir[64], err[1024] = "";
    const char *cfg = "{\"model_type\": \"lfm2\", \"vocab_size\": 64, \"hidden_size\": 64, \"num_hidden_layers\": 1, "
                      "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"layer_types\": [\"conv\"], "
                      "\"conv_L_cache\": 3, \"intermediate_size\": 96, \"block_multiple_of\": 16}";
    if (!make_random(cfg, dir, sizeof dir, err, sizeof err)) { CHECK(0, "%s", err); return; }
    /* same checkpoint, config now asks for a 4-tap kernel */
    char path[600];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    if (f) {
        fputs("{\"model_type\": \"lfm2\", \"vocab_size\": 64, \"hidden_size\": 64, \"num_hidden_layers\": 1, "
              "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"layer_types\": [\"conv\"], "
              "\"conv_L_cache\": 4, \"intermediate_size\": 96, \"block_multiple_of\": 16}", f);
        fclose(f);
    }
    ci_model *m = NULL;
    ci_model_opts o = { .n_threads = 1 };
    CHECK(ci_model_open(dir, &o, &m, err, sizeof err) < 0, "4-tap config accepted a 3-tap kernel");
    CHECK_HAS(err, "lfm2: tensor 'model.layers.0.conv.conv.weight'");
    CHECK_HAS(err, "has shape [64, 1, 3], expected [64, 1, 4]");
    ci_model_free(m);
    rm_dir(dir);
}

int main(void) {
    TEST_RUN(test_snapshot_restore_lfm2);
    TEST_RUN(test_snapshot_restore_lfm2_moe);
    TEST_RUN(test_snapshot_errors);
    TEST_RUN(test_chunked_prefill);
    TEST_RUN(test_ff_dims);
    TEST_RUN(test_make_random_round_trip);
    TEST_RUN(test_config_errors);
    TEST_RUN(test_bad_conv_shape);
    TEST_EXIT();
}
