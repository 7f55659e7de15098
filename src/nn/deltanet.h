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
 * a_g (r)] with r = Hv/Hk; dn_forward puts them back in the Qwen3.5 order.
 *
 * A layer's recurrent state is what the cache keeps for it (dn_state_floats floats):
 * the conv window (the last K-1 pre-conv rows of [q|k|v], oldest first) followed by S for
 * every value head. Prompts run the chunked (WY / UT-transform) form, chunks of up to
 * DN_CHUNK tokens whose heavy products go through the backend's matmul; a chunk also ends
 * where its accumulated decay would underflow, and heads that decay too fast for useful
 * chunks, a few tokens (decode) and DN_RECURRENT run the token-by-token recurrence. Both
 * give the same result up to f32 rounding. Nothing here allocates after dn_scratch_init. */
#ifndef CI_DELTANET_H
#define CI_DELTANET_H
#include "../backend/backend.h"
#include "../io/weights.h"

enum { DN_CHUNK = 64 };   /* tokens per chunk of the chunked form */

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
} dn_layer;

/* Scratch for up to max_n tokens of any layer with these dims (sized once per session). */
typedef struct {
    int max_n;
    float *proj;           /* [max_n, proj width] fused projection output */
    float *ext;            /* [max_n + K - 1, conv_dim] conv window then inputs */
    float *ones;           /* [conv_dim] 1.0 (SiLU through the backend's swiglu) */
    float *mix;            /* [max_n, conv_dim] q | k | v after conv + silu + norms */
    float *z;              /* [max_n, hv*dv] */
    float *b, *a;          /* [max_n, hv] -> beta, g */
    float *o;              /* [max_n, hv*dv] */
    /* chunked form, one (head, chunk) at a time; C = DN_CHUNK, Lp <= C the padded length */
    float *kq;             /* [2C, dk] K rows then Q rows (Q later scaled by e^G) */
    float *kkqk;           /* [2C, C] k.k then q.k */
    float *T, *P;          /* [C, C] (I + A)^-1 and the decayed causal q.k */
    float *kt, *kbt, *kdt; /* [dk, C] K^T, (beta e^G K)^T, (e^{G_L - G} K)^T */
    float *vbt;            /* [dv, C] (beta V)^T */
    float *ut, *rt;        /* [dv, C] U^T and the state read S W^T */
    float *w;              /* [C, dk] W = T (beta e^G K) */
    float *og, *pu;        /* [C, dv] (e^G Q) S^T and P U */
    float *ds;             /* [dv, dk] state increment */
    float *G, *beta;       /* [C] cumulative log decay, beta */
    float *cb, *cd;        /* [C] e^G then beta e^G; e^-G then e^{G_L - G} */
    int *heads;            /* [hv] heads run by the recurrence, then the chunked ones */
} dn_scratch;

/* Floats of cached state per layer: (K-1)*conv_dim + hv*dv*dk. */
size_t dn_state_floats(const dn_layer *L);

/* Binds the layer's tensors under prefix (e.g. "model.layers.3.linear_attn"). The dims and
 * layout must be set. The conv weight is accepted as [C, 1, K] (HF) or [C, K, 1] (mlx).
 * Returns as w_mat: 1, or -1 with the binder's sticky error. */
int dn_bind(w_binder *b, dn_layer *L, const char *prefix);
void dn_layer_free(dn_layer *L);

int dn_scratch_init(dn_scratch *s, const dn_layer *L, int max_n);
void dn_scratch_free(dn_scratch *s);

/* out[n, hidden] = the mixer over x[n, hidden] (already normed), advancing state. */
void dn_forward(ci_backend *be, const dn_layer *L, dn_scratch *s, float *state, float *out, const float *x, int n,
                dn_mode mode);
/* One token for each of n sequences (a server's batched decode step): row i of x [n, hidden]
 * advances states[i]; the projections run over the n rows together, the conv and the
 * recurrence per row. Row i's output is the bits dn_forward(states[i], row i, 1) gives. */
void dn_forward_rows(ci_backend *be, const dn_layer *L, dn_scratch *s, float *const *states, float *out, const float *x,
                     int n);

#endif
