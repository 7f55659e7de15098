/* comm.c — see comm.h. The ranks are threads; a collective is: post this rank's buffer,
 * meet (barrier), read every rank's, meet again (so nobody's buffer changes while another
 * still reads it). The barrier counts generations, so a rank that runs ahead into the next
 * collective waits for the others there; an abort wakes every waiter for good. */
#include "comm.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct ci_comm {
    int world;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int arrived;
    unsigned long gen;
    int failed;
    char why[256];
    const float *slot[CI_COMM_MAX];   /* what each rank posted for the collective under way */
    float *tmp[CI_COMM_MAX];          /* a rank's all-reduce sums before they go into its x */
    size_t tmp_cap[CI_COMM_MAX];
};

ci_comm *ci_comm_new(int world) {
    if (world < 1 || world > CI_COMM_MAX) return NULL;
    ci_comm *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->world = world;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    return c;
}

void ci_comm_free(ci_comm *c) {
    if (!c) return;
    for (int r = 0; r < c->world; r++) free(c->tmp[r]);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c);
}

int ci_comm_world(const ci_comm *c) { return c->world; }

void ci_comm_abort(ci_comm *c, int rank, const char *why) {
    pthread_mutex_lock(&c->mu);
    if (!c->failed) {
        c->failed = 1;
        snprintf(c->why, sizeof c->why, "rank %d: %s", rank, why && why[0] ? why : "failed");
    }
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
}

int ci_comm_error(ci_comm *c, char *msg, size_t len) {
    pthread_mutex_lock(&c->mu);
    int f = c->failed;
    if (f && msg && len) snprintf(msg, len, "%s", c->why);
    pthread_mutex_unlock(&c->mu);
    return f ? -1 : 0;
}

/* Every rank arrives before any leaves; -1 (at once, and for every waiter) once aborted. */
static int meet(ci_comm *c) {
    pthread_mutex_lock(&c->mu);
    if (c->failed) { pthread_mutex_unlock(&c->mu); return -1; }
    unsigned long g = c->gen;
    if (++c->arrived == c->world) {
        c->arrived = 0;
        c->gen++;
        pthread_cond_broadcast(&c->cv);
    } else {
        while (c->gen == g && !c->failed) pthread_cond_wait(&c->cv, &c->mu);
    }
    int rc = c->gen != g ? 0 : -1;   /* released by the last arrival, or woken by an abort */
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static int bad_rank(const ci_comm *c, int rank) { return rank < 0 || rank >= c->world; }

int ci_comm_barrier(ci_comm *c, int rank) { return bad_rank(c, rank) ? -1 : meet(c); }

int ci_comm_all_reduce(ci_comm *c, int rank, float *x, size_t count) {
    if (bad_rank(c, rank)) return -1;
    if (c->world == 1) return ci_comm_error(c, NULL, 0);
    if (count > c->tmp_cap[rank]) {
        float *t = realloc(c->tmp[rank], count * sizeof(float));
        if (!t) { ci_comm_abort(c, rank, "out of memory for an all-reduce"); return -1; }
        c->tmp[rank] = t;
        c->tmp_cap[rank] = count;
    }
    c->slot[rank] = x;
    if (meet(c)) return -1;
    float *t = c->tmp[rank];
    memcpy(t, c->slot[0], count * sizeof(float));
    for (int r = 1; r < c->world; r++) {
        const float *s = c->slot[r];
        for (size_t i = 0; i < count; i++) t[i] += s[i];
    }
    if (meet(c)) return -1;
    memcpy(x, t, count * sizeof(float));
    return 0;
}

int ci_comm_all_gather_rows(ci_comm *c, int rank, float *out, const float *in, int rows, int width) {
    if (bad_rank(c, rank) || rows < 0 || width < 0) return -1;
    c->slot[rank] = in;
    if (meet(c)) return -1;
    const size_t W = (size_t)width, ow = W * (size_t)c->world;
    for (int i = 0; i < rows; i++)
        for (int r = 0; r < c->world; r++) memcpy(out + (size_t)i * ow + (size_t)r * W, c->slot[r] + (size_t)i * W, W * sizeof(float));
    return meet(c);
}

int ci_comm_broadcast(ci_comm *c, int rank, float *x, size_t count, int root) {
    if (bad_rank(c, rank) || bad_rank(c, root)) return -1;
    c->slot[rank] = x;
    if (meet(c)) return -1;
    if (rank != root) memcpy(x, c->slot[root], count * sizeof(float));
    return meet(c);
}
