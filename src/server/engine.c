/* engine.c — see engine.h.
 *
 * Threads: the scheduler thread alone touches the model, the slots' sessions, samplers and
 * the prefix store; everything shared with submitters (the queue, each request's published
 * count, finish state and cancel flag, the stats) is under e->mu. A request's token arrays
 * are written by the scheduler at index n_out before n_out is raised under the lock, and
 * readers only read below n_out, so the arrays themselves need no lock.
 *
 * One scheduler iteration: admit queued requests into idle slots, finish cancelled ones,
 * advance every prefilling slot by one chunk (a slot whose prompt is complete samples its
 * first token from the prefill's logits), then one batched decode step over every slot that
 * has a sampled token still to feed (or, replaying, one of its generated ids: engine.h).
 * New requests therefore join between decode steps, and a long prompt delays the others by
 * at most one chunk per step. */
#include "engine.h"
#include "jsonfsm.h"
#include "prefix.h"
#include "tokmask.h"
#include "../cache/cache.h"
#include "../core/status.h"
#include "../core/threads.h"
#include "../gen/sampler.h"
#include "../models/model.h"
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* SNAP_EVERY: hybrid families snapshot a prefilling slot each time it crosses a multiple of
 * this many tokens (their prefill chunks end on multiples of the chunk, paged or not; paged,
 * that is a block boundary, where a later sequence can go on from the shared blocks). */
/* JSON mode: the longest whitespace run between tokens (deep pretty-printing fits) */
#define JSON_MAX_WS 64

enum { PREFILL_CHUNK = 256, MIN_SAVE = 8, SNAP_EVERY = 512 };
enum { REPLAYING = -3 };   /* a decode row of step() that fed a replayed id: nothing to publish */
enum { Q_QUEUED, Q_ACTIVE, Q_DONE };

struct eng_req {
    eng *e;
    int refs;                  /* under e->mu */
    eng_params p;
    int *prompt;               /* [p.n_prompt], owned */
    int n_prompt0;             /* the prompt's own length (preemption appends the generated ids to prompt) */
    double t_submit;           /* now_s() at eng_submit: the engine's side of the time to first token */
    int *bias_id;              /* [p.n_bias], owned */
    float *bias;
    int state;                 /* Q_*, under e->mu */
    int cancel;                /* under e->mu */
    int *ids;                  /* [max_tokens] */
    float *lps;                /* [max_tokens] when logprobs */
    int *top_ids;              /* [max_tokens, n_top] */
    float *top_lps;
    int n_top;
    int n_out;                 /* published tokens, under e->mu */
    eng_finish fin;
    char err[512];
    int cached;
    int waited;                /* paged: it waited at the queue head for blocks */
    int resumed;               /* paged: preempted and queued again; its prompt now ends with the ids it
                                * had generated (n_out of them), recomputed at its next admission */
    smp_state smp;             /* the sampler it had when preempted (its generator moves on from there) */
    uint64_t admitted;         /* the clock at its latest admission (the newest is preempted first) */
    pthread_cond_t cv;
    eng_req *next;             /* queue link */
};

typedef struct {
    ci_session *s;
    int *toks;                 /* [ctx] tokens whose rows the cache holds: n_toks == s->pos */
    int n_toks;
    eng_req *r;                /* NULL: idle */
    int fed;                   /* prompt tokens in the cache */
    int prefill_to;            /* the prefill runs the prompt to here; the rest of it (a resumed request's
                                * generated ids, eng_opts.replay_decode) is fed as decode steps */
    int pending;               /* sampled, not yet fed; -1 none */
    int finished;              /* the scheduler's view: r is done, publish and release */
    smp_state smp;
    int *counts;               /* [vocab] occurrences of each id among generated tokens */
    float *lsm;                /* [vocab] log-softmax scratch (logprobs) */
    int *mark;                 /* [vocab] penalty stamps */
    int stamp;
    jf_state js;               /* JSON mode: the reply so far */
    sm_matcher sm;             /* grammar mode (r->p.grammar): the matcher and its state */
    sm_state ss;
    uint64_t used;
} slot;

