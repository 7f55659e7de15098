/* ops.cu — the small CUDA ops: RMSNorm, RoPE, the fused q/k norm + RoPE + cache store,
 * cache row stores, SwiGLU, add, embedding rows, argmax, f32 -> bf16 / f16.
 *
 * Numerics follow the CPU backend where it matters for parity: RMSNorm's inverse root is
 * taken in double from the f32 sum of squares; RoPE's angle is the f32 product
 * pos * inv_freq and its cos / sin are taken in double and rounded once, times mscale. */
#include "cuda_internal.h"
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <math.h>

static int blocks_for(int64_t count, int threads) {
    int64_t b = (count + threads - 1) / threads;
    return (int)(b > 65535 * 8 ? 65535 * 8 : b);
}

/* A row a block: each thread's sum of squares over elements tid, tid + blockDim.x, ... in that
 * order (loads in rounds of RMS_ROUND, issued before their fmas: the same bits as one at a
 * time), block_sum, then the normed elements into out (f32, if given) and / or h (16-bit:
 * bf16 when to_bf16, else f16 saturated; convert_kernel's roundings), so a GEMM's input needs
 * no conversion launch of its own. */
enum { RMS_ROUND = 8 };
__global__ void rmsnorm_kernel(float *out, void *h, int to_bf16, const float *x, const float *w, int dim, float eps) {
    pdl_enter();
    __shared__ float sh[32];
    const float *xr = x + (int64_t)blockIdx.x * dim;
    const int bd = blockDim.x, t = threadIdx.x;
    float s = 0.0f;
    for (int i0 = t; i0 < dim; i0 += RMS_ROUND * bd) {
        float v[RMS_ROUND];
#pragma unroll
        for (int u = 0; u < RMS_ROUND; u++) v[u] = i0 + u * bd < dim ? xr[i0 + u * bd] : 0.0f;
#pragma unroll
        for (int u = 0; u < RMS_ROUND; u++)
            if (i0 + u * bd < dim) s = fmaf(v[u], v[u], s);
    }
    s = block_sum(s, sh);
    const float sc = (float)(1.0 / sqrt((double)s / (double)dim + (double)eps));
    float *orow = out ? out + (int64_t)blockIdx.x * dim : NULL;
    for (int i0 = t; i0 < dim; i0 += RMS_ROUND * bd) {
        float v[RMS_ROUND], g[RMS_ROUND];
#pragma unroll
        for (int u = 0; u < RMS_ROUND; u++) {
            const bool in = i0 + u * bd < dim;
            v[u] = in ? xr[i0 + u * bd] : 0.0f;
            g[u] = in && w ? w[i0 + u * bd] : 0.0f;
        }
#pragma unroll
        for (int u = 0; u < RMS_ROUND; u++) {
            const int i = i0 + u * bd;
            if (i >= dim) break;
            const float y = w ? v[u] * sc * g[u] : v[u] * sc;
            if (orow) orow[i] = y;
            if (h && to_bf16) ((__nv_bfloat16 *)h)[(int64_t)blockIdx.x * dim + i] = __float2bfloat16_rn(y);
            else if (h) ((__half *)h)[(int64_t)blockIdx.x * dim + i] = __float2half_rn(f16_sat(y));
        }
    }
}

void cb_rmsnorm(cuda_be *cb, float *out, const float *x, const float *w, int n, int dim, float eps) {
    cb_rmsnorm_16(cb, out, NULL, 0, x, w, n, dim, eps);
}

void cb_rmsnorm_16(cuda_be *cb, float *out, void *h, int to_bf16, const float *x, const float *w, int n, int dim,
                   float eps) {
    if (n <= 0 || dim <= 0) return;
    cb_launch(cb, rmsnorm_kernel, dim3(n), dim3(rms_threads(dim)), 0, out, h, to_bf16, x, w, dim, eps);
    cb_launched(cb, "rmsnorm");
}

