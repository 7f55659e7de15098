/* quant_i16.h — what the int16-activation kernels of every ISA share (internal to
 * src/backend/cpu; included by quant_i16_avx512.c and quant_i16_avx2.c, which state the math):
 * the layout of a prepared token row, which W they take, and the preparation itself.
 *
 * The including file defines TGT, I16_LANES (32-bit lanes of its vectors: 16 or 8) and
 *   static inline TGT float i16_block(const float *x, int32_t q[32])
 * which rounds the 32 values at x to q = nearest-even(x / d), d = max|x| / 32767 (q all 0 for
 * a zero block), and returns d, or NaN when the block holds an infinity or a NaN.
 *
 * A chunk is CW = 8 (4-bit) or 4 (8-bit) columns per lane, i.e. the columns whose codes fill
 * one vector; its nv = 4 or 2 vectors of 2 * I16_LANES words hold x̂ in the order the codes
 * come out of their 16-bit words (4-bit: nibble n of word w is column 4w + n; 8-bit: byte n
 * of word w is column 2w + n), so lane i of a chunk's dot covers columns i * CW / I16_LANES
 * onwards: one 32-column block, one group. Layout of a prepared row (stride bytes, at a
 * 64-byte-aligned address):
 *   [0, 2 Cp)       x̂ (int16) chunk after chunk; Cp = cols rounded up to CW, zero past cols
 *   then I16_LANES f32 per chunk: d of the block each lane falls in
 *   then ngw f32: the group sums of x̃ = d x̂ (ng rounded up to I16_LANES, zero past ng) */
#ifndef CI_QUANT_I16_H
#define CI_QUANT_I16_H
#include "quant_kernels.h"

typedef struct {
    int64_t cw, cp, nch, ng, ngw, stride;
    int lg;   /* log2 of the group size */
} i16_layout;

/* Shifts and masks only: a decode tile computes this for every 4 rows. */
static inline i16_layout i16_lay(const ci_mat *W) {
    i16_layout l;
    const ci_qdesc *d = q_desc(W);
    l.cw = (d->bits == 4 ? 8 : 4) * I16_LANES;
    l.lg = __builtin_ctz((unsigned)d->group);
    l.cp = (W->cols + l.cw - 1) & ~(l.cw - 1);
    l.nch = l.cp / l.cw;
    l.ng = W->cols >> l.lg;
    l.ngw = (l.ng + I16_LANES - 1) & ~(int64_t)(I16_LANES - 1);
    l.stride = (2 * l.cp + 4 * I16_LANES * l.nch + 4 * l.ngw + 63) & ~(int64_t)63;
    return l;
}

/* Affine 4- or 8-bit with a power-of-two group of at least 32 columns (MLX's 32, 64, 128):
 * a chunk then holds whole groups or lies in one, and never straddles a window of
 * I16_LANES groups' scales. */
static int i16_ok(const ci_mat *W) {
    if (W->dtype != CI_U32 || !W->scale) return 0;
    const ci_qdesc *d = q_desc(W);
    if (d->mode != CI_Q_AFFINE || (d->bits != 4 && d->bits != 8)) return 0;
    if (d->scale_dtype != CI_F32 && d->scale_dtype != CI_BF16 && d->scale_dtype != CI_F16) return 0;
    int64_t G = d->group;
    return G >= 32 && (G & (G - 1)) == 0 && W->cols % G == 0;
}

static int64_t i16_stride(const ci_mat *W) { return i16_lay(W).stride; }

/* Where column j's word lies: column o of its chunk is word o / nv of vector o % nv (nv = 4
 * or 2 vectors a chunk, lnv its log2: shifts, not divisions, for every column of a prep). */
static inline int64_t xpos(int64_t j, int64_t cw, int lnv) {
    int64_t k = j & ~(cw - 1), o = j - k;
    return k + (o & ((1 << lnv) - 1)) * (2 * I16_LANES) + (o >> lnv);
}

/* One token row x (W->cols floats) into its prepared form at xq (stride bytes). Groups
 * divide cols and are multiples of 32, so every block is whole. A block holding an infinity
 * or a NaN gets d = NaN, so the outputs it feeds are NaN as on the f32 path. */
static TGT void i16_prep(const ci_mat *W, const float *x, uint8_t *xq) {
    const i16_layout l = i16_lay(W);
    const int64_t cols = W->cols, G = q_desc(W)->group, lpb = 32 * I16_LANES / l.cw;   /* lanes a block */
    const int lnv = q_desc(W)->bits == 4 ? 2 : 1;   /* log2 of the vectors a chunk: cw / (2 I16_LANES) */
    int16_t *xb = (int16_t *)xq;
    float *dl = (float *)(xq + 2 * l.cp), *xg = dl + I16_LANES * l.nch;
    memset(xq, 0, (size_t)l.stride);
    float gs = 0;   /* the current group's sum of x̃ */
    for (int64_t c0 = 0; c0 < cols; c0 += 32) {
        int32_t q[32], is = 0;
        const float d = i16_block(x + c0, q);
        for (int j = 0; j < 32; j++) {
            xb[xpos(c0 + j, l.cw, lnv)] = (int16_t)q[j];
            is += q[j];
        }
        const int64_t ch = c0 / l.cw, i0 = (c0 % l.cw) / 32 * lpb;
        for (int64_t i = i0; i < i0 + lpb; i++) dl[I16_LANES * ch + i] = d;
        gs += d * (float)is;   /* x̃'s group sums: per block d times its exact integer sum, in order */
        if ((c0 + 32) % G == 0) {
            xg[c0 / G] = gs;
            gs = 0;
        }
    }
}

#endif
