/* mla_heads.cu — MLA's per-head weight products on the device: the absorbed queries
 * (qcat = q_nope · W_UK per head, then q_pe) and the value heads (o = olat · W_UVᵀ per head),
 * all heads in one launch each, over the per-head views of kv_b (or MultiLinear's stored
 * embed_q / unembed_out) in f32, f16, bf16, fp8 with block scales or MLX codes. */
#include "cuda_internal.h"
#include "loaders.cuh"
#include "quant.cuh"
#include <cuda_fp16.h>
#include <cuda_fp8.h>

/* ---- per-head weights: the views of all heads, evenly spaced in one tensor ------------------- */

struct head_mats {           /* head h: data + h * step bytes, scale rows from row0 + h * row_step */
    const void *data;
    int64_t step, row_step, row0;
    int dtype, block, scale_dtype;
    const void *scale;
    int64_t rows, cols;
    cb_qm q;                 /* CI_U32 (MLX-quantized) views: head 0 as stored, codes + h * step */
    int stored_t;            /* the views hold Wᵀ (MultiLinear embed_q): element (r, c) is stored (c, r) */
};

/* Fills hm from the Hh views; 0 if they are one dtype and shape, evenly spaced with one scale grid. */
static int head_views(const ci_mat *W, int n_heads, head_mats *hm) {
    const ci_mat *a = &W[0];
    if (a->dtype != CI_F32 && a->dtype != CI_F16 && a->dtype != CI_BF16 && a->dtype != CI_F8_E4M3 &&
        !(a->dtype == CI_U32 && cb_q_ok(a)))
        return -1;
    hm->stored_t = 0;
    if (a->dtype == CI_U32) {
        hm->stored_t = ((const ci_qdesc *)a->scale)->stored_t;
        hm->q = cb_q_view(a);
        if (hm->stored_t) { hm->q.rows = a->cols; hm->q.cols = a->rows; }
    }
    hm->data = a->data;
    hm->dtype = (int)a->dtype;
    hm->rows = a->rows;
    hm->cols = a->cols;
    hm->block = a->dtype == CI_F8_E4M3 && a->scale && a->block > 0 ? a->block : 0;
    hm->scale = a->scale;
    hm->scale_dtype = (int)a->scale_dtype;
    hm->row0 = a->scale_row0;
    hm->step = n_heads > 1 ? (const char *)W[1].data - (const char *)a->data : 0;
    hm->row_step = n_heads > 1 ? W[1].scale_row0 - a->scale_row0 : 0;
    for (int h = 1; h < n_heads; h++) {
        const ci_mat *v = &W[h];
        if (v->dtype != a->dtype || v->rows != a->rows || v->cols != a->cols || v->scale != a->scale ||
            (const char *)v->data - (const char *)a->data != h * hm->step ||
            v->scale_row0 - a->scale_row0 != h * hm->row_step)
            return -1;
    }
    return 0;
}

/* element (r, c) of head h as f32 (fp8 times its block scale); DT the views' dtype, fixed
 * per kernel instance so that a thread's loads carry no branch between them */
template <int DT>
static __device__ __forceinline__ float head_elem(const head_mats &m, int h, int64_t r, int64_t c) {
    const char *base = (const char *)m.data + h * m.step;
    const int64_t i = r * m.cols + c;
    float w;
    if (DT == CI_U32) {
        cb_qm q = m.q;
        q.codes = (const uint8_t *)base;
        q.srow0 += h * m.row_step;
        w = m.stored_t ? q_elem(q, c, r) : q_elem(q, r, c);
    } else if (DT == CI_F32) w = __ldg((const float *)base + i);
    else if (DT == CI_BF16) w = __uint_as_float((unsigned)__ldg((const unsigned short *)base + i) << 16);
    else if (DT == CI_F16) w = __half2float(__ldg((const __half *)base + i));
    else {
        __half_raw hr = __nv_cvt_fp8_to_halfraw(__ldg((const __nv_fp8_storage_t *)(base + i)), __NV_E4M3);
        w = __half2float(*(__half *)&hr);
        if (m.block > 0) {
            const int64_t scols = (m.cols + m.block - 1) / m.block;
            const int64_t si = ((m.row0 + h * m.row_step + r) / m.block) * scols + c / m.block;
            float s;
            if (m.scale_dtype == CI_F32) s = __ldg((const float *)m.scale + si);
            else if (m.scale_dtype == CI_BF16) s = __uint_as_float((unsigned)__ldg((const unsigned short *)m.scale + si) << 16);
            else {
                unsigned e = __ldg((const unsigned char *)m.scale + si);
                s = e == 255 ? __int_as_float(0x7fc00000) : e == 0 ? __uint_as_float(0x00400000u) : __uint_as_float(e << 23);
            }
            w *= s;
        }
    }
    return w;
}

