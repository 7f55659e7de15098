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
#include "model.h"
#include "../cache/cache.h"
#include "../core/status.h"
#include "../io/json.h"
#include "../io/weights.h"
#include "../nn/compressor.h"
#include "../nn/dsa.h"
#include "../nn/hc.h"
#include "../nn/moe.h"
#include "../nn/rope.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { UBATCH = 256 };
enum { L_SLIDING = 0, L_CSA = 1, L_HCA = 2 };
static const char *const type_name[] = { "sliding_attention", "compressed_sparse_attention",
                                         "heavily_compressed_attention" };

typedef struct {
    int type, ratio;
    float *attn_norm, *ffn_norm;          /* [H] */
    hc_map hc_attn, hc_ffn;
    ci_mat q_a, q_b, kv, o_a, o_b;        /* [QL, H], [Hh·D, QL], [D, H], [G·OL, Hh·D/G], [H, G·OL] */
    ci_mat *o_a_g;                        /* [G] row views of o_a */
    float *q_a_norm, *kv_norm, *sinks;    /* [QL], [D], [Hh] */
    cmp_block comp, icomp;                /* compressor; CSA: the indexer's compressor */
    ci_mat iq_b, iw;                      /* CSA indexer: [Hi·Di, QL], [Hi, H] */
    moe_block moe;
    int32_t *tid2eid;                     /* hash layers: [vocab, K] */
} v4_layer;

typedef struct {
    int H, n_layers, vocab, Hh, D, R, QL, G, OL, HC, W, Hi, Di, topk;
    float eps;
    ci_mat embed, lm_head;
    float *final_norm;
    hc_map hc_head;
    v4_layer *layers;
    rope_table rope_main, rope_comp;
    ci_mat *expert_mats;
    float **owned;
    int n_owned;
    int max_ratio_csa;                    /* for scratch sizing */
} v4_model;

typedef struct {
    float *ring;                          /* [W + UBATCH, D]: row p % (W + UBATCH) */
    float *cs, *is;                       /* compressor states (compressor.h); CSA: the indexer's */
} v4_lcache;

typedef struct {
    v4_lcache *lc;                        /* [n_layers] */
    int state_pos;                        /* the position the rings and compressors are at */
    int ring_rows;
    float *kbuf;                          /* [max keys, D] one row's keys (v4_attend's scratch) */
    float *sc;                            /* [Hh, max keys] its scores */
    float *X;                             /* [UB, HC, H] streams */
    float *x, *xn, *y;                    /* [UB, H] */
    float *mix, *post, *comb, *tmp;       /* [UB, (2+HC)HC], [UB, HC], [UB, HC·HC], [HC·H] */
    float *qr, *q, *kvn, *ao, *og, *oa, *ga;
    float *pkv, *pg;                      /* compressor projections [UB, 2·max(D, Di)] */
    float *iq, *iwt;                      /* indexer [UB, Hi·Di], [UB, Hi] */
    float *iscr;                          /* v4_index's scratch */
    int32_t *sel, *nsel;                  /* [UB, sel_stride], [UB] */
    int sel_stride;                       /* top-k, or fewer when the session holds fewer entries */
    float *last;                          /* [H] */
    int32_t *pos;                         /* [UB] positions */
    float **tab;                          /* [UB, 3] a batch step's ring, compressor, indexer states */
    moe_scratch moe;
} v4_cache;

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

/* ---- config ---------------------------------------------------------------------------- */

