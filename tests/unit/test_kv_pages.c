/* test_kv_pages.c — the paged cache's block allocator (src/cache/kv_pages.h): allocation,
 * sharing by name, truncation, eviction, exhaustion, last blocks published and taken over,
 * and a random soak (the rows each block holds modelled: every position a match gives holds
 * the token asked for) that ends with the pool back to full. */
#include "check.h"
#include "cache/kv_pages.h"
#include <stdlib.h>

static void fill(int32_t *t, int n, int seed) {
    for (int i = 0; i < n; i++) t[i] = (int32_t)((seed * 7919 + i * 31) % 1000);
}

static void test_reserve_and_release(void) {
    kv_pool *p = kvp_new(8, 4);
    CHECK(p && kvp_blk(p) == 4 && kvp_available(p) == 8, "new");
    CHECK(!kvp_new(8, 3) && !kvp_new(0, 4), "bad shapes refused");
    kv_seq a, b;
    CHECK(kvs_init(&a, 5) == 0 && kvs_init(&b, 5) == 0, "init");
    CHECK(kvs_reserve(p, &a, 9) == 0 && a.n == 3 && a.dirty, "9 positions take 3 blocks, got %d", a.n);
    CHECK(kvs_reserve(p, &a, 12) == 0 && a.n == 3, "still 3 for 12");
    CHECK(kvs_reserve(p, &a, 21) == -1 && a.n == 3, "beyond the table refused, nothing taken");
    CHECK(kvs_reserve(p, &b, 20) == 0 && b.n == 5 && kvp_available(p) == 0, "b takes the rest");
    kv_seq c;
    CHECK(kvs_init(&c, 5) == 0, "init c");
    CHECK(kvs_reserve(p, &c, 1) == -1 && c.n == 0, "exhausted: refused");
    int seen[8] = { 0 };
    for (int i = 0; i < a.n; i++) seen[a.tab[i]]++;
    for (int i = 0; i < b.n; i++) seen[b.tab[i]]++;
    for (int i = 0; i < 8; i++) CHECK(seen[i] == 1, "block %d held %d times", i, seen[i]);
    kvs_free(p, &b);
    CHECK(kvp_available(p) == 5 && kvs_reserve(p, &c, 1) == 0, "freed blocks come back");
    kv_pool_stats st;
    kvp_stats(p, &st);
    CHECK(st.in_use == 4 && st.free == 4 && st.cached == 0, "stats %d %d %d", st.in_use, st.free, st.cached);
    kvs_free(p, &a);
    kvs_free(p, &c);
    kvp_stats(p, &st);
    CHECK(st.in_use == 0 && st.free == 8, "all back");
    kvp_free(p);
}

static void test_publish_match_share(void) {
    kv_pool *p = kvp_new(16, 4);
    int32_t t[16], u[16];
    fill(t, 16, 1);
    memcpy(u, t, sizeof t);
    u[9] = 999;                                  /* diverges in the third block */
    kv_seq a, b, c;
    kvs_init(&a, 4); kvs_init(&b, 4); kvs_init(&c, 4);
    CHECK(kvs_reserve(p, &a, 14) == 0, "reserve");
    kvs_publish(p, &a, t, 14, 0);                /* blocks 0..2 full, the 4th partial: not published */
    CHECK(kvp_probe(p, t, 16, 16) == 12, "probe gives 3 blocks, got %d", kvp_probe(p, t, 16, 16));
    CHECK(kvp_probe(p, u, 16, 16) == 8, "a diverging prompt gets 2, got %d", kvp_probe(p, u, 16, 16));
    CHECK(kvp_probe(p, t, 16, 11) == 8, "limit 11 gives 2 blocks");
    CHECK(kvs_match(p, &b, u, 16, 16) == 8 && b.n == 2 && b.tab[0] == a.tab[0] && b.tab[1] == a.tab[1], "shared");
    CHECK(kvs_reserve(p, &b, 16) == 0 && b.tab[2] != a.tab[2], "b's own third block");
    /* a goes away: its published blocks stay cached (b holds two of them) */
    kvs_free(p, &a);
    kv_pool_stats st;
    kvp_stats(p, &st);
    CHECK(st.in_use == 4 && st.cached == 1 && st.free == 11, "after a: %d in use %d cached %d free", st.in_use,
          st.cached, st.free);
    CHECK(kvs_match(p, &c, t, 16, 16) == 12 && c.n == 3, "c finds all three (one from the LRU)");
    kvp_stats(p, &st);
    CHECK(st.cached == 0 && st.in_use == 5, "cached block back in use");
    CHECK(st.match_hits == 5 && st.match_lookups == 8, "hits %lld lookups %lld", st.match_hits, st.match_lookups);
    /* truncating into a shared block drops it; into an own unpublished one keeps it */
    CHECK(kvs_truncate(p, &c, 6) == 4 && c.n == 1, "cut into a shared block: back to 4, got n %d", c.n);
    CHECK(kvs_truncate(p, &b, 10) == 10 && b.n == 3, "own block kept");
    kvs_free(p, &b); kvs_free(p, &c);
    kvp_stats(p, &st);
    CHECK(st.in_use == 0 && st.cached == 3 && st.free == 13, "idle: %d cached %d free", st.cached, st.free);
    kvp_free(p);
}

