/* test_engine.c — the serving engine (src/server/engine.h) without HTTP, on the demo model
 * (MLA, forward_batch, cache export/import) and on an LFM2 fixture (a hybrid family with
 * neither: slots run one by one, prefix reuse only when a slot's whole sequence is a prefix).
 *
 * Per model: six seeded requests run alone, then all at once, and must give the same
 * tokens, which must also equal ci_generate's; a request whose prompt extends a finished
 * one reuses its prefix (cached > 0) and, for the demo model, still gives ci_generate's
 * tokens (LFM2's recurrent step and chunked prefill agree to 1e-5, not bit for bit); cancel stops a
 * long request; a full queue answers ENG_BUSY; bad parameters are refused with a message. */
#include "../unit/check.h"
#include "cinfer.h"
#include "server/engine.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { NR = 6, MAXT = 12 };

static int run(eng *e, const int *prompt, int n, int seed, int *out, int *cached) {
    eng_params p;
    memset(&p, 0, sizeof p);
    p.prompt = prompt;
    p.n_prompt = n;
    p.max_tokens = MAXT;
    ci_sampler_defaults(&p.so);
    p.so.temperature = 0.8f;
    p.so.seed = (uint64_t)seed;
    p.top_logprobs = -1;
    p.ignore_eos = 1;
    eng_req *r;
    char err[256];
    if (eng_submit(e, &p, &r, err, sizeof err)) return -1;
    int got = 0, done = 0;
    eng_tok t[MAXT];
    while (!done) got += eng_read(r, got, t + got, MAXT - got, 1000, &done);
    for (int i = 0; i < got; i++) out[i] = t[i].id;
    if (cached) *cached = eng_req_cached(r);
    eng_release(r);
    return got;
}

static void prompt_of(int i, int V, int *p, int n) {
    for (int j = 0; j < n; j++) p[j] = (i * 131 + j * 17 + 1) % V;
}

