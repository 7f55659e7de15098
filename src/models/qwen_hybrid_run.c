/* qwen_hybrid_run.c — Qwen3-Next / Qwen3.5 / Qwen3.5-MoE sessions, forward and batched
 * decode steps (the model side is qwen_hybrid.c, snapshots qwen_hybrid_cache.c).
 *
 * Every buffer is backend memory: each attention layer's [k | v] rows [max_ctx,
 * 2*n_kv*hd], each DeltaNet layer's state (conv window, then S), the activations and
 * scratch. Model code passes their addresses to ops and never reads or writes their bytes:
 * per chunk the host uploads the token ids and positions, runs ops on the placed weights,
 * and downloads the logits. A decode step (n = 1, one row of logits) makes no host
 * decision, so on a backend with graphs it is recorded once per session and replayed. A
 * new sequence's states are zeroed by an upload. Activations are f32 [n, ·] for a chunk of
 * n <= run.ub tokens (ci_runner_chunk_rows); longer prompts run chunk by chunk through the same
 * cache. */
#include "qwen_hybrid_internal.h"
#include "layer_snap.h"
#include "../core/status.h"
#include <stdlib.h>
#include <string.h>

/* ---- sessions -------------------------------------------------------------------------- */

static void chunk_ops(ci_session *s, int n, int head);

int qh_session_init(ci_session *s, char *err, size_t errlen) {
    const qh_model *d = s->m->impl;
    ci_backend *be = s->m->be;
    const char *fam = s->m->family->name;
    if (!d->dev) return ci_err(err, errlen, "%s: a model opened without weights has no sessions", fam);
    qh_session *c = calloc(1, sizeof *c);
    if (!c) return ci_err(err, errlen, "%s: out of memory", fam);
    s->impl = c;
    const int rows = ci_runner_chunk_rows(s, QH_UBATCH);
    const size_t UB = (size_t)rows, f = sizeof(float), D = (size_t)d->D;
    size_t zeros = 1;
    for (int l = 0; l < d->n_layers; l++)
        if (d->layers[l].linear && qh_state_floats(&d->layers[l]) > zeros) zeros = qh_state_floats(&d->layers[l]);
    c->kv = calloc((size_t)d->n_layers, sizeof *c->kv);
    c->state = calloc((size_t)d->n_layers, sizeof *c->state);
    c->zeros = calloc(zeros, f);
    int bad = 0;
    if (!c->kv || !c->state || !c->zeros ||
        ci_runner_alloc(&c->run, be, rows, d->vocab, d->D, d->eps, QH_UBATCH, chunk_ops, &bad))
        return ci_err(err, errlen, "%s: out of memory", fam);
    int64_t lrows = 0;
    if (hyb_rows_init(s, d->pool_kv, &c->kv_rows, &lrows, err, errlen)) return -1;
    size_t off = 0;   /* the attention layers' rows one after the other (layer_snap.h) */
    for (int l = 0; l < d->n_layers && !bad; l++) {
        const qh_layer *L = &d->layers[l];
        if (L->linear) c->state[l] = ci_buf_alloc(be, qh_state_floats(L) * f, &bad);
        else {
            c->kv[l] = c->kv_rows + off * (size_t)lrows;
            off += qh_kv_floats(L, be);
        }
    }
    if (bad)
        return ci_err(err, errlen, "%s: out of memory for a %d-token cache%s%s", fam, s->max_ctx,
                      be->last_error[0] ? ": " : "", be->last_error);
    size_t ff = (size_t)(d->ff > 0 ? d->ff : 1);
    c->x = ci_buf_alloc(be, UB * D * f, &bad);
    c->xn = ci_buf_alloc(be, UB * D * f, &bad);
    c->y = ci_buf_alloc(be, UB * D * f, &bad);
    c->g = ci_buf_alloc(be, UB * ff * f, &bad);
    c->u = ci_buf_alloc(be, UB * ff * f, &bad);
    c->last = ci_buf_alloc(be, D * f, &bad);
    c->best_n = ci_buf_alloc(be, UB * sizeof(int32_t), &bad);
    if (bad || (d->any_dn && dn_scratch_init(be, &c->dn, d->any_dn, rows)) ||
        (d->any_ga && ga_scratch_init(be, &c->ga, d->any_ga, rows)) ||
        (d->any_moe && moe_scratch_init(be, &c->moe, d->any_moe, rows)))
        return ci_err(err, errlen, "%s: out of memory for a %d-token session%s%s", fam, s->max_ctx,
                      be->last_error[0] ? ": " : "", be->last_error);
    c->run.x = c->x;
    c->run.xn = c->xn;
    c->run.final_norm = d->dev_final_norm;
    c->run.head = &d->dev_head;
    return 0;
}

