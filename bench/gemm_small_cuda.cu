/* gemm_small_cuda.cu — the 16-bit GEMMs of a short prefill chunk or a batched decode step
 * (a few to a few hundred token rows against a whole weight) as cinfer's cb_gemm16 calls
 * cuBLAS, against every algorithm cuBLASLt's heuristic offers for the same product: is there a
 * faster form than the default one, and which (issue #19's chat turn: 124..216 rows after a
 * cached prefix; bench/RESULTS.md).
 *
 *   nvcc -O2 -arch=sm_90 bench/gemm_small_cuda.cu -lcublasLt -lcublas -o gemm_small_cuda
 *   ./gemm_small_cuda [M ...]        (token rows; default 8 32 64 124 216)
 *
 * Shapes are Qwen3-8B's (y[M, N] = x[M, K] · W[N, K]ᵀ, bf16 in, f32 out and sums): q / o
 * 4096 x 4096, k / v 1024 x 4096, gate / up 12288 x 4096, down 4096 x 12288. Each weight is
 * one of enough copies (>= 256 MB in all) that it comes from DRAM as in a forward, not from L2;
 * a time is the median of 7 batches of 20 calls (CUDA events), per call. Prints, per shape and
 * M: cublasGemmEx's default, cuBLASLt's first heuristic, and the fastest of its candidates with
 * its tile / split-K / stages, each with the weight bytes read per second. */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <algorithm>
#include <stdio.h>
#include <stdlib.h>
#include <vector>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)
#define BK(x) do { cublasStatus_t s_ = (x); if (s_ != CUBLAS_STATUS_SUCCESS) { fprintf(stderr, "%s: status %d\n", #x, (int)s_); exit(1); } } while (0)

static __global__ void fill(__nv_bfloat16 *p, size_t n, unsigned seed) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ seed;
        h ^= h >> 13; h *= 0x5bd1e995u; h ^= h >> 15;
        p[i] = __float2bfloat16(((h & 0xffff) / 32768.0f - 1.0f) * 0.05f);
    }
}

struct ring { std::vector<__nv_bfloat16 *> w; int next = 0; __nv_bfloat16 *get() { __nv_bfloat16 *p = w[next]; next = (next + 1) % (int)w.size(); return p; } };

template <class F> static float time_us(F call) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < 5; i++) call();
    std::vector<float> t;
    for (int r = 0; r < 7; r++) {
        CK(cudaEventRecord(a));
        for (int i = 0; i < 20; i++) call();
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float ms;
        CK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms * 1000.0f / 20);
    }
    std::sort(t.begin(), t.end());
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return t[3];
}

