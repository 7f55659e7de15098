/* nemotron_h_run.c — Nemotron-H sessions, forward and batched decode steps (the model side
 * is nemotron_h.c, snapshots nemotron_h_cache.c; nemotron_h_internal.h holds what they share).
 *
 * Every buffer is backend memory: each attention layer's [k | v] rows [max_ctx, 2*n_kv*hd],
 * each Mamba2 layer's state (conv window then SSM state, f32), the activations and scratch.
 * Model code passes their addresses to ops and never reads or writes their bytes: per chunk
 * the host uploads the token ids and positions, runs ops on the placed weights, and
 * downloads the logits. A decode step (n = 1, one row of logits) makes no host decision, so
 * on a backend with graphs it is recorded once per session and replayed. A new sequence's
 * Mamba2 states are zeroed by an upload. */
#include "nemotron_h_internal.h"
#include "layer_snap.h"
#include "../core/status.h"
#include <stdlib.h>
#include <string.h>

/* ---- sessions -------------------------------------------------------------------------- */

static void chunk_ops(ci_session *s, int n, int head);

int nh_session_init(ci_session *s, char *err, size_t errlen) {
    const nh_model *d = s->m->impl;
    ci_backend *be = s->m->be;
    const char *fam = s->m->family->name;
    if (!d->dev) return ci_err(err, errlen, "%s: a model opened without weights has no sessions", fam);
    nh_session *c = calloc(1, sizeof *c);
    if (!c) return ci_err(err, errlen, "%s: out of memory", fam);
    s->impl = c;
    const size_t QD = (size_t)d->n_heads * d->hd, KD = (size_t)d->n_kv * d->hd, f = sizeof(float);
    const int rows = ci_runner_chunk_rows(s, NH_UBATCH);
    const size_t UB = (size_t)rows;
    c->kv = calloc((size_t)d->n_layers, sizeof *c->kv);
    c->state = calloc((size_t)d->n_layers, sizeof *c->state);
    c->zeros = calloc(d->state_floats ? d->state_floats : 1, f);
    int bad = 0;
    if (!c->kv || !c->state || !c->zeros ||
        ci_runner_alloc(&c->run, be, rows, d->vocab, d->H, d->eps, NH_UBATCH, chunk_ops, &bad))
        return ci_err(err, errlen, "%s: out of memory", fam);
    int64_t lrows = 0;
    if (hyb_rows_init(s, d->pool_kv, &c->kv_rows, &lrows, err, errlen)) return -1;
    size_t off = 0;   /* the attention layers' rows one after the other (layer_snap.h) */
    for (int l = 0; l < d->n_layers && !bad; l++) {
        char k = d->layers[l].kind;
        if (k == '*') {
            c->kv[l] = c->kv_rows + off * (size_t)lrows;
            off += nh_kv_floats(d, be);
        } else if (k == 'M') c->state[l] = ci_buf_alloc(be, d->state_floats * f, &bad);
    }
    if (bad)
        return ci_err(err, errlen, "%s: out of memory for a %d-token cache%s%s", fam, s->max_ctx,
                      be->last_error[0] ? ": " : "", be->last_error);
    c->x = ci_buf_alloc(be, UB * d->H * f, &bad);
    c->xn = ci_buf_alloc(be, UB * d->H * f, &bad);
    c->y = ci_buf_alloc(be, UB * d->H * f, &bad);
    c->q = ci_buf_alloc(be, (UB * QD + 1) * f, &bad);
    c->att = ci_buf_alloc(be, (UB * QD + 1) * f, &bad);
    c->k = ci_buf_alloc(be, (UB * KD + 1) * f, &bad);
    c->v = ci_buf_alloc(be, (UB * KD + 1) * f, &bad);
    c->g = ci_buf_alloc(be, (UB * (size_t)d->ff + 1) * f, &bad);
    c->last = ci_buf_alloc(be, (size_t)d->H * f, &bad);
    c->best_n = ci_buf_alloc(be, UB * sizeof(int32_t), &bad);
    if (bad || (d->any_mamba && mamba2_scratch_init(be, &c->mamba, d->any_mamba, rows)) ||
        (d->any_moe && moe_scratch_init(be, &c->moe, d->any_moe, rows)))
        return ci_err(err, errlen, "%s: out of memory for a %d-token session%s%s", fam, s->max_ctx,
                      be->last_error[0] ? ": " : "", be->last_error);
    c->run.x = c->x;
    c->run.xn = c->xn;
    c->run.final_norm = d->dev_norm_f;
    c->run.head = &d->dev_head;
    return 0;
}

