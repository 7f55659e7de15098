/* test_engine.c — the serving engine (src/server/engine.h) without HTTP, on the demo model
 * (MLA, forward_batch, cache export/import) and on an LFM2 fixture (a hybrid family:
 * forward_batch with per-sequence conv state, no export/import: a slot is reused only when
 * its whole sequence is a prefix, and the prefix store keeps snapshots).
 *
 * (More below: determinism on a model wider than one matmul column chunk, prefix reuse of
 * the hybrids through snapshots, the paged pool and its preemptions, the prefix store, JSON
 * mode, and a schema grammar of free text with constrained calls.)
 *
 * Per model: six seeded requests run alone, then all at once, and must give the same
 * tokens, which must also equal ci_generate's; a request whose prompt extends a finished
 * one reuses its prefix (cached > 0) and, for the demo model, still gives ci_generate's
 * tokens (LFM2's recurrent step and chunked prefill agree to 1e-5, not bit for bit); cancel stops a
 * long request; a full queue answers ENG_BUSY; bad parameters are refused with a message. */
#include "../unit/check.h"
#include "cinfer.h"
#include "server/engine.h"
#include "server/prefix.h"
#include "server/jsonfsm.h"
#include "models/model.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { NR = 6, MAXT = 12 };

/* Reads r until it ends (at most max tokens). */
static int read_all(eng_req *r, eng_tok *t, int max) {
    int got = 0, done = 0;
    while (!done) got += eng_read(r, got, t + got, max - got, 1000, &done);
    return got;
}

/* A request of n prompt ids and max tokens, ignore_eos, with top_logprobs (-1: none):
 * greedy at temperature 0, else drawn with that temperature and seed. */
static eng_params req_of(const int *prompt, int n, int max, float temperature, int seed, int top_logprobs) {
    eng_params p;
    memset(&p, 0, sizeof p);
    p.prompt = prompt;
    p.n_prompt = n;
    p.max_tokens = max;
    ci_sampler_defaults(&p.so);
    p.so.temperature = temperature;
    p.so.seed = (uint64_t)seed;
    p.top_logprobs = top_logprobs;
    p.ignore_eos = 1;
    return p;
}

/* Submits a sampled request (temperature 0.8, ignore_eos) of max tokens; with keep, hands the
 * request back unread, else reads it whole into out and returns how many came. */
static int paged_run(eng *e, const int *prompt, int n, int max, int seed, int *out, int *cached, eng_req **keep) {
    eng_params p = req_of(prompt, n, max, 0.8f, seed, -1);
    eng_req *r;
    char err[256];
    if (eng_submit(e, &p, &r, err, sizeof err)) return -1;
    if (keep) { *keep = r; return 0; }
    eng_tok *t = malloc((size_t)max * sizeof *t);
    if (!t) { eng_release(r); return -1; }
    int got = read_all(r, t, max);
    for (int i = 0; i < got; i++) out[i] = t[i].id;
    free(t);
    if (cached) *cached = eng_req_cached(r);
    eng_release(r);
    return got;
}

static int run(eng *e, const int *prompt, int n, int seed, int *out, int *cached) {
    return paged_run(e, prompt, n, MAXT, seed, out, cached, NULL);
}

static void prompt_of(int i, int V, int *p, int n) {
    for (int j = 0; j < n; j++) p[j] = (i * 131 + j * 17 + 1) % V;
}

