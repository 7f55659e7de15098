/* shortconv.h — LFM2's gated short convolution (the "conv" operator of lfm2 / lfm2_moe).
 *
 * For a chunk x [n, D] of a sequence:
 *   [B | C | X] = in_proj(x)                       [n, 3D], split in that order
 *   bx          = B ⊙ X                            [n, D]
 *   y[t]        = C[t] ⊙ Σ_k w[k] ⊙ bx[t-(K-1)+k]  depthwise causal conv, K taps, no activation
 *   out         = out_proj(y)                      [n, D]
 * with optional biases on in_proj, the conv and out_proj (config conv_bias). bx before the
 * first token of the sequence is zero.
 *
 * State: the last K-1 rows of bx, [K-1, D] f32, oldest first (zeros where the sequence is
 * shorter). sc_forward_add_norm reads it as the history before the chunk and leaves it holding the
 * last K-1 rows after it, so one prefill, a chunked prefill and one-token decode steps are
 * the same computation. The state is owned by the caller (the session's cache).
 *
 * Written only on backend ops (norm_matmul_n, shortconv, matmul_acc / matmul, add_bias): the state, the scratch and
 * the weights a forward reads are backend memory (sc_place puts the weights there). */
#ifndef CI_SHORTCONV_H
#define CI_SHORTCONV_H
#include "../backend/backend.h"
#include "../parallel/shard.h"
#include "../io/weights.h"

typedef struct {
    int dim, K;                  /* channels D, kernel length (conv_L_cache) */
    ci_mat in_proj;              /* [3*dim, dim], rows B, C, X */
    ci_mat out_proj;             /* [dim, dim] */
    float *taps;                 /* [K, dim]: the checkpoint's [dim, 1, K] transposed, owned */
    float *in_bias;              /* [3*dim] or NULL (binder-owned) */
    float *conv_bias;            /* [dim] or NULL */
    float *out_bias;             /* [hidden] (out_proj's rows) or NULL */
    int tp_part;                 /* tensor parallel (backend.h CI_TP_*): a part of the channels (dim is
                                  * the rank's; in_proj / taps / state its channels), out_proj's
                                  * product all-reduced, out_bias added on rank 0 */
} shortconv;

/* Scratch for chunks of up to max_n tokens, sized once per session (backend memory). */
typedef struct {
    int max_n;
    float *bcx;                  /* [max_n, 3*dim] in_proj output */
    float *win;                  /* [K-1 + max_n, dim] the shortconv op's scratch */
    float *y;                    /* [max_n, dim] gated conv output */
} sc_scratch;

/* Binds <prefix>.in_proj, <prefix>.out_proj and <prefix>.conv.weight (shape [dim, 1, K]
 * as transformers saves it; [dim, K, 1] and [dim, K] hold the same bytes and are taken
 * too), plus the three biases when `bias`. Errors are the binder's sticky errors; record
 * mode lists the transformers names and shapes. Returns 0, or -1 once the binder failed. */
int sc_bind(w_binder *b, shortconv *sc, int dim, int K, int bias, const char *prefix);
void sc_free(shortconv *sc);
/* dst = sc with its matrices, taps and biases in backend memory (ci_place_mat: MLX-quantized
 * matrices keep their packed codes). -1 when out of memory. */
int sc_place(ci_backend *be, shortconv *dst, const shortconv *sc);

/* Tensor parallel (parallel/shard.h): narrows sc to rank t->rank's even share of the channels:
 * its B / C / X rows of in_proj (gathered) and in_bias, taps, conv_bias, out_proj's columns
 * (copies in t->keep); dim and the state shrink with it. -1 with err when the channels or fp8
 * blocks do not split. */
int sc_shard(shortconv *sc, const shd_ctx *t, const char *what, char *err, size_t errlen);

int sc_scratch_init(ci_backend *be, sc_scratch *s, const shortconv *sc, int max_n);
void sc_scratch_free(ci_backend *be, sc_scratch *s);

/* The block with its norm and residual: x[n, dim] += shortconv(rmsnorm(x) * norm_w) for
 * n <= s->max_n tokens, the norm fused into in_proj (norm_matmul_n) and, without an out_proj
 * bias, the add into out_proj (matmul_acc); xn [n, dim] is scratch (undefined afterwards).
 * With states NULL the n rows are a chunk following `state` [K-1, dim], which is updated;
 * else one token for each of n sequences (a batched decode step): row i advances states[i]
 * (a backend buffer of n state pointers), the projections over all rows, the conv per row,
 * and row i gets the bits of its sequence alone. */
void sc_forward_add_norm(ci_backend *be, const shortconv *sc, sc_scratch *s, float *state, float *const *states,
                         float *x, float *xn, const float *norm_w, float eps, int n);

#endif
