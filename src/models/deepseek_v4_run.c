/* deepseek_v4_run.c — DeepSeek V4 sessions, forward and batched decode steps (the model side
 * is deepseek_v4.c; deepseek_v4_internal.h holds what both read).
 *
 * Every buffer is backend memory: each layer's window ring and compressor states, the
 * activations and scratch. Model code passes their addresses to ops and never reads or
 * writes their bytes: the chunks run through the shared runner (runner.h), which uploads
 * the token ids and positions and brings the logits back. Nothing is decided from a
 * position on the host (the compressors' entry counts follow from it inside the ops), so a
 * decode step can be recorded and replayed on a backend with graphs. */
#include "deepseek_v4_internal.h"
#include "../core/status.h"
#include <stdlib.h>
#include <string.h>

/* ---- sessions -------------------------------------------------------------------------- */

static void chunk_ops(ci_session *s, int n, int head);

/* The model's block pool: every CSA / HCA layer's compressed entries and every CSA layer's
 * indexer entries, KV_BLOCK / ratio of each a block (the entries of the block's positions), in
 * regions of one (width, ratio) each (model.h ci_pool_regions: copy on write takes the entries
 * a block's first rows complete). A ratio must be a power of two up to KV_BLOCK. */
int v4_pool_ok(const ci_model *m, char *why, size_t whylen) {
    const v4_model *d = m->impl;
    for (int l = 0; l < d->n_layers; l++) {
        const v4_layer *L = &d->layers[l];
        const int R = L->comp.ratio;
        if (L->type != L_SLIDING && (R < 1 || R > KV_BLOCK || (R & (R - 1)))) {
            if (why)
                ci_err(why, whylen, "%s: layer %d compresses %d tokens an entry, not a power of two up to %d: its cache "
                       "cannot be paged", m->family->name, l, R, KV_BLOCK);
            return 0;
        }
    }
    return 1;
}

int v4_pool_init(ci_model *m, int n_blocks, char *err, size_t errlen) {
    v4_model *d = m->impl;
    const char *fam = m->family->name;
    struct ci_pool_region spec[CI_POOL_REGIONS];
    int k = 0;
    memset(spec, 0, sizeof spec);
    if (!v4_pool_ok(m, err, errlen)) return -1;
    /* each compressor's region and its layer there: at[2 l + j] (j 1: the CSA indexer's) */
    int (*at)[2] = malloc((size_t)d->n_layers * 2 * sizeof *at);
    if (!at) return ci_err(err, errlen, "%s: out of memory", fam);
    for (int l = 0; l < d->n_layers; l++)
        for (int j = 0; j < 2; j++) {
            const v4_layer *L = &d->layers[l];
            if (L->type == L_SLIDING || (j == 1 && L->type != L_CSA)) continue;
            const cmp_block *cb = j ? &L->icomp : &L->comp;
            int lr = 0;
            while ((1 << lr) < cb->ratio) lr++;
            int r = 0;
            while (r < k && !(spec[r].row_floats == (size_t)cb->d && spec[r].rows_log2 == KV_BLOCK_LOG2 - lr)) r++;
            if (r == k) {
                if (k == CI_POOL_REGIONS) {
                    free(at);
                    return ci_err(err, errlen, "%s: more than %d kinds of compressed entries to page", fam, CI_POOL_REGIONS);
                }
                spec[k++] = (struct ci_pool_region){ NULL, (size_t)cb->d, 0, KV_BLOCK_LOG2 - lr };
            }
            at[2 * l + j][0] = r;
            at[2 * l + j][1] = spec[r].layers++;
        }
    if (ci_pool_regions(m, n_blocks, spec, k, d->pool_buf, err, errlen)) {
        free(at);
        return -1;
    }
    for (int l = 0; l < d->n_layers; l++)
        for (int j = 0; j < 2; j++) {
            v4_layer *L = &d->layers[l];
            if (L->type == L_SLIDING || (j == 1 && L->type != L_CSA)) continue;
            const int r = at[2 * l + j][0];
            float *base = d->pool_buf[r] + (size_t)at[2 * l + j][1] * ((size_t)n_blocks << spec[r].rows_log2) * spec[r].row_floats;
            if (j) L->pool_ie = base;
            else L->pool_ce = base;
        }
    free(at);
    return 0;
}

