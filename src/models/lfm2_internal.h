/* lfm2_internal.h — what lfm2.c (hyper-parameters, tensors, placement), lfm2_run.c
 * (sessions, forward, batched steps) and lfm2_cache.c (snapshots) share: the model as bound
 * and as placed, and the session. */
#ifndef CI_LFM2_INTERNAL_H
#define CI_LFM2_INTERNAL_H
#include "lfm2.h"
#include "../nn/attn_block.h"
#include "../nn/ffn_block.h"
#include "../nn/moe.h"
#include "../nn/rope.h"
#include "../nn/shortconv.h"
#include "runner.h"

typedef struct {
    int is_attn, is_moe;
    float *op_norm;              /* [H] operator_norm */
    attn_block attn;             /* attention: q/k/v_proj, out_proj, q_layernorm / k_layernorm [hd] */
    shortconv conv;              /* conv layers */
    ffn_block ffn;               /* ffn_norm [H]; dense: w1 / w3 [ff, H] gate, up, w2 [H, ff] down */
    moe_block moe;               /* MoE FF (lfm2_moe past num_dense_layers): ffn.moe = &moe */
} lfm2_layer;

/* One layer's weights in backend memory (be->weight: the same addresses on the CPU). */
typedef struct {
    const float *op_norm;
    attn_block attn;             /* its matrices, norms and rope table placed */
    shortconv conv;              /* its matrices, taps and biases placed */
    ffn_block ffn;               /* its norm and dense matrices placed (ffn.moe = &moe when MoE) */
    moe_block moe;               /* MoE layers: router, expert bias and expert views placed */
} lfm2_placed;

typedef struct {
    int H, n_layers, vocab, n_heads, n_kv, hd, ff, K;
    int conv_dim;                /* the short convolutions' channels: H, or a tensor-parallel rank's */
    float eps, attn_scale;
    ci_mat embed;                /* [vocab, H] */
    ci_mat lm_head;              /* [vocab, H]; = embed when tied */
    float *final_norm;           /* [H] embedding_norm */
    lfm2_layer *layers;          /* [n_layers] */
    rope_table rope;
    ci_mat *expert_mats;         /* owned array behind every MoE layer's expert views */
    const moe_block *any_moe;    /* first MoE block (scratch sizing), or NULL */
    int any_conv;
    float **owned;
    int n_owned;
    /* What forward reads: the weights above as the backend placed them (lfm2_place). The
     * bound host views stay for record mode and tests. */
    lfm2_placed *dev;            /* [n_layers] */
    ci_mat *dev_expert_mats;     /* the placed expert views (behind dev[l].moe) */
    ci_mat dev_embed, dev_head;
    const float *dev_final_norm, *dev_inv_freq;
    float *pool_kv;              /* the attention layers' rows of the model's block pool (lfm2_pool_init), or NULL */
    shd_kept kept;               /* a tensor-parallel rank's copies of its split columns */
} lfm2_model;

/* A session (lfm2_run.c): the cache and scratch, all in backend memory but the host staging. */
typedef struct {
    float **kv;                  /* [n_layers] attention layers: their [k | v] rows (2*n_kv*hd floats,
                                  * [lrows] of them) in kv_rows; else NULL */
    float *kv_rows;              /* the block pool's rows (layer_snap.h): the model's or the session's own */
    ci_pages bpg;                /* a batch step's (ci_runner_batch_pages: a table per row) */
    float **state;               /* [n_layers] conv layers: [K-1, H] oldest row first; else NULL */
    int cache_pos;               /* tokens the cache holds (= s->pos after every forward) */
    float *x, *xn;               /* [rows, H] */
    float *q;                    /* [rows, n_heads*hd] */
    float *k, *v;                /* [rows, n_kv*hd] this chunk's keys / values */
    float *att;                  /* [rows, max(n_heads*hd, H)] */
    float *g, *u;                /* [rows, ff] */
    float *last;                 /* [H] the last row, final-normed */
    ci_runner run;               /* the chunk loop: ids / positions, head buffers, decode graphs;
                                  * run.ub is the prefill chunk (<= rows) */
    int rows;                    /* the scratch rows (ci_runner_chunk_rows: LFM2_UBATCH on the CPU) */
    float *zeros;                /* host: [(K-1)*H] zeros, a new sequence's conv state */
    sc_scratch sc;
    moe_scratch moe;
} lfm2_session;

/* One attention layer's KV row and one conv layer's state, in floats. */
static inline size_t lfm2_kv_floats(const lfm2_model *d, const ci_backend *be) {
    return 2 * (size_t)ci_kv_slots(be, d->n_kv * d->hd);   /* [k | v]: f16 two to a float on a kv_f16 backend */
}
static inline size_t lfm2_state_floats(const lfm2_model *d) { return (size_t)(d->K - 1) * (size_t)d->conv_dim; }

/* Every weight forward reads through be->weight; refuses MLX-quantized weights on a device. */
int lfm2_place(ci_model *m, lfm2_model *d, char *err, size_t errlen);

#endif
