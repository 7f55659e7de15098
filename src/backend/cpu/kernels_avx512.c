/* kernels_avx512.c — the AVX-512 (F/BW/VL) + FMA kernel set, 16 floats per vector.
 *
 * Defines the vector vocabulary that simd_template.h is written over and instantiates it.
 * Compiled with function-level target attributes only, so the project builds with default
 * flags; cpu.c selects this table only after __builtin_cpu_supports confirms the CPU.
 *
 * This set widens weights to f32 in registers (a zero-extend and a shift) and every
 * product and sum is an f32 FMA. A second table, cpu-avx512-bf16 (below), adds AVX512-BF16
 * dot products for bf16 weights, which round x to bf16. Tiles keep
 * 4 token rows x 4 weight rows = 16 accumulators of the 32 zmm registers. */
#if defined(__x86_64__)
#include "cpu_kernels.h"
#include <immintrin.h>
#include <string.h>

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define VL 16
#define TMAX 4
#define KTABLE cpu_kernels_avx512
#define KNAME "cpu-avx512"
typedef __m512 vf;

static inline TGT vf vzero(void) { return _mm512_setzero_ps(); }
static inline TGT vf vset1(float a) { return _mm512_set1_ps(a); }
static inline TGT vf vld(const float *p) { return _mm512_loadu_ps(p); }
static inline TGT void vst(float *p, vf v) { _mm512_storeu_ps(p, v); }
static inline TGT vf vadd(vf a, vf b) { return _mm512_add_ps(a, b); }
static inline TGT vf vsub(vf a, vf b) { return _mm512_sub_ps(a, b); }
static inline TGT vf vmul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static inline TGT vf vdiv(vf a, vf b) { return _mm512_div_ps(a, b); }
static inline TGT vf vmax(vf a, vf b) { return _mm512_max_ps(a, b); }
static inline TGT vf vfma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }
static inline TGT float vhsum(vf a) { return _mm512_reduce_add_ps(a); }
static inline TGT float vhmax(vf a) { return _mm512_reduce_max_ps(a); }

/* Four horizontal sums with one shuffle tree (about 10 ops instead of 4 x 8). */
static inline TGT void vhsum4(vf a, vf b, vf c, vf d, float *out) {
    vf ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    vf cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
    vf s = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2)));
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(s),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1)));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
}

