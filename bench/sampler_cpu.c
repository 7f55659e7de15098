/* sampler_cpu.c — one sampled token's host time (gen/sampler.c smp_sample) at a Qwen3-sized
 * vocabulary: temperature 0.7, top-p 0.9 (and top-k 40), logits drawn normal with sd 3. What
 * every non-greedy request pays per token in `cinfer generate` and in the server's scheduler
 * thread (issue #19). Not part of the build; from the repository root after a build:
 *   gcc -O2 -Isrc -Iinclude bench/sampler_cpu.c build/libcinfer.a -lm -lpthread -ldl -o /tmp/sampler_cpu
 *   /tmp/sampler_cpu
 * Prints the best of 20 draws per setting and a checksum of the drawn ids (equal across
 * sampler versions that draw the same tokens). */
#include "gen/sampler.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(void) {
    enum { V = 151936, REPS = 20 };
    float *l = malloc(V * sizeof *l), *w = malloc(V * sizeof *w);
    if (!l || !w) return 1;
    uint64_t r = 1;
    for (int i = 0; i < V; i++) {
        r = r * 6364136223846793005ull + 1;
        const double u1 = ((r >> 11) + 1.0) / 9007199254740993.0;
        r = r * 6364136223846793005ull + 1;
        const double u2 = (r >> 11) / 9007199254740992.0;
        l[i] = (float)(3.0 * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
    }
    for (int k = 0; k < 2; k++) {
        ci_sampler_opts o;
        ci_sampler_defaults(&o);
        o.temperature = 0.7f;
        o.top_p = 0.9f;
        o.top_k = k ? 40 : 0;
        smp_state s;
        if (smp_init(&s, &o, V)) return 1;
        long sum = 0;
        double best = 1e9;
        for (int rep = 0; rep < REPS; rep++) {
            s.rng = (uint64_t)rep;
            memcpy(w, l, V * sizeof *l);
            const double t0 = now();
            sum += smp_sample(&s, w, NULL, 0);
            const double dt = now() - t0;
            if (dt < best) best = dt;
        }
        printf("smp_sample V=%d temperature 0.7 top-p 0.9 top-k %d: best of %d %.3f ms (ids sum %ld)\n", V, o.top_k, REPS,
               best * 1e3, sum);
        smp_free(&s);
    }
    return 0;
}
