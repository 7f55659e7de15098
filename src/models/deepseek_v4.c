/* deepseek_v4.c — the DEEPSEEK_V4 family (model_type "deepseek_v4", the Flash / Pro generation).
 *
 * Residual: hc_mult parallel streams [hc, H] per token, mixed around every sub-block by an
 * mHC mapping (nn/hc.h) and collapsed at the end by the hc_head mapping, then norm and head.
 *
 * Attention (per layer, Hh heads of head_dim D, one shared K = V head):
 *   qr = rmsnorm(wq_a x) · q_norm                                       [q_lora]
 *   q  = per-head weightless rmsnorm(wq_b qr), RoPE on each head's last R dims  [Hh, D]
 *   kv = rmsnorm(wkv x) · kv_norm, RoPE on its last R dims                      [D]
 *   keys: the sliding window (positions p-W+1 .. p) plus, in compressed layers, compressed
 *   entries (nn/compressor.h): HCA (ratio 128) all visible entries, CSA (ratio 4) the
 *   index_topk entries its lightning indexer scores highest (all when fewer are visible):
 *     qi = RoPE(wq_b_idx qr) [Hi, Di]; k_s = the indexer's own compressed keys [Di];
 *     score(s) = Σ_h relu(qi_h · k_s) · Di^-½ · (weights_proj x)_h · Hi^-½
 *   softmax(q·k · D^-½) with a learned per-head sink logit in the denominator; o = Σ p v;
 *   inverse RoPE (angle −p) on o's last R dims; grouped output projection: the Hh·D outputs
 *   in o_groups groups, each through its own rows of wo_a [o_lora, Hh·D/G], then wo_b.
 *   Sliding-only layers rope with rope_theta (no scaling); compressed layers (attention,
 *   compressor and indexer) with compress_rope_theta + yarn (attention factor 1).
 * MoE (every layer): s = sqrt(softplus(x · gateᵀ)); hash layers take the experts
 *   tid2eid[token], the others top-k of s + bias; weights s normalised × routed_scaling;
 *   experts and the shared expert (width moe_intermediate_size) use SwiGLU clamped at
 *   swiglu_limit (nn/moe.h).
 *
 * Checkpoints: transformers' in-memory names (model.layers.N.self_attn.q_a_proj ...),
 * what transformers' save_pretrained writes (model.layers.N.attn.wq_a, attn.norm for the
 * kv norm, head.weight ...), DeepSeek's original names (layers.N.attn.wq_a, ffn.experts.E.w1,
 * embed, head, hc_head_fn ...; fp8 with F8_E8M0 ".scale" block scales, FP4 routed experts)
 * and mlx-lm's (model.layers.N.attn.*, ffn.switch_mlp). Each tensor is looked up under
 * every spelling; the config in both dialects (layer_types / compress_rates / mlp_layer_types
 * / nested rope_parameters, or the hub's compress_ratios / num_hash_layers /
 * qk_rope_head_dim / rope_scaling).
 *
 * Session cache per layer: a ring of the last W + UBATCH rows of kv (D floats each), and
 * for compressed layers the compressor state (its entries, D floats per `ratio` tokens) and
 * for CSA the indexer's (Di floats per 4 tokens). */
#include "deepseek_v4_internal.h"
#include "../core/status.h"
#include "../io/json.h"
#include "../io/weights.h"
#include "../nn/place.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- names: each tensor under every spelling checkpoints use ------------------------------ */

/* Layer tensor spellings: transformers' in-memory name, the original DeepSeek name, and
 * (optional) one more that save_pretrained or mlx-lm writes under "model.layers.N.". */
typedef struct { const char *hf, *orig, *alt; } v4_name;

/* Index of the first of cands[0..n) present in the checkpoint (matrices: is_mat, each is a
 * module whose ".weight" is looked up); none present or record mode: 0. */
static int first_present(const w_binder *b, const char *const *cands, int n, int is_mat) {
    for (int i = 0; b->st && i < n; i++) {
        char probe[300];
        snprintf(probe, sizeof probe, "%.250s%s", cands[i], is_mat ? ".weight" : "");
        if (st_find(b->st, probe)) return i;
    }
    return 0;
}

/* Writes into buf the first spelling of layer l's tensor nm present in the checkpoint
 * (absent or record mode: the hf one). */