int v4_session_init(ci_session *s, char *err, size_t errlen) {
    const v4_model *d = s->m->impl;
    ci_backend *be = s->m->be;
    const char *fam = s->m->family->name;
    if (!d->placed) return ci_err(err, errlen, "%s: a model opened without weights has no sessions", fam);
    v4_cache *c = calloc(1, sizeof *c);
    if (!c) return ci_err(err, errlen, "%s: out of memory", fam);
    s->impl = c;
    const size_t U = V4_UBATCH, H = (size_t)d->H, HC = (size_t)d->HC, HD = (size_t)d->Hh * d->D, f = sizeof(float);
    int bad = 0;
    c->ring_rows = v4_window_rows(d, s->max_ctx) + V4_UBATCH;
    c->lc = calloc((size_t)d->n_layers, sizeof *c->lc);
    if (!c->lc || ci_runner_alloc(&c->run, be, V4_UBATCH, d->vocab, d->H, d->eps, V4_UBATCH, chunk_ops, &bad))
        return ci_err(err, errlen, "%s: out of memory", fam);
    int max_entries = 1, comp = 0, n_blocks = 0;
    if (ci_session_pages_init(s, &n_blocks, err, errlen)) return -1;
    c->shared = ci_session_pages_shared(s);
    for (int l = 0; l < d->n_layers; l++) {
        const v4_layer *L = &d->layers[l];
        v4_lcache *lc = &c->lc[l];
        /* on the pool a state keeps no entries (the floats before ci_v4cmp_entries) */
        lc->ring = ci_buf_alloc(be, (size_t)c->ring_rows * d->D * f, &bad);
        if (L->type != L_SLIDING)
            lc->cs = ci_buf_alloc(be, c->shared ? ci_v4cmp_entries(&L->comp.op) * f : cmp_state_bytes(&L->comp, s->max_ctx),
                                  &bad);
        if (L->type == L_CSA)
            lc->is = ci_buf_alloc(be, c->shared ? ci_v4cmp_entries(&L->icomp.op) * f : cmp_state_bytes(&L->icomp, s->max_ctx),
                                  &bad);
        if (L->type == L_CSA && cmp_state_cap(&L->icomp, s->max_ctx) > max_entries)
            max_entries = cmp_state_cap(&L->icomp, s->max_ctx);
        int cap = L->type != L_SLIDING ? cmp_state_cap(&L->comp, s->max_ctx) : 0;
        int k = L->type == L_CSA ? (d->topk < cap ? d->topk : cap) : cap;
        if (k > comp) comp = k;
    }
    if (bad)
        return ci_err(err, errlen, "%s: out of memory for a %d-token cache%s%s", fam, s->max_ctx,
                      be->last_error[0] ? ": " : "", be->last_error);
    const size_t max_keys = (size_t)v4_window_rows(d, s->max_ctx) + comp;   /* a row's window + its entries */
    const size_t wide = 2 * (size_t)(d->D > d->Di ? d->D : d->Di);
    const int topk = d->topk < max_entries ? d->topk : max_entries;
    c->sel_stride = topk > 0 ? topk : 1;
    c->max_entries = max_entries;
    c->kbuf = ci_buf_alloc(be, max_keys * d->D * f, &bad);
    c->sc = ci_buf_alloc(be, (size_t)d->Hh * max_keys * f, &bad);
    c->X = ci_buf_alloc(be, U * HC * H * f, &bad);
    c->x = ci_buf_alloc(be, U * H * f, &bad);
    c->xn = ci_buf_alloc(be, U * H * f, &bad);
    c->y = ci_buf_alloc(be, U * H * f, &bad);
    c->mix = ci_buf_alloc(be, U * (2 + HC) * HC * f, &bad);
    c->post = ci_buf_alloc(be, U * HC * f, &bad);
    c->comb = ci_buf_alloc(be, U * HC * HC * f, &bad);
    c->tmp = ci_buf_alloc(be, HC * H * f, &bad);
    c->qr = ci_buf_alloc(be, U * d->QL * f, &bad);
    c->q = ci_buf_alloc(be, U * HD * f, &bad);
    c->kvn = ci_buf_alloc(be, U * d->D * f, &bad);
    c->ao = ci_buf_alloc(be, U * HD * f, &bad);
    c->og = ci_buf_alloc(be, U * (HD / d->G) * f, &bad);
    c->oa = ci_buf_alloc(be, U * d->G * d->OL * f, &bad);
    c->ga = ci_buf_alloc(be, U * d->OL * f, &bad);
    c->pkv = ci_buf_alloc(be, U * wide * f, &bad);
    c->pg = ci_buf_alloc(be, U * wide * f, &bad);
    c->ipkv = ci_buf_alloc(be, U * wide * f, &bad);
    c->ipg = ci_buf_alloc(be, U * wide * f, &bad);
    c->iq = ci_buf_alloc(be, U * d->Hi * d->Di * f, &bad);
    c->iwt = ci_buf_alloc(be, U * d->Hi * f, &bad);
    c->iscr = ci_buf_alloc(be, ci_v4_index_scratch_floats(d->Hi, d->Di, max_entries) * f, &bad);
    c->sel = ci_buf_alloc(be, U * c->sel_stride * sizeof(int32_t), &bad);
    c->nsel = ci_buf_alloc(be, U * sizeof(int32_t), &bad);
    c->last = ci_buf_alloc(be, H * f, &bad);
    c->best_n = ci_buf_alloc(be, U * sizeof(int32_t), &bad);
    if (bad || moe_scratch_init(be, &c->moe, &d->layers[0].moe, V4_UBATCH))
        return ci_err(err, errlen, "%s: out of memory for a %d-token session%s%s", fam, s->max_ctx,
                      be->last_error[0] ? ": " : "", be->last_error);
    c->run.x = c->x;
    c->run.xn = c->xn;
    c->run.final_norm = d->final_norm;
    c->run.head = &d->lm_head;
    return 0;
}

