/* deepseek_run.c — the running half of the DeepSeek decoder (deepseek.h; the model is bound
 * and placed by deepseek.c): the session's caches and scratch in backend memory, the forward
 * of a chunk as backend ops on uploaded ids and positions (a decode step recorded as a graph
 * where the backend has graphs), batched decode steps over many sessions through tables of
 * cache pointers, and cache rows out and in. */
#include "../core/status.h"
#include "deepseek.h"
#include "deepseek_internal.h"
#include "runner.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The session: every buffer in backend memory but the host staging (the runner's hpos and htab).
 * The caches are paged (model.h): position p of layer l is row ci_session_page_row(s, p) of
 * layer l's lrows rows, in the model's shared pool or the session's own (own_kv). */
typedef struct {
    float *lat_cache;            /* [n_layers][lrows][lat] */
    float *key_cache;            /* [n_layers][lrows][kdim] (indexed) */
    int64_t lrows;               /* rows per layer: the pool's blocks * KV_BLOCK */
    int own_kv;
    ci_pages bpg;                /* a batch step's (ci_runner_batch_pages: a table per row) */
    float *x, *xn, *y;           /* [run.ub, H] */
    float *g, *u;                /* [run.ub, max(ff, shared_ff)] */
    float *last;                 /* [H] the last row, final-normed */
    ci_runner run;               /* the chunk loop: ids / positions, head buffers, decode graphs,
                                  * recorded batch steps */
    int32_t *best_n;             /* [run.ub] per-row argmax of a forward_batch_argmax step */
    mla_scratch mla;
    dsa_scratch dsa;
    moe_scratch moe;
} ds_cache;

static void chunk_ops(ci_session *s, int n, int head);

int ds_pool_init(ci_model *m, int n_blocks, char *err, size_t errlen) {
    ds_model *d = m->impl;
    return ci_pool_buffers(m, n_blocks, &d->pool_lat, (size_t)d->lat, d->n_layers, &d->pool_key, (size_t)d->kdim,
                           d->indexed ? d->n_layers : 0, err, errlen);
}

int ds_session_init(ci_session *s, char *err, size_t errlen) {
    const ds_model *d = s->m->impl;
    ci_backend *be = s->m->be;
    const char *fam = s->m->family->name;
    ds_cache *c = calloc(1, sizeof *c);
    if (!c) return ci_err(err, errlen, "%s: out of memory", fam);
    s->impl = c;
    const mla_layer *A = &d->layers[0].attn;
    const int ub = ci_runner_chunk_rows(s, UBATCH);
    int n_blocks = 0;
    if (ci_session_pages_init(s, &n_blocks, err, errlen)) return -1;
    c->lrows = (int64_t)n_blocks * KV_BLOCK;
    size_t rows = (size_t)d->n_layers * (size_t)c->lrows, U = (size_t)ub, f = sizeof(float);
    int wide = d->ff > d->shared_ff ? d->ff : d->shared_ff > 0 ? d->shared_ff : 1, bad = 0;
    if (ci_runner_alloc(&c->run, be, ub, d->vocab, d->H, d->eps, UBATCH, chunk_ops, &bad))
        return ci_err(err, errlen, "%s: out of memory", fam);
    if (s->own_pool) {
        c->lat_cache = ci_buf_alloc(be, rows * (size_t)d->lat * f, &bad);
        if (d->indexed) c->key_cache = ci_buf_alloc(be, rows * (size_t)d->kdim * f, &bad);
        c->own_kv = 1;
    } else {
        c->lat_cache = d->pool_lat;
        c->key_cache = d->pool_key;
    }
    if (bad)
        return ci_err(err, errlen, "%s: out of memory for a %d-token cache (%zu MiB)%s%s", fam, s->max_ctx,
                      rows * (size_t)(d->lat + d->kdim) * f >> 20, be->last_error[0] ? ": " : "", be->last_error);
    c->x = ci_buf_alloc(be, U * d->H * f, &bad);
    c->xn = ci_buf_alloc(be, U * d->H * f, &bad);
    c->y = ci_buf_alloc(be, U * d->H * f, &bad);
    c->g = ci_buf_alloc(be, U * wide * f, &bad);
    c->u = ci_buf_alloc(be, U * wide * f, &bad);
    c->last = ci_buf_alloc(be, (size_t)d->H * f, &bad);
    c->best_n = ci_buf_alloc(be, U * sizeof(int32_t), &bad);
    if (bad || mla_scratch_init(be, &c->mla, A, ub) ||
        (d->indexed && dsa_scratch_init(be, &c->dsa, &d->layers[0].idx, ub)) ||
        (d->any_moe && moe_scratch_init(be, &c->moe, d->any_moe, ub)))
        return ci_err(err, errlen, "%s: out of memory for the session's scratch%s%s", fam,
                      be->last_error[0] ? ": " : "", be->last_error);
    c->run.x = c->x;
    c->run.xn = c->xn;
    c->run.final_norm = d->dev_final_norm;
    c->run.head = &d->dev_head;
    return 0;
}