static void one_model(const char *dir, int exact) {
    char err[1024];
    ci_model *m = NULL;
    ci_model_opts mo = { .n_threads = 0 };
    if (ci_model_open(dir, &mo, &m, err, sizeof err)) { CHECK(0, "%s: %s", dir, err); return; }
    ci_model_info info;
    ci_model_get_info(m, &info);
    const int V = info.vocab_size;
    eng *e = NULL;
    eng_opts eo = { 4, 128, 8, 1 << 20, NULL, NULL, 0, -1, 0, 0, 0, 0, 0 };
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
            eng_params p = req_of(prompts[i], 10 + i, MAXT, 0.8f, 7 + i, 2);
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
        run(e, prompts[2], 12, 9, out, NULL);      /* a slot now holds request 2 */
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

/* A decode step's sampled rows drawn by 3 sampling threads (eng_opts.sample_threads) give the
 * draws, logprobs and penalties of the scheduler drawing them one by one: 6 requests at once,
 * seeded, some with logprobs, some with presence / frequency penalties. */
static void test_engine_sample_threads(void) {
    const char *dir = "tests/fixtures/qwen3_tied";
    char err[1024];
    ci_model *m = NULL;
    ci_model_opts mo = { .n_threads = 2 };
    if (ci_model_open(dir, &mo, &m, err, sizeof err)) { CHECK(0, "%s: %s", dir, err); return; }
    const int V = (int)m->cfg.vocab_size;
    int prompts[NR][16];
    for (int i = 0; i < NR; i++) prompt_of(i + 11, V, prompts[i], 8 + i);
    eng_tok got[2][NR][MAXT];
    int n_got[2][NR] = { { 0 } };
    long long draws[2] = { 0, 0 };
    for (int v = 0; v < 2; v++) {
        eng *e = NULL;
        eng_opts eo = { NR, 128, 8, 0, NULL, NULL, 0, -1, 0, 0, 0, 0, v ? 3 : 1 };
        if (eng_new(m, &eo, &e, err, sizeof err)) { CHECK(0, "%s: %s", dir, err); break; }
        eng_req *r[NR] = { NULL };
        for (int i = 0; i < NR; i++) {
            eng_params p = req_of(prompts[i], 8 + i, MAXT, 0.9f, 40 + i, i % 2 ? 3 : -1);
            if (i % 3 == 1) p.presence_penalty = 0.4f, p.frequency_penalty = 0.3f;
            if (eng_submit(e, &p, &r[i], err, sizeof err)) CHECK(0, "%s: submit %d: %s", dir, i, err);
        }
        for (int i = 0; i < NR; i++)
            if (r[i]) { n_got[v][i] = read_all(r[i], got[v][i], MAXT); eng_release(r[i]); }
        eng_stats st;
        eng_get_stats(e, &st);
        draws[v] = st.pool_draws;
        eng_free(e);
    }
    CHECK(draws[0] == 0 && draws[1] > 0, "%s: rows drawn by the sampling threads: %lld with 1 thread, %lld with 3", dir,
          draws[0], draws[1]);
    for (int i = 0; i < NR; i++) {
        int same = n_got[0][i] == MAXT && n_got[1][i] == MAXT;
        for (int k = 0; k < MAXT && same; k++) {
            const eng_tok *a = &got[0][i][k], *b = &got[1][i][k];
            same = a->id == b->id && a->n_top == b->n_top && (a->n_top == 0 || a->logprob == b->logprob);
            for (int j = 0; j < a->n_top && same; j++) same = a->top_id[j] == b->top_id[j] && a->top_lp[j] == b->top_lp[j];
        }
        CHECK(same, "%s: request %d drawn by the sampling threads differs from the scheduler's own draws", dir, i);
    }
    ci_model_free(m);
}

/* Greedy rows (temperature 0, nothing else reading the logits) take the backend's argmax in
 * their decode steps (forward_batch_argmax: ids back, no logits): 3 greedy requests together
 * each give ci_generate's greedy ids and the steps count as argmax steps; with a fourth that
 * wants logprobs beside them the steps bring logits back (no argmax step while it runs) and
 * the ids stay the same. */
static void test_engine_greedy_argmax(void) {
    static const char *const dirs[] = { "tests/fixtures/qwen3_tied", "tests/fixtures/deepseek_v3" };
    for (size_t f = 0; f < sizeof dirs / sizeof *dirs; f++) {
        char err[1024];
        ci_model *m = NULL;
        ci_model_opts mo = { .n_threads = 2 };
        if (ci_model_open(dirs[f], &mo, &m, err, sizeof err)) { CHECK(0, "%s: %s", dirs[f], err); continue; }
        const int V = (int)m->cfg.vocab_size;
        eng *e = NULL;
        eng_opts eo = { 4, 128, 8, 0, NULL, NULL, 0, -1, 0, 0, 0, 0, 0 };
        if (eng_new(m, &eo, &e, err, sizeof err)) { CHECK(0, "%s: %s", dirs[f], err); ci_model_free(m); continue; }
        int prompts[4][16], ref[4][MAXT];
        for (int i = 0; i < 4; i++) {
            prompt_of(i + 3, V, prompts[i], 9 + i);
            ci_session *s = NULL;
            ci_sampler_opts so;
            ci_sampler_defaults(&so);
            int n_out = 0;
            if (ci_session_new(m, 64, &s, err, sizeof err) ||
                ci_generate(s, prompts[i], 9 + i, MAXT, &so, ref[i], &n_out, NULL, NULL, err, sizeof err) || n_out != MAXT)
                CHECK(0, "%s: ci_generate %d: %s", dirs[f], i, err);
            ci_session_free(s);
        }
        for (int round = 0; round < 2; round++) {
            const int nr = round ? 4 : 3;
            eng_stats st0, st1;
            eng_get_stats(e, &st0);
            eng_req *r[4] = { NULL };
            for (int i = 0; i < nr; i++) {
                eng_params p = req_of(prompts[i], 9 + i, MAXT, 0.0f, 0, i == 3 ? 2 : -1);
                if (eng_submit(e, &p, &r[i], err, sizeof err)) CHECK(0, "%s: submit %d: %s", dirs[f], i, err);
            }
            for (int i = 0; i < nr; i++) {
                if (!r[i]) continue;
                eng_tok t[MAXT];
                const int got = read_all(r[i], t, MAXT);
                int same = got == MAXT;
                for (int k = 0; k < got && same; k++) same = t[k].id == ref[i][k];
                CHECK(same, "%s: round %d: request %d differs from ci_generate's greedy ids", dirs[f], round, i);
                eng_release(r[i]);
            }
            eng_get_stats(e, &st1);
            const long long steps = st1.decode_steps - st0.decode_steps, am = st1.decode_argmax_steps - st0.decode_argmax_steps;
            if (!round) CHECK(steps > 0 && am == steps, "%s: all greedy: %lld of %lld steps took the argmax", dirs[f], am, steps);
            else CHECK(am < steps, "%s: a logprobs row beside: %lld of %lld steps took the argmax", dirs[f], am, steps);
        }
        eng_free(e);
        ci_model_free(m);
    }
}
static void test_engine_hybrid_lfm2(void) { one_model("tests/fixtures/lfm2", 0); }

static void test_engine_busy(void) {
    char err[1024];
    ci_model *m = NULL;
    ci_model_opts mo = { .n_threads = 0 };
    if (ci_model_open("models/demo", &mo, &m, err, sizeof err)) { CHECK(0, "%s", err); return; }
    eng *e = NULL;
    eng_opts eo = { 1, 256, 0, 0, NULL, NULL, 0, -1, 0, 0, 0, 0, 0 };
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
    ci_model_opts mo = { .n_threads = 0 };
    eng *e = NULL;
    if (ci_make_random(cfg, out, "bf16", 3, 0, err, sizeof err) || ci_model_open(out, &mo, &m, err, sizeof err)) {
        CHECK(0, "%s", err);
        goto done;
    }
    ci_model_info info;
    ci_model_get_info(m, &info);
    eng_opts eo = { WN, 256, 8, 64 << 20, NULL, NULL, 0, -1, 0, 0, 0, 0, 0 };
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

/* ---- hybrid prefix reuse through snapshots ----------------------------------------------
 *
 * A chat on one slot with a hybrid fixture (DeltaNet, short conv, Mamba2; DeepSeek V4's
 * compressors are recurrent state too): turn 1, then an
 * unrelated request takes the slot (its sequence goes to the store as a snapshot), then
 * turn 2 = turn 1's prompt + its reply + a new message reuses the snapshot taken at the end
 * of turn 1 (cached = prompt + reply - 1: the last sampled token was never fed), and a
 * turn that diverges right after turn 1's prompt reuses the snapshot taken at the end of
 * that prompt. Their greedy tokens must equal those of an engine without prefix reuse
 * (token for token: the recurrent step and the chunked prefill agree to ~1e-5, not bit for
 * bit, so the logits are not compared). */
enum { T1 = 40, G1 = 8 };

static int chat(eng *e, const int *prompt, int n, int max, int *out, int *cached) {
    eng_params p;
    memset(&p, 0, sizeof p);
    p.prompt = prompt;
    p.n_prompt = n;
    p.max_tokens = max;
    ci_sampler_defaults(&p.so);   /* greedy */
    p.top_logprobs = -1;
    p.ignore_eos = 1;
    eng_req *r;
    char err[256];
    if (eng_submit(e, &p, &r, err, sizeof err)) return -1;
    eng_tok t[64];
    int got = read_all(r, t, max);
    for (int i = 0; i < got; i++) out[i] = t[i].id;
    *cached = eng_req_cached(r);
    eng_release(r);
    return got;
}

static void hybrid_turns(const char *dir) {
    char err[1024];
    ci_model *m = NULL;
    ci_model_opts mo = { .n_threads = 0 };
    if (ci_model_open(dir, &mo, &m, err, sizeof err)) { CHECK(0, "%s: %s", dir, err); return; }
    CHECK(m->family->ops->snapshot && m->family->ops->restore, "%s: %s has no snapshot / restore", dir, m->family->name);
    ci_model_info info;
    ci_model_get_info(m, &info);
    const int V = info.vocab_size;
    eng *on = NULL, *off = NULL;
    eng_opts eo_on = { 1, 256, 8, 64 << 20, NULL, NULL, 0, -1, 0, 0, 0, 0, 0 }, eo_off = { 1, 256, 8, 0, NULL, NULL, 0, -1, 0, 0, 0, 0, 0 };
    if (eng_new(m, &eo_on, &on, err, sizeof err) || eng_new(m, &eo_off, &off, err, sizeof err)) {
        CHECK(0, "%s: %s", dir, err);
        goto done;
    }
    int p1[T1], g1[G1], other[30], p2[T1 + G1 + 5], p3[T1 + 6], o[3][8], ref[3][8], c;
    for (int j = 0; j < T1; j++) p1[j] = (j * 37 + 11) % V;
    for (int j = 0; j < 30; j++) other[j] = (j * 53 + 5) % V;
    CHECK(chat(on, p1, T1, G1, g1, &c) == G1 && c == 0, "%s: turn 1 (cached %d)", dir, c);
    CHECK(chat(on, other, 30, 4, o[0], &c) == 4 && c == 0, "%s: unrelated request (cached %d)", dir, c);
    memcpy(p2, p1, sizeof p1);
    memcpy(p2 + T1, g1, sizeof g1);
    for (int j = 0; j < 5; j++) p2[T1 + G1 + j] = (j * 7 + 3) % V;
    memcpy(p3, p1, sizeof p1);
    for (int j = 0; j < 6; j++) p3[T1 + j] = (j * 29 + 17) % V;
    int n2 = T1 + G1 + 5, n3 = T1 + 6, c2 = 0, c3 = 0, c0 = 0;
    CHECK(chat(on, p2, n2, 8, o[1], &c2) == 8, "%s: turn 2", dir);
    CHECK(c2 == T1 + G1 - 1, "%s: turn 2 reused %d tokens, want %d (the end of turn 1)", dir, c2, T1 + G1 - 1);
    CHECK(chat(on, p3, n3, 8, o[2], &c3) == 8, "%s: diverging turn", dir);
    CHECK(c3 == T1, "%s: a turn diverging after turn 1's prompt reused %d tokens, want %d", dir, c3, T1);
    /* the same prompts without any reuse */
    CHECK(chat(off, p2, n2, 8, ref[1], &c0) == 8 && c0 == 0, "%s: no-reuse turn 2 (cached %d)", dir, c0);
    CHECK(chat(off, p3, n3, 8, ref[2], &c0) == 8 && c0 == 0, "%s: no-reuse diverging turn (cached %d)", dir, c0);
    CHECK(!memcmp(o[1], ref[1], sizeof o[1]), "%s: turn 2 from a snapshot differs from the no-reuse run", dir);
    CHECK(!memcmp(o[2], ref[2], sizeof o[2]), "%s: the diverging turn from a snapshot differs from the no-reuse run", dir);
    eng_stats st;
    eng_get_stats(on, &st);
    CHECK(st.prefix_hit_tokens == c2 + c3, "%s: /metrics hit tokens %lld, want %d", dir, st.prefix_hit_tokens, c2 + c3);
    CHECK(st.prefix_entries >= 2 && st.prefix_bytes > 0 && st.prefix_bytes <= (size_t)eo_on.prefix_cache_bytes,
          "%s: %d entries, %zu bytes", dir, st.prefix_entries, st.prefix_bytes);
done:
    eng_free(on);
    eng_free(off);
    ci_model_free(m);
}

static void test_engine_hybrid_snapshot_reuse(void) {
    hybrid_turns("tests/fixtures/lfm2");
    hybrid_turns("tests/fixtures/qwen3_next");
    hybrid_turns("tests/fixtures/qwen3_5");
    hybrid_turns("tests/fixtures/nemotron_h");
    hybrid_turns("tests/fixtures/deepseek_v4");   /* window rings + compressor states */
}

/* The store itself: snapshots match only whole, rows by any prefix; the budget holds. */
static void test_prefix_store(void) {
    pfx_store *p = pfx_new(1000, free);
    int a[10] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10 }, q[12] = { 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 }, m = 0;
    if (!p) { CHECK(0, "out of memory"); return; }
    CHECK(pfx_insert(p, a, 6, PFX_SNAPSHOT, malloc(100), 100), "snapshot of 6 refused");
    CHECK(pfx_insert(p, a, 10, PFX_SNAPSHOT, malloc(100), 100), "snapshot of 10 refused");
    CHECK(pfx_count(p) == 2, "a shorter snapshot was dropped (%d entries)", pfx_count(p));
    CHECK(pfx_lookup(p, q, 12, 11, &m) >= 0 && m == 10, "longest whole snapshot: %d", m);
    CHECK(pfx_lookup(p, q, 12, 9, &m) >= 0 && m == 6, "limit 9: %d", m);
    int d[8] = { 1, 2, 3, 4, 5, 6, 7, 99 };
    CHECK(pfx_lookup(p, d, 8, 7, &m) >= 0 && m == 6, "diverging after 7: %d", m);
    CHECK(pfx_covers(p, a, 6) && !pfx_covers(p, a, 7), "covers: only exact snapshots");
    CHECK(!pfx_insert(p, a, 3, PFX_SNAPSHOT, malloc(2000), 2000), "an entry over the budget was stored");
    /* 1000 bytes: a third 400-byte entry evicts the least recently used (a[0..6)) */
    pfx_blob(p, pfx_lookup(p, q, 12, 11, &m));
    CHECK(pfx_insert(p, q, 12, PFX_SNAPSHOT, malloc(700), 700), "third snapshot refused");
    CHECK(pfx_bytes(p) <= 1000 && pfx_lookup(p, q, 12, 9, &m) < 0, "LRU eviction: %zu bytes, match %d", pfx_bytes(p), m);
    pfx_free(p);
    p = pfx_new(1000, free);
    if (!p) return;
    CHECK(pfx_insert(p, a, 6, PFX_ROWS, malloc(60), 60) && pfx_insert(p, a, 10, PFX_ROWS, malloc(100), 100), "rows refused");
    CHECK(pfx_count(p) == 1, "rows covered by a longer entry stay (%d entries)", pfx_count(p));
    CHECK(pfx_lookup(p, d, 8, 7, &m) >= 0 && m == 7, "rows match by prefix: %d", m);
    pfx_free(p);
}

/* JSON mode on the demo model with its tokenizer: 12 sampled replies side by side, each
 * a JSON prefix when decoded (one that EOS ended is a whole JSON object), none with an id
 * past the token table; no token table, no JSON mode. */
static void test_engine_json_mode(void) {
    char err[1024];
    ci_model *m = NULL;
    tok_tokenizer *tk = NULL;
    ci_model_opts mo = { .n_threads = 0 };
    if (ci_model_open("models/demo", &mo, &m, err, sizeof err) || tok_load("models/demo", &tk, err, sizeof err)) {
        CHECK(0, "%s", err);
        ci_model_free(m);
        return;
    }
    ci_model_info info;
    ci_model_get_info(m, &info);
    char *tb = NULL;
    uint32_t *to = NULL;
    /* a table shorter than the model's vocabulary (as Qwen's padded embeddings are longer
     * than the tokenizer): the ids past it have no text and are never chosen */
    const int tn = info.vocab_size - 7;
    CHECK(eng_token_texts(tk, tn, &tb, &to) == 0, "token texts");
    eng *e = NULL, *e0 = NULL;
    eng_opts eo = { 4, 256, 16, 0, tb, to, tn, -1, 0, 0, 0, 0, 0 }, eo0 = { 1, 256, 0, 0, NULL, NULL, 0, -1, 0, 0, 0, 0, 0 };
    if (!tb || eng_new(m, &eo, &e, err, sizeof err) || eng_new(m, &eo0, &e0, err, sizeof err)) {
        CHECK(0, "%s", err);
        goto out;
    }
    int *prompt = NULL;
    size_t np = 0;
    const char *q = "<|user|>\nDescribe a dog as a JSON object.<|end|>\n<|assistant|>\n";
    CHECK(tok_encode(tk, q, strlen(q), 1, &prompt, &np, err, sizeof err) == 0, "%s", err);
    enum { NJ = 12, MAXJ = 80 };
    eng_req *r[NJ];
    for (int i = 0; i < NJ; i++) {
        eng_params p;
        memset(&p, 0, sizeof p);
        p.prompt = prompt;
        p.n_prompt = (int)np;
        p.max_tokens = MAXJ;
        ci_sampler_defaults(&p.so);
        p.so.temperature = 1.0f;
        p.so.seed = (uint64_t)(100 + i);
        p.json_mode = 1;
        if (eng_submit(e, &p, &r[i], err, sizeof err)) { CHECK(0, "submit %d: %s", i, err); r[i] = NULL; }
        if (i == 0) CHECK(eng_submit(e0, &p, &(eng_req *){ NULL }, err, sizeof err) != 0 && strstr(err, "JSON"),
                          "JSON mode without token texts accepted");
    }
    int whole = 0;
    for (int i = 0; i < NJ; i++) {
        if (!r[i]) continue;
        eng_tok t[MAXJ];
        int got = 0, done = 0, ids[MAXJ];
        while (!done) got += eng_read(r[i], got, t + got, MAXJ - got, 1000, &done);
        eng_finish f = eng_req_finish(r[i], err, sizeof err);
        for (int k = 0; k < got; k++) ids[k] = t[k].id;
        int n = got;
        for (int k = 0; n > 0 && k < info.n_eos; k++) if (ids[n - 1] == info.eos_ids[k]) { n--; break; }  /* an EOS is no text */
        char *text = NULL;
        size_t len = 0;
        jf_state js;
        jf_init(&js, 1);
        CHECK(f == ENG_FIN_EOS || f == ENG_FIN_LENGTH, "reply %d finished with %d: %s", i, (int)f, err);
        if (!tok_decode(tk, ids, (size_t)n, 1, &text, &len, err, sizeof err)) {
            CHECK(jf_feed(&js, text, len) == 0, "reply %d is no JSON prefix: '%s'", i, text);
            if (f == ENG_FIN_EOS) { CHECK(jf_complete(&js), "reply %d ended before its JSON did: '%s'", i, text); whole++; }
            else CHECK(!jf_complete(&js), "reply %d went on after its object closed: '%s'", i, text);
            CHECK(n == got, "reply %d chose EOS (it ends when the object closes)", i);
            for (int k = 0; k < n; k++)
                CHECK(!tok_is_special(tk, ids[k]) && ids[k] < tn, "reply %d holds token %d (special or past the table)", i, ids[k]);
        }
        free(text);
        eng_release(r[i]);
    }
    printf("  json mode: %d of %d replies closed their object\n", whole, NJ);
    free(prompt);
out:
    eng_free(e);
    eng_free(e0);
    free(tb);
    free(to);
    tok_free(tk);
    ci_model_free(m);
}

/* A grammar of free text with constrained calls (what strict tools under tool_choice auto
 * run): the marker is "e", so the demo model meets it often; after each "e" the reply must
 * hold {"k": 0..9} and "!". 8 sampled replies: each is a prefix the grammar takes (whole
 * when EOS ended it), and calls were made. A grammar without token texts is refused. */
static jsc_grammar *text_grammar(void) {
    char err[256];
    json_t *s = json_loads("{\"type\":\"object\",\"properties\":{\"k\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":9}},"
                           "\"required\":[\"k\"],\"additionalProperties\":false}", 0, NULL);
    jsc_grammar *g = jsc_new();
    int obj = jsc_schema(g, s, s, "#", err, sizeof err), parts[2] = { obj, jsc_literal(g, "!", 1) };
    g->root = jsc_text(g, "e", 1, jsc_group(g, SN_SEQ, parts, 2));
    json_decref(s);
    return g;
}

