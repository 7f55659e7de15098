/* deepseek.c — the decoder shared by the DEEPSEEK_V3 and DEEPSEEK_V32 families (deepseek.h):
 * MLA attention (nn/mla.h) — or, with the V3.2 lightning indexer, DeepSeek Sparse Attention
 * (nn/dsa.h) — and DeepSeek MoE (nn/moe.h: sigmoid router with e_score_correction_bias and
 * grouped top-k, shared experts) after the dense SwiGLU layers.
 *
 * Owns: hyper-parameters (both config dialects: transformers 5 mlp_layer_types /
 * rope_parameters and the hub's first_k_dense_replace + moe_layer_freq / rope_scaling,
 * topk_method / scoring_func), the tensor list (HF names model.layers.N.self_attn.q_a_proj ...,
 * with the indexer's self_attn.indexer.{wq_b, wk, k_norm, weights_proj}; per-expert, fused or
 * mlx-stacked experts; fp8 E4M3 with weight_scale_inv 128x128 blocks; MLX-quantized matrices,
 * kv_b_proj included, whole or split by mlx-lm into embed_q / unembed_out; MTP layers
 * ignored), and the session: per layer the MLA latent cache [max_ctx, kv_lora + rope] and,
 * with the indexer, the indexer-key cache [max_ctx, index_head_dim]. Rows [0, pos) are valid;
 * a forward writes rows pos..pos+n-1.
 *
 * Backend memory (DESIGN.md "Backends and memory"): after binding, every weight forward
 * reads is placed with be->weight (ds_placed; the identity on the CPU), every cache and
 * scratch buffer comes from be->alloc, token ids and positions are uploaded per chunk, and
 * the forward is backend ops only (nn/mla.c, nn/dsa.c, nn/moe.c), so the CUDA backend runs
 * it as it is. MLX-quantized checkpoints stay on the CPU. */
#include "model.h"
#include "../core/status.h"
#include "../io/json.h"
#include "../io/weights.h"
#include "deepseek.h"
#include "../nn/dsa.h"
#include "../nn/mla.h"
#include "../nn/moe.h"
#include "../nn/place.h"
#include "../nn/rope.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
} ds_model;

/* The session: every buffer in backend memory but the host staging (hpos, htab). */
typedef struct {
    float *lat_cache;            /* [n_layers][max_ctx][lat] */
    float *key_cache;            /* [n_layers][max_ctx][kdim] (indexed) */
    float *x, *xn, *y;           /* [UBATCH, H] */
    float *g, *u;                /* [UBATCH, max(ff, shared_ff)] */
    float *last;                 /* [H] the last row, final-normed */
    float *logits1;              /* [vocab] the last row's logits */
    float *logits_n;             /* [logit_rows, vocab] all_logits / batch steps, on first need */
    int logit_rows;
    int32_t *ids, *pos;          /* [UBATCH] a chunk's token ids and positions */
    int32_t *best;               /* [1] argmax of logits1 (forward_argmax) */
    void *graph[2];              /* the recorded decode step (GRAPH_LOGITS / GRAPH_ARGMAX) */
    int graph_failed[2];         /* recording failed once: that step stays eager */
    int32_t *hpos;               /* [UBATCH] host: positions to upload */
    float **htab, **tab;         /* [n_layers][UBATCH] a batch step's latent caches (host, backend) */
    mla_scratch mla;
    dsa_scratch dsa;
    moe_scratch moe;
} ds_cache;

/* MoE or dense MLP per layer: mlp_layer_types ("dense" | "sparse") when the config has it,
 * else the hub rule idx >= first_k_dense_replace && idx % moe_layer_freq == 0. Fills is_moe. */
static int layer_kinds(const ci_config *c, const char *fam, int n_layers, long long first_dense, long long freq,
                       int *is_moe, char *err, size_t errlen) {
    const json_t *types = json_object_get(c->text, "mlp_layer_types");
    if (types && !json_is_null(types)) {
        if (!json_is_array(types) || (int)json_array_size(types) != n_layers)
            return ci_err(err, errlen, "%s: %s: 'mlp_layer_types' must be a list of %d strings", c->path, fam, n_layers);
        for (int l = 0; l < n_layers; l++) {
            const char *t = json_string_value(json_array_get(types, (size_t)l));
            if (!t || (strcmp(t, "dense") && strcmp(t, "sparse")))
                return ci_err(err, errlen, "%s: %s: mlp_layer_types[%d] is '%s', expected 'dense' or 'sparse'", c->path,
                              fam, l, t ? t : "(not a string)");
            is_moe[l] = !strcmp(t, "sparse");
        }
        return 0;
    }
    for (int l = 0; l < n_layers; l++) is_moe[l] = l >= first_dense && l % freq == 0;
    return 0;
}

/* A device backend: the ops this decoder needs, and no MLX-quantized matrix (no CUDA kernel
 * reads MLX codes yet). One line naming what is missing. */