struct eng {
    ci_model *m;
    const ci_family_ops *ops;
    eng_opts o;
    int V, trim;               /* trim: cache_export / import (rows); else snap: snapshot / restore */
    int snap;                  /* paged too: the snapshots hold the recurrent states, the pool the rows */
    int paged;                 /* the slots share the model's block pool (engine.h) */
    int replay;                /* paged, and eng_opts.replay_decode or a hybrid: a resumed request's ids are decode steps */
    int chunk;                 /* prompt tokens per slot per step (eng_opts.prefill_chunk) */
    slot *slots;
    float *logits;             /* [parallel, V] */
    ci_pool *spool;            /* a decode step's rows sampled in parallel (eng_opts.sample_threads), or NULL */
    ci_session **bs;           /* [parallel] batch of one decode step */
    int *btok, *bslot, *bids;  /* bids: a greedy step's ids */
    tm_trie *trie;             /* the token texts as a trie, for grammar masks (NULL: no texts) */
    uint8_t *allowed;          /* [ranks of the trie] a grammar mask */
    int *notext, n_notext;     /* ids of the model's vocabulary without a text (masked in grammar mode) */
    float eos_lg[8];           /* EOS logits kept across a grammar mask */
    pfx_store *pfx;
    pthread_t th;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t work;
    eng_req *qhead, *qtail;
    int qlen, stop;
    uint64_t clock;
    eng_stats st;
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void req_free(eng_req *r) {
    jsc_free(r->p.grammar);
    smp_free(&r->smp);
    free(r->prompt); free(r->bias_id); free(r->bias); free(r->ids); free(r->lps); free(r->top_ids); free(r->top_lps);
    pthread_cond_destroy(&r->cv);
    free(r);
}

/* Under e->mu. */
static void unref(eng_req *r) {
    if (--r->refs == 0) req_free(r);
}

/* Under e->mu: the request is over; wake its reader and drop the engine's reference. */
static void finish(eng_req *r, eng_finish f, const char *msg) {
    if (r->state == Q_DONE) return;
    r->state = Q_DONE;
    r->fin = f;
    if (msg) snprintf(r->err, sizeof r->err, "%s", msg);
    pthread_cond_broadcast(&r->cv);
    unref(r);
}

/* ---- admission and prefix reuse (under e->mu; the scheduler is between steps) ---------- */

static int common(const int *a, int na, const int *b, int nb) {
    int k = 0, n = na < nb ? na : nb;
    while (k < n && a[k] == b[k]) k++;
    return k;
}

static void snap_free_blob(void *b) { cache_snap_free(b); }

/* A snapshot of slot sl's cache at its n_toks tokens for the prefix store, when there is
 * none yet: NULL otherwise (or out of memory). The caller inserts it. */
static cache_snap *take_snapshot(eng *e, slot *sl) {
    char err[256];
    if (!e->pfx || !e->snap || sl->n_toks < MIN_SAVE || sl->s->pos != sl->n_toks ||
        pfx_covers(e->pfx, sl->toks, sl->n_toks))
        return NULL;
    return e->ops->snapshot(sl->s, err, sizeof err);
}

/* Under e->mu. Keeps a slot's sequence in the prefix store before its cache is
 * overwritten: its rows (trim families) or a snapshot of its whole cache (hybrids). */
static void save_slot(eng *e, slot *sl) {
    if (!e->pfx || sl->n_toks < MIN_SAVE || pfx_covers(e->pfx, sl->toks, sl->n_toks)) return;
    if (e->snap) {
        cache_snap *s = take_snapshot(e, sl);
        if (s) pfx_insert(e->pfx, sl->toks, sl->n_toks, PFX_SNAPSHOT, s, cache_snap_bytes(s));
        return;
    }
    size_t bytes = e->ops->cache_bytes_per_token(e->m) * (size_t)sl->n_toks;
    void *blob = malloc(bytes ? bytes : 1);
    char err[256];
    if (!blob) return;
    if (e->ops->cache_export(sl->s, sl->n_toks, blob, err, sizeof err)) { free(blob); return; }
    pfx_insert(e->pfx, sl->toks, sl->n_toks, PFX_ROWS, blob, bytes);
}

static void took(eng *e, slot *sl, int tok);

static void start_in_slot(eng *e, slot *sl, eng_req *r, int reuse) {
    sl->r = r;
    sl->n_toks = reuse;
    sl->s->pos = reuse;
    sl->fed = reuse;
    sl->prefill_to = r->p.n_prompt;
    sl->pending = -1;
    sl->finished = 0;
    sl->used = ++e->clock;
    memcpy(sl->toks, r->prompt, (size_t)reuse * sizeof(int));
    memset(sl->counts, 0, (size_t)e->V * sizeof(int));
    jf_init(&sl->js, 1);
    sl->js.max_ws = JSON_MAX_WS;
    sm_release(&sl->sm);
    if (r->p.grammar && sm_init(&sl->sm, r->p.grammar, &sl->ss)) sl->ss.n = 0;   /* no memory: stuck at once */
    smp_free(&sl->smp);
    if (!r->resumed) r->cached = reuse;
    r->state = Q_ACTIVE;
    r->admitted = sl->used;
    e->st.prefix_hit_tokens += reuse;
    if (r->resumed) {   /* a preempted request goes on where it stopped: its sampler, penalties, JSON / grammar state */
        sl->smp = r->smp;
        memset(&r->smp, 0, sizeof r->smp);
        for (int k = 0; k < r->n_out; k++) took(e, sl, r->ids[k]);
        if (e->replay) {   /* its own prompt (or what the pool gave back) by prefill, its ids by decode */
            sl->prefill_to = reuse > r->n_prompt0 ? reuse : r->n_prompt0;
            if (sl->fed == sl->prefill_to) sl->pending = r->prompt[sl->fed];
        }
    }
}

/* Blocks of a request: its prompt and every token it may generate. */
static int blocks_of(const eng_params *p) { return (p->n_prompt + p->max_tokens + KV_BLOCK - 1) / KV_BLOCK; }

static int active_count(const eng *e) {
    int a = 0;
    for (int i = 0; i < e->o.parallel; i++) a += e->slots[i].r != NULL;
    return a;
}

/* Paged: a slot's request is over: its full blocks are named for others (prefix reuse on),
 * its partly filled last block for whoever goes on from its tokens (a next turn copies its
 * rows, kv_pages.h), a hybrid's states at its end go to the prefix store, and the slot lets
 * every block go (named ones stay cached in the pool, LRU), so an idle engine holds no
 * block. */
static void slot_settle(eng *e, slot *sl) {
    if (!e->paged) return;
    if (e->o.prefix_cache_bytes) ci_session_publish(sl->s, sl->toks, sl->n_toks, 1);
    cache_snap *snap = take_snapshot(e, sl);
    if (snap) pfx_insert(e->pfx, sl->toks, sl->n_toks, PFX_SNAPSHOT, snap, cache_snap_bytes(snap));
    ci_session_truncate(sl->s, 0);
    sl->n_toks = 0;
}

/* Paged, a hybrid: slot sl holds the blocks of the first `blocks` tokens of toks[0, n) that
 * the pool gave (ci_session_match); its recurrent states come from the longest snapshot in
 * the prefix store within them, and the blocks past it go back. A snapshot that ends inside
 * a shared block (a prompt's end, in a block named full since) gets a copy of that block's
 * rows before it in a block of the session's own, which it then writes on (copy on write);
 * when the pool has no block for that, a shorter snapshot is looked for. Returns the
 * positions reused (0: none, the session emptied). */
static int restore_states(eng *e, slot *sl, const int *toks, int n, int blocks) {
    char err[256];
    int lim = blocks, pm = 0;
    while (e->pfx && lim >= MIN_SAVE) {
        int pi = pfx_lookup(e->pfx, toks, n, lim, &pm);
        if (pi < 0 || pm <= 0) { pm = 0; break; }
        int kept = ci_session_truncate_copy(sl->s, pm);
        if (kept == pm) {
            if (e->ops->restore(sl->s, pfx_blob(e->pfx, pi), err, sizeof err)) pm = 0;
            break;
        }
        lim = kept;
        pm = 0;
    }
    if (!pm) ci_session_truncate(sl->s, 0);
    return pm;
}

/* Paged admission of r into idle slot sl (which holds no block): the pool's named blocks of
 * the prompt's longest full-block prefix, then the blocks of the rest of the prompt and its
 * first generated token, with one block to spare for each running sequence besides (they
 * grow a block at a time while decoding, preempting the newest when the pool runs dry). 0,
 * or -1 when the pool cannot give them yet (r waits at the head of the queue; the blocks
 * taken go back). */
static int admit_paged(eng *e, eng_req *r, slot *sl) {
    const int n = r->p.n_prompt;
    int reuse = e->o.prefix_cache_bytes ? ci_session_match(sl->s, r->prompt, n, n - 1) : 0;
    if (e->snap) reuse = restore_states(e, sl, r->prompt, n, reuse);
    else if (e->replay && r->resumed && reuse < r->n_prompt0 && reuse > r->cached) {
        /* the rows of its prompt again as its first admission's chunks made them (whole
         * chunks from r->cached, step(); a GEMM's row bits may depend on the rows beside it):
         * from the last such start the pool gives back */
        const int c = r->cached + (reuse - r->cached) / e->chunk * e->chunk;
        if (c < reuse) {
            ci_session_truncate(sl->s, 0);
            reuse = ci_session_match(sl->s, r->prompt, n, c);
        }
    }
    char err[256];
    if (kvp_available(e->m->kv_pool) < (n + 1 + KV_BLOCK - 1) / KV_BLOCK - sl->s->pages.n + active_count(e) ||
        ci_session_reserve(sl->s, n + 1, err, sizeof err)) {
        ci_session_truncate(sl->s, 0);
        if (!r->waited) e->st.kv_waits++;   /* once per request, however many tries */
        r->waited = 1;
        return -1;
    }
    if (e->o.prefix_cache_bytes) {         /* counted once, at the admission that holds */
        e->st.kv_block_lookups += (n - 1) / KV_BLOCK;
        e->st.kv_block_hits += reuse / KV_BLOCK;
    }
    memcpy(sl->toks, r->prompt, (size_t)reuse * sizeof(int));
    sl->n_toks = reuse;
    start_in_slot(e, sl, r, reuse);
    return 0;
}

/* Puts r into an idle slot; returns 0, or -1 when none is idle or memory ran out (r
 * finished with an error in that case). */
static int admit(eng *e, eng_req *r) {
    const int n = r->p.n_prompt;
    int best = -1, bu = -1, lru = -1;
    for (int i = 0; i < e->o.parallel; i++) {
        slot *sl = &e->slots[i];
        if (sl->r) continue;
        if (lru < 0 || sl->used < e->slots[lru].used) lru = i;
        int c = e->o.prefix_cache_bytes ? common(sl->toks, sl->n_toks, r->prompt, n) : 0, u;
        if (e->trim) u = c < n - 1 ? c : n - 1;
        else u = c == sl->n_toks && c <= n - 1 ? c : 0;
        if (u > bu || (u == bu && sl->used < e->slots[best].used)) { bu = u; best = i; }
    }
    if (best < 0) return -1;
    if (e->paged) return admit_paged(e, r, &e->slots[best]);
    int pm = 0, pi = e->pfx ? pfx_lookup(e->pfx, r->prompt, n, n - 1, &pm) : -1;
    if (pi >= 0 && pm > bu) {
        slot *sl = &e->slots[lru];
        save_slot(e, sl);                        /* may evict or move entries: look again */
        pi = pfx_lookup(e->pfx, r->prompt, n, n - 1, &pm);
        if (pi < 0) pm = 0;
        char err[256];
        if (pm > 0) {
            const void *b = pfx_blob(e->pfx, pi);
            if (e->trim ? e->ops->cache_import(sl->s, pm, b, err, sizeof err) : e->ops->restore(sl->s, b, err, sizeof err))
                pm = 0;
        }
        if (pm == 0) ci_session_reset(sl->s);
        start_in_slot(e, sl, r, pm);
        return 0;
    }
    slot *sl = &e->slots[best];
    if (bu < sl->n_toks) save_slot(e, sl);
    if (bu == 0) ci_session_reset(sl->s);
    start_in_slot(e, sl, r, bu);
    return 0;
}

/* ---- sampling ------------------------------------------------------------------------- */

static int is_eos(const eng *e, int id) {
    for (int i = 0; i < e->m->cfg.n_eos; i++) if (id == e->m->cfg.eos_ids[i]) return 1;
    return 0;
}

/* Slot sl's request took token tok: its penalty count, and its text fed to the JSON / grammar
 * state (EOS has none). */
static void took(eng *e, slot *sl, int tok) {
    const eng_req *r = sl->r;
    sl->counts[tok]++;
    if (is_eos(e, tok) || (!r->p.json_mode && !r->p.grammar)) return;
    const char *t = e->o.tok_bytes + e->o.tok_off[tok];
    const uint32_t len = e->o.tok_off[tok + 1] - e->o.tok_off[tok];
    if (r->p.json_mode) jf_feed(&sl->js, t, len);
    if (r->p.grammar && sl->ss.n) sm_feed(&sl->sm, &sl->ss, t, len);
}

#define JSON_STUCK "JSON mode: no token of this vocabulary continues the reply as JSON"
#define GRAMMAR_STUCK "structured output: no token of this vocabulary continues the reply under its schema"

/* JSON mode: every token whose text would leave the reply no JSON prefix is masked; once
 * the object is whole, all but EOS. -1 when nothing is left to choose. */
static int json_mask(eng *e, slot *sl, float *lg) {
    const int V = e->V, whole = jf_complete(&sl->js), nt = e->o.tok_n < V ? e->o.tok_n : V;
    int left = 0;
    for (int i = 0; i < V; i++) {
        if (lg[i] == -INFINITY) continue;
        uint32_t a = i < nt ? e->o.tok_off[i] : 0, b = i < nt ? e->o.tok_off[i + 1] : 0;   /* past nt: no text */
        int ok;
        if (is_eos(e, i)) ok = whole;
        else if (whole || a == b) ok = 0;
        else {
            jf_state t = sl->js;
            ok = jf_feed(&t, e->o.tok_bytes + a, b - a) == 0;
        }
        if (ok) left++;
        else lg[i] = -INFINITY;
    }
    return left ? 0 : -1;
}

/* Grammar mode: every token the matcher refuses is masked (tokmask.h); EOS only where the
 * reply is complete. -1 when nothing is left. */
static int grammar_mask(eng *e, slot *sl, float *lg) {
    const int V = e->V, whole = sl->ss.n && sm_complete(&sl->sm, &sl->ss);
    int nr, left;
    const int *order = tm_order(e->trie, &nr);
    for (int i = 0; i < e->m->cfg.n_eos && i < 8; i++) {
        int id = e->m->cfg.eos_ids[i];
        e->eos_lg[i] = id >= 0 && id < V ? lg[id] : -INFINITY;
    }
    if (!sl->ss.n || (left = tm_mask(e->trie, &sl->sm, &sl->ss, e->allowed)) < 0) return -1;
    for (int q = 0; q < nr; q++) if (!e->allowed[q]) lg[order[q]] = -INFINITY;   /* refused texts */
    for (int k = 0; k < e->n_notext; k++) lg[e->notext[k]] = -INFINITY;        /* no text: never but EOS */
    for (int i = 0; i < e->m->cfg.n_eos && i < 8; i++) {
        int id = e->m->cfg.eos_ids[i];
        if (id < 0 || id >= V) continue;
        if (whole) { if (e->eos_lg[i] != -INFINITY) { lg[id] = e->eos_lg[i]; left++; } }
        else lg[id] = -INFINITY;
    }
    return left ? 0 : -1;
}

/* The next token of slot sl from its logits row lg (modified). Fills logprobs of r at
 * index r->n_out when asked. -1 when JSON mode leaves no token, -2 when the grammar does. */
static int sample(eng *e, slot *sl, float *lg) {
    eng_req *r = sl->r;
    const int V = e->V;
    if (r->p.top_logprobs >= 0) {
        float mx = lg[0];
        for (int i = 1; i < V; i++) if (lg[i] > mx) mx = lg[i];
        double se = 0;
        for (int i = 0; i < V; i++) se += exp((double)lg[i] - mx);
        float lse = mx + (float)log(se);
        for (int i = 0; i < V; i++) sl->lsm[i] = lg[i] - lse;
    }
    for (int i = 0; i < r->p.n_bias; i++) lg[r->bias_id[i]] += r->bias[i];
    if (r->p.presence_penalty != 0 || r->p.frequency_penalty != 0) {
        sl->stamp++;
        for (int k = 0; k < r->n_out; k++) {
            int id = r->ids[k];
            if (sl->mark[id] == sl->stamp) continue;
            sl->mark[id] = sl->stamp;
            lg[id] -= r->p.presence_penalty + r->p.frequency_penalty * (float)sl->counts[id];
        }
    }
    if (r->p.json_mode && json_mask(e, sl, lg)) return -1;
    if (r->p.grammar && grammar_mask(e, sl, lg)) return -2;
    int tok = smp_sample(&sl->smp, lg, sl->toks, sl->n_toks);
    took(e, sl, tok);
    if (r->p.top_logprobs >= 0) {
        int k = r->n_out, nt = r->n_top;
        r->lps[k] = sl->lsm[tok];
        int *ti = r->top_ids + (size_t)k * nt;
        float *tl = r->top_lps + (size_t)k * nt;
        for (int j = 0; j < nt; j++) {          /* the nt best, by selection (nt <= 20) */
            int b = -1;
            for (int i = 0; i < V; i++) {
                if (b >= 0 && !(sl->lsm[i] > sl->lsm[b])) continue;
                int taken = 0;
                for (int q = 0; q < j; q++) taken |= ti[q] == i;
                if (!taken) b = i;
            }
            ti[j] = b;
            tl[j] = b >= 0 ? sl->lsm[b] : -INFINITY;
        }
    }
    r->ids[r->n_out] = tok;
    return tok;
}

/* Whether r's next token is the argmax of the raw logits and nothing else reads them (no
 * logprobs, bias, penalties, JSON mode or grammar): a batch of such rows can take the
 * backend's argmax (forward_batch_argmax) and bring back ids instead of logits. */
static int greedy_row(const eng_req *r) {
    return smp_is_greedy(&r->p.so) && r->p.top_logprobs < 0 && !r->p.n_bias && r->p.presence_penalty == 0 &&
           r->p.frequency_penalty == 0 && !r->p.json_mode && !r->p.grammar;
}

/* sample()'s bookkeeping for a token the backend chose (a greedy_row step) */
static int take_chosen(eng *e, slot *sl, int tok) {
    took(e, sl, tok);
    sl->r->ids[sl->r->n_out] = tok;
    return tok;
}

/* A decode step's sampled rows drawn by the sampling pool: row rows[i]'s token into toks[row]
 * (sample() touches only its slot, its request and read-only engine state; JSON mode and
 * grammar rows, which share the engine's mask scratch, are drawn by the scheduler itself). */
typedef struct {
    eng *e;
    const int *rows;
    int *toks;
} par_sample;

static void sample_task(void *ctx, int i) {
    par_sample *c = ctx;
    const int b = c->rows[i];
    c->toks[b] = sample(c->e, &c->e->slots[c->e->bslot[b]], c->e->logits + (size_t)b * c->e->V);
}

/* After a token was written at r->ids[r->n_out] (not yet published): does it end r? */
static int ends(eng *e, slot *sl, int tok) {
    eng_req *r = sl->r;
    if (r->n_out + 1 >= r->p.max_tokens) return 1;
    if (r->p.json_mode && jf_complete(&sl->js)) return 1;   /* the object closed: the reply is done */
    if (r->p.grammar && r->p.grammar_ends && sm_complete(&sl->sm, &sl->ss)) return 1;
    if (!r->p.ignore_eos)
        for (int i = 0; i < e->m->cfg.n_eos; i++) if (tok == e->m->cfg.eos_ids[i]) return 1;
    return 0;
}

/* ---- the scheduler ----------------------------------------------------------------------- */

/* Under e->mu: publish the token just sampled for slot sl (and finish if it ends r). */
static void publish(eng *e, slot *sl, int tok) {
    eng_req *r = sl->r;
    int end = ends(e, sl, tok);
    int eos = 0;
    for (int i = 0; i < e->m->cfg.n_eos; i++) eos |= tok == e->m->cfg.eos_ids[i];
    int closes = (r->p.json_mode && jf_complete(&sl->js)) || (r->p.grammar && r->p.grammar_ends && sm_complete(&sl->sm, &sl->ss));
    if (closes) eos = 1;                                     /* ends as an EOS would (finish "stop") */
    if (r->n_out == 0) {   /* its first token: queue, admission, prefill, sampling */
        e->st.first_token_seconds += now_s() - r->t_submit;
        e->st.first_tokens++;
    }
    r->n_out++;
    e->st.gen_tokens++;
    pthread_cond_broadcast(&r->cv);
    if (end) {
        finish(r, eos && (!r->p.ignore_eos || closes) ? ENG_FIN_EOS : ENG_FIN_LENGTH, NULL);
        sl->r = NULL;
        sl->used = ++e->clock;
        slot_settle(e, sl);
    } else {
        sl->pending = tok;
    }
}

static void slot_fail(eng *e, slot *sl, const char *msg) {
    finish(sl->r, ENG_FIN_ERROR, msg);
    sl->r = NULL;
    sl->n_toks = 0;
    ci_session_reset(sl->s);
    slot_settle(e, sl);
}

/* Paged, under e->mu: the running request of slot sl goes back to the head of the queue and
 * lets its blocks go (named first, so its next admission may find most of them): its prompt
 * becomes its own prompt + every id it generated (a request preempted again, maybe while it
 * was recomputing, starts from its own prompt again), recomputed when it is admitted again,
 * and it keeps its sampler. Its reader sees nothing of it but a pause. */
static int preempt(eng *e, slot *sl) {
    eng_req *r = sl->r;
    int *np = realloc(r->prompt, (size_t)(r->n_prompt0 + r->n_out) * sizeof(int));
    if (!np) return -1;
    memcpy(np + r->n_prompt0, r->ids, (size_t)r->n_out * sizeof(int));
    r->prompt = np;
    r->p.prompt = np;
    r->p.n_prompt = r->n_prompt0 + r->n_out;
    smp_free(&r->smp);
    r->smp = sl->smp;
    memset(&sl->smp, 0, sizeof sl->smp);
    r->resumed = 1;
    r->state = Q_QUEUED;
    r->next = e->qhead;
    e->qhead = r;
    if (!e->qtail) e->qtail = r;
    e->qlen++;
    e->st.preemptions++;
    sl->r = NULL;
    sl->pending = -1;
    sl->used = ++e->clock;
    slot_settle(e, sl);
    return 0;
}

/* Paged, under e->mu: every decoding slot gets the block of its next position; when the pool
 * is dry the newest running request is preempted (its blocks come back) until it is not. */
static void grow_paged(eng *e) {
    char err[256];
    for (int i = 0; i < e->o.parallel; i++) {
        slot *sl = &e->slots[i];
        while (sl->r && sl->pending >= 0 && ci_session_reserve(sl->s, sl->s->pos + 1, err, sizeof err)) {
            slot *v = NULL;
            for (int j = 0; j < e->o.parallel; j++)
                if (e->slots[j].r && (!v || e->slots[j].r->admitted > v->r->admitted)) v = &e->slots[j];
            if (!v || preempt(e, v)) { slot_fail(e, sl, err); break; }
        }
    }
}

/* One iteration's model work; called without the lock, publishes under it. */
static void step(eng *e) {
    char err[512];
    const int V = e->V;
    /* prefill: each slot with prompt left runs one chunk, within a per-step budget */
    int budget = 2 * e->chunk;
    for (int i = 0; i < e->o.parallel && budget > 0; i++) {
        slot *sl = &e->slots[i];
        eng_req *r = sl->r;
        if (!r || sl->fed >= sl->prefill_to) continue;
        if (!sl->smp.p && smp_init(&sl->smp, &r->p.so, V)) {
            pthread_mutex_lock(&e->mu); slot_fail(e, sl, "out of memory for the sampler"); pthread_mutex_unlock(&e->mu);
            continue;
        }
        /* Unpaged: chunks end on multiples of the chunk (where hybrids take snapshots). Paged:
         * whole chunks from where the request's first admission started (r->cached), so a
         * prompt after a reused prefix is one call, not a short one up to the next multiple
         * and then the rest (two passes over the weights on a device); a resume that replays
         * its prompt keeps that grid (admit_paged). Paged hybrids keep the multiples: their
         * snapshots there are on block boundaries, usable with the shared blocks */
        const int base = e->paged && !e->snap && sl->fed >= r->cached ? r->cached : 0;
        int k = sl->prefill_to - sl->fed, to_edge = e->chunk - (sl->fed - base) % e->chunk;
        if (k > to_edge) k = to_edge;
        if (e->snap && e->pfx && r->p.snap_at > sl->fed && r->p.snap_at < sl->fed + k)
            k = r->p.snap_at - sl->fed;          /* a snapshot where the request says others will part */
        budget -= k;
        float *lg = e->logits + (size_t)i * V;
        /* the prompt's last chunk of a greedy request: the backend's argmax, one id back */
        const int argmax = sl->fed + k == r->p.n_prompt && greedy_row(r);
        int chosen = -1;
        double t0 = now_s();
        int rc = argmax ? ci_forward_argmax(sl->s, r->prompt + sl->fed, k, &chosen, err, sizeof err)
                        : ci_forward(sl->s, r->prompt + sl->fed, k, lg, 0, err, sizeof err);
        double dt = now_s() - t0;
        pthread_mutex_lock(&e->mu);
        e->st.prefill_tokens += k;
        e->st.prefill_calls++;
        e->st.prefill_seconds += dt;
        if (rc) { slot_fail(e, sl, err); pthread_mutex_unlock(&e->mu); continue; }
        pthread_mutex_unlock(&e->mu);
        memcpy(sl->toks + sl->n_toks, r->prompt + sl->fed, (size_t)k * sizeof(int));
        sl->n_toks += k;
        sl->fed += k;
        if (e->paged && e->o.prefix_cache_bytes) {   /* its full blocks named as they fill */
            pthread_mutex_lock(&e->mu);
            ci_session_publish(sl->s, sl->toks, sl->n_toks, 0);
            pthread_mutex_unlock(&e->mu);
        }
        /* hybrids: a snapshot every SNAP_EVERY tokens, where the request said (snap_at: its
         * system message's end) and at the end of the prompt, so a later prompt that shares
         * only part of this one (the next chat turn re-rendered, another conversation with
         * the same system prompt) can start from there */
        if (e->snap && (sl->n_toks % SNAP_EVERY == 0 || sl->fed == r->p.n_prompt || sl->fed == r->p.snap_at)) {
            cache_snap *snap = take_snapshot(e, sl);
            if (snap) {
                pthread_mutex_lock(&e->mu);
                pfx_insert(e->pfx, sl->toks, sl->n_toks, PFX_SNAPSHOT, snap, cache_snap_bytes(snap));
                pthread_mutex_unlock(&e->mu);
            }
        }
        if (sl->fed == r->p.n_prompt) {
            int tok = argmax ? take_chosen(e, sl, chosen) : sample(e, sl, lg);
            pthread_mutex_lock(&e->mu);
            if (tok < 0) slot_fail(e, sl, tok == -1 ? JSON_STUCK : GRAMMAR_STUCK);
            else publish(e, sl, tok);
            pthread_mutex_unlock(&e->mu);
        } else if (sl->fed == sl->prefill_to) {
            sl->pending = r->prompt[sl->fed];   /* replay: its generated ids follow as decode steps */
        }
    }
    /* decode: every slot with a token to feed, in one batch */
    if (e->paged) {
        pthread_mutex_lock(&e->mu);
        grow_paged(e);
        pthread_mutex_unlock(&e->mu);
    }
    int nb = 0;
    for (int i = 0; i < e->o.parallel; i++) {
        slot *sl = &e->slots[i];
        if (!sl->r || sl->pending < 0) continue;
        e->bs[nb] = sl->s;
        e->btok[nb] = sl->pending;
        e->bslot[nb++] = i;
    }
    if (!nb) return;
    double t0 = now_s();
    int rc = 0, greedy = e->ops->forward_batch_argmax != NULL;
    for (int b = 0; b < nb && greedy; b++) greedy = greedy_row(e->slots[e->bslot[b]].r);
    if (greedy) {   /* [nb] ids back where the logits are [nb, V] (a device's download, the host's argmax) */
        rc = e->ops->forward_batch_argmax(e->bs, e->btok, nb, e->bids, err, sizeof err);
    } else if (e->ops->forward_batch) {
        rc = e->ops->forward_batch(e->bs, e->btok, nb, e->logits, err, sizeof err);
    } else {
        for (int b = 0; b < nb && !rc; b++)
            rc = ci_forward(e->bs[b], &e->btok[b], 1, e->logits + (size_t)b * V, 0, err, sizeof err);
    }
    double dt = now_s() - t0;
    if (rc) {
        pthread_mutex_lock(&e->mu);
        for (int b = 0; b < nb; b++) slot_fail(e, &e->slots[e->bslot[b]], err);
        pthread_mutex_unlock(&e->mu);
        return;
    }
    int toks[1024], replayed = 0, par[1024], npar = 0;
    for (int b = 0; b < nb; b++) {
        slot *sl = &e->slots[e->bslot[b]];
        const eng_req *r = sl->r;
        sl->toks[sl->n_toks++] = sl->pending;
        sl->pending = -1;
        if (sl->fed < r->p.n_prompt) {            /* replay: that was one of its generated ids again */
            replayed++;
            if (++sl->fed < r->p.n_prompt) {      /* more follow: nothing is sampled from these logits */
                sl->pending = r->prompt[sl->fed];
                toks[b] = REPLAYING;
                continue;
            }                                     /* its last id: its logits are the next token's */
        }
        if (greedy) toks[b] = take_chosen(e, sl, e->bids[b]);
        else if (e->spool && !r->p.json_mode && !r->p.grammar) par[npar++] = b;
        else toks[b] = sample(e, sl, e->logits + (size_t)b * V);
    }
    par_sample c = { e, par, toks };
    if (npar > 1) ci_pool_run(e->spool, sample_task, &c, npar);
    else if (npar == 1) sample_task(&c, 0);   /* one row: no threads to wake */
    pthread_mutex_lock(&e->mu);
    e->st.decode_argmax_steps += greedy;
    e->st.pool_draws += npar > 1 ? npar : 0;
    e->st.decode_tokens += nb;
    e->st.replay_tokens += replayed;
    e->st.decode_steps++;
    e->st.last_batch = nb;
    e->st.decode_seconds += dt;
    for (int b = 0; b < nb; b++) {
        if (toks[b] == REPLAYING) continue;
        if (toks[b] < 0) slot_fail(e, &e->slots[e->bslot[b]], toks[b] == -1 ? JSON_STUCK : GRAMMAR_STUCK);
        else publish(e, &e->slots[e->bslot[b]], toks[b]);
    }
    pthread_mutex_unlock(&e->mu);
}

static void *eng_main(void *arg) {
    eng *e = arg;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        /* cancelled requests: queued ones leave the queue, running ones their slot (the
         * slot keeps its cache for reuse) */
        for (eng_req **pp = &e->qhead; *pp;) {
            eng_req *r = *pp;
            if (!r->cancel && !e->stop) { pp = &r->next; continue; }
            *pp = r->next;
            if (e->qtail == r) e->qtail = NULL;
            e->qlen--;
            finish(r, e->stop ? ENG_FIN_ERROR : ENG_FIN_CANCEL, e->stop ? "the server is shutting down" : NULL);
        }
        if (!e->qhead) e->qtail = NULL;
        else { eng_req *t = e->qhead; while (t->next) t = t->next; e->qtail = t; }
        for (int i = 0; i < e->o.parallel; i++) {
            slot *sl = &e->slots[i];
            if (sl->r && (sl->r->cancel || e->stop)) {
                finish(sl->r, e->stop ? ENG_FIN_ERROR : ENG_FIN_CANCEL, e->stop ? "the server is shutting down" : NULL);
                sl->r = NULL;
                sl->pending = -1;
                sl->used = ++e->clock;
                slot_settle(e, sl);
            }
        }
        while (e->qhead && !e->stop) {
            eng_req *r = e->qhead;
            const double t_adm = now_s();
            if (admit(e, r)) break;
            if (!r->resumed) {   /* a first admission: its wait in the queue and the admission's own time */
                e->st.queue_seconds += t_adm - r->t_submit;
                e->st.admit_seconds += now_s() - t_adm;
                e->st.admissions++;
            }
            e->qhead = r->next;
            if (!e->qhead) e->qtail = NULL;
            e->qlen--;
        }
        const int active = active_count(e);
        e->st.active = active;
        e->st.queue_depth = e->qlen;
        if (e->stop) break;
        if (!active) { pthread_cond_wait(&e->work, &e->mu); continue; }
        pthread_mutex_unlock(&e->mu);
        step(e);
        pthread_mutex_lock(&e->mu);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* ---- public ----------------------------------------------------------------------------- */

/* A hybrid on the block pool: the bytes of one snapshot of its states (a probe session's, at
 * position 0: the rows stay in the pool, the states are as big at any position; a family whose
 * snapshots grow with the position says its largest, registry.h snapshot_bytes); else 0.
 * *held: the snapshot keeps its bytes in the backend's memory (layer_snap.h), not in a host blob. */
static size_t states_snapshot_bytes(ci_model *m, const eng_opts *o, int rows, int *held) {
    const ci_family_ops *ops = m->family->ops;
    *held = 0;
    if (!ci_model_pageable(m) || !ops->snapshot || !ops->restore || (ops->cache_export && ops->cache_import)) return 0;
    ci_session *probe;
    char err[256];
    if (ci_session_new_rows(m, o->ctx, rows, &probe, err, sizeof err)) return 0;
    cache_snap *snap = ops->snapshot(probe, err, sizeof err);
    size_t b = snap ? cache_snap_bytes(snap) : 0, hb = 0;
    void *owner = NULL;
    *held = snap && cache_snap_held(snap, &hb, &owner) != NULL;
    if (snap && ops->snapshot_bytes) b = ops->snapshot_bytes(m, o->ctx, 1);
    cache_snap_free(snap);
    ci_session_free(probe);
    return b;
}

/* The pool's blocks on a device: what keeps its use at o->mem_fraction of its memory once
 * the slots' sessions stand. A session's scratch is measured by opening one (with a pool of
 * its own for the context, whose size is known) and closing it again. -1 with err when not
 * even one context fits. held: bytes the prefix store may keep in the device's memory
 * besides (a hybrid's snapshots of its states). */
static long long blocks_for_memory(ci_model *m, const eng_opts *o, int rows, size_t held, char *err, size_t errlen) {
    ci_backend *be = m->be;
    size_t f0, f1, f2, total;
    be->mem_info(be, &f0, &total);
    ci_session *probe;
    if (ci_session_new_rows(m, o->ctx, rows, &probe, err, errlen)) return -1;
    be->mem_info(be, &f1, &total);
    ci_session_free(probe);
    be->mem_info(be, &f2, &total);
    const long long bb = (long long)ci_model_kv_block_bytes(m), ctx_blocks = (o->ctx + KV_BLOCK - 1) / KV_BLOCK;
    long long per = (long long)f0 - (long long)f1 - ctx_blocks * bb;   /* one session's scratch */
    if (per < 0) per = 0;
    long long avail = (long long)f2 - (long long)((1.0 - o->mem_fraction) * (double)total) - (long long)o->parallel * per -
                      (long long)held;
    long long nb = avail > 0 ? avail / bb : 0;
    if (nb < ctx_blocks)
        return ci_err(err, errlen, "device memory: %.1f of %.1f GiB free; at --gpu-memory %.2f, after %d slots' scratch "
                      "(%.0f MiB each) and %.0f MiB of prefix snapshots there is room for %lld cache blocks of %d tokens, "
                      "and one --ctx %d needs %lld",
                      f2 / 1073741824.0, total / 1073741824.0, o->mem_fraction, o->parallel, per / 1048576.0,
                      held / 1048576.0, nb, KV_BLOCK, o->ctx, ctx_blocks);
    return nb;
}

int eng_new(ci_model *m, const eng_opts *o, eng **out, char *err, size_t errlen) {
    *out = NULL;
    if (o->parallel < 1 || o->parallel > 1024) return ci_err(err, errlen, "parallel must be in [1, 1024], got %d", o->parallel);
    if (o->ctx < 2) return ci_err(err, errlen, "context must be at least 2 tokens, got %d", o->ctx);
    eng *e = calloc(1, sizeof *e);
    if (!e) return ci_err(err, errlen, "out of memory");
    e->m = m;
    e->ops = m->family->ops;
    e->o = *o;
    if (e->o.queue_max < 0) e->o.queue_max = 0;
    e->V = (int)m->cfg.vocab_size;
    e->chunk = o->prefill_chunk > 0 ? o->prefill_chunk : PREFILL_CHUNK;
    if (e->chunk & (e->chunk - 1)) { free(e); return ci_err(err, errlen, "prefill chunk must be a power of two, got %d", o->prefill_chunk); }
    const int rows = e->chunk > o->parallel ? e->chunk : o->parallel;   /* a slot's largest call */
    int snap_held = 0;
    e->st.snapshot_bytes = states_snapshot_bytes(m, o, rows, &snap_held);
    if (e->o.prefix_cache_bytes == ENG_PREFIX_AUTO) {
        size_t b = (size_t)ENG_PREFIX_DEFAULT_MB << 20, two = 2 * (size_t)o->parallel * e->st.snapshot_bytes;
        e->o.prefix_cache_bytes = two > b ? two : b;
    }
    if (ci_model_pageable(m) && !m->kv_pool) {
        long long nb = o->kv_blocks > 0 ? o->kv_blocks : (long long)o->parallel * ((o->ctx + KV_BLOCK - 1) / KV_BLOCK);
        const size_t held = snap_held && m->be->is_device ? e->o.prefix_cache_bytes : 0;
        if (o->kv_blocks <= 0 && o->mem_fraction > 0 && m->be->mem_info &&
            (nb = blocks_for_memory(m, o, rows, held, err, errlen)) < 0) {
            free(e);
            return -1;
        }
        if (nb > (1 << 30)) nb = 1 << 30;
        if (ci_model_kv_pool(m, (int)nb, err, errlen)) { free(e); return -1; }
        e->st.kv_pool_bytes = (size_t)nb * ci_model_kv_block_bytes(m);
    }
    e->paged = m->kv_pool != NULL;
    e->trim = !e->paged && e->ops->cache_export && e->ops->cache_import;
    e->snap = !e->trim && e->ops->snapshot && e->ops->restore;
    /* a hybrid's recurrent layers give other bits in a chunked prefill than step by step, on
     * any backend: its resumed requests replay their ids as decode steps always */
    e->replay = e->paged && (o->replay_decode || e->snap);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->work, NULL);
    e->slots = calloc((size_t)o->parallel, sizeof *e->slots);
    e->logits = malloc((size_t)o->parallel * e->V * sizeof(float));
    e->bs = calloc((size_t)o->parallel, sizeof *e->bs);
    e->btok = calloc((size_t)o->parallel, sizeof(int));
    e->bslot = calloc((size_t)o->parallel, sizeof(int));
    e->bids = calloc((size_t)o->parallel, sizeof(int));
    if (!e->slots || !e->logits || !e->bs || !e->btok || !e->bslot || !e->bids) {
        ci_err(err, errlen, "out of memory for %d slots", o->parallel);
        goto fail;
    }
    for (int i = 0; i < o->parallel; i++) {
        slot *sl = &e->slots[i];
        sl->pending = -1;
        if (ci_session_new_rows(m, o->ctx, rows, &sl->s, err, errlen)) goto fail;
        sl->toks = malloc((size_t)o->ctx * sizeof(int));
        sl->counts = calloc((size_t)e->V, sizeof(int));
        sl->lsm = malloc((size_t)e->V * sizeof(float));
        sl->mark = calloc((size_t)e->V, sizeof(int));
        if (!sl->toks || !sl->counts || !sl->lsm || !sl->mark) {
            ci_err(err, errlen, "out of memory for %d slots", o->parallel);
            goto fail;
        }
    }
    int sth = o->sample_threads;
    if (sth <= 0) {
        const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        sth = m->be && m->be->is_device ? (int)(cpus < 1 ? 1 : cpus > 16 ? 16 : cpus) : 1;
    }
    if (sth > 1 && !(e->spool = ci_pool_new(sth))) {
        ci_err(err, errlen, "out of memory for %d sampling threads", sth);
        goto fail;
    }
    if (o->tok_off && o->tok_bytes) {
        int nt = o->tok_n < e->V ? o->tok_n : e->V;
        e->notext = malloc((size_t)e->V * sizeof *e->notext);
        if (!e->notext || tm_build(o->tok_bytes, o->tok_off, nt, o->text_stop, &e->trie) ||
            !(e->allowed = malloc((size_t)(nt ? nt : 1)))) {
            ci_err(err, errlen, "out of memory for the token trie");
            goto fail;
        }
        for (int i = 0; i < e->V; i++)
            if (i >= nt || o->tok_off[i + 1] == o->tok_off[i] || o->tok_off[i + 1] - o->tok_off[i] >= 60000) e->notext[e->n_notext++] = i;
    }
    if (e->o.prefix_cache_bytes && (e->trim || e->snap) &&
        !(e->pfx = pfx_new(e->o.prefix_cache_bytes, e->trim ? free : snap_free_blob))) {
        ci_err(err, errlen, "out of memory");
        goto fail;
    }
    e->st.parallel = o->parallel;
    e->st.ctx = o->ctx;
    if (m->be->mem_info) m->be->mem_info(m->be, &e->st.dev_free, &e->st.dev_total);
    if (pthread_create(&e->th, NULL, eng_main, e)) { ci_err(err, errlen, "cannot start the scheduler thread"); goto fail; }
    e->started = 1;
    *out = e;
    return 0;
fail:
    eng_free(e);
    return -1;
}

void eng_stop(eng *e) {
    if (!e || !e->started) return;
    pthread_mutex_lock(&e->mu);
    e->stop = 1;
    pthread_cond_signal(&e->work);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->th, NULL);
    e->started = 0;
}

