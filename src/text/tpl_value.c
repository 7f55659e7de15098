/* tpl_value.c — the chat-template value type and Python's view of it.
 *
 * Owns: reference counting and freeing of heap values (strings, lists, insertion-ordered
 * dicts, namespaces, loop objects, functions, macros); Python truthiness, ==, ordering;
 * str() and repr() exactly as Python prints them (so `{{ [1, 'a'] }}` and `{{ 1e16 }}` match
 * what Jinja2 writes); json.dumps with the options transformers' tojson filter exposes
 * (ensure_ascii, indent, separators, sort_keys), keys kept in insertion order; the byte
 * buffer with an output cap; UTF-8 helpers with Python's code-point and whitespace rules.
 *
 * Invariants: every tstr holds valid UTF-8 (inputs are validated where they enter); an
 * immortal object (rc < 0) is never freed here; a container holds one reference to each
 * element. Nothing allocates without checking; allocation failure is reported upward. */
#include "text/tpl_internal.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

/* ------------------------------------------------------------------ refcounts */

/* Freeing walks an explicit work list, not the C stack: a template can nest values as
 * deeply as its step budget allows ({% set ns.x = [ns.x] %} in a loop). */
tv tv_list(tlist *l);
typedef struct worklist { tv *v; size_t n, cap; tv local[32]; } worklist;

static void wl_push(worklist *w, tv v);
static void free_one(worklist *w, tv v);

static void release_child(worklist *w, tv c) {
    if (!tv_heap(c)) return;
    tobj *o = c.u.o;
    if (o->rc < 0) return;
    if (--o->rc == 0) wl_push(w, c);
}

static void wl_push(worklist *w, tv v) {
    if (w->n == w->cap) {
        size_t nc = w->cap * 2;
        tv *nv = w->v == w->local ? malloc(nc * sizeof *nv) : realloc(w->v, nc * sizeof *nv);
        if (!nv) { free_one(w, v); return; } /* out of memory: recurse for this one */
        if (w->v == w->local) memcpy(nv, w->local, w->n * sizeof *nv);
        w->v = nv; w->cap = nc;
    }
    w->v[w->n++] = v;
}

static void dict_free(worklist *w, tdict *d) {
    for (size_t i = 0; i < d->n; i++) { release_child(w, d->k[i]); release_child(w, d->v[i]); }
    free(d->k); free(d->v); free(d->idx); free(d);
}

static void free_one(worklist *w, tv v) {
    switch (v.t) {
    case TV_UNDEF: case TV_STR: free(v.u.s); break;
    case TV_LIST:
        for (size_t i = 0; i < v.u.l->n; i++) release_child(w, v.u.l->v[i]);
        free(v.u.l->v); free(v.u.l); break;
    case TV_DICT: dict_free(w, v.u.d); break;
    case TV_NS: if (v.u.ns->d) dict_free(w, v.u.ns->d); free(v.u.ns); break;
    case TV_LOOP: if (v.u.lp->items) release_child(w, tv_list(v.u.lp->items)); free(v.u.lp); break;
    case TV_FUNC: release_child(w, v.u.fn->self); free(v.u.fn); break;
    case TV_MACRO: free(v.u.m); break;
    default: break;
    }
}

static void obj_free(tv v) {
    worklist w = {.cap = 32};
    w.v = w.local;
    wl_push(&w, v);
    while (w.n) free_one(&w, w.v[--w.n]);
    if (w.v != w.local) free(w.v);
}

void tv_incref(tv v) {
    if (!tv_heap(v)) return;
    tobj *o = v.u.o;
    if (o->rc >= 0) o->rc++;
}

void tv_decref(tv v) {
    if (!tv_heap(v)) return;
    tobj *o = v.u.o;
    if (o->rc < 0) return;
    if (--o->rc == 0) obj_free(v);
}

/* ------------------------------------------------------------------ strings */

tstr *tstr_alloc(size_t len) {
    if (len > ((size_t)1 << 40)) return NULL;
    tstr *s = malloc(sizeof *s + len + 1);
    if (!s) return NULL;
    s->h.rc = 1; s->h.kind = TV_STR; s->len = len; s->ncp = (size_t)-1; s->s[len] = 0;
    return s;
}

