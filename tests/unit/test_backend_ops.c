/* test_backend_ops.c — the memory-boundary ops of backend.h on the CPU, and the dense
 * families through them.
 *
 * The CPU composes each new op from the old ones, so every check here is bit for bit
 * (memcmp), for each ISA this machine runs, with 3 threads:
 *  - alloc (256-byte alignment, odd sizes), upload / download / copy round trips, weight is
 *    the identity, status 0, no graph hooks, not a device;
 *  - kv_store at scattered positions;
 *  - attention_pos against attention (pos[t] = pos0 + t, contexts across several key blocks,
 *    GQA with 4, 2 and 1 heads a kv head (the last two: the CPU's prefill in blocks of query
 *    rows), odd head size) and against one attention call per row for out-of-order positions;
 *  - matmul_n / matmul_acc / matmul_swiglu (and the norm_ forms against rmsnorm first)
 *    against matmul, add and swiglu, for f32, bf16 and
 *    fp8 (block scales) weights, n = 1, 3, 5 and 17 rows;
 *  - qk_rope_store against rmsnorm, rmsnorm, rope, rope, kv_store, kv_store (with and without
 *    q/k norms, both rope styles, partial rotation);
 *  - rope_attend on a paged cache (shuffled block tables, one per chunk or one per row)
 *    against unpaged caches holding the same rows: bit for bit with 128-row blocks;
 *  - the f16 attention cache (kv_f16): the halves rope_attend writes, and its output = the
 *    f32 cache of those values', bit for bit (a decode's rows by ranges of kv heads on 1 and 2
 *    threads included); a batch step = its rows alone;
 *  - moe_experts: a decode step's rows (1..4 tokens: every active expert's matmuls in one
 *    batch) equal the same tokens' rows of a 9-token call (one matmul pass per expert), bf16
 *    and fp8 experts, SwiGLU, clamped SwiGLU and relu², with and without accumulating;
 *  - argmax: ties give the first index, NaN never wins over a number, all-NaN gives 0, and it
 *    agrees with the sampler's greedy rule (smp_argmax);
 *  - ci_place_qkvo through a backend that records its weight / weight_stack calls: q / k / v
 *    of one 16-bit dtype and width go to weight_stack in order, anything else (mixed dtypes or
 *    widths, block scales, no weight_stack) to weight one by one, and a failure is returned.
 * Model level (tests/fixtures, run from the repository root; dense, MoE and DeepSeek
 * families): ci_forward_argmax equals the host argmax of ci_forward's logits, step by
 * step; no_graphs changes nothing; forward_batch
 * rows equal single forwards; cache export / import round-trips (also with kv_f16, whose cache is
 * half the bytes; DeepSeek refuses kv_f16 naming it); --device cuda is refused
 * naming a family without a CUDA path, and auto runs on the CPU when no device serves. */
#include "check.h"
#include "backend/backend.h"
#include "cinfer.h"
#include "core/tensor.h"
#include "gen/sampler.h"
#include "models/model.h"
#include "nn/place.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint32_t rnd_u32(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float rnd(float lo, float hi) { return lo + (hi - lo) * (float)(rnd_u32() & 0xffffff) / (float)0x1000000; }
static float *rvec(size_t n) {
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = rnd(-1, 1);
    return v;
}

static const ci_isa isas[] = { CI_ISA_SCALAR, CI_ISA_AVX2, CI_ISA_AVX512 };
static ci_backend *bes[3];
static int n_bes;

/* ---- weights ---------------------------------------------------------------------------- */

typedef struct {
    ci_mat m;
    void *data;
    float *scale;
} wmat;

static void make_w(wmat *w, ci_dtype dt, int64_t rows, int64_t cols) {
    memset(w, 0, sizeof *w);
    size_t n = (size_t)(rows * cols);
    w->data = malloc(n * ci_dtype_size(dt));
    for (size_t i = 0; i < n; i++) {
        float v = rnd(-1, 1);
        if (dt == CI_F32) ((float *)w->data)[i] = v;
        else if (dt == CI_BF16) ((uint16_t *)w->data)[i] = ci_f32_to_bf16(v);
        else {
            uint8_t b = (uint8_t)(rnd_u32() & 0xff);
            if ((b & 0x7f) == 0x7f) b ^= 1;   /* no NaN codes */
            ((uint8_t *)w->data)[i] = b;
        }
    }
    w->m = (ci_mat){ .data = w->data, .dtype = dt, .rows = rows, .cols = cols };
    if (dt == CI_F8_E4M3) {
        int64_t rb = (rows + 127) / 128, cb = (cols + 127) / 128;
        w->scale = malloc((size_t)(rb * cb) * sizeof(float));
        for (int64_t i = 0; i < rb * cb; i++) w->scale[i] = rnd(0.001f, 0.01f);
        w->m.scale = w->scale;
        w->m.scale_dtype = CI_F32;
        w->m.block = 128;
    }
}
static void free_w(wmat *w) { free(w->data); free(w->scale); }