void eng_free(eng *e) {
    if (!e) return;
    eng_stop(e);
    if (e->slots)
        for (int i = 0; i < e->o.parallel; i++) {
            ci_session_free(e->slots[i].s);
            free(e->slots[i].toks);
            free(e->slots[i].counts);
            free(e->slots[i].lsm);
            free(e->slots[i].mark);
            smp_free(&e->slots[i].smp);
            sm_release(&e->slots[i].sm);
        }
    pfx_free(e->pfx);
    tm_free(e->trie);
    free(e->allowed);
    free(e->notext);
    if (e->spool) ci_pool_free(e->spool);
    free(e->slots); free(e->logits); free(e->bs); free(e->btok); free(e->bslot); free(e->bids);
    pthread_cond_destroy(&e->work);
    pthread_mutex_destroy(&e->mu);
    free(e);
}

int eng_ctx(const eng *e) { return e->o.ctx; }

static int submit(eng *e, const eng_params *p, eng_req **out, char *err, size_t errlen) {
    *out = NULL;
    if (p->n_prompt < 1) return ci_err(err, errlen, "the prompt is empty");
    if (p->max_tokens < 1) return ci_err(err, errlen, "max_tokens must be at least 1, got %d", p->max_tokens);
    if ((long long)p->n_prompt + p->max_tokens > e->o.ctx)
        return ci_err(err, errlen, "prompt (%d tokens) + max_tokens (%d) exceed the context of %d", p->n_prompt,
                      p->max_tokens, e->o.ctx);
    if (e->paged && blocks_of(p) > kvp_blocks(e->m->kv_pool))
        return ci_err(err, errlen, "prompt (%d tokens) + max_tokens (%d) need %d cache blocks of %d tokens; the pool has %d",
                      p->n_prompt, p->max_tokens, blocks_of(p), KV_BLOCK, kvp_blocks(e->m->kv_pool));
    for (int i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || p->prompt[i] >= e->V)
            return ci_err(err, errlen, "token id %d at index %d is outside the vocabulary [0, %d)", p->prompt[i], i, e->V);
    if (p->top_logprobs > ENG_MAX_TOP) return ci_err(err, errlen, "top_logprobs must be at most %d", ENG_MAX_TOP);
    for (int i = 0; i < p->n_bias; i++)
        if (p->bias_id[i] < 0 || p->bias_id[i] >= e->V || !isfinite(p->bias[i]))
            return ci_err(err, errlen, "logit_bias entry %d (token %d, bias %g) is outside the vocabulary [0, %d) or not finite", i,
                          p->bias_id[i], (double)p->bias[i], e->V);
    if (smp_check(&p->so, err, errlen)) return -1;
    if (p->json_mode && !e->o.tok_off) return ci_err(err, errlen, "JSON mode needs the tokenizer's token texts");
    if (p->grammar && !e->trie) return ci_err(err, errlen, "structured outputs need the tokenizer's token texts");
    eng_req *r = calloc(1, sizeof *r);
    if (!r) return ci_err(err, errlen, "out of memory");
    r->e = e;
    r->p = *p;
    r->t_submit = now_s();
    r->prompt = malloc((size_t)p->n_prompt * sizeof(int));
    r->ids = malloc((size_t)p->max_tokens * sizeof(int));
    r->n_top = p->top_logprobs > 0 ? p->top_logprobs : 0;
    if (p->top_logprobs >= 0) {
        r->lps = malloc((size_t)p->max_tokens * sizeof(float));
        r->top_ids = malloc((size_t)p->max_tokens * (r->n_top ? r->n_top : 1) * sizeof(int));
        r->top_lps = malloc((size_t)p->max_tokens * (r->n_top ? r->n_top : 1) * sizeof(float));
    }
    pthread_cond_init(&r->cv, NULL);
    if (!r->prompt || !r->ids || (p->top_logprobs >= 0 && (!r->lps || !r->top_ids || !r->top_lps))) {
        r->p.grammar = NULL;                 /* eng_submit frees it */
        req_free(r);
        return ci_err(err, errlen, "out of memory");
    }
    memcpy(r->prompt, p->prompt, (size_t)p->n_prompt * sizeof(int));
    r->p.prompt = r->prompt;
    r->n_prompt0 = p->n_prompt;
    if (p->n_bias > 0) {
        r->bias_id = malloc((size_t)p->n_bias * sizeof(int));
        r->bias = malloc((size_t)p->n_bias * sizeof(float));
        if (!r->bias_id || !r->bias) {
            r->p.grammar = NULL;             /* eng_submit frees it */
            req_free(r);
            return ci_err(err, errlen, "out of memory");
        }
        memcpy(r->bias_id, p->bias_id, (size_t)p->n_bias * sizeof(int));
        memcpy(r->bias, p->bias, (size_t)p->n_bias * sizeof(float));
    }
    r->p.bias_id = r->bias_id;
    r->p.bias = r->bias;
    r->refs = 2;
    pthread_mutex_lock(&e->mu);
    const int active = active_count(e);
    if (e->stop || e->qlen >= e->o.queue_max + (e->o.parallel - active)) {
        pthread_mutex_unlock(&e->mu);
        r->p.grammar = NULL;                 /* eng_submit frees it */
        req_free(r);
        if (e->stop) return ci_err(err, errlen, "the server is shutting down");
        return ENG_BUSY;
    }
    if (e->qtail) e->qtail->next = r; else e->qhead = r;
    e->qtail = r;
    e->qlen++;
    e->st.requests++;
    e->st.prompt_tokens += p->n_prompt;
    e->st.queue_depth = e->qlen;
    pthread_cond_signal(&e->work);
    pthread_mutex_unlock(&e->mu);
    *out = r;
    return 0;
}