static const char *pick(const w_binder *b, char *buf, size_t n, int l, v4_name nm, int is_mat) {
    char cand[4][256];
    const char *ptr[4];
    int k = 0;
    snprintf(cand[k++], sizeof cand[0], "model.layers.%d.%s", l, nm.hf);
    snprintf(cand[k++], sizeof cand[0], "layers.%d.%s", l, nm.orig);
    snprintf(cand[k++], sizeof cand[0], "model.layers.%d.%s", l, nm.orig);
    if (nm.alt) snprintf(cand[k++], sizeof cand[0], "model.layers.%d.%s", l, nm.alt);
    for (int i = 0; i < k; i++) ptr[i] = cand[i];
    snprintf(buf, n, "%.250s", cand[first_present(b, ptr, k, is_mat)]);
    return buf;
}

/* The same for a top-level tensor among the NULL-terminated cands. */
static const char *pick_top(const w_binder *b, char *buf, size_t n, const char *const *cands, int is_mat) {
    int k = 0;
    while (cands[k]) k++;
    snprintf(buf, n, "%.250s", cands[first_present(b, cands, k, is_mat)]);
    return buf;
}

#define NM(h, o, a) ((v4_name){ (h), (o), (a) })

/* ---- binding: the tensors of a layer ------------------------------------------------------ */

static void bind_hc(w_binder *b, hc_map *h, int l, const char *which, const v4_model *d, long long iters, double hc_eps) {
    char nm[300], hf[64], orig[64];
    int M = (2 + d->HC) * d->HC;
    h->hc = d->HC; h->dim = d->H; h->iters = (int)iters; h->eps = (float)hc_eps; h->norm_eps = d->eps;
    int64_t sfn[2] = { M, (int64_t)d->HC * d->H }, sb[1] = { M }, ss[1] = { 3 };
    float *fn;
    snprintf(hf, sizeof hf, "%s_hc.fn", which); snprintf(orig, sizeof orig, "hc_%s_fn", which);
    if (w_arr(b, &fn, W_REQUIRED, 2, sfn, "%s", pick(b, nm, sizeof nm, l, NM(hf, orig, NULL), 0)) == 1) {
        h->fn = (ci_mat){ .data = fn, .dtype = CI_F32, .rows = M, .cols = sfn[1] };
    }
    snprintf(hf, sizeof hf, "%s_hc.base", which); snprintf(orig, sizeof orig, "hc_%s_base", which);
    w_arr(b, &h->base, W_REQUIRED, 1, sb, "%s", pick(b, nm, sizeof nm, l, NM(hf, orig, NULL), 0));
    snprintf(hf, sizeof hf, "%s_hc.scale", which); snprintf(orig, sizeof orig, "hc_%s_scale", which);
    w_arr(b, &h->scale, W_REQUIRED, 1, ss, "%s", pick(b, nm, sizeof nm, l, NM(hf, orig, NULL), 0));
}

static void bind_comp(w_binder *b, cmp_block *cb, int l, int ratio, int dd, int overlap, int H, int is_idx) {
    char nm[300];
    int m = (1 + overlap) * dd;
    cb->ratio = ratio; cb->d = dd; cb->overlap = overlap;
    const char *hp = is_idx ? "self_attn.compressor.indexer." : "self_attn.compressor.";
    const char *op = is_idx ? "attn.indexer.compressor." : "attn.compressor.";
    char h1[128], o1[128];
    snprintf(h1, sizeof h1, "%skv_proj", hp); snprintf(o1, sizeof o1, "%swkv", op);
    w_mat(b, &cb->kv, W_REQUIRED, m, H, "%s", pick(b, nm, sizeof nm, l, NM(h1, o1, NULL), 1));
    snprintf(h1, sizeof h1, "%sgate_proj", hp); snprintf(o1, sizeof o1, "%swgate", op);
    w_mat(b, &cb->gate, W_REQUIRED, m, H, "%s", pick(b, nm, sizeof nm, l, NM(h1, o1, NULL), 1));
    snprintf(h1, sizeof h1, "%sposition_bias", hp); snprintf(o1, sizeof o1, "%sape", op);
    int64_t sa[2] = { ratio, m };
    w_arr(b, &cb->ape, W_REQUIRED, 2, sa, "%s", pick(b, nm, sizeof nm, l, NM(h1, o1, NULL), 0));
    snprintf(h1, sizeof h1, "%skv_norm.weight", hp); snprintf(o1, sizeof o1, "%snorm.weight", op);
    w_vec(b, &cb->norm, W_REQUIRED, dd, 0, W_KIND_NORM, "%s", pick(b, nm, sizeof nm, l, NM(h1, o1, NULL), 0));
}