static int same(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

/* ---- MoE experts ---------------------------------------------------------------------------- */

static void test_moe_decode_batch(void) {
    enum { E = 6, K = 3, X = 72, I = 40, N = 9 };
    for (int bi = 0; bi < n_bes; bi++) {
        ci_backend *be = bes[bi];
        for (int v = 0; v < 4; v++) {   /* 0 swiglu bf16, 1 clamped fp8, 2 relu² bf16, 3 swiglu accumulating */
            ci_dtype dt = v == 1 ? CI_F8_E4M3 : CI_BF16;
            wmat wg[E], wu[E], wd[E];
            ci_mat mg[E], mu[E], md[E];
            for (int e = 0; e < E; e++) {
                make_w(&wg[e], dt, I, X); make_w(&wu[e], dt, I, X); make_w(&wd[e], dt, X, I);
                mg[e] = wg[e].m; mu[e] = wu[e].m; md[e] = wd[e].m;
            }
            ci_moe m = { .n_experts = E, .top_k = K, .hidden = X, .inter = I, .routed_scaling = 1, .n_group = 1,
                         .topk_group = 1, .relu2 = v == 2, .act_limit = v == 1 ? 0.3f : 0, .w_gate = mg, .w_up = mu,
                         .w_down = md };
            float *x = rvec((size_t)N * X), *w = rvec((size_t)N * K), *base = rvec((size_t)N * X);
            int32_t sel[N * K];
            for (int t = 0; t < N; t++)   /* K distinct experts per token; expert 5 unused */
                for (int k = 0; k < K; k++) sel[t * K + k] = (t + 2 * k) % (E - 1);
            float *all = malloc((size_t)N * X * sizeof(float)), *part = malloc((size_t)N * X * sizeof(float));
            memcpy(all, base, (size_t)N * X * sizeof(float));
            memcpy(part, base, (size_t)N * X * sizeof(float));
            be->moe_experts(be, all, x, N, sel, w, &m, v == 3);
            for (int t0 = 0, n = 1; t0 < N; t0 += n, n = n % 4 + 1) {
                int nn = N - t0 < n ? N - t0 : n;
                be->moe_experts(be, part + (size_t)t0 * X, x + (size_t)t0 * X, nn, sel + t0 * K, w + t0 * K, &m, v == 3);
            }
            CHECK(be->status(be) == 0, "%s moe variant %d: %s", be->name, v, be->last_error);
            CHECK(same(all, part, (size_t)N * X), "%s moe variant %d: decode-step rows differ from the 9-token call",
                  be->name, v);
            free(all); free(part); free(x); free(w); free(base);
            for (int e = 0; e < E; e++) { free_w(&wg[e]); free_w(&wu[e]); free_w(&wd[e]); }
        }
    }
}

/* ---- memory ------------------------------------------------------------------------------- */

static void test_memory(void) {
    for (int b = 0; b < n_bes; b++) {
        ci_backend *be = bes[b];
        CHECK(!be->is_device && be->status(be) == 0 && !be->graph_begin && !be->graph_end && !be->graph_launch &&
                  !be->graph_free && !be->pool_free, "%s: CPU flags", be->name);
        size_t sizes[] = { 0, 1, 255, 256, 257, 100003 };
        for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
            unsigned char *a = be->alloc(be, sizes[i]), *c = be->alloc(be, sizes[i]);
            CHECK(a && c && ((uintptr_t)a & 255) == 0 && ((uintptr_t)c & 255) == 0, "%s: alloc %zu aligned", be->name, sizes[i]);
            if (!a || !c) return;
            unsigned char *h = malloc(sizes[i] + 1), *back = malloc(sizes[i] + 1);
            for (size_t j = 0; j < sizes[i]; j++) h[j] = (unsigned char)rnd_u32();
            be->upload(be, a, h, sizes[i]);
            be->copy(be, c, a, sizes[i]);
            be->download(be, back, c, sizes[i]);
            CHECK(!memcmp(h, back, sizes[i]), "%s: round trip of %zu bytes", be->name, sizes[i]);
            CHECK(be->weight(be, h, sizes[i]) == h, "%s: weight is the host address", be->name);
            free(h);
            free(back);
            be->buf_free(be, a);
            be->buf_free(be, c);
        }
        CHECK(be->alloc(be, SIZE_MAX - 8) == NULL, "%s: an impossible alloc gives NULL", be->name);
    }
}

/* ---- kv_store / attention_pos ----------------------------------------------------------- */

static void test_kv_store(void) {
    for (int b = 0; b < n_bes; b++) {
        ci_backend *be = bes[b];
        const int width = 37, stride = 45, rows = 20, n = 5;
        float *cache = rvec((size_t)rows * stride), *want = malloc((size_t)rows * stride * sizeof(float));
        float *src = rvec((size_t)n * width);
        memcpy(want, cache, (size_t)rows * stride * sizeof(float));
        int32_t pos[5] = { 7, 0, 19, 3, 11 };
        for (int t = 0; t < n; t++) memcpy(want + pos[t] * stride, src + t * width, width * sizeof(float));
        be->kv_store(be, cache, stride, src, width, n, pos);
        CHECK(same(cache, want, (size_t)rows * stride), "%s: kv_store rows", be->name);
        free(cache); free(want); free(src);
    }
}

/* Shapes: 4 heads a kv head (row items), and 2 and 1, whose prefills past one key block (128)
 * take the CPU's blocks of 4 query rows (attn_item_qb): every row must be what it is alone. */
static void test_attention_pos(void) {
    const int shapes[][2] = { { 8, 2 }, { 8, 4 }, { 4, 4 } };   /* H, KV */
    const int cases[][2] = { { 1, 0 }, { 1, 300 }, { 5, 37 }, { 17, 120 }, { 3, 255 }, { 33, 200 }, { 150, 0 } };   /* n, pos0 */
    for (size_t sh = 0; sh < sizeof shapes / sizeof *shapes; sh++)
    for (int b = 0; b < n_bes; b++) {
        const int H = shapes[sh][0], KV = shapes[sh][1], hd = 20, KD = KV * hd + 3; /* row stride wider than the row */
        ci_backend *be = bes[b];
        for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
            int n = cases[c][0], pos0 = cases[c][1], L = pos0 + n;
            float *q = rvec((size_t)n * H * hd), *k = rvec((size_t)L * KD), *v = rvec((size_t)L * KD);
            float *o1 = malloc((size_t)n * H * hd * sizeof(float)), *o2 = malloc((size_t)n * H * hd * sizeof(float));
            int32_t *pos = malloc((size_t)n * sizeof *pos);
            for (int t = 0; t < n; t++) pos[t] = pos0 + t;
            be->attention(be, o1, q, k, v, n, pos0, H, KV, hd, KD, 0.3f);
            be->attention_pos(be, o2, q, k, v, n, pos, L + 50, H, KV, hd, KD, 0.3f);
            CHECK(same(o1, o2, (size_t)n * H * hd), "%s: attention_pos = attention, H %d KV %d n %d pos0 %d", be->name, H, KV, n,
                  pos0);
            /* positions in any order: row t is attention of one row at pos[t] */
            for (int t = 0; t < n; t++) pos[t] = (int32_t)(rnd_u32() % (unsigned)L);
            be->attention_pos(be, o2, q, k, v, n, pos, L, H, KV, hd, KD, 0.3f);
            for (int t = 0; t < n; t++) {
                be->attention(be, o1, q + (size_t)t * H * hd, k, v, 1, pos[t], H, KV, hd, KD, 0.3f);
                CHECK(same(o1, o2 + (size_t)t * H * hd, (size_t)H * hd), "%s: H %d KV %d n %d: row %d at pos %d", be->name, H, KV,
                      n, t, pos[t]);
            }
            free(q); free(k); free(v); free(o1); free(o2); free(pos);
        }
    }
}

/* ---- fused ops ---------------------------------------------------------------------------- */

