/* lfm2_run.c — LFM2 / LFM2-MoE sessions, forward, batched decode steps and cache snapshots
 * (the model side is lfm2.c; lfm2_internal.h holds what both read).
 *
 * Every buffer is backend memory: each attention layer's [k | v] rows [max_ctx, 2*n_kv*hd],
 * each conv layer's state [K-1, H], the activations and scratch. Model code passes their
 * addresses to ops and never reads or writes their bytes: per chunk the host uploads the
 * token ids and positions, runs ops on the placed weights, and downloads the logits. A
 * decode step (n = 1, one row of logits) makes no host decision, so on a backend with graphs
 * it is recorded once per session and replayed. A new sequence's conv states are zeroed by
 * an upload; snapshots (lfm2_cache.c) move the cache through download / upload. */
#include "lfm2_internal.h"
#include "layer_snap.h"
#include "../core/status.h"
#include <stdlib.h>
#include <string.h>


/* ---- sessions -------------------------------------------------------------------------- */

static void chunk_ops(ci_session *s, int n, int head);

int lfm2_session_init(ci_session *s, char *err, size_t errlen) {
    const lfm2_model *d = s->m->impl;
    ci_backend *be = s->m->be;
    const char *fam = s->m->family->name;
    if (!d->dev) return ci_err(err, errlen, "%s: a model opened without weights has no sessions", fam);
    lfm2_session *c = calloc(1, sizeof *c);
    if (!c) return ci_err(err, errlen, "%s: out of memory", fam);
    s->impl = c;
    const size_t QD = (size_t)d->n_heads * d->hd, KD = (size_t)d->n_kv * d->hd, f = sizeof(float);
    const int rows = ci_runner_chunk_rows(s, LFM2_UBATCH);
    const size_t UB = (size_t)rows;
    c->kv = calloc((size_t)d->n_layers, sizeof *c->kv);
    c->state = calloc((size_t)d->n_layers, sizeof *c->state);
    c->zeros = calloc(lfm2_state_floats(d) ? lfm2_state_floats(d) : 1, f);
    int bad = 0;
    if (!c->kv || !c->state || !c->zeros ||
        ci_runner_alloc(&c->run, be, rows, d->vocab, d->H, d->eps, LFM2_UBATCH, chunk_ops, &bad))
        return ci_err(err, errlen, "%s: out of memory", fam);
    int64_t lrows = 0;
    if (hyb_rows_init(s, d->pool_kv, &c->kv_rows, &lrows, err, errlen)) return -1;
    size_t off = 0;   /* the attention layers' rows one after the other (layer_snap.h) */
    for (int l = 0; l < d->n_layers && !bad; l++) {
        if (d->layers[l].is_attn) {
            c->kv[l] = c->kv_rows + off * (size_t)lrows;
            off += lfm2_kv_floats(d, be);
        } else if (lfm2_state_floats(d)) c->state[l] = ci_buf_alloc(be, lfm2_state_floats(d) * f, &bad);
    }
    if (bad)
        return ci_err(err, errlen, "%s: out of memory for a %d-token cache%s%s", fam, s->max_ctx,
                      be->last_error[0] ? ": " : "", be->last_error);
    size_t aw = QD > (size_t)d->H ? QD : (size_t)d->H, ff = (size_t)(d->ff > 0 ? d->ff : 1);
    c->x = ci_buf_alloc(be, UB * d->H * f, &bad);
    c->xn = ci_buf_alloc(be, UB * d->H * f, &bad);
    c->q = ci_buf_alloc(be, UB * QD * f, &bad);
    c->k = ci_buf_alloc(be, UB * KD * f, &bad);
    c->v = ci_buf_alloc(be, UB * KD * f, &bad);
    c->att = ci_buf_alloc(be, UB * aw * f, &bad);
    c->g = ci_buf_alloc(be, UB * ff * f, &bad);
    c->u = ci_buf_alloc(be, UB * ff * f, &bad);
    c->last = ci_buf_alloc(be, (size_t)d->H * f, &bad);
    const shortconv *sc0 = NULL;
    for (int l = 0; l < d->n_layers && !sc0; l++)
        if (!d->layers[l].is_attn) sc0 = &d->dev[l].conv;
    if (bad || (sc0 && sc_scratch_init(be, &c->sc, sc0, rows)) ||
        (d->any_moe && moe_scratch_init(be, &c->moe, d->any_moe, rows)))
        return ci_err(err, errlen, "%s: out of memory for a %d-token session%s%s", fam, s->max_ctx,
                      be->last_error[0] ? ": " : "", be->last_error);
    c->rows = rows;
    c->run.x = c->x;
    c->run.xn = c->xn;
    c->run.final_norm = d->dev_final_norm;
    c->run.head = &d->dev_head;
    return 0;
}

