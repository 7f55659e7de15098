/* i16_tile_cpu.c — the AVX2 int16-activation decode tile alone (cpu_i16kernels_avx2.tile),
 * one thread, CPU time: G weights/s and GB/s of codes + bf16 scales and biases, for MLX affine
 * 4- or 8-bit g64 [ROWS x COLS] by T token rows, "hot" (one copy of a matrix that fits L2,
 * run again and again: the kernel's compute ceiling) and "stream" (copies filling 1 GiB, so
 * every weight comes from DRAM, as in decode). Not part of the build; from the repository
 * root after a CPU build (issue #15):
 *   gcc -O2 -Isrc -Iinclude bench/i16_tile_cpu.c build-cpu/libcinfer.a -lm -lpthread -o /tmp/i16_tile_cpu
 *   /tmp/i16_tile_cpu [BITS [T [COLS]]]        (4, 1, 2048) */
#define _GNU_SOURCE
#include "backend/cpu/cpu_kernels.h"
#include "core/tensor.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

/* best seconds per pass of the 4-row tiles over `copies` matrices of R rows */
static double run(const cpu_i16kernels *k, ci_mat *W, int copies, int64_t R, size_t cbytes, const uint8_t *codes,
                  int T, const uint8_t *xq, int64_t xs, int reps) {
    float out[16];
    volatile float sink = 0;
    double best = 1e9;
    for (int rep = 0; rep < reps; rep++) {
        double t = now();
        for (int c = 0; c < copies; c++) {
            W->data = codes + (size_t)c * cbytes;
            for (int64_t r = 0; r < R; r += 4) {
                int64_t rr[4] = { r, r + 1, r + 2, r + 3 };
                k->tile(W, rr, T, xq, xs, out);
                sink += out[0];
            }
        }
        t = (now() - t) / copies;
        if (t < best) best = t;
    }
    return best;
}

int main(int argc, char **argv) {
    const int bits = argc > 1 ? atoi(argv[1]) : 4, T = argc > 2 ? atoi(argv[2]) : 1;
    const int64_t C = argc > 3 ? atoll(argv[3]) : 2048, G = 64;
    const cpu_i16kernels *k = &cpu_i16kernels_avx2;
    const int64_t Rh = 256, Rs = 8192;   /* hot: 256 rows (256 KiB of 4-bit codes at 2048 columns) */
    const size_t big = (size_t)1 << 30;
    /* one scale grid shared by every copy (a copy is a view with scale_row0 0) */
    const int64_t ng = Rs * (C / G);
    uint16_t *sc = malloc((size_t)ng * 2), *bi = malloc((size_t)ng * 2);
    srand(1);
    for (int64_t i = 0; i < ng; i++) {
        sc[i] = ci_f32_to_bf16(0.01f + 0.001f * (float)(rand() % 100));
        bi[i] = ci_f32_to_bf16(-0.05f + 0.001f * (float)(rand() % 100));
    }
    ci_qdesc d = { .mode = CI_Q_AFFINE, .bits = bits, .group = (int)G, .scale_dtype = CI_BF16, .scales = sc, .biases = bi };
    uint8_t *codes = aligned_alloc(64, big);
    for (size_t i = 0; i < big; i++) codes[i] = (uint8_t)(i * 2654435761u >> 13);
    float *x = malloc((size_t)(C * T) * sizeof(float));
    for (int64_t i = 0; i < C * T; i++) x[i] = (float)(rand() % 2001 - 1000) / 1000.0f;
    ci_mat W = { .data = codes, .dtype = CI_U32, .rows = Rs, .cols = C, .scale = &d };
    const int64_t xs = k->stride(&W);
    uint8_t *xq = aligned_alloc(64, (size_t)(xs * T));
    for (int t = 0; t < T; t++) k->prep(&W, x + t * C, xq + t * xs);
    const size_t rb = (size_t)(C * bits / 8), per_row = rb + (size_t)(C / G) * 4;
    double th = run(k, &W, 1, Rh, rb * Rh, codes, T, xq, xs, 2000);
    const int copies = (int)(big / (rb * Rs));
    double ts = run(k, &W, copies, Rs, rb * Rs, codes, T, xq, xs, 3);
    printf("avx2 int16 tile, %d-bit g64, T=%d, %lld cols: hot [%lld rows] %.2f Gw/s %.1f GB/s; stream [%lld rows x %d] %.2f Gw/s %.1f GB/s\n",
           bits, T, (long long)C, (long long)Rh, Rh * C / th / 1e9, per_row * Rh / th / 1e9, (long long)Rs, copies,
           Rs * C / ts / 1e9, per_row * Rs / ts / 1e9);
    return 0;
}