enum { AB_TOK = 8, AQ_COLS = 64, AB_WARPS = 8, OH_J = 16 };

/* qcat[t, h, c] = Σ_r q[t, h, r] · W_UK[h][r][c] for c < kv_lora, then q_pe. A block takes
 * one head, AQ_COLS columns and AB_TOK rows: lane l owns columns l and l + 32 of the tile
 * (each warp's weight loads coalesced), the 8 warps split r (warp w takes r = w, w + 8, ...,
 * so every thread has nope / 8 independent loads in flight), and the warps' partial sums are
 * added in warp order through shared memory. The last x-block copies q_pe. */
template <int DT>
__global__ void __launch_bounds__(AB_WARPS * 32) absorb_q_kernel(float *qcat, const float *q, int n, int n_heads,
                                                                 int nope, int rope, int kv_lora, head_mats m) {
    pdl_enter();
    __shared__ float red[AB_WARPS][AB_TOK][AQ_COLS];
    const int h = blockIdx.y, t0 = blockIdx.z * AB_TOK;
    const int qd = nope + rope, lat = kv_lora + rope;
    const int nt = n - t0 < AB_TOK ? n - t0 : AB_TOK;
    if ((int)blockIdx.x == (kv_lora + AQ_COLS - 1) / AQ_COLS) {
        for (int i = threadIdx.x; i < nt * rope; i += blockDim.x) {
            const int ti = i / rope, c = i - ti * rope;
            const int64_t row = (int64_t)(t0 + ti) * n_heads + h;
            qcat[row * lat + kv_lora + c] = q[row * qd + nope + c];
        }
        return;
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int c0 = blockIdx.x * AQ_COLS + lane, c1 = c0 + 32;
    const float *qh = q + ((int64_t)t0 * n_heads + h) * qd;      /* row t0 + i: qh + i * n_heads * qd */
    const int64_t qstep = (int64_t)n_heads * qd;
    float a0[AB_TOK], a1[AB_TOK];
#pragma unroll
    for (int i = 0; i < AB_TOK; i++) a0[i] = a1[i] = 0.0f;
#pragma unroll 8
    for (int r = warp; r < nope; r += AB_WARPS) {
        const float w0 = c0 < kv_lora ? head_elem<DT>(m, h, r, c0) : 0.0f;
        const float w1 = c1 < kv_lora ? head_elem<DT>(m, h, r, c1) : 0.0f;
#pragma unroll
        for (int i = 0; i < AB_TOK; i++)
            if (i < nt) {
                const float qv = __ldg(qh + i * qstep + r);
                a0[i] = fmaf(qv, w0, a0[i]);
                a1[i] = fmaf(qv, w1, a1[i]);
            }
    }
#pragma unroll
    for (int i = 0; i < AB_TOK; i++) {
        red[warp][i][lane] = a0[i];
        red[warp][i][lane + 32] = a1[i];
    }
    __syncthreads();
    for (int k = threadIdx.x; k < nt * AQ_COLS; k += blockDim.x) {
        const int i = k / AQ_COLS, cc = k - i * AQ_COLS, c = blockIdx.x * AQ_COLS + cc;
        if (c >= kv_lora) continue;
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < AB_WARPS; w++) sum += red[w][i][cc];
        qcat[((int64_t)(t0 + i) * n_heads + h) * lat + c] = sum;
    }
}