static int layer_types(const ci_config *c, const char *fam, int n, int csa_rate, int hca_rate, int *type, int *ratio,
                       char *err, size_t errlen) {
    const json_t *lt = json_object_get(c->text, "layer_types");
    const json_t *cr = json_object_get(c->text, "compress_ratios");
    if (lt && !json_is_null(lt)) {
        if (!json_is_array(lt) || (int)json_array_size(lt) < n)
            return ci_err(err, errlen, "%s: %s: 'layer_types' must be a list of %d strings", c->path, fam, n);
        for (int l = 0; l < n; l++) {
            const char *t = json_string_value(json_array_get(lt, (size_t)l));
            int k = -1;
            for (int i = 0; i < 3 && t; i++) if (!strcmp(t, type_name[i])) k = i;
            if (k < 0)
                return ci_err(err, errlen, "%s: %s: layer_types[%d] is '%s', expected sliding_attention, "
                              "compressed_sparse_attention or heavily_compressed_attention", c->path, fam, l,
                              t ? t : "(not a string)");
            type[l] = k;
        }
    } else if (cr && !json_is_null(cr)) {
        /* the hub dialect: one ratio per layer (0, 4 or 128), MTP layers' entries after them */
        if (!json_is_array(cr) || (int)json_array_size(cr) < n)
            return ci_err(err, errlen, "%s: %s: 'compress_ratios' must be a list of at least %d integers", c->path, fam, n);
        for (int l = 0; l < n; l++) {
            const json_t *v = json_array_get(cr, (size_t)l);
            long long r = json_is_integer(v) ? json_integer_value(v) : -1;
            if (r == 0) type[l] = L_SLIDING;
            else if (r == 4) type[l] = L_CSA;
            else if (r == 128) type[l] = L_HCA;
            else
                return ci_err(err, errlen, "%s: %s: compress_ratios[%d] must be 0, 4 or 128", c->path, fam, l);
        }
    } else {   /* transformers' default: two HCA layers, then CSA / HCA alternating */
        for (int l = 0; l < n; l++) type[l] = l < 2 ? L_HCA : ((l - 2) % 2 ? L_CSA : L_HCA);
    }
    for (int l = 0; l < n; l++) ratio[l] = type[l] == L_CSA ? csa_rate : type[l] == L_HCA ? hca_rate : 0;
    return 0;
}

static int mlp_types(const ci_config *c, const char *fam, int n, int *is_hash, char *err, size_t errlen) {
    const json_t *mt = json_object_get(c->text, "mlp_layer_types");
    if (mt && !json_is_null(mt)) {
        if (!json_is_array(mt) || (int)json_array_size(mt) < n)
            return ci_err(err, errlen, "%s: %s: 'mlp_layer_types' must be a list of %d strings", c->path, fam, n);
        for (int l = 0; l < n; l++) {
            const char *t = json_string_value(json_array_get(mt, (size_t)l));
            if (!t || (strcmp(t, "hash_moe") && strcmp(t, "moe")))
                return ci_err(err, errlen, "%s: %s: mlp_layer_types[%d] is '%s', expected 'hash_moe' or 'moe'", c->path,
                              fam, l, t ? t : "(not a string)");
            is_hash[l] = !strcmp(t, "hash_moe");
        }
        return 0;
    }
    long long nh = 3;
    if (cfg_int(c, "num_hash_layers", 0, 0, 1 << 12, &nh, err, errlen)) return -1;
    for (int l = 0; l < n; l++) is_hash[l] = l < nh;
    return 0;
}

/* The two rope tables: "main" (sliding layers) and "compress" (CSA/HCA), from a nested
 * rope_parameters {main, compress} or from rope_theta / compress_rope_theta / rope_scaling. */
static int ropes(ci_model *m, v4_model *d, char *err, size_t errlen) {
    const ci_config *c = &m->cfg;
    const char *fam = m->family->name;
    const json_t *rp = json_object_get(c->text, "rope_parameters");
    const json_t *rs = json_object_get(c->text, "rope_scaling");
    const json_t *pm = rp && json_is_object(rp) ? json_object_get(rp, "main") : NULL;
    const json_t *pc = rp && json_is_object(rp) ? json_object_get(rp, "compress") : NULL;
    ci_rope_cfg mr, cr;
    double ctheta = 160000.0;
    if (cfg_num(c, "compress_rope_theta", 0, 1.0, 1e12, &ctheta, err, errlen)) return -1;
    if (pm && json_is_object(pm) && pc && json_is_object(pc)) {
        if (cfg_rope(c, pm, &mr, err, errlen) || cfg_rope(c, pc, &cr, err, errlen)) return -1;
    } else {
        if (cfg_rope(c, NULL, &mr, err, errlen)) return -1;   /* rope_theta, no scaling */
        const json_t *blk = rs && !json_is_null(rs) ? rs : (rp && !json_is_null(rp) ? rp : NULL);
        if (cfg_rope(c, blk, &cr, err, errlen)) return -1;
        cr.theta = ctheta;
        if (cr.type == CI_ROPE_YARN && cr.attention_factor < 0) cr.attention_factor = 1.0;
    }
    if (mr.type != CI_ROPE_DEFAULT)
        return ci_err(err, errlen, "%s: %s: rope_parameters.main must be the default rope (sliding layers are not scaled)",
                      c->path, fam);
    mr.partial_rotary_factor = cr.partial_rotary_factor = 1.0;   /* the tables cover the R rope dims */
    if (cr.type == CI_ROPE_YARN && cr.attention_factor < 0) cr.attention_factor = 1.0;
    if (rope_init(&d->rope_main, &mr, d->R, fam, err, errlen) || rope_init(&d->rope_comp, &cr, d->R, fam, err, errlen))
        return -1;
    return 0;
}