static void test_engine_grammar_text(void) {
    char err[1024];
    ci_model *m = NULL;
    tok_tokenizer *tk = NULL;
    ci_model_opts mo = { .n_threads = 0 };
    if (ci_model_open("models/demo", &mo, &m, err, sizeof err) || tok_load("models/demo", &tk, err, sizeof err)) {
        CHECK(0, "%s", err);
        ci_model_free(m);
        return;
    }
    ci_model_info info;
    ci_model_get_info(m, &info);
    char *tb = NULL;
    uint32_t *to = NULL;
    const int tn = info.vocab_size;
    CHECK(eng_token_texts(tk, tn, &tb, &to) == 0, "token texts");
    eng *e = NULL, *e0 = NULL;
    eng_opts eo = { 4, 256, 16, 0, tb, to, tn, 'e', 0, 0, 0, 0, 0 }, eo0 = { 1, 256, 0, 0, NULL, NULL, 0, -1, 0, 0, 0, 0, 0 };
    if (!tb || eng_new(m, &eo, &e, err, sizeof err) || eng_new(m, &eo0, &e0, err, sizeof err)) {
        CHECK(0, "%s", err);
        goto out;
    }
    int *prompt = NULL;
    size_t np = 0;
    const char *q = "<|user|>\nTell me about the weather.<|end|>\n<|assistant|>\n";
    CHECK(tok_encode(tk, q, strlen(q), 1, &prompt, &np, err, sizeof err) == 0, "%s", err);
    enum { NG = 8, MAXG = 60 };
    eng_req *r[NG];
    for (int i = 0; i < NG; i++) {
        eng_params p;
        memset(&p, 0, sizeof p);
        p.prompt = prompt;
        p.n_prompt = (int)np;
        p.max_tokens = MAXG;
        ci_sampler_defaults(&p.so);
        p.so.temperature = 1.0f;
        p.so.seed = (uint64_t)(200 + i);
        p.grammar = text_grammar();
        if (eng_submit(e, &p, &r[i], err, sizeof err)) { CHECK(0, "submit %d: %s", i, err); r[i] = NULL; }
        if (i == 0) {
            p.grammar = text_grammar();                 /* eng_submit frees it, refused or not */
            CHECK(eng_submit(e0, &p, &(eng_req *){ NULL }, err, sizeof err) != 0 && strstr(err, "token texts"),
                  "a grammar without token texts accepted");
        }
    }
    int calls = 0;
    jsc_grammar *g = text_grammar();
    for (int i = 0; i < NG; i++) {
        if (!r[i]) continue;
        eng_tok t[MAXG];
        int got = 0, done = 0, ids[MAXG];
        while (!done) got += eng_read(r[i], got, t + got, MAXG - got, 1000, &done);
        eng_finish f = eng_req_finish(r[i], err, sizeof err);
        CHECK(f == ENG_FIN_EOS || f == ENG_FIN_LENGTH, "reply %d finished with %d: %s", i, (int)f, err);
        for (int k = 0; k < got; k++) ids[k] = t[k].id;
        int n = got;
        for (int k = 0; n > 0 && k < info.n_eos; k++) if (ids[n - 1] == info.eos_ids[k]) { n--; break; }
        char *text = NULL;
        size_t len = 0;
        if (!tok_decode(tk, ids, (size_t)n, 1, &text, &len, err, sizeof err)) {
            sm_matcher sm;
            sm_state st;
            sm_init(&sm, g, &st);
            CHECK(sm_feed(&sm, &st, text, len) == 0, "reply %d leaves the grammar: '%s'", i, text);
            if (f == ENG_FIN_EOS) CHECK(sm_complete(&sm, &st), "reply %d ended inside a call: '%s'", i, text);
            for (const char *c = text; (c = strstr(c, "e{")); c++) calls++;
            sm_release(&sm);
        }
        free(text);
        eng_release(r[i]);
    }
    jsc_free(g);
    CHECK(calls > 0, "no call in %d replies", NG);
    printf("  grammar text: %d calls in %d replies\n", calls, NG);
    free(prompt);
out:
    eng_free(e);
    eng_free(e0);
    free(tb);
    free(to);
    tok_free(tk);
    ci_model_free(m);
}

