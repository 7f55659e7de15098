/* tok_bpe.c — the BPE model: one pre-token word in, ids out.
 *
 * A word starts as one symbol per character (per byte in byte-level mode); characters
 * missing from the vocab fall back to <0xNN> byte tokens (byte_fallback) or to the unk
 * token (fused when fuse_unk). Merges then run lowest rank first, leftmost first among
 * equal ranks, through a binary min-heap of candidate pairs: O(n log n) per word however
 * long. A popped candidate is stale when its left symbol died or the pair now at that
 * position merges into another id; this is exactly Hugging Face's Word::merge_all, so ties
 * and odd merge tables resolve the same way. Words up to CACHE_MAX_WORD bytes are cached
 * (piece -> ids) behind the model's mutex; the cache is dropped whole when it fills. */
#include "tok_internal.h"
#include "../core/status.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CACHE_MAX_WORD 128
#define CACHE_MAX_ENTRIES 65536
#define SMALL 64

typedef struct { int id, prev, next, alive; } sym;
typedef struct { int rank, pos, new_id; } cand;

static int cand_less(const cand *a, const cand *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(cand *h, size_t *n, cand c) {
    size_t i = (*n)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&c, &h[p])) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = c;
}

static cand heap_pop(cand *h, size_t *n) {
    cand top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        const cand *best = &last;
        if (l < *n && cand_less(&h[l], best)) { m = l; best = &h[l]; }
        if (r < *n && cand_less(&h[r], best)) { m = r; }
        if (m == i) break;
        h[i] = h[m];
        i = m;
    }
    if (*n) h[i] = last;
    return top;
}

static int push_id(int **ids, size_t *n, size_t *cap, int id) {
    if (*n == *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        int *ni = realloc(*ids, nc * sizeof *ni);
        if (!ni) return -1;
        *ids = ni; *cap = nc;
    }
    (*ids)[(*n)++] = id;
    return 0;
}

/* Builds the initial symbols; returns their count or -1 (message set). */
static long init_symbols(const tk_bpe *m, const char *w, size_t n, int *out, char *err, size_t errlen) {
    long ns = 0;
    if (m->bytelevel) {
        for (size_t i = 0; i < n; i++) {
            int id = m->byte_id[(unsigned char)w[i]];
            if (id < 0) {
                if (m->unk_id < 0)
                    return ci_err(err, errlen, "tokenizer: byte 0x%02X has no token in the byte-level vocab", (unsigned char)w[i]);
                id = m->unk_id;
            }
            out[ns++] = id;
        }
        return ns;
    }
    int unk = -1; /* pending unk (fused) */
    char tmp[256];
    for (size_t i = 0; i < n;) {
        size_t l = tk_utf8_len((const unsigned char *)w + i, n - i);
        if (!l) l = 1;
        int first = i == 0, last = i + l == n;
        const char *s = w + i;
        size_t sl = l;
        if ((!first && m->cont_prefix_len) || (last && m->eow_suffix_len)) {
            /* prefix and suffix are at most 64 bytes (checked at load) */
            size_t k = 0;
            if (!first) { memcpy(tmp, m->cont_prefix, m->cont_prefix_len); k = m->cont_prefix_len; }
            memcpy(tmp + k, w + i, l); k += l;
            if (last) { memcpy(tmp + k, m->eow_suffix, m->eow_suffix_len); k += m->eow_suffix_len; }
            s = tmp; sl = k;
        }
        int id = tk_sm_get(&m->vocab, s, sl);
        if (id >= 0) {
            if (unk >= 0) { out[ns++] = unk; unk = -1; }
            out[ns++] = id;
        } else {
            int ok = m->byte_fallback;
            for (size_t k = 0; ok && k < sl; k++) ok = m->byte_id[(unsigned char)s[k]] >= 0;
            if (ok) {
                /* As Hugging Face: byte tokens go out before a pending unk is flushed. */
                for (size_t k = 0; k < sl; k++) out[ns++] = m->byte_id[(unsigned char)s[k]];
            } else if (m->unk_id >= 0) {
                if (unk >= 0 && !m->fuse_unk) out[ns++] = unk;
                unk = m->unk_id;
            }
        }
        i += l;
    }
    if (unk >= 0) out[ns++] = unk;
    return ns;
}