/* ---- load ------------------------------------------------------------------------------ */

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
    d->max_ratio_csa = (int)csa;
    if (ropes(m, d, err, errlen)) return -1;

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
    if (layer_types(c, fam, n, (int)csa, (int)hca, type, ratio, err, errlen) || mlp_types(c, fam, n, is_hash, err, errlen)) {
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
    for (int l = 0; l < n; l++) {   /* the grouped output projection's per-group rows */
        v4_layer *L = &d->layers[l];
        L->o_a_g = calloc((size_t)G, sizeof *L->o_a_g);
        if (!L->o_a_g) return ci_err(err, errlen, "%s: out of memory", fam);
        for (int g = 0; g < G; g++) L->o_a_g[g] = w_mat_rows(&L->o_a, (int64_t)g * OL, OL);
        if (L->type != L_SLIDING) cmp_set_rope(&L->comp, &d->rope_comp, d->eps);
        if (L->type == L_CSA) cmp_set_rope(&L->icomp, &d->rope_comp, d->eps);
    }
    return 0;
}

static void v4_unload(ci_model *m) {
    v4_model *d = m->impl;
    if (!d) return;
    if (d->layers)
        for (int l = 0; l < d->n_layers; l++) free(d->layers[l].o_a_g);
    w_owned_free(d->owned, d->n_owned);
    rope_free(&d->rope_main);
    rope_free(&d->rope_comp);
    free(d->expert_mats);
    free(d->layers);
    free(d);
    m->impl = NULL;
}

/* ---- cache ----------------------------------------------------------------------------- */

/* Rows of a layer's window ring: the window, or the whole context when that is shorter
 * (sliding_window comes from config.json alone and may be far past any session), plus a
 * micro-batch. */
static int window_rows(const v4_model *d, long long max_ctx) { return d->W < max_ctx ? d->W : (int)max_ctx; }

/* Bytes a session of max_ctx tokens holds for its cache (ring + compressor states). */
static size_t cache_bytes(const v4_model *d, long long max_ctx) {
    size_t total = 0;
    for (int l = 0; l < d->n_layers; l++) {
        const v4_layer *L = &d->layers[l];
        total += (size_t)(window_rows(d, max_ctx) + UBATCH) * d->D * sizeof(float);
        if (L->type != L_SLIDING) total += cmp_state_bytes(&L->comp, max_ctx);
        if (L->type == L_CSA) total += cmp_state_bytes(&L->icomp, max_ctx);
    }
    return total;
}

/* What one more token of context costs, in the long run: the compressed entries. */
static size_t v4_cache_bytes_per_token(const ci_model *m) {
    const v4_model *d = m->impl;
    double per = 0;
    for (int l = 0; l < d->n_layers; l++) {
        const v4_layer *L = &d->layers[l];
        if (L->type != L_SLIDING) per += (double)d->D * sizeof(float) / L->ratio;
        if (L->type == L_CSA) per += (double)d->Di * sizeof(float) / L->ratio;
    }
    return (size_t)ceil(per);
}

static size_t v4_cache_bytes_at(const ci_model *m, long long n_tokens) { return cache_bytes(m->impl, n_tokens); }

static void v4_session_free(ci_session *s);

