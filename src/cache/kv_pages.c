/* kv_pages.c — see kv_pages.h. */
#include "kv_pages.h"
#include <stdlib.h>
#include <string.h>

struct kv_pool {
    int n, blk;
    int *ref;               /* [n] holders */
    uint32_t *gen;          /* [n] bumped when the block is handed out for new rows */
    unsigned char *pub;     /* [n] published: named below, never written again */
    int *parent;            /* [n] the name: the block before it (-1: the first block) */
    uint32_t *parent_gen;   /*     that block's generation then */
    int32_t *toks;          /* [n, blk] and the tokens it holds */
    int *plen;              /* [n] how many: blk, or fewer for a sequence's published last block */
    uint64_t *hash;         /* [n] the name's hash */
    int *bucket, nb;        /* [nb] (a power of two) the first published block of the bucket, or -1 */
    int *hnext;             /* [n] the next one in its bucket */
    int *stack, n_free;     /* free blocks */
    int *prev, *next;       /* [n] the LRU list of cached blocks, oldest first */
    int head, tail, n_cached;
    long long lookups, hits, evictions, tail_hits, copies;
};

static uint64_t name_hash(int parent, uint32_t pgen, const int32_t *toks, int blk) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ ((uint64_t)(uint32_t)parent << 32 | pgen);
    for (int i = 0; i < blk; i++) {
        h ^= (uint32_t)toks[i];
        h *= 0x100000001b3ull;
        h ^= h >> 29;
    }
    return h;
}

kv_pool *kvp_new(int n_blocks, int blk) {
    if (n_blocks < 1 || blk < 1 || (blk & (blk - 1))) return NULL;
    kv_pool *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->n = n_blocks;
    p->blk = blk;
    p->nb = 1;
    while (p->nb < n_blocks) p->nb <<= 1;
    size_t n = (size_t)n_blocks;
    p->ref = calloc(n, sizeof *p->ref);
    p->gen = calloc(n, sizeof *p->gen);
    p->pub = calloc(n, 1);
    p->parent = malloc(n * sizeof *p->parent);
    p->parent_gen = malloc(n * sizeof *p->parent_gen);
    p->toks = malloc(n * (size_t)blk * sizeof *p->toks);
    p->hash = malloc(n * sizeof *p->hash);
    p->plen = malloc(n * sizeof *p->plen);
    p->bucket = malloc((size_t)p->nb * sizeof *p->bucket);
    p->hnext = malloc(n * sizeof *p->hnext);
    p->stack = malloc(n * sizeof *p->stack);
    p->prev = malloc(n * sizeof *p->prev);
    p->next = malloc(n * sizeof *p->next);
    if (!p->ref || !p->gen || !p->pub || !p->parent || !p->parent_gen || !p->toks || !p->hash || !p->plen || !p->bucket ||
        !p->hnext || !p->stack || !p->prev || !p->next) {
        kvp_free(p);
        return NULL;
    }
    for (int i = 0; i < p->nb; i++) p->bucket[i] = -1;
    for (int i = 0; i < n_blocks; i++) p->stack[i] = n_blocks - 1 - i;   /* block 0 comes out first */
    p->n_free = n_blocks;
    p->head = p->tail = -1;
    return p;
}

void kvp_free(kv_pool *p) {
    if (!p) return;
    free(p->ref); free(p->gen); free(p->pub); free(p->parent); free(p->parent_gen); free(p->toks);
    free(p->hash); free(p->plen); free(p->bucket); free(p->hnext); free(p->stack); free(p->prev); free(p->next);
    free(p);
}

int kvp_blk(const kv_pool *p) { return p->blk; }
int kvp_blocks(const kv_pool *p) { return p->n; }
int kvp_available(const kv_pool *p) { return p->n_free + p->n_cached; }