int eng_submit(eng *e, const eng_params *p, eng_req **out, char *err, size_t errlen) {
    int rc = submit(e, p, out, err, errlen);
    if (rc) jsc_free(p->grammar);
    return rc;
}

int eng_read(eng_req *r, int from, eng_tok *out, int max, int timeout_ms, int *done) {
    eng *e = r->e;
    pthread_mutex_lock(&e->mu);
    if (r->n_out <= from && r->state != Q_DONE && timeout_ms > 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += timeout_ms / 1000;
        ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) { ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
        while (r->n_out <= from && r->state != Q_DONE)
            if (pthread_cond_timedwait(&r->cv, &e->mu, &ts) == ETIMEDOUT) break;
    }
    int n = 0;
    for (int k = from; k < r->n_out && n < max; k++, n++) {
        eng_tok *t = &out[n];
        t->id = r->ids[k];
        t->logprob = r->lps ? r->lps[k] : 0;
        t->n_top = r->n_top;
        for (int j = 0; j < r->n_top; j++) {
            t->top_id[j] = r->top_ids[(size_t)k * r->n_top + j];
            t->top_lp[j] = r->top_lps[(size_t)k * r->n_top + j];
        }
    }
    *done = r->state == Q_DONE && from + n >= r->n_out;
    pthread_mutex_unlock(&e->mu);
    return n;
}

