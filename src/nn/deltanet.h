/* deltanet.h — the gated DeltaNet token mixer of Qwen3-Next and Qwen3.5 (transformers'
 * Qwen3NextGatedDeltaNet / Qwen3_5GatedDeltaNet).
 *
 * Per token x [hidden]:
 *   mix = [q | k | v] (Hk*Dk, Hk*Dk, Hv*Dv), z [Hv*Dv], b, a [Hv]   (projections of x)
 *   mix = silu(depthwise causal conv over time, kernel K, no bias)
 *   q, k = L2-normalised per key head (x * rsqrt(sum x^2 + 1e-6)); q *= Dk^-0.5
 *   beta = sigmoid(b); g = -exp(A_log) * softplus(a + dt_bias)          per value head
 *   value head h reads key head h / (Hv/Hk) (transformers' repeat_interleave)
 *   S_h [Dv, Dk] (f32): S <- e^g S; delta = beta (v - S k); S <- S + delta k^T; o = S q
 *   out = out_proj(RMSNorm_w(o) * silu(z))      (per value head over Dv; plain weight w)
 * Projection layouts: Qwen3.5 has separate in_proj_qkv / in_proj_z / in_proj_b / in_proj_a;
 * Qwen3-Next fuses them into in_proj_qkvz and in_proj_ba, grouped per key head g:
 * qkvz rows = for g: [q_g (Dk), k_g (Dk), v_g (r*Dv), z_g (r*Dv)], ba rows = for g: [b_g (r),
 * a_g (r)] with r = Hv/Hk; the deltanet_unfuse op puts them back in the Qwen3.5 order.
 *
 * A layer's recurrent state is what the cache keeps for it (dn_state_floats floats): the
 * conv window (the last K-1 pre-conv rows of [q|k|v], oldest first) followed by S for
 * every value head. Written only on backend ops (matmul_n, deltanet_unfuse, causal_conv,
 * deltanet): the weights a forward reads, the state and the scratch are backend memory
 * (dn_place puts the weights there); the CPU's deltanet op runs prompts in the chunked
 * (WY / UT-transform) form and a few tokens through the recurrence (cpu/deltanet_cpu.c).
 * Nothing here allocates after dn_scratch_init. */
#ifndef CI_DELTANET_H
#define CI_DELTANET_H
#include "../backend/backend.h"
#include "../parallel/shard.h"
#include "../io/weights.h"

enum { DN_CHUNK = CI_DN_CHUNK };   /* tokens per chunk of the CPU's chunked form */

typedef enum { DN_SPLIT = 0, DN_FUSED = 1 } dn_layout;
typedef enum { DN_AUTO = 0,       /* chunked for prompts, recurrence for a few tokens */
               DN_RECURRENT = 1   /* the recurrence for everything (reference, bench) */ } dn_mode;

typedef struct {
    int hidden, hk, hv, dk, dv, conv_k;   /* hv is a multiple of hk */
    float eps;                            /* output RMSNorm epsilon */
    dn_layout layout;
    ci_mat qkv;            /* SPLIT: [2*hk*dk + hv*dv, hidden] */
    ci_mat z;              /* SPLIT: [hv*dv, hidden] */
    ci_mat b, a;           /* SPLIT: [hv, hidden] */
    ci_mat qkvz;           /* FUSED: [2*hk*dk + 2*hv*dv, hidden], grouped per key head */
    ci_mat ba;             /* FUSED: [2*hv, hidden], grouped per key head */
    float *conv_w;         /* [conv_k, conv_dim] owned (the checkpoint's [conv_dim, conv_k]
                            * transposed); tap conv_k-1 multiplies the current token */
    float *neg_A;          /* [hv] -exp(A_log) (binder-owned, converted at bind) */
    float *dt_bias;        /* [hv] (binder-owned) */
    float *norm_w;         /* [dv] output norm weight (binder-owned) */
    ci_mat out;            /* [hidden, hv*dv] */
    ci_deltanet ops;       /* the deltanet ops' view: dims, neg_A, dt_bias, norm_w, eps */
    int tp_part;           /* tensor parallel (backend.h CI_TP_*): a part of the key heads (their
                            * value heads, channels and state), out_proj's product all-reduced */
} dn_layer;

