/* cuda_backend.cu — the CUDA backend: device memory, weights, the op table, graphs, errors.
 *
 * Owns one device, one stream, one cuBLAS handle with a fixed workspace, and every device
 * buffer it hands out. Weights are uploaded once through weight() in their checkpoint
 * dtype (a sorted table maps host ranges to device copies, so a tied head and its
 * embedding share one copy). Ops are enqueued on the stream and never synchronise;
 * download() is the only point where the host waits. The first CUDA failure is sticky
 * (status() / last_error), and later ops become no-ops so a failed step cannot corrupt a
 * cache further.
 *
 * matmul dispatch: n <= CB_GEMV_MAX_N token rows (decode, small batches) go to the
 * hand-written GEMV kernels (gemv.cu), which stream each weight once at close to the copy
 * bandwidth; larger n (prefill) to cuBLAS (tensor cores for f16 / bf16). fp8 block-scaled
 * weights have no GEMM path yet: prefill runs the GEMV kernel over groups of 8 rows.
 * MLX-quantized views (dtype CI_U32) go to quant.cu (packed-code GEMV, or bf16 widening and
 * the GEMM); weight_q places their descriptors. */
#include "cuda_api.h"
#include "cuda_internal.h"
#include "prof.cuh"
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#ifdef CB_PROF
/* prof.cuh's buffer: allocated at the first backend's start, written to $CINFER_CUDA_PROF_OUT
 * (records as they are, the count first) when a backend is freed */
static cb_prof_dev cb_prof_host;
cb_prof_dev cb_prof_get(void) {
    if (!cb_prof_host.buf) {
        cudaMalloc(&cb_prof_host.buf, sizeof(cb_prof_rec) * CB_PROF_CAP);
        cudaMalloc(&cb_prof_host.n, sizeof(unsigned));
        cudaMemset(cb_prof_host.n, 0, sizeof(unsigned));
    }
    return cb_prof_host;
}
void cb_prof_bind_quant_mma(void);
void cb_prof_bind_quant_mma_moe(void);
void cb_prof_bind_moe_fused(void);
void cb_prof_bind_all(void) {
    cb_prof_bind_quant_mma();
    cb_prof_bind_quant_mma_moe();
    cb_prof_bind_moe_fused();
}
static void cb_prof_dump(void) {
    const char *path = getenv("CINFER_CUDA_PROF_OUT");
    if (!path || !cb_prof_host.buf) return;
    unsigned n = 0;
    cudaDeviceSynchronize();
    cudaMemcpy(&n, cb_prof_host.n, sizeof n, cudaMemcpyDeviceToHost);
    const unsigned cap = CB_PROF_CAP, k = n < cap ? n : cap;
    cb_prof_rec *r = (cb_prof_rec *)malloc(sizeof *r * (k ? k : 1));
    FILE *f = fopen(path, "wb");
    if (r && f && cudaMemcpy(r, cb_prof_host.buf, sizeof *r * k, cudaMemcpyDeviceToHost) == cudaSuccess) {
        fwrite(&n, sizeof n, 1, f);
        fwrite(r, sizeof *r, k, f);
    }
    if (f) fclose(f);
    free(r);
}
#endif

static cuda_be *CB(ci_backend *be) { return (cuda_be *)be; }

int cb_fail(cuda_be *cb, const char *what, cudaError_t e) {
    if (e == cudaSuccess) return cb->failed;
    if (!cb->failed) {
        cb->failed = 1;
        snprintf(cb->base.last_error, sizeof cb->base.last_error, "CUDA: %s: %s", what, cudaGetErrorString(e));
    }
    return 1;
}

int cb_launched(cuda_be *cb, const char *what) { return cb_fail(cb, what, cudaGetLastError()); }

static void retire(cuda_be *cb, void *p) {
    if (!p) return;
    if (cb->n_retired == cb->cap_retired) {
        int cap = cb->cap_retired ? 2 * cb->cap_retired : 16;
        void **r = (void **)realloc(cb->retired, (size_t)cap * sizeof *r);
        if (!r) { cudaFree(p); return; } /* nothing recorded uses it yet in the common case */
        cb->retired = r;
        cb->cap_retired = cap;
    }
    cb->retired[cb->n_retired++] = p;
}

void *cb_scratch_get(cuda_be *cb, cb_scratch *s, size_t bytes) {
    if (bytes <= s->bytes) return s->p;
    size_t want = bytes + bytes / 4 + 4096;
    void *p = NULL;
    if (cb_fail(cb, "scratch allocation", cudaMalloc(&p, want))) return NULL;
    retire(cb, s->p);
    s->p = p;
    s->bytes = want;
    return p;
}

/* ---- memory ------------------------------------------------------------------------- */

static void *cb_alloc(ci_backend *be, size_t bytes) {
    cuda_be *cb = CB(be);
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 256);
    if (e != cudaSuccess) {
        cudaGetLastError(); /* not sticky: the caller reports the allocation */
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        snprintf(be->last_error, sizeof be->last_error,
                 "CUDA: out of device memory: %.1f MiB asked, %.1f MiB free of %.1f MiB", bytes / 1048576.0,
                 fr / 1048576.0, tot / 1048576.0);
        (void)cb;
        return NULL;
    }
    return p;
}

static void cb_buf_free(ci_backend *be, void *buf) {
    (void)be;
    if (buf) cudaFree(buf);
}

static void cb_upload(ci_backend *be, void *dst, const void *src, size_t bytes) {
    cuda_be *cb = CB(be);
    if (cb->failed || !bytes) return;
    CB_CHECK(cb, "upload", cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cb->stream));
}

static void cb_download(ci_backend *be, void *dst, const void *src, size_t bytes) {
    cuda_be *cb = CB(be);
    if (cb->failed) { memset(dst, 0, bytes); return; }
    if (!bytes) return;
    if (CB_CHECK(cb, "download", cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cb->stream)) ||
        CB_CHECK(cb, "step", cudaStreamSynchronize(cb->stream)))
        memset(dst, 0, bytes);
}

static void cb_copy(ci_backend *be, void *dst, const void *src, size_t bytes) {
    cuda_be *cb = CB(be);
    if (cb->failed || !bytes) return;
    CB_CHECK(cb, "copy", cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, cb->stream));
}

static void cb_copy_2d(ci_backend *be, void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                       size_t height) {
    cuda_be *cb = CB(be);
    if (cb->failed || !width || !height) return;
    if (dpitch > INT_MAX || spitch > INT_MAX) {   /* past what cudaMemcpy2D takes: a copy a row */
        for (size_t i = 0; i < height; i++) cb_copy(be, (char *)dst + i * dpitch, (const char *)src + i * spitch, width);
        return;
    }
    CB_CHECK(cb, "copy 2d", cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, cudaMemcpyDeviceToDevice, cb->stream));
}

/* Binary search of the weight table: index of the entry for host, or where it would go. */
static int wfind(const cuda_be *cb, const void *host, int *found) {
    int lo = 0, hi = cb->n_weights;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if ((uintptr_t)cb->weights[mid].host < (uintptr_t)host) lo = mid + 1;
        else hi = mid;
    }
    *found = lo < cb->n_weights && cb->weights[lo].host == host;
    return lo;
}

/* A new table entry for host (not in it yet), in order; -1 when out of host memory. */
static int wtab_insert(cuda_be *cb, const void *host, void *dev, size_t bytes, int part) {
    int found, i = wfind(cb, host, &found);
    if (cb->n_weights == cb->cap_weights) {
        int cap = cb->cap_weights ? 2 * cb->cap_weights : 256;
        cb_weight *w = (cb_weight *)realloc(cb->weights, (size_t)cap * sizeof *w);
        if (!w) return -1;
        cb->weights = w;
        cb->cap_weights = cap;
    }
    memmove(cb->weights + i + 1, cb->weights + i, (size_t)(cb->n_weights - i) * sizeof *cb->weights);
    cb->weights[i] = (cb_weight){ host, dev, bytes, part };
    cb->n_weights++;
    return 0;
}

