/* amx_mlx.c — MLX affine 4- and 8-bit weights on Intel AMX tiles (opt-in: ci_backend_cpu_amx_mlx,
 * --mlx-amx, on an AVX-512 backend of an AMX CPU), at near the f32 path's precision: the weights
 * stay exact and x is carried in two bf16. A block of x holding an infinity gives NaN outputs
 * (x_lo = inf - inf), as the int16 path's does.
 *
 * What it computes, for a token row x and a weight row (group g of G columns: scale s_g, bias b_g,
 * codes q_k, so w_k = s_g q_k + b_g):
 *   x_hi = bf16(x) (nearest even), x_lo = bf16(x - x_hi): x_hi + x_lo is x to within ~2^-17 |x|;
 *   C_g = sum over the group's columns of q_k x_hi_k and q_k x_lo_k: each product exact (a code is a
 *         small integer, exact in bf16), summed in f32 by TDPBF16PS from zero, 32 columns a step,
 *         the step's x_hi products and then its x_lo products;
 *   X_g = sum of (x_hi_k + x_lo_k) over the group (each exact in f32), 16 lanes then reduced;
 *   acc = 0; for g in order: acc = fma(s_g, C_g, acc); acc = fma(b_g, X_g, acc);  y = acc.
 * Nothing of the weights is rounded; the bias term uses the same x as the codes' term, so their
 * cancellation (MLX biases sit near -2^(bits-1) s) costs only f32 roundings of the two terms.
 *
 * Both forms of amx_bf16.c, with the same chain per output, so a row gets the same bits at any
 * token count (test_determinism checks it): rows form (n < 16): A = 16 weight rows' codes as bf16
 * (expanded into a buffer RF_SEG columns at a time), B = x_hi / x_lo pairs; tokens form (n >= 16):
 * A = 16 token rows of x_hi / x_lo, B = 32 weight rows' codes packed into pairs (AMX_SEG columns at
 * a time), and each group's sums scaled into y. The group's scales and biases are read per group.
 * Speed (bench/RESULTS.md): the tokens form prefills well above the f32 path; the rows form is
 * bound by expanding the codes (decode ~3x slower than the f32 path's 4-bit tile). */
#include "cpu_kernels.h"
#if defined(__x86_64__)
#include "amx_tiles.h"
#include "quant_kernels.h"

int cpu_amx_q_ok(const ci_mat *W) {
    if (W->dtype != CI_U32 || !W->scale) return 0;
    const ci_qdesc *d = W->scale;
    if (d->mode != CI_Q_AFFINE || (d->bits != 4 && d->bits != 8) || d->stored_t) return 0;
    if (d->scale_dtype != CI_F32 && d->scale_dtype != CI_BF16 && d->scale_dtype != CI_F16) return 0;
    return d->group >= 32 && d->group % 32 == 0 && W->cols % d->group == 0;
}

/* The prepared x: rows form (n <= ROWS_FORM_MAX) x_hi pairs [K/2][n], x_lo pairs [K/2][n], then
 * X [ng][n]; tokens form x_hi rows [np][K], x_lo rows [np][K] (np = n rounded up to 16), then X
 * [ng][np]. K = cols (a multiple of 32 here). */
static int np_of(int n) { return n <= ROWS_FORM_MAX ? n : (n + 15) & ~15; }

size_t amx_mlx_bytes(const ci_mat *W, int n) {
    const int64_t K = W->cols, ng = K / q_desc(W)->group, np = np_of(n);
    return (size_t)(np * K * 4 + ng * np * 4);
}