eng_finish eng_req_finish(eng_req *r, char *err, size_t errlen) {
    pthread_mutex_lock(&r->e->mu);
    eng_finish f = r->state == Q_DONE ? r->fin : ENG_FIN_NONE;
    if (err && errlen) snprintf(err, errlen, "%s", r->err);
    pthread_mutex_unlock(&r->e->mu);
    return f;
}

int eng_req_cached(eng_req *r) {
    pthread_mutex_lock(&r->e->mu);
    int c = r->cached;
    pthread_mutex_unlock(&r->e->mu);
    return c;
}

void eng_cancel(eng_req *r) {
    eng *e = r->e;
    pthread_mutex_lock(&e->mu);
    if (r->state != Q_DONE && !r->cancel) {
        r->cancel = 1;
        pthread_cond_signal(&e->work);
    }
    pthread_mutex_unlock(&e->mu);
}

void eng_release(eng_req *r) {
    if (!r) return;
    eng *e = r->e;
    pthread_mutex_lock(&e->mu);
    unref(r);
    pthread_mutex_unlock(&e->mu);
}

int eng_snapshots(const eng *e) { return e->snap && e->pfx; }

void eng_get_stats(eng *e, eng_stats *s) {
    pthread_mutex_lock(&e->mu);
    *s = e->st;
    s->prefix_bytes = e->pfx ? pfx_bytes(e->pfx) : 0;
    s->prefix_budget = e->pfx ? pfx_budget(e->pfx) : 0;
    s->prefix_entries = e->pfx ? pfx_count(e->pfx) : 0;
    if (e->paged) {
        kv_pool_stats ps;
        kvp_stats(e->m->kv_pool, &ps);
        s->kv_blocks = ps.blocks;
        s->kv_block_tokens = ps.blk;
        s->kv_blocks_used = ps.in_use;
        s->kv_blocks_cached = ps.cached;
        s->kv_block_evictions = ps.evictions;
        s->kv_tail_hits = ps.tail_hits;
        s->kv_block_copies = ps.copies;
    }
    pthread_mutex_unlock(&e->mu);
}

