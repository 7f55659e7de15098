/* test_snapshot.c — the hybrid families' cache snapshots through the family ops (registry.h
 * snapshot / restore), as the server's prefix reuse takes them, on the CPU and, with
 * CINFER_TEST_DEVICE=cuda (tests/gpu/run.sh), on the CUDA backend.
 *
 * Per fixture (LFM2, LFM2-MoE, Nemotron-H, Qwen3-Next, Qwen3.5, Qwen3.5-MoE, DeepSeek V4): prefill
 * 24 tokens, snapshot, feed 16 more (as one forward, then one token at a time); restore the
 * snapshot into the same session and into a fresh one that had seen other tokens, feed the same
 * 16: every logit is bit-identical to the uninterrupted run. The snapshot keeps the layers'
 * bytes in a buffer of the model's backend (device memory on CUDA: taken and restored by
 * device-to-device copies), its host blob only the shape header (DeepSeek V4's: its compressors'
 * entry counts too); a restore into a model on another backend instance comes through host
 * memory and gives the same bits. On the CPU the same again with the attention layers' cache in
 * f16 (ci_model_opts.kv_f16; not DeepSeek V4). Run from the repository root. */
#include "check.h"
#include "tmpmodel.h"
#include "cinfer.h"
#include "cache/cache.h"
#include "models/model.h"
#include "models/registry.h"
#include <stdlib.h>
#include <string.h>

static const char *const fixtures[] = { "tests/fixtures/lfm2",        "tests/fixtures/lfm2_moe",
                                        "tests/fixtures/nemotron_h",  "tests/fixtures/nemotron_h_latent",
                                        "tests/fixtures/qwen3_next",  "tests/fixtures/qwen3_5",
                                        "tests/fixtures/qwen3_5_moe_hub", "tests/fixtures/deepseek_v4" };

static int on_cuda(void) {
    const char *d = getenv("CINFER_TEST_DEVICE");
    return d && !strcmp(d, "cuda");
}

/* 40 token ids below vocab, fixed */
static void tokens(int *t, int n, int vocab) {
    unsigned x = 12345u;
    for (int i = 0; i < n; i++) {
        x = x * 1103515245u + 12345u;
        t[i] = (int)((x >> 8) % (unsigned)(vocab > 1 ? vocab - 1 : 1)) + 1;
    }
}

static void round_trip(const char *dir, int kv16) {
    char err[1024];
    ci_model *m = NULL, *m2 = NULL;
    ci_model_opts o = { .n_threads = 2, .device = on_cuda(), .kv_f16 = kv16 };
    if (ci_model_open(dir, &o, &m, err, sizeof err)) {
        if (on_cuda() && strstr(err, "no CUDA path")) { printf("SKIP %s: %s\n", dir, err); return; }
        CHECK(0, "%s: %s", dir, err);
        return;
    }
    const ci_family_ops *ops = m->family->ops;
    CHECK(ops->snapshot && ops->restore, "%s: the family has snapshots", dir);
    if (!ops->snapshot || !ops->restore) { ci_model_free(m); return; }
    ci_model_info info;
    ci_model_get_info(m, &info);
    const int V = info.vocab_size, N = 16;
    int toks[40];
    tokens(toks, 40, V);
    float *a = malloc((size_t)N * V * sizeof *a), *b = malloc((size_t)N * V * sizeof *b);
    ci_session *s = NULL, *s2 = NULL, *s3 = NULL;
    CHECK(a && b && !ci_session_new(m, 64, &s, err, sizeof err) && !ci_session_new(m, 64, &s2, err, sizeof err), "%s",
          err);
    for (int step = 0; a && b && s && s2 && step < 2; step++) {
        ci_session_reset(s);
        CHECK(!ci_forward(s, toks, 24, NULL, 0, err, sizeof err), "%s", err);
        cache_snap *snap = ops->snapshot(s, err, sizeof err);
        CHECK(snap != NULL, "%s: snapshot: %s", dir, err);
        if (!snap) break;
        CHECK(cache_snap_pos(snap) == 24, "%s: snapshot at %d", dir, cache_snap_pos(snap));
        size_t blob_bytes = 0, held_bytes = 0;
        void *owner = NULL;
        cache_snap_blob(snap, &blob_bytes);
        void *held = cache_snap_held(snap, &held_bytes, &owner);
        CHECK(held && owner == m->be && held_bytes > 0, "%s: the layers' bytes are in a buffer of the backend", dir);
        CHECK(blob_bytes < 4096 && cache_snap_bytes(snap) == blob_bytes + held_bytes,
              "%s: the host blob is the shape header alone (%zu bytes), the snapshot counts both", dir, blob_bytes);
        CHECK(!tm_feed(s, toks + 24, N, step, a, V, err, sizeof err), "%s", err);
        CHECK(!ops->restore(s, snap, err, sizeof err) && ci_session_pos(s) == 24, "%s: restore: %s", dir, err);
        memset(b, 0, (size_t)N * V * sizeof *b);
        CHECK(!tm_feed(s, toks + 24, N, step, b, V, err, sizeof err), "%s", err);
        CHECK(!memcmp(a, b, (size_t)N * V * sizeof *a), "%s%s step=%d: logits after a restore into the same session differ",
              dir, kv16 ? " kv_f16" : "", step);
        ci_session_reset(s2);
        CHECK(!ci_forward(s2, toks + 10, 30, NULL, 0, err, sizeof err), "%s", err);
        CHECK(!ops->restore(s2, snap, err, sizeof err) && ci_session_pos(s2) == 24, "%s: restore: %s", dir, err);
        memset(b, 0, (size_t)N * V * sizeof *b);
        CHECK(!tm_feed(s2, toks + 24, N, step, b, V, err, sizeof err), "%s", err);
        CHECK(!memcmp(a, b, (size_t)N * V * sizeof *a), "%s step=%d: logits in another restored session differ", dir,
              step);
        /* another model of the same checkpoint (its own backend): through host memory */
        if (!step && !ci_model_open(dir, &o, &m2, err, sizeof err) &&
            !ci_session_new(m2, 64, &s3, err, sizeof err)) {
            CHECK(m2->be != m->be, "%s: a second model has its own backend", dir);
            CHECK(!m2->family->ops->restore(s3, snap, err, sizeof err), "%s: restore in another model: %s", dir, err);
            memset(b, 0, (size_t)N * V * sizeof *b);
            CHECK(!tm_feed(s3, toks + 24, N, step, b, V, err, sizeof err), "%s", err);
            CHECK(!memcmp(a, b, (size_t)N * V * sizeof *a), "%s: logits in another model's restored session differ",
                  dir);
        }
        ci_session_free(s3);
        s3 = NULL;
        ci_model_free(m2);
        m2 = NULL;
        cache_snap_free(snap);
    }
    ci_session_free(s);
    ci_session_free(s2);
    ci_model_free(m);
    free(a);
    free(b);
}

static void test_round_trips(void) {
    for (size_t f = 0; f < sizeof fixtures / sizeof *fixtures; f++) round_trip(fixtures[f], 0);
}

/* the same with the attention layers' cache in f16 (CPU only; not DeepSeek V4's caches) */
static void test_round_trips_kv_f16(void) {
    if (on_cuda()) return;
    for (size_t f = 0; f < sizeof fixtures / sizeof *fixtures; f++)
        if (!strstr(fixtures[f], "deepseek")) round_trip(fixtures[f], 1);
}

int main(void) {
    TEST_RUN(test_round_trips);
    TEST_RUN(test_round_trips_kv_f16);
    TEST_EXIT();
}