int main(int argc, char **argv) {
    std::vector<int> Ms;
    for (int i = 1; i < argc; i++) Ms.push_back(atoi(argv[i]));
    if (Ms.empty()) Ms = { 8, 32, 64, 124, 216 };
    const struct { const char *name; int N, K; } shapes[] = {
        { "q/o", 4096, 4096 }, { "k/v", 1024, 4096 }, { "gate/up", 12288, 4096 }, { "down", 4096, 12288 } };
    int maxM = *std::max_element(Ms.begin(), Ms.end());
    cublasHandle_t h;
    cublasLtHandle_t lt;
    BK(cublasCreate(&h));
    BK(cublasLtCreate(&lt));
    const size_t ws_bytes = 32u << 20;
    void *ws;
    CK(cudaMalloc(&ws, ws_bytes));
    BK(cublasSetWorkspace(h, ws, ws_bytes));
    __nv_bfloat16 *x;
    float *y;
    CK(cudaMalloc(&x, (size_t)maxM * 12288 * 2));
    CK(cudaMalloc(&y, (size_t)maxM * 24576 * 4));
    fill<<<1024, 256>>>(x, (size_t)maxM * 12288, 7);
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device %s, %d SMs\n", prop.name, prop.multiProcessorCount);
    for (auto &s : shapes) {
        const size_t wb = (size_t)s.N * s.K * 2;
        ring R;
        for (size_t tot = 0; tot < (256u << 20) || R.w.size() < 2; tot += wb) {
            __nv_bfloat16 *w;
            CK(cudaMalloc(&w, wb));
            fill<<<1024, 256>>>(w, (size_t)s.N * s.K, (unsigned)R.w.size() + 1);
            R.w.push_back(w);
        }
        CK(cudaDeviceSynchronize());
        for (int M : Ms) {
            const float one = 1.0f, zero = 0.0f;
            float t_def = time_us([&] {
                BK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, s.N, M, s.K, &one, R.get(), CUDA_R_16BF, s.K, x, CUDA_R_16BF,
                                s.K, &zero, y, CUDA_R_32F, s.N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
            });
            cublasLtMatmulDesc_t op;
            BK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
            cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
            BK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
            BK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
            cublasLtMatrixLayout_t la, lb, lc;
            BK(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, s.K, s.N, s.K));
            BK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, s.K, M, s.K));
            BK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32F, s.N, M, s.N));
            cublasLtMatmulPreference_t pref;
            BK(cublasLtMatmulPreferenceCreate(&pref));
            BK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes));
            cublasLtMatmulHeuristicResult_t hr[32];
            int got = 0;
            BK(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 32, hr, &got));
            float t_first = 0, t_best = 1e30f;
            int best = -1;
            for (int i = 0; i < got; i++) {
                if (hr[i].state != CUBLAS_STATUS_SUCCESS) continue;
                float t = time_us([&] {
                    BK(cublasLtMatmul(lt, op, &one, R.get(), la, x, lb, &zero, y, lc, y, lc, &hr[i].algo, ws, ws_bytes, 0));
                });
                if (i == 0) t_first = t;
                if (t < t_best) { t_best = t; best = i; }
            }
            int tile = -1, split = -1, stages = -1, algo_id = -1, swz = -1;
            size_t sz;
            if (best >= 0) {
                cublasLtMatmulAlgoConfigGetAttribute(&hr[best].algo, CUBLASLT_ALGO_CONFIG_ID, &algo_id, sizeof algo_id, &sz);
                cublasLtMatmulAlgoConfigGetAttribute(&hr[best].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &sz);
                cublasLtMatmulAlgoConfigGetAttribute(&hr[best].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split, sizeof split, &sz);
                cublasLtMatmulAlgoConfigGetAttribute(&hr[best].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &sz);
                cublasLtMatmulAlgoConfigGetAttribute(&hr[best].algo, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, &swz, sizeof swz, &sz);
            }
            printf("%-8s M %4d  default %7.1f us (%5.2f TB/s)  lt#0 %7.1f us  best of %2d: #%d %7.1f us (%5.2f TB/s) algo %d tile %d splitk %d stages %d swizzle %d\n",
                   s.name, M, t_def, wb / t_def / 1e6, t_first, got, best, t_best, wb / t_best / 1e6, algo_id, tile, split,
                   stages, swz);
            fflush(stdout);
            cublasLtMatmulPreferenceDestroy(pref);
            cublasLtMatrixLayoutDestroy(la);
            cublasLtMatrixLayoutDestroy(lb);
            cublasLtMatrixLayoutDestroy(lc);
            cublasLtMatmulDescDestroy(op);
        }
        for (auto *w : R.w) cudaFree(w);
    }
    /* q / k / v of one input three ways: three GEMMs one after another (what cb_gemm16 does),
     * one cublasGemmGroupedBatchedEx launch (groups: q; k and v), and one GEMM over a
     * [6144, 4096] weight (what q / k / v stored as one matrix would cost); gate / up the same
     * (two GEMMs, one grouped launch, one [24576, 4096] GEMM). */
    const struct { const char *name; int n1, n2, K; } pairs[] = { { "q+k+v", 4096, 1024, 4096 }, { "gate+up", 12288, 12288, 4096 } };
    for (auto &pr : pairs) {
        const int three = pr.n1 != pr.n2, N = pr.n1 + (three ? 2 : 1) * pr.n2;
        const size_t wb = (size_t)N * pr.K * 2;
        ring R;
        for (size_t tot = 0; tot < (256u << 20) || R.w.size() < 2; tot += wb) {
            __nv_bfloat16 *w;
            CK(cudaMalloc(&w, wb));
            fill<<<1024, 256>>>(w, (size_t)N * pr.K, (unsigned)R.w.size() + 11);
            R.w.push_back(w);
        }
        void **dptr;   /* per copy of the weight: its 3 A, 3 B, 3 C pointers (set per M below) */
        CK(cudaMalloc(&dptr, R.w.size() * 9 * sizeof(void *)));
        CK(cudaDeviceSynchronize());
        for (int M : Ms) {
            const float one = 1.0f, zero = 0.0f;
            auto parts = [&](__nv_bfloat16 *w, void **A, float **C) {
                A[0] = w; C[0] = y;
                A[1] = w + (size_t)pr.n1 * pr.K; C[1] = y + (size_t)M * pr.n1;
                A[2] = w + (size_t)(pr.n1 + pr.n2) * pr.K; C[2] = C[1] + (size_t)M * pr.n2;
            };
            float t_seq = time_us([&] {
                void *A[3]; float *C[3];
                parts(R.get(), A, C);
                for (int i = 0; i < (three ? 3 : 2); i++)
                    BK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, i ? pr.n2 : pr.n1, M, pr.K, &one, A[i], CUDA_R_16BF, pr.K, x,
                                    CUDA_R_16BF, pr.K, &zero, C[i], CUDA_R_32F, i ? pr.n2 : pr.n1, CUBLAS_COMPUTE_32F,
                                    CUBLAS_GEMM_DEFAULT));
            });
            float t_one = time_us([&] {
                BK(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, N, M, pr.K, &one, R.get(), CUDA_R_16BF, pr.K, x, CUDA_R_16BF,
                                pr.K, &zero, y, CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
            });
            /* grouped: group 0 the first matrix, group 1 the other one or two (same shape) */
            cublasOperation_t ta[2] = { CUBLAS_OP_T, CUBLAS_OP_T }, tb[2] = { CUBLAS_OP_N, CUBLAS_OP_N };
            int m_[2] = { pr.n1, pr.n2 }, n_[2] = { M, M }, k_[2] = { pr.K, pr.K }, lda[2] = { pr.K, pr.K },
                ldb[2] = { pr.K, pr.K }, ldc[2] = { pr.n1, pr.n2 }, gs[2] = { 1, three ? 2 : 1 };
            float al[2] = { 1.0f, 1.0f }, be[2] = { 0.0f, 0.0f };
            const int ng = three ? 2 : 1;
            if (!three) gs[0] = 2;
            cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
            for (size_t r = 0; r < R.w.size(); r++) {
                void *A[3]; float *C[3];
                parts(R.w[r], A, C);
                void *host[9] = { A[0], A[1], A[2], x, x, x, C[0], C[1], C[2] };
                CK(cudaMemcpy(dptr + 9 * r, host, sizeof host, cudaMemcpyHostToDevice));
            }
            int gi = 0;
            float t_grp = time_us([&] {
                void **d = dptr + 9 * gi;
                gi = (gi + 1) % (int)R.w.size();
                if (st == CUBLAS_STATUS_SUCCESS)
                    st = cublasGemmGroupedBatchedEx(h, ta, tb, m_, n_, k_, al, (const void *const *)d, CUDA_R_16BF, lda,
                                                    (const void *const *)(d + 3), CUDA_R_16BF, ldb, be, d + 6,
                                                    CUDA_R_32F, ldc, ng, gs, CUBLAS_COMPUTE_32F);
            });
            printf("%-8s M %4d  one after another %7.1f us  one matrix %7.1f us  grouped launch %7.1f us%s\n", pr.name, M,
                   t_seq, t_one, t_grp, st == CUBLAS_STATUS_SUCCESS ? "" : " (grouped: not supported)");
            fflush(stdout);
        }
        cudaFree(dptr);
        for (auto *w : R.w) cudaFree(w);
    }
    return 0;
}
