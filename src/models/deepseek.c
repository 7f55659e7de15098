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
 * ignored), and the weights in backend memory: after binding, every weight the forward
 * reads is placed with be->weight (ds_placed; the identity on the CPU), MLX-quantized views
 * with their packed codes (nn/place.h).
 *
 * The session, forward and serving ops are deepseek_run.c's (DESIGN.md "Backends and
 * memory"): per layer the MLA latent cache [max_ctx, kv_lora + rope] and, with the indexer,
 * the indexer-key cache [max_ctx, index_head_dim], every buffer from be->alloc, ids and
 * positions uploaded per chunk, backend ops only (nn/mla.c, nn/dsa.c, nn/moe.c). Rows
 * [0, pos) are valid; a forward writes rows pos..pos+n-1. */
#include "model.h"
#include "../core/status.h"
#include "../io/json.h"
#include "../io/weights.h"
#include "deepseek.h"
#include "deepseek_internal.h"
#include "../nn/place.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* A device backend: the ops this decoder needs. One line naming what is missing. */
static int device_check(ci_model *m, const ds_model *d, char *err, size_t errlen) {
    const ci_backend *be = m->be;
    const char *fam = m->family->name;
    if (!be->rmsnorm_strided || !be->layernorm || !be->mla_absorb_q || !be->mla_out_heads || !be->kv_store_paged ||
        !be->mla_attend || !be->dsa_attend)
        return ci_err(err, errlen, "%s: no CUDA path yet: backend %s has no MLA / DSA ops; run it with --device cpu", fam,
                      be->name);
    if (d->any_moe && (!be->moe_route || !be->moe_experts))
        return ci_err(err, errlen, "%s: no CUDA path yet: backend %s has no MoE ops; run it with --device cpu", fam,
                      be->name);
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
        bad = ci_place_moe(be, &P->moe, &L->moe, em);
        em += 3 * L->moe.n_experts;
    }
    if (bad)
        return ci_err(err, errlen, "%s: %s: cannot place the weights in backend memory%s%s", fam, be->name,
                      be->last_error[0] ? ": " : "", be->last_error);
    return 0;
}

/* A tensor-parallel rank (its backend joined a communicator of world > 1): each layer's MLA
 * heads, routed and shared experts' and dense MLP's columns narrowed to its part (nn blocks'
 * *_shard; the latent, the indexer, the routers and the head whole), ff / shared_ff made local. */
static int shard_weights(ci_model *m, ds_model *d, char *err, size_t errlen) {
    const int W = m->be->world, R = m->be->rank;
    const shd_ctx t = { W, R, m->ep, &d->kept };
    char what[160];
    int ff = d->ff, sff = d->shared_ff;
    for (int l = 0; l < d->n_layers; l++) {
        ds_layer *L = &d->layers[l];
        snprintf(what, sizeof what, "%s: model.layers.%d over %d ranks", m->family->name, l, W);
        if (mla_shard(&L->attn, &t, what, err, errlen) ||
            (L->is_moe && moe_shard(&L->moe, &t, what, err, errlen)))
            return -1;
        if (L->is_moe && !L->has_shared) continue;
        int *w = L->is_moe ? &sff : &ff, inter = L->is_moe ? d->shared_ff : d->ff;
        if (shd_mlp(&L->wg, &L->wu, &L->wd, &inter, &t, what, err, errlen)) return -1;
        *w = inter;
    }
    shd_head(&d->lm_head, d->vocab, &t);
    d->ff = ff;
    d->shared_ff = sff;
    d->tp_part = shd_part(R);
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
    if (!m->st) return 0;   /* record mode: nothing to place */
    if (m->be->world > 1 && shard_weights(m, d, err, errlen)) return -1;
    return place_weights(m, d, err, errlen);
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
    ci_buf_release(m->be, d->pool_lat);
    ci_buf_release(m->be, d->pool_key);
    w_owned_free(d->owned, d->n_owned);
    shd_kept_free(&d->kept);
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