int eng_token_texts(tok_tokenizer *tk, int V, char **bytes, uint32_t **off) {
    int *anchor = NULL, pair[2];
    size_t na = 0, cap = (size_t)V * 8 + 64, len = 0, alen = 0;
    char err[256], *a = NULL, *b = NULL;
    uint32_t *o = NULL;
    if (tok_encode(tk, "a", 1, 0, &anchor, &na, err, sizeof err) || na != 1 ||
        tok_decode(tk, anchor, 1, 1, &a, &alen, err, sizeof err))
        goto fail;
    b = malloc(cap);
    o = malloc(((size_t)V + 1) * sizeof *o);
    if (!b || !o) goto fail;
    pair[0] = anchor[0];
    for (int i = 0; i < V; i++) {
        o[i] = (uint32_t)len;
        if (tok_is_special(tk, i)) continue;
        char *t = NULL;
        size_t tl = 0;
        pair[1] = i;
        if (tok_decode(tk, pair, 2, 1, &t, &tl, err, sizeof err)) continue;
        if (tl >= alen && !memcmp(t, a, alen)) {
            size_t n = tl - alen;
            if (len + n > cap) {
                while (len + n > cap) cap *= 2;
                char *nb = cap <= UINT32_MAX ? realloc(b, cap) : NULL;
                if (!nb) { free(t); goto fail; }
                b = nb;
            }
            memcpy(b + len, t + alen, n);
            len += n;
        }
        free(t);
    }
    o[V] = (uint32_t)len;
    free(anchor);
    free(a);
    *bytes = b;
    *off = o;
    return 0;
fail:
    free(anchor);
    free(a);
    free(b);
    free(o);
    return -1;
}
