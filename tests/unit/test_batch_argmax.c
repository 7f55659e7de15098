/* test_batch_argmax.c — ci_forward_batch_argmax, the batched greedy decode step, on the CPU.
 *
 * Run from the repository root (tests/fixtures). For qwen3, llama, qwen3_moe, qwen3_5,
 * qwen3_next, nemotron_h, deepseek_v4 and deepseek_v3 / v32 fixtures (ones whose greedy ids vary from step to
 * step, so rows cannot agree by accident; the last four keep a recurrent state or window
 * rings and compressors per session):
 *  - 3 sessions at different positions (and different contexts) step together for several
 *    steps, each fed its own greedy token; every row's id equals ci_forward_argmax run on a
 *    lone session holding the same tokens (the CPU paths are bit-identical, so ids agree
 *    exactly), positions advance by one;
 *  - the host fallback (family without forward_batch_argmax: forward_batch + the sampler's
 *    greedy rule) gives the same ids; a family without forward_batch is refused naming it;
 *  - bad input is refused with one line and changes no position: a session twice, an id
 *    outside the vocabulary, a full session, n = 0.
 * With CINFER_TEST_DEVICE=cuda (tests/gpu/run.sh on the device) the first check runs on the
 * CUDA backend, for the f32 fixtures that have a CUDA path (llama, qwen3, qwen3_5): there the batch
 * rows take the same f32 GEMV and split-K attention kernels as a lone row (the 16-bit
 * weights' n > 1 GEMM rounds activations, so a bf16 fixture could flip a near tie), and the
 * batch step is replayed from a recorded graph after its first step. */
#include "check.h"
#include "cinfer.h"
#include "models/model.h"
#include <stdlib.h>
#include <string.h>

static const char *const fixtures[] = { "tests/fixtures/qwen3_bf16", "tests/fixtures/llama_yarn",
                                        "tests/fixtures/qwen3_tied", "tests/fixtures/qwen3_moe",
                                        "tests/fixtures/qwen3_5",    "tests/fixtures/qwen3_next",
                                        "tests/fixtures/nemotron_h", "tests/fixtures/nemotron_h_latent",
                                        "tests/fixtures/deepseek_v4", "tests/fixtures/deepseek_v4_hub",
                                        "tests/fixtures/deepseek_v3", "tests/fixtures/deepseek_v32" };

static int one_line(const char *s) { return s[0] && !strchr(s, '\n'); }

/* Runs `steps` batched steps over 3 sessions primed with prompts of different lengths and
 * checks each row against a lone session. ops: the family's own, or a copy with some ops
 * taken away (the host fallback). */
static void check_rows(const char *fx, ci_model *m, const char *what) {
    char err[512];
    ci_session *s[3], *r;
    int lens[3] = { 2, 9, 5 }, prompt[12] = { 3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8 };
    const int steps = 4;
    for (int i = 0; i < 3; i++) CHECK(!ci_session_new(m, 24 + 8 * i, &s[i], err, sizeof err), "%s", err);
    CHECK(!ci_session_new(m, 24, &r, err, sizeof err), "%s", err);
    int toks[3], ids[3];
    for (int i = 0; i < 3; i++)
        CHECK(!ci_forward_argmax(s[i], prompt + i, lens[i], &toks[i], err, sizeof err), "%s: %s", fx, err);
    int hist[3][8];
    for (int step = 0; step < steps; step++) {
        for (int i = 0; i < 3; i++) hist[i][step] = toks[i];
        CHECK(!ci_forward_batch_argmax(s, toks, 3, ids, err, sizeof err), "%s (%s): %s", fx, what, err);
        for (int i = 0; i < 3; i++) {
            CHECK(ci_session_pos(s[i]) == lens[i] + step + 1, "%s (%s): row %d at position %d", fx, what, i,
                  ci_session_pos(s[i]));
            toks[i] = ids[i];
        }
    }
    /* each row alone: the same prompt, then the same fed tokens one by one */
    for (int i = 0; i < 3; i++) {
        ci_session_reset(r);
        int id = -1;
        CHECK(!ci_forward_argmax(r, prompt + i, lens[i], &id, err, sizeof err), "%s", err);
        for (int step = 0; step < steps; step++) {
            CHECK(id == hist[i][step], "%s (%s): row %d step %d: lone %d, batch fed %d", fx, what, i, step, id,
                  hist[i][step]);
            CHECK(!ci_forward_argmax(r, &hist[i][step], 1, &id, err, sizeof err), "%s", err);
        }
        CHECK(id == toks[i], "%s (%s): row %d last step: lone %d, batch %d", fx, what, i, id, toks[i]);
    }
    for (int i = 0; i < 3; i++) ci_session_free(s[i]);
    ci_session_free(r);
}