/* ---- decode (n <= 4 rows): 16-byte weight loads --------------------------------------------
 * The kernels above read one element per lane, which leaves the weight stream latency-bound at
 * decode (a few hundred GB/s; fp8 paid a 64-bit division per element for its scale). These take
 * 16 bytes per lane per load (8 bf16 / f16, 4 f32, 16 fp8 columns, HL<DT>::L::VEC), issue the
 * weight loads before pdl_enter() (weights are no kernel's output), and scale fp8 once per
 * vector: a vector never crosses a scale block (block % VEC == 0, columns aligned). The caller
 * picks them when kv_lora % VEC == 0 and every head's base is 16-byte aligned. */
template <int DT> struct HL;
template <> struct HL<CI_F32> { typedef LF32 L; };
template <> struct HL<CI_BF16> { typedef LBF16 L; };
template <> struct HL<CI_F16> { typedef LF16 L; };
template <> struct HL<CI_F8_E4M3> { typedef LFP8 L; };

/* the block scale of row r, column c of head h (1 without a grid) */
static __device__ __forceinline__ float head_scale(const head_mats &m, int h, int64_t r, int64_t c) {
    if (m.block <= 0) return 1.0f;
    const int64_t scols = (m.cols + m.block - 1) / m.block;
    const int64_t si = ((m.row0 + h * m.row_step + r) / m.block) * scols + c / m.block;
    return scale_elem(m.scale, m.scale_dtype == CI_F32 ? 0 : m.scale_dtype == CI_BF16 ? 1 : 2, si);
}

enum { AQV_BATCH = 8 };

/* absorb_q, NT rows: a block takes one head and AQ_COLS columns; LPR = AQ_COLS / VEC lanes
 * cover a row's columns, so a warp reads 32 / LPR rows r at once and the block RS of them.
 * Each thread sums its rows r = rs, rs + RS, ... in order; the rows of a warp meet in a
 * shuffle tree, the warps in shared memory in warp order. */
template <int DT, int NT>
__device__ __forceinline__ void absorb_q_vec_cols(float *qcat, const float *q, int n, int n_heads, int nope, int rope,
                                                  int kv_lora, const head_mats &m) {
    typedef typename HL<DT>::L L;
    constexpr int V = L::VEC, LPR = AQ_COLS / V, RPW = 32 / LPR, RS = AB_WARPS * RPW;
    __shared__ float red[AB_WARPS][NT][AQ_COLS];
    const int h = blockIdx.y;
    const int qd = nope + rope, lat = kv_lora + rope;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int lv = lane % LPR, rs = warp * RPW + lane / LPR;
    const int c = blockIdx.x * AQ_COLS + lv * V;
    const bool live = c < kv_lora;
    const char *base = (const char *)m.data + h * m.step;
    uint4 raw[AQV_BATCH];
#pragma unroll
    for (int b = 0; b < AQV_BATCH; b++) {
        const int r = rs + b * RS;
        if (live && r < nope) raw[b] = ld_stream(base + ((int64_t)r * m.cols + c) * L::BYTES);
    }
    pdl_enter();
    float acc[NT][V];
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int v = 0; v < V; v++) acc[t][v] = 0.0f;
    for (int r0 = rs; r0 < nope; r0 += AQV_BATCH * RS) {
        if (r0 != rs) {
#pragma unroll
            for (int b = 0; b < AQV_BATCH; b++) {
                const int r = r0 + b * RS;
                if (live && r < nope) raw[b] = ld_stream(base + ((int64_t)r * m.cols + c) * L::BYTES);
            }
        }
#pragma unroll
        for (int b = 0; b < AQV_BATCH; b++) {
            const int r = r0 + b * RS;
            if (!live || r >= nope) break;
            float w[V];
            L::cvt(raw[b], w);
            if (DT == CI_F8_E4M3 && m.block > 0) {
                const float sc = head_scale(m, h, r, c);
#pragma unroll
                for (int v = 0; v < V; v++) w[v] *= sc;
            }
#pragma unroll
            for (int t = 0; t < NT; t++)
                if (t < n) {
                    const float qv = __ldg(q + ((int64_t)t * n_heads + h) * qd + r);
#pragma unroll
                    for (int v = 0; v < V; v++) acc[t][v] = fmaf(qv, w[v], acc[t][v]);
                }
        }
    }
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int v = 0; v < V; v++) {
            float s = acc[t][v];
#pragma unroll
            for (int o = LPR; o < 32; o <<= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
            acc[t][v] = s;
        }
    if (lane < LPR)
#pragma unroll
        for (int t = 0; t < NT; t++)
#pragma unroll
            for (int v = 0; v < V; v++) red[warp][t][lv * V + v] = acc[t][v];
    __syncthreads();
    for (int k = threadIdx.x; k < n * AQ_COLS; k += blockDim.x) {
        const int i = k / AQ_COLS, cc = k - i * AQ_COLS, col = blockIdx.x * AQ_COLS + cc;
        if (col >= kv_lora) continue;
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < AB_WARPS; w++) sum += red[w][i][cc];
        qcat[((int64_t)i * n_heads + h) * lat + col] = sum;
    }
}

