/* quant.cuh — decoding MLX-quantized weights on the device (quant.cu, mla.cu): what a
 * ci_mat of dtype CI_U32 holds (backend.h: a little-endian bit stream of `bits`-bit codes
 * per row, a scale and, affine, a bias per `group` columns) read in registers.
 *
 * The rule is the CPU's (src/backend/cpu/quant_kernels.h, q_value): affine w = s·q + b (one
 * fused multiply-add, as the CPU's SIMD kernels), mxfp4 w = s·e2m1(q), mxfp8 w = s·e4m3(q);
 * E8M0 scale byte e is 2^(e-127), 0 is 2^-127 and 255 is +inf. Groups are 32, 64 or 128
 * columns, so a chunk of 32 columns (the unit every kernel decodes) lies in one group and
 * starts on a 4-byte boundary of its row (32·bits bits = bits words): q_chunk loads exactly
 * the chunk's `bits` words, never past the row. Rows start 4-byte aligned when the view does
 * (rows are (cols / 32)·4·bits bytes long); the launchers check the view. */
#ifndef CI_CUDA_QUANT_CUH
#define CI_CUDA_QUANT_CUH
#include "loaders.cuh"   /* warp_sum */
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

/* a 16-byte read-only load that does not stay in L1 (weights are read once per call) */
__device__ __forceinline__ uint4 ld_nc_u4(const uint4 *p) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

struct cb_qm {               /* one quantized matrix as the kernels read it, in its stored layout */
    const uint8_t *codes;    /* row 0 of the view */
    const void *scales, *biases;
    int64_t rows, cols;      /* stored rows and columns */
    int64_t srow0;           /* the view's first row in the scale grid */
    int mode, bits, group, sd;   /* mode: ci_qmode; sd: 0 f32, 1 f16, 2 bf16, 3 e8m0 */
    int aloop;               /* q_chunk: 1 affine codes in their own loop (CINFER_CUDA_Q_AFFINE_LOOP) */
    int fploop;              /* q_chunk: 1 mxfp4 / mxfp8 codes in loops of their own (CINFER_CUDA_Q_FP_LOOP) */
};

/* an E8M0 scale byte as MLX reads it: 2^(e - 127), 0 -> 2^-127, 255 -> inf */
__device__ __forceinline__ float q_e8m0(unsigned e) {
    return __uint_as_float(e == 0 ? 0x00400000u : e == 255 ? 0x7f800000u : e << 23);
}

__device__ __forceinline__ float q_param(const void *p, int sd, int64_t i) {
    if (sd == 0) return __ldg((const float *)p + i);
    if (sd == 1) return __half2float(__ldg((const __half *)p + i));
    if (sd == 2) return __uint_as_float((unsigned)__ldg((const unsigned short *)p + i) << 16);
    return q_e8m0(__ldg((const unsigned char *)p + i));
}

/* E2M1: sign bit 3, exponent bits 2..1, mantissa bit 0; magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6. */
__device__ __forceinline__ float q_e2m1(unsigned q) {
    const unsigned e = (q >> 1) & 3u, m = q & 1u, sign = (q & 8u) << 28;
    const unsigned mag = e ? ((e + 126u) << 23) | (m << 22) : (m ? 0x3f000000u : 0u);
    return __uint_as_float(sign | mag);
}

__device__ __forceinline__ float q_e4m3(unsigned q) {
    __half_raw h = __nv_cvt_fp8_to_halfraw((__nv_fp8_storage_t)q, __NV_E4M3);
    return __half2float(*(__half *)&h);
}

/* (float)q for a code q < 2^23 without I2F: q in the mantissa of 2^23, minus 2^23; exact, so
 * the same value. */
__device__ __forceinline__ float q_u2f(unsigned q) { return __uint_as_float(0x4B000000u | q) - 8388608.0f; }

/* log2 of a group size (32, 64 or 128: cb_q_ok) */
__device__ __forceinline__ int q_gshift(int group) { return group == 32 ? 5 : group == 64 ? 6 : 7; }

__device__ __forceinline__ float q_apply(int mode, unsigned q, float s, float b) {
    if (mode == 1) return fmaf(s, q_u2f(q), b);      /* CI_Q_AFFINE */
    if (mode == 2) return s * q_e2m1(q);             /* CI_Q_MXFP4 */
    return s * q_e4m3(q);                            /* CI_Q_MXFP8 */
}

/* Code i (< 32) of a 32-code chunk packed LSB first in u[BITS] (one may straddle two words). */
template <int BITS>
__device__ __forceinline__ unsigned q_code_at(const uint32_t *u, int i) {
    const int bit = i * BITS, k = bit >> 5, sh = bit & 31;
    unsigned v = u[k] >> sh;
    if (sh + BITS > 32) v |= u[k + 1] << (32 - sh);
    return v & ((1u << BITS) - 1u);
}

