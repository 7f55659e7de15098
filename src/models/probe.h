/* probe.h — measurements the CLI (bench, inspect) asks of a loaded model and its backend,
 * outside the public API of include/cinfer.h. */
#ifndef CI_PROBE_H
#define CI_PROBE_H
#include "cinfer.h"
#include <stddef.h>

/* Device-to-device copy bandwidth of the model's backend in GB/s (bytes read + bytes
 * written per second, 1e9): two 1 GiB buffers from the backend's alloc, ten copies timed
 * until a 4-byte download returns, best of 5 rounds. 0 with err "" on the CPU (no device
 * memory to probe); 0 with one line in err when the buffers cannot be had or the backend
 * reports an error. Run it after the model's own work: the buffers take 2 GiB while it runs. */
double ci_model_copy_gbs(ci_model *m, char *err, size_t errlen);
/* The same probe on a backend without a model (bench/gemv_cuda.c). */
struct ci_backend;
double ci_backend_copy_gbs(struct ci_backend *be, char *err, size_t errlen);

/* Rough bytes of scratch a device session needs beyond weights and cache: activations for
 * a prefill chunk of 512 tokens (hidden rows, q / k / v, attention output, the MLP's two
 * intermediate rows), two logits rows, and 256 MiB for the GEMM library's workspace and
 * captured graphs. An estimate for `inspect`, not what any backend allocates. */
size_t ci_model_scratch_estimate(const ci_model *m);

#endif
