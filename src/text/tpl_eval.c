/* tpl_eval.c — runs a parsed chat template.
 *
 * Owns expression evaluation and statement execution with Jinja2's semantics as
 * transformers configures it: Python operators (int/float arithmetic, str and list
 * concatenation, % formatting, chained comparisons, `in`), `and`/`or` returning an operand,
 * attribute access that prefers methods then keys (and subscripts the other way round), the
 * default Undefined (prints empty, is falsy, iterates as empty; using it further is an error
 * worded as Jinja words it), scopes (one per Jinja frame: the template, each loop iteration,
 * a loop's else, a macro or caller() call, a with / filter / block-set body — if blocks share
 * their frame; locals that Jinja starts undefined are bound as such on entry), loop objects
 * (including Jinja's rule that for-else runs unless an iteration completed), macros that see
 * the scope they were defined in, defaults and caller(), namespaces.
 *
 * Invariants: each eval() that returns 0 hands *out one reference; on -1 *out is untouched
 * and the first error is recorded in the context (later ones are dropped). Recursion is
 * bounded by ctx->max_depth (macro calls and nested evaluation), work by ctx->max_steps and
 * output by the buffer limit, so a hostile template ends in an error, never a crash. */
#include "text/tpl_internal.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ errors */

int tpl_fail(tctx *c, int line, const char *fmt, ...) {
    if (c->failed) return -1;
    c->failed = 1;
    c->err_line = line;
    if (c->err && c->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(c->err, c->errlen, fmt, ap);
        va_end(ap);
    }
    return -1;
}

tv tv_undef_hint(const char *fmt, ...) {
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    tv u = tv_undef();
    u.u.s = tstr_new(msg, strlen(msg));
    return u;
}

int tpl_fail_undef(tctx *c, int line, tv u) {
    if (u.t == TV_UNDEF && u.u.s) return tpl_fail(c, line, "%s", u.u.s->s);
    return tpl_fail(c, line, "undefined value");
}

static int oom(tctx *c, int line) { return tpl_fail(c, line, "out of memory"); }

/* ------------------------------------------------------------------ scopes */

/* A frame local that Jinja starts as undefined (see the frame analysis in tpl_parse.c): bound
 * as SHADOW when the frame is entered, it reads as undefined until the frame assigns it. */
static union { tstr s; char room[sizeof(tstr) + 8]; } SHADOW = {.s = {{-1, TV_STR}, 0, 0}}; /* immortal "" */
static int is_shadow(tv v) { return v.t == TV_UNDEF && v.u.s == &SHADOW.s; }
static tv undef_shadow(void) { tv v = tv_undef(); v.u.s = &SHADOW.s; return v; }

static tv *scope_find_raw(tscope *s, const char *name, tscope **where) {
    for (; s; s = s->parent)
        for (int i = s->n - 1; i >= 0; i--)
            if (!strcmp(s->names[i], name)) { if (where) *where = s; return &s->vals[i]; }
    return NULL;
}

static tv *scope_find(tscope *s, const char *name) { return scope_find_raw(s, name, NULL); }

/* Binds name in this scope (not a parent), taking the reference. */
static int scope_set(tctx *c, int line, tscope *s, const char *name, tv v) {
    for (int i = 0; i < s->n; i++)
        if (!strcmp(s->names[i], name)) { tv_decref(s->vals[i]); s->vals[i] = v; return 0; }
    if (s->n == s->cap) {
        int nc = s->cap ? s->cap * 2 : 8;
        const char **nn = realloc(s->names, (size_t)nc * sizeof *nn);
        if (!nn) { tv_decref(v); return oom(c, line); }
        s->names = nn;
        tv *nv = realloc(s->vals, (size_t)nc * sizeof *nv);
        if (!nv) { tv_decref(v); return oom(c, line); }
        s->vals = nv; s->cap = nc;
    }
    s->names[s->n] = name; s->vals[s->n] = v; s->n++;
    return 0;
}

int tpl_bind_undef(tctx *c, tscope *s, const char *const *names, int n) {
    for (int i = 0; i < n; i++) if (scope_set(c, 0, s, names[i], undef_shadow())) return -1;
    return 0;
}

static void scope_clear(tscope *s) {
    for (int i = 0; i < s->nowned; i++) {
        tv m; m.t = TV_MACRO; m.u.m = s->owned[i];
        s->owned[i]->scope = NULL;
        tv_decref(m);
    }
    free(s->owned);
    s->owned = NULL; s->nowned = s->capowned = 0;
    for (int i = 0; i < s->n; i++) tv_decref(s->vals[i]);
    free(s->names); free(s->vals);
    s->names = NULL; s->vals = NULL; s->n = s->cap = 0;
}

static int scope_own(tctx *c, int line, tscope *s, tmacro *m) {
    if (s->nowned == s->capowned) {
        int nc = s->capowned ? s->capowned * 2 : 4;
        tmacro **no = realloc(s->owned, (size_t)nc * sizeof *no);
        if (!no) return oom(c, line);
        s->owned = no; s->capowned = nc;
    }
    m->h.rc++;
    m->scope = s;
    s->owned[s->nowned++] = m;
    return 0;
}

int tpl_note_ns(tctx *c, tns *ns) {
    if (c->nns == c->cap_ns) {
        int nc = c->cap_ns ? c->cap_ns * 2 : 8;
        tns **nv = realloc(c->nss, (size_t)nc * sizeof *nv);
        if (!nv) return -1;
        c->nss = nv; c->cap_ns = nc;
    }
    ns->h.rc++;
    c->nss[c->nns++] = ns;
    return 0;
}

/* ------------------------------------------------------------------ helpers */

static int enter(tctx *c, int line) {
    if (++c->depth > c->max_depth) { c->depth--; return tpl_fail(c, line, "maximum recursion depth exceeded (%d)", c->max_depth); }
    return 0;
}

static int step(tctx *c, int line) {
    if (++c->steps > c->max_steps) return tpl_fail(c, line, "template ran too long (more than %llu steps)", (unsigned long long)c->max_steps);
    return 0;
}

int tpl_charge(tctx *c, int line, size_t bytes) {
    c->steps += bytes / 64;
    if (c->steps > c->max_steps) return tpl_fail(c, line, "template ran too long (more than %llu steps)", (unsigned long long)c->max_steps);
    return 0;
}

