/* threads.h — a small fixed pool of worker threads for data-parallel kernels.
 *
 * ci_pool_run(pool, fn, ctx, n) calls fn(ctx, i) for every i in [0, n) across the pool's
 * threads (the caller participates) and returns when all calls are done. Tasks are taken
 * from an atomic counter, so n may exceed the thread count. A pool of 1 thread runs
 * everything on the caller. Not re-entrant: one run at a time per pool. */
#ifndef CI_THREADS_H
#define CI_THREADS_H

typedef struct ci_pool ci_pool;
typedef void (*ci_task_fn)(void *ctx, int i);

ci_pool *ci_pool_new(int n_threads);   /* n_threads <= 0: number of online CPUs */
void ci_pool_free(ci_pool *p);
int ci_pool_size(const ci_pool *p);
void ci_pool_run(ci_pool *p, ci_task_fn fn, void *ctx, int n_tasks);
/* Whether the worker threads compute with flush-to-zero and denormals-are-zero (fpmode.h);
 * off by default. Takes effect at the next run; the caller's own thread is not touched. */
void ci_pool_set_flush(ci_pool *p, int on);

#endif