void kvp_stats(const kv_pool *p, kv_pool_stats *s) {
    s->blocks = p->n;
    s->blk = p->blk;
    s->free = p->n_free;
    s->cached = p->n_cached;
    s->in_use = p->n - p->n_free - p->n_cached;
    s->match_lookups = p->lookups;
    s->match_hits = p->hits;
    s->evictions = p->evictions;
    s->tail_hits = p->tail_hits;
    s->copies = p->copies;
}

static void lru_remove(kv_pool *p, int b) {
    if (p->prev[b] >= 0) p->next[p->prev[b]] = p->next[b]; else p->head = p->next[b];
    if (p->next[b] >= 0) p->prev[p->next[b]] = p->prev[b]; else p->tail = p->prev[b];
    p->n_cached--;
}

static void lru_push(kv_pool *p, int b) {
    p->prev[b] = p->tail;
    p->next[b] = -1;
    if (p->tail >= 0) p->next[p->tail] = b; else p->head = b;
    p->tail = b;
    p->n_cached++;
}

static void unpublish(kv_pool *p, int b) {
    int *at = &p->bucket[p->hash[b] & (uint64_t)(p->nb - 1)];
    while (*at != b) at = &p->hnext[*at];
    *at = p->hnext[b];
    p->pub[b] = 0;
}

/* The published full block with this name, or -1. */
static int find(const kv_pool *p, int parent, uint32_t pgen, const int32_t *toks) {
    uint64_t h = name_hash(parent, pgen, toks, p->blk);
    for (int b = p->bucket[h & (uint64_t)(p->nb - 1)]; b >= 0; b = p->hnext[b])
        if (p->hash[b] == h && p->plen[b] == p->blk && p->parent[b] == parent && p->parent_gen[b] == pgen &&
            !memcmp(p->toks + (size_t)b * p->blk, toks, (size_t)p->blk * sizeof *toks))
            return b;
    return -1;
}

/* Last blocks (fewer than blk rows named) are hashed by their parent alone: of those after
 * (parent, pgen) that nobody holds, the one that shares the longest run of first tokens with
 * toks[0, avail) (*len of them), counting only runs that take the whole block, all of toks,
 * or at least half of the block's tokens (a reply's tail that a next prompt parts from late);
 * a block that shares a few first tokens (a chat template's header, say) is left for a
 * sequence that would take more of it. -1 when none. */
static int find_tail(const kv_pool *p, int parent, uint32_t pgen, const int32_t *toks, int avail, int *len) {
    uint64_t h = name_hash(parent, pgen, NULL, 0);
    int best = -1;
    *len = 0;
    for (int b = p->bucket[h & (uint64_t)(p->nb - 1)]; b >= 0; b = p->hnext[b]) {
        if (p->hash[b] != h || p->plen[b] == p->blk || p->ref[b] || p->parent[b] != parent || p->parent_gen[b] != pgen)
            continue;
        const int32_t *t = p->toks + (size_t)b * p->blk;
        int c = 0, most = p->plen[b] < avail ? p->plen[b] : avail;
        while (c < most && t[c] == toks[c]) c++;
        if ((c == most || 2 * c >= p->plen[b]) && c > *len) {
            *len = c;
            best = b;
        }
    }
    return best;
}

static void name_block(kv_pool *p, int b, int par, uint32_t pg, const int32_t *t, int len) {
    p->parent[b] = par;
    p->parent_gen[b] = pg;
    p->plen[b] = len;
    memcpy(p->toks + (size_t)b * p->blk, t, (size_t)len * sizeof *t);
    p->hash[b] = len == p->blk ? name_hash(par, pg, t, len) : name_hash(par, pg, NULL, 0);
    int *bk = &p->bucket[p->hash[b] & (uint64_t)(p->nb - 1)];
    p->hnext[b] = *bk;
    *bk = b;
    p->pub[b] = 1;
}