void lfm2_session_free(ci_session *s) {
    lfm2_session *c = s->impl;
    if (!c) return;
    const lfm2_model *d = s->m->impl;
    ci_backend *be = s->m->be;
    ci_runner_free(&c->run, be);
    for (int l = 0; l < d->n_layers; l++)
        if (c->state) ci_buf_release(be, c->state[l]);
    hyb_rows_free(s, c->kv_rows);
    float *bufs[] = { c->x, c->xn, c->q, c->k, c->v, c->att, c->g, c->u, c->last };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) ci_buf_release(be, bufs[i]);
    sc_scratch_free(be, &c->sc);
    moe_scratch_free(be, &c->moe);
    free(c->kv); free(c->state); free(c->zeros);
    free(c);
    s->impl = NULL;
}

/* A new sequence: every conv state back to zeros. */
static void reset_states(const lfm2_model *d, ci_backend *be, lfm2_session *c) {
    for (int l = 0; l < d->n_layers; l++)
        if (c->state[l]) be->upload(be, c->state[l], c->zeros, lfm2_state_floats(d) * sizeof(float));
    c->cache_pos = 0;
}

/* ---- forward --------------------------------------------------------------------------- */

/* The attention block's buffers (kv_tab: a batch step's table of this layer, or NULL; pages:
 * the rows' tables, or NULL: an own pool's rows addressed directly). */
static attn_bufs attn_scratch(const lfm2_session *c, float *const *kv_tab, const ci_pages *pages) {
    return (attn_bufs){ .q = c->q, .k = c->k, .v = c->v, .att = c->att, .xn = c->xn, .pos = c->run.pos, .kv_tab = kv_tab,
                        .pages = pages };
}

/* The MLP block's buffers: its output (the down product or the MoE's) goes to att. */
static ffn_bufs ffn_scratch(lfm2_session *c) { return (ffn_bufs){ c->xn, c->g, c->u, c->att, &c->moe }; }

/* Layer l's [k | v] cache rows of a session. */
static attn_cache layer_kv(const lfm2_model *d, const ci_session *s, int l) {
    const lfm2_session *c = s->impl;
    return attn_cache_kv_rows(s->m->be, c->kv[l], d->n_kv * d->hd, s->max_ctx);
}

/* The layers of one chunk of n tokens of s whose ids and positions are in c->run.ids /
 * c->run.pos, then the head (runner.h): ops only, nothing decided from a value, so a decode
 * step can be recorded and replayed. */