__global__ void rope_kernel(float *x, int n_heads, int head_dim, int rot_offset, int rot_dim, const int32_t *pos,
                            const float *inv_freq, float mscale, int style) {
    pdl_enter();
    extern __shared__ float sm[];
    int half = rot_dim / 2, t = blockIdx.x;
    float *cs = sm, *sn = sm + half;
    rope_table(cs, sn, (float)pos[t], inv_freq, half, mscale);
    __syncthreads();
    for (int k = threadIdx.x; k < n_heads * half; k += blockDim.x) {
        int h = k / half, i = k % half;
        float *base = x + ((int64_t)t * n_heads + h) * head_dim + rot_offset;
        float *pa = style == CI_ROPE_NEOX ? base + i : base + 2 * i;
        float *pb = style == CI_ROPE_NEOX ? base + i + half : base + 2 * i + 1;
        float a = *pa, b = *pb, co = cs[i], si = sn[i];
        *pa = a * co - b * si;
        *pb = b * co + a * si;
    }
}

void cb_rope(cuda_be *cb, float *x, int n, int n_heads, int head_dim, int rot_offset, int rot_dim, const int32_t *pos,
             const float *inv_freq, float mscale, ci_rope_style style) {
    if (n <= 0 || n_heads <= 0 || rot_dim < 2) return;
    int half = rot_dim / 2;
    cb_launch(cb, rope_kernel, dim3(n), dim3(128), (size_t)2 * half * sizeof(float), x, n_heads, head_dim, rot_offset, rot_dim, pos,
                                                                           inv_freq, mscale, (int)style);
    cb_launched(cb, "rope");
}

/* mla_rope (backend.h), a block per token: the latent row's RMSNorm over its kv_lora floats
 * (rmsnorm_strided_kernel's sums: the same thread count, see cb_mla_rope), then RoPE on the
 * row's last rope floats and on every query head's (rope_kernel's arithmetic); the norm and the
 * rotations touch disjoint floats, each read and written by one thread. */
__global__ void mla_rope_kernel(float *lat, float *q, const float *w, float eps, int n_heads, int nope, int rope,
                                int kv_lora, const int32_t *pos, const float *inv_freq, float mscale, int style) {
    pdl_enter();
    extern __shared__ float sm[];
    __shared__ float sh[32];
    const int half = rope / 2, t = blockIdx.x, qd = nope + rope;
    float *cs = sm, *sn = sm + half;
    rope_table(cs, sn, (float)pos[t], inv_freq, half, mscale);
    float *lr = lat + (int64_t)t * (kv_lora + rope);
    float s = 0.0f;
    for (int i = threadIdx.x; i < kv_lora; i += blockDim.x) s = fmaf(lr[i], lr[i], s);
    s = block_sum(s, sh);   /* its barriers also publish the cos / sin table */
    const float sc = (float)(1.0 / sqrt((double)s / (double)kv_lora + (double)eps));
    for (int i = threadIdx.x; i < kv_lora; i += blockDim.x) lr[i] = w ? lr[i] * sc * w[i] : lr[i] * sc;
    for (int k = threadIdx.x; k < (n_heads + 1) * half; k += blockDim.x) {   /* "head" 0: the latent row */
        const int h = k / half, i = k - h * half;
        float *base = h == 0 ? lr + kv_lora : q + ((int64_t)t * n_heads + h - 1) * qd + nope;
        const int2 o = rope_offs(style, i, half);
        const float2 r = rope_rot(base[o.x], base[o.y], cs[i], sn[i]);   /* the bits of mla_prepare's */
        base[o.x] = r.x;
        base[o.y] = r.y;
    }
}

void cb_mla_rope(cuda_be *cb, float *lat, float *q, const float *kv_norm, float eps, int n, int n_heads, int nope,
                 int rope, int kv_lora, const int32_t *pos, const float *inv_freq, float mscale, ci_rope_style style) {
    if (n <= 0 || kv_lora <= 0) return;
    if (rope < 2) rope = 0;
    const int th = rms_threads(kv_lora);   /* as cb_rmsnorm_strided */
    cb_launch(cb, mla_rope_kernel, dim3(n), dim3(th), (size_t)(rope / 2) * 2 * sizeof(float), lat, q, kv_norm, eps,
              n_heads, nope, rope, kv_lora, pos, inv_freq, mscale, (int)style);
    cb_launched(cb, "mla_rope");
}