static int out_put(tctx *c, int line, const char *s, size_t n) {
    if (tbuf_put(c->out, s, n)) {
        if (c->out->over == 2) return oom(c, line);
        return tpl_fail(c, line, "output exceeds the limit of %zu bytes", c->out->limit);
    }
    return 0;
}

static int out_str(tctx *c, int line, tv v) {
    if (v.t == TV_STR) return out_put(c, line, v.u.s->s, v.u.s->len);
    if (tv_write_str(c->out, v)) {
        if (c->out->over == 2) return oom(c, line);
        if (c->out->over == 3) return tpl_fail(c, line, "maximum recursion depth exceeded while printing a value");
        return tpl_fail(c, line, "output exceeds the limit of %zu bytes", c->out->limit);
    }
    return 0;
}

/* ------------------------------------------------------------------ iteration */

int tpl_to_list(tctx *c, const tnode *at, tv v, tlist **out) {
    int line = at ? at->line : 0;
    switch (v.t) {
    case TV_LIST: v.u.l->h.rc += v.u.l->h.rc >= 0; *out = v.u.l; return 0;
    case TV_UNDEF: *out = tlist_new(0); return *out ? 0 : oom(c, line);
    case TV_DICT: {
        tlist *l = tlist_new(v.u.d->n);
        if (!l) return oom(c, line);
        for (size_t i = 0; i < v.u.d->n; i++) tlist_push(l, tv_ref(v.u.d->k[i]));
        *out = l;
        return 0;
    }
    case TV_STR: {
        tlist *l = tlist_new(16);
        if (!l) return oom(c, line);
        size_t i = 0;
        while (i < v.u.s->len) {
            size_t st = i;
            utf8_next(v.u.s->s, v.u.s->len, &i);
            tv ch = tv_str(v.u.s->s + st, i - st);
            if (ch.t != TV_STR || tlist_push(l, ch)) { tv_decref(tv_list(l)); return oom(c, line); }
        }
        *out = l;
        return 0;
    }
    default:
        return tpl_fail(c, line, "'%s' object is not iterable", tv_pytype(v));
    }
}

/* ------------------------------------------------------------------ attributes and items */

static int loop_attr(tctx *c, const tnode *at, tloop *lp, const char *name, tv *out) {
    int64_t i = lp->index0, n = lp->length;
    if (!strcmp(name, "index")) *out = tv_int(i + 1);
    else if (!strcmp(name, "index0")) *out = tv_int(i);
    else if (!strcmp(name, "revindex")) *out = tv_int(n - i);
    else if (!strcmp(name, "revindex0")) *out = tv_int(n - i - 1);
    else if (!strcmp(name, "first")) *out = tv_bool(i == 0);
    else if (!strcmp(name, "last")) *out = tv_bool(i == n - 1);
    else if (!strcmp(name, "length")) *out = tv_int(n);
    else if (!strcmp(name, "depth")) *out = tv_int(lp->depth0 + 1);
    else if (!strcmp(name, "depth0")) *out = tv_int(lp->depth0);
    else if (!strcmp(name, "previtem"))
        *out = i > 0 ? tv_ref(lp->items->v[i - 1]) : tv_undef_hint("there is no previous item");
    else if (!strcmp(name, "nextitem"))
        *out = i + 1 < n ? tv_ref(lp->items->v[i + 1]) : tv_undef_hint("there is no next item");
    else {
        tv self; self.t = TV_LOOP; self.u.lp = lp;
        int r = tpl_method(self, name, out);
        if (r <= 0) *out = tv_undef_hint("'jinja2.runtime.LoopContext object' has no attribute '%s'", name);
    }
    (void)c; (void)at;
    return 0;
}

int tpl_getattr(tctx *c, const tnode *at, tv obj, const char *name, tv *out) {
    int line = at ? at->line : 0;
    switch (obj.t) {
    case TV_UNDEF: return tpl_fail_undef(c, line, obj);
    case TV_LOOP: return loop_attr(c, at, obj.u.lp, name, out);
    case TV_NS: {
        tv *v = tdict_get_cstr(obj.u.ns->d, name);
        *out = v ? tv_ref(*v) : tv_undef_hint("'jinja2.utils.Namespace object' has no attribute '%s'", name);
        return 0;
    }
    default: break;
    }
    int r = tpl_method(obj, name, out);
    if (r > 0) return 0;
    if (r < 0) {
        *out = tv_undef_hint("access to attribute '%s' of '%s' object is unsafe.", name, tv_pytype(obj));
        return 0;
    }
    if (obj.t == TV_DICT) {
        tv *v = tdict_get_cstr(obj.u.d, name);
        if (v) { *out = tv_ref(*v); return 0; }
    }
    *out = tv_undef_hint("'%s' has no attribute '%s'", tv_objrepr(obj), name);
    return 0;
}

int tpl_getitem(tctx *c, const tnode *at, tv obj, tv key, tv *out) {
    int line = at ? at->line : 0;
    if (obj.t == TV_UNDEF) return tpl_fail_undef(c, line, obj);
    if (obj.t == TV_DICT) {
        /* an unhashable key is a TypeError that Jinja's getitem turns into Undefined */
        long i = key.t == TV_DICT || (key.t == TV_LIST && !key.u.l->tuple) ? -1 : tdict_find(obj.u.d, key);
        if (i >= 0) { *out = tv_ref(obj.u.d->v[i]); return 0; }
    } else if ((obj.t == TV_LIST || obj.t == TV_STR) && (key.t == TV_INT || key.t == TV_BOOL)) {
        int64_t k = key.t == TV_INT ? key.u.i : key.u.b;
        int64_t n = obj.t == TV_LIST ? (int64_t)obj.u.l->n : (int64_t)tstr_ncp(obj.u.s);
        if (k < 0) k += n;
        if (k >= 0 && k < n) {
            if (obj.t == TV_LIST) { *out = tv_ref(obj.u.l->v[k]); return 0; }
            size_t b = utf8_offset(obj.u.s->s, obj.u.s->len, (size_t)k), e = b;
            utf8_next(obj.u.s->s, obj.u.s->len, &e);
            *out = tv_str(obj.u.s->s + b, e - b);
            return out->t == TV_STR ? 0 : oom(c, line);
        }
    }
    if (key.t == TV_STR) return tpl_getattr(c, at, obj, key.u.s->s, out);
    if (key.t == TV_INT)
        *out = tv_undef_hint("'%s' has no element %lld", tv_objrepr(obj), (long long)key.u.i);
    else
        *out = tv_undef_hint("'%s' has no element", tv_objrepr(obj));
    return 0;
}

