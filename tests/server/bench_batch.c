/* bench_batch.c — decode throughput of n sequences: n lone forwards per step vs one
 * forward_batch per step (the server's decode path). Not part of `make test`; build it
 * against a build's library:
 *   cc -O2 -D_GNU_SOURCE -Iinclude -Isrc tests/server/bench_batch.c build/libcinfer_core.a \
 *      $(pkg-config --libs jansson libpcre2-8 libutf8proc libmicrohttpd) -lpthread -lm -o /tmp/bench_batch
 *   /tmp/bench_batch [MODEL_DIR] [STEPS]
 * Each sequence first holds a 64-token prompt; then STEPS decode steps run both ways. */
#include "cinfer.h"
#include "models/model.h"
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    const char *dir = argc > 1 ? argv[1] : "models/demo";
    int steps = argc > 2 ? atoi(argv[2]) : 128;
    char err[1024];
    ci_model *m;
    ci_model_opts o = { .n_threads = 0 };
    if (ci_model_open(dir, &o, &m, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
    if (!m->family->ops->forward_batch) { fprintf(stderr, "%s has no forward_batch\n", m->family->name); return 1; }
    int V = (int)m->cfg.vocab_size, ns[] = { 1, 4, 8, 16 };
    printf("model %s (%s), %d decode steps after a 64-token prompt\n", dir, m->family->name, steps);
    for (int k = 0; k < 4; k++) {
        int n = ns[k], prompt[64], tok[16];
        ci_session *s[16];
        float *lg = malloc((size_t)n * V * sizeof(float));
        double t[2];
        for (int mode = 0; mode < 2; mode++) {
            for (int i = 0; i < n; i++) {
                for (int j = 0; j < 64; j++) prompt[j] = (i * 31 + j * 7 + 3) % V;
                if (ci_session_new(m, 64 + steps + 1, &s[i], err, sizeof err) || ci_forward(s[i], prompt, 64, lg, 0, err, sizeof err)) {
                    fprintf(stderr, "%s\n", err);
                    return 1;
                }
                tok[i] = prompt[63];
            }
            double t0 = now();
            for (int st = 0; st < steps; st++) {
                if (mode == 0) {
                    for (int i = 0; i < n; i++) ci_forward(s[i], &tok[i], 1, lg + (size_t)i * V, 0, err, sizeof err);
                } else {
                    m->family->ops->forward_batch(s, tok, n, lg, err, sizeof err);
                }
                for (int i = 0; i < n; i++) tok[i] = (tok[i] * 13 + st + i) % V;
            }
            t[mode] = now() - t0;
            for (int i = 0; i < n; i++) ci_session_free(s[i]);
        }
        printf("%2d sequences: one by one %8.1f tok/s, forward_batch %8.1f tok/s (x%.2f)\n", n, n * steps / t[0],
               n * steps / t[1], t[0] / t[1]);
        free(lg);
    }
    ci_model_free(m);
    return 0;
}
