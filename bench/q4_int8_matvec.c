/* q4_int8_matvec.c — a standalone measurement for issue #15 (not built by make, not part of the
 * engine): how fast an MLX affine 4-bit (group 64, bf16 scales and biases) matrix-vector product
 * runs on one AVX-512 VNNI core when the activations are rounded to int8 per 64-column group and
 * the codes are dotted as bytes with vpdpbusd, against the exact f32 kernel of the engine
 * (`tests/test_quant --bench 131072 1024 1 avx512`, same shape and bytes).
 *
 *   gcc -O3 -march=native -o /tmp/q4i8 bench/q4_int8_matvec.c -lm && /tmp/q4i8 [rows] [cols]
 *
 * Per group: x's 64 values scaled by amax / 127 and rounded, split into even / odd columns (the
 * low / high nibbles of the 32 code bytes), Σxq kept; per row and group: the 32 code bytes split
 * into 64 nibbles, one vpdpbusd with the group's x bytes (16 int32 sums), converted and
 * multiplied by s_w · s_x into the row's f32 lanes; the biases enter once per 16 groups as
 * b_w · (s_x · Σxq). Prints GB/s over the 4-bit format's bytes (codes + bf16 scales and biases)
 * and the largest error against a double-precision reference of the exact dequantized product. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}
static float bf16_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint16_t f32_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
static float frand(void) { return rand() / (float)RAND_MAX - 0.5f; }
static __m512 bf16x16(const uint16_t *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}

int main(int argc, char **argv) {
    const int R = argc > 1 ? atoi(argv[1]) : 131072, C = argc > 2 ? atoi(argv[2]) : 1024, G = 64, ng = C / G;
    if (R % 4 || C % 1024) { fprintf(stderr, "rows: a multiple of 4; cols: a multiple of 1024\n"); return 2; }
    uint8_t *codes = aligned_alloc(64, (size_t)R * C / 2);
    uint16_t *sw = malloc((size_t)R * ng * 2), *bw = malloc((size_t)R * ng * 2);
    float *x = malloc((size_t)C * 4), *out = malloc((size_t)R * 4), *sx = malloc((size_t)ng * 4), *cx = malloc((size_t)ng * 4);
    double *ref = malloc((size_t)R * 8);
    int8_t *xq = aligned_alloc(64, (size_t)C);
    srand(1);
    for (size_t i = 0; i < (size_t)R * C / 2; i++) codes[i] = (uint8_t)rand();
    for (size_t i = 0; i < (size_t)R * ng; i++) { sw[i] = f32_bf16(frand() * 0.02f); bw[i] = f32_bf16(frand() * 0.1f); }
    for (int i = 0; i < C; i++) x[i] = 2 * frand();
    for (int r = 0; r < R; r++) {
        double s = 0;
        for (int c = 0; c < C; c++) {
            const int q = (codes[(size_t)r * C / 2 + c / 2] >> ((c & 1) * 4)) & 15;
            const size_t pi = (size_t)r * ng + c / G;
            s += (double)(q * bf16_f32(sw[pi]) + bf16_f32(bw[pi])) * x[c];
        }
        ref[r] = s;
    }
    const __m256i nib = _mm256_set1_epi8(15);
    double best = 1e9;
    for (int it = 0; it < 20; it++) {
        const double t0 = now_s();
        for (int g = 0; g < ng; g++) {   /* x to int8: [32 even | 32 odd] per group */
            float a = 0;
            for (int j = 0; j < G; j++) a = fmaxf(a, fabsf(x[g * G + j]));
            const float s = a / 127.f, inv = s > 0 ? 1 / s : 0;
            int sum = 0;
            for (int j = 0; j < 32; j++) {
                const int e = (int)lrintf(x[g * G + 2 * j] * inv), o = (int)lrintf(x[g * G + 2 * j + 1] * inv);
                xq[g * G + j] = (int8_t)e;
                xq[g * G + 32 + j] = (int8_t)o;
                sum += e + o;
            }
            sx[g] = s;
            cx[g] = s * sum;
        }
        for (int r = 0; r < R; r += 4) {   /* 4 rows share each x load */
            __m512 acc[4], bacc[4];
            for (int k = 0; k < 4; k++) acc[k] = bacc[k] = _mm512_setzero_ps();
            for (int g0 = 0; g0 < ng; g0 += 16) {
                float scl[4][16] __attribute__((aligned(64)));
                const __m512 sxv = _mm512_loadu_ps(sx + g0), cxv = _mm512_loadu_ps(cx + g0);
                for (int k = 0; k < 4; k++) {
                    const size_t pi = (size_t)(r + k) * ng + g0;
                    _mm512_store_ps(scl[k], _mm512_mul_ps(bf16x16(sw + pi), sxv));
                    bacc[k] = _mm512_fmadd_ps(bf16x16(bw + pi), cxv, bacc[k]);
                }
                for (int g = g0; g < g0 + 16; g++) {
                    const __m512i xv = _mm512_load_si512(xq + g * G);
                    for (int k = 0; k < 4; k++) {
                        const __m256i v = _mm256_loadu_si256((const __m256i *)(codes + (size_t)(r + k) * C / 2 + g * 32));
                        const __m256i lo = _mm256_and_si256(v, nib), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), nib);
                        const __m512i c = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
                        const __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c, xv);
                        acc[k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_set1_ps(scl[k][g - g0]), acc[k]);
                    }
                }
            }
            for (int k = 0; k < 4; k++) out[r + k] = _mm512_reduce_add_ps(acc[k]) + _mm512_reduce_add_ps(bacc[k]);
        }
        const double dt = now_s() - t0;
        if (dt < best) best = dt;
    }
    double err = 0, mx = 0;
    for (int r = 0; r < R; r++) { err = fmax(err, fabs(out[r] - ref[r])); mx = fmax(mx, fabs(ref[r])); }
    const double bytes = (double)R * C / 2 + (double)R * ng * 4;
    printf("int8-activation 4-bit g64 matvec [%d x %d], one thread: %.1f GB/s (%.2f ms, best of 20), "
           "max|err| %.3g against max|y| %.3g\n", R, C, bytes / best / 1e9, best * 1e3, err, mx);
    free(codes); free(sw); free(bw); free(x); free(out); free(sx); free(cx); free(ref); free(xq);
    return 0;
}
