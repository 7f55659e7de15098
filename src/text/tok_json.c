/* tok_json.c — see tok_json.h. Recursive descent with an explicit value stack: the
 * children of an array/object are parsed onto the stack, then copied in one block into
 * the arena when the container closes, so every container's children are contiguous.
 * Depth is limited (512) so hostile input cannot exhaust the C stack. */
#include "tok_json.h"
#include "../core/status.h"
#include <stdlib.h>
#include <string.h>

#define TJ_MAX_DEPTH 512

typedef struct tj_chunk { struct tj_chunk *next; size_t used, cap; max_align_t data[]; } tj_chunk;

struct tj_doc {
    tj_chunk *chunks;
    tj_val root;
};

typedef struct {
    char *p, *end, *start;
    const char *what;
    char *err; size_t errlen;
    tj_doc *doc;
    tj_val *stack; size_t sn, scap;
    int depth;
} tj_parser;

static void *arena_alloc(tj_doc *d, size_t size) {
    size = (size + 15) & ~(size_t)15;
    tj_chunk *c = d->chunks;
    if (!c || c->cap - c->used < size) {
        size_t cap = size > ((size_t)1 << 20) ? size : ((size_t)1 << 20);
        c = malloc(sizeof(tj_chunk) + cap);
        if (!c) return NULL;
        c->cap = cap; c->used = 0; c->next = d->chunks; d->chunks = c;
    }
    void *r = (char *)c->data + c->used;
    c->used += size;
    return r;
}

static int fail(tj_parser *ps, const char *msg) {
    size_t off = (size_t)(ps->p - ps->start);
    size_t line = 1;
    for (const char *q = ps->start; q < ps->p; q++) if (*q == '\n') line++;
    return ci_err(ps->err, ps->errlen, "%s: invalid JSON at byte %zu (line %zu): %s", ps->what, off, line, msg);
}

static void skip_ws(tj_parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\n' || *ps->p == '\r' || *ps->p == '\t')) ps->p++;
}

static int push(tj_parser *ps, const tj_val *v) {
    if (ps->sn == ps->scap) {
        size_t nc = ps->scap ? ps->scap * 2 : 1024;
        tj_val *ns = realloc(ps->stack, nc * sizeof *ns);
        if (!ns) return ci_err(ps->err, ps->errlen, "%s: out of memory parsing JSON", ps->what);
        ps->stack = ns; ps->scap = nc;
    }
    ps->stack[ps->sn++] = *v;
    return 0;
}

static int hexv(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static int read_hex4(tj_parser *ps, const char *q, unsigned *out) {
    if (ps->end - q < 4) return -1;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) { int h = hexv(q[i]); if (h < 0) return -1; v = v * 16 + (unsigned)h; }
    *out = v;
    return 0;
}

/* Parses a string starting at the opening quote; unescapes in place. */
static int parse_string(tj_parser *ps, const char **s, uint32_t *len) {
    char *r = ++ps->p, *w = r;
    for (;;) {
        if (ps->p >= ps->end) return fail(ps, "unterminated string");
        unsigned char c = (unsigned char)*ps->p;
        if (c == '"') break;
        if (c < 0x20) return fail(ps, "control character in string");
        if (c != '\\') { *w++ = (char)c; ps->p++; continue; }
        if (ps->p + 1 >= ps->end) return fail(ps, "unterminated escape");
        char e = ps->p[1];
        ps->p += 2;
        switch (e) {
        case '"': *w++ = '"'; break;
        case '\\': *w++ = '\\'; break;
        case '/': *w++ = '/'; break;
        case 'b': *w++ = '\b'; break;
        case 'f': *w++ = '\f'; break;
        case 'n': *w++ = '\n'; break;
        case 'r': *w++ = '\r'; break;
        case 't': *w++ = '\t'; break;
        case 'u': {
            unsigned cp;
            if (read_hex4(ps, ps->p, &cp)) return fail(ps, "bad \\u escape");
            ps->p += 4;
            if (cp >= 0xD800 && cp < 0xDC00 && ps->end - ps->p >= 6 && ps->p[0] == '\\' && ps->p[1] == 'u') {
                unsigned lo;
                if (!read_hex4(ps, ps->p + 2, &lo) && lo >= 0xDC00 && lo < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    ps->p += 6;
                }
            }
            /* The escape took >= 6 bytes and UTF-8 needs <= 4, so w never passes p. */
            if (cp < 0x80) *w++ = (char)cp;
            else if (cp < 0x800) { *w++ = (char)(0xC0 | (cp >> 6)); *w++ = (char)(0x80 | (cp & 0x3F)); }
            else if (cp < 0x10000) {
                *w++ = (char)(0xE0 | (cp >> 12)); *w++ = (char)(0x80 | ((cp >> 6) & 0x3F));
                *w++ = (char)(0x80 | (cp & 0x3F));
            } else {
                *w++ = (char)(0xF0 | (cp >> 18)); *w++ = (char)(0x80 | ((cp >> 12) & 0x3F));
                *w++ = (char)(0x80 | ((cp >> 6) & 0x3F)); *w++ = (char)(0x80 | (cp & 0x3F));
            }
            break;
        }
        default: return fail(ps, "unknown escape");
        }
    }
    ps->p++; /* closing quote */
    *s = r;
    *len = (uint32_t)(w - r);
    *w = 0; /* safe: w < p, the closing quote's old position or before */
    return 0;
}