void nh_session_free(ci_session *s) {
    nh_session *c = s->impl;
    if (!c) return;
    const nh_model *d = s->m->impl;
    ci_backend *be = s->m->be;
    ci_runner_free(&c->run, be);
    for (int l = 0; l < d->n_layers; l++)
        if (c->state) ci_buf_release(be, c->state[l]);
    hyb_rows_free(s, c->kv_rows);
    float *bufs[] = { c->x, c->xn, c->y, c->q, c->att, c->k, c->v, c->g, c->last };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) ci_buf_release(be, bufs[i]);
    ci_buf_release(be, c->best_n);
    if (c->mamba.proj || c->mamba.scan) mamba2_scratch_free(be, &c->mamba);
    moe_scratch_free(be, &c->moe);
    free(c->kv); free(c->state); free(c->zeros);
    free(c);
    s->impl = NULL;
}

/* A new sequence: every Mamba2 state back to zeros. */
void nh_reset_states(const nh_model *d, ci_backend *be, nh_session *c) {
    for (int l = 0; l < d->n_layers; l++)
        if (c->state[l]) be->upload(be, c->state[l], c->zeros, d->state_floats * sizeof(float));
    c->cache_pos = 0;
}


/* ---- forward --------------------------------------------------------------------------- */

/* Layer l of n rows, x += mixer(rmsnorm(x)), the norm fused into the mixer's first
 * projection(s) and the residual add into its last where the ops allow (on the CPU the bits
 * of rmsnorm, ..., add). One cache (kvs[0], the session's state `state`) for a chunk of one
 * sequence, or a batch step: tab is layer l's table in backend memory (attention: K, V per
 * row, kvs[i] the row's cache; Mamba2: conv states then SSM states), kvs / state unused;
 * pages: the attention rows' tables (NULL: an own pool's rows addressed directly).
 * The mixer's output ("mixer_out") is in xn (the CPU's product; a device leaves it
 * undefined) or, MoE, in y. */
static void layer_ops(ci_model *m, nh_session *c, int l, const attn_cache *kvs, float *state, float *const *tab,
                      const ci_pages *pages, int n) {
    const nh_model *d = m->impl;
    const nh_placed *P = &d->dev[l];
    ci_backend *be = m->be;
    const int H = d->H;
    const float *out = c->xn;
    switch (d->layers[l].kind) {
    case 'M':
        if (tab) mamba2_forward_rows(be, &P->mamba, &c->mamba, tab, tab + n, c->x, c->xn, P->norm, d->eps, n);
        else mamba2_forward(be, &P->mamba, &c->mamba, state, state + mamba2_conv_floats(&P->mamba), c->x, c->xn,
                            P->norm, d->eps, n, d->scan);
        break;
    case '*': {
        const attn_bufs ab = { .q = c->q, .k = c->k, .v = c->v, .att = c->att, .xn = c->xn, .pos = c->run.pos,
                               .kv_tab = tab, .pages = pages, .keys = c->run.keys };
        attn_forward(be, &P->attn, &ab, kvs, tab ? n : 1, c->x, P->norm, d->eps, c->x, n);  /* x += o_proj(·) */
        break;
    }
    case '-': {                                              /* x += down(relu(up rmsnorm(x))²) */
        float *const gs[1] = { c->g };
        const ci_mat *const ws[1] = { &P->up };
        be->norm_matmul_n(be, c->xn, c->x, P->norm, d->eps, 1, gs, n, ws);
        be->relu2(be, c->g, (int64_t)n * d->ff);
        ci_out_proj(be, c->x, c->g, n, &P->down, 1, c->xn, d->tp_part);
        break;
    }
    default:                                                 /* routed + shared, then the add */
        moe_forward_add_norm(be, &P->moe, &c->moe, c->x, c->y, c->xn, P->norm, d->eps, n);
        out = c->y;
        break;
    }
    ci_dump_buf(m, "mixer_out", l, out, n, H);
    ci_dump_buf(m, "layer_out", l, c->x, n, H);
}