/* Copy on write: truncating into a published block with a copy gives the sequence a new
 * block in its place (the published one stays named, held by its other holders or cached);
 * a truncation at a block edge copies nothing; with no block to give it drops the block as
 * kvs_truncate does. */
static void test_truncate_copy(void) {
    kv_pool *p = kvp_new(4, 4);
    int32_t t[8];
    fill(t, 8, 3);
    kv_seq a, b;
    kvs_init(&a, 4); kvs_init(&b, 4);
    CHECK(kvs_reserve(p, &a, 8) == 0, "reserve");
    kvs_publish(p, &a, t, 8, 0);
    CHECK(kvs_match(p, &b, t, 8, 8) == 8 && b.n == 2, "b shares both");
    int from = 0, to = 0;
    CHECK(kvs_truncate_copy(p, &b, 8, &from, &to) == 8 && from == -1 && to == -1, "nothing cut: nothing to copy");
    CHECK(kvs_truncate_copy(p, &b, 4, &from, &to) == 4 && from == -1 && b.n == 1, "a block edge: the block after goes");
    kvs_truncate(p, &b, 0);
    CHECK(kvs_match(p, &b, t, 8, 8) == 8, "rematch");
    b.dirty = 0;
    CHECK(kvs_truncate_copy(p, &b, 6, &from, &to) == 6 && from == a.tab[1] && to >= 0 && to != from &&
          b.tab[1] == to && b.tab[0] == a.tab[0] && b.dirty, "copied: from %d to %d", from, to);
    kv_pool_stats st;
    kvp_stats(p, &st);
    CHECK(st.in_use == 3 && st.free == 1, "a's two + b's copy: %d in use, %d free", st.in_use, st.free);
    kvs_free(p, &a);
    kv_seq c, d;
    kvs_init(&c, 4); kvs_init(&d, 4);
    CHECK(kvs_match(p, &c, t, 8, 8) == 8, "the published blocks stay named after the copy");
    CHECK(kvs_reserve(p, &d, 4) == 0 && kvp_available(p) == 0, "the last block taken");
    CHECK(kvs_truncate_copy(p, &c, 5, &from, &to) == 4 && from == -1 && c.n == 1, "no block to give: dropped (%d)", c.n);
    kvs_free(p, &b); kvs_free(p, &c); kvs_free(p, &d);
    kvp_stats(p, &st);
    CHECK(st.in_use == 0 && st.free + st.cached == 4, "idle: %d in use", st.in_use);
    kvp_free(p);
}

/* kvs_match_copy: a prompt that shares the start of a full published block (at least blk / 8
 * of its tokens, more than any last block gives) gets a new block for it and the pair to
 * copy; kvs_match takes no such copy; a shorter share copies nothing. */
