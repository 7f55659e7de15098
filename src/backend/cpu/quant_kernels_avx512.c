/* quant_kernels_avx512.c — MLX-quantized kernels, AVX-512 (F/BW/VL) + FMA, 16 floats per vector.
 *
 * The vocabulary quant_simd.h is written over. Codes: 16 codes of b bits are 2b bytes,
 * loaded exactly, broadcast to the four 128-bit lanes, spread one code per 32-bit lane
 * with vpshufb (bytes o, o+1 of the code), shifted by vpsrlvd and masked. E2M1 values come
 * from one vpermps over the 16-entry table. Function-level target attributes only; cpu.c
 * picks this table after checking the CPU, with the matching cpu_kernels_avx512. */
#if defined(__x86_64__)
#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#include "quant_avx512.h"
#define VL 16
#define TMAX 4
#define QTABLE cpu_qkernels_avx512
typedef __m512 vf;

static inline TGT vf vzero(void) { return _mm512_setzero_ps(); }
static inline TGT vf vset1(float a) { return _mm512_set1_ps(a); }
static inline TGT vf vld(const float *p) { return _mm512_loadu_ps(p); }
static inline TGT void vst(float *p, vf v) { _mm512_storeu_ps(p, v); }
static inline TGT vf vmul(vf a, vf b) { return _mm512_mul_ps(a, b); }
static inline TGT vf vfma(vf a, vf b, vf c) { return _mm512_fmadd_ps(a, b, c); }

static inline TGT void vhsum4(vf a, vf b, vf c, vf d, float *out) {
    vf ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    vf cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
    vf s = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(ab, cd, _MM_SHUFFLE(3, 2, 3, 2)));
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(s),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1)));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1)));
}

/* 16 codes of BITS bits at p, one per 32-bit lane. */
static inline __attribute__((always_inline)) TGT __m512i vq_ints(const int BITS, const uint8_t *p) {
    if (BITS == 8) return _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    if (BITS == 4) {   /* 8 bytes: low nibbles are the even codes, high nibbles the odd ones */
        __m128i b = _mm_loadl_epi64((const __m128i *)p), m = _mm_set1_epi8(0x0f);
        __m128i lo = _mm_and_si128(b, m), hi = _mm_and_si128(_mm_srli_epi16(b, 4), m);
        return _mm512_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi));
    }
    const int NB = 2 * BITS;
    uint64_t lo = q_ld(p, NB < 8 ? NB : 8), hi = NB > 8 ? q_ld(p + 8, NB - 8) : 0;
    __m512i v = _mm512_broadcast_i32x4(_mm_set_epi64x((long long)hi, (long long)lo));
    v = _mm512_shuffle_epi8(v, _mm512_load_si512((const void *)cpu_q_ctrl[BITS]));
    v = _mm512_srlv_epi32(v, _mm512_load_si512((const void *)cpu_q_shift[BITS]));
    return _mm512_and_si512(v, _mm512_set1_epi32((1 << BITS) - 1));
}
static inline __attribute__((always_inline)) TGT vf vq_codes(const int BITS, const uint8_t *p) {
    return _mm512_cvtepi32_ps(vq_ints(BITS, p));
}
static inline __attribute__((always_inline)) TGT vf vq_e2m1(const uint8_t *p) {
    return _mm512_permutexvar_ps(vq_ints(4, p), _mm512_loadu_ps(cpu_e2m1_value));
}
/* E4M3 -> f16 bits (value * 2^-8) -> f32, as kernels_avx512.c's vld_fp8. */
static inline __attribute__((always_inline)) TGT vf vq_fp8(const uint8_t *p) {
    __m256i h = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)p));
    h = _mm256_and_si256(_mm256_slli_epi16(h, 7), _mm256_set1_epi16((short)0xBFFF));
    return _mm512_cvtph_ps(h);
}

/* ---- 4-bit codes in split order: affine 4-bit and mxfp4 ------------------------------------
 *
 * Per 32 columns of a row: the codes are 16 bytes, zero-extended to 16 dwords with one
 * vpmovzxbd; the low nibbles are the even columns and the high nibbles the odd ones, so
 * the token rows are split into even / odd columns instead (two vpermt2ps per 32 columns,
 * shared by the tile's 4 rows) and no per-row nibble interleave is needed. Each half is
 * dequantized with one FMA (affine: q*s + b; mxfp4: one multiply after the E2M1 lookup)
 * and dotted: acc = even weights · even x, then odd weights · odd x, lane by lane. That is
 * f32_tile's order on a chunk stored as [16 even, 16 odd] per 32 columns, which is what
 * prefill packs (qrow_split, qx_split), so both paths give the same bits. */

static inline TGT int qsplit(const ci_mat *W) {
    const ci_qdesc *d = q_desc(W);
    return d->mode == CI_Q_MXFP4 || (d->mode == CI_Q_AFFINE && d->bits == 4);
}