static inline TGT vf vld_bf16(const uint16_t *p) {
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
static inline TGT vf vld_f16(const uint16_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
/* min / max return their second operand when either is NaN: NaN passes the clamp */
static inline TGT void vst_f16(uint16_t *p, vf v) {
    v = _mm512_max_ps(_mm512_set1_ps(-65504.0f), _mm512_min_ps(_mm512_set1_ps(65504.0f), v));
    _mm256_storeu_si256((__m256i *)p, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
/* E4M3 -> f16 bits -> f32. Shifting the 7 exponent+mantissa bits to bits 7..13 of a
 * 16-bit lane gives the f16 whose value is fp8 * 2^-8 (fp8 subnormals land on f16
 * subnormals, and the 4-bit exponent always fits); the sign-extended byte leaves the sign
 * in bits 14..15, and bit 14 is cleared. vcvtph2ps then widens exactly. Going through f16
 * rather than placing the bits straight into an f32 matters for speed: fp8 subnormals
 * would become f32 subnormals, and every multiply touching one takes a microcode assist
 * (measured: 10x slower on weights with a realistic share of tiny values). */
static inline TGT vf vld_fp8(const uint8_t *p) {
    __m256i h = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)p));
    h = _mm256_and_si256(_mm256_slli_epi16(h, 7), _mm256_set1_epi16((short)0xBFFF));
    return _mm512_cvtph_ps(h);
}

/* exp(x): x = k ln2 + r with |r| <= ln2/2, exp(r) by its degree-7 Taylor polynomial
 * (truncation < 1e-8 relative), 2^k built in the exponent field. Inputs below
 * ln(FLT_MIN) give 0; inputs are clamped at 88.376 so that k <= 127. */
static inline TGT vf vexp(vf x) {
    const vf lo = _mm512_set1_ps(-87.33654475f), hi = _mm512_set1_ps(88.3762626647949f);
    __mmask16 keep = _mm512_cmp_ps_mask(x, lo, _CMP_NLT_UQ);
    vf xc = _mm512_min_ps(_mm512_max_ps(x, lo), hi);
    vf kf = _mm512_roundscale_ps(_mm512_mul_ps(xc, _mm512_set1_ps(1.44269504088896341f)),
                                 _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    vf r = _mm512_fnmadd_ps(kf, _mm512_set1_ps(0.693359375f), xc);
    r = _mm512_fnmadd_ps(kf, _mm512_set1_ps(-2.12194440e-4f), r);
    vf p = _mm512_set1_ps(1.0f / 5040.0f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 720.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(kf), _mm512_set1_epi32(127)), 23);
    return _mm512_maskz_mov_ps(keep, _mm512_mul_ps(p, _mm512_castsi512_ps(e)));
}

/* Prefill block tile (simd_template.h, block_tile): 4 tokens x 6 rows, 24 accumulators, 6
 * weight vectors held, 10 loads per 24 FMAs (f32_tile: 4 x 4, 8 loads per 16). Measured on
 * a 2-vCPU AMD EPYC (Zen 5, family 26), one thread, bench/gemm_cpu.c, bf16 Qwen3-0.6B
 * shapes at n = 128, CPU time, 4 rounds alternating: 4 x 6 173-189 GFLOP/s, 4 x 4 165-182,
 * 6 x 4 165-181, 8 x 3 130-147; without block_tile (f32_tile) 130-151. */
#define BT_TOK 4
#define BT_ROWS 6
/* Decode prefetch distance (simd_template.h's default is 1024 bytes): cpu_pf_dist, 2048 bytes on
 * a thread that streams alone, else 1024 (cpu.c par_for sets it). On a 2-vCPU AMD EPYC (Zen 5,
 * family 26), 2026-12-04: bench/gemv_cpu.c, one thread, bf16 Qwen3-0.6B shapes streamed from
 * DRAM, two sweeps: 1024 24-25 GB/s, 2048 27-33, 3072 28-29, 4096 28-30, 6144 25-26, 8192 27-28
 * (the raw read loop: 36-40; prefetcht1 / t2 instead of t0 at 4096: 25-28); the bf16 Qwen3-0.6B-
 * dims model, `cinfer bench --prompt-len 16 --gen 64`, alternating: one thread 18.1-19.5 tok/s
 * at 1024, 21.8-23.8 at 2048, 20.9-21.8 at 4096; but two threads 25.3-27.6 at 2048 against
 * 28.2-29.1 at 1024 in the side-by-side rounds, 26.5-34.8 against 27.5-29.8 in six noisy ones
 * (lower in six of eight): the VM's two vCPUs share ~40-47 GB/s, and perhaps one core's
 * caches. At 2048 a row of up to 2 KiB (1024 bf16 columns) prefetches the next tile's rows
 * (past a row's end the target moves to the row 4 below). The bf16-activation tile below
 * uses it too. */
#ifndef PF_DIST
#define PF_DIST cpu_pf_dist
#endif
/* On AMD CPUs (cpu_pf_next16: 4096, or what ci_backend_cpu_tune measured on this machine, cpu.c)
 * rows of up to 4 KiB prefetch the next tile in byte order instead,
 * every line of it, into L1: a tile of short rows is one contiguous stretch (4 rows) and the next
 * tile the stretch after it, so the tile's four streams become one run of lines ahead. bench/gemv_cpu.c on the Zen 5
 * (2026-12-04, stream from DRAM, GB/s): 1024-column bf16 rows one thread 26-28 -> 33-38, two
 * threads 36-45 -> 42-61; 2048-column rows 31 -> 36, 38 -> 46-50; 3072-column rows (6 KiB) level
 * either way, so they keep the distance rule. On the GPU box's Intel Xeon the same change was level
 * at 16 threads and 4-8% slower at 4 on the Qwen3-30B-A3B dims in four of six pairs, so Intel keeps
 * the distance rule. On another host of the same Zen 5 model (2026-12-04, twenty-sixth session) the
 * rule made 2048-column rows 35% slower (20-24 against 27-34 GB/s), hence the measurement. */
#ifndef PF_NEXT_TILE_MAX
#define PF_NEXT_TILE_MAX ((size_t)cpu_pf_next16)   /* 4096 or what ci_backend_cpu_tune measured (cpu.c) */
#endif
#ifndef PF_NT_HINT
#define PF_NT_HINT 3
#endif

#include "simd_template.h"

/* ---- bf16 weights with bf16 activations (the cpu-avx512-bf16 set) --------------------
 * On CPUs with AVX512-BF16, bf16 weights can be dotted with x rounded to bf16 by
 * vdpbf16ps: each f32 lane adds the two products of a bf16 pair to its sum, 32 weights per
 * instruction instead of 16, and the weights need no widening (prefill reads the
 * checkpoint rows in place instead of packing them to f32). This changes the precision:
 * x is rounded to bf16 (round to nearest even, as transformers and llama.cpp run bf16
 * models), products and sums stay f32. One summation order, as for f32 (cpu_kernels.h):
 * per CPU_KC chunk, lane l sums the pairs (32 j + 2 l, 32 j + 2 l + 1) from zero (the tail
 * zero-filled), vhsum4 at the chunk's end, chunk sums added left to right; the decode tile
 * and the prefill block below both follow it, so a row gets the same bits decoded alone,
 * batched or prefilled. */
#define TGB __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")))
#define AIB static inline __attribute__((always_inline)) TGB

AIB __m512bh bh_load(const uint16_t *p) { return (__m512bh)_mm512_loadu_si512(p); }
AIB __m512bh bh_load_part(const uint16_t *p, int n) {
    _Alignas(64) uint16_t b[32];
    memset(b, 0, sizeof b);
    memcpy(b, p, (size_t)n * sizeof *p);
    return (__m512bh)_mm512_load_si512(b);
}

/* xb[0..n) = x rounded to bf16 (vcvtneps2bf16: nearest even; the tail through a buffer,
 * so every element is rounded by the same instruction). */
static TGB void x_bf16(const float *x, int64_t n, uint16_t *xb) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm256_storeu_si256((__m256i *)(xb + i), (__m256i)_mm512_cvtneps_pbh(_mm512_loadu_ps(x + i)));
    if (i < n) {
        _Alignas(64) float b[16] = { 0 };
        _Alignas(32) uint16_t o[16];
        memcpy(b, x + i, (size_t)(n - i) * sizeof *x);
        _mm256_store_si256((__m256i *)o, (__m256i)_mm512_cvtneps_pbh(_mm512_load_ps(b)));
        memcpy(xb + i, o, (size_t)(n - i) * sizeof *o);
    }
}