/* w[0..32) = stored row r, columns [c0, c0 + 32) (c0 a multiple of 32) as f32. */
template <int BITS>
__device__ __forceinline__ void q_chunk(const cb_qm &m, int64_t r, int64_t c0, float *w) {
    /* Two forms of the same arithmetic (cb_qm.aloop, cb_q_aloop() in quant.cu). aloop = 1, the
     * default: offsets by division (loop-invariant but for c0 / group), affine codes decoded in
     * their own loop with I2F; aloop = 0: offsets by 32-bit shifts (cols < 2^31 and group a
     * power of two: cb_q_ok), q_u2f instead of I2F, and q_apply's mode test per element.
     * Measured on the H200 (2026-12-02, mlx4 Qwen3-30B-A3B dims, 12 layers, decode after 512
     * tokens, alternating, 2 rounds): 463.9 / 461.1 tok/s with 1 against 389.6 / 390.3 with 0
     * (the code before both, 383 the same day): the per-element mode test was the cost. */
    const int gsh = q_gshift(m.group);
    const uint32_t cpr = (uint32_t)m.cols >> 5, gpr = (uint32_t)m.cols >> gsh, ci = (uint32_t)c0 >> 5;
    const uint32_t *p = m.aloop ? (const uint32_t *)(m.codes + r * (m.cols / 32) * 4 * BITS + (c0 / 32) * 4 * BITS)
                                 : (const uint32_t *)(m.codes + ((uint64_t)r * cpr + ci) * (4 * BITS));
    uint32_t u[BITS];
    bool vec = false;
    if constexpr (BITS % 4 == 0) vec = ((uintptr_t)p & 15) == 0;   /* 4 / 8 bits: 16-byte loads */
    if (vec) {
#pragma unroll
        for (int j = 0; j < BITS; j += 4) {
            const uint4 v = __ldg((const uint4 *)p + j / 4);
            u[j] = v.x; u[j + 1] = v.y; u[j + 2] = v.z; u[j + 3] = v.w;
        }
    } else {
#pragma unroll
        for (int j = 0; j < BITS; j++) u[j] = __ldg(p + j);
    }
    const int64_t gi = m.aloop ? (m.srow0 + r) * (m.cols / m.group) + c0 / m.group
                                : (m.srow0 + r) * (int64_t)gpr + ((uint32_t)c0 >> gsh);
    const float s = q_param(m.scales, m.sd, gi);
    const float b = m.mode == 1 ? q_param(m.biases, m.sd, gi) : 0.0f;
    if (m.aloop && m.mode == 1) {   /* affine: no per-element mode test (measured faster) */
#pragma unroll
        for (int i = 0; i < 32; i++) {
            w[i] = fmaf(s, (float)q_code_at<BITS>(u, i), b);
        }
        return;
    }
    if (m.fploop && m.mode != 1) {   /* mxfp4 / mxfp8 without the per-element mode test */
        if (m.mode == 2) {
#pragma unroll
            for (int i = 0; i < 32; i++) {
                w[i] = s * q_e2m1(q_code_at<BITS>(u, i));
            }
        } else {
#pragma unroll
            for (int i = 0; i < 32; i++) {
                w[i] = s * q_e4m3(q_code_at<BITS>(u, i));
            }
        }
        return;
    }
#pragma unroll
    for (int i = 0; i < 32; i++) {
        w[i] = q_apply(m.mode, q_code_at<BITS>(u, i), s, b);
    }
}

/* One element (stored row r, column c): byte loads, reading the second byte only when the
 * code crosses into it (the CPU's q_code). */
__device__ __forceinline__ float q_elem(const cb_qm &m, int64_t r, int64_t c) {
    const uint8_t *row = m.codes + r * (m.cols * m.bits / 8);
    const int64_t bit = c * m.bits;
    const int sh = (int)(bit & 7);
    unsigned v = (unsigned)__ldg(row + (bit >> 3)) >> sh;
    if (sh + m.bits > 8) v |= (unsigned)__ldg(row + (bit >> 3) + 1) << (8 - sh);
    v &= (1u << m.bits) - 1u;
    const int gsh = q_gshift(m.group);
    const int64_t gi = (m.srow0 + r) * (int64_t)((uint32_t)m.cols >> gsh) + ((uint32_t)c >> gsh);
    return q_apply(m.mode, v, q_param(m.scales, m.sd, gi), m.mode == 1 ? q_param(m.biases, m.sd, gi) : 0.0f);
}