static int v4_session_init(ci_session *s, char *err, size_t errlen) {
    const v4_model *d = s->m->impl;
    const char *fam = s->m->family->name;
    v4_cache *c = calloc(1, sizeof *c);
    if (!c) return ci_err(err, errlen, "%s: out of memory", fam);
    s->impl = c;
    const int U = UBATCH, H = d->H, HC = d->HC, HD = d->Hh * d->D;
    c->ring_rows = window_rows(d, s->max_ctx) + UBATCH;
    c->lc = calloc((size_t)d->n_layers, sizeof *c->lc);
    if (!c->lc) return ci_err(err, errlen, "%s: out of memory", fam);
    int max_entries = 1;
    for (int l = 0; l < d->n_layers; l++) {
        const v4_layer *L = &d->layers[l];
        v4_lcache *lc = &c->lc[l];
        lc->ring = malloc((size_t)c->ring_rows * d->D * sizeof(float));
        if (!lc->ring || (L->type != L_SLIDING && !(lc->cs = malloc(cmp_state_bytes(&L->comp, s->max_ctx)))) ||
            (L->type == L_CSA && !(lc->is = malloc(cmp_state_bytes(&L->icomp, s->max_ctx)))))
            return ci_err(err, errlen, "%s: out of memory for a %d-token session", fam, s->max_ctx);
        if (L->type == L_CSA && cmp_state_cap(&L->icomp, s->max_ctx) > max_entries)
            max_entries = cmp_state_cap(&L->icomp, s->max_ctx);
    }
    int max_keys = window_rows(d, s->max_ctx); /* a row's window plus its compressed entries */
    {
        int comp = 0;
        for (int l = 0; l < d->n_layers; l++) {
            const v4_layer *L = &d->layers[l];
            int cap = L->type != L_SLIDING ? cmp_state_cap(&L->comp, s->max_ctx) : 0;
            int k = L->type == L_CSA ? (d->topk < cap ? d->topk : cap) : cap;
            if (k > comp) comp = k;
        }
        max_keys += comp;
    }
    c->kbuf = malloc((size_t)max_keys * d->D * sizeof(float));
    c->sc = malloc((size_t)d->Hh * max_keys * sizeof(float));
    int wide = 2 * (d->D > d->Di ? d->D : d->Di);
    int topk = d->topk < max_entries ? d->topk : max_entries;
    c->X = malloc((size_t)U * HC * H * sizeof(float));
    c->x = malloc((size_t)U * H * sizeof(float));
    c->xn = malloc((size_t)U * H * sizeof(float));
    c->y = malloc((size_t)U * H * sizeof(float));
    c->mix = malloc((size_t)U * (2 + HC) * HC * sizeof(float));
    c->post = malloc((size_t)U * HC * sizeof(float));
    c->comb = malloc((size_t)U * HC * HC * sizeof(float));
    c->tmp = malloc((size_t)HC * H * sizeof(float));
    c->qr = malloc((size_t)U * d->QL * sizeof(float));
    c->q = malloc((size_t)U * HD * sizeof(float));
    c->kvn = malloc((size_t)U * d->D * sizeof(float));
    c->ao = malloc((size_t)U * HD * sizeof(float));
    c->og = malloc((size_t)U * (HD / d->G) * sizeof(float));
    c->oa = malloc((size_t)U * d->G * d->OL * sizeof(float));
    c->ga = malloc((size_t)U * d->OL * sizeof(float));
    c->pkv = malloc((size_t)U * wide * sizeof(float));
    c->pg = malloc((size_t)U * wide * sizeof(float));
    c->iq = malloc((size_t)U * d->Hi * d->Di * sizeof(float));
    c->iwt = malloc((size_t)U * d->Hi * sizeof(float));
    c->iscr = malloc(ci_v4_index_scratch_floats(d->Hi, max_entries) * sizeof(float));
    c->sel_stride = topk > 0 ? topk : 1;
    c->sel = malloc((size_t)U * c->sel_stride * sizeof(int32_t));
    c->nsel = malloc((size_t)U * sizeof(int32_t));
    c->last = malloc((size_t)H * sizeof(float));
    c->pos = malloc((size_t)U * sizeof(int32_t));
    c->tab = malloc((size_t)U * 3 * sizeof *c->tab);
    if (!c->kbuf || !c->sc || !c->X || !c->x || !c->xn || !c->y || !c->mix || !c->post || !c->comb || !c->tmp || !c->qr || !c->q || !c->kvn ||
        !c->ao || !c->og || !c->oa || !c->ga || !c->pkv || !c->pg || !c->iq || !c->iwt || !c->iscr || !c->sel ||
        !c->nsel || !c->last || !c->pos || !c->tab || moe_scratch_init(s->m->be, &c->moe, &d->layers[0].moe, U))
        return ci_err(err, errlen, "%s: out of memory for a %d-token session", fam, s->max_ctx);
    return 0;
}