static int device_check(ci_model *m, const ds_model *d, char *err, size_t errlen) {
    const ci_backend *be = m->be;
    const char *fam = m->family->name;
    if (!be->rmsnorm_strided || !be->layernorm || !be->mla_absorb_q || !be->mla_out_heads || !be->kv_store_tab ||
        !be->mla_attend || !be->dsa_attend)
        return ci_err(err, errlen, "%s: no CUDA path yet: backend %s has no MLA / DSA ops; run it with --device cpu", fam,
                      be->name);
    if (d->any_moe && (!be->moe_route || !be->moe_experts))
        return ci_err(err, errlen, "%s: no CUDA path yet: backend %s has no MoE ops; run it with --device cpu", fam,
                      be->name);
    int quant = m->cfg.quant.present || d->embed.dtype == CI_U32 || d->lm_head.dtype == CI_U32;
    for (int l = 0; l < d->n_layers && !quant; l++) {
        const ds_layer *L = &d->layers[l];
        const mla_layer *A = &L->attn;
        quant = A->q_a.dtype == CI_U32 || A->q_b.dtype == CI_U32 || A->q.dtype == CI_U32 || A->kv_a.dtype == CI_U32 ||
                A->kv_b.dtype == CI_U32 || A->o.dtype == CI_U32 || L->wg.dtype == CI_U32 || L->wd.dtype == CI_U32 ||
                (A->w_uk && A->w_uk[0].dtype == CI_U32) || (A->w_uv && A->w_uv[0].dtype == CI_U32);
    }
    if (quant)
        return ci_err(err, errlen, "%s: MLX-quantized weights (dtype U32) have no CUDA path yet (%s); run it with --device cpu",
                      fam, m->cfg.path);
    return 0;
}

/* After binding: every weight forward reads goes through be->weight (identity on the CPU). */
static int place_weights(ci_model *m, ds_model *d, char *err, size_t errlen) {
    ci_backend *be = m->be;
    const char *fam = m->family->name;
    if (be->is_device && device_check(m, d, err, errlen)) return -1;
    size_t n_exp = (size_t)(d->any_moe ? d->any_moe->n_experts : 0) * 3;
    int n_moe = 0;
    for (int l = 0; l < d->n_layers; l++) n_moe += d->layers[l].is_moe;
    d->dev = calloc((size_t)d->n_layers, sizeof *d->dev);
    d->dev_experts = calloc((size_t)n_moe * n_exp + 1, sizeof *d->dev_experts);
    if (!d->dev || !d->dev_experts) return ci_err(err, errlen, "%s: out of memory", fam);
    int bad = ci_place_mat(be, &d->dev_embed, &d->embed) || ci_place_mat(be, &d->dev_head, &d->lm_head) ||
              ci_place_vec(be, &d->dev_final_norm, d->final_norm, d->H) ||
              ci_place_vec(be, &d->dev_inv_freq, d->rope.inv_freq, d->rope.rot_dim / 2);
    ci_mat *em = d->dev_experts;
    for (int l = 0; l < d->n_layers && !bad; l++) {
        const ds_layer *L = &d->layers[l];
        ds_placed *P = &d->dev[l];
        bad = ci_place_vec(be, &P->attn_norm, L->attn_norm, d->H) || ci_place_vec(be, &P->ffn_norm, L->ffn_norm, d->H) ||
              mla_place(be, &P->attn, &L->attn) || (d->indexed && dsa_place(be, &P->idx, &L->idx)) ||
              ci_place_mat(be, &P->wg, &L->wg) || ci_place_mat(be, &P->wu, &L->wu) || ci_place_mat(be, &P->wd, &L->wd);
        if (bad || !L->is_moe) continue;
        const moe_block *M = &L->moe;
        const float *bias = NULL;
        P->moe = *M;
        P->moe.w_gate = em; P->moe.w_up = em + M->n_experts; P->moe.w_down = em + 2 * M->n_experts;
        em += 3 * M->n_experts;
        bad = ci_place_mat(be, &P->moe.gate, &M->gate) || ci_place_vec(be, &bias, M->bias, M->n_experts);
        P->moe.bias = (float *)bias;
        for (int e = 0; e < M->n_experts && !bad; e++)
            bad = ci_place_mat(be, &P->moe.w_gate[e], &M->w_gate[e]) || ci_place_mat(be, &P->moe.w_up[e], &M->w_up[e]) ||
                  ci_place_mat(be, &P->moe.w_down[e], &M->w_down[e]);
    }
    if (bad)
        return ci_err(err, errlen, "%s: %s: cannot place the weights in backend memory%s%s", fam, be->name,
                      be->last_error[0] ? ": " : "", be->last_error);
    return 0;
}

