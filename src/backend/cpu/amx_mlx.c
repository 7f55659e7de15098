/* amx_mlx.c — MLX affine 4- and 8-bit weights with int16 activations on Intel AMX-INT8 tiles and
 * AVX-512 VNNI (opt-in: ci_backend_cpu_amx_mlx, --mlx-amx, on an AVX-512 backend of a CPU with
 * AMX-INT8 whose kernel grants the tiles), or with int8 ones for the 4-bit matrices (act8:
 * ci_backend_cpu_amx_mlx_act 8, --mlx-amx8; QMAX8 below, the tiles' H product alone). The weights stay exact; x is rounded to int16 per block,
 * as the int16-activation path rounds it (quant_i16_avx512.c), and every code-times-x sum is an
 * exact integer, so the tiles and the vector kernel give the same bits for any token count.
 *
 * What it computes, for a token row x and a weight row (group g of G columns: scale s_g, bias b_g,
 * codes q_j, so w_j = s_g q_j + b_g), with blocks of B = 64 columns (32 where G is not a multiple
 * of 64), each inside one group:
 *   d_b = max|x| over block b / 32639, x̂_j = nearest-even(x_j / d_b) (all 0 for a zero block;
 *         d_b NaN and x̂ 0 for a block holding an infinity or a NaN, so its outputs are NaN);
 *   S_b = sum over the block of q_j x̂_j, an exact integer (|S_b| < 2^29);
 *   X_g = sum over the group's blocks, in order, of d_b * (sum of the block's x̂_j), in f32;
 *   acc = 0; for g in order: { for b in g: acc = fma(f32(S_b), s_g * d_b, acc);
 *                               acc = fma(b_g, X_g, acc) };  y = acc.
 * i.e. w · x̃ with x̃_j = d_b x̂_j (within d_b / 2 of x_j): the bias term uses the same x̃, so the
 * codes' offset (MLX biases sit near -2^(bits-1) s) costs only f32 roundings. 32639 rather than
 * 32767 keeps x̂ = 256 h + l with both h and l in [-128, 127].
 *
 * Two kernels, one chain per output (the order above), so a row gets the same bits at any token
 * count (test_determinism checks it):
 *  - vector (n <= VN_MAX tokens: decode): 16 weight rows at a time; a row's codes come out of
 *    their 16-bit words with shifts and masks (4-bit: nibble m of word w is column 4w + m of a
 *    128-column chunk; 8-bit: byte m of word w is column 2w + m of a 64-column chunk), x̂ is
 *    prepared in that order, and vpdpwssd sums code-word pairs into 16 lanes; pairwise levels of
 *    permutes turn the rows' lanes into per-block sums with the rows in lanes, for the f32 chain
 *    (rows_one; 2 or 3 tokens run it token after token over an item's rows). act8 with 4-bit W:
 *    x̂ as bytes (the chunk's even columns, then its odd ones: vpos8) and vpdpbusd on each code
 *    byte's low and high nibble, two instructions a 64-byte chunk where the words take four;
 *    an int32 lane sums the same 8 columns either way, so the sums and the bits are the same.
 *  - tiles (more tokens): A = 16 weight rows' codes as bytes (TDPBUSD's unsigned operand; 4-bit
 *    codes expanded SEGK columns at a time), B = x̂'s high and low bytes (signed) for 16 tokens in
 *    the tiles' 4-byte groups; per block two TDPBUSD give H and L, S = 256 H + L (exact), and the
 *    chain runs on the sums with the tokens in lanes. */
#include "cpu_kernels.h"
#if defined(__x86_64__)
#include "amx_tiles.h"

#define I8_TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vnni,amx-tile,amx-bf16,amx-int8")))
#define TGT I8_TGT   /* quant_avx512.h's q16 */
#include "quant_avx512.h"
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>
#define QMAX 32639.0f
#define QMAX8 127.0f             /* act8: x̂ one signed byte */
#ifndef VN_MAX
#define VN_MAX 3                 /* tokens up to which the vector kernel runs */
#endif
#define SEGK AMX_SEG             /* columns of codes the tiles' A buffer holds (32 rows x SEGK bytes) */

int cpu_amx_q_ok(const ci_mat *W) {
    if (W->dtype != CI_U32 || !W->scale) return 0;
    const ci_qdesc *d = W->scale;
    if (d->mode != CI_Q_AFFINE || (d->bits != 4 && d->bits != 8) || d->stored_t) return 0;
    if (d->scale_dtype != CI_F32 && d->scale_dtype != CI_BF16 && d->scale_dtype != CI_F16) return 0;
    return d->group >= 32 && d->group % 32 == 0 && W->cols % d->group == 0;
}

/* The prepared x (64-byte aligned parts): d [nb][np] f32, X [ng][np] f32, then the vector
 * kernel's x̂ [n][nch * CH] int16 (chunk order, zero past K) or the tiles' h and l [K / 4][np][4]
 * int8 each. np = n (vector kernel) or n rounded up to 16 (tiles; padding tokens are zero). */
typedef struct {
    int64_t K, G, B, nb, ng, np, ch, nch;
    size_t d_at, x_at, q_at, l_at, bytes;
    int bits, vec;
} lay;

static size_t up64(size_t v) { return (v + 63) & ~(size_t)63; }

static lay lay_of(const ci_mat *W, int n) {
    lay L;
    const ci_qdesc *d = q_desc(W);
    L.K = W->cols;
    L.G = d->group;
    L.B = L.G % 64 == 0 ? 64 : 32;
    L.nb = L.K / L.B;
    L.ng = L.K / L.G;
    L.bits = d->bits;
    L.vec = n <= VN_MAX;
    L.np = L.vec ? n : (n + 15) & ~15;
    L.ch = d->bits == 4 ? 128 : 64;   /* columns whose codes fill 64 bytes */
    L.nch = (L.K + L.ch - 1) / L.ch;
    L.d_at = 0;
    L.x_at = up64((size_t)(L.nb * L.np) * 4);
    L.q_at = L.x_at + up64((size_t)(L.ng * L.np) * 4);
    if (L.vec) {
        L.l_at = L.q_at;
        L.bytes = L.q_at + (size_t)(n * L.nch * L.ch) * 2;
    } else {
        L.l_at = L.q_at + (size_t)(L.K * L.np);
        L.bytes = L.l_at + (size_t)(L.K * L.np);
    }
    return L;
}

