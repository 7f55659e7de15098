/* runner.c — the chunk loop every family on backend memory shares (runner.h). */
#include "runner.h"
#include "../core/status.h"
#include "../parallel/shard.h"

#include <stdlib.h>
#include <string.h>

int ci_runner_alloc(ci_runner *r, ci_backend *be, int ub, int vocab, int dim, float eps, int max_group,
                    ci_ops_fn ops, int *bad) {
    memset(r, 0, sizeof *r);
    r->ub = ub;
    r->vocab = vocab;
    r->dim = dim;
    r->eps = eps;
    r->max_group = max_group;
    r->ops = ops;
    r->hpos = malloc((size_t)ub * sizeof(int32_t));
    if (!r->hpos) return -1;
    r->ids = ci_buf_alloc(be, (size_t)ub * sizeof(int32_t), bad);
    r->pos = ci_buf_alloc(be, (size_t)ub * sizeof(int32_t), bad);
    r->logits1 = ci_buf_alloc(be, (size_t)vocab * sizeof(float), bad);
    r->best = ci_buf_alloc(be, sizeof(int32_t), bad);
    r->head_split = shd_head_split(vocab, be->world);
    if (r->head_split)
        r->lpart = ci_buf_alloc(be, (size_t)(ub > max_group ? ub : max_group) * (size_t)(vocab / be->world) * sizeof(float), bad);
    return 0;
}

float *ci_runner_head_dst(ci_runner *r) { return r->head_split ? r->lpart : r->logits1; }

void ci_runner_head_end(ci_runner *r, ci_backend *be, int head) {
    if (r->head_split) be->all_gather_rows(be, r->logits1, r->lpart, 1, r->vocab / be->world);
    if (head == CI_HEAD_ARGMAX) be->argmax(be, r->best, r->logits1, r->vocab);
}

/* out [rows, vocab] = the head's product of rows of xn: a split head's part, then gathered */
static void head_product(ci_runner *r, ci_backend *be, float *out, const float *xn, int rows) {
    be->matmul(be, r->head_split ? r->lpart : out, xn, rows, r->head);
    if (r->head_split) be->all_gather_rows(be, out, r->lpart, rows, r->vocab / be->world);
}

int ci_runner_chunk_rows(const ci_session *s, int base) {
    if (!s->m->be->is_device) return base;
    int ub = CI_DEVICE_CHUNK;
    const char *e = getenv("CINFER_DEVICE_CHUNK");
    if (e && *e) {
        char *end;
        long v = strtol(e, &end, 10);
        if (!*end && v >= 1 && v <= CI_DEVICE_CHUNK) ub = (int)v;
    }
    if (ub > s->max_ctx) ub = s->max_ctx;
    if (s->max_rows > 0 && ub > s->max_rows) ub = s->max_rows;
    return ub > base ? ub : base;
}

static void drop_batch_graphs(ci_runner *r, ci_backend *be, int mode) {
    for (int i = 0; i < CI_BATCH_GRAPHS; i++)
        if (r->bgraph[mode][i]) {
            be->graph_free(be, r->bgraph[mode][i]);
            r->bgraph[mode][i] = NULL;
        }
}

void ci_runner_free(ci_runner *r, ci_backend *be) {
    for (int i = 0; i < 2; i++)
        if (r->graph[i] && be->graph_free) be->graph_free(be, r->graph[i]);
    if (be->graph_free) {
        drop_batch_graphs(r, be, 0);
        drop_batch_graphs(r, be, 1);
    }
    ci_buf_release(be, r->blog);
    ci_buf_release(be, r->ids);
    ci_buf_release(be, r->pos);
    ci_buf_release(be, r->logits1);
    ci_buf_release(be, r->best);
    ci_buf_release(be, r->logits_n);
    ci_buf_release(be, r->lpart);
    ci_buf_release(be, r->tab);
    free(r->htab);
    ci_buf_release(be, r->ptab);
    free(r->hptab);
    free(r->hpos);
    memset(r, 0, sizeof *r);
}

/* Rows of logits one group holds: row-independent matmuls give the same bits in any
 * grouping, so the buffer is bounded (32 MiB) rather than [ub, vocab]; at least a 4-row
 * tile, a multiple of 4, at most max_group. */
int ci_runner_need_rows(ci_runner *r, const ci_model *m, char *err, size_t errlen) {
    if (r->logits_n) return 0;
    int64_t rows = ((int64_t)32 << 20) / ((int64_t)r->vocab * (int64_t)sizeof(float));
    if (rows > r->max_group) rows = r->max_group;
    rows = rows / 4 * 4;
    if (rows < 4) rows = 4;
    r->logits_n = m->be->alloc(m->be, (size_t)rows * (size_t)r->vocab * sizeof(float));
    if (!r->logits_n)
        return ci_err(err, errlen, "%s: out of memory for %d rows of logits%s%s", m->family->name, (int)rows,
                      m->be->last_error[0] ? ": " : "", m->be->last_error);
    r->logit_rows = (int)rows;
    return 0;
}

