/* cmd_text.c — `cinfer tokenize` and `cinfer detokenize` (see cmd_text.h).
 *
 * The model folder only needs tokenizer.json (+ tokenizer_config.json); no config.json or
 * weights are read. The input file is read whole as bytes; invalid UTF-8 is refused with
 * the offset of the first bad byte. Output goes to stdout in one write at the end, so a
 * failure prints nothing but its one stderr line. */
#include "cmd_text.h"
#include "text/tokenizer.h"
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int text_die(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int text_die(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("cinfer: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return code;
}

typedef struct { const char *name; int has_value; const char *value; int seen; } text_flag;

static int text_flags(const char *cmd, int argc, char **argv, text_flag *flags) {
    for (int i = 0; i < argc; i++) {
        text_flag *f = flags;
        while (f->name && strcmp(f->name, argv[i])) f++;
        if (!f->name) return text_die(2, "%s: unknown option '%s' (see cinfer --help)", cmd, argv[i]);
        if (f->seen) return text_die(2, "%s: option %s given twice", cmd, argv[i]);
        f->seen = 1;
        if (f->has_value) {
            if (i + 1 >= argc) return text_die(2, "%s: option %s needs a value", cmd, argv[i]);
            f->value = argv[++i];
        }
    }
    for (text_flag *f = flags; f->name; f++)
        if (f->has_value == 2 && !f->seen) return text_die(2, "%s: option %s is required", cmd, f->name);
    return 0;
}

static int read_all(const char *path, char **buf, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return text_die(1, "tokenize: %s: cannot open: %s", path, strerror(errno));
    size_t cap = 65536, n = 0;
    char *b = malloc(cap);
    while (b) {
        size_t r = fread(b + n, 1, cap - n, f);
        n += r;
        if (n < cap) break;
        char *nb = cap > ((size_t)1 << 32) ? NULL : realloc(b, cap * 2);
        if (!nb) { free(b); b = NULL; break; }
        b = nb;
        cap *= 2;
    }
    int bad = !b || ferror(f);
    fclose(f);
    if (bad) { free(b); return text_die(1, "tokenize: %s: cannot read the file", path); }
    *buf = b;
    *len = n;
    return 0;
}

int cmd_tokenize(int argc, char **argv) {
    text_flag flags[] = { { "--model", 2, NULL, 0 }, { "--file", 2, NULL, 0 }, { "--add-special", 0, NULL, 0 }, { NULL, 0, NULL, 0 } };
    int rc = text_flags("tokenize", argc, argv, flags);
    if (rc) return rc;
    char err[768];
    tok_tokenizer *t = NULL;
    if (tok_load(flags[0].value, &t, err, sizeof err)) return text_die(1, "tokenize: %s", err);
    char *text = NULL;
    size_t len = 0;
    if ((rc = read_all(flags[1].value, &text, &len))) { tok_free(t); return rc; }
    int *ids = NULL;
    size_t n = 0;
    if (tok_encode(t, text, len, flags[2].seen, &ids, &n, err, sizeof err)) {
        free(text);
        tok_free(t);
        return text_die(1, "tokenize: %s: %s", flags[1].value, err);
    }
    for (size_t i = 0; i < n; i++) printf(i ? " %d" : "%d", ids[i]);
    putchar('\n');
    free(ids);
    free(text);
    tok_free(t);
    return fflush(stdout) ? text_die(1, "tokenize: cannot write the output") : 0;
}

static int parse_id_list(const char *s, int **ids, size_t *n) {
    size_t cap = 16, k = 0;
    int *v = malloc(cap * sizeof *v);
    if (!v) return text_die(1, "out of memory");
    const char *p = s;
    while (*p == ' ') p++;
    if (*p) for (;;) {
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (end == p || errno || x < INT_MIN || x > INT_MAX) {
            free(v);
            return text_die(2, "detokenize: --ids expects comma-separated token ids, bad entry at '%s'", p);
        }
        if (k == cap) {
            int *nv = realloc(v, cap * 2 * sizeof *nv);
            if (!nv) { free(v); return text_die(1, "out of memory"); }
            v = nv;
            cap *= 2;
        }
        v[k++] = (int)x;
        while (*end == ' ') end++;
        if (!*end) break;
        if (*end != ',') { free(v); return text_die(2, "detokenize: --ids expects comma-separated token ids, bad entry at '%s'", end); }
        p = end + 1;
        while (*p == ' ') p++;
    }
    *ids = v;
    *n = k;
    return 0;
}

int cmd_detokenize(int argc, char **argv) {
    text_flag flags[] = { { "--model", 2, NULL, 0 }, { "--ids", 2, NULL, 0 }, { "--skip-special", 0, NULL, 0 }, { NULL, 0, NULL, 0 } };
    int rc = text_flags("detokenize", argc, argv, flags);
    if (rc) return rc;
    int *ids = NULL;
    size_t n = 0;
    if ((rc = parse_id_list(flags[1].value, &ids, &n))) return rc;
    char err[768];
    tok_tokenizer *t = NULL;
    if (tok_load(flags[0].value, &t, err, sizeof err)) { free(ids); return text_die(1, "detokenize: %s", err); }
    char *text = NULL;
    size_t len = 0;
    rc = tok_decode(t, ids, n, flags[2].seen, &text, &len, err, sizeof err);
    free(ids);
    tok_free(t);
    if (rc) return text_die(1, "detokenize: %s", err);
    size_t w = fwrite(text, 1, len, stdout);
    free(text);
    return w != len || fflush(stdout) ? text_die(1, "detokenize: cannot write the output") : 0;
}