static void test_fused_matmuls(void) {
    const ci_dtype dts[] = { CI_F32, CI_BF16, CI_F8_E4M3 };
    const int ns[] = { 1, 3, 5, 17 };
    const int64_t D = 300, R1 = 131, R2 = 45;
    for (int b = 0; b < n_bes; b++) {
        ci_backend *be = bes[b];
        for (int di = 0; di < 3; di++) {
            wmat w1, w2, w3;
            make_w(&w1, dts[di], R1, D);
            make_w(&w2, dts[di], R2, D);
            make_w(&w3, dts[di], R2, D);
            for (int ni = 0; ni < 4; ni++) {
                int n = ns[ni];
                float *x = rvec((size_t)n * D);
                float *a1 = malloc((size_t)n * R1 * 4), *a2 = malloc((size_t)n * R2 * 4), *a3 = malloc((size_t)n * R2 * 4);
                float *b1 = malloc((size_t)n * R1 * 4), *b2 = malloc((size_t)n * R2 * 4), *b3 = malloc((size_t)n * R2 * 4);
                be->matmul(be, a1, x, n, &w1.m);
                be->matmul(be, a2, x, n, &w2.m);
                be->matmul(be, a3, x, n, &w3.m);
                float *ys[3] = { b1, b2, b3 };
                const ci_mat *ws[3] = { &w1.m, &w2.m, &w3.m };
                be->matmul_n(be, 3, ys, x, n, ws);
                CHECK(same(a1, b1, (size_t)n * R1) && same(a2, b2, (size_t)n * R2) && same(a3, b3, (size_t)n * R2),
                      "%s: matmul_n %s n %d", be->name, ci_dtype_name(dts[di]), n);
                /* matmul_acc: y += x·Wᵀ through tmp */
                float *y1 = rvec((size_t)n * R1), *y2 = malloc((size_t)n * R1 * 4), *tmp = malloc((size_t)n * R1 * 4);
                memcpy(y2, y1, (size_t)n * R1 * 4);
                be->add(be, y1, a1, (int64_t)n * R1);
                be->matmul_acc(be, y2, x, n, &w1.m, tmp);
                CHECK(same(y1, y2, (size_t)n * R1), "%s: matmul_acc %s n %d", be->name, ci_dtype_name(dts[di]), n);
                /* matmul_swiglu: silu(x·Wgᵀ) * (x·Wuᵀ) */
                be->swiglu(be, a2, a3, (int64_t)n * R2);
                be->matmul_swiglu(be, b2, b3, x, n, &w2.m, &w3.m);
                CHECK(same(a2, b2, (size_t)n * R2), "%s: matmul_swiglu %s n %d", be->name, ci_dtype_name(dts[di]), n);
                /* norm_matmul_n / norm_matmul_swiglu: rmsnorm, then the unfused op, bit for bit */
                float *nw = rvec((size_t)D), *xn = malloc((size_t)n * D * 4), *xn2 = malloc((size_t)n * D * 4);
                be->rmsnorm(be, xn, x, nw, n, (int)D, 1e-5f);
                be->matmul_n(be, 3, ys, xn, n, ws);
                float *c1 = malloc((size_t)n * R1 * 4), *c2 = malloc((size_t)n * R2 * 4), *c3 = malloc((size_t)n * R2 * 4);
                float *zs[3] = { c1, c2, c3 };
                be->norm_matmul_n(be, xn2, x, nw, 1e-5f, 3, zs, n, ws);
                CHECK(same(b1, c1, (size_t)n * R1) && same(b2, c2, (size_t)n * R2) && same(b3, c3, (size_t)n * R2),
                      "%s: norm_matmul_n %s n %d", be->name, ci_dtype_name(dts[di]), n);
                be->matmul_swiglu(be, b2, b3, xn, n, &w2.m, &w3.m);
                be->norm_matmul_swiglu(be, xn2, x, nw, 1e-5f, c2, c3, n, &w2.m, &w3.m);
                CHECK(same(b2, c2, (size_t)n * R2), "%s: norm_matmul_swiglu %s n %d", be->name, ci_dtype_name(dts[di]), n);
                /* norm_matmul_keep: rmsnorm (written) then matmul, bit for bit */
                be->matmul(be, b1, xn, n, &w1.m);
                memset(xn2, 0, (size_t)n * D * 4);
                be->norm_matmul_keep(be, xn2, c1, x, nw, 1e-5f, n, &w1.m);
                CHECK(same(b1, c1, (size_t)n * R1) && same(xn, xn2, (size_t)n * D), "%s: norm_matmul_keep %s n %d",
                      be->name, ci_dtype_name(dts[di]), n);
                free(nw); free(xn); free(xn2); free(c1); free(c2); free(c3);
                free(x); free(a1); free(a2); free(a3); free(b1); free(b2); free(b3); free(y1); free(y2); free(tmp);
            }
            free_w(&w1); free_w(&w2); free_w(&w3);
        }
    }
}

static void test_qk_rope_store(void) {
    const int H = 6, KV = 2, hd = 22, QD = H * hd, KD = KV * hd, stride = KD + 5, rows = 40;
    for (int b = 0; b < n_bes; b++) {
        ci_backend *be = bes[b];
        for (int variant = 0; variant < 4; variant++) {
            int norms = variant & 1, n = variant < 2 ? 1 : 7, rot = variant == 3 ? 12 : hd;
            ci_rope_style style = variant == 2 ? CI_ROPE_INTERLEAVED : CI_ROPE_NEOX;
            float *qn = rvec(hd), *kn = rvec(hd), *inv = malloc((size_t)rot / 2 * sizeof(float));
            for (int i = 0; i < rot / 2; i++) inv[i] = powf(10000.0f, -2.0f * (float)i / (float)rot);
            float *q1 = rvec((size_t)n * QD), *k1 = rvec((size_t)n * KD), *v = rvec((size_t)n * KD);
            float *q2 = malloc((size_t)n * QD * 4), *k2 = malloc((size_t)n * KD * 4);
            memcpy(q2, q1, (size_t)n * QD * 4);
            memcpy(k2, k1, (size_t)n * KD * 4);
            float *kc1 = rvec((size_t)rows * stride), *vc1 = rvec((size_t)rows * stride);
            float *kc2 = malloc((size_t)rows * stride * 4), *vc2 = malloc((size_t)rows * stride * 4);
            memcpy(kc2, kc1, (size_t)rows * stride * 4);
            memcpy(vc2, vc1, (size_t)rows * stride * 4);
            int32_t pos[7];
            for (int t = 0; t < n; t++) pos[t] = 30 + t * (variant == 2 ? -3 : 1);
            if (norms) {
                be->rmsnorm(be, q1, q1, qn, n * H, hd, 1e-6f);
                be->rmsnorm(be, k1, k1, kn, n * KV, hd, 1e-6f);
            }
            be->rope(be, q1, n, H, hd, 0, rot, pos, inv, 0.9f, style);
            be->rope(be, k1, n, KV, hd, 0, rot, pos, inv, 0.9f, style);
            be->kv_store(be, kc1, stride, k1, KD, n, pos);
            be->kv_store(be, vc1, stride, v, KD, n, pos);
            be->qk_rope_store(be, q2, k2, v, n, H, KV, hd, norms ? qn : NULL, norms ? kn : NULL, 1e-6f, rot, pos, inv, 0.9f,
                              style, kc2, vc2, stride);
            CHECK(same(q1, q2, (size_t)n * QD) && same(k1, k2, (size_t)n * KD), "%s: qk_rope_store q/k variant %d",
                  be->name, variant);
            CHECK(same(kc1, kc2, (size_t)rows * stride) && same(vc1, vc2, (size_t)rows * stride),
                  "%s: qk_rope_store cache variant %d", be->name, variant);
            free(qn); free(kn); free(inv); free(q1); free(k1); free(v); free(q2); free(k2);
            free(kc1); free(vc1); free(kc2); free(vc2);
        }
    }
}