/* last_error for a weight allocation of `bytes` that failed, with what the device has left */
static void weights_oom(cuda_be *cb, size_t bytes) {
    cudaGetLastError();
    size_t fr = 0, tot = 0;
    cudaMemGetInfo(&fr, &tot);
    snprintf(cb->base.last_error, sizeof cb->base.last_error,
             "CUDA: out of device memory for weights: %.1f MiB more needed after %.1f MiB, %.1f MiB free of %.1f MiB",
             bytes / 1048576.0, cb->weight_bytes / 1048576.0, fr / 1048576.0, tot / 1048576.0);
}

static const void *op_weight(ci_backend *be, const void *host, size_t bytes) {
    cuda_be *cb = CB(be);
    if (!host) return NULL;
    int found, i = wfind(cb, host, &found);
    if (found && cb->weights[i].bytes >= bytes) return cb->weights[i].dev;
    void *d = NULL;
    if (cudaMalloc(&d, bytes ? bytes : 1) != cudaSuccess) {
        weights_oom(cb, bytes);
        return NULL;
    }
    if (cudaMemcpy(d, host, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
        cudaGetLastError();
        cudaFree(d);
        snprintf(be->last_error, sizeof be->last_error, "CUDA: copying %.1f MiB of weights to the device failed",
                 bytes / 1048576.0);
        return NULL;
    }
    if (found) { /* a longer range from the same address: keep the old copy alive, point at the new one */
        if (!cb->weights[i].part) retire(cb, cb->weights[i].dev);
        cb->weights[i].dev = d;
        cb->weights[i].bytes = bytes;
        cb->weights[i].part = 0;
        cb->weight_bytes += bytes;
        return d;
    }
    if (wtab_insert(cb, host, d, bytes, 0)) {
        cudaFree(d);
        snprintf(be->last_error, sizeof be->last_error, "CUDA: out of host memory");
        return NULL;
    }
    cb->weight_bytes += bytes;
    return d;
}

/* backend.h weight_stack: one allocation, the ranges copied in order, each range a table
 * entry of its own (the first owns the allocation). Ranges placed before, repeated, or of
 * sizes that would leave a later one off 256-byte alignment are placed one by one instead. */
static int op_weight_stack(ci_backend *be, int count, const void *const *host, const size_t *bytes, const void **out) {
    cuda_be *cb = CB(be);
    size_t total = 0;
    int alone = count < 2;
    for (int i = 0; i < count; i++) {
        int found;
        wfind(cb, host[i], &found);
        for (int j = 0; j < i; j++) alone |= host[j] == host[i];
        alone |= found || !host[i] || (i < count - 1 && bytes[i] % 256);
        total += bytes[i];
    }
    if (alone) {
        for (int i = 0; i < count; i++)
            if (!(out[i] = op_weight(be, host[i], bytes[i]))) return -1;
        return 0;
    }
    char *base = NULL;
    if (cudaMalloc(&base, total) != cudaSuccess) {
        weights_oom(cb, total);
        return -1;
    }
    size_t off = 0;
    for (int i = 0; i < count; i++) {
        if (cudaMemcpy(base + off, host[i], bytes[i], cudaMemcpyHostToDevice) != cudaSuccess ||
            wtab_insert(cb, host[i], base + off, bytes[i], i > 0)) {
            cudaGetLastError();
            if (i == 0) cudaFree(base);   /* else the first entry owns it */
            snprintf(be->last_error, sizeof be->last_error, "CUDA: placing %.1f MiB of weights on the device failed",
                     bytes[i] / 1048576.0);
            return -1;
        }
        out[i] = base + off;
        off += bytes[i];
    }
    cb->weight_bytes += total;
    return 0;
}

/* ---- matmul family -------------------------------------------------------------------- */

/* y (+)= x · Wᵀ for any n: GEMV kernels for small n, cuBLAS for large, GEMV groups for
 * dtypes without a GEMM path. */
/* Token rows up to which the GEMV kernels beat cuBLAS (H200, bench/gemv_cuda.c): one for
 * 16-bit weights (cuBLAS on tensor cores reads them at ~72% of the copy rate from n = 2,
 * the GEMV's x traffic grows with n); all 8 for f32 (cuBLAS SGEMM is slower) and fp8 (no
 * GEMM path yet). */
/* Rows up to which the GEMV kernels serve (above: cb_gemm). fp8: the GEMM widens the weight
 * to bf16 first (reads 1 byte, writes 2, the GEMM reads 2 per weight), which pays once the
 * GEMV would stream the weight ~5 times (CB_GEMV_MAX_N rows per pass). */
static int gemv_max_n(const ci_mat *W) {
    return W->dtype == CI_BF16 || W->dtype == CI_F16 ? 1 : W->dtype == CI_F8_E4M3 ? 5 * CB_GEMV_MAX_N : CB_GEMV_MAX_N;
}
/* whether one cb_gemv launch takes n rows of W (the fused forms have no row loop) */
static int gemv_one(const ci_mat *W, int n) { return n <= CB_GEMV_MAX_N && n <= gemv_max_n(W); }

static void mm_any(cuda_be *cb, float *y, const float *x, int n, const ci_mat *W, int acc) {
    if (n <= 0 || W->rows <= 0) return;
    if (W->dtype == CI_U32) { cb_q_matmul(cb, y, x, n, W, acc); return; }   /* quant.cu */
    if (n > gemv_max_n(W) && cb_gemm(cb, y, x, n, W, acc ? 1.0f : 0.0f) == 0) return;
    for (int t0 = 0; t0 < n; t0 += CB_GEMV_MAX_N) {
        int k = n - t0 < CB_GEMV_MAX_N ? n - t0 : CB_GEMV_MAX_N;
        float *yy = y + (size_t)t0 * W->rows;
        cb_gemv(cb, acc ? CB_ACC : CB_STORE, 1, &yy, x + (size_t)t0 * W->cols, k, &W, NULL, 0.0f);
    }
}

static int mat_ok(cuda_be *cb, const ci_mat *W) {
    if (cb_gemv_ok(W) || cb_q_ok(W)) return 1;
    if (!cb->failed) {
        cb->failed = 1;
        snprintf(cb->base.last_error, sizeof cb->base.last_error,
                 "CUDA: matmul on a %s weight [%lld, %lld] has no CUDA kernel", ci_dtype_name(W->dtype),
                 (long long)W->rows, (long long)W->cols);
    }
    return 0;
}

/* count products of one input x [n, cols] by cuBLAS, when every weight is 16-bit of one dtype
 * and cols and n is past the GEMV's rows: x converted once for all of them (cb_gemm converts
 * it for each), with the RMSNorm (norm: into xn as well, norm_w / eps as rmsnorm's) in the
 * conversion's launch: cb_rmsnorm then cb_gemm each, bit for bit. 0 when it does not apply. */
static int gemm16_group(cuda_be *cb, int count, float *const *ys, const float *x, int norm, float *xn,
                        const float *norm_w, float eps, int n, const ci_mat *const *Ws) {
    if (count <= 0) return 0;
    for (int i = 0; i < count; i++)
        if (!cb_gemm16_ok(Ws[i]) || Ws[i]->dtype != Ws[0]->dtype || Ws[i]->cols != Ws[0]->cols || Ws[i]->rows <= 0 ||
            n <= gemv_max_n(Ws[i]))
            return 0;
    void *h = cb_gemm16_input(cb, n, Ws[0]);
    if (!h) return 1;   /* cb->failed says why */
    const int bf = Ws[0]->dtype == CI_BF16, cols = (int)Ws[0]->cols;
    if (norm) cb_rmsnorm_16(cb, xn, h, bf, x, norm_w, n, cols, eps);
    else cb_convert(cb, h, x, (int64_t)n * cols, bf);
    if (cb->gemm_stack && cb_gemm16_stacked(Ws, count)) {   /* one GEMM over the stacked weights */
        cb_gemm16_stack(cb, count, ys, h, n, Ws);
        return 1;
    }
    const int side = cb->gemm_streams && count > 1 && !cb->failed;
    if (side && CB_CHECK(cb, "GEMM fork", cudaEventRecord(cb->fork_ev, cb->stream))) return 1;
    for (int i = 0; i < count; i++) {
        const int k = side ? (i - 1) % CB_SIDE : -1;   /* GEMM 0 stays on the stream, the rest go beside it */
        if (i > 0 && side && CB_CHECK(cb, "GEMM fork", cudaStreamWaitEvent(cb->side[k], cb->fork_ev, 0))) return 1;
        cb_gemm16_on(cb, i > 0 && side ? cb->side_blas[k] : cb->blas, ys[i], h, n, Ws[i], 0.0f);
    }
    for (int k = 0; side && k < CB_SIDE && k < count - 1; k++)
        if (CB_CHECK(cb, "GEMM join", cudaEventRecord(cb->join_ev[k], cb->side[k])) ||
            CB_CHECK(cb, "GEMM join", cudaStreamWaitEvent(cb->stream, cb->join_ev[k], 0)))
            return 1;
    return 1;
}

static void cb_matmul(ci_backend *be, float *y, const float *x, int n, const ci_mat *W) {
    cuda_be *cb = CB(be);
    if (cb->failed || !mat_ok(cb, W)) return;
    mm_any(cb, y, x, n, W, 0);
}

static void cb_matmul_acc(ci_backend *be, float *y, const float *x, int n, const ci_mat *W, float *tmp) {
    (void)tmp;
    cuda_be *cb = CB(be);
    if (cb->failed || !mat_ok(cb, W)) return;
    mm_any(cb, y, x, n, W, 1);
}

static void cb_matmul_n(ci_backend *be, int count, float *const *ys, const float *x, int n, const ci_mat *const *Ws) {
    cuda_be *cb = CB(be);
    if (cb->failed) return;
    if (count > 0 && Ws[0]->dtype == CI_U32 && cb_q_matmul_n(cb, CB_STORE, count, ys, NULL, x, n, Ws)) return;
    int same = count <= 4;
    for (int i = 0; i < count; i++) {
        if (!mat_ok(cb, Ws[i])) return;
        same &= Ws[i]->dtype == Ws[0]->dtype && Ws[i]->cols == Ws[0]->cols && Ws[i]->rows > 0;
    }
    if (same && gemv_one(Ws[0], n)) { cb_gemv(cb, CB_STORE, count, ys, x, n, Ws, NULL, 0.0f); return; }
    if (gemm16_group(cb, count, ys, x, 0, NULL, NULL, 0.0f, n, Ws)) return;
    for (int i = 0; i < count; i++) mm_any(cb, ys[i], x, n, Ws[i], 0);
}

static void cb_matmul_swiglu(ci_backend *be, float *g, float *u, const float *x, int n, const ci_mat *Wg,
                             const ci_mat *Wu) {
    cuda_be *cb = CB(be);
    if (cb->failed || !mat_ok(cb, Wg) || !mat_ok(cb, Wu)) return;
    const ci_mat *Ws[2] = { Wg, Wu };
    if (Wg->dtype == CI_U32 && Wu->dtype == CI_U32) {
        cb_q_matmul_n(cb, CB_SWIGLU, 2, &g, u, x, n, Ws);
        return;
    }
    if (gemv_one(Wg, n) && Wg->dtype == Wu->dtype && Wg->rows == Wu->rows && Wg->cols == Wu->cols) {
        cb_gemv(cb, CB_SWIGLU, 2, &g, x, n, Ws, NULL, 0.0f);
        return;
    }
    float *const ys[2] = { g, u };
    if (!gemm16_group(cb, 2, ys, x, 0, NULL, NULL, 0.0f, n, Ws)) {
        mm_any(cb, g, x, n, Wg, 0);
        mm_any(cb, u, x, n, Wu, 0);
    }
    cb_swiglu(cb, g, u, (int64_t)n * Wg->rows);
}

/* the clamped SwiGLU in the tensor-core GEMVs' launch (fp8, MLX, mxfp4 of 1..8 rows), else
 * the two products, clamp_gu and swiglu */
static void cb_matmul_swiglu_clamp(ci_backend *be, float *g, float *u, const float *x, int n, const ci_mat *Wg,
                                   const ci_mat *Wu, float limit) {
    cuda_be *cb = CB(be);
    if (cb->failed || !mat_ok(cb, Wg) || !mat_ok(cb, Wu)) return;
    const ci_mat *Ws[2] = { Wg, Wu };
    if (cb_qt_swiglu_clamp(cb, g, x, n, Wg, Wu, limit)) return;
    float *const ys[2] = { g, u };
    cb_matmul_n(be, 2, ys, x, n, Ws);
    if (cb->failed) return;
    cb_clamp_gu(cb, g, u, (int64_t)n * Wg->rows, limit);
    cb_swiglu(cb, g, u, (int64_t)n * Wg->rows);
}

/* The norm is fused into the GEMV when the GEMV takes the call (one launch); otherwise
 * rmsnorm into xn, then the unfused op. */
static int fusable(const cuda_be *cb, const ci_mat *const *Ws, int count, int n) {
    int ok = cb->norm_fuse && gemv_one(Ws[0], n) && count <= 4;
    for (int i = 0; ok && i < count; i++)
        ok = cb_gemv_ok(Ws[i]) && Ws[i]->dtype == Ws[0]->dtype && Ws[i]->cols == Ws[0]->cols && Ws[i]->rows > 0;
    return ok;
}

static void cb_norm_matmul_n(ci_backend *be, float *xn, const float *x, const float *norm_w, float eps, int count,
                             float *const *ys, int n, const ci_mat *const *Ws) {
    cuda_be *cb = CB(be);
    if (cb->failed || n <= 0 || count <= 0) return;
    if (fusable(cb, Ws, count, n)) { cb_gemv(cb, CB_STORE, count, ys, x, n, Ws, norm_w, eps); return; }
    if (cb->norm_fuse && Ws[0]->dtype == CI_U32 && cb_q_norm_matmul_n(cb, CB_STORE, count, ys, x, norm_w, eps, n, Ws))
        return;
    if (gemm16_group(cb, count, ys, x, 1, xn, norm_w, eps, n, Ws)) return;
    cb_rmsnorm(cb, xn, x, norm_w, n, (int)Ws[0]->cols, eps);
    cb_matmul_n(be, count, ys, xn, n, Ws);
}

static void cb_norm_matmul_swiglu(ci_backend *be, float *xn, const float *x, const float *norm_w, float eps, float *g,
                                  float *u, int n, const ci_mat *Wg, const ci_mat *Wu) {
    cuda_be *cb = CB(be);
    if (cb->failed || n <= 0) return;
    const ci_mat *Ws[2] = { Wg, Wu };
    if (fusable(cb, Ws, 2, n) && Wg->rows == Wu->rows) { cb_gemv(cb, CB_SWIGLU, 2, &g, x, n, Ws, norm_w, eps); return; }
    if (cb->norm_fuse && Wg->dtype == CI_U32 && Wu->dtype == CI_U32 &&
        cb_q_norm_matmul_n(cb, CB_SWIGLU, 2, &g, x, norm_w, eps, n, Ws))
        return;
    float *const ys[2] = { g, u };
    if (Wg->rows == Wu->rows && gemm16_group(cb, 2, ys, x, 1, xn, norm_w, eps, n, Ws)) {
        cb_swiglu(cb, g, u, (int64_t)n * Wg->rows);
        return;
    }
    cb_rmsnorm(cb, xn, x, norm_w, n, (int)Wg->cols, eps);
    cb_matmul_swiglu(be, g, u, xn, n, Wg, Wu);
}

/* the router's product with the block's norm (backend.h norm_matmul_keep): one launch that also
 * writes xn when a GEMV takes it, else rmsnorm into xn and the product */
static void cb_norm_matmul_keep(ci_backend *be, float *xn, float *y, const float *x, const float *norm_w, float eps,
                                int n, const ci_mat *W) {
    cuda_be *cb = CB(be);
    if (cb->failed || n <= 0 || !mat_ok(cb, W)) return;
    if (cb->norm_fuse && W->rows > 0) {
        if (W->dtype == CI_U32) {
            if (cb_q_norm_matmul_n(cb, CB_STORE, 1, &y, x, norm_w, eps, n, &W, xn)) return;
        } else if (gemv_one(W, n) && cb_gemv_ok(W)) {
            cb_gemv(cb, CB_STORE, 1, &y, x, n, &W, norm_w, eps, xn);
            return;
        }
    }
    cb_rmsnorm(cb, xn, x, norm_w, n, (int)W->cols, eps);
    mm_any(cb, y, xn, n, W, 0);
}

/* backend.h moe_norm_experts: one launch at one row (moe_fused.cu) when it takes the call, else
 * the router and the experts with the routing in their first launch (cb_moe_route_experts), else
 * the three ops */
static int cb_moe_norm_experts(ci_backend *be, float *out, float *xn, float *logits, int32_t *sel, float *w,
                               const float *x, const float *norm_w, float eps, const int32_t *ids, int n,
                               const ci_mat *W, const ci_moe *m, int acc) {
    cuda_be *cb = CB(be);
    if (m->sh_down)   /* the shared expert too: moe_fused's or moe_fused_qt's one launch, or nothing */
        return cb->moe_shared && !cb->failed && n > 0 && mat_ok(cb, W) &&
               (cb_moe_fused(cb, out, xn, logits, sel, w, x, norm_w, eps, ids, n, W, m, acc) ||
                (!cb->failed && cb->moe_fuse_qt && cb_moe_fused_qt(cb, out, xn, logits, sel, w, x, norm_w, eps, ids, n, W, m, acc)));
    if (cb->failed || n <= 0 || !mat_ok(cb, W)) return 1;
    if (cb_moe_fused(cb, out, xn, logits, sel, w, x, norm_w, eps, ids, n, W, m, acc)) return 1;
    if (cb->failed) return 1;
    if (cb->moe_fuse_qt && cb_moe_fused_qt(cb, out, xn, logits, sel, w, x, norm_w, eps, ids, n, W, m, acc)) return 1;
    if (cb->failed) return 1;
    cb_norm_matmul_keep(be, xn, logits, x, norm_w, eps, n, W);
    if (cb_moe_route_experts(cb, out, xn, n, logits, ids, sel, w, m, acc) || cb->failed) return 1;
    be->moe_route(be, sel, w, logits, ids, n, m);
    be->moe_experts(be, out, xn, n, sel, w, m, acc);
    return 1;
}

static void cb_matmul_xw(ci_backend *be, float *y, const float *x, int n, const ci_mat *W) {
    cuda_be *cb = CB(be);
    if (cb->failed || !mat_ok(cb, W)) return;
    if (W->dtype == CI_U32) { cb_q_matmul_xw(cb, y, x, n, W); return; }   /* quant.cu */
    cb_matmul_xw_launch(cb, y, x, n, W);
}

/* ---- the other ops: thin wrappers over the launchers ---------------------------------- */

static void op_rmsnorm(ci_backend *be, float *out, const float *x, const float *w, int n, int dim, float eps) {
    if (!CB(be)->failed) cb_rmsnorm(CB(be), out, x, w, n, dim, eps);
}
static void op_rope(ci_backend *be, float *x, int n, int n_heads, int head_dim, int rot_offset, int rot_dim,
                    const int32_t *pos, const float *inv_freq, float mscale, ci_rope_style style) {
    if (!CB(be)->failed) cb_rope(CB(be), x, n, n_heads, head_dim, rot_offset, rot_dim, pos, inv_freq, mscale, style);
}
static void op_head_norm_rope(ci_backend *be, float *x, int n, int n_heads, int head_dim, const float *w, float eps,
                              int rot_offset, int rot_dim, const int32_t *pos, const float *inv_freq, float mscale,
                              ci_rope_style style) {
    if (!CB(be)->failed)
        cb_head_norm_rope(CB(be), x, n, n_heads, head_dim, w, eps, rot_offset, rot_dim, pos, inv_freq, mscale, style);
}
static void op_mla_rope(ci_backend *be, float *lat, float *q, const float *kv_norm, float eps, int n, int n_heads,
                        int nope, int rope, int kv_lora, const int32_t *pos, const float *inv_freq, float mscale,
                        ci_rope_style style) {
    if (!CB(be)->failed)
        cb_mla_rope(CB(be), lat, q, kv_norm, eps, n, n_heads, nope, rope, kv_lora, pos, inv_freq, mscale, style);
}
static void op_attention(ci_backend *be, float *out, const float *q, const float *k, const float *v, int n, int pos0,
                         int n_heads, int n_kv, int hd, int kv_stride, float scale) {
    if (!CB(be)->failed)
        cb_attention(CB(be), out, q, k, v, n, pos0, NULL, pos0 + n, n_heads, n_kv, hd, kv_stride, scale, NULL, NULL);
}
static void op_attention_pos(ci_backend *be, float *out, const float *q, const float *k, const float *v, int n,
                             const int32_t *pos, int max_keys, int n_heads, int n_kv, int hd, int kv_stride,
                             float scale) {
    if (!CB(be)->failed)
        cb_attention(CB(be), out, q, k, v, n, 0, pos, max_keys, n_heads, n_kv, hd, kv_stride, scale, NULL, NULL);
}
static void op_swiglu(ci_backend *be, float *g, const float *u, int64_t count) {
    if (!CB(be)->failed) cb_swiglu(CB(be), g, u, count);
}
static void op_clamp_gu(ci_backend *be, float *g, float *u, int64_t count, float limit) {
    if (!CB(be)->failed) cb_clamp_gu(CB(be), g, u, count, limit);
}
static void op_add(ci_backend *be, float *y, const float *x, int64_t count) {
    if (!CB(be)->failed) cb_add(CB(be), y, x, count);
}
static void op_embed(ci_backend *be, float *out, const ci_mat *E, const int32_t *ids, int n) {
    cuda_be *cb = CB(be);
    if (cb->failed) return;
    if (E->dtype == CI_U32 && cb_q_ok(E)) { cb_q_embed(cb, out, E, ids, n); return; }   /* quant.cu */
    if (E->dtype != CI_F32 && E->dtype != CI_F16 && E->dtype != CI_BF16 && E->dtype != CI_F8_E4M3) {
        mat_ok(cb, E);
        return;
    }
    cb_embed(cb, out, E, ids, n);
}
static void op_kv_store(ci_backend *be, float *cache, int stride, const float *src, int width, int n,
                        const int32_t *pos) {
    if (!CB(be)->failed) cb_kv_store(CB(be), cache, stride, src, width, n, pos);
}
static void op_qk_rope_store(ci_backend *be, float *q, float *k, const float *v, int n, int n_heads, int n_kv, int hd,
                             const float *q_norm, const float *k_norm, float eps, int rot_dim, const int32_t *pos,
                             const float *inv_freq, float mscale, ci_rope_style style, float *kc, float *vc,
                             int kv_stride) {
    if (!CB(be)->failed)
        cb_qk_rope_store(CB(be), q, k, v, n, n_heads, n_kv, hd, q_norm, k_norm, eps, rot_dim, pos, inv_freq, mscale,
                         style, kc, vc, kv_stride, NULL, NULL);
}
static void op_rope_attend(ci_backend *be, float *out, float *q, float *k, const float *v, int n, int n_heads,
                           int n_kv, int hd, const float *q_norm, const float *k_norm, float eps, int rot_dim,
                           const int32_t *pos, const float *inv_freq, float mscale, ci_rope_style style, float *kc,
                           float *vc, float *const *kv_tab, const ci_pages *pages, int kv_stride, int max_keys,
                           float scale) {
    cuda_be *cb = CB(be);
    if (cb->failed) return;
    if (pages && (!pages->tab || pages->blk_log2 < 0 || pages->blk_log2 > 30 ||
                  (pages->per_row && pages->tab_stride < 0))) {
        cb->failed = 1;
        snprintf(be->last_error, sizeof be->last_error, "CUDA: rope_attend: bad pages (blk_log2 %d)", pages->blk_log2);
        return;
    }
    /* pages: both write and read each position at its row through the table (ops.cu, attn.cu) */
    if (cb_rope_attend_fused(cb, out, q, k, v, n, n_heads, n_kv, hd, q_norm, k_norm, eps, rot_dim, pos, inv_freq, mscale,
                             style, kc, vc, kv_tab, pages, kv_stride, max_keys, scale))
        return;
    cb_qk_rope_store(cb, q, k, v, n, n_heads, n_kv, hd, q_norm, k_norm, eps, rot_dim, pos, inv_freq, mscale, style,
                     kc, vc, kv_stride, kv_tab, pages);
    if (!cb->failed)
        cb_attention(cb, out, q, kc, vc, n, 0, pos, max_keys, n_heads, n_kv, hd, kv_stride, scale, kv_tab, pages);
}
static void op_argmax(ci_backend *be, int32_t *out, const float *x, int count) {
    if (!CB(be)->failed) cb_argmax(CB(be), out, x, count);
}
static void op_shortconv(ci_backend *be, float *y, float *bcx, int n, int dim, int K, const float *taps,
                         const float *in_bias, const float *conv_bias, float *state, float *const *states,
                         float *scratch) {
    (void)scratch;
    if (!CB(be)->failed) cb_shortconv(CB(be), y, bcx, n, dim, K, taps, in_bias, conv_bias, state, states);
}
static void op_add_bias(ci_backend *be, float *y, const float *bias, int n, int width) {
    if (!CB(be)->failed) cb_add_bias(CB(be), y, bias, n, width);
}

/* Mamba2 (mamba.cu) */
static void op_mamba_conv(ci_backend *be, float *xbc, const float *in, int in_stride, int n, int dim, int K,
                          const float *taps, const float *bias, float *state, float *const *states) {
    if (!CB(be)->failed) cb_mamba_conv(CB(be), xbc, in, in_stride, n, dim, K, taps, bias, state, states);
}
static void op_ssd_scan(ci_backend *be, float *y, const float *xbc, int xbc_stride, const float *dt, int dt_stride,
                        int n, const ci_ssd *s, float *state, float *const *states, int chunked, float *scratch) {
    (void)scratch;
    if (!CB(be)->failed) cb_ssd_scan(CB(be), y, xbc, xbc_stride, dt, dt_stride, n, s, state, states, chunked);
}
static void op_gated_rmsnorm(ci_backend *be, float *y, const float *z, int z_stride, const float *w, int n, int dim,
                             int group, float eps) {
    if (!CB(be)->failed) cb_gated_rmsnorm(CB(be), y, z, z_stride, w, n, dim, group, eps);
}
static void op_relu2(ci_backend *be, float *g, int64_t count) {
    if (!CB(be)->failed) cb_relu2(CB(be), g, count);
}
/* the gated DeltaNet and gated attention's gates (deltanet.cu) */
static void op_causal_conv(ci_backend *be, float *y, const float *x, int n, int dim, int K, const float *taps,
                           float *state, float *const *states, int tab_step, float *scratch) {
    (void)scratch;
    if (!CB(be)->failed) cb_causal_conv(CB(be), y, x, n, dim, K, taps, state, states, tab_step);
}
static void op_deltanet(ci_backend *be, float *z, float *mix, float *b, float *a, int n, const ci_deltanet *d,
                        float *state, float *const *states, int tab_step, int recurrent, float *scratch) {
    if (!CB(be)->failed) cb_deltanet(CB(be), z, mix, b, a, n, d, state, states, tab_step, recurrent, scratch);
}
static void op_deltanet_unfuse(ci_backend *be, float *mix, float *z, float *b, float *a, const float *qkvz,
                               const float *ba, int n, const ci_deltanet *d) {
    if (!CB(be)->failed) cb_deltanet_unfuse(CB(be), mix, z, b, a, qkvz, ba, n, d);
}
static void op_split_halves(ci_backend *be, float *lo, float *hi, const float *x, int rows, int width) {
    if (!CB(be)->failed) cb_split_halves(CB(be), lo, hi, x, rows, width);
}
static void op_sigmoid_mul(ci_backend *be, float *y, const float *g, int64_t count) {
    if (!CB(be)->failed) cb_sigmoid_mul(CB(be), y, g, count);
}
static void op_sigmoid_gate_add(ci_backend *be, float *y, const float *x, const float *g, int n, int width) {
    if (!CB(be)->failed) cb_sigmoid_gate_add(CB(be), y, x, g, n, width);
}

/* DeepSeek V4 (v4.cu) */
static void op_hc_spread(ci_backend *be, float *X, const float *x, int n, int hc, int dim) {
    if (!CB(be)->failed) cb_hc_spread(CB(be), X, x, n, hc, dim);
}
static void op_hc_pre(ci_backend *be, float *x, float *post, float *comb, float *mix, const float *X, int n, int hc,
                      int dim, int iters, float eps, float norm_eps, const float *scale, const float *base) {
    if (!CB(be)->failed) cb_hc_pre(CB(be), x, post, comb, mix, X, n, hc, dim, iters, eps, norm_eps, scale, base);
}
static void op_hc_mix_pre(ci_backend *be, float *x, float *post, float *comb, float *mix, const float *X, int n,
                          const ci_mat *fn, int hc, int dim, int iters, float eps, float norm_eps, const float *scale,
                          const float *base) {
    cuda_be *cb = CB(be);
    if (cb->failed || cb_hc_mix_pre(cb, x, post, comb, mix, X, n, fn, hc, dim, iters, eps, norm_eps, scale, base)) return;
    cb_matmul(be, mix, X, n, fn);
    if (!cb->failed) cb_hc_pre(cb, x, post, comb, mix, X, n, hc, dim, iters, eps, norm_eps, scale, base);
}
static void op_hc_post(ci_backend *be, float *X, const float *y, const float *post, const float *comb, int n, int hc,
                       int dim, float *tmp) {
    (void)tmp;
    if (!CB(be)->failed) cb_hc_post(CB(be), X, y, post, comb, n, hc, dim);
}
static void op_v4_compress(ci_backend *be, float *state, float *const *states, int tab_step, const float *kv,
                           const float *gate, int n, const int32_t *pos, const ci_v4cmp *c) {
    if (!CB(be)->failed) cb_v4_compress(CB(be), state, states, tab_step, kv, gate, n, pos, c);
}
static void op_v4_index(ci_backend *be, int32_t *sel, int32_t *nsel, const float *iq, const float *iw,
                        const float *state, float *const *states, int tab_step, int n, const int32_t *pos,
                        const ci_v4cmp *c, int ih, int topk, int sel_stride, int max_entries, float *scratch) {
    if (!CB(be)->failed)
        cb_v4_index(CB(be), sel, nsel, iq, iw, state, states, tab_step, n, pos, c, ih, topk, sel_stride, max_entries,
                    scratch);
}
static void op_v4_attend(ci_backend *be, float *out, const float *q, const float *kv, int n, const int32_t *pos,
                         float *ring, int ring_rows, int window, const float *cstate, float *const *tab, int tab_step,
                         const ci_v4cmp *c, const int32_t *sel, const int32_t *nsel, int sel_stride,
                         const float *sinks, int n_heads, int D, int rot_dim, const float *inv_freq, float mscale,
                         float *kbuf, float *sc) {
    (void)kbuf; (void)sc;
    if (!CB(be)->failed)
        cb_v4_attend(CB(be), out, q, kv, n, pos, ring, ring_rows, window, cstate, tab, tab_step, c, sel, nsel,
                     sel_stride, sinks, n_heads, D, rot_dim, inv_freq, mscale);
}
/* one launch when quant_mma.cu takes the groups (fp8 / MLX decode rows), else each group: its inputs
 * gathered into xg, the matmul op into yg, scattered into y */
static void op_matmul_groups(ci_backend *be, float *y, const float *x, int n, int groups, const ci_mat *W, float *xg,
                             float *yg) {
    const int cols = (int)W[0].cols, rows = (int)W[0].rows;
    if (CB(be)->failed || cb_qt_groups(CB(be), y, x, n, groups, W)) return;
    for (int g = 0; g < groups && !CB(be)->failed; g++) {
        cb_group_copy(CB(be), xg, x, n, groups, g, cols, 0);
        be->matmul(be, yg, xg, n, &W[g]);
        cb_group_copy(CB(be), y, yg, n, groups, g, rows, 1);
    }
}

/* MLA / DSA (mla.cu) */
static void op_rmsnorm_strided(ci_backend *be, float *out, const float *x, const float *w, int n, int dim, int stride,
                               float eps) {
    if (!CB(be)->failed) cb_rmsnorm_strided(CB(be), out, x, w, n, dim, stride, eps);
}
static void op_layernorm(ci_backend *be, float *out, const float *x, const float *w, const float *b, int n, int dim,
                         double eps) {
    if (!CB(be)->failed) cb_layernorm(CB(be), out, x, w, b, n, dim, eps);
}
static void op_mla_absorb_q(ci_backend *be, float *qcat, const float *q, int n, int n_heads, int nope, int rope,
                            int kv_lora, const ci_mat *w_uk) {
    if (!CB(be)->failed) cb_mla_absorb_q(CB(be), qcat, q, n, n_heads, nope, rope, kv_lora, w_uk);
}
static void op_mla_prepare(ci_backend *be, float *qcat, float *lat, float *q, const float *kv_norm, float eps, int n,
                           int n_heads, int nope, int rope, int kv_lora, const int32_t *pos, const float *inv_freq,
                           float mscale, ci_rope_style style, const ci_mat *w_uk, float *cache, float *const *tab,
                           const ci_pages *pages) {
    if (!CB(be)->failed)
        cb_mla_prepare(CB(be), qcat, lat, q, kv_norm, eps, n, n_heads, nope, rope, kv_lora, pos, inv_freq, mscale, style,
                       w_uk, cache, tab, pages);
}
static void op_mla_out_heads(ci_backend *be, float *o, const float *olat, int n, int n_heads, int kv_lora, int lat,
                             int v, const ci_mat *w_uv) {
    if (!CB(be)->failed) cb_mla_out_heads(CB(be), o, olat, n, n_heads, kv_lora, lat, v, w_uv);
}
static void op_kv_store_paged(ci_backend *be, float *cache, float *const *tab, int tab_step, int stride,
                              const float *src, int width, int n, const int32_t *pos, const ci_pages *pages) {
    if (!CB(be)->failed) cb_kv_store_paged(CB(be), cache, tab, tab_step, stride, src, width, n, pos, pages);
}
static void op_mla_attend(ci_backend *be, float *out, const float *qcat, const float *cache, float *const *tab,
                          int tab_step, int n, const int32_t *pos, int max_keys, int n_heads, int lat, float scale,
                          const ci_pages *pages) {
    if (!CB(be)->failed)
        cb_mla_attend(CB(be), out, qcat, cache, tab, tab_step, n, pos, max_keys, n_heads, lat, scale, pages);
}
static void op_dsa_attend(ci_backend *be, float *out, const float *qcat, const float *lat_cache, const float *key_cache,
                          float *const *tab, int n, const int32_t *pos, int max_keys, int n_heads, int lat, float scale,
                          const float *iq, const float *iw, float w_scale, int ih, int id, int topk,
                          const ci_pages *pages) {
    if (!CB(be)->failed)
        cb_dsa_attend(CB(be), out, qcat, lat_cache, key_cache, tab, n, pos, max_keys, n_heads, lat, scale, iq, iw,
                      w_scale, ih, id, topk, pages);
}

/* ---- graphs ------------------------------------------------------------------------- */

static int op_graph_begin(ci_backend *be) {
    cuda_be *cb = CB(be);
    if (cb->failed || cb->capturing) return -1;
    if (CB_CHECK(cb, "graph capture", cudaStreamBeginCapture(cb->stream, cudaStreamCaptureModeRelaxed))) return -1;
    cb->capturing = 1;
    return 0;
}

static void *op_graph_end(ci_backend *be) {
    cuda_be *cb = CB(be);
    if (!cb->capturing) return NULL;
    cb->capturing = 0;
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(cb->stream, &g);
    if (cb->failed || e != cudaSuccess) {
        if (g) cudaGraphDestroy(g);
        cb_fail(cb, "graph capture", e);
        return NULL;
    }
    cudaGraphExec_t x = NULL;
    e = cudaGraphInstantiate(&x, g, 0);
    cudaGraphDestroy(g);
    if (cb_fail(cb, "graph instantiate", e)) return NULL;
    return (void *)x;
}

static void op_graph_launch(ci_backend *be, void *graph) {
    cuda_be *cb = CB(be);
    if (cb->failed || !graph) return;
    CB_CHECK(cb, "graph launch", cudaGraphLaunch((cudaGraphExec_t)graph, cb->stream));
}

static void op_graph_free(ci_backend *be, void *graph) {
    (void)be;
    if (graph) cudaGraphExecDestroy((cudaGraphExec_t)graph);
}

static int op_status(ci_backend *be) { return CB(be)->failed ? -1 : 0; }
static void op_mem_info(ci_backend *be, size_t *free_bytes, size_t *total_bytes) {
    (void)be;
    if (cudaMemGetInfo(free_bytes, total_bytes) != cudaSuccess) *free_bytes = *total_bytes = 0;
}

/* ---- construction --------------------------------------------------------------------- */

static void op_free(ci_backend *be) {
    cuda_be *cb = CB(be);
    if (!cb) return;
    cudaStreamSynchronize(cb->stream);
    for (int i = 0; i < cb->n_weights; i++)
        if (!cb->weights[i].part) cudaFree(cb->weights[i].dev);
    free(cb->weights);
    cb_quant_free(cb);
    for (int i = 0; i < cb->n_retired; i++) cudaFree(cb->retired[i]);
    free(cb->retired);
    if (cb->xconv.p) cudaFree(cb->xconv.p);
    if (cb->stack_y.p) cudaFree(cb->stack_y.p);
    if (cb->wdeq.p) cudaFree(cb->wdeq.p);
    if (cb->attn_part.p) cudaFree(cb->attn_part.p);
    if (cb->attn_fpart.p) cudaFree(cb->attn_fpart.p);
    if (cb->attn_h16.p) cudaFree(cb->attn_h16.p);
    if (cb->hc_part.p) cudaFree(cb->hc_part.p);
    if (cb->argmax_part.p) cudaFree(cb->argmax_part.p);
    cb_moe_free(cb);
    for (int i = 0; i < 3; i++)
        if (cb->mla_work[i].p) cudaFree(cb->mla_work[i].p);
    if (cb->ssd_work.p) cudaFree(cb->ssd_work.p);
    if (cb->qf_cnt.p) cudaFree(cb->qf_cnt.p);
    if (cb->dn_work.p) cudaFree(cb->dn_work.p);
    if (cb->blas) cublasDestroy(cb->blas);
    if (cb->blas_ws) cudaFree(cb->blas_ws);
    if (cb->gbar) cudaFree(cb->gbar);
    for (int k = 0; k < CB_SIDE; k++) {
        if (cb->side_blas[k]) cublasDestroy(cb->side_blas[k]);
        if (cb->side_ws[k]) cudaFree(cb->side_ws[k]);
        if (cb->side[k]) cudaStreamDestroy(cb->side[k]);
        if (cb->join_ev[k]) cudaEventDestroy(cb->join_ev[k]);
    }
    if (cb->fork_ev) cudaEventDestroy(cb->fork_ev);
    if (cb->stream) cudaStreamDestroy(cb->stream);
#ifdef CB_PROF
    cb_prof_dump();
#endif
    if (be->pool && be->pool_free) be->pool_free(be->pool);
    free(cb);
}

/* A tuning switch from the environment: "0" or "1", else the default. */
int cb_env_switch(const char *name, int dflt) {
    const char *v = getenv(name);
    if (v && (!strcmp(v, "0") || !strcmp(v, "1"))) return v[0] == '1';
    return dflt;
}

int cb_env_int(const char *name, int dflt, int lo, int hi) {
    const char *v = getenv(name);
    char *end;
    const long k = v ? strtol(v, &end, 10) : 0;
    return v && *v && !*end && k >= lo && k <= hi ? (int)k : dflt;
}

extern "C" ci_backend *cinfer_cuda_backend_new(int abi, int device, ci_pool *pool, void (*pool_free)(ci_pool *),
                                               char *err, size_t errlen) {
    if (abi != CI_CUDA_ABI) {
        snprintf(err, errlen, "CUDA: libcinfer_cuda.so was built for another version of cinfer (rebuild it)");
        return NULL;
    }
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(err, errlen, "CUDA: no usable driver or device (%s)", cudaGetErrorString(e));
        return NULL;
    }
    if (n <= device) {
        snprintf(err, errlen, "CUDA: no device %d (%d found)", device, n);
        return NULL;
    }
    cudaDeviceProp prop;
    if ((e = cudaGetDeviceProperties(&prop, device)) != cudaSuccess || (e = cudaSetDevice(device)) != cudaSuccess) {
        snprintf(err, errlen, "CUDA: device %d: %s", device, cudaGetErrorString(e));
        return NULL;
    }
    if (prop.major < 9) {
        snprintf(err, errlen, "CUDA: device %d (%s) is compute capability %d.%d; this build needs 9.0 (Hopper)",
                 device, prop.name, prop.major, prop.minor);
        return NULL;
    }
    cuda_be *cb = (cuda_be *)calloc(1, sizeof *cb);
    if (!cb) { snprintf(err, errlen, "CUDA: out of host memory"); return NULL; }
    ci_backend *be = &cb->base;
    cb->device = device;
    cb->sm_count = prop.multiProcessorCount;
    cb->pdl = cb_env_switch("CINFER_CUDA_PDL", CB_PDL);
    cb->norm_fuse = cb_env_switch("CINFER_CUDA_NORM_FUSE", CB_NORM_FUSE);
    cb->fp8_rows2 = cb_env_switch("CINFER_CUDA_FP8_ROWS2", CB_FP8_ROWS2);
    cb->mla_decode = cb_env_switch("CINFER_CUDA_MLA_DECODE", CB_MLA_DECODE);
    cb->mla_comb = cb_env_int("CINFER_CUDA_MLA_COMB", 128, 0, 1024);
    cb->mla_cslice = cb_env_switch("CINFER_CUDA_MLA_CSLICE", 1);
    cb->mla_tc = cb_env_int("CINFER_CUDA_MLA_TC", CB_MLA_TC, 0, 2);
    cb->mla_tc_run = cb_env_int("CINFER_CUDA_MLA_TC_RUN", 1, 1, 64);
    cb->mla_tc_min = cb_env_int("CINFER_CUDA_MLA_TC_MIN", CB_MLA_TC_MIN, 0, 1 << 30);
    cb->moe_pipe = cb_env_switch("CINFER_CUDA_MOE_PIPE", CB_MOE_PIPE);
    cb->moe_split = cb_env_switch("CINFER_CUDA_MOE_SPLIT", CB_MOE_SPLIT);
    cb->q_pair = cb_env_switch("CINFER_CUDA_Q_PAIR", CB_Q_PAIR);
    cb->gemv1 = cb_env_int("CINFER_CUDA_GEMV1", 0, 0, 7);
    cb->dsa_select = cb_env_switch("CINFER_CUDA_DSA_SELECT", CB_DSA_SELECT);
    cb->dsa_score = cb_env_switch("CINFER_CUDA_DSA_SCORE", CB_DSA_SCORE);
    cb->attn_decode2 = cb_env_switch("CINFER_CUDA_ATTN_DECODE2", CB_ATTN_DECODE2);
    cb->rope_fuse = cb_env_switch("CINFER_CUDA_ROPE_FUSE", CB_ROPE_FUSE);
    cb->moe_fuse = cb_env_switch("CINFER_CUDA_MOE_FUSE", CB_MOE_FUSE);
    cb->mla_prep = cb_env_switch("CINFER_CUDA_MLA_PREP", CB_MLA_PREP);
    cb->moe_shared = cb_env_switch("CINFER_CUDA_MOE_SHARED", CB_MOE_SHARED);
    cb->moe_fuse_qt = cb_env_switch("CINFER_CUDA_MOE_FUSE_QT", CB_MOE_FUSE_QT);
    cb->mf_early = cb_env_switch("CINFER_CUDA_MF_EARLY", CB_MF_EARLY);
    cb->route_fuse = cb_env_switch("CINFER_CUDA_ROUTE_FUSE", CB_ROUTE_FUSE);
    cb->gemm_streams = cb_env_switch("CINFER_CUDA_GEMM_STREAMS", CB_GEMM_STREAMS);
    cb->gemm_stack = cb_env_switch("CINFER_CUDA_GEMM_STACK", CB_GEMM_STACK);
    cb->flash2 = cb_env_switch("CINFER_CUDA_FLASH2", CB_FLASH2);
    cb->flash_split = cb_env_switch("CINFER_CUDA_FLASH_SPLIT", CB_FLASH_SPLIT);
    cb->flash_bk = cb_env_int("CINFER_CUDA_FLASH_BK", 32, 16, 32);
    cb->flash_ldm = cb_env_switch("CINFER_CUDA_FLASH_LDM", CB_FLASH_LDM);
    cb->flash_gqa = cb_env_switch("CINFER_CUDA_FLASH_GQA", CB_FLASH_GQA);
    cb->flash_bq = cb_env_int("CINFER_CUDA_FLASH_BQ", 0, 0, 128);
    if (cb->flash_bq != 64 && cb->flash_bq != 128) cb->flash_bq = 0;
    cb->flash_segmin = cb_env_int("CINFER_CUDA_FLASH_SEGMIN", 256, 32, 1 << 20);
    cb->flash_h16 = cb_env_int("CINFER_CUDA_FLASH_H16", -1, 0, 4);   /* -1: by the rows (attn_flash.cu) */
    if (cb->flash_h16 != 0 && cb->flash_h16 != 3 && cb->flash_h16 != 4) cb->flash_h16 = -1;
    cb->ssd_chunk = cb_env_switch("CINFER_CUDA_SSD_CHUNK", CB_SSD_CHUNK);
    cb->dn_chunk = cb_env_int("CINFER_CUDA_DN_CHUNK", 1, 0, 1 << 30);
    if (cb->dn_chunk == 1) cb->dn_chunk = CB_DN_CHUNK;
    snprintf(cb->name, sizeof cb->name, "cuda (%s)", prop.name);
    be->name = cb->name;
    be->pool = pool;
    be->pool_free = pool_free;
    be->n_threads = 1;
    be->is_device = 1;
    cudaMemGetInfo(&be->mem_free, &be->mem_total);
    const size_t ws = 32u << 20;
    if ((e = cudaStreamCreateWithFlags(&cb->stream, cudaStreamNonBlocking)) != cudaSuccess ||
        (e = cudaMalloc(&cb->blas_ws, ws)) != cudaSuccess || (e = cudaMalloc(&cb->gbar, sizeof(unsigned))) != cudaSuccess ||
        (e = cudaMemset(cb->gbar, 0, sizeof(unsigned))) != cudaSuccess) {
        snprintf(err, errlen, "CUDA: device %d: %s", device, cudaGetErrorString(e));
        be->pool = NULL;
        op_free(be);
        return NULL;
    }
#ifdef CB_PROF
    cb_prof_bind_all();
#endif
    cublasStatus_t bs = cublasCreate(&cb->blas);
    if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasSetStream(cb->blas, cb->stream);
    if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasSetWorkspace(cb->blas, cb->blas_ws, ws);
    /* default math: f32 GEMMs stay f32 (TF32 only when asked for), 16-bit ones use the
     * tensor cores with f32 accumulation; pedantic mode costs prefill speed */
    if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasSetMathMode(cb->blas, CUBLAS_DEFAULT_MATH);
    /* the side streams, each handle configured as blas (cudaEventDisableTiming: fork / join only) */
    if (bs == CUBLAS_STATUS_SUCCESS && cb->gemm_streams) {
        e = cudaEventCreateWithFlags(&cb->fork_ev, cudaEventDisableTiming);
        for (int k = 0; k < CB_SIDE && e == cudaSuccess && bs == CUBLAS_STATUS_SUCCESS; k++) {
            if ((e = cudaStreamCreateWithFlags(&cb->side[k], cudaStreamNonBlocking)) != cudaSuccess ||
                (e = cudaEventCreateWithFlags(&cb->join_ev[k], cudaEventDisableTiming)) != cudaSuccess ||
                (e = cudaMalloc(&cb->side_ws[k], ws)) != cudaSuccess)
                break;
            bs = cublasCreate(&cb->side_blas[k]);
            if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasSetStream(cb->side_blas[k], cb->side[k]);
            if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasSetWorkspace(cb->side_blas[k], cb->side_ws[k], ws);
            if (bs == CUBLAS_STATUS_SUCCESS) bs = cublasSetMathMode(cb->side_blas[k], CUBLAS_DEFAULT_MATH);
        }
        if (e != cudaSuccess) {
            snprintf(err, errlen, "CUDA: device %d: side streams: %s", device, cudaGetErrorString(e));
            be->pool = NULL;
            op_free(be);
            return NULL;
        }
    }
    if (bs != CUBLAS_STATUS_SUCCESS) {
        snprintf(err, errlen, "CUDA: cuBLAS did not start (status %d)", (int)bs);
        be->pool = NULL;
        op_free(be);
        return NULL;
    }
    be->matmul = cb_matmul;
    be->matmul_xw = cb_matmul_xw;
    be->rmsnorm = op_rmsnorm;
    be->rope = op_rope;
    be->attention = op_attention;
    be->swiglu = op_swiglu;
    be->clamp_gu = op_clamp_gu;
    be->embed = op_embed;
    be->add = op_add;
    be->free = op_free;
    be->alloc = cb_alloc;
    be->buf_free = cb_buf_free;
    be->upload = cb_upload;
    be->download = cb_download;
    be->copy = cb_copy;
    be->copy_2d = cb_copy_2d;
    be->weight = op_weight;
    be->weight_q = cb_weight_q;   /* quant.cu */
    be->weight_stack = op_weight_stack;
    be->kv_store = op_kv_store;
    be->attention_pos = op_attention_pos;
    be->matmul_n = cb_matmul_n;
    be->matmul_acc = cb_matmul_acc;
    be->matmul_swiglu = cb_matmul_swiglu;
    be->matmul_swiglu_clamp = cb_matmul_swiglu_clamp;
    be->norm_matmul_n = cb_norm_matmul_n;
    be->norm_matmul_swiglu = cb_norm_matmul_swiglu;
    be->norm_matmul_keep = cb_norm_matmul_keep;
    be->moe_norm_experts = cb_moe_norm_experts;
    be->qk_rope_store = op_qk_rope_store;
    be->rope_attend = op_rope_attend;
    be->argmax = op_argmax;
    be->rmsnorm_strided = op_rmsnorm_strided;
    be->mla_rope = op_mla_rope;
    be->head_norm_rope = op_head_norm_rope;
    be->layernorm = op_layernorm;
    be->mla_absorb_q = op_mla_absorb_q;
    be->mla_prepare = op_mla_prepare;
    be->mla_out_heads = op_mla_out_heads;
    be->kv_store_paged = op_kv_store_paged;
    be->mla_attend = op_mla_attend;
    be->dsa_attend = op_dsa_attend;
    be->shortconv = op_shortconv;
    be->add_bias = op_add_bias;
    be->mamba_conv = op_mamba_conv;
    be->ssd_scan = op_ssd_scan;
    be->gated_rmsnorm = op_gated_rmsnorm;
    be->relu2 = op_relu2;
    be->causal_conv = op_causal_conv;
    be->deltanet = op_deltanet;
    be->deltanet_unfuse = op_deltanet_unfuse;
    be->split_halves = op_split_halves;
    be->hc_spread = op_hc_spread;
    be->hc_pre = op_hc_pre;
    be->hc_post = op_hc_post;
    be->hc_mix_pre = op_hc_mix_pre;
    be->v4_compress = op_v4_compress;
    be->v4_index = op_v4_index;
    be->v4_attend = op_v4_attend;
    be->matmul_groups = op_matmul_groups;
    be->sigmoid_mul = op_sigmoid_mul;
    be->sigmoid_gate_add = op_sigmoid_gate_add;
    be->graph_begin = op_graph_begin;
    be->graph_end = op_graph_end;
    be->graph_launch = op_graph_launch;
    be->graph_free = op_graph_free;
    be->status = op_status;
    be->mem_info = op_mem_info;
    cb_moe_ops(be);
    return be;
}
