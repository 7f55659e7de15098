/* tensor.c — dtype table and scalar format conversions. */
#include "tensor.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

static const struct { const char *name; size_t size; } dtypes[CI_DTYPE_COUNT] = {
    [CI_F32] = {"F32", 4},       [CI_F16] = {"F16", 2},         [CI_BF16] = {"BF16", 2},
    [CI_F8_E4M3] = {"F8_E4M3", 1}, [CI_F8_E5M2] = {"F8_E5M2", 1}, [CI_F8_E8M0] = {"F8_E8M0", 1},
    [CI_I8] = {"I8", 1},         [CI_U8] = {"U8", 1},           [CI_I16] = {"I16", 2},
    [CI_I32] = {"I32", 4},       [CI_I64] = {"I64", 8},         [CI_U32] = {"U32", 4},
    [CI_BOOL] = {"BOOL", 1},     [CI_F64] = {"F64", 8},
};

size_t ci_dtype_size(ci_dtype t) { return (unsigned)t < CI_DTYPE_COUNT ? dtypes[t].size : 0; }
const char *ci_dtype_name(ci_dtype t) { return (unsigned)t < CI_DTYPE_COUNT ? dtypes[t].name : "?"; }

int ci_dtype_parse(const char *s, ci_dtype *out) {
    for (int i = 0; i < CI_DTYPE_COUNT; i++)
        if (strcmp(s, dtypes[i].name) == 0) { *out = (ci_dtype)i; return 0; }
    return -1;
}

int64_t ci_tensor_numel(const ci_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

const char *ci_shape_str(const int64_t *shape, int ndim, char *buf, size_t n) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, n - o, "[");
    for (int i = 0; i < ndim && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
    return buf;
}

float ci_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    union { uint32_t u; float f; } v;
    if (exp == 0) {
        float f = ldexpf((float)man, -24);
        return sign ? -f : f;
    } else if (exp == 31) {
        v.u = sign | 0x7f800000u | (man << 13);
    } else {
        v.u = sign | ((exp + 112) << 23) | (man << 13);
    }
    return v.f;
}

uint16_t ci_f32_to_f16(float f) {
    union { float f; uint32_t u; } v = { f };
    uint32_t sign = (v.u >> 16) & 0x8000u;
    float a = fabsf(f);
    if (isnan(f)) return (uint16_t)(sign | 0x7e00);
    if (a >= 65520.0f) return (uint16_t)(sign | 0x7c00);
    if (a < 6.103515625e-05f) { /* subnormal: units of 2^-24, round to nearest even */
        float q = a * 16777216.0f;
        uint32_t m = (uint32_t)nearbyintf(q);
        return (uint16_t)(sign | m);
    }
    uint32_t u = v.u & 0x7fffffffu;
    uint32_t r = u + 0xfffu + ((u >> 13) & 1u);
    return (uint16_t)(sign | ((r >> 13) - (112u << 10)));
}

float ci_fp8_e4m3_to_f32(uint8_t b) { /* E4M3FN: bias 7, no infinities, 0x7f/0xff NaN */
    int s = b >> 7, e = (b >> 3) & 0xf, m = b & 7;
    float v;
    if (e == 15 && m == 7) return NAN;
    if (e == 0) v = ldexpf((float)m, -9);
    else v = ldexpf(1.0f + m / 8.0f, e - 7);
    return s ? -v : v;
}

float ci_fp8_e5m2_to_f32(uint8_t b) {
    return ci_f16_to_f32((uint16_t)(b << 8));
}

float ci_e8m0_to_f32(uint8_t b) {
    if (b == 0xff) return NAN;
    return ldexpf(1.0f, (int)b - 127);
}
