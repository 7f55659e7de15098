/* test_nemotron.c — the nemotron_h family beyond parity: cache snapshot / restore, the two
 * scan forms, position errors; and (with --bench) the prefill speed of the chunked SSD
 * against the token-by-token recurrence.
 *
 *   test_nemotron                     unit cases on tests/fixtures/nemotron_h_latent
 *                                     (Mamba2 + MoE + attention); run from the repo root
 *   test_nemotron --bench [T] [LAYERS] [THREADS] [STEPS]
 *                                     writes a random-weight checkpoint with the Mamba2 dims
 *                                     of NVIDIA-Nemotron-3-Nano-30B-A3B (hidden 2688, 64 heads
 *                                     x 64, 8 groups, state 128, conv 4; vocab cut to 32000;
 *                                     LAYERS Mamba2 layers, default 4; bf16) to a temp dir,
 *                                     then prints tok/s of a T-token prompt (default 4096):
 *                                     (a) prefill with the chunked SSD, (b) prefill with the
 *                                     recurrence as its scan (same batched projections),
 *                                     (c) one token per forward (over the first STEPS tokens,
 *                                     default all T), and the factors. */
#include "check.h"
#include "cinfer.h"
#include "models/nemotron_h.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char *FIX = "tests/fixtures/nemotron_h_latent";

static int vocab_of(ci_model *m) {
    ci_model_info info;
    ci_model_get_info(m, &info);
    return info.vocab_size;
}

static void make_tokens(int *t, int n, int vocab, unsigned seed) {
    for (int i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        t[i] = 3 + (int)((seed >> 8) % (unsigned)(vocab - 3));
    }
}

/* Prefill 24, snapshot, continue to 40; restore to 24, feed the same 16 tokens again (as a
 * chunk and one at a time): identical logits, bit for bit. */
static void test_snapshot_restore(void) {
    char err[1024];
    ci_model *m = NULL;
    ci_session *s = NULL;
    CHECK(ci_model_open(FIX, NULL, &m, err, sizeof err) == 0, "%s", err);
    if (!m) return;
    CHECK(ci_session_new(m, 64, &s, err, sizeof err) == 0, "%s", err);
    const int V = vocab_of(m);
    int tok[40];
    make_tokens(tok, 40, V, 7);
    float *a = malloc((size_t)16 * V * sizeof *a), *b = malloc((size_t)16 * V * sizeof *b);
    float *c = malloc((size_t)16 * V * sizeof *c);
    CHECK(ci_forward(s, tok, 24, NULL, 0, err, sizeof err) == 0, "%s", err);
    cache_snap *snap = nemh_snapshot(s, err, sizeof err);
    CHECK(snap != NULL, "snapshot failed");
    CHECK(snap && cache_snap_pos(snap) == 24, "snapshot at %d, want 24", snap ? cache_snap_pos(snap) : -1);
    CHECK(ci_forward(s, tok + 24, 16, a, 1, err, sizeof err) == 0, "%s", err);
    CHECK(ci_session_pos(s) == 40, "pos %d after 40 tokens", ci_session_pos(s));
    if (snap) {
        CHECK(nemh_restore(s, snap, err, sizeof err) == 0, "%s", err);
        CHECK(ci_session_pos(s) == 24, "pos %d after restore, want 24", ci_session_pos(s));
        CHECK(ci_forward(s, tok + 24, 16, b, 1, err, sizeof err) == 0, "%s", err);
        CHECK(!memcmp(a, b, (size_t)16 * V * sizeof *a), "logits after restore differ from the first continuation");
        /* again, one token at a time (the decode path) from the same snapshot */
        CHECK(nemh_restore(s, snap, err, sizeof err) == 0, "%s", err);
        for (int t = 0; t < 16; t++) CHECK(ci_forward(s, tok + 24 + t, 1, c + (size_t)t * V, 1, err, sizeof err) == 0, "%s", err);
        double md = 0;
        for (size_t i = 0; i < (size_t)16 * V; i++) md = fmax(md, fabs((double)c[i] - a[i]));
        CHECK(md < 1e-4, "step-by-step continuation after restore differs by %g", md);
        /* the snapshot is self-contained: a fresh session of the same model takes it */
        ci_session *s2 = NULL;
        CHECK(ci_session_new(m, 48, &s2, err, sizeof err) == 0, "%s", err);
        if (s2) {
            CHECK(nemh_restore(s2, snap, err, sizeof err) == 0, "%s", err);
            CHECK(ci_forward(s2, tok + 24, 16, b, 1, err, sizeof err) == 0, "%s", err);
            CHECK(!memcmp(a, b, (size_t)16 * V * sizeof *a), "restore into a second session gives other logits");
        }
        ci_session_free(s2);
    }
    cache_snap_free(snap);
    free(a); free(b); free(c);
    ci_session_free(s);
    ci_model_free(m);
}