tstr *tstr_new(const char *p, size_t len) {
    tstr *s = tstr_alloc(len);
    if (s && len) memcpy(s->s, p, len);
    return s;
}

tv tv_str_take(tstr *s) {
    tv v;
    if (!s) return tv_none();
    v.t = TV_STR; v.u.s = s;
    return v;
}

tv tv_str(const char *p, size_t len) { return tv_str_take(tstr_new(p, len)); }
tv tv_cstr(const char *p) { return tv_str(p, strlen(p)); }

size_t tstr_ncp(tstr *s) {
    if (s->ncp != (size_t)-1) return s->ncp;
    size_t n = 0;
    for (size_t i = 0; i < s->len; i++) n += ((unsigned char)s->s[i] & 0xC0) != 0x80;
    if (s->h.rc >= 0) s->ncp = n; /* immortal literals are counted each time (shared, const) */
    return n;
}

/* ------------------------------------------------------------------ lists, dicts */

tv tv_list(tlist *l) { tv v; v.t = TV_LIST; v.u.l = l; return v; }
tv tv_dict(tdict *d) { tv v; v.t = TV_DICT; v.u.d = d; return v; }

tlist *tlist_new(size_t cap) {
    tlist *l = calloc(1, sizeof *l);
    if (!l) return NULL;
    l->h.rc = 1; l->h.kind = TV_LIST;
    if (cap) {
        l->v = malloc(cap * sizeof *l->v);
        if (!l->v) { free(l); return NULL; }
        l->cap = cap;
    }
    return l;
}

int tlist_push(tlist *l, tv v) {
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 4;
        tv *nv = realloc(l->v, nc * sizeof *nv);
        if (!nv) { tv_decref(v); return -1; }
        l->v = nv; l->cap = nc;
    }
    l->v[l->n++] = v;
    return 0;
}

tdict *tdict_new(void) {
    tdict *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->h.rc = 1; d->h.kind = TV_DICT;
    return d;
}

static uint64_t mix64(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL; x ^= x >> 33;
    return x;
}

/* Python's rule: equal keys hash equal (1 == 1.0 == True). */
static uint64_t tv_hash(tv k) {
    switch (k.t) {
    case TV_STR: {
        uint64_t h = 1469598103934665603ULL;
        for (size_t i = 0; i < k.u.s->len; i++) { h ^= (unsigned char)k.u.s->s[i]; h *= 1099511628211ULL; }
        return h;
    }
    case TV_BOOL: return mix64((uint64_t)k.u.b);
    case TV_INT: return mix64((uint64_t)k.u.i);
    case TV_FLOAT:
        if (k.u.f == floor(k.u.f) && fabs(k.u.f) < 9.2e18) return mix64((uint64_t)(int64_t)k.u.f);
        { uint64_t b; memcpy(&b, &k.u.f, 8); return mix64(b); }
    case TV_NONE: return 0x9e3779b97f4a7c15ULL;
    default: return mix64((uint64_t)(uintptr_t)k.u.o);
    }
}

static int dict_reindex(tdict *d, size_t cap) {
    uint32_t *idx = calloc(cap, sizeof *idx);
    if (!idx) return -1;
    for (size_t i = 0; i < d->n; i++) {
        size_t h = (size_t)tv_hash(d->k[i]) & (cap - 1);
        while (idx[h]) h = (h + 1) & (cap - 1);
        idx[h] = (uint32_t)(i + 1);
    }
    free(d->idx); d->idx = idx; d->idxcap = cap;
    return 0;
}

long tdict_find(const tdict *d, tv k) {
    if (!d->idx) {
        for (size_t i = 0; i < d->n; i++) if (tv_eq(d->k[i], k)) return (long)i;
        return -1;
    }
    size_t h = (size_t)tv_hash(k) & (d->idxcap - 1);
    while (d->idx[h]) {
        size_t i = d->idx[h] - 1;
        if (tv_eq(d->k[i], k)) return (long)i;
        h = (h + 1) & (d->idxcap - 1);
    }
    return -1;
}

tv *tdict_get_cstr(const tdict *d, const char *key) {
    size_t n = strlen(key);
    tstr *tmp = tstr_new(key, n);
    if (!tmp) return NULL;
    tv k; k.t = TV_STR; k.u.s = tmp;
    long i = tdict_find(d, k);
    free(tmp);
    return i < 0 ? NULL : &d->v[i];
}

