/* mla.h — Multi-head Latent Attention (DeepSeek V2/V3, shared by V3.2), absorbed form.
 *
 * Shapes per token (Hh heads, H hidden):
 *   q      = q_b(rmsnorm(q_a x)) or q_proj x        [Hh, nope + rope]
 *   c, kpe = kv_a x                                 [kv_lora] ‖ [rope]
 *   latent = rmsnorm(c)                             [kv_lora]
 *   RoPE (interleaved pairs, as transformers' rope_interleave) on q's rope part and kpe.
 * kv_b [Hh·(nope+v), kv_lora] splits per head into W_UK[h] [nope, kv_lora] and
 * W_UV[h] [v, kv_lora] (views, no copy). Scores are computed in the latent space:
 *   score(t, s) = scale · ( (W_UK[h]ᵀ q_nope[h]) · latent[s] + q_pe[h] · kpe[s] )
 *   o[h] = W_UV[h] · Σ_s p(t, s) latent[s];  out = o_proj(o)        [H]
 * which equals expanding K = [W_UK latent ‖ kpe], V = W_UV latent per head. The cache keeps
 * only [latent ‖ kpe] per token per layer (kv_lora + rope floats), never full K/V; the same
 * path serves prefill and decode. Written on backend ops only (backend.h "MLA / DSA"): no
 * activation, cache or position byte is touched here. */
#ifndef CI_MLA_H
#define CI_MLA_H
#include "../backend/backend.h"
#include "../parallel/shard.h"
#include "rope.h"

typedef struct {
    int n_heads, hidden, q_lora, kv_lora, nope, rope, v;
    float scale;                 /* (nope+rope)^-0.5, × yarn mscale² when the config asks */
    ci_mat q_a;                  /* [q_lora, H]; data NULL when q_lora == 0 */
    float *q_a_norm;             /* [q_lora] */
    ci_mat q_b;                  /* [Hh·(nope+rope), q_lora] */
    ci_mat q;                    /* [Hh·(nope+rope), H] when q_lora == 0 */
    ci_mat kv_a;                 /* [kv_lora + rope, H] */
    float *kv_a_norm;            /* [kv_lora] */
    ci_mat kv_b;                 /* [Hh·(nope+v), kv_lora] */
    ci_mat *w_uk, *w_uv;         /* [Hh] views into kv_b */
    ci_mat o;                    /* [H, Hh·v] */
    int tp_part;                 /* tensor parallel (backend.h CI_TP_*): a part of the heads (the latent
                                  * and its cache whole on every rank), o_proj's product all-reduced */
} mla_layer;

/* Scratch for up to max_n rows, every buffer in backend memory (be->alloc). */
typedef struct {
    float *qa;                   /* [n, q_lora] q_a_layernorm(q_a x): also the DSA indexer's input */
    float *q;                    /* [n, Hh·(nope+rope)] */
    float *qcat;                 /* [n, Hh·(kv_lora+rope)] absorbed queries */
    float *olat;                 /* [n, Hh·(kv_lora+rope)] attention output in latent space */
    float *o;                    /* [n, Hh·v] */
    float *lat;                  /* [n, kv_lora+rope] the rows' new latent rows before the cache */
} mla_scratch;

/* Per-head views of kv_b; call after kv_b is bound. Returns -1 on allocation failure. */
int mla_split_kv_b(mla_layer *L);
void mla_layer_free(mla_layer *L);
/* dst = L with every weight in backend memory (be->weight: kv_b, its fp8 scale grid and the
 * per-head views as offsets into the placed kv_b, or each view placed when it is its own
 * tensor); dst owns new w_uk / w_uv arrays (mla_layer_free). -1 when out of memory. */
int mla_place(ci_backend *be, mla_layer *dst, const mla_layer *L);
/* Tensor parallel (parallel/shard.h): narrows L to rank R of W's heads: q_b (or q) and kv_b
 * rows, the per-head views, o's columns (copied into keep); q_a, kv_a and their norms stay whole,
 * so every rank computes and caches the same latent rows. Call after mla_split_kv_b, before
 * mla_place. -1 with err when the heads or o's blocks do not split. */
int mla_shard(mla_layer *L, const shd_ctx *t, const char *what, char *err, size_t errlen);
int mla_scratch_init(ci_backend *be, mla_scratch *s, const mla_layer *L, int max_n);
void mla_scratch_free(ci_backend *be, mla_scratch *s);

/* The steps before the attention, for the block input x[n, H] at positions pos (backend
 * memory): xn = rmsnorm(x) * norm_w fused into the first projections (q_a or q, and kv_a,
 * read in one pass); queries (s->q roped) and the absorbed queries s->qcat [n, Hh,
 * kv_lora + rope]; s->lat gets the rows' latent rows (normed, k_pe roped), which the caller
 * stores in its cache(s), or this does with cache or tab given (mla_attend's; then returns 1,
 * and the caller passes that to mla_attend as `stored`; on a device one launch, backend.h
 * mla_prepare, makes q, qcat and the rows and stores them). xn [n, H] and s->qa (q_a's normed
 * rows) hold their values afterwards only with keep_xn (the indexer reads them); otherwise they
 * are scratch (backend.h norm_matmul_n: q_a's norm is fused into q_b). inv_freq (backend
 * memory) / mscale: the rope table's. */
int mla_project(ci_backend *be, const mla_layer *L, const float *inv_freq, float mscale, mla_scratch *s, float *xn,
                const float *x, const float *norm_w, int keep_xn, const int32_t *pos, int n, float eps, float *cache,
                float *const *tab, const ci_pages *pages);
/* Stores s->lat in the cache(s) at positions pos (unless `stored`: mla_project did) and
 * attends: cache (one sequence, rows of kv_lora + rope floats) or, cache NULL, tab: row t's
 * cache is tab[t] (a batch step). pages (backend.h ci_pages) or NULL: the cache rows of the
 * positions. Into s->olat. */
void mla_attend(ci_backend *be, const mla_layer *L, mla_scratch *s, float *cache, float *const *tab,
                const int32_t *pos, int n, int max_keys, const ci_pages *pages, int stored);
/* The steps after it: x[n, H] += o_proj of the latent-space outputs s->olat [n, Hh,
 * kv_lora + rope] after W_UV per head (the residual add fused; tmp [n, H] is matmul_acc's
 * scratch). */
void mla_output_add(ci_backend *be, const mla_layer *L, mla_scratch *s, float *x, float *tmp, int n);

#endif
