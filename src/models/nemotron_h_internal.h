/* nemotron_h_internal.h — what nemotron_h.c (hyper-parameters, tensors, placement),
 * nemotron_h_run.c (sessions, forward, batched steps) and nemotron_h_cache.c (snapshots,
 * scan form) share: the model as bound and as placed, and the session. */
#ifndef CI_NEMOTRON_H_INTERNAL_H
#define CI_NEMOTRON_H_INTERNAL_H
#include "nemotron_h.h"
#include "../nn/attn_block.h"
#include "../nn/mamba2.h"
#include "../nn/moe.h"
#include "runner.h"

enum { NH_UBATCH = 256 };        /* most tokens per pass through the layers (scratch rows) */

typedef struct {
    char kind;                   /* 'M', '*', '-', 'E' */
    float *norm;                 /* [H] pre-mixer RMSNorm */
    mamba2_layer mamba;          /* 'M' */
    ci_mat wq;                   /* '*': [n_heads*hd, H] */
    ci_mat wk, wv;               /* '*': [n_kv*hd, H] */
    ci_mat wo;                   /* '*': [H, n_heads*hd] */
    ci_mat up;                   /* '-': [ff, H] */
    ci_mat down;                 /* '-': [H, ff] */
    moe_block moe;               /* 'E' (relu² experts, shared expert inside) */
} nh_layer;

/* One layer's weights in backend memory (be->weight: the same addresses on the CPU). */
typedef struct {
    const float *norm;
    mamba2_layer mamba;          /* its matrices and vectors placed */
    attn_block attn;             /* wq / wk / wv / wo placed; no norms, no rope */
    ci_mat up, down;
    moe_block moe;               /* router, bias, experts, shared expert, latent projections placed */
} nh_placed;

typedef struct {
    int H, n_layers, vocab, n_heads, n_kv, hd, ff;
    float eps, attn_scale;
    ci_mat embed;                /* [vocab, H] */
    ci_mat lm_head;              /* [vocab, H]; = embed when tied */
    float *norm_f;               /* [H] */
    nh_layer *layers;            /* [n_layers] */
    ci_mat *expert_mats;         /* owned array behind every MoE layer's up/down views */
    const moe_block *any_moe;    /* for scratch sizing (placed: dev), or NULL */
    const mamba2_layer *any_mamba;
    mamba2_scan scan;            /* prefill scan form */
    size_t state_floats;         /* one Mamba2 layer's conv window + SSM state */
    float **owned;               /* w_vec copies */
    int n_owned;
    /* What forward reads: the weights above as the backend placed them (nh_place). The
     * bound host views stay for record mode and tests. */
    nh_placed *dev;              /* [n_layers] */
    ci_mat *dev_expert_mats;     /* the placed expert views (behind dev[l].moe) */
    ci_mat dev_embed, dev_head;
    const float *dev_norm_f;
    float *pool_kv;              /* the attention layers' rows of the model's block pool (nh_pool_init), or NULL */
    int tp_part;                 /* a tensor-parallel rank (backend.h CI_TP_*): attention heads and the
                                  * relu² MLPs' columns split, their outputs all-reduced */
    shd_kept kept;               /* such a rank's copies of its split columns */
} nh_model;

/* A session (nemotron_h_run.c): the cache and scratch, all in backend memory but the host
 * staging. */
typedef struct {
    float **kv;                  /* [n_layers] '*': their [k | v] rows (2*n_kv*hd floats, [lrows] of
                                  * them) in kv_rows; else NULL */
    float *kv_rows;              /* the block pool's rows (layer_snap.h): the model's or the session's own */
    ci_pages bpg;                /* a batch step's (ci_runner_batch_pages: a table per row) */
    float **state;               /* [n_layers] 'M': conv window [K-1, conv_dim] then SSM [Hm, P, N] */
    int cache_pos;               /* tokens the cache holds (= s->pos after every forward) */
    float *x, *xn, *y;           /* [run.ub, H] */
    float *q, *att;              /* [run.ub, n_heads*hd] */
    float *k, *v;                /* [run.ub, n_kv*hd] */
    float *g;                    /* [run.ub, ff] */
    float *last;                 /* [H] the last row, final-normed */
    ci_runner run;               /* the chunk loop (runner.h): ids / positions, head buffers, decode
                                  * graphs; chunks of run.ub tokens (ci_runner_chunk_rows:
                                  * NH_UBATCH on the CPU), batch steps of NH_UBATCH sequences */
    int32_t *best_n;             /* [run.ub] each batch row's argmax (forward_batch_argmax) */
    float *zeros;                /* host: state_floats zeros, a new sequence's Mamba2 state */
    mamba2_scratch mamba;
    moe_scratch moe;
} nh_session;

extern const ci_family fam_nemotron_h;

/* One attention layer's KV row, in floats. */
static inline size_t nh_kv_floats(const nh_model *d, const ci_backend *be) {
    return 2 * (size_t)ci_kv_slots(be, d->n_kv * d->hd);   /* [k | v]: f16 two to a float on a kv_f16 backend */
}

/* Every weight forward reads through be->weight; refuses MLX-quantized weights on a device. */
int nh_place(ci_model *m, nh_model *d, char *err, size_t errlen);
/* A tensor-parallel rank (its backend joined a communicator of world > 1), before nh_place: the
 * attention layers' heads, the Mamba2 layers' groups (whole on every rank when the ranks do not
 * divide them), the relu² MLPs' and the experts' (and shared experts') columns narrowed to its
 * part (nn blocks' *_shard); the state size follows. */
int nh_shard(ci_model *m, nh_model *d, char *err, size_t errlen);

/* A new sequence: every Mamba2 state zeroed (an upload), the cache at position 0. */
void nh_reset_states(const nh_model *d, ci_backend *be, nh_session *c);
int nh_session_init(ci_session *s, char *err, size_t errlen);
void nh_session_free(ci_session *s);
int nh_forward(ci_session *s, const int *tokens, int n, float *logits, int all_logits, char *err, size_t errlen);
int nh_forward_argmax(ci_session *s, const int *tokens, int n, int *out_id, char *err, size_t errlen);
int nh_forward_batch(ci_session *const *ss, const int *tokens, int n, float *logits, char *err, size_t errlen);
int nh_forward_batch_argmax(ci_session *const *ss, const int *tokens, int n, int *out_ids, char *err, size_t errlen);

#endif
