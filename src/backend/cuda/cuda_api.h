/* cuda_api.h — the one entry point of libcinfer_cuda.so, shared by the library (the .cu files in cuda/)
 * and its run-time loader (backend/cuda_loader.c, part of the CPU-only core).
 *
 * The core never links CUDA: cuda_loader.c dlopen()s libcinfer_cuda.so from beside the
 * executable (or from $ORIGIN/..) and calls CI_CUDA_ENTRY. The library links the CUDA runtime
 * statically and cuBLASLt dynamically, so a machine without the driver or the toolkit fails
 * the dlopen / the entry call with a reason, and the CPU engine runs as before. abi is
 * CI_CUDA_ABI (bumped whenever ci_backend changes) so a stale library is refused. */
#ifndef CI_CUDA_API_H
#define CI_CUDA_API_H
#ifdef __cplusplus
extern "C" {
#endif
#include "../backend.h"
#ifdef __cplusplus
}
#endif
#include <stddef.h>

#define CI_CUDA_ENTRY "cinfer_cuda_backend_new"
#define CI_CUDA_LIB "libcinfer_cuda.so"
#define CI_CUDA_ABI (1000 + (int)sizeof(ci_backend))

#ifdef __cplusplus
extern "C" {
#endif
/* A CUDA backend on `device` (ordinal), or NULL with a one-line reason in err (no driver,
 * no device, device not sm_90-capable, abi mismatch). pool / pool_free: the CPU pool the
 * backend keeps in be->pool (it frees it with pool_free in its free()). */
typedef ci_backend *(*ci_cuda_entry_fn)(int abi, int device, ci_pool *pool, void (*pool_free)(ci_pool *),
                                        char *err, size_t errlen);
ci_backend *cinfer_cuda_backend_new(int abi, int device, ci_pool *pool, void (*pool_free)(ci_pool *), char *err,
                                    size_t errlen);
#ifdef __cplusplus
}
#endif
#endif