/* part[t * RR + r] = the chunk dot of token row t (x + t * xs) and weight row w[r], over kc
 * columns, in the order above. PF: decode streams the rows from DRAM and prefetches as
 * tile_span does (rowb: a row's bytes; rows of up to PF_NEXT_TILE_MAX bytes the next tile in
 * byte order, longer ones PF_DIST ahead and near a row's end the row 4 below). */
AIB void bh_chunk(const int TT, const int RR, const int PF, const uint16_t *const *w, int64_t kc, const uint16_t *x,
                  int64_t xs, size_t rowb, size_t c0b, float *part) {
    __m512 acc[4][6];
    UNROLL(6)
    for (int t = 0; t < TT; t++)
        UNROLL(6)
        for (int r = 0; r < RR; r++) acc[t][r] = _mm512_setzero_ps();
    int64_t k = 0;
    for (; k + 32 <= kc; k += 32) {
        if (PF && RR == 4 && rowb <= PF_NEXT_TILE_MAX) {   /* the next tile in byte order, as tile_span */
            const char *nt = (const char *)(w[0] - c0b / 2) + 4 * (rowb + c0b + (size_t)k * 2);
            UNROLL(4)
            for (int l = 0; l < 4; l++) __builtin_prefetch(nt + 64 * l, 0, PF_NT_HINT);
        } else if (PF) {
            size_t off = c0b + (size_t)k * 2 + PF_DIST;
            if (off >= rowb) off += 3 * rowb;
            UNROLL(4)
            for (int r = 0; r < RR; r++) __builtin_prefetch((const char *)(w[r] - c0b / 2) + off, 0, 3);
        }
        __m512bh wv[6];
        UNROLL(6)
        for (int r = 0; r < RR; r++) {
            wv[r] = bh_load(w[r] + k);
            __asm__("" : "+v"(wv[r]));
        }
        UNROLL(6)
        for (int t = 0; t < TT; t++) {
            __m512bh xv = bh_load(x + t * xs + k);
            UNROLL(6)
            for (int r = 0; r < RR; r++) acc[t][r] = _mm512_dpbf16_ps(acc[t][r], wv[r], xv);
        }
    }
    if (k < kc) {
        int n = (int)(kc - k);
        __m512bh wv[6];
        UNROLL(6)
        for (int r = 0; r < RR; r++) wv[r] = bh_load_part(w[r] + k, n);
        UNROLL(6)
        for (int t = 0; t < TT; t++) {
            __m512bh xv = bh_load_part(x + t * xs + k, n);
            UNROLL(6)
            for (int r = 0; r < RR; r++) acc[t][r] = _mm512_dpbf16_ps(acc[t][r], wv[r], xv);
        }
    }
    UNROLL(8)
    for (int i = 0; i < TT * RR; i += 4) {
        const int j1 = i + 1 < TT * RR ? i + 1 : i, j2 = i + 2 < TT * RR ? i + 2 : i, j3 = i + 3 < TT * RR ? i + 3 : i;
        vhsum4(acc[i / RR][i % RR], acc[j1 / RR][j1 % RR], acc[j2 / RR][j2 % RR], acc[j3 / RR][j3 % RR], part + i);
    }
}