/* The layers of one chunk of n tokens of s whose ids and positions are in c->run.ids /
 * c->run.pos, then the head (runner.h): ops only, nothing decided from a value, so a
 * decode step can be recorded and replayed. */
static void chunk_ops(ci_session *s, int n, int head) {
    ci_model *m = s->m;
    const nh_model *d = m->impl;
    nh_session *c = s->impl;
    ci_pages pbuf;
    const ci_pages *pg = ci_session_chunk_pages(s, &pbuf);   /* attention rows through the session's table */
    m->be->embed(m->be, c->x, &d->dev_embed, c->run.ids, n);
    for (int l = 0; l < d->n_layers; l++) {
        const attn_cache kv = attn_cache_kv_rows(m->be, c->kv[l], d->n_kv * d->hd, s->max_ctx);
        layer_ops(m, c, l, &kv, c->state[l], NULL, pg, n);
    }
    if (head == CI_HEAD_NONE) return;
    ci_backend *be = m->be;
    be->rmsnorm(be, c->last, c->x + (size_t)(n - 1) * d->H, d->dev_norm_f, 1, d->H, d->eps);
    be->matmul(be, ci_runner_head_dst(&c->run), c->last, 1, &d->dev_head);
    ci_runner_head_end(&c->run, be, head);
}

/* A forward of s through the runner's chunks; the Mamba2 state's position follows the
 * session's through every chunk run. */
static int forward_all(ci_session *s, const int *tokens, int n, float *logits, int all_logits, int *out_id, char *err,
                       size_t errlen) {
    const nh_model *d = s->m->impl;
    nh_session *c = s->impl;
    const char *fam = s->m->family->name;
    if (ci_forward_check(s, tokens, n, d->vocab, err, errlen)) return -1;
    /* the recurrent state cannot be rewound: a new sequence (pos 0) starts from zero, any
     * other position must be where the cache is */
    if (s->pos == 0) nh_reset_states(d, s->m->be, c);
    else if (s->pos != c->cache_pos)
        return ci_err(err, errlen, "%s: the session is at position %d but its Mamba2 state is at %d (restore a snapshot to move back)",
                      fam, s->pos, c->cache_pos);
    if (ci_session_pages_ready(s, s->pos + n, err, errlen)) return -1;
    int rc = ci_runner_forward(&c->run, s, tokens, n, logits, all_logits, out_id, err, errlen);
    c->cache_pos = s->pos;
    return rc;
}

int nh_forward(ci_session *s, const int *tokens, int n, float *logits, int all_logits, char *err, size_t errlen) {
    return forward_all(s, tokens, n, logits, all_logits, NULL, err, errlen);
}

int nh_forward_argmax(ci_session *s, const int *tokens, int n, int *out_id, char *err, size_t errlen) {
    return forward_all(s, tokens, n, NULL, 0, out_id, err, errlen);
}

/* ---- serving many sequences: one batched decode step --------------------------------------
 *
 * Row i belongs to session ss[i] at its position. The embedding, norms, attention
 * projections, relu² MLPs, MoE and head run over all n rows at once; each row's K/V go into
 * its own cache rows and it attends to them alone (rope_attend through the table of cache
 * pointers), and each row's Mamba2 layers run as a one-token step on its own conv and SSM
 * state (mamba_conv / ssd_scan through the tables of states), with ss[0]'s scratch. Every
 * op gives a row the bits it would alone, so the logits equal forward(ss[i], &tokens[i], 1)'s.
 * On a device the step is recorded per row count and replayed (ci_runner_batch_step). */
/* The ops of a batch step of n rows whose ids, positions and tables are uploaded (runner.h
 * ci_batch_ops_fn): recorded per n where the backend has graphs. */
