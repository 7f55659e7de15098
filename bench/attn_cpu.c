/* attn_cpu.c — one decode step's attention of the CPU backend, f32 against f16 cache (issue #15,
 * ci_backend.kv_f16). Not part of the build; from the repository root after a CPU build:
 *   gcc -O2 -Isrc -Iinclude bench/attn_cpu.c build/libcinfer.a -lm -lpthread -o /tmp/attn_cpu
 *   /tmp/attn_cpu THREADS CTX [LAYERS [HEADS KV HD]]
 * LAYERS separate caches (default 28, the Qwen3-0.6B shape: 16 heads, 8 kv heads of 128) are
 * filled through qk_rope_store with CTX rows, then rope_attend runs one query row at position
 * CTX on each, layer after layer, as a decode step does: the caches come from DRAM once they
 * pass the L3. Prints the step's ms and the cache bytes it read per second, f32 then f16,
 * alternating over 5 rounds (best and median). */
#define _GNU_SOURCE
#include "backend/backend.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <math.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static int cmpd(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y; }

typedef struct { ci_backend *be; float **kc, **vc; int stride; } setup;

int main(int argc, char **argv) {
    int th = argc > 1 ? atoi(argv[1]) : 1, ctx = argc > 2 ? atoi(argv[2]) : 1024, layers = argc > 3 ? atoi(argv[3]) : 28;
    int H = argc > 4 ? atoi(argv[4]) : 16, KV = argc > 5 ? atoi(argv[5]) : 8, hd = argc > 6 ? atoi(argv[6]) : 128;
    const int KD = KV * hd, QD = H * hd, R = 5;
    float *inv = malloc(hd / 2 * sizeof(float));
    for (int i = 0; i < hd / 2; i++) inv[i] = 1.0f / powf(1e6f, 2.0f * i / hd);
    float *q = malloc((size_t)ctx * QD * 4), *k = malloc((size_t)ctx * KD * 4), *v = malloc((size_t)ctx * KD * 4);
    float *out = malloc((size_t)QD * 4);
    int32_t *pos = malloc((size_t)(ctx + 1) * 4);
    for (int i = 0; i <= ctx; i++) pos[i] = i;
    setup S[2];
    for (int m = 0; m < 2; m++) {
        ci_backend *be = ci_backend_cpu_new(th, CI_ISA_AUTO);
        if (m) ci_backend_cpu_kv_f16(be);
        S[m].be = be;
        S[m].stride = ci_kv_slots(be, KD);
        S[m].kc = malloc(layers * sizeof(float *));
        S[m].vc = malloc(layers * sizeof(float *));
        srand(1);
        for (int l = 0; l < layers; l++) {
            S[m].kc[l] = aligned_alloc(256, ((size_t)(ctx + 1) * S[m].stride * 4 + 255) & ~(size_t)255);
            S[m].vc[l] = aligned_alloc(256, ((size_t)(ctx + 1) * S[m].stride * 4 + 255) & ~(size_t)255);
            for (size_t i = 0; i < (size_t)ctx * QD; i++) q[i] = rand() / (float)RAND_MAX - 0.5f;
            for (size_t i = 0; i < (size_t)ctx * KD; i++) k[i] = rand() / (float)RAND_MAX - 0.5f, v[i] = rand() / (float)RAND_MAX - 0.5f;
            be->qk_rope_store(be, q, k, v, ctx, H, KV, hd, NULL, NULL, 1e-6f, hd, pos, inv, 1.0f, CI_ROPE_NEOX,
                              S[m].kc[l], S[m].vc[l], S[m].stride);
        }
    }
    double t[2][R];
    for (int r = 0; r < R; r++)
        for (int m = 0; m < 2; m++) {
            ci_backend *be = S[m].be;
            double t0 = now();
            for (int l = 0; l < layers; l++)
                be->rope_attend(be, out, q, k, v, 1, H, KV, hd, NULL, NULL, 1e-6f, hd, pos + ctx, inv, 1.0f, CI_ROPE_NEOX,
                                S[m].kc[l], S[m].vc[l], NULL, NULL, S[m].stride, ctx + 1, 0.088f);
            t[m][r] = now() - t0;
        }
    for (int m = 0; m < 2; m++) {
        qsort(t[m], R, sizeof(double), cmpd);
        double bytes = 2.0 * layers * (ctx + 1) * (double)KD * (m ? 2 : 4);
        printf("%s cache: ctx %d, %d layers, %d threads: best %.3f ms (%.1f GB/s), median %.3f ms\n", m ? "f16" : "f32", ctx,
               layers, th, t[m][0] * 1e3, bytes / t[m][0] * 1e-9, t[m][R / 2] * 1e3);
    }
    return 0;
}