int tdict_set(tdict *d, tv k, tv v) {
    long i = tdict_find(d, k);
    if (i >= 0) { tv_decref(k); tv_decref(d->v[i]); d->v[i] = v; return 0; }
    if (d->n == d->cap) {
        size_t nc = d->cap ? d->cap * 2 : 4;
        tv *nk = realloc(d->k, nc * sizeof *nk);
        if (!nk) goto fail;
        d->k = nk;
        tv *nv = realloc(d->v, nc * sizeof *nv);
        if (!nv) goto fail;
        d->v = nv; d->cap = nc;
    }
    d->k[d->n] = k; d->v[d->n] = v; d->n++;
    if (d->n > 8) {
        if (!d->idx || d->n * 2 > d->idxcap) {
            size_t cap = 16;
            while (cap < d->n * 4) cap *= 2;
            if (dict_reindex(d, cap)) { d->n--; goto fail; }
        } else {
            size_t h = (size_t)tv_hash(k) & (d->idxcap - 1);
            while (d->idx[h]) h = (h + 1) & (d->idxcap - 1);
            d->idx[h] = (uint32_t)d->n;
        }
    }
    return 0;
fail:
    tv_decref(k); tv_decref(v);
    return -1;
}

tns *tns_new(void) {
    tns *n = calloc(1, sizeof *n);
    if (!n) return NULL;
    n->h.rc = 1; n->h.kind = TV_NS;
    n->d = tdict_new();
    if (!n->d) { free(n); return NULL; }
    return n;
}

/* ------------------------------------------------------------------ Python semantics */

int tv_truthy(tv v) {
    switch (v.t) {
    case TV_UNDEF: case TV_NONE: return 0;
    case TV_BOOL: return v.u.b;
    case TV_INT: return v.u.i != 0;
    case TV_FLOAT: return v.u.f != 0.0;
    case TV_STR: return v.u.s->len != 0;
    case TV_LIST: return v.u.l->n != 0;
    case TV_DICT: return v.u.d->n != 0;
    default: return 1;
    }
}

static int is_num(tv v) { return v.t == TV_BOOL || v.t == TV_INT || v.t == TV_FLOAT; }
static double num_f(tv v) { return v.t == TV_FLOAT ? v.u.f : v.t == TV_INT ? (double)v.u.i : v.u.b; }
static int64_t num_i(tv v) { return v.t == TV_INT ? v.u.i : v.u.b; }

#define TV_MAX_NEST 500 /* deeper comparisons / printing are refused (Python: RecursionError) */

static int eq_d(tv a, tv b, int depth);
int tv_eq(tv a, tv b) { return eq_d(a, b, 0); }

static int eq_d(tv a, tv b, int depth) {
    if (depth > TV_MAX_NEST) return 0;
    if (is_num(a) && is_num(b)) {
        if (a.t == TV_FLOAT || b.t == TV_FLOAT) return num_f(a) == num_f(b);
        return num_i(a) == num_i(b);
    }
    if (a.t != b.t) return 0;
    switch (a.t) {
    case TV_UNDEF: case TV_NONE: return 1;
    case TV_STR: return a.u.s->len == b.u.s->len && !memcmp(a.u.s->s, b.u.s->s, a.u.s->len);
    case TV_LIST:
        if (a.u.l->tuple != b.u.l->tuple || a.u.l->n != b.u.l->n) return 0;
        for (size_t i = 0; i < a.u.l->n; i++) if (!eq_d(a.u.l->v[i], b.u.l->v[i], depth + 1)) return 0;
        return 1;
    case TV_DICT:
        if (a.u.d->n != b.u.d->n) return 0;
        for (size_t i = 0; i < a.u.d->n; i++) {
            long j = tdict_find(b.u.d, a.u.d->k[i]);
            if (j < 0 || !eq_d(a.u.d->v[i], b.u.d->v[j], depth + 1)) return 0;
        }
        return 1;
    default: return a.u.o == b.u.o;
    }
}

static int cmp_d(tv a, tv b, int *out, int depth);
int tv_cmp(tv a, tv b, int *out) { return cmp_d(a, b, out, 0); }