/* This lane's share of stored row r · x rows [0, n) (acc[t] += ...), x rows xs floats apart:
 * 16-byte loads when x is 16-byte aligned (chunks start at multiples of 32 floats). */
/* QN: the most token rows a caller passes (acc holds QN sums). */
template <int BITS, int QN>
__device__ __forceinline__ void q_row_dot(const cb_qm &m, int64_t r, const float *x, int64_t xs, int n, int lane,
                                          float *acc) {
    const bool al = ((uintptr_t)x & 15) == 0 && (xs & 3) == 0;
    for (int64_t c0 = (int64_t)lane * 32; c0 < m.cols; c0 += 32 * 32) {
        float w[32];
        q_chunk<BITS>(m, r, c0, w);
#pragma unroll
        for (int t = 0; t < QN; t++) {
            if (t >= n) break;
            const float *xr = x + t * xs + c0;
            float s = 0.0f;
            if (al) {
#pragma unroll
                for (int q = 0; q < 8; q++) {
                    const float4 v = __ldg((const float4 *)xr + q);
                    s = fmaf(w[4 * q], v.x, s);
                    s = fmaf(w[4 * q + 1], v.y, s);
                    s = fmaf(w[4 * q + 2], v.z, s);
                    s = fmaf(w[4 * q + 3], v.w, s);
                }
            } else {
#pragma unroll
                for (int i = 0; i < 32; i++) s = fmaf(w[i], __ldg(xr + i), s);
            }
            acc[t] += s;
        }
    }
}

/* 32 floats of x at p (16-byte loads when al) */
__device__ __forceinline__ void q_load_x32(const float *p, bool al, float *xv) {
    if (al) {
#pragma unroll
        for (int q = 0; q < 8; q++) {
            const float4 v = __ldg((const float4 *)p + q);
            xv[4 * q] = v.x; xv[4 * q + 1] = v.y; xv[4 * q + 2] = v.z; xv[4 * q + 3] = v.w;
        }
    } else {
#pragma unroll
        for (int i = 0; i < 32; i++) xv[i] = __ldg(p + i);
    }
}

/* Two stored rows (ra of ma, rb of mb; the same cols) · one x row, each x chunk loaded once
 * for both (a one-row dot loads 8 x vectors per 16 bytes of 4-bit codes): this lane's shares
 * into *acc_a, *acc_b, each summed in q_row_dot's order (the same bits). */
template <int BITS>
__device__ __forceinline__ void q_row_dot_pair(const cb_qm &ma, int64_t ra, const cb_qm &mb, int64_t rb, const float *x,
                                               int lane, float *acc_a, float *acc_b) {
    const bool al = ((uintptr_t)x & 15) == 0;
    for (int64_t c0 = (int64_t)lane * 32; c0 < ma.cols; c0 += 32 * 32) {
        float xv[32], w[32];
        q_load_x32(x + c0, al, xv);
        q_chunk<BITS>(ma, ra, c0, w);
        float s = 0.0f;
#pragma unroll
        for (int i = 0; i < 32; i++) s = fmaf(w[i], xv[i], s);
        *acc_a += s;
        q_chunk<BITS>(mb, rb, c0, w);
        s = 0.0f;
#pragma unroll
        for (int i = 0; i < 32; i++) s = fmaf(w[i], xv[i], s);
        *acc_b += s;
    }
}

/* ---- rows resolved once (the qmv kernels of quant.cu / quant_moe.cu and the widening) --------
 * A row's codes and the addresses of its first scale and bias, computed once per row (one
 * 64-bit multiply) instead of per chunk; chunk c (32 columns) is then BITS words at
 * codes + c·BITS and its scale / bias the (32c >> gsh)-th element after sp / bp. The decode
 * parameters (q_kind: mode, group shift, scale type) are the same for every row a kernel
 * resolves (the launchers check), so they are not per row. */
struct q_kind {
    int gsh, sd, mode;
};
struct q_row {
    const uint32_t *codes;
    const char *sp, *bp;     /* the row's first scale and bias (bp: sp when there is no bias) */
};

__device__ __forceinline__ q_kind q_kind_of(const cb_qm &m) {
    q_kind k;
    k.gsh = q_gshift(m.group);
    k.sd = m.sd;
    k.mode = m.mode;
    return k;
}

__device__ __forceinline__ int q_param_size(int sd) { return sd == 0 ? 4 : sd == 3 ? 1 : 2; }