/* head_norm_rope (backend.h), a block per (head, token): the token's cos / sin table, the head's
 * RMSNorm with rmsnorm_kernel's sums (the same thread count, see cb_head_norm_rope), then the
 * rotation of its normed floats (rope_kernel's arithmetic): the bits of the two kernels. */
__global__ void head_norm_rope_kernel(float *x, int n_heads, int head_dim, const float *w, float eps, int rot_offset,
                                      int rot_dim, const int32_t *pos, const float *inv_freq, float mscale, int style) {
    pdl_enter();
    extern __shared__ float sm[];
    __shared__ float sh[32];
    const int half = rot_dim / 2, h = blockIdx.x, t = blockIdx.y;
    float *cs = sm, *sn = sm + half;
    rope_table(cs, sn, (float)pos[t], inv_freq, half, mscale);
    float *xr = x + ((int64_t)t * n_heads + h) * head_dim;
    float s = 0.0f;
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) s = fmaf(xr[i], xr[i], s);
    s = block_sum(s, sh);   /* its barriers also publish the cos / sin table */
    const float sc = (float)(1.0 / sqrt((double)s / (double)head_dim + (double)eps));
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) xr[i] = w ? xr[i] * sc * w[i] : xr[i] * sc;
    __syncthreads();   /* the normed floats, written by other threads, before they rotate */
    float *base = xr + rot_offset;
    for (int i = threadIdx.x; i < half; i += blockDim.x) {
        float *pa = style == CI_ROPE_NEOX ? base + i : base + 2 * i;
        float *pb = style == CI_ROPE_NEOX ? base + i + half : base + 2 * i + 1;
        float a = *pa, b = *pb, co = cs[i], si = sn[i];
        *pa = a * co - b * si;
        *pb = b * co + a * si;
    }
}

void cb_head_norm_rope(cuda_be *cb, float *x, int n, int n_heads, int head_dim, const float *w, float eps,
                       int rot_offset, int rot_dim, const int32_t *pos, const float *inv_freq, float mscale,
                       ci_rope_style style) {
    if (n <= 0 || n_heads <= 0 || head_dim <= 0) return;
    if (rot_dim < 2) rot_dim = 0;
    const int th = rms_threads(head_dim);   /* as cb_rmsnorm */
    cb_launch(cb, head_norm_rope_kernel, dim3((unsigned)n_heads, (unsigned)n), dim3(th),
              (size_t)(rot_dim / 2) * 2 * sizeof(float), x, n_heads, head_dim, w, eps, rot_offset, rot_dim, pos,
              inv_freq, mscale, (int)style);
    cb_launched(cb, "head_norm_rope");
}

/* Blocks of (token, 4 heads): each block makes the token's cos / sin table, its warps take
 * one head each (q heads, then k heads), norm it into the warp's shared row, rotate it from
 * there and write it back (and k into its cache row); the first block of the token also
 * copies v's row into the cache. The cache row is pos[t], or with pages (pg.tab set) the row
 * of pos[t] through the token's block table (its own with per_row, else the shared one). */
__global__ void qk_rope_store_kernel(float *q, float *k, const float *v, int n_heads, int n_kv, int hd,
                                     const float *q_norm, const float *k_norm, float eps, int rot_dim,
                                     const int32_t *pos, const float *inv_freq, float mscale, int style, float *kc,
                                     float *vc, int kv_stride, float *const *kv_tab, ci_pages pg) {
    pdl_enter();
    if (kv_tab) { /* a batch step: row blockIdx.x's own cache */
        kc = kv_tab[2 * blockIdx.x];
        vc = kv_tab[2 * blockIdx.x + 1];
    }
    extern __shared__ float sm[];
    int half = rot_dim / 2, t = blockIdx.x, warp = threadIdx.x >> 5, lane = threadIdx.x & 31, nw = blockDim.x >> 5;
    float *cs = sm, *sn = sm + half, *row = sm + 2 * half + warp * hd;
    const int h = blockIdx.y * nw + warp, live = h < n_heads + n_kv;
    const int isk = h >= n_heads;
    float *src = isk ? k + ((int64_t)t * n_kv + (h - n_heads)) * hd : q + ((int64_t)t * n_heads + h) * hd;
    /* the head's values first (up to 8 per lane, all loads in flight), then the table */
    float vals[8];
    hnr_load(vals, src, hd, lane, live);
    int p = pos[t];
    const int64_t prow = pg_row(pg_table(pg, t), pg.blk_log2, p);   /* the cache row */
    rope_table(cs, sn, (float)p, inv_freq, half, mscale);
    __syncthreads();
    if (live) {
        float *dst2 = isk ? kc + prow * kv_stride + (int64_t)(h - n_heads) * hd : NULL;
        hnr_finish(vals, src, row, hd, isk ? k_norm : q_norm, eps, rot_dim, cs, sn, style, lane, [&](int i, float o) {
            src[i] = o;
            if (dst2) dst2[i] = o;
        });
    }
    if (blockIdx.y) return;
    const float *vr = v + (int64_t)t * n_kv * hd;
    float *vd = vc + prow * kv_stride;
    for (int i = threadIdx.x; i < n_kv * hd; i += blockDim.x) vd[i] = vr[i];
}