static void test_match_copy(void) {
    kv_pool *p = kvp_new(6, 16);
    int32_t t[32], u[32];
    fill(t, 32, 5);
    memcpy(u, t, sizeof t);
    u[16 + 5] = 999;                         /* shares 5 of the second block: 5 * 8 >= 16 */
    kv_seq a, b, c;
    kvs_init(&a, 2); kvs_init(&b, 2); kvs_init(&c, 2);
    CHECK(kvs_reserve(p, &a, 32) == 0, "reserve");
    kvs_publish(p, &a, t, 32, 0);
    int from = 0, to = 0;
    CHECK(kvs_match(p, &b, u, 32, 31) == 16 && b.n == 1, "kvs_match: the first block only (%d)", b.n);
    kvs_truncate(p, &b, 0);
    CHECK(kvs_match_copy(p, &b, u, 32, 31, &from, &to) == 21 && b.n == 2 && from == a.tab[1] && to >= 0 &&
          to != a.tab[0] && to != a.tab[1] && b.tab[1] == to && b.tab[0] == a.tab[0], "copy: from %d to %d, n %d", from, to,
          b.n);
    u[16 + 1] = 998;                         /* shares 1: 1 * 8 < 16, not worth a copy */
    CHECK(kvs_match_copy(p, &c, u, 32, 31, &from, &to) == 16 && from == -1 && to == -1 && c.n == 1, "no copy for 1 token");
    kv_pool_stats st;
    kvp_stats(p, &st);
    CHECK(st.copies == 1 && st.in_use == 3, "copies %lld, %d in use", st.copies, st.in_use);
    kvs_free(p, &a); kvs_free(p, &b); kvs_free(p, &c);
    kvp_stats(p, &st);
    CHECK(st.in_use == 0 && st.cached == 2, "idle: %d in use, %d cached", st.in_use, st.cached);
    /* a last block is copied too, and stays named: two sequences go on from it */
    kv_seq d, e, f;
    kvs_init(&d, 2); kvs_init(&e, 2); kvs_init(&f, 2);
    int32_t w[32];
    memcpy(w, t, sizeof w);
    for (int i = 16; i < 32; i++) w[i] = 500 + i;  /* w parts from t after the first block */
    CHECK(kvs_reserve(p, &d, 16 + 10) == 0, "reserve d");
    kvs_publish(p, &d, w, 16 + 10, 1);             /* its first block full (the name a has), its last 10 rows */
    const int tail = d.tab[1];
    kvs_free(p, &d);
    CHECK(kvs_match_copy(p, &e, w, 32, 31, &from, &to) == 26 && from == tail && to != tail && e.tab[1] == to,
          "e copies the last block: from %d (want %d) to %d", from, tail, to);
    CHECK(kvs_match_copy(p, &f, w, 32, 31, &from, &to) == 26 && from == tail && f.tab[1] == to && to != e.tab[1],
          "f copies it again: from %d to %d", from, to);
    kvp_stats(p, &st);
    CHECK(st.tail_hits == 2 && st.copies == 3, "tail hits %lld, copies %lld", st.tail_hits, st.copies);
    kvs_free(p, &e); kvs_free(p, &f);
    kvp_free(p);
}

/* A sequence that computed a block another one had already named (a hybrid without the
 * states there) names its later blocks under that other block: a walk of the names goes
 * from the first sequence's block into the second one's. */
static void test_publish_through_duplicate(void) {
    kv_pool *p = kvp_new(8, 4);
    int32_t t[12], u[12];
    fill(t, 12, 9);
    memcpy(u, t, sizeof t);
    u[5] = 777;                              /* u shares t's first block only */
    kv_seq a, b, c;
    kvs_init(&a, 3); kvs_init(&b, 3); kvs_init(&c, 3);
    CHECK(kvs_reserve(p, &a, 8) == 0 && kvs_reserve(p, &b, 12) == 0, "reserve");
    kvs_publish(p, &a, t, 8, 0);
    kvs_publish(p, &b, u, 12, 0);            /* b's first block is a's again: not named; its others are */
    CHECK(kvs_match(p, &c, u, 12, 12) == 12 && c.tab[0] == a.tab[0] && c.tab[1] == b.tab[1] && c.tab[2] == b.tab[2],
          "the walk goes through a's first block into b's: %d %d %d", c.tab[0], c.tab[1], c.tab[2]);
    kvs_free(p, &a); kvs_free(p, &b); kvs_free(p, &c);
    kvp_free(p);
}

static void test_evict_lru_and_generations(void) {
    kv_pool *p = kvp_new(4, 2);
    int32_t t[8], u[8];
    fill(t, 8, 3);
    fill(u, 8, 4);
    kv_seq a, b;
    kvs_init(&a, 4); kvs_init(&b, 4);
    kvs_reserve(p, &a, 4);
    kvs_publish(p, &a, t, 4, 0);
    kvs_free(p, &a);                             /* 2 cached */
    kvs_init(&a, 4);
    CHECK(kvs_reserve(p, &a, 8) == 0, "4 blocks: 2 free + 2 evicted");
    kv_pool_stats st;
    kvp_stats(p, &st);
    CHECK(st.evictions == 2 && st.cached == 0, "evictions %lld", st.evictions);
    CHECK(kvp_probe(p, t, 8, 8) == 0, "evicted names no longer match");
    kvs_publish(p, &a, u, 8, 0);
    kvs_free(p, &a);
    CHECK(kvp_probe(p, u, 8, 8) == 8, "u published whole");
    /* a sequence lets its blocks go last first, so the LRU evicts a chain from its tail and
     * its prefix stays usable */
    CHECK(kvs_reserve(p, &b, 2) == 0, "one block: evicts the oldest cached");
    CHECK(kvp_probe(p, u, 8, 8) == 6, "u's last block went first: %d", kvp_probe(p, u, 8, 8));
    kvs_free(p, &b);
    kvp_free(p);
}

