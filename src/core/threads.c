/* threads.c — the fixed worker pool behind ci_pool_run.
 *
 * Owns n-1 persistent pthreads (the caller is the n-th participant). A run publishes the
 * job (fn, ctx, n_tasks) in plain fields and then bumps the generation counter `gen` with
 * release order; a worker that observes the new generation with acquire order may read the
 * job. Tasks are claimed from the atomic counter `next`. Every worker, whether or not it
 * found a task, checks out by decrementing `pending` (acq_rel), and the caller returns only
 * when `pending` reaches 0, so after ci_pool_run returns no worker touches fn, ctx or any
 * data the tasks wrote without a happens-before edge (the decrement publishes it).
 *
 * Waking is spin-then-sleep on both sides: a decode step calls ci_pool_run hundreds of
 * times per token with only microseconds between calls, so a worker spins on `gen` for a
 * short while (SPIN_NS) before it sleeps on a condition variable, and the caller spins on
 * `pending` the same way. The sleeping paths use the Dekker pattern with sequentially
 * consistent atomics: the waiter announces itself (`sleepers` / `caller_waiting`) and then
 * re-checks the condition under the mutex; the notifier changes the condition and then
 * reads the announcement, taking the mutex to signal only when someone may sleep. One of
 * the two always sees the other, so no wake-up is lost.
 *
 * Workers of a pool set to flush (ci_pool_set_flush) set FTZ + DAZ (fpmode.h) when they
 * pick up a run that asks for it, once; `flush` is published with the job.
 *
 * Invariant: one run at a time per pool (the header says so); runs are not re-entrant. */
#include "threads.h"
#include "fpmode.h"
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* How long an idle side spins before it sleeps. Long enough to bridge the gap between two
 * ops of one decode step, short enough that an idle engine stops burning cores quickly.
 * Spinners also sched_yield every 64 pauses (a few microseconds): free when the core has
 * nothing else to run, and it keeps an oversubscribed pool (more threads than cores, or a
 * busy machine) from spinning away the time slice that the thread it waits for needs. */
#define SPIN_NS 200000LL

struct ci_pool {
    int n;                      /* participants, caller included (>= 1) */
    int n_workers;              /* threads actually started (n - 1) */
    pthread_t *tid;             /* [n_workers] */

    /* The current job: written by the caller before it bumps gen, read by workers after. */
    ci_task_fn fn;
    void *ctx;
    int n_tasks;
    int stop;                   /* set with the last gen bump, by ci_pool_free */
    int flush;                  /* workers compute with FTZ + DAZ (ci_pool_set_flush) */

    /* Each hot counter on its own cache line so that claiming tasks does not bounce the
     * line the spinning workers are polling. */
    _Alignas(64) atomic_int next;      /* next task index to claim */
    _Alignas(64) atomic_uint gen;      /* bumped once per run */
    _Alignas(64) atomic_int pending;   /* workers that have not checked out of this run */
    _Alignas(64) atomic_int sleepers;  /* workers inside (or entering) the condvar wait */
    atomic_int caller_waiting;         /* caller inside (or entering) its condvar wait */

    pthread_mutex_t mu;
    pthread_cond_t wake;               /* gen changed */
    pthread_cond_t done;               /* pending reached 0 */
};

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Claims and runs tasks until the counter passes n_tasks. The counter only grows during a
 * run (each participant overshoots it at most once), so i < 0 can only mean wrap-around
 * at INT_MAX tasks; treat it as exhausted. */
static void run_tasks(ci_pool *p, ci_task_fn fn, void *ctx, int n_tasks) {
    for (;;) {
        int i = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (i >= n_tasks || i < 0) break;
        fn(ctx, i);
    }
}

/* Returns the first generation different from `seen`: spin, then sleep. */
static unsigned wait_gen(ci_pool *p, unsigned seen) {
    unsigned g;
    long long t0 = 0;
    for (int it = 0;; it++) {
        g = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (g != seen) return g;
        cpu_relax();
        if ((it & 63) == 63) {
            long long t = now_ns();
            if (!t0) t0 = t;
            else if (t - t0 > SPIN_NS) break;
            sched_yield();
        }
    }
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add(&p->sleepers, 1);  /* seq_cst: pairs with the caller's gen bump */
    while ((g = atomic_load(&p->gen)) == seen) pthread_cond_wait(&p->wake, &p->mu);
    atomic_fetch_sub(&p->sleepers, 1);
    pthread_mutex_unlock(&p->mu);
    return g;
}

