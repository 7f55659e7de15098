/* cinfer — the command-line tool.
 *
 *   cinfer logits   --model DIR --tokens 1,2,3 --out FILE [--step] [--threads N]
 *   cinfer generate --model DIR --prompt-ids 1,2,3 [--max-tokens N] [--temperature T]
 *                   [--top-k K] [--top-p P] [--min-p P] [--repeat-penalty R] [--seed S] --ids
 *   cinfer inspect  --model DIR
 *   cinfer bench    --model DIR [--prompt-len N] [--gen N] [--threads N]
 *   cinfer make-random --config FILE --out DIR [--dtype bf16|f32] [--seed S] [--layers N]
 *   cinfer tokenize --model DIR --file F [--add-special]        (apps/cmd_text.c)
 *   cinfer detokenize --model DIR --ids 1,2,3 [--skip-special]  (apps/cmd_text.c)
 *
 * Bad flags, ids out of range and missing files end with one line on stderr and exit
 * status 1 (usage errors 2). */
#include "cinfer.h"
#include "cmd_text.h"
#include "core/threads.h"
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *USAGE =
    "usage: cinfer <command> [options]\n"
    "  logits      --model DIR --tokens 1,2,3 --out FILE [--step] [--threads N]\n"
    "  generate    --model DIR --prompt-ids 1,2,3 [--max-tokens N] [--temperature T] [--top-k K]\n"
    "              [--top-p P] [--min-p P] [--repeat-penalty R] [--seed S] [--threads N] --ids\n"
    "  inspect     --model DIR\n"
    "  bench       --model DIR [--prompt-len N] [--gen N] [--threads N]\n"
    "  make-random --config FILE --out DIR [--dtype bf16|f32] [--seed S] [--layers N]\n"
    "  tokenize    --model DIR --file F [--add-special]\n"
    "  detokenize  --model DIR --ids 1,2,3 [--skip-special]\n";

static int die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int die(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("cinfer: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return code;
}

/* ---- flags: --name value pairs and bare switches, each known to the command ---- */

typedef struct { const char *name; int has_value; const char *value; int seen; } flag;

static flag *find_flag(flag *f, const char *name) {
    for (; f->name; f++) if (!strcmp(f->name, name)) return f;
    return NULL;
}

static int parse_flags(const char *cmd, int argc, char **argv, flag *flags) {
    for (int i = 0; i < argc; i++) {
        flag *f = find_flag(flags, argv[i]);
        if (!f) return die(2, "%s: unknown option '%s' (see cinfer --help)", cmd, argv[i]);
        if (f->seen) return die(2, "%s: option %s given twice", cmd, argv[i]);
        f->seen = 1;
        if (f->has_value) {
            if (i + 1 >= argc) return die(2, "%s: option %s needs a value", cmd, argv[i]);
            f->value = argv[++i];
        }
    }
    return 0;
}

static const char *need(const char *cmd, flag *flags, const char *name, int *rc) {
    flag *f = find_flag(flags, name);
    if (!f->seen) { *rc = die(2, "%s: option %s is required", cmd, name); return NULL; }
    return f->value;
}

static int parse_long(const char *cmd, const char *name, const char *s, long long lo, long long hi, long long *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return die(2, "%s: %s expects an integer in [%lld, %lld], got '%s'", cmd, name, lo, hi, s);
    *out = v;
    return 0;
}

static int parse_double(const char *cmd, const char *name, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= lo && v <= hi))
        return die(2, "%s: %s expects a number in [%g, %g], got '%s'", cmd, name, lo, hi, s);
    *out = v;
    return 0;
}

/* "1,2,3" -> ids; every id must be a non-negative integer. */
static int parse_ids(const char *cmd, const char *name, const char *s, int **ids, int *n) {
    int cap = 16, k = 0;
    int *v = malloc((size_t)cap * sizeof *v);
    if (!v) return die(1, "out of memory");
    const char *p = s;
    for (;;) {
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (end == p || errno || x < 0 || x > INT_MAX) {
            free(v);
            return die(2, "%s: %s expects comma-separated token ids, bad entry at '%s'", cmd, name, p);
        }
        if (k == cap) {
            cap *= 2;
            int *nv = realloc(v, (size_t)cap * sizeof *nv);
            if (!nv) { free(v); return die(1, "out of memory"); }
            v = nv;
        }
        v[k++] = (int)x;
        if (*end == 0) break;
        if (*end != ',') { free(v); return die(2, "%s: %s expects comma-separated token ids, bad entry at '%s'", cmd, name, end); }
        p = end + 1;
    }
    *ids = v;
    *n = k;
    return 0;
}

