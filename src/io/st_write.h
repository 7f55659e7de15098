/* st_write.h — writing safetensors files (make-random, tests).
 * The header lists tensors in the given order with contiguous offsets; fill() is called
 * once per tensor to produce its bytes, so a file larger than memory can be streamed.
 * st_write_file calls fill in order on the calling thread. st_write_file_par calls it from
 * n_threads worker threads at once (each call fills one whole tensor into its own buffer,
 * so fill must be safe to run concurrently for distinct i) while the calling thread writes
 * the filled tensors strictly in order; at most about ST_WRITE_WINDOW bytes of filled
 * tensors wait in memory (one larger tensor is let through alone). The file is the same
 * byte for byte either way when fill(i) depends only on i. */
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

/* Bytes of tensors filled (or being filled) but not yet written, at most (st_write_file_par);
 * lowered to a quarter of the machine's memory where that is less. */
#define ST_WRITE_WINDOW ((size_t)2 << 30)

int st_write_file(const char *path, const st_wdesc *d, int n, st_fill_fn fill, void *ctx, char *err, size_t errlen);
/* n_threads <= 0: the number of online CPUs; 1 (or a single tensor): st_write_file. */
int st_write_file_par(const char *path, const st_wdesc *d, int n, st_fill_fn fill, void *ctx, int n_threads,
                      char *err, size_t errlen);

#endif