static void one_model(const char *dir, int exact) {
    char err[1024];
    ci_model *m = NULL;
    ci_model_opts mo = { 0, 0 };
    if (ci_model_open(dir, &mo, &m, err, sizeof err)) { CHECK(0, "%s: %s", dir, err); return; }
    ci_model_info info;
    ci_model_get_info(m, &info);
    const int V = info.vocab_size;
    eng *e = NULL;
    eng_opts eo = { 4, 128, 8, 1 << 20 };
    if (eng_new(m, &eo, &e, err, sizeof err)) { CHECK(0, "%s: %s", dir, err); ci_model_free(m); return; }
    int prompts[NR][24], solo[NR][MAXT], n_solo[NR];
    for (int i = 0; i < NR; i++) {
        prompt_of(i, V, prompts[i], 10 + i);
        n_solo[i] = run(e, prompts[i], 10 + i, 7 + i, solo[i], NULL);
        CHECK(n_solo[i] == MAXT, "%s: request %d gave %d tokens", dir, i, n_solo[i]);
    }
    /* the same as ci_generate (the engine's sampler and forward agree with the library's) */
    {
        ci_session *s = NULL;
        ci_sampler_opts so;
        ci_sampler_defaults(&so);
        so.temperature = 0.8f;
        so.seed = 7;
        int out[MAXT], n_out = 0;
        if (ci_session_new(m, 64, &s, err, sizeof err) ||
            ci_generate(s, prompts[0], 10, MAXT, &so, out, &n_out, NULL, NULL, err, sizeof err))
            CHECK(0, "%s: %s", dir, err);
        else if (n_out == MAXT) CHECK(!memcmp(out, solo[0], sizeof out), "%s: engine differs from ci_generate", dir);
        ci_session_free(s);
    }
    /* all at once, from threads of their own: same tokens */
    {
        eng_req *r[NR];
        for (int i = 0; i < NR; i++) {
            eng_params p;
            memset(&p, 0, sizeof p);
            p.prompt = prompts[i];
            p.n_prompt = 10 + i;
            p.max_tokens = MAXT;
            ci_sampler_defaults(&p.so);
            p.so.temperature = 0.8f;
            p.so.seed = (uint64_t)(7 + i);
            p.top_logprobs = 2;
            p.ignore_eos = 1;
            if (eng_submit(e, &p, &r[i], err, sizeof err)) { CHECK(0, "%s: submit %d: %s", dir, i, err); r[i] = NULL; }
        }
        for (int i = 0; i < NR; i++) {
            if (!r[i]) continue;
            eng_tok t[MAXT];
            int got = 0, done = 0;
            while (!done) got += eng_read(r[i], got, t + got, MAXT - got, 1000, &done);
            int same = got == n_solo[i];
            for (int k = 0; k < got && same; k++) same = t[k].id == solo[i][k] && t[k].n_top == 2 && t[k].top_lp[0] >= t[k].logprob;
            CHECK(same, "%s: request %d beside others differs from its solo run", dir, i);
            eng_release(r[i]);
        }
    }
    /* a prompt that extends request 2's whole sequence reuses it */
    {
        int ext[40], out[MAXT], cached = 0;
        run(e, prompts[2], 12, 9, out, NULL);      /* a slot now holds request 2 (hybrids keep no store) */
        memcpy(ext, prompts[2], 12 * sizeof(int));
        memcpy(solo[2], out, sizeof out);
        memcpy(ext + 12, solo[2], (MAXT - 1) * sizeof(int));
        ext[12 + MAXT - 1] = 5;
        int n = 12 + MAXT;
        run(e, ext, n, 99, out, &cached);
        CHECK(cached >= 12, "%s: cached %d of %d", dir, cached, n);
        ci_session *s = NULL;
        ci_sampler_opts so;
        ci_sampler_defaults(&so);
        so.temperature = 0.8f;
        so.seed = 99;
        int ref[MAXT], n_ref = 0;
        /* bit-exact only where step and chunk paths agree bit for bit (KV / MLA families; the
         * hybrids' recurrent step and chunked scan agree within 1e-5, not bit for bit) */
        if (exact && !ci_session_new(m, 64, &s, err, sizeof err) &&
            !ci_generate(s, ext, n, MAXT, &so, ref, &n_ref, NULL, NULL, err, sizeof err))
            CHECK(n_ref == MAXT && !memcmp(ref, out, sizeof ref), "%s: reused prefix changes the output", dir);
        ci_session_free(s);
    }
    /* cancel */
    {
        eng_params p;
        memset(&p, 0, sizeof p);
        p.prompt = prompts[0];
        p.n_prompt = 10;
        p.max_tokens = 100;
        ci_sampler_defaults(&p.so);
        p.top_logprobs = -1;
        p.ignore_eos = 1;
        eng_req *r;
        if (eng_submit(e, &p, &r, err, sizeof err)) CHECK(0, "%s: %s", dir, err);
        else {
            eng_cancel(r);
            eng_tok t[100];
            int got = 0, done = 0;
            while (!done) got += eng_read(r, got, t + got, 100 - got, 1000, &done);
            CHECK(eng_req_finish(r, NULL, 0) == ENG_FIN_CANCEL && got < 100, "%s: cancel: finish %d after %d tokens", dir,
                  eng_req_finish(r, NULL, 0), got);
            eng_release(r);
        }
    }
    /* refusals */
    {
        eng_params p;
        memset(&p, 0, sizeof p);
        p.prompt = prompts[0];
        p.n_prompt = 10;
        p.max_tokens = 1000;
        ci_sampler_defaults(&p.so);
        p.top_logprobs = -1;
        eng_req *r = NULL;
        CHECK(eng_submit(e, &p, &r, err, sizeof err) < 0, "%s: max_tokens beyond the context accepted", dir);
        CHECK_HAS(err, "exceed the context");
        p.max_tokens = 4;
        p.so.top_p = 0;
        CHECK(eng_submit(e, &p, &r, err, sizeof err) < 0, "%s: top_p 0 accepted", dir);
        CHECK_HAS(err, "top-p");
    }
    eng_free(e);
    ci_model_free(m);
}

static void test_engine_demo(void) { one_model("models/demo", 1); }
static void test_engine_hybrid_lfm2(void) { one_model("tests/fixtures/lfm2", 0); }