void v4_session_free(ci_session *s) {
    const v4_model *d = s->m->impl;
    ci_backend *be = s->m->be;
    v4_cache *c = s->impl;
    ci_session_pages_free(s);
    if (!c) return;
    ci_runner_free(&c->run, be);
    if (c->lc)
        for (int l = 0; l < d->n_layers; l++) {
            ci_buf_release(be, c->lc[l].ring);
            ci_buf_release(be, c->lc[l].cs);
            ci_buf_release(be, c->lc[l].is);
        }
    free(c->lc);
    void *bufs[] = { c->kbuf, c->sc, c->X, c->x, c->xn, c->y, c->mix, c->post, c->comb, c->tmp, c->qr, c->q,
                     c->kvn, c->ao, c->og, c->oa, c->ga, c->pkv, c->pg, c->ipkv, c->ipg, c->iq, c->iwt, c->iscr, c->sel, c->nsel,
                     c->last, c->best_n };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) ci_buf_release(be, bufs[i]);
    moe_scratch_free(be, &c->moe);
    free(c);
    s->impl = NULL;
}

/* ---- attention ------------------------------------------------------------------------- */

/* Attention of rows xn = rmsnorm(x) · attn_norm [n, H] (x the collapsed streams; xn scratch) at
 * positions pos (backend memory) into c->y. tab NULL: the
 * rows are consecutive tokens of one sequence whose ring and compressor states are lc's;
 * else a decode step, row t's ring, compressor and indexer states at tab[3t], tab[3t + 1],
 * tab[3t + 2]. Every row's key goes into its ring, and its compressors take it, before any
 * row attends (backend.h: v4_compress, v4_index, v4_attend). The products of xn go in
 * norm_matmul_n launches by kind (fp8 q_a and kv; the bf16 compressors'; the indexer's weights),
 * each taking the norm in its own pass on a device. */