template <int BITS>
__device__ __forceinline__ q_row q_row_of(const cb_qm &m, int64_t r) {
    q_row q;
    const int gsh = q_gshift(m.group), es = q_param_size(m.sd);
    const int64_t g0 = (m.srow0 + r) * (m.cols >> gsh);
    q.codes = (const uint32_t *)m.codes + r * ((m.cols >> 5) * BITS);
    q.sp = (const char *)m.scales + g0 * es;
    q.bp = m.mode == 1 ? (const char *)m.biases + g0 * es : q.sp;
    return q;
}

/* chunk c's BITS code words into u (16-byte loads when vec: 4 / 8 bits and 16-byte aligned
 * codes), its scale and bias into *s, *b */
template <int BITS>
__device__ __forceinline__ void q_row_load(const q_row &q, const q_kind &k, bool vec, uint32_t c, uint32_t *u, float *s,
                                           float *b) {
    const uint32_t *p = q.codes + (size_t)c * BITS;
    if (BITS % 4 == 0 && vec) {
#pragma unroll
        for (int j = 0; j < BITS; j += 4) {
            const uint4 v = ld_nc_u4((const uint4 *)p + j / 4);
            u[j] = v.x; u[j + 1] = v.y; u[j + 2] = v.z; u[j + 3] = v.w;
        }
    } else {
#pragma unroll
        for (int j = 0; j < BITS; j++) u[j] = __ldg(p + j);
    }
    const int gi = (int)((c << 5) >> k.gsh);
    *s = q_param(q.sp, k.sd, gi);
    *b = k.mode == 1 ? q_param(q.bp, k.sd, gi) : 0.0f;
}

/* the 32 weights of a loaded chunk (the same values as q_chunk: s·q + b fused, s·e2m1, s·e4m3);
 * the mode is tested once per chunk */
template <int BITS>
__device__ __forceinline__ void q_decode(const uint32_t *u, int mode, float s, float b, float *w) {
    if (mode == 1) {
#pragma unroll
        for (int i = 0; i < 32; i++) w[i] = fmaf(s, q_u2f(q_code_at<BITS>(u, i)), b);
    } else if (mode == 2) {
#pragma unroll
        for (int i = 0; i < 32; i++) w[i] = s * q_e2m1(q_code_at<BITS>(u, i));
    } else {
#pragma unroll
        for (int i = 0; i < 32; i++) w[i] = s * q_e4m3(q_code_at<BITS>(u, i));
    }
}

/* Σ_i w_i · xv[i] over a loaded chunk, in two interleaved partial sums (i even, i odd) added
 * at the end */
template <int BITS>
__device__ __forceinline__ float q_dot32(const uint32_t *u, int mode, float s, float b, const float *xv) {
    float d0 = 0.0f, d1 = 0.0f;
    if (mode == 1) {
#pragma unroll
        for (int i = 0; i < 32; i += 2) {
            d0 = fmaf(fmaf(s, q_u2f(q_code_at<BITS>(u, i)), b), xv[i], d0);
            d1 = fmaf(fmaf(s, q_u2f(q_code_at<BITS>(u, i + 1)), b), xv[i + 1], d1);
        }
    } else {
        float w[32];
        q_decode<BITS>(u, mode, s, b, w);
#pragma unroll
        for (int i = 0; i < 32; i += 2) {
            d0 = fmaf(w[i], xv[i], d0);
            d1 = fmaf(w[i + 1], xv[i + 1], d1);
        }
    }
    return d0 + d1;
}

/* 32 decoded weights stored at d: f16 (rounded to nearest even, saturated) or f32, in 16-byte
 * stores when d is 16-byte aligned */
template <typename T>
__device__ __forceinline__ void q_store32(T *d, const float *w) {
    if constexpr (sizeof(T) == 4) {
        if (((uintptr_t)d & 15) == 0) {
#pragma unroll
            for (int q = 0; q < 8; q++) ((float4 *)d)[q] = make_float4(w[4 * q], w[4 * q + 1], w[4 * q + 2], w[4 * q + 3]);
        } else {
#pragma unroll
            for (int i = 0; i < 32; i++) d[i] = w[i];
        }
    } else {
        unsigned h[16];
#pragma unroll
        for (int i = 0; i < 16; i++) {
            const __half2 v = __floats2half2_rn(f16_sat(w[2 * i]), f16_sat(w[2 * i + 1]));
            h[i] = *(const unsigned *)&v;
        }
        if (((uintptr_t)d & 15) == 0) {
#pragma unroll
            for (int q = 0; q < 4; q++) ((uint4 *)d)[q] = make_uint4(h[4 * q], h[4 * q + 1], h[4 * q + 2], h[4 * q + 3]);
        } else {
#pragma unroll
            for (int i = 0; i < 16; i++) ((unsigned *)d)[i] = h[i];   /* 4-byte aligned: chunks are 64 bytes */
        }
    }
}