/* Python's slice index adjustment. */
static int64_t slice_count(int64_t len, int has_start, int64_t start, int has_stop, int64_t stop, int64_t stp, int64_t *st0) {
    if (!has_start) start = stp < 0 ? len - 1 : 0;
    else if (start < 0) { start += len; if (start < 0) start = stp < 0 ? -1 : 0; }
    else if (start >= len) start = stp < 0 ? len - 1 : len;
    if (!has_stop) stop = stp < 0 ? -1 : len;
    else if (stop < 0) { stop += len; if (stop < 0) stop = stp < 0 ? -1 : 0; }
    else if (stop >= len) stop = stp < 0 ? len - 1 : len;
    *st0 = start;
    if (stp > 0) return start < stop ? (stop - start - 1) / stp + 1 : 0;
    return stop < start ? (start - stop - 1) / (-stp) + 1 : 0;
}

static int slice_arg(tctx *c, const tnode *n, tscope *s, int *has, int64_t *v);
static int eval(tctx *c, const tnode *n, tscope *s, tv *out);

static int do_slice(tctx *c, const tnode *sl, tscope *s, tv obj, tv *out) {
    int line = sl->line;
    int hs, he, hp;
    int64_t st, en, sp = 1;
    if (slice_arg(c, sl->b, s, &hs, &st) || slice_arg(c, sl->c, s, &he, &en) || slice_arg(c, sl->d, s, &hp, &sp)) return -1;
    if (!hp) sp = 1;
    if (sp == 0) return tpl_fail(c, line, "slice step cannot be zero");
    if (obj.t == TV_UNDEF) return tpl_fail_undef(c, line, obj);
    if (obj.t == TV_LIST) {
        int64_t i0, cnt = slice_count((int64_t)obj.u.l->n, hs, st, he, en, sp, &i0);
        tlist *l = tlist_new((size_t)cnt);
        if (!l) return oom(c, line);
        l->tuple = obj.u.l->tuple;
        for (int64_t k = 0; k < cnt; k++) tlist_push(l, tv_ref(obj.u.l->v[i0 + k * sp]));
        *out = tv_list(l);
        return 0;
    }
    if (obj.t == TV_STR) {
        tstr *str = obj.u.s;
        size_t ncp = tstr_ncp(str);
        int64_t i0, cnt = slice_count((int64_t)ncp, hs, st, he, en, sp, &i0);
        if (ncp == str->len) { /* ASCII: bytes are code points */
            tstr *r = tstr_alloc((size_t)cnt);
            if (!r) return oom(c, line);
            for (int64_t k = 0; k < cnt; k++) r->s[k] = str->s[i0 + k * sp];
            *out = tv_str_take(r);
            return 0;
        }
        size_t *off = malloc((ncp + 1) * sizeof *off);
        if (!off) return oom(c, line);
        size_t i = 0, k = 0;
        while (i < str->len) { off[k++] = i; utf8_next(str->s, str->len, &i); }
        off[k] = str->len;
        tbuf b = {0};
        for (int64_t j = 0; j < cnt; j++) {
            int64_t q = i0 + j * sp;
            if (tbuf_put(&b, str->s + off[q], off[q + 1] - off[q])) { free(off); tbuf_free(&b); return oom(c, line); }
        }
        free(off);
        *out = tv_str(b.p ? b.p : "", b.n);
        tbuf_free(&b);
        return out->t == TV_STR ? 0 : oom(c, line);
    }
    if (obj.t == TV_DICT) return tpl_fail(c, line, "unhashable type: 'slice'");
    *out = tv_undef_hint("'%s' has no element", tv_objrepr(obj));
    return 0;
}

static int slice_arg(tctx *c, const tnode *n, tscope *s, int *has, int64_t *v) {
    *has = 0;
    if (!n) return 0;
    tv x;
    if (eval(c, n, s, &x)) return -1;
    if (x.t == TV_NONE) return 0;
    if (x.t != TV_INT && x.t != TV_BOOL) {
        int r = tpl_fail(c, n->line, "slice indices must be integers or None, not %s", tv_pytype(x));
        tv_decref(x);
        return r;
    }
    *has = 1;
    *v = x.t == TV_INT ? x.u.i : x.u.b;
    return 0;
}

/* ------------------------------------------------------------------ operators */

static int is_num(tv v) { return v.t == TV_BOOL || v.t == TV_INT || v.t == TV_FLOAT; }
static double fnum(tv v) { return v.t == TV_FLOAT ? v.u.f : v.t == TV_INT ? (double)v.u.i : v.u.b; }
static int64_t inum(tv v) { return v.t == TV_INT ? v.u.i : v.u.b; }

static const char *opname(int op) {
    switch (op) {
    case OP_ADD: return "+"; case OP_SUB: return "-"; case OP_MUL: return "*"; case OP_DIV: return "/";
    case OP_FLOORDIV: return "//"; case OP_MOD: return "%"; case OP_POW: return "** or pow()";
    default: return "?";
    }
}

static int type_error(tctx *c, int line, int op, tv a, tv b) {
    return tpl_fail(c, line, "unsupported operand type(s) for %s: '%s' and '%s'", opname(op), tv_pytype(a), tv_pytype(b));
}

static int concat_seq(tctx *c, int line, tv a, tv b, tv *out) {
    if (a.t == TV_STR) {
        if (tpl_charge(c, line, a.u.s->len + b.u.s->len)) return -1;
        tstr *r = tstr_alloc(a.u.s->len + b.u.s->len);
        if (!r) return oom(c, line);
        memcpy(r->s, a.u.s->s, a.u.s->len);
        memcpy(r->s + a.u.s->len, b.u.s->s, b.u.s->len);
        *out = tv_str_take(r);
        return 0;
    }
    tlist *l = tlist_new(a.u.l->n + b.u.l->n);
    if (!l) return oom(c, line);
    l->tuple = a.u.l->tuple;
    for (size_t i = 0; i < a.u.l->n; i++) tlist_push(l, tv_ref(a.u.l->v[i]));
    for (size_t i = 0; i < b.u.l->n; i++) tlist_push(l, tv_ref(b.u.l->v[i]));
    *out = tv_list(l);
    return 0;
}