/* Routed experts: the original per-expert w1 (gate) / w3 (up) / w2 (down), or any layout
 * w_experts knows (transformers' fused, mlx switch_mlp, per-expert gate/up/down_proj). */
static void bind_experts(w_binder *b, moe_block *M, int l, int E, int K, int I, int H) {
    char n1[300];
    snprintf(n1, sizeof n1, "layers.%d.ffn.experts.0.w1.weight", l);
    const char *orig = NULL;
    if (b->st && st_find(b->st, n1)) orig = "layers";
    snprintf(n1, sizeof n1, "model.layers.%d.ffn.experts.0.w1.weight", l);
    if (b->st && !orig && st_find(b->st, n1)) orig = "model.layers";
    char pre[128];
    if (orig) {
        snprintf(pre, sizeof pre, "%s.%d.ffn", orig, l);
        w_experts_each(b, M->w_gate, M->w_up, M->w_down, E, K, I, H, pre, "w1", "w3", "w2");
        return;
    }
    snprintf(pre, sizeof pre, "model.layers.%d.ffn.switch_mlp.gate_proj.weight", l);
    if (b->st && st_find(b->st, pre)) snprintf(pre, sizeof pre, "model.layers.%d.ffn", l);
    else snprintf(pre, sizeof pre, "model.layers.%d.mlp", l);
    w_experts(b, M->w_gate, M->w_up, M->w_down, E, K, I, H, pre);
}

/* ---- placement: every weight a forward reads into backend memory, in place ------------------ */

static int put_mat(ci_backend *be, ci_mat *W) {
    ci_mat h = *W;
    return ci_place_mat(be, W, &h);
}

static int put_vec(ci_backend *be, float **v, int64_t len) {
    const float *p = NULL;
    int rc = ci_place_vec(be, &p, *v, len);
    *v = (float *)p;
    return rc;
}

static int put_hc(ci_backend *be, hc_map *h, int M) {
    return put_mat(be, &h->fn) || put_vec(be, &h->base, M) || put_vec(be, &h->scale, M == h->hc ? 1 : 3);
}

static int put_comp(ci_backend *be, cmp_block *k) {
    const int m = (1 + k->overlap) * k->d;
    return put_mat(be, &k->kv) || put_mat(be, &k->gate) || put_vec(be, &k->ape, (int64_t)k->ratio * m) ||
           put_vec(be, &k->norm, k->d);
}

/* A tensor-parallel rank (its backend joined a communicator of world > 1), before v4_place: its
 * whole output groups' heads (q_b rows, sinks, o_a's group rows, o_b's columns) and its part of
 * every expert's and the shared expert's columns (moe_shard); the KV row, the compressors, the
 * indexer, the hyper-connections and the routers stay whole on every rank. */
static int v4_shard(ci_model *m, v4_model *d, char *err, size_t errlen) {
    const int W = m->be->world, R = m->be->rank, per = d->Hh / d->G;
    const shd_ctx t = { W, R, m->ep, &d->kept };
    char what[160];
    shd_range g;
    snprintf(what, sizeof what, "%s: %d ranks", m->family->name, W);
    if (shd_split(d->G, 1, W, R, &g))
        return ci_err(err, errlen, "%s: o_groups %d do not split over the ranks (the ranks must divide them)", what, d->G);
    for (int l = 0; l < d->n_layers; l++) {
        v4_layer *L = &d->layers[l];
        snprintf(what, sizeof what, "%s: layer %d over %d ranks", m->family->name, l, W);
        shd_rows(&L->q_b, g.lo * per * d->D, g.hi * per * d->D, &L->q_b);
        L->sinks += g.lo * per;   /* an offset into the binder's copy */
        shd_rows(&L->o_a, g.lo * d->OL, g.hi * d->OL, &L->o_a);
        if (shd_cols(&L->o_b, g.lo * d->OL, g.hi * d->OL, &L->o_b, &d->kept, what, err, errlen) ||
            moe_shard(&L->moe, &t, what, err, errlen))
            return -1;
    }
    shd_head(&d->lm_head, d->vocab, &t);
    d->Hh = (int)(g.hi - g.lo) * per;
    d->G = (int)(g.hi - g.lo);
    d->tp = 1;
    return 0;
}