int ds_load(ci_model *m, int indexed, char *err, size_t errlen) {
    const ci_config *c = &m->cfg;
    const char *fam = m->family->name;
    ds_model *d = calloc(1, sizeof *d);
    if (!d) return ci_err(err, errlen, "%s: out of memory", fam);
    m->impl = d;
    if (m->be && !m->be->matmul_xw)
        return ci_err(err, errlen, "%s: backend %s has no matmul_xw op (needed by MLA)", fam, m->be->name);
    d->H = (int)c->hidden_size;
    d->n_layers = (int)c->n_layers;
    d->vocab = (int)c->vocab_size;
    d->eps = (float)c->rms_eps;
    long long q_lora = 0, kv_lora, nope, rope, v, ff, mff, E, K, shared = 0, G = 1, TG = 1, first_dense = 0, freq = 1;
    long long ih = 0, id = 0, topk = 0;
    double rsf = 1.0;
    int norm = 0, bias = 0, interleave = 1, idx_interleave = 0;
    if (!c->n_heads) return ci_err(err, errlen, "%s: %s: required key 'num_attention_heads' is missing", c->path, fam);
    if (cfg_int(c, "q_lora_rank", 0, indexed ? 0 : 1, 1 << 16, &q_lora, err, errlen) ||
        cfg_int(c, "kv_lora_rank", 1, 1, 1 << 16, &kv_lora, err, errlen) ||
        cfg_int(c, "qk_nope_head_dim", 1, 1, 1 << 12, &nope, err, errlen) ||
        cfg_int(c, "qk_rope_head_dim", 1, 2, 1 << 12, &rope, err, errlen) ||
        cfg_int(c, "v_head_dim", 1, 1, 1 << 12, &v, err, errlen) ||
        cfg_int(c, "intermediate_size", 1, 1, 1 << 20, &ff, err, errlen) ||
        cfg_int(c, "moe_intermediate_size", 1, 1, 1 << 20, &mff, err, errlen) ||
        cfg_int(c, json_object_get(c->text, "n_routed_experts") ? "n_routed_experts" : "num_local_experts", 1, 1, 1 << 16,
                &E, err, errlen) ||
        cfg_int(c, "num_experts_per_tok", 1, 1, 1 << 16, &K, err, errlen) ||
        cfg_int(c, "n_shared_experts", 0, 0, 1 << 10, &shared, err, errlen) ||
        cfg_int(c, "n_group", 0, 1, 1 << 10, &G, err, errlen) ||
        cfg_int(c, "topk_group", 0, 1, 1 << 10, &TG, err, errlen) ||
        cfg_int(c, "first_k_dense_replace", 0, 0, 1 << 12, &first_dense, err, errlen) ||
        cfg_int(c, "moe_layer_freq", 0, 1, 1 << 12, &freq, err, errlen) ||
        cfg_num(c, "routed_scaling_factor", 0, 0, 1e6, &rsf, err, errlen) ||
        cfg_bool(c, "norm_topk_prob", &norm, err, errlen) || cfg_bool(c, "attention_bias", &bias, err, errlen) ||
        cfg_bool(c, "rope_interleave", &interleave, err, errlen))
        return -1;
    if (indexed && (cfg_int(c, "index_n_heads", 1, 1, 1 << 12, &ih, err, errlen) ||
                    cfg_int(c, "index_head_dim", 1, 2, 1 << 14, &id, err, errlen) ||
                    cfg_int(c, "index_topk", 1, 1, 1LL << 30, &topk, err, errlen) ||
                    cfg_bool(c, "indexer_rope_interleave", &idx_interleave, err, errlen)))
        return -1;
    if (indexed && !q_lora)
        return ci_err(err, errlen, "%s: %s: q_lora_rank is required (the DSA indexer reads the q latent)", c->path, fam);
    if (bias) return ci_err(err, errlen, "%s: %s: attention_bias=true is not implemented yet", c->path, fam);
    const char *sf = cj_get_str(c->text, "scoring_func"), *tm = cj_get_str(c->text, "topk_method");
    if (sf && strcmp(sf, "sigmoid"))
        return ci_err(err, errlen, "%s: %s: scoring_func '%s' is not supported (sigmoid)", c->path, fam, sf);
    if (tm && strcmp(tm, "noaux_tc"))
        return ci_err(err, errlen, "%s: %s: topk_method '%s' is not supported (noaux_tc)", c->path, fam, tm);
    if (!interleave) return ci_err(err, errlen, "%s: %s: rope_interleave=false is not implemented yet", c->path, fam);
    if (K > E || E % G || TG > G || (G > 1 && E / G < 2))
        return ci_err(err, errlen, "%s: %s: expert routing n_routed_experts=%lld num_experts_per_tok=%lld n_group=%lld topk_group=%lld is inconsistent",
                      c->path, fam, E, K, G, TG);
    if (indexed && id < rope)
        return ci_err(err, errlen, "%s: %s: index_head_dim %lld is smaller than qk_rope_head_dim %lld (the indexer rotates that many dims)",
                      c->path, fam, id, rope);
    d->ff = (int)ff;
    d->shared_ff = (int)(mff * shared);
    d->lat = (int)(kv_lora + rope);
    d->indexed = indexed;
    d->kdim = (int)id;
    if (rope_init(&d->rope, &c->rope, (int)rope, fam, err, errlen)) return -1;
    float scale = 1.0f / sqrtf((float)(nope + rope));
    if (c->rope.type != CI_ROPE_DEFAULT && c->rope.mscale_all_dim > 0 && c->rope.factor > 1) {
        double ms = 0.1 * c->rope.mscale_all_dim * log(c->rope.factor) + 1.0;
        scale = (float)(scale * ms * ms);
    }
    d->layers = calloc((size_t)d->n_layers, sizeof *d->layers);
    int *is_moe = calloc((size_t)d->n_layers + 1, sizeof *is_moe);
    if (!d->layers || !is_moe) { free(is_moe); return ci_err(err, errlen, "%s: out of memory", fam); }
    if (layer_kinds(c, fam, d->n_layers, first_dense, freq, is_moe, err, errlen)) { free(is_moe); return -1; }
    int n_moe = 0;
    for (int l = 0; l < d->n_layers; l++) n_moe += is_moe[l];
    if (n_moe == d->n_layers) d->ff = 0;   /* no dense MLP: no tensor backs intermediate_size, scratch ignores it */
    if (w_check_experts(m->st, c->path, fam, json_object_get(c->text, "n_routed_experts") ? "n_routed_experts" : "num_local_experts",
                        E, n_moe, 3, err, errlen)) { free(is_moe); return -1; }
    d->expert_mats = calloc((size_t)n_moe * (size_t)E * 3 + 1, sizeof(ci_mat));
    if (!d->expert_mats) { free(is_moe); return ci_err(err, errlen, "%s: out of memory", fam); }

    w_binder b;
    if (w_init(&b, m->st, fam, d->n_layers)) { free(is_moe); return ci_err(err, errlen, "%s", b.err); }
    w_set_quant(&b, &c->quant);   /* mlx-community checkpoints: check packing against config.json */
    const int H = d->H, Hh = (int)c->n_heads;
    ci_mat *em = d->expert_mats;
    w_embed(&b, &d->embed, d->vocab, H, "model.embed_tokens");
    for (int l = 0; l < d->n_layers; l++) {
        if (b.failed) break;   /* the first error stands; later layers would only allocate head views */
        ds_layer *L = &d->layers[l];
        mla_layer *A = &L->attn;
        dsa_indexer *I = &L->idx;
        A->n_heads = Hh; A->hidden = H; A->q_lora = (int)q_lora; A->kv_lora = (int)kv_lora;
        A->nope = (int)nope; A->rope = (int)rope; A->v = (int)v; A->scale = scale;
        int qd = (int)(nope + rope);
        w_vec(&b, &L->attn_norm, W_REQUIRED, H, 0, W_KIND_NORM, "model.layers.%d.input_layernorm.weight", l);
        if (q_lora) {
            w_mat(&b, &A->q_a, W_REQUIRED, q_lora, H, "model.layers.%d.self_attn.q_a_proj", l);
            w_vec(&b, &A->q_a_norm, W_REQUIRED, q_lora, 0, W_KIND_NORM, "model.layers.%d.self_attn.q_a_layernorm.weight", l);
            w_mat(&b, &A->q_b, W_REQUIRED, (int64_t)Hh * qd, q_lora, "model.layers.%d.self_attn.q_b_proj", l);
        } else {
            w_mat(&b, &A->q, W_REQUIRED, (int64_t)Hh * qd, H, "model.layers.%d.self_attn.q_proj", l);
        }
        w_mat(&b, &A->kv_a, W_REQUIRED, kv_lora + rope, H, "model.layers.%d.self_attn.kv_a_proj_with_mqa", l);
        w_vec(&b, &A->kv_a_norm, W_REQUIRED, kv_lora, 0, W_KIND_NORM, "model.layers.%d.self_attn.kv_a_layernorm.weight", l);
        char mlx_q[96];
        snprintf(mlx_q, sizeof mlx_q, "model.layers.%d.self_attn.embed_q.weight", l);
        if (m->st && st_find(m->st, mlx_q)) {
            /* mlx-lm's sanitize split kv_b_proj into MultiLinear embed_q [Hh, kv_lora, nope]
             * (W_UKᵀ per head, read by matmul_xw) and unembed_out [Hh, v, kv_lora] (W_UV). */
            A->w_uk = calloc((size_t)Hh, sizeof *A->w_uk);
            A->w_uv = calloc((size_t)Hh, sizeof *A->w_uv);
            if (!A->w_uk || !A->w_uv) { w_done(&b); free(is_moe); return ci_err(err, errlen, "%s: out of memory", fam); }
            w_multilinear(&b, A->w_uk, Hh, kv_lora, nope, 1, "model.layers.%d.self_attn.embed_q", l);
            w_multilinear(&b, A->w_uv, Hh, v, kv_lora, 0, "model.layers.%d.self_attn.unembed_out", l);
        } else {
            w_mat(&b, &A->kv_b, W_REQUIRED, (int64_t)Hh * (nope + v), kv_lora, "model.layers.%d.self_attn.kv_b_proj", l);
            if (mla_split_kv_b(A)) { w_done(&b); free(is_moe); return ci_err(err, errlen, "%s: out of memory", fam); }
            /* An MLX-quantized kv_b_proj (older mlx-community conversions keep it whole): its rows
             * are packed, so the per-head views are packed row views (w_mat_rows keeps each
             * head's place in the scale grid), not the element offsets mla_split_kv_b uses. */
            if (A->kv_b.dtype == CI_U32)
                for (int h = 0; h < Hh; h++) {
                    A->w_uk[h] = w_mat_rows(&A->kv_b, (int64_t)h * (nope + v), nope);
                    A->w_uv[h] = w_mat_rows(&A->kv_b, (int64_t)h * (nope + v) + nope, v);
                }
        }
        w_mat(&b, &A->o, W_REQUIRED, H, (int64_t)Hh * v, "model.layers.%d.self_attn.o_proj", l);
        /* the lightning indexer */
        if (indexed) {
        I->n_heads = (int)ih; I->head_dim = (int)id; I->rope_dim = (int)rope; I->topk = (int)topk;
        I->rope_style = idx_interleave ? CI_ROPE_INTERLEAVED : CI_ROPE_NEOX;
        I->w_scale = (float)(1.0 / sqrt((double)ih) / sqrt((double)id));
        w_mat(&b, &I->wq_b, W_REQUIRED, ih * id, q_lora, "model.layers.%d.self_attn.indexer.wq_b", l);
        w_mat(&b, &I->wk, W_REQUIRED, id, H, "model.layers.%d.self_attn.indexer.wk", l);
        w_vec(&b, &I->k_norm_w, W_REQUIRED, id, 0, W_KIND_NORM, "model.layers.%d.self_attn.indexer.k_norm.weight", l);
        w_vec(&b, &I->k_norm_b, W_REQUIRED, id, 0, W_KIND_BIAS, "model.layers.%d.self_attn.indexer.k_norm.bias", l);
        w_mat(&b, &I->weights_proj, W_REQUIRED, ih, H, "model.layers.%d.self_attn.indexer.weights_proj", l);
        }
        w_vec(&b, &L->ffn_norm, W_REQUIRED, H, 0, W_KIND_NORM, "model.layers.%d.post_attention_layernorm.weight", l);
        if (is_moe[l]) {
            moe_block *M = &L->moe;
            L->is_moe = 1;
            M->n_experts = (int)E; M->top_k = (int)K; M->hidden = H; M->inter = (int)mff;
            M->router = MOE_SIGMOID; M->norm_topk_prob = norm; M->routed_scaling = (float)rsf;
            M->n_group = (int)G; M->topk_group = (int)TG;
            M->w_gate = em; M->w_up = em + E; M->w_down = em + 2 * E;
            em += 3 * E;
            w_mat(&b, &M->gate, W_REQUIRED, E, H, "model.layers.%d.mlp.gate", l);
            w_vec(&b, &M->bias, W_REQUIRED, E, 0, W_KIND_BIAS, "model.layers.%d.mlp.gate.e_score_correction_bias", l);
            char pre[96];
            snprintf(pre, sizeof pre, "model.layers.%d.mlp", l);
            w_experts(&b, M->w_gate, M->w_up, M->w_down, (int)E, (int)K, mff, H, pre);
            if (shared) {
                L->has_shared = 1;
                w_mat(&b, &L->wg, W_REQUIRED, d->shared_ff, H, "model.layers.%d.mlp.shared_experts.gate_proj", l);
                w_mat(&b, &L->wu, W_REQUIRED, d->shared_ff, H, "model.layers.%d.mlp.shared_experts.up_proj", l);
                w_mat(&b, &L->wd, W_REQUIRED, H, d->shared_ff, "model.layers.%d.mlp.shared_experts.down_proj", l);
            }
            if (!d->any_moe) d->any_moe = M;
        } else {
            w_mat(&b, &L->wg, W_REQUIRED, ff, H, "model.layers.%d.mlp.gate_proj", l);
            w_mat(&b, &L->wu, W_REQUIRED, ff, H, "model.layers.%d.mlp.up_proj", l);
            w_mat(&b, &L->wd, W_REQUIRED, H, ff, "model.layers.%d.mlp.down_proj", l);
        }
    }
    free(is_moe);
    w_vec(&b, &d->final_norm, W_REQUIRED, H, 0, W_KIND_NORM, "model.norm.weight");
    w_head(&b, &d->lm_head, &d->embed, c->tie_embeddings, d->vocab, H, "lm_head");
    if (ci_bind_finish(&b, m, &d->owned, &d->n_owned, err, errlen)) return -1;
    return m->st ? place_weights(m, d, err, errlen) : 0;   /* record mode: nothing to place */
}