static int cmp_d(tv a, tv b, int *out, int depth) {
    if (depth > TV_MAX_NEST) return -1;
    if (is_num(a) && is_num(b)) {
        if (a.t == TV_FLOAT || b.t == TV_FLOAT) {
            double x = num_f(a), y = num_f(b);
            if (x != x || y != y) { *out = 2; return 0; } /* NaN: every ordering is false */
            *out = x < y ? -1 : x > y; return 0;
        }
        int64_t x = num_i(a), y = num_i(b);
        *out = x < y ? -1 : x > y; return 0;
    }
    if (a.t == TV_STR && b.t == TV_STR) { /* UTF-8 byte order is code-point order */
        size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
        int r = memcmp(a.u.s->s, b.u.s->s, n);
        *out = r < 0 ? -1 : r > 0 ? 1 : a.u.s->len < b.u.s->len ? -1 : a.u.s->len > b.u.s->len;
        return 0;
    }
    if (a.t == TV_LIST && b.t == TV_LIST && a.u.l->tuple == b.u.l->tuple) {
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (eq_d(a.u.l->v[i], b.u.l->v[i], depth + 1)) continue;
            return cmp_d(a.u.l->v[i], b.u.l->v[i], out, depth + 1);
        }
        *out = a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n;
        return 0;
    }
    return -1;
}

const char *tv_pytype(tv v) {
    switch (v.t) {
    case TV_UNDEF: return "Undefined";
    case TV_NONE: return "NoneType";
    case TV_BOOL: return "bool";
    case TV_INT: return "int";
    case TV_FLOAT: return "float";
    case TV_STR: return "str";
    case TV_LIST: return v.u.l->tuple ? "tuple" : "list";
    case TV_DICT: return "dict";
    case TV_NS: return "Namespace";
    case TV_LOOP: return "LoopContext";
    case TV_FUNC: return "builtin_function_or_method";
    case TV_MACRO: return "Macro";
    }
    return "object";
}

const char *tv_objrepr(tv v) {
    switch (v.t) {
    case TV_NONE: return "None";
    case TV_BOOL: return "bool object";
    case TV_INT: return "int object";
    case TV_FLOAT: return "float object";
    case TV_STR: return "str object";
    case TV_LIST: return v.u.l->tuple ? "tuple object" : "list object";
    case TV_DICT: return "dict object";
    case TV_NS: return "jinja2.utils.Namespace object";
    case TV_LOOP: return "jinja2.runtime.LoopContext object";
    case TV_FUNC: return "builtin_function_or_method object";
    case TV_MACRO: return "jinja2.runtime.Macro object";
    default: return "jinja2.runtime.Undefined object";
    }
}

/* Stable merge sort of idx[0..n) by keys[idx[i]] (Python's sort: only `<`, reverse keeps
 * equal items in their original order). On unorderable keys returns -1 with the pair. */
static int less(const tv *keys, size_t a, size_t b, int reverse, int *bad, size_t *ba, size_t *bb) {
    int c;
    size_t x = reverse ? b : a, y = reverse ? a : b; /* take the right one (b) when keys[y] < keys[x] */
    if (tv_cmp(keys[y], keys[x], &c)) { *bad = 1; *ba = y; *bb = x; return 0; }
    return c == -1;
}

int tv_sort_index(size_t *idx, size_t n, const tv *keys, int reverse, size_t *bad_a, size_t *bad_b) {
    if (n < 2) return 0;
    size_t *tmp = malloc(n * sizeof *tmp);
    if (!tmp) return -2;
    int bad = 0;
    for (size_t w = 1; w < n && !bad; w *= 2) {
        for (size_t lo = 0; lo < n && !bad; lo += 2 * w) {
            size_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
            size_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi) {
                /* take from the right only when it is strictly first */
                if (less(keys, idx[i], idx[j], reverse, &bad, bad_a, bad_b)) tmp[k++] = idx[j++];
                else tmp[k++] = idx[i++];
                if (bad) break;
            }
            while (i < mid) tmp[k++] = idx[i++];
            while (j < hi) tmp[k++] = idx[j++];
            memcpy(idx + lo, tmp + lo, (hi - lo) * sizeof *idx);
        }
    }
    free(tmp);
    return bad ? -1 : 0;
}

/* ------------------------------------------------------------------ buffer */