/* rope_attend on a paged cache (backend.h ci_pages) against the same rows in unpaged caches:
 * a chunk of one sequence (one table) and a decode step of three sequences (a table per
 * row), tables of shuffled blocks. Blocks of 128 rows (the CPU's attention block): bit for
 * bit, outputs and the rows written; blocks of 16: the value sums split at block edges, so
 * within 1e-5. */
static void test_rope_attend_paged(void) {
    enum { H = 4, KV = 2, hd = 24, QD = H * hd, KD = KV * hd, NS = 3, MAXP = 300 };
    const float scale = 0.2f;
    float inv[hd / 2];
    for (int i = 0; i < hd / 2; i++) inv[i] = powf(10000.0f, -2.0f * (float)i / (float)hd);
    for (int b = 0; b < n_bes; b++) {
        ci_backend *be = bes[b];
        for (int lg = 4; lg <= 7; lg += 3) {
            const int blk = 1 << lg, per = (MAXP + blk - 1) / blk, NB = NS * per + 2;
            float *kc[NS], *vc[NS];
            float *kp = rvec((size_t)NB * blk * KD), *vp = rvec((size_t)NB * blk * KD);
            int32_t tab[NS * 24];
            int *perm = malloc((size_t)NB * sizeof *perm);
            for (int i = 0; i < NB; i++) perm[i] = i;
            for (int i = NB - 1; i > 0; i--) { int j = (int)(rnd_u32() % (uint32_t)(i + 1)), t = perm[i]; perm[i] = perm[j]; perm[j] = t; }
            for (int s = 0; s < NS; s++) {
                kc[s] = rvec((size_t)MAXP * KD);
                vc[s] = rvec((size_t)MAXP * KD);
                for (int i = 0; i < per; i++) tab[s * per + i] = perm[s * per + i];
                ci_pages pg = { tab + s * per, per, 0, lg };
                for (int p = 0; p < MAXP; p++) {
                    memcpy(kp + ci_page_row(&pg, 0, p) * KD, kc[s] + (size_t)p * KD, KD * 4);
                    memcpy(vp + ci_page_row(&pg, 0, p) * KD, vc[s] + (size_t)p * KD, KD * 4);
                }
            }
            for (int mode = 0; mode < 2; mode++) {
                const int n = mode ? NS : 9;
                int32_t pos[9];
                for (int t = 0; t < n; t++) pos[t] = mode ? 100 + 97 * t : 250 + t;
                float *q = rvec((size_t)n * QD), *k = rvec((size_t)n * KD), *v = rvec((size_t)n * KD);
                float *q2 = malloc((size_t)n * QD * 4), *k2 = malloc((size_t)n * KD * 4);
                float *o1 = malloc((size_t)n * QD * 4), *o2 = malloc((size_t)n * QD * 4);
                memcpy(q2, q, (size_t)n * QD * 4);
                memcpy(k2, k, (size_t)n * KD * 4);
                float *tabp[2 * NS];
                for (int s = 0; s < NS; s++) { tabp[2 * s] = kc[s]; tabp[2 * s + 1] = vc[s]; }
                be->rope_attend(be, o1, q, k, v, n, H, KV, hd, NULL, NULL, 1e-6f, hd, pos, inv, 1.0f, CI_ROPE_NEOX,
                                mode ? NULL : kc[0], mode ? NULL : vc[0], mode ? tabp : NULL, NULL, KD, MAXP, scale);
                ci_pages pg = { tab, per, mode, lg };
                be->rope_attend(be, o2, q2, k2, v, n, H, KV, hd, NULL, NULL, 1e-6f, hd, pos, inv, 1.0f, CI_ROPE_NEOX,
                                kp, vp, NULL, &pg, KD, MAXP, scale);
                double md = 0;
                for (size_t i = 0; i < (size_t)n * QD; i++) md = fmax(md, fabs((double)o1[i] - o2[i]));
                if (lg == 7) CHECK(same(o1, o2, (size_t)n * QD), "%s: paged blk %d mode %d: max diff %g", be->name, blk, mode, md);
                else CHECK(md < 1e-5, "%s: paged blk %d mode %d: max diff %g", be->name, blk, mode, md);
                int rows_ok = 1;
                for (int t = 0; t < n; t++) {
                    int s = mode ? t : 0;
                    const float *r1 = kc[s] + (size_t)pos[t] * KD, *r2 = kp + ci_page_row(&pg, mode ? t : 0, pos[t]) * KD;
                    const float *w1 = vc[s] + (size_t)pos[t] * KD, *w2 = vp + ci_page_row(&pg, mode ? t : 0, pos[t]) * KD;
                    rows_ok &= same(r1, r2, KD) && same(w1, w2, KD);
                }
                CHECK(rows_ok, "%s: paged blk %d mode %d: the rows written differ", be->name, blk, mode);
                free(q); free(k); free(v); free(q2); free(k2); free(o1); free(o2);
            }
            for (int s = 0; s < NS; s++) { free(kc[s]); free(vc[s]); }
            free(kp); free(vp); free(perm);
        }
    }
}

/* The f16 attention cache (ci_backend.kv_f16): rope_attend on a kv_f16 backend writes each k / v
 * value as cpu_kv_f16's half (clamped to +-65504, nearest even; a few values past the clamp) and
 * its output is, bit for bit, that of the same ISA's f32 backend whose cache holds the halves'
 * values: a prefill over key blocks (the query-block path with 2 heads a kv head), a chunk after
 * a prefix, a decode row; 4 and 2 heads a kv head, a head size past the vector tails; rows a slot
 * wider than the row. Then a batch step of 3 sequences (kv_tab) = each sequence alone. */
static uint16_t kv_half(float x) { return ci_f32_to_f16(x > 65504.0f ? 65504.0f : x < -65504.0f ? -65504.0f : x); }