void ds_unload(ci_model *m) {
    ds_model *d = m->impl;
    if (!d) return;
    if (d->layers)
        for (int l = 0; l < d->n_layers; l++) mla_layer_free(&d->layers[l].attn);
    if (d->dev)
        for (int l = 0; l < d->n_layers; l++) mla_layer_free(&d->dev[l].attn);
    free(d->dev);
    free(d->dev_experts);
    w_owned_free(d->owned, d->n_owned);
    rope_free(&d->rope);
    free(d->expert_mats);
    free(d->layers);
    free(d);
    m->impl = NULL;
}

size_t ds_cache_bytes_per_token(const ci_model *m) {
    const ds_model *d = m->impl;
    return (size_t)d->n_layers * (size_t)(d->lat + d->kdim) * sizeof(float);
}


static void *be_alloc(ci_backend *be, size_t bytes, int *bad) {
    void *p = be->alloc(be, bytes);
    if (!p) *bad = 1;
    return p;
}

static void be_release(ci_backend *be, void *p) {
    if (p) be->buf_free(be, p);
}

int ds_session_init(ci_session *s, char *err, size_t errlen) {
    const ds_model *d = s->m->impl;
    ci_backend *be = s->m->be;
    const char *fam = s->m->family->name;
    ds_cache *c = calloc(1, sizeof *c);
    if (!c) return ci_err(err, errlen, "%s: out of memory", fam);
    s->impl = c;
    const mla_layer *A = &d->layers[0].attn;
    size_t rows = (size_t)d->n_layers * (size_t)s->max_ctx, U = UBATCH, f = sizeof(float);
    int wide = d->ff > d->shared_ff ? d->ff : d->shared_ff > 0 ? d->shared_ff : 1, bad = 0;
    c->hpos = malloc(U * sizeof(int32_t));
    if (!c->hpos) return ci_err(err, errlen, "%s: out of memory", fam);
    c->lat_cache = be_alloc(be, rows * (size_t)d->lat * f, &bad);
    if (d->indexed) c->key_cache = be_alloc(be, rows * (size_t)d->kdim * f, &bad);
    if (bad)
        return ci_err(err, errlen, "%s: out of memory for a %d-token cache (%zu MiB)%s%s", fam, s->max_ctx,
                      rows * (size_t)(d->lat + d->kdim) * f >> 20, be->last_error[0] ? ": " : "", be->last_error);
    c->x = be_alloc(be, U * d->H * f, &bad);
    c->xn = be_alloc(be, U * d->H * f, &bad);
    c->y = be_alloc(be, U * d->H * f, &bad);
    c->g = be_alloc(be, U * wide * f, &bad);
    c->u = be_alloc(be, U * wide * f, &bad);
    c->last = be_alloc(be, (size_t)d->H * f, &bad);
    c->logits1 = be_alloc(be, (size_t)d->vocab * f, &bad);
    c->ids = be_alloc(be, U * sizeof(int32_t), &bad);
    c->pos = be_alloc(be, U * sizeof(int32_t), &bad);
    c->best = be_alloc(be, sizeof(int32_t), &bad);
    if (bad || mla_scratch_init(be, &c->mla, A, UBATCH) ||
        (d->indexed && dsa_scratch_init(be, &c->dsa, &d->layers[0].idx, UBATCH)) ||
        (d->any_moe && moe_scratch_init(be, &c->moe, d->any_moe, UBATCH)))
        return ci_err(err, errlen, "%s: out of memory for the session's scratch%s%s", fam,
                      be->last_error[0] ? ": " : "", be->last_error);
    return 0;
}