/* The whole prompt through the chunked SSD and through the recurrence: the same logits up
 * to rounding; and a session moved behind its state is refused. */
static void test_scan_forms_and_position(void) {
    char err[1024];
    ci_model *m = NULL;
    ci_session *s = NULL;
    CHECK(ci_model_open(FIX, NULL, &m, err, sizeof err) == 0, "%s", err);
    if (!m) return;
    const int V = vocab_of(m), T = 150;   /* crosses the engine's 64-token SSD chunks */
    CHECK(ci_session_new(m, T, &s, err, sizeof err) == 0, "%s", err);
    int *tok = malloc(T * sizeof *tok);
    make_tokens(tok, T, V, 11);
    float *a = malloc((size_t)T * V * sizeof *a), *b = malloc((size_t)T * V * sizeof *b);
    CHECK(ci_forward(s, tok, T, a, 1, err, sizeof err) == 0, "%s", err);
    CHECK(nemh_set_scan(m, MAMBA2_SCAN_RECURRENT, err, sizeof err) == 0, "%s", err);
    ci_session_reset(s);
    CHECK(ci_forward(s, tok, T, b, 1, err, sizeof err) == 0, "%s", err);
    double md = 0, mx = 0;
    for (size_t i = 0; i < (size_t)T * V; i++) { md = fmax(md, fabs((double)a[i] - b[i])); mx = fmax(mx, fabs((double)a[i])); }
    CHECK(md <= 1e-4 * fmax(1, mx), "chunked vs recurrent scan: max|diff| %g (max|logit| %g)", md, mx);
    nemh_set_scan(m, MAMBA2_SCAN_CHUNKED, err, sizeof err);
    CHECK(nemh_set_scan(m, (mamba2_scan)7, err, sizeof err) != 0, "scan form 7 accepted");
    CHECK_HAS(err, "nemotron_h");

    /* ci_session_reset zeroes the position; the next forward starts from zeroed state */
    ci_session_reset(s);
    CHECK(ci_forward(s, tok, 10, b, 1, err, sizeof err) == 0, "%s", err);
    md = 0;
    for (size_t i = 0; i < (size_t)10 * V; i++) md = fmax(md, fabs((double)a[i] - b[i]));
    CHECK(md < 1e-4, "after reset the first 10 tokens differ by %g", md);

    /* a snapshot from a model of another shape is refused with a message */
    ci_model *m2 = NULL;
    ci_session *s3 = NULL;
    if (ci_model_open("tests/fixtures/nemotron_h_hub", NULL, &m2, err, sizeof err) == 0 &&
        ci_session_new(m2, 64, &s3, err, sizeof err) == 0) {
        cache_snap *snap = nemh_snapshot(s, err, sizeof err);
        CHECK(snap && nemh_restore(s3, snap, err, sizeof err) != 0, "restore across models accepted");
        CHECK_HAS(err, "another shape");
        cache_snap_free(snap);
    }
    ci_session_free(s3);
    ci_model_free(m2);
    CHECK(nemh_snapshot(NULL, err, sizeof err) == NULL, "nemh_snapshot(NULL)");
    free(tok); free(a); free(b);
    ci_session_free(s);
    ci_model_free(m);
}