static void test_kv_f16(void) {
    const int shapes[][3] = { { 8, 2, 20 }, { 8, 4, 64 }, { 4, 2, 136 }, { 12, 3, 32 } };   /* H, KV, hd */
    const int cases[][2] = { { 150, 0 }, { 17, 150 }, { 1, 167 }, { 5, 168 } };   /* n, pos0: run one after another */
    for (int b = 0; b < 2 * n_bes; b++) {   /* the f16 backend with 2 threads, then 1 (attn_item_rows' forms) */
        ci_backend *be = bes[b % n_bes], *bh = ci_backend_cpu_new(b < n_bes ? 2 : 1, isas[b % n_bes]);
        if (!bh) continue;   /* bes[] holds the sets this CPU runs, in isas' order from the first */
        ci_backend_cpu_kv_f16(bh);
        for (size_t sh = 0; sh < sizeof shapes / sizeof *shapes; sh++) {
            const int H = shapes[sh][0], KV = shapes[sh][1], hd = shapes[sh][2], QD = H * hd, KD = KV * hd;
            const int S = ci_kv_slots(bh, KD) + 1, MAXP = 200;   /* f16 row stride in slots, a slot past the row */
            CHECK(ci_kv_slots(bh, KD) == KD / 2 && ci_kv_slots(be, KD) == KD, "kv slots %d / %d", ci_kv_slots(bh, KD), KD);
            float inv[68];   /* hd <= 136 */
            for (int i = 0; i < hd / 2; i++) inv[i] = powf(10000.0f, -2.0f * (float)i / (float)hd);
            float *kh = calloc((size_t)MAXP * S, 4), *vh = calloc((size_t)MAXP * S, 4);   /* the f16 caches */
            float *kf = calloc((size_t)MAXP * KD, 4), *vf = calloc((size_t)MAXP * KD, 4);  /* f32: the halves' values */
            float *k32 = calloc((size_t)MAXP * KD, 4), *v32 = calloc((size_t)MAXP * KD, 4);
            for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
                const int n = cases[c][0], pos0 = cases[c][1];
                float *q = rvec((size_t)n * QD), *k = rvec((size_t)n * KD), *v = rvec((size_t)n * KD);
                if (c == 0) { v[3] = 1e5f; v[KD + 1] = -7e4f; k[5] = 7e4f; }   /* past the clamp */
                float *q2 = malloc((size_t)n * QD * 4), *k2 = malloc((size_t)n * KD * 4);
                float *o1 = malloc((size_t)n * QD * 4), *o2 = malloc((size_t)n * QD * 4);
                memcpy(q2, q, (size_t)n * QD * 4);
                memcpy(k2, k, (size_t)n * KD * 4);
                int32_t *pos = malloc((size_t)n * sizeof *pos);
                for (int t = 0; t < n; t++) pos[t] = pos0 + t;
                bh->rope_attend(bh, o1, q, k, v, n, H, KV, hd, NULL, NULL, 1e-6f, hd, pos, inv, 1.0f, CI_ROPE_NEOX, kh, vh,
                                NULL, NULL, S, MAXP, 0.25f);
                /* the reference: the f32 rows, rounded to the halves, attended on the f32 backend */
                be->qk_rope_store(be, q2, k2, v, n, H, KV, hd, NULL, NULL, 1e-6f, hd, pos, inv, 1.0f, CI_ROPE_NEOX, k32, v32, KD);
                int rows_ok = 1;
                for (int t = pos0; t < pos0 + n; t++)
                    for (int i = 0; i < KD; i++) {
                        uint16_t hk = kv_half(k32[(size_t)t * KD + i]), hv = kv_half(v32[(size_t)t * KD + i]);
                        rows_ok &= ((const uint16_t *)(kh + (size_t)t * S))[i] == hk && ((const uint16_t *)(vh + (size_t)t * S))[i] == hv;
                        kf[(size_t)t * KD + i] = ci_f16_to_f32(hk);
                        vf[(size_t)t * KD + i] = ci_f16_to_f32(hv);
                    }
                CHECK(rows_ok, "%s kv_f16: H %d KV %d hd %d n %d pos0 %d: the halves written", be->name, H, KV, hd, n, pos0);
                be->attention_pos(be, o2, q2, kf, vf, n, pos, MAXP, H, KV, hd, KD, 0.25f);
                CHECK(same(q, q2, (size_t)n * QD) && same(o1, o2, (size_t)n * QD),
                      "%s kv_f16: H %d KV %d hd %d n %d pos0 %d: = the f32 cache of the halves", be->name, H, KV, hd, n, pos0);
                free(q); free(k); free(v); free(q2); free(k2); free(o1); free(o2); free(pos);
            }
            /* a batch step: 3 sequences (copies of this cache at different lengths), kv_tab = each alone */
            enum { NS = 3 };
            float *kc[NS], *vc[NS], *tabp[2 * NS];
            int32_t pos[NS] = { 167, 90, 130 };
            float *q = rvec((size_t)NS * QD), *k = rvec((size_t)NS * KD), *v = rvec((size_t)NS * KD);
            float *qa = malloc((size_t)NS * QD * 4), *ka = malloc((size_t)NS * KD * 4);
            float *o1 = malloc((size_t)NS * QD * 4), *o2 = malloc((size_t)NS * QD * 4);
            memcpy(qa, q, (size_t)NS * QD * 4);
            memcpy(ka, k, (size_t)NS * KD * 4);
            for (int s = 0; s < NS; s++) {
                kc[s] = malloc((size_t)MAXP * S * 4); vc[s] = malloc((size_t)MAXP * S * 4);
                memcpy(kc[s], kh, (size_t)MAXP * S * 4); memcpy(vc[s], vh, (size_t)MAXP * S * 4);
                tabp[2 * s] = kc[s]; tabp[2 * s + 1] = vc[s];
            }
            bh->rope_attend(bh, o1, q, k, v, NS, H, KV, hd, NULL, NULL, 1e-6f, hd, pos, inv, 1.0f, CI_ROPE_NEOX, NULL, NULL,
                            tabp, NULL, S, MAXP, 0.25f);
            int rows_ok = 1;
            for (int s = 0; s < NS; s++) {   /* each alone on a fresh copy (kh / vh, as the batch's started) */
                memcpy(kf, kh, (size_t)MAXP * S * 4);   /* S <= KD: kf / vf hold it */
                memcpy(vf, vh, (size_t)MAXP * S * 4);
                bh->rope_attend(bh, o2 + (size_t)s * QD, qa + (size_t)s * QD, ka + (size_t)s * KD, v + (size_t)s * KD, 1, H, KV,
                                hd, NULL, NULL, 1e-6f, hd, pos + s, inv, 1.0f, CI_ROPE_NEOX, kf, vf, NULL, NULL, S, MAXP, 0.25f);
                rows_ok &= !memcmp(kf, kc[s], (size_t)MAXP * S * 4) && !memcmp(vf, vc[s], (size_t)MAXP * S * 4);
            }
            CHECK(same(o1, o2, (size_t)NS * QD) && rows_ok, "%s kv_f16: H %d KV %d hd %d: a batch step = each row alone (rows %d)",
                  be->name, H, KV, hd, rows_ok);
            for (int s = 0; s < NS; s++) { free(kc[s]); free(vc[s]); }
            free(q); free(k); free(v); free(qa); free(ka); free(o1); free(o2);
            free(kh); free(vh); free(kf); free(vf); free(k32); free(v32);
        }
        bh->free(bh);
    }
}

