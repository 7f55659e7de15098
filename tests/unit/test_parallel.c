/* test_parallel.c — the pieces tensor parallelism is made of, on the CPU: the communicator's
 * collectives with the ranks as threads (src/parallel/comm.h: sums in rank order, the same
 * bits on every rank, an abort that wakes every waiter), and the sharding arithmetic
 * (src/parallel/shard.h: even splits, grouped-query heads, block-aligned units, row views and
 * column copies and row gathers that hold exactly the original's elements); then every family's
 * models split over 2 and 4 ranks (threads, one CPU backend each; columns split or experts
 * whole) against the same model whole: a prompt's logits (a 150-token one too), decode steps
 * through the cache, a batch step of two other sequences (forward_batch), every rank's logits
 * the same bits and within a rounding bound of the whole model's; the one-handle group of
 * ci_model_opts.tp; a rank that fails stops the others; what cannot split is refused. */
#include "check.h"
#include "backend/backend.h"
#include "parallel/comm.h"
#include "parallel/shard.h"
#include "models/model.h"
#include "nn/moe.h"
#include "tmpmodel.h"
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { MAXR = 8, ROUNDS = 40, MAXC = 3000 };

typedef struct {
    ci_comm *c;
    int rank;
    int abort_at;            /* round at which this rank aborts instead of joining (-1: never) */
    int rc_fail;             /* how many collectives returned -1 */
    int bad;                 /* results that differ from the serial sums */
} rank_arg;

/* Rank r's input of round k: deterministic values with real spread. */
static float val(int r, int k, size_t i) {
    uint32_t h = (uint32_t)(r * 2654435761u) ^ (uint32_t)(k * 40503u) ^ (uint32_t)(i * 2246822519u);
    h ^= h >> 13; h *= 0x5bd1e995u; h ^= h >> 15;
    return ((float)(h & 0xffff) / 65536.0f - 0.5f) * (float)(1 + (h >> 28));
}

static void *rank_main(void *p) {
    rank_arg *a = p;
    const int W = ci_comm_world(a->c);
    float *x = malloc(MAXC * sizeof(float)), *g = malloc((size_t)MAXR * MAXC * sizeof(float));
    for (int k = 0; k < ROUNDS; k++) {
        if (k == a->abort_at) { ci_comm_abort(a->c, a->rank, "went away"); break; }
        size_t count = (size_t)(1 + (k * 397) % MAXC);
        for (size_t i = 0; i < count; i++) x[i] = val(a->rank, k, i);
        if (ci_comm_all_reduce(a->c, a->rank, x, count)) { a->rc_fail++; break; }
        for (size_t i = 0; i < count; i++) {
            float s = val(0, k, i);
            for (int r = 1; r < W; r++) s += val(r, k, i);
            if (memcmp(&s, &x[i], sizeof s)) a->bad++;
        }
        /* gather: 3 rows of this rank's width-w slice */
        int w = 1 + k % 7, rows = 3;
        for (int i = 0; i < rows * w; i++) x[i] = (float)(a->rank * 1000 + k * 10 + i);
        if (ci_comm_all_gather_rows(a->c, a->rank, g, x, rows, w)) { a->rc_fail++; break; }
        for (int i = 0; i < rows; i++)
            for (int r = 0; r < W; r++)
                for (int j = 0; j < w; j++)
                    if (g[(size_t)i * W * w + (size_t)r * w + j] != (float)(r * 1000 + k * 10 + i * w + j)) a->bad++;
        x[0] = (float)(a->rank + k);
        if (ci_comm_broadcast(a->c, a->rank, x, 1, k % W)) { a->rc_fail++; break; }
        if (x[0] != (float)(k % W + k)) a->bad++;
    }
    free(x);
    free(g);
    return NULL;
}

static void run_ranks(int world, int abort_rank, int abort_at, rank_arg *args) {
    ci_comm *c = ci_comm_new(world);
    CHECK(c != NULL, "comm of %d", world);
    if (!c) return;
    pthread_t th[MAXR];
    for (int r = 0; r < world; r++) {
        args[r] = (rank_arg){ c, r, r == abort_rank ? abort_at : -1, 0, 0 };
        pthread_create(&th[r], NULL, rank_main, &args[r]);
    }
    for (int r = 0; r < world; r++) pthread_join(th[r], NULL);
    char why[256] = "";
    int failed = ci_comm_error(c, why, sizeof why);
    if (abort_rank >= 0) {
        CHECK(failed && strstr(why, "went away"), "abort recorded: %s", why);
        char want[32];
        snprintf(want, sizeof want, "rank %d", abort_rank);
        CHECK_HAS(why, want);
    } else {
        CHECK(!failed, "no abort: %s", why);
    }
    ci_comm_free(c);
}