void AMX_TGT amx_mlx_prep(const ci_mat *W, const float *x, int n, void *mem) {
    const int64_t K = W->cols, G = q_desc(W)->group, ng = K / G;
    const int np = np_of(n), rows_form = n <= ROWS_FORM_MAX;
    uint16_t *hi = mem, *lo = hi + (int64_t)np * K;
    float *X = (float *)(lo + (int64_t)np * K);
    memset(mem, 0, amx_mlx_bytes(W, n));
    for (int t = 0; t < n; t++) {
        const float *xt = x + (int64_t)t * K;
        for (int64_t g = 0; g < ng; g++) {
            __m512 sum = _mm512_setzero_ps();
            for (int64_t c = g * G; c < (g + 1) * G; c += 16) {
                __m256i l;
                const __m256i h = round16(xt + c, 16, &l);
                sum = _mm512_add_ps(sum, _mm512_add_ps((__m512)_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16),
                                                       (__m512)_mm512_slli_epi32(_mm512_cvtepu16_epi32(l), 16)));
                if (!rows_form) {
                    _mm256_storeu_si256((__m256i *)(hi + (int64_t)t * K + c), h);
                    _mm256_storeu_si256((__m256i *)(lo + (int64_t)t * K + c), l);
                    continue;
                }
                _Alignas(32) uint32_t ph[8], pl[8];
                _mm256_store_si256((__m256i *)ph, h);
                _mm256_store_si256((__m256i *)pl, l);
                for (int i = 0; i < 8; i++) {
                    ((uint32_t *)hi)[(c / 2 + i) * n + t] = ph[i];
                    ((uint32_t *)lo)[(c / 2 + i) * n + t] = pl[i];
                }
            }
            X[g * np + t] = _mm512_reduce_add_ps(sum);
        }
    }
}

/* The 32 codes of W's row r from column c as bf16 (exact: integers below 256); zero for a row past
 * the matrix. 4-bit: byte i holds columns 2i (low nibble) and 2i + 1, so 32-bit lane i gets the
 * pair (column 2i, 2i + 1) as word indices into tab (bf16 of 0..15). */
static inline __attribute__((always_inline)) AMX_TGT __m512i qrow(const ci_mat *W, int64_t r, int64_t c, __m512i tab) {
    if (r >= W->rows) return _mm512_setzero_si512();
    const int bits = q_desc(W)->bits;
    const uint8_t *p = (const uint8_t *)W->data + r * (W->cols * bits / 8) + c * bits / 8;
    const __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
    if (bits == 4) {
        const __m512i i = _mm512_or_si512(_mm512_and_si512(v, _mm512_set1_epi32(0x0f)),
                                          _mm512_slli_epi32(_mm512_and_si512(v, _mm512_set1_epi32(0xf0)), 12));
        return _mm512_permutexvar_epi16(i, tab);
    }
    const __m512i v1 = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p + 16)));
    return (__m512i)_mm512_cvtne2ps_pbh(_mm512_cvtepi32_ps(v1), _mm512_cvtepi32_ps(v));
}

static AMX_TGT __m512i code_table(void) {
    const __m512 a = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    return (__m512i)_mm512_cvtne2ps_pbh(a, a);
}

/* ---- rows form ------------------------------------------------------------------------------- */

/* Columns a rows-form pass expands (a multiple of every group size): each row's codes are read
 * RF_SEG at a time (128 bytes of 4-bit codes) rather than 16 bytes a step, and the same stretch
 * of the pass after next is prefetched. */
#define RF_SEG 256

/* Rows [r, r + 16) at columns [c, c + cn) (cn <= RF_SEG, a multiple of 32) as bf16 codes into buf
 * [16][RF_SEG]. */
static AMX_TGT void fill16(const ci_mat *W, int64_t r, int64_t c, int64_t cn, __m512i tab, uint16_t *buf) {
    const int64_t rb = W->cols * q_desc(W)->bits / 8, pf = 2 * RF_SEG * q_desc(W)->bits / 8;
    for (int i = 0; i < 16; i++) {
        if (r + i < W->rows && c * q_desc(W)->bits / 8 + pf < rb) {
            const uint8_t *p = (const uint8_t *)W->data + (r + i) * rb + c * q_desc(W)->bits / 8 + pf;
            for (int64_t o = 0; o < RF_SEG * q_desc(W)->bits / 8; o += 64) __builtin_prefetch(p + o, 0, 3);
        }
        for (int64_t k = 0; k < cn; k += 32) _mm512_store_si512(buf + RF_SEG * i + k, qrow(W, r + i, c + k, tab));
    }
}