static void test_engine_busy(void) {
    char err[1024];
    ci_model *m = NULL;
    ci_model_opts mo = { 0, 0 };
    if (ci_model_open("models/demo", &mo, &m, err, sizeof err)) { CHECK(0, "%s", err); return; }
    eng *e = NULL;
    eng_opts eo = { 1, 256, 0, 0 };
    if (eng_new(m, &eo, &e, err, sizeof err)) { CHECK(0, "%s", err); ci_model_free(m); return; }
    int prompt[4] = { 5, 6, 7, 8 };
    eng_params p;
    memset(&p, 0, sizeof p);
    p.prompt = prompt;
    p.n_prompt = 4;
    p.max_tokens = 200;
    ci_sampler_defaults(&p.so);
    p.top_logprobs = -1;
    p.ignore_eos = 1;
    eng_req *a = NULL, *b = NULL;
    CHECK(eng_submit(e, &p, &a, err, sizeof err) == 0, "%s", err);
    eng_tok t[1];
    int done = 0;
    if (a) eng_read(a, 0, t, 1, 2000, &done);     /* running: the one slot is taken */
    CHECK(eng_submit(e, &p, &b, err, sizeof err) == ENG_BUSY, "a second request with no slot and no queue was not refused");
    eng_stop(e);                                    /* stops with a request still running */
    if (a) {
        int got = eng_read(a, 0, t, 1, 0, &done);
        (void)got;
        CHECK(eng_req_finish(a, NULL, 0) == ENG_FIN_ERROR, "a request running at stop did not end with an error");
        eng_release(a);
    }
    eng_free(e);
    ci_model_free(m);
}

/* ---- determinism where the matmul spans several column chunks -------------------------
 *
 * A random dense qwen3 with hidden 1024 and intermediate 1536 (every matmul has more than
 * CPU_KC = 512 columns, so the decode tiles and the prefill GEMM both sum over several
 * chunks). Eight seeded requests of different prompt and output lengths run one at a time,
 * then all together in 8 slots (decode batches shrink from 8 to 1 as they finish, and a
 * prompt whose prefix a slot holds is prefilled from another offset): every token and the
 * bits of every logprob (and top logprob) must be the same. The logprobs make this
 * sensitive to a last-bit difference in the logits, which a sampled id alone would hide. */
enum { WN = 8, WMAX = 16 };

static int wide_params(int i, int V, int *prompt, eng_params *p) {
    int n = 9 + 11 * i;                   /* 9 .. 86 prompt tokens */
    for (int j = 0; j < n; j++) prompt[j] = (i * 977 + j * 131 + 7) % V;
    memset(p, 0, sizeof *p);
    p->prompt = prompt;
    p->n_prompt = n;
    p->max_tokens = WMAX - (i % 4) * 3;   /* 16, 13, 10, 7: batches change size */
    ci_sampler_defaults(&p->so);
    p->so.temperature = 0.9f;
    p->so.seed = (uint64_t)(100 + i);
    p->top_logprobs = 3;
    p->ignore_eos = 1;
    return n;
}

static int read_all(eng_req *r, eng_tok *t, int max) {
    int got = 0, done = 0;
    while (!done) got += eng_read(r, got, t + got, max - got, 1000, &done);
    return got;
}

static int same_tok(const eng_tok *a, const eng_tok *b) {
    if (a->id != b->id || a->n_top != b->n_top || memcmp(&a->logprob, &b->logprob, sizeof(float))) return 0;
    for (int j = 0; j < a->n_top; j++)
        if (a->top_id[j] != b->top_id[j] || memcmp(&a->top_lp[j], &b->top_lp[j], sizeof(float))) return 0;
    return 1;
}