static void test_collectives(void) {
    rank_arg a[MAXR];
    for (int world = 1; world <= MAXR; world *= 2) {
        run_ranks(world, -1, -1, a);
        for (int r = 0; r < world; r++)
            CHECK(a[r].bad == 0 && a[r].rc_fail == 0, "world %d rank %d: %d wrong, %d failed", world, r, a[r].bad,
                  a[r].rc_fail);
    }
    CHECK(!ci_comm_new(0) && !ci_comm_new(CI_COMM_MAX + 1), "bad worlds refused");
}

/* A rank that goes away mid-run: every other rank's collective returns -1 (nobody hangs). */
static void test_abort_wakes_everyone(void) {
    rank_arg a[MAXR];
    run_ranks(4, 2, 7, a);
    for (int r = 0; r < 4; r++)
        if (r != 2) CHECK(a[r].rc_fail == 1 && a[r].bad == 0, "rank %d: %d failures, %d wrong", r, a[r].rc_fail, a[r].bad);
    /* and a collective called after the abort fails at once */
    ci_comm *c = ci_comm_new(2);
    ci_comm_abort(c, 1, "gone");
    float x = 1;
    CHECK(ci_comm_all_reduce(c, 0, &x, 1) == -1 && ci_comm_barrier(c, 0) == -1, "after abort");
    CHECK(ci_comm_all_reduce(c, 5, &x, 1) == -1, "bad rank refused");
    ci_comm_free(c);
}

static void test_split_and_heads(void) {
    shd_range r;
    CHECK(shd_split(96, 1, 4, 3, &r) == 0 && r.lo == 72 && r.hi == 96, "96/4 rank 3: [%lld, %lld)", (long long)r.lo,
          (long long)r.hi);
    CHECK(shd_split(96, 16, 2, 1, &r) == 0 && r.lo == 48 && r.hi == 96, "units of 16");
    CHECK(shd_split(96, 16, 4, 0, &r) == -1, "6 units over 4 refused");
    CHECK(shd_split(100, 16, 1, 0, &r) == -1, "unit not dividing refused");
    CHECK(shd_split(8, 1, 2, 2, &r) == -1, "rank out of range refused");
    char err[256];
    shd_range q, kv;
    /* split kv heads: 32 q / 8 kv over 4 */
    CHECK(shd_gqa(32, 8, 4, 1, &q, &kv, "x", err, sizeof err) == 0 && q.lo == 8 && q.hi == 16 && kv.lo == 2 &&
          kv.hi == 4, "32/8 over 4");
    /* shared kv heads: 16 q / 2 kv over 8: ranks 0..3 read kv 0, 4..7 kv 1 */
    for (int rk = 0; rk < 8; rk++) {
        CHECK(shd_gqa(16, 2, 8, rk, &q, &kv, "x", err, sizeof err) == 0 && q.hi - q.lo == 2 && kv.lo == rk / 4 &&
              kv.hi == rk / 4 + 1, "16/2 over 8, rank %d: kv [%lld, %lld)", rk, (long long)kv.lo, (long long)kv.hi);
        /* every local query head's key head is inside the rank's */
        for (int64_t h = q.lo; h < q.hi; h++) CHECK(h / 8 >= kv.lo && h / 8 < kv.hi, "head %lld", (long long)h);
    }
    CHECK(shd_gqa(12, 6, 4, 0, &q, &kv, "layer 3", err, sizeof err) == -1, "6 kv over 4 refused");
    CHECK_HAS(err, "layer 3");
    CHECK_HAS(err, "6 key/value heads");
    CHECK(shd_gqa(6, 6, 4, 0, &q, &kv, "m", err, sizeof err) == -1, "6 heads over 4 refused");
    CHECK_HAS(err, "6 attention heads");
}