static void v4_session_free(ci_session *s) {
    const v4_model *d = s->m->impl;
    v4_cache *c = s->impl;
    if (!c) return;
    if (c->lc)
        for (int l = 0; l < d->n_layers; l++) {
            free(c->lc[l].ring);
            free(c->lc[l].cs);
            free(c->lc[l].is);
        }
    free(c->lc);
    free(c->kbuf); free(c->sc);
    free(c->X); free(c->x); free(c->xn); free(c->y); free(c->mix); free(c->post); free(c->comb); free(c->tmp);
    free(c->qr); free(c->q); free(c->kvn); free(c->ao); free(c->og); free(c->oa); free(c->ga); free(c->pkv);
    free(c->pg); free(c->iq); free(c->iwt); free(c->iscr); free(c->sel); free(c->nsel); free(c->last);
    free(c->pos); free(c->tab);
    moe_scratch_free(s->m->be, &c->moe);
    free(c);
    s->impl = NULL;
}

/* ---- attention ------------------------------------------------------------------------- */

/* Attention of rows xn [n, H] at positions c->pos[0..n) into c->y. tab NULL: the rows are
 * consecutive tokens of one sequence whose ring and compressor states are lc's; else a
 * decode step, row t's ring, compressor and indexer states at tab[3t], tab[3t + 1],
 * tab[3t + 2]. Every row's key goes into its ring, and its compressors take it, before any
 * row attends (backend.h: v4_compress, v4_index, v4_attend). */
static void attention(ci_backend *be, const v4_model *d, const v4_layer *L, const v4_lcache *lc, float *const *tab,
                      v4_cache *c, int n) {
    const int D = d->D, Hh = d->Hh, R = d->R;
    const rope_table *rt = L->type == L_SLIDING ? &d->rope_main : &d->rope_comp;
    /* q */
    be->matmul(be, c->qr, c->xn, n, &L->q_a);
    be->rmsnorm(be, c->qr, c->qr, L->q_a_norm, n, d->QL, d->eps);
    be->matmul(be, c->q, c->qr, n, &L->q_b);
    be->rmsnorm(be, c->q, c->q, NULL, n * Hh, D, d->eps);
    be->rope(be, c->q, n, Hh, D, D - R, R, c->pos, rt->inv_freq, rt->mscale, CI_ROPE_INTERLEAVED);
    /* the shared K = V row */
    be->matmul(be, c->kvn, c->xn, n, &L->kv);
    be->rmsnorm(be, c->kvn, c->kvn, L->kv_norm, n, D, d->eps);
    be->rope(be, c->kvn, n, 1, D, D - R, R, c->pos, rt->inv_freq, rt->mscale, CI_ROPE_INTERLEAVED);
    /* compressed entries for the windows these tokens complete */
    if (L->type != L_SLIDING) {
        cmp_project(be, &L->comp, c->xn, n, c->pkv, c->pg);
        cmp_push(be, &L->comp, lc ? lc->cs : NULL, tab ? tab + 1 : NULL, 3, c->pkv, c->pg, n, c->pos);
    }
    if (L->type == L_CSA) {
        cmp_project(be, &L->icomp, c->xn, n, c->pkv, c->pg);
        cmp_push(be, &L->icomp, lc ? lc->is : NULL, tab ? tab + 2 : NULL, 3, c->pkv, c->pg, n, c->pos);
        be->matmul(be, c->iq, c->qr, n, &L->iq_b);
        be->rope(be, c->iq, n, d->Hi, d->Di, d->Di - R, R, c->pos, d->rope_comp.inv_freq, d->rope_comp.mscale,
                 CI_ROPE_INTERLEAVED);
        be->matmul(be, c->iwt, c->xn, n, &L->iw);
        be->v4_index(be, c->sel, c->nsel, c->iq, c->iwt, lc ? lc->is : NULL, tab ? tab + 2 : NULL, 3, n, c->pos,
                     &L->icomp.op, d->Hi, d->topk, c->sel_stride, c->iscr);
    }
    be->v4_attend(be, c->ao, c->q, c->kvn, n, c->pos, lc ? lc->ring : NULL, c->ring_rows, d->W, lc ? lc->cs : NULL,
                  tab, 3, L->type == L_SLIDING ? NULL : &L->comp.op, L->type == L_CSA ? c->sel : NULL, c->nsel,
                  c->sel_stride, L->sinks, Hh, D, R, rt->inv_freq, rt->mscale, c->kbuf, c->sc);
    /* grouped output projection */
    be->matmul_groups(be, c->oa, c->ao, n, d->G, L->o_a_g, c->og, c->ga);
    be->matmul(be, c->y, c->oa, n, &L->o_b);
}

/* ---- forward --------------------------------------------------------------------------- */

/* The decoder over n rows: row t is token tokens[t] at position c->pos[t]; cs NULL: of the
 * sequence whose cache is c, else (a decode step) of the sequence whose cache is cs[t] (c is
 * the scratch, logits as ci_lm_head). */
