/* qwen_hybrid_internal.h — what qwen_hybrid.c (hyper-parameters, tensors, placement),
 * qwen_hybrid_run.c (sessions, forward, batched steps) and qwen_hybrid_cache.c (snapshots)
 * share: the model as bound and as placed, and the session. */
#ifndef CI_QWEN_HYBRID_INTERNAL_H
#define CI_QWEN_HYBRID_INTERNAL_H
#include "qwen_hybrid.h"
#include "../nn/ffn_block.h"
#include "../nn/gated_attn.h"
#include "../nn/moe.h"
#include "../nn/rope.h"
#include "runner.h"

enum { QH_UBATCH = 256 };

typedef struct {
    int linear;                  /* 1: gated DeltaNet, 0: gated attention */
    float *attn_norm;            /* [D] input_layernorm, 1 + w */
    dn_layer dn;
    ga_layer ga;
    ffn_block ffn;               /* post_attention_layernorm [D], 1 + w; dense: gate/up_proj
                                  * [ff, D], down_proj [D, ff] */
    int is_moe;
    moe_block moe;               /* sparse layers: ffn.moe = &moe */
} qh_layer;

/* One layer's weights in backend memory (be->weight: the same addresses on the CPU). */
typedef struct {
    const float *attn_norm;
    dn_layer dn;                 /* its matrices and vectors placed */
    ga_layer ga;                 /* its matrices, norms and rope table placed */
    ffn_block ffn;               /* its norm and dense matrices placed (ffn.moe = &moe when MoE) */
    moe_block moe;               /* MoE layers: router, shared expert and expert views placed */
} qh_placed;

typedef struct {
    int D, n_layers, vocab, ff;
    float eps;
    qh_opts opts;
    dn_mode mode;
    ci_mat embed;                /* [vocab, D] */
    ci_mat lm_head;              /* [vocab, D]; = embed when tied */
    float *final_norm;           /* [D] 1 + w */
    qh_layer *layers;            /* [n_layers] */
    rope_table rope;
    const dn_layer *any_dn;      /* first of each kind, for scratch sizing */
    const ga_layer *any_ga;
    const moe_block *any_moe;
    ci_mat *expert_mats;         /* owned array behind every layer's expert views */
    float **owned;
    int n_owned;
    /* What forward reads: the weights above as the backend placed them (qh_place). The
     * bound host views stay for record mode and tests. */
    qh_placed *dev;              /* [n_layers] */
    ci_mat *dev_expert_mats;     /* the placed expert views (behind dev[l].moe) */
    ci_mat dev_embed, dev_head;
    const float *dev_final_norm, *dev_inv_freq;
    float *pool_kv;              /* the attention layers' rows of the model's block pool (qh_pool_init), or NULL */
    shd_kept kept;               /* a tensor-parallel rank's copies of its split columns */
} qh_model;

/* A session (qwen_hybrid_run.c): the cache and scratch, all in backend memory but the host
 * staging. */
typedef struct {
    float **kv;                  /* [n_layers] attention layers: their [k | v] rows (2*n_kv*hd floats,
                                  * [lrows] of them) in kv_rows; else NULL */
    float *kv_rows;              /* the block pool's rows (layer_snap.h): the model's or the session's own */
    ci_pages bpg;                /* a batch step's (ci_runner_batch_pages: a table per row) */
    float **state;               /* [n_layers] DeltaNet layers: dn_state_floats (window, then S); else NULL */
    int cache_pos;               /* tokens the cache holds (= s->pos after every forward) */
    float *x, *xn, *y;           /* [run.ub, D] */
    float *g, *u;                /* [run.ub, ff] dense MLP */
    float *last;                 /* [D] the last row, final-normed */
    ci_runner run;               /* the chunk loop (runner.h): ids / positions, head buffers, decode
                                  * graphs; chunks of run.ub tokens (ci_runner_chunk_rows:
                                  * QH_UBATCH on the CPU), batch steps of QH_UBATCH sequences */
    float *zeros;                /* host: [max state floats] zeros, a new sequence's state */
    int32_t *best_n;             /* [run.ub] per-row argmax of a forward_batch_argmax step */
    dn_scratch dn;
    ga_scratch ga;
    moe_scratch moe;
} qh_session;

/* Floats of one attention layer's KV row, and of one DeltaNet layer's state. */
static inline size_t qh_kv_floats(const qh_layer *L, const ci_backend *be) { return ga_row_floats(&L->ga, be); }
static inline size_t qh_state_floats(const qh_layer *L) { return dn_state_floats(&L->dn); }

/* Every weight forward reads through be->weight; refuses MLX-quantized weights on a device. */
int qh_place(ci_model *m, qh_model *d, char *err, size_t errlen);
/* 1 when s is a session of these families. */
int qh_is_session(const ci_session *s);

#endif