int ci_runner_need_tab(ci_runner *r, const ci_model *m, size_t count, char *err, size_t errlen) {
    if (r->tab) return count <= r->tab_count ? 0 : ci_err(err, errlen, "%s: a batch step's table of %zu pointers, %zu allocated",
                                                          m->family->name, count, r->tab_count);
    r->htab = malloc(count * sizeof(float *));
    r->tab = r->htab ? m->be->alloc(m->be, count * sizeof(float *)) : NULL;
    if (!r->htab || !r->tab) {
        free(r->htab);
        r->htab = NULL;
        return ci_err(err, errlen, "%s: out of memory for a batch step's cache table%s%s", m->family->name,
                      m->be->last_error[0] ? ": " : "", m->be->last_error);
    }
    r->tab_count = count;
    return 0;
}

void ci_runner_head_rows(ci_runner *r, ci_backend *be, int n, float *logits, int32_t *best) {
    be->rmsnorm(be, r->xn, r->x, r->final_norm, n, r->dim, r->eps);
    for (int r0 = 0; r0 < n; r0 += r->logit_rows) {
        int rows = n - r0 < r->logit_rows ? n - r0 : r->logit_rows;
        head_product(r, be, r->logits_n, r->xn + (size_t)r0 * r->dim, rows);
        if (best)
            for (int i = 0; i < rows; i++)
                be->argmax(be, best + r0 + i, r->logits_n + (size_t)i * r->vocab, r->vocab);
        else
            be->download(be, logits + (size_t)r0 * r->vocab, r->logits_n, (size_t)rows * r->vocab * sizeof(float));
    }
}

int ci_runner_batch_pages(ci_runner *r, ci_backend *be, ci_session *const *ss, int n, ci_pages *pg, char *err,
                          size_t errlen) {
    int stride = 0, grew = 0;
    for (int i = 0; i < n; i++) {
        if (ci_session_pages_ready(ss[i], ss[i]->pos + 1, err, errlen)) return -1;
        stride = ss[i]->pages.cap > stride ? ss[i]->pages.cap : stride;
    }
    if (stride > r->ptab_stride) {
        int bad = 0;
        ci_buf_release(be, r->ptab);
        free(r->hptab);
        r->ptab = ci_buf_alloc(be, (size_t)r->ub * stride * sizeof(int32_t), &bad);
        r->hptab = calloc((size_t)r->ub * stride, sizeof(int32_t));
        if (bad || !r->hptab) {
            r->ptab_stride = 0;
            return ci_err(err, errlen, "%s: out of memory for block tables", ss[0]->m->family->name);
        }
        r->ptab_stride = stride;
        grew = 1;
    }
    for (int i = 0; i < n; i++)
        memcpy(r->hptab + (size_t)i * r->ptab_stride, ss[i]->pages.tab, (size_t)ss[i]->pages.n * sizeof(int32_t));
    be->upload(be, r->ptab, r->hptab, (size_t)n * r->ptab_stride * sizeof(int32_t));
    *pg = (ci_pages){ r->ptab, r->ptab_stride, 1, KV_BLOCK_LOG2 };
    return grew;
}

int ci_runner_batch_begin(ci_runner *r, ci_model *m, ci_session *const *ss, int n, size_t tab_count, ci_pages *pg,
                          char *err, size_t errlen) {
    if (ci_runner_need_rows(r, m, err, errlen) || ci_runner_need_tab(r, m, tab_count, err, errlen)) return -1;
    for (int i = 0; i < n; i++) r->hpos[i] = ss[i]->pos;
    return ci_runner_batch_pages(r, m->be, ss, n, pg, err, errlen);
}