size_t amx_mlx_bytes(const ci_mat *W, int n) { return lay_of(W, n).bytes; }
int amx_mlx_prep_unit(const ci_mat *W, int n) { return lay_of(W, n).vec ? 1 : 16; }

/* Where the vector kernel keeps column c's word: chunk c / ch, then vector m of the chunk's
 * 32-word vectors (4-bit: m = c % 4, word (c % 128) / 4; 8-bit: m = c % 2, word (c % 64) / 2). */
static inline int64_t vpos(const lay *L, int64_t c) {
    /* ch is 128 or 64: shifts, not a division for every column of a prep */
    return L->bits == 4 ? (c & ~(int64_t)127) + (c & 3) * 32 + ((c & 127) >> 2) : (c & ~(int64_t)63) + (c & 1) * 32 + ((c & 63) >> 1);
}

/* The int8 form's place (act8, 4-bit W) of column c, in bytes from the token's x̂: chunk c / 128
 * in its slot of 256 bytes (the int16 layout's), the even columns' x̂ in bytes 0..63 and the odd
 * ones' in 64..127, so that byte m of a chunk's vector pairs with the low (even) or high (odd)
 * nibble of code byte m. */
static inline int64_t vpos8(int64_t c) { return (c & ~(int64_t)127) * 2 + (c & 1) * 64 + ((c & 127) >> 1); }

/* Block b of token row xt: x̂ into q[0 .. B / 16) (nearest even, the default rounding mode; 0 for a
 * zero block and for a bad one), *d = d_b (NaN if the block holds an infinity or a NaN), returns the
 * block's x̂ sum. The one place both layouts take x̂ from, so they agree to the bit. */
static inline __attribute__((always_inline)) I8_TGT int32_t quant_block(const float *xb, int64_t B, __m512i q[4],
                                                                        float *d, float qmax) {
    __m512 mx = _mm512_setzero_ps(), fin = _mm512_setzero_ps();
    for (int64_t j = 0; j < B; j += 16) {
        const __m512 v = _mm512_loadu_ps(xb + j);
        mx = _mm512_max_ps(mx, _mm512_abs_ps(v));
        fin = _mm512_add_ps(fin, _mm512_mul_ps(v, _mm512_setzero_ps()));   /* NaN if inf / NaN */
    }
    const float amax = _mm512_reduce_max_ps(mx), bad = _mm512_reduce_add_ps(fin);
    const float id = amax > 0 && bad == 0.0f ? qmax / amax : 0.0f;
    *d = bad == 0.0f ? amax / qmax : NAN;
    __m512i sum = _mm512_setzero_si512();
    for (int64_t j = 0; j < B; j += 16) {
        __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb + j), _mm512_set1_ps(id)));
        if (bad != 0.0f) v = _mm512_setzero_si512();
        sum = _mm512_add_epi32(sum, v);
        q[j / 16] = v;
    }
    return _mm512_reduce_add_epi32(sum);
}

/* Tokens [t0, t1) of x's n rows into mem. The tiles' layout goes by 16 tokens (the 64 bytes of one
 * 4-column group's line): there t0 is a multiple of 16 and t1 one too or n, and the range that ends
 * at n also writes the padding tokens [n, np) (zero). Ranges write disjoint bytes (whole lines in the
 * tiles' layout: two threads' tokens never share one), so they may run at once. */