void ds_session_free(ci_session *s) {
    ds_cache *c = s->impl;
    if (!c) return;
    ci_backend *be = s->m->be;
    for (int i = 0; i < 2; i++)
        if (c->graph[i] && be->graph_free) be->graph_free(be, c->graph[i]);
    float *bufs[] = { c->lat_cache, c->key_cache, c->x, c->xn, c->y, c->g, c->u, c->last, c->logits1, c->logits_n };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) be_release(be, bufs[i]);
    be_release(be, c->ids);
    be_release(be, c->pos);
    be_release(be, c->best);
    be_release(be, c->tab);
    free(c->htab);
    free(c->hpos);
    mla_scratch_free(be, &c->mla);
    if (c->dsa.q || c->dsa.w || c->dsa.k) dsa_scratch_free(be, &c->dsa);
    moe_scratch_free(be, &c->moe);
    free(c);
    s->impl = NULL;
}

/* ---- forward: backend ops on the session's buffers ----------------------------------------- */

/* Debug dumps (ci_model.dump) see host memory: a device buffer is downloaded first. */
static void dump_buf(ci_model *m, const char *name, int layer, const float *x, int n, int dim) {
    if (!m->dump) return;
    if (!m->be->is_device) {
        m->dump(m->dump_ctx, name, layer, x, n, dim);
        return;
    }
    size_t bytes = (size_t)n * (size_t)dim * sizeof(float);
    float *h = malloc(bytes);
    if (!h) return;
    m->be->download(m->be, h, x, bytes);
    m->dump(m->dump_ctx, name, layer, h, n, dim);
    free(h);
}