void ds_session_free(ci_session *s) {
    ds_cache *c = s->impl;
    if (!c) return;
    ci_backend *be = s->m->be;
    ci_runner_free(&c->run, be);
    if (c->own_kv) {
        ci_buf_release(be, c->lat_cache);
        ci_buf_release(be, c->key_cache);
    }
    float *bufs[] = { c->x, c->xn, c->y, c->g, c->u, c->last };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) ci_buf_release(be, bufs[i]);
    ci_buf_release(be, c->best_n);
    ci_session_pages_free(s);
    mla_scratch_free(be, &c->mla);
    if (c->dsa.q || c->dsa.w || c->dsa.k) dsa_scratch_free(be, &c->dsa);
    moe_scratch_free(be, &c->moe);
    free(c);
    s->impl = NULL;
}

/* ---- forward: backend ops on the session's buffers ----------------------------------------- */

/* x[n, H] += the layer's FFN of rmsnorm(x): MoE (+ shared experts) or the dense SwiGLU MLP
 * (matmul_swiglu, then matmul_acc with y as the product's scratch). */
static void ffn(ci_backend *be, const ds_model *d, ds_cache *c, const ds_placed *P, int is_moe, int has_shared, int n) {
    if (is_moe && has_shared && d->tp_part) {
        /* a tensor-parallel rank: its routed and shared experts' parts summed first, then one
         * all-reduce (the residual added on rank 0) */
        moe_forward_norm(be, &P->moe, &c->moe, c->y, c->xn, c->x, P->ffn_norm, d->eps, n);
        if (d->tp_part == CI_TP_REST) be->copy(be, c->x, c->y, (size_t)n * (size_t)d->H * sizeof(float));
        else be->add(be, c->x, c->y, (int64_t)n * d->H);
        be->matmul_swiglu(be, c->g, c->u, c->xn, n, &P->wg, &P->wu);
        be->matmul_acc(be, c->x, c->g, n, &P->wd, c->y);
        be->all_reduce(be, c->x, (int64_t)n * d->H);
        return;
    }
    if (is_moe) {
        /* x += the routed and the shared experts' sums in one launch on a device (one row) */
        if (has_shared && moe_fold_shared_add_norm(be, &P->moe, &c->moe, c->x, c->xn, P->ffn_norm, d->eps, n, &P->wg,
                                                   &P->wu, &P->wd))
            return;
        /* x += the routed experts' sum; xn = the normed rows (the router's launch writes them) */
        moe_forward_add_norm(be, &P->moe, &c->moe, c->x, c->y, c->xn, P->ffn_norm, d->eps, n);
        if (!has_shared) return;
        be->matmul_swiglu(be, c->g, c->u, c->xn, n, &P->wg, &P->wu);
    } else {
        be->norm_matmul_swiglu(be, c->xn, c->x, P->ffn_norm, d->eps, c->g, c->u, n, &P->wg, &P->wu);
    }
    ci_out_proj(be, c->x, c->g, n, &P->wd, 1, c->y, d->tp_part);
}