template <int DT, int NT>
__global__ void __launch_bounds__(AB_WARPS * 32) absorb_q_vec_kernel(float *qcat, const float *q, int n, int n_heads,
                                                                     int nope, int rope, int kv_lora, head_mats m) {
    if ((int)blockIdx.x == (kv_lora + AQ_COLS - 1) / AQ_COLS) {   /* the last block column: q_pe */
        pdl_enter();
        const int h = blockIdx.y, qd = nope + rope, lat = kv_lora + rope;
        for (int i = threadIdx.x; i < n * rope; i += blockDim.x) {
            const int ti = i / rope, c = i - ti * rope;
            const int64_t row = (int64_t)ti * n_heads + h;
            qcat[row * lat + kv_lora + c] = q[row * qd + nope + c];
        }
        return;
    }
    absorb_q_vec_cols<DT, NT>(qcat, q, n, n_heads, nope, rope, kv_lora, m);
}

/* mla_prepare at NT <= 4 rows (backend.h: mla_rope, mla_absorb_q, kv_store_paged as one op),
 * on absorb_q_vec_kernel's grid: its blocks for the W_UK columns as they are; in the last block
 * column, head h's q_pe rotated (mla_rope's arithmetic) into q and straight into qcat (what
 * absorb_q copied), and the latent rows t = h, h + Hh, ... < n normed (mla_rope's sums: nth
 * threads add, the rest add zeros), rotated and written to lat and to their cache row
 * (kv_store_paged's; cache and tab NULL: not stored). No block reads what another writes. */
template <int DT, int NT>
__global__ void __launch_bounds__(AB_WARPS * 32) mla_prepare_kernel(float *qcat, float *lat, float *q, const float *kv_norm,
                                                                    float eps, int n, int n_heads, int nope, int rope,
                                                                    int kv_lora, const int32_t *pos, const float *inv_freq,
                                                                    float mscale, int style, head_mats m, float *cache,
                                                                    float *const *tab, ci_pages pg, int nth) {
    if ((int)blockIdx.x != (kv_lora + AQ_COLS - 1) / AQ_COLS) {
        absorb_q_vec_cols<DT, NT>(qcat, q, n, n_heads, nope, rope, kv_lora, m);
        return;
    }
    pdl_enter();
    extern __shared__ float tb[];   /* [n][2 * half]: row t's cos, then its sin */
    __shared__ float sh[32];
    const int h = blockIdx.y, half = rope / 2, qd = nope + rope, latw = kv_lora + rope;
    for (int t = 0; t < n; t++) rope_table(tb + t * rope, tb + t * rope + half, (float)pos[t], inv_freq, half, mscale);
    __syncthreads();
    for (int k = threadIdx.x; k < n * half; k += blockDim.x) {
        const int t = k / half, i = k - t * half;
        const int2 o = rope_offs(style, i, half);
        const int64_t row = (int64_t)t * n_heads + h;
        float *base = q + row * qd + nope, *cat = qcat + row * latw + kv_lora;
        const float2 r = rope_rot(base[o.x], base[o.y], tb[t * rope + i], tb[t * rope + half + i]);
        base[o.x] = r.x; base[o.y] = r.y;
        cat[o.x] = r.x; cat[o.y] = r.y;
    }
    for (int t = h; t < n; t += n_heads) {
        float *lr = lat + (int64_t)t * latw;
        float *dst = tab || cache ? (tab ? tab[t] : cache) + pg_row(pg_table(pg, t), pg.blk_log2, pos[t]) * latw : NULL;
        float s = 0.0f;
        if ((int)threadIdx.x < nth)
            for (int i = threadIdx.x; i < kv_lora; i += nth) s = fmaf(lr[i], lr[i], s);
        s = block_sum(s, sh);
        const float sc = (float)(1.0 / sqrt((double)s / (double)kv_lora + (double)eps));
        for (int i = threadIdx.x; i < kv_lora; i += blockDim.x) {
            const float y = kv_norm ? lr[i] * sc * kv_norm[i] : lr[i] * sc;
            lr[i] = y;
            if (dst) dst[i] = y;
        }
        for (int i = threadIdx.x; i < half; i += blockDim.x) {
            const int2 o = rope_offs(style, i, half);
            float *base = lr + kv_lora;
            const float2 r = rope_rot(base[o.x], base[o.y], tb[t * rope + i], tb[t * rope + half + i]);
            base[o.x] = r.x; base[o.y] = r.y;
            if (dst) { dst[kv_lora + o.x] = r.x; dst[kv_lora + o.y] = r.y; }
        }
    }   /* (the next row's block_sum waits for every thread before it writes sh) */
}