static void test_views_hold_the_parts(void) {
    enum { R = 256, C = 384, B = 128 };
    uint16_t *bf = malloc(sizeof(uint16_t) * R * C);
    uint8_t *f8 = malloc(R * C);
    float *sc = malloc(sizeof(float) * (R / B) * (C / B));
    for (int i = 0; i < R * C; i++) {
        bf[i] = (uint16_t)(0x3c00 + (i * 37) % 0x700);
        f8[i] = (uint8_t)((i * 13) % 0x7e);
    }
    for (int i = 0; i < (R / B) * (C / B); i++) sc[i] = 0.5f + (float)i;
    ci_mat Wb = { .data = bf, .dtype = CI_BF16, .rows = R, .cols = C };
    ci_mat Wf = { .data = f8, .dtype = CI_F8_E4M3, .rows = R, .cols = C, .scale = sc, .scale_dtype = CI_F32,
                  .block = B };
    CHECK(shd_unit(&Wb, 1, 64) == 64 && shd_unit(&Wf, 1, 64) == 128 && shd_unit(&Wf, 0, 64) == 64 &&
          shd_unit(&Wf, 1, 96) == 384, "units");
    const ci_mat *Ws[2] = { &Wb, &Wf };
    char err[256];
    for (int w = 0; w < 2; w++) {
        const ci_mat *W = Ws[w];
        ci_mat v;
        shd_rows(W, 100, 200, &v);   /* rows any offset: fp8 through scale_row0 */
        int bad = 0;
        for (int r = 0; r < 100; r++)
            for (int c = 0; c < C; c += 7) bad += ci_mat_get(&v, r, c) != ci_mat_get(W, 100 + r, c);
        CHECK(v.rows == 100 && bad == 0, "%s rows: %d differ", w ? "fp8" : "bf16", bad);
        shd_kept keep = { 0 };
        ci_mat vr, vc;
        shd_rows(W, 130, 250, &vr);   /* a row view's columns: fp8 scale rows from the view's scale_row0 */
        CHECK(shd_cols(&vr, 128, 384, &vc, &keep, "t", err, sizeof err) == 0, "cols: %s", err);
        bad = 0;
        for (int r = 0; r < 120; r++)
            for (int c = 0; c < 256; c += 5) bad += ci_mat_get(&vc, r, c) != ci_mat_get(W, 130 + r, 128 + c);
        CHECK(vc.cols == 256 && vc.rows == 120 && bad == 0, "%s cols: %d differ", w ? "fp8" : "bf16", bad);
        CHECK(keep.n == 1 + w, "%d copies kept", keep.n);
        shd_kept_free(&keep);
    }
    /* rows of two segments gathered, bf16 and fp8 (whole blocks; the fp8 grid's rows follow) */
    const shd_range segs[2] = { { 128, 256 }, { 0, 128 } };
    for (int w = 0; w < 2; w++) {
        shd_kept keep = { 0 };
        ci_mat g;
        CHECK(shd_rows_gather(Ws[w], segs, 2, &g, &keep, "t", err, sizeof err) == 0, "gather: %s", err);
        int bad = 0;
        for (int r = 0; r < 256; r++)
            for (int c = 0; c < C; c += 11) bad += ci_mat_get(&g, r, c) != ci_mat_get(Ws[w], r < 128 ? r + 128 : r - 128, c);
        CHECK(g.rows == 256 && bad == 0, "%s gather: %d differ", w ? "fp8" : "bf16", bad);
        shd_kept_free(&keep);
    }
    shd_kept keep = { 0 };
    ci_mat v;
    const shd_range off[2] = { { 64, 192 }, { 0, 64 } };
    CHECK(shd_rows_gather(&Wf, off, 2, &v, &keep, "in_proj", err, sizeof err) == -1 && keep.n == 0, "fp8 rows off the blocks");
    CHECK_HAS(err, "in_proj: rows [64, 192) of 256 do not start and end on its 128-row blocks");
    CHECK(shd_cols(&Wf, 64, 192, &v, &keep, "model.layers.0.mlp.down_proj", err, sizeof err) == -1 && keep.n == 0,
          "fp8 columns off the block refused");
    CHECK_HAS(err, "model.layers.0.mlp.down_proj");
    ci_qdesc qd = { .mode = CI_Q_AFFINE, .bits = 4, .group = 64 };
    ci_mat Wq = { .data = bf, .dtype = CI_U32, .rows = 8, .cols = 128, .scale = &qd };
    CHECK(shd_cols(&Wq, 0, 64, &v, &keep, "q", err, sizeof err) == -1, "MLX columns refused");
    CHECK_HAS(err, "FP4-quantized");
    free(bf);
    free(f8);
    free(sc);
}

/* ---- whole models over ranks ---------------------------------------------------------- */

enum { PROMPT = 7, STEPS = 4, BATCH = 2, CTX = 32, LONG = 150, LONG_CTX = 160 };
static const int toks[PROMPT + STEPS] = { 5, 17, 42, 99, 3, 250, 8, 61, 150, 77, 12 };
static int long_toks[LONG + STEPS];   /* a longer prompt (test_long_prompts fills it) */
/* the prompt the model runs use: toks (PROMPT), or long_toks (LONG) */
static const int *run_toks = toks;
static int run_prompt = PROMPT, run_ctx = CTX;

typedef struct {
    ci_model *m;
    ci_comm *c;
    int rank, vocab;
    int bad_at;              /* decode step whose token is out of range on this rank (-1: none) */
    float *logits;           /* [run_prompt + STEPS + BATCH, vocab]: the prompt's rows, each step's, then a
                              * batch step's */
    int rc;
    char err[512];
} model_arg;