/* The layers over the n rows of c->x whose positions are in c->run.pos, the caches paged by pg:
 * one sequence's (tab NULL) or, a batch step, row i's caches of layer l in the table: its
 * latent cache at tab[l * n + i], or with the indexer its latent and key caches at
 * tab[l * 2n + 2i] and tab[l * 2n + 2i + 1]. */
static void layers(ci_model *m, ds_cache *c, float *const *tab, const ci_pages *pg, int max_ctx, int n) {
    const ds_model *d = m->impl;
    ci_backend *be = m->be;
    const int H = d->H;
    const size_t lat_layer = (size_t)c->lrows * d->lat, key_layer = (size_t)c->lrows * d->kdim;
    for (int l = 0; l < d->n_layers; l++) {
        const ds_placed *P = &d->dev[l];
        const ds_layer *L = &d->layers[l];
        float *lc = tab ? NULL : c->lat_cache + (size_t)l * lat_layer;
        float *const *lt = tab ? tab + (size_t)l * n * (d->indexed ? 2 : 1) : NULL;
        /* without the indexer the latent rows are stored as they are made (dsa_attend stores its own) */
        const int stored = mla_project(be, &P->attn, d->dev_inv_freq, d->rope.mscale, &c->mla, c->xn, c->x,
                                       P->attn_norm, d->indexed, c->run.pos, n, d->eps, d->indexed ? NULL : lc,
                                       d->indexed ? NULL : lt, pg);
        if (d->indexed)
            dsa_attend(be, &P->attn, &P->idx, d->dev_inv_freq, d->rope.mscale, &c->mla, &c->dsa, lc,
                       tab ? NULL : c->key_cache + (size_t)l * key_layer, lt, c->xn, c->run.pos, n, max_ctx, pg);
        else
            mla_attend(be, &P->attn, &c->mla, lc, lt, c->run.pos, n, max_ctx, pg, stored);
        mla_output_add(be, &P->attn, &c->mla, c->x, c->y, n);   /* x += o_proj(·); y: the CPU's product */
        ci_dump_buf(m, "attn_out", l, c->y, n, H);
        ffn(be, d, c, P, L->is_moe, L->has_shared, n);
        ci_dump_buf(m, "layer_out", l, c->x, n, H);
    }
}

/* The ops of one chunk of n rows whose ids and positions are uploaded: nothing read back and
 * nothing decided from a position, so a decode step can be recorded once and replayed at any
 * later position. head: CI_HEAD_LAST leaves the last row's logits in c->run.logits1, CI_HEAD_ARGMAX
 * also their argmax in c->run.best. */
static void chunk_ops(ci_session *s, int n, int head) {
    ci_model *m = s->m;
    const ds_model *d = m->impl;
    ds_cache *c = s->impl;
    ci_backend *be = m->be;
    ci_pages pbuf;
    const ci_pages *pg = ci_session_chunk_pages(s, &pbuf);   /* every row through the session's table */
    be->embed(be, c->x, &d->dev_embed, c->run.ids, n);
    layers(m, c, NULL, pg, s->max_ctx, n);
    if (head == CI_HEAD_NONE) return;
    be->rmsnorm(be, c->last, c->x + (size_t)(n - 1) * d->H, d->dev_final_norm, 1, d->H, d->eps);
    be->matmul(be, ci_runner_head_dst(&c->run), c->last, 1, &d->dev_head);
    ci_runner_head_end(&c->run, be, head);
}

int ds_forward(ci_session *s, const int *tokens, int n, float *logits, int all_logits, char *err, size_t errlen) {
    if (n > 0 && ci_session_pages_ready(s, s->pos + n, err, errlen)) return -1;
    return ci_runner_forward(&((ds_cache *)s->impl)->run, s, tokens, n, logits, all_logits, NULL, err, errlen);
}

int ds_forward_argmax(ci_session *s, const int *tokens, int n, int *out_id, char *err, size_t errlen) {
    if (n > 0 && ci_session_pages_ready(s, s->pos + n, err, errlen)) return -1;
    return ci_runner_forward(&((ds_cache *)s->impl)->run, s, tokens, n, NULL, 0, out_id, err, errlen);
}