static AMX_TGT void rows_q(const ci_mat *W, int64_t r0, int64_t r1, int n, const uint32_t *xh, float *y) {
    const ci_qdesc *d = q_desc(W);
    const int64_t K = W->cols, G = d->group, ng = K / G, rows = W->rows;
    const uint32_t *xl = xh + K / 2 * n;
    const float *X = (const float *)(xl + K / 2 * n);
    const __m512i tab = code_table();
    const __mmask16 mn = (__mmask16)((1u << n) - 1);
    _Alignas(64) uint16_t abuf[2][16 * RF_SEG];
    _Alignas(64) float cbuf[32 * 16], acc[32 * 16];
    memset(cbuf, 0, sizeof cbuf);   /* lanes past n stay 0: the tile stores write n a row */
    cfg_load(n);
    for (int64_t r = r0; r < r1; r += 32) {
        const int nr = (int)(r1 - r < 32 ? r1 - r : 32), two = nr > 16;
        memset(acc, 0, sizeof acc);
        for (int64_t c0 = 0; c0 < K; c0 += RF_SEG) {
            const int64_t cn = K - c0 < RF_SEG ? K - c0 : RF_SEG;   /* a multiple of G */
            fill16(W, r, c0, cn, tab, abuf[0]);
            if (two) fill16(W, r + 16, c0, cn, tab, abuf[1]);
            for (int64_t g = c0 / G; g < (c0 + cn) / G; g++) {
                _tile_zero(0);
                _tile_zero(1);
                for (int64_t c = g * G; c < (g + 1) * G; c += 32) {
                    _tile_loadd(6, xh + (c / 2) * n, 4 * n);
                    _tile_loadd(7, xl + (c / 2) * n, 4 * n);
                    _tile_loadd(4, abuf[0] + (c - c0), 2 * RF_SEG);
                    _tile_dpbf16ps(0, 4, 6);
                    _tile_dpbf16ps(0, 4, 7);
                    if (two) {
                        _tile_loadd(5, abuf[1] + (c - c0), 2 * RF_SEG);
                        _tile_dpbf16ps(1, 5, 6);
                        _tile_dpbf16ps(1, 5, 7);
                    }
                }
                _tile_stored(0, cbuf, 64);
                if (two) _tile_stored(1, cbuf + 256, 64);
                const __m512 xg = _mm512_maskz_loadu_ps(mn, X + g * n);
                for (int j = 0; j < nr; j++) {
                    const int64_t gi = (W->scale_row0 + r + j) * ng + g;
                    __m512 a = _mm512_load_ps(acc + 16 * j);
                    a = _mm512_fmadd_ps(_mm512_set1_ps(q_param(d, d->scales, gi)), _mm512_load_ps(cbuf + 16 * j), a);
                    a = _mm512_fmadd_ps(_mm512_set1_ps(q_param(d, d->biases, gi)), xg, a);
                    _mm512_store_ps(acc + 16 * j, a);
                }
            }
        }
        for (int j = 0; j < nr; j++)
            for (int t = 0; t < n; t++) y[(int64_t)t * rows + r + j] = acc[16 * j + t];
    }
    _tile_release();
}

/* ---- tokens form ----------------------------------------------------------------------------- */

#define SEG_GROUPS (AMX_SEG / 32)   /* at most this many groups in a segment (G >= 32) */