static void *model_main(void *p) {
    model_arg *a = p;
    ci_session *s = NULL;
    const int *tk = run_toks, P = run_prompt;
    a->rc = ci_session_new(a->m, run_ctx, &s, a->err, sizeof a->err);
    if (!a->rc) a->rc = ci_forward(s, tk, P, a->logits, 1, a->err, sizeof a->err);
    for (int i = 0; i < STEPS && !a->rc; i++) {
        int t = i == a->bad_at ? 1 << 20 : tk[P + i];
        a->rc = ci_forward(s, &t, 1, a->logits + (size_t)(P + i) * a->vocab, 0, a->err, sizeof a->err);
    }
    /* a batch step (the family's forward_batch) of two more sequences, 3 and 5 tokens in */
    ci_session *b[BATCH] = { NULL, NULL };
    const int bt[BATCH] = { tk[3], tk[5] };
    for (int i = 0; i < BATCH && !a->rc; i++) {
        a->rc = ci_session_new(a->m, run_ctx, &b[i], a->err, sizeof a->err);
        if (!a->rc) a->rc = ci_forward(b[i], tk, 3 + 2 * i, NULL, 0, a->err, sizeof a->err);
    }
    if (!a->rc)   /* every family has one */
        a->rc = a->m->family->ops->forward_batch(b, bt, BATCH, a->logits + (size_t)(P + STEPS) * a->vocab, a->err,
                                                 sizeof a->err);
    if (a->rc && a->c) ci_comm_abort(a->c, a->rank, a->err);   /* the others must not wait for this one */
    for (int i = 0; i < BATCH; i++) ci_session_free(b[i]);
    ci_session_free(s);
    return NULL;
}

/* Opens dir on `world` ranks (0: whole) and runs the prompt and steps; args[r].logits filled. */
static int run_model(const char *dir, int world, int ep, int bad_rank, model_arg *args, char *err, size_t errlen) {
    ci_model_opts o = { .n_threads = 1 };
    ci_comm *c = world ? ci_comm_new(world) : NULL;
    int n = world ? world : 1, rc = 0;
    for (int r = 0; r < n; r++) args[r] = (model_arg){ .c = c, .rank = r, .bad_at = r == bad_rank ? 1 : -1 };
    for (int r = 0; r < n && !rc; r++) rc = ci_model_open_rank(dir, &o, c, r, ep, &args[r].m, err, errlen);
    pthread_t th[MAXR];
    for (int r = 0; r < n && !rc; r++) {
        ci_model_info info;
        ci_model_get_info(args[r].m, &info);
        args[r].vocab = info.vocab_size;
        args[r].logits = calloc((size_t)(run_prompt + STEPS + BATCH) * info.vocab_size, sizeof(float));
        pthread_create(&th[r], NULL, model_main, &args[r]);
    }
    for (int r = 0; r < n && !rc; r++) pthread_join(th[r], NULL);
    for (int r = 0; r < n; r++) ci_model_free(args[r].m);
    ci_comm_free(c);
    return rc;
}

static void free_args(model_arg *a, int n) {
    for (int r = 0; r < n; r++) free(a[r].logits);
}

/* Every rank's logits equal rank 0's bit for bit, and rank 0's are within bound (of the
 * whole model's largest magnitude) of the whole model's: only the ranks' partial sums are
 * added in another order. */
static void split_matches_whole(const char *dir, int world, int ep) {
    char err[512] = "";
    model_arg whole[1], parts[MAXR];
    if (run_model(dir, 0, 0, -1, whole, err, sizeof err) || whole[0].rc) {
        CHECK(0, "%s whole: %s %s", dir, err, whole[0].err);
        free_args(whole, 1);
        return;
    }
    int rc = run_model(dir, world, ep, -1, parts, err, sizeof err);
    CHECK(!rc, "%s over %d (ep %d): %s", dir, world, ep, err);
    const size_t cnt = (size_t)(run_prompt + STEPS + BATCH) * whole[0].vocab;
    double ref_max = 0, diff = 0;
    for (size_t i = 0; i < cnt; i++) ref_max = fmax(ref_max, fabs(whole[0].logits[i]));
    for (int r = 0; r < world && !rc; r++) {
        CHECK(!parts[r].rc, "%s over %d, rank %d: %s", dir, world, r, parts[r].err);
        if (parts[r].rc) break;
        CHECK(!memcmp(parts[r].logits, parts[0].logits, cnt * sizeof(float)), "%s over %d: rank %d's logits differ from rank 0's",
              dir, world, r);
    }
    for (size_t i = 0; i < cnt && !rc; i++) diff = fmax(diff, fabs((double)parts[0].logits[i] - whole[0].logits[i]));
    /* f32 sums regrouped: 0.9-1.5e-6 measured on these fixtures (logits up to ~4); a wrong part is O(1) */
    CHECK(!rc && diff <= 2e-5 * fmax(1.0, ref_max), "%s over %d (ep %d): max |diff| %.3g (max |logit| %.3g)", dir, world,
          ep, diff, ref_max);
    free_args(whole, 1);
    free_args(parts, world);
}