void cb_qk_rope_store(cuda_be *cb, float *q, float *k, const float *v, int n, int n_heads, int n_kv, int hd,
                      const float *q_norm, const float *k_norm, float eps, int rot_dim, const int32_t *pos,
                      const float *inv_freq, float mscale, ci_rope_style style, float *kc, float *vc, int kv_stride,
                      float *const *kv_tab, const ci_pages *pages) {
    if (n <= 0) return;
    if (rot_dim < 0 || rot_dim > hd || hd > 2048) {
        if (!cb->failed) {
            cb->failed = 1;
            snprintf(cb->base.last_error, sizeof cb->base.last_error, "CUDA: qk_rope_store: head_dim %d / rot_dim %d not supported", hd, rot_dim);
        }
        return;
    }
    int half = rot_dim / 2, th = 128;
    size_t smem = ((size_t)2 * half + (size_t)(th / 32) * hd) * sizeof(float);
    dim3 grid(n, (n_heads + n_kv + th / 32 - 1) / (th / 32));
    cb_launch(cb, qk_rope_store_kernel, dim3(grid), dim3(th), smem, q, k, v, n_heads, n_kv, hd, q_norm, k_norm, eps, rot_dim, pos,
                                                      inv_freq, mscale, (int)style, kc, vc, kv_stride, kv_tab,
                                                      cb_pages(pages));
    cb_launched(cb, "qk_rope_store");
}

__global__ void kv_store_kernel(float *cache, int stride, const float *src, int width, const int32_t *pos) {
    pdl_enter();
    int t = blockIdx.x;
    float *d = cache + (int64_t)pos[t] * stride;
    const float *s = src + (int64_t)t * width;
    for (int i = threadIdx.x; i < width; i += blockDim.x) d[i] = s[i];
}

void cb_kv_store(cuda_be *cb, float *cache, int stride, const float *src, int width, int n, const int32_t *pos) {
    if (n <= 0 || width <= 0) return;
    cb_launch(cb, kv_store_kernel, dim3(n), dim3(256), 0, cache, stride, src, width, pos);
    cb_launched(cb, "kv_store");
}

__device__ __forceinline__ float silu_mul(float a, float b) { return a / (1.0f + expf(-a)) * b; }

/* four elements a thread by float4 where g and u are 16-byte aligned (the same expression per
 * element) */
__global__ void swiglu_kernel(float *g, const float *u, int64_t count) {
    pdl_enter();
    const int64_t first = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
    int64_t done = 0;
    if ((((uintptr_t)g | (uintptr_t)u) & 15) == 0) {
        const int64_t quads = count / 4;
        for (int64_t i = first; i < quads; i += stride) {
            const float4 a = ((const float4 *)g)[i], b = ((const float4 *)u)[i];
            ((float4 *)g)[i] = make_float4(silu_mul(a.x, b.x), silu_mul(a.y, b.y), silu_mul(a.z, b.z), silu_mul(a.w, b.w));
        }
        done = quads * 4;
    }
    for (int64_t i = done + first; i < count; i += stride) g[i] = silu_mul(g[i], u[i]);
}

/* as the CPU's: the same comparisons, so the same bits */
__global__ void clamp_gu_kernel(float *g, float *u, int64_t count, float L) {
    pdl_enter();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x) {
        const float a = g[i], b = u[i];
        if (a > L) g[i] = L;
        u[i] = b > L ? L : b < -L ? -L : b;
    }
}

