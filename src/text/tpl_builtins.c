/* tpl_builtins.c — the filters, tests, methods and global functions templates can call.
 *
 * Owns everything a chat template reaches by name: Jinja2's filters (trim, tojson as
 * transformers overrides it, length, join, default, map/select/selectattr/..., sort, ...),
 * its tests (defined, none, string, mapping, sequence, iterable, number, equalto, ...),
 * Python's str / list / dict methods as the immutable sandbox allows them (strip, split,
 * startswith, format, get, items, ... — mutating methods read as unsafe Undefined), the
 * loop's cycle(), and the globals range (capped at 100000 like the sandbox), namespace,
 * dict, raise_exception and strftime_now. Each one follows CPython / Jinja2 semantics on
 * code points, not bytes.
 *
 * Invariants: a builtin returns 0 with one new reference in *out, or -1 after tpl_fail.
 * Inputs are borrowed. raise_exception marks the context so callers can tell a template's
 * own refusal from an engine error. */
#include "text/tpl_internal.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <utf8proc.h>

#define LINE (at ? at->line : 0)

static int oom(tctx *c, const tnode *at) { return tpl_fail(c, LINE, "out of memory"); }

/* ------------------------------------------------------------------ small helpers */

static int str_of(tctx *c, const tnode *at, tv v, tv *out) {
    if (v.t == TV_STR) { *out = tv_ref(v); return 0; }
    tbuf b = {.limit = c->max_output};
    if (tv_write_str(&b, v)) { tbuf_free(&b); return tpl_fail(c, LINE, "string too long"); }
    *out = tv_str(b.p ? b.p : "", b.n);
    tbuf_free(&b);
    return out->t == TV_STR ? 0 : oom(c, at);
}

static int ret_buf(tctx *c, const tnode *at, tbuf *b, tv *out) {
    if (b->over) { tbuf_free(b); return tpl_fail(c, LINE, b->over == 2 ? "out of memory" : "string too long"); }
    if (tpl_charge(c, LINE, b->n)) { tbuf_free(b); return -1; }
    *out = tv_str(b->p ? b->p : "", b->n);
    tbuf_free(b);
    return out->t == TV_STR ? 0 : oom(c, at);
}

static int need_str(tctx *c, const tnode *at, tv v, const char *what) {
    if (v.t == TV_STR) return 0;
    if (v.t == TV_UNDEF) return tpl_fail_undef(c, LINE, v);
    return tpl_fail(c, LINE, "%s must be str, not %s", what, tv_pytype(v));
}

static int int_arg(tctx *c, const tnode *at, tv *v, int64_t def, int64_t *out, const char *what) {
    if (!v || v->t == TV_NONE) { *out = def; return 0; }
    if (v->t == TV_INT) { *out = v->u.i; return 0; }
    if (v->t == TV_BOOL) { *out = v->u.b; return 0; }
    return tpl_fail(c, LINE, "%s: an integer is required, got %s", what, tv_pytype(*v));
}

static int is_cased_upper(int cp) { return utf8proc_get_property(cp)->category == UTF8PROC_CATEGORY_LU; }
static int is_cased_lower(int cp) { return utf8proc_get_property(cp)->category == UTF8PROC_CATEGORY_LL; }
static int is_cased(int cp) {
    int k = utf8proc_get_property(cp)->category;
    return k == UTF8PROC_CATEGORY_LU || k == UTF8PROC_CATEGORY_LL || k == UTF8PROC_CATEGORY_LT ||
           utf8proc_toupper(cp) != cp || utf8proc_tolower(cp) != cp;
}

static int put_cp(tbuf *b, int cp) { char u[4]; int n = utf8_put(u, cp); return tbuf_put(b, u, (size_t)n); }

/* Case mapping with the few one-to-many mappings CPython applies that matter in practice. */
static int put_upper(tbuf *b, int cp) {
    if (cp == 0xDF) return tbuf_put(b, "SS", 2);
    return put_cp(b, utf8proc_toupper(cp));
}
static int put_lower(tbuf *b, int cp) {
    if (cp == 0x130) return tbuf_put(b, "i\xcc\x87", 3);
    return put_cp(b, utf8proc_tolower(cp));
}
static int put_title(tbuf *b, int cp) {
    if (cp == 0xDF) return tbuf_put(b, "Ss", 2);
    return put_cp(b, utf8proc_totitle(cp));
}

static int case_map(tctx *c, const tnode *at, tv s, int mode, tv *out) { /* 0 upper, 1 lower */
    tv str;
    if (str_of(c, at, s, &str)) return -1;
    tbuf b = {.limit = c->max_output};
    const char *p = str.u.s->s; size_t n = str.u.s->len, i = 0;
    while (i < n) {
        int cp = utf8_next(p, n, &i);
        if (mode == 0) put_upper(&b, cp);
        else {
            /* Greek capital sigma at the end of a word lowers to final sigma, as CPython does */
            if (cp == 0x3A3) {
                int before = 0, after = 0;
                size_t j = i;
                if (j < n) { int nx = utf8_next(p, n, &j); after = is_cased(nx); }
                if (b.n) { size_t k = b.n; while (k > 0 && ((unsigned char)b.p[k - 1] & 0xC0) == 0x80) k--; if (k > 0) k--; size_t kk = k; int pv = utf8_next(b.p, b.n, &kk); before = is_cased(pv); }
                put_cp(&b, before && !after ? 0x3C2 : 0x3C3);
            } else put_lower(&b, cp);
        }
    }
    tv_decref(str);
    return ret_buf(c, at, &b, out);
}

/* Python str.title(). */
static int py_title(tctx *c, const tnode *at, tv s, tv *out) {
    tbuf b = {.limit = c->max_output};
    const char *p = s.u.s->s; size_t n = s.u.s->len, i = 0;
    int prev = 0;
    while (i < n) {
        int cp = utf8_next(p, n, &i);
        if (prev) put_lower(&b, cp); else put_title(&b, cp);
        prev = is_cased(cp);
    }
    return ret_buf(c, at, &b, out);
}

/* Python str.capitalize(): first character title-cased, the rest lower-cased. */
static int py_capitalize(tctx *c, const tnode *at, tv s, tv *out) {
    tbuf b = {.limit = c->max_output};
    const char *p = s.u.s->s; size_t n = s.u.s->len, i = 0;
    int first = 1;
    while (i < n) {
        int cp = utf8_next(p, n, &i);
        if (first) put_title(&b, cp); else put_lower(&b, cp);
        first = 0;
    }
    return ret_buf(c, at, &b, out);
}

/* strip / lstrip / rstrip with Python's default whitespace or a set of characters. */
static int in_chars(int cp, tv *chars) {
    if (!chars) return py_isspace(cp);
    const char *p = chars->u.s->s; size_t n = chars->u.s->len, i = 0;
    while (i < n) if (utf8_next(p, n, &i) == cp) return 1;
    return 0;
}

static int py_strip(tctx *c, const tnode *at, tv s, tv *chars, int left, int right, tv *out) {
    if (chars && chars->t == TV_NONE) chars = NULL;
    if (chars && need_str(c, at, *chars, "strip arg")) return -1;
    const char *p = s.u.s->s; size_t n = s.u.s->len, b = 0, e = n;
    if (left) {
        while (b < n) { size_t k = b; int cp = utf8_next(p, n, &k); if (!in_chars(cp, chars)) break; b = k; }
    }
    if (right) {
        while (e > b) {
            size_t st = e - 1;
            while (st > b && ((unsigned char)p[st] & 0xC0) == 0x80) st--;
            size_t k = st;
            int cp = utf8_next(p, n, &k);
            if (!in_chars(cp, chars)) break;
            e = st;
        }
    }
    if (b == 0 && e == n) { *out = tv_ref(s); return 0; }
    *out = tv_str(p + b, e - b);
    return out->t == TV_STR ? 0 : oom(c, at);
}

static int push_str(tctx *c, const tnode *at, tlist *l, const char *p, size_t n) {
    tv v = tv_str(p, n);
    if (v.t != TV_STR || tlist_push(l, v)) return oom(c, at);
    return 0;
}

/* str.split / str.rsplit (sep None: runs of whitespace). */
static int py_split(tctx *c, const tnode *at, tv s, tv *sepv, tv *maxv, int from_right, tv *out) {
    int64_t maxsplit;
    if (int_arg(c, at, maxv, -1, &maxsplit, "split")) return -1;
    if (sepv && sepv->t == TV_NONE) sepv = NULL;
    if (sepv && need_str(c, at, *sepv, "separator")) return -1;
    if (sepv && sepv->u.s->len == 0) return tpl_fail(c, LINE, "empty separator");
    tlist *l = tlist_new(8);
    if (!l) return oom(c, at);
    const char *p = s.u.s->s; size_t n = s.u.s->len;
    int r = 0;
    if (!from_right) {
        if (sepv) {
            const char *sp = sepv->u.s->s; size_t sl = sepv->u.s->len, i = 0;
            for (;;) {
                const char *hit = maxsplit != 0 ? memmem(p + i, n - i, sp, sl) : NULL;
                if (!hit) { r = push_str(c, at, l, p + i, n - i); break; }
                if ((r = push_str(c, at, l, p + i, (size_t)(hit - (p + i))))) break;
                i = (size_t)(hit - p) + sl;
                if (maxsplit > 0) maxsplit--;
            }
        } else {
            size_t i = 0;
            for (;;) {
                while (i < n) { size_t k = i; if (!py_isspace(utf8_next(p, n, &k))) break; i = k; }
                if (i >= n) break;
                if (maxsplit == 0) { r = push_str(c, at, l, p + i, n - i); break; } /* the rest, as is */
                size_t j = i;
                while (j < n) { size_t k = j; if (py_isspace(utf8_next(p, n, &k))) break; j = k; }
                if ((r = push_str(c, at, l, p + i, j - i))) break;
                i = j;
                if (maxsplit > 0) maxsplit--;
            }
        }
    } else {
        /* collect from the right, then reverse */
        if (sepv) {
            const char *sp = sepv->u.s->s; size_t sl = sepv->u.s->len, e = n;
            for (;;) {
                const char *hit = NULL;
                if (maxsplit != 0 && e >= sl)
                    for (size_t k = e - sl + 1; k-- > 0;) if (!memcmp(p + k, sp, sl)) { hit = p + k; break; }
                if (!hit) { r = push_str(c, at, l, p, e); break; }
                size_t hs = (size_t)(hit - p);
                if ((r = push_str(c, at, l, p + hs + sl, e - hs - sl))) break;
                e = hs;
                if (maxsplit > 0) maxsplit--;
            }
        } else {
            size_t e = n;
            for (;;) {
                while (e > 0) { size_t st = e - 1; while (st > 0 && ((unsigned char)p[st] & 0xC0) == 0x80) st--; size_t k = st; if (!py_isspace(utf8_next(p, n, &k))) break; e = st; }
                if (e == 0) break;
                if (maxsplit == 0) { r = push_str(c, at, l, p, e); break; }
                size_t b = e;
                while (b > 0) { size_t st = b - 1; while (st > 0 && ((unsigned char)p[st] & 0xC0) == 0x80) st--; size_t k = st; if (py_isspace(utf8_next(p, n, &k))) break; b = st; }
                if ((r = push_str(c, at, l, p + b, e - b))) break;
                e = b;
                if (maxsplit > 0) maxsplit--;
            }
        }
        for (size_t i = 0; i < l->n / 2; i++) { tv t = l->v[i]; l->v[i] = l->v[l->n - 1 - i]; l->v[l->n - 1 - i] = t; }
    }
    if (r) { tv_decref(tv_list(l)); return -1; }
    *out = tv_list(l);
    return 0;
}

