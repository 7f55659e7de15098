/* deepseek_v4_internal.h — what deepseek_v4.c (tensors, placement), deepseek_v4_config.c
 * (layer kinds, rope tables), deepseek_v4_run.c (sessions, forward, batched steps) and
 * deepseek_v4_cache.c (cache sizes, snapshots) share: the model and the session. */
#ifndef CI_DEEPSEEK_V4_INTERNAL_H
#define CI_DEEPSEEK_V4_INTERNAL_H
#include "model.h"
#include "runner.h"
#include "../cache/cache.h"
#include "../nn/compressor.h"
#include "../nn/hc.h"
#include "../nn/moe.h"
#include "../nn/rope.h"

enum { V4_UBATCH = 256 };
enum { L_SLIDING = 0, L_CSA = 1, L_HCA = 2 };

/* One layer. After loading (v4_place) every weight pointer is backend memory (be->weight:
 * the checkpoint's own addresses on the CPU). */
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
    float *pool_ce, *pool_ie;             /* the model's block pool (v4_pool_init): this layer's compressed
                                           * entries and (CSA) its indexer's, KV_BLOCK / ratio a block */
} v4_layer;

typedef struct {
    int H, n_layers, vocab, Hh, D, R, QL, G, OL, HC, W, Hi, Di, topk;
    float eps;
    ci_mat embed, lm_head;
    float *final_norm;
    hc_map hc_head;
    v4_layer *layers;
    rope_table rope_main, rope_comp;      /* host tables (owned) */
    const float *inv_main, *inv_comp;     /* their inv_freq in backend memory */
    ci_mat *expert_mats;                  /* host expert views (bound) */
    ci_mat *dev_expert_mats;              /* placed expert views (the layers' moe point here) */
    float **owned;
    int n_owned;
    int placed;                           /* the weights are in backend memory (not record mode) */
    int tp;                               /* a tensor-parallel rank: its heads (whole output groups) and
                                           * expert columns; attention and MoE outputs all-reduced */
    shd_kept kept;                        /* such a rank's copies of its split columns */
    float *pool_buf[CI_POOL_REGIONS];     /* the block pool's entry regions (v4_pool_init; owned) */
} v4_model;

/* A layer's cache, backend memory. */
typedef struct {
    float *ring;                          /* [ring_rows, D]: the kv row of position p at p % ring_rows */
    float *cs, *is;                       /* compressor states (compressor.h); CSA: the indexer's */
} v4_lcache;

/* A session: its caches and the scratch of a chunk, all backend memory. On the model's block
 * pool (ci_session_pages_shared) a state keeps only its window's pending tokens and previous
 * series; the entries are in the pool's blocks (v4_layer pool_ce / pool_ie), found through the
 * session's block table (a batch step's: one per row). Else the entries follow in the state. */
typedef struct {
    ci_runner run;                        /* chunk loop, ids / positions, head (runner.h) */
    v4_lcache *lc;                        /* [n_layers] */
    int shared;                           /* on the model's block pool */
    ci_pages pages;                       /* the call's block tables (positions), tab NULL when not shared */
    int state_pos;                        /* the position the rings and compressors are at */
    int ring_rows;
    float *kbuf;                          /* [max keys, D] one row's keys (v4_attend's scratch) */
    float *sc;                            /* [Hh, max keys] its scores */
    float *X;                             /* [UB, HC, H] streams */
    float *x, *xn, *y;                    /* [UB, H] */
    float *mix, *post, *comb, *tmp;       /* [UB, (2+HC)HC], [UB, HC], [UB, HC·HC], [HC·H] */
    float *qr, *q, *kvn, *ao, *og, *oa, *ga;
    float *pkv, *pg;                      /* compressor projections [UB, 2·max(D, Di)] */
    float *ipkv, *ipg;                    /* the CSA indexer's compressor's, the same size */
    float *iq, *iwt;                      /* indexer [UB, Hi·Di], [UB, Hi] */
    float *iscr;                          /* v4_index's scratch */
    int32_t *sel, *nsel;                  /* [UB, sel_stride], [UB] */
    int sel_stride;                       /* top-k, or fewer when the session holds fewer entries */
    int max_entries;                      /* the most entries an indexer state holds */
    float *last;                          /* [H] */
    int32_t *best_n;                      /* [UB] per-row argmax of a forward_batch_argmax step */
    moe_scratch moe;
} v4_cache;

/* deepseek_v4_config.c */
int v4_layer_types(const ci_config *c, const char *fam, int n, int csa_rate, int hca_rate, int *type, int *ratio,
                   char *err, size_t errlen);
int v4_mlp_types(const ci_config *c, const char *fam, int n, int *is_hash, char *err, size_t errlen);
int v4_ropes(ci_model *m, v4_model *d, char *err, size_t errlen);

/* deepseek_v4_run.c */
int v4_pool_ok(const ci_model *m, char *why, size_t whylen);
int v4_pool_init(ci_model *m, int n_blocks, char *err, size_t errlen);
int v4_session_init(ci_session *s, char *err, size_t errlen);
void v4_session_free(ci_session *s);
int v4_forward(ci_session *s, const int *tokens, int n, float *logits, int all_logits, char *err, size_t errlen);
int v4_forward_argmax(ci_session *s, const int *tokens, int n, int *out_id, char *err, size_t errlen);
int v4_forward_batch(ci_session *const *ss, const int *tokens, int n, float *logits, char *err, size_t errlen);
int v4_forward_batch_argmax(ci_session *const *ss, const int *tokens, int n, int *out_ids, char *err, size_t errlen);

/* deepseek_v4_cache.c */
int v4_window_rows(const v4_model *d, long long max_ctx);
size_t v4_cache_bytes_per_token(const ci_model *m);
size_t v4_cache_bytes_at(const ci_model *m, long long n_tokens);
cache_snap *v4_snapshot(const ci_session *s, char *err, size_t errlen);
size_t v4_snapshot_bytes(const ci_model *m, int max_ctx, int pooled);
int v4_restore(ci_session *s, const cache_snap *snap, char *err, size_t errlen);

#endif