static int merge_word(const tk_bpe *m, int *syms_id, long ns, int **ids, size_t *nids, size_t *cap,
                      char *err, size_t errlen) {
    sym small_s[SMALL];
    cand small_h[3 * SMALL];
    sym *s = small_s;
    cand *h = small_h;
    size_t hcap = 3 * SMALL;
    if (ns > SMALL) {
        s = malloc((size_t)ns * sizeof *s);
        hcap = 3 * (size_t)ns;
        h = malloc(hcap * sizeof *h);
        if (!s || !h) {
            if (s != small_s) free(s);
            if (h != small_h) free(h);
            return ci_err(err, errlen, "tokenizer: out of memory in BPE");
        }
    }
    size_t hn = 0;
    for (long i = 0; i < ns; i++) s[i] = (sym){ syms_id[i], (int)i - 1, i + 1 < ns ? (int)i + 1 : -1, 1 };
    for (long i = 0; i + 1 < ns; i++) {
        const tk_pm_ent *e = tk_pm_get(&m->merges, s[i].id, s[i + 1].id);
        if (e) heap_push(h, &hn, (cand){ e->rank, (int)i, e->id });
    }
    int rc = 0;
    while (hn) {
        cand top = heap_pop(h, &hn);
        sym *a = &s[top.pos];
        if (!a->alive || a->next < 0) continue;
        sym *b = &s[a->next];
        const tk_pm_ent *e = tk_pm_get(&m->merges, a->id, b->id);
        if (!e || e->id != top.new_id) continue;
        a->id = top.new_id;
        b->alive = 0;
        a->next = b->next;
        if (b->next >= 0) s[b->next].prev = top.pos;
        /* n-1 first candidates, then at most two per merge and n-1 merges: 3n slots. */
        if (hn + 2 > hcap) { rc = ci_err(err, errlen, "tokenizer: BPE heap overflow"); break; }
        if (a->prev >= 0) {
            const tk_pm_ent *p = tk_pm_get(&m->merges, s[a->prev].id, a->id);
            if (p) heap_push(h, &hn, (cand){ p->rank, a->prev, p->id });
        }
        if (a->next >= 0) {
            const tk_pm_ent *p = tk_pm_get(&m->merges, a->id, s[a->next].id);
            if (p) heap_push(h, &hn, (cand){ p->rank, top.pos, p->id });
        }
    }
    if (!rc)
        for (long i = 0; i < ns; i++)
            if (s[i].alive && push_id(ids, nids, cap, s[i].id)) { rc = ci_err(err, errlen, "tokenizer: out of memory in BPE"); break; }
    if (s != small_s) free(s);
    if (h != small_h) free(h);
    return rc;
}

static void cache_reset(tk_bpe *m) {
    tk_sm_free(&m->cache);
    m->cache_n = 0;
}

int tk_bpe_word(tk_bpe *m, const char *w, size_t n, int **ids, size_t *nids, size_t *cap,
                char *err, size_t errlen) {
    if (!n) return 0;
    if (m->ignore_merges) {
        int id = tk_sm_get(&m->vocab, w, n);
        if (id >= 0) return push_id(ids, nids, cap, id) ? ci_err(err, errlen, "tokenizer: out of memory") : 0;
    }
    int cacheable = n <= CACHE_MAX_WORD;
    if (cacheable) {
        pthread_mutex_lock(&m->mu);
        int off = m->cache.e ? tk_sm_get(&m->cache, w, n) : -1;
        if (off >= 0) {
            int cnt = m->cache_ids[off];
            int rc = 0;
            for (int i = 0; i < cnt && !rc; i++) rc = push_id(ids, nids, cap, m->cache_ids[off + 1 + i]);
            pthread_mutex_unlock(&m->mu);
            return rc ? ci_err(err, errlen, "tokenizer: out of memory") : 0;
        }
        pthread_mutex_unlock(&m->mu);
    }
    /* A character gives at most one symbol per byte of (prefix + character [+ suffix]). */
    size_t maxs = n * (1 + m->cont_prefix_len) + m->eow_suffix_len + 4;
    int small[4 * SMALL];
    int *syms = maxs <= 4 * SMALL ? small : malloc(maxs * sizeof *syms);
    if (!syms) return ci_err(err, errlen, "tokenizer: out of memory in BPE");
    size_t before = *nids;
    long ns = init_symbols(m, w, n, syms, err, errlen);
    int rc = ns < 0 ? -1 : merge_word(m, syms, ns, ids, nids, cap, err, errlen);
    if (syms != small) free(syms);
    if (rc || !cacheable) return rc;

    size_t cnt = *nids - before;
    pthread_mutex_lock(&m->mu);
    if (!m->cache.e || m->cache.n >= CACHE_MAX_ENTRIES || m->cache_n + cnt + 1 > ((size_t)1 << 22)) {
        cache_reset(m);
        if (tk_sm_init(&m->cache, 4096)) { pthread_mutex_unlock(&m->mu); return 0; }
    }
    if (m->cache_n + cnt + 1 > m->cache_cap) {
        size_t nc = m->cache_cap ? m->cache_cap * 2 : 65536;
        while (nc < m->cache_n + cnt + 1) nc *= 2;
        int *nb = realloc(m->cache_ids, nc * sizeof *nb);
        if (!nb) { pthread_mutex_unlock(&m->mu); return 0; } /* the cache is optional */
        m->cache_ids = nb; m->cache_cap = nc;
    }
    size_t off = m->cache_n;
    m->cache_ids[off] = (int)cnt;
    memcpy(m->cache_ids + off + 1, *ids + before, cnt * sizeof(int));
    if (!tk_sm_put(&m->cache, w, n, (int)off)) m->cache_n += cnt + 1;
    pthread_mutex_unlock(&m->mu);
    return 0;
}

void tk_bpe_free(tk_bpe *m) {
    tk_sm_free(&m->vocab);
    tk_pm_free(&m->merges);
    tk_sm_free(&m->cache);
    free(m->cache_ids);
    free(m->cont_prefix);
    free(m->eow_suffix);
}