static int v4_place(ci_model *m, v4_model *d, int E, int K, char *err, size_t errlen) {
    ci_backend *be = m->be;
    const char *fam = m->family->name;
    const int H = d->H, M = (2 + d->HC) * d->HC;
    if (be->is_device && (!be->hc_pre || !be->hc_mix_pre || !be->head_norm_rope || !be->v4_attend || !be->v4_compress || !be->moe_route))
        return ci_err(err, errlen, "%s: the %s backend lacks DeepSeek V4's ops; run it with --device cpu", fam, be->name);
    d->dev_expert_mats = calloc((size_t)d->n_layers * (size_t)E * 3 + 1, sizeof(ci_mat));
    if (!d->dev_expert_mats) return ci_err(err, errlen, "%s: out of memory", fam);
    int bad = put_mat(be, &d->embed) || put_mat(be, &d->lm_head) || put_vec(be, &d->final_norm, H) ||
              put_hc(be, &d->hc_head, d->HC) || ci_place_vec(be, &d->inv_main, d->rope_main.inv_freq, d->R / 2) ||
              ci_place_vec(be, &d->inv_comp, d->rope_comp.inv_freq, d->R / 2);
    for (int l = 0; l < d->n_layers && !bad; l++) {
        v4_layer *L = &d->layers[l];
        bad = put_vec(be, &L->attn_norm, H) || put_vec(be, &L->ffn_norm, H) || put_hc(be, &L->hc_attn, M) ||
              put_hc(be, &L->hc_ffn, M) || put_mat(be, &L->q_a) || put_mat(be, &L->q_b) || put_mat(be, &L->kv) ||
              put_mat(be, &L->o_a) || put_mat(be, &L->o_b) || put_vec(be, &L->q_a_norm, d->QL) ||
              put_vec(be, &L->kv_norm, d->D) || put_vec(be, &L->sinks, d->Hh) ||
              (L->type != L_SLIDING && put_comp(be, &L->comp)) ||
              (L->type == L_CSA && (put_comp(be, &L->icomp) || put_mat(be, &L->iq_b) || put_mat(be, &L->iw)));
        moe_block host = L->moe;
        if (!bad) bad = ci_place_moe(be, &L->moe, &host, d->dev_expert_mats + (size_t)l * E * 3);
        if (!bad && L->tid2eid) {
            L->moe.hash_ids = be->weight(be, L->tid2eid, (size_t)d->vocab * K * sizeof(int32_t));
            bad = !L->moe.hash_ids;
        }
    }
    if (bad)
        return ci_err(err, errlen, "%s: %s: cannot place the weights in backend memory%s%s", fam, be->name,
                      be->last_error[0] ? ": " : "", be->last_error);
    d->placed = 1;
    return 0;
}

/* ---- load ------------------------------------------------------------------------------ */

