/* prof.cuh — where a kernel's time goes inside it: phase marks of one thread a block, compiled in
 * only with -DCB_PROF (cmake -DCINFER_CUDA_PROF=ON, `make gpu-stage-prof`); without it every
 * macro below is empty and the kernels are unchanged.
 *
 * A kernel opens with CB_PROF_BEGIN(kind, K, rows, ks) (thread 0 of each block reads %globaltimer
 * and clock64), marks phases with CB_PROF_MARK(i) (i = 1 .. CB_PROF_MARKS - 1: clock64 of thread 0)
 * and ends with CB_PROF_END() (%globaltimer again; the record goes to the module's buffer). The
 * buffer is written out when the backend is freed (cb_prof_dump, to $CINFER_CUDA_PROF_OUT) and
 * bench/prof_phases.py reads it: per kind and shape, each phase's median time, a launch's span
 * from its first block's start to its last block's end, and the gaps between launches. */
#ifndef CI_CUDA_PROF_CUH
#define CI_CUDA_PROF_CUH
#include <stdint.h>

enum { CB_PROF_MARKS = 13, CB_PROF_CAP = 1 << 17 };
struct cb_prof_rec {
    uint32_t kind, K, rows, ks, block, grid, smid, marks;
    uint64_t g0, g1;                   /* %globaltimer at BEGIN and END (ns) */
    uint64_t clk[CB_PROF_MARKS];       /* clock64 at BEGIN (0) and at each MARK; 0: not reached */
    uint64_t clk_end;                  /* clock64 at END */
};
enum { CB_PROF_DENSE = 1, CB_PROF_QT_GU = 2, CB_PROF_QT_DN = 3, CB_PROF_MOE_FUSED = 4 };

#ifdef CB_PROF
/* one buffer for all files (cudaMalloc'd by cb_prof_get, cuda_backend.cu); each file that records
 * holds its pointer in its own __device__ symbol (no relocatable device code), set by the bind
 * function CB_PROF_TU(name) defines, called at backend start (cb_prof_bind_all) */
struct cb_prof_dev {
    cb_prof_rec *buf;
    unsigned *n;
};
cb_prof_dev cb_prof_get(void);
void cb_prof_bind_all(void);
#define CB_PROF_TU(name)                                                                                       \
    static __device__ cb_prof_dev cbp_d;                                                                       \
    void cb_prof_bind_##name(void) {                                                                           \
        const cb_prof_dev d = cb_prof_get();                                                                   \
        cudaMemcpyToSymbol(cbp_d, &d, sizeof d);                                                               \
    }
__device__ __forceinline__ uint64_t cb_gtimer() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ __forceinline__ unsigned cb_smid() {
    unsigned s;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(s));
    return s;
}
#define CB_PROF_BEGIN(kind_, K_, rows_, ks_)                                                                   \
    cb_prof_rec cbp_r = {};                                                                                    \
    if (threadIdx.x == 0) {                                                                                    \
        cbp_r.g0 = cb_gtimer();                                                                                \
        cbp_r.clk[0] = clock64();                                                                              \
        cbp_r.kind = (kind_); cbp_r.K = (uint32_t)(K_); cbp_r.rows = (uint32_t)(rows_); cbp_r.ks = (uint32_t)(ks_); \
    }
#define CB_PROF_MARK(i)                                                                                        \
    do {                                                                                                       \
        if (threadIdx.x == 0) cbp_r.clk[i] = clock64();                                                        \
    } while (0)
/* where a device function called by a marking kernel marks (qt_stage's, route_row's pm): slot i of
 * the record; the function marks slot pm + i with CB_PROF_PM (pm nullptr: no mark) */
#define CB_PROF_AT(i) (cbp_r.clk + (i))
#define CB_PROF_PM(pm, i)                                                                                      \
    do {                                                                                                       \
        if ((pm) && threadIdx.x == 0) (pm)[i] = clock64();                                                     \
    } while (0)
#define CB_PROF_END()                                                                                          \
    do {                                                                                                       \
        if (threadIdx.x == 0) {                                                                                \
            cbp_r.clk_end = clock64();                                                                         \
            cbp_r.g1 = cb_gtimer();                                                                            \
            cbp_r.block = blockIdx.x + blockIdx.y * gridDim.x;                                                 \
            cbp_r.grid = gridDim.x * gridDim.y;                                                                \
            cbp_r.smid = cb_smid();                                                                            \
            cbp_r.marks = CB_PROF_MARKS;                                                                       \
            const unsigned k_ = atomicAdd(cbp_d.n, 1u);                                                        \
            if (k_ < CB_PROF_CAP) cbp_d.buf[k_] = cbp_r;                                                       \
        }                                                                                                      \
    } while (0)
#else
#define CB_PROF_TU(name)
#define CB_PROF_AT(i) nullptr
#define CB_PROF_PM(pm, i) \
    do {                  \
        (void)(pm);       \
    } while (0)
#define CB_PROF_BEGIN(kind_, K_, rows_, ks_)
#define CB_PROF_MARK(i) \
    do {                \
    } while (0)
#define CB_PROF_END() \
    do {              \
    } while (0)
#endif
#endif