/* A paged family on a small shared block pool (engine.h "Paged caches"), qwen3_tied and
 * deepseek_v3 / deepseek_v32 (MLA latents, DSA indexer keys) with --parallel 4 and 7 blocks
 * of 128 tokens: 12 requests of 140..327 prompt tokens + 24 generated (2..3 blocks each)
 * submitted at once cannot all fit, so some wait for blocks (kv_waits > 0), and each still
 * equals its solo run; a second turn that extends a first one takes its full blocks and its
 * last block from the pool (cached = the first turn's 327 prompt + 23 fed rows) and equals
 * the same turn on an engine without reuse; a request that could never fit (8 blocks) is
 * refused at submit; a cancelled one gives its blocks back; idle, no block is in use. */
/* dir (qwen3_tied when NULL) twice: an engine of 4 slots on a pool of kv_blocks blocks
 * (prefill chunk 128), and a reference of one slot without prefix reuse. 0, or -1 with err. */
static int paged_pair_of(const char *dir, int kv_blocks, ci_model **m, ci_model **m0, eng **e, eng **e0, char *err,
                         size_t errlen) {
    ci_model_opts mo = { .n_threads = 0 };
    eng_opts eo = { 4, 1024, 16, 64 << 20, NULL, NULL, 0, -1, kv_blocks, 128, 0, 0, 0 };
    eng_opts eo0 = { 1, 1024, 16, 0, NULL, NULL, 0, -1, 0, 0, 0, 0, 0 };
    if (!dir) dir = "tests/fixtures/qwen3_tied";
    if (ci_model_open(dir, &mo, m, err, errlen) || ci_model_open(dir, &mo, m0, err, errlen))
        return -1;
    return eng_new(*m, &eo, e, err, errlen) || eng_new(*m0, &eo0, e0, err, errlen) ? -1 : 0;
}