static int parse_value(tj_parser *ps, tj_val *v);

static int parse_container(tj_parser *ps, tj_val *v, int is_obj) {
    if (++ps->depth > TJ_MAX_DEPTH) return fail(ps, "nesting too deep");
    char close = is_obj ? '}' : ']';
    size_t base = ps->sn;
    ps->p++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == close) { ps->p++; goto done; }
    for (;;) {
        tj_val child;
        memset(&child, 0, sizeof child);
        skip_ws(ps);
        if (is_obj) {
            if (ps->p >= ps->end || *ps->p != '"') return fail(ps, "expected a string key");
            const char *k; uint32_t kl;
            if (parse_string(ps, &k, &kl)) return -1;
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != ':') return fail(ps, "expected ':'");
            ps->p++;
            skip_ws(ps);
            if (parse_value(ps, &child)) return -1;
            child.key = k; child.key_len = kl;
        } else if (parse_value(ps, &child)) return -1;
        if (push(ps, &child)) return -1;
        skip_ws(ps);
        if (ps->p >= ps->end) return fail(ps, "unterminated container");
        if (*ps->p == ',') { ps->p++; continue; }
        if (*ps->p == close) { ps->p++; break; }
        return fail(ps, is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
done:
    v->type = is_obj ? TJ_OBJ : TJ_ARR;
    v->n = (uint32_t)(ps->sn - base);
    v->u.kids = NULL;
    if (v->n) {
        v->u.kids = arena_alloc(ps->doc, v->n * sizeof(tj_val));
        if (!v->u.kids) return ci_err(ps->err, ps->errlen, "%s: out of memory parsing JSON", ps->what);
        memcpy(v->u.kids, ps->stack + base, v->n * sizeof(tj_val));
    }
    ps->sn = base;
    ps->depth--;
    return 0;
}

static int parse_value(tj_parser *ps, tj_val *v) {
    if (ps->p >= ps->end) return fail(ps, "unexpected end");
    char c = *ps->p;
    if (c == '{') return parse_container(ps, v, 1);
    if (c == '[') return parse_container(ps, v, 0);
    if (c == '"') {
        v->type = TJ_STR;
        return parse_string(ps, &v->u.s, &v->n);
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
        char *e;
        v->type = TJ_NUM;
        v->u.num = strtod(ps->p, &e);
        if (e == ps->p) return fail(ps, "bad number");
        ps->p = e;
        return 0;
    }
    static const struct { const char *w; int t; } lits[] = { { "null", TJ_NULL }, { "true", TJ_TRUE },
        { "false", TJ_FALSE }, { "NaN", TJ_NULL }, { "Infinity", TJ_NULL } };
    for (size_t i = 0; i < sizeof lits / sizeof lits[0]; i++) {
        size_t l = strlen(lits[i].w);
        if ((size_t)(ps->end - ps->p) >= l && !memcmp(ps->p, lits[i].w, l)) {
            v->type = (uint8_t)lits[i].t;
            ps->p += l;
            return 0;
        }
    }
    return fail(ps, "unexpected character");
}

tj_doc *tj_parse(char *buf, size_t len, const char *what, char *err, size_t errlen) {
    tj_doc *d = calloc(1, sizeof *d);
    if (!d) { ci_err(err, errlen, "%s: out of memory", what); return NULL; }
    buf[len] = 0;
    tj_parser ps = { .p = buf, .end = buf + len, .start = buf, .what = what, .err = err, .errlen = errlen, .doc = d };
    skip_ws(&ps);
    int rc = parse_value(&ps, &d->root);
    if (!rc) {
        skip_ws(&ps);
        if (ps.p != ps.end) rc = fail(&ps, "trailing characters after the value");
    }
    free(ps.stack);
    if (rc) { tj_free(d); return NULL; }
    return d;
}

const tj_val *tj_root(const tj_doc *d) { return &d->root; }

void tj_free(tj_doc *d) {
    if (!d) return;
    for (tj_chunk *c = d->chunks; c;) { tj_chunk *n = c->next; free(c); c = n; }
    free(d);
}

const tj_val *tj_get(const tj_val *v, const char *key) {
    if (!v || v->type != TJ_OBJ) return NULL;
    size_t kl = strlen(key);
    for (uint32_t i = 0; i < v->n; i++) {
        const tj_val *c = &v->u.kids[i];
        if (c->key_len == kl && !memcmp(c->key, key, kl)) return c;
    }
    return NULL;
}

int tj_str(const tj_val *obj, const char *key, const char **s, size_t *len) {
    const tj_val *v = tj_get(obj, key);
    if (!v || v->type == TJ_NULL) return 0;
    if (v->type != TJ_STR) return -1;
    *s = v->u.s;
    if (len) *len = v->n;
    return 1;
}

int tj_bool(const tj_val *obj, const char *key, int *out) {
    const tj_val *v = tj_get(obj, key);
    if (!v || v->type == TJ_NULL) return 0;
    if (v->type != TJ_TRUE && v->type != TJ_FALSE) return -1;
    *out = v->type == TJ_TRUE;
    return 1;
}

int tj_int(const tj_val *obj, const char *key, long long *out) {
    const tj_val *v = tj_get(obj, key);
    if (!v || v->type == TJ_NULL) return 0;
    if (v->type != TJ_NUM || v->u.num != (double)(long long)v->u.num) return -1;
    *out = (long long)v->u.num;
    return 1;
}
