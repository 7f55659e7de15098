/* mamba2.h — the Mamba2 mixer (state-space layer) of Nemotron-H, as transformers 5
 * NemotronHMamba2Mixer computes it.
 *
 *   [z | xBC | dt] = in_proj x                      z [I], xBC [I + 2GN], dt [Hm]
 *   xBC = silu(causal depthwise conv1d(xBC) + bias) over the last K inputs (conv state:
 *         the K-1 inputs before this chunk, f32 [K-1, conv_dim], oldest row first)
 *   x, B, C = split(xBC)                            x [Hm, P], B and C [G, N]
 *   dt = max(softplus(dt + dt_bias), dt_min);  A = -exp(A_log)
 *   per head h (group g = h / (Hm/G)):  S_h ← e^{dt·A}·S_h + dt·x_h ⊗ B_g     S_h [P, N]
 *                                       y_h = S_h C_g + D_h·x_h
 *   y = gated RMSNorm(y ⊙ silu(z)) per group of I/G channels (weight norm_w), out = out_proj y
 *
 * The conv, the scan, the gated norm are backend ops (backend.h: mamba_conv, ssd_scan,
 * gated_rmsnorm; their CPU forms in backend/cpu/mamba_cpu.c); this file wires them between
 * the two projections. Two ways to run the scan over n tokens, equal up to rounding:
 *   MAMBA2_SCAN_RECURRENT  the recurrence token by token (always used for n == 1: decode).
 *   MAMBA2_SCAN_CHUNKED    the chunked SSD form for prefill (chunks of CI_SSD_CHUNK tokens;
 *                          see mamba_cpu.c for the CPU's form).
 * The dt clamp follows transformers' prefill path (time_step_limit = (time_step_min, inf))
 * in both forms, so prefill and decode agree (transformers' own single-token path skips it).
 *
 * Invariants: the bound layer's vectors are owned f32 copies (bound by the family), matrices
 * borrowed views; mamba2_place gives the copy forward reads, every weight in backend memory.
 * The scratch (backend memory) is sized once for max_n tokens and forward allocates nothing;
 * states are f32 backend buffers, only read and written by the ops. */
#ifndef CI_MAMBA2_H
#define CI_MAMBA2_H
#include "../backend/backend.h"
#include "../parallel/shard.h"
#include <stddef.h>

typedef enum { MAMBA2_SCAN_CHUNKED = 0, MAMBA2_SCAN_RECURRENT = 1 } mamba2_scan;

typedef struct {
    int hidden;            /* model width */
    int n_heads;           /* Hm */
    int head_dim;          /* P */
    int n_groups;          /* G: B/C groups and gated-norm groups */
    int d_state;           /* N */
    int d_conv;            /* K */
    int inner;             /* I = Hm * P */
    int conv_dim;          /* I + 2 G N */
    float eps;             /* gated RMSNorm epsilon */
    float dt_min;          /* dt is clamped below at this (time_step_min) */
    ci_mat in_proj;        /* [I + conv_dim + Hm, hidden] rows: z | xBC | dt */
    float *conv_w;         /* [K, conv_dim] depthwise taps (the checkpoint's [conv_dim, 1, K]
                            * transposed); tap K-1 weighs the current token */
    float *conv_b;         /* [conv_dim], or NULL */
    float *dt_bias;        /* [Hm] */
    float *A;              /* [Hm] = -exp(A_log) */
    float *D;              /* [Hm] */
    float *norm_w;         /* [I] gated RMSNorm weight */
    ci_mat out_proj;       /* [hidden, I] */
    int tp_part;           /* tensor parallel (backend.h CI_TP_*): a part of the groups (their heads,
                            * channels and state), out_proj's product all-reduced */
} mamba2_layer;

/* Per-session scratch for up to max_n tokens per call, in backend memory. */
typedef struct {
    int max_n;
    float *proj;           /* [max_n, I + conv_dim + Hm] in_proj output */
    float *xbc;            /* [max_n, conv_dim] after conv + SiLU */
    float *y;              /* [max_n, I] scan output, normed in place */
    float *scan;           /* ci_ssd_scratch_floats(max_n) floats: ssd_scan's scratch */
    double scan_seconds;   /* wall time spent issuing the scan (both forms), accumulated:
                            * benchmarks (on the CPU the scan itself) */
} mamba2_scratch;

/* Floats of the fixed state one layer needs: the conv window and the SSM state. */
size_t mamba2_conv_floats(const mamba2_layer *L);     /* (K-1) * conv_dim */
size_t mamba2_ssm_floats(const mamba2_layer *L);      /* Hm * P * N */

/* Tensor parallel (parallel/shard.h): narrows L to rank t->rank's even share of the groups and
 * their heads: its z / x / B / C / dt rows of in_proj (gathered), conv channels, dt_bias / A /
 * D / norm weights, out_proj's columns (copies in t->keep); the dims and the state shrink with
 * it. When the ranks do not divide the groups (the gated norm's groups would straddle ranks)
 * L stays whole, computed in full on every rank (returns 0, tp_part 0). -1 with err when fp8
 * blocks do not split or memory runs out. */
int mamba2_shard(mamba2_layer *L, const shd_ctx *t, const char *what, char *err, size_t errlen);

int mamba2_scratch_init(ci_backend *be, mamba2_scratch *s, const mamba2_layer *L, int max_n);
void mamba2_scratch_free(ci_backend *be, mamba2_scratch *s);
/* dst = L with its matrices and vectors placed with be->weight; -1 when out of memory. */
int mamba2_place(ci_backend *be, mamba2_layer *dst, const mamba2_layer *L);

/* The pre-mixer block on n <= s->max_n tokens: x[n, hidden] += mixer(rmsnorm(x) · norm_w)
 * (eps), the tokens following the state in conv_state / ssm_state (backend buffers), which
 * are advanced past them. The norm goes through norm_matmul_n with in_proj, the residual add
 * through matmul_acc: on the CPU the bits of rmsnorm, matmul, ..., matmul, add. xn: [n,
 * hidden] scratch (afterwards out_proj's product on the CPU, undefined on a device).
 * L: placed. scan picks the prefill form (n == 1 always uses the recurrence). */
void mamba2_forward(ci_backend *be, const mamba2_layer *L, mamba2_scratch *s, float *conv_state, float *ssm_state,
                    float *x, float *xn, const float *norm_w, float eps, int n, mamba2_scan scan);
/* One token for each of n sequences (a batched decode step): row i of x advances
 * conv_states[i] / ssm_states[i] (both tables of n pointers in backend memory); the
 * projections run over all rows, the conv and the recurrence per row; row i gets the bits
 * mamba2_forward gives it alone. */
void mamba2_forward_rows(ci_backend *be, const mamba2_layer *L, mamba2_scratch *s, float *const *conv_states,
                         float *const *ssm_states, float *x, float *xn, const float *norm_w, float eps, int n);

#endif