void cb_clamp_gu(cuda_be *cb, float *g, float *u, int64_t count, float limit) {
    if (count <= 0) return;
    cb_launch(cb, clamp_gu_kernel, dim3(blocks_for(count, 256)), dim3(256), 0, g, u, count, limit);
    cb_launched(cb, "clamp_gu");
}

void cb_swiglu(cuda_be *cb, float *g, const float *u, int64_t count) {
    if (count <= 0) return;
    cb_launch(cb, swiglu_kernel, dim3(blocks_for((count + 3) / 4, 256)), dim3(256), 0, g, u, count);
    cb_launched(cb, "swiglu");
}

__global__ void add_kernel(float *y, const float *x, int64_t count) {
    pdl_enter();
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < count; i += (int64_t)gridDim.x * blockDim.x)
        y[i] += x[i];
}

void cb_add(cuda_be *cb, float *y, const float *x, int64_t count) {
    if (count <= 0) return;
    cb_launch(cb, add_kernel, dim3(blocks_for(count, 256)), dim3(256), 0, y, x, count);
    cb_launched(cb, "add");
}

/* Four floats a thread where src is 16-byte and dst 8-byte aligned (a 2-byte store per
 * thread left the conversion of a [4096, 2688] prompt at ~1.2 TB/s), the rest one at a time. */
__global__ void convert_kernel(void *dst, const float *src, int64_t count, int to_bf16) {
    pdl_enter();
    const int64_t first = blockIdx.x * (int64_t)blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
    int64_t done = 0;
    if (((uintptr_t)src & 15) == 0 && ((uintptr_t)dst & 7) == 0) {
        const int64_t quads = count / 4;
        for (int64_t i = first; i < quads; i += stride) {
            const float4 v = ((const float4 *)src)[i];
            uint2 w;
            if (to_bf16) {
                __nv_bfloat162 lo = __floats2bfloat162_rn(v.x, v.y), hi = __floats2bfloat162_rn(v.z, v.w);
                w.x = *(const unsigned *)&lo;
                w.y = *(const unsigned *)&hi;
            } else {
                __half2 lo = __floats2half2_rn(f16_sat(v.x), f16_sat(v.y)), hi = __floats2half2_rn(f16_sat(v.z), f16_sat(v.w));
                w.x = *(const unsigned *)&lo;
                w.y = *(const unsigned *)&hi;
            }
            ((uint2 *)dst)[i] = w;
        }
        done = quads * 4;
    }
    for (int64_t i = done + first; i < count; i += stride) {
        if (to_bf16) ((__nv_bfloat16 *)dst)[i] = __float2bfloat16_rn(src[i]);
        else ((__half *)dst)[i] = __float2half_rn(f16_sat(src[i]));
    }
}

void cb_convert(cuda_be *cb, void *dst, const float *src, int64_t count, int to_bf16) {
    if (count <= 0) return;
    cb_launch(cb, convert_kernel, dim3(blocks_for((count + 3) / 4, 256)), dim3(256), 0, dst, src, count, to_bf16);
    cb_launched(cb, "convert");
}

__global__ void embed_kernel(float *out, const void *data, int dtype, int64_t cols, const int32_t *ids,
                             const void *scale, int scale_dtype, int block, int64_t scale_cols) {
    pdl_enter();
    int t = blockIdx.x;
    int64_t r = ids[t];
    float *o = out + (int64_t)t * cols;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
        int64_t i = r * cols + c;
        float v;
        if (dtype == CI_F32) v = ((const float *)data)[i];
        else if (dtype == CI_BF16) v = __uint_as_float((unsigned)((const unsigned short *)data)[i] << 16);
        else if (dtype == CI_F16) v = __half2float(((const __half *)data)[i]);
        else {
            __half_raw h = __nv_cvt_fp8_to_halfraw(((const __nv_fp8_storage_t *)data)[i], __NV_E4M3);
            v = __half2float(*(__half *)&h);
            if (scale && block > 0) {
                int64_t si = (r / block) * scale_cols + c / block;
                float s;
                if (scale_dtype == CI_F32) s = ((const float *)scale)[si];
                else if (scale_dtype == CI_BF16) s = __uint_as_float((unsigned)((const unsigned short *)scale)[si] << 16);
                else {
                    unsigned e = ((const unsigned char *)scale)[si];
                    s = e == 255 ? __int_as_float(0x7fc00000) : e == 0 ? __uint_as_float(0x00400000u) : __uint_as_float(e << 23);
                }
                v *= s;
            }
        }
        o[c] = v;
    }
}

