/* sregex_dfa.c — the NFA of a pattern (sregex.c) to its DFA (sregex.h): subset
 * construction over byte classes (continuation bytes and ASCII always apart, then split by
 * every byte set of the NFA), dead states cut, and per state the fewest (0-1 BFS over the
 * reversed edges, continuation bytes weigh 0) and most (longest path; a cycle: unbounded)
 * code points to acceptance. */
#include "sregex_int.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int *items;                /* sorted NFA states of each DFA state, back to back */
    int *off;                  /* [n + 1] */
    int n, cap_items, cap_off;
    int *hash;                 /* open addressing over DFA ids, size hcap */
    int hcap;
} dset;

static uint32_t set_hash(const int *s, int k) {
    uint32_t h = 2166136261u;
    for (int i = 0; i < k; i++) h = (h ^ (uint32_t)s[i]) * 16777619u;
    return h;
}

/* closure of the NFA states in stack[0..k) (marks in mark[] with stamp), sorted into out */
static int closure(const rx_parser *P, int *stack, int k, int *mark, int stamp, int *out) {
    int n = 0;
    for (int i = 0; i < k; i++) mark[stack[i]] = stamp;
    while (k) {
        int s = stack[--k];
        const nstate *st = &P->st[s];
        out[n++] = s;
        if (st->set >= 0) continue;
        if (st->a >= 0 && mark[st->a] != stamp) { mark[st->a] = stamp; stack[k++] = st->a; }
        if (st->b >= 0 && mark[st->b] != stamp) { mark[st->b] = stamp; stack[k++] = st->b; }
    }
    /* keep what matters: byte edges and the accepting state (epsilon-only states are implied) */
    int m = 0;
    for (int i = 0; i < n; i++) if (P->st[out[i]].set >= 0 || (P->st[out[i]].a < 0 && P->st[out[i]].b < 0)) out[m++] = out[i];
    for (int i = 1; i < m; i++) {               /* insertion sort: sets are small */
        int v = out[i], j = i;
        while (j > 0 && out[j - 1] > v) { out[j] = out[j - 1]; j--; }
        out[j] = v;
    }
    return m;
}

/* id of the set, adding it when new; -1 on no memory or too many states */
static int dset_get(dset *D, const int *s, int k) {
    uint32_t h = set_hash(s, k);
    for (uint32_t i = h & (uint32_t)(D->hcap - 1);; i = (i + 1) & (uint32_t)(D->hcap - 1)) {
        int id = D->hash[i];
        if (id < 0) {
            if (D->n >= MAX_DFA) return -1;
            if (D->off[D->n] + k > D->cap_items) {
                int nc = (D->off[D->n] + k) * 2;
                int *ni = realloc(D->items, (size_t)nc * sizeof *ni);
                if (!ni) return -1;
                D->items = ni;
                D->cap_items = nc;
            }
            memcpy(D->items + D->off[D->n], s, (size_t)k * sizeof *s);
            D->off[D->n + 1] = D->off[D->n] + k;
            D->hash[i] = D->n;
            return D->n++;
        }
        int len = D->off[id + 1] - D->off[id];
        if (len == k && !memcmp(D->items + D->off[id], s, (size_t)k * sizeof *s)) return id;
    }
}

/* the most code points from s to acceptance; RX_INF when a cycle is on the way (every
 * state here is live, so a cycle means unbounded) */
static uint32_t longest(rx_dfa *d, const int *rep, int s, uint8_t *color) {
    if (color[s] == 2) return d->max_cp[s];
    if (color[s] == 1) return RX_INF;
    color[s] = 1;
    uint32_t best = 0;
    int inf = 0;
    for (int c = 0; c < d->n_cls; c++) {
        unsigned t = d->next[(size_t)s * d->n_cls + c];
        if (t == RX_DEAD) continue;
        uint32_t l = longest(d, rep, (int)t, color);
        if (l == RX_INF) { inf = 1; continue; }
        uint32_t w = rep[c] >= 0x80 && rep[c] <= 0xBF ? 0 : 1;
        if (l + w > best) best = l + w;
    }
    color[s] = 2;
    d->max_cp[s] = inf ? RX_INF : best;
    return d->max_cp[s];
}