static void chunk_ops(ci_session *s, int n, int head) {
    ci_model *m = s->m;
    const lfm2_model *d = m->impl;
    lfm2_session *c = s->impl;
    ci_backend *be = m->be;
    const int H = d->H;
    ci_pages pbuf;
    attn_bufs ab = attn_scratch(c, NULL, ci_session_chunk_pages(s, &pbuf));
    ab.keys = c->run.keys;
    const ffn_bufs fb = ffn_scratch(c);
    be->embed(be, c->x, &d->dev_embed, c->run.ids, n);
    ci_dump_buf(m, "embed", -1, c->x, n, H);
    for (int l = 0; l < d->n_layers; l++) {
        const lfm2_placed *P = &d->dev[l];
        if (d->layers[l].is_attn) {
            const attn_cache kv = layer_kv(d, s, l);
            attn_forward(be, &P->attn, &ab, &kv, 1, c->x, P->op_norm, d->eps, c->x, n);  /* x += out_proj(·) */
            ci_dump_buf(m, "attn_out", l, c->xn, n, H);   /* the CPU's out_proj product (matmul_acc's scratch) */
        } else {
            sc_forward_add_norm(be, &P->conv, &c->sc, c->state[l], NULL, c->x, c->xn, P->op_norm, d->eps, n);
            ci_dump_buf(m, "conv_out", l, c->xn, n, H);   /* the CPU's out_proj product (matmul_acc's scratch) */
        }
        ffn_forward(be, &P->ffn, &fb, c->x, n);              /* x += mlp(ffn_norm(x)) or the MoE's */
        ci_dump_buf(m, "layer_out", l, c->x, n, H);
    }
    if (head == CI_HEAD_NONE) return;
    be->rmsnorm(be, c->last, c->x + (size_t)(n - 1) * H, d->dev_final_norm, 1, H, d->eps);
    be->matmul(be, ci_runner_head_dst(&c->run), c->last, 1, &d->dev_head);
    ci_runner_head_end(&c->run, be, head);
}

/* A forward of s: a new sequence's conv states start at zero; the cache position follows
 * the session's through every chunk the runner ran. */
static int forward_all(ci_session *s, const int *tokens, int n, float *logits, int all_logits, int *out_id, char *err,
                       size_t errlen) {
    const lfm2_model *d = s->m->impl;
    lfm2_session *c = s->impl;
    const char *fam = s->m->family->name;
    if (ci_forward_check(s, tokens, n, d->vocab, err, errlen)) return -1;
    if (s->pos == 0) reset_states(d, s->m->be, c);      /* a new sequence: conv states start at zero */
    else if (c->cache_pos != s->pos)
        return ci_err(err, errlen, "%s: session position %d and cache position %d disagree", fam, s->pos, c->cache_pos);
    if (ci_session_pages_ready(s, s->pos + n, err, errlen)) return -1;
    int rc = ci_runner_forward(&c->run, s, tokens, n, logits, all_logits, out_id, err, errlen);
    c->cache_pos = s->pos;
    return rc;
}

int lfm2_forward(ci_session *s, const int *tokens, int n, float *logits, int all_logits, char *err, size_t errlen) {
    return forward_all(s, tokens, n, logits, all_logits, NULL, err, errlen);
}

int lfm2_forward_argmax(ci_session *s, const int *tokens, int n, int *out_id, char *err, size_t errlen) {
    return forward_all(s, tokens, n, NULL, 0, out_id, err, errlen);
}

/* ---- serving many sequences: one batched decode step --------------------------------------
 *
 * Row i belongs to session ss[i] at its position. The embedding, norms, attention
 * projections (RoPE at each row's own position), the MLP / MoE and the head run over all n
 * rows at once; each row's K/V go into its own cache rows and it attends to them alone
 * (rope_attend through the table of cache pointers), and each row's short convolution runs
 * as a one-token step on its own conv state (shortconv through the table of states), with
 * ss[0]'s scratch. Every op gives a row the bits it would alone, so the logits equal
 * forward(ss[i], &tokens[i], 1)'s. On a device the step is recorded per row count and
 * replayed (ci_runner_batch_step). */
/* The ops of a batch step of n rows whose ids, positions and tables are uploaded (runner.h
 * ci_batch_ops_fn): recorded per n where the backend has graphs. */