static void paged_pool(const char *dir) {
    enum { N = 12, G = 24 };
    char err[1024];
    ci_model *m = NULL, *m0 = NULL;
    eng *e = NULL, *e0 = NULL;
    if (paged_pair_of(dir, 7, &m, &m0, &e, &e0, err, sizeof err)) { CHECK(0, "%s: %s", dir, err); goto done; }
    const int V = (int)m->cfg.vocab_size;
    static int prompts[N][400], solo[N][G], got[G];
    int n[N];
    for (int i = 0; i < N; i++) {
        n[i] = 140 + 17 * i;
        prompt_of(i + 40, V, prompts[i], n[i]);
        CHECK(paged_run(e0, prompts[i], n[i], G, i, solo[i], NULL, NULL) == G, "solo %d", i);
    }
    eng_req *r[N];
    for (int i = 0; i < N; i++)
        if (paged_run(e, prompts[i], n[i], G, i, NULL, NULL, &r[i])) { CHECK(0, "submit %d", i); r[i] = NULL; }
    int all_same = 1;
    for (int i = 0; i < N; i++) {
        if (!r[i]) continue;
        eng_tok t[G];
        int k = read_all(r[i], t, G);
        for (int j = 0; j < k; j++) got[j] = t[j].id;
        all_same &= k == G && !memcmp(got, solo[i], sizeof got);
        eng_release(r[i]);
    }
    CHECK(all_same, "%s: a request on the shared pool differs from its solo run", dir);
    eng_stats st;
    eng_get_stats(e, &st);
    CHECK(st.kv_blocks == 7 && st.kv_block_tokens == 128 && st.kv_waits > 0, "pool %d x %d, waits %lld", st.kv_blocks,
          st.kv_block_tokens, st.kv_waits);
    /* turn 2 extends request 11 (327 prompt tokens + its 24): its two full blocks and its last
     * block (94 rows) come from the pool */
    int t2[400], out2[G], ref2[G], c = -1, c0 = -1;
    memcpy(t2, prompts[11], (size_t)n[11] * sizeof(int));
    memcpy(t2 + n[11], solo[11], G * sizeof(int));
    prompt_of(99, V, t2 + n[11] + G, 20);
    const int n2 = n[11] + G + 20;
    CHECK(paged_run(e, t2, n2, G, 5, out2, &c, NULL) == G && c == n[11] + G - 1, "%s: turn 2 cached %d", dir, c);
    CHECK(paged_run(e0, t2, n2, G, 5, ref2, &c0, NULL) == G && c0 == 0, "no-reuse turn 2 cached %d", c0);
    CHECK(!memcmp(out2, ref2, sizeof out2), "%s: turn 2 from reused blocks differs from a full prefill", dir);
    /* a turn that diverges right after request 11's prompt: its third block (256..383) is full
     * and named since turn 2, and shares the prompt's 71 rows there: they are copied into a
     * block of its own (copy on write; a hybrid's states from the snapshot at the prompt's end) */
    int t3[400], out3[G], ref3[G];
    memcpy(t3, prompts[11], (size_t)n[11] * sizeof(int));
    prompt_of(77, V, t3 + n[11], 20);
    CHECK(paged_run(e, t3, n[11] + 20, G, 6, out3, &c, NULL) == G && c == n[11], "%s: diverging turn cached %d, want %d",
          dir, c, n[11]);
    CHECK(paged_run(e0, t3, n[11] + 20, G, 6, ref3, &c0, NULL) == G && c0 == 0, "no-reuse diverging turn cached %d", c0);
    CHECK(!memcmp(out3, ref3, sizeof out3), "%s: the diverging turn from a copied block differs from a full prefill", dir);
    eng_get_stats(e, &st);
    CHECK(st.kv_block_copies == 2 && st.kv_tail_hits == 2, "%s: %lld block copies, %lld of last blocks; want 2, 2 (request "
          "11's last block copied by turn 2, and again by turn 3: it stays named)", dir, st.kv_block_copies, st.kv_tail_hits);
    /* never fits: 1000 + 24 tokens are 8 blocks of a 7-block pool */
    static int big[1000];
    prompt_of(7, V, big, 1000);
    eng_params p;
    memset(&p, 0, sizeof p);
    p.prompt = big; p.n_prompt = 1000; p.max_tokens = G; p.top_logprobs = -1;
    ci_sampler_defaults(&p.so);
    eng_req *rb = NULL;
    CHECK(eng_submit(e, &p, &rb, err, sizeof err) == -1 && !rb, "an 8-block request accepted");
    CHECK_HAS(err, "need 8 cache blocks of 128 tokens; the pool has 7");
    /* cancelled mid-run: its blocks come back */
    eng_req *rc = NULL;
    if (!paged_run(e, prompts[3], n[3], 60, 3, NULL, NULL, &rc)) {
        eng_tok t[1];
        int done = 0;
        eng_read(rc, 0, t, 1, 5000, &done);
        eng_cancel(rc);
        while (!done) { eng_tok tt[64]; eng_read(rc, 0, tt, 64, 1000, &done); }
        eng_release(rc);
    }
    for (int w = 0; w < 100; w++) {   /* the scheduler settles the slot after the reader saw the end */
        eng_get_stats(e, &st);
        if (st.active == 0 && st.kv_blocks_used == 0) break;
        usleep(10000);
    }
    CHECK(st.kv_blocks_used == 0 && st.kv_blocks_cached + st.kv_blocks_used <= 7, "%s: idle: %d blocks in use", dir,
          st.kv_blocks_used);
    CHECK(st.kv_block_hits >= 2 && st.prefix_hit_tokens >= 256, "hits %lld, hit tokens %lld", st.kv_block_hits,
          st.prefix_hit_tokens);
done:
    eng_free(e); eng_free(e0);
    ci_model_free(m); ci_model_free(m0);
}

/* A hybrid whose request had to recompute blocks the pool already named (the rows were there,
 * no states at their end): its own later blocks are still named (through the named ones), so
 * a next turn after its prompt reuses all of it from the snapshot at the prompt's end. A: 268
 * ids; B: A's 268 + 300 (the pool gives 256 of them, no states there: B runs all 568); C: B's
 * 568 + 40 takes 568, and its ids equal an engine's without reuse. */
static void paged_recomputed(const char *dir) {
    enum { G = 16 };
    char err[1024];
    ci_model *m = NULL, *m0 = NULL;
    eng *e = NULL, *e0 = NULL;
    if (paged_pair_of(dir, 20, &m, &m0, &e, &e0, err, sizeof err)) { CHECK(0, "%s: %s", dir, err); goto done; }
    const int V = (int)m->cfg.vocab_size;
    static int t[620];
    int out[G], ref[G], c = -1, c0 = -1;
    prompt_of(61, V, t, 268);
    prompt_of(62, V, t + 268, 300);
    prompt_of(63, V, t + 568, 40);
    CHECK(paged_run(e, t, 268, G, 1, out, &c, NULL) == G && c == 0, "%s: A cached %d", dir, c);
    CHECK(paged_run(e, t, 568, G, 2, out, &c, NULL) == G && c == 0, "%s: B cached %d (no states within the blocks)", dir, c);
    CHECK(paged_run(e, t, 608, G, 3, out, &c, NULL) == G && c == 568, "%s: C cached %d, want 568", dir, c);
    CHECK(paged_run(e0, t, 608, G, 3, ref, &c0, NULL) == G && c0 == 0, "no-reuse C cached %d", c0);
    CHECK(!memcmp(out, ref, sizeof out), "%s: C from B's blocks and states differs from a full prefill", dir);
done:
    eng_free(e); eng_free(e0);
    ci_model_free(m); ci_model_free(m0);
}

