/* gemm_cpu.c — the CPU backend's prefill matmul (n tokens x bf16 W) on the Qwen3-0.6B
 * shapes, in GFLOP/s (issue #15). Not part of the build; from the repository root after a
 * CPU build:
 *   gcc -O2 -Isrc -Iinclude bench/gemm_cpu.c build-cpu/libcinfer.a -lm -lpthread -o /tmp/gemm_cpu
 *   /tmp/gemm_cpu THREADS [N]      (times are the caller's CPU time; WALL=1: wall clock)
 * Best of 40 matmuls per shape (weights of one layer stay in L3 between repetitions, as the
 * prefill of a short prompt sees them only once: this is the compute side). */
#define _GNU_SOURCE
#include "backend/backend.h"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
/* With one thread the matmul runs on the caller, so its thread CPU time is the time the
 * work had a core: what to compare on a machine shared with other jobs. */
static double now(void) {
    struct timespec t;
    clock_gettime(getenv("WALL") ? CLOCK_MONOTONIC : CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}
int main(int argc, char **argv) {
    int th = argc > 1 ? atoi(argv[1]) : 1, n = argc > 2 ? atoi(argv[2]) : 128;
    ci_backend *be = ci_backend_cpu_new(th, CI_ISA_AUTO);
    int64_t shapes[][2] = { { 2048, 1024 }, { 3072, 1024 }, { 1024, 3072 }, { 1024, 2048 }, { 18, 512 } };
    double tot_f = 0, tot_t = 0;
    for (int s = 0; s < 5; s++) {
        int64_t R = shapes[s][0], C = shapes[s][1];
        uint16_t *w = malloc((size_t)R * C * 2);
        float *x = aligned_alloc(64, (size_t)n * C * 4), *y = aligned_alloc(64, (size_t)n * R * 4); /* as the backend's buffers */
        for (int64_t i = 0; i < R * C; i++) w[i] = (uint16_t)(0x3c00 + (i * 7919 % 1021));
        for (int64_t i = 0; i < n * C; i++) x[i] = (float)((i * 31 % 97) - 48) * 0.01f;
        ci_mat W = { .data = w, .dtype = CI_BF16, .rows = R, .cols = C };
        double best = 1e9;
        for (int r = 0; r < 40; r++) {
            double t = now();
            be->matmul(be, y, x, n, &W);
            t = now() - t;
            if (t < best) best = t;
        }
        double f = 2.0 * R * C * n;
        if (s < 4) tot_f += f, tot_t += best; /* the last shape is cache-resident: the kernel alone */
        printf("[%lld x %lld] n=%d: %.1f GFLOP/s (%.2f ms)  y[7]=%g\n", (long long)R, (long long)C, n, f / best / 1e9,
               best * 1e3, y[7]);
        free(w), free(x), free(y);
    }
    printf("all (first 4): %.1f GFLOP/s\n", tot_f / tot_t / 1e9);
    return 0;
}