int tbuf_put(tbuf *b, const char *s, size_t n) {
    if (b->over) return -1;
    if (b->limit && b->n + n > b->limit) { b->over = 1; return -1; }
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + n + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) { b->over = 2; return -1; }
        b->p = np; b->cap = nc;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

int tbuf_putc(tbuf *b, char c) { return tbuf_put(b, &c, 1); }

int tbuf_printf(tbuf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return -1;
    if ((size_t)n < sizeof tmp) return tbuf_put(b, tmp, (size_t)n);
    char *big = malloc((size_t)n + 1);
    if (!big) { b->over = 2; return -1; }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    int r = tbuf_put(b, big, (size_t)n);
    free(big);
    return r;
}

void tbuf_free(tbuf *b) { free(b->p); b->p = NULL; b->n = b->cap = 0; }

/* ------------------------------------------------------------------ UTF-8 */

int utf8_next(const char *s, size_t len, size_t *i) {
    utf8proc_int32_t cp;
    utf8proc_ssize_t n = utf8proc_iterate((const utf8proc_uint8_t *)s + *i, (utf8proc_ssize_t)(len - *i), &cp);
    if (n <= 0) { (*i)++; return 0xFFFD; }
    *i += (size_t)n;
    return cp;
}

int utf8_put(char *out, int cp) {
    if (cp < 0 || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) cp = 0xFFFD;
    return (int)utf8proc_encode_char(cp, (utf8proc_uint8_t *)out);
}

int py_isspace(int cp) {
    return (cp >= 9 && cp <= 13) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
           cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
           cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

size_t utf8_offset(const char *s, size_t len, size_t cp_index) {
    size_t i = 0, k = 0;
    while (i < len && k < cp_index) {
        i++;
        while (i < len && ((unsigned char)s[i] & 0xC0) == 0x80) i++;
        k++;
    }
    return i;
}

/* ------------------------------------------------------------------ str / repr */

void tv_format_float(char *out, size_t n, double f) {
    if (f != f) { snprintf(out, n, "nan"); return; }
    if (isinf(f)) { snprintf(out, n, f < 0 ? "-inf" : "inf"); return; }
    char buf[48];
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, f);
        if (strtod(buf, NULL) == f) break;
    }
    /* buf: [-]d[.ddd]e(+|-)XX -> sign, digits, exponent */
    const char *p = buf;
    int neg = 0;
    if (*p == '-') { neg = 1; p++; }
    char dig[32]; int nd = 0;
    while (*p && *p != 'e') { if (*p != '.') dig[nd++] = *p; p++; }
    int e = atoi(p + 1);
    while (nd > 1 && dig[nd - 1] == '0') nd--;
    dig[nd] = 0;
    char res[64]; int r = 0;
    if (neg) res[r++] = '-';
    if (e >= -4 && e < 16) {
        if (e >= 0) {
            for (int i = 0; i <= e; i++) res[r++] = i < nd ? dig[i] : '0';
            res[r++] = '.';
            if (nd > e + 1) for (int i = e + 1; i < nd; i++) res[r++] = dig[i];
            else res[r++] = '0';
        } else {
            res[r++] = '0'; res[r++] = '.';
            for (int i = 0; i < -e - 1; i++) res[r++] = '0';
            for (int i = 0; i < nd; i++) res[r++] = dig[i];
        }
        res[r] = 0;
    } else {
        res[r++] = dig[0];
        if (nd > 1) { res[r++] = '.'; for (int i = 1; i < nd; i++) res[r++] = dig[i]; }
        snprintf(res + r, sizeof res - (size_t)r, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    }
    snprintf(out, n, "%s", res);
}

static int py_isprintable(int cp) {
    if (cp < 0x20 || cp == 0x7F) return 0;
    if (cp < 0x7F) return 1;
    switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO: case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS: return 0;
    default: return 1;
    }
}

