/* gemv_cuda.c — decode matmul bandwidth of the CUDA backend against its own copy probe.
 *
 *   build/bench_gemv_cuda [reps]
 *
 * For each weight dtype (bf16, f16, f32, fp8 E4M3 with 128x128 f32 block scales, and MLX's
 * packed affine 4-bit group 64 with bf16 scales / biases and mxfp4: quant.cu) and the
 * two 4096 x 12288 shapes (down_proj [4096, 12288] and gate/up [12288, 4096]), times
 * matmul at n = 1, 2, 4, 8 token rows (the GEMV kernels) and 9, 16 (cuBLAS) (and matmul_swiglu, gate and up together, at n = 1)
 * over `reps` calls enqueued back to back and one synchronising download, and reports the
 * weight bytes read per second next to a device-to-device copy of 1 GiB; then the same
 * `reps` calls recorded as one CUDA graph and replayed (no launch gaps, as in a decode step) (bytes read plus
 * written per second, best of 5). Inputs are random (never zeros). Needs a CUDA device:
 * prints why and exits 0 without one. */
#include "backend/backend.h"
#include "core/tensor.h"
#include "models/probe.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng = 88172645463325252ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 11);
}
static float frand(void) { return (float)(rnd() % 2000001) / 1000000.0f - 1.0f; }

static void sync_be(ci_backend *be, const void *buf) {
    char b[4];
    be->download(be, b, buf, 4);
}

/* A random weight of the given dtype on the device (host copy freed by the caller). */
static void *make_weight(ci_backend *be, ci_mat *W, ci_dtype dt, int64_t rows, int64_t cols, void **host_scale) {
    size_t n = (size_t)(rows * cols), es = ci_dtype_size(dt);
    unsigned char *h = malloc(n * es);
    for (size_t i = 0; i < n; i++) {
        float f = frand() * 0.05f;
        if (dt == CI_F32) ((float *)h)[i] = f;
        else if (dt == CI_BF16) ((uint16_t *)h)[i] = ci_f32_to_bf16(f);
        else if (dt == CI_F16) ((uint16_t *)h)[i] = ci_f32_to_f16(f);
        else { uint8_t b = (uint8_t)rnd(); if ((b & 0x7f) == 0x7f) b ^= 1; h[i] = b; }
    }
    memset(W, 0, sizeof *W);
    W->dtype = dt;
    W->rows = rows;
    W->cols = cols;
    W->data = be->weight(be, h, n * es);
    *host_scale = NULL;
    if (dt == CI_F8_E4M3) {
        int64_t sr = (rows + 127) / 128, sc = (cols + 127) / 128;
        float *s = malloc((size_t)(sr * sc) * sizeof(float));
        for (int64_t i = 0; i < sr * sc; i++) s[i] = 0.001f + 0.01f * (frand() + 1.0f);
        W->block = 128;
        W->scale_dtype = CI_F32;
        W->scale = be->weight(be, s, (size_t)(sr * sc) * sizeof(float));
        *host_scale = s;
    }
    return h;
}

/* An MLX-quantized weight (q 0: affine 4-bit group 64, bf16 scales and biases; 1: mxfp4) on
 * the device; its bytes (codes + scales + biases) into *bytes. Host memory is kept. */