int rx_build(rx_parser *P, int start, int accept, rx_dfa **out) {
    rx_dfa *d = NULL;
    dset D = { 0 };
    int *mark = NULL, *stack = NULL, *buf = NULL, *rev = NULL, *roff = NULL, *queue = NULL, *fill = NULL, *seen = NULL;
    uint16_t *next = NULL;
    size_t work = 0;
    int sst = 0;
    /* byte classes: continuation bytes and ASCII apart from the start, then every set */
    uint8_t cls[256];
    int ncls = 3;
    for (int b = 0; b < 256; b++) cls[b] = b < 0x80 ? 0 : b < 0xC0 ? 1 : 2;
    for (int si = 0; si < P->nsets; si++) {
        int map[512];
        for (int i = 0; i < 512; i++) map[i] = -1;
        int nn = 0;
        uint8_t nc[256];
        for (int b = 0; b < 256; b++) {
            int key = cls[b] * 2 + bs_has(&P->sets[si], b);
            if (map[key] < 0) map[key] = nn++;
            nc[b] = (uint8_t)map[key];
        }
        if (nn > 255) { rx_fail(P, "%s needs too many byte classes", "pattern"); goto fail; }
        memcpy(cls, nc, sizeof cls);
        ncls = nn;
    }
    int N = P->nst;
    mark = calloc((size_t)N, sizeof *mark);
    stack = malloc((size_t)N * sizeof *stack);
    buf = malloc((size_t)N * sizeof *buf);
    seen = calloc((size_t)N, sizeof *seen);
    D.hcap = 4096;
    D.hash = malloc((size_t)D.hcap * sizeof *D.hash);
    D.off = calloc(MAX_DFA + 1, sizeof *D.off);
    next = malloc((size_t)MAX_DFA * ncls * sizeof *next);
    if (!mark || !stack || !buf || !seen || !D.hash || !D.off || !next) { rx_fail(P, "%s: out of memory", "pattern"); goto fail; }
    for (int i = 0; i < D.hcap; i++) D.hash[i] = -1;
    int stamp = 1;
    stack[0] = start;
    int k = closure(P, stack, 1, mark, stamp++, buf);
    if (dset_get(&D, buf, k) < 0) { rx_fail(P, "%s: out of memory", "pattern"); goto fail; }
    int rep[256];
    for (int c = 0; c < ncls; c++) for (int b = 0; b < 256; b++) if (cls[b] == c) { rep[c] = b; break; }
    for (int s = 0; s < D.n; s++) {
        for (int c = 0; c < ncls; c++) {
            int m = 0;
            for (int j = D.off[s]; j < D.off[s + 1]; j++) {
                const nstate *st = &P->st[D.items[j]];
                if (st->set >= 0 && bs_has(&P->sets[st->set], rep[c])) stack[m++] = st->a;
            }
            if (!m) { next[(size_t)s * ncls + c] = RX_DEAD; continue; }
            /* dedupe the targets before the closure (stamps: linear) */
            int u = 0;
            sst++;
            for (int j = 0; j < m; j++) if (seen[stack[j]] != sst) { seen[stack[j]] = sst; stack[u++] = stack[j]; }
            k = closure(P, stack, u, mark, stamp++, buf);
            work += (size_t)(D.off[s + 1] - D.off[s]) + (size_t)k;
            if (work > 10000000u) { rx_fail(P, "pattern is too complex (%s)", "its automaton takes too long to build"); goto fail; }
            int id = dset_get(&D, buf, k);
            if (id < 0) { rx_fail(P, "pattern is too complex (more than %s automaton states)", "2048"); goto fail; }
            next[(size_t)s * ncls + c] = (uint16_t)id;
        }
    }
    d = calloc(1, sizeof *d);
    if (!d) { rx_fail(P, "%s: out of memory", "pattern"); goto fail; }
    d->n_states = D.n;
    d->n_cls = ncls;
    memcpy(d->cls, cls, sizeof cls);
    d->next = next;
    next = NULL;
    d->acc = calloc((size_t)D.n, 1);
    d->min_cp = malloc((size_t)D.n * sizeof *d->min_cp);
    d->max_cp = malloc((size_t)D.n * sizeof *d->max_cp);
    rev = malloc((size_t)D.n * ncls * sizeof *rev);
    roff = calloc((size_t)D.n + 1, sizeof *roff);
    size_t qcap = 2 * ((size_t)D.n * ncls + (size_t)D.n);
    queue = malloc(qcap * sizeof *queue);
    fill = malloc(((size_t)D.n + 1) * sizeof *fill);
    if (!d->acc || !d->min_cp || !d->max_cp || !rev || !roff || !queue || !fill) { rx_fail(P, "%s: out of memory", "pattern"); goto fail; }
    for (int s = 0; s < D.n; s++) {
        for (int j = D.off[s]; j < D.off[s + 1]; j++) d->acc[s] |= D.items[j] == accept;
        d->min_cp[s] = RX_INF;
    }
    /* reverse edges, then the fewest code points to acceptance (0-1 BFS; a deque in queue) */
    for (int s = 0; s < D.n; s++) for (int c = 0; c < ncls; c++) if (d->next[(size_t)s * ncls + c] != RX_DEAD) roff[d->next[(size_t)s * ncls + c] + 1]++;
    for (int s = 0; s < D.n; s++) roff[s + 1] += roff[s];
    for (int s = 0; s < D.n; s++) fill[s] = roff[s];
    for (int s = 0; s < D.n; s++) for (int c = 0; c < ncls; c++) {
        unsigned t = d->next[(size_t)s * ncls + c];
        if (t != RX_DEAD) rev[fill[t]++] = s * ncls + c;
    }
    size_t qh = qcap / 2, qt = qcap / 2;         /* a deque: 0-edges at the front */
    for (int s = 0; s < D.n; s++) if (d->acc[s]) { d->min_cp[s] = 0; queue[qt++] = s; }
    while (qh < qt) {
        int t = queue[qh++];
        for (int j = roff[t]; j < roff[t + 1]; j++) {
            int s = rev[j] / ncls, c = rev[j] % ncls;
            uint32_t w = rep[c] >= 0x80 && rep[c] <= 0xBF ? 0 : 1, dd = d->min_cp[t] + w;
            if (dd < d->min_cp[s]) {
                d->min_cp[s] = dd;
                if (w == 0 && qh > 0) queue[--qh] = s; else queue[qt++] = s;
            }
        }
    }
    /* cut the edges into dead states */
    for (size_t i = 0; i < (size_t)D.n * ncls; i++)
        if (d->next[i] != RX_DEAD && d->min_cp[d->next[i]] == RX_INF) d->next[i] = RX_DEAD;
    if (d->min_cp[0] == RX_INF) { rx_fail(P, "pattern can match %s", "nothing"); goto fail; }
    uint8_t *color = calloc((size_t)D.n, 1);
    if (!color) { rx_fail(P, "%s: out of memory", "pattern"); goto fail; }
    for (int s = 0; s < D.n; s++) if (d->min_cp[s] != RX_INF) longest(d, rep, s, color);
    free(color);
    if (!(d->loop = calloc((size_t)D.n, sizeof *d->loop))) { rx_fail(P, "%s: out of memory", "pattern"); goto fail; }
    for (int s = 0; s < D.n; s++)
        for (int b = 0x20; b < 0x7F; b++)
            if (b != '"' && b != '\\' && d->next[(size_t)s * ncls + cls[b]] == (unsigned)s) d->loop[s][b >> 6] |= 1ull << (b & 63);
    free(mark); free(stack); free(buf); free(rev); free(roff); free(queue); free(fill); free(seen);
    free(D.items); free(D.off); free(D.hash);
    *out = d;
    return 0;
fail:
    rx_free(d);
    free(mark); free(stack); free(buf); free(rev); free(roff); free(queue); free(next); free(fill); free(seen);
    free(D.items); free(D.off); free(D.hash);
    return -1;
}