static int write_str_repr(tbuf *b, const tstr *s) {
    char q = '\'';
    if (memchr(s->s, '\'', s->len) && !memchr(s->s, '"', s->len)) q = '"';
    if (tbuf_putc(b, q)) return -1;
    size_t i = 0;
    while (i < s->len) {
        size_t st = i;
        int cp = utf8_next(s->s, s->len, &i);
        int rc;
        if (cp == q || cp == '\\') { char e[2] = {'\\', (char)cp}; rc = tbuf_put(b, e, 2); }
        else if (cp == '\n') rc = tbuf_put(b, "\\n", 2);
        else if (cp == '\r') rc = tbuf_put(b, "\\r", 2);
        else if (cp == '\t') rc = tbuf_put(b, "\\t", 2);
        else if (py_isprintable(cp)) rc = tbuf_put(b, s->s + st, i - st);
        else if (cp < 0x100) rc = tbuf_printf(b, "\\x%02x", cp);
        else if (cp < 0x10000) rc = tbuf_printf(b, "\\u%04x", cp);
        else rc = tbuf_printf(b, "\\U%08x", cp);
        if (rc) return -1;
    }
    return tbuf_putc(b, q);
}

/* The containers being printed, outermost first: a namespace that holds itself prints as
 * Python prints a recursive dict ({...}); nesting past TV_MAX_NEST is refused (over = 3). */
typedef struct pstack { const void *p[TV_MAX_NEST + 1]; int n; } pstack;

static int write_v(tbuf *b, tv v, int repr, pstack *ps);

static int enter_p(tbuf *b, pstack *ps, const void *p, int *seen) {
    *seen = 0;
    for (int i = 0; i < ps->n; i++) if (ps->p[i] == p) { *seen = 1; return 0; }
    if (ps->n > TV_MAX_NEST - 1) { b->over = 3; return -1; }
    ps->p[ps->n++] = p;
    return 0;
}

static int write_seq(tbuf *b, const tlist *l, pstack *ps) {
    int seen;
    if (enter_p(b, ps, l, &seen)) return -1;
    if (seen) return tbuf_put(b, "[...]", 5);
    int r = tbuf_putc(b, l->tuple ? '(' : '[');
    for (size_t i = 0; !r && i < l->n; i++) {
        if (i && tbuf_put(b, ", ", 2)) { r = -1; break; }
        r = write_v(b, l->v[i], 1, ps);
    }
    if (!r && l->tuple && l->n == 1) r = tbuf_putc(b, ',');
    if (!r) r = tbuf_putc(b, l->tuple ? ')' : ']');
    ps->n--;
    return r;
}

static int write_dict(tbuf *b, const tdict *d, pstack *ps) {
    int seen;
    if (enter_p(b, ps, d, &seen)) return -1;
    if (seen) return tbuf_put(b, "{...}", 5);
    int r = tbuf_putc(b, '{');
    for (size_t i = 0; !r && i < d->n; i++) {
        if (i && tbuf_put(b, ", ", 2)) { r = -1; break; }
        r = write_v(b, d->k[i], 1, ps);
        if (!r) r = tbuf_put(b, ": ", 2);
        if (!r) r = write_v(b, d->v[i], 1, ps);
    }
    if (!r) r = tbuf_putc(b, '}');
    ps->n--;
    return r;
}

static int write_v(tbuf *b, tv v, int repr, pstack *ps) {
    char num[64];
    switch (v.t) {
    case TV_UNDEF: return repr ? tbuf_put(b, "Undefined", 9) : 0;
    case TV_NONE: return tbuf_put(b, "None", 4);
    case TV_BOOL: return v.u.b ? tbuf_put(b, "True", 4) : tbuf_put(b, "False", 5);
    case TV_INT: snprintf(num, sizeof num, "%lld", (long long)v.u.i); return tbuf_put(b, num, strlen(num));
    case TV_FLOAT: tv_format_float(num, sizeof num, v.u.f); return tbuf_put(b, num, strlen(num));
    case TV_STR: return repr ? write_str_repr(b, v.u.s) : tbuf_put(b, v.u.s->s, v.u.s->len);
    case TV_LIST: return write_seq(b, v.u.l, ps);
    case TV_DICT: return write_dict(b, v.u.d, ps);
    case TV_NS:
        if (tbuf_put(b, "<Namespace ", 11)) return -1;
        if (v.u.ns->d ? write_dict(b, v.u.ns->d, ps) : tbuf_put(b, "{}", 2)) return -1;
        return tbuf_putc(b, '>');
    case TV_LOOP: return tbuf_printf(b, "<LoopContext %lld/%lld>", (long long)v.u.lp->index0 + 1, (long long)v.u.lp->length);
    case TV_FUNC: return tbuf_put(b, "<built-in function>", 19);
    case TV_MACRO: {
        const char *nm = v.u.m->is_caller ? "caller" : v.u.m->def && v.u.m->def->name ? v.u.m->def->name : "?";
        return tbuf_printf(b, "<Macro '%s'>", nm);
    }
    }
    return 0;
}