/* ---- serving many sequences: batched decode step, cache rows out and in ------------------
 *
 * One decode step for n sessions: row i of every activation belongs to ss[i] at position
 * ss[i]->pos. Projections, the absorbed-query and W_UV products and the FFN / MoE run over
 * all n rows at once; each row's latent (and indexer-key) row goes to its own session's
 * caches (kv_store_paged) and attends against them (mla_attend / dsa_attend with the table),
 * through a table of cache pointers uploaded with the positions, each row's block table beside
 * it (ci_runner_batch_pages). Scratch and tables are ss[0]'s. On a device the step's ops end
 * in backend memory (the logits or each row's argmax) and are recorded per row count and
 * replayed (ci_runner_batch_step). */
/* The ops of a batch step of n rows whose ids, positions and tables are uploaded (runner.h
 * ci_batch_ops_fn): recorded per n where the backend has graphs. */
static void batch_ops(ci_session *const *ss, int n, float *logits, int32_t *best, float *dev_logits) {
    ci_model *m = ss[0]->m;
    const ds_model *d = m->impl;
    ds_cache *c = ss[0]->impl;
    ci_backend *be = m->be;
    int max_ctx = 0;
    for (int i = 0; i < n; i++) max_ctx = ss[i]->max_ctx > max_ctx ? ss[i]->max_ctx : max_ctx;
    be->embed(be, c->x, &d->dev_embed, c->run.ids, n);
    layers(m, c, c->run.tab, &c->bpg, max_ctx, n);
    if (dev_logits) ci_runner_head_into(&c->run, be, n, dev_logits);
    else ci_runner_head_rows(&c->run, be, n, logits, best);
}

static int forward_rows(ci_session *const *ss, const int *tokens, int n, float *logits, int *out_ids, char *err,
                        size_t errlen) {
    ci_model *m = ss[0]->m;
    const ds_model *d = m->impl;
    ds_cache *c = ss[0]->impl;
    const int per = d->indexed ? 2 : 1;   /* table entries per row and layer */
    size_t count = (size_t)d->n_layers * per * UBATCH;
    const int grew = ci_runner_batch_begin(&c->run, m, ss, n, count, &c->bpg, err, errlen);
    if (grew < 0) return -1;
    for (int i = 0; i < n; i++) {
        const ds_cache *ci = ss[i]->impl;
        for (int l = 0; l < d->n_layers; l++) {
            float **row = c->run.htab + ((size_t)l * n + i) * per;
            row[0] = ci->lat_cache + (size_t)l * ci->lrows * d->lat;
            if (d->indexed) row[1] = ci->key_cache + (size_t)l * ci->lrows * d->kdim;
        }
    }
    ci_runner_batch_step(&c->run, m, ss, tokens, n, (size_t)d->n_layers * per * n, logits, c->best_n, out_ids, grew,
                         batch_ops);
    for (int i = 0; i < n; i++) ss[i]->pos++;
    return ci_backend_check(m, err, errlen);
}

static int batch_all(ci_session *const *ss, const int *tokens, int n, float *logits, int *out_ids, char *err,
                     size_t errlen) {
    if (n <= 0) return ci_err(err, errlen, "forward_batch needs at least one sequence");
    const ci_model *m = ss[0]->m;
    const ds_model *d = m->impl;
    if (ci_batch_check(ss, tokens, n, d->vocab, err, errlen)) return -1;
    for (int off = 0; off < n; off += UBATCH) {
        int k = n - off < UBATCH ? n - off : UBATCH;
        if (forward_rows(ss + off, tokens + off, k, logits ? logits + (size_t)off * d->vocab : NULL,
                         out_ids ? out_ids + off : NULL, err, errlen))
            return -1;
    }
    return 0;
}

int ds_forward_batch(ci_session *const *ss, const int *tokens, int n, float *logits, char *err, size_t errlen) {
    return batch_all(ss, tokens, n, logits, NULL, err, errlen);
}