static void test_rows_equal_single(void) {
    char err[512];
    const char *dev = getenv("CINFER_TEST_DEVICE");
    const int cuda = dev && !strcmp(dev, "cuda");
    for (size_t f = 0; f < sizeof fixtures / sizeof *fixtures; f++) {
        ci_model_opts o = { .n_threads = 2, .device = cuda };
        ci_model *m;
        if (cuda && (strstr(fixtures[f], "bf16") || strstr(fixtures[f], "moe") || strstr(fixtures[f], "next") ||
                     strstr(fixtures[f], "nemotron") || strstr(fixtures[f], "deepseek")))
            continue;   /* MoE layers (nemotron_h, qwen3_next, deepseek_v3 / v32): the device's expert sums
                         * depend on the batch; deepseek_v4 has no CUDA path yet */
        if (ci_model_open(fixtures[f], &o, &m, err, sizeof err)) { CHECK(0, "%s: %s", fixtures[f], err); return; }
        CHECK(m->family->ops->forward_batch_argmax != NULL, "%s: the family has the op", fixtures[f]);
        check_rows(fixtures[f], m, "backend argmax");
        /* the host fallback: the same family without its batched argmax */
        const ci_family *own = m->family;
        ci_family_ops ops = *own->ops;
        ci_family fam = *own;
        fam.ops = &ops;
        ops.forward_batch_argmax = NULL;
        m->family = &fam;
        check_rows(fixtures[f], m, "host argmax");
        /* no batched decode at all: one line naming the family */
        ops.forward_batch = NULL;
        ci_session *a;
        CHECK(!ci_session_new(m, 8, &a, err, sizeof err), "%s", err);
        int t = 1, id = 0;
        err[0] = 0;
        CHECK(ci_forward_batch_argmax(&a, &t, 1, &id, err, sizeof err) < 0, "%s: refused without forward_batch",
              fixtures[f]);
        char want[128];
        snprintf(want, sizeof want, "%s: no batched decode", own->name);
        CHECK(!strcmp(err, want), "%s: got \"%s\"", fixtures[f], err);
        ci_session_free(a);
        m->family = own;
        ci_model_free(m);
    }
}

static void test_bad_input(void) {
    char err[512];
    ci_model_opts o = { .n_threads = 2 };
    ci_model *m;
    if (ci_model_open("tests/fixtures/qwen3_tied", &o, &m, err, sizeof err)) { CHECK(0, "%s", err); return; }
    int V = (int)m->cfg.vocab_size;
    ci_session *s[3];
    for (int i = 0; i < 3; i++) CHECK(!ci_session_new(m, 4, &s[i], err, sizeof err), "%s", err);
    int ids[3] = { 0, 0, 0 };
    /* a session twice */
    ci_session *twice[3] = { s[0], s[1], s[0] };
    int toks[3] = { 1, 2, 3 };
    err[0] = 0;
    CHECK(ci_forward_batch_argmax(twice, toks, 3, ids, err, sizeof err) < 0, "a session twice is refused");
    CHECK(one_line(err), "one line: \"%s\"", err);
    CHECK_HAS(err, "appears twice");
    CHECK_HAS(err, "qwen3");
    /* an id outside the vocabulary */
    int bad[3] = { 1, V, 3 };
    err[0] = 0;
    CHECK(ci_forward_batch_argmax(s, bad, 3, ids, err, sizeof err) < 0, "token %d is refused", V);
    CHECK(one_line(err), "one line: \"%s\"", err);
    CHECK_HAS(err, "outside the vocabulary");
    bad[1] = -1;
    CHECK(ci_forward_batch_argmax(s, bad, 3, ids, err, sizeof err) < 0, "token -1 is refused");
    /* n = 0 */
    err[0] = 0;
    CHECK(ci_forward_batch_argmax(s, toks, 0, ids, err, sizeof err) < 0 && one_line(err), "n = 0 is refused");
    for (int i = 0; i < 3; i++) CHECK(ci_session_pos(s[i]) == 0, "a refused step moves no session (%d)", i);
    /* a full session */
    int four[4] = { 1, 2, 3, 4 }, id;
    CHECK(!ci_forward_argmax(s[2], four, 4, &id, err, sizeof err), "%s", err);
    err[0] = 0;
    CHECK(ci_forward_batch_argmax(s, toks, 3, ids, err, sizeof err) < 0, "a full session is refused");
    CHECK(one_line(err), "one line: \"%s\"", err);
    CHECK_HAS(err, "exceeds the context");
    CHECK(ci_session_pos(s[0]) == 0 && ci_session_pos(s[1]) == 0, "a refused step moves no session");
    /* and a good step still works after the refusals */
    CHECK(!ci_forward_batch_argmax(s, toks, 2, ids, err, sizeof err), "%s", err);
    CHECK(ids[0] >= 0 && ids[0] < V && ids[1] >= 0 && ids[1] < V, "ids in the vocabulary");
    for (int i = 0; i < 3; i++) ci_session_free(s[i]);
    ci_model_free(m);
}

int main(void) {
    setenv("CINFER_CPU_POISON_SCRATCH", "1", 1);   /* scratch reads fail here too (test_parity.c) */
    TEST_RUN(test_rows_equal_single);
    TEST_RUN(test_bad_input);
    TEST_EXIT();
}
