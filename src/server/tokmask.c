/* tokmask.c — see tokmask.h. */
#include "tokmask.h"
#include <stdlib.h>
#include <string.h>

struct tm_trie {
    int n_tok, n_ranked, n_nodes, max_depth;
    uint8_t *byte;             /* [n_nodes] the byte that leads into node i */
    uint16_t *depth;           /* [n_nodes] bytes from the root (>= 1) */
    uint16_t *span;            /* [n_nodes] most bytes below node i */
    uint32_t *end;             /* [n_nodes] first node after i's subtree */
    uint32_t *tk0;             /* [n_nodes + 1] tokens (in order[]) whose node is before i */
    uint8_t *plain;            /* [n_nodes] bit 0: everything below i is plain string text, from a character
                                * boundary; bit 1: no byte below i is the stop byte; bit 2: a byte
                                * below i is not ASCII */
    uint64_t (*below)[2];      /* [n_nodes] the ASCII bytes below node i */
    int stop;
    int *order;                /* [tokens with text] sorted by text */
    sm_state *st;              /* [max_depth + 1] walk scratch (one mask at a time: the scheduler's) */
    uint32_t *mk;              /* [max_depth + 1] arena marks */
    /* plain string bodies: a token whose whole text is plain text is taken when the string
     * has room for its characters, whatever the state; only the others are walked */
    uint8_t *cp;               /* [n_ranked] characters of a plain-text token (<= 254), 255: not plain */
    struct tm_trie *sub;       /* the tokens with a quote or a backslash (and very long plain ones), as a trie */
    int *sub_rank;             /* [sub's ranks] rank here */
    uint8_t *sub_ok;           /* [sub's ranks] its mask */
};

static const char *g_bytes;
static const uint32_t *g_off;

static int cmp_tok(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    uint32_t lx = g_off[x + 1] - g_off[x], ly = g_off[y + 1] - g_off[y];
    int c = memcmp(g_bytes + g_off[x], g_bytes + g_off[y], lx < ly ? lx : ly);
    if (c) return c;
    return lx < ly ? -1 : lx > ly ? 1 : x - y;
}

/* UTF-8 validator states for plain text: 0 a boundary; else 1 + ((due - 1) * 5 + range) * 3 + fffd */
enum { U8_STATES = 46 };

static int u8_next(int u, int c) {
    static const uint8_t lo[5] = { 0x80, 0xA0, 0x80, 0x90, 0x80 }, hi[5] = { 0xBF, 0xBF, 0x9F, 0xBF, 0x8F };
    if (u == 0) {
        if (c < 0x20 || c == '"' || c == '\\') return -1;
        if (c < 0x80) return 0;
        if (c >= 0xC2 && c <= 0xDF) return 1 + (0 * 5 + 0) * 3;
        if (c >= 0xE0 && c <= 0xEF) return 1 + (1 * 5 + (c == 0xE0 ? 1 : c == 0xED ? 2 : 0)) * 3 + (c == 0xEF);
        if (c >= 0xF0 && c <= 0xF4) return 1 + (2 * 5 + (c == 0xF0 ? 3 : c == 0xF4 ? 4 : 0)) * 3;
        return -1;
    }
    int k = u - 1, e = k % 3, r = k / 3 % 5, due = k / 15 + 1;
    if (c < lo[r] || c > hi[r]) return -1;
    if (e == 2 && c == 0xBD) return -1;
    int ne = e == 1 && c == 0xBF ? 2 : 0;
    if (due == 1) return 0;
    return 1 + ((due - 2) * 5 + 0) * 3 + ne;
}