static void test_dense_over_ranks(void) {
    split_matches_whole("tests/fixtures/llama_gqa_llama3", 2, 0);   /* key / value heads split */
    split_matches_whole("tests/fixtures/llama_gqa_llama3", 4, 0);   /* one key / value head shared by 2 ranks */
    split_matches_whole("tests/fixtures/qwen3_bf16", 2, 0);
    split_matches_whole("tests/fixtures/qwen3_bf16", 4, 0);
}

static void test_moe_over_ranks(void) {
    split_matches_whole("tests/fixtures/qwen3_moe", 2, 0);   /* every expert's columns split, a dense layer too */
    split_matches_whole("tests/fixtures/qwen3_moe", 4, 0);
}

/* A random checkpoint of cfg (make-random: dtype, seed) in a fresh folder dir[64]: 1, or 0
 * with the failure recorded. */
static int random_model(const char *cfg, const char *dtype, uint64_t seed, char *dir) {
    char err[1024];
    const char *d = tm_make_random(cfg, dtype, seed, dir, 64, err, sizeof err);
    CHECK(d != NULL, "make-random %s: %s", dtype, err);
    return d != NULL;
}

static void remove_dir(const char *dir) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "cleanup");
}

/* fp8 with 128-column blocks: each rank's o_proj / down_proj columns are whole blocks. */
static void test_fp8_over_ranks(void) {
    static const char cfg[] =
        "{\"model_type\": \"qwen3\", \"hidden_size\": 256, \"intermediate_size\": 512, \"num_hidden_layers\": 2,"
        " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 64, \"vocab_size\": 300,"
        " \"rms_norm_eps\": 1e-6, \"rope_theta\": 10000.0, \"max_position_embeddings\": 256,"
        " \"tie_word_embeddings\": false}";
    char d[64], err[1024];
    if (!random_model(cfg, "fp8", 7, d)) return;
    split_matches_whole(d, 2, 0);
    /* over 4 a rank's 64 o_proj columns are half a block: refused, naming the tensor */
    model_arg a[4];
    int rc = run_model(d, 4, 0, -1, a, err, sizeof err);
    CHECK(rc == -1, "fp8 over 4 refused");
    CHECK_HAS(err, "model.layers.0 over 4 ranks: o_proj");
    CHECK_HAS(err, "quantization blocks");
    free_args(a, 4);
    remove_dir(d);
}

/* DeepSeek: MLA heads split (the latent cache whole on every rank), routed experts' and shared
 * experts' columns split, a dense first layer; V3.2's indexer whole on every rank. */
static void test_deepseek_over_ranks(void) {
    split_matches_whole("tests/fixtures/deepseek_v3", 2, 0);
    split_matches_whole("tests/fixtures/deepseek_v3", 4, 0);
    split_matches_whole("tests/fixtures/deepseek_v3_nolora", 2, 0);   /* q_proj without q_lora */
    split_matches_whole("tests/fixtures/deepseek_v32", 2, 0);
    split_matches_whole("tests/fixtures/deepseek_v32", 4, 0);
}

/* DeepSeek V3 in fp8 with 128 x 128 blocks, dims whose splits keep whole blocks over 2 ranks. */
static void test_deepseek_fp8_over_ranks(void) {
    static const char cfg[] =
        "{\"model_type\": \"deepseek_v3\", \"hidden_size\": 256, \"intermediate_size\": 512,"
        " \"moe_intermediate_size\": 256, \"num_hidden_layers\": 2, \"first_k_dense_replace\": 1,"
        " \"num_attention_heads\": 4, \"num_key_value_heads\": 4, \"q_lora_rank\": 128, \"kv_lora_rank\": 128,"
        " \"qk_nope_head_dim\": 32, \"qk_rope_head_dim\": 16, \"v_head_dim\": 128, \"n_routed_experts\": 4,"
        " \"num_experts_per_tok\": 2, \"n_shared_experts\": 1, \"n_group\": 1, \"topk_group\": 1,"
        " \"norm_topk_prob\": true, \"routed_scaling_factor\": 2.5, \"vocab_size\": 300, \"rms_norm_eps\": 1e-6,"
        " \"rope_theta\": 10000.0, \"max_position_embeddings\": 256, \"tie_word_embeddings\": false}";
    char d[64], err[1024];
    if (!random_model(cfg, "fp8", 9, d)) return;
    split_matches_whole(d, 2, 0);
    remove_dir(d);
    /* the fixture's 16-wide heads: a rank's o_proj columns are not whole 128-column blocks */
    model_arg a[2];
    CHECK(run_model("tests/fixtures/deepseek_v3_fp8", 2, 0, -1, a, err, sizeof err) == -1, "fp8 off the blocks refused");
    CHECK_HAS(err, "deepseek_v3: model.layers.0 over 2 ranks: o_proj");
    free_args(a, 2);
}

