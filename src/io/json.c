/* json.c — see json.h. */
#include "json.h"
#include "../core/status.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int is_ident(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_'; }

json_t *cj_parse(const char *text, size_t len, const char *what, char *err, size_t errlen) {
    return cj_parse_ex(text, len, what, 0, err, errlen);
}

json_t *cj_parse_ex(const char *text, size_t len, const char *what, int big_ints_as_reals, char *err, size_t errlen) {
    /* Worst case every byte starts a literal that grows by 2 quotes: "NaN" -> 3 chars + 2. */
    size_t cap = len + len / 3 * 2 + 16;
    char *buf = malloc(cap);
    if (!buf) { ci_err(err, errlen, "%s: out of memory reading JSON", what); return NULL; }
    size_t o = 0;
    int in_str = 0;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (in_str) {
            buf[o++] = c;
            if (c == '\\' && i + 1 < len) buf[o++] = text[++i];
            else if (c == '"') in_str = 0;
            continue;
        }
        if (c == '"') { in_str = 1; buf[o++] = c; continue; }
        static const char *lits[] = { "-Infinity", "Infinity", "NaN" };
        int done = 0;
        for (int k = 0; k < 3 && !done; k++) {
            size_t l = strlen(lits[k]);
            if (i + l <= len && memcmp(text + i, lits[k], l) == 0 &&
                (i == 0 || !is_ident(text[i - 1])) && (i + l == len || !is_ident(text[i + l]))) {
                buf[o++] = '"';
                memcpy(buf + o, lits[k], l);
                o += l;
                buf[o++] = '"';
                i += l - 1;
                done = 1;
            }
        }
        if (!done && big_ints_as_reals && (c == '-' || (c >= '0' && c <= '9')) && (i == 0 || (!is_ident(text[i - 1]) && text[i - 1] != '.'))) {
            /* an integer too large for int64 (tokenizer configs write model_max_length =
               1e30 as digits) is read as a real, as Python's json would keep it: append .0 */
            size_t j = i + (c == '-'), digits = 0;
            while (j < len && text[j] >= '0' && text[j] <= '9') { j++; digits++; }
            int is_int = digits > 0 && (j == len || (text[j] != '.' && text[j] != 'e' && text[j] != 'E'));
            memcpy(buf + o, text + i, j - i);
            o += j - i;
            if (is_int && digits >= 19) { buf[o++] = '.'; buf[o++] = '0'; }
            i = j - 1;
            done = 1;
        }
        if (!done) buf[o++] = c;
    }
    json_error_t je;
    json_t *root = json_loadb(buf, o, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    free(buf);
    if (!root) ci_err(err, errlen, "%s: invalid JSON at line %d column %d: %s", what, je.line, je.column, je.text);
    return root;
}

json_t *cj_load_file(const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) { ci_err(err, errlen, "%s: cannot open: %s", path, strerror(errno)); return NULL; }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 65536;
            if (cap > ((size_t)1 << 31)) { free(buf); fclose(f); ci_err(err, errlen, "%s: JSON file larger than 2 GiB", path); return NULL; }
            char *nb = realloc(buf, cap);
            if (!nb) { free(buf); fclose(f); ci_err(err, errlen, "%s: out of memory", path); return NULL; }
            buf = nb;
        }
        size_t r = fread(buf + len, 1, cap - len, f);
        len += r;
        if (r == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) { free(buf); ci_err(err, errlen, "%s: read error", path); return NULL; }
    json_t *root = cj_parse_ex(buf, len, path, 1, err, errlen);
    free(buf);
    return root;
}

char *cj_dumps(const json_t *root, size_t flags) {
    char *t = json_dumps(root, flags);
    if (!t) return NULL;
    static const char *lits[] = { "\"-Infinity\"", "\"Infinity\"", "\"NaN\"" };
    size_t r = 0, w = 0, n = strlen(t);
    while (r < n) {
        if (t[r] != '"') { t[w++] = t[r++]; continue; }
        size_t e = r + 1;                        /* the string token [r, e) */
        while (e < n && t[e] != '"') e += t[e] == '\\' ? 2 : 1;
        e = e < n ? e + 1 : n;
        size_t k = e;
        while (k < n && (t[k] == ' ' || t[k] == '\n')) k++;
        int bare = 0;
        for (int i = 0; i < 3 && !bare; i++)
            bare = e - r == strlen(lits[i]) && !memcmp(t + r, lits[i], e - r) && (k >= n || t[k] != ':');
        if (bare) { memmove(t + w, t + r + 1, e - r - 2); w += e - r - 2; }
        else { memmove(t + w, t + r, e - r); w += e - r; }
        r = e;
    }
    t[w] = 0;
    return t;
}

static int special(const char *s, double *out) {
    if (!strcmp(s, "Infinity") || !strcmp(s, "inf")) { *out = INFINITY; return 1; }
    if (!strcmp(s, "-Infinity") || !strcmp(s, "-inf")) { *out = -INFINITY; return 1; }
    if (!strcmp(s, "NaN") || !strcmp(s, "nan")) { *out = NAN; return 1; }
    return 0;
}

int cj_number(const json_t *v, double *out) {
    if (!v) return 0;
    if (json_is_integer(v)) { *out = (double)json_integer_value(v); return 1; }
    if (json_is_real(v)) { *out = json_real_value(v); return 1; }
    if (json_is_string(v)) return special(json_string_value(v), out);
    if (json_is_object(v) && json_object_size(v) == 1) {
        const json_t *f = json_object_get(v, "__float__");
        if (f && json_is_string(f)) return special(json_string_value(f), out);
    }
    return 0;
}

int cj_get_int(const json_t *obj, const char *key, long long *out) {
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    if (json_is_integer(v)) { *out = json_integer_value(v); return 1; }
    if (json_is_real(v)) { /* 4096.0 is fine; 4096.5 is not */
        double d = json_real_value(v);
        if (d == floor(d) && fabs(d) < 9e15) { *out = (long long)d; return 1; }
    }
    return -1;
}

int cj_get_num(const json_t *obj, const char *key, double *out) {
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    return cj_number(v, out) ? 1 : -1;
}

int cj_get_bool(const json_t *obj, const char *key, int *out) {
    const json_t *v = json_object_get(obj, key);
    if (!v || json_is_null(v)) return 0;
    if (json_is_boolean(v)) { *out = json_is_true(v); return 1; }
    return -1;
}

const char *cj_get_str(const json_t *obj, const char *key) {
    const json_t *v = json_object_get(obj, key);
    return (v && json_is_string(v)) ? json_string_value(v) : NULL;
}