static int open_model(const char *dir, const char *threads, ci_model **m) {
    ci_model_opts o = { 0, 0 };
    if (threads) {
        long long t;
        if (parse_long("model", "--threads", threads, 1, 1024, &t)) return 2;
        o.n_threads = (int)t;
    }
    char err[1024];
    if (ci_model_open(dir, &o, m, err, sizeof err)) return die(1, "%s", err);
    return 0;
}

static int check_ids(const ci_model *m, const int *ids, int n, const char *name) {
    ci_model_info info;
    ci_model_get_info(m, &info);
    for (int i = 0; i < n; i++)
        if (ids[i] >= info.vocab_size)
            return die(1, "%s: token id %d at index %d is outside the vocabulary [0, %d)", name, ids[i], i, info.vocab_size);
    return 0;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- commands ---- */

static int cmd_logits(int argc, char **argv) {
    flag fl[] = { {"--model", 1, 0, 0}, {"--tokens", 1, 0, 0}, {"--out", 1, 0, 0}, {"--step", 0, 0, 0},
                  {"--threads", 1, 0, 0}, {0, 0, 0, 0} };
    int rc = parse_flags("logits", argc, argv, fl);
    if (rc) return rc;
    const char *dir = need("logits", fl, "--model", &rc), *toks = need("logits", fl, "--tokens", &rc),
               *out = need("logits", fl, "--out", &rc);
    if (rc) return rc;
    int *ids, n;
    if ((rc = parse_ids("logits", "--tokens", toks, &ids, &n))) return rc;
    ci_model *m = NULL;
    ci_session *s = NULL;
    float *lg = NULL;
    FILE *f = NULL;
    char err[1024];
    if ((rc = open_model(dir, find_flag(fl, "--threads")->value, &m))) goto done;
    if ((rc = check_ids(m, ids, n, "--tokens"))) goto done;
    ci_model_info info;
    ci_model_get_info(m, &info);
    if (ci_session_new(m, n, &s, err, sizeof err)) { rc = die(1, "%s", err); goto done; }
    lg = malloc((size_t)n * info.vocab_size * sizeof *lg);
    if (!lg) { rc = die(1, "out of memory for %d x %d logits", n, info.vocab_size); goto done; }
    if (find_flag(fl, "--step")->seen) {
        for (int i = 0; i < n; i++)
            if (ci_forward(s, &ids[i], 1, lg + (size_t)i * info.vocab_size, 1, err, sizeof err)) { rc = die(1, "%s", err); goto done; }
    } else if (ci_forward(s, ids, n, lg, 1, err, sizeof err)) { rc = die(1, "%s", err); goto done; }
    f = fopen(out, "wb");
    if (!f) { rc = die(1, "%s: cannot create: %s", out, strerror(errno)); goto done; }
    size_t cnt = (size_t)n * info.vocab_size;
    if (fwrite(lg, sizeof *lg, cnt, f) != cnt) { rc = die(1, "%s: write failed: %s", out, strerror(errno)); goto done; }
    if (fclose(f)) { f = NULL; rc = die(1, "%s: write failed: %s", out, strerror(errno)); goto done; }
    f = NULL;
done:
    if (f) fclose(f);
    free(lg);
    free(ids);
    ci_session_free(s);
    ci_model_free(m);
    return rc;
}

static int print_tok(void *ctx, int tok) {
    int *first = ctx;
    printf("%s%d", *first ? "" : ",", tok);
    *first = 0;
    fflush(stdout);
    return 0;
}

static int cmd_generate(int argc, char **argv) {
    flag fl[] = { {"--model", 1, 0, 0}, {"--prompt-ids", 1, 0, 0}, {"--max-tokens", 1, 0, 0},
                  {"--temperature", 1, 0, 0}, {"--top-k", 1, 0, 0}, {"--top-p", 1, 0, 0}, {"--min-p", 1, 0, 0},
                  {"--repeat-penalty", 1, 0, 0}, {"--seed", 1, 0, 0}, {"--threads", 1, 0, 0}, {"--ids", 0, 0, 0},
                  {0, 0, 0, 0} };
    int rc = parse_flags("generate", argc, argv, fl);
    if (rc) return rc;
    const char *dir = need("generate", fl, "--model", &rc), *pr = need("generate", fl, "--prompt-ids", &rc);
    if (rc) return rc;
    if (!find_flag(fl, "--ids")->seen)
        return die(2, "generate: text output needs a tokenizer, which is not built yet; pass --ids to print token ids");
    ci_sampler_opts so;
    ci_sampler_defaults(&so);
    long long maxt = 64, v;
    double d;
    if (find_flag(fl, "--max-tokens")->seen && parse_long("generate", "--max-tokens", find_flag(fl, "--max-tokens")->value, 0, 1 << 24, &maxt)) return 2;
    if (find_flag(fl, "--temperature")->seen) { if (parse_double("generate", "--temperature", find_flag(fl, "--temperature")->value, 0, 100, &d)) return 2; so.temperature = (float)d; }
    if (find_flag(fl, "--top-k")->seen) { if (parse_long("generate", "--top-k", find_flag(fl, "--top-k")->value, 0, INT_MAX, &v)) return 2; so.top_k = (int)v; }
    if (find_flag(fl, "--top-p")->seen) { if (parse_double("generate", "--top-p", find_flag(fl, "--top-p")->value, 1e-9, 1, &d)) return 2; so.top_p = (float)d; }
    if (find_flag(fl, "--min-p")->seen) { if (parse_double("generate", "--min-p", find_flag(fl, "--min-p")->value, 0, 1, &d)) return 2; so.min_p = (float)d; }
    if (find_flag(fl, "--repeat-penalty")->seen) { if (parse_double("generate", "--repeat-penalty", find_flag(fl, "--repeat-penalty")->value, 1e-3, 100, &d)) return 2; so.repeat_penalty = (float)d; }
    if (find_flag(fl, "--seed")->seen) { if (parse_long("generate", "--seed", find_flag(fl, "--seed")->value, 0, LLONG_MAX, &v)) return 2; so.seed = (uint64_t)v; }
    int *ids, n;
    if ((rc = parse_ids("generate", "--prompt-ids", pr, &ids, &n))) return rc;
    ci_model *m = NULL;
    ci_session *s = NULL;
    int *out = NULL, n_out = 0, first = 1;
    char err[1024];
    if ((rc = open_model(dir, find_flag(fl, "--threads")->value, &m))) goto done;
    if ((rc = check_ids(m, ids, n, "--prompt-ids"))) goto done;
    if (ci_session_new(m, n + (int)maxt, &s, err, sizeof err)) { rc = die(1, "%s", err); goto done; }
    out = malloc((size_t)(maxt + 1) * sizeof *out);
    if (!out) { rc = die(1, "out of memory"); goto done; }
    if (ci_generate(s, ids, n, (int)maxt, &so, out, &n_out, print_tok, &first, err, sizeof err)) {
        printf("\n");
        rc = die(1, "%s", err);
        goto done;
    }
    printf("\n");
done:
    free(out);
    free(ids);
    ci_session_free(s);
    ci_model_free(m);
    return rc;
}

static void print_bytes(const char *label, double b) {
    const char *u[] = { "B", "KiB", "MiB", "GiB", "TiB" };
    int i = 0;
    while (b >= 1024 && i < 4) { b /= 1024; i++; }
    printf("%-24s %.2f %s\n", label, b, u[i]);
}

static int cmd_inspect(int argc, char **argv) {
    flag fl[] = { {"--model", 1, 0, 0}, {0, 0, 0, 0} };
    int rc = parse_flags("inspect", argc, argv, fl);
    if (rc) return rc;
    const char *dir = need("inspect", fl, "--model", &rc);
    if (rc) return rc;
    ci_model *m;
    if ((rc = open_model(dir, "1", &m))) return rc;
    ci_model_info i;
    ci_model_get_info(m, &i);
    printf("%-24s %s\n", "family", i.family);
    printf("%-24s %s\n", "model_type", i.model_type);
    printf("%-24s %d\n", "layers", i.n_layers);
    printf("%-24s %d\n", "hidden_size", i.hidden_size);
    printf("%-24s %d\n", "vocab_size", i.vocab_size);
    printf("%-24s %lld (%.3f B)\n", "parameters", (long long)i.n_params, i.n_params / 1e9);
    for (int d = 0; d < 16; d++)
        if (i.bytes_by_dtype[d]) {
            char label[64];
            snprintf(label, sizeof label, "bytes %s", ci_dtype_label(d));
            print_bytes(label, (double)i.bytes_by_dtype[d]);
        }
    printf("%-24s %zu\n", "kv_bytes_per_token", i.cache_bytes_per_token);
    print_bytes("decode_weight_bytes", (double)i.decode_bytes);
    ci_model_free(m);
    return 0;
}

/* ---- bench: prefill / decode speed and the bandwidth they imply ---- */

typedef struct { const uint64_t *buf; size_t n; int parts; uint64_t sum[64]; } bw_ctx;
static void bw_task(void *vctx, int i) {
    bw_ctx *c = vctx;
    size_t a = c->n * (size_t)i / (size_t)c->parts, b = c->n * (size_t)(i + 1) / (size_t)c->parts;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (size_t k = a; k + 4 <= b; k += 4) { s0 += c->buf[k]; s1 += c->buf[k + 1]; s2 += c->buf[k + 2]; s3 += c->buf[k + 3]; }
    c->sum[i] = s0 + s1 + s2 + s3;
}

/* Read bandwidth of this machine: all threads sum a 1 GiB buffer, best of 5. */
static double measure_read_gbs(int threads) {
    size_t bytes = (size_t)1 << 30, n = bytes / 8;
    uint64_t *buf = malloc(bytes);
    if (!buf) return 0;
    for (size_t k = 0; k < n; k++) buf[k] = k;
    ci_pool *p = ci_pool_new(threads);
    bw_ctx c = { buf, n, 0, {0} };
    c.parts = ci_pool_size(p) < 64 ? ci_pool_size(p) : 64;
    double best = 1e9;
    for (int r = 0; r < 5; r++) {
        double t0 = now();
        ci_pool_run(p, bw_task, &c, c.parts);
        double t = now() - t0;
        if (t < best) best = t;
    }
    uint64_t s = 0;
    for (int i = 0; i < c.parts; i++) s += c.sum[i];
    if (s == 42) printf(" ");  /* keep the sum alive */
    ci_pool_free(p);
    free(buf);
    return bytes / best / 1e9;
}

static int cmd_bench(int argc, char **argv) {
    flag fl[] = { {"--model", 1, 0, 0}, {"--prompt-len", 1, 0, 0}, {"--gen", 1, 0, 0}, {"--threads", 1, 0, 0},
                  {0, 0, 0, 0} };
    int rc = parse_flags("bench", argc, argv, fl);
    if (rc) return rc;
    const char *dir = need("bench", fl, "--model", &rc);
    if (rc) return rc;
    long long pl = 128, gen = 32;
    if (find_flag(fl, "--prompt-len")->seen && parse_long("bench", "--prompt-len", find_flag(fl, "--prompt-len")->value, 1, 1 << 20, &pl)) return 2;
    if (find_flag(fl, "--gen")->seen && parse_long("bench", "--gen", find_flag(fl, "--gen")->value, 1, 1 << 20, &gen)) return 2;
    ci_model *m = NULL;
    ci_session *s = NULL;
    int *ids = NULL;
    float *lg = NULL;
    char err[1024];
    if ((rc = open_model(dir, find_flag(fl, "--threads")->value, &m))) return rc;
    ci_model_info i;
    ci_model_get_info(m, &i);
    ids = malloc((size_t)pl * sizeof *ids);
    lg = malloc((size_t)i.vocab_size * sizeof *lg);
    if (!ids || !lg) { rc = die(1, "out of memory"); goto done; }
    uint64_t r = 12345;
    for (int k = 0; k < pl; k++) { r = r * 6364136223846793005ull + 1442695040888963407ull; ids[k] = (int)((r >> 33) % (uint64_t)i.vocab_size); }
    if (ci_session_new(m, (int)(pl + gen), &s, err, sizeof err)) { rc = die(1, "%s", err); goto done; }
    double t0 = now();
    if (ci_forward(s, ids, (int)pl, lg, 0, err, sizeof err)) { rc = die(1, "%s", err); goto done; }
    double tp = now() - t0;
    int tok = ids[0];
    t0 = now();
    for (int k = 0; k < gen; k++)
        if (ci_forward(s, &tok, 1, lg, 0, err, sizeof err)) { rc = die(1, "%s", err); goto done; }
    double td = now() - t0;
    double dec = gen / td;
    printf("model        %s (%s, %.3f B params, backend %s)\n", dir, i.family, i.n_params / 1e9, i.backend);
    printf("prefill      %lld tokens in %.3f s = %.1f tok/s\n", pl, tp, pl / tp);
    printf("decode       %lld tokens in %.3f s = %.2f tok/s (context %lld..%lld)\n", gen, td, dec, pl, pl + gen);
    printf("weights/tok  %.1f MiB read per decoded token\n", i.decode_bytes / 1048576.0);
    printf("decode GB/s  %.2f (weights only)\n", i.decode_bytes * dec / 1e9);
    long long th = 0;
    if (find_flag(fl, "--threads")->seen) parse_long("bench", "--threads", find_flag(fl, "--threads")->value, 1, 1024, &th);
    printf("machine      %.2f GB/s read bandwidth (1 GiB summed by all threads, best of 5)\n", measure_read_gbs((int)th));
done:
    free(ids);
    free(lg);
    ci_session_free(s);
    ci_model_free(m);
    return rc;
}

static int cmd_make_random(int argc, char **argv) {
    flag fl[] = { {"--config", 1, 0, 0}, {"--out", 1, 0, 0}, {"--dtype", 1, 0, 0}, {"--seed", 1, 0, 0},
                  {"--layers", 1, 0, 0}, {0, 0, 0, 0} };
    int rc = parse_flags("make-random", argc, argv, fl);
    if (rc) return rc;
    const char *cfg = need("make-random", fl, "--config", &rc), *out = need("make-random", fl, "--out", &rc);
    if (rc) return rc;
    const char *dt = find_flag(fl, "--dtype")->seen ? find_flag(fl, "--dtype")->value : "bf16";
    long long seed = 0, layers = 0;
    if (find_flag(fl, "--seed")->seen && parse_long("make-random", "--seed", find_flag(fl, "--seed")->value, 0, LLONG_MAX, &seed)) return 2;
    if (find_flag(fl, "--layers")->seen && parse_long("make-random", "--layers", find_flag(fl, "--layers")->value, 1, 4096, &layers)) return 2;
    char err[1024];
    if (ci_make_random(cfg, out, dt, (uint64_t)seed, (int)layers, err, sizeof err)) return die(1, "%s", err);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 2) return die(2, "no command given (logits, generate, inspect, bench, make-random); see cinfer --help");
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        fputs(USAGE, stdout);
        return 0;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "logits")) return cmd_logits(argc - 2, argv + 2);
    if (!strcmp(cmd, "generate")) return cmd_generate(argc - 2, argv + 2);
    if (!strcmp(cmd, "inspect")) return cmd_inspect(argc - 2, argv + 2);
    if (!strcmp(cmd, "bench")) return cmd_bench(argc - 2, argv + 2);
    if (!strcmp(cmd, "make-random")) return cmd_make_random(argc - 2, argv + 2);
    if (!strcmp(cmd, "tokenize")) return cmd_tokenize(argc - 2, argv + 2);
    if (!strcmp(cmd, "detokenize")) return cmd_detokenize(argc - 2, argv + 2);
    return die(2, "unknown command '%s' (logits, generate, inspect, bench, make-random, tokenize, detokenize)", cmd);
}