static void decode_rows(ci_model *m, v4_cache *c, v4_cache *const *cs, const int *tokens, int n, float *logits,
                        int all_logits) {
    const v4_model *d = m->impl;
    ci_backend *be = m->be;
    const int H = d->H, HC = d->HC;
    be->embed(be, c->x, &d->embed, tokens, n);
    be->hc_spread(be, c->X, c->x, n, HC, H);
    c->moe.ids = tokens;
    for (int l = 0; l < d->n_layers; l++) {
        const v4_layer *L = &d->layers[l];
        const v4_lcache *lc = cs ? NULL : &c->lc[l];
        if (cs)
            for (int t = 0; t < n; t++) {
                c->tab[3 * t] = cs[t]->lc[l].ring;
                c->tab[3 * t + 1] = cs[t]->lc[l].cs;
                c->tab[3 * t + 2] = cs[t]->lc[l].is;
            }
        hc_collapse(be, &L->hc_attn, c->X, n, c->mix, c->post, c->comb, c->x);
        be->rmsnorm(be, c->xn, c->x, L->attn_norm, n, H, d->eps);
        attention(be, d, L, lc, cs ? c->tab : NULL, c, n);
        CI_DUMP(m, "attn_out", l, c->y, n, H);
        hc_expand(be, &L->hc_attn, c->X, c->y, c->post, c->comb, n, c->tmp);
        hc_collapse(be, &L->hc_ffn, c->X, n, c->mix, c->post, c->comb, c->x);
        be->rmsnorm(be, c->xn, c->x, L->ffn_norm, n, H, d->eps);
        moe_forward(be, &L->moe, &c->moe, c->y, c->xn, n);
        hc_expand(be, &L->hc_ffn, c->X, c->y, c->post, c->comb, n, c->tmp);
        CI_DUMP(m, "layer_out", l, c->X, n, HC * H);
    }
    c->moe.ids = NULL;
    hc_head(be, &d->hc_head, c->X, n, c->mix, c->x);
    ci_lm_head(be, logits, all_logits, c->x, n, H, d->final_norm, d->eps, &d->lm_head, c->xn, c->last);
}

static void forward_chunk(ci_session *s, const int *tokens, int n, float *logits, int all_logits) {
    v4_cache *c = s->impl;
    for (int t = 0; t < n; t++) c->pos[t] = s->pos + t;
    decode_rows(s->m, c, NULL, tokens, n, logits, all_logits);
    s->pos += n;
}

/* A new sequence (ci_session_reset lowers pos to 0) empties the compressors; any other
 * move of pos away from where the rings and compressors are cannot be followed (their state
 * is not per position): only a snapshot restore goes back. */
static int v4_begin(const v4_model *d, ci_session *s, char *err, size_t errlen) {
    v4_cache *c = s->impl;
    (void)d;
    if (s->pos == 0) c->state_pos = 0;   /* the states' entry counts follow from positions */
    if (s->pos != c->state_pos)
        return ci_err(err, errlen, "%s: session at position %d but its cache is at %d (restore a cache snapshot to go back)",
                      s->m->family->name, s->pos, c->state_pos);
    return 0;
}

static int v4_forward(ci_session *s, const int *tokens, int n, float *logits, int all_logits, char *err, size_t errlen) {
    const v4_model *d = s->m->impl;
    if (ci_forward_check(s, tokens, n, d->vocab, err, errlen) || v4_begin(d, s, err, errlen)) return -1;
    ci_forward_chunks(s, tokens, n, logits, all_logits, d->vocab, UBATCH, forward_chunk);
    ((v4_cache *)s->impl)->state_pos = s->pos;
    return 0;
}

/* One decode step for n distinct sessions (registry.h): the matmuls, mHC mappings and MoE run
 * over all rows; each row's window ring, compressors and indexer are its own session's. */