static int repeat_seq(tctx *c, int line, tv seq, int64_t k, tv *out) {
    if (k < 0) k = 0;
    if (seq.t == TV_STR) {
        size_t n = seq.u.s->len;
        if (n && (uint64_t)k > c->max_output / n) return tpl_fail(c, line, "string repetition exceeds the output limit");
        if (tpl_charge(c, line, n * (size_t)k)) return -1;
        tstr *r = tstr_alloc(n * (size_t)k);
        if (!r) return oom(c, line);
        for (int64_t i = 0; i < k; i++) memcpy(r->s + (size_t)i * n, seq.u.s->s, n);
        *out = tv_str_take(r);
        return 0;
    }
    size_t n = seq.u.l->n;
    if (n && (uint64_t)k > (1u << 24) / n) return tpl_fail(c, line, "list repetition too large");
    tlist *l = tlist_new(n * (size_t)k);
    if (!l) return oom(c, line);
    l->tuple = seq.u.l->tuple;
    for (int64_t i = 0; i < k; i++) for (size_t j = 0; j < n; j++) tlist_push(l, tv_ref(seq.u.l->v[j]));
    *out = tv_list(l);
    return 0;
}

static int arith(tctx *c, int line, int op, tv a, tv b, tv *out) {
    if (op == OP_MOD && a.t == TV_STR) return tpl_percent_format(c, line, a, b, out); /* str % anything */
    if (op == OP_TILDE) {
        tbuf buf = {.limit = c->max_output};
        if (tv_write_str(&buf, a) || tv_write_str(&buf, b)) { tbuf_free(&buf); return tpl_fail(c, line, "string too long"); }
        if (tpl_charge(c, line, buf.n)) { tbuf_free(&buf); return -1; }
        *out = tv_str(buf.p ? buf.p : "", buf.n);
        tbuf_free(&buf);
        return out->t == TV_STR ? 0 : oom(c, line);
    }
    if (a.t == TV_UNDEF) return tpl_fail_undef(c, line, a);
    if (b.t == TV_UNDEF) return tpl_fail_undef(c, line, b);
    if (is_num(a) && is_num(b)) {
        int fl = a.t == TV_FLOAT || b.t == TV_FLOAT;
        if (!fl) {
            int64_t x = inum(a), y = inum(b), r;
            switch (op) {
            case OP_ADD: if (__builtin_add_overflow(x, y, &r)) goto overflow; *out = tv_int(r); return 0;
            case OP_SUB: if (__builtin_sub_overflow(x, y, &r)) goto overflow; *out = tv_int(r); return 0;
            case OP_MUL: if (__builtin_mul_overflow(x, y, &r)) goto overflow; *out = tv_int(r); return 0;
            case OP_DIV:
                if (!y) return tpl_fail(c, line, "division by zero");
                *out = tv_float((double)x / (double)y); return 0;
            case OP_FLOORDIV: case OP_MOD: {
                if (!y) return tpl_fail(c, line, "integer division or modulo by zero");
                if (x == INT64_MIN && y == -1) goto overflow;
                int64_t q = x / y, m = x % y;
                if (m && ((m < 0) != (y < 0))) { q--; m += y; }
                *out = tv_int(op == OP_FLOORDIV ? q : m); return 0;
            }
            case OP_POW: {
                if (y < 0) {
                    if (!x) return tpl_fail(c, line, "0.0 cannot be raised to a negative power");
                    *out = tv_float(pow((double)x, (double)y));
                    return 0;
                }
                int64_t res = 1, base = x;
                for (int64_t e = y; e > 0; e >>= 1) {
                    if (e & 1) { if (__builtin_mul_overflow(res, base, &res)) goto overflow; }
                    if (e > 1 && __builtin_mul_overflow(base, base, &base)) goto overflow;
                }
                *out = tv_int(res); return 0;
            }
            }
        }
        double x = fnum(a), y = fnum(b);
        switch (op) {
        case OP_ADD: *out = tv_float(x + y); return 0;
        case OP_SUB: *out = tv_float(x - y); return 0;
        case OP_MUL: *out = tv_float(x * y); return 0;
        case OP_DIV: if (y == 0) return tpl_fail(c, line, "float division by zero"); *out = tv_float(x / y); return 0;
        case OP_FLOORDIV: case OP_MOD: {
            if (y == 0) return tpl_fail(c, line, "float %s", op == OP_MOD ? "modulo" : "divmod()");
            double m = fmod(x, y);
            if (m != 0 && ((m < 0) != (y < 0))) m += y;
            if (op == OP_MOD) { *out = tv_float(m == 0 ? copysign(0.0, y) : m); return 0; }
            *out = tv_float(floor((x - m) / y + 0.5) == (x - m) / y ? (x - m) / y : floor(x / y));
            return 0;
        }
        case OP_POW: {
            if (x == 0 && y < 0) return tpl_fail(c, line, "0.0 cannot be raised to a negative power");
            if (x < 0 && y != floor(y) && isfinite(y)) return tpl_fail(c, line, "a negative number to a fractional power is complex (not supported)");
            double r = pow(x, y);
            if (isinf(r) && isfinite(x) && isfinite(y)) return tpl_fail(c, line, "(34, 'Numerical result out of range')");
            *out = tv_float(r);
            return 0;
        }
        }
    }
    if (op == OP_ADD) {
        if (a.t == TV_STR && b.t == TV_STR) return concat_seq(c, line, a, b, out);
        if (a.t == TV_LIST && b.t == TV_LIST && a.u.l->tuple == b.u.l->tuple) return concat_seq(c, line, a, b, out);
        if (a.t == TV_STR || a.t == TV_LIST)
            return tpl_fail(c, line, "can only concatenate %s (not \"%s\") to %s", tv_pytype(a), tv_pytype(b), tv_pytype(a));
    }
    if (op == OP_MUL) {
        if ((a.t == TV_STR || a.t == TV_LIST) && (b.t == TV_INT || b.t == TV_BOOL)) return repeat_seq(c, line, a, inum(b), out);
        if ((b.t == TV_STR || b.t == TV_LIST) && (a.t == TV_INT || a.t == TV_BOOL)) return repeat_seq(c, line, b, inum(a), out);
    }
    return type_error(c, line, op, a, b);
overflow:
    return tpl_fail(c, line, "integer overflow");
}

