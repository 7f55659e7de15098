/* tensor.h — element types and borrowed tensor views.
 *
 * A ci_tensor never owns its data: it points into a safetensors mmap (or an arena). Shapes
 * are row-major, outermost first, as safetensors and PyTorch write them. */
#ifndef CI_TENSOR_H
#define CI_TENSOR_H
#include <stddef.h>
#include <stdint.h>

typedef enum {
    CI_F32, CI_F16, CI_BF16, CI_F8_E4M3, CI_F8_E5M2, CI_F8_E8M0,
    CI_I8, CI_U8, CI_I16, CI_I32, CI_I64, CI_U32, CI_BOOL, CI_F64,
    CI_DTYPE_COUNT
} ci_dtype;

#define CI_MAX_DIMS 8

typedef struct {
    const char *name;            /* owned by whoever made the view (safetensors set) */
    ci_dtype dtype;
    int ndim;
    int64_t shape[CI_MAX_DIMS];
    const void *data;            /* borrowed */
    size_t nbytes;
} ci_tensor;

size_t ci_dtype_size(ci_dtype t);          /* bytes per element */
const char *ci_dtype_name(ci_dtype t);     /* safetensors spelling: "BF16" */
int ci_dtype_parse(const char *s, ci_dtype *out); /* 0 if known */
int64_t ci_tensor_numel(const ci_tensor *t);
/* "[4096, 128]" into buf; returns buf. */
const char *ci_shape_str(const int64_t *shape, int ndim, char *buf, size_t n);

/* Scalar conversions used by every kernel and by tools. */
static inline float ci_bf16_to_f32(uint16_t h) {
    union { uint32_t u; float f; } v = { (uint32_t)h << 16 };
    return v.f;
}
static inline uint16_t ci_f32_to_bf16(float f) { /* round to nearest even */
    union { float f; uint32_t u; } v = { f };
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((v.u >> 16) | 0x40);
    uint32_t r = 0x7fffu + ((v.u >> 16) & 1u);
    return (uint16_t)((v.u + r) >> 16);
}
float ci_f16_to_f32(uint16_t h);
uint16_t ci_f32_to_f16(float f);
float ci_fp8_e4m3_to_f32(uint8_t b);
float ci_fp8_e5m2_to_f32(uint8_t b);
float ci_e8m0_to_f32(uint8_t b);

#endif