static AMX_TGT void tokens_q(const ci_mat *W, int64_t r0, int64_t r1, int t0, int t1, int n, const uint16_t *xh,
                             float *y, uint32_t *pack) {
    const ci_qdesc *d = q_desc(W);
    const int64_t K = W->cols, G = d->group, ng = K / G, ys = W->rows, spg = G / 32;
    const int np = np_of(n);
    const uint16_t *xl = xh + (int64_t)np * K;
    const float *X = (const float *)(xl + (int64_t)np * K);
    const __m512i tab = code_table();
    _Alignas(64) float cb[4][256], sv[SEG_GROUPS][32], bv[SEG_GROUPS][32];
    cfg_load(16);
    for (int64_t p0 = r0; p0 < r1; p0 += 32) {
        const int halves = r1 - p0 > 16 ? 2 : 1;
        for (int64_t c0 = 0; c0 < K; c0 += AMX_SEG) {
            const int64_t steps = (K - c0 < AMX_SEG ? K - c0 : AMX_SEG) / 32, g0 = c0 / G, ngs = steps / spg;
            for (int h = 0; h < halves; h++)   /* pack: [step][half][pair][row] */
                for (int64_t s = 0; s < steps; s++) {
                    __m512i v[16];
                    for (int i = 0; i < 16; i++)
                        v[i] = p0 + 16 * h + i < r1 ? qrow(W, p0 + 16 * h + i, c0 + 32 * s, tab) : _mm512_setzero_si512();
                    tr16(v, pack + 512 * s + 256 * h);
                }
            for (int64_t gl = 0; gl < ngs; gl++)
                for (int i = 0; i < 32; i++) {
                    const int in = p0 + i < r1;
                    const int64_t gi = (W->scale_row0 + p0 + i) * ng + g0 + gl;
                    sv[gl][i] = in ? q_param(d, d->scales, gi) : 0.0f;
                    bv[gl][i] = in ? q_param(d, d->biases, gi) : 0.0f;
                }
            for (int tb = t0; tb < t1; tb += 32) {
                const int tiles = t1 - tb > 16 ? 2 : 1;
                for (int64_t gl = 0; gl < ngs; gl++) {
                    _tile_zero(0);
                    _tile_zero(1);
                    _tile_zero(2);
                    _tile_zero(3);
                    for (int64_t s = gl * spg; s < (gl + 1) * spg; s++) {
                        _tile_loadd(6, pack + 512 * s, 64);
                        if (halves > 1) _tile_loadd(7, pack + 512 * s + 256, 64);
                        for (int part = 0; part < 2; part++) {   /* x_hi's products, then x_lo's */
                            const uint16_t *xk = (part ? xl : xh) + (int64_t)tb * K + c0 + 32 * s;
                            _tile_loadd(4, xk, K * 2);
                            if (tiles > 1) _tile_loadd(5, xk + 16 * K, K * 2);
                            _tile_dpbf16ps(0, 4, 6);
                            if (tiles > 1) _tile_dpbf16ps(2, 5, 6);
                            if (halves > 1) {
                                _tile_dpbf16ps(1, 4, 7);
                                if (tiles > 1) _tile_dpbf16ps(3, 5, 7);
                            }
                        }
                    }
                    _tile_stored(0, cb[0], 64);
                    if (halves > 1) _tile_stored(1, cb[1], 64);
                    if (tiles > 1) _tile_stored(2, cb[2], 64);
                    if (tiles > 1 && halves > 1) _tile_stored(3, cb[3], 64);
                    const int64_t g = g0 + gl;
                    for (int k = 0; k < 4; k++) {
                        const int a = k >> 1, h = k & 1;
                        if (a >= tiles || h >= halves) continue;
                        const int nt = t1 - (tb + 16 * a) < 16 ? t1 - (tb + 16 * a) : 16;
                        const int nr = r1 - (p0 + 16 * h) < 16 ? (int)(r1 - (p0 + 16 * h)) : 16;
                        const __mmask16 m = (__mmask16)((1u << nr) - 1);
                        const __m512 s = _mm512_load_ps(&sv[gl][16 * h]), b = _mm512_load_ps(&bv[gl][16 * h]);
                        for (int tt = 0; tt < nt; tt++) {
                            const int t = tb + 16 * a + tt;
                            float *yp = y + (int64_t)t * ys + p0 + 16 * h;
                            __m512 acc = g == 0 ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(m, yp);
                            acc = _mm512_fmadd_ps(s, _mm512_load_ps(cb[k] + 16 * tt), acc);
                            acc = _mm512_fmadd_ps(b, _mm512_set1_ps(X[g * np + t]), acc);
                            _mm512_mask_storeu_ps(yp, m, acc);
                        }
                    }
                }
            }
        }
    }
    _tile_release();
}

void amx_mlx_rows(const ci_mat *W, int64_t r0, int64_t r1, int t0, int t1, int n, const void *xp, float *y, void *pack) {
    if (n <= ROWS_FORM_MAX) rows_q(W, r0, r1, n, xp, y);
    else tokens_q(W, r0, r1, t0, t1, n, xp, y, pack);
}

#else
typedef int amx_mlx_unused;   /* keeps the translation unit non-empty */
#endif