int tpl_arith(tctx *c, int line, int op, tv a, tv b, tv *out) { return arith(c, line, op, a, b, out); }

static int contains(tctx *c, int line, tv needle, tv hay, int *res) {
    switch (hay.t) {
    case TV_UNDEF: *res = 0; return 0;
    case TV_STR:
        if (needle.t != TV_STR)
            return tpl_fail(c, line, "'in <string>' requires string as left operand, not %s", tv_pytype(needle));
        *res = needle.u.s->len == 0 || memmem(hay.u.s->s, hay.u.s->len, needle.u.s->s, needle.u.s->len) != NULL;
        return 0;
    case TV_LIST:
        *res = 0;
        for (size_t i = 0; i < hay.u.l->n; i++) if (tv_eq(needle, hay.u.l->v[i])) { *res = 1; break; }
        return 0;
    case TV_DICT:
        if (needle.t == TV_LIST && !needle.u.l->tuple) return tpl_fail(c, line, "unhashable type: 'list'");
        *res = tdict_find(hay.u.d, needle) >= 0;
        return 0;
    default:
        return tpl_fail(c, line, "argument of type '%s' is not iterable", tv_pytype(hay));
    }
}

static int compare(tctx *c, int line, int op, tv a, tv b, int *res) {
    if (op == OP_EQ) { *res = tv_eq(a, b); return 0; }
    if (op == OP_NE) { *res = !tv_eq(a, b); return 0; }
    if (op == OP_IN || op == OP_NOTIN) {
        if (contains(c, line, a, b, res)) return -1;
        if (op == OP_NOTIN) *res = !*res;
        return 0;
    }
    if (a.t == TV_UNDEF) return tpl_fail_undef(c, line, a);
    if (b.t == TV_UNDEF) return tpl_fail_undef(c, line, b);
    int k;
    const char *sym = op == OP_LT ? "<" : op == OP_LTEQ ? "<=" : op == OP_GT ? ">" : ">=";
    if (tv_cmp(a, b, &k))
        return tpl_fail(c, line, "'%s' not supported between instances of '%s' and '%s'", sym, tv_pytype(a), tv_pytype(b));
    if (k == 2) { *res = 0; return 0; } /* NaN */
    *res = op == OP_LT ? k < 0 : op == OP_LTEQ ? k <= 0 : op == OP_GT ? k > 0 : k >= 0;
    return 0;
}

/* ------------------------------------------------------------------ calls */

static void args_free(targs *a) {
    for (int i = 0; i < a->npos; i++) tv_decref(a->pos[i]);
    for (int i = 0; i < a->nkw; i++) tv_decref(a->kwv[i]);
    free(a->pos); free(a->kwv);
    a->pos = a->kwv = NULL; a->npos = a->nkw = 0;
}

static int eval_args(tctx *c, const tnode *n, tscope *s, targs *a, int extra_kw) {
    memset(a, 0, sizeof *a);
    a->pos = calloc((size_t)n->args.n + 1, sizeof *a->pos);
    a->kwv = calloc((size_t)n->args2.n + (size_t)extra_kw + 1, sizeof *a->kwv);
    a->kwn = n->names;
    if (!a->pos || !a->kwv) { free(a->pos); free(a->kwv); return oom(c, n->line); }
    for (int i = 0; i < n->args.n; i++) {
        if (eval(c, n->args.v[i], s, &a->pos[i])) { args_free(a); return -1; }
        a->npos++;
    }
    for (int i = 0; i < n->args2.n; i++) {
        if (eval(c, n->args2.v[i], s, &a->kwv[i])) { args_free(a); return -1; }
        a->nkw++;
    }
    return 0;
}

tv *targ(targs *a, int pos, const char *kw) {
    if (pos >= 0 && pos < a->npos) return &a->pos[pos];
    if (kw) for (int i = 0; i < a->nkw; i++) if (!strcmp(a->kwn[i], kw)) return &a->kwv[i];
    return NULL;
}

static int exec_body(tctx *c, const tnodes *body, tscope *s);

/* Renders body into a fresh buffer and returns it as a string (macros, block set, filter). */
static int capture(tctx *c, const tnodes *body, tscope *s, tv *out) {
    tbuf buf = {.limit = c->out->limit};
    tbuf *saved = c->out;
    c->out = &buf;
    int r = exec_body(c, body, s);
    c->out = saved;
    if (r < 0) { tbuf_free(&buf); return -1; }
    *out = tv_str(buf.p ? buf.p : "", buf.n);
    tbuf_free(&buf);
    return out->t == TV_STR ? 0 : oom(c, 0);
}