/* A sequence over t[0, n) (the named full blocks taken first, as the engine does) that ends
 * with its last block named; returns the id of that block. */
static int32_t end_with_tail(kv_pool *p, const int32_t *t, int n) {
    kv_seq a;
    kvs_init(&a, 4);
    kvs_match(p, &a, t, n, n);
    kvs_reserve(p, &a, n);
    kvs_publish(p, &a, t, n, 1);
    const int32_t last = a.tab[a.n - 1];
    kvs_free(p, &a);
    return last;
}

/* A sequence's last block published when it ends: the next sequence that goes on from its
 * tokens, ends within them or shares at least half of them takes it over (positions past the
 * full blocks), one that shares fewer does not, nobody shares it, and a full name replaces a
 * tail's. */
static void test_tail_taken_over(void) {
    kv_pool *p = kvp_new(8, 4);
    int32_t t[16], u[16];
    fill(t, 16, 5);
    kv_seq a, b, c;
    kvs_init(&a, 4); kvs_init(&b, 4); kvs_init(&c, 4);
    kvs_reserve(p, &a, 10);
    kvs_publish(p, &a, t, 10, 0);
    CHECK(kvs_match(p, &b, t, 16, 15) == 8 && b.n == 2, "without a tail: the full blocks only");
    kvs_free(p, &b); kvs_init(&b, 4);
    const int32_t tail_block = a.tab[2];
    kvs_publish(p, &a, t, 10, 1);                /* a ends: its 2 rows of block 3 named */
    CHECK(kvs_match(p, &b, t, 16, 15) == 8 && b.n == 2, "a still holds its tail: not taken");
    kvs_free(p, &b); kvs_init(&b, 4);
    kvs_free(p, &a);
    memcpy(u, t, sizeof t);
    u[8] = 999;
    CHECK(kvs_match(p, &b, u, 16, 15) == 8 && b.n == 2, "a prompt that differs at the tail's first row: not taken");
    kvs_free(p, &b); kvs_init(&b, 4);
    CHECK(kvs_match(p, &b, t, 16, 15) == 10 && b.n == 3 && b.tab[2] == tail_block, "taken over: 10");
    CHECK(kvs_match(p, &c, t, 16, 15) == 8, "gone from the names once taken");
    kvs_free(p, &c); kvs_init(&c, 4);
    kvs_free(p, &b); kvs_init(&b, 4);            /* b wrote nothing more: the block goes back unnamed */
    CHECK(kvs_match(p, &b, t, 16, 15) == 8, "an unnamed block is not found again");
    kvs_free(p, &b); kvs_init(&b, 4);
    /* part of a 3-row tail: a prompt that parts from it after 1 row (left), after 2 (taken), a
     * limit inside it (taken) */
    memcpy(u, t, sizeof t);
    u[9] = 999;
    int32_t tb = end_with_tail(p, t, 11);
    CHECK(kvs_match(p, &b, u, 16, 15) == 8 && b.n == 2, "parts from it after 1 of 3 rows: left for another");
    kvs_free(p, &b); kvs_init(&b, 4);
    memcpy(u, t, sizeof t);
    u[10] = 999;
    CHECK(kvs_match(p, &b, u, 16, 15) == 10 && b.tab[2] == tb, "parts from it after 2 of 3 rows: taken");
    kvs_free(p, &b); kvs_init(&b, 4);
    tb = end_with_tail(p, t, 11);
    CHECK(kvs_match(p, &b, t, 9, 9) == 9 && b.tab[2] == tb, "limit 9, within the tail: one row of it");
    kvs_free(p, &b); kvs_init(&b, 4);
    kv_pool_stats st;
    kvp_stats(p, &st);
    CHECK(st.tail_hits == 3, "tail hits %lld", st.tail_hits);
    /* a sequence fills the block and names it whole: the full name matches, no tail left */
    end_with_tail(p, t, 10);
    CHECK(kvs_match(p, &b, t, 16, 15) == 10, "taken over again");
    kvs_reserve(p, &b, 12);
    kvs_publish(p, &b, t, 12, 1);
    kvs_free(p, &b); kvs_init(&b, 4);
    CHECK(kvs_match(p, &b, t, 16, 15) == 12 && b.n == 3, "the full name after the tail's");
    kvs_free(p, &b);
    kvs_free(p, &c);
    kvp_stats(p, &st);
    CHECK(st.in_use == 0 && st.free + st.cached == 8, "idle pool whole");
    kvp_free(p);
}