static void test_argmax(void) {
    float x[9] = { 1, 3, -2, 3, 0.5f, 3, -INFINITY, 2, 1 };
    for (int b = 0; b < n_bes; b++) {
        ci_backend *be = bes[b];
        int32_t *out = be->alloc(be, sizeof *out);
        be->argmax(be, out, x, 9);
        CHECK(*out == 1, "%s: ties give the first, got %d", be->name, *out);
        float y[5] = { NAN, -5, NAN, -1, -1 };
        be->argmax(be, out, y, 5);
        CHECK(*out == 3, "%s: NaN never wins, got %d", be->name, *out);
        float z[3] = { NAN, NAN, NAN };
        be->argmax(be, out, z, 3);
        CHECK(*out == 0, "%s: all NaN gives 0, got %d", be->name, *out);
        float w[3] = { -INFINITY, -INFINITY, -INFINITY };
        be->argmax(be, out, w, 3);
        CHECK(*out == 0, "%s: all -inf gives 0, got %d", be->name, *out);
        for (int trial = 0; trial < 50; trial++) {
            float r[64];
            for (int i = 0; i < 64; i++) r[i] = (float)(rnd_u32() % 8) - (rnd_u32() % 5 == 0 ? NAN : 0.0f);
            be->argmax(be, out, r, 64);
            CHECK(*out == smp_argmax(r, 64), "%s: argmax = smp_argmax (trial %d)", be->name, trial);
        }
        be->buf_free(be, out);
    }
}

/* ---- the dense families through the boundary ------------------------------------------ */

static const char *const fixtures[] = { "tests/fixtures/qwen3_tied", "tests/fixtures/llama_gqa_llama3",
                                        "tests/fixtures/qwen3_moe", "tests/fixtures/qwen3_bf16",
                                        "tests/fixtures/deepseek_v3", "tests/fixtures/deepseek_v32" };

static void test_forward_argmax(void) {
    char err[512];
    for (size_t f = 0; f < sizeof fixtures / sizeof *fixtures; f++) {
        for (int ng = 0; ng < 2; ng++) {
            ci_model_opts o = { .n_threads = 2, .no_graphs = ng };
            ci_model *m;
            if (ci_model_open(fixtures[f], &o, &m, err, sizeof err)) { CHECK(0, "%s: %s", fixtures[f], err); return; }
            ci_model_info info;
            ci_model_get_info(m, &info);
            ci_session *a = NULL, *b = NULL;
            CHECK(!ci_session_new(m, 64, &a, err, sizeof err) && !ci_session_new(m, 64, &b, err, sizeof err), "%s", err);
            if (!a || !b) { ci_session_free(a); ci_session_free(b); ci_model_free(m); return; }
            float *lg = malloc((size_t)info.vocab_size * sizeof *lg);
            int prompt[5] = { 3, 1, 4, 1, 5 }, ta = 0, tb = 0;
            CHECK(!ci_forward(a, prompt, 5, lg, 0, err, sizeof err), "%s", err);
            ta = smp_argmax(lg, info.vocab_size);
            CHECK(!ci_forward_argmax(b, prompt, 5, &tb, err, sizeof err), "%s", err);
            for (int step = 0; step < 8 && ta == tb; step++) {
                int in = ta;
                CHECK(!ci_forward(a, &in, 1, lg, 0, err, sizeof err), "%s", err);
                ta = smp_argmax(lg, info.vocab_size);
                CHECK(!ci_forward_argmax(b, &in, 1, &tb, err, sizeof err), "%s", err);
            }
            CHECK(ta == tb, "%s: forward_argmax %d, host argmax %d", fixtures[f], tb, ta);
            /* greedy ci_generate (through forward_argmax) = sampling at temperature 0 by hand */
            ci_session_reset(a);
            ci_sampler_opts so;
            ci_sampler_defaults(&so);
            int out[6], n_out = 0;
            CHECK(!ci_generate(a, prompt, 5, 6, &so, out, &n_out, NULL, NULL, err, sizeof err), "%s", err);
            ci_session_reset(b);
            CHECK(!ci_forward(b, prompt, 5, lg, 0, err, sizeof err), "%s", err);
            for (int i = 0; i < n_out; i++) {
                int t = smp_argmax(lg, info.vocab_size);
                CHECK(t == out[i], "%s: generate token %d: %d, by hand %d", fixtures[f], i, out[i], t);
                if (i + 1 < n_out) CHECK(!ci_forward(b, &t, 1, lg, 0, err, sizeof err), "%s", err);
            }
            free(lg);
            ci_session_free(a);
            ci_session_free(b);
            ci_model_free(m);
        }
    }
}