void cb_embed(cuda_be *cb, float *out, const ci_mat *E, const int32_t *ids, int n) {
    if (n <= 0 || E->cols <= 0) return;
    int64_t sc = E->block > 0 ? (E->cols + E->block - 1) / E->block : 0;
    cb_launch(cb, embed_kernel, dim3(n), dim3(256), 0, out, E->data, (int)E->dtype, E->cols, ids, E->scale, (int)E->scale_dtype,
                                            E->block, sc);
    cb_launched(cb, "embed");
}

/* Better candidate: a number beats NaN; then the larger value; then the smaller index. */
__device__ __forceinline__ bool am_better(float v, int i, float bv, int bi) {
    bool vn = isnan(v), bn = isnan(bv);
    if (vn != bn) return bn;
    if (!vn && v != bv) return v > bv;
    return i < bi;
}

/* Two passes: AM_BLOCKS blocks each find the best of their slice, one block the best of
 * those (index order breaks ties, so the split changes nothing). */
enum { AM_BLOCKS = 120, AM_THREADS = 256 };

__device__ void am_block(float &bv, int &bi, float *sv, int *si) {
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (am_better(ov, oi, bv, bi)) { bv = ov; bi = oi; }
    }
    int w = threadIdx.x >> 5, l = threadIdx.x & 31, nw = blockDim.x >> 5;
    if (l == 0) { sv[w] = bv; si[w] = bi; }
    __syncthreads();
    if (w == 0) {
        bv = l < nw ? sv[l] : __int_as_float(0x7fc00000);
        bi = l < nw ? si[l] : 0x7fffffff;
        for (int o = 16; o > 0; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, bv, o);
            int oi = __shfl_xor_sync(0xffffffffu, bi, o);
            if (am_better(ov, oi, bv, bi)) { bv = ov; bi = oi; }
        }
    }
}

__global__ void argmax_part_kernel(float *pv, int *pi, const float *x, int count) {
    pdl_enter();
    __shared__ float sv[32];
    __shared__ int si[32];
    float bv = __int_as_float(0x7fc00000);
    int bi = 0x7fffffff;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < count; i += gridDim.x * blockDim.x) {
        float v = x[i];
        if (am_better(v, i, bv, bi)) { bv = v; bi = i; }
    }
    am_block(bv, bi, sv, si);
    if (threadIdx.x == 0) { pv[blockIdx.x] = bv; pi[blockIdx.x] = bi; }
}

__global__ void argmax_final_kernel(int32_t *out, const float *pv, const int *pi, int parts) {
    pdl_enter();
    __shared__ float sv[32];
    __shared__ int si[32];
    float bv = __int_as_float(0x7fc00000);
    int bi = 0x7fffffff;
    for (int i = threadIdx.x; i < parts; i += blockDim.x)
        if (am_better(pv[i], pi[i], bv, bi)) { bv = pv[i]; bi = pi[i]; }
    am_block(bv, bi, sv, si);
    if (threadIdx.x == 0) *out = bi == 0x7fffffff ? 0 : bi;
}

void cb_argmax(cuda_be *cb, int32_t *out, const float *x, int count) {
    if (count <= 0) return;
    float *pv = (float *)cb_scratch_get(cb, &cb->argmax_part, AM_BLOCKS * (sizeof(float) + sizeof(int)));
    if (!pv) return;
    int *pi = (int *)(pv + AM_BLOCKS);
    cb_launch(cb, argmax_part_kernel, dim3(AM_BLOCKS), dim3(AM_THREADS), 0, pv, pi, x, count);
    cb_launch(cb, argmax_final_kernel, dim3(1), dim3(128), 0, out, pv, pi, AM_BLOCKS);
    cb_launched(cb, "argmax");
}