enum { OHV_S = 4 };

/* out_heads, NT rows: a block takes one head and OH_J outputs j (OH_J / AB_WARPS consecutive
 * ones per warp); a warp reads row j of W_UV in 32 · VEC column steps, every load of its rows
 * issued before pdl_enter() (the first OHV_S steps of each), then dots them with the rows'
 * latent outputs staged in shared memory, and sums its lanes. */
template <int DT, int NT>
__global__ void __launch_bounds__(AB_WARPS * 32) out_heads_vec_kernel(float *o, const float *olat, int n, int n_heads,
                                                                      int kv_lora, int lat, int v, head_mats m) {
    typedef typename HL<DT>::L L;
    constexpr int V = L::VEC, JPW = OH_J / AB_WARPS;
    extern __shared__ float ol[];                                 /* [n][kv_lora] */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, h = blockIdx.y;
    const int S = (kv_lora + 32 * V - 1) / (32 * V);
    const char *base = (const char *)m.data + h * m.step;
    uint4 raw[JPW][OHV_S];
#pragma unroll
    for (int jj = 0; jj < JPW; jj++) {
        const int j = blockIdx.x * OH_J + warp * JPW + jj;
#pragma unroll
        for (int s = 0; s < OHV_S; s++) {
            const int c = s * 32 * V + lane * V;
            if (j < v && s < S && c < kv_lora) raw[jj][s] = ld_stream(base + ((int64_t)j * kv_lora + c) * L::BYTES);
        }
    }
    pdl_enter();
    for (int k = threadIdx.x; k < n * kv_lora; k += blockDim.x) {
        const int i = k / kv_lora, c = k - i * kv_lora;
        ol[k] = olat[((int64_t)i * n_heads + h) * lat + c];
    }
    __syncthreads();
#pragma unroll
    for (int jj = 0; jj < JPW; jj++) {
        const int j = blockIdx.x * OH_J + warp * JPW + jj;
        if (j >= v) break;
        float acc[NT];
#pragma unroll
        for (int t = 0; t < NT; t++) acc[t] = 0.0f;
        for (int s = 0; s < S; s++) {
            const int c = s * 32 * V + lane * V;
            if (c >= kv_lora) break;
            uint4 r;
            if (s < OHV_S) {
#pragma unroll
                for (int q = 0; q < OHV_S; q++)
                    if (q == s) r = raw[jj][q];
            } else {
                r = ld_stream(base + ((int64_t)j * kv_lora + c) * L::BYTES);
            }
            float w[V];
            L::cvt(r, w);
            if (DT == CI_F8_E4M3 && m.block > 0) {
                const float sc = head_scale(m, h, j, c);
#pragma unroll
                for (int e = 0; e < V; e++) w[e] *= sc;
            }
#pragma unroll
            for (int t = 0; t < NT; t++)
                if (t < n) {
                    const float4 *xp = (const float4 *)(ol + t * kv_lora + c);
#pragma unroll
                    for (int qq = 0; qq < V / 4; qq++) {
                        const float4 xv = xp[qq];
                        acc[t] = fmaf(xv.x, w[4 * qq], acc[t]);
                        acc[t] = fmaf(xv.y, w[4 * qq + 1], acc[t]);
                        acc[t] = fmaf(xv.z, w[4 * qq + 2], acc[t]);
                        acc[t] = fmaf(xv.w, w[4 * qq + 3], acc[t]);
                    }
                }
        }
#pragma unroll
        for (int t = 0; t < NT; t++) {
            float s = acc[t];
            for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
            if (lane == 0 && t < n) o[((int64_t)t * n_heads + h) * v + j] = s;
        }
    }
}

