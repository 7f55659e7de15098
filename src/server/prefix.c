/* prefix.c — see prefix.h. Entries live in a growable array; LRU order is a use counter. */
#include "prefix.h"
#include <stdlib.h>
#include <string.h>

typedef struct {
    int *toks;
    int n;
    pfx_kind kind;
    void *blob;
    size_t bytes;          /* blob bytes + token bytes: what the budget counts */
    uint64_t used;
} pfx_entry;

struct pfx_store {
    size_t budget, total;
    void (*free_blob)(void *);
    pfx_entry *e;
    int n, cap;
    uint64_t clock;
};

pfx_store *pfx_new(size_t budget_bytes, void (*free_blob)(void *)) {
    pfx_store *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->budget = budget_bytes;
    p->free_blob = free_blob ? free_blob : free;
    return p;
}

static void drop(pfx_store *p, int i) {
    p->total -= p->e[i].bytes;
    free(p->e[i].toks);
    p->free_blob(p->e[i].blob);
    p->e[i] = p->e[--p->n];
}

void pfx_free(pfx_store *p) {
    if (!p) return;
    while (p->n) drop(p, p->n - 1);
    free(p->e);
    free(p);
}

static int common(const int *a, int na, const int *b, int nb) {
    int k = 0, n = na < nb ? na : nb;
    while (k < n && a[k] == b[k]) k++;
    return k;
}

/* How many cached tokens entry e gives a prompt toks[0..n) that may take at most limit. */
static int usable(const pfx_entry *e, const int *toks, int n, int limit) {
    int c = common(e->toks, e->n, toks, n);
    if (e->kind == PFX_SNAPSHOT) return c == e->n && e->n <= limit ? c : 0;
    return c < limit ? c : limit;
}

int pfx_lookup(pfx_store *p, const int *toks, int n, int limit, int *match) {
    int best = -1, bm = 0;
    for (int i = 0; i < p->n; i++) {
        int c = usable(&p->e[i], toks, n, limit);
        if (c > bm) { bm = c; best = i; }
    }
    *match = bm;
    return best;
}

const void *pfx_blob(pfx_store *p, int i) {
    p->e[i].used = ++p->clock;
    return p->e[i].blob;
}

int pfx_covers(pfx_store *p, const int *toks, int n) {
    for (int i = 0; i < p->n; i++) {
        const pfx_entry *e = &p->e[i];
        if ((e->kind == PFX_SNAPSHOT ? e->n == n : e->n >= n) && common(e->toks, e->n, toks, n) == n) return 1;
    }
    return 0;
}

int pfx_insert(pfx_store *p, const int *toks, int n, pfx_kind kind, void *blob, size_t bytes) {
    size_t need = bytes + (size_t)n * sizeof(int);
    int *t = malloc((size_t)(n > 0 ? n : 1) * sizeof(int));
    if (need > p->budget || !t) { free(t); p->free_blob(blob); return 0; }
    memcpy(t, toks, (size_t)n * sizeof(int));
    for (int i = p->n - 1; i >= 0; i--) {   /* rows entries the new one covers, the same snapshot */
        const pfx_entry *e = &p->e[i];
        int same = common(e->toks, e->n, toks, n) == e->n;
        if (same && (kind == PFX_ROWS ? e->kind == PFX_ROWS && e->n <= n : e->kind == PFX_SNAPSHOT && e->n == n))
            drop(p, i);
    }
    while (p->total + need > p->budget && p->n) {
        int lru = 0;
        for (int i = 1; i < p->n; i++) if (p->e[i].used < p->e[lru].used) lru = i;
        drop(p, lru);
    }
    if (p->n == p->cap) {
        int cap = p->cap ? p->cap * 2 : 16;
        pfx_entry *ne = realloc(p->e, (size_t)cap * sizeof *ne);
        if (!ne) { free(t); p->free_blob(blob); return 0; }
        p->e = ne;
        p->cap = cap;
    }
    p->e[p->n++] = (pfx_entry){ t, n, kind, blob, need, ++p->clock };
    p->total += need;
    return 1;
}

size_t pfx_bytes(const pfx_store *p) { return p->total; }
size_t pfx_budget(const pfx_store *p) { return p->budget; }
int pfx_count(const pfx_store *p) { return p->n; }
