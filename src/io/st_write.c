/* st_write.c — see st_write.h.
 *
 * st_write_file_par: worker threads claim tensors in index order under one mutex, each
 * filling a whole tensor into a buffer of its own; the calling thread waits for tensor i,
 * writes it, frees it and moves to i + 1. A tensor is claimed only while the bytes claimed
 * and not yet written stay within the window (or nothing is in flight), so memory stays
 * bounded. No deadlock: when the writer waits for tensor i, every tensor before i is
 * written, so either i is claimed or nothing is in flight and i may be claimed. On any
 * error the writer sets `stop`, wakes the workers, joins them (a worker finishes the tensor
 * it is filling) and frees what was filled but not written. */
#include "st_write.h"
#include "../core/status.h"
#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Bytes of tensor d's data. */
static size_t tensor_bytes(const st_wdesc *d) {
    size_t nb = ci_dtype_size(d->dtype);
    for (int k = 0; k < d->ndim; k++) nb *= (size_t)d->shape[k];
    return nb;
}

/* Creates path and writes the 8-byte length and the JSON header; *f gets the open file and
 * *maxb the largest tensor's bytes. -1 with err set (and nothing open) on failure. */
static int write_header(const char *path, const st_wdesc *d, int n, FILE **fp, size_t *maxb, char *err, size_t errlen) {
    json_t *h = json_object();
    size_t off = 0;
    *maxb = 0;
    *fp = NULL;
    for (int i = 0; i < n; i++) {
        size_t nb = tensor_bytes(&d[i]);
        json_t *shape = json_array();
        for (int k = 0; k < d[i].ndim; k++) json_array_append_new(shape, json_integer(d[i].shape[k]));
        json_t *e = json_object();
        json_object_set_new(e, "dtype", json_string(ci_dtype_name(d[i].dtype)));
        json_object_set_new(e, "shape", shape);
        json_object_set_new(e, "data_offsets", json_pack("[I, I]", (json_int_t)off, (json_int_t)(off + nb)));
        json_object_set_new(h, d[i].name, e);
        off += nb;
        if (nb > *maxb) *maxb = nb;
    }
    char *txt = json_dumps(h, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(h);
    if (!txt) return ci_err(err, errlen, "%s: out of memory writing the header", path);
    size_t hl = strlen(txt), pad = (8 - hl % 8) % 8;  /* keep the data 8-byte aligned */
    FILE *f = fopen(path, "wb");
    if (!f) {
        ci_err(err, errlen, "%s: cannot create: %s", path, strerror(errno));
        free(txt);
        return -1;
    }
    uint64_t hl8 = hl + pad;
    unsigned char le[8];
    for (int k = 0; k < 8; k++) le[k] = (unsigned char)(hl8 >> (8 * k));
    int ok = fwrite(le, 1, 8, f) == 8 && fwrite(txt, 1, hl, f) == hl && fwrite("        ", 1, pad, f) == pad;
    if (!ok) {
        ci_err(err, errlen, "%s: write failed: %s", path, strerror(errno));
        fclose(f);
        free(txt);
        return -1;
    }
    free(txt);
    *fp = f;
    return 0;
}

/* Fills and writes every tensor in order through one buffer of maxb bytes, then closes f
 * (also on failure). 0 or -1 with err set. */
static int write_serial(FILE *f, const char *path, const st_wdesc *d, int n, size_t maxb, st_fill_fn fill, void *ctx,
                        char *err, size_t errlen) {
    void *buf = malloc(maxb ? maxb : 1);
    int rc = -1;
    if (!buf) { ci_err(err, errlen, "%s: out of memory (%zu bytes)", path, maxb); goto done; }
    for (int i = 0; i < n; i++) {
        size_t nb = tensor_bytes(&d[i]);
        if (fill(ctx, i, buf, nb)) { ci_err(err, errlen, "%s: cannot fill tensor '%s'", path, d[i].name); goto done; }
        if (fwrite(buf, 1, nb, f) != nb) goto werr;
    }
    if (fclose(f)) { f = NULL; goto werr; }
    f = NULL;
    rc = 0;
    goto done;
werr:
    ci_err(err, errlen, "%s: write failed: %s", path, strerror(errno));
done:
    if (f) fclose(f);
    free(buf);
    return rc;
}

int st_write_file(const char *path, const st_wdesc *d, int n, st_fill_fn fill, void *ctx, char *err, size_t errlen) {
    FILE *f;
    size_t maxb;
    if (write_header(path, d, n, &f, &maxb, err, errlen)) return -1;
    return write_serial(f, path, d, n, maxb, fill, ctx, err, errlen);
}

/* ---- parallel fill, in-order write ---------------------------------------------------- */

enum { T_PENDING, T_FILLED, T_FAILED, T_NOMEM };   /* par_job.state */

typedef struct {
    const st_wdesc *d;
    int n;
    st_fill_fn fill;
    void *ctx;
    size_t *nb;              /* [n] bytes of each tensor */
    void **buf;              /* [n] filled buffers not yet written (owned) */
    unsigned char *state;    /* [n] T_* */
    size_t window;           /* most bytes claimed and not yet written, unless nothing is */
    pthread_mutex_t mu;      /* guards everything below and buf / state */
    pthread_cond_t claim;    /* inflight dropped or stop set */
    pthread_cond_t filled;   /* some tensor left T_PENDING */
    int next;                /* next tensor to claim */
    size_t inflight;         /* bytes of tensors claimed and not yet written */
    int stop;
} par_job;

/* A worker: claims the next tensor when the window allows, fills it into a fresh buffer and
 * hands it to the writer; returns when every tensor is claimed or the writer stops. */
static void *par_worker(void *arg) {
    par_job *j = arg;
    pthread_mutex_lock(&j->mu);
    for (;;) {
        while (!j->stop && j->next < j->n && j->inflight && j->inflight + j->nb[j->next] > j->window)
            pthread_cond_wait(&j->claim, &j->mu);
        if (j->stop || j->next >= j->n) break;
        int i = j->next++;
        j->inflight += j->nb[i];
        pthread_mutex_unlock(&j->mu);
        void *b = malloc(j->nb[i] ? j->nb[i] : 1);
        int st = !b ? T_NOMEM : j->fill(j->ctx, i, b, j->nb[i]) ? T_FAILED : T_FILLED;
        pthread_mutex_lock(&j->mu);
        j->buf[i] = b;
        j->state[i] = (unsigned char)st;
        pthread_cond_signal(&j->filled);   /* the writer is the only waiter */
    }
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

/* The usable thread count: n_threads, or the online CPUs when n_threads <= 0, at most n. */
static int par_threads(int n_threads, int n) {
    if (n_threads <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = c > 0 ? (int)(c < 1024 ? c : 1024) : 1;
    }
    return n_threads < n ? n_threads : n;
}

/* ST_WRITE_WINDOW, or a quarter of the machine's memory where that is less. */
static size_t par_window(void) {
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    size_t w = ST_WRITE_WINDOW;
    if (pages > 0 && psz > 0 && (size_t)pages / 4 < w / (size_t)psz) w = (size_t)pages / 4 * (size_t)psz;
    return w;
}

int st_write_file_par(const char *path, const st_wdesc *d, int n, st_fill_fn fill, void *ctx, int n_threads,
                      char *err, size_t errlen) {
    int nt = par_threads(n_threads, n);
    if (nt <= 1) return st_write_file(path, d, n, fill, ctx, err, errlen);
    FILE *f;
    size_t maxb;
    if (write_header(path, d, n, &f, &maxb, err, errlen)) return -1;
    par_job j;
    memset(&j, 0, sizeof j);
    j.d = d;
    j.n = n;
    j.fill = fill;
    j.ctx = ctx;
    j.window = par_window();
    j.nb = malloc((size_t)n * sizeof *j.nb);
    j.buf = calloc((size_t)n, sizeof *j.buf);
    j.state = calloc((size_t)n, 1);
    pthread_t *tid = malloc((size_t)nt * sizeof *tid);
    int started = 0, rc = -1;
    if (!j.nb || !j.buf || !j.state || !tid) {
        ci_err(err, errlen, "%s: out of memory", path);
        fclose(f);
        goto freeall;
    }
    for (int i = 0; i < n; i++) j.nb[i] = tensor_bytes(&d[i]);
    pthread_mutex_init(&j.mu, NULL);
    pthread_cond_init(&j.claim, NULL);
    pthread_cond_init(&j.filled, NULL);
    while (started < nt && pthread_create(&tid[started], NULL, par_worker, &j) == 0) started++;
    if (!started) {   /* no threads to be had: fill on this one */
        rc = write_serial(f, path, d, n, maxb, fill, ctx, err, errlen);
        goto destroy;
    }
    for (int i = 0; i < n; i++) {
        pthread_mutex_lock(&j.mu);
        while (j.state[i] == T_PENDING) pthread_cond_wait(&j.filled, &j.mu);
        int st = j.state[i];
        void *b = j.buf[i];
        j.buf[i] = NULL;
        pthread_mutex_unlock(&j.mu);
        if (st == T_NOMEM) { ci_err(err, errlen, "%s: out of memory (%zu bytes)", path, j.nb[i]); goto stop; }
        if (st == T_FAILED) {
            free(b);
            ci_err(err, errlen, "%s: cannot fill tensor '%s'", path, d[i].name);
            goto stop;
        }
        if (fwrite(b, 1, j.nb[i], f) != j.nb[i]) {
            ci_err(err, errlen, "%s: write failed: %s", path, strerror(errno));
            free(b);
            goto stop;
        }
        free(b);
        pthread_mutex_lock(&j.mu);
        j.inflight -= j.nb[i];
        pthread_cond_broadcast(&j.claim);
        pthread_mutex_unlock(&j.mu);
    }
    rc = 0;
stop:
    pthread_mutex_lock(&j.mu);
    j.stop = 1;
    pthread_cond_broadcast(&j.claim);
    pthread_mutex_unlock(&j.mu);
    for (int t = 0; t < started; t++) pthread_join(tid[t], NULL);
    if (fclose(f) && rc == 0) rc = ci_err(err, errlen, "%s: write failed: %s", path, strerror(errno));
destroy:
    pthread_cond_destroy(&j.filled);
    pthread_cond_destroy(&j.claim);
    pthread_mutex_destroy(&j.mu);
freeall:
    if (j.buf)
        for (int i = 0; i < n; i++) free(j.buf[i]);
    free(tid);
    free(j.state);
    free(j.buf);
    free(j.nb);
    return rc;
}