void I8_TGT amx_mlx_prep(const ci_mat *W, const float *x, int n, int t0, int t1, void *mem, int act8) {
    const lay L = lay_of(W, n);
    const float qmax = act8 ? QMAX8 : QMAX;
    uint8_t *base = mem;
    float *D = (float *)(base + L.d_at), *X = (float *)(base + L.x_at);
    if (L.vec) {
        int16_t *xw = (int16_t *)(base + L.q_at);
        const int a8 = act8 && L.bits == 4;   /* x̂ as bytes for rows_one's int8 form */
        for (int t = t0; t < t1; t++) {
            const float *xt = x + (int64_t)t * L.K;
            int16_t *xv = xw + (int64_t)t * L.nch * L.ch;
            memset(xv, 0, (size_t)(L.nch * L.ch) * 2);   /* zero past K */
            float gs = 0;
            for (int64_t b = 0; b < L.nb; b++) {
                __m512i q[4];
                float d;
                const int32_t s = quant_block(xt + b * L.B, L.B, q, &d, qmax);
                for (int64_t j = 0; j < L.B; j += 16) {
                    _Alignas(64) int32_t qs[16];
                    _mm512_store_si512(qs, q[j / 16]);
                    if (a8)
                        for (int i = 0; i < 16; i++) ((int8_t *)xv)[vpos8(b * L.B + j + i)] = (int8_t)qs[i];
                    else
                        for (int i = 0; i < 16; i++) xv[vpos(&L, b * L.B + j + i)] = (int16_t)qs[i];
                }
                D[b * L.np + t] = d;
                gs += d * (float)s;
                if (((b + 1) * L.B) % L.G == 0) {
                    X[((b + 1) * L.B / L.G - 1) * L.np + t] = gs;
                    gs = 0;
                }
            }
        }
        return;
    }
    /* tiles: per block, each of 16 tokens' x̂ = 256 h + l (h = floor((x̂ + 128) / 256): both in
     * [-128, 127]) as B bytes of h and of l, then a 16 x 16 transpose of their dwords (4 columns
     * each) gives the lines [column group][16 tokens][4] */
    int8_t *hb = (int8_t *)(base + L.q_at), *lb = (int8_t *)(base + L.l_at);
    const int64_t nps = L.np * 4;   /* bytes from one 4-column group of the tiles' layout to the next */
    const int te = t1 == n ? (int)L.np : t1;
    for (int tb = t0; tb < te; tb += 16) {
        float gs[16] = { 0 };
        for (int64_t b = 0; b < L.nb; b++) {
            __m512i hv[16], lv[16];
            _Alignas(64) float dv[16];
            for (int i = 0; i < 16; i++) {
                const int t = tb + i;
                hv[i] = lv[i] = _mm512_setzero_si512();
                dv[i] = 0;
                if (t >= n) continue;   /* padding: zero */
                __m512i q[4];
                const int32_t s = quant_block(x + (int64_t)t * L.K + b * L.B, L.B, q, &dv[i], qmax);
                gs[i] += dv[i] * (float)s;
                __m128i h8[4], l8[4];
                for (int64_t j = 0; j < L.B; j += 16) {
                    if (act8) {   /* x̂ itself in h; l unused */
                        h8[j / 16] = _mm512_cvtepi32_epi8(q[j / 16]);
                        l8[j / 16] = _mm_setzero_si128();
                        continue;
                    }
                    const __m512i h = _mm512_srai_epi32(_mm512_add_epi32(q[j / 16], _mm512_set1_epi32(128)), 8);
                    h8[j / 16] = _mm512_cvtepi32_epi8(h);
                    l8[j / 16] = _mm512_cvtepi32_epi8(_mm512_sub_epi32(q[j / 16], _mm512_slli_epi32(h, 8)));
                }
                hv[i] = _mm512_inserti32x4(_mm512_zextsi128_si512(h8[0]), h8[1], 1);
                lv[i] = _mm512_inserti32x4(_mm512_zextsi128_si512(l8[0]), l8[1], 1);
                if (L.B == 64) {
                    hv[i] = _mm512_inserti32x4(_mm512_inserti32x4(hv[i], h8[2], 2), h8[3], 3);
                    lv[i] = _mm512_inserti32x4(_mm512_inserti32x4(lv[i], l8[2], 2), l8[3], 3);
                }
            }
            _mm512_store_ps(D + b * L.np + tb, _mm512_load_ps(dv));
            const int64_t c4 = b * L.B / 4;   /* the block's first 4-column group */
            if (L.B == 64) {
                tr16_to(hv, (uint32_t *)(hb + c4 * nps + (int64_t)tb * 4), nps / 4);
                if (!act8) tr16_to(lv, (uint32_t *)(lb + c4 * nps + (int64_t)tb * 4), nps / 4);
            } else {   /* B = 32: the first 8 of the 16 lines */
                _Alignas(64) uint32_t o[256];
                for (int k = 0; k < (act8 ? 1 : 2); k++) {
                    tr16(k ? lv : hv, o);
                    for (int g = 0; g < 8; g++)
                        _mm512_store_si512((k ? lb : hb) + (c4 + g) * nps + (int64_t)tb * 4, _mm512_load_si512(o + 16 * g));
                }
            }
            if (((b + 1) * L.B) % L.G == 0) {
                float *xg = X + ((b + 1) * L.B / L.G - 1) * L.np + tb;
                for (int i = 0; i < 16; i++) xg[i] = gs[i];
                for (int i = 0; i < 16; i++) gs[i] = 0;
            }
        }
    }
}

/* The scales and biases of rows [r, r + nr) (nr <= 16; rows past it 0) for groups [g0, g0 + cnt)
 * (cnt <= 16): s[g * stride + i], b[g * stride + i], by a 16 x 16 transpose of the rows' runs. */
static I8_TGT void params(const ci_mat *W, int64_t r, int nr, int64_t g0, int cnt, int stride, float *s, float *b) {
    const ci_qdesc *d = q_desc(W);
    const int64_t ng = W->cols / d->group;
    __m512i v[16];
    _Alignas(64) uint32_t o[256];
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 16; i++)
            v[i] = i < nr ? _mm512_castps_si512(q16(d, k ? d->biases : d->scales, (W->scale_row0 + r + i) * ng + g0, cnt)) : _mm512_setzero_si512();
        float *out = k ? b : s;
        if (stride == 16 && !((uintptr_t)out & 63)) {   /* out is o's layout: no copy */
            tr16(v, (uint32_t *)out);
            continue;
        }
        tr16(v, o);   /* o[16 g + i]: group g of row i */
        for (int g = 0; g < cnt; g++) memcpy(out + (int64_t)g * stride, o + 16 * g, 64);
    }
}

/* params for bf16 scales and biases in one transpose: sb[g][i] = row i's bf16 scale (low half) and
 * bias (high half) of group g0 + g (rows past nr, groups past cnt: 0), which become the f32 values
 * q16 gives by a shift and a mask. Half params' shuffles for rows_one. */
static I8_TGT void params_bf16(const ci_mat *W, int64_t r, int nr, int64_t g0, int cnt, uint32_t sb[16][16]) {
    const ci_qdesc *d = q_desc(W);
    const int64_t ng = W->cols / d->group;
    const __mmask16 k = (__mmask16)((1u << cnt) - 1);
    __m512i v[16];
    for (int i = 0; i < 16; i++) {
        if (i >= nr) {
            v[i] = _mm512_setzero_si512();
            continue;
        }
        const int64_t at = (W->scale_row0 + r + i) * ng + g0;
        const __m512i sv = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, (const uint16_t *)d->scales + at));
        const __m512i bv = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(k, (const uint16_t *)d->biases + at));
        v[i] = _mm512_or_si512(sv, _mm512_slli_epi32(bv, 16));
    }
    tr16(v, &sb[0][0]);
}

/* ---- the params kept in 16-row tiles (cpu_amx_mlx_ptiles) ------------------------------------- */

/* A dword of the copy (bf16 scale | bias << 16, 16 rows in lanes) as the f32 scales and biases */
static inline __attribute__((always_inline)) I8_TGT __m512 sb_scale(__m512i v) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16));
}
static inline __attribute__((always_inline)) I8_TGT __m512 sb_bias(__m512i v) {
    return _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32((int)0xffff0000u)));
}

struct cpu_amx_ptab {
    int64_t cap, count;   /* open addressing by descriptor, cap a power of 2, at most half full */
    struct ptab_ent {
        const ci_qdesc *d;
        int64_t ng, rows;   /* groups a row; grid rows held (a multiple of 16), -1: declined (memory) */
        uint32_t *t;        /* [rows / 16][ng][16] */
        const void *scales; /* what d held when the copy was made: another descriptor later at a freed */
        int64_t group, grid;   /* one's address (a test's stack, a model reloaded) is not taken for it */
    } *e;
};