/* whether the views suit the vector kernels: kv_lora a multiple of the vector, 16-byte rows
 * and head bases, fp8 scale blocks a multiple of the vector */
static bool head_vec_ok(const head_mats &m, int kv_lora) {
    if (m.dtype != CI_F32 && m.dtype != CI_BF16 && m.dtype != CI_F16 && m.dtype != CI_F8_E4M3) return false;
    const int vec = m.dtype == CI_F32 ? 4 : m.dtype == CI_F8_E4M3 ? 16 : 8;
    return kv_lora % vec == 0 && ((uintptr_t)m.data & 15) == 0 && (m.step & 15) == 0 && (m.block <= 0 || m.block % vec == 0);
}

template <int NT>
static void absorb_q_vec(cuda_be *cb, dim3 grid, float *qcat, const float *q, int n, int n_heads, int nope, int rope,
                         int kv_lora, const head_mats &m) {
    void (*k)(float *, const float *, int, int, int, int, int, head_mats) =
        m.dtype == CI_F32 ? absorb_q_vec_kernel<CI_F32, NT> : m.dtype == CI_BF16 ? absorb_q_vec_kernel<CI_BF16, NT>
        : m.dtype == CI_F16 ? absorb_q_vec_kernel<CI_F16, NT> : absorb_q_vec_kernel<CI_F8_E4M3, NT>;
    cb_launch(cb, k, grid, dim3(AB_WARPS * 32), 0, qcat, q, n, n_heads, nope, rope, kv_lora, m);
}

template <int NT>
static void out_heads_vec(cuda_be *cb, dim3 grid, size_t smem, float *o, const float *olat, int n, int n_heads,
                          int kv_lora, int lat, int v, const head_mats &m) {
    void (*k)(float *, const float *, int, int, int, int, int, head_mats) =
        m.dtype == CI_F32 ? out_heads_vec_kernel<CI_F32, NT> : m.dtype == CI_BF16 ? out_heads_vec_kernel<CI_BF16, NT>
        : m.dtype == CI_F16 ? out_heads_vec_kernel<CI_F16, NT> : out_heads_vec_kernel<CI_F8_E4M3, NT>;
    cb_launch(cb, k, grid, dim3(AB_WARPS * 32), smem, o, olat, n, n_heads, kv_lora, lat, v, m);
}