/* x[n, H] += the layer's FFN of rmsnorm(x): MoE (+ shared experts) or the dense SwiGLU MLP
 * (matmul_swiglu, then matmul_acc with y as the product's scratch). */
static void ffn(ci_backend *be, const ds_model *d, ds_cache *c, const ds_placed *P, int is_moe, int has_shared, int n) {
    const int H = d->H;
    be->rmsnorm(be, c->xn, c->x, P->ffn_norm, n, H, d->eps);
    if (is_moe) {
        moe_forward(be, &P->moe, &c->moe, c->y, c->xn, n);
        be->add(be, c->x, c->y, (int64_t)n * H);
        if (!has_shared) return;
    }
    be->matmul_swiglu(be, c->g, c->u, c->xn, n, &P->wg, &P->wu);
    be->matmul_acc(be, c->x, c->g, n, &P->wd, c->y);
}

/* The layers over the n rows of c->x whose positions are in c->pos: one sequence's caches
 * (tab NULL) or, a batch step, row i's caches of layer l in the table: its latent cache at
 * tab[l * n + i], or with the indexer its latent and key caches at tab[l * 2n + 2i] and
 * tab[l * 2n + 2i + 1]. */
static void layers(ci_model *m, ds_cache *c, float *const *tab, int max_ctx, int n) {
    const ds_model *d = m->impl;
    ci_backend *be = m->be;
    const int H = d->H;
    const size_t lat_layer = (size_t)max_ctx * d->lat, key_layer = (size_t)max_ctx * d->kdim;
    for (int l = 0; l < d->n_layers; l++) {
        const ds_placed *P = &d->dev[l];
        const ds_layer *L = &d->layers[l];
        float *lc = tab ? NULL : c->lat_cache + (size_t)l * lat_layer;
        float *const *lt = tab ? tab + (size_t)l * n * (d->indexed ? 2 : 1) : NULL;
        be->rmsnorm(be, c->xn, c->x, P->attn_norm, n, H, d->eps);
        mla_project(be, &P->attn, d->dev_inv_freq, d->rope.mscale, &c->mla, c->xn, c->pos, n, d->eps);
        if (d->indexed)
            dsa_attend(be, &P->attn, &P->idx, d->dev_inv_freq, d->rope.mscale, &c->mla, &c->dsa, lc,
                       tab ? NULL : c->key_cache + (size_t)l * key_layer, lt, c->xn, c->pos, n, max_ctx);
        else
            mla_attend(be, &P->attn, &c->mla, lc, lt, c->pos, n, max_ctx);
        mla_output(be, &P->attn, &c->mla, c->y, n);
        dump_buf(m, "attn_out", l, c->y, n, H);
        be->add(be, c->x, c->y, (int64_t)n * H);
        ffn(be, d, c, P, L->is_moe, L->has_shared, n);
        dump_buf(m, "layer_out", l, c->x, n, H);
    }
}

/* Rows of logits one group holds (32 MiB, at least 4 rows): matmul rows are independent. */
static int need_logit_rows(ci_model *m, ds_cache *c, char *err, size_t errlen) {
    const ds_model *d = m->impl;
    if (c->logits_n) return 0;
    int64_t r = ((int64_t)32 << 20) / ((int64_t)d->vocab * (int64_t)sizeof(float));
    int rows = r > UBATCH ? UBATCH : r < 4 ? 4 : (int)r;
    c->logits_n = m->be->alloc(m->be, (size_t)rows * (size_t)d->vocab * sizeof(float));
    if (!c->logits_n)
        return ci_err(err, errlen, "%s: out of memory for %d rows of logits%s%s", m->family->name, rows,
                      m->be->last_error[0] ? ": " : "", m->be->last_error);
    c->logit_rows = rows;
    return 0;
}