static inline __attribute__((always_inline)) TGT void qx32(const float *x, vf *xe, vf *xo) {
    vf a = _mm512_loadu_ps(x), b = _mm512_loadu_ps(x + 16);
    const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    *xe = _mm512_permutex2var_ps(a, ie, b);
    *xo = _mm512_permutex2var_ps(a, io, b);
}

/* One group's 16 possible weights (affine: q·s + b for q = 0..15, one FMA each; mxfp4: the
 * E2M1 values × s), so that a code's weight is one vpermps away: the same FMA / multiply the
 * code would get on its own, hence the same bits. */
static inline __attribute__((always_inline)) TGT vf qgl(const int MODE, vf s, vf b, vf lut) {
    if (MODE == CI_Q_MXFP4) return _mm512_mul_ps(lut, s);
    const vf iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    return _mm512_fmadd_ps(iota, s, b);
}

/* The 32 weights at column k (a multiple of 32 inside one group, whose weight table qgl
 * made) of a row as its even and odd halves; vpermps reads the low 4 bits of each index,
 * so the low nibble needs no mask. */
static inline __attribute__((always_inline)) TGT void qw32(const uint8_t *row, int64_t k, vf gl, vf *e, vf *o) {
    __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(row + k / 2)));
    *e = _mm512_permutexvar_ps(v, gl);
    *o = _mm512_permutexvar_ps(_mm512_srli_epi32(v, 4), gl);
}

#define QS_UNROLL _Pragma("GCC unroll 4")   /* rows / tokens loops: accumulators stay in registers */

/* rows of up to QS_NT bytes of codes (2048 4-bit columns) prefetch the next tile in byte
 * order, a line a step (the 4 rows' 64 bytes a step): test_quant --bench ROWS COLS 1 avx512 on the
 * Zen 5 (2026-12-04, two rounds, GB/s) 65536 x 1024 15.6, 16.2 -> 17.4, 19.4, 131072 x 2048 and
 * 16384 x 768 level; Qwen3-30B-A3B dims mlx4 4 layers decode, one thread, three rounds 48.8-53.4
 * -> 54.1-56.7 tok/s, two threads level */
#ifndef QS_SPF
#define QS_SPF cpu_pf_next_tile   /* AMD only, as the next-tile rule (quant_kernels.h) */
#endif
#ifndef QS_NT
#define QS_NT (cpu_pf_next_tile ? 1024 : 0)   /* AMD only, as kernels_avx512.c's rule */
#endif

/* T <= 4 token rows (x at column 0) by 4 rows over all columns, in the summation order:
 * per CPU_KC chunk, lanes from zero, one reduction, chunk sums added. */
static inline __attribute__((always_inline)) TGT void qsplit_T(const int T, const int MODE, const int PRE,
                                                               const ci_mat *W, const int64_t rows[4], const float *x,
                                                               int64_t xs, float *out) {
    const ci_qdesc *d = q_desc(W);
    const int64_t G = d->group, ng = W->cols / G, rb = W->cols / 2, cols = W->cols;
    const uint8_t *wr[4];
    int64_t gi[4];
    float part[4 * 4];
    const vf lut = _mm512_loadu_ps(cpu_e2m1_value);
    QS_UNROLL
    for (int r = 0; r < 4; r++) {
        wr[r] = (const uint8_t *)W->data + rows[r] * rb;
        gi[r] = (W->scale_row0 + rows[r]) * ng;
    }
    if (QS_SPF) q_pf_next_params(d, gi[0], ng, 4);   /* the next tile's scales / biases (quant_kernels.h) */
    vf sv[4] = { vzero(), vzero(), vzero(), vzero() }, bv[4] = { vzero(), vzero(), vzero(), vzero() };
    int64_t pb = -1;   /* first group whose parameters sv / bv hold */
    for (int64_t c0 = 0; c0 < cols; c0 += CPU_KC) {
        const int64_t c1 = c0 + CPU_KC < cols ? c0 + CPU_KC : cols;
        vf acc[4][4];
        QS_UNROLL
        for (int t = 0; t < T; t++) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = vzero();
        for (int64_t k0 = c0; k0 < c1;) {
            const int64_t g = k0 / G, k1 = (g + 1) * G < c1 ? (g + 1) * G : c1;
            if ((g & ~(int64_t)15) != pb) {   /* the next 16 groups' scales / biases of each row */
                pb = g & ~(int64_t)15;
                const int np = (int)(ng - pb < 16 ? ng - pb : 16);
                QS_UNROLL
                for (int r = 0; r < 4; r++) {
                    sv[r] = q16(d, d->scales, gi[r] + pb, np);
                    if (MODE == CI_Q_AFFINE) bv[r] = q16(d, d->biases, gi[r] + pb, np);
                }
            }
            const __m512i gsel = _mm512_set1_epi32((int)(g - pb));
            vf gl[4];
            QS_UNROLL
            for (int r = 0; r < 4; r++)
                gl[r] = qgl(MODE, _mm512_permutexvar_ps(gsel, sv[r]),
                            MODE == CI_Q_AFFINE ? _mm512_permutexvar_ps(gsel, bv[r]) : vzero(), lut);
            for (int64_t k = k0; k < k1; k += 32) {
                if (QS_NT && rb <= QS_NT) {
                    __builtin_prefetch(wr[0] + 4 * rb + 4 * (k / 2), 0, 3);
                } else if (((k / 2) & 63) < 16) {   /* one prefetch per 64-byte line of each row's codes */
                    /* past the row's end: the same place in the row 4 below, which the next
                     * tile reads first (as quant_kernels_avx2.c: with 512-byte rows every
                     * prefetch but row 3's would land in a row this tile is already reading) */
                    int64_t off = k / 2 + 512;
                    if (off >= rb) off += 3 * rb;
                    QS_UNROLL
                    for (int r = 0; r < 4; r++) __builtin_prefetch(wr[r] + off, 0, 3);
                }
                vf xe[4], xo[4];
                QS_UNROLL
                for (int t = 0; t < T; t++) {
                    if (PRE) {   /* x already in split order */
                        xe[t] = _mm512_loadu_ps(x + t * xs + k);
                        xo[t] = _mm512_loadu_ps(x + t * xs + k + 16);
                    } else {
                        qx32(x + t * xs + k, &xe[t], &xo[t]);
                    }
                }
                QS_UNROLL
                for (int r = 0; r < 4; r++) {
                    vf e, o;
                    qw32(wr[r], k, gl[r], &e, &o);
                    QS_UNROLL
                    for (int t = 0; t < T; t++) acc[t][r] = vfma(o, xo[t], vfma(e, xe[t], acc[t][r]));
                }
            }
            k0 = k1;
        }
        QS_UNROLL
        for (int t = 0; t < T; t++) vhsum4(acc[t][0], acc[t][1], acc[t][2], acc[t][3], part + t * 4);
        for (int i = 0; i < T * 4; i++) out[i] = c0 == 0 ? part[i] : out[i] + part[i];
    }
}