static void attention(ci_backend *be, const v4_model *d, const v4_layer *L, const v4_lcache *lc, float *const *tab,
                      v4_cache *c, const int32_t *pos, int n) {
    const int D = d->D, Hh = d->Hh, R = d->R;
    const rope_table *rt = L->type == L_SLIDING ? &d->rope_main : &d->rope_comp;
    const float *inv = L->type == L_SLIDING ? d->inv_main : d->inv_comp;
    /* q's latent and the shared K = V row: two products of xn */
    float *const qk_y[2] = { c->qr, c->kvn };
    const ci_mat *const qk_w[2] = { &L->q_a, &L->kv };
    be->norm_matmul_n(be, c->xn, c->x, L->attn_norm, d->eps, 2, qk_y, n, qk_w);
    /* q (and the indexer's queries): products of the normed latent */
    float *const q_y[2] = { c->q, c->iq };
    const ci_mat *const q_w[2] = { &L->q_b, &L->iq_b };
    be->norm_matmul_n(be, c->qr, c->qr, L->q_a_norm, d->eps, L->type == L_CSA ? 2 : 1, q_y, n, q_w);
    be->head_norm_rope(be, c->q, n, Hh, D, NULL, d->eps, D - R, R, pos, inv, rt->mscale, CI_ROPE_INTERLEAVED);
    /* K = V */
    be->head_norm_rope(be, c->kvn, n, 1, D, L->kv_norm, d->eps, D - R, R, pos, inv, rt->mscale, CI_ROPE_INTERLEAVED);
    /* compressed entries for the windows these tokens complete (on the block pool when the
     * call's tables say so) */
    const ci_v4cmp cop = cmp_op(&L->comp, L->pool_ce, &c->pages), iop = cmp_op(&L->icomp, L->pool_ie, &c->pages);
    if (L->type != L_SLIDING) {
        const cmp_block *const cs[2] = { &L->comp, &L->icomp };
        float *const pkv[2] = { c->pkv, c->ipkv }, *const pg[2] = { c->pg, c->ipg };
        cmp_project_norm(be, L->type == L_CSA ? 2 : 1, cs, c->xn, c->x, L->attn_norm, d->eps, n, pkv, pg);
        cmp_push(be, &cop, lc ? lc->cs : NULL, tab ? tab + 1 : NULL, 3, c->pkv, c->pg, n, pos);
    }
    if (L->type == L_CSA) {
        cmp_push(be, &iop, lc ? lc->is : NULL, tab ? tab + 2 : NULL, 3, c->ipkv, c->ipg, n, pos);
        be->rope(be, c->iq, n, d->Hi, d->Di, d->Di - R, R, pos, d->inv_comp, d->rope_comp.mscale, CI_ROPE_INTERLEAVED);
        be->norm_matmul_n(be, c->xn, c->x, L->attn_norm, d->eps, 1, &c->iwt, n, (const ci_mat *const[1]){ &L->iw });
        be->v4_index(be, c->sel, c->nsel, c->iq, c->iwt, lc ? lc->is : NULL, tab ? tab + 2 : NULL, 3, n, pos,
                     &iop, d->Hi, d->topk, c->sel_stride, c->max_entries, c->iscr);
    }
    be->v4_attend(be, c->ao, c->q, c->kvn, n, pos, lc ? lc->ring : NULL, c->ring_rows, d->W, lc ? lc->cs : NULL, tab, 3,
                  L->type == L_SLIDING ? NULL : &cop, L->type == L_CSA ? c->sel : NULL, c->nsel, c->sel_stride,
                  L->sinks, Hh, D, R, inv, rt->mscale, c->kbuf, c->sc);
    /* grouped output projection */
    be->matmul_groups(be, c->oa, c->ao, n, d->G, L->o_a_g, c->og, c->ga);
    be->matmul(be, c->y, c->oa, n, &L->o_b);
}

/* ---- forward --------------------------------------------------------------------------- */

/* The decoder over n rows whose token ids and positions are c->run.ids / c->run.pos; tabs
 * NULL: consecutive tokens of the sequence whose cache is c's, else (a decode step) layer
 * l's table of per-row states at tabs + 3·n·l (attention). The collapsed streams end in c->x. */