void qh_session_free(ci_session *s) {
    qh_session *c = s->impl;
    if (!c) return;
    const qh_model *d = s->m->impl;
    ci_backend *be = s->m->be;
    ci_runner_free(&c->run, be);
    for (int l = 0; l < d->n_layers; l++)
        if (c->state) ci_buf_release(be, c->state[l]);
    hyb_rows_free(s, c->kv_rows);
    float *bufs[] = { c->x, c->xn, c->y, c->g, c->u, c->last };
    for (size_t i = 0; i < sizeof bufs / sizeof *bufs; i++) ci_buf_release(be, bufs[i]);
    ci_buf_release(be, c->best_n);
    dn_scratch_free(be, &c->dn);
    ga_scratch_free(be, &c->ga);
    moe_scratch_free(be, &c->moe);
    free(c->kv); free(c->state); free(c->zeros);
    free(c);
    s->impl = NULL;
}

/* A new sequence: every DeltaNet state back to zeros. */
static void reset_states(const qh_model *d, ci_backend *be, qh_session *c) {
    for (int l = 0; l < d->n_layers; l++)
        if (c->state[l]) be->upload(be, c->state[l], c->zeros, qh_state_floats(&d->layers[l]) * sizeof(float));
    c->cache_pos = 0;
}

/* ---- forward --------------------------------------------------------------------------- */

/* The MLP block's buffers: its output (the down product or the MoE's) goes to y. */
static ffn_bufs ffn_scratch(qh_session *c) { return (ffn_bufs){ c->xn, c->g, c->u, c->y, &c->moe }; }

/* Layer l's [k | v] cache rows of a session (a gated-attention layer). */
static attn_cache layer_kv(const qh_model *d, const ci_session *s, int l) {
    const qh_session *c = s->impl;
    const attn_block *A = &d->layers[l].ga.a;
    return attn_cache_kv_rows(s->m->be, c->kv[l], A->n_kv * A->hd, s->max_ctx);
}

/* The layers of one chunk of n tokens of s whose ids and positions are in c->run.ids /
 * c->run.pos, then the head (runner.h): ops only, nothing decided from a value, so a
 * decode step can be recorded and replayed. */
static void chunk_ops(ci_session *s, int n, int head) {
    ci_model *m = s->m;
    const qh_model *d = m->impl;
    qh_session *c = s->impl;
    ci_backend *be = m->be;
    const int D = d->D;
    const ffn_bufs fb = ffn_scratch(c);
    ci_pages pbuf;
    const ci_pages *pg = ci_session_chunk_pages(s, &pbuf);   /* attention rows through the session's table */
    be->embed(be, c->x, &d->dev_embed, c->run.ids, n);
    ci_dump_buf(m, "embed", -1, c->x, n, D);
    for (int l = 0; l < d->n_layers; l++) {
        const qh_placed *P = &d->dev[l];
        const int linear = d->layers[l].linear;
        /* x += mixer(input_layernorm(x)); y holds the mixer's output on the CPU (matmul_acc's tmp) */
        if (linear) dn_forward_add(be, &P->dn, &c->dn, c->state[l], c->x, P->attn_norm, d->eps, c->xn, c->y, n, d->mode);
        else {
            const attn_cache kv = layer_kv(d, s, l);
            ga_forward(be, &P->ga, &c->ga, &kv, 1, NULL, pg, c->x, P->attn_norm, d->eps, c->xn, c->y, c->run.pos, c->run.keys, n);
        }
        ci_dump_buf(m, linear ? "linear_attn" : "self_attn", l, c->y, n, D);
        ffn_forward(be, &P->ffn, &fb, c->x, n);   /* x += mlp(rmsnorm(x)) or the MoE's; y keeps that output */
        ci_dump_buf(m, "mlp", l, c->y, n, D);
        ci_dump_buf(m, "layer_out", l, c->x, n, D);
    }
    if (head == CI_HEAD_NONE) return;
    be->rmsnorm(be, c->last, c->x + (size_t)(n - 1) * D, d->dev_final_norm, 1, D, d->eps);
    be->matmul(be, ci_runner_head_dst(&c->run), c->last, 1, &d->dev_head);
    ci_runner_head_end(&c->run, be, head);
}