static int take_new(kv_pool *p) {
    int b;
    if (p->n_free) b = p->stack[--p->n_free];
    else if (p->head >= 0) {
        b = p->head;
        lru_remove(p, b);
        unpublish(p, b);
        p->evictions++;
    } else return -1;
    p->gen[b]++;
    p->ref[b] = 1;
    return b;
}

static void ref_take(kv_pool *p, int b) {
    if (p->ref[b]++ == 0) lru_remove(p, b);
}

static void unref(kv_pool *p, int b) {
    if (--p->ref[b] > 0) return;
    if (p->pub[b]) lru_push(p, b);
    else p->stack[p->n_free++] = b;
}

int kvs_init(kv_seq *s, int cap) {
    memset(s, 0, sizeof *s);
    s->tab = calloc((size_t)(cap > 0 ? cap : 1), sizeof *s->tab);
    if (!s->tab) return -1;
    s->cap = cap;
    return 0;
}

void kvs_free(kv_pool *p, kv_seq *s) {
    if (!s->tab) return;
    if (p) kvs_truncate(p, s, 0);
    free(s->tab);
    memset(s, 0, sizeof *s);
}

int kvs_reserve(kv_pool *p, kv_seq *s, int tokens) {
    int need = (int)(((int64_t)tokens + p->blk - 1) / p->blk);
    if (need > s->cap) return -1;
    if (need <= s->n) return 0;
    if (kvp_available(p) < need - s->n) return -1;
    while (s->n < need) s->tab[s->n++] = take_new(p);
    s->dirty = 1;
    return 0;
}

int kvs_truncate_copy(kv_pool *p, kv_seq *s, int tokens, int *from, int *to) {
    if (from) *from = *to = -1;
    if (tokens < 0) tokens = 0;
    int keep = (int)(((int64_t)tokens + p->blk - 1) / p->blk);
    if (keep > s->n) return s->n * p->blk < tokens ? s->n * p->blk : tokens;
    while (s->n > keep) unref(p, s->tab[--s->n]);
    if (tokens % p->blk && s->n) {
        int b = s->tab[s->n - 1];
        if (p->pub[b] || p->ref[b] > 1) {
            if (from && kvp_available(p) > 0) {   /* a block of its own for the rows it keeps */
                *from = b;
                *to = s->tab[s->n - 1] = take_new(p);
            } else {
                s->n--;
                tokens = s->n * p->blk;
            }
            unref(p, b);
        }
    }
    s->dirty = 1;
    return tokens;
}

int kvs_truncate(kv_pool *p, kv_seq *s, int tokens) { return kvs_truncate_copy(p, s, tokens, NULL, NULL); }

void kvs_publish(kv_pool *p, kv_seq *s, const int32_t *toks, int n, int tail) {
    int full = n / p->blk < s->n ? n / p->blk : s->n;
    /* par: the named block of the positions before block i, the sequence's own or, where the
     * sequence computed a block whose name another block already has (a hybrid that had the
     * rows but not the states there), that other block: the names go on through it, so a
     * later walk of the names reaches this sequence's blocks after it */
    int par = -1;
    for (int i = 0; i < full; i++) {
        int b = s->tab[i];
        if (p->pub[b] && p->plen[b] == p->blk) { par = b; continue; }
        uint32_t pg = par >= 0 ? p->gen[par] : 0;
        const int32_t *t = toks + (size_t)i * p->blk;
        int x = find(p, par, pg, t);
        if (x >= 0) { par = x; continue; }      /* another block has this name */
        if (p->pub[b]) unpublish(p, b);         /* named as a last block before: now full */
        name_block(p, b, par, pg, t, p->blk);
        par = b;
    }
    const int r = n - full * p->blk;
    if (!tail || full >= s->n || r <= 0 || r >= p->blk) return;
    const int b = s->tab[full];
    if (p->ref[b] > 1) return;
    if (p->pub[b]) unpublish(p, b);
    name_block(p, b, par, par >= 0 ? p->gen[par] : 0, toks + (size_t)full * p->blk, r);
}

