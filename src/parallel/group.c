/* group.c — see group.h. The façade model's impl is the group; its family is a copy of the
 * real one (same name, so every message names the family loaded) whose ops fan out. */
#include "group.h"
#include "comm.h"
#include "../core/status.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct {
    int world;
    ci_comm *comm;
    ci_model **ranks;            /* [world] */
    ci_family fam;               /* the real family's name and types, the group's ops */
    float **logits;              /* [world] host: where ranks 1.. put the logits rank 0 returns (every
                                  * rank must run the same head: a split head gathers its parts) */
    size_t *logits_cap;          /* [world] floats */
    /* ranks 1.. run on threads of their own for the group's life (a device backend's thread keeps
     * its device): each waits for a call (gen moves), runs it, counts itself done */
    pthread_t *th;               /* [world] */
    int n_th;                    /* threads started (ranks 1..n_th) */
    pthread_mutex_t mu;
    pthread_cond_t go, done_cv;
    unsigned long gen;
    int done, quit;
    struct rank_call *calls;     /* [world] the call under way */
    ci_session **rss;            /* [world][rss_n] a batch step's rank sessions, and */
    int *rids;                   /* [world][rss_n] the ranks' argmax ids (grown on need: a call
                                  * allocates nothing once the largest step has run) */
    int rss_n;
} ci_group;

/* One call on one rank: what it runs and what it gives back. */
typedef struct rank_call {
    ci_session *s;               /* the rank's session (a forward) */
    ci_session **ss;             /* the rank's sessions (a batch step), or NULL */
    const int *tokens;
    int n, all_logits, argmax;
    float *logits;               /* rank 0's is the caller's (the others' are the same bits) */
    int *ids;                    /* argmax: [n] (rank 0's the caller's) */
    int rc;
    char err[512];
    ci_comm *comm;
    int rank;
} rank_call;

static void *run_rank(void *p) {
    rank_call *c = p;
    if (c->ss && c->argmax) c->rc = ci_forward_batch_argmax(c->ss, c->tokens, c->n, c->ids, c->err, sizeof c->err);
    else if (c->ss) {
        ci_model *m = c->ss[0]->m;
        c->rc = m->family->ops->forward_batch(c->ss, c->tokens, c->n, c->logits, c->err, sizeof c->err);
        if (!c->rc) c->rc = ci_backend_check(m, c->err, sizeof c->err);
    }
    else if (c->argmax) c->rc = ci_forward_argmax(c->s, c->tokens, c->n, c->ids, c->err, sizeof c->err);
    else c->rc = ci_forward(c->s, c->tokens, c->n, c->logits, c->all_logits, c->err, sizeof c->err);
    if (c->rc) ci_comm_abort(c->comm, c->rank, c->err);   /* the others must not wait for this one */
    return NULL;
}

typedef struct { ci_group *g; int rank; } worker_arg;

static void *worker(void *p) {
    worker_arg a = *(worker_arg *)p;
    free(p);
    ci_group *g = a.g;
    unsigned long seen = 0;
    for (;;) {
        pthread_mutex_lock(&g->mu);
        while (g->gen == seen && !g->quit) pthread_cond_wait(&g->go, &g->mu);
        if (g->quit) { pthread_mutex_unlock(&g->mu); return NULL; }
        seen = g->gen;
        rank_call *c = &g->calls[a.rank];
        pthread_mutex_unlock(&g->mu);
        run_rank(c);
        pthread_mutex_lock(&g->mu);
        g->done++;
        pthread_cond_signal(&g->done_cv);
        pthread_mutex_unlock(&g->mu);
    }
}

/* The call on every rank at once (rank 0 on this thread): a forward of s, or (ss non-NULL) a
 * batch step of the n sessions ss; every rank's sessions at the group sessions' positions first,
 * which then follow rank 0's. logits / ids: the caller's, filled from rank 0. */
