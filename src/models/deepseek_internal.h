/* deepseek_internal.h — what the two halves of the DeepSeek decoder share: the model as
 * deepseek.c binds and places it (deepseek.c: hyper-parameters, tensors, placement) and
 * deepseek_run.c runs it (sessions, forward, batched steps, cache rows). Not for other
 * files. */
#ifndef CI_DEEPSEEK_INTERNAL_H
#define CI_DEEPSEEK_INTERNAL_H
#include "model.h"
#include "../nn/dsa.h"
#include "../nn/mla.h"
#include "../nn/moe.h"
#include "../nn/rope.h"

/* Tokens per chunk on the CPU: a prompt runs in chunks of at most this many rows through the
 * cache (a device's chunk is ci_runner_chunk_rows's); a batch step's groups of sequences. */
enum { UBATCH = 256 };

typedef struct {
    float *attn_norm;            /* [H] input_layernorm */
    mla_layer attn;
    dsa_indexer idx;
    float *ffn_norm;             /* [H] post_attention_layernorm */
    int is_moe;
    ci_mat wg, wu, wd;           /* dense: [ff, H], [ff, H], [H, ff]; MoE: the shared experts */
    int has_shared;
    moe_block moe;
} ds_layer;

/* One layer's weights as the backend placed them (what forward reads). */
typedef struct {
    const float *attn_norm, *ffn_norm;
    mla_layer attn;              /* owns its w_uk / w_uv arrays (mla_layer_free) */
    dsa_indexer idx;
    ci_mat wg, wu, wd;
    moe_block moe;               /* gate, bias and expert views placed (dev_experts) */
} ds_placed;

typedef struct {
    int H, n_layers, vocab, ff, shared_ff;
    int lat;                     /* kv_lora + rope: floats per latent-cache row */
    int indexed;                 /* V3.2: the lightning indexer and sparse attention */
    int kdim;                    /* index_head_dim: floats per indexer-key row (0 without) */
    float eps;
    ci_mat embed;                /* [vocab, H] */
    ci_mat lm_head;              /* [vocab, H] */
    float *final_norm;           /* [H] */
    ds_layer *layers;            /* [n_layers] */
    rope_table rope;             /* qk_rope_head_dim dims; shared by MLA and the indexer */
    ci_mat *expert_mats;         /* [n_moe_layers · 3 · E] expert views */
    const moe_block *any_moe;
    float **owned;
    int n_owned;
    ds_placed *dev;              /* [n_layers] */
    ci_mat *dev_experts;         /* the expert views placed, laid out as expert_mats */
    ci_mat dev_embed, dev_head;
    const float *dev_final_norm, *dev_inv_freq;
    int tp_part;                 /* a tensor-parallel rank (backend.h CI_TP_*): the shared experts' and
                                  * the dense MLPs' columns split, their down all-reduced */
    shd_kept kept;               /* such a rank's copies of its split columns */
    float *pool_lat, *pool_key;  /* the model's shared block pool (ci_model_kv_pool), or NULL:
                                  * [n_layers][blocks * KV_BLOCK][lat] and [..][kdim] */
} ds_model;

#endif