/* Random sequences grow, publish, match, truncate and end (naming their tails as they end);
 * the counts always add up, every position a match gives holds the token asked for (the
 * rows each block holds are modelled: a sequence writes its tokens' rows as it grows), and an
 * idle pool is whole again. */
static void test_soak(void) {
    enum { NB = 64, BLK = 4, NS = 6, CAP = 16 };
    kv_pool *p = kvp_new(NB, BLK);
    kv_seq s[NS];
    int32_t toks[NS][CAP * BLK], rows[NB][BLK];
    int len[NS] = { 0 };
    for (int i = 0; i < NS; i++) kvs_init(&s[i], CAP);
    srand(7);
    int matched = 0, wrong = 0, tails = 0, copies = 0;
    for (int it = 0; it < 20000 && !wrong; it++) {
        int i = rand() % NS, op = rand() % 10;
        if (op < 5) {                            /* grow by a few tokens from a small alphabet */
            int add = 1 + rand() % 9;
            if (len[i] + add > CAP * BLK) add = CAP * BLK - len[i];
            if (add && kvs_reserve(p, &s[i], len[i] + add) == 0) {
                for (int k = 0; k < add; k++) {
                    const int q = len[i] + k;
                    toks[i][q] = rand() % 2;
                    rows[s[i].tab[q / BLK]][q % BLK] = toks[i][q];
                }
                len[i] += add;
                kvs_publish(p, &s[i], toks[i], len[i], 0);
            }
        } else if (op < 7) {
            int from, to, want = rand() % (len[i] + 1);
            if (rand() % 2) {
                len[i] = kvs_truncate_copy(p, &s[i], want, &from, &to);   /* the caller copies the kept rows */
                if (from >= 0) memcpy(rows[to], rows[from], (size_t)(len[i] % BLK) * sizeof rows[0][0]);
                copies += from >= 0;
            } else {
                len[i] = kvs_truncate(p, &s[i], want);
            }
        } else {                                 /* end, then a new prompt that may share */
            kvs_publish(p, &s[i], toks[i], len[i], 1);
            kvs_free(p, &s[i]);
            kvs_init(&s[i], CAP);
            int n = rand() % (CAP * BLK);
            for (int k = 0; k < n; k++) toks[i][k] = rand() % 2;
            int from = -1, to = -1;
            if (rand() % 2) {                    /* copy on write: the rows of the block copied */
                len[i] = kvs_match_copy(p, &s[i], toks[i], n, n, &from, &to);
                if (from >= 0) memcpy(rows[to], rows[from], (size_t)(len[i] - (s[i].n - 1) * BLK) * sizeof rows[0][0]);
                copies += from >= 0;
            } else {
                len[i] = kvs_match(p, &s[i], toks[i], n, n);
            }
            matched += len[i] > 0;
            tails += len[i] % BLK != 0;
            for (int q = 0; q < len[i]; q++)
                if (rows[s[i].tab[q / BLK]][q % BLK] != toks[i][q]) {
                    CHECK(0, "iteration %d: position %d of a match holds %d, not %d", it, q,
                          rows[s[i].tab[q / BLK]][q % BLK], toks[i][q]);
                    wrong = 1;
                    break;
                }
        }
        kv_pool_stats st;
        kvp_stats(p, &st);
        int held = 0;
        for (int k = 0; k < NS; k++) held += s[k].n;
        if (st.in_use + st.cached + st.free != NB || st.in_use > held) {
            CHECK(0, "iteration %d: %d in use, %d cached, %d free, %d held", it, st.in_use, st.cached, st.free, held);
            break;
        }
    }
    CHECK(matched > 100 && tails > 20 && copies > 20, "prefixes were shared (%d), tails gone on from (%d), blocks copied (%d)",
          matched, tails, copies);
    for (int i = 0; i < NS; i++) kvs_free(p, &s[i]);
    kv_pool_stats st;
    kvp_stats(p, &st);
    CHECK(st.in_use == 0 && st.free + st.cached == NB, "idle pool whole: %d in use", st.in_use);
    kvp_free(p);
}

int main(void) {
    TEST_RUN(test_reserve_and_release);
    TEST_RUN(test_publish_match_share);
    TEST_RUN(test_truncate_copy);
    TEST_RUN(test_match_copy);
    TEST_RUN(test_publish_through_duplicate);
    TEST_RUN(test_evict_lru_and_generations);
    TEST_RUN(test_tail_taken_over);
    TEST_RUN(test_soak);
    TEST_EXIT();
}