/* Bad configs (edits of the hub-dialect fixture's config.json) name the family and the key. */
static void test_bad_configs(void) {
    char err[1024];
    static const struct { const char *edit, *want; } cases[] = {
        { "\"hybrid_override_pattern\": \"M-X*-M-\"", "hybrid_override_pattern" },
        { "\"hybrid_override_pattern\": \"M-M*\"", "num_hidden_layers" },
        { "\"mamba_num_heads\": 4", "n_groups" },
        { "\"time_step_limit\": [1.0]", "time_step_limit" },
        { "\"mlp_hidden_act\": \"silu\"", "mlp_hidden_act" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char path[256];
        FILE *f = fopen("tests/fixtures/nemotron_h_hub/config.json", "rb");
        CHECK(f != NULL, "no fixture config");
        if (!f) return;
        static char text[1 << 15];
        size_t n = fread(text, 1, sizeof text - 1, f);
        fclose(f);
        text[n] = 0;
        /* replace the key's line (or add the key after the opening brace) */
        const char *key_end = strchr(cases[i].edit + 1, '"');
        char key[64];
        snprintf(key, sizeof key, "%.*s", (int)(key_end - cases[i].edit + 1), cases[i].edit);
        char *at = strstr(text, key);
        static char out[1 << 16];
        if (at) {
            char *eol = at;
            int depth = 0;
            for (; *eol; eol++) {   /* the value may span lines (arrays) */
                if (*eol == '[') depth++;
                if (*eol == ']') depth--;
                if (depth == 0 && (*eol == ',' || *eol == '\n')) break;
            }
            snprintf(out, sizeof out, "%.*s%s%s", (int)(at - text), text, cases[i].edit, eol);
        } else {
            snprintf(out, sizeof out, "{%s,%s", cases[i].edit, text + 1);
        }
        char dir[] = "/tmp/nemh_cfg_XXXXXX";
        CHECK(mkdtemp(dir) != NULL, "mkdtemp");
        snprintf(path, sizeof path, "%s/config.json", dir);
        f = fopen(path, "wb");
        fputs(out, f);
        fclose(f);
        char src[4096], dst[256];
        CHECK(realpath("tests/fixtures/nemotron_h_hub/model.safetensors", src) != NULL, "no fixture weights");
        snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
        CHECK(symlink(src, dst) == 0, "symlink");
        ci_model *m = NULL;
        int rc = ci_model_open(dir, NULL, &m, err, sizeof err);
        CHECK(rc != 0, "case %zu (%s) was accepted", i, cases[i].edit);
        if (rc) { CHECK_HAS(err, cases[i].want); CHECK_HAS(err, "nemotron_h"); }
        ci_model_free(m);
        unlink(dst);
        unlink(path);
        rmdir(dir);
    }
}

/* ---- bench ----------------------------------------------------------------------------- */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static const char *BENCH_CONFIG =
    "{\"model_type\": \"nemotron_h\", \"architectures\": [\"NemotronHForCausalLM\"], \"vocab_size\": 32000,\n"
    " \"hidden_size\": 2688, \"num_hidden_layers\": %d, \"hybrid_override_pattern\": \"%s\",\n"
    " \"mamba_num_heads\": 64, \"mamba_head_dim\": 64, \"n_groups\": 8, \"ssm_state_size\": 128, \"conv_kernel\": 4,\n"
    " \"chunk_size\": 128, \"use_conv_bias\": true, \"time_step_min\": 0.001, \"time_step_limit\": [0.0, Infinity],\n"
    " \"layer_norm_epsilon\": 1e-05, \"num_attention_heads\": 32, \"num_key_value_heads\": 2, \"head_dim\": 128,\n"
    " \"tie_word_embeddings\": false, \"max_position_embeddings\": 262144}\n";

static int bench(int T, int layers, int threads, int steps) {
    char err[1024], dir[] = "/tmp/nemh_bench_XXXXXX", cfg[256], pat[256];
    if (layers < 1 || layers > 64 || T < 1) { fprintf(stderr, "bench: bad T or LAYERS\n"); return 1; }
    if (!mkdtemp(dir)) { perror("mkdtemp"); return 1; }
    for (int l = 0; l < layers; l++) pat[l] = 'M';
    pat[layers] = 0;
    snprintf(cfg, sizeof cfg, "%s/bench_config.json", dir);
    FILE *f = fopen(cfg, "w");
    if (!f) { perror(cfg); return 1; }
    fprintf(f, BENCH_CONFIG, layers, pat);
    fclose(f);
    double tm = now();
    if (ci_make_random(cfg, dir, "bf16", 1, 0, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    printf("make-random: %.1f s\n", now() - tm);
    ci_model_opts o = { .n_threads = threads };
    ci_model *m = NULL;
    ci_session *s = NULL;
    if (ci_model_open(dir, &o, &m, err, sizeof err) || ci_session_new(m, T, &s, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    ci_model_info info;
    ci_model_get_info(m, &info);
    int *tok = malloc((size_t)T * sizeof *tok);
    float *lg = malloc((size_t)info.vocab_size * sizeof *lg), *ref = malloc((size_t)info.vocab_size * sizeof *ref);
    make_tokens(tok, T, info.vocab_size, 3);
    printf("bench %s: %d layers, hidden %d, %s, %d tokens\n", dir, info.n_layers, info.hidden_size, info.backend, T);
    /* warm-up: fault the mapped weights in, start the threads */
    if (ci_forward(s, tok, T < 256 ? T : 256, NULL, 0, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    double t_form[2] = { 1e30, 1e30 }, t_scan[2] = { 1e30, 1e30 };
    for (int rep = 0; rep < 3; rep++)   /* best of three, alternating the forms */
        for (int form = 0; form < 2; form++) {
            nemh_set_scan(m, form ? MAMBA2_SCAN_RECURRENT : MAMBA2_SCAN_CHUNKED, err, sizeof err);
            ci_session_reset(s);
            nemh_scan_seconds(s);
            double t0 = now();
            if (ci_forward(s, tok, T, form ? lg : ref, 0, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
            t_form[form] = fmin(t_form[form], now() - t0);
            t_scan[form] = fmin(t_scan[form], nemh_scan_seconds(s));
        }
    for (int form = 0; form < 2; form++)
        printf("  prefill, %-28s %8.1f tok/s  (%.2f s, of which scan %.3f s; best of 3)\n",
               form ? "recurrent scan:" : "chunked SSD scan:", T / t_form[form], t_form[form], t_scan[form]);
    printf("  scan alone: chunked SSD is %.2fx the recurrence\n", t_scan[1] / t_scan[0]);
    double md = 0;
    for (int v = 0; v < info.vocab_size; v++) md = fmax(md, fabs((double)lg[v] - ref[v]));
    printf("  chunked SSD prefill is %.2fx the recurrent-scan prefill\n", t_form[1] / t_form[0]);
    printf("  last-token logits: recurrent vs chunked max|diff| %.3g\n", md);
    if (steps < 0 || steps > T) steps = T;
    if (steps > 0) {
        ci_session_reset(s);
        double t0 = now();
        for (int t = 0; t < steps; t++)
            if (ci_forward(s, tok + t, 1, t == T - 1 ? lg : NULL, 0, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
        double t_step = now() - t0;
        printf("  one token per forward:           %8.1f tok/s  (%.2f s for %d tokens)\n", steps / t_step, t_step, steps);
        printf("  chunked SSD prefill is %.1fx token-by-token\n", (steps / t_step) > 0 ? (T / t_form[0]) / (steps / t_step) : 0);
        if (steps == T) {
            double ms = 0;
            for (int v = 0; v < info.vocab_size; v++) ms = fmax(ms, fabs((double)lg[v] - ref[v]));
            printf("  last-token logits: token-by-token vs chunked max|diff| %.3g\n", ms);
        }
    }
    free(tok); free(lg); free(ref);
    ci_session_free(s);
    ci_model_free(m);
    char p[512];
    snprintf(p, sizeof p, "%s/model.safetensors", dir); unlink(p);
    snprintf(p, sizeof p, "%s/config.json", dir); unlink(p);
    unlink(cfg);
    rmdir(dir);
    return 0;
}

int main(int argc, char **argv) {
    if (argc >= 2 && !strcmp(argv[1], "--bench"))
        return bench(argc > 2 ? atoi(argv[2]) : 4096, argc > 3 ? atoi(argv[3]) : 4, argc > 4 ? atoi(argv[4]) : 0,
                     argc > 5 ? atoi(argv[5]) : -1);
    TEST_RUN(test_snapshot_restore);
    TEST_RUN(test_scan_forms_and_position);
    TEST_RUN(test_bad_configs);
    TEST_EXIT();
}