/* The blocks of toks' full blocks (at most limit positions) found by walking the names from
 * the first block; into tab when given (and taken). */
static int walk(kv_pool *p, const int32_t *toks, int n, int limit, int32_t *tab, int cap) {
    int m = (n < limit ? n : limit) / p->blk, got = 0, par = -1;
    uint32_t pg = 0;
    if (m > cap) m = cap;
    for (; got < m; got++) {
        int b = find(p, par, pg, toks + (size_t)got * p->blk);
        if (b < 0) break;
        if (tab) {
            ref_take(p, b);
            tab[got] = b;
        }
        par = b;
        pg = p->gen[b];
    }
    return got;
}

/* The full published block after parent (generation pgen) whose tokens share the longest
 * start with toks[0, avail) (at least blk / 8 of them, fewer than blk): its id and *len,
 * else -1. A scan of the pool (once per admission). */
static int find_partial(const kv_pool *p, int parent, uint32_t pgen, const int32_t *toks, int avail, int *len) {
    int best = -1;
    *len = 0;
    for (int b = 0; b < p->n; b++) {
        if (!p->pub[b] || p->plen[b] != p->blk || p->parent[b] != parent || p->parent_gen[b] != pgen) continue;
        const int32_t *t = p->toks + (size_t)b * p->blk;
        int c = 0, most = p->blk < avail ? p->blk : avail;
        while (c < most && t[c] == toks[c]) c++;
        if (c > *len && 8 * c >= p->blk) {
            *len = c;
            best = b;
        }
    }
    return best;
}

int kvs_match(kv_pool *p, kv_seq *s, const int32_t *toks, int n, int limit) {
    return kvs_match_copy(p, s, toks, n, limit, NULL, NULL);
}

int kvs_match_copy(kv_pool *p, kv_seq *s, const int32_t *toks, int n, int limit, int *from, int *to) {
    if (from) *from = *to = -1;
    if (s->n) return 0;
    int asked = (n < limit ? n : limit) / p->blk;
    int got = walk(p, toks, n, limit, s->tab, s->cap);
    p->lookups += asked < s->cap ? asked : s->cap;
    p->hits += got;
    s->n = got;
    s->dirty = 1;
    /* then the published last block after them that goes on longest with toks, or a full
     * block that shares more of toks' next tokens than any last block does: with a caller that
     * copies (from), its shared rows go into a new block of the sequence's (copy on write; the
     * named block stays for others), else a last block nobody holds is taken over: unnamed, it
     * is this sequence's own to write on from where the two part */
    const int avail = (n < limit ? n : limit) - got * p->blk;
    if (got >= s->cap || avail <= 0) return got * p->blk;
    const int par = got ? s->tab[got - 1] : -1;
    const uint32_t pg = par >= 0 ? p->gen[par] : 0;
    int len = 0, clen = 0;
    const int b = find_tail(p, par, pg, toks + (size_t)got * p->blk, avail, &len);
    const int c = from ? find_partial(p, par, pg, toks + (size_t)got * p->blk, avail, &clen) : -1;
    const int src = c >= 0 && clen > len ? c : b, slen = src == c ? clen : len;
    if (from && src >= 0) {
        ref_take(p, src);              /* not evicted for the new block */
        const int nb = take_new(p);
        unref(p, src);
        if (nb >= 0) {
            s->tab[s->n++] = nb;
            *from = src;
            *to = nb;
            p->copies++;
            p->tail_hits += src == b;
            return got * p->blk + slen;
        }
    }
    if (b < 0) return got * p->blk;
    lru_remove(p, b);
    unpublish(p, b);
    p->gen[b]++;
    p->ref[b] = 1;
    s->tab[s->n++] = b;
    p->tail_hits++;
    return got * p->blk + len;
}

int kvp_probe(const kv_pool *p, const int32_t *toks, int n, int limit) {
    return walk((kv_pool *)p, toks, n, limit, NULL, 1 << 30) * p->blk;
}