static int64_t ptab_slot(const cpu_amx_ptab *tab, const ci_qdesc *d) {
    uint64_t h = ((uint64_t)(uintptr_t)d >> 4) * 0x9E3779B97F4A7C15ull;
    for (int64_t i = (int64_t)(h >> 32) & (tab->cap - 1);; i = (i + 1) & (tab->cap - 1))
        if (!tab->e[i].d || tab->e[i].d == d) return i;
}

/* W's grid reach (rows the scale arrays hold), or 0 where W's params don't go to tiles. */
static int64_t ptiles_reach(const ci_mat *W) {
    const ci_qdesc *d = q_desc(W);
    if (d->scale_dtype != CI_BF16 || !d->biases || d->stored_t || !d->grid_rows) return 0;
    return d->grid_rows > W->scale_row0 + W->rows ? d->grid_rows : W->scale_row0 + W->rows;
}

uint32_t *cpu_amx_mlx_ptiles(cpu_amx_ptab **tabp, const ci_mat *W, int64_t *fill) {
    const ci_qdesc *d = q_desc(W);
    const int64_t reach = ptiles_reach(W), ng = W->cols / d->group;
    *fill = 0;
    if (!reach) return NULL;
    cpu_amx_ptab *tab = *tabp;
    if (!tab) {
        if (!(tab = calloc(1, sizeof *tab)) || !(tab->e = calloc(64, sizeof *tab->e))) {
            free(tab);
            return NULL;
        }
        tab->cap = 64;
        *tabp = tab;
    }
    struct ptab_ent *e = &tab->e[ptab_slot(tab, d)];
    if (e->d) {
        const int same = e->scales == d->scales && e->group == d->group && e->grid == d->grid_rows;
        if (same && (e->ng != ng || e->rows < 0)) return NULL;   /* two widths of one grid; or declined before */
        if (same && e->rows >= reach) return e->t;
        /* a view reaching further, or another descriptor at this address: the whole grid again (no
         * matmul is running) */
        free(e->t);
        e->t = NULL;
    } else if (2 * (tab->count + 1) > tab->cap) {   /* grow, then find d's slot again */
        cpu_amx_ptab big = { 2 * tab->cap, 0, calloc((size_t)(2 * tab->cap), sizeof *tab->e) };
        if (!big.e) return NULL;
        for (int64_t i = 0; i < tab->cap; i++)
            if (tab->e[i].d) big.e[ptab_slot(&big, tab->e[i].d)] = tab->e[i];
        big.count = tab->count;
        free(tab->e);
        *tab = big;
        e = &tab->e[ptab_slot(tab, d)];
    }
    /* huge pages asked for: a one-token decode streams the array beside the codes */
    const int64_t rows = (reach + 15) / 16 * 16;
    const size_t bytes = (size_t)rows * (size_t)ng * 4, huge = (size_t)2 << 20;
    /* only into free memory, 256 MiB kept: taking it from the page cache would evict the weights of
     * a --mmap run, and past it the copy could cost the process itself */
    const long fp = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    void *t = NULL;
    if (!e->d) tab->count++;
    if ((fp > 0 && psz > 0 && (uint64_t)fp * (uint64_t)psz < (uint64_t)bytes + ((uint64_t)256 << 20)) ||
        posix_memalign(&t, bytes >= huge ? huge : 64, bytes)) {
        /* declined for good: the kernel transposes */
        *e = (struct ptab_ent){ d, ng, -1, NULL, d->scales, d->group, d->grid_rows };
        return NULL;
    }
    if (bytes >= huge) (void)madvise(t, bytes, 14 /* MADV_HUGEPAGE */);
    *e = (struct ptab_ent){ d, ng, rows, t, d->scales, d->group, d->grid_rows };
    *fill = rows;
    return t;
}

void cpu_amx_mlx_ptiles_fill(const ci_mat *W, uint32_t *t, int64_t r0, int64_t r1) {
    const int64_t reach = ptiles_reach(W), ng = W->cols / q_desc(W)->group;
    ci_mat G = *W;
    G.scale_row0 = 0;
    _Alignas(64) uint32_t sb[16][16];
    for (int64_t r = r0; r < r1; r += 16) {
        const int nr = (int)(reach - r < 16 ? (reach - r > 0 ? reach - r : 0) : 16);   /* past the reach: 0 */
        uint32_t *o = t + r * ng;
        for (int64_t g = 0; g < ng; g += 16) {
            const int cnt = ng - g < 16 ? (int)(ng - g) : 16;
            params_bf16(&G, r, nr, g, cnt, sb);
            memcpy(o + 16 * g, sb, (size_t)cnt * 64);
        }
    }
}

void cpu_amx_ptab_free(cpu_amx_ptab *tab) {
    if (!tab) return;
    for (int64_t i = 0; i < tab->cap; i++) free(tab->e[i].t);
    free(tab->e);
    free(tab);
}

/* ---- vector kernel (n <= VN_MAX) -------------------------------------------------------------- */

/* bytes ahead a row's reads prefetch (T0); on the Sapphire Rapids VM, 2026-12-06, Qwen3-0.6B dims
 * 4-bit decode, one thread: none 18.5 tok/s, 1024 21.1, 2048 24.2, 4096 24.7-25.1, 8192 24.0-24.2,
 * 16384 22.1-23.2; to L2 (T1) 22.5-24.1 */
#define VN_PFD 4096

/* The per-block sums of 16 rows' lane vectors (lpb lanes a block, so 16 / lpb blocks): out[b] lane
 * i = row i's sum over block b's lanes. Exact integer adds, by pairwise
 * levels of two-source permutes: after level l a vector holds 2^l rows of 16 / 2^l partial sums. */
static inline __attribute__((always_inline)) I8_TGT __m512i pair_sum(__m512i a, __m512i b) {
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
    return _mm512_add_epi32(_mm512_permutex2var_epi32(a, ev, b), _mm512_permutex2var_epi32(a, od, b));
}