/* eng_params.snap_at: two chats share a 300-token system prompt and part after it. A hybrid
 * whose first chat said where its system prompt ends (snap_at 300) snapshots its states there,
 * so the second chat takes 300 tokens (the third block's 44 rows copied); without snap_at it
 * takes none (no states within the shared blocks). Each equals an engine's without reuse. */
static void snap_at_system_end(const char *dir) {
    enum { G = 8 };
    char err[1024];
    for (int with = 0; with < 2; with++) {
        ci_model *m = NULL, *m0 = NULL;
        eng *e = NULL, *e0 = NULL;
        if (paged_pair_of(dir, 20, &m, &m0, &e, &e0, err, sizeof err)) { CHECK(0, "%s: %s", dir, err); goto done; }
        CHECK(eng_snapshots(e), "%s: prefix reuse through snapshots", dir);
        const int V = (int)m->cfg.vocab_size;
        static int a[500], b[500];
        prompt_of(81, V, a, 300);
        memcpy(b, a, 300 * sizeof(int));
        prompt_of(82, V, a + 300, 90);
        prompt_of(83, V, b + 300, 110);
        eng_params p;
        memset(&p, 0, sizeof p);
        p.prompt = a; p.n_prompt = 390; p.max_tokens = G; p.top_logprobs = -1; p.ignore_eos = 1;
        p.snap_at = with ? 300 : 0;
        ci_sampler_defaults(&p.so);
        eng_req *r = NULL;
        if (eng_submit(e, &p, &r, err, sizeof err)) { CHECK(0, "%s: %s", dir, err); goto done; }
        eng_tok t[G];
        CHECK(read_all(r, t, G) == G, "%s: first chat", dir);
        eng_release(r);
        int out[G], ref[G], c = -1, c0 = -1;
        CHECK(paged_run(e, b, 410, G, 4, out, &c, NULL) == G && c == (with ? 300 : 0), "%s: snap_at %d: the second chat took %d",
              dir, p.snap_at, c);
        CHECK(paged_run(e0, b, 410, G, 4, ref, &c0, NULL) == G && c0 == 0, "no-reuse second chat cached %d", c0);
        CHECK(!memcmp(out, ref, sizeof out), "%s: the second chat from the system prompt's snapshot differs", dir);
    done:
        eng_free(e); eng_free(e0);
        ci_model_free(m); ci_model_free(m0);
    }
}

static void test_engine_snap_at(void) {
    snap_at_system_end("tests/fixtures/qwen3_5");
    snap_at_system_end("tests/fixtures/nemotron_h");
    snap_at_system_end("tests/fixtures/deepseek_v4");
}

static void test_engine_paged_recomputed(void) {
    paged_recomputed("tests/fixtures/qwen3_5");
    paged_recomputed("tests/fixtures/lfm2");
    paged_recomputed("tests/fixtures/deepseek_v4_hub");
}

/* The prefix store's default (ENG_PREFIX_AUTO): a hybrid on the block pool measures one
 * snapshot of its states and takes 256 MiB or two snapshots per slot, whichever is more (the
 * tiny fixtures: 256 MiB); a given budget is kept; a dense paged family keeps no store (its
 * prefixes are the pool's named blocks). */
static void test_engine_prefix_auto(void) {
    static const char *const dirs[] = { "tests/fixtures/qwen3_5", "tests/fixtures/nemotron_h", "tests/fixtures/qwen3_tied" };
    char err[512];
    for (size_t f = 0; f < sizeof dirs / sizeof *dirs; f++) {
        ci_model *m = NULL, *m2 = NULL;
        ci_model_opts mo = { .n_threads = 0 };
        eng *e = NULL, *e2 = NULL;
        eng_opts eo = { 4, 512, 16, ENG_PREFIX_AUTO, NULL, NULL, 0, -1, 0, 128, 0, 0, 0 };
        eng_opts eo2 = eo;
        eo2.prefix_cache_bytes = 64u << 20;
        if (ci_model_open(dirs[f], &mo, &m, err, sizeof err) || ci_model_open(dirs[f], &mo, &m2, err, sizeof err) ||
            eng_new(m, &eo, &e, err, sizeof err) || eng_new(m2, &eo2, &e2, err, sizeof err)) {
            CHECK(0, "%s: %s", dirs[f], err);
        } else {
            eng_stats st, st2;
            eng_get_stats(e, &st);
            eng_get_stats(e2, &st2);
            const int hybrid = f < 2;
            const size_t two = 2 * 4 * st.snapshot_bytes, def = (size_t)ENG_PREFIX_DEFAULT_MB << 20;
            if (hybrid) {
                CHECK(st.snapshot_bytes > 0 && st.snapshot_bytes < (1u << 20), "%s: snapshot of the states %zu bytes", dirs[f],
                      st.snapshot_bytes);
                CHECK(st.prefix_budget == (two > def ? two : def), "%s: auto budget %zu", dirs[f], st.prefix_budget);
                CHECK(st2.prefix_budget == 64u << 20, "%s: a given budget kept: %zu", dirs[f], st2.prefix_budget);
            } else {
                CHECK(st.snapshot_bytes == 0 && st.prefix_budget == 0, "%s: dense: snapshot %zu, store %zu", dirs[f],
                      st.snapshot_bytes, st.prefix_budget);
            }
        }
        eng_free(e); eng_free(e2);
        ci_model_free(m); ci_model_free(m2);
    }
}

static void test_engine_paged_pool(void) { paged_pool(NULL); }
static void test_engine_paged_pool_mla(void) {
    paged_pool("tests/fixtures/deepseek_v3");
    paged_pool("tests/fixtures/deepseek_v32");
}
/* the hybrids: attention rows in the pool's blocks, recurrent states from snapshots at block
 * boundaries and at a turn's end (turn 2 takes the last block over and the states at its end) */
static void test_engine_paged_pool_hybrid(void) {
    paged_pool("tests/fixtures/lfm2");
    paged_pool("tests/fixtures/qwen3_5");
    paged_pool("tests/fixtures/nemotron_h");
    paged_pool("tests/fixtures/deepseek_v4");   /* compressed entries in the blocks, rings in snapshots */
}

/* Blocks on demand: 6 blocks of 128 and 4 slots; 8 requests of 100..170 prompt tokens that
 * generate 200 each (2..3 blocks at the end) are admitted on their prompt's block, grow while
 * decoding, and the pool runs dry: the newest running one is preempted (back to the queue,
 * its generated ids recomputed at its next admission, its sampler kept). Each still equals
 * its solo run token for token (temperature 0.8, seeded), preemptions > 0, and the idle
 * pool holds no block. */