/* The hybrids: attention heads, short-conv channels, DeltaNet heads, Mamba2 groups (whole on
 * every rank when the ranks do not divide them: nemotron_h over 4, the latent fixture's one
 * group) and the MLPs' / experts' columns split. */
static void test_hybrids_over_ranks(void) {
    split_matches_whole("tests/fixtures/lfm2", 2, 0);
    split_matches_whole("tests/fixtures/lfm2_hub", 2, 0);   /* one key / value head */
    split_matches_whole("tests/fixtures/lfm2_moe", 2, 0);
    split_matches_whole("tests/fixtures/lfm2_moe", 4, 0);
    split_matches_whole("tests/fixtures/qwen3_next", 2, 0);   /* fused projections, gated shared expert */
    split_matches_whole("tests/fixtures/qwen3_next", 4, 0);   /* a DeltaNet key head shared by 2 ranks */
    split_matches_whole("tests/fixtures/qwen3_5", 2, 0);
    split_matches_whole("tests/fixtures/qwen3_5", 4, 0);
    split_matches_whole("tests/fixtures/qwen3_5_moe_hub", 2, 0);   /* VL wrapper, stacked experts */
    split_matches_whole("tests/fixtures/nemotron_h", 2, 0);   /* relu² MLPs and experts */
    split_matches_whole("tests/fixtures/nemotron_h", 4, 0);
    split_matches_whole("tests/fixtures/nemotron_h_latent", 2, 0);   /* experts in a latent space */
}

/* DeepSeek V4: whole output groups' heads per rank, expert columns split; the KV row, the
 * compressors, the indexer and the hyper-connection streams whole on every rank. */
static void test_deepseek_v4_over_ranks(void) {
    split_matches_whole("tests/fixtures/deepseek_v4", 2, 0);
    split_matches_whole("tests/fixtures/deepseek_v4_hub", 2, 0);
    split_matches_whole("tests/fixtures/deepseek_v4_rates", 2, 0);
}

/* LFM2 with conv biases: the rank's in_proj / conv bias channels, out_proj's bias added once. */
static void test_conv_bias_over_ranks(void) {
    static const char cfg[] =
        "{\"model_type\": \"lfm2\", \"hidden_size\": 64, \"intermediate_size\": 96, \"num_hidden_layers\": 3,"
        " \"layer_types\": [\"conv\", \"full_attention\", \"conv\"], \"num_attention_heads\": 4,"
        " \"num_key_value_heads\": 2, \"conv_L_cache\": 3, \"conv_bias\": true, \"block_auto_adjust_ff_dim\": false,"
        " \"norm_eps\": 1e-5, \"rope_theta\": 10000.0, \"vocab_size\": 300, \"max_position_embeddings\": 256,"
        " \"tie_word_embeddings\": true}";
    char d[64];
    if (!random_model(cfg, "f32", 3, d)) return;
    split_matches_whole(d, 2, 0);
    split_matches_whole(d, 4, 0);
    remove_dir(d);
}

/* Expert parallel: whole routed experts, an even share per rank (the shared experts' columns
 * split), every MoE family. */
static void test_experts_over_ranks(void) {
    split_matches_whole("tests/fixtures/qwen3_moe", 2, 1);
    split_matches_whole("tests/fixtures/qwen3_moe", 4, 1);
    split_matches_whole("tests/fixtures/deepseek_v3", 2, 1);
    split_matches_whole("tests/fixtures/deepseek_v3", 4, 1);
    split_matches_whole("tests/fixtures/deepseek_v32", 2, 1);
    split_matches_whole("tests/fixtures/lfm2_moe", 2, 1);
    split_matches_whole("tests/fixtures/qwen3_next", 2, 1);
    split_matches_whole("tests/fixtures/qwen3_5_moe_hub", 2, 1);
    split_matches_whole("tests/fixtures/nemotron_h", 2, 1);
    split_matches_whole("tests/fixtures/nemotron_h_latent", 2, 1);
    split_matches_whole("tests/fixtures/deepseek_v4", 2, 1);   /* hash-routed layers too */
    /* 6 experts over 4 ranks: refused, nothing narrowed */
    char err[256] = "";
    ci_mat views[18] = { 0 };
    moe_block M = { .n_experts = 6, .inter = 8, .w_gate = views, .w_up = views + 6, .w_down = views + 12 };
    shd_kept keep = { 0 };
    const shd_ctx t = { 4, 1, 1, &keep };
    CHECK(moe_shard(&M, &t, "layer 2", err, sizeof err) == -1 && M.e_hi == 0, "6 experts over 4");
    CHECK_HAS(err, "layer 2: 6 routed experts do not split over 4 ranks");
}

/* ci_model_opts.tp: one model handle over the ranks (parallel/group.h): logits as the whole
 * model's, a reset session runs again to the same bits, a bad token is refused before any rank
 * runs (the group still works after), the cache bytes are the ranks' together, a batch step (and
 * its argmax form) as the whole model's. */