/* One level of the tree: the m vectors v[0 .. m) pairwise into v[0 .. m / 2). */
static inline __attribute__((always_inline)) I8_TGT void tree_level(__m512i v[16], const int m) {
    _Pragma("GCC unroll 8") for (int j = 0; j < m / 2; j++) v[j] = pair_sum(v[2 * j], v[2 * j + 1]);
}

/* block_sums on registers, from the level where m vectors hold the 16 rows (16 / m rows a vector):
 * m = 16 is the rows' lane vectors themselves, m = 8 the pairs after pair_sum. */

static inline __attribute__((always_inline)) I8_TGT void block_sums_m(__m512i v[16], int m, int lpb, __m512i *out) {
    const __m512i ev = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i od = _mm512_add_epi32(ev, _mm512_set1_epi32(1));
    /* level by level while a lane holds less than a block (w lanes a sum): each level's count a
     * constant where m and lpb are (rows_one), so every loop unrolls */
    int w = 16 / m;
    if (m == 16 && w < lpb) { tree_level(v, 16); m = 8; w *= 2; }
    if (m == 8 && w < lpb) { tree_level(v, 8); m = 4; w *= 2; }
    if (m == 4 && w < lpb) { tree_level(v, 4); m = 2; w *= 2; }
    if (m == 2 && w < lpb) { tree_level(v, 2); m = 1; }
    /* m = 16 / lpb vectors; vector j lane k * m + b: row j * lpb + k, block b */
    if (m == 1) {
        out[0] = v[0];
    } else if (m == 2) {
        out[0] = _mm512_permutex2var_epi32(v[0], ev, v[1]);
        out[1] = _mm512_permutex2var_epi32(v[0], od, v[1]);
    } else {   /* m == 4: lanes 4k + b */
        for (int b = 0; b < 4; b++) {
            const __m512i ix = _mm512_setr_epi32(b, 4 + b, 8 + b, 12 + b, 16 + b, 20 + b, 24 + b, 28 + b, b, b, b, b, b, b, b, b);
            const __m512i x = _mm512_permutex2var_epi32(v[0], ix, v[1]), y = _mm512_permutex2var_epi32(v[2], ix, v[3]);
            out[b] = _mm512_shuffle_i64x2(x, y, 0x44);   /* lanes 0-7 of x, then 0-7 of y */
        }
    }
}

/* Token t of the n (<= VN_MAX) the vector layout holds, rows [r0, r1), in registers: per chunk the
 * 16 rows' lane sums (each row's 64 bytes of codes against x̂'s chunk, which is loaded once for the
 * 16), summed pairwise as they come (the tree's first level), their per-block sums (block_sums_m)
 * and the rows' chains, the blocks in order. Prefetch as the int16 decode tiles' per-row rule
 * (quant_i16_avx512.c): rows of up to 1 KiB the same line of the next 16 rows, longer ones 1 KiB
 * ahead in the row. test_quant --bench 65536 1024 1 avx512-mlx on the Zen 5 (2026-12-06, GB/s, 4-bit
 * / 8-bit): the first vector kernel (a window of 32 chunks' lane sums of all n tokens through memory,
 * then the tree; removed in the forty-fifth session: 2 or 3 tokens token by token through this ran
 * a Qwen3-0.6B-dims 4-bit batch decode 1.5-1.6x faster) 13.4 / 13.6; this 27 / 33 -> 31 / 37-41
 * with the pairwise first level; 4096 bytes ahead in each row
 * 32-33 / 18-20; the next 16 rows in byte order, 16 lines a chunk: 24-26 / 26-28; no software
 * prefetch: 4; bf16 parameters in one transpose (params_bf16) 34 / 40.7 -> 38 / 43.3. In L2 it is
 * bound by its work: the block tree and the parameter transposes cost ~20-25% each. */