/* Decode: T (<= 4) token rows of xb (row stride xs) against 4 rows of the bf16 W. */
AIB void bh_tile_T(const int TT, const ci_mat *W, const int64_t rows[4], const uint16_t *xb, int64_t xs, float *out) {
    const int64_t cols = W->cols;
    const uint16_t *wr[4];
    float part[16];
    for (int r = 0; r < 4; r++) wr[r] = (const uint16_t *)W->data + rows[r] * cols;
    for (int64_t c0 = 0; c0 < cols; c0 += CPU_KC) {
        const int64_t kc = c0 + CPU_KC < cols ? CPU_KC : cols - c0;
        const uint16_t *w[4] = { wr[0] + c0, wr[1] + c0, wr[2] + c0, wr[3] + c0 };
        bh_chunk(TT, 4, 1, w, kc, xb + c0, xs, (size_t)cols * 2, (size_t)c0 * 2, part);
        for (int i = 0; i < TT * 4; i++) out[i] = c0 == 0 ? part[i] : out[i] + part[i];
    }
}

static TGB int bf16_tile(const ci_mat *W, const int64_t rows[4], int T, const uint16_t *xb, int64_t xs, float *out) {
    for (int t0 = 0; t0 < T; t0 += 4) {
        switch (T - t0 < 4 ? T - t0 : 4) {
        case 1: bh_tile_T(1, W, rows, xb + t0 * xs, xs, out + t0 * 4); break;
        case 2: bh_tile_T(2, W, rows, xb + t0 * xs, xs, out + t0 * 4); break;
        case 3: bh_tile_T(3, W, rows, xb + t0 * xs, xs, out + t0 * 4); break;
        default: bh_tile_T(4, W, rows, xb + t0 * xs, xs, out + t0 * 4); break;
        }
    }
    return 1;
}

/* Decode of one token over rows [r0, r1), row after row (simd_template.h's seq_rows, for the
 * rows of up to cpu_seq16 bytes cpu.c sends here): each row's chunk sums as bh_chunk forms them
 * for T = 1 (one vdpbf16ps chain from zero per CPU_KC chunk, the tail zero-filled), kept until
 * its tile's four rows are done, then vhsum4 and the chunk sums added left to right: the bits of
 * bf16_tile. 0 for rows longer than SEQ_CHUNKS chunks. */