static int fan_out(ci_model *m, ci_session *s, ci_session *const *ss, const int *tokens, int n, float *logits,
                   int all_logits, int *ids, char *err, size_t errlen) {
    ci_group *g = m->impl;
    const int W = g->world, V = (int)m->cfg.vocab_size, rows = ss ? n : 1;
    if (ss ? ci_batch_check(ss, tokens, n, V, err, errlen) : ci_forward_check(s, tokens, n, V, err, errlen)) return -1;
    char why[256];
    if (ci_comm_error(g->comm, why, sizeof why))   /* a rank failed before: nothing runs again */
        return ci_err(err, errlen, "%s: tensor parallel: %s", m->family->name, why);
    rank_call *calls = g->calls;
    const size_t want = logits ? (size_t)(ss ? n : all_logits ? n : 1) * (size_t)V : 0;
    int bad = 0;
    if (rows > g->rss_n) {
        ci_session **p = realloc(g->rss, (size_t)W * (size_t)rows * sizeof *p);
        if (p) g->rss = p;
        int *q = realloc(g->rids, (size_t)W * (size_t)rows * sizeof *q);
        if (q) g->rids = q;
        if (p && q) g->rss_n = rows;
        else bad = 1;
    }
    for (int r = 1; r < W && !bad && want > g->logits_cap[r]; r++) {
        float *p = realloc(g->logits[r], want * sizeof(float));
        if (!p) bad = 1;
        else { g->logits[r] = p; g->logits_cap[r] = want; }
    }
    if (bad) return ci_err(err, errlen, "%s: out of memory", m->family->name);
    ci_session **rss = g->rss;   /* [W][rows] */
    int *rids = g->rids;
    for (int r = 0; r < W; r++) {
        ci_session *rs0 = NULL;
        if (ss) {
            for (int i = 0; i < n; i++) {
                ci_session *ri = ((ci_session **)ss[i]->impl)[r];
                ri->pos = ss[i]->pos;
                rss[(size_t)r * rows + i] = ri;
            }
        } else {
            rs0 = ((ci_session **)s->impl)[r];
            rs0->pos = s->pos;
        }
        calls[r] = (rank_call){ .s = rs0, .ss = ss ? rss + (size_t)r * rows : NULL, .tokens = tokens, .n = n,
                                .all_logits = all_logits, .argmax = ids != NULL,
                                .logits = r && logits ? g->logits[r] : logits, .ids = ids ? rids + (size_t)r * rows : NULL,
                                .comm = g->comm, .rank = r };
    }
    pthread_mutex_lock(&g->mu);
    g->done = 0;
    g->gen++;
    pthread_cond_broadcast(&g->go);
    pthread_mutex_unlock(&g->mu);
    run_rank(&calls[0]);
    pthread_mutex_lock(&g->mu);
    while (g->done < W - 1) pthread_cond_wait(&g->done_cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
    int rc = 0;
    if (ci_comm_error(g->comm, why, sizeof why)) rc = ci_err(err, errlen, "%s: tensor parallel: %s", m->family->name, why);
    else if (calls[0].rc) rc = ci_err(err, errlen, "%s", calls[0].err);
    if (!rc) {
        if (ss)
            for (int i = 0; i < n; i++) ss[i]->pos = rss[i]->pos;
        else
            s->pos = calls[0].s->pos;
        if (ids) memcpy(ids, rids, (size_t)rows * sizeof *ids);
    }
    return rc;
}

static int g_forward(ci_session *s, const int *tokens, int n, float *logits, int all_logits, char *err, size_t errlen) {
    return fan_out(s->m, s, NULL, tokens, n, logits, all_logits, NULL, err, errlen);
}

static int g_forward_argmax(ci_session *s, const int *tokens, int n, int *out_id, char *err, size_t errlen) {
    return fan_out(s->m, s, NULL, tokens, n, NULL, 0, out_id, err, errlen);
}

static int g_forward_batch(ci_session *const *ss, const int *tokens, int n, float *logits, char *err, size_t errlen) {
    if (n <= 0 || !ss || !ss[0]) return ci_err(err, errlen, "forward_batch needs at least one sequence");
    return fan_out(ss[0]->m, NULL, ss, tokens, n, logits, 0, NULL, err, errlen);
}

static int g_forward_batch_argmax(ci_session *const *ss, const int *tokens, int n, int *out_ids, char *err,
                                  size_t errlen) {
    if (n <= 0 || !ss || !ss[0]) return ci_err(err, errlen, "forward_batch needs at least one sequence");
    return fan_out(ss[0]->m, NULL, ss, tokens, n, NULL, 0, out_ids, err, errlen);
}

static int g_session_init(ci_session *s, char *err, size_t errlen) {
    ci_group *g = s->m->impl;
    ci_session **rs = calloc((size_t)g->world, sizeof *rs);
    if (!rs) return ci_err(err, errlen, "%s: out of memory", s->m->family->name);
    s->impl = rs;
    for (int r = 0; r < g->world; r++)
        if (ci_session_new_rows(g->ranks[r], s->max_ctx, s->max_rows, &rs[r], err, errlen)) return -1;
    return 0;
}

static void g_session_free(ci_session *s) {
    ci_group *g = s->m->impl;
    ci_session **rs = s->impl;
    for (int r = 0; r < g->world; r++) ci_session_free(rs[r]);
    free(rs);
    s->impl = NULL;
}

/* every rank's part together */
static size_t g_cache_bytes_per_token(const ci_model *m) {
    const ci_group *g = m->impl;
    size_t b = 0;
    for (int r = 0; r < g->world; r++) b += g->ranks[r]->family->ops->cache_bytes_per_token(g->ranks[r]);
    return b;
}

/* Ends the rank threads and frees everything but m's own fields (open's failure path too). */
static void group_free(ci_group *g) {
    if (g->n_th) {
        pthread_mutex_lock(&g->mu);
        g->quit = 1;
        pthread_cond_broadcast(&g->go);
        pthread_mutex_unlock(&g->mu);
        for (int r = 1; r <= g->n_th; r++) pthread_join(g->th[r], NULL);
    }
    if (g->ranks)
        for (int r = 0; r < g->world; r++) ci_model_free(g->ranks[r]);   /* rank 0's backend too */
    ci_comm_free(g->comm);
    if (g->logits)
        for (int r = 0; r < g->world; r++) free(g->logits[r]);
    free(g->logits);
    free(g->logits_cap);
    free(g->calls);
    free(g->rss);
    free(g->rids);
    free(g->th);
    free(g->ranks);
    pthread_mutex_destroy(&g->mu);
    pthread_cond_destroy(&g->go);
    pthread_cond_destroy(&g->done_cv);
    free(g);
}

static void g_unload(ci_model *m) {
    ci_group *g = m->impl;
    group_free(g);
    m->be = NULL;
    m->impl = NULL;
}

static const ci_family_ops group_ops = {
    .unload = g_unload, .session_init = g_session_init, .session_free = g_session_free, .forward = g_forward,
    .forward_argmax = g_forward_argmax, .cache_bytes_per_token = g_cache_bytes_per_token,
    .forward_batch = g_forward_batch, .forward_batch_argmax = g_forward_batch_argmax,
};

int ci_group_open(const char *dir, const ci_model_opts *opts, ci_model **out, char *err, size_t errlen) {
    *out = NULL;
    const int W = opts->tp;
    if (W < 2 || W > CI_COMM_MAX) return ci_err(err, errlen, "--tp %d: expected 2..%d ranks", W, CI_COMM_MAX);
    if (opts->device != 0)
        return ci_err(err, errlen, "--tp %d: tensor parallel runs on the CPU here (ranks as threads); several GPUs need NCCL, not written yet",
                      W);
    ci_model *m = calloc(1, sizeof *m);
    ci_group *g = calloc(1, sizeof *g);
    if (!m || !g) { free(m); free(g); return ci_err(err, errlen, "out of memory"); }
    pthread_mutex_init(&m->tk_mu, NULL);
    snprintf(m->dir, sizeof m->dir, "%s", dir);
    g->world = W;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->go, NULL);
    pthread_cond_init(&g->done_cv, NULL);
    g->comm = ci_comm_new(W);
    g->ranks = calloc((size_t)W, sizeof *g->ranks);
    g->logits = calloc((size_t)W, sizeof *g->logits);
    g->logits_cap = calloc((size_t)W, sizeof *g->logits_cap);
    g->calls = calloc((size_t)W, sizeof *g->calls);
    g->th = calloc((size_t)W, sizeof *g->th);
    m->impl = g;
    if (!g->comm || !g->ranks || !g->logits || !g->logits_cap || !g->calls || !g->th) {
        ci_err(err, errlen, "out of memory");
        goto fail;
    }
    if (cfg_load(dir, &m->cfg, err, errlen)) goto fail;
    ci_model_opts o = *opts;
    o.tp = 0;
    o.n_threads = opts->n_threads > 0 ? (opts->n_threads + W - 1) / W : 0;
    if (o.n_threads <= 0) {   /* the online CPUs shared between the ranks */
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        o.n_threads = cpus > W ? (int)(cpus / W) : 1;
    }
    for (int r = 0; r < W; r++)
        if (ci_model_open_rank(dir, &o, g->comm, r, opts->ep, &g->ranks[r], err, errlen)) goto fail;
    for (int r = 1; r < W; r++) {
        worker_arg *a = malloc(sizeof *a);
        if (a) *a = (worker_arg){ g, r };
        if (!a || pthread_create(&g->th[r], NULL, worker, a)) {
            free(a);
            ci_err(err, errlen, "--tp %d: cannot start rank %d's thread", W, r);
            goto fail;
        }
        g->n_th = r;
    }
    const ci_model *m0 = g->ranks[0];
    g->fam = *m0->family;
    g->fam.ops = &group_ops;
    m->family = &g->fam;
    m->be = m0->be;   /* rank 0's: its name and status speak for the group; freed with the ranks */
    m->n_params = m0->n_params;
    memcpy(m->bytes_by_dtype, m0->bytes_by_dtype, sizeof m->bytes_by_dtype);
    m->decode_bytes = m0->decode_bytes;
    *out = m;
    return 0;
fail:
    group_free(g);
    m->impl = NULL;
    m->be = NULL;
    ci_model_free(m);
    return -1;
}