static inline __attribute__((always_inline)) I8_TGT void rows_one_T(const int BITS, const int A8, const int lpb,
                                                                     const ci_mat *W, int64_t r0, int64_t r1,
                                                                     const uint8_t *xp, float *y, const uint32_t *pt,
                                                                     int n, int t) {
    const lay L = lay_of(W, n);   /* token t of the n the vector layout holds */
    const ci_qdesc *d = q_desc(W);
    const float *D = (const float *)(xp + L.d_at) + t, *X = (const float *)(xp + L.x_at) + t;
    const int16_t *xw = (const int16_t *)(xp + L.q_at) + (int64_t)t * L.nch * L.ch;
    const int64_t rb = L.K * BITS / 8, ch = BITS == 4 ? 128 : 64, pd = rb < 1024 ? rb : 1024;
    const int bpc = 16 / lpb, nv = BITS == 4 ? 4 : 2;
    const int64_t bpg = L.G / L.B;   /* blocks a group */
    const __m512i msk = _mm512_set1_epi16(BITS == 4 ? 0x000f : 0x00ff);
    _Alignas(64) float sv[16][16], bv[16][16];
    _Alignas(64) uint32_t sb[16][16] = { { 0 } };
    const int pairs = d->scale_dtype == CI_BF16 && d->biases;   /* MLX's usual: params_bf16 (or pt) */
    for (int64_t r = r0; r < r1; r += 16) {
        const int nr = (int)(r1 - r < 16 ? r1 - r : 16);
        const uint8_t *w0 = (const uint8_t *)W->data + r * rb;
        /* pt: these 16 rows' params, 16 dwords a group, in place (no window to transpose) */
        const uint32_t *pr = pt && pairs ? pt + (W->scale_row0 + r) * L.ng : NULL;
        if (r + 16 < r1) {
            if (pr)
                for (int64_t o = 0; o < L.ng * 16; o += 16) __builtin_prefetch(pr + 16 * L.ng + o, 0, 3);
            else
                q_pf_next_params(d, (W->scale_row0 + r) * L.ng, L.ng, 16);
        }
        __m512 acc = _mm512_setzero_ps();
        int64_t gcur = -1, g = 0;   /* the block's group, and its place in it: counters, not divisions */
        int64_t bi = 0;
        for (int64_t k = 0; k < L.nch; k++) {
            const int64_t off = 64 * k, left = rb - off;
            const __mmask64 km = left >= 64 ? ~(__mmask64)0 : ((__mmask64)1 << left) - 1;
            const int64_t pf = off + pd + (off + pd < rb ? 0 : 15 * rb);
            const int16_t *xc = xw + k * ch;
            __m512i xv[4], v[16];
            if (A8) {   /* x̂ of the chunk's even and odd columns, a byte each (vpos8) */
                xv[0] = _mm512_load_si512(xc);
                xv[1] = _mm512_load_si512((const int8_t *)xc + 64);
            } else
                for (int m = 0; m < nv; m++) xv[m] = _mm512_load_si512(xc + 32 * m);
            /* rows past nr read row nr - 1 again (their outputs are not stored); each pair of
             * rows' lane vectors is summed pairwise at once (block_sums' first level) */
            _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++) {
                __m512i s2[2];
                _Pragma("GCC unroll 2") for (int h = 0; h < 2; h++) {
                    const int i = 2 * j + h;
                    const uint8_t *p = w0 + (i < nr ? i : nr - 1) * rb;
                    __builtin_prefetch(p + pf, 0, 3);
                    const __m512i cv = _mm512_maskz_loadu_epi8(km, p + off);
                    if (A8) {   /* byte m's low / high nibble: columns 2m / 2m + 1 of the chunk; an int32
                                 * lane sums columns 8i .. 8i + 7, as the words' form does: the same S */
                        const __m512i lo = _mm512_and_si512(cv, _mm512_set1_epi8(0x0f));
                        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(cv, 4), _mm512_set1_epi8(0x0f));
                        s2[h] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo, xv[0]), hi, xv[1]);
                        continue;
                    }
                    __m512i s = _mm512_madd_epi16(_mm512_and_si512(cv, msk), xv[0]);
                    for (int m = 1; m < nv - 1; m++)
                        s = _mm512_dpwssd_epi32(s, _mm512_and_si512(_mm512_srli_epi16(cv, (unsigned)(m * BITS)), msk), xv[m]);
                    /* the word's top code: the shift alone */
                    s2[h] = _mm512_dpwssd_epi32(s, _mm512_srli_epi16(cv, (unsigned)((nv - 1) * BITS)), xv[nv - 1]);
                }
                v[j] = pair_sum(s2[0], s2[1]);
            }
            __m512i Sb[4];
            block_sums_m(v, 8, lpb, Sb);
            for (int bl = 0; bl < bpc; bl++) {
                const int64_t b = k * bpc + bl;
                if (b >= L.nb) break;
                if (!pr && (gcur < 0 || g >= gcur + 16)) {   /* a window of 16 groups' parameters */
                    gcur = g;
                    const int cnt = L.ng - g < 16 ? (int)(L.ng - g) : 16;
                    if (pairs) params_bf16(W, r, nr, g, cnt, sb);
                    else params(W, r, nr, g, cnt, 16, &sv[0][0], &bv[0][0]);
                }
                const __m512i pv = pr ? _mm512_load_si512(pr + 16 * g) : _mm512_load_si512(sb[g - gcur]);
                const __m512 s = pairs ? sb_scale(pv) : _mm512_load_ps(sv[g - gcur]);
                const __m512 sd = _mm512_mul_ps(s, _mm512_set1_ps(D[b * n]));
                acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(Sb[bl]), sd, acc);
                if (++bi == bpg) {   /* the group's last block: its bias term */
                    const __m512 bias = pairs ? sb_bias(pv) : _mm512_load_ps(bv[g - gcur]);
                    acc = _mm512_fmadd_ps(bias, _mm512_set1_ps(X[g * n]), acc);
                    bi = 0;
                    g++;
                }
            }
        }
        _mm512_mask_storeu_ps(y + r, (__mmask16)((1u << nr) - 1), acc);
    }
}

static I8_TGT void rows_one(const ci_mat *W, int64_t r0, int64_t r1, const uint8_t *xp, float *y, const uint32_t *pt,
                            int n, int t, int act8) {
    const int b64 = q_desc(W)->group % 64 == 0;   /* blocks of 64 columns, else 32 (lay_of) */
    if (q_desc(W)->bits == 4 && act8) {
        if (b64) rows_one_T(4, 1, 8, W, r0, r1, xp, y, pt, n, t);
        else rows_one_T(4, 1, 4, W, r0, r1, xp, y, pt, n, t);
    } else if (q_desc(W)->bits == 4) {
        if (b64) rows_one_T(4, 0, 8, W, r0, r1, xp, y, pt, n, t);
        else rows_one_T(4, 0, 4, W, r0, r1, xp, y, pt, n, t);
    } else {
        if (b64) rows_one_T(8, 0, 16, W, r0, r1, xp, y, pt, n, t);
        else rows_one_T(8, 0, 8, W, r0, r1, xp, y, pt, n, t);
    }
}

/* ---- tiles (n > VN_MAX) ----------------------------------------------------------------------- */

/* Tiles 0-3: H / L sums of rows 0-15 and 16-31 (16 x 16 int32); 4, 5: A (16 rows x B code bytes);
 * 6, 7: B (B / 4 rows of 16 tokens x 4 bytes: x̂'s h, then l). */
static inline I8_TGT void cfg_i8(int B) {
    _Alignas(64) amx_cfg c;
    cfg_init(&c);
    c.colsb[4] = c.colsb[5] = (uint16_t)B;
    c.rows[6] = c.rows[7] = (uint8_t)(B / 4);
    cfg_set(&c);
}

/* Rows [r, r + 32) (past r1: zero) at columns [c0, c0 + cn) as one code byte a column into
 * a [32][SEGK]. */