static void batch_ops(ci_session *const *ss, int n, float *logits, int32_t *best, float *dev_logits) {
    ci_model *m = ss[0]->m;
    const nh_model *d = m->impl;
    nh_session *c = ss[0]->impl;
    ci_backend *be = m->be;
    attn_cache kvs[NH_UBATCH];
    be->embed(be, c->x, &d->dev_embed, c->run.ids, n);
    for (int l = 0; l < d->n_layers; l++) {
        char k = d->layers[l].kind;
        if (k == '*')
            for (int i = 0; i < n; i++)
                kvs[i] = attn_cache_kv_rows(be, ((nh_session *)ss[i]->impl)->kv[l], d->n_kv * d->hd, ss[i]->max_ctx);
        layer_ops(m, c, l, kvs, NULL, k == '*' || k == 'M' ? c->run.tab + (size_t)l * 2 * n : NULL, &c->bpg, n);
    }
    if (dev_logits) ci_runner_head_into(&c->run, be, n, dev_logits);
    else ci_runner_head_rows(&c->run, be, n, logits, best);
}

static int forward_rows(ci_session *const *ss, const int *tokens, int n, float *logits, int *out_ids, char *err,
                        size_t errlen) {
    ci_model *m = ss[0]->m;
    const nh_model *d = m->impl;
    nh_session *c = ss[0]->impl;
    const int grew = ci_runner_batch_begin(&c->run, m, ss, n, (size_t)d->n_layers * 2 * NH_UBATCH, &c->bpg, err, errlen);
    if (grew < 0) return -1;
    for (int l = 0; l < d->n_layers; l++)
        for (int i = 0; i < n; i++) {
            float **t = c->run.htab + (size_t)l * 2 * n;
            const nh_session *ci = ss[i]->impl;
            if (d->layers[l].kind == '*') {
                const attn_cache kv = attn_cache_kv_rows(m->be, ci->kv[l], d->n_kv * d->hd, ss[i]->max_ctx);
                t[2 * i] = kv.k;
                t[2 * i + 1] = kv.v;
            } else if (d->layers[l].kind == 'M') {
                t[i] = ci->state[l];
                t[n + i] = ci->state[l] + mamba2_conv_floats(&d->dev[l].mamba);
            }
        }
    ci_runner_batch_step(&c->run, m, ss, tokens, n, (size_t)d->n_layers * 2 * n, logits, c->best_n, out_ids, grew, batch_ops);
    for (int i = 0; i < n; i++) {
        ss[i]->pos++;
        ((nh_session *)ss[i]->impl)->cache_pos = ss[i]->pos;
    }
    return ci_backend_check(m, err, errlen);
}

static int batch_all(ci_session *const *ss, const int *tokens, int n, float *logits, int *out_ids, char *err,
                     size_t errlen) {
    if (n <= 0) return ci_err(err, errlen, "forward_batch needs at least one sequence");
    const ci_model *m = ss[0]->m;
    const nh_model *d = m->impl;
    const char *fam = m->family->name;
    if (ci_batch_check(ss, tokens, n, d->vocab, err, errlen)) return -1;
    for (int i = 0; i < n; i++) {
        const nh_session *ci = ss[i]->impl;
        if (ss[i]->pos != 0 && ss[i]->pos != ci->cache_pos)
            return ci_err(err, errlen, "%s: sequence %d is at position %d but its Mamba2 state is at %d (restore a snapshot to move back)",
                          fam, i, ss[i]->pos, ci->cache_pos);
    }
    for (int i = 0; i < n; i++)   /* a new sequence starts from zero state, as nh_forward */
        if (ss[i]->pos == 0) nh_reset_states(d, m->be, ss[i]->impl);
    for (int off = 0; off < n; off += NH_UBATCH) {
        int k = n - off < NH_UBATCH ? n - off : NH_UBATCH;
        if (forward_rows(ss + off, tokens + off, k, logits ? logits + (size_t)off * d->vocab : NULL,
                         out_ids ? out_ids + off : NULL, err, errlen))
            return -1;
    }
    return 0;
}

int nh_forward_batch(ci_session *const *ss, const int *tokens, int n, float *logits, char *err, size_t errlen) {
    return batch_all(ss, tokens, n, logits, NULL, err, errlen);
}

int nh_forward_batch_argmax(ci_session *const *ss, const int *tokens, int n, int *out_ids, char *err, size_t errlen) {
    return batch_all(ss, tokens, n, NULL, out_ids, err, errlen);
}
