/* cmd_progress.c — the loading progress line (see cmd_progress.h). One model opens at a
 * time in a command, so the line's state is one static struct. */
#include "cmd_progress.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static struct {
    double t0, last;            /* cli_progress_attach's time, last redraw (monotonic seconds) */
    int drawn;                  /* a line is on the terminal */
} pl;

static double mono(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void on_progress(void *ctx, const ci_load_progress *p) {
    (void)ctx;
    double t = mono();
    int end_of_file = p->file_done == p->file_bytes, end = p->done == p->total;
    if (!end_of_file && pl.drawn && t - pl.last < 0.1) return;
    pl.last = t;
    int gib = p->total >= (uint64_t)1 << 30;
    double u = gib ? 1073741824.0 : 1048576.0;
    const char *un = gib ? "GiB" : "MiB";
    if (end) {
        fprintf(stderr, "\rcinfer: read %d shard%s, %.2f %s in %.1f s\033[K\n", p->n_shards, p->n_shards == 1 ? "" : "s",
                p->total / u, un, t - pl.t0);
        pl.drawn = 0;
    } else {
        const char *base = strrchr(p->file, '/');
        fprintf(stderr, "\rcinfer: reading shard %d/%d %s %.2f/%.2f %s (total %.2f/%.2f %s)\033[K", p->shard + 1,
                p->n_shards, base ? base + 1 : p->file, p->file_done / u, p->file_bytes / u, un, p->done / u,
                p->total / u, un);
        pl.drawn = 1;
    }
    fflush(stderr);
}

void cli_progress_attach(ci_model_opts *o) {
    const char *e = getenv("CINFER_PROGRESS");
    int on = e && *e ? strcmp(e, "0") != 0 : isatty(STDERR_FILENO);
    if (!on) return;
    memset(&pl, 0, sizeof pl);
    pl.t0 = mono();
    o->progress = on_progress;
    o->progress_ctx = NULL;
}