static void layers(ci_model *m, v4_cache *c, float *const *tabs, int n) {
    const v4_model *d = m->impl;
    ci_backend *be = m->be;
    const int H = d->H, HC = d->HC;
    be->embed(be, c->x, &d->embed, c->run.ids, n);
    be->hc_spread(be, c->X, c->x, n, HC, H);
    c->moe.ids = c->run.ids;
    for (int l = 0; l < d->n_layers; l++) {
        const v4_layer *L = &d->layers[l];
        float *const *tab = tabs ? tabs + (size_t)3 * n * l : NULL;
        hc_collapse(be, &L->hc_attn, c->X, n, c->mix, c->post, c->comb, c->x);
        attention(be, d, L, tabs ? NULL : &c->lc[l], tab, c, c->run.pos, n);
        if (d->tp) be->all_reduce(be, c->y, (int64_t)n * H);   /* the ranks' heads' parts */
        ci_dump_buf(m, "attn_out", l, c->y, n, H);
        hc_expand(be, &L->hc_attn, c->X, c->y, c->post, c->comb, n, c->tmp);
        hc_collapse(be, &L->hc_ffn, c->X, n, c->mix, c->post, c->comb, c->x);
        moe_forward_norm(be, &L->moe, &c->moe, c->y, c->xn, c->x, L->ffn_norm, d->eps, n);
        if (d->tp) be->all_reduce(be, c->y, (int64_t)n * H);   /* the ranks' expert columns' parts */
        hc_expand(be, &L->hc_ffn, c->X, c->y, c->post, c->comb, n, c->tmp);
        ci_dump_buf(m, "layer_out", l, c->X, n, HC * H);
    }
    c->moe.ids = NULL;
    hc_head(be, &d->hc_head, c->X, n, c->mix, c->x);
}

/* One chunk of n tokens of s, then the head (runner.h): ops only. */
static void chunk_ops(ci_session *s, int n, int head) {
    const v4_model *d = s->m->impl;
    v4_cache *c = s->impl;
    ci_backend *be = s->m->be;
    layers(s->m, c, NULL, n);
    if (head == CI_HEAD_NONE) return;
    be->rmsnorm(be, c->last, c->x + (size_t)(n - 1) * d->H, d->final_norm, 1, d->H, d->eps);
    be->matmul(be, ci_runner_head_dst(&c->run), c->last, 1, &d->lm_head);
    ci_runner_head_end(&c->run, be, head);
}

/* A new sequence (ci_session_reset lowers pos to 0) starts the compressors over (their
 * entry counts follow from positions); any other move of pos away from where the rings and
 * compressors are cannot be followed: only a snapshot restore goes back. */
static int v4_begin(ci_session *s, char *err, size_t errlen) {
    v4_cache *c = s->impl;
    if (s->pos == 0) c->state_pos = 0;
    if (s->pos != c->state_pos)
        return ci_err(err, errlen, "%s: session at position %d but its cache is at %d (restore a cache snapshot to go back)",
                      s->m->family->name, s->pos, c->state_pos);
    return 0;
}

static int forward_all(ci_session *s, const int *tokens, int n, float *logits, int all_logits, int *out_id, char *err,
                       size_t errlen) {
    const v4_model *d = s->m->impl;
    v4_cache *c = s->impl;
    if (ci_forward_check(s, tokens, n, d->vocab, err, errlen) || v4_begin(s, err, errlen)) return -1;
    if (n > 0 && ci_session_pages_ready(s, s->pos + n, err, errlen)) return -1;
    ci_pages pbuf;
    const ci_pages *pg = c->shared ? ci_session_chunk_pages(s, &pbuf) : NULL;
    c->pages = pg ? *pg : (ci_pages){ 0 };
    int rc = ci_runner_forward(&c->run, s, tokens, n, logits, all_logits, out_id, err, errlen);
    c->state_pos = s->pos;
    return rc;
}

int v4_forward(ci_session *s, const int *tokens, int n, float *logits, int all_logits, char *err, size_t errlen) {
    return forward_all(s, tokens, n, logits, all_logits, NULL, err, errlen);
}

int v4_forward_argmax(ci_session *s, const int *tokens, int n, int *out_id, char *err, size_t errlen) {
    return forward_all(s, tokens, n, NULL, 0, out_id, err, errlen);
}

/* ---- serving many sequences: one batched decode step --------------------------------------
 *
 * The matmuls, mHC mappings and MoE run over all rows; each row's window ring, compressors
 * and indexer are its own session's (through the step's table of state pointers), with
 * the scratch of the session of the longest context (its sizes bound every row's). Its
 * ring length serves every row: a session whose context is shorter than the window has a
 * shorter ring, but its positions are below that ring's length, so p % rows is p in both.
 * On a device the step is recorded per row count in that session's runner and replayed
 * (ci_runner_batch_step): its launches are sized by that session's scratch, which does not
 * change, and everything a row owns comes through the uploaded tables. */