static int call_macro(tctx *c, const tnode *at, tmacro *m, targs *a, tv *out) {
    const tnode *def = m->def;
    int line = at ? at->line : def->line;
    const char *mname = m->is_caller ? "caller" : def->name;
    if (m->is_caller && !m->scope) return tpl_fail(c, line, "caller() called after its call block ended");
    /* free names resolve where the macro was defined (a loop body, another macro) while that
       scope lives, else at the template's top level */
    if (a->npos > def->nnames)
        return tpl_fail(c, line, "macro '%s' takes not more than %d argument(s)", mname, def->nnames);
    if (enter(c, line)) return -1;
    tscope ms = {.parent = m->scope ? m->scope : c->root};
    int r = -1;
    char *bound = calloc((size_t)def->nnames + 1, 1);
    if (!bound) { oom(c, line); goto done; }
    for (int i = 0; i < a->npos; i++) {
        if (scope_set(c, line, &ms, def->names[i], tv_ref(a->pos[i]))) goto done;
        bound[i] = 1;
    }
    for (int k = 0; k < a->nkw; k++) {
        int found = 0;
        for (int i = 0; i < def->nnames; i++) {
            if (strcmp(def->names[i], a->kwn[k])) continue;
            if (bound[i]) { tpl_fail(c, line, "macro '%s' got multiple values for argument '%s'", mname, a->kwn[k]); goto done; }
            if (scope_set(c, line, &ms, def->names[i], tv_ref(a->kwv[k]))) goto done;
            bound[i] = 1; found = 1;
            break;
        }
        if (found) continue;
        if (!strcmp(a->kwn[k], "caller")) { if (scope_set(c, line, &ms, "caller", tv_ref(a->kwv[k]))) goto done; continue; }
        tpl_fail(c, line, "macro '%s' takes no keyword argument '%s'", mname, a->kwn[k]);
        goto done;
    }
    for (int i = 0; i < def->nnames; i++) /* parameters are locals even before their default is set */
        if (!bound[i] && scope_set(c, line, &ms, def->names[i], tv_undef_hint("'%s' is undefined", def->names[i]))) goto done;
    for (int i = 0; i < def->nnames; i++) {
        if (bound[i]) continue;
        const tnode *d = def->args2.v[i];
        tv v;
        if (d->kind == E_LIT && d->flag) v = tv_undef_hint("parameter '%s' was not provided", def->names[i]);
        else if (eval(c, d, &ms, &v)) goto done;
        if (scope_set(c, line, &ms, def->names[i], v)) goto done;
    }
    if (tpl_bind_undef(c, &ms, def->assigned, def->nassigned)) goto done;
    r = capture(c, &def->args, &ms, out);
done:
    free(bound);
    scope_clear(&ms);
    c->depth--;
    return r;
}

int tpl_call_value(tctx *c, const tnode *at, tv callee, targs *a, tv *out) {
    int line = at ? at->line : 0;
    switch (callee.t) {
    case TV_FUNC: return tpl_call_func(c, at, callee.u.fn, a, out);
    case TV_MACRO: return call_macro(c, at, callee.u.m, a, out);
    case TV_UNDEF: return tpl_fail_undef(c, line, callee);
    default: return tpl_fail(c, line, "'%s' object is not callable", tv_pytype(callee));
    }
}

/* ------------------------------------------------------------------ expressions */

static int eval_filter(tctx *c, const tnode *n, tscope *s, tv in, tv *out) {
    targs a;
    if (eval_args(c, n, s, &a, 0)) return -1;
    int r = tpl_call_filter(c, n, n->op, in, &a, out);
    args_free(&a);
    return r;
}

/* A chain of filters whose innermost operand is `in` (filter blocks, block set). */
static int apply_chain(tctx *c, const tnode *f, tscope *s, tv in, tv *out) {
    if (!f) { *out = tv_ref(in); return 0; }
    tv mid;
    if (apply_chain(c, f->a, s, in, &mid)) return -1;
    int r = eval_filter(c, f, s, mid, out);
    tv_decref(mid);
    return r;
}

static int eval(tctx *c, const tnode *n, tscope *s, tv *out) {
    if (enter(c, n->line)) return -1;
    int r = -1;
    tv a = tv_undef(), b = tv_undef();
    switch (n->kind) {
    case E_LIT: *out = tv_ref(n->val); r = 0; break;
    case E_NAME: {
        tv *v = scope_find(s, n->name);
        if (v && is_shadow(*v)) { *out = tv_undef_hint("'%s' is undefined", n->name); r = 0; break; }
        if (v) { *out = tv_ref(*v); r = 0; break; }
        if (tpl_global(n->name, out)) { r = 0; break; }
        *out = tv_undef_hint("'%s' is undefined", n->name);
        r = 0;
        break;
    }
    case E_ATTR:
        if (eval(c, n->a, s, &a)) break;
        r = tpl_getattr(c, n, a, n->name, out);
        break;
    case E_ITEM:
        if (eval(c, n->a, s, &a)) break;
        if (n->b->kind == E_SLICE) { r = do_slice(c, n->b, s, a, out); break; }
        if (eval(c, n->b, s, &b)) break;
        r = tpl_getitem(c, n, a, b, out);
        break;
    case E_CALL: {
        if (eval(c, n->a, s, &a)) break;
        targs args;
        if (eval_args(c, n, s, &args, 0)) break;
        r = tpl_call_value(c, n, a, &args, out);
        args_free(&args);
        break;
    }
    case E_FILTER:
        if (n->a && eval(c, n->a, s, &a)) break;
        r = eval_filter(c, n, s, a, out);
        break;
    case E_TEST: {
        if (eval(c, n->a, s, &a)) break;
        targs args;
        if (eval_args(c, n, s, &args, 0)) break;
        int res;
        r = tpl_call_test(c, n, n->op, a, &args, &res);
        args_free(&args);
        if (!r) *out = tv_bool(n->flag ? !res : res);
        break;
    }
    case E_NOT:
        if (eval(c, n->a, s, &a)) break;
        *out = tv_bool(!tv_truthy(a)); r = 0;
        break;
    case E_NEG: case E_POS:
        if (eval(c, n->a, s, &a)) break;
        if (a.t == TV_UNDEF) { r = tpl_fail_undef(c, n->line, a); break; }
        if (!is_num(a)) { r = tpl_fail(c, n->line, "bad operand type for unary %c: '%s'", n->kind == E_NEG ? '-' : '+', tv_pytype(a)); break; }
        if (n->kind == E_POS) *out = a.t == TV_FLOAT ? a : tv_int(inum(a));
        else if (a.t == TV_FLOAT) *out = tv_float(-a.u.f);
        else if (inum(a) == INT64_MIN) { r = tpl_fail(c, n->line, "integer overflow"); break; }
        else *out = tv_int(-inum(a));
        r = 0;
        break;
    case E_BIN:
        if (eval(c, n->a, s, &a) || eval(c, n->b, s, &b)) break;
        r = arith(c, n->line, n->op, a, b, out);
        break;
    case E_AND: case E_OR:
        if (eval(c, n->a, s, &a)) break;
        if (tv_truthy(a) == (n->kind == E_OR)) { *out = a; a = tv_undef(); r = 0; break; }
        r = eval(c, n->b, s, out);
        break;
    case E_CMP: {
        if (eval(c, n->a, s, &a)) break;
        int res = 1;
        r = 0;
        for (int i = 0; i < n->args.n && res; i++) {
            if (eval(c, n->args.v[i], s, &b)) { r = -1; break; }
            if (compare(c, n->line, n->ops[i], a, b, &res)) { r = -1; break; }
            tv_decref(a); a = b; b = tv_undef();
        }
        if (!r) *out = tv_bool(res);
        break;
    }
    case E_COND:
        if (eval(c, n->b, s, &a)) break;
        if (tv_truthy(a)) r = eval(c, n->a, s, out);
        else if (n->c) r = eval(c, n->c, s, out);
        else { *out = tv_undef_hint("the inline if-expression on line %d evaluated to false and no else section was defined.", n->line); r = 0; }
        break;
    case E_LIST: case E_TUPLE: {
        tlist *l = tlist_new((size_t)n->args.n);
        if (!l) { oom(c, n->line); break; }
        l->tuple = n->kind == E_TUPLE;
        r = 0;
        for (int i = 0; i < n->args.n; i++) {
            tv v;
            if (eval(c, n->args.v[i], s, &v)) { r = -1; break; }
            tlist_push(l, v);
        }
        if (r) tv_decref(tv_list(l)); else *out = tv_list(l);
        break;
    }
    case E_DICT: {
        tdict *d = tdict_new();
        if (!d) { oom(c, n->line); break; }
        r = 0;
        for (int i = 0; i < n->args.n && !r; i++) {
            tv k, v;
            if (eval(c, n->args.v[i], s, &k)) { r = -1; break; }
            if (k.t > TV_STR && !(k.t == TV_LIST && k.u.l->tuple)) {
                r = tpl_fail(c, n->line, "unhashable type: '%s'", tv_pytype(k));
                tv_decref(k);
                break;
            }
            if (eval(c, n->args2.v[i], s, &v)) { tv_decref(k); r = -1; break; }
            if (tdict_set(d, k, v)) r = oom(c, n->line);
        }
        if (r) tv_decref(tv_dict(d)); else *out = tv_dict(d);
        break;
    }
    default:
        r = tpl_fail(c, n->line, "internal error: bad expression node %d", (int)n->kind);
    }
    tv_decref(a); tv_decref(b);
    c->depth--;
    return r;
}