static int v4_forward_batch(ci_session *const *ss, const int *tokens, int n, float *logits, char *err, size_t errlen) {
    if (n <= 0) return ci_err(err, errlen, "forward_batch needs at least one sequence");
    ci_model *m = ss[0]->m;
    const v4_model *d = m->impl;
    if (ci_batch_check(ss, tokens, n, d->vocab, err, errlen)) return -1;
    for (int i = 0; i < n; i++)
        if (v4_begin(d, ss[i], err, errlen)) return -1;
    ci_session *big = ss[0];   /* scratch sized for the longest session's entries */
    for (int i = 1; i < n; i++)
        if (ss[i]->max_ctx > big->max_ctx) big = ss[i];
    v4_cache *c = big->impl, *cs[UBATCH];
    for (int off = 0; off < n; off += UBATCH) {
        int k = n - off < UBATCH ? n - off : UBATCH;
        for (int i = 0; i < k; i++) {
            c->pos[i] = ss[off + i]->pos;
            cs[i] = ss[off + i]->impl;
        }
        decode_rows(m, c, cs, tokens + off, k, logits + (size_t)off * d->vocab, 1);
        for (int i = 0; i < k; i++) ((v4_cache *)ss[off + i]->impl)->state_pos = ++ss[off + i]->pos;
    }
    return 0;
}

/* ---- snapshots (prefix reuse in the server) ------------------------------------------------
 *
 * The cache at position P as one blob: a header (magic, layers, P), then per layer the
 * window rows of positions max(0, P-W+1) .. P-1 in order, and per compressor state its
 * entry count, whether it holds a previous window, the current window's P % ratio pending
 * tokens (kv, gate), the previous window's Ca series (overlap, when held) and its entries. */
enum { SNAP_MAGIC = 0x56345334 };   /* "4S4V" */

typedef struct {
    ci_backend *be;
    uint8_t *p;                           /* NULL: only count */
    const uint8_t *q;                     /* reading */
    size_t off, len;
    int bad;
} blob_io;

static void bput(blob_io *b, const void *src, size_t n) {
    if (b->p) memcpy(b->p + b->off, src, n);
    b->off += n;
}

static void bget(blob_io *b, void *dst, size_t n) {
    if (b->bad || n > b->len - b->off) { b->bad = 1; return; }
    memcpy(dst, b->q + b->off, n);
    b->off += n;
}

/* The same for bytes in backend memory. */
static void bput_dev(blob_io *b, const float *src, size_t n) {
    if (b->p && n) b->be->download(b->be, b->p + b->off, src, n);
    b->off += n;
}

static void bget_dev(blob_io *b, float *dst, size_t n) {
    if (b->bad || n > b->len - b->off) { b->bad = 1; return; }
    if (n) b->be->upload(b->be, dst, b->q + b->off, n);
    b->off += n;
}

/* A compressor state at position P: its P / ratio entries, whether it holds a previous
 * window's Ca series (CSA past its first window), the pending tokens, that series, the
 * entries (the layout of compressor.h). */
static void put_cmp(blob_io *b, const cmp_block *k, const float *st, int P) {
    const int R = k->ratio, m = (1 + k->overlap) * k->d, pend = P % R, ne = P / R, has_prev = k->overlap && ne > 0;
    int32_t hdr[2] = { ne, has_prev };
    bput(b, hdr, sizeof hdr);
    bput_dev(b, st, (size_t)pend * m * sizeof(float));
    bput_dev(b, st + (size_t)R * m, (size_t)pend * m * sizeof(float));
    if (has_prev) {
        bput_dev(b, st + 2 * (size_t)R * m, (size_t)R * k->d * sizeof(float));
        bput_dev(b, st + 2 * (size_t)R * m + (size_t)R * k->d, (size_t)R * k->d * sizeof(float));
    }
    bput_dev(b, st + ci_v4cmp_entries(&k->op), (size_t)ne * k->d * sizeof(float));
}

static int get_cmp(blob_io *b, const cmp_block *k, float *st, int P, int max_ctx) {
    const int R = k->ratio, m = (1 + k->overlap) * k->d, pend = P % R;
    int32_t hdr[2] = { -1, -1 };
    bget(b, hdr, sizeof hdr);
    if (b->bad || hdr[0] != P / R || hdr[0] > cmp_state_cap(k, max_ctx) || hdr[1] != (k->overlap && hdr[0] > 0))
        return -1;
    bget_dev(b, st, (size_t)pend * m * sizeof(float));
    bget_dev(b, st + (size_t)R * m, (size_t)pend * m * sizeof(float));
    if (hdr[1]) {
        bget_dev(b, st + 2 * (size_t)R * m, (size_t)R * k->d * sizeof(float));
        bget_dev(b, st + 2 * (size_t)R * m + (size_t)R * k->d, (size_t)R * k->d * sizeof(float));
    }
    bget_dev(b, st + ci_v4cmp_entries(&k->op), (size_t)hdr[0] * k->d * sizeof(float));
    return b->bad ? -1 : 0;
}