static I8_TGT void fill(const ci_mat *W, int64_t r, int64_t r1, int64_t c0, int64_t cn, int bits, uint8_t *a) {
    const int64_t rb = W->cols * bits / 8;
    for (int i = 0; i < 32; i++) {
        uint8_t *o = a + (int64_t)i * SEGK;
        if (r + i >= r1) {
            memset(o, 0, (size_t)cn);
            continue;
        }
        const uint8_t *p = (const uint8_t *)W->data + (r + i) * rb + c0 * bits / 8;
        if (bits == 8) {
            for (int64_t c = 0; c < cn; c += 64) __builtin_prefetch(p + c + VN_PFD, 0, 3);
            memcpy(o, p, (size_t)cn);
            continue;
        }
        for (int64_t c = 0; c < cn; c += 64) {   /* byte j: columns 2j (low nibble), 2j + 1 */
            if (!(c & 64)) __builtin_prefetch(p + c / 2 + VN_PFD, 0, 3);
            const __m256i cv = cn - c >= 64 ? _mm256_loadu_si256((const __m256i *)(p + c / 2))
                                            : _mm256_maskz_loadu_epi8((__mmask32)0xffff, p + c / 2);   /* the last 32 columns */
            const __m512i w = _mm512_cvtepu8_epi16(cv);
            const __m512i v = _mm512_and_si512(_mm512_or_si512(w, _mm512_slli_epi16(w, 4)), _mm512_set1_epi16(0x0f0f));
            _mm512_storeu_si512(o + c, v);
        }
    }
}

#define SEG_GROUPS (SEGK / 32)

/* A block's sums on the tiles (configured by cfg_i8): the 16 or 32 rows (halves) of codes at a
 * (SEGK bytes a row) against the 16 tokens of x̂'s high bytes h and low bytes l (B / 4 rows of 64
 * bytes, ks apart) into cb[2 half] (H) and cb[2 half + 1] (L), [row][token]. */
static inline __attribute__((always_inline)) I8_TGT void tile_hl(const uint8_t *a, const int8_t *h, const int8_t *l,
                                                                  int64_t ks, int halves, int32_t cb[4][16][16]) {
    _tile_zero(0);
    _tile_loadd(6, h, (long)ks);
    _tile_loadd(4, a, SEGK);
    _tile_dpbusd(0, 4, 6);
    if (l) {   /* NULL: act8, H alone */
        _tile_zero(1);
        _tile_loadd(7, l, (long)ks);
        _tile_dpbusd(1, 4, 7);
    }
    if (halves > 1) {
        _tile_zero(2);
        _tile_loadd(5, a + 16 * SEGK, SEGK);
        _tile_dpbusd(2, 5, 6);
        if (l) {
            _tile_zero(3);
            _tile_dpbusd(3, 5, 7);
        }
    }
    _tile_stored(0, cb[0], 64);
    if (l) _tile_stored(1, cb[1], 64);
    if (halves > 1) {
        _tile_stored(2, cb[2], 64);
        if (l) _tile_stored(3, cb[3], 64);
    }
}

/* What the tiles' two TDPBUSD of a block give, on AVX-512 VNNI (a CPU without AMX-INT8, or
 * CINFER_CPU_MLX_TILES=0): the 16 rows of codes at a (SEGK bytes apart) against the 16 tokens of
 * x̂'s high bytes h and low bytes l (B / 4 groups of 4 columns, ks bytes apart, 4 bytes a token):
 * H[i][t] = sum over the block of q_ij h_tj, L likewise, exact integers as the tiles' (the same
 * products; integer adds in any order). Tokens in lanes, 8 rows' sums in registers at a time: per
 * 4 columns one load of h and of l serves 8 rows, each row's 4 code bytes broadcast (vpdpbusd:
 * codes unsigned, x̂'s bytes signed). Tried and slower (Zen 5, test_quant --bench-gemm 3072 1024 128 1: this 355-362
 * GOP/s): the chain step fused here, each row's accumulators loaded and stored per block (290),
 * or 8 rows' accumulators in registers over the whole segment (310; x̂'s bytes of the segment
 * then come from L2 once per 8 rows); S = 256 H + L formed here and stored once (255-275). */
static inline __attribute__((always_inline)) I8_TGT void vnni_hl(const uint8_t *a, const int8_t *h, const int8_t *l,
                                                                  int64_t ks, int B, int32_t H[16][16], int32_t L[16][16]) {
    for (int i0 = 0; i0 < 16; i0 += 8) {
        __m512i hs[8], ls[8];
        _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) hs[i] = ls[i] = _mm512_setzero_si512();
        for (int k = 0; k < B / 4; k++) {
            const __m512i hv = _mm512_loadu_si512(h + k * ks), lv = l ? _mm512_loadu_si512(l + k * ks) : hv;
            _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) {
                int32_t w;
                memcpy(&w, a + (int64_t)(i0 + i) * SEGK + 4 * k, 4);
                const __m512i av = _mm512_set1_epi32(w);
                hs[i] = _mm512_dpbusd_epi32(hs[i], av, hv);
                if (l) ls[i] = _mm512_dpbusd_epi32(ls[i], av, lv);   /* NULL: act8, H alone */
            }
        }
        _Pragma("GCC unroll 8") for (int i = 0; i < 8; i++) {
            _mm512_store_si512(H[i0 + i], hs[i]);
            if (l) _mm512_store_si512(L[i0 + i], ls[i]);
        }
    }
}

/* params' f32 values for 16 rows (from grid row r, a multiple of 16) and groups [g0, g0 + cnt) out of
 * the copy pt (16 dwords a group: bf16 scale | bias << 16): s[g * stride + i], b[g * stride + i] */
static inline I8_TGT void params_pt(const uint32_t *pt, int64_t ng, int64_t r, int64_t g0, int cnt, int stride, float *s,
                                    float *b) {
    const uint32_t *p = pt + r * ng + 16 * g0;
    for (int g = 0; g < cnt; g++) {
        const __m512i v = _mm512_loadu_si512(p + 16 * g);
        _mm512_storeu_ps(s + (int64_t)g * stride, sb_scale(v));
        _mm512_storeu_ps(b + (int64_t)g * stride, sb_bias(v));
    }
}

