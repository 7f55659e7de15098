/* quant_simd.h — the SIMD kernels for MLX-quantized weights, written once over a vector
 * vocabulary (included by quant_kernels_avx2.c and quant_kernels_avx512.c only).
 *
 * The including file defines, besides VL / TMAX / TGT / vf / QTABLE, its split-order
 * kernel for 4-bit codes (cpu_kernels.h: cpu_qkernels.split): qsplit(W) says which W it
 * takes, qsplit_tile() is its decode tile (any T), qrow_split / qx_split its prefill
 * packers; and:
 *   vzero vset1 vld vst vmul vfma vhsum4   as in simd_template.h
 *   vq_codes(BITS, p)   VL codes of BITS bits starting at byte p (a byte boundary), as f32
 *                       integers 0 .. 2^BITS-1 (exact-size loads, shuffle, shift, mask)
 *   vq_e2m1(p)          VL mxfp4 codes at p as their E2M1 values
 *   vq_fp8(p)           VL E4M3 bytes at p as f32 times 2^-8 (exact, via f16: no f32
 *                       subnormals, which would cost a microcode assist per multiply)
 *
 * Decode tile (formats other than the split 4-bit ones): for each group of the 4 rows, its scales
 * (and biases) are read once; every VL codes of a row become weights in registers (affine:
 * one FMA, q*s + b; mxfp: one multiply) and are dotted with the T token rows at once, f32
 * accumulation, reduced per CPU_KC chunk as prefill's f32_tile on qrow_T's output is. The packed weights stream
 * from memory exactly once per tile; nothing is dequantized to memory. row_f32 does the same
 * conversion into the prefill pack buffer (and one embedding row). */
#include <float.h>
#include <math.h>

#define AI static inline __attribute__((always_inline)) TGT
#define PRAGMA_(x) _Pragma(#x)
#define UNROLL(n) PRAGMA_(GCC unroll n)
#define QPF_DIST 512  /* bytes ahead of the current codes that decode prefetches */

/* VL weights of one row at column k (a multiple of VL inside group of scale s, bias b). */
AI vf qweights(const int MODE, const int BITS, const uint8_t *row, int64_t k, vf s, vf b) {
    const uint8_t *p = row + k * BITS / 8;
    if (MODE == CI_Q_AFFINE) return vfma(vq_codes(BITS, p), s, b);
    if (MODE == CI_Q_MXFP4) return vmul(vq_e2m1(p), s);
    return vmul(vq_fp8(p), s);   /* MXFP8: s carries the 2^8 */
}

/* Group scale as the multiplier qweights expects; 0 when it does not fit (mxfp8 scales
 * >= 2^120, never seen in checkpoints): the caller then takes the scalar path. */
AI float qmult(const int MODE, float s) {
    if (MODE != CI_Q_MXFP8) return s;
    float m = s * 0x1p8f;
    return fabsf(m) <= FLT_MAX ? m : 0.0f;
}

/* One tile in the summation order of cpu_kernels.h: per CPU_KC chunk, the chunk's groups
 * (whole: groups are multiples of 32 and divide the chunk or span it at VL steps) are
 * dequantized in registers exactly as qrow_T writes them and dotted with lane accumulators
 * from zero; one reduction per chunk; chunk sums added left to right. Returns 0 for an
 * mxfp8 scale too large to fold (never seen in checkpoints): cpu.c then runs the tile
 * through row_f32 + f32_tile. */
