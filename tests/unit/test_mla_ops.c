/* test_mla_ops.c — the CPU backend's MLA / DSA ops (backend.h "MLA / DSA", cpu/mla_cpu.c)
 * against their definitions, for each ISA this machine runs, with 3 threads:
 *  - rmsnorm_strided: each row the bits of rmsnorm of that row alone; the floats between
 *    rows untouched;
 *  - layernorm: within 1e-6 of the formula in double;
 *  - mla_absorb_q / mla_out_heads: within 1e-5 of the per-head products by ci_mat_get, for
 *    f32, bf16 and fp8 (block scales, views starting inside a scale block) kv_b views;
 *  - kv_store_paged: exactly the rows at pos[t] of cache tab[t * step];
 *  - mla_attend: one shared cache = attention_pos (n_kv 1, hd lat), and through a table
 *    each row = attention_pos of that row on its own cache, bit for bit;
 *  - dsa_attend: a row whose context fits in topk = mla_attend's row; a sparse row = one
 *    attention over the latent rows of the topk best index scores (computed here in double;
 *    rows whose topk-th and next scores nearly tie are not checked), bit for bit;
 *  - paged caches (blocks of 128 rows in a pool, the tables a shuffle): kv_store_paged puts
 *    each row at its block's row; mla_attend and dsa_attend (dense and sparse rows) give the
 *    unpaged caches' outputs bit for bit, for one sequence's chunk and for a batch step;
 *  - ci_topk_positions keeps ties to the lower position.
 * The families' logits through these ops are tests/unit/test_parity.c's. */
