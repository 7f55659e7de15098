/* quant_kernels.h — shared pieces of the MLX-quantized kernels (internal to src/backend/cpu).
 *
 * What a quantized ci_mat holds (dtype CI_U32, scale -> ci_qdesc) is stated in backend.h;
 * this header has the scalar decoding
 * every kernel set agrees on: the code of element c of a row (a little-endian bit stream),
 * the per-group scale and bias as f32, E8M0 and E2M1 values, and the tables the SIMD sets
 * use to unpack VL codes with one byte shuffle and one variable shift. Invariants: codes
 * are read with exact-size loads (never past the row's last byte, so the last row of a
 * mapped tensor is safe); groups are whole multiples of 32 columns, so every SIMD step of
 * 8 or 16 columns lies inside one group and starts on a byte boundary. */
#ifndef CI_QUANT_KERNELS_H
#define CI_QUANT_KERNELS_H
#include "cpu_kernels.h"
#include <math.h>
#include <string.h>

/* E2M1 (mxfp4) code -> value: sign bit 3, magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6. */
extern const float cpu_e2m1_value[16];
/* SIMD unpack tables for bits b (2..8): 32-bit lane j of a vector of codes starting on a
 * byte boundary takes bytes o_j, o_j+1 (o_j = j*b/8) into its low half (pshufb control,
 * 0x80 = zero), then shifts right by j*b % 8 and masks to b bits. 16 lanes (AVX-512); AVX2
 * uses the first 8 (its two 128-bit halves each hold a copy of the first 8 bytes). */
extern _Alignas(64) uint8_t cpu_q_ctrl[9][64];
extern _Alignas(64) uint32_t cpu_q_shift[9][16];

static inline const ci_qdesc *q_desc(const ci_mat *W) { return (const ci_qdesc *)W->scale; }
/* Bytes of one packed row. */
static inline int64_t q_row_bytes(const ci_mat *W) { return W->cols * q_desc(W)->bits / 8; }
/* Index of the scale of (view row r, column c). */
static inline int64_t q_gidx(const ci_mat *W, int64_t r, int64_t c) {
    int G = q_desc(W)->group;
    return (W->scale_row0 + r) * (W->cols / G) + c / G;
}

/* MLX's E8M0 decoding: 2^(b-127); b = 0 is 2^-127 and b = 255 is +inf (as MLX's bf16 trick). */
static inline float q_e8m0(uint8_t b) {
    union { uint32_t u; float f; } v;
    v.u = b == 0 ? 0x00400000u : b == 0xff ? 0x7f800000u : (uint32_t)b << 23;
    return v.f;
}

/* Scale (or bias) number i of p (the descriptor's scales or biases) as f32. Loads go
 * through memcpy: a safetensors file may place a BF16 tensor at an odd offset (after an
 * odd-sized U8 scale tensor), and a misaligned typed load is undefined behaviour. */
static inline float q_param(const ci_qdesc *d, const void *p, int64_t i) {
    uint16_t h;
    float f;
    switch (d->scale_dtype) {
    case CI_BF16: memcpy(&h, (const char *)p + 2 * i, 2); return ci_bf16_to_f32(h);
    case CI_F16: memcpy(&h, (const char *)p + 2 * i, 2); return ci_f16_to_f32(h);
    case CI_F32: memcpy(&f, (const char *)p + 4 * i, 4); return f;
    default: return q_e8m0(((const uint8_t *)p)[i]);   /* F8_E8M0 / U8 */
    }
}

/* Code of element c of a row's bit stream: reads the second byte only when the code
 * crosses into it. */
static inline unsigned q_code(const uint8_t *row, int64_t c, int bits) {
    int64_t bit = c * bits;
    const uint8_t *p = row + (bit >> 3);
    int sh = (int)(bit & 7);
    unsigned v = (unsigned)p[0] >> sh;
    if (sh + bits > 8) v |= (unsigned)p[1] << (8 - sh);
    return v & ((1u << bits) - 1u);
}