static void make_qweight(ci_backend *be, ci_mat *W, int q, int64_t rows, int64_t cols, double *bytes) {
    const int G = q ? 32 : 64;
    size_t nc = (size_t)(rows * cols / 2), np = (size_t)(rows * cols / G), ps = q ? 1 : 2;
    unsigned char *h = malloc(nc), *sc = malloc(np * ps), *bi = q ? NULL : malloc(np * ps);
    for (size_t i = 0; i < nc; i++) h[i] = (unsigned char)rnd();
    for (size_t i = 0; i < np; i++) {
        if (q) sc[i] = (unsigned char)(118 + rnd() % 4);
        else {
            ((uint16_t *)sc)[i] = ci_f32_to_bf16(0.004f + 0.001f * (frand() + 1.0f));
            ((uint16_t *)bi)[i] = ci_f32_to_bf16(-0.03f);
        }
    }
    ci_qdesc *d = calloc(1, sizeof *d);
    d->mode = q ? CI_Q_MXFP4 : CI_Q_AFFINE;
    d->bits = 4;
    d->group = G;
    d->scale_dtype = q ? CI_F8_E8M0 : CI_BF16;
    d->scales = sc;
    d->biases = bi;
    d->grid_rows = rows;
    memset(W, 0, sizeof *W);
    W->dtype = CI_U32;
    W->rows = rows;
    W->cols = cols;
    W->data = be->weight(be, h, nc);
    W->scale = be->weight_q ? be->weight_q(be, d, np * ps) : NULL;
    if (!W->scale) W->data = NULL;
    *bytes = (double)nc + (double)np * ps * (q ? 1 : 2);
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 50;
    if (reps < 1) reps = 1;
    char err[512];
    ci_backend *be = ci_backend_cuda_new(0, 1, err, sizeof err);
    if (!be) { printf("no CUDA backend: %s\n", err); return 0; }
    printf("device: %s\n", be->name);
    double copy = ci_backend_copy_gbs(be, err, sizeof err);
    if (copy <= 0) { printf("copy probe: %s\n", err); return 1; }
    printf("copy probe: %.0f GB/s (1 GiB device-to-device, read + written, best of 5)\n\n", copy);
    printf("| dtype | W [rows, cols] | op | n | us / call | weight GB/s | of copy | us in a graph | of copy |\n"
           "|---|---|---|---|---|---|---|---|---|\n");
    const ci_dtype dts[4] = { CI_BF16, CI_F16, CI_F32, CI_F8_E4M3 };
    const int64_t shapes[2][2] = { { 4096, 12288 }, { 12288, 4096 } };
    float *hx = malloc((size_t)16 * 12288 * sizeof(float));
    for (int i = 0; i < 16 * 12288; i++) hx[i] = frand();
    float *x = be->alloc(be, (size_t)16 * 12288 * sizeof(float));
    float *y = be->alloc(be, (size_t)16 * 12288 * sizeof(float));
    float *u = be->alloc(be, (size_t)16 * 12288 * sizeof(float));
    if (!x || !y || !u) { printf("%s\n", be->last_error); return 1; }
    be->upload(be, x, hx, (size_t)16 * 12288 * sizeof(float));
    for (int d = 0; d < 6; d++)
        for (int s = 0; s < 2; s++) {
            ci_mat W, W2;
            void *hs = NULL, *hs2 = NULL, *hw = NULL, *hw2 = NULL;
            double bytes;
            if (d < 4) {
                hw = make_weight(be, &W, dts[d], shapes[s][0], shapes[s][1], &hs);
                hw2 = make_weight(be, &W2, dts[d], shapes[s][0], shapes[s][1], &hs2);
                bytes = (double)W.rows * W.cols * ci_dtype_size(dts[d]);
            } else {
                make_qweight(be, &W, d - 4, shapes[s][0], shapes[s][1], &bytes);
                make_qweight(be, &W2, d - 4, shapes[s][0], shapes[s][1], &bytes);
            }
            if (!W.data || !W2.data) { printf("%s\n", be->last_error); return 1; }
            const char *dname = d < 4 ? ci_dtype_name(dts[d]) : d == 4 ? "mlx a4b g64" : "mxfp4";
            for (int op = 0; op < 2; op++)
                for (int ni = 0; ni < 6; ni++) {
                    const int ns[6] = { 1, 2, 4, 8, 9, 16 }, n = ns[ni];
                    if (op == 1 && n > 1) break;
                    for (int i = 0; i < 3; i++) {
                        if (op == 0) be->matmul(be, y, x, n, &W);
                        else be->matmul_swiglu(be, y, u, x, n, &W, &W2);
                    }
                    sync_be(be, y);
                    double t = now();
                    for (int i = 0; i < reps; i++) {
                        if (op == 0) be->matmul(be, y, x, n, &W);
                        else be->matmul_swiglu(be, y, u, x, n, &W, &W2);
                    }
                    sync_be(be, y);
                    double dt = (now() - t) / reps, b = op ? 2 * bytes : bytes;
                    /* the same calls recorded as one graph: no launch gaps between them */
                    double dg = 0;
                    if (be->graph_begin && be->graph_begin(be) == 0) {
                        for (int i = 0; i < reps; i++) {
                            if (op == 0) be->matmul(be, y, x, n, &W);
                            else be->matmul_swiglu(be, y, u, x, n, &W, &W2);
                        }
                        void *g = be->graph_end(be);
                        if (g) {
                            be->graph_launch(be, g);
                            sync_be(be, y);
                            t = now();
                            be->graph_launch(be, g);
                            sync_be(be, y);
                            dg = (now() - t) / reps;
                            be->graph_free(be, g);
                        }
                    }
                    if (be->status(be)) { printf("%s\n", be->last_error); return 1; }
                    printf("| %s | [%lld, %lld] | %s | %d | %.1f | %.0f | %.0f%% | %.1f | %.0f%% |\n", dname,
                           (long long)W.rows, (long long)W.cols, op ? "gate+up swiglu" : "matmul", n, dt * 1e6,
                           b / dt / 1e9, 100.0 * b / dt / 1e9 / copy, dg * 1e6, dg > 0 ? 100.0 * b / dg / 1e9 / copy : 0);
                }
            (void)hw; (void)hw2; (void)hs; (void)hs2; /* kept: the backend maps weights by host address */
        }
    be->buf_free(be, x);
    be->buf_free(be, y);
    be->buf_free(be, u);
    free(hx);
    be->free(be);
    return 0;
}