/* The head of all n rows of c->x into logits [n, vocab] (host), group by group. */
static void head_rows(ci_model *m, ds_cache *c, int n, float *logits) {
    const ds_model *d = m->impl;
    ci_backend *be = m->be;
    be->rmsnorm(be, c->xn, c->x, d->dev_final_norm, n, d->H, d->eps);
    for (int r0 = 0; r0 < n; r0 += c->logit_rows) {
        int rows = n - r0 < c->logit_rows ? n - r0 : c->logit_rows;
        be->matmul(be, c->logits_n, c->xn + (size_t)r0 * d->H, rows, &d->dev_head);
        be->download(be, logits + (size_t)r0 * d->vocab, c->logits_n, (size_t)rows * d->vocab * sizeof(float));
    }
}

enum { HEAD_NONE = 0, HEAD_LAST, HEAD_ARGMAX };
enum { GRAPH_LOGITS = 0, GRAPH_ARGMAX = 1 };

/* The ops of one chunk of n rows whose ids and positions are uploaded: nothing read back and
 * nothing decided from a position, so a decode step can be recorded once and replayed at any
 * later position. head: HEAD_LAST leaves the last row's logits in c->logits1, HEAD_ARGMAX
 * also their argmax in c->best. */
static void chunk_ops(ci_session *s, int n, int head) {
    ci_model *m = s->m;
    const ds_model *d = m->impl;
    ds_cache *c = s->impl;
    ci_backend *be = m->be;
    be->embed(be, c->x, &d->dev_embed, c->ids, n);
    layers(m, c, NULL, s->max_ctx, n);
    if (head == HEAD_NONE) return;
    be->rmsnorm(be, c->last, c->x + (size_t)(n - 1) * d->H, d->dev_final_norm, 1, d->H, d->eps);
    be->matmul(be, c->logits1, c->last, 1, &d->dev_head);
    if (head == HEAD_ARGMAX) be->argmax(be, c->best, c->logits1, d->vocab);
}

static int graphs_allowed(const ci_model *m) {
    const ci_backend *be = m->be;
    return be->graph_begin && be->graph_end && be->graph_launch && !m->no_graphs && !m->dump;
}

/* One chunk of n <= UBATCH tokens at positions s->pos..: uploads, ops (a decode step through
 * its recorded graph where the backend has graphs), then the logits / argmax come back. */
static int run_chunk(ci_session *s, const int *tokens, int n, float *logits, int all_logits, int *out_id, char *err,
                     size_t errlen) {
    ci_model *m = s->m;
    const ds_model *d = m->impl;
    ds_cache *c = s->impl;
    ci_backend *be = m->be;
    _Static_assert(sizeof(int) == sizeof(int32_t), "token ids upload as int32");
    for (int t = 0; t < n; t++) c->hpos[t] = s->pos + t;
    if (logits && all_logits && need_logit_rows(m, c, err, errlen)) return -1;
    be->upload(be, c->ids, tokens, (size_t)n * sizeof(int32_t));
    be->upload(be, c->pos, c->hpos, (size_t)n * sizeof(int32_t));
    int head = out_id ? HEAD_ARGMAX : logits && !all_logits ? HEAD_LAST : HEAD_NONE;
    if (n == 1 && head != HEAD_NONE && graphs_allowed(m)) {
        int gi = head == HEAD_ARGMAX ? GRAPH_ARGMAX : GRAPH_LOGITS;
        if (!c->graph[gi] && !c->graph_failed[gi]) {
            if (be->graph_begin(be) == 0) {
                chunk_ops(s, 1, head);                   /* recorded, not run */
                c->graph[gi] = be->graph_end(be);
            }
            c->graph_failed[gi] = !c->graph[gi];
        }
        if (c->graph[gi]) be->graph_launch(be, c->graph[gi]);
        else chunk_ops(s, 1, head);
    } else {
        chunk_ops(s, n, head);
    }
    if (logits && all_logits) head_rows(m, c, n, logits);
    if (head == HEAD_LAST) be->download(be, logits, c->logits1, (size_t)d->vocab * sizeof(float));
    if (head == HEAD_ARGMAX) {
        int32_t best = 0;
        be->download(be, &best, c->best, sizeof best);
        *out_id = best;
    }
    s->pos += n;
    return ci_backend_check(m, err, errlen);
}

/* Chunks of at most UBATCH tokens through the same cache; only the last gets the head
 * unless all_logits (each chunk then owns its rows of logits). */
static int forward_all(ci_session *s, const int *tokens, int n, float *logits, int all_logits, int *out_id, char *err,
                       size_t errlen) {
    const ds_model *d = s->m->impl;
    if (ci_forward_check(s, tokens, n, d->vocab, err, errlen)) return -1;
    for (int off = 0; off < n; off += UBATCH) {
        int k = n - off < UBATCH ? n - off : UBATCH, last = off + k == n;
        float *out = NULL;
        if (logits && all_logits) out = logits + (size_t)off * (size_t)d->vocab;
        else if (logits && last) out = logits;
        if (run_chunk(s, tokens + off, k, out, all_logits, last ? out_id : NULL, err, errlen)) return -1;
    }
    return 0;
}

int ds_forward(ci_session *s, const int *tokens, int n, float *logits, int all_logits, char *err, size_t errlen) {
    return forward_all(s, tokens, n, logits, all_logits, NULL, err, errlen);
}

int ds_forward_argmax(ci_session *s, const int *tokens, int n, int *out_id, char *err, size_t errlen) {
    return forward_all(s, tokens, n, NULL, 0, out_id, err, errlen);
}