int ds_forward_batch_argmax(ci_session *const *ss, const int *tokens, int n, int *out_ids, char *err, size_t errlen) {
    return batch_all(ss, tokens, n, NULL, out_ids, err, errlen);
}

/* ---- cache rows out and in (prefix reuse in the server) ----------------------------------
 *
 * Both caches' row p depends only on tokens 0..p, so rows [0, n) can be copied out and back.
 * Blob layout, position-major (registry.h: a prefix of an export is the export of the
 * prefix): for each position, for each layer, its latent row [lat] then (indexed) its key
 * row [kdim]; n · cache_bytes_per_token bytes in all. Per layer, cache and block, the rows
 * are one range of backend memory: one download (upload) of it through a host staging
 * buffer, scattered into (gathered from) the blob's rows. */

/* One layer's rows of positions [p0, p0 + n) (within one block) of one cache (width floats
 * each, at cache_at), to or from the blob, whose rows of this layer and cache start at `off`
 * floats and are `step` floats apart. */
static void move_rows(ci_backend *be, int out, float *cache_at, float *blob, size_t off, size_t step, int p0, int n,
                      int width, float *stage) {
    size_t bytes = (size_t)width * sizeof(float);
    if (out) {
        be->download(be, stage, cache_at, (size_t)n * bytes);
        for (int p = 0; p < n; p++) memcpy(blob + off + (size_t)(p0 + p) * step, stage + (size_t)p * width, bytes);
    } else {
        for (int p = 0; p < n; p++) memcpy(stage + (size_t)p * width, blob + off + (size_t)(p0 + p) * step, bytes);
        be->upload(be, cache_at, stage, (size_t)n * bytes);
    }
}

static int cache_move(ci_session *s, int out, int n, float *blob, char *err, size_t errlen) {
    const ds_model *d = s->m->impl;
    ds_cache *c = s->impl;
    ci_backend *be = s->m->be;
    const size_t step = (size_t)d->n_layers * (size_t)(d->lat + d->kdim);   /* floats per position */
    int wide = d->lat > d->kdim ? d->lat : d->kdim;
    float *stage = malloc((size_t)KV_BLOCK * (size_t)wide * sizeof(float));
    if (!stage) return ci_err(err, errlen, "%s: out of memory for %d cache rows", s->m->family->name, n);
    for (int p0 = 0; p0 < n; p0 += KV_BLOCK) {
        const int k = n - p0 < KV_BLOCK ? n - p0 : KV_BLOCK;
        const size_t r0 = (size_t)ci_session_page_row(s, p0);   /* the block's rows are consecutive */
        for (int l = 0; l < d->n_layers; l++) {
            size_t row0 = (size_t)l * (size_t)c->lrows + r0, off = (size_t)l * (size_t)(d->lat + d->kdim);
            move_rows(be, out, c->lat_cache + row0 * d->lat, blob, off, step, p0, k, d->lat, stage);
            if (d->indexed)
                move_rows(be, out, c->key_cache + row0 * d->kdim, blob, off + d->lat, step, p0, k, d->kdim, stage);
        }
    }
    if (!out) be->download(be, stage, c->lat_cache, sizeof(float));   /* the uploads done before stage goes */
    free(stage);
    return ci_backend_check(s->m, err, errlen);
}

int ds_cache_export(const ci_session *s, int n, void *dst, char *err, size_t errlen) {
    if (n < 0 || n > s->pos) return ci_err(err, errlen, "%s: cache export of %d rows, %d held", s->m->family->name, n, s->pos);
    return cache_move((ci_session *)s, 1, n, dst, err, errlen);
}

int ds_cache_import(ci_session *s, int n, const void *src, char *err, size_t errlen) {
    if (n < 0 || n > s->max_ctx)
        return ci_err(err, errlen, "%s: cache import of %d rows into a %d-token session", s->m->family->name, n, s->max_ctx);
    ci_session_truncate(s, 0);   /* fresh blocks: a held one may be shared */
    if (ci_session_pages_ready(s, n, err, errlen)) return -1;
    if (cache_move(s, 0, n, (float *)src, err, errlen)) return -1;
    s->pos = n;
    return 0;
}