/* A forward of s: a new sequence's states start at zero; the runner cuts it into chunks;
 * the recurrent state's position follows the session's through every chunk run. */
static int forward_all(ci_session *s, const int *tokens, int n, float *logits, int all_logits, int *out_id, char *err,
                       size_t errlen) {
    const qh_model *d = s->m->impl;
    qh_session *c = s->impl;
    const char *fam = s->m->family->name;
    if (ci_forward_check(s, tokens, n, d->vocab, err, errlen)) return -1;
    /* the recurrent state cannot be rewound: only a reset (pos 0) or a snapshot */
    if (s->pos != c->cache_pos && s->pos != 0)
        return ci_err(err, errlen, "%s: session at position %d but its recurrent state is at %d (restore a cache snapshot to go back)",
                      fam, s->pos, c->cache_pos);
    if (s->pos == 0) reset_states(d, s->m->be, c);   /* a new sequence: states start at zero */
    if (ci_session_pages_ready(s, s->pos + n, err, errlen)) return -1;
    int rc = ci_runner_forward(&c->run, s, tokens, n, logits, all_logits, out_id, err, errlen);
    c->cache_pos = s->pos;
    return rc;
}

int qh_forward(ci_session *s, const int *tokens, int n, float *logits, int all_logits, char *err, size_t errlen) {
    return forward_all(s, tokens, n, logits, all_logits, NULL, err, errlen);
}

int qh_forward_argmax(ci_session *s, const int *tokens, int n, int *out_id, char *err, size_t errlen) {
    return forward_all(s, tokens, n, NULL, 0, out_id, err, errlen);
}

/* ---- serving many sequences: one batched decode step --------------------------------------
 *
 * Row i belongs to session ss[i] at its position. The embedding, the norms, the
 * projections, the MLP / MoE and the head run over all n rows at once (each of those
 * weights read once per step); the token mixers keep per-sequence state through tables of
 * pointers: a DeltaNet row convolves its own window and advances its own S (causal_conv /
 * deltanet through the table), a gated-attention row writes its K/V into its own cache
 * rows and attends to them alone (rope_attend through the table), with ss[0]'s scratch.
 * Every op gives a row the bits it would alone, so the logits equal
 * forward(ss[i], &tokens[i], 1)'s. On a device the step is recorded per row count and
 * replayed (ci_runner_batch_step). */
/* The ops of a batch step of n rows whose ids, positions and tables are uploaded (runner.h
 * ci_batch_ops_fn): recorded per n where the backend has graphs. */
static void batch_ops(ci_session *const *ss, int n, float *logits, int32_t *best, float *dev_logits) {
    ci_model *m = ss[0]->m;
    const qh_model *d = m->impl;
    qh_session *c = ss[0]->impl;
    ci_backend *be = m->be;
    attn_cache kvs[QH_UBATCH];
    const ffn_bufs fb = ffn_scratch(c);
    be->embed(be, c->x, &d->dev_embed, c->run.ids, n);
    for (int l = 0; l < d->n_layers; l++) {
        const qh_placed *P = &d->dev[l];
        float *const *tab = c->run.tab + (size_t)l * 2 * n;
        if (d->layers[l].linear) dn_forward_rows_add(be, &P->dn, &c->dn, tab, c->x, P->attn_norm, d->eps, c->xn, c->y, n);
        else {
            for (int i = 0; i < n; i++) kvs[i] = layer_kv(d, ss[i], l);
            ga_forward(be, &P->ga, &c->ga, kvs, n, tab, &c->bpg, c->x, P->attn_norm, d->eps, c->xn, c->y, c->run.pos, 0, n);
        }
        ffn_forward(be, &P->ffn, &fb, c->x, n);
    }
    if (dev_logits) ci_runner_head_into(&c->run, be, n, dev_logits);
    else ci_runner_head_rows(&c->run, be, n, logits, best);
}