/* ---- serving many sequences: batched decode step, cache rows out and in ------------------
 *
 * One decode step for n sessions: row i of every activation belongs to ss[i] at position
 * ss[i]->pos. Projections, the absorbed-query and W_UV products and the FFN / MoE run over
 * all n rows at once; each row's latent (and indexer-key) row goes to its own session's
 * caches (kv_store_tab) and attends against them (mla_attend / dsa_attend with the table),
 * through a table of cache pointers uploaded with the positions. Scratch and tables are
 * ss[0]'s. */
static int forward_rows(ci_session *const *ss, const int *tokens, int n, float *logits, char *err, size_t errlen) {
    ci_model *m = ss[0]->m;
    const ds_model *d = m->impl;
    ds_cache *c = ss[0]->impl;
    ci_backend *be = m->be;
    const int per = d->indexed ? 2 : 1;   /* table entries per row and layer */
    size_t count = (size_t)d->n_layers * per * UBATCH;
    if (!c->tab) {
        c->htab = malloc(count * sizeof(float *));
        c->tab = be->alloc(be, count * sizeof(float *));
        if (!c->htab || !c->tab)
            return ci_err(err, errlen, "%s: out of memory for a batch step's cache table%s%s", m->family->name,
                          be->last_error[0] ? ": " : "", be->last_error);
    }
    if (need_logit_rows(m, c, err, errlen)) return -1;
    int max_ctx = 0;
    for (int i = 0; i < n; i++) {
        c->hpos[i] = ss[i]->pos;
        max_ctx = ss[i]->max_ctx > max_ctx ? ss[i]->max_ctx : max_ctx;
        const ds_cache *ci = ss[i]->impl;
        for (int l = 0; l < d->n_layers; l++) {
            float **row = c->htab + ((size_t)l * n + i) * per;
            row[0] = ci->lat_cache + (size_t)l * ss[i]->max_ctx * d->lat;
            if (d->indexed) row[1] = ci->key_cache + (size_t)l * ss[i]->max_ctx * d->kdim;
        }
    }
    be->upload(be, c->ids, tokens, (size_t)n * sizeof(int32_t));
    be->upload(be, c->pos, c->hpos, (size_t)n * sizeof(int32_t));
    be->upload(be, c->tab, c->htab, (size_t)d->n_layers * per * n * sizeof(float *));
    be->embed(be, c->x, &d->dev_embed, c->ids, n);
    layers(m, c, c->tab, max_ctx, n);
    head_rows(m, c, n, logits);
    for (int i = 0; i < n; i++) ss[i]->pos++;
    return ci_backend_check(m, err, errlen);
}

int ds_forward_batch(ci_session *const *ss, const int *tokens, int n, float *logits, char *err, size_t errlen) {
    if (n <= 0) return ci_err(err, errlen, "forward_batch needs at least one sequence");
    const ci_model *m = ss[0]->m;
    const ds_model *d = m->impl;
    if (ci_batch_check(ss, tokens, n, d->vocab, err, errlen)) return -1;
    for (int off = 0; off < n; off += UBATCH) {
        int k = n - off < UBATCH ? n - off : UBATCH;
        if (forward_rows(ss + off, tokens + off, k, logits + (size_t)off * d->vocab, err, errlen)) return -1;
    }
    return 0;
}

/* ---- cache rows out and in (prefix reuse in the server) ----------------------------------
 *
 * Both caches' row p depends only on tokens 0..p, so rows [0, n) can be copied out and back.
 * Blob layout, position-major (registry.h: a prefix of an export is the export of the
 * prefix): for each position, for each layer, its latent row [lat] then (indexed) its key
 * row [kdim]; n · cache_bytes_per_token bytes in all. Rows move one by one between backend
 * memory and the blob (download / upload). */
int ds_cache_export(const ci_session *s, int n, void *dst, char *err, size_t errlen) {
    const ds_model *d = s->m->impl;
    const ds_cache *c = s->impl;
    ci_backend *be = s->m->be;
    if (n < 0 || n > s->pos) return ci_err(err, errlen, "%s: cache export of %d rows, %d held", s->m->family->name, n, s->pos);
    float *o = dst;
    for (int p = 0; p < n; p++)
        for (int l = 0; l < d->n_layers; l++) {
            size_t row = (size_t)l * s->max_ctx + (size_t)p;
            be->download(be, o, c->lat_cache + row * d->lat, (size_t)d->lat * sizeof(float));
            o += d->lat;
            if (d->indexed) be->download(be, o, c->key_cache + row * d->kdim, (size_t)d->kdim * sizeof(float));
            o += d->kdim;
        }
    return ci_backend_check(s->m, err, errlen);
}

int ds_cache_import(ci_session *s, int n, const void *src, char *err, size_t errlen) {
    const ds_model *d = s->m->impl;
    ds_cache *c = s->impl;
    ci_backend *be = s->m->be;
    if (n < 0 || n > s->max_ctx)
        return ci_err(err, errlen, "%s: cache import of %d rows into a %d-token session", s->m->family->name, n, s->max_ctx);
    const float *i = src;
    for (int p = 0; p < n; p++)
        for (int l = 0; l < d->n_layers; l++) {
            size_t row = (size_t)l * s->max_ctx + (size_t)p;
            be->upload(be, c->lat_cache + row * d->lat, i, (size_t)d->lat * sizeof(float));
            i += d->lat;
            if (d->indexed) be->upload(be, c->key_cache + row * d->kdim, i, (size_t)d->kdim * sizeof(float));
            i += d->kdim;
        }
    s->pos = n;
    return ci_backend_check(s->m, err, errlen);
}