static int build(const char *bytes, const uint32_t *off, int n, const int *ids, int nids, int stop, tm_trie **out) {
    *out = NULL;
    tm_trie *t = calloc(1, sizeof *t);
    if (!t) return -1;
    t->n_tok = n;
    t->stop = stop;
    int k = 0;
    size_t total = 0;
    t->order = malloc((size_t)(n ? n : 1) * sizeof *t->order);
    if (!t->order) goto fail;
    for (int j = 0; j < nids; j++) { int i = ids[j]; t->order[k++] = i; total += off[i + 1] - off[i]; }
    t->n_ranked = k;
    g_bytes = bytes;
    g_off = off;
    qsort(t->order, (size_t)k, sizeof *t->order, cmp_tok);
    /* preorder nodes: each text adds the bytes past its common prefix with the one before */
    size_t cap = total + 1;
    t->byte = malloc(cap);
    t->depth = malloc(cap * sizeof *t->depth);
    t->span = calloc(cap, sizeof *t->span);
    t->end = malloc(cap * sizeof *t->end);
    t->tk0 = calloc(cap + 1, sizeof *t->tk0);
    t->plain = malloc(cap);
    uint32_t *node_of = malloc((size_t)(k ? k : 1) * sizeof *node_of), *path = malloc(65536 * sizeof *path);
    uint64_t *ok = NULL;
    if (!t->byte || !t->depth || !t->span || !t->end || !t->tk0 || !t->plain || !node_of || !path) { free(node_of); free(path); goto fail; }
    int nn = 0;
    uint32_t prev_len = 0;
    const char *prev = NULL;
    for (int j = 0; j < k; j++) {
        const char *s = bytes + off[t->order[j]];
        uint32_t len = off[t->order[j] + 1] - off[t->order[j]], l = 0;
        while (prev && l < len && l < prev_len && s[l] == prev[l]) l++;
        for (uint32_t d = l; d < len; d++) {
            t->byte[nn] = (uint8_t)s[d];
            t->depth[nn] = (uint16_t)(d + 1);
            path[d] = (uint32_t)nn;
            nn++;
        }
        node_of[j] = path[len - 1];
        if ((int)len > t->max_depth) t->max_depth = (int)len;
        prev = s;
        prev_len = len;
    }
    t->n_nodes = nn;
    /* tk0: tokens are in node order already (sorted texts = preorder) */
    for (int j = 0; j < k; j++) t->tk0[node_of[j] + 1]++;
    for (int i = 0; i < nn; i++) t->tk0[i + 1] += t->tk0[i];
    /* subtree ends and spans, with a stack of open nodes */
    int sp = 0;
    for (int i = 0; i <= nn; i++) {
        int d = i < nn ? t->depth[i] : 0;
        while (sp > 0 && t->depth[path[sp - 1]] >= d) {
            uint32_t c = path[--sp];
            t->end[c] = (uint32_t)i;
            if (sp > 0) {
                uint32_t p = path[sp - 1];
                uint16_t s2 = (uint16_t)(t->span[c] + 1);
                if (s2 > t->span[p]) t->span[p] = s2;
            }
        }
        if (i < nn) path[sp++] = (uint32_t)i;
    }
    /* plain text below each node, for every UTF-8 state it may be entered in (bottom up) */
    ok = malloc((size_t)(nn ? nn : 1) * sizeof *ok);
    t->below = calloc((size_t)(nn ? nn : 1), sizeof *t->below);
    if (!ok || !t->below) { free(ok); free(node_of); free(path); goto fail; }
    for (int i = nn - 1; i >= 0; i--) {
        uint64_t m = (1ull << U8_STATES) - 1;
        for (uint32_t c = (uint32_t)i + 1; c < t->end[i]; c = t->end[c])
            for (int u = 0; u < U8_STATES; u++) {
                if (!(m >> u & 1)) continue;
                int v = u8_next(u, t->byte[c]);
                if (v < 0 || !(ok[c] >> v & 1)) m &= ~(1ull << u);
            }
        ok[i] = m;
        int nostop = 1, wide = 0;
        for (uint32_t c = (uint32_t)i + 1; c < t->end[i]; c = t->end[c]) {
            nostop &= t->byte[c] != stop && (t->plain[c] & 2);
            wide |= t->byte[c] >= 0x80 || (t->plain[c] & 4);
            if (t->byte[c] < 0x80) t->below[i][t->byte[c] >> 6] |= 1ull << (t->byte[c] & 63);
            t->below[i][0] |= t->below[c][0];
            t->below[i][1] |= t->below[c][1];
        }
        t->plain[i] = (uint8_t)((m & 1) | (stop >= 0 && nostop ? 2 : 0) | (wide ? 4 : 0));
    }
    free(ok);
    free(node_of);
    free(path);
    t->st = malloc(((size_t)t->max_depth + 1) * sizeof *t->st);
    t->mk = malloc(((size_t)t->max_depth + 1) * sizeof *t->mk);
    if (!t->st || !t->mk) goto fail;
    *out = t;
    return 0;
fail:
    tm_free(t);
    return -1;
}