static void paged_preempt(const char *dir) {
    enum { N = 8, G = 200 };
    char err[1024];
    ci_model *m = NULL, *m0 = NULL;
    eng *e = NULL, *e0 = NULL;
    if (paged_pair_of(dir, 6, &m, &m0, &e, &e0, err, sizeof err)) { CHECK(0, "%s", err); goto done; }
    const int V = (int)m->cfg.vocab_size;
    static int prompts[N][200], solo[N][G];
    int n[N];
    for (int i = 0; i < N; i++) {
        n[i] = 100 + 10 * i;
        prompt_of(i + 70, V, prompts[i], n[i]);
        CHECK(paged_run(e0, prompts[i], n[i], G, 30 + i, solo[i], NULL, NULL) == G, "solo %d", i);
    }
    eng_req *r[N];
    for (int i = 0; i < N; i++)
        if (paged_run(e, prompts[i], n[i], G, 30 + i, NULL, NULL, &r[i])) { CHECK(0, "submit %d", i); r[i] = NULL; }
    int all_same = 1, first_bad = -1;
    for (int i = 0; i < N; i++) {
        if (!r[i]) continue;
        static eng_tok t[G];
        int k = read_all(r[i], t, G);
        int same = k == G;
        for (int j = 0; j < k && same; j++) same = t[j].id == solo[i][j];
        if (!same && first_bad < 0) first_bad = i;
        all_same &= same;
        CHECK(eng_req_finish(r[i], err, sizeof err) == ENG_FIN_LENGTH, "request %d: %s", i, err);
        eng_release(r[i]);
    }
    CHECK(all_same, "%s: request %d differs from its solo run after preemption", dir ? dir : "qwen3_tied", first_bad);
    eng_stats st;
    for (int w = 0; w < 100; w++) {
        eng_get_stats(e, &st);
        if (st.active == 0 && st.kv_blocks_used == 0) break;
        usleep(10000);
    }
    CHECK(st.preemptions > 0, "no preemption with 6 blocks for 4 growing sequences");
    CHECK(st.kv_blocks_used == 0, "idle: %d blocks in use", st.kv_blocks_used);
done:
    eng_free(e); eng_free(e0);
    ci_model_free(m); ci_model_free(m0);
}

/* the hybrids: a preempted request goes on from the snapshot of its states taken as it let
 * its blocks go (and the blocks the pool kept), so it still equals its solo run */
static void test_engine_paged_preempt(void) {
    paged_preempt(NULL);
    paged_preempt("tests/fixtures/qwen3_5");
    paged_preempt("tests/fixtures/lfm2");
    paged_preempt("tests/fixtures/nemotron_h");
    paged_preempt("tests/fixtures/deepseek_v4");
}

/* Preempted again and again: 4 slots on a pool of 8 blocks, 4 requests of n0..n0+30 prompt
 * tokens that generate 600 each (6 blocks at the end, 7 at n0 = 150): every request but one
 * is preempted; at n0 = 100 one of them twice as the scheduler runs here (the second time its
 * prompt must be its own prompt + all its ids, not the first resume's prompt + all its ids
 * again: that request differed from its solo run at its 364th token). Greedy and seeded sampling
 * (one with presence and frequency penalties), logprobs, the tokens read one at a time while
 * they come (the reader's stream: no token twice or missing across a pause); each equals its
 * solo run token for token, logprobs bit for bit; idle, no block is in use.
 * With replay (eng_opts.replay_decode; the CPU's prefill and decode agree bit for bit, so
 * the tokens cannot tell the two ways apart, the counts can): generated ids were fed again
 * as decode steps (replay_tokens > 0), every admission prefilled at most its own prompt (the
 * prefilled tokens are at most the prompts once plus the longest per preemption), and each
 * decode row either sampled a token (600 - 1 per request: the first comes from the prefill)
 * or replayed an id (the last id of each resume does both). Without it, none is replayed. */
static void paged_churn_of(const char *dir, int prefix, int replay, int n0, int chunk) {
    enum { N = 4, G = 600, NB = 8 };
    char err[1024];
    ci_model *m = NULL, *m0 = NULL;
    eng *e = NULL, *e0 = NULL;
    ci_model_opts mo = { .n_threads = 0 };
    eng_opts eo = { 4, 1024, 16, prefix ? 64 << 20 : 0, NULL, NULL, 0, -1, NB, chunk, 0, replay, 0 };
    eng_opts eo0 = { 1, 1024, 16, 0, NULL, NULL, 0, -1, 0, 0, 0, 0, 0 };
    if (ci_model_open(dir, &mo, &m, err, sizeof err) || ci_model_open(dir, &mo, &m0, err, sizeof err) ||
        eng_new(m, &eo, &e, err, sizeof err) || eng_new(m0, &eo0, &e0, err, sizeof err)) {
        CHECK(0, "%s: %s", dir, err);
        goto done;
    }
    const int V = (int)m->cfg.vocab_size;
    static int prompts[N][200];
    static eng_tok solo[N][G], got[N][G];
    static int solo_n0 = -1;                  /* the solo runs are those of prompts n0.. of solo_dir (made once each) */
    static const char *solo_dir = NULL;
    if (solo_dir != dir) solo_n0 = -1;
    solo_dir = dir;
    eng_params p[N];
    int n[N], n_got[N], done_[N], sum_n = 0, max_n = 0;
    for (int i = 0; i < N; i++) {
        n[i] = n0 + 10 * i;
        sum_n += n[i];
        if (n[i] > max_n) max_n = n[i];
        prompt_of(i + 90, V, prompts[i], n[i]);
        memset(&p[i], 0, sizeof p[i]);
        p[i].prompt = prompts[i];
        p[i].n_prompt = n[i];
        p[i].max_tokens = G;
        ci_sampler_defaults(&p[i].so);
        p[i].so.temperature = i % 2 ? 0.8f : 0;   /* 0 and 2 greedy, 1 and 3 sampled */
        p[i].so.seed = (uint64_t)(50 + i);
        if (i == 3) p[i].presence_penalty = 0.5f, p[i].frequency_penalty = 0.25f;
        p[i].top_logprobs = 2;
        p[i].ignore_eos = 1;
        eng_req *r;
        if (solo_n0 == n0) continue;
        if (eng_submit(e0, &p[i], &r, err, sizeof err)) { CHECK(0, "solo %d: %s", i, err); continue; }
        int k = read_all(r, solo[i], G);
        eng_release(r);
        CHECK(k == G, "solo %d: %d tokens", i, k);
    }
    solo_n0 = n0;
    eng_req *r[N];
    for (int i = 0; i < N; i++) {
        n_got[i] = 0;
        done_[i] = 0;
        if (eng_submit(e, &p[i], &r[i], err, sizeof err)) { CHECK(0, "submit %d: %s", i, err); r[i] = NULL; done_[i] = 1; }
    }
    /* the readers' streams: one token at a time from each, as they come */
    for (int left = N; left > 0;) {
        left = 0;
        for (int i = 0; i < N; i++) {
            if (done_[i]) continue;
            n_got[i] += eng_read(r[i], n_got[i], got[i] + n_got[i], n_got[i] < G ? 1 : 0, 2, &done_[i]);
            left += !done_[i];
        }
    }
    for (int i = 0; i < N; i++) {
        if (!r[i]) continue;
        int same = n_got[i] == G, j = 0;
        for (; j < n_got[i] && same; j++) same = same_tok(&got[i][j], &solo[i][j]);
        CHECK(same, "%s prefix %d replay %d: request %d differs from its solo run at token %d of %d (%d %g, solo %d %g)", dir,
              prefix, replay, i, same ? -1 : j - 1, n_got[i], same ? 0 : got[i][j - 1].id, same ? 0 : (double)got[i][j - 1].logprob,
              same ? 0 : solo[i][j - 1].id, same ? 0 : (double)solo[i][j - 1].logprob);
        CHECK(eng_req_finish(r[i], err, sizeof err) == ENG_FIN_LENGTH, "request %d: %s", i, err);
        eng_release(r[i]);
    }
    eng_stats st;
    for (int w = 0; w < 100; w++) {
        eng_get_stats(e, &st);
        if (st.active == 0 && st.kv_blocks_used == 0) break;
        usleep(10000);
    }
    printf("  %s prefix %d replay %d prompts %d.. chunk %d: %lld preemptions, %lld prefilled, %lld decoded, %lld replayed\n",
           dir, prefix, replay, n0, chunk, st.preemptions, st.prefill_tokens, st.decode_tokens, st.replay_tokens);
    CHECK(st.preemptions >= N - 1, "prefix %d replay %d: %lld preemptions of %d requests", prefix, replay, st.preemptions, N);
    CHECK(st.kv_blocks_used == 0, "idle: %d blocks in use", st.kv_blocks_used);
    if (replay) {
        const long long sampled = (long long)N * (G - 1);
        CHECK(st.replay_tokens > 0 && st.prefill_tokens <= sum_n + st.preemptions * max_n &&
              st.decode_tokens <= sampled + st.replay_tokens && st.decode_tokens >= sampled + st.replay_tokens - st.preemptions,
              "replay: %lld replayed, %lld prefilled (prompts %d, longest %d), %lld decoded", st.replay_tokens,
              st.prefill_tokens, sum_n, max_n, st.decode_tokens);
    } else {
        CHECK(st.replay_tokens == 0, "%lld replayed without replay", st.replay_tokens);
    }
done:
    eng_free(e); eng_free(e0);
    ci_model_free(m); ci_model_free(m0);
}