void cb_mla_absorb_q(cuda_be *cb, float *qcat, const float *q, int n, int n_heads, int nope, int rope, int kv_lora,
                     const ci_mat *w_uk) {
    if (n <= 0 || n_heads <= 0) return;
    head_mats m;
    if (head_views(w_uk, n_heads, &m) || m.rows != nope || m.cols != kv_lora) {
        cb_fail_msg(cb, "mla_absorb_q: the W_UK views are not evenly spaced [nope, kv_lora] views of one f32 / f16 / bf16 / fp8 / MLX-quantized tensor");
        return;
    }
    dim3 grid((unsigned)((kv_lora + AQ_COLS - 1) / AQ_COLS + 1), (unsigned)n_heads, (unsigned)((n + AB_TOK - 1) / AB_TOK));
    if (n <= 4 && head_vec_ok(m, kv_lora)) {
        if (n == 1) absorb_q_vec<1>(cb, grid, qcat, q, n, n_heads, nope, rope, kv_lora, m);
        else if (n == 2) absorb_q_vec<2>(cb, grid, qcat, q, n, n_heads, nope, rope, kv_lora, m);
        else absorb_q_vec<4>(cb, grid, qcat, q, n, n_heads, nope, rope, kv_lora, m);
        cb_launched(cb, "mla_absorb_q");
        return;
    }
    void (*k)(float *, const float *, int, int, int, int, int, head_mats) =
        m.dtype == CI_F32 ? absorb_q_kernel<CI_F32> : m.dtype == CI_BF16 ? absorb_q_kernel<CI_BF16>
        : m.dtype == CI_F16 ? absorb_q_kernel<CI_F16> : m.dtype == CI_U32 ? absorb_q_kernel<CI_U32> : absorb_q_kernel<CI_F8_E4M3>;
    cb_launch(cb, k, grid, dim3(AB_WARPS * 32), 0, qcat, q, n, n_heads, nope, rope, kv_lora, m);
    cb_launched(cb, "mla_absorb_q");
}

/* o[t, h, j] = Σ_c olat[t, h, c] · W_UV[h][j][c]. A block takes one head, OH_J outputs j and
 * AB_TOK rows: the rows' latent outputs are staged in shared memory once, each warp takes
 * OH_J / 8 outputs, lanes along c (the weight row read coalesced, kv_lora / 32 independent
 * loads per lane and output), then a warp sum. */
template <int DT>
__global__ void __launch_bounds__(AB_WARPS * 32) out_heads_kernel(float *o, const float *olat, int n, int n_heads,
                                                                  int kv_lora, int lat, int v, head_mats m) {
    pdl_enter();
    extern __shared__ float ol[];                                 /* [AB_TOK][kv_lora] */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int h = blockIdx.y, t0 = blockIdx.z * AB_TOK;
    const int nt = n - t0 < AB_TOK ? n - t0 : AB_TOK;
    for (int k = threadIdx.x; k < nt * kv_lora; k += blockDim.x) {
        const int i = k / kv_lora, c = k - i * kv_lora;
        ol[k] = olat[((int64_t)(t0 + i) * n_heads + h) * lat + c];
    }
    __syncthreads();
    for (int jj = warp; jj < OH_J; jj += AB_WARPS) {
        const int j = blockIdx.x * OH_J + jj;
        if (j >= v) break;
        float acc[AB_TOK];
#pragma unroll
        for (int i = 0; i < AB_TOK; i++) acc[i] = 0.0f;
#pragma unroll 8
        for (int c = lane; c < kv_lora; c += 32) {
            const float w = head_elem<DT>(m, h, j, c);
#pragma unroll
            for (int i = 0; i < AB_TOK; i++)
                if (i < nt) acc[i] = fmaf(ol[i * kv_lora + c], w, acc[i]);
        }
#pragma unroll
        for (int i = 0; i < AB_TOK; i++) {
            float s = acc[i];
            for (int off = 16; off > 0; off >>= 1) s += __shfl_xor_sync(0xffffffffu, s, off);
            if (lane == 0 && i < nt) o[((int64_t)(t0 + i) * n_heads + h) * v + j] = s;
        }
    }
}