int tm_build(const char *bytes, const uint32_t *off, int n, int stop, tm_trie **out) {
    int *ids = malloc((size_t)(n ? n : 1) * sizeof *ids), *rank = malloc((size_t)(n ? n : 1) * sizeof *rank), k = 0, ks = 0;
    tm_trie *t = NULL;
    *out = NULL;
    if (!ids || !rank) goto fail;
    for (int i = 0; i < n; i++) if (off[i + 1] > off[i] && off[i + 1] - off[i] < 60000) ids[k++] = i;
    if (build(bytes, off, n, ids, k, stop, &t)) goto fail;
    if (!(t->cp = malloc((size_t)(k ? k : 1)))) goto fail;
    /* characters of each plain-text token (the same rule as the node flags: from a boundary) */
    for (int q = 0; q < k; q++) {
        int id = t->order[q], u = 0, chars = 0;
        rank[id] = q;
        for (uint32_t b = off[id]; b < off[id + 1] && u >= 0; b++) {
            int c = (unsigned char)bytes[b];
            if (u == 0) chars++;
            u = u8_next(u, c);
        }
        t->cp[q] = (uint8_t)(u < 0 || chars > 254 ? 255 : chars);
        /* walked in string bodies: tokens that can leave the body (a quote or a backslash)
         * and long plain ones; a token with neither that is not plain text never fits */
        int quote = memchr(bytes + off[id], '"', off[id + 1] - off[id]) || memchr(bytes + off[id], '\\', off[id + 1] - off[id]);
        if (quote || (u >= 0 && chars > 254)) ids[ks++] = id;
    }
    if (build(bytes, off, n, ids, ks, stop, &t->sub)) goto fail;
    int nr = t->sub->n_ranked;
    t->sub_rank = malloc((size_t)(nr ? nr : 1) * sizeof *t->sub_rank);
    t->sub_ok = malloc((size_t)(nr ? nr : 1));
    if (!t->sub_rank || !t->sub_ok) goto fail;
    for (int r = 0; r < nr; r++) t->sub_rank[r] = rank[t->sub->order[r]];
    free(ids);
    free(rank);
    *out = t;
    return 0;
fail:
    free(ids);
    free(rank);
    tm_free(t);
    return -1;
}

void tm_free(tm_trie *t) {
    if (!t) return;
    tm_free(t->sub);
    free(t->cp); free(t->sub_rank); free(t->sub_ok);
    free(t->below);
    free(t->byte); free(t->depth); free(t->span); free(t->end); free(t->tk0); free(t->plain); free(t->order);
    free(t->st); free(t->mk);
    free(t);
}

int tm_nodes(const tm_trie *t) { return t->n_nodes; }

const int *tm_order(const tm_trie *t, int *n) {
    *n = t->n_ranked;
    return t->order;
}

static int walk(const tm_trie *t, sm_matcher *m, const sm_state *s, uint8_t *ok) {
    memset(ok, 0, (size_t)t->n_ranked);
    int count = 0;
    uint32_t base = sm_mark(m);
    t->st[0] = *s;
    t->mk[0] = base;
    for (uint32_t i = 0; i < (uint32_t)t->n_nodes;) {
        int d = t->depth[i];
        sm_reset(m, t->mk[d - 1]);
        if (sm_next(m, &t->st[d - 1], t->byte[i], &t->st[d])) {
            if (m->oom) { sm_reset(m, base); m->oom = 0; return -1; }
            i = t->end[i];
            continue;
        }
        t->mk[d] = sm_mark(m);
        uint32_t a = t->tk0[i], b = t->tk0[i + 1];
        const uint64_t *loop;
        long lr;
        if (t->end[i] > i + 1 && !(t->plain[i] & 4) && (lr = sm_loop_room(m, &t->st[d], &loop)) >= (long)t->span[i] &&
            !(t->below[i][0] & ~loop[0]) && !(t->below[i][1] & ~loop[1])) {
            b = t->tk0[t->end[i]];                    /* under a pattern: text that keeps its state */
            i = t->end[i];
            memset(ok + a, 1, b - a);
            count += (int)(b - a);
            continue;
        }
        if (t->plain[i] & 3 && t->end[i] > i + 1) {
            long room = t->plain[i] & 1 ? sm_plain_room(m, &t->st[d]) : -1;
            if (room >= (long)t->span[i] || (t->plain[i] & 2 && sm_text_stop(m, &t->st[d]) == t->stop)) {
                b = t->tk0[t->end[i]];                /* the node's tokens and its whole subtree's */
                i = t->end[i];
                memset(ok + a, 1, b - a);
                count += (int)(b - a);
                continue;
            }
        }
        memset(ok + a, 1, b - a);
        count += (int)(b - a);
        i++;
    }
    sm_reset(m, base);
    return count;
}

int tm_mask(const tm_trie *t, sm_matcher *m, const sm_state *s, uint8_t *ok) {
    long room = t->sub ? sm_plain_room(m, s) : -1;
    if (room < 0) return walk(t, m, s, ok);
    /* a plain string body: plain-text tokens by their length, the rest walked */
    uint8_t lim = (uint8_t)(room > 254 ? 254 : room);
    int count = 0;
    for (int q = 0; q < t->n_ranked; q++) count += ok[q] = t->cp[q] <= lim;
    int sc = walk(t->sub, m, s, t->sub_ok);
    if (sc < 0) return -1;
    for (int r = 0; r < t->sub->n_ranked; r++)
        if (t->sub_ok[r]) { ok[t->sub_rank[r]] = 1; count++; }
    return count;
}
