/* attn_cuda.c — decode attention (attention_pos, n rows over a long f32 KV cache) of the
 * CUDA backend with CINFER_CUDA_ATTN_DECODE2 = 0 and 1, against its own copy probe.
 *
 *   build/bench_attn_cuda [reps]
 *
 * Shapes: LFM2-8B's (32 query heads over 8 kv heads, head_dim 64) and Qwen3.5's (16 over 2,
 * head_dim 256), n = 1 and 4 rows at the last positions of 4096 and 32768 keys (max_keys =
 * the cache's rows). Times `reps` calls recorded as one CUDA graph and replayed (as in a
 * decode step), best of 3, and reports the K + V bytes read per second (f32). Random inputs.
 * Needs a CUDA device: prints why and exits 0 without one. */
#include "backend/backend.h"
#include "models/probe.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng = 88172645463325252ull;
static float frand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 11) % 2000001) / 1000000.0f - 1.0f;
}

static void sync_be(ci_backend *be, const void *buf) {
    char b[4];
    be->download(be, b, buf, 4);
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 50;
    if (reps < 1) reps = 1;
    char err[512];
    ci_backend *bes[2];
    const char *var = "CINFER_CUDA_ATTN_DECODE2";
    for (int s = 0; s < 2; s++) {
        setenv(var, s ? "1" : "0", 1);
        bes[s] = ci_backend_cuda_new(0, 1, err, sizeof err);
        if (!bes[s]) { printf("no CUDA backend: %s\n", err); return 0; }
    }
    unsetenv(var);
    printf("device: %s\n", bes[0]->name);
    double copy = ci_backend_copy_gbs(bes[0], err, sizeof err);
    if (copy <= 0) { printf("copy probe: %s\n", err); return 1; }
    printf("copy probe: %.0f GB/s (1 GiB device-to-device, read + written, best of 5)\n\n", copy);
    printf("| shape | keys | n | ATTN_DECODE2 | us / call (graph) | K+V GB/s | of copy |\n|---|---|---|---|---|---|---|\n");
    const struct { const char *name; int nh, nkv, hd; } sh[2] = { { "LFM2-8B 32/8 hd 64", 32, 8, 64 },
                                                                  { "Qwen3.5 16/2 hd 256", 16, 2, 256 } };
    const int keys[2] = { 4096, 32768 }, ns[2] = { 1, 4 };
    for (int si = 0; si < 2; si++)
        for (int ki = 0; ki < 2; ki++)
            for (int ni = 0; ni < 2; ni++) {
                const int nh = sh[si].nh, nkv = sh[si].nkv, hd = sh[si].hd, rows = keys[ki], n = ns[ni];
                const int stride = nkv * hd;
                size_t nq = (size_t)n * nh * hd, nc = (size_t)rows * stride;
                float *hq = malloc(nq * 4), *hc = malloc(nc * 4);
                int32_t hp[4];
                for (size_t i = 0; i < nq; i++) hq[i] = frand();
                for (size_t i = 0; i < nc; i++) hc[i] = frand();
                for (int t = 0; t < n; t++) hp[t] = rows - n + t;
                for (int s = 0; s < 2; s++) {
                    ci_backend *be = bes[s];
                    float *q = be->alloc(be, nq * 4), *o = be->alloc(be, nq * 4), *k = be->alloc(be, nc * 4),
                          *v = be->alloc(be, nc * 4);
                    int32_t *p = be->alloc(be, sizeof hp);
                    if (!q || !o || !k || !v || !p) { printf("%s\n", be->last_error); return 1; }
                    be->upload(be, q, hq, nq * 4);
                    be->upload(be, k, hc, nc * 4);
                    be->upload(be, v, hc, nc * 4);
                    be->upload(be, p, hp, sizeof hp);
                    const float scale = 1.0f / sqrtf((float)hd);
                    be->attention_pos(be, o, q, k, v, n, p, rows, nh, nkv, hd, stride, scale);
                    sync_be(be, o);
                    double best = 0;
                    if (be->graph_begin && be->graph_begin(be) == 0) {
                        for (int i = 0; i < reps; i++) be->attention_pos(be, o, q, k, v, n, p, rows, nh, nkv, hd, stride, scale);
                        void *g = be->graph_end(be);
                        if (g) {
                            be->graph_launch(be, g);
                            sync_be(be, o);
                            for (int r = 0; r < 3; r++) {
                                double t = now();
                                be->graph_launch(be, g);
                                sync_be(be, o);
                                double dt = (now() - t) / reps;
                                if (best == 0 || dt < best) best = dt;
                            }
                            be->graph_free(be, g);
                        }
                    }
                    if (be->status(be)) { printf("%s\n", be->last_error); return 1; }
                    double bytes = 2.0 * rows * stride * 4.0;
                    printf("| %s | %d | %d | %d | %.1f | %.0f | %.0f%% |\n", sh[si].name, rows, n, s, best * 1e6,
                           best > 0 ? bytes / best / 1e9 : 0, best > 0 ? 100.0 * bytes / best / 1e9 / copy : 0);
                    be->buf_free(be, q); be->buf_free(be, o); be->buf_free(be, k); be->buf_free(be, v); be->buf_free(be, p);
                }
                free(hq);
                free(hc);
            }
    bes[0]->free(bes[0]);
    bes[1]->free(bes[1]);
    return 0;
}