static void paged_churn(int prefix, int replay, int n0, int chunk) {
    paged_churn_of("tests/fixtures/qwen3_tied", prefix, replay, n0, chunk);
}

static void test_engine_paged_churn(void) {
    paged_churn(1, 0, 100, 128);
    paged_churn(0, 0, 100, 128);
}

/* The same with the resumed requests' ids replayed as decode steps (the rule on a device),
 * the prefix cache on and off, and prompts longer than a block with a prefill chunk of 256
 * (a resume that gets back less than its prompt restarts at its first admission's chunk). */
static void test_engine_paged_replay(void) {
    paged_churn(1, 1, 100, 128);
    paged_churn(0, 1, 100, 128);
    paged_churn(1, 1, 150, 256);
}

/* The hybrids under the same churn: a resumed request goes on from the snapshot of its states
 * taken as it let its blocks go, or from an earlier one when the pool has evicted the blocks
 * after it, its ids fed again as decode steps (a hybrid always replays: its recurrent layers'
 * chunked prefill differs from their steps in the last bits, so without replay request 1 of
 * qwen3_5 parted from its solo run at token 403). */
static void test_engine_paged_churn_hybrid(void) {
    paged_churn_of("tests/fixtures/qwen3_5", 1, 1, 100, 128);
    paged_churn_of("tests/fixtures/qwen3_5", 0, 1, 100, 128);
    paged_churn_of("tests/fixtures/lfm2", 1, 1, 150, 256);
    paged_churn_of("tests/fixtures/nemotron_h", 1, 1, 100, 128);
}

/* Paged, prefill chunk 256: a prompt whose reused prefix (one 128-token block and the first
 * turn's last block up to its 200 prompt rows) ends off the chunk grid runs the rest (128
 * tokens) in one call, not 56 up to the next multiple of 256 and then 72, and equals the
 * same prompt on an engine without reuse; its first token is counted once, at no less than
 * its prefill's time. */
static void test_engine_paged_one_call(void) {
    enum { G = 8 };
    char err[1024];
    ci_model_opts mo = { .n_threads = 0 };
    ci_model *m = NULL, *m0 = NULL;
    eng *e = NULL, *e0 = NULL;
    eng_opts eo = { 2, 1024, 16, 64 << 20, NULL, NULL, 0, -1, 16, 256, 0, 0, 0 };
    eng_opts eo0 = { 1, 1024, 16, 0, NULL, NULL, 0, -1, 0, 256, 0, 0, 0 };
    if (ci_model_open("tests/fixtures/qwen3_tied", &mo, &m, err, sizeof err) ||
        ci_model_open("tests/fixtures/qwen3_tied", &mo, &m0, err, sizeof err) || eng_new(m, &eo, &e, err, sizeof err) ||
        eng_new(m0, &eo0, &e0, err, sizeof err)) {
        CHECK(0, "%s", err);
        goto done;
    }
    const int V = (int)m->cfg.vocab_size;
    static int a[200], b[328];
    int out[G], ref[G], c = -1;
    prompt_of(61, V, a, 200);
    CHECK(paged_run(e, a, 200, G, 1, out, NULL, NULL) == G, "turn 1");
    memcpy(b, a, sizeof a);
    prompt_of(62, V, b + 200, 128);
    eng_stats s0, s1;
    eng_get_stats(e, &s0);
    CHECK(paged_run(e, b, 328, G, 2, out, &c, NULL) == G && c == 200, "turn 2 cached %d", c);
    eng_get_stats(e, &s1);
    CHECK(s1.prefill_calls - s0.prefill_calls == 1 && s1.prefill_tokens - s0.prefill_tokens == 128,
          "turn 2: %lld prefill calls for %lld tokens (want 1 for 128)", s1.prefill_calls - s0.prefill_calls,
          s1.prefill_tokens - s0.prefill_tokens);
    CHECK(paged_run(e0, b, 328, G, 2, ref, NULL, NULL) == G && !memcmp(out, ref, sizeof out),
          "turn 2 after a reused prefix differs from a full prefill");
    CHECK(s1.first_tokens - s0.first_tokens == 1 && s1.first_token_seconds - s0.first_token_seconds >= s1.prefill_seconds - s0.prefill_seconds,
          "turn 2: %lld first tokens, %.6f s to them, %.6f s of prefill", s1.first_tokens - s0.first_tokens,
          s1.first_token_seconds - s0.first_token_seconds, s1.prefill_seconds - s0.prefill_seconds);
    /* the first token's time holds the queue wait, the admission and the prefill (one clock) */
    const double dq = s1.queue_seconds - s0.queue_seconds, da = s1.admit_seconds - s0.admit_seconds;
    CHECK(s1.admissions - s0.admissions == 1 && dq >= 0 && da > 0 &&
              s1.first_token_seconds - s0.first_token_seconds >= dq + da + (s1.prefill_seconds - s0.prefill_seconds) - 1e-9,
          "turn 2: %lld admissions, queue %.6f s, admission %.6f s, prefill %.6f s, first token %.6f s",
          s1.admissions - s0.admissions, dq, da, s1.prefill_seconds - s0.prefill_seconds,
          s1.first_token_seconds - s0.first_token_seconds);
done:
    if (e) eng_free(e);
    if (e0) eng_free(e0);
    if (m) ci_model_free(m);
    if (m0) ci_model_free(m0);
}

int main(void) {
    TEST_RUN(test_engine_demo);
    TEST_RUN(test_engine_greedy_argmax);
    TEST_RUN(test_engine_sample_threads);
    TEST_RUN(test_engine_hybrid_lfm2);
    TEST_RUN(test_engine_busy);
    TEST_RUN(test_engine_wide_dense_alone_vs_beside_7);
    TEST_RUN(test_engine_paged_pool);
    TEST_RUN(test_engine_paged_pool_mla);
    TEST_RUN(test_engine_paged_pool_hybrid);
    TEST_RUN(test_engine_paged_recomputed);
    TEST_RUN(test_engine_prefix_auto);
    TEST_RUN(test_engine_snap_at);
    TEST_RUN(test_engine_paged_preempt);
    TEST_RUN(test_engine_paged_churn);
    TEST_RUN(test_engine_paged_replay);
    TEST_RUN(test_engine_paged_churn_hybrid);
    TEST_RUN(test_engine_paged_one_call);
    TEST_RUN(test_engine_hybrid_snapshot_reuse);
    TEST_RUN(test_prefix_store);
    TEST_RUN(test_engine_json_mode);
    TEST_RUN(test_engine_grammar_text);
    TEST_EXIT();
}