/* Any T (at most 4: one pass); PRE: x already split (qsplit_pre_tile). */
#define QS_T(MODE, PRE) switch (T) { case 1: qsplit_T(1, MODE, PRE, W, rows, x, xs, out); break; \
    case 2: qsplit_T(2, MODE, PRE, W, rows, x, xs, out); break; \
    case 3: qsplit_T(3, MODE, PRE, W, rows, x, xs, out); break; \
    default: qsplit_T(4, MODE, PRE, W, rows, x, xs, out); }
static TGT void qsplit_tile(const ci_mat *W, const int64_t rows[4], int T, const float *x, int64_t xs, float *out) {
    if (q_desc(W)->mode == CI_Q_MXFP4) { QS_T(CI_Q_MXFP4, 0); } else { QS_T(CI_Q_AFFINE, 0); }
}

static TGT int qsplit_pre_tile(const ci_mat *W, const int64_t rows[4], int T, const float *x, int64_t xs, float *out) {
    if (!qsplit(W)) return 0;
    if (q_desc(W)->mode == CI_Q_MXFP4) { QS_T(CI_Q_MXFP4, 1); } else { QS_T(CI_Q_AFFINE, 1); }
    return 1;
}
#undef QS_T
#define QSPLIT_PRE_TILE qsplit_pre_tile

/* Prefill: chunk [c0, c1) of row r dequantized in split order. */
static TGT void qrow_split(const ci_mat *W, int64_t r, int64_t c0, int64_t c1, float *dst) {
    const ci_qdesc *d = q_desc(W);
    const int64_t G = d->group, gb = q_gidx(W, r, 0);
    const uint8_t *row = (const uint8_t *)W->data + r * (W->cols / 2);
    const vf lut = _mm512_loadu_ps(cpu_e2m1_value);
    for (int64_t k = c0; k < c1; k += 32) {
        vf s = vset1(q_param(d, d->scales, gb + k / G)), e, o;
        vf gl = d->mode == CI_Q_MXFP4 ? qgl(CI_Q_MXFP4, s, vzero(), lut)
                                      : qgl(CI_Q_AFFINE, s, vset1(q_param(d, d->biases, gb + k / G)), lut);
        qw32(row, k, gl, &e, &o);
        _mm512_storeu_ps(dst + (k - c0), e);
        _mm512_storeu_ps(dst + (k - c0) + 16, o);
    }
}

/* Prefill: T token rows of x (at column c0) split as qx32 splits them, into xp [T, CPU_KC]. */
static TGT void qx_split(int64_t c0, int64_t c1, int T, const float *x, int64_t xs, float *xp) {
    for (int t = 0; t < T; t++)
        for (int64_t k = c0; k < c1; k += 32) {
            vf xe, xo;
            qx32(x + t * xs + (k - c0), &xe, &xo);
            _mm512_storeu_ps(xp + t * CPU_KC + (k - c0), xe);
            _mm512_storeu_ps(xp + t * CPU_KC + (k - c0) + 16, xo);
        }
}

#include "quant_simd.h"

#else
typedef int cpu_qkernels_avx512_unused; /* keeps the translation unit non-empty */
#endif