/* ------------------------------------------------------------------ statements */

static int unpack(tctx *c, int line, tscope *s, const tnode *n, tv v) {
    if (!n->op) return scope_set(c, line, s, n->names[0], v);
    if (v.t == TV_UNDEF) { int r = tpl_fail_undef(c, line, v); tv_decref(v); return r; }
    tlist *l;
    if (tpl_to_list(c, NULL, v, &l)) { tv_decref(v); return -1; }
    tv_decref(v);
    int r = 0;
    if ((int)l->n != n->nnames)
        r = tpl_fail(c, line, (int)l->n > n->nnames ? "too many values to unpack (expected %d)" : "not enough values to unpack (expected %d)", n->nnames);
    for (int i = 0; !r && i < n->nnames; i++) r = scope_set(c, line, s, n->names[i], tv_ref(l->v[i]));
    tv_decref(tv_list(l));
    return r;
}

/* A for loop's else block has its own scope, as in Jinja. */
static int exec_else(tctx *c, const tnode *n, tscope *s) {
    if (!n->args2.n) return 0;
    tscope es = {.parent = s};
    int r = tpl_bind_undef(c, &es, n->assigned2, n->nassigned2);
    if (!r) r = exec_body(c, &n->args2, &es);
    scope_clear(&es);
    return r;
}

static int exec_for(tctx *c, const tnode *n, tscope *s) {
    tv it;
    if (eval(c, n->a, s, &it)) return -1;
    tlist *items;
    int r = tpl_to_list(c, n->a, it, &items);
    tv_decref(it);
    if (r) return -1;
    if (n->b) { /* {% for x in xs if cond %}: filter first, so loop.length counts what is kept */
        tlist *kept = tlist_new(items->n);
        if (!kept) { tv_decref(tv_list(items)); return oom(c, n->line); }
        for (size_t i = 0; i < items->n && !r; i++) {
            tscope fs = {.parent = s};
            tv cond;
            r = unpack(c, n->line, &fs, n, tv_ref(items->v[i]));
            if (!r) r = eval(c, n->b, &fs, &cond);
            if (!r) { if (tv_truthy(cond)) tlist_push(kept, tv_ref(items->v[i])); tv_decref(cond); }
            scope_clear(&fs);
        }
        tv_decref(tv_list(items));
        items = kept;
        if (r) { tv_decref(tv_list(items)); return -1; }
    }
    if (items->n == 0) {
        tv_decref(tv_list(items));
        return exec_else(c, n, s);
    }
    /* Jinja runs the else block unless some iteration reached the end of its body: a loop
       whose every pass ended in break or continue still runs it (its generated code clears
       the flag as the body's last statement). Mirrored, since templates rely on Jinja. */
    int completed = 0;
    tloop *lp = calloc(1, sizeof *lp);
    if (!lp) { tv_decref(tv_list(items)); return oom(c, n->line); }
    lp->h.rc = 1; lp->h.kind = TV_LOOP;
    lp->items = items;
    lp->length = (int64_t)items->n;
    lp->depth0 = 0; /* depth counts recursive loops only, and those are not supported */
    tv loopv; loopv.t = TV_LOOP; loopv.u.lp = lp;
    r = 0;
    for (size_t i = 0; i < items->n; i++) {
        if (step(c, n->line)) { r = -1; break; }
        lp->index0 = (int64_t)i;
        tscope is = {.parent = s};
        r = unpack(c, n->line, &is, n, tv_ref(items->v[i]));
        if (!r) r = scope_set(c, n->line, &is, "loop", tv_ref(loopv));
        if (!r) r = tpl_bind_undef(c, &is, n->assigned, n->nassigned);
        if (!r) r = exec_body(c, &n->args, &is);
        scope_clear(&is);
        if (r == 1) { r = 0; break; }  /* break */
        if (r == 2) { r = 0; continue; } /* continue */
        if (r) break;
        completed = 1;
    }
    tv_decref(loopv);
    if (!r && !completed) r = exec_else(c, n, s);
    return r;
}