void cb_mla_out_heads(cuda_be *cb, float *o, const float *olat, int n, int n_heads, int kv_lora, int lat, int v,
                      const ci_mat *w_uv) {
    if (n <= 0 || n_heads <= 0 || v <= 0) return;
    head_mats m;
    if (head_views(w_uv, n_heads, &m) || m.rows != v || m.cols != kv_lora) {
        cb_fail_msg(cb, "mla_out_heads: the W_UV views are not evenly spaced [v, kv_lora] views of one f32 / f16 / bf16 / fp8 / MLX-quantized tensor");
        return;
    }
    void (*k)(float *, const float *, int, int, int, int, int, head_mats) =
        m.dtype == CI_F32 ? out_heads_kernel<CI_F32> : m.dtype == CI_BF16 ? out_heads_kernel<CI_BF16>
        : m.dtype == CI_F16 ? out_heads_kernel<CI_F16> : m.dtype == CI_U32 ? out_heads_kernel<CI_U32> : out_heads_kernel<CI_F8_E4M3>;
    const size_t smem = (size_t)AB_TOK * kv_lora * sizeof(float);
    if (smem > 48 * 1024) {   /* kv_lora > 1536: beyond every DeepSeek; one limit for all four instances */
        cb_fail_msg(cb, "mla_out_heads: kv_lora over 1536 is not supported");
        return;
    }
    dim3 grid((unsigned)((v + OH_J - 1) / OH_J), (unsigned)n_heads, (unsigned)((n + AB_TOK - 1) / AB_TOK));
    if (n <= 4 && head_vec_ok(m, kv_lora)) {
        const size_t vsmem = (size_t)n * kv_lora * sizeof(float);
        if (n == 1) out_heads_vec<1>(cb, grid, vsmem, o, olat, n, n_heads, kv_lora, lat, v, m);
        else if (n == 2) out_heads_vec<2>(cb, grid, vsmem, o, olat, n, n_heads, kv_lora, lat, v, m);
        else out_heads_vec<4>(cb, grid, vsmem, o, olat, n, n_heads, kv_lora, lat, v, m);
        cb_launched(cb, "mla_out_heads");
        return;
    }
    cb_launch(cb, k, grid, dim3(AB_WARPS * 32), smem, o, olat, n, n_heads, kv_lora, lat, v, m);
    cb_launched(cb, "mla_out_heads");
}

void cb_mla_prepare(cuda_be *cb, float *qcat, float *lat, float *q, const float *kv_norm, float eps, int n, int n_heads,
                    int nope, int rope, int kv_lora, const int32_t *pos, const float *inv_freq, float mscale,
                    ci_rope_style style, const ci_mat *w_uk, float *cache, float *const *tab, const ci_pages *pages) {
    if (n <= 0 || n_heads <= 0) return;
    head_mats m;
    const int latw = kv_lora + rope;
    if (!cb->mla_prep || n > 4 || rope < 2 || rope % 2 || kv_lora <= 0 || head_views(w_uk, n_heads, &m) ||
        m.rows != nope || m.cols != kv_lora || !head_vec_ok(m, kv_lora)) {
        cb_mla_rope(cb, lat, q, kv_norm, eps, n, n_heads, nope, rope, kv_lora, pos, inv_freq, mscale, style);
        cb_mla_absorb_q(cb, qcat, q, n, n_heads, nope, rope, kv_lora, w_uk);
        if (cache || tab) cb_kv_store_paged(cb, cache, tab, 1, latw, lat, latw, n, pos, pages);
        return;
    }
    const int nth = rms_threads(kv_lora);   /* mla_rope's block for the norm */
    const dim3 grid((unsigned)((kv_lora + AQ_COLS - 1) / AQ_COLS + 1), (unsigned)n_heads);
    const size_t smem = (size_t)n * rope * sizeof(float);
    void (*k)(float *, float *, float *, const float *, float, int, int, int, int, int, const int32_t *, const float *,
              float, int, head_mats, float *, float *const *, ci_pages, int);
#define MP_K(NT) (m.dtype == CI_F32 ? mla_prepare_kernel<CI_F32, NT> : m.dtype == CI_BF16 ? mla_prepare_kernel<CI_BF16, NT> \
                  : m.dtype == CI_F16 ? mla_prepare_kernel<CI_F16, NT> : mla_prepare_kernel<CI_F8_E4M3, NT>)
    k = n == 1 ? MP_K(1) : n == 2 ? MP_K(2) : MP_K(4);
#undef MP_K
    cb_launch(cb, k, grid, dim3(AB_WARPS * 32), smem, qcat, lat, q, kv_norm, eps, n, n_heads, nope, rope, kv_lora, pos,
              inv_freq, mscale, (int)style, m, cache, tab, cb_pages(pages), nth);
    cb_launched(cb, "mla_prepare");
}