static void *worker_main(void *arg) {
    ci_pool *p = arg;
    unsigned seen = 0;  /* gen starts at 0, so the first run (gen 1) is never missed */
    int flushing = 0;
    unsigned saved = 0;
    for (;;) {
        seen = wait_gen(p, seen);
        if (p->stop) break;
        if (p->flush != flushing) {   /* on the first run, and if the setting changes */
            if (p->flush) saved = ci_fp_flush_begin();
            else ci_fp_restore(saved);
            flushing = p->flush;
        }
        run_tasks(p, p->fn, p->ctx, p->n_tasks);
        /* Check out. seq_cst so that the load of caller_waiting below cannot be ordered
         * before the decrement (Dekker with the caller's wait). */
        if (atomic_fetch_sub(&p->pending, 1) == 1 && atomic_load(&p->caller_waiting)) {
            pthread_mutex_lock(&p->mu);
            pthread_cond_signal(&p->done);
            pthread_mutex_unlock(&p->mu);
        }
    }
    return NULL;
}

static int online_cpus(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1) n = 1;
    if (n > 1024) n = 1024;
    return (int)n;
}

ci_pool *ci_pool_new(int n_threads) {
    if (n_threads <= 0) n_threads = online_cpus();
    size_t sz = (sizeof(ci_pool) + 63) & ~(size_t)63;
    ci_pool *p = aligned_alloc(64, sz);
    if (!p) return NULL;
    memset(p, 0, sizeof *p);
    atomic_init(&p->next, 0);
    atomic_init(&p->gen, 0);
    atomic_init(&p->pending, 0);
    atomic_init(&p->sleepers, 0);
    atomic_init(&p->caller_waiting, 0);
    p->n = 1;
    if (pthread_mutex_init(&p->mu, NULL)) { free(p); return NULL; }
    if (pthread_cond_init(&p->wake, NULL)) goto fail_mu;
    if (pthread_cond_init(&p->done, NULL)) goto fail_wake;
    if (n_threads > 1) {
        p->tid = calloc((size_t)n_threads - 1, sizeof *p->tid);
        if (!p->tid) goto fail_done;
        /* A thread that cannot be started only makes the pool smaller: every run waits
         * for exactly the workers that exist. */
        for (int i = 0; i < n_threads - 1; i++) {
            if (pthread_create(&p->tid[i], NULL, worker_main, p)) break;
            p->n_workers++;
        }
        p->n = p->n_workers + 1;
    }
    return p;
fail_done:
    pthread_cond_destroy(&p->done);
fail_wake:
    pthread_cond_destroy(&p->wake);
fail_mu:
    pthread_mutex_destroy(&p->mu);
    free(p);
    return NULL;
}

void ci_pool_free(ci_pool *p) {
    if (!p) return;
    if (p->n_workers) {
        p->stop = 1;
        atomic_fetch_add(&p->gen, 1);
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
        for (int i = 0; i < p->n_workers; i++) pthread_join(p->tid[i], NULL);
    }
    free(p->tid);
    pthread_cond_destroy(&p->done);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    free(p);
}

int ci_pool_size(const ci_pool *p) { return p ? p->n : 1; }

void ci_pool_set_flush(ci_pool *p, int on) {
    if (p) p->flush = on != 0;
}

void ci_pool_run(ci_pool *p, ci_task_fn fn, void *ctx, int n_tasks) {
    if (n_tasks <= 0) return;
    /* One task, or nobody to share with: waking workers would only add latency. */
    if (!p || p->n_workers == 0 || n_tasks == 1) {
        for (int i = 0; i < n_tasks; i++) fn(ctx, i);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    atomic_store_explicit(&p->pending, p->n_workers, memory_order_relaxed);
    /* Publishes the job (release part of seq_cst); seq_cst also orders it before the load
     * of sleepers (Dekker with wait_gen). */
    atomic_fetch_add(&p->gen, 1);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->wake);
        pthread_mutex_unlock(&p->mu);
    }

    run_tasks(p, fn, ctx, n_tasks);

    long long t0 = 0;
    for (int it = 0;; it++) {
        if (atomic_load_explicit(&p->pending, memory_order_acquire) == 0) return;
        cpu_relax();
        if ((it & 63) == 63) {
            long long t = now_ns();
            if (!t0) t0 = t;
            else if (t - t0 > SPIN_NS) break;
            sched_yield();
        }
    }
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->caller_waiting, 1);
    while (atomic_load(&p->pending) != 0) pthread_cond_wait(&p->done, &p->mu);
    atomic_store(&p->caller_waiting, 0);
    pthread_mutex_unlock(&p->mu);
}