static int forward_rows(ci_session *const *ss, const int *tokens, int n, float *logits, int *out_ids, char *err,
                        size_t errlen) {
    ci_model *m = ss[0]->m;
    const qh_model *d = m->impl;
    qh_session *c = ss[0]->impl;
    const int grew = ci_runner_batch_begin(&c->run, m, ss, n, (size_t)d->n_layers * 2 * QH_UBATCH, &c->bpg, err, errlen);
    if (grew < 0) return -1;
    /* layer l's table: attention rows' K, V at [2i], [2i + 1]; DeltaNet rows' window, S likewise */
    for (int l = 0; l < d->n_layers; l++)
        for (int i = 0; i < n; i++) {
            float **t = c->run.htab + (size_t)l * 2 * n;
            if (d->layers[l].linear) {
                float *st = ((qh_session *)ss[i]->impl)->state[l];
                t[2 * i] = st;
                t[2 * i + 1] = st + dn_state_S_offset(&d->layers[l].dn);
            } else {
                attn_cache kv = layer_kv(d, ss[i], l);
                t[2 * i] = kv.k;
                t[2 * i + 1] = kv.v;
            }
        }
    ci_runner_batch_step(&c->run, m, ss, tokens, n, (size_t)d->n_layers * 2 * n, logits, c->best_n, out_ids, grew, batch_ops);
    for (int i = 0; i < n; i++) {
        ss[i]->pos++;
        ((qh_session *)ss[i]->impl)->cache_pos = ss[i]->pos;
    }
    return ci_backend_check(m, err, errlen);
}

static int batch_all(ci_session *const *ss, const int *tokens, int n, float *logits, int *out_ids, char *err,
                     size_t errlen) {
    if (n <= 0) return ci_err(err, errlen, "forward_batch needs at least one sequence");
    const ci_model *m = ss[0]->m;
    const qh_model *d = m->impl;
    const char *fam = m->family->name;
    if (ci_batch_check(ss, tokens, n, d->vocab, err, errlen)) return -1;
    for (int i = 0; i < n; i++) {
        const qh_session *ci = ss[i]->impl;
        if (ss[i]->pos != ci->cache_pos && ss[i]->pos != 0)
            return ci_err(err, errlen, "%s: sequence %d at position %d but its recurrent state is at %d (restore a cache snapshot to go back)",
                          fam, i, ss[i]->pos, ci->cache_pos);
    }
    for (int i = 0; i < n; i++)   /* a new sequence starts from a zero state, as qh_forward */
        if (ss[i]->pos == 0) reset_states(d, m->be, ss[i]->impl);
    for (int off = 0; off < n; off += QH_UBATCH) {
        int k = n - off < QH_UBATCH ? n - off : QH_UBATCH;
        if (forward_rows(ss + off, tokens + off, k, logits ? logits + (size_t)off * d->vocab : NULL,
                         out_ids ? out_ids + off : NULL, err, errlen))
            return -1;
    }
    return 0;
}

int qh_forward_batch(ci_session *const *ss, const int *tokens, int n, float *logits, char *err, size_t errlen) {
    return batch_all(ss, tokens, n, logits, NULL, err, errlen);
}

int qh_forward_batch_argmax(ci_session *const *ss, const int *tokens, int n, int *out_ids, char *err, size_t errlen) {
    return batch_all(ss, tokens, n, NULL, out_ids, err, errlen);
}
