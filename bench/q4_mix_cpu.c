/* q4_mix_cpu.c — what the AVX2 4-bit decode tile's instruction mix can do on one core, with
 * the codes in L1 (bench/RESULTS.md, issue #15, "MoE and 4-bit on the AVX2 EPYC").
 *
 * The split-order tile of quant_kernels_avx2.c does, per 16 columns of each of 4 rows: one
 * 8-byte load zero-extended to 8 dwords, an and and a shift (low / high nibbles), two int ->
 * f32 converts, two FMAs that dequantize (q * scale + bias, as the reference computes it)
 * and two FMAs into the row's accumulator (one chain per row). The variants drop one piece
 * at a time, to show which one bounds it (results are printed so that nothing is dead code;
 * the dropped variants compute something else):
 *   exact     the kernel's mix (bits as cinfer's AVX2 kernel: the reference)
 *   no-cvt    the codes reinterpreted instead of converted
 *   no-deq    converted codes dotted without the dequantizing FMA
 *   table     exact bits through a 16-entry per-group table (2 vpermps + blendv per 8)
 *   f32       8 f32 weights loaded per step (the bf16 / prefill dot without conversion)
 * gcc -O2 -mavx2 -mfma bench/q4_mix_cpu.c -o /tmp/q4_mix_cpu && /tmp/q4_mix_cpu */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define COLS 2048
#define ROWS 8
#define G 64
static uint8_t codes[ROWS][COLS / 2];
static float wf[ROWS][COLS], sc[ROWS][COLS / G], bi[ROWS][COLS / G], x[COLS];

static double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

enum { EXACT, NOCVT, NODEQ, TABLE, F32 };

static inline __attribute__((always_inline)) void w16(const int V, const uint8_t *p, __m256 s, __m256 b, __m256 tl,
                                                      __m256 th, __m256 *e, __m256 *o) {
    __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
    __m256i lo = _mm256_and_si256(v, _mm256_set1_epi32(15)), hi = _mm256_srli_epi32(v, 4);
    if (V == NOCVT) {
        *e = _mm256_fmadd_ps(_mm256_castsi256_ps(lo), s, b);
        *o = _mm256_fmadd_ps(_mm256_castsi256_ps(hi), s, b);
    } else if (V == NODEQ) {
        *e = _mm256_cvtepi32_ps(lo);
        *o = _mm256_cvtepi32_ps(hi);
    } else if (V == TABLE) {
        *e = _mm256_blendv_ps(_mm256_permutevar8x32_ps(tl, lo), _mm256_permutevar8x32_ps(th, lo),
                              _mm256_castsi256_ps(_mm256_slli_epi32(lo, 28)));
        *o = _mm256_blendv_ps(_mm256_permutevar8x32_ps(tl, hi), _mm256_permutevar8x32_ps(th, hi),
                              _mm256_castsi256_ps(_mm256_slli_epi32(hi, 28)));
    } else {
        *e = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lo), s, b);
        *o = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hi), s, b);
    }
}

static inline __attribute__((always_inline)) void run(const int V, float *out) {
    for (int r0 = 0; r0 < ROWS; r0 += 4) {
        __m256 acc[4] = { _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps() };
        for (int g = 0; g < COLS / G; g++) {
            __m256 s[4], b[4], tl[4], th[4];
            for (int r = 0; r < 4; r++) {
                s[r] = _mm256_set1_ps(sc[r0 + r][g]);
                b[r] = _mm256_set1_ps(bi[r0 + r][g]);
                if (V == TABLE) {
                    tl[r] = _mm256_fmadd_ps(_mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7), s[r], b[r]);
                    th[r] = _mm256_fmadd_ps(_mm256_setr_ps(8, 9, 10, 11, 12, 13, 14, 15), s[r], b[r]);
                } else {
                    tl[r] = th[r] = s[r];
                }
            }
            for (int k = g * G; k < g * G + G; k += 16) {
                __m256 xe = _mm256_loadu_ps(x + k), xo = _mm256_loadu_ps(x + k + 8);
                _Pragma("GCC unroll 4")
                for (int r = 0; r < 4; r++) {
                    __m256 e, o;
                    if (V == F32) {
                        e = _mm256_loadu_ps(wf[r0 + r] + k);
                        o = _mm256_loadu_ps(wf[r0 + r] + k + 8);
                    } else {
                        w16(V, codes[r0 + r] + k / 2, s[r], b[r], tl[r], th[r], &e, &o);
                    }
                    acc[r] = _mm256_fmadd_ps(o, xo, _mm256_fmadd_ps(e, xe, acc[r]));
                }
            }
        }
        for (int r = 0; r < 4; r++) {
            float t[8];
            _mm256_storeu_ps(t, acc[r]);
            out[r0 + r] = t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
        }
    }
}

__attribute__((noinline)) static void k_exact(float *o) { run(EXACT, o); }
__attribute__((noinline)) static void k_nocvt(float *o) { run(NOCVT, o); }
__attribute__((noinline)) static void k_nodeq(float *o) { run(NODEQ, o); }
__attribute__((noinline)) static void k_table(float *o) { run(TABLE, o); }
__attribute__((noinline)) static void k_f32(float *o) { run(F32, o); }

int main(void) {
    for (int r = 0; r < ROWS; r++) {
        for (int i = 0; i < COLS / 2; i++) codes[r][i] = (uint8_t)rand();
        for (int i = 0; i < COLS; i++) wf[r][i] = rand() / (float)RAND_MAX;
        for (int g = 0; g < COLS / G; g++) {
            sc[r][g] = 0.01f * (r + 1);
            bi[r][g] = -0.08f;
        }
    }
    for (int i = 0; i < COLS; i++) x[i] = rand() / (float)RAND_MAX;
    struct { const char *name; void (*f)(float *); } ks[] = {
        { "exact", k_exact }, { "no-cvt", k_nocvt }, { "no-deq", k_nodeq }, { "table", k_table }, { "f32", k_f32 } };
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < 5; i++) {
            float out[ROWS];
            const int reps = 40000;
            double t0 = cpu_s();
            for (int n = 0; n < reps; n++) {
                ks[i].f(out);
                __asm__ volatile("" ::"r"(out) : "memory");
            }
            double t = cpu_s() - t0;
            printf("round %d %-7s %6.2f G weights/s (CPU time)  [check %g]\n", round + 1, ks[i].name,
                   (double)reps * ROWS * COLS / t / 1e9, out[0]);
        }
    return 0;
}
