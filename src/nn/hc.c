/* hc.c — see hc.h. */
#include "hc.h"

/* The mapping's mix is one matmul of the streams, the rest hc_pre: the backend's hc_mix_pre. */
void hc_collapse(ci_backend *be, const hc_map *h, const float *X, int n, float *mix, float *post, float *comb, float *x) {
    be->hc_mix_pre(be, x, post, comb, mix, X, n, &h->fn, h->hc, h->dim, h->iters, h->eps, h->norm_eps, h->scale,
                   h->base);
}

void hc_expand(ci_backend *be, const hc_map *h, float *X, const float *y, const float *post, const float *comb, int n,
               float *tmp) {
    be->hc_post(be, X, y, post, comb, n, h->hc, h->dim, tmp);
}

void hc_head(ci_backend *be, const hc_map *h, const float *X, int n, float *mix, float *x) {
    be->hc_mix_pre(be, x, NULL, NULL, mix, X, n, &h->fn, h->hc, h->dim, 0, h->eps, h->norm_eps, h->scale, h->base);
}