static void test_group_handle(void) {
    const char *dir = "tests/fixtures/qwen3_moe";
    char err[512] = "";
    ci_model *whole = NULL, *g = NULL;
    ci_model_opts o = { .n_threads = 2 }, og = { .n_threads = 2, .tp = 2, .ep = 1 };
    CHECK(!ci_model_open(dir, &o, &whole, err, sizeof err), "whole: %s", err);
    CHECK(!ci_model_open(dir, &og, &g, err, sizeof err), "group: %s", err);
    if (!whole || !g) { ci_model_free(whole); ci_model_free(g); return; }
    ci_model_info wi, gi;
    ci_model_get_info(whole, &wi);
    ci_model_get_info(g, &gi);
    CHECK(!strcmp(gi.family, "qwen3_moe") && gi.vocab_size == wi.vocab_size, "info %s %d", gi.family, gi.vocab_size);
    CHECK(ci_model_cache_bytes(g, 100) == ci_model_cache_bytes(whole, 100), "cache bytes %zu vs %zu",
          ci_model_cache_bytes(g, 100), ci_model_cache_bytes(whole, 100));
    const int V = wi.vocab_size;
    float *a = calloc((size_t)PROMPT * V, sizeof(float)), *b = calloc((size_t)PROMPT * V, sizeof(float)),
          *c = calloc((size_t)PROMPT * V, sizeof(float));
    ci_session *sw = NULL, *sg = NULL;
    CHECK(!ci_session_new(whole, CTX, &sw, err, sizeof err) && !ci_session_new(g, CTX, &sg, err, sizeof err), "%s", err);
    CHECK(!ci_forward(sw, toks, PROMPT, a, 1, err, sizeof err), "%s", err);
    CHECK(!ci_forward(sg, toks, PROMPT, b, 1, err, sizeof err) && ci_session_pos(sg) == PROMPT, "%s", err);
    double d = 0, mx = 0;
    for (size_t i = 0; i < (size_t)PROMPT * V; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        mx = fmax(mx, fabs(a[i]));
    }
    CHECK(d <= 2e-5 * fmax(1, mx), "group logits: max |diff| %.3g of %.3g", d, mx);
    int bad = 1 << 20, id = -1, id_w = -1;
    CHECK(ci_forward(sg, &bad, 1, NULL, 0, err, sizeof err) == -1, "bad token refused");
    CHECK_HAS(err, "outside the vocabulary");
    ci_session_reset(sg);
    CHECK(!ci_forward(sg, toks, PROMPT, c, 1, err, sizeof err), "after a refusal and a reset: %s", err);
    CHECK(!memcmp(b, c, (size_t)PROMPT * V * sizeof(float)), "a reset session runs to the same bits");
    CHECK(!ci_forward_argmax(sg, &toks[PROMPT], 1, &id, err, sizeof err) &&
          !ci_forward_argmax(sw, &toks[PROMPT], 1, &id_w, err, sizeof err) && id == id_w && id >= 0,
          "argmax %d vs %d: %s", id, id_w, err);
    /* a batch step of two sequences (3 and 5 tokens in): logits as the whole model's, and the argmax form */
    ci_session *bw[BATCH] = { NULL, NULL }, *bg[BATCH] = { NULL, NULL };
    const int bt[BATCH] = { toks[3], toks[5] };
    for (int i = 0; i < BATCH; i++) {
        CHECK(!ci_session_new(whole, CTX, &bw[i], err, sizeof err) && !ci_session_new(g, CTX, &bg[i], err, sizeof err) &&
              !ci_forward(bw[i], toks, 3 + 2 * i, NULL, 0, err, sizeof err) &&
              !ci_forward(bg[i], toks, 3 + 2 * i, NULL, 0, err, sizeof err), "batch sessions: %s", err);
    }
    CHECK(!whole->family->ops->forward_batch(bw, bt, BATCH, a, err, sizeof err) &&
          !g->family->ops->forward_batch(bg, bt, BATCH, b, err, sizeof err), "batch step: %s", err);
    d = 0;
    for (size_t i = 0; i < (size_t)BATCH * V; i++) d = fmax(d, fabs((double)a[i] - b[i]));
    CHECK(d <= 2e-5 * fmax(1, mx) && ci_session_pos(bg[0]) == 4 && ci_session_pos(bg[1]) == 6,
          "group batch logits: max |diff| %.3g, positions %d %d", d, ci_session_pos(bg[0]), ci_session_pos(bg[1]));
    int ib[BATCH], iw[BATCH];
    const int bt2[BATCH] = { toks[4], toks[6] };
    CHECK(!ci_forward_batch_argmax(bw, bt2, BATCH, iw, err, sizeof err) &&
          !ci_forward_batch_argmax(bg, bt2, BATCH, ib, err, sizeof err) && !memcmp(ib, iw, sizeof ib),
          "batch argmax %d %d vs %d %d: %s", ib[0], ib[1], iw[0], iw[1], err);
    for (int i = 0; i < BATCH; i++) {
        ci_session_free(bw[i]);
        ci_session_free(bg[i]);
    }
    ci_session_free(sw);
    ci_session_free(sg);
    free(a);
    free(b);
    free(c);
    ci_model_free(whole);
    ci_model_free(g);
}