static int is_linebreak(int cp) {
    return cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D || cp == 0x1E ||
           cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

static int py_splitlines(tctx *c, const tnode *at, tv s, tv *keep, tv *out) {
    int keepends = keep && tv_truthy(*keep);
    tlist *l = tlist_new(8);
    if (!l) return oom(c, at);
    const char *p = s.u.s->s; size_t n = s.u.s->len, i = 0, st = 0;
    while (i < n) {
        size_t b = i;
        int cp = utf8_next(p, n, &i);
        if (!is_linebreak(cp)) continue;
        if (cp == '\r' && i < n && p[i] == '\n') i++;
        if (push_str(c, at, l, p + st, (keepends ? i : b) - st)) { tv_decref(tv_list(l)); return -1; }
        st = i;
    }
    if (st < n && push_str(c, at, l, p + st, n - st)) { tv_decref(tv_list(l)); return -1; }
    *out = tv_list(l);
    return 0;
}

static int py_replace(tctx *c, const tnode *at, tv s, tv old, tv new_, int64_t count, tv *out) {
    if (need_str(c, at, old, "replace() argument 1") || need_str(c, at, new_, "replace() argument 2")) return -1;
    const char *p = s.u.s->s; size_t n = s.u.s->len;
    const char *o = old.u.s->s; size_t ol = old.u.s->len;
    tbuf b = {.limit = c->max_output};
    if (ol == 0) { /* insert between every character */
        size_t i = 0;
        if (count != 0) { tbuf_put(&b, new_.u.s->s, new_.u.s->len); if (count > 0) count--; }
        while (i < n) {
            size_t st = i;
            utf8_next(p, n, &i);
            tbuf_put(&b, p + st, i - st);
            if (count != 0) { tbuf_put(&b, new_.u.s->s, new_.u.s->len); if (count > 0) count--; }
        }
        return ret_buf(c, at, &b, out);
    }
    size_t i = 0;
    while (i <= n) {
        const char *hit = count != 0 ? memmem(p + i, n - i, o, ol) : NULL;
        if (!hit) { tbuf_put(&b, p + i, n - i); break; }
        tbuf_put(&b, p + i, (size_t)(hit - (p + i)));
        tbuf_put(&b, new_.u.s->s, new_.u.s->len);
        i = (size_t)(hit - p) + ol;
        if (count > 0) count--;
    }
    return ret_buf(c, at, &b, out);
}

static int64_t cp_index(const char *p, size_t byte_off) {
    int64_t k = 0;
    for (size_t i = 0; i < byte_off; i++) k += ((unsigned char)p[i] & 0xC0) != 0x80;
    return k;
}

static int prefix_test(tctx *c, const tnode *at, tv s, tv *arg, int suffix, tv *out) {
    if (!arg) return tpl_fail(c, LINE, "%s() takes at least 1 argument (0 given)", suffix ? "endswith" : "startswith");
    tv one = *arg;
    size_t cnt = one.t == TV_LIST && one.u.l->tuple ? one.u.l->n : 1;
    for (size_t k = 0; k < cnt; k++) {
        tv x = one.t == TV_LIST && one.u.l->tuple ? one.u.l->v[k] : one;
        if (x.t != TV_STR)
            return tpl_fail(c, LINE, "%s first arg must be str or a tuple of str, not %s", suffix ? "endswith" : "startswith", tv_pytype(x));
        size_t xl = x.u.s->len, n = s.u.s->len;
        if (xl <= n && !memcmp(suffix ? s.u.s->s + n - xl : s.u.s->s, x.u.s->s, xl)) { *out = tv_bool(1); return 0; }
    }
    *out = tv_bool(0);
    return 0;
}

/* ------------------------------------------------------------------ formatting */

/* printf-style `fmt % args`, the subset templates use: %s %r %d %i %f %e %g %x %o %c %%. */
int tpl_percent_format(tctx *c, int line, tv fmt, tv args, tv *out) {
    const tnode *at = NULL;
    (void)at;
    tbuf b = {.limit = c->max_output};
    const char *p = fmt.u.s->s; size_t n = fmt.u.s->len, i = 0;
    size_t ai = 0;
    int tuple = args.t == TV_LIST && args.u.l->tuple;
    size_t na = tuple ? args.u.l->n : 1;
    while (i < n) {
        if (p[i] != '%') {
            size_t st = i;
            while (i < n && p[i] != '%') i++;
            tbuf_put(&b, p + st, i - st);
            continue;
        }
        i++;
        if (i < n && p[i] == '%') { tbuf_putc(&b, '%'); i++; continue; }
        tv arg;
        if (i < n && p[i] == '(') { /* %(name)s */
            size_t st = ++i;
            while (i < n && p[i] != ')') i++;
            if (i >= n || args.t != TV_DICT) { tbuf_free(&b); return tpl_fail(c, line, "format requires a mapping"); }
            tv key = tv_str(p + st, i - st);
            long k = key.t == TV_STR ? tdict_find(args.u.d, key) : -1;
            tv_decref(key);
            i++;
            if (k < 0) { tbuf_free(&b); return tpl_fail(c, line, "KeyError in %% format"); }
            arg = args.u.d->v[k];
        } else {
            if (ai >= na) { tbuf_free(&b); return tpl_fail(c, line, "not enough arguments for format string"); }
            arg = tuple ? args.u.l->v[ai] : args;
            ai++;
        }
        char spec[32]; int sl = 0;
        spec[sl++] = '%';
        while (i < n && strchr("-+ #0", p[i]) && sl < 10) spec[sl++] = p[i++];
        while (i < n && p[i] >= '0' && p[i] <= '9' && sl < 20) spec[sl++] = p[i++];
        if (i < n && p[i] == '.') { spec[sl++] = p[i++]; while (i < n && p[i] >= '0' && p[i] <= '9' && sl < 28) spec[sl++] = p[i++]; }
        if (i >= n) { tbuf_free(&b); return tpl_fail(c, line, "incomplete format"); }
        char conv = p[i++];
        if (conv == 's' || conv == 'r') {
            tbuf tmp = {.limit = c->max_output};
            if (conv == 's') tv_write_str(&tmp, arg); else tv_write_repr(&tmp, arg);
            spec[sl++] = 's'; spec[sl] = 0;
            tbuf_printf(&b, spec, tmp.p ? tmp.p : "");
            tbuf_free(&tmp);
        } else if (strchr("diouxXc", conv)) {
            if (arg.t != TV_INT && arg.t != TV_BOOL && arg.t != TV_FLOAT) {
                tbuf_free(&b);
                return tpl_fail(c, line, "%%%c format: a real number is required, not %s", conv, tv_pytype(arg));
            }
            long long v = arg.t == TV_FLOAT ? (long long)arg.u.f : arg.t == TV_INT ? (long long)arg.u.i : arg.u.b;
            if (conv == 'c') { put_cp(&b, (int)v); continue; }
            spec[sl++] = 'l'; spec[sl++] = 'l'; spec[sl++] = conv == 'i' || conv == 'u' ? 'd' : conv; spec[sl] = 0;
            tbuf_printf(&b, spec, v);
        } else if (strchr("eEfFgG", conv)) {
            if (arg.t != TV_INT && arg.t != TV_BOOL && arg.t != TV_FLOAT) {
                tbuf_free(&b);
                return tpl_fail(c, line, "must be real number, not %s", tv_pytype(arg));
            }
            double v = arg.t == TV_FLOAT ? arg.u.f : arg.t == TV_INT ? (double)arg.u.i : arg.u.b;
            spec[sl++] = conv; spec[sl] = 0;
            tbuf_printf(&b, spec, v);
        } else {
            tbuf_free(&b);
            return tpl_fail(c, line, "unsupported format character '%c'", conv);
        }
    }
    if (ai < na && args.t != TV_DICT && !(args.t == TV_LIST && !args.u.l->tuple) && args.t != TV_UNDEF) { tbuf_free(&b); return tpl_fail(c, line, "not all arguments converted during string formatting"); }
    if (b.over) { tbuf_free(&b); return tpl_fail(c, line, "string too long"); }
    *out = tv_str(b.p ? b.p : "", b.n);
    tbuf_free(&b);
    return out->t == TV_STR ? 0 : tpl_fail(c, line, "out of memory");
}

/* str.format: {} {0} {name} {name.attr} {0[key]} with !s / !r and a simple format spec. */
static int py_format(tctx *c, const tnode *at, tv fmt, targs *a, tv *out) {
    tbuf b = {.limit = c->max_output};
    const char *p = fmt.u.s->s; size_t n = fmt.u.s->len, i = 0;
    int autoi = 0;
    while (i < n) {
        char ch = p[i];
        if (ch == '{' && i + 1 < n && p[i + 1] == '{') { tbuf_putc(&b, '{'); i += 2; continue; }
        if (ch == '}' && i + 1 < n && p[i + 1] == '}') { tbuf_putc(&b, '}'); i += 2; continue; }
        if (ch == '}') { tbuf_free(&b); return tpl_fail(c, LINE, "Single '}' encountered in format string"); }
        if (ch != '{') { tbuf_putc(&b, ch); i++; continue; }
        size_t st = ++i;
        while (i < n && p[i] != '}') i++;
        if (i >= n) { tbuf_free(&b); return tpl_fail(c, LINE, "Single '{' encountered in format string"); }
        char field[128];
        size_t fl = i - st < sizeof field - 1 ? i - st : sizeof field - 1;
        memcpy(field, p + st, fl); field[fl] = 0;
        i++;
        char *spec = strchr(field, ':');
        if (spec) *spec++ = 0;
        char *conv = strchr(field, '!');
        if (conv) *conv++ = 0;
        /* the first name part */
        size_t k = strcspn(field, ".[");
        char head[128];
        memcpy(head, field, k); head[k] = 0;
        tv cur;
        if (!k) {
            tv *v = targ(a, autoi++, NULL);
            if (!v) { tbuf_free(&b); return tpl_fail(c, LINE, "Replacement index %d out of range for positional args tuple", autoi - 1); }
            cur = tv_ref(*v);
        } else if (head[0] >= '0' && head[0] <= '9') {
            int idx = atoi(head);
            tv *v = idx < a->npos ? &a->pos[idx] : NULL;
            if (!v) { tbuf_free(&b); return tpl_fail(c, LINE, "Replacement index %d out of range for positional args tuple", idx); }
            cur = tv_ref(*v);
        } else {
            tv *v = NULL;
            for (int q = 0; q < a->nkw; q++) if (!strcmp(a->kwn[q], head)) v = &a->kwv[q];
            if (!v) { tbuf_free(&b); return tpl_fail(c, LINE, "KeyError: '%s'", head); }
            cur = tv_ref(*v);
        }
        char *rest = field + k;
        while (*rest) {
            tv nx;
            int r;
            if (*rest == '.') {
                rest++;
                size_t e = strcspn(rest, ".[");
                char nm[128]; memcpy(nm, rest, e); nm[e] = 0; rest += e;
                r = tpl_getattr(c, at, cur, nm, &nx);
            } else {
                rest++;
                size_t e = strcspn(rest, "]");
                char nm[128]; memcpy(nm, rest, e); nm[e] = 0; rest += e + (rest[e] == ']');
                tv key = (nm[0] >= '0' && nm[0] <= '9') ? tv_int(atoll(nm)) : tv_cstr(nm);
                r = tpl_getitem(c, at, cur, key, &nx);
                tv_decref(key);
            }
            tv_decref(cur);
            if (r) { tbuf_free(&b); return -1; }
            cur = nx;
        }
        tbuf tmp = {.limit = c->max_output};
        if (conv && *conv == 'r') tv_write_repr(&tmp, cur);
        else if (spec && *spec && (cur.t == TV_INT || cur.t == TV_FLOAT || cur.t == TV_BOOL)) {
            /* [fill][align][width][.precision][type] for numbers */
            char f[32]; int fi = 0;
            const char *q = spec;
            char align = 0;
            if (q[0] && (q[1] == '<' || q[1] == '>' || q[1] == '^')) q += 2; /* fill ignored */
            else if (*q == '<' || *q == '>' || *q == '^') align = *q++;
            f[fi++] = '%';
            if (align == '<') f[fi++] = '-';
            if (*q == '0') f[fi++] = *q++;
            while (*q >= '0' && *q <= '9' && fi < 20) f[fi++] = *q++;
            if (*q == '.') { f[fi++] = *q++; while (*q >= '0' && *q <= '9' && fi < 26) f[fi++] = *q++; }
            char ty = *q ? *q : (cur.t == TV_FLOAT ? 'g' : 'd');
            if (ty == 'd') { f[fi++] = 'l'; f[fi++] = 'l'; f[fi++] = 'd'; f[fi] = 0; tbuf_printf(&tmp, f, (long long)(cur.t == TV_FLOAT ? cur.u.f : cur.t == TV_INT ? (double)cur.u.i : cur.u.b)); }
            else { f[fi++] = ty; f[fi] = 0; tbuf_printf(&tmp, f, cur.t == TV_FLOAT ? cur.u.f : cur.t == TV_INT ? (double)cur.u.i : (double)cur.u.b); }
        } else {
            tv_write_str(&tmp, cur);
            if (spec && *spec) { /* width / alignment for strings */
                const char *q = spec;
                char fill = ' ', align = '<';
                if (q[0] && (q[1] == '<' || q[1] == '>' || q[1] == '^')) { fill = q[0]; align = q[1]; q += 2; }
                else if (*q == '<' || *q == '>' || *q == '^') align = *q++;
                int width = atoi(q);
                tstr t0 = {0};
                (void)t0;
                int64_t len = 0;
                for (size_t z = 0; z < tmp.n; z++) len += ((unsigned char)tmp.p[z] & 0xC0) != 0x80;
                int64_t pad = width > len ? width - len : 0;
                int64_t lp = align == '>' ? pad : align == '^' ? pad / 2 : 0, rp = pad - lp;
                for (int64_t z = 0; z < lp; z++) tbuf_putc(&b, fill);
                tbuf_put(&b, tmp.p ? tmp.p : "", tmp.n);
                for (int64_t z = 0; z < rp; z++) tbuf_putc(&b, fill);
                tbuf_free(&tmp);
                tv_decref(cur);
                continue;
            }
        }
        tbuf_put(&b, tmp.p ? tmp.p : "", tmp.n);
        tbuf_free(&tmp);
        tv_decref(cur);
    }
    return ret_buf(c, at, &b, out);
}

/* ------------------------------------------------------------------ attribute paths */

/* map(attribute="a.b"), selectattr("x"), sort(attribute=...): Jinja's attrgetter. */
static int get_path(tctx *c, const tnode *at, tv item, tv path, tv *out) {
    if (path.t == TV_INT) return tpl_getitem(c, at, item, path, out);
    if (path.t != TV_STR) return tpl_fail(c, LINE, "attribute must be a string");
    tv cur = tv_ref(item);
    const char *p = path.u.s->s;
    for (;;) {
        size_t e = strcspn(p, ".");
        char nm[256];
        size_t k = e < sizeof nm - 1 ? e : sizeof nm - 1;
        memcpy(nm, p, k); nm[k] = 0;
        tv key, nx;
        int digits = k > 0;
        for (size_t z = 0; z < k; z++) if (nm[z] < '0' || nm[z] > '9') digits = 0;
        key = digits ? tv_int(atoll(nm)) : tv_cstr(nm);
        int r = tpl_getitem(c, at, cur, key, &nx);
        tv_decref(key); tv_decref(cur);
        if (r) return -1;
        cur = nx;
        if (!p[e]) break;
        p += e + 1;
    }
    *out = cur;
    return 0;
}

/* ------------------------------------------------------------------ filters */

typedef int (*filter_fn)(tctx *c, const tnode *at, tv in, targs *a, tv *out);

static int f_trim(tctx *c, const tnode *at, tv in, targs *a, tv *out) {
    tv s;
    if (str_of(c, at, in, &s)) return -1;
    int r = py_strip(c, at, s, targ(a, 0, "chars"), 1, 1, out);
    tv_decref(s);
    return r;
}

static int f_upper(tctx *c, const tnode *at, tv in, targs *a, tv *out) { (void)a; return case_map(c, at, in, 0, out); }
static int f_lower(tctx *c, const tnode *at, tv in, targs *a, tv *out) { (void)a; return case_map(c, at, in, 1, out); }

static int f_capitalize(tctx *c, const tnode *at, tv in, targs *a, tv *out) {
    (void)a;
    tv s;
    if (str_of(c, at, in, &s)) return -1;
    int r = py_capitalize(c, at, s, out);
    tv_decref(s);
    return r;
}

/* Jinja's title: words split at whitespace and -({[< ; first letter upper, rest lower. */
static int f_title(tctx *c, const tnode *at, tv in, targs *a, tv *out) {
    (void)a;
    tv s;
    if (str_of(c, at, in, &s)) return -1;
    tbuf b = {.limit = c->max_output};
    const char *p = s.u.s->s; size_t n = s.u.s->len, i = 0;
    int start = 1;
    while (i < n) {
        int cp = utf8_next(p, n, &i);
        int sep = py_isspace(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
        if (sep) { put_cp(&b, cp); start = 1; continue; }
        if (start) put_upper(&b, cp); else put_lower(&b, cp);
        start = 0;
    }
    tv_decref(s);
    return ret_buf(c, at, &b, out);
}

static int f_replace(tctx *c, const tnode *at, tv in, targs *a, tv *out) {
    tv *o = targ(a, 0, "old"), *nw = targ(a, 1, "new"), *cnt = targ(a, 2, "count");
    if (!o || !nw) return tpl_fail(c, LINE, "replace() needs old and new");
    int64_t count;
    if (int_arg(c, at, cnt, -1, &count, "replace")) return -1;
    tv s, os, ns;
    if (str_of(c, at, in, &s)) return -1;
    if (str_of(c, at, *o, &os)) { tv_decref(s); return -1; }
    if (str_of(c, at, *nw, &ns)) { tv_decref(s); tv_decref(os); return -1; }
    int r = py_replace(c, at, s, os, ns, count, out);
    tv_decref(s); tv_decref(os); tv_decref(ns);
    return r;
}

static int length_of(tctx *c, const tnode *at, tv in, int64_t *n) {
    switch (in.t) {
    case TV_STR: *n = (int64_t)tstr_ncp(in.u.s); return 0;
    case TV_LIST: *n = (int64_t)in.u.l->n; return 0;
    case TV_DICT: *n = (int64_t)in.u.d->n; return 0;
    case TV_UNDEF: *n = 0; return 0;
    default: return tpl_fail(c, LINE, "object of type '%s' has no len()", tv_pytype(in));
    }
}

static int f_length(tctx *c, const tnode *at, tv in, targs *a, tv *out) {
    (void)a;
    int64_t n = 0;
    if (length_of(c, at, in, &n)) return -1;
    *out = tv_int(n);
    return 0;
}

static int f_list(tctx *c, const tnode *at, tv in, targs *a, tv *out) {
    (void)a;
    tlist *l;
    if (tpl_to_list(c, at, in, &l)) return -1;
    if (l->tuple || (in.t == TV_LIST && l == in.u.l)) { /* a fresh list, never a tuple */
        tlist *m = tlist_new(l->n);
        if (!m) { tv_decref(tv_list(l)); return oom(c, at); }
        for (size_t i = 0; i < l->n; i++) tlist_push(m, tv_ref(l->v[i]));
        tv_decref(tv_list(l));
        l = m;
    }
    *out = tv_list(l);
    return 0;
}

static int f_first(tctx *c, const tnode *at, tv in, targs *a, tv *out) {
    (void)a;
    tlist *l;
    if (tpl_to_list(c, at, in, &l)) return -1;
    *out = l->n ? tv_ref(l->v[0]) : tv_undef_hint("No first item, sequence was empty.");
    tv_decref(tv_list(l));
    return 0;
}

static int f_last(tctx *c, const tnode *at, tv in, targs *a, tv *out) {
    (void)a;
    tlist *l;
    if (tpl_to_list(c, at, in, &l)) return -1;
    *out = l->n ? tv_ref(l->v[l->n - 1]) : tv_undef_hint("No last item, sequence was empty.");
    tv_decref(tv_list(l));
    return 0;
}

static int f_join(tctx *c, const tnode *at, tv in, targs *a, tv *out) {
    tv *sep = targ(a, 0, "d"), *attr = targ(a, 1, "attribute");
    tlist *l;
    if (tpl_to_list(c, at, in, &l)) return -1;
    tbuf b = {.limit = c->max_output};
    tv sepstr = tv_undef();
    int r = 0;
    if (sep && (r = str_of(c, at, *sep, &sepstr))) { tv_decref(tv_list(l)); return -1; }
    for (size_t i = 0; i < l->n && !r; i++) {
        if (i && sep) tbuf_put(&b, sepstr.u.s->s, sepstr.u.s->len);
        if (attr && attr->t != TV_NONE) {
            tv v;
            if ((r = get_path(c, at, l->v[i], *attr, &v))) break;
            tv_write_str(&b, v);
            tv_decref(v);
        } else tv_write_str(&b, l->v[i]);
    }
    tv_decref(sepstr);
    tv_decref(tv_list(l));
    if (r) { tbuf_free(&b); return -1; }
    return ret_buf(c, at, &b, out);
}

static int f_default(tctx *c, const tnode *at, tv in, targs *a, tv *out) {
    (void)c; (void)at;
    tv *d = targ(a, 0, "default_value"), *boolean = targ(a, 1, "boolean");
    int use = in.t == TV_UNDEF || (boolean && tv_truthy(*boolean) && !tv_truthy(in));
    if (use) *out = d ? tv_ref(*d) : tv_str("", 0);
    else *out = tv_ref(in);
    return 0;
}

static int f_items(tctx *c, const tnode *at, tv in, targs *a, tv *out) {
    (void)a;
    if (in.t == TV_UNDEF) { tlist *l = tlist_new(0); if (!l) return oom(c, at); *out = tv_list(l); return 0; }
    if (in.t != TV_DICT) return tpl_fail(c, LINE, "Can only get item pairs from a mapping.");
    tlist *l = tlist_new(in.u.d->n);
    if (!l) return oom(c, at);
    for (size_t i = 0; i < in.u.d->n; i++) {
        tlist *p = tlist_new(2);
        if (!p) { tv_decref(tv_list(l)); return oom(c, at); }
        p->tuple = 1;
        tlist_push(p, tv_ref(in.u.d->k[i])); tlist_push(p, tv_ref(in.u.d->v[i]));
        tlist_push(l, tv_list(p));
    }
    *out = tv_list(l);
    return 0;
}

static int f_string(tctx *c, const tnode *at, tv in, targs *a, tv *out) { (void)a; return str_of(c, at, in, out); }
static int f_safe(tctx *c, const tnode *at, tv in, targs *a, tv *out) { (void)a; return str_of(c, at, in, out); }

static int f_escape(tctx *c, const tnode *at, tv in, targs *a, tv *out) {
    (void)a;
    tv s;
    if (str_of(c, at, in, &s)) return -1;
    tbuf b = {.limit = c->max_output};
    for (size_t i = 0; i < s.u.s->len; i++) {
        char ch = s.u.s->s[i];
        switch (ch) {
        case '&': tbuf_put(&b, "&amp;", 5); break;
        case '<': tbuf_put(&b, "&lt;", 4); break;
        case '>': tbuf_put(&b, "&gt;", 4); break;
        case '"': tbuf_put(&b, "&#34;", 5); break;
        case '\'': tbuf_put(&b, "&#39;", 5); break;
        default: tbuf_putc(&b, ch);
        }
    }
    tv_decref(s);
    return ret_buf(c, at, &b, out);
}

static int f_tojson(tctx *c, const tnode *at, tv in, targs *a, tv *out) {
    tv *ea = targ(a, 0, "ensure_ascii"), *ind = targ(a, 1, "indent"), *sep = targ(a, 2, "separators"), *sk = targ(a, 3, "sort_keys");
    tjson_opts o = {.ensure_ascii = ea ? tv_truthy(*ea) : 0, .indent = -1, .sort_keys = sk ? tv_truthy(*sk) : 0};
    /* transformers' signature: tojson(x, ensure_ascii=False, indent=None, separators=None,
       sort_keys=False) — a positional argument is ensure_ascii, as there */
    if (ind && ind->t != TV_NONE) {
        if (ind->t == TV_INT || ind->t == TV_BOOL) o.indent = (int)(ind->t == TV_INT ? (ind->u.i < 0 ? 0 : ind->u.i > 64 ? 64 : ind->u.i) : ind->u.b);
        else if (ind->t == TV_STR) o.indent_str = ind->u.s->s;
        else return tpl_fail(c, LINE, "tojson: indent must be an integer or a string");
    }
    if (sep && sep->t != TV_NONE) {
        if (sep->t != TV_LIST || sep->u.l->n != 2 || sep->u.l->v[0].t != TV_STR || sep->u.l->v[1].t != TV_STR)
            return tpl_fail(c, LINE, "tojson: separators must be a pair of strings");
        o.item_sep = sep->u.l->v[0].u.s->s;
        o.key_sep = sep->u.l->v[1].u.s->s;
    }
    tbuf b = {.limit = c->max_output};
    char why[200];
    if (tv_write_json(&b, in, &o, why, sizeof why)) {
        tbuf_free(&b);
        if (in.t == TV_UNDEF && in.u.s) return tpl_fail_undef(c, LINE, in);
        return tpl_fail(c, LINE, "%s", why);
    }
    return ret_buf(c, at, &b, out);
}

static int parse_int_str(const char *s, int64_t base, int64_t *out) {
    while (py_isspace((unsigned char)*s)) s++;
    int neg = 0;
    if (*s == '+' || *s == '-') neg = *s++ == '-';
    if (base == 16 && s[0] == '0' && (s[1] | 0x20) == 'x') s += 2;
    else if (base == 8 && s[0] == '0' && (s[1] | 0x20) == 'o') s += 2;
    else if (base == 2 && s[0] == '0' && (s[1] | 0x20) == 'b') s += 2;
    if (!*s) return -1;
    int64_t v = 0;
    int nd = 0;
    for (; *s; s++) {
        if (*s == '_' && nd && s[1] && s[1] != '_') continue;
        int d = *s >= '0' && *s <= '9' ? *s - '0' : (*s | 0x20) >= 'a' && (*s | 0x20) <= 'z' ? (*s | 0x20) - 'a' + 10 : 99;
        if (d >= base) break;
        if (v > (INT64_MAX - d) / base) return -1;
        v = v * base + d;
        nd++;
    }
    while (py_isspace((unsigned char)*s)) s++;
    if (*s || !nd) return -1;
    *out = neg ? -v : v;
    return 0;
}

static int parse_float_str(const char *s, double *out) {
    while (py_isspace((unsigned char)*s)) s++;
    if (!*s) return -1;
    char *end;
    double v = strtod(s, &end);
    if (end == s) return -1;
    while (py_isspace((unsigned char)*end)) end++;
    if (*end) return -1;
    *out = v;
    return 0;
}

static int f_int(tctx *c, const tnode *at, tv in, targs *a, tv *out) {
    tv *d = targ(a, 0, "default"), *bv = targ(a, 1, "base");
    int64_t base;
    if (int_arg(c, at, bv, 10, &base, "int")) return -1;
    if (in.t == TV_UNDEF) return tpl_fail_undef(c, LINE, in);
    switch (in.t) {
    case TV_INT: *out = in; return 0;
    case TV_BOOL: *out = tv_int(in.u.b); return 0;
    case TV_FLOAT:
        if (in.u.f == in.u.f && fabs(in.u.f) < 9.2e18) { *out = tv_int((int64_t)in.u.f); return 0; }
        break;
    case TV_STR: {
        int64_t v; double f;
        if (!parse_int_str(in.u.s->s, base, &v)) { *out = tv_int(v); return 0; }
        if (!parse_float_str(in.u.s->s, &f) && f == f && fabs(f) < 9.2e18) { *out = tv_int((int64_t)f); return 0; }
        break;
    }
    default: break;
    }
    *out = d ? tv_ref(*d) : tv_int(0);
    return 0;
}

static int f_float(tctx *c, const tnode *at, tv in, targs *a, tv *out) {
    tv *d = targ(a, 0, "default");
    double f;
    if (in.t == TV_UNDEF) return tpl_fail_undef(c, LINE, in);
    switch (in.t) {
    case TV_INT: *out = tv_float((double)in.u.i); return 0;
    case TV_BOOL: *out = tv_float(in.u.b); return 0;
    case TV_FLOAT: *out = in; return 0;
    case TV_STR: if (!parse_float_str(in.u.s->s, &f)) { *out = tv_float(f); return 0; } break;
    default: break;
    }
    *out = d ? tv_ref(*d) : tv_float(0.0);
    return 0;
}

static int f_abs(tctx *c, const tnode *at, tv in, targs *a, tv *out) {
    (void)a;
    if (in.t == TV_INT) { if (in.u.i == INT64_MIN) return tpl_fail(c, LINE, "integer overflow"); *out = tv_int(in.u.i < 0 ? -in.u.i : in.u.i); return 0; }
    if (in.t == TV_BOOL) { *out = tv_int(in.u.b); return 0; }
    if (in.t == TV_FLOAT) { *out = tv_float(fabs(in.u.f)); return 0; }
    return tpl_fail(c, LINE, "bad operand type for abs(): '%s'", tv_pytype(in));
}

static int f_round(tctx *c, const tnode *at, tv in, targs *a, tv *out) {
    tv *pv = targ(a, 0, "precision"), *mv = targ(a, 1, "method");
    int64_t prec;
    if (int_arg(c, at, pv, 0, &prec, "round")) return -1;
    if (in.t != TV_INT && in.t != TV_FLOAT && in.t != TV_BOOL) return tpl_fail(c, LINE, "round: a number is required, not %s", tv_pytype(in));
    double v = in.t == TV_FLOAT ? in.u.f : in.t == TV_INT ? (double)in.u.i : in.u.b;
    const char *m = mv && mv->t == TV_STR ? mv->u.s->s : "common";
    if (!strcmp(m, "common") && in.t != TV_FLOAT && prec >= 0) { *out = tv_int(in.t == TV_INT ? in.u.i : in.u.b); return 0; }
    double sc = pow(10.0, (double)prec);
    double r;
    if (!strcmp(m, "common")) {
        /* Python's round(): half to even on the exact binary value */
        if (prec <= 0 || prec > 300 || !isfinite(v)) r = prec <= 0 ? nearbyint(v * sc) / sc : v;
        else { char tmp[400]; snprintf(tmp, sizeof tmp, "%.*f", (int)prec, v); r = strtod(tmp, NULL); }
    }
    else if (!strcmp(m, "floor")) r = floor(v * sc) / sc;
    else if (!strcmp(m, "ceil")) r = ceil(v * sc) / sc;
    else return tpl_fail(c, LINE, "method must be common, ceil or floor");
    *out = tv_float(r);
    return 0;
}

static int f_reverse(tctx *c, const tnode *at, tv in, targs *a, tv *out) {
    (void)a;
    if (in.t == TV_STR) {
        tbuf b = {.limit = c->max_output};
        const char *p = in.u.s->s; size_t e = in.u.s->len;
        while (e > 0) {
            size_t st = e - 1;
            while (st > 0 && ((unsigned char)p[st] & 0xC0) == 0x80) st--;
            tbuf_put(&b, p + st, e - st);
            e = st;
        }
        return ret_buf(c, at, &b, out);
    }
    tlist *l;
    if (tpl_to_list(c, at, in, &l)) return -1;
    tlist *r = tlist_new(l->n);
    if (!r) { tv_decref(tv_list(l)); return oom(c, at); }
    for (size_t i = l->n; i-- > 0;) tlist_push(r, tv_ref(l->v[i]));
    tv_decref(tv_list(l));
    *out = tv_list(r);
    return 0;
}

/* Sort keys: case-insensitive strings unless case_sensitive. */
static int sort_key(tctx *c, const tnode *at, tv item, tv *attr, int cs, tv *out) {
    tv v;
    if (attr && attr->t != TV_NONE) { if (get_path(c, at, item, *attr, &v)) return -1; }
    else v = tv_ref(item);
    if (!cs && v.t == TV_STR) {
        int r = case_map(c, at, v, 1, out);
        tv_decref(v);
        return r;
    }
    *out = v;
    return 0;
}

static int sort_list(tctx *c, const tnode *at, tlist *items, tlist *keys, int reverse) {
    size_t n = items->n;
    if (n < 2) return 0;
    size_t *idx = malloc(n * sizeof *idx);
    tv *vi = malloc(n * sizeof *vi), *vk = malloc(n * sizeof *vk);
    if (!idx || !vi || !vk) { free(idx); free(vi); free(vk); return oom(c, at); }
    for (size_t i = 0; i < n; i++) idx[i] = i;
    size_t ba = 0, bb = 0;
    int r = tv_sort_index(idx, n, keys->v, reverse, &ba, &bb);
    if (!r) {
        for (size_t i = 0; i < n; i++) { vi[i] = items->v[idx[i]]; vk[i] = keys->v[idx[i]]; }
        memcpy(items->v, vi, n * sizeof *vi);
        memcpy(keys->v, vk, n * sizeof *vk);
    }
    free(idx); free(vi); free(vk);
    if (r == -2) return oom(c, at);
    if (r) return tpl_fail(c, LINE, "'<' not supported between instances of '%s' and '%s'", tv_pytype(keys->v[ba]), tv_pytype(keys->v[bb]));
    return 0;
}

static int sorted_copy(tctx *c, const tnode *at, tv in, tv *attr, int cs, int reverse, tlist **out) {
    tlist *l;
    if (tpl_to_list(c, at, in, &l)) return -1;
    tlist *items = tlist_new(l->n), *keys = tlist_new(l->n);
    int r = items && keys ? 0 : oom(c, at);
    for (size_t i = 0; i < l->n && !r; i++) {
        tv k;
        if ((r = sort_key(c, at, l->v[i], attr, cs, &k))) break;
        tlist_push(items, tv_ref(l->v[i]));
        tlist_push(keys, k);
    }
    tv_decref(tv_list(l));
    if (!r) r = sort_list(c, at, items, keys, reverse);
    if (keys) tv_decref(tv_list(keys));
    if (r) { if (items) tv_decref(tv_list(items)); return -1; }
    *out = items;
    return 0;
}

static int f_sort(tctx *c, const tnode *at, tv in, targs *a, tv *out) {
    tv *rv = targ(a, 0, "reverse"), *cs = targ(a, 1, "case_sensitive"), *attr = targ(a, 2, "attribute");
    tlist *l;
    if (sorted_copy(c, at, in, attr, cs && tv_truthy(*cs), rv && tv_truthy(*rv), &l)) return -1;
    *out = tv_list(l);
    return 0;
}

static int f_dictsort(tctx *c, const tnode *at, tv in, targs *a, tv *out) {
    tv *csv = targ(a, 0, "case_sensitive"), *by = targ(a, 1, "by"), *rv = targ(a, 2, "reverse");
    tv pairs;
    if (f_items(c, at, in, a, &pairs)) return -1;
    int byval = by && by->t == TV_STR && !strcmp(by->u.s->s, "value");
    tv path = tv_int(byval ? 1 : 0);
    tlist *l;
    int r = sorted_copy(c, at, pairs, &path, csv && tv_truthy(*csv), rv && tv_truthy(*rv), &l);
    tv_decref(pairs);
    if (r) return -1;
    *out = tv_list(l);
    return 0;
}

static int hashable_d(tv k, int depth) {
    if (k.t == TV_DICT || k.t == TV_NS || k.t == TV_LOOP || depth > 500) return 0;
    if (k.t == TV_LIST) {
        if (!k.u.l->tuple) return 0;
        for (size_t i = 0; i < k.u.l->n; i++) if (!hashable_d(k.u.l->v[i], depth + 1)) return 0;
    }
    return 1;
}
static int hashable(tv k) { return hashable_d(k, 0); }

static int f_unique(tctx *c, const tnode *at, tv in, targs *a, tv *out) {
    tv *cs = targ(a, 0, "case_sensitive"), *attr = targ(a, 1, "attribute");
    tlist *l;
    if (tpl_to_list(c, at, in, &l)) return -1;
    tlist *res = tlist_new(l->n);
    tdict *seen = tdict_new(); /* keys already taken (hashable, checked below) */
    int r = res && seen ? 0 : oom(c, at);
    for (size_t i = 0; i < l->n && !r; i++) {
        tv k;
        if ((r = sort_key(c, at, l->v[i], attr, cs && tv_truthy(*cs), &k))) break;
        if (!hashable(k)) {
            r = tpl_fail(c, LINE, "unhashable type: '%s'", tv_pytype(k));
            tv_decref(k);
            break;
        }
        if (tdict_find(seen, k) >= 0) { tv_decref(k); continue; }
        if (tdict_set(seen, k, tv_none())) { r = oom(c, at); break; }
        tlist_push(res, tv_ref(l->v[i]));
    }
    tv_decref(tv_list(l));
    if (seen) tv_decref(tv_dict(seen));
    if (r) { if (res) tv_decref(tv_list(res)); return -1; }
    *out = tv_list(res);
    return 0;
}

static int minmax(tctx *c, const tnode *at, tv in, targs *a, int want_max, tv *out) {
    tv *cs = targ(a, 0, "case_sensitive"), *attr = targ(a, 1, "attribute");
    tlist *l;
    if (sorted_copy(c, at, in, attr, cs && tv_truthy(*cs), 0, &l)) return -1;
    if (!l->n) *out = tv_undef_hint("No aggregated item, sequence was empty.");
    else *out = tv_ref(l->v[want_max ? l->n - 1 : 0]);
    tv_decref(tv_list(l));
    return 0;
}
static int f_max(tctx *c, const tnode *at, tv in, targs *a, tv *out) { return minmax(c, at, in, a, 1, out); }
static int f_min(tctx *c, const tnode *at, tv in, targs *a, tv *out) { return minmax(c, at, in, a, 0, out); }

int tpl_binop_add(tctx *c, int line, tv a, tv b, tv *out);

static int f_sum(tctx *c, const tnode *at, tv in, targs *a, tv *out) {
    tv *attr = targ(a, 0, "attribute"), *start = targ(a, 1, "start");
    tlist *l;
    if (tpl_to_list(c, at, in, &l)) return -1;
    tv acc = start ? tv_ref(*start) : tv_int(0);
    int r = 0;
    for (size_t i = 0; i < l->n && !r; i++) {
        tv v, nx;
        if (attr && attr->t != TV_NONE) { if ((r = get_path(c, at, l->v[i], *attr, &v))) break; }
        else v = tv_ref(l->v[i]);
        r = tpl_binop_add(c, LINE, acc, v, &nx);
        tv_decref(v);
        if (!r) { tv_decref(acc); acc = nx; }
    }
    tv_decref(tv_list(l));
    if (r) { tv_decref(acc); return -1; }
    *out = acc;
    return 0;
}

/* map / select / reject / selectattr / rejectattr */
static int call_named_filter(tctx *c, const tnode *at, const char *name, tv in, targs *rest, tv *out) {
    int idx = tpl_filter_index(name);
    if (idx < 0) return tpl_fail(c, LINE, "no filter named '%s'", name);
    return tpl_call_filter(c, at, idx, in, rest, out);
}

/* Jinja's map / select family yields nothing for a falsy input (None, 0, "", undefined). */
static int empty_if_falsy(tctx *c, const tnode *at, tv in, tv *out) {
    if (tv_truthy(in)) return 0;
    tlist *l = tlist_new(0);
    if (!l) return oom(c, at);
    *out = tv_list(l);
    return 1;
}

static int f_map(tctx *c, const tnode *at, tv in, targs *a, tv *out) {
    tv *attr = targ(a, -1, "attribute"), *def = targ(a, -1, "default");
    int e = empty_if_falsy(c, at, in, out);
    if (e) return e < 0 ? -1 : 0;
    tlist *l;
    if (tpl_to_list(c, at, in, &l)) return -1;
    tlist *res = tlist_new(l->n);
    int r = res ? 0 : oom(c, at);
    if (!r && !attr && a->npos < 1) r = tpl_fail(c, LINE, "map requires a filter argument");
    if (!r && !attr && a->pos[0].t != TV_STR) r = tpl_fail(c, LINE, "map: the filter name must be a string");
    for (size_t i = 0; i < l->n && !r; i++) {
        tv v;
        if (attr) {
            r = get_path(c, at, l->v[i], *attr, &v);
            if (!r && v.t == TV_UNDEF && def) { tv_decref(v); v = tv_ref(*def); }
        } else {
            targs rest = {.pos = a->pos + 1, .npos = a->npos - 1, .kwn = a->kwn, .kwv = a->kwv, .nkw = a->nkw};
            r = call_named_filter(c, at, a->pos[0].u.s->s, l->v[i], &rest, &v);
        }
        if (!r) tlist_push(res, v);
    }
    tv_decref(tv_list(l));
    if (r) { if (res) tv_decref(tv_list(res)); return -1; }
    *out = tv_list(res);
    return 0;
}

static int do_select(tctx *c, const tnode *at, tv in, targs *a, int by_attr, int keep, tv *out) {
    int e = empty_if_falsy(c, at, in, out);
    if (e) return e < 0 ? -1 : 0;
    tlist *l;
    if (tpl_to_list(c, at, in, &l)) return -1;
    tlist *res = tlist_new(l->n);
    int r = res ? 0 : oom(c, at);
    int ti = by_attr ? 1 : 0;
    if (!r && by_attr && (a->npos < 1 || (a->pos[0].t != TV_STR && a->pos[0].t != TV_INT))) r = tpl_fail(c, LINE, "selectattr needs an attribute name");
    int test = -1;
    if (!r && a->npos > ti) {
        if (a->pos[ti].t != TV_STR) r = tpl_fail(c, LINE, "the test name must be a string");
        else if ((test = tpl_test_index(a->pos[ti].u.s->s)) < 0) r = tpl_fail(c, LINE, "no test named '%s'", a->pos[ti].u.s->s);
    }
    for (size_t i = 0; i < l->n && !r; i++) {
        tv v;
        if (by_attr) { if ((r = get_path(c, at, l->v[i], a->pos[0], &v))) break; }
        else v = tv_ref(l->v[i]);
        int ok;
        if (test >= 0) {
            targs rest = {.pos = a->pos + ti + 1, .npos = a->npos - ti - 1};
            r = tpl_call_test(c, at, test, v, &rest, &ok);
        } else ok = tv_truthy(v);
        tv_decref(v);
        if (!r && (ok != 0) == keep) tlist_push(res, tv_ref(l->v[i]));
    }
    tv_decref(tv_list(l));
    if (r) { if (res) tv_decref(tv_list(res)); return -1; }
    *out = tv_list(res);
    return 0;
}
static int f_select(tctx *c, const tnode *at, tv in, targs *a, tv *out) { return do_select(c, at, in, a, 0, 1, out); }
static int f_reject(tctx *c, const tnode *at, tv in, targs *a, tv *out) { return do_select(c, at, in, a, 0, 0, out); }
static int f_selectattr(tctx *c, const tnode *at, tv in, targs *a, tv *out) { return do_select(c, at, in, a, 1, 1, out); }
static int f_rejectattr(tctx *c, const tnode *at, tv in, targs *a, tv *out) { return do_select(c, at, in, a, 1, 0, out); }

static int f_attr(tctx *c, const tnode *at, tv in, targs *a, tv *out) {
    tv *n = targ(a, 0, "name");
    if (!n || n->t != TV_STR) return tpl_fail(c, LINE, "attr needs a name");
    return tpl_getattr(c, at, in, n->u.s->s, out);
}

static int f_indent(tctx *c, const tnode *at, tv in, targs *a, tv *out) {
    tv *wv = targ(a, 0, "width"), *fv = targ(a, 1, "first"), *bv = targ(a, 2, "blank");
    tv s, ind;
    /* Jinja appends "\n" to the value itself, so only strings work */
    if (in.t == TV_UNDEF) return tpl_fail_undef(c, LINE, in);
    if (in.t != TV_STR) return tpl_fail(c, LINE, "unsupported operand type(s) for +=: '%s' and 'str'", tv_pytype(in));
    if (str_of(c, at, in, &s)) return -1;
    if (wv && wv->t == TV_STR) ind = tv_ref(*wv);
    else {
        int64_t w;
        if (int_arg(c, at, wv, 4, &w, "indent")) { tv_decref(s); return -1; }
        if (w < 0) w = 0;
        if (w > 1024) w = 1024;
        char sp[1025];
        memset(sp, ' ', (size_t)w);
        ind = tv_str(sp, (size_t)w);
    }
    int first = fv && tv_truthy(*fv), blank = bv && tv_truthy(*bv);
    tbuf b = {.limit = c->max_output};
    const char *p = s.u.s->s; size_t n = s.u.s->len, i = 0;
    int lineno = 0;
    while (i <= n) {
        size_t e = i;
        while (e < n && p[e] != '\n') e++;
        int empty = e == i;
        if ((lineno > 0 || first) && (blank || !empty)) tbuf_put(&b, ind.u.s->s, ind.u.s->len);
        tbuf_put(&b, p + i, e - i);
        if (e >= n) break;
        tbuf_putc(&b, '\n');
        i = e + 1;
        lineno++;
    }
    tv_decref(s); tv_decref(ind);
    return ret_buf(c, at, &b, out);
}

static int f_center(tctx *c, const tnode *at, tv in, targs *a, tv *out) {
    int64_t w;
    if (int_arg(c, at, targ(a, 0, "width"), 80, &w, "center")) return -1;
    tv s;
    if (str_of(c, at, in, &s)) return -1;
    int64_t len = (int64_t)tstr_ncp(s.u.s);
    if (w > 1 << 20) w = 1 << 20;
    int64_t pad = w > len ? w - len : 0;
    int64_t left = pad / 2 + (pad & w & 1);
    tbuf b = {.limit = c->max_output};
    for (int64_t i = 0; i < left; i++) tbuf_putc(&b, ' ');
    tbuf_put(&b, s.u.s->s, s.u.s->len);
    for (int64_t i = 0; i < pad - left; i++) tbuf_putc(&b, ' ');
    tv_decref(s);
    return ret_buf(c, at, &b, out);
}

static int f_wordcount(tctx *c, const tnode *at, tv in, targs *a, tv *out) {
    (void)a;
    tv s;
    if (str_of(c, at, in, &s)) return -1;
    int64_t n = 0; int inw = 0;
    size_t i = 0;
    while (i < s.u.s->len) {
        int cp = utf8_next(s.u.s->s, s.u.s->len, &i);
        int w = cp == '_' || (cp < 128 ? ((cp | 32) >= 'a' && (cp | 32) <= 'z') || (cp >= '0' && cp <= '9') : !py_isspace(cp));
        if (w && !inw) n++;
        inw = w;
    }
    tv_decref(s);
    *out = tv_int(n);
    return 0;
}

static int f_batch(tctx *c, const tnode *at, tv in, targs *a, tv *out) {
    int64_t k;
    if (int_arg(c, at, targ(a, 0, "linecount"), 1, &k, "batch")) return -1;
    if (k <= 0) return tpl_fail(c, LINE, "batch: linecount must be positive");
    tv *fill = targ(a, 1, "fill_with");
    tlist *l;
    if (tpl_to_list(c, at, in, &l)) return -1;
    tlist *res = tlist_new(0), *cur = NULL;
    if (!res) { tv_decref(tv_list(l)); return oom(c, at); }
    for (size_t i = 0; i < l->n; i++) {
        if (!cur) cur = tlist_new((size_t)k);
        if (!cur) break;
        tlist_push(cur, tv_ref(l->v[i]));
        if ((int64_t)cur->n == k) { tlist_push(res, tv_list(cur)); cur = NULL; }
    }
    if (cur) {
        while (fill && fill->t != TV_NONE && (int64_t)cur->n < k) tlist_push(cur, tv_ref(*fill));
        tlist_push(res, tv_list(cur));
    }
    tv_decref(tv_list(l));
    *out = tv_list(res);
    return 0;
}

static int f_format(tctx *c, const tnode *at, tv in, targs *a, tv *out) {
    tv s;
    if (str_of(c, at, in, &s)) return -1;
    tv args;
    int r;
    if (a->nkw) {
        tdict *d = tdict_new();
        if (!d) { tv_decref(s); return oom(c, at); }
        for (int i = 0; i < a->nkw; i++) tdict_set(d, tv_cstr(a->kwn[i]), tv_ref(a->kwv[i]));
        args = tv_dict(d);
    } else {
        tlist *l = tlist_new((size_t)a->npos);
        if (!l) { tv_decref(s); return oom(c, at); }
        l->tuple = 1;
        for (int i = 0; i < a->npos; i++) tlist_push(l, tv_ref(a->pos[i]));
        args = tv_list(l);
    }
    r = tpl_percent_format(c, LINE, s, args, out);
    tv_decref(args); tv_decref(s);
    return r;
}

static const struct { const char *name; filter_fn fn; } FILTERS[] = {
    {"abs", f_abs}, {"attr", f_attr}, {"batch", f_batch}, {"capitalize", f_capitalize},
    {"center", f_center}, {"count", f_length}, {"d", f_default}, {"default", f_default},
    {"dictsort", f_dictsort}, {"e", f_escape}, {"escape", f_escape}, {"first", f_first},
    {"float", f_float}, {"format", f_format}, {"indent", f_indent}, {"int", f_int},
    {"items", f_items}, {"join", f_join}, {"last", f_last}, {"length", f_length},
    {"list", f_list}, {"lower", f_lower}, {"map", f_map}, {"max", f_max}, {"min", f_min},
    {"reject", f_reject}, {"rejectattr", f_rejectattr}, {"replace", f_replace},
    {"reverse", f_reverse}, {"round", f_round}, {"safe", f_safe}, {"select", f_select},
    {"selectattr", f_selectattr}, {"sort", f_sort}, {"string", f_string}, {"sum", f_sum},
    {"title", f_title}, {"tojson", f_tojson}, {"trim", f_trim}, {"unique", f_unique},
    {"upper", f_upper}, {"wordcount", f_wordcount},
};

int tpl_filter_index(const char *name) {
    for (int i = 0; i < (int)(sizeof FILTERS / sizeof *FILTERS); i++) if (!strcmp(FILTERS[i].name, name)) return i;
    return -1;
}

int tpl_call_filter(tctx *c, const tnode *at, int idx, tv in, targs *a, tv *out) {
    if (idx < 0 || idx >= (int)(sizeof FILTERS / sizeof *FILTERS)) return tpl_fail(c, LINE, "bad filter");
    return FILTERS[idx].fn(c, at, in, a, out);
}

/* ------------------------------------------------------------------ tests */

typedef int (*test_fn)(tctx *c, const tnode *at, tv in, targs *a, int *out);

static int t_defined(tctx *c, const tnode *at, tv in, targs *a, int *o) { (void)c; (void)at; (void)a; *o = in.t != TV_UNDEF; return 0; }
static int t_undefined(tctx *c, const tnode *at, tv in, targs *a, int *o) { (void)c; (void)at; (void)a; *o = in.t == TV_UNDEF; return 0; }
static int t_none(tctx *c, const tnode *at, tv in, targs *a, int *o) { (void)c; (void)at; (void)a; *o = in.t == TV_NONE; return 0; }
static int t_string(tctx *c, const tnode *at, tv in, targs *a, int *o) { (void)c; (void)at; (void)a; *o = in.t == TV_STR; return 0; }
static int t_mapping(tctx *c, const tnode *at, tv in, targs *a, int *o) { (void)c; (void)at; (void)a; *o = in.t == TV_DICT; return 0; }
static int t_sequence(tctx *c, const tnode *at, tv in, targs *a, int *o) {
    (void)c; (void)at; (void)a;
    *o = in.t == TV_STR || in.t == TV_LIST || in.t == TV_DICT || in.t == TV_UNDEF;
    return 0;
}
static int t_iterable(tctx *c, const tnode *at, tv in, targs *a, int *o) {
    (void)c; (void)at; (void)a;
    *o = in.t == TV_STR || in.t == TV_LIST || in.t == TV_DICT || in.t == TV_UNDEF;
    return 0;
}
static int t_number(tctx *c, const tnode *at, tv in, targs *a, int *o) { (void)c; (void)at; (void)a; *o = in.t == TV_INT || in.t == TV_FLOAT || in.t == TV_BOOL; return 0; }
static int t_integer(tctx *c, const tnode *at, tv in, targs *a, int *o) { (void)c; (void)at; (void)a; *o = in.t == TV_INT; return 0; }
static int t_float(tctx *c, const tnode *at, tv in, targs *a, int *o) { (void)c; (void)at; (void)a; *o = in.t == TV_FLOAT; return 0; }
static int t_boolean(tctx *c, const tnode *at, tv in, targs *a, int *o) { (void)c; (void)at; (void)a; *o = in.t == TV_BOOL; return 0; }
static int t_true(tctx *c, const tnode *at, tv in, targs *a, int *o) { (void)c; (void)at; (void)a; *o = in.t == TV_BOOL && in.u.b; return 0; }
static int t_false(tctx *c, const tnode *at, tv in, targs *a, int *o) { (void)c; (void)at; (void)a; *o = in.t == TV_BOOL && !in.u.b; return 0; }
static int t_callable(tctx *c, const tnode *at, tv in, targs *a, int *o) { (void)c; (void)at; (void)a; *o = in.t == TV_FUNC || in.t == TV_MACRO || in.t == TV_UNDEF; return 0; }
static int t_escaped(tctx *c, const tnode *at, tv in, targs *a, int *o) { (void)c; (void)at; (void)a; (void)in; *o = 0; return 0; }

static int arg1(tctx *c, const tnode *at, targs *a, const char *kw, tv **v) {
    *v = targ(a, 0, kw);
    if (!*v) return tpl_fail(c, LINE, "test needs an argument");
    return 0;
}

static int t_eq(tctx *c, const tnode *at, tv in, targs *a, int *o) { tv *v; if (arg1(c, at, a, "other", &v)) return -1; *o = tv_eq(in, *v); return 0; }
static int t_ne(tctx *c, const tnode *at, tv in, targs *a, int *o) { tv *v; if (arg1(c, at, a, "other", &v)) return -1; *o = !tv_eq(in, *v); return 0; }

static int order_test(tctx *c, const tnode *at, tv in, targs *a, int which, int *o) {
    tv *v;
    if (arg1(c, at, a, "other", &v)) return -1;
    if (in.t == TV_UNDEF) return tpl_fail_undef(c, LINE, in);
    int k;
    static const char *sym[] = {"<", "<=", ">", ">="};
    if (tv_cmp(in, *v, &k)) return tpl_fail(c, LINE, "'%s' not supported between instances of '%s' and '%s'", sym[which], tv_pytype(in), tv_pytype(*v));
    if (k == 2) { *o = 0; return 0; }
    *o = which == 0 ? k < 0 : which == 1 ? k <= 0 : which == 2 ? k > 0 : k >= 0;
    return 0;
}
static int t_lt(tctx *c, const tnode *at, tv in, targs *a, int *o) { return order_test(c, at, in, a, 0, o); }
static int t_le(tctx *c, const tnode *at, tv in, targs *a, int *o) { return order_test(c, at, in, a, 1, o); }
static int t_gt(tctx *c, const tnode *at, tv in, targs *a, int *o) { return order_test(c, at, in, a, 2, o); }
static int t_ge(tctx *c, const tnode *at, tv in, targs *a, int *o) { return order_test(c, at, in, a, 3, o); }

static int t_in(tctx *c, const tnode *at, tv in, targs *a, int *o) {
    tv *v;
    if (arg1(c, at, a, "seq", &v)) return -1;
    switch (v->t) {
    case TV_STR:
        if (in.t != TV_STR) return tpl_fail(c, LINE, "'in <string>' requires string as left operand, not %s", tv_pytype(in));
        *o = memmem(v->u.s->s, v->u.s->len, in.u.s->s, in.u.s->len) != NULL || !in.u.s->len;
        return 0;
    case TV_LIST:
        *o = 0;
        for (size_t i = 0; i < v->u.l->n; i++) if (tv_eq(in, v->u.l->v[i])) { *o = 1; break; }
        return 0;
    case TV_DICT: *o = tdict_find(v->u.d, in) >= 0; return 0;
    case TV_UNDEF: *o = 0; return 0;
    default: return tpl_fail(c, LINE, "argument of type '%s' is not iterable", tv_pytype(*v));
    }
}

static int t_sameas(tctx *c, const tnode *at, tv in, targs *a, int *o) {
    tv *v;
    if (arg1(c, at, a, "other", &v)) return -1;
    if (in.t != v->t) { *o = 0; return 0; }
    if (tv_heap(in)) *o = in.u.o == v->u.o;
    else *o = tv_eq(in, *v);
    return 0;
}

/* Jinja's odd / even / divisibleby: value % n compared with 1 or 0 (Python %, floats too). */
static int mod_test(tctx *c, const tnode *at, tv in, tv n, int want, int *o) {
    tv r;
    if (tpl_arith(c, LINE, OP_MOD, in, n, &r)) return -1;
    *o = tv_eq(r, tv_int(want));
    tv_decref(r);
    return 0;
}
static int t_odd(tctx *c, const tnode *at, tv in, targs *a, int *o) { (void)a; return mod_test(c, at, in, tv_int(2), 1, o); }
static int t_even(tctx *c, const tnode *at, tv in, targs *a, int *o) { (void)a; return mod_test(c, at, in, tv_int(2), 0, o); }
static int t_divisibleby(tctx *c, const tnode *at, tv in, targs *a, int *o) {
    tv *d;
    if (arg1(c, at, a, "num", &d)) return -1;
    return mod_test(c, at, in, *d, 0, o);
}

static int case_test(tctx *c, const tnode *at, tv in, int upper, int *o) {
    tv s;
    if (str_of(c, at, in, &s)) return -1;
    int cased = 0, ok = 1;
    size_t i = 0;
    while (i < s.u.s->len) {
        int cp = utf8_next(s.u.s->s, s.u.s->len, &i);
        int k = utf8proc_get_property(cp)->category;
        if (k == UTF8PROC_CATEGORY_LT) ok = 0; /* title case is neither, as in CPython */
        else if (is_cased_upper(cp)) { cased = 1; if (!upper) ok = 0; }
        else if (is_cased_lower(cp)) { cased = 1; if (upper) ok = 0; }
    }
    tv_decref(s);
    *o = cased && ok;
    return 0;
}
static int t_lower(tctx *c, const tnode *at, tv in, targs *a, int *o) { (void)a; return case_test(c, at, in, 0, o); }
static int t_upper(tctx *c, const tnode *at, tv in, targs *a, int *o) { (void)a; return case_test(c, at, in, 1, o); }

/* nargs: how many arguments the test takes after the value (Jinja's signatures). */
static const struct { const char *name; test_fn fn; int nargs; } TESTS[] = {
    {"!=", t_ne, 1}, {"<", t_lt, 1}, {"<=", t_le, 1}, {"==", t_eq, 1}, {">", t_gt, 1}, {">=", t_ge, 1},
    {"boolean", t_boolean, 0}, {"callable", t_callable, 0}, {"defined", t_defined, 0},
    {"divisibleby", t_divisibleby, 1}, {"eq", t_eq, 1}, {"equalto", t_eq, 1}, {"escaped", t_escaped, 0},
    {"even", t_even, 0}, {"false", t_false, 0}, {"float", t_float, 0}, {"ge", t_ge, 1}, {"greaterthan", t_gt, 1},
    {"gt", t_gt, 1}, {"in", t_in, 1}, {"integer", t_integer, 0}, {"iterable", t_iterable, 0}, {"le", t_le, 1},
    {"lessthan", t_lt, 1}, {"lower", t_lower, 0}, {"lt", t_lt, 1}, {"mapping", t_mapping, 0}, {"ne", t_ne, 1},
    {"none", t_none, 0}, {"number", t_number, 0}, {"odd", t_odd, 0}, {"sameas", t_sameas, 1},
    {"sequence", t_sequence, 0}, {"string", t_string, 0}, {"true", t_true, 0}, {"undefined", t_undefined, 0},
    {"upper", t_upper, 0},
};

int tpl_test_index(const char *name) {
    for (int i = 0; i < (int)(sizeof TESTS / sizeof *TESTS); i++) if (!strcmp(TESTS[i].name, name)) return i;
    return -1;
}

int tpl_call_test(tctx *c, const tnode *at, int idx, tv in, targs *a, int *out) {
    if (idx < 0 || idx >= (int)(sizeof TESTS / sizeof *TESTS)) return tpl_fail(c, LINE, "bad test");
    if (a->npos + a->nkw > TESTS[idx].nargs)
        return tpl_fail(c, LINE, "test '%s' takes %d argument(s), %d given", TESTS[idx].name, TESTS[idx].nargs, a->npos + a->nkw);
    return TESTS[idx].fn(c, at, in, a, out);
}

/* ------------------------------------------------------------------ methods and globals */

enum {
    G_RANGE = 1, G_NAMESPACE, G_DICT, G_RAISE, G_STRFTIME,
    M_STRIP, M_LSTRIP, M_RSTRIP, M_SPLIT, M_RSPLIT, M_SPLITLINES, M_STARTSWITH, M_ENDSWITH,
    M_UPPER, M_LOWER, M_TITLE, M_CAPITALIZE, M_REPLACE, M_FIND, M_RFIND, M_INDEX, M_COUNT,
    M_JOIN, M_FORMAT, M_ISDIGIT, M_ISALPHA, M_ISALNUM, M_ISSPACE, M_ISUPPER, M_ISLOWER,
    M_LIST_COUNT, M_LIST_INDEX,
    M_GET, M_ITEMS, M_KEYS, M_VALUES, M_COPY,
    M_CYCLE,
    M_UNSAFE
};

static const struct { tv_type t; const char *name; int id; } METHODS[] = {
    {TV_STR, "strip", M_STRIP}, {TV_STR, "lstrip", M_LSTRIP}, {TV_STR, "rstrip", M_RSTRIP},
    {TV_STR, "split", M_SPLIT}, {TV_STR, "rsplit", M_RSPLIT}, {TV_STR, "splitlines", M_SPLITLINES},
    {TV_STR, "startswith", M_STARTSWITH}, {TV_STR, "endswith", M_ENDSWITH}, {TV_STR, "upper", M_UPPER},
    {TV_STR, "lower", M_LOWER}, {TV_STR, "title", M_TITLE}, {TV_STR, "capitalize", M_CAPITALIZE},
    {TV_STR, "replace", M_REPLACE}, {TV_STR, "find", M_FIND}, {TV_STR, "rfind", M_RFIND},
    {TV_STR, "index", M_INDEX}, {TV_STR, "count", M_COUNT}, {TV_STR, "join", M_JOIN},
    {TV_STR, "format", M_FORMAT}, {TV_STR, "isdigit", M_ISDIGIT}, {TV_STR, "isalpha", M_ISALPHA},
    {TV_STR, "isalnum", M_ISALNUM}, {TV_STR, "isspace", M_ISSPACE}, {TV_STR, "isupper", M_ISUPPER},
    {TV_STR, "islower", M_ISLOWER},
    {TV_LIST, "count", M_LIST_COUNT}, {TV_LIST, "index", M_LIST_INDEX},
    {TV_LIST, "append", M_UNSAFE}, {TV_LIST, "extend", M_UNSAFE}, {TV_LIST, "insert", M_UNSAFE},
    {TV_LIST, "pop", M_UNSAFE}, {TV_LIST, "remove", M_UNSAFE}, {TV_LIST, "reverse", M_UNSAFE},
    {TV_LIST, "sort", M_UNSAFE}, {TV_LIST, "clear", M_UNSAFE},
    {TV_DICT, "get", M_GET}, {TV_DICT, "items", M_ITEMS}, {TV_DICT, "keys", M_KEYS},
    {TV_DICT, "values", M_VALUES}, {TV_DICT, "copy", M_COPY},
    {TV_DICT, "pop", M_UNSAFE}, {TV_DICT, "popitem", M_UNSAFE}, {TV_DICT, "setdefault", M_UNSAFE},
    {TV_DICT, "update", M_UNSAFE}, {TV_DICT, "clear", M_UNSAFE},
    {TV_LOOP, "cycle", M_CYCLE},
};

static tv make_func(int id, tv self) {
    tfunc *f = calloc(1, sizeof *f);
    if (!f) return tv_none();
    f->h.rc = 1; f->h.kind = TV_FUNC; f->id = id; f->self = tv_ref(self);
    tv v; v.t = TV_FUNC; v.u.fn = f;
    return v;
}

int tpl_method(tv self, const char *name, tv *out) {
    tv_type t = self.t;
    if (t == TV_LIST && self.u.l->tuple && strcmp(name, "count") && strcmp(name, "index")) return 0;
    for (size_t i = 0; i < sizeof METHODS / sizeof *METHODS; i++) {
        if (METHODS[i].t != t || strcmp(METHODS[i].name, name)) continue;
        if (METHODS[i].id == M_UNSAFE) return -1;
        *out = make_func(METHODS[i].id, self);
        return out->t == TV_FUNC ? 1 : 0;
    }
    return 0;
}

int tpl_global(const char *name, tv *out) {
    static const struct { const char *name; int id; } G[] = {
        {"range", G_RANGE}, {"namespace", G_NAMESPACE}, {"dict", G_DICT},
        {"raise_exception", G_RAISE}, {"strftime_now", G_STRFTIME},
    };
    for (size_t i = 0; i < sizeof G / sizeof *G; i++) {
        if (strcmp(G[i].name, name)) continue;
        *out = make_func(G[i].id, tv_undef());
        return out->t == TV_FUNC;
    }
    return 0;
}

static int str_find(tctx *c, const tnode *at, tv s, targs *a, int rev, int raise, tv *out) {
    tv *sub = targ(a, 0, NULL);
    if (!sub) return tpl_fail(c, LINE, "find() takes at least 1 argument (0 given)");
    if (need_str(c, at, *sub, "find argument")) return -1;
    const char *p = s.u.s->s, *q = sub->u.s->s;
    size_t n = s.u.s->len, m = sub->u.s->len;
    long pos = -1;
    if (!rev) { const char *h = memmem(p, n, q, m); if (h) pos = h - p; }
    else if (m <= n) { for (size_t k = n - m + 1; k-- > 0;) if (!memcmp(p + k, q, m)) { pos = (long)k; break; } }
    if (pos < 0 && raise) return tpl_fail(c, LINE, "substring not found");
    *out = tv_int(pos < 0 ? -1 : cp_index(p, (size_t)pos));
    return 0;
}

static int char_class(tv s, int which) { /* 0 digit, 1 alpha, 2 alnum, 3 space */
    if (!s.u.s->len) return 0;
    size_t i = 0;
    while (i < s.u.s->len) {
        int cp = utf8_next(s.u.s->s, s.u.s->len, &i);
        int k = utf8proc_get_property(cp)->category;
        int alpha = k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO;
        int digit = k == UTF8PROC_CATEGORY_ND;
        int ok = which == 0 ? digit : which == 1 ? alpha : which == 2 ? (alpha || digit || k == UTF8PROC_CATEGORY_NL || k == UTF8PROC_CATEGORY_NO) : py_isspace(cp);
        if (!ok) return 0;
    }
    return 1;
}

static int g_strftime(tctx *c, const tnode *at, targs *a, tv *out) {
    tv *f = targ(a, 0, "format");
    if (!f || f->t != TV_STR) return tpl_fail(c, LINE, "strftime_now() needs a format string");
    struct tm tmv;
    time_t t = c->now ? (time_t)c->now : time(NULL);
    if (c->now) gmtime_r(&t, &tmv); else localtime_r(&t, &tmv);
    if (!f->u.s->len) { *out = tv_str("", 0); return 0; }
    size_t cap = 256 + f->u.s->len * 8;
    char *buf = malloc(cap);
    if (!buf) return oom(c, at);
    size_t n = strftime(buf, cap, f->u.s->s, &tmv);
    *out = tv_str(buf, n);
    free(buf);
    return out->t == TV_STR ? 0 : oom(c, at);
}

static int g_range(tctx *c, const tnode *at, targs *a, tv *out) {
    int64_t st = 0, en, sp = 1;
    if (a->npos == 1) { if (int_arg(c, at, &a->pos[0], 0, &en, "range")) return -1; }
    else if (a->npos == 2 || a->npos == 3) {
        if (int_arg(c, at, &a->pos[0], 0, &st, "range") || int_arg(c, at, &a->pos[1], 0, &en, "range")) return -1;
        if (a->npos == 3 && int_arg(c, at, &a->pos[2], 1, &sp, "range")) return -1;
    } else return tpl_fail(c, LINE, "range expected 1 to 3 arguments, got %d", a->npos);
    if (sp == 0) return tpl_fail(c, LINE, "range() arg 3 must not be zero");
    int64_t n = sp > 0 ? (en > st ? (en - st - 1) / sp + 1 : 0) : (st > en ? (st - en - 1) / (-sp) + 1 : 0);
    if (n > 100000) return tpl_fail(c, LINE, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    tlist *l = tlist_new((size_t)n);
    if (!l) return oom(c, at);
    for (int64_t i = 0; i < n; i++) tlist_push(l, tv_int(st + i * sp));
    *out = tv_list(l);
    return 0;
}

static int g_dictlike(tctx *c, const tnode *at, targs *a, int is_ns, tv *out) {
    tdict *d;
    tns *ns = NULL;
    if (is_ns) { ns = tns_new(); if (!ns) return oom(c, at); d = ns->d; }
    else { d = tdict_new(); if (!d) return oom(c, at); }
    int r = 0;
    for (int i = 0; i < a->npos && !r; i++) {
        tv p = a->pos[i];
        if (p.t == TV_DICT) {
            for (size_t k = 0; k < p.u.d->n && !r; k++) r = tdict_set(d, tv_ref(p.u.d->k[k]), tv_ref(p.u.d->v[k])) ? oom(c, at) : 0;
        } else if (p.t == TV_LIST) {
            for (size_t k = 0; k < p.u.l->n && !r; k++) {
                tv e = p.u.l->v[k];
                if (e.t != TV_LIST || e.u.l->n != 2) r = tpl_fail(c, LINE, "dictionary update sequence element has wrong length");
                else r = tdict_set(d, tv_ref(e.u.l->v[0]), tv_ref(e.u.l->v[1])) ? oom(c, at) : 0;
            }
        } else r = tpl_fail(c, LINE, "'%s' object is not iterable", tv_pytype(p));
    }
    for (int i = 0; i < a->nkw && !r; i++) r = tdict_set(d, tv_cstr(a->kwn[i]), tv_ref(a->kwv[i])) ? oom(c, at) : 0;
    if (is_ns) {
        tv v; v.t = TV_NS; v.u.ns = ns;
        if (r || tpl_note_ns(c, ns)) { tv_decref(v); return r ? -1 : oom(c, at); }
        *out = v;
    } else {
        if (r) { tv_decref(tv_dict(d)); return -1; }
        *out = tv_dict(d);
    }
    return 0;
}

int tpl_call_func(tctx *c, const tnode *at, tfunc *f, targs *a, tv *out) {
    tv self = f->self;
    switch (f->id) {
    case G_RANGE: return g_range(c, at, a, out);
    case G_NAMESPACE: return g_dictlike(c, at, a, 1, out);
    case G_DICT: return g_dictlike(c, at, a, 0, out);
    case G_RAISE: {
        tv *m = targ(a, 0, "message");
        tv s;
        if (!m) s = tv_str("", 0);
        else if (str_of(c, at, *m, &s)) return -1;
        tpl_fail(c, LINE, "%s", s.t == TV_STR ? s.u.s->s : "");
        c->raised = 1;
        tv_decref(s);
        return -1;
    }
    case G_STRFTIME: return g_strftime(c, at, a, out);
    case M_STRIP: return py_strip(c, at, self, targ(a, 0, NULL), 1, 1, out);
    case M_LSTRIP: return py_strip(c, at, self, targ(a, 0, NULL), 1, 0, out);
    case M_RSTRIP: return py_strip(c, at, self, targ(a, 0, NULL), 0, 1, out);
    case M_SPLIT: return py_split(c, at, self, targ(a, 0, "sep"), targ(a, 1, "maxsplit"), 0, out);
    case M_RSPLIT: return py_split(c, at, self, targ(a, 0, "sep"), targ(a, 1, "maxsplit"), 1, out);
    case M_SPLITLINES: return py_splitlines(c, at, self, targ(a, 0, "keepends"), out);
    case M_STARTSWITH: return prefix_test(c, at, self, targ(a, 0, NULL), 0, out);
    case M_ENDSWITH: return prefix_test(c, at, self, targ(a, 0, NULL), 1, out);
    case M_UPPER: return case_map(c, at, self, 0, out);
    case M_LOWER: return case_map(c, at, self, 1, out);
    case M_TITLE: return py_title(c, at, self, out);
    case M_CAPITALIZE: return py_capitalize(c, at, self, out);
    case M_REPLACE: {
        tv *o = targ(a, 0, NULL), *nw = targ(a, 1, NULL);
        int64_t cnt;
        if (!o || !nw) return tpl_fail(c, LINE, "replace expected at least 2 arguments, got %d", a->npos);
        if (int_arg(c, at, targ(a, 2, "count"), -1, &cnt, "replace")) return -1;
        return py_replace(c, at, self, *o, *nw, cnt, out);
    }
    case M_FIND: return str_find(c, at, self, a, 0, 0, out);
    case M_RFIND: return str_find(c, at, self, a, 1, 0, out);
    case M_INDEX: return str_find(c, at, self, a, 0, 1, out);
    case M_COUNT: {
        tv *sub = targ(a, 0, NULL);
        if (!sub || need_str(c, at, *sub, "count argument")) return sub ? -1 : tpl_fail(c, LINE, "count() takes at least 1 argument");
        const char *p = self.u.s->s, *q = sub->u.s->s;
        size_t n = self.u.s->len, m = sub->u.s->len, i = 0;
        int64_t k = 0;
        if (!m) { *out = tv_int((int64_t)tstr_ncp(self.u.s) + 1); return 0; }
        const char *h;
        while (i <= n && (h = memmem(p + i, n - i, q, m))) { k++; i = (size_t)(h - p) + m; }
        *out = tv_int(k);
        return 0;
    }
    case M_JOIN: {
        tv *it = targ(a, 0, NULL);
        if (!it) return tpl_fail(c, LINE, "join() takes exactly one argument (0 given)");
        tlist *l;
        if (tpl_to_list(c, at, *it, &l)) return -1;
        tbuf b = {.limit = c->max_output};
        for (size_t i = 0; i < l->n; i++) {
            if (l->v[i].t != TV_STR) {
                int r = tpl_fail(c, LINE, "sequence item %zu: expected str instance, %s found", i, tv_pytype(l->v[i]));
                tbuf_free(&b); tv_decref(tv_list(l));
                return r;
            }
            if (i) tbuf_put(&b, self.u.s->s, self.u.s->len);
            tbuf_put(&b, l->v[i].u.s->s, l->v[i].u.s->len);
        }
        tv_decref(tv_list(l));
        return ret_buf(c, at, &b, out);
    }
    case M_FORMAT: return py_format(c, at, self, a, out);
    case M_ISDIGIT: *out = tv_bool(char_class(self, 0)); return 0;
    case M_ISALPHA: *out = tv_bool(char_class(self, 1)); return 0;
    case M_ISALNUM: *out = tv_bool(char_class(self, 2)); return 0;
    case M_ISSPACE: *out = tv_bool(char_class(self, 3)); return 0;
    case M_ISUPPER: { int o; if (case_test(c, at, self, 1, &o)) return -1; *out = tv_bool(o); return 0; }
    case M_ISLOWER: { int o; if (case_test(c, at, self, 0, &o)) return -1; *out = tv_bool(o); return 0; }
    case M_LIST_COUNT: {
        tv *x = targ(a, 0, NULL);
        if (!x) return tpl_fail(c, LINE, "count() takes exactly one argument (0 given)");
        int64_t k = 0;
        for (size_t i = 0; i < self.u.l->n; i++) k += tv_eq(self.u.l->v[i], *x);
        *out = tv_int(k);
        return 0;
    }
    case M_LIST_INDEX: {
        tv *x = targ(a, 0, NULL);
        if (!x) return tpl_fail(c, LINE, "index expected at least 1 argument, got 0");
        for (size_t i = 0; i < self.u.l->n; i++) if (tv_eq(self.u.l->v[i], *x)) { *out = tv_int((int64_t)i); return 0; }
        return tpl_fail(c, LINE, "value is not in list");
    }
    case M_GET: {
        tv *k = targ(a, 0, NULL), *d = targ(a, 1, NULL);
        if (!k) return tpl_fail(c, LINE, "get expected at least 1 argument, got 0");
        long i = tdict_find(self.u.d, *k);
        *out = i >= 0 ? tv_ref(self.u.d->v[i]) : d ? tv_ref(*d) : tv_none();
        return 0;
    }
    case M_ITEMS: return f_items(c, at, self, a, out);
    case M_KEYS: case M_VALUES: {
        tlist *l = tlist_new(self.u.d->n);
        if (!l) return oom(c, at);
        for (size_t i = 0; i < self.u.d->n; i++) tlist_push(l, tv_ref(f->id == M_KEYS ? self.u.d->k[i] : self.u.d->v[i]));
        *out = tv_list(l);
        return 0;
    }
    case M_COPY: *out = tv_ref(self); return 0;
    case M_CYCLE: {
        if (!a->npos) return tpl_fail(c, LINE, "no items for cycling given");
        *out = tv_ref(a->pos[self.u.lp->index0 % a->npos]);
        return 0;
    }
    }
    return tpl_fail(c, LINE, "internal error: unknown builtin %d", f->id);
}

/* a + b for the sum filter (shares the evaluator's semantics for numbers and strings). */
int tpl_binop_add(tctx *c, int line, tv a, tv b, tv *out) {
    if ((a.t == TV_INT || a.t == TV_BOOL) && (b.t == TV_INT || b.t == TV_BOOL)) {
        int64_t x = a.t == TV_INT ? a.u.i : a.u.b, y = b.t == TV_INT ? b.u.i : b.u.b, r;
        if (__builtin_add_overflow(x, y, &r)) return tpl_fail(c, line, "integer overflow");
        *out = tv_int(r);
        return 0;
    }
    if ((a.t == TV_INT || a.t == TV_BOOL || a.t == TV_FLOAT) && (b.t == TV_INT || b.t == TV_BOOL || b.t == TV_FLOAT)) {
        double x = a.t == TV_FLOAT ? a.u.f : a.t == TV_INT ? (double)a.u.i : a.u.b;
        double y = b.t == TV_FLOAT ? b.u.f : b.t == TV_INT ? (double)b.u.i : b.u.b;
        *out = tv_float(x + y);
        return 0;
    }
    return tpl_fail(c, line, "unsupported operand type(s) for +: '%s' and '%s'", tv_pytype(a), tv_pytype(b));
}
