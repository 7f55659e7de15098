/* test_sampler.c — greedy, temperature, top-k / top-p / min-p, penalty and seeding. */
#include "check.h"
#include "gen/sampler.h"
#include <math.h>
#include <stdlib.h>

enum { V = 50 };

static void fill(float *l) { for (int i = 0; i < V; i++) l[i] = (float)((i * 37) % V) / 10.0f; } /* max at i with i*37%50==49 */

static int argmax(const float *l) { int b = 0; for (int i = 1; i < V; i++) if (l[i] > l[b]) b = i; return b; }

static int draw(ci_sampler_opts *o, const int *hist, int nh) {
    smp_state s;
    smp_init(&s, o, V);
    float l[V];
    fill(l);
    int t = smp_sample(&s, l, hist, nh);
    smp_free(&s);
    return t;
}

static void test_greedy(void) {
    ci_sampler_opts o;
    ci_sampler_defaults(&o);
    float l[V];
    fill(l);
    int am = argmax(l);
    CHECK(draw(&o, NULL, 0) == am, "greedy");
    /* ties: first index */
    smp_state s; smp_init(&s, &o, V);
    for (int i = 0; i < V; i++) l[i] = 1.0f;
    CHECK(smp_sample(&s, l, NULL, 0) == 0, "tie -> first index");
    smp_free(&s);
}

static void test_filters_collapse_to_argmax(void) {
    ci_sampler_opts o;
    ci_sampler_defaults(&o);
    float l[V];
    fill(l);
    int am = argmax(l);
    o.temperature = 1.0f;
    for (uint64_t seed = 0; seed < 20; seed++) {
        o.seed = seed;
        o.top_k = 1; CHECK(draw(&o, NULL, 0) == am, "top_k=1");
        o.top_k = 0; o.top_p = 1e-6f; CHECK(draw(&o, NULL, 0) == am, "top_p tiny");
        o.top_p = 1; o.min_p = 1.0f; CHECK(draw(&o, NULL, 0) == am, "min_p=1");
        o.min_p = 0;
    }
}

static void test_top_k_support(void) {
    ci_sampler_opts o;
    ci_sampler_defaults(&o);
    o.temperature = 5.0f;   /* flat: every candidate is likely */
    o.top_k = 3;
    float l[V];
    fill(l);
    /* the three largest logits are 4.9, 4.8, 4.7 */
    int seen[V] = {0};
    for (uint64_t seed = 0; seed < 300; seed++) { o.seed = seed; seen[draw(&o, NULL, 0)]++; }
    int distinct = 0;
    for (int i = 0; i < V; i++) if (seen[i]) { distinct++; CHECK(l[i] >= 4.7f - 1e-6f, "token %d (logit %g) outside top-3", i, l[i]); }
    CHECK(distinct == 3, "distinct %d", distinct);
}

static void test_seed_determinism(void) {
    ci_sampler_opts o;
    ci_sampler_defaults(&o);
    o.temperature = 2.0f;
    int a[40], b[40], c[40], diff = 0;
    for (int i = 0; i < 40; i++) { o.seed = 99 + (uint64_t)i; a[i] = draw(&o, NULL, 0); b[i] = draw(&o, NULL, 0); }
    for (int i = 0; i < 40; i++) { o.seed = 1000 + (uint64_t)i; c[i] = draw(&o, NULL, 0); diff += c[i] != a[i]; }
    CHECK(!memcmp(a, b, sizeof a), "same seed, same draws");
    CHECK(diff > 5, "different seeds barely differ (%d)", diff);
}

static void test_repeat_penalty(void) {
    ci_sampler_opts o;
    ci_sampler_defaults(&o);
    float l[V];
    fill(l);
    int am = argmax(l);
    o.repeat_penalty = 100.0f;
    int hist[2] = { am, am };
    int t = draw(&o, hist, 2);
    CHECK(t != am, "penalised argmax still chosen");
    float l2[V];
    fill(l2);
    l2[am] = -1e9f;
    CHECK(t == argmax(l2), "second best expected");
    o.repeat_last_n = 1;
    int hist2[2] = { am, 3 };
    CHECK(draw(&o, hist2, 2) == am, "window of 1 should not see the older token");
}