static void batch_ops(ci_session *const *ss, int n, float *logits, int32_t *best, float *dev_logits) {
    ci_model *m = ss[0]->m;
    const lfm2_model *d = m->impl;
    lfm2_session *c = ss[0]->impl;
    ci_backend *be = m->be;
    attn_cache kvs[LFM2_UBATCH];
    const ffn_bufs fb = ffn_scratch(c);
    be->embed(be, c->x, &d->dev_embed, c->run.ids, n);
    for (int l = 0; l < d->n_layers; l++) {
        const lfm2_placed *P = &d->dev[l];
        float *const *tab = c->run.tab + (size_t)l * 2 * n;
        if (d->layers[l].is_attn) {   /* row i's k / v into its own cache rows, and it attends to them alone */
            const attn_bufs ab = attn_scratch(c, tab, &c->bpg);
            for (int i = 0; i < n; i++) kvs[i] = layer_kv(d, ss[i], l);
            attn_forward(be, &P->attn, &ab, kvs, n, c->x, P->op_norm, d->eps, c->x, n);
        } else {
            sc_forward_add_norm(be, &P->conv, &c->sc, NULL, tab, c->x, c->xn, P->op_norm, d->eps, n);
        }
        ffn_forward(be, &P->ffn, &fb, c->x, n);
    }
    if (dev_logits) ci_runner_head_into(&c->run, be, n, dev_logits);
    else ci_runner_head_rows(&c->run, be, n, logits, best);
}

static int forward_rows(ci_session *const *ss, const int *tokens, int n, float *logits, char *err, size_t errlen) {
    ci_model *m = ss[0]->m;
    const lfm2_model *d = m->impl;
    lfm2_session *c = ss[0]->impl;
    const int grew = ci_runner_batch_begin(&c->run, m, ss, n, (size_t)d->n_layers * 2 * LFM2_UBATCH, &c->bpg, err, errlen);
    if (grew < 0) return -1;
    /* layer l's table: attention rows' K, V pointers at [2i], [2i + 1]; conv rows' states at [i] */
    for (int l = 0; l < d->n_layers; l++)
        for (int i = 0; i < n; i++) {
            float **t = c->run.htab + (size_t)l * 2 * n;
            if (d->layers[l].is_attn) {
                attn_cache kv = layer_kv(d, ss[i], l);
                t[2 * i] = kv.k;
                t[2 * i + 1] = kv.v;
            } else {
                t[i] = ((lfm2_session *)ss[i]->impl)->state[l];
            }
        }
    ci_runner_batch_step(&c->run, m, ss, tokens, n, (size_t)d->n_layers * 2 * n, logits, NULL, NULL, grew, batch_ops);
    for (int i = 0; i < n; i++) {
        ss[i]->pos++;
        ((lfm2_session *)ss[i]->impl)->cache_pos = ss[i]->pos;
    }
    return ci_backend_check(m, err, errlen);
}

int lfm2_forward_batch(ci_session *const *ss, const int *tokens, int n, float *logits, char *err, size_t errlen) {
    if (n <= 0) return ci_err(err, errlen, "forward_batch needs at least one sequence");
    const ci_model *m = ss[0]->m;
    const lfm2_model *d = m->impl;
    const char *fam = m->family->name;
    if (ci_batch_check(ss, tokens, n, d->vocab, err, errlen)) return -1;
    for (int i = 0; i < n; i++) {
        const lfm2_session *ci = ss[i]->impl;
        if (ss[i]->pos != 0 && ss[i]->pos != ci->cache_pos)
            return ci_err(err, errlen, "%s: sequence %d: session position %d and cache position %d disagree", fam, i,
                          ss[i]->pos, ci->cache_pos);
    }
    for (int i = 0; i < n; i++)   /* a new sequence: conv states start at zero, as lfm2_forward */
        if (ss[i]->pos == 0) reset_states(d, m->be, ss[i]->impl);
    for (int off = 0; off < n; off += LFM2_UBATCH) {
        int k = n - off < LFM2_UBATCH ? n - off : LFM2_UBATCH;
        if (forward_rows(ss + off, tokens + off, k, logits + (size_t)off * d->vocab, err, errlen)) return -1;
    }
    return 0;
}