static void test_engine_wide_dense_alone_vs_beside_7(void) {
    char err[1024], dir[] = "/tmp/cinfer-wide-XXXXXX", cfg[512], out[512];
    if (!mkdtemp(dir)) { CHECK(0, "mkdtemp failed"); return; }
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    snprintf(out, sizeof out, "%s/model", dir);
    FILE *f = fopen(cfg, "w");
    if (!f) { CHECK(0, "cannot write %s", cfg); return; }
    fputs("{\"model_type\": \"qwen3\", \"vocab_size\": 512, \"hidden_size\": 1024, \"intermediate_size\": 1536,"
          " \"num_hidden_layers\": 2, \"num_attention_heads\": 8, \"num_key_value_heads\": 2, \"head_dim\": 128,"
          " \"max_position_embeddings\": 4096, \"rms_norm_eps\": 1e-06, \"rope_theta\": 1000000,"
          " \"tie_word_embeddings\": false, \"bos_token_id\": 1, \"eos_token_id\": 2}\n", f);
    fclose(f);
    ci_model *m = NULL;
    ci_model_opts mo = { 0, 0 };
    eng *e = NULL;
    if (ci_make_random(cfg, out, "bf16", 3, 0, err, sizeof err) || ci_model_open(out, &mo, &m, err, sizeof err)) {
        CHECK(0, "%s", err);
        goto done;
    }
    ci_model_info info;
    ci_model_get_info(m, &info);
    eng_opts eo = { WN, 256, 8, 64 << 20 };
    if (eng_new(m, &eo, &e, err, sizeof err)) { CHECK(0, "%s", err); goto done; }
    int prompts[WN][96], n_solo[WN];
    eng_tok solo[WN][WMAX], both[WMAX];
    eng_params p;
    for (int i = 0; i < WN; i++) {
        wide_params(i, info.vocab_size, prompts[i], &p);
        eng_req *r;
        if (eng_submit(e, &p, &r, err, sizeof err)) { CHECK(0, "submit %d: %s", i, err); goto done; }
        n_solo[i] = read_all(r, solo[i], WMAX);
        CHECK(n_solo[i] == p.max_tokens, "request %d alone gave %d tokens", i, n_solo[i]);
        eng_release(r);
    }
    /* all eight at once; their prompts are now held by the slots or the prefix store, so
     * this also prefills from the reused offsets */
    eng_req *r[WN];
    for (int i = 0; i < WN; i++) {
        wide_params(i, info.vocab_size, prompts[i], &p);
        if (eng_submit(e, &p, &r[i], err, sizeof err)) { CHECK(0, "submit %d: %s", i, err); r[i] = NULL; }
    }
    for (int i = 0; i < WN; i++) {
        if (!r[i]) continue;
        int got = read_all(r[i], both, WMAX), same = got == n_solo[i];
        for (int k = 0; k < got && same; k++) same = same_tok(&both[k], &solo[i][k]);
        CHECK(same, "request %d beside 7 others differs from its solo run (%d tokens, cached %d)", i, got,
              eng_req_cached(r[i]));
        eng_release(r[i]);
    }
    /* and the engine's first logprob is the one a plain session's prefill gives */
    {
        ci_session *s = NULL;
        float *lg = malloc((size_t)info.vocab_size * sizeof(float));
        wide_params(5, info.vocab_size, prompts[5], &p);
        if (!lg || ci_session_new(m, 128, &s, err, sizeof err) || ci_forward(s, p.prompt, p.n_prompt, lg, 0, err, sizeof err)) {
            CHECK(0, "%s", err);
        } else {   /* the engine's log-softmax, step by step */
            float mx = lg[0];
            for (int v = 1; v < info.vocab_size; v++) if (lg[v] > mx) mx = lg[v];
            double se = 0;
            for (int v = 0; v < info.vocab_size; v++) se += exp((double)lg[v] - mx);
            float lp = lg[solo[5][0].id] - (mx + (float)log(se));
            CHECK(!memcmp(&lp, &solo[5][0].logprob, sizeof lp), "engine logprob %.9g vs a plain session's %.9g",
                  solo[5][0].logprob, lp);
        }
        free(lg);
        ci_session_free(s);
    }
done:
    eng_free(e);
    ci_model_free(m);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd)) fprintf(stderr, "could not remove %s\n", dir);
}

int main(void) {
    TEST_RUN(test_engine_demo);
    TEST_RUN(test_engine_hybrid_lfm2);
    TEST_RUN(test_engine_busy);
    TEST_RUN(test_engine_wide_dense_alone_vs_beside_7);
    TEST_EXIT();
}