/* chunk c of stored row r decoded and stored at dst (the row's first element) + 32c: the
 * widening of quant.cu / quant_moe.cu, one call per chunk */
template <int BITS, typename T>
__device__ __forceinline__ void q_widen_chunk(const cb_qm &m, const q_kind &kd, int64_t r, uint32_t c, T *dst) {
    const q_row q = q_row_of<BITS>(m, r);
    uint32_t u[BITS];
    float s, b, w[32];
    q_row_load<BITS>(q, kd, BITS % 4 == 0 && ((uintptr_t)q.codes & 15) == 0, c, u, &s, &b);
    q_decode<BITS>(u, kd.mode, s, b, w);
    q_store32(dst + (size_t)c * 32, w);
}

/* The stored matrix of a U32 view, rows and cols as the view gives them (quant.cu; include
 * cuda_internal.h first). A stored-transposed (MultiLinear) view's caller swaps them. */
cb_qm cb_q_view(const ci_mat *W);
int cb_q_aloop(void);
int cb_q_qmv(void);
int cb_q_gemm(void);
int cb_q_fploop(void);
/* quant_mma.cu: MLX affine 4- / 8-bit and fp8 E4M3 GEMVs of 1..8 token rows on tensor cores
 * (CINFER_CUDA_QMMA).
 * cb_qt_matmul: quant.cu's qgemv (op CB_STORE / CB_ACC over count matrices of the same cols, or
 * CB_SWIGLU over gate ms[0] and up ms[1] into ys[0]), x RMS-normed with norm_w first when it
 * is not NULL (norm_matmul_n / norm_matmul_swiglu, one launch), a CB_SWIGLU gate clamped at
 * limit and up at ±limit when limit > 0 (matmul_swiglu_clamp); cb_qt_moe: quant_moe.cu's decode pair
 * (gate+up into h, then down into out; rt: the gate+up kernel routes each token itself from
 * rt->logits and writes rt->sel / rt->w, which down reads, sel / wt unused). Each returns 0,
 * having launched nothing, when it does not take the call (another format, a shape or alignment
 * it does not serve). */
int cb_q_qmma(void);
int cb_qt_matmul(cuda_be *cb, int op, int count, float *const *ys, const float *x, int n, const cb_qm *ms,
                 const float *norm_w, float eps, float *xn_out = nullptr, float limit = 0.0f);
int cb_qt_moe(cuda_be *cb, const uint8_t *const *codes, const void *const *scales, const void *const *biases,
              const int64_t *srow0, const int *mode, const int *bits, const int *group, const int *sd, int relu2, int X,
              int I, int K, float limit, const int32_t *sel, const float *wt, const float *x, float *h, float *out,
              int k, int acc, const struct cb_route *rt = nullptr);
/* cb_qt_fp8: gemv.cu's fp8 matmuls (ci_mat views with 128 x 128 block scales; op as cb_gemv's
 * mode); cb_qt_moe_fp8: moe.cu's fp8 experts at decode (its table's arrays, scale_dtype 0 f32 /
 * 1 bf16 / 2 E8M0). Same contract: 0 and nothing launched when not taken. */
int cb_qt_fp8(cuda_be *cb, int op, int count, float *const *ys, const float *x, int n, const ci_mat *const *Ws,
              const float *norm_w, float eps, float limit = 0.0f);
int cb_qt_moe_fp8(cuda_be *cb, const void *const *w, const void *const *scale, const int64_t *srow0, int block,
                  int scale_dtype, int relu2, int X, int I, int K, float limit, const int32_t *sel, const float *wt,
                  const float *x, float *h, float *out, int k, int acc, const struct cb_route *rt = nullptr);

/* the tensor-core experts' partition of their work for one shape (quant_mma_moe.cu; moe_fused_qt.cu's one
 * launch takes it too, for the same bits): gate+up's ks, down's kparts and block warps, the two
 * launches' shared bytes; 0 when they do not fit */
struct cb_qt_moe_part {
    int gks, kparts, dnw;
    size_t smem_gu, smem_dn;
};
int cb_qt_moe_plan(cuda_be *cb, int X, int I, int K, int relu2, int gs, int with_route, int E, cb_qt_moe_part *pt);
/* the ks (warps a tile's groups split over) cb_qt_fp8 takes for one token row of an fp8 matrix of
 * these rows and K columns (swiglu: a gate / up pair of that shape); 0 when it would not take it */
int cb_qt_fp8_ks(cuda_be *cb, int64_t rows, int K, int swiglu);

#endif
