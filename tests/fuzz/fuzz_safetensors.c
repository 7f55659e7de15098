/* fuzz_safetensors.c — libFuzzer target for the safetensors header parser.
 *
 * The input is a whole safetensors file image: an 8-byte little-endian header length N,
 * N bytes of JSON header, then the data area. Inputs whose length prefix does not fit
 * are dropped here (st_open_file rejects them before parsing; the unit tests cover that).
 * On success the target re-checks the invariants safetensors.h promises, so a parser bug
 * that lets a bad header through shows up as a crash, not only memory errors do. */
#include "io/safetensors.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *buf, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *buf, size_t size) {
    if (size < 8) return 0;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | buf[i];
    if (n > size - 8) return 0;
    const uint8_t *data = buf + 8 + n;
    size_t data_len = size - 8 - (size_t)n;

    ci_tensor *t = NULL;
    int nt = 0;
    char err[512];
    if (st_parse_header((const char *)buf + 8, (size_t)n, data, data_len, "fuzz.safetensors", &t, &nt, err, sizeof err)) {
        if (t || nt || !strstr(err, "fuzz.safetensors")) __builtin_trap(); /* failures clear outputs, name the file */
        return 0;
    }
    for (int i = 0; i < nt; i++) {
        const ci_tensor *x = &t[i];
        if (x->ndim < 0 || x->ndim > CI_MAX_DIMS) __builtin_trap();
        uint64_t bytes = ci_dtype_size(x->dtype);
        for (int d = 0; d < x->ndim; d++) {
            if (x->shape[d] < 0) __builtin_trap();
            bytes *= (uint64_t)x->shape[d];
        }
        if (bytes != x->nbytes) __builtin_trap();
        const uint8_t *p = x->data;
        if (p < data || (size_t)(p - data) > data_len || x->nbytes > data_len - (size_t)(p - data)) __builtin_trap();
        if (x->nbytes) { volatile uint8_t sink = p[0]; sink ^= p[x->nbytes - 1]; (void)sink; } /* ASan sees the ends */
        if (i && strcmp(t[i - 1].name, x->name) >= 0) __builtin_trap(); /* sorted, unique */
    }
    st_free_tensors(t, nt);
    return 0;
}