static int v4_load(ci_model *m, char *err, size_t errlen) {
    const ci_config *c = &m->cfg;
    const char *fam = m->family->name;
    v4_model *d = calloc(1, sizeof *d);
    if (!d) return ci_err(err, errlen, "%s: out of memory", fam);
    m->impl = d;
    d->H = (int)c->hidden_size;
    d->n_layers = (int)c->n_layers;
    d->vocab = (int)c->vocab_size;
    d->eps = (float)c->rms_eps;
    d->Hh = (int)c->n_heads;
    long long D = 512, QL, mff, E, K, shared = 1, HC = 4, iters = 20, W = 128, G = 8, OL = 1024, Hi = 64, Di = 128,
              topk = 512, kvh = 1, R = -1, csa = 4, hca = 128;
    double rsf = 1.0, hc_eps = 1e-6, limit = 10.0;
    if (!d->Hh) return ci_err(err, errlen, "%s: %s: required key 'num_attention_heads' is missing", c->path, fam);
    if (cfg_int(c, "head_dim", 0, 2, 1 << 14, &D, err, errlen) ||
        cfg_int(c, "q_lora_rank", 1, 1, 1 << 16, &QL, err, errlen) ||
        cfg_int(c, "num_key_value_heads", 0, 1, 1, &kvh, err, errlen) ||
        cfg_int(c, "moe_intermediate_size", 1, 1, 1 << 20, &mff, err, errlen) ||
        cfg_int(c, json_object_get(c->text, "n_routed_experts") ? "n_routed_experts" : "num_local_experts", 1, 1, 1 << 16,
                &E, err, errlen) ||
        cfg_int(c, "num_experts_per_tok", 1, 1, 1 << 16, &K, err, errlen) ||
        cfg_int(c, "n_shared_experts", 0, 0, 1 << 10, &shared, err, errlen) ||
        cfg_num(c, "routed_scaling_factor", 0, 0, 1e6, &rsf, err, errlen) ||
        cfg_int(c, "hc_mult", 0, 1, 64, &HC, err, errlen) ||
        cfg_int(c, "hc_sinkhorn_iters", 0, 1, 1000, &iters, err, errlen) ||
        cfg_num(c, "hc_eps", 0, 0, 1, &hc_eps, err, errlen) ||
        cfg_num(c, "swiglu_limit", 0, 0, 1e9, &limit, err, errlen) ||
        cfg_int(c, "sliding_window", 0, 1, 1 << 24, &W, err, errlen) ||
        cfg_int(c, "o_groups", 0, 1, 1 << 12, &G, err, errlen) ||
        cfg_int(c, "o_lora_rank", 0, 1, 1 << 16, &OL, err, errlen) ||
        cfg_int(c, "index_n_heads", 0, 1, 1 << 12, &Hi, err, errlen) ||
        cfg_int(c, "index_head_dim", 0, 2, 1 << 14, &Di, err, errlen) ||
        cfg_int(c, "index_topk", 0, 1, 1LL << 30, &topk, err, errlen) ||
        cfg_int(c, "qk_rope_head_dim", 0, 2, 1 << 14, &R, err, errlen) ||
        cfg_int(c, "compress_rate_csa", 0, 1, 1 << 20, &csa, err, errlen) ||
        cfg_int(c, "compress_rate_hca", 0, 1, 1 << 20, &hca, err, errlen))
        return -1;
    const json_t *rates = json_object_get(c->text, "compress_rates");
    if (rates && !json_is_null(rates)) {
        if (!json_is_object(rates))
            return ci_err(err, errlen, "%s: %s: 'compress_rates' must be an object of rates per layer type", c->path, fam);
        long long v;
        int r1 = cj_get_int(rates, "compressed_sparse_attention", &v);
        if (r1 < 0 || (r1 == 1 && (v < 1 || v > (1 << 20))))
            return ci_err(err, errlen, "%s: %s: compress_rates.compressed_sparse_attention must be a positive integer", c->path, fam);
        if (r1 == 1) csa = v;
        int r2 = cj_get_int(rates, "heavily_compressed_attention", &v);
        if (r2 < 0 || (r2 == 1 && (v < 1 || v > (1 << 20))))
            return ci_err(err, errlen, "%s: %s: compress_rates.heavily_compressed_attention must be a positive integer", c->path, fam);
        if (r2 == 1) hca = v;
    }
    if (R < 0) R = (long long)(D * (c->rope.partial_rotary_factor != 1.0 ? c->rope.partial_rotary_factor : 64.0 / 512.0));
    const char *sf = cj_get_str(c->text, "scoring_func"), *act = cj_get_str(c->text, "hidden_act");
    if (sf && strcmp(sf, "sqrtsoftplus") && strcmp(sf, "sigmoid"))
        return ci_err(err, errlen, "%s: %s: scoring_func '%s' is not supported (sqrtsoftplus, sigmoid)", c->path, fam, sf);
    if (act && strcmp(act, "silu"))
        return ci_err(err, errlen, "%s: %s: hidden_act '%s' is not supported (silu)", c->path, fam, act);
    if (R % 2 || R > D || R > Di)
        return ci_err(err, errlen, "%s: %s: qk_rope_head_dim %lld must be even and at most head_dim %lld and index_head_dim %lld",
                      c->path, fam, R, D, Di);
    if ((d->Hh * D) % G || K > E)
        return ci_err(err, errlen, "%s: %s: o_groups %lld must divide num_attention_heads x head_dim (%lld), and "
                      "num_experts_per_tok %lld be at most n_routed_experts %lld", c->path, fam, G, d->Hh * D, K, E);
    d->D = (int)D; d->R = (int)R; d->QL = (int)QL; d->G = (int)G; d->OL = (int)OL; d->HC = (int)HC; d->W = (int)W;
    d->Hi = (int)Hi; d->Di = (int)Di; d->topk = (int)topk;
    if (v4_ropes(m, d, err, errlen)) return -1;

    int n = d->n_layers;
    if (w_check_experts(m->st, c->path, fam, json_object_get(c->text, "n_routed_experts") ? "n_routed_experts" : "num_local_experts",
                        E, n, 3, err, errlen))
        return -1;
    int *type = calloc((size_t)n + 1, sizeof *type), *ratio = calloc((size_t)n + 1, sizeof *ratio),
        *is_hash = calloc((size_t)n + 1, sizeof *is_hash);
    d->layers = calloc((size_t)n, sizeof *d->layers);
    d->expert_mats = calloc((size_t)n * (size_t)E * 3 + 1, sizeof(ci_mat));
    if (!type || !ratio || !is_hash || !d->layers || !d->expert_mats) {
        free(type); free(ratio); free(is_hash);
        return ci_err(err, errlen, "%s: out of memory", fam);
    }
    if (v4_layer_types(c, fam, n, (int)csa, (int)hca, type, ratio, err, errlen) || v4_mlp_types(c, fam, n, is_hash, err, errlen)) {
        free(type); free(ratio); free(is_hash);
        return -1;
    }
    w_binder b;
    if (w_init(&b, m->st, fam, n)) { free(type); free(ratio); free(is_hash); return ci_err(err, errlen, "%s", b.err); }
    w_set_quant(&b, &c->quant);
    const int H = d->H, Hh = d->Hh;
    char nm[300];
    w_embed(&b, &d->embed, d->vocab, H, "%s",
            pick_top(&b, nm, sizeof nm, (const char *const[]){ "model.embed_tokens", "embed", NULL }, 1));
    ci_mat *em = d->expert_mats;
    for (int l = 0; l < n; l++) {
        v4_layer *L = &d->layers[l];
        L->type = type[l];
        L->ratio = ratio[l];
        w_vec(&b, &L->attn_norm, W_REQUIRED, H, 0, W_KIND_NORM, "%s",
              pick(&b, nm, sizeof nm, l, NM("input_layernorm.weight", "attn_norm.weight", NULL), 0));
        w_vec(&b, &L->ffn_norm, W_REQUIRED, H, 0, W_KIND_NORM, "%s",
              pick(&b, nm, sizeof nm, l, NM("post_attention_layernorm.weight", "ffn_norm.weight", NULL), 0));
        bind_hc(&b, &L->hc_attn, l, "attn", d, iters, hc_eps);
        bind_hc(&b, &L->hc_ffn, l, "ffn", d, iters, hc_eps);
        w_mat(&b, &L->q_a, W_REQUIRED, QL, H, "%s", pick(&b, nm, sizeof nm, l, NM("self_attn.q_a_proj", "attn.wq_a", NULL), 1));
        w_vec(&b, &L->q_a_norm, W_REQUIRED, QL, 0, W_KIND_NORM, "%s",
              pick(&b, nm, sizeof nm, l, NM("self_attn.q_a_norm.weight", "attn.q_norm.weight", NULL), 0));
        w_mat(&b, &L->q_b, W_REQUIRED, (int64_t)Hh * D, QL, "%s",
              pick(&b, nm, sizeof nm, l, NM("self_attn.q_b_proj", "attn.wq_b", NULL), 1));
        w_mat(&b, &L->kv, W_REQUIRED, D, H, "%s", pick(&b, nm, sizeof nm, l, NM("self_attn.kv_proj", "attn.wkv", NULL), 1));
        w_vec(&b, &L->kv_norm, W_REQUIRED, D, 0, W_KIND_NORM, "%s",
              pick(&b, nm, sizeof nm, l, NM("self_attn.kv_norm.weight", "attn.kv_norm.weight", "attn.norm.weight"), 0));
        w_mat(&b, &L->o_a, W_REQUIRED, G * OL, (int64_t)Hh * D / G, "%s",
              pick(&b, nm, sizeof nm, l, NM("self_attn.o_a_proj", "attn.wo_a", NULL), 1));
        w_mat(&b, &L->o_b, W_REQUIRED, H, G * OL, "%s", pick(&b, nm, sizeof nm, l, NM("self_attn.o_b_proj", "attn.wo_b", NULL), 1));
        w_vec(&b, &L->sinks, W_REQUIRED, Hh, 0, W_KIND_BIAS, "%s",
              pick(&b, nm, sizeof nm, l, NM("self_attn.sinks", "attn.attn_sink", NULL), 0));
        if (L->type != L_SLIDING) bind_comp(&b, &L->comp, l, L->ratio, (int)D, L->type == L_CSA, H, 0);
        if (L->type == L_CSA) {
            bind_comp(&b, &L->icomp, l, L->ratio, (int)Di, 1, H, 1);
            w_mat(&b, &L->iq_b, W_REQUIRED, Hi * Di, QL, "%s",
                  pick(&b, nm, sizeof nm, l, NM("self_attn.compressor.indexer.q_b_proj", "attn.indexer.wq_b", NULL), 1));
            w_mat(&b, &L->iw, W_REQUIRED, Hi, H, "%s",
                  pick(&b, nm, sizeof nm, l,
                       NM("self_attn.compressor.indexer.scorer.weights_proj", "attn.indexer.weights_proj", NULL), 1));
        }
        /* MoE */
        moe_block *M = &L->moe;
        M->n_experts = (int)E; M->top_k = (int)K; M->hidden = H; M->inter = (int)mff;
        M->router = sf && !strcmp(sf, "sigmoid") ? MOE_SIGMOID : MOE_SQRTSOFTPLUS;
        M->norm_topk_prob = 1; M->routed_scaling = (float)rsf; M->n_group = 1; M->topk_group = 1;
        M->act_limit = (float)limit;
        M->w_gate = em; M->w_up = em + E; M->w_down = em + 2 * E;
        em += 3 * E;
        w_mat(&b, &M->gate, W_REQUIRED, E, H, "%s", pick(&b, nm, sizeof nm, l, NM("mlp.gate", "ffn.gate", NULL), 1));
        if (is_hash[l]) {
            w_itable(&b, &L->tid2eid, d->vocab, K, 0, E, "%s",
                     pick(&b, nm, sizeof nm, l, NM("mlp.gate.tid2eid", "ffn.gate.tid2eid", NULL), 0));
            M->hash_ids = L->tid2eid;
            M->hash_vocab = d->vocab;
        } else {
            w_vec(&b, &M->bias, W_REQUIRED, E, 0, W_KIND_BIAS, "%s",
                  pick(&b, nm, sizeof nm, l,
                       NM("mlp.gate.e_score_correction_bias", "ffn.gate.bias", "ffn.gate.e_score_correction_bias"), 0));
        }
        bind_experts(&b, M, l, (int)E, (int)K, (int)mff, H);
        M->shared_inter = (int)mff;
        w_mat(&b, &M->sh_gate, W_REQUIRED, mff, H, "%s",
              pick(&b, nm, sizeof nm, l, NM("mlp.shared_experts.gate_proj", "ffn.shared_experts.w1", "ffn.shared_experts.gate_proj"), 1));
        w_mat(&b, &M->sh_up, W_REQUIRED, mff, H, "%s",
              pick(&b, nm, sizeof nm, l, NM("mlp.shared_experts.up_proj", "ffn.shared_experts.w3", "ffn.shared_experts.up_proj"), 1));
        w_mat(&b, &M->sh_down, W_REQUIRED, H, mff, "%s",
              pick(&b, nm, sizeof nm, l, NM("mlp.shared_experts.down_proj", "ffn.shared_experts.w2", "ffn.shared_experts.down_proj"), 1));
    }
    free(type); free(ratio); free(is_hash);
    (void)shared;
    w_vec(&b, &d->final_norm, W_REQUIRED, H, 0, W_KIND_NORM, "%s",
          pick_top(&b, nm, sizeof nm, (const char *const[]){ "model.norm.weight", "norm.weight", NULL }, 0));
    {
        hc_map *h = &d->hc_head;
        h->hc = d->HC; h->dim = H; h->iters = 0; h->eps = (float)hc_eps; h->norm_eps = d->eps;
        int64_t sfn[2] = { d->HC, (int64_t)d->HC * H }, sb[1] = { d->HC }, ss[1] = { 1 };
        float *fn;
        if (w_arr(&b, &fn, W_REQUIRED, 2, sfn, "%s",
                  pick_top(&b, nm, sizeof nm, (const char *const[]){ "model.hc_head.hc_fn", "hc_head_fn", "model.hc_head.fn", NULL }, 0)) == 1)
            h->fn = (ci_mat){ .data = fn, .dtype = CI_F32, .rows = d->HC, .cols = sfn[1] };
        w_arr(&b, &h->base, W_REQUIRED, 1, sb, "%s",
              pick_top(&b, nm, sizeof nm, (const char *const[]){ "model.hc_head.hc_base", "hc_head_base", "model.hc_head.base", NULL }, 0));
        w_arr(&b, &h->scale, W_REQUIRED, 1, ss, "%s",
              pick_top(&b, nm, sizeof nm, (const char *const[]){ "model.hc_head.hc_scale", "hc_head_scale", "model.hc_head.scale", NULL }, 0));
    }
    w_head(&b, &d->lm_head, &d->embed, c->tie_embeddings, d->vocab, H,
           pick_top(&b, nm, sizeof nm, (const char *const[]){ "lm_head", "head", NULL }, 1));
    if (ci_bind_finish(&b, m, &d->owned, &d->n_owned, err, errlen)) return -1;
    if (m->st && m->be->world > 1 && v4_shard(m, d, err, errlen)) return -1;
    if (m->st && v4_place(m, d, (int)E, (int)K, err, errlen)) return -1;   /* record mode: nothing to place */
    G = d->G;   /* a rank's groups */
    for (int l = 0; l < n; l++) {   /* the grouped output projection's per-group rows */
        v4_layer *L = &d->layers[l];
        L->o_a_g = calloc((size_t)G, sizeof *L->o_a_g);
        if (!L->o_a_g) return ci_err(err, errlen, "%s: out of memory", fam);
        for (int g = 0; g < G; g++) L->o_a_g[g] = w_mat_rows(&L->o_a, (int64_t)g * OL, OL);
        rope_table rc = d->rope_comp;   /* the entries' rope, its table in backend memory */
        rc.inv_freq = (float *)d->inv_comp;
        if (L->type != L_SLIDING) cmp_set_rope(&L->comp, &rc, d->eps);
        if (L->type == L_CSA) cmp_set_rope(&L->icomp, &rc, d->eps);
    }
    return 0;
}