int tv_write_repr(tbuf *b, tv v) {
    if (v.t != TV_LIST && v.t != TV_DICT && v.t != TV_NS) return write_v(b, v, 1, NULL);
    pstack *ps = malloc(sizeof *ps);
    if (!ps) { b->over = 2; return -1; }
    ps->n = 0;
    int r = write_v(b, v, 1, ps);
    free(ps);
    return r;
}

int tv_write_str(tbuf *b, tv v) {
    if (v.t != TV_LIST && v.t != TV_DICT && v.t != TV_NS) return write_v(b, v, 0, NULL);
    pstack *ps = malloc(sizeof *ps);
    if (!ps) { b->over = 2; return -1; }
    ps->n = 0;
    int r = write_v(b, v, 0, ps);
    free(ps);
    return r;
}

/* ------------------------------------------------------------------ JSON */

static int json_string(tbuf *b, const char *s, size_t len, int ascii) {
    if (tbuf_putc(b, '"')) return -1;
    size_t i = 0, run = 0;
    while (i < len) {
        unsigned char ch = (unsigned char)s[i];
        const char *esc = NULL;
        char tmp[16];
        if (ch == '"') esc = "\\\"";
        else if (ch == '\\') esc = "\\\\";
        else if (ch == '\n') esc = "\\n";
        else if (ch == '\r') esc = "\\r";
        else if (ch == '\t') esc = "\\t";
        else if (ch == '\b') esc = "\\b";
        else if (ch == '\f') esc = "\\f";
        else if (ch < 0x20 || (ascii && ch == 0x7F)) { snprintf(tmp, sizeof tmp, "\\u%04x", ch); esc = tmp; }
        if (esc) {
            if (tbuf_put(b, s + run, i - run) || tbuf_put(b, esc, strlen(esc))) return -1;
            i++; run = i;
            continue;
        }
        if (ascii && ch >= 0x80) {
            if (tbuf_put(b, s + run, i - run)) return -1;
            int cp = utf8_next(s, len, &i);
            int rc;
            if (cp >= 0x10000) {
                int v = cp - 0x10000;
                rc = tbuf_printf(b, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
            } else rc = tbuf_printf(b, "\\u%04x", cp);
            if (rc) return -1;
            run = i;
            continue;
        }
        i++;
    }
    if (tbuf_put(b, s + run, i - run)) return -1;
    return tbuf_putc(b, '"');
}

static int json_newline(tbuf *b, const tjson_opts *o, int level) {
    if (tbuf_putc(b, '\n')) return -1;
    if (o->indent_str) {
        for (int i = 0; i < level; i++) if (tbuf_put(b, o->indent_str, strlen(o->indent_str))) return -1;
    } else {
        for (int i = 0; i < level * o->indent; i++) if (tbuf_putc(b, ' ')) return -1;
    }
    return 0;
}

/* A dict key as json.dumps turns it into a string. */
static int json_key(tbuf *b, tv k, const tjson_opts *o, char *why, size_t whylen) {
    char num[64];
    switch (k.t) {
    case TV_STR: return json_string(b, k.u.s->s, k.u.s->len, o->ensure_ascii);
    case TV_INT: snprintf(num, sizeof num, "\"%lld\"", (long long)k.u.i); return tbuf_put(b, num, strlen(num));
    case TV_BOOL: return tbuf_put(b, k.u.b ? "\"true\"" : "\"false\"", k.u.b ? 6 : 7);
    case TV_NONE: return tbuf_put(b, "\"null\"", 6);
    case TV_FLOAT:
        if (k.u.f != k.u.f) return tbuf_put(b, "\"NaN\"", 5);
        if (isinf(k.u.f)) return k.u.f < 0 ? tbuf_put(b, "\"-Infinity\"", 11) : tbuf_put(b, "\"Infinity\"", 10);
        num[0] = '"'; tv_format_float(num + 1, sizeof num - 2, k.u.f);
        strcat(num, "\"");
        return tbuf_put(b, num, strlen(num));
    default:
        snprintf(why, whylen, "keys must be str, int, float, bool or None, not %s", tv_pytype(k));
        return -2;
    }
}

static int json_value(tbuf *b, tv v, const tjson_opts *o, int level, char *why, size_t whylen) {
    char num[64];
    int pretty = o->indent >= 0 || o->indent_str;
    const char *isep = o->item_sep ? o->item_sep : pretty ? "," : ", ";
    const char *ksep = o->key_sep ? o->key_sep : ": ";
    if (level > 500) { snprintf(why, whylen, "nesting too deep"); return -2; }
    switch (v.t) {
    case TV_NONE: return tbuf_put(b, "null", 4);
    case TV_BOOL: return v.u.b ? tbuf_put(b, "true", 4) : tbuf_put(b, "false", 5);
    case TV_INT: snprintf(num, sizeof num, "%lld", (long long)v.u.i); return tbuf_put(b, num, strlen(num));
    case TV_FLOAT:
        if (v.u.f != v.u.f) return tbuf_put(b, "NaN", 3);
        if (isinf(v.u.f)) return v.u.f < 0 ? tbuf_put(b, "-Infinity", 9) : tbuf_put(b, "Infinity", 8);
        tv_format_float(num, sizeof num, v.u.f);
        return tbuf_put(b, num, strlen(num));
    case TV_STR: return json_string(b, v.u.s->s, v.u.s->len, o->ensure_ascii);
    case TV_LIST: {
        const tlist *l = v.u.l;
        if (!l->n) return tbuf_put(b, "[]", 2);
        if (tbuf_putc(b, '[')) return -1;
        for (size_t i = 0; i < l->n; i++) {
            if (i && tbuf_put(b, isep, strlen(isep))) return -1;
            if (pretty && json_newline(b, o, level + 1)) return -1;
            int r = json_value(b, l->v[i], o, level + 1, why, whylen);
            if (r) return r;
        }
        if (pretty && json_newline(b, o, level)) return -1;
        return tbuf_putc(b, ']');
    }
    case TV_DICT: case TV_NS: {
        const tdict *d = v.t == TV_DICT ? v.u.d : v.u.ns->d;
        if (v.t == TV_NS) { snprintf(why, whylen, "Object of type Namespace is not JSON serializable"); return -2; }
        if (!d->n) return tbuf_put(b, "{}", 2);
        size_t *order = malloc(d->n * sizeof *order);
        if (!order) return -1;
        for (size_t i = 0; i < d->n; i++) order[i] = i;
        if (o->sort_keys) {
            size_t ba = 0, bb = 0;
            int sr = tv_sort_index(order, d->n, d->k, 0, &ba, &bb);
            if (sr) {
                if (sr == -1) snprintf(why, whylen, "'<' not supported between instances of '%s' and '%s'", tv_pytype(d->k[ba]), tv_pytype(d->k[bb]));
                else snprintf(why, whylen, "out of memory");
                free(order);
                return -2;
            }
        }
        int r = tbuf_putc(b, '{');
        for (size_t i = 0; !r && i < d->n; i++) {
            if (i && tbuf_put(b, isep, strlen(isep))) { r = -1; break; }
            if (pretty && json_newline(b, o, level + 1)) { r = -1; break; }
            r = json_key(b, d->k[order[i]], o, why, whylen);
            if (!r && tbuf_put(b, ksep, strlen(ksep))) r = -1;
            if (!r) r = json_value(b, d->v[order[i]], o, level + 1, why, whylen);
        }
        free(order);
        if (r) return r;
        if (pretty && json_newline(b, o, level)) return -1;
        return tbuf_putc(b, '}');
    }
    default:
        snprintf(why, whylen, "Object of type %s is not JSON serializable", tv_pytype(v));
        return -2;
    }
}

int tv_write_json(tbuf *b, tv v, const tjson_opts *o, char *why, size_t whylen) {
    why[0] = 0;
    int r = json_value(b, v, o, 0, why, whylen);
    if (r == -1 && !why[0]) snprintf(why, whylen, "output too large");
    return r ? -1 : 0;
}