static I8_TGT void rows_tiles(const ci_mat *W, int64_t r0, int64_t r1, int t0, int t1, int n, const uint8_t *xp,
                              float *y, uint8_t *pack, int tiles, const uint32_t *pt, int act8) {
    const lay L = lay_of(W, n);
    const float *D = (const float *)(xp + L.d_at), *X = (const float *)(xp + L.x_at);
    const int8_t *hb = (const int8_t *)(xp + L.q_at), *lb = (const int8_t *)(xp + L.l_at);
    const int64_t rows = W->rows, nt_all = t1 - t0;
    uint8_t *abuf = pack;                                  /* [32][SEGK] code bytes */
    float *acc = (float *)(pack + 32 * SEGK);              /* [32][CPU_AMX_TOK] */
    _Alignas(64) int32_t cb[4][16][16];
    _Alignas(64) float sv[SEG_GROUPS][32], bv[SEG_GROUPS][32];
    if (tiles) cfg_i8((int)L.B);
    for (int64_t p0 = r0; p0 < r1; p0 += 32) {
        const int halves = r1 - p0 > 16 ? 2 : 1;
        for (int64_t c0 = 0; c0 < L.K; c0 += SEGK) {
            const int64_t cn = L.K - c0 < SEGK ? L.K - c0 : SEGK;
            fill(W, p0, r1, c0, cn, L.bits, abuf);
            /* the groups this segment touches */
            const int64_t ga = c0 / L.G, gz = (c0 + cn - 1) / L.G;
            for (int h = 0; h < halves; h++)
                if (pt)   /* the copy's 16-row tiles (rows past r1: other rows' params, their outputs not kept) */
                    params_pt(pt, L.ng, W->scale_row0 + p0 + 16 * h, ga, (int)(gz + 1 - ga), 32, &sv[0][16 * h], &bv[0][16 * h]);
                else
                    for (int64_t g = ga; g <= gz; g += 16)
                        params(W, p0 + 16 * h, (int)(r1 - p0 - 16 * h < 16 ? r1 - p0 - 16 * h : 16), g,
                               gz + 1 - g < 16 ? (int)(gz + 1 - g) : 16, 32, &sv[g - ga][16 * h], &bv[g - ga][16 * h]);
            for (int tb = t0; tb < t1; tb += 16) {
                for (int64_t b = c0 / L.B; b < (c0 + cn) / L.B; b++) {
                    const int64_t cb0 = b * L.B, g = cb0 / L.G;
                    const int8_t *hp = hb + ((cb0 >> 2) * L.np + tb) * 4, *lp = lb + ((cb0 >> 2) * L.np + tb) * 4;
                    if (tiles) {
                        if (act8) tile_hl(abuf + (cb0 - c0), hp, NULL, L.np * 4, halves, cb);
                        else tile_hl(abuf + (cb0 - c0), hp, lp, L.np * 4, halves, cb);
                    } else {
                        for (int h = 0; h < halves; h++)
                            if (act8) vnni_hl(abuf + 16 * h * SEGK + (cb0 - c0), hp, NULL, L.np * 4, (int)L.B, cb[2 * h], NULL);
                            else vnni_hl(abuf + 16 * h * SEGK + (cb0 - c0), hp, lp, L.np * 4, (int)L.B, cb[2 * h], cb[2 * h + 1]);
                    }
                    const int gend = ((b + 1) * L.B) % L.G == 0;
                    const __m512 dv = _mm512_loadu_ps(D + b * L.np + tb);
                    const __m512 xg = _mm512_loadu_ps(X + g * L.np + tb);
                    const int nrr = (int)(r1 - p0 < 32 ? r1 - p0 : 32);
                    for (int i = 0; i < nrr; i++) {
                        const int h = i >> 4, ii = i & 15;
                        const __m512i S = act8 ? _mm512_load_si512(cb[2 * h][ii])
                                               : _mm512_add_epi32(_mm512_slli_epi32(_mm512_load_si512(cb[2 * h][ii]), 8),
                                                                  _mm512_load_si512(cb[2 * h + 1][ii]));
                        float *ap = acc + (int64_t)i * CPU_AMX_TOK + (tb - t0);
                        __m512 a = b == 0 ? _mm512_setzero_ps() : _mm512_load_ps(ap);
                        a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(S), _mm512_mul_ps(_mm512_set1_ps(sv[g - ga][i]), dv), a);
                        if (gend) a = _mm512_fmadd_ps(_mm512_set1_ps(bv[g - ga][i]), xg, a);
                        _mm512_store_ps(ap, a);
                    }
                }
            }
        }
        /* the sums [row][token] into y [token][row], 16 x 16 at a time */
        const int nrr = (int)(r1 - p0 < 32 ? r1 - p0 : 32);
        for (int h = 0; h * 16 < nrr; h++) {
            const int nr = nrr - 16 * h < 16 ? nrr - 16 * h : 16;
            const __mmask16 om = (__mmask16)((1u << nr) - 1);
            for (int tb = 0; tb < nt_all; tb += 16) {
                const int nt = nt_all - tb < 16 ? (int)(nt_all - tb) : 16;
                __m512i v[16];
                _Alignas(64) uint32_t o[256];
                for (int i = 0; i < 16; i++)
                    v[i] = i < nr ? _mm512_load_si512(acc + (int64_t)(16 * h + i) * CPU_AMX_TOK + tb) : _mm512_setzero_si512();
                tr16(v, o);   /* o[16 t + i] = token t of row i */
                for (int t = 0; t < nt; t++)
                    _mm512_mask_storeu_ps(y + (int64_t)(t0 + tb + t) * rows + p0 + 16 * h, om, _mm512_load_ps((const float *)o + 16 * t));
            }
        }
    }
    if (tiles) _tile_release();
}

void amx_mlx_rows(const ci_mat *W, int64_t r0, int64_t r1, int t0, int t1, int n, const void *xp, float *y, void *pack,
                  int tiles, const uint32_t *pt, int act8) {
    if (pt && (W->scale_row0 + r0) % 16) pt = NULL;   /* its tiles start at grid rows 16 k */
    if (n <= VN_MAX)   /* token by token: the item's rows are in L2 for the second and third */
        for (int t = 0; t < n; t++) rows_one(W, r0, r1, xp, y + (int64_t)t * W->rows, pt, n, t, act8);
    else rows_tiles(W, r0, r1, t0, t1, n, xp, y, pack, tiles, pt, act8);
}

#else
typedef int amx_mlx_unused;   /* keeps the translation unit non-empty */
#endif