void ci_runner_batch_step(ci_runner *r, ci_model *m, ci_session *const *ss, const int *tokens, int n, size_t tab_used,
                          float *logits, int32_t *best, int *out_ids, int grew, ci_batch_ops_fn ops) {
    ci_backend *be = m->be;
    be->upload(be, r->ids, tokens, (size_t)n * sizeof(int32_t));
    be->upload(be, r->pos, r->hpos, (size_t)n * sizeof(int32_t));
    be->upload(be, r->tab, r->htab, tab_used * sizeof(float *));
    if (grew && be->graph_free) {
        drop_batch_graphs(r, be, 0);
        drop_batch_graphs(r, be, 1);
    }
    if (!out_ids) best = NULL;
    /* a device's logits: all n rows in one buffer, brought back once after the step */
    float *dlog = NULL;
    if (logits && be->is_device) {
        if (n > r->blog_rows) {
            int bad = 0;
            ci_buf_release(be, r->blog);
            r->blog = ci_buf_alloc(be, (size_t)n * r->vocab * sizeof(float), &bad);
            r->blog_rows = bad ? 0 : n;
            if (be->graph_free) drop_batch_graphs(r, be, 1);
        }
        dlog = r->blog_rows >= n ? r->blog : NULL;
    }
    const int mode = dlog ? 1 : 0;
    if ((best || dlog) && n <= CI_BATCH_GRAPHS && ci_graphs_allowed(m)) {
        const int gi = n - 1;
        int keys = 0;   /* attention launches are sized by the longest context: a longer one re-records */
        for (int i = 0; i < n; i++) keys = ss[i]->max_ctx > keys ? ss[i]->max_ctx : keys;
        if (r->bgraph[mode][gi] && keys > r->bgraph_keys[mode][gi]) {
            be->graph_free(be, r->bgraph[mode][gi]);
            r->bgraph[mode][gi] = NULL;
        }
        if (!r->bgraph[mode][gi] && !r->bgraph_failed[mode][gi]) {
            r->bgraph_keys[mode][gi] = keys;
            if (be->graph_begin(be) == 0) {
                ops(ss, n, NULL, best, dlog);   /* recorded, not run */
                r->bgraph[mode][gi] = be->graph_end(be);
            }
            r->bgraph_failed[mode][gi] = !r->bgraph[mode][gi];
        }
        if (r->bgraph[mode][gi]) be->graph_launch(be, r->bgraph[mode][gi]);
        else ops(ss, n, NULL, best, dlog);
    } else {
        ops(ss, n, dlog ? NULL : logits, best, dlog);
    }
    if (dlog) be->download(be, logits, dlog, (size_t)n * r->vocab * sizeof(float));
    if (best) be->download(be, out_ids, best, (size_t)n * sizeof(int32_t));
}

void ci_runner_head_into(ci_runner *r, ci_backend *be, int n, float *out) {
    be->rmsnorm(be, r->xn, r->x, r->final_norm, n, r->dim, r->eps);
    head_product(r, be, out, r->xn, n);
}

/* One chunk of n <= ub tokens at positions s->pos..: uploads, ops (a one-token step through
 * its recorded graph where the backend has graphs), then the logits / argmax come back. */
static int run_chunk(ci_runner *r, ci_session *s, const int *tokens, int n, float *logits, int all_logits,
                     int *out_id, char *err, size_t errlen) {
    ci_model *m = s->m;
    ci_backend *be = m->be;
    _Static_assert(sizeof(int) == sizeof(int32_t), "token ids upload as int32");
    for (int t = 0; t < n; t++) r->hpos[t] = s->pos + t;
    if (logits && all_logits && ci_runner_need_rows(r, m, err, errlen)) return -1;
    be->upload(be, r->ids, tokens, (size_t)n * sizeof(int32_t));
    be->upload(be, r->pos, r->hpos, (size_t)n * sizeof(int32_t));
    int head = out_id ? CI_HEAD_ARGMAX : logits && !all_logits ? CI_HEAD_LAST : CI_HEAD_NONE;
    if (n == 1 && head != CI_HEAD_NONE && ci_graphs_allowed(m)) {
        int gi = head == CI_HEAD_ARGMAX;
        if (!r->graph[gi] && !r->graph_failed[gi] && r->graph_ran[gi]) {
            if (be->graph_begin(be) == 0) {
                r->ops(s, 1, head);                     /* recorded, not run */
                r->graph[gi] = be->graph_end(be);
            }
            r->graph_failed[gi] = !r->graph[gi];
        }
        if (r->graph[gi]) be->graph_launch(be, r->graph[gi]);
        else r->ops(s, 1, head);
        r->graph_ran[gi] = 1;
    } else {
        r->keys = n > 1 ? s->pos + n : 0;
        r->ops(s, n, head);
        r->keys = 0;
    }
    if (logits && all_logits) ci_runner_head_rows(r, be, n, logits, NULL);
    if (head == CI_HEAD_LAST) be->download(be, logits, r->logits1, (size_t)r->vocab * sizeof(float));
    if (head == CI_HEAD_ARGMAX) {
        int32_t best = 0;
        be->download(be, &best, r->best, sizeof best);
        *out_id = best;
    }
    s->pos += n;
    return ci_backend_check(m, err, errlen);
}

int ci_runner_forward(ci_runner *r, ci_session *s, const int *tokens, int n, float *logits, int all_logits,
                      int *out_id, char *err, size_t errlen) {
    if (ci_forward_check(s, tokens, n, r->vocab, err, errlen)) return -1;
    for (int off = 0; off < n; off += r->ub) {
        int k = n - off < r->ub ? n - off : r->ub, last = off + k == n;
        float *out = NULL;
        if (logits && all_logits) out = logits + (size_t)off * (size_t)r->vocab;
        else if (logits && last) out = logits;
        if (run_chunk(r, s, tokens + off, k, out, all_logits, last ? out_id : NULL, err, errlen)) return -1;
    }
    return 0;
}