AI int qtile_T(const int T, const int MODE, const int BITS, const ci_mat *W, const int64_t rows[4],
               const float *x, int64_t xs, float *out) {
    vf acc[TMAX][4];
    float part[TMAX * 4];
    const uint8_t *wr[4];
    const ci_qdesc *d = q_desc(W);
    const int64_t G = d->group, ng = W->cols / G, rb = W->cols * BITS / 8, cols = W->cols;
    int64_t gi[4];
    for (int r = 0; r < 4; r++) {
        wr[r] = (const uint8_t *)W->data + rows[r] * rb;
        gi[r] = (W->scale_row0 + rows[r]) * ng;
    }
    for (int64_t c0 = 0; c0 < cols; c0 += CPU_KC) {
        const int64_t c1 = c0 + CPU_KC < cols ? c0 + CPU_KC : cols;
        UNROLL(4)
        for (int t = 0; t < T; t++) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = vzero();
        for (int64_t k0 = c0; k0 < c1;) {
            const int64_t g = k0 / G, k1 = (g + 1) * G < c1 ? (g + 1) * G : c1;
            vf s[4], b[4];
            int ok = 1;
            UNROLL(4)
            for (int r = 0; r < 4; r++) {
                float sv = qmult(MODE, q_param(d, d->scales, gi[r] + g));
                ok &= sv != 0.0f || MODE != CI_Q_MXFP8;
                s[r] = vset1(sv);
                b[r] = MODE == CI_Q_AFFINE ? vset1(q_param(d, d->biases, gi[r] + g)) : vzero();
            }
            if (!ok) return 0;
            for (int64_t k = k0; k < k1; k += VL) {
                /* One prefetch per 64-byte line of each row's codes; past the row's end,
                 * the same place in the row 4 below, which the next tile reads first (else
                 * it lands in a row this tile is already reading: see simd_template.h). */
                if (((k * BITS / 8) & 63) < VL * BITS / 8) {
                    int64_t off = k * BITS / 8 + QPF_DIST;
                    if (off >= rb) off += 3 * rb;
                    for (int r = 0; r < 4; r++) __builtin_prefetch(wr[r] + off, 0, 3);
                }
                UNROLL(4)
                for (int r = 0; r < 4; r++) {
                    vf w = qweights(MODE, BITS, wr[r], k, s[r], b[r]);
                    UNROLL(4)
                    for (int t = 0; t < T; t++) acc[t][r] = vfma(w, vld(x + t * xs + k), acc[t][r]);
                }
            }
            k0 = k1;
        }
        UNROLL(4)
        for (int t = 0; t < T; t++) vhsum4(acc[t][0], acc[t][1], acc[t][2], acc[t][3], part + t * 4);
        for (int i = 0; i < T * 4; i++) out[i] = c0 == 0 ? part[i] : out[i] + part[i];
    }
    return 1;
}

#if TMAX >= 4
#define QT_CASES(MODE, BITS, T, ...) switch (T) { \
    case 1: ok &= qtile_T(1, MODE, BITS, __VA_ARGS__); break; case 2: ok &= qtile_T(2, MODE, BITS, __VA_ARGS__); break; \
    case 3: ok &= qtile_T(3, MODE, BITS, __VA_ARGS__); break; default: ok &= qtile_T(4, MODE, BITS, __VA_ARGS__); break; }
#else
#define QT_CASES(MODE, BITS, T, ...) switch (T) { \
    case 1: ok &= qtile_T(1, MODE, BITS, __VA_ARGS__); break; default: ok &= qtile_T(2, MODE, BITS, __VA_ARGS__); break; }
#endif

