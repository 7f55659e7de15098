/* tok_bench.c — encode throughput and load time of the tokenizer, for bench/RESULTS.md.
 *
 * Not part of the test suite (it times, it does not check). Built by hand, on the GPU box
 * next to the Hugging Face numbers of tools/oracle/make_tok_fixtures.py --bench:
 *   cc -O2 -D_GNU_SOURCE -Isrc tests/text/tok_bench.c src/text/tok*.c src/core/status.c \
 *      -lpcre2-8 -lutf8proc -lpthread -o tok_bench
 *   ./tok_bench BENCH.txt DIR...
 * For each tokenizer folder: best-of-3 load time, then single-threaded encode of the whole
 * text as one call ("doc") and one call per line ("lines"), best of 5, in MB/s, after one
 * warm-up pass (the word cache is warm, as it is for Hugging Face's). */
#include "text/tokenizer.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static int enc(tok_tokenizer *t, const char *s, size_t n, size_t *count) {
    char err[256];
    int *ids;
    size_t k;
    if (tok_encode(t, s, n, 0, &ids, &k, err, sizeof err)) { fprintf(stderr, "encode: %s\n", err); return -1; }
    *count += k;
    free(ids);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) { fprintf(stderr, "usage: tok_bench TEXT DIR...\n"); return 2; }
    FILE *f = fopen(argv[1], "rb");
    if (!f) { perror(argv[1]); return 1; }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *text = malloc((size_t)n + 1);
    if (!text || fread(text, 1, (size_t)n, f) != (size_t)n) { fprintf(stderr, "read failed\n"); return 1; }
    fclose(f);
    for (int a = 2; a < argc; a++) {
        char err[512];
        tok_tokenizer *t = NULL;
        double load = 1e9;
        for (int r = 0; r < 3; r++) {
            if (t) tok_free(t);
            double t0 = now_s();
            if (tok_load(argv[a], &t, err, sizeof err)) { fprintf(stderr, "%s\n", err); return 1; }
            double d = now_s() - t0;
            if (d < load) load = d;
        }
        size_t cnt = 0;
        if (enc(t, text, (size_t)n, &cnt)) return 1;
        double best_doc = 1e9, best_lines = 1e9;
        size_t ntok = cnt;
        for (int r = 0; r < 5; r++) {
            cnt = 0;
            double t0 = now_s();
            if (enc(t, text, (size_t)n, &cnt)) return 1;
            double d = now_s() - t0;
            if (d < best_doc) best_doc = d;
            t0 = now_s();
            for (long i = 0; i < n;) {
                const char *nl = memchr(text + i, '\n', (size_t)(n - i));
                long e = nl ? (long)(nl - text) : n;
                if (enc(t, text + i, (size_t)(e - i), &cnt)) return 1;
                i = e + 1;
            }
            d = now_s() - t0;
            if (d < best_lines) best_lines = d;
        }
        const char *name = strrchr(argv[a], '/');
        printf("bench cinfer %-12s doc %.2f MB/s  lines %.2f MB/s  load %.0f ms  (%ld bytes, %zu tokens)\n",
               name ? name + 1 : argv[a], n / best_doc / 1e6, n / best_lines / 1e6, load * 1e3, n, ntok);
        tok_free(t);
    }
    free(text);
    return 0;
}
