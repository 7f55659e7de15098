/* sampler.h — choosing the next token from logits.
 *
 * Order follows transformers' logits processors: repetition penalty, temperature, top-k,
 * top-p, min-p, then a draw from the renormalised distribution with a seeded generator
 * (splitmix64; the same seed and logits give the same token on every machine).
 * temperature == 0 is greedy argmax (first index on ties, like torch.argmax; NaN never
 * wins over a number). */
#ifndef CI_SAMPLER_H
#define CI_SAMPLER_H
#include "cinfer.h"

typedef struct {
    ci_sampler_opts o;
    uint64_t rng;
    int vocab;
    float *p;       /* [vocab] scratch */
    int *idx;       /* [vocab] scratch */
    uint32_t *tmp;  /* [3 vocab] scratch of the candidates' sort */
} smp_state;

int smp_init(smp_state *s, const ci_sampler_opts *o, int vocab);
void smp_free(smp_state *s);
/* Picks a token; logits [vocab] are modified. history: previous ids for the penalty. */
int smp_sample(smp_state *s, float *logits, const int *history, int n_hist);
/* Greedy choice: the index of the largest of x[0, n) (the first one on ties; NaN is never
 * chosen over a number; 0 when every value is NaN). The backends' argmax op follows it. */
int smp_argmax(const float *x, int n);
/* 1 when o chooses by argmax of the raw logits alone (temperature 0, no repetition
 * penalty), so a device can take that argmax itself (ci_forward_argmax). */
int smp_is_greedy(const ci_sampler_opts *o);
/* idx[0, n) = 0 .. n-1 ordered by x descending, equal values (-0 = +0) by ascending index,
 * NaN last: the candidates' order of a draw. tmp: [3n] scratch. (Exposed for tests.) */
void smp_order(const float *x, int n, int *idx, uint32_t *tmp);
/* idx[0, k) as smp_order's first k (the rest of idx is scratch), without sorting the rest
 * (k <= 0 or >= n: smp_order). tmp: [3n] scratch. */
void smp_order_top(const float *x, int n, int k, int *idx, uint32_t *tmp);
/* Uniform in [0, 1) from the state (exposed for tests). */
double smp_uniform(uint64_t *state);
/* Checks option ranges; returns 0 or an error naming the option. */
int smp_check(const ci_sampler_opts *o, char *err, size_t errlen);

#endif
