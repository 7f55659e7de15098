/* st_write.h — writing safetensors files (make-random, tests).
 * The header lists tensors in the given order with contiguous offsets; fill() is called
 * once per tensor, in order, to produce its bytes, so a file larger than memory can be
 * streamed. */
#ifndef CI_ST_WRITE_H
#define CI_ST_WRITE_H
#include "../core/tensor.h"
#include <stddef.h>

typedef struct {
    const char *name;
    ci_dtype dtype;
    int ndim;
    int64_t shape[CI_MAX_DIMS];
} st_wdesc;

typedef int (*st_fill_fn)(void *ctx, int i, void *buf, size_t nbytes);

int st_write_file(const char *path, const st_wdesc *d, int n, st_fill_fn fill, void *ctx, char *err, size_t errlen);

#endif