static TGT int qmat_tile(const ci_mat *W, const int64_t rows[4], int T, const float *x, int64_t xs, float *out) {
    const ci_qdesc *d = q_desc(W);
    int ok = 1;
    if (qsplit(W)) {   /* 4-bit: the ISA's split-order kernel, for every T */
        qsplit_tile(W, rows, T, x, xs, out);
        return 1;
    }
    for (int t0 = 0; t0 < T && ok; t0 += TMAX) {
        int tt = T - t0 < TMAX ? T - t0 : TMAX;
        const float *xt = x + t0 * xs;
        float *o = out + t0 * 4;
        if (d->mode == CI_Q_MXFP4) { QT_CASES(CI_Q_MXFP4, 4, tt, W, rows, xt, xs, o); continue; }
        if (d->mode == CI_Q_MXFP8) { QT_CASES(CI_Q_MXFP8, 8, tt, W, rows, xt, xs, o); continue; }
        switch (d->bits) {
        case 2: QT_CASES(CI_Q_AFFINE, 2, tt, W, rows, xt, xs, o); break;
        case 3: QT_CASES(CI_Q_AFFINE, 3, tt, W, rows, xt, xs, o); break;
        case 4: QT_CASES(CI_Q_AFFINE, 4, tt, W, rows, xt, xs, o); break;
        case 5: QT_CASES(CI_Q_AFFINE, 5, tt, W, rows, xt, xs, o); break;
        case 6: QT_CASES(CI_Q_AFFINE, 6, tt, W, rows, xt, xs, o); break;
        case 8: QT_CASES(CI_Q_AFFINE, 8, tt, W, rows, xt, xs, o); break;
        default: ok &= cpu_qkernels_scalar.mat_tile(W, rows, tt, xt, xs, o);
        }
    }
    return ok;
}

/* dst = row r, columns [c0, c1) dequantized. Whole VL steps inside groups go through
 * registers; anything else (a span not on VL boundaries, an oversized mxfp8 scale) takes
 * the scalar path for that group. */
AI void qrow_T(const int MODE, const int BITS, const ci_mat *W, int64_t r, int64_t c0, int64_t c1, float *dst) {
    const ci_qdesc *d = q_desc(W);
    const int64_t G = d->group, gb = q_gidx(W, r, 0);
    const uint8_t *row = (const uint8_t *)W->data + r * (W->cols * BITS / 8);
    for (int64_t c = c0; c < c1;) {
        int64_t g = c / G, end = (g + 1) * G < c1 ? (g + 1) * G : c1;
        float sv = qmult(MODE, q_param(d, d->scales, gb + g));
        if ((c % VL) || ((end - c) % VL) || (MODE == CI_Q_MXFP8 && sv == 0.0f)) {
            for (; c < end; c++) dst[c - c0] = q_value(W, row, r, c);
            continue;
        }
        vf s = vset1(sv), b = MODE == CI_Q_AFFINE ? vset1(q_param(d, d->biases, gb + g)) : vzero();
        for (; c < end; c += VL) vst(dst + (c - c0), qweights(MODE, BITS, row, c, s, b));
    }
}

static TGT void qrow_f32(const ci_mat *W, int64_t r, int64_t c0, int64_t c1, float *dst) {
    const ci_qdesc *d = q_desc(W);
    if (d->mode == CI_Q_MXFP4) { qrow_T(CI_Q_MXFP4, 4, W, r, c0, c1, dst); return; }
    if (d->mode == CI_Q_MXFP8) { qrow_T(CI_Q_MXFP8, 8, W, r, c0, c1, dst); return; }
    switch (d->bits) {
    case 2: qrow_T(CI_Q_AFFINE, 2, W, r, c0, c1, dst); break;
    case 3: qrow_T(CI_Q_AFFINE, 3, W, r, c0, c1, dst); break;
    case 4: qrow_T(CI_Q_AFFINE, 4, W, r, c0, c1, dst); break;
    case 5: qrow_T(CI_Q_AFFINE, 5, W, r, c0, c1, dst); break;
    case 6: qrow_T(CI_Q_AFFINE, 6, W, r, c0, c1, dst); break;
    case 8: qrow_T(CI_Q_AFFINE, 8, W, r, c0, c1, dst); break;
    default: cpu_qkernels_scalar.row_f32(W, r, c0, c1, dst);
    }
}

#ifndef QSPLIT_PRE_TILE
#define QSPLIT_PRE_TILE NULL
#endif
const cpu_qkernels QTABLE = { .mat_tile = qmat_tile, .row_f32 = qrow_f32, .split = qsplit,
                              .row_split = qrow_split, .x_split = qx_split, .split_tile = QSPLIT_PRE_TILE };