static int exec_stmt(tctx *c, const tnode *n, tscope *s) {
    if (step(c, n->line)) return -1;
    switch (n->kind) {
    case S_TEXT: return out_put(c, n->line, n->val.u.s->s, n->val.u.s->len);
    case S_OUT: {
        tv v;
        if (eval(c, n->a, s, &v)) return -1;
        int r = out_str(c, n->line, v);
        tv_decref(v);
        return r;
    }
    case S_IF: {
        tv v;
        if (eval(c, n->a, s, &v)) return -1;
        int t = tv_truthy(v);
        tv_decref(v);
        return exec_body(c, t ? &n->args : &n->args2, s);
    }
    case S_FOR: return exec_for(c, n, s);
    case S_SET: {
        tv v;
        if (eval(c, n->b, s, &v)) return -1;
        if (n->name2) {
            tv *ns = scope_find(s, n->name);
            if (!ns || ns->t != TV_NS) { tv_decref(v); return tpl_fail(c, n->line, "cannot assign attribute on non-namespace object"); }
            tv k = tv_cstr(n->name2);
            if (k.t != TV_STR) { tv_decref(v); return oom(c, n->line); }
            return tdict_set(ns->u.ns->d, k, v) ? oom(c, n->line) : 0;
        }
        return unpack(c, n->line, s, n, v);
    }
    case S_SETBLOCK: {
        tscope bs = {.parent = s};
        tv body, v;
        int r = tpl_bind_undef(c, &bs, n->assigned, n->nassigned);
        if (!r) r = capture(c, &n->args, &bs, &body);
        scope_clear(&bs);
        if (r) return -1;
        r = apply_chain(c, n->a, s, body, &v);
        tv_decref(body);
        if (r) return -1;
        return scope_set(c, n->line, s, n->names[0], v);
    }
    case S_MACRO: {
        tmacro *m = calloc(1, sizeof *m);
        if (!m) return oom(c, n->line);
        m->h.rc = 1; m->h.kind = TV_MACRO; m->def = n;
        tv v; v.t = TV_MACRO; v.u.m = m;
        if (scope_own(c, n->line, s, m)) { tv_decref(v); return -1; }
        return scope_set(c, n->line, s, n->name, v);
    }
    case S_CALLBLOCK: {
        tmacro *m = calloc(1, sizeof *m);
        if (!m) return oom(c, n->line);
        m->h.rc = 1; m->h.kind = TV_MACRO; m->def = n; m->is_caller = 1; m->scope = s;
        tv cv; cv.t = TV_MACRO; cv.u.m = m;
        const tnode *call = n->a;
        tv callee, res;
        targs a;
        int r = eval(c, call->a, s, &callee);
        if (!r) {
            r = eval_args(c, call, s, &a, 1);
            if (!r) {
                /* caller goes in as one more keyword argument, as Jinja passes it */
                const char **kwn = calloc((size_t)a.nkw + 1, sizeof *kwn);
                if (!kwn) r = oom(c, n->line);
                else {
                    for (int i = 0; i < a.nkw; i++) kwn[i] = a.kwn[i];
                    kwn[a.nkw] = "caller";
                    a.kwn = kwn;
                    a.kwv[a.nkw++] = tv_ref(cv);
                    r = tpl_call_value(c, call, callee, &a, &res);
                    free(kwn);
                }
                args_free(&a);
            }
            tv_decref(callee);
        }
        m->scope = NULL;
        tv_decref(cv);
        if (r) return -1;
        r = out_str(c, n->line, res);
        tv_decref(res);
        return r;
    }
    case S_FILTERBLOCK: {
        tscope bs = {.parent = s};
        tv body, v;
        int r = tpl_bind_undef(c, &bs, n->assigned, n->nassigned);
        if (!r) r = capture(c, &n->args, &bs, &body);
        scope_clear(&bs);
        if (r) return -1;
        r = apply_chain(c, n->a, s, body, &v);
        tv_decref(body);
        if (r) return -1;
        r = out_str(c, n->line, v);
        tv_decref(v);
        return r;
    }
    case S_BREAK: return 1;
    case S_CONTINUE: return 2;
    case S_WITH: {
        tscope ws = {.parent = s};
        int r = 0;
        for (int i = 0; i < n->nnames && !r; i++) {
            tv v;
            r = eval(c, n->args2.v[i], s, &v);
            if (!r) r = scope_set(c, n->line, &ws, n->names[i], v);
        }
        if (!r) r = tpl_bind_undef(c, &ws, n->assigned, n->nassigned);
        if (!r) r = exec_body(c, &n->args, &ws);
        scope_clear(&ws);
        return r;
    }
    case S_BODY: {
        tscope bs = {.parent = s};
        int r = tpl_bind_undef(c, &bs, n->assigned, n->nassigned);
        if (!r) r = exec_body(c, &n->args, &bs);
        scope_clear(&bs);
        return r;
    }
    default:
        return tpl_fail(c, n->line, "internal error: bad statement node %d", (int)n->kind);
    }
}

static int exec_body(tctx *c, const tnodes *body, tscope *s) {
    if (enter(c, 0)) return -1;
    int r = 0;
    for (int i = 0; i < body->n; i++) {
        r = exec_stmt(c, body->v[i], s);
        if (r) break;
    }
    c->depth--;
    return r;
}

/* Entry point for tpl_render (template.c): runs the whole body in the root scope. */
int tpl_exec(tctx *c, const tnodes *body) {
    int r = exec_body(c, body, c->root);
    if (r > 0) return 0; /* break/continue outside a loop cannot parse; be safe */
    return r;
}

void tpl_ctx_release(tctx *c) {
    /* namespaces can hold themselves (set ns.me = ns); empty them to break cycles */
    for (int i = 0; i < c->nns; i++) {
        tns *ns = c->nss[i];
        tdict *d = ns->d;
        ns->d = NULL;
        if (d) tv_decref(tv_dict(d));
        tv v; v.t = TV_NS; v.u.ns = ns;
        tv_decref(v);
    }
    free(c->nss);
    c->nss = NULL; c->nns = c->cap_ns = 0;
}

void tpl_scope_free(tscope *s) { scope_clear(s); }
int tpl_scope_set(tctx *c, tscope *s, const char *name, tv v) { return scope_set(c, 0, s, name, v); }