#include "check.h"
#include "backend/backend.h"
#include "core/tensor.h"
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static uint64_t rng = 0x9f1c2b7a55e3d4c1ull;
static uint32_t rnd_u32(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float rnd(float lo, float hi) { return lo + (hi - lo) * (float)(rnd_u32() & 0xffffff) / (float)0x1000000; }
static float *rvec(size_t n) {
    float *v = malloc((n ? n : 1) * sizeof *v);
    for (size_t i = 0; i < n; i++) v[i] = rnd(-1, 1);
    return v;
}
static int same(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

static const ci_isa isas[] = { CI_ISA_SCALAR, CI_ISA_AVX2, CI_ISA_AVX512 };
static ci_backend *bes[3];
static int n_bes;

static void test_norms(void) {
    const int n = 5, dim = 37, stride = 45;
    for (int b = 0; b < n_bes; b++) {
        ci_backend *be = bes[b];
        float *x = rvec((size_t)n * stride), *y = malloc((size_t)n * stride * sizeof(float)), *w = rvec(dim), *bias = rvec(dim);
        float *row = malloc((size_t)dim * sizeof(float));
        memcpy(y, x, (size_t)n * stride * sizeof(float));
        be->rmsnorm_strided(be, y, y, w, n, dim, stride, 1e-6f);
        for (int t = 0; t < n; t++) {
            be->rmsnorm(be, row, x + (size_t)t * stride, w, 1, dim, 1e-6f);
            CHECK(same(row, y + (size_t)t * stride, (size_t)dim), "%s: rmsnorm_strided row %d", be->name, t);
            CHECK(same(x + (size_t)t * stride + dim, y + (size_t)t * stride + dim, (size_t)(stride - dim)),
                  "%s: rmsnorm_strided touched the gap after row %d", be->name, t);
        }
        be->layernorm(be, y, x, w, bias, n, dim, 1e-6);   /* rows dim apart */
        for (int t = 0; t < n; t++) {
            const float *r = x + (size_t)t * dim;
            double mean = 0, var = 0;
            for (int i = 0; i < dim; i++) mean += r[i];
            mean /= dim;
            for (int i = 0; i < dim; i++) var += (r[i] - mean) * (r[i] - mean);
            var /= dim;
            for (int i = 0; i < dim; i++) {
                double want = (r[i] - mean) / sqrt(var + 1e-6) * w[i] + bias[i];
                CHECK(fabs(y[(size_t)t * dim + i] - want) <= 1e-6 * (1 + fabs(want)), "%s: layernorm [%d, %d]", be->name, t, i);
            }
        }
        free(x); free(y); free(w); free(bias); free(row);
    }
}

/* kv_b [Hh·(nope + v), kv_lora] in dtype dt and its per-head views (as nn/mla.c splits it) */
static void *make_kvb(ci_mat *kvb, ci_dtype dt, int Hh, int nope, int v, int kv_lora, float **scale) {
    size_t rows = (size_t)Hh * (nope + v), n = rows * (size_t)kv_lora;
    void *data = malloc(n * ci_dtype_size(dt));
    for (size_t i = 0; i < n; i++) {
        if (dt == CI_F32) ((float *)data)[i] = rnd(-1, 1);
        else if (dt == CI_BF16) ((uint16_t *)data)[i] = ci_f32_to_bf16(rnd(-1, 1));
        else {
            uint8_t c = (uint8_t)(rnd_u32() & 0xff);
            ((uint8_t *)data)[i] = (c & 0x7f) == 0x7f ? c ^ 1 : c;
        }
    }
    *kvb = (ci_mat){ .data = data, .dtype = dt, .rows = (int64_t)rows, .cols = kv_lora };
    *scale = NULL;
    if (dt == CI_F8_E4M3) {
        size_t sn = ((rows + 127) / 128) * (size_t)((kv_lora + 127) / 128);
        *scale = malloc(sn * sizeof(float));
        for (size_t i = 0; i < sn; i++) (*scale)[i] = rnd(0.001f, 0.01f);
        kvb->scale = *scale;
        kvb->scale_dtype = CI_F32;
        kvb->block = 128;
    }
    return data;
}

static void views(const ci_mat *kvb, int Hh, int nope, int v, ci_mat *uk, ci_mat *uv) {
    size_t es = ci_dtype_size(kvb->dtype);
    for (int h = 0; h < Hh; h++) {
        int64_t r0 = (int64_t)h * (nope + v);
        uk[h] = *kvb; uk[h].rows = nope; uk[h].scale_row0 = r0;
        uk[h].data = (const char *)kvb->data + (size_t)r0 * (size_t)kvb->cols * es;
        uv[h] = *kvb; uv[h].rows = v; uv[h].scale_row0 = r0 + nope;
        uv[h].data = (const char *)kvb->data + (size_t)(r0 + nope) * (size_t)kvb->cols * es;
    }
}

static void test_heads(void) {
    const ci_dtype dts[] = { CI_F32, CI_BF16, CI_F8_E4M3 };
    const int Hh = 3, nope = 24, rope = 8, kv_lora = 40, v = 20, lat = kv_lora + rope, qd = nope + rope, n = 6;
    for (int b = 0; b < n_bes; b++)
        for (int d = 0; d < 3; d++) {
            ci_backend *be = bes[b];
            ci_mat kvb, uk[3], uv[3];
            float *sc;
            void *data = make_kvb(&kvb, dts[d], Hh, nope, v, kv_lora, &sc);
            views(&kvb, Hh, nope, v, uk, uv);
            float *q = rvec((size_t)n * Hh * qd), *qcat = malloc((size_t)n * Hh * lat * sizeof(float));
            float *olat = rvec((size_t)n * Hh * lat), *o = malloc((size_t)n * Hh * v * sizeof(float));
            be->mla_absorb_q(be, qcat, q, n, Hh, nope, rope, kv_lora, uk);
            be->mla_out_heads(be, o, olat, n, Hh, kv_lora, lat, v, uv);
            for (int t = 0; t < n; t++)
                for (int h = 0; h < Hh; h++) {
                    const float *qh = q + ((size_t)t * Hh + h) * qd, *oh = olat + ((size_t)t * Hh + h) * lat;
                    const float *got = qcat + ((size_t)t * Hh + h) * lat;
                    for (int c = 0; c < kv_lora; c++) {
                        double want = 0;
                        for (int r = 0; r < nope; r++) want += (double)qh[r] * ci_mat_get(&uk[h], r, c);
                        CHECK(fabs(got[c] - want) <= 1e-5 * (1 + fabs(want)), "%s dt %d: qcat[%d, %d, %d] %g want %g",
                              be->name, d, t, h, c, got[c], want);
                    }
                    CHECK(same(got + kv_lora, qh + nope, (size_t)rope), "%s: q_pe of row %d head %d", be->name, t, h);
                    for (int j = 0; j < v; j++) {
                        double want = 0;
                        for (int c = 0; c < kv_lora; c++) want += (double)oh[c] * ci_mat_get(&uv[h], j, c);
                        float g = o[((size_t)t * Hh + h) * v + j];
                        CHECK(fabs(g - want) <= 1e-5 * (1 + fabs(want)), "%s dt %d: o[%d, %d, %d]", be->name, d, t, h, j);
                    }
                }
            free(q); free(qcat); free(olat); free(o); free(data); free(sc);
        }
}

/* mla_attend / kv_store_paged / dsa_attend on n rows with their own caches (lat, kdim) */
static void test_attend(void) {
    enum { N = 5, CTX = 70, HH = 4, LAT = 40, IH = 3, ID = 12, TOPK = 16 };
    const float scale = 0.2f, ws = 0.3f;
    for (int b = 0; b < n_bes; b++) {
        ci_backend *be = bes[b];
        float *lc[N], *kc[N], *tab[2 * N], *ltab[N];
        int32_t pos[N] = { 3, 69, 15, 16, 40 };   /* dense, sparse, dense (= topk), sparse, sparse */
        for (int i = 0; i < N; i++) {
            lc[i] = rvec((size_t)CTX * LAT); kc[i] = rvec((size_t)CTX * ID);
            tab[2 * i] = ltab[i] = lc[i]; tab[2 * i + 1] = kc[i];
        }
        float *rows = rvec((size_t)N * LAT), *q = rvec((size_t)N * HH * LAT), *iq = rvec((size_t)N * IH * ID), *iw = rvec((size_t)N * IH);
        float *out = malloc((size_t)N * HH * LAT * sizeof(float)), *one = malloc((size_t)HH * LAT * sizeof(float));
        float *want_row = malloc((size_t)LAT * sizeof(float));
        memcpy(want_row, rows + 2 * LAT, LAT * sizeof(float));
        be->kv_store_paged(be, NULL, ltab, 1, LAT, rows, LAT, N, pos, NULL);
        CHECK(same(lc[2] + (size_t)pos[2] * LAT, want_row, LAT), "%s: kv_store_paged row", be->name);
        be->mla_attend(be, out, q, NULL, ltab, 1, N, pos, CTX, HH, LAT, scale, NULL);
        for (int t = 0; t < N; t++) {
            be->attention_pos(be, one, q + (size_t)t * HH * LAT, lc[t], lc[t], 1, pos + t, CTX, HH, 1, LAT, LAT, scale);
            CHECK(same(one, out + (size_t)t * HH * LAT, (size_t)HH * LAT), "%s: mla_attend row %d", be->name, t);
        }
        be->mla_attend(be, out, q, lc[1], NULL, 1, N, pos, CTX, HH, LAT, scale, NULL);
        be->attention_pos(be, one, q + 3 * HH * LAT, lc[1], lc[1], 1, pos + 3, CTX, HH, 1, LAT, LAT, scale);
        CHECK(same(one, out + 3 * HH * LAT, (size_t)HH * LAT), "%s: mla_attend on one cache", be->name);

        be->dsa_attend(be, out, q, NULL, NULL, tab, N, pos, CTX, HH, LAT, scale, iq, iw, ws, IH, ID, TOPK, NULL);
        int checked = 0;
        for (int t = 0; t < N; t++) {
            const float *got = out + (size_t)t * HH * LAT, *qt = q + (size_t)t * HH * LAT;
            int L = pos[t] + 1;
            if (L <= TOPK) {
                be->attention_pos(be, one, qt, lc[t], lc[t], 1, pos + t, CTX, HH, 1, LAT, LAT, scale);
                CHECK(same(one, got, (size_t)HH * LAT), "%s: dense dsa row %d", be->name, t);
                continue;
            }
            double sc[CTX];
            for (int s = 0; s < L; s++) {
                double acc = 0;
                for (int h = 0; h < IH; h++) {
                    double dot = 0;
                    for (int d = 0; d < ID; d++) dot += (double)iq[((size_t)t * IH + h) * ID + d] * kc[t][(size_t)s * ID + d];
                    acc += (double)iw[t * IH + h] * ws * (dot > 0 ? dot : 0);
                }
                sc[s] = acc;
            }
            /* the topk best by rank, then in position order */
            int keep[CTX], nk = 0;
            double kth = -INFINITY, next = -INFINITY;
            for (int s = 0; s < L; s++) {
                int better = 0;
                for (int u = 0; u < L; u++) better += sc[u] > sc[s] || (sc[u] == sc[s] && u < s);
                if (better < TOPK) keep[nk++] = s;
                if (better == TOPK - 1) kth = sc[s];
                if (better == TOPK) next = sc[s];
            }
            if (kth - next < 1e-5) continue;   /* too close to call in f32 */
            float *kv = malloc((size_t)nk * LAT * sizeof(float));
            for (int j = 0; j < nk; j++) memcpy(kv + (size_t)j * LAT, lc[t] + (size_t)keep[j] * LAT, LAT * sizeof(float));
            be->attention(be, one, qt, kv, kv, 1, nk - 1, HH, 1, LAT, LAT, scale);
            CHECK(nk == TOPK && same(one, got, (size_t)HH * LAT), "%s: sparse dsa row %d", be->name, t);
            checked++;
            free(kv);
        }
        CHECK(checked >= 2, "%s: only %d sparse rows could be checked", be->name, checked);
        for (int i = 0; i < N; i++) { free(lc[i]); free(kc[i]); }
        free(rows); free(q); free(iq); free(iw); free(out); free(one); free(want_row);
        CHECK(be->status(be) == 0, "%s: status %s", be->name, be->last_error);
    }
}

/* The ops over paged caches against the same rows unpaged. Row t's cache (its own in a batch
 * step; row 0's for a chunk) lies in a pool of NB blocks of 128 rows through a shuffled table. */
static void test_attend_paged(void) {
    enum { N = 4, CTX = 300, BPR = 3, NB = N * BPR + 2, HH = 4, LAT = 40, IH = 3, ID = 12, TOPK = 20 };
    const float scale = 0.2f, ws = 0.3f;
    const int blk = 128;
    int32_t ptab[N * BPR];
    for (int i = 0; i < N * BPR; i++) ptab[i] = (int32_t)((i * 5 + 3) % NB);   /* a shuffle: 5 and 14 coprime */
    for (int b = 0; b < n_bes; b++) {
        ci_backend *be = bes[b];
        float *lc[N], *kc[N], *tab[2 * N], *ltab[N], *ptab2[2 * N], *pltab[N];
        float *lpool = calloc((size_t)NB * blk * LAT, sizeof(float)), *kpool = calloc((size_t)NB * blk * ID, sizeof(float));
        int32_t pos[N] = { 299, 10, 130, 255 };   /* sparse, dense, sparse, sparse */
        for (int i = 0; i < N; i++) {
            lc[i] = rvec((size_t)CTX * LAT); kc[i] = rvec((size_t)CTX * ID);
            tab[2 * i] = ltab[i] = lc[i]; tab[2 * i + 1] = kc[i];
            ptab2[2 * i] = pltab[i] = lpool; ptab2[2 * i + 1] = kpool;
            for (int p = 0; p < CTX; p++) {
                const int64_t r = (int64_t)ptab[i * BPR + p / blk] * blk + p % blk;
                memcpy(lpool + r * LAT, lc[i] + (size_t)p * LAT, LAT * sizeof(float));
                memcpy(kpool + r * ID, kc[i] + (size_t)p * ID, ID * sizeof(float));
            }
        }
        const ci_pages batch = { ptab, BPR, 1, 7 }, chunk = { ptab, BPR, 0, 7 };
        float *q = rvec((size_t)N * HH * LAT), *iq = rvec((size_t)N * IH * ID), *iw = rvec((size_t)N * IH);
        float *rows = rvec((size_t)N * LAT);
        float *want = malloc((size_t)N * HH * LAT * sizeof(float)), *got = malloc((size_t)N * HH * LAT * sizeof(float));
        const size_t QN = (size_t)N * HH * LAT;
        be->mla_attend(be, want, q, NULL, ltab, 1, N, pos, CTX, HH, LAT, scale, NULL);
        be->mla_attend(be, got, q, NULL, pltab, 1, N, pos, CTX, HH, LAT, scale, &batch);
        CHECK(same(want, got, QN), "%s: paged mla_attend, batch step", be->name);
        be->mla_attend(be, want, q, lc[0], NULL, 1, N, pos, CTX, HH, LAT, scale, NULL);
        be->mla_attend(be, got, q, lpool, NULL, 1, N, pos, CTX, HH, LAT, scale, &chunk);
        CHECK(same(want, got, QN), "%s: paged mla_attend, one sequence", be->name);
        be->dsa_attend(be, want, q, NULL, NULL, tab, N, pos, CTX, HH, LAT, scale, iq, iw, ws, IH, ID, TOPK, NULL);
        be->dsa_attend(be, got, q, NULL, NULL, ptab2, N, pos, CTX, HH, LAT, scale, iq, iw, ws, IH, ID, TOPK, &batch);
        CHECK(same(want, got, QN), "%s: paged dsa_attend, batch step", be->name);
        be->dsa_attend(be, want, q, lc[0], kc[0], NULL, N, pos, CTX, HH, LAT, scale, iq, iw, ws, IH, ID, TOPK, NULL);
        be->dsa_attend(be, got, q, lpool, kpool, NULL, N, pos, CTX, HH, LAT, scale, iq, iw, ws, IH, ID, TOPK, &chunk);
        CHECK(same(want, got, QN), "%s: paged dsa_attend, one sequence", be->name);
        /* stores: row t at its block's row (batch: its own table; chunk: table 0 for all) */
        be->kv_store_paged(be, NULL, pltab, 1, LAT, rows, LAT, N, pos, &batch);
        int ok = 1;
        for (int t = 0; t < N; t++)
            ok &= same(lpool + ((int64_t)ptab[t * BPR + pos[t] / blk] * blk + pos[t] % blk) * LAT, rows + (size_t)t * LAT, LAT);
        CHECK(ok, "%s: kv_store_paged, batch step", be->name);
        be->kv_store_paged(be, lpool, NULL, 1, LAT, rows, LAT, N, pos, &chunk);
        ok = 1;
        for (int t = 0; t < N; t++)
            ok &= same(lpool + ((int64_t)ptab[pos[t] / blk] * blk + pos[t] % blk) * LAT, rows + (size_t)t * LAT, LAT);
        CHECK(ok, "%s: kv_store_paged, one sequence", be->name);
        for (int i = 0; i < N; i++) { free(lc[i]); free(kc[i]); }
        free(lpool); free(kpool); free(q); free(iq); free(iw); free(rows); free(want); free(got);
        CHECK(be->status(be) == 0, "%s: status %s", be->name, be->last_error);
    }
}

static void test_topk_ties(void) {
    const float sc[8] = { 1, 3, 3, 2, 3, 0, 3, -INFINITY };
    int32_t sel[8];
    int k = ci_topk_positions(sc, 8, 3, sel);
    CHECK(k == 3 && sel[0] == 1 && sel[1] == 2 && sel[2] == 4, "ties to the lower position: %d %d %d", sel[0], sel[1], sel[2]);
    k = ci_topk_positions(sc, 8, 9, sel);
    CHECK(k == 8 && sel[7] == 7, "topk >= L keeps all, in order");
}

int main(void) {
    for (int i = 0; i < 3; i++)
        if ((bes[n_bes] = ci_backend_cpu_new(3, isas[i]))) n_bes++;
    printf("CPU kernel sets: %d\n", n_bes);
    TEST_RUN(test_norms);
    TEST_RUN(test_heads);
    TEST_RUN(test_attend);
    TEST_RUN(test_attend_paged);
    TEST_RUN(test_topk_ties);
    for (int i = 0; i < n_bes; i++) bes[i]->free(bes[i]);
    TEST_EXIT();
}