/* forward_batch rows = single forwards; cache export then import = the same next logits. */
static void test_batch_and_cache(void) {
    char err[512];
    for (int kv16 = 0; kv16 < 2; kv16++)
    for (size_t f = 0; f < sizeof fixtures / sizeof *fixtures; f++) {
        ci_model_opts o = { .n_threads = 2, .kv_f16 = kv16 };
        ci_model *m;
        if (kv16 && strstr(fixtures[f], "deepseek")) {   /* MLA's latent cache: refused, naming the option */
            CHECK(ci_model_open(fixtures[f], &o, &m, err, sizeof err) && strstr(err, "kv_f16") && strstr(err, "deepseek"),
                  "%s with kv_f16: '%s'", fixtures[f], err);
            continue;
        }
        if (ci_model_open(fixtures[f], &o, &m, err, sizeof err)) { CHECK(0, "%s: %s", fixtures[f], err); return; }
        if (kv16) {   /* half the cache bytes of the f32 cache (n_kv * hd even in every fixture) */
            ci_model *m32;
            ci_model_opts o32 = { .n_threads = 1 };
            CHECK(!ci_model_open(fixtures[f], &o32, &m32, err, sizeof err), "%s", err);
            ci_model_info a, b;
            ci_model_get_info(m, &a);
            ci_model_get_info(m32, &b);
            CHECK(2 * a.cache_bytes_per_token == b.cache_bytes_per_token && a.cache_bytes_per_token > 0,
                  "%s: kv_f16 cache %zu bytes a token, f32 %zu", fixtures[f], a.cache_bytes_per_token, b.cache_bytes_per_token);
            ci_model_free(m32);
        }
        const ci_family_ops *ops = m->family->ops;
        int V = (int)m->cfg.vocab_size;
        ci_session *s[3], *r;
        int lens[3] = { 3, 7, 1 }, toks[3] = { 9, 2, 5 };
        for (int i = 0; i < 3; i++) CHECK(!ci_session_new(m, 32 + 8 * i, &s[i], err, sizeof err), "%s", err);
        CHECK(!ci_session_new(m, 32, &r, err, sizeof err), "%s", err);
        float *lb = malloc((size_t)3 * V * sizeof(float)), *l1 = malloc((size_t)V * sizeof(float));
        int prompt[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
        for (int i = 0; i < 3; i++) CHECK(!ci_forward(s[i], prompt + i, lens[i], NULL, 0, err, sizeof err), "%s", err);
        CHECK(!ops->forward_batch(s, toks, 3, lb, err, sizeof err), "%s", err);
        for (int i = 0; i < 3; i++) {
            ci_session_reset(r);
            CHECK(!ci_forward(r, prompt + i, lens[i], NULL, 0, err, sizeof err), "%s", err);
            CHECK(!ci_forward(r, &toks[i], 1, l1, 0, err, sizeof err), "%s", err);
            CHECK(same(l1, lb + (size_t)i * V, (size_t)V), "%s%s: batch row %d", fixtures[f], kv16 ? " kv_f16" : "", i);
        }
        /* export s[1]'s 8 rows, import into r, the next step's logits agree */
        size_t bytes = 8 * m->family->ops->cache_bytes_per_token(m);
        void *blob = malloc(bytes);
        CHECK(!ops->cache_export(s[1], 8, blob, err, sizeof err), "%s", err);
        ci_session_reset(r);
        CHECK(!ops->cache_import(r, 8, blob, err, sizeof err), "%s", err);
        int next = 11;
        CHECK(!ci_forward(s[1], &next, 1, lb, 0, err, sizeof err) && !ci_forward(r, &next, 1, l1, 0, err, sizeof err), "%s", err);
        CHECK(same(l1, lb, (size_t)V), "%s%s: imported cache", fixtures[f], kv16 ? " kv_f16" : "");
        free(blob); free(lb); free(l1);
        for (int i = 0; i < 3; i++) ci_session_free(s[i]);
        ci_session_free(r);
        ci_model_free(m);
    }
}

static void test_device_choice(void) {
    char err[512];
    ci_model *m = NULL;
    ci_model_opts o = { .n_threads = 1, .device = 1 };
    /* (deepseek_v4, the last family without a CUDA path, got one on 2026-12-02: every family
     * has one now, so the refusal by family in model.c has no fixture to check here) */
    /* a family with a CUDA path: a device backend where one serves, else one line saying why */
    err[0] = 0;
    if (ci_model_open("tests/fixtures/qwen3_tied", &o, &m, err, sizeof err) == 0) {
        ci_model_info info;
        ci_model_get_info(m, &info);
        CHECK(strncmp(info.backend, "cpu", 3) != 0, "--device cuda gave %s", info.backend);
        ci_model_free(m);
        m = NULL;
    } else {
        CHECK(err[0] && !strchr(err, '\n') && !m, "no device: one line, got \"%s\"", err);
    }
    o.device = 7;
    CHECK(ci_model_open("tests/fixtures/qwen3_tied", &o, &m, err, sizeof err) < 0 && !m, "device 7 refused");
    CHECK_HAS(err, "device 7");
    /* auto: a family without a CUDA path (or no device) runs on the CPU */
    o.device = 2;
    CHECK(!ci_model_open("tests/fixtures/qwen3_moe", &o, &m, err, sizeof err), "%s", err);
    if (m) {
        ci_model_info info;
        ci_model_get_info(m, &info);
        CHECK(!strncmp(info.backend, "cpu", 3), "auto for qwen3_moe: %s", info.backend);
        ci_model_free(m);
        m = NULL;
    }
    CHECK(!ci_model_open("tests/fixtures/mlx_qwen3_8bit_tied", &o, &m, err, sizeof err), "%s", err);
    if (m) {
        ci_model_info info;
        ci_model_get_info(m, &info);
        CHECK(!strncmp(info.backend, "cpu", 3), "auto for MLX-quantized qwen3: %s", info.backend);
        ci_model_free(m);
        m = NULL;
    }
    /* --device cuda on MLX-quantized weights (passed the GPU suite on 2026-12-02, no longer
     * gated): a device backend where one serves, else the one line saying why, as for bf16 */
    o.device = 1;
    err[0] = 0;
    if (ci_model_open("tests/fixtures/mlx_llama_4bit", &o, &m, err, sizeof err) == 0) {
        ci_model_info info;
        ci_model_get_info(m, &info);
        CHECK(strncmp(info.backend, "cpu", 3) != 0, "MLX-quantized llama, --device cuda gave %s", info.backend);
        ci_model_free(m);
        m = NULL;
    } else {
        CHECK(err[0] && !strchr(err, '\n') && !m, "MLX-quantized, no device: one line, got \"%s\"", err);
        CHECK(!strstr(err, "CINFER_CUDA_UNVERIFIED"), "MLX-quantized weights are not gated any more: %s", err);
    }
}

/* CINFER_CPU_POISON_SCRATCH=1 (cpu.c poison; test_parity runs with it): the fused ops' scratch
 * outputs are NaN afterwards, their results the same bits as without; unset, the scratch holds
 * the CPU's intermediates (xn = rmsnorm(x), tmp = the product). */
static void test_scratch_poison(void) {
    setenv("CINFER_CPU_POISON_SCRATCH", "1", 1);
    ci_backend *pz = ci_backend_cpu_new(1, CI_ISA_AUTO);
    unsetenv("CINFER_CPU_POISON_SCRATCH");
    ci_backend *pl = ci_backend_cpu_new(1, CI_ISA_AUTO);
    CHECK(pz && pl, "backends");
    if (!pz || !pl) return;
    const int n = 3, D = 64, R = 40;
    wmat w;
    make_w(&w, CI_F32, R, D);
    float *x = rvec((size_t)n * D), *nw = rvec(D), *xn[2], *y[2], *acc[2], *tmp[2];
    for (int k = 0; k < 2; k++) {
        ci_backend *be = k ? pz : pl;
        xn[k] = malloc((size_t)n * D * 4); y[k] = malloc((size_t)n * R * 4);
        tmp[k] = malloc((size_t)n * R * 4); acc[k] = calloc((size_t)n * R, 4);
        float *ys[1] = { y[k] };
        const ci_mat *ws[1] = { &w.m };
        be->norm_matmul_n(be, xn[k], x, nw, 1e-6f, 1, ys, n, ws);
        be->matmul_acc(be, acc[k], x, n, &w.m, tmp[k]);
    }
    int all_nan = 1;
    for (int i = 0; i < n * D; i++) all_nan &= isnan(xn[1][i]);
    for (int i = 0; i < n * R; i++) all_nan &= isnan(tmp[1][i]);
    CHECK(all_nan, "poisoned: norm_matmul_n's xn and matmul_acc's tmp are NaN afterwards");
    CHECK(same(y[0], y[1], (size_t)n * R) && same(acc[0], acc[1], (size_t)n * R), "poisoned: the same results");
    float *ref = malloc((size_t)n * D * 4);
    pl->rmsnorm(pl, ref, x, nw, n, D, 1e-6f);
    CHECK(same(ref, xn[0], (size_t)n * D) && same(tmp[0], acc[0], (size_t)n * R), "unpoisoned: xn and tmp keep the CPU's values");
    free(ref);
    for (int k = 0; k < 2; k++) { free(xn[k]); free(y[k]); free(acc[k]); free(tmp[k]); }
    free(x); free(nw); free_w(&w);
    pz->free(pz); pl->free(pl);
}

/* ---- ci_place_qkvo / ci_place_stack -------------------------------------------------------- */
static int n_weight_calls, n_stack_calls, stack_fail, stack_count;
static const void *stack_host[8];
static size_t stack_bytes[8];
static const void *rec_weight(ci_backend *be, const void *host, size_t bytes) {
    (void)be; (void)bytes;
    n_weight_calls++;
    return host;
}
static int rec_stack(ci_backend *be, int count, const void *const *host, const size_t *bytes, const void **out) {
    (void)be;
    n_stack_calls++;
    stack_count = count;
    for (int i = 0; i < count && i < 8; i++) {
        stack_host[i] = host[i];
        stack_bytes[i] = bytes[i];
        out[i] = (const char *)host[i] + 1;   /* a copy elsewhere, as a device's */
    }
    return stack_fail ? -1 : 0;
}

static void test_place_stack(void) {
    ci_backend be;
    memset(&be, 0, sizeof be);
    be.name = "recording";
    be.weight = rec_weight;
    be.weight_stack = rec_stack;
    static uint16_t q[8 * 16], k[4 * 16], v[4 * 16], o[16 * 8];
    static float kf[4 * 16];
    static uint8_t q8[8 * 16];
    static float q8s[1];
    const ci_mat Q = { .data = q, .dtype = CI_BF16, .rows = 8, .cols = 16 },
                 K = { .data = k, .dtype = CI_BF16, .rows = 4, .cols = 16 },
                 V = { .data = v, .dtype = CI_BF16, .rows = 4, .cols = 16 },
                 O = { .data = o, .dtype = CI_BF16, .rows = 16, .cols = 8 },
                 Kf = { .data = kf, .dtype = CI_F32, .rows = 4, .cols = 16 },
                 Kn = { .data = k, .dtype = CI_BF16, .rows = 2, .cols = 32 },
                 Q8 = { .data = q8, .dtype = CI_F8_E4M3, .rows = 8, .cols = 16, .scale = q8s, .scale_dtype = CI_F32,
                        .block = 128 };
    ci_mat dq, dk, dv, dout;
    /* one 16-bit dtype and width: one stack call, the views pointing at its copies */
    n_weight_calls = n_stack_calls = 0;
    CHECK(ci_place_qkvo(&be, &dq, &dk, &dv, &dout, &Q, &K, &V, &O) == 0, "the stacked q / k / v");
    CHECK(n_stack_calls == 1 && stack_count == 3 && n_weight_calls == 1, "%d stack calls of %d, %d weight calls",
          n_stack_calls, stack_count, n_weight_calls);   /* o alone */
    CHECK(stack_host[0] == q && stack_host[1] == k && stack_host[2] == v, "the stack's ranges in order");
    CHECK(stack_bytes[0] == sizeof q && stack_bytes[1] == sizeof k && stack_bytes[2] == sizeof v, "the stack's bytes");
    CHECK(dq.data == (const char *)q + 1 && dk.data == (const char *)k + 1 && dv.data == (const char *)v + 1,
          "the views point at the stack's copies");
    CHECK(dq.rows == 8 && dk.rows == 4 && dv.cols == 16 && dq.dtype == CI_BF16 && dout.data == o, "the views' shapes");
    /* mixed dtypes, mixed widths, block scales: each placed alone */
    const ci_mat *odd[3][3] = { { &Q, &Kf, &V }, { &Q, &Kn, &V }, { &Q8, &K, &V } };
    for (int c = 0; c < 3; c++) {
        n_weight_calls = n_stack_calls = 0;
        CHECK(ci_place_qkvo(&be, &dq, &dk, &dv, &dout, odd[c][0], odd[c][1], odd[c][2], &O) == 0, "case %d placed", c);
        CHECK(n_stack_calls == 0 && n_weight_calls == (c == 2 ? 5 : 4), "case %d: %d stack, %d weight calls", c,
              n_stack_calls, n_weight_calls);   /* fp8: its scale grid too */
        CHECK(dk.data == odd[c][1]->data && dq.rows == odd[c][0]->rows, "case %d: the views as placed alone", c);
    }
    /* a backend without weight_stack (the CPU's) */
    be.weight_stack = NULL;
    n_weight_calls = 0;
    CHECK(ci_place_qkvo(&be, &dq, &dk, &dv, &dout, &Q, &K, &V, &O) == 0 && n_weight_calls == 4 && dq.data == q,
          "no weight_stack: %d weight calls", n_weight_calls);
    /* a failed stack is the caller's failure */
    be.weight_stack = rec_stack;
    stack_fail = 1;
    CHECK(ci_place_qkvo(&be, &dq, &dk, &dv, &dout, &Q, &K, &V, &O) == -1, "a failed stack returns -1");
    stack_fail = 0;
}

int main(void) {
    for (int i = 0; i < 3; i++)
        if ((bes[n_bes] = ci_backend_cpu_new(3, isas[i]))) n_bes++;
    printf("CPU kernel sets: %d\n", n_bes);
    TEST_RUN(test_memory);
    TEST_RUN(test_kv_store);
    TEST_RUN(test_attention_pos);
    TEST_RUN(test_fused_matmuls);
    TEST_RUN(test_qk_rope_store);
    TEST_RUN(test_rope_attend_paged);
    TEST_RUN(test_kv_f16);
    TEST_RUN(test_moe_decode_batch);
    TEST_RUN(test_argmax);
    TEST_RUN(test_forward_argmax);
    TEST_RUN(test_batch_and_cache);
    TEST_RUN(test_device_choice);
    TEST_RUN(test_scratch_poison);
    TEST_RUN(test_place_stack);
    for (int i = 0; i < n_bes; i++) bes[i]->free(bes[i]);
    TEST_EXIT();
}