static void v4_unload(ci_model *m) {
    v4_model *d = m->impl;
    if (!d) return;
    if (d->layers)
        for (int l = 0; l < d->n_layers; l++) free(d->layers[l].o_a_g);
    w_owned_free(d->owned, d->n_owned);
    shd_kept_free(&d->kept);
    rope_free(&d->rope_main);
    rope_free(&d->rope_comp);
    free(d->expert_mats);
    free(d->dev_expert_mats);
    free(d->layers);
    for (int i = 0; i < CI_POOL_REGIONS; i++) ci_buf_release(m->be, d->pool_buf[i]);
    free(d);
    m->impl = NULL;
}

static const ci_family_ops v4_ops = {
    .load = v4_load, .unload = v4_unload,
    .session_init = v4_session_init, .session_free = v4_session_free,
    .forward = v4_forward, .forward_argmax = v4_forward_argmax, .cache_bytes_per_token = v4_cache_bytes_per_token,
    .cache_bytes_at = v4_cache_bytes_at, .forward_batch = v4_forward_batch,
    .forward_batch_argmax = v4_forward_batch_argmax,
    .snapshot = v4_snapshot, .restore = v4_restore, .pool_init = v4_pool_init, .pool_ok = v4_pool_ok,
    .snapshot_bytes = v4_snapshot_bytes,
};

const ci_family fam_deepseek_v4 = { "deepseek_v4", (const char *const[]){ "deepseek_v4", NULL }, NULL, &v4_ops, CI_CUDA_YES, 1, 0 };