/* The session whose scratch serves a step: the first of the longest context. */
static ci_session *batch_owner(ci_session *const *ss, int n) {
    ci_session *big = ss[0];
    for (int i = 1; i < n; i++)
        if (ss[i]->max_ctx > big->max_ctx) big = ss[i];
    return big;
}

/* The ops of a batch step of n rows whose ids, positions and tables are uploaded (runner.h
 * ci_batch_ops_fn). */
static void batch_ops(ci_session *const *ss, int n, float *logits, int32_t *best, float *dev_logits) {
    ci_model *m = ss[0]->m;
    v4_cache *c = batch_owner(ss, n)->impl;
    layers(m, c, c->run.tab, n);
    if (dev_logits) ci_runner_head_into(&c->run, m->be, n, dev_logits);
    else ci_runner_head_rows(&c->run, m->be, n, logits, best);
}

static int forward_rows(ci_session *const *ss, const int *tokens, int n, float *logits, int *out_ids, char *err,
                        size_t errlen) {
    ci_model *m = ss[0]->m;
    const v4_model *d = m->impl;
    v4_cache *c = batch_owner(ss, n)->impl;
    const size_t per = (size_t)3 * n;
    if (ci_runner_need_rows(&c->run, m, err, errlen) ||
        ci_runner_need_tab(&c->run, m, (size_t)d->n_layers * 3 * V4_UBATCH, err, errlen))
        return -1;
    /* on the block pool: every row's table (one for each, in positions) */
    const int shared = ((v4_cache *)ss[0]->impl)->shared;
    for (int i = 1; i < n; i++)
        if (((v4_cache *)ss[i]->impl)->shared != shared)
            return ci_err(err, errlen, "%s: a batch step mixes sessions on the model's block pool with sessions of their own",
                          m->family->name);
    c->pages = (ci_pages){ 0 };
    const int grew = shared ? ci_runner_batch_pages(&c->run, m->be, ss, n, &c->pages, err, errlen) : 0;
    if (grew < 0) return -1;
    for (int i = 0; i < n; i++) c->run.hpos[i] = ss[i]->pos;
    for (int l = 0; l < d->n_layers; l++)
        for (int i = 0; i < n; i++) {
            const v4_lcache *lc = &((v4_cache *)ss[i]->impl)->lc[l];
            float **t = c->run.htab + per * l + 3 * (size_t)i;
            t[0] = lc->ring;
            t[1] = lc->cs;
            t[2] = lc->is;
        }
    ci_runner_batch_step(&c->run, m, ss, tokens, n, per * d->n_layers, logits, c->best_n, out_ids, grew, batch_ops);
    for (int i = 0; i < n; i++) ((v4_cache *)ss[i]->impl)->state_pos = ++ss[i]->pos;
    return ci_backend_check(m, err, errlen);
}

/* logits (all rows) or, out_ids, each row's argmax taken by the backend */
static int batch_all(ci_session *const *ss, const int *tokens, int n, float *logits, int *out_ids, char *err,
                     size_t errlen) {
    if (n <= 0) return ci_err(err, errlen, "forward_batch needs at least one sequence");
    const v4_model *d = ss[0]->m->impl;
    if (ci_batch_check(ss, tokens, n, d->vocab, err, errlen)) return -1;
    for (int i = 0; i < n; i++)
        if (v4_begin(ss[i], err, errlen)) return -1;
    for (int off = 0; off < n; off += V4_UBATCH) {
        int k = n - off < V4_UBATCH ? n - off : V4_UBATCH;
        if (forward_rows(ss + off, tokens + off, k, logits ? logits + (size_t)off * d->vocab : NULL,
                         out_ids ? out_ids + off : NULL, err, errlen))
            return -1;
    }
    return 0;
}

int v4_forward_batch(ci_session *const *ss, const int *tokens, int n, float *logits, char *err, size_t errlen) {
    return batch_all(ss, tokens, n, logits, NULL, err, errlen);
}

int v4_forward_batch_argmax(ci_session *const *ss, const int *tokens, int n, int *out_ids, char *err, size_t errlen) {
    return batch_all(ss, tokens, n, NULL, out_ids, err, errlen);
}