static void put_all(blob_io *b, const v4_model *d, const v4_cache *c, int P) {
    int32_t hdr[3] = { SNAP_MAGIC, d->n_layers, P };
    bput(b, hdr, sizeof hdr);
    for (int l = 0; l < d->n_layers; l++) {
        const v4_layer *L = &d->layers[l];
        const v4_lcache *lc = &c->lc[l];
        for (int q = P - d->W + 1 > 0 ? P - d->W + 1 : 0; q < P; q++)
            bput_dev(b, lc->ring + (size_t)(q % c->ring_rows) * d->D, (size_t)d->D * sizeof(float));
        if (L->type != L_SLIDING) put_cmp(b, &L->comp, lc->cs, P);
        if (L->type == L_CSA) put_cmp(b, &L->icomp, lc->is, P);
    }
}

static cache_snap *v4_snapshot(const ci_session *s, char *err, size_t errlen) {
    const v4_model *d = s->m->impl;
    const v4_cache *c = s->impl;
    if (s->pos != c->state_pos) {
        ci_err(err, errlen, "%s: snapshot of a session at position %d whose cache is at %d", s->m->family->name, s->pos,
               c->state_pos);
        return NULL;
    }
    blob_io cnt = { .be = s->m->be };
    put_all(&cnt, d, c, s->pos);
    cache_snap *snap = cache_snap_blob_new(s->pos, cnt.off);
    if (!snap) {
        ci_err(err, errlen, "%s: out of memory for a cache snapshot at position %d", s->m->family->name, s->pos);
        return NULL;
    }
    blob_io w = { .be = s->m->be, .p = cache_snap_blob(snap, NULL) };
    put_all(&w, d, c, s->pos);
    return snap;
}

static int v4_restore(ci_session *s, const cache_snap *snap, char *err, size_t errlen) {
    const v4_model *d = s->m->impl;
    v4_cache *c = s->impl;
    const char *fam = s->m->family->name;
    size_t len = 0;
    const uint8_t *q = cache_snap_blob(snap, &len);
    int P = cache_snap_pos(snap);
    int32_t hdr[3] = { 0 };
    blob_io b = { .be = s->m->be, .q = q, .len = len };
    if (q) bget(&b, hdr, sizeof hdr);
    if (!q || b.bad || hdr[0] != SNAP_MAGIC || hdr[1] != d->n_layers || hdr[2] != P)
        return ci_err(err, errlen, "%s: cache restore: the snapshot is not one of this model's", fam);
    if (P < 0 || P > s->max_ctx)
        return ci_err(err, errlen, "%s: cache restore: snapshot at position %d exceeds the context of %d", fam, P, s->max_ctx);
    for (int l = 0; l < d->n_layers; l++) {
        const v4_layer *L = &d->layers[l];
        v4_lcache *lc = &c->lc[l];
        for (int t = P - d->W + 1 > 0 ? P - d->W + 1 : 0; t < P; t++)
            bget_dev(&b, lc->ring + (size_t)(t % c->ring_rows) * d->D, (size_t)d->D * sizeof(float));
        if ((L->type != L_SLIDING && get_cmp(&b, &L->comp, lc->cs, P, s->max_ctx)) ||
            (L->type == L_CSA && get_cmp(&b, &L->icomp, lc->is, P, s->max_ctx)) || b.bad) {
            c->state_pos = -1;   /* half restored: only a reset or another restore continues */
            return ci_err(err, errlen, "%s: cache restore: the snapshot's layer %d does not fit this session", fam, l);
        }
    }
    if (b.off != len) {
        c->state_pos = -1;
        return ci_err(err, errlen, "%s: cache restore: %zu bytes of the snapshot left over", fam, len - b.off);
    }
    s->pos = c->state_pos = P;
    return 0;
}

static const ci_family_ops v4_ops = {
    .load = v4_load, .unload = v4_unload,
    .session_init = v4_session_init, .session_free = v4_session_free,
    .forward = v4_forward, .cache_bytes_per_token = v4_cache_bytes_per_token,
    .cache_bytes_at = v4_cache_bytes_at, .forward_batch = v4_forward_batch,
    .snapshot = v4_snapshot, .restore = v4_restore,
};

const ci_family fam_deepseek_v4 = { "deepseek_v4", (const char *const[]){ "deepseek_v4", NULL }, NULL, &v4_ops, 0 };