/* Scratch for up to max_n tokens of any layer with these dims (sized once per session,
 * backend memory). */
typedef struct {
    int max_n;
    float *proj;           /* FUSED: [max_n, 2*hk*dk + 2*hv*dv] in_proj_qkvz's output */
    float *ba;             /* FUSED: [max_n, 2*hv] in_proj_ba's output */
    float *xin;            /* [max_n, conv_dim] q | k | v before the conv */
    float *win;            /* [K-1 + max_n, conv_dim] the causal_conv op's scratch */
    float *mix;            /* [max_n, conv_dim] q | k | v after the conv */
    float *z;              /* [max_n, hv*dv] the gate, then the gated output */
    float *b, *a;          /* [max_n, hv] */
    float *work;           /* ci_deltanet_scratch_floats(max_n): the deltanet op's scratch */
} dn_scratch;

/* Floats of cached state per layer: (K-1)*conv_dim + hv*dv*dk. */
size_t dn_state_floats(const dn_layer *L);

/* Binds the layer's tensors under prefix (e.g. "model.layers.3.linear_attn"). The dims and
 * layout must be set. The conv weight is accepted as [C, 1, K] (HF) or [C, K, 1] (mlx).
 * Returns as w_mat: 1, or -1 with the binder's sticky error. */
int dn_bind(w_binder *b, dn_layer *L, const char *prefix);
void dn_layer_free(dn_layer *L);

/* dst = L with its matrices and vectors in backend memory (ci_place_mat: MLX-quantized
 * matrices keep their packed codes). -1 when out of memory. */
int dn_place(ci_backend *be, dn_layer *dst, const dn_layer *L);

/* Tensor parallel (parallel/shard.h): narrows L to rank t->rank's even share of the value
 * heads and the key heads they read (split when the ranks divide the key heads, else one shared
 * by the ranks of its value heads): its q | k | v rows (gathered into one matrix) or its part of
 * the fused groups, z / b / a rows, conv channels, A / dt_bias, out_proj's columns (copies in
 * t->keep); hk / hv and the state shrink with it. -1 with err when the heads or fp8 blocks do
 * not split. */
int dn_shard(dn_layer *L, const shd_ctx *t, const char *what, char *err, size_t errlen);

int dn_scratch_init(ci_backend *be, dn_scratch *s, const dn_layer *L, int max_n);
void dn_scratch_free(ci_backend *be, dn_scratch *s);

/* out[n, hidden] = the mixer over x[n, hidden] (already normed) for n <= s->max_n tokens,
 * advancing state (dn_state_floats floats). DN_RECURRENT: every token through the recurrence. */
void dn_forward(ci_backend *be, const dn_layer *L, dn_scratch *s, float *state, float *out, const float *x, int n,
                dn_mode mode);
/* One token for each of n sequences (a server's batched decode step): row i of x [n, hidden]
 * advances its own state; tab is a backend buffer of 2n pointers, row i's conv window at
 * tab[2i] and its S (the window's end) at tab[2i + 1]. The projections run over the n rows
 * together, the conv and the recurrence per row. Row i's output is the bits
 * dn_forward(row i's state, row i, 1) gives. */
void dn_forward_rows(ci_backend *be, const dn_layer *L, dn_scratch *s, float *const *tab, float *out, const float *x,
                     int n);
/* The same mixers with the block around them: x[n, hidden] += out_proj(mixer(rmsnorm(x) *
 * norm_w)) (eps). xn, tmp: [n, hidden] scratch (the normed rows, out_proj's product): the
 * CPU's bits of rmsnorm, dn_forward into tmp, add (norm_matmul_n and matmul_acc on a device). */
void dn_forward_add(ci_backend *be, const dn_layer *L, dn_scratch *s, float *state, float *x, const float *norm_w,
                    float eps, float *xn, float *tmp, int n, dn_mode mode);
void dn_forward_rows_add(ci_backend *be, const dn_layer *L, dn_scratch *s, float *const *tab, float *x,
                         const float *norm_w, float eps, float *xn, float *tmp, int n);
/* Floats from the start of a layer's state to its S. */
size_t dn_state_S_offset(const dn_layer *L);

#endif
