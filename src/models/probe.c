/* probe.c — the copy-bandwidth probe and scratch estimate of probe.h. */
#include "probe.h"
#include "model.h"
#include "../core/status.h"
#include <stdint.h>
#include <time.h>

static double probe_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

double ci_model_copy_gbs(ci_model *m, char *err, size_t errlen) {
    return ci_backend_copy_gbs(m ? m->be : NULL, err, errlen);
}

double ci_backend_copy_gbs(ci_backend *be, char *err, size_t errlen) {
    if (errlen) err[0] = 0;
    if (!be || !be->is_device) return 0;
    if (!be->alloc || !be->buf_free || !be->copy || !be->download) {
        ci_err(err, errlen, "%s: the backend has no buffer copies to probe", be->name);
        return 0;
    }
    const size_t bytes = (size_t)1 << 30;
    void *a = be->alloc(be, bytes), *b = a ? be->alloc(be, bytes) : NULL;
    double best = 0;
    if (!a || !b) {
        ci_err(err, errlen, "copy probe: cannot allocate 2 x 1 GiB of device memory%s%s",
               be->last_error[0] ? ": " : "", be->last_error);
        goto done;
    }
    int32_t sync;
    be->copy(be, b, a, bytes);          /* first touch, outside the timing */
    be->download(be, &sync, b, sizeof sync);
    for (int round = 0; round < 5; round++) {
        double t0 = probe_now();
        for (int k = 0; k < 10; k++) be->copy(be, k & 1 ? a : b, k & 1 ? b : a, bytes);
        be->download(be, &sync, a, sizeof sync);
        double t = probe_now() - t0;
        double gbs = t > 0 ? 2.0 * 10.0 * (double)bytes / t / 1e9 : 0;
        if (gbs > best) best = gbs;
    }
    if (be->status && be->status(be)) {
        ci_err(err, errlen, "copy probe: %s", be->last_error);
        best = 0;
    }
done:
    if (b) be->buf_free(be, b);
    if (a) be->buf_free(be, a);
    return best;
}

size_t ci_model_scratch_estimate(const ci_model *m) {
    const ci_config *c = &m->cfg;
    long long hd = c->head_dim > 0 ? c->head_dim : c->n_heads > 0 ? c->hidden_size / c->n_heads : 0;
    long long kv = c->n_kv_heads > 0 ? c->n_kv_heads : c->n_heads;
    long long q = c->n_heads * hd, k = kv * hd;
    long long ff = c->intermediate_size > 0 ? c->intermediate_size : 4 * c->hidden_size;
    long long per_row = 3 * c->hidden_size + 2 * q + 2 * k + 2 * ff;   /* f32 elements */
    size_t rows = 512;
    return rows * (size_t)per_row * sizeof(float) + 2 * (size_t)c->vocab_size * sizeof(float) + ((size_t)256 << 20);
}
