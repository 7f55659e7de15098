/* loaders.cuh — weight loaders shared by the GEMV-style kernels (gemv.cu, moe.cu): a raw
 * 16-byte vector of VEC elements converted to f32 in registers (cvt), or one element (one),
 * for f32, bf16, f16 and fp8 E4M3 weights; ld_stream streams weights past L1. */
#ifndef CI_CUDA_LOADERS_CUH
#define CI_CUDA_LOADERS_CUH
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

struct LF32 {
    static constexpr int VEC = 4, BYTES = 4;
    __device__ static void cvt(uint4 v, float *w) {
        w[0] = __uint_as_float(v.x); w[1] = __uint_as_float(v.y); w[2] = __uint_as_float(v.z); w[3] = __uint_as_float(v.w);
    }
    __device__ static float one(const void *p, int64_t i) { return __ldg((const float *)p + i); }
};
struct LBF16 {
    static constexpr int VEC = 8, BYTES = 2;
    __device__ static void cvt(uint4 v, float *w) {
        unsigned u[4] = { v.x, v.y, v.z, v.w };
#pragma unroll
        for (int k = 0; k < 4; k++) {
            w[2 * k] = __uint_as_float(u[k] << 16);
            w[2 * k + 1] = __uint_as_float(u[k] & 0xffff0000u);
        }
    }
    __device__ static float one(const void *p, int64_t i) {
        return __uint_as_float((unsigned)__ldg((const unsigned short *)p + i) << 16);
    }
};
struct LF16 {
    static constexpr int VEC = 8, BYTES = 2;
    __device__ static void cvt(uint4 v, float *w) {
        unsigned u[4] = { v.x, v.y, v.z, v.w };
#pragma unroll
        for (int k = 0; k < 4; k++) {
            __half2 h = *(__half2 *)&u[k];
            float2 f = __half22float2(h);
            w[2 * k] = f.x;
            w[2 * k + 1] = f.y;
        }
    }
    __device__ static float one(const void *p, int64_t i) { return __half2float(__ldg((const __half *)p + i)); }
};
__device__ __forceinline__ float2 fp8x2(unsigned short s) {
    __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)s, __NV_E4M3);
    return __half22float2(*(__half2 *)&h);
}
struct LFP8 {
    static constexpr int VEC = 16, BYTES = 1;
    __device__ static void cvt(uint4 v, float *w) {
        unsigned u[4] = { v.x, v.y, v.z, v.w };
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float2 a = fp8x2((unsigned short)(u[k] & 0xffffu)), b = fp8x2((unsigned short)(u[k] >> 16));
            w[4 * k] = a.x; w[4 * k + 1] = a.y; w[4 * k + 2] = b.x; w[4 * k + 3] = b.y;
        }
    }
    __device__ static float one(const void *p, int64_t i) {
        __half_raw h = __nv_cvt_fp8_to_halfraw(__ldg((const __nv_fp8_storage_t *)((const uint8_t *)p + i)), __NV_E4M3);
        return __half2float(*(__half *)&h);
    }
};

__device__ __forceinline__ uint4 ld_stream(const void *p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

/* 16 fp8 E4M3 weights at src times the block scale sc, as f16 at dst (both 16-byte aligned),
 * rounded to nearest even and saturated (cuda_internal.h, f16_sat): the values of an
 * element-wise LFP8::one · sc, in one 16-byte load and two 16-byte stores. */
__device__ __forceinline__ void fp8_widen16(const uint8_t *src, float sc, __half *dst) {
    float w[16];
    LFP8::cvt(ld_stream(src), w);
    unsigned h[8];
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const __half2 v = __floats2half2_rn(f16_sat(w[2 * i] * sc), f16_sat(w[2 * i + 1] * sc));
        h[i] = *(const unsigned *)&v;
    }
    ((uint4 *)dst)[0] = make_uint4(h[0], h[1], h[2], h[3]);
    ((uint4 *)dst)[1] = make_uint4(h[4], h[5], h[6], h[7]);
}

/* The warp's lanes' v added by a shuffle tree (xor 16, 8, .., 1): every lane gets the sum. */
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* An E8M0 / bf16 / f32 block scale as f32 (sd: 0 f32, 1 bf16, 2 e8m0), element i of the grid. */
__device__ __forceinline__ float scale_elem(const void *grid, int sd, int64_t i) {
    if (sd == 0) return __ldg((const float *)grid + i);
    if (sd == 1) return __uint_as_float((unsigned)__ldg((const unsigned short *)grid + i) << 16);
    unsigned e = __ldg((const unsigned char *)grid + i);
    return e == 255 ? __int_as_float(0x7fc00000) : e == 0 ? __uint_as_float(0x00400000u) : __uint_as_float(e << 23);
}

/* An expert's activation of its gate and up sums (the CPU's, nn/moe.h): relu2: relu(u)²; else
 * silu(g) · u, with g <= limit and -limit <= u <= limit when limit > 0 (DeepSeek V4). */
__device__ __forceinline__ float moe_act(float g, float u, int relu2, float limit) {
    if (relu2) {
        const float v = u > 0.0f ? u : 0.0f;
        return v * v;
    }
    if (limit > 0.0f) {
        g = fminf(g, limit);
        u = fminf(fmaxf(u, -limit), limit);
    }
    return g / (1.0f + expf(-g)) * u;
}

#endif