static TGB int bf16_seq(const ci_mat *W, int64_t r0, int64_t r1, const uint16_t *xb, float *y) {
    const int64_t cols = W->cols, nch = (cols + CPU_KC - 1) / CPU_KC;
    if (nch > SEQ_CHUNKS) return 0;
    __m512 acc[4][SEQ_CHUNKS];
    for (int64_t r = r0; r < r1; r += 4) {
        const int nr = r1 - r < 4 ? (int)(r1 - r) : 4;
        for (int i = 0; i < 4; i++) {
            const uint16_t *w = (const uint16_t *)W->data + (size_t)(r + i) * (size_t)cols;
            for (int64_t c0 = 0, c = 0; c0 < cols; c0 += CPU_KC, c++) {
                const int64_t c1 = c0 + CPU_KC < cols ? c0 + CPU_KC : cols;
                __m512 a = _mm512_setzero_ps();
                if (i < nr) {
                    int64_t k = c0;
                    for (; k + 32 <= c1; k += 32) a = _mm512_dpbf16_ps(a, bh_load(w + k), bh_load(xb + k));
                    if (k < c1) a = _mm512_dpbf16_ps(a, bh_load_part(w + k, (int)(c1 - k)), bh_load_part(xb + k, (int)(c1 - k)));
                }
                acc[i][c] = a;
            }
        }
        seq_finish(acc, nch, nr, y + r);
    }
    return 1;
}

/* Prefill: one chunk (kc columns from w[i], the rows' chunk starts) of nr rows for T token
 * rows: y[t * ys + i] = part (first) or y[t * ys + i] + part; 4 tokens x 6 rows at a time
 * (a remainder of 7..11 rows as two near-equal tiles). */
AIB void bh_block_T(const int TT, const int RR, const uint16_t *const *w, int64_t kc, const uint16_t *x, int64_t xs,
                    float *y, int64_t ys, int first) {
    float part[24];
    bh_chunk(TT, RR, 0, w, kc, x, xs, 0, 0, part);
    UNROLL(4)
    for (int t = 0; t < TT; t++)
        UNROLL(6)
        for (int r = 0; r < RR; r++) y[t * ys + r] = first ? part[t * RR + r] : y[t * ys + r] + part[t * RR + r];
}

#define BH_T(RR) switch (T - t < 4 ? T - t : 4) { \
    case 1: bh_block_T(1, RR, w + r, kc, x + t * xs, xs, y + t * ys + r, ys, first); break; \
    case 2: bh_block_T(2, RR, w + r, kc, x + t * xs, xs, y + t * ys + r, ys, first); break; \
    case 3: bh_block_T(3, RR, w + r, kc, x + t * xs, xs, y + t * ys + r, ys, first); break; \
    default: bh_block_T(4, RR, w + r, kc, x + t * xs, xs, y + t * ys + r, ys, first); break; }

static TGB void bf16_block(const uint16_t *const *w, int nr, int64_t kc, int T, const uint16_t *x, int64_t xs, float *y,
                           int64_t ys, int first) {
    for (int t = 0; t < T; t += 4)
        for (int r = 0; r < nr;) {
            int rr = block_rows_next(nr - r, 6);
            switch (rr) {
            case 1: BH_T(1) break;
            case 2: BH_T(2) break;
            case 3: BH_T(3) break;
            case 4: BH_T(4) break;
            case 5: BH_T(5) break;
            default: BH_T(6) break;
            }
            r += rr;
        }
}
const cpu_kernels cpu_kernels_avx512bf16 = {
    .name = "cpu-avx512-bf16",
    KTABLE_FIELDS,
    .x_bf16 = x_bf16,
    .bf16_tile = bf16_tile,
    .bf16_seq = bf16_seq,
    .bf16_block = bf16_block,
};
/* The same with bf16 W on AMX tiles (amx_bf16.c; cpu.c sends them there): its other ops, and
 * x_bf16's rounding, are this file's. */
const cpu_kernels cpu_kernels_amxbf16 = {
    .name = "cpu-amx-bf16",
    KTABLE_FIELDS,
    .x_bf16 = x_bf16,
    .bf16_tile = bf16_tile,
    .bf16_seq = bf16_seq,
    .bf16_block = bf16_block,
    .amx = 1,
};


#else
typedef int cpu_kernels_avx512_unused; /* keeps the translation unit non-empty */
#endif