/* A 150-token prompt: DeltaNet's and Mamba2's chunked prompt forms over several chunks, V3.2's
 * sparse attention past its top-k, V4's sliding window, compressed entries and their top-k. */
static void test_long_prompts(void) {
    for (int i = 0; i < LONG + STEPS; i++) long_toks[i] = (i * 37 + 11) % 300;
    run_toks = long_toks;
    run_prompt = LONG;
    run_ctx = LONG_CTX;
    split_matches_whole("tests/fixtures/qwen3_next", 2, 0);
    split_matches_whole("tests/fixtures/nemotron_h", 2, 1);
    split_matches_whole("tests/fixtures/deepseek_v32_long", 2, 0);
    split_matches_whole("tests/fixtures/deepseek_v4", 2, 1);
    split_matches_whole("tests/fixtures/deepseek_v4_rates", 2, 0);
    split_matches_whole("tests/fixtures/lfm2_moe", 2, 1);
    run_toks = toks;
    run_prompt = PROMPT;
    run_ctx = CTX;
}

/* Rank 1 fails its second decode step (a bad token): rank 0, waiting for it in an all-reduce,
 * fails too with rank 1's reason instead of hanging. */
static void test_rank_failure_stops_all(void) {
    char err[512] = "";
    model_arg a[2];
    CHECK(!run_model("tests/fixtures/qwen3_moe", 2, 0, 1, a, err, sizeof err), "open: %s", err);
    CHECK(a[1].rc && a[0].rc, "both ranks failed: %d %d", a[0].rc, a[1].rc);
    CHECK_HAS(a[0].err, "rank 1");
    CHECK_HAS(a[0].err, "token");
    free_args(a, 2);
}

static void test_refusals(void) {
    char err[512] = "";
    model_arg a[MAXR];
    CHECK(run_model("tests/fixtures/llama_gqa_llama3", 3, 0, -1, a, err, sizeof err) == -1, "4 heads over 3");
    CHECK_HAS(err, "4 attention heads do not split over 3 ranks");
    free_args(a, 3);
    CHECK(run_model("tests/fixtures/deepseek_v4", 4, 0, -1, a, err, sizeof err) == -1, "2 output groups over 4");
    CHECK_HAS(err, "deepseek_v4: 4 ranks: o_groups 2 do not split");
    free_args(a, 4);
    CHECK(run_model("tests/fixtures/deepseek_v4_fp8", 2, 0, -1, a, err, sizeof err) == -1, "fp8 o_b off its blocks");
    CHECK_HAS(err, "deepseek_v4: layer 0 over 2 ranks: columns [0, 16) of 32 do not start and end on its 128-column blocks");
    free_args(a, 2);
    CHECK(run_model("tests/fixtures/mlx_llama_4bit", 2, 0, -1, a, err, sizeof err) == -1, "MLX refused");
    CHECK_HAS(err, "MLX- or FP4-quantized columns");
    free_args(a, 2);
    ci_model *m = NULL;
    ci_comm *c = ci_comm_new(2);
    ci_model_opts o = { .n_threads = 1, .device = 1 };
    CHECK(ci_model_open_rank("tests/fixtures/qwen3_moe", &o, c, 0, 0, &m, err, sizeof err) == -1 && !m, "device refused");
    CHECK_HAS(err, "CPU backend");
    ci_comm_free(c);
}

int main(void) {
    TEST_RUN(test_collectives);
    TEST_RUN(test_abort_wakes_everyone);
    TEST_RUN(test_split_and_heads);
    TEST_RUN(test_views_hold_the_parts);
    TEST_RUN(test_dense_over_ranks);
    TEST_RUN(test_moe_over_ranks);
    TEST_RUN(test_fp8_over_ranks);
    TEST_RUN(test_deepseek_over_ranks);
    TEST_RUN(test_deepseek_fp8_over_ranks);
    TEST_RUN(test_hybrids_over_ranks);
    TEST_RUN(test_deepseek_v4_over_ranks);
    TEST_RUN(test_experts_over_ranks);
    TEST_RUN(test_conv_bias_over_ranks);
    TEST_RUN(test_group_handle);
    TEST_RUN(test_long_prompts);
    TEST_RUN(test_rank_failure_stops_all);
    TEST_RUN(test_refusals);
    TEST_EXIT();
}