/* Element c of view row r (packed codes at row) as f32: the definition every kernel must
 * agree with. */
static inline float q_value(const ci_mat *W, const uint8_t *row, int64_t r, int64_t c) {
    const ci_qdesc *d = q_desc(W);
    int64_t gi = q_gidx(W, r, c);
    float s = q_param(d, d->scales, gi);
    unsigned q = q_code(row, c, d->bits);
    switch (d->mode) {
    case CI_Q_AFFINE: return s * (float)q + q_param(d, d->biases, gi);
    case CI_Q_MXFP4: return s * cpu_e2m1_value[q];
    case CI_Q_MXFP8: return s * cpu_fp8_lut[q];
    default: return NAN;
    }
}

/* Exact-size little-endian loads of nb (compile-time) bytes into a u64. */
static inline uint64_t q_ld(const uint8_t *p, const int nb) {
    uint8_t b1;
    uint16_t b2;
    uint32_t b4;
    uint64_t b8;
    switch (nb) {
    case 1: memcpy(&b1, p, 1); return b1;
    case 2: memcpy(&b2, p, 2); return b2;
    case 3: memcpy(&b2, p, 2); memcpy(&b1, p + 2, 1); return b2 | (uint64_t)b1 << 16;
    case 4: memcpy(&b4, p, 4); return b4;
    case 5: memcpy(&b4, p, 4); memcpy(&b1, p + 4, 1); return b4 | (uint64_t)b1 << 32;
    case 6: memcpy(&b4, p, 4); memcpy(&b2, p + 4, 2); return b4 | (uint64_t)b2 << 32;
    default: memcpy(&b8, p, 8); return b8;
    }
}

/* Prefetch of the next decode tile's group parameters (the AVX-512 4- / 8-bit tiles, on AMD CPUs:
 * cpu_pf_next_tile, as the next-tile rule of the codes; the AVX2 tiles, slower, were level with it:
 * 151936 x 2048 int16 15.3-15.4 vs 15.6-15.7, split 10.0-10.1 vs 9.5-10.5; amx_mlx.c's vector kernel,
 * tiles of 16 rows, on every CPU). A tile of `rows` consecutive rows whose first row's groups start
 * at parameter g0 (ng a row) reads scales / biases g0 .. g0 + rows ng; the next tile's, up to
 * g0 + 2 rows ng, follow them. They are streams of their own beside the
 * codes, and the hardware prefetcher follows several streams badly on the Zen 5: these lines came
 * from DRAM on demand (short rows) or a row's 16 groups at a time (long rows). test_quant --bench
 * on the Zen 5 (2026-12-04, GB/s, three rounds): int16 4-bit 151936 x 2048 16.2-20.9 -> 25.8-30.4,
 * 65536 x 1024 16.6-20.1 -> 22.2-28.6, 32768 x 4096 13.3-17.5 -> 19.5-27.2, 16384 x 8192
 * 11.2-12.8 -> 19.8-23.8; two threads 151936 x 2048 30.8-41.5 -> 43.9-63.6; the split (exact) tile
 * 151936 x 2048 15.3-15.8 -> 19.2-20.7, 32768 x 4096 12.3-16.4 -> 18.5-19.0. */
static inline void q_pf_next_params(const ci_qdesc *d, int64_t g0, int64_t ng, int rows) {
    const int es = d->scale_dtype == CI_F32 ? 4 : d->scale_dtype == CI_F16 || d->scale_dtype == CI_BF16 ? 2 : 1;
    const int64_t o1 = (g0 + 2 * rows * ng) * es;
    for (int64_t o = ((g0 + rows * ng) * es) & ~(int64_t)63; o < o1; o += 64) {
        __builtin_prefetch((const uint8_t *)d->scales + o, 0, 3);
        if (d->biases) __builtin_prefetch((const uint8_t *)d->biases + o, 0, 3);
    }
}

#endif