/* smp_order (a radix sort) against qsort with the order spelled out as a comparison: larger
 * first, equal values (-0 and +0 too) by index, NaN after every number (by index); on a
 * vocabulary-sized row with many ties, signed zeros, infinities and NaNs, and on short rows
 * (n below a digit's range, n = 1). */
static const float *ref_base;
static int ref_cmp(const void *a, const void *b) {
    const int i = *(const int *)a, j = *(const int *)b;
    const float x = ref_base[i], y = ref_base[j];
    const int nx = x != x, ny = y != y;
    if (nx != ny) return nx - ny;
    if (!nx && x != y) return x > y ? -1 : 1;
    return i - j;
}

static void test_order_matches_comparison(void) {
    const int sizes[] = { 151936, 3000, 7, 1 };
    for (int si = 0; si < 4; si++) {
        const int n = sizes[si];
        float *x = malloc((size_t)n * sizeof *x);
        int *got = malloc((size_t)n * sizeof *got), *want = malloc((size_t)n * sizeof *want);
        uint32_t *tmp = malloc((size_t)n * 3 * sizeof *tmp);
        uint64_t r = 12345 + (uint64_t)n;
        for (int i = 0; i < n; i++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            const unsigned u = (unsigned)(r >> 33);
            x[i] = (float)((int)(u % 20001) - 10000) / 64.0f;   /* ties, negatives */
            if (u % 97 == 0) x[i] = (u & 1) ? -0.0f : 0.0f;
            if (u % 101 == 0) x[i] = (u & 1) ? INFINITY : -INFINITY;
            if (u % 103 == 0) x[i] = NAN;
            if (u % 107 == 0) x[i] = 3.0e38f * ((u & 1) ? 1.0f : -1.0f);
            if (u % 109 == 0) x[i] = 1e-40f;   /* subnormal */
        }
        for (int i = 0; i < n; i++) want[i] = i;
        ref_base = x;
        qsort(want, (size_t)n, sizeof *want, ref_cmp);
        smp_order(x, n, got, tmp);
        int first = -1;
        for (int i = 0; i < n && first < 0; i++) if (got[i] != want[i]) first = i;
        CHECK(first < 0, "n=%d: position %d is id %d, the comparison puts %d there", n, first, first >= 0 ? got[first] : 0,
              first >= 0 ? want[first] : 0);
        /* smp_order_top: the first k of that order */
        const int ks[] = { 1, 2, 40, 3001, n - 1, n };
        for (int j = 0; j < 6; j++) {
            if (ks[j] < 1 || ks[j] > n) continue;
            for (int i = 0; i < n; i++) got[i] = -1;   /* nothing left from the full order */
            smp_order_top(x, n, ks[j], got, tmp);
            CHECK(!memcmp(got, want, (size_t)ks[j] * sizeof *got), "n=%d: smp_order_top's first %d differ", n, ks[j]);
        }
        for (int i = 0; i < n; i++) x[i] = 2.5f, got[i] = -1;   /* one value: every id a candidate, by index */
        smp_order_top(x, n, n > 40 ? 40 : n, got, tmp);
        int byidx = 1;
        for (int i = 0; i < (n > 40 ? 40 : n); i++) byidx &= got[i] == i;
        CHECK(byidx, "n=%d: equal values not in index order", n);
        free(x); free(got); free(want); free(tmp);
    }
}

static void test_option_checks(void) {
    ci_sampler_opts o;
    char err[256];
    ci_sampler_defaults(&o);
    CHECK(smp_check(&o, err, sizeof err) == 0, "defaults");
    o.top_p = 0; CHECK(smp_check(&o, err, sizeof err) < 0, "top_p 0"); CHECK_HAS(err, "top-p");
    ci_sampler_defaults(&o); o.temperature = -1; CHECK(smp_check(&o, err, sizeof err) < 0, "temp"); CHECK_HAS(err, "temperature");
    ci_sampler_defaults(&o); o.min_p = 2; CHECK(smp_check(&o, err, sizeof err) < 0, "min_p"); CHECK_HAS(err, "min-p");
}

int main(void) {
    TEST_RUN(test_greedy);
    TEST_RUN(test_filters_collapse_to_argmax);
    TEST_RUN(test_top_k_support);
    TEST_RUN(test_seed_determinism);
    TEST_RUN(test_repeat_penalty);
    TEST_RUN(test_order_matches_comparison);
    TEST_RUN(test_option_checks);
    TEST_EXIT();
}
