/* tpl_parse.c — tokens to the template tree, plus the arena the tree lives in.
 *
 * A recursive-descent parser with Jinja2's grammar and precedence: conditional expression,
 * or, and, not, comparisons (chained, `in`, `not in`), + -, ~, * / // %, **, unary - +,
 * then primaries with postfix `.attr`, `[key]`, `[a:b:c]`, calls, `|filter` and `is test`
 * (so `messages|length - 1` and `not x is defined` parse as Jinja parses them). Statements:
 * if/elif/else, for (tuple targets, `if` filter, else), set (names, tuples, namespace
 * attributes, block set with filters), macro, call blocks, filter blocks, with, break and
 * continue (inside loops only), block and transformers' generation tag (rendered in place),
 * print. Unknown filters and tests are compile errors, as in Jinja. After parsing, a frame
 * analysis (the last section) decides, as Jinja's compiler does, which names each frame
 * (template, loop body, macro, block) assigns and which of those start out undefined.
 *
 * Invariants: every node, name and literal is in the template arena (freed at once with the
 * template); literal strings are immortal values. Nesting is capped (TPL_MAX_NEST) so a
 * hostile template cannot exhaust the C stack. Errors: "line N: what was expected". */
#include "text/tpl_internal.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TPL_MAX_NEST 200

/* ------------------------------------------------------------------ arena */

struct tchunk { struct tchunk *next; size_t used, cap; };
#define CHUNK_HDR ((sizeof(struct tchunk) + 15) & ~(size_t)15)

void *tarena_alloc(tarena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (!n) n = 16;
    struct tchunk *c = a->head;
    if (!c || c->used + n > c->cap) {
        size_t cap = n > 65536 ? n : 65536;
        c = malloc(CHUNK_HDR + cap);
        if (!c) return NULL;
        c->next = a->head; c->used = 0; c->cap = cap;
        a->head = c;
    }
    void *p = (char *)c + CHUNK_HDR + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

char *tarena_strdup(tarena *a, const char *s, size_t n) {
    char *p = tarena_alloc(a, n + 1);
    if (p) { memcpy(p, s, n); p[n] = 0; }
    return p;
}

void tarena_free(tarena *a) {
    struct tchunk *c = a->head;
    while (c) { struct tchunk *nx = c->next; free(c); c = nx; }
    a->head = NULL;
}

static tstr *arena_tstr(tarena *a, const char *s, size_t n) {
    tstr *t = tarena_alloc(a, sizeof *t + n + 1);
    if (!t) return NULL;
    t->h.rc = -1; t->h.kind = TV_STR; t->len = n; t->ncp = (size_t)-1;
    memcpy(t->s, s, n); t->s[n] = 0;
    return t;
}

int tnodes_push(tarena *a, tnodes *l, tnode *n) {
    if (l->n == l->cap) {
        int nc = l->cap ? l->cap * 2 : 4;
        tnode **nv = tarena_alloc(a, (size_t)nc * sizeof *nv);
        if (!nv) return -1;
        if (l->n) memcpy(nv, l->v, (size_t)l->n * sizeof *nv);
        l->v = nv; l->cap = nc;
    }
    l->v[l->n++] = n;
    return 0;
}

/* ------------------------------------------------------------------ parser state */

typedef struct parser {
    tarena *a;
    const tok *t;
    int n, i;
    char *err; size_t errlen;
    int depth;
    int loops;   /* enclosing for-loops (break / continue allowed) */
    int failed;
} parser;

static int pfail(parser *P, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int pfail(parser *P, const char *fmt, ...) {
    if (P->failed) return -1;
    P->failed = 1;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(P->err, P->errlen, "line %d: %s", P->t[P->i].line, msg);
    return -1;
}

static const tok *cur(parser *P) { return &P->t[P->i]; }
static const tok *peek(parser *P, int k) { int j = P->i + k; return &P->t[j < P->n ? j : P->n - 1]; }
static void adv(parser *P) { if (P->i < P->n - 1) P->i++; }
static int is_op(parser *P, int op) { return cur(P)->t == TK_OP && cur(P)->op == op; }
static int is_name(parser *P, const char *s) { return cur(P)->t == TK_NAME && !strcmp(cur(P)->s, s); }

static const char *tok_desc(const tok *t, char *buf, size_t n) {
    static const char *ops[] = {"", "+", "-", "/", "//", "*", "%", "**", "~", "[", "]", "(", ")", "{", "}",
                                "==", "!=", ">", ">=", "<", "<=", "=", ".", ":", "|", ",", ";"};
    switch (t->t) {
    case TK_EOF: return "end of template";
    case TK_DATA: return "template data";
    case TK_VAR_BEGIN: return "'{{'";
    case TK_VAR_END: return "end of print statement";
    case TK_BLOCK_BEGIN: return "'{%'";
    case TK_BLOCK_END: return "end of statement block";
    case TK_NAME: snprintf(buf, n, "'%s'", t->s); return buf;
    case TK_STRING: return "string";
    case TK_INT: return "integer";
    case TK_FLOAT: return "float";
    case TK_OP: snprintf(buf, n, "'%s'", t->op < (int)(sizeof ops / sizeof *ops) ? ops[t->op] : "?"); return buf;
    }
    return "token";
}

static int expect_op(parser *P, int op, const char *what) {
    if (is_op(P, op)) { adv(P); return 0; }
    char b[64];
    return pfail(P, "expected '%s', got %s", what, tok_desc(cur(P), b, sizeof b));
}

static int expect_block_end(parser *P) {
    if (cur(P)->t == TK_BLOCK_END) { adv(P); return 0; }
    char b[64];
    return pfail(P, "expected end of statement block, got %s", tok_desc(cur(P), b, sizeof b));
}

static tnode *node(parser *P, tnode_kind k) {
    tnode *n = tarena_alloc(P->a, sizeof *n);
    if (!n) { pfail(P, "out of memory"); return NULL; }
    n->kind = k;
    n->line = cur(P)->line;
    return n;
}

static int push(parser *P, tnodes *l, tnode *n) {
    if (!n) return -1;
    if (tnodes_push(P->a, l, n)) return pfail(P, "out of memory");
    return 0;
}

static int enter(parser *P) {
    if (++P->depth > TPL_MAX_NEST) return pfail(P, "template nested too deeply (more than %d levels)", TPL_MAX_NEST);
    return 0;
}

/* ------------------------------------------------------------------ expressions */

static tnode *parse_expression(parser *P, int with_condexpr);
static tnode *parse_tuple(parser *P, int with_condexpr, int explicit_parens, const char *extra_end);
static tnode *parse_unary(parser *P, int with_filter);
static tnode *parse_postfix(parser *P, tnode *n);
static tnode *parse_filter_expr(parser *P, tnode *n);
static tnode *parse_primary(parser *P);

/* Call arguments: (a, b, key=value). Positional in args, keywords in names/args2. */
static int parse_args(parser *P, tnode *n) {
    if (expect_op(P, OP_LPAREN, "(")) return -1;
    const char *kw[64]; int nkw = 0;
    while (!is_op(P, OP_RPAREN)) {
        if (n->args.n + nkw) { if (expect_op(P, OP_COMMA, ",")) return -1; if (is_op(P, OP_RPAREN)) break; }
        if (is_op(P, OP_MUL) || is_op(P, OP_POW)) return pfail(P, "*args and **kwargs in calls are not supported");
        if (cur(P)->t == TK_NAME && peek(P, 1)->t == TK_OP && peek(P, 1)->op == OP_ASSIGN) {
            if (nkw == 64) return pfail(P, "too many keyword arguments");
            kw[nkw++] = cur(P)->s;
            adv(P); adv(P);
            if (push(P, &n->args2, parse_expression(P, 1))) return -1;
        } else {
            if (nkw) return pfail(P, "positional argument follows keyword argument");
            if (push(P, &n->args, parse_expression(P, 1))) return -1;
        }
    }
    adv(P);
    if (nkw) {
        n->names = tarena_alloc(P->a, (size_t)nkw * sizeof *n->names);
        if (!n->names) return pfail(P, "out of memory");
        memcpy(n->names, kw, (size_t)nkw * sizeof *kw);
        n->nnames = nkw;
    }
    return 0;
}

/* name(.name)* as one dotted string (filter and test names). */
static const char *dotted_name(parser *P) {
    if (cur(P)->t != TK_NAME) { char b[64]; pfail(P, "expected a name, got %s", tok_desc(cur(P), b, sizeof b)); return NULL; }
    const char *s = cur(P)->s;
    adv(P);
    while (is_op(P, OP_DOT) && peek(P, 1)->t == TK_NAME) {
        adv(P);
        size_t l1 = strlen(s), l2 = strlen(cur(P)->s);
        char *j = tarena_alloc(P->a, l1 + l2 + 2);
        if (!j) { pfail(P, "out of memory"); return NULL; }
        memcpy(j, s, l1); j[l1] = '.'; memcpy(j + l1 + 1, cur(P)->s, l2);
        s = j;
        adv(P);
    }
    return s;
}

static tnode *parse_filter(parser *P, tnode *operand) {
    tnode *f = node(P, E_FILTER);
    if (!f) return NULL;
    f->a = operand;
    f->name = dotted_name(P);
    if (!f->name) return NULL;
    f->op = tpl_filter_index(f->name);
    if (f->op < 0) { pfail(P, "no filter named '%s'", f->name); return NULL; }
    if (is_op(P, OP_LPAREN) && parse_args(P, f)) return NULL;
    return f;
}

static tnode *parse_test(parser *P, tnode *operand) {
    tnode *t = node(P, E_TEST);
    if (!t) return NULL;
    t->a = operand;
    if (is_name(P, "not")) { t->flag = 1; adv(P); }
    t->name = dotted_name(P);
    if (!t->name) return NULL;
    t->op = tpl_test_index(t->name);
    if (t->op < 0) { pfail(P, "no test named '%s'", t->name); return NULL; }
    const tok *c = cur(P);
    if (is_op(P, OP_LPAREN)) {
        if (parse_args(P, t)) return NULL;
    } else if ((c->t == TK_NAME || c->t == TK_STRING || c->t == TK_INT || c->t == TK_FLOAT ||
                (c->t == TK_OP && (c->op == OP_LBRACKET || c->op == OP_LBRACE))) &&
               !is_name(P, "else") && !is_name(P, "or") && !is_name(P, "and")) {
        if (is_name(P, "is")) { pfail(P, "you cannot chain multiple tests with is"); return NULL; }
        tnode *arg = parse_primary(P);
        if (!arg || !(arg = parse_postfix(P, arg))) return NULL;
        if (push(P, &t->args, arg)) return NULL;
    }
    return t;
}

/* Inside [ ]: an expression or a slice a:b:c (each part optional). */
static tnode *parse_subscribed(parser *P) {
    tnode *start = NULL;
    if (!is_op(P, OP_COLON)) {
        start = parse_expression(P, 1);
        if (!start || !is_op(P, OP_COLON)) return start;
    }
    tnode *s = node(P, E_SLICE);
    if (!s) return NULL;
    s->b = start;
    adv(P); /* ':' */
    if (!is_op(P, OP_RBRACKET) && !is_op(P, OP_COMMA) && !is_op(P, OP_COLON)) {
        if (!(s->c = parse_expression(P, 1))) return NULL;
    }
    if (is_op(P, OP_COLON)) {
        adv(P);
        if (!is_op(P, OP_RBRACKET) && !is_op(P, OP_COMMA)) {
            if (!(s->d = parse_expression(P, 1))) return NULL;
        }
    }
    return s;
}

static tnode *parse_subscript(parser *P, tnode *obj) {
    if (is_op(P, OP_DOT)) {
        adv(P);
        const tok *t = cur(P);
        if (t->t == TK_NAME) {
            tnode *n = node(P, E_ATTR);
            if (!n) return NULL;
            n->a = obj; n->name = t->s;
            adv(P);
            return n;
        }
        if (t->t == TK_INT) {
            tnode *n = node(P, E_ITEM), *k = node(P, E_LIT);
            if (!n || !k) return NULL;
            k->val = tv_int(t->i);
            n->a = obj; n->b = k;
            adv(P);
            return n;
        }
        char b[64];
        pfail(P, "expected name or number after '.', got %s", tok_desc(t, b, sizeof b));
        return NULL;
    }
    adv(P); /* '[' */
    tnode *n = node(P, E_ITEM);
    if (!n) return NULL;
    n->a = obj;
    tnodes keys = {0};
    while (!is_op(P, OP_RBRACKET)) {
        if (keys.n) { if (expect_op(P, OP_COMMA, ",")) return NULL; if (is_op(P, OP_RBRACKET)) break; }
        if (push(P, &keys, parse_subscribed(P))) return NULL;
    }
    adv(P);
    if (keys.n == 1) n->b = keys.v[0]; /* x[] is x[()] in Jinja */
    else {
        tnode *t = node(P, E_TUPLE);
        if (!t) return NULL;
        t->args = keys;
        n->b = t;
    }
    return n;
}

static tnode *parse_postfix(parser *P, tnode *n) {
    while (n) {
        if (is_op(P, OP_DOT) || is_op(P, OP_LBRACKET)) n = parse_subscript(P, n);
        else if (is_op(P, OP_LPAREN)) {
            tnode *c = node(P, E_CALL);
            if (!c) return NULL;
            c->a = n;
            if (parse_args(P, c)) return NULL;
            n = c;
        } else break;
    }
    return n;
}

static tnode *parse_filter_expr(parser *P, tnode *n) {
    while (n) {
        if (is_op(P, OP_PIPE)) { adv(P); n = parse_filter(P, n); }
        else if (is_name(P, "is")) { adv(P); n = parse_test(P, n); }
        else if (is_op(P, OP_LPAREN)) {
            tnode *c = node(P, E_CALL);
            if (!c) return NULL;
            c->a = n;
            if (parse_args(P, c)) return NULL;
            n = c;
        } else break;
    }
    return n;
}

static tnode *parse_primary(parser *P) {
    if (enter(P)) return NULL;
    const tok *t = cur(P);
    tnode *n = NULL;
    switch (t->t) {
    case TK_NAME:
        if (!strcmp(t->s, "true") || !strcmp(t->s, "True") || !strcmp(t->s, "false") || !strcmp(t->s, "False")) {
            if ((n = node(P, E_LIT))) n->val = tv_bool(t->s[0] == 't' || t->s[0] == 'T');
        } else if (!strcmp(t->s, "none") || !strcmp(t->s, "None")) {
            if ((n = node(P, E_LIT))) n->val = tv_none();
        } else if ((n = node(P, E_NAME))) n->name = t->s;
        adv(P);
        break;
    case TK_STRING: {
        /* adjacent string literals join, as in Python */
        size_t total = 0;
        int j = P->i;
        while (P->t[j].t == TK_STRING) total += P->t[j++].len;
        char *buf = tarena_alloc(P->a, total + 1);
        if (!buf) { pfail(P, "out of memory"); break; }
        size_t o = 0;
        while (cur(P)->t == TK_STRING) { memcpy(buf + o, cur(P)->s, cur(P)->len); o += cur(P)->len; adv(P); }
        tstr *s = arena_tstr(P->a, buf, o);
        if (!s) { pfail(P, "out of memory"); break; }
        if ((n = node(P, E_LIT))) { n->val.t = TV_STR; n->val.u.s = s; }
        break;
    }
    case TK_INT: if ((n = node(P, E_LIT))) n->val = tv_int(t->i); adv(P); break;
    case TK_FLOAT: if ((n = node(P, E_LIT))) n->val = tv_float(t->f); adv(P); break;
    case TK_OP:
        if (t->op == OP_LPAREN) {
            adv(P);
            n = parse_tuple(P, 1, 1, NULL);
            if (n && expect_op(P, OP_RPAREN, ")")) n = NULL;
        } else if (t->op == OP_LBRACKET) {
            adv(P);
            if (!(n = node(P, E_LIST))) break;
            while (!is_op(P, OP_RBRACKET)) {
                if (n->args.n) { if (expect_op(P, OP_COMMA, ",")) return NULL; if (is_op(P, OP_RBRACKET)) break; }
                if (push(P, &n->args, parse_expression(P, 1))) return NULL;
            }
            adv(P);
        } else if (t->op == OP_LBRACE) {
            adv(P);
            if (!(n = node(P, E_DICT))) break;
            while (!is_op(P, OP_RBRACE)) {
                if (n->args.n) { if (expect_op(P, OP_COMMA, ",")) return NULL; if (is_op(P, OP_RBRACE)) break; }
                if (push(P, &n->args, parse_expression(P, 1))) return NULL;
                if (expect_op(P, OP_COLON, ":")) return NULL;
                if (push(P, &n->args2, parse_expression(P, 1))) return NULL;
            }
            adv(P);
        } else {
            char b[64];
            pfail(P, "unexpected %s", tok_desc(t, b, sizeof b));
        }
        break;
    default: {
        char b[64];
        pfail(P, "unexpected %s", tok_desc(t, b, sizeof b));
    }
    }
    P->depth--;
    return P->failed ? NULL : n;
}

static tnode *parse_unary(parser *P, int with_filter) {
    if (enter(P)) return NULL;
    tnode *n;
    if (is_op(P, OP_SUB) || is_op(P, OP_ADD)) {
        n = node(P, is_op(P, OP_SUB) ? E_NEG : E_POS);
        adv(P);
        if (n && !(n->a = parse_unary(P, 0))) n = NULL;
    } else n = parse_primary(P);
    n = parse_postfix(P, n);
    if (with_filter) n = parse_filter_expr(P, n);
    P->depth--;
    return n;
}

static tnode *binop(parser *P, tnode_kind k, int op, tnode *l, tnode *r) {
    if (!l || !r) return NULL;
    tnode *n = node(P, k);
    if (!n) return NULL;
    n->op = op; n->a = l; n->b = r; n->line = l->line;
    return n;
}

static tnode *parse_pow(parser *P) {
    tnode *l = parse_unary(P, 1);
    while (l && is_op(P, OP_POW)) { adv(P); l = binop(P, E_BIN, OP_POW, l, parse_unary(P, 1)); }
    return l;
}

static tnode *parse_math2(parser *P) {
    tnode *l = parse_pow(P);
    while (l && (is_op(P, OP_MUL) || is_op(P, OP_DIV) || is_op(P, OP_FLOORDIV) || is_op(P, OP_MOD))) {
        int op = cur(P)->op;
        adv(P);
        l = binop(P, E_BIN, op, l, parse_pow(P));
    }
    return l;
}

static tnode *parse_concat(parser *P) {
    tnode *l = parse_math2(P);
    while (l && is_op(P, OP_TILDE)) { adv(P); l = binop(P, E_BIN, OP_TILDE, l, parse_math2(P)); }
    return l;
}

static tnode *parse_math1(parser *P) {
    tnode *l = parse_concat(P);
    while (l && (is_op(P, OP_ADD) || is_op(P, OP_SUB))) {
        int op = cur(P)->op;
        adv(P);
        l = binop(P, E_BIN, op, l, parse_concat(P));
    }
    return l;
}

static tnode *parse_compare(parser *P) {
    tnode *first = parse_math1(P);
    if (!first) return NULL;
    tnode *n = NULL;
    int ops[64]; int nops = 0;
    for (;;) {
        int op = 0;
        const tok *t = cur(P);
        if (t->t == TK_OP && (t->op == OP_EQ || t->op == OP_NE || t->op == OP_LT || t->op == OP_LTEQ ||
                              t->op == OP_GT || t->op == OP_GTEQ)) { op = t->op; adv(P); }
        else if (is_name(P, "in")) { op = OP_IN; adv(P); }
        else if (is_name(P, "not") && peek(P, 1)->t == TK_NAME && !strcmp(peek(P, 1)->s, "in")) { op = OP_NOTIN; adv(P); adv(P); }
        else break;
        if (!n) { if (!(n = node(P, E_CMP))) return NULL; n->a = first; n->line = first->line; }
        if (nops == 64) { pfail(P, "comparison chain too long"); return NULL; }
        ops[nops++] = op;
        if (push(P, &n->args, parse_math1(P))) return NULL;
    }
    if (!n) return first;
    n->ops = tarena_alloc(P->a, (size_t)nops * sizeof *n->ops);
    if (!n->ops) { pfail(P, "out of memory"); return NULL; }
    memcpy(n->ops, ops, (size_t)nops * sizeof *ops);
    return n;
}

static tnode *parse_not(parser *P) {
    if (is_name(P, "not")) {
        if (enter(P)) return NULL;
        tnode *n = node(P, E_NOT);
        adv(P);
        if (n && !(n->a = parse_not(P))) n = NULL;
        P->depth--;
        return n;
    }
    return parse_compare(P);
}

static tnode *parse_and(parser *P) {
    tnode *l = parse_not(P);
    while (l && is_name(P, "and")) { adv(P); l = binop(P, E_AND, 0, l, parse_not(P)); }
    return l;
}

static tnode *parse_or(parser *P) {
    tnode *l = parse_and(P);
    while (l && is_name(P, "or")) { adv(P); l = binop(P, E_OR, 0, l, parse_and(P)); }
    return l;
}

static tnode *parse_condexpr(parser *P) {
    tnode *e1 = parse_or(P);
    while (e1 && is_name(P, "if")) {
        if (enter(P)) return NULL;
        adv(P);
        tnode *c = node(P, E_COND);
        if (!c) return NULL;
        c->a = e1;
        if (!(c->b = parse_or(P))) return NULL;
        if (is_name(P, "else")) { adv(P); if (!(c->c = parse_condexpr(P))) return NULL; }
        e1 = c;
        P->depth--;
    }
    return e1;
}

static tnode *parse_expression(parser *P, int with_condexpr) {
    if (enter(P)) return NULL;
    tnode *n = with_condexpr ? parse_condexpr(P) : parse_or(P);
    P->depth--;
    return P->failed ? NULL : n;
}

static int tuple_end(parser *P, const char *extra_end) {
    const tok *t = cur(P);
    if (t->t == TK_VAR_END || t->t == TK_BLOCK_END || t->t == TK_EOF) return 1;
    if (t->t == TK_OP && t->op == OP_RPAREN) return 1;
    return extra_end && is_name(P, extra_end);
}

/* a, b, c  ->  tuple; a single expression without a comma stays itself. */
static tnode *parse_tuple(parser *P, int with_condexpr, int explicit_parens, const char *extra_end) {
    tnode *t = node(P, E_TUPLE);
    if (!t) return NULL;
    int comma = 0;
    for (;;) {
        if (t->args.n) { if (!is_op(P, OP_COMMA)) break; adv(P); comma = 1; }
        if (tuple_end(P, extra_end)) break;
        if (push(P, &t->args, parse_expression(P, with_condexpr))) return NULL;
    }
    if (!comma) {
        if (t->args.n == 1) return t->args.v[0];
        if (!explicit_parens) {
            char b[64];
            pfail(P, "expected an expression, got %s", tok_desc(cur(P), b, sizeof b));
            return NULL;
        }
    }
    return t;
}

/* ------------------------------------------------------------------ statements */

static int subparse(parser *P, tnodes *body, const char *const *ends, int *which);
static tnode *parse_statement(parser *P);

static int ends_desc(const char *const *ends, char *buf, size_t n) {
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; ends && ends[i]; i++)
        o += (size_t)snprintf(buf + o, o < n ? n - o : 0, "%s'%s'", i ? " or " : "", ends[i]);
    return 0;
}

/* Statements until `{% end... %}`; leaves the parser on the end tag's name. */
static int subparse(parser *P, tnodes *body, const char *const *ends, int *which) {
    if (enter(P)) return -1;
    for (;;) {
        const tok *t = cur(P);
        if (t->t == TK_EOF) {
            if (!ends) break;
            char b[160];
            ends_desc(ends, b, sizeof b);
            return pfail(P, "unexpected end of template; looking for %s", b);
        }
        if (t->t == TK_DATA) {
            tnode *n = node(P, S_TEXT);
            tstr *s = n ? arena_tstr(P->a, t->s, t->len) : NULL;
            if (!s) return pfail(P, "out of memory");
            n->val.t = TV_STR; n->val.u.s = s;
            if (push(P, body, n)) return -1;
            adv(P);
            continue;
        }
        if (t->t == TK_VAR_BEGIN) {
            tnode *n = node(P, S_OUT);
            adv(P);
            if (!n || !(n->a = parse_tuple(P, 1, 0, NULL))) return -1;
            if (cur(P)->t != TK_VAR_END) {
                char b[64];
                return pfail(P, "expected end of print statement, got %s", tok_desc(cur(P), b, sizeof b));
            }
            adv(P);
            if (push(P, body, n)) return -1;
            continue;
        }
        if (t->t == TK_BLOCK_BEGIN) {
            adv(P);
            if (cur(P)->t == TK_NAME && ends) {
                for (int i = 0; ends[i]; i++)
                    if (!strcmp(cur(P)->s, ends[i])) { *which = i; P->depth--; return 0; }
            }
            if (push(P, body, parse_statement(P))) return -1;
            continue;
        }
        char b[64];
        return pfail(P, "unexpected %s", tok_desc(t, b, sizeof b));
    }
    P->depth--;
    return 0;
}

static int parse_end(parser *P) { adv(P); return expect_block_end(P); } /* on `endxxx` name */

static tnode *parse_if(parser *P) {
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    static const char *const endif[] = {"endif", NULL};
    tnode *top = node(P, S_IF), *n = top;
    if (!top) return NULL;
    adv(P); /* if */
    for (;;) {
        if (!(n->a = parse_tuple(P, 0, 0, NULL)) || expect_block_end(P)) return NULL;
        int w = -1;
        if (subparse(P, &n->args, ends, &w)) return NULL;
        if (w == 0) { /* elif: a nested if in the else branch, marked as such */
            tnode *e = node(P, S_IF);
            if (!e || push(P, &n->args2, e)) return NULL;
            e->flag = 1;
            adv(P);
            n = e;
            continue;
        }
        if (w == 1) {
            adv(P);
            if (expect_block_end(P) || subparse(P, &n->args2, endif, &w)) return NULL;
        }
        return parse_end(P) ? NULL : top;
    }
}

/* for / set targets: a name, or names separated by commas (optionally in parentheses). */
static int parse_targets(parser *P, tnode *n, const char *stop_name) {
    const char *names[32]; int k = 0, paren = 0;
    if (is_op(P, OP_LPAREN)) { paren = 1; adv(P); }
    for (;;) {
        if (cur(P)->t != TK_NAME) { char b[64]; return pfail(P, "expected a variable name, got %s", tok_desc(cur(P), b, sizeof b)); }
        if (k == 32) return pfail(P, "too many targets");
        names[k++] = cur(P)->s;
        adv(P);
        if (!is_op(P, OP_COMMA)) break;
        adv(P);
        if (paren && is_op(P, OP_RPAREN)) break;
        if (stop_name && is_name(P, stop_name)) break;
    }
    if (paren && expect_op(P, OP_RPAREN, ")")) return -1;
    n->names = tarena_alloc(P->a, (size_t)k * sizeof *n->names);
    if (!n->names) return pfail(P, "out of memory");
    memcpy(n->names, names, (size_t)k * sizeof *names);
    n->nnames = k;
    n->op = k > 1 || paren; /* tuple unpacking */
    return 0;
}

static tnode *parse_for(parser *P) {
    static const char *const ends[] = {"endfor", "else", NULL};
    static const char *const endfor[] = {"endfor", NULL};
    tnode *n = node(P, S_FOR);
    if (!n) return NULL;
    adv(P);
    if (parse_targets(P, n, "in")) return NULL;
    if (!is_name(P, "in")) { char b[64]; pfail(P, "expected 'in', got %s", tok_desc(cur(P), b, sizeof b)); return NULL; }
    adv(P);
    if (!(n->a = parse_tuple(P, 0, 0, "recursive"))) return NULL;
    if (is_name(P, "if")) { adv(P); if (!(n->b = parse_expression(P, 1))) return NULL; }
    if (is_name(P, "recursive")) { pfail(P, "recursive loops are not supported"); return NULL; }
    if (expect_block_end(P)) return NULL;
    int w = -1;
    P->loops++;
    int r = subparse(P, &n->args, ends, &w);
    P->loops--;
    if (r) return NULL;
    if (w == 1) {
        adv(P);
        if (expect_block_end(P) || subparse(P, &n->args2, endfor, &w)) return NULL;
    }
    return parse_end(P) ? NULL : n;
}

static tnode *parse_set(parser *P) {
    static const char *const endset[] = {"endset", NULL};
    tnode *n = node(P, S_SET);
    if (!n) return NULL;
    adv(P);
    if (cur(P)->t == TK_NAME && peek(P, 1)->t == TK_OP && peek(P, 1)->op == OP_DOT) {
        n->name = cur(P)->s;
        adv(P); adv(P);
        if (cur(P)->t != TK_NAME) { pfail(P, "expected an attribute name"); return NULL; }
        n->name2 = cur(P)->s;
        adv(P);
        if (expect_op(P, OP_ASSIGN, "=")) return NULL;
        if (!(n->b = parse_tuple(P, 1, 0, NULL)) || expect_block_end(P)) return NULL;
        return n;
    }
    if (parse_targets(P, n, NULL)) return NULL;
    if (is_op(P, OP_ASSIGN)) {
        adv(P);
        if (!(n->b = parse_tuple(P, 1, 0, NULL)) || expect_block_end(P)) return NULL;
        return n;
    }
    if (n->op) { pfail(P, "a block set takes one name"); return NULL; }
    n->kind = S_SETBLOCK;
    while (is_op(P, OP_PIPE)) { adv(P); if (!(n->a = parse_filter(P, n->a))) return NULL; }
    int w;
    if (expect_block_end(P) || subparse(P, &n->args, endset, &w) || parse_end(P)) return NULL;
    return n;
}

/* (a, b=default, ...) for macros and call blocks. */
static int parse_params(parser *P, tnode *n) {
    if (expect_op(P, OP_LPAREN, "(")) return -1;
    const char *names[64]; int k = 0;
    while (!is_op(P, OP_RPAREN)) {
        if (k) { if (expect_op(P, OP_COMMA, ",")) return -1; if (is_op(P, OP_RPAREN)) break; }
        if (cur(P)->t != TK_NAME) { char b[64]; return pfail(P, "expected a parameter name, got %s", tok_desc(cur(P), b, sizeof b)); }
        if (k == 64) return pfail(P, "too many parameters");
        names[k++] = cur(P)->s;
        adv(P);
        tnode *def = NULL;
        if (is_op(P, OP_ASSIGN)) { adv(P); if (!(def = parse_expression(P, 1))) return -1; }
        else {
            for (int i = 0; i < n->args2.n; i++)
                if (!(n->args2.v[i]->kind == E_LIT && n->args2.v[i]->flag))
                    return pfail(P, "non-default argument follows default argument");
        }
        /* a NULL default is stored as a placeholder node so the arrays stay aligned */
        if (!def) { if (!(def = node(P, E_LIT))) return -1; def->val = tv_undef(); def->flag = 1; }
        if (push(P, &n->args2, def)) return -1;
    }
    adv(P);
    n->names = tarena_alloc(P->a, (size_t)(k ? k : 1) * sizeof *n->names);
    if (!n->names) return pfail(P, "out of memory");
    memcpy(n->names, names, (size_t)k * sizeof *names);
    n->nnames = k;
    return 0;
}

static tnode *parse_macro(parser *P) {
    static const char *const ends[] = {"endmacro", NULL};
    tnode *n = node(P, S_MACRO);
    if (!n) return NULL;
    adv(P);
    if (cur(P)->t != TK_NAME) { pfail(P, "expected a macro name"); return NULL; }
    n->name = cur(P)->s;
    adv(P);
    if (parse_params(P, n) || expect_block_end(P)) return NULL;
    int saved = P->loops, w;
    P->loops = 0;
    int r = subparse(P, &n->args, ends, &w);
    P->loops = saved;
    if (r || parse_end(P)) return NULL;
    return n;
}

static tnode *parse_call_block(parser *P) {
    static const char *const ends[] = {"endcall", NULL};
    tnode *n = node(P, S_CALLBLOCK);
    if (!n) return NULL;
    n->name = "caller";
    adv(P);
    if (is_op(P, OP_LPAREN)) { if (parse_params(P, n)) return NULL; }
    else if (!(n->names = tarena_alloc(P->a, sizeof *n->names))) { pfail(P, "out of memory"); return NULL; }
    if (!(n->a = parse_expression(P, 1))) return NULL;
    if (n->a->kind != E_CALL) { pfail(P, "expected a call after 'call'"); return NULL; }
    int saved = P->loops, w;
    P->loops = 0;
    int r = expect_block_end(P) || subparse(P, &n->args, ends, &w);
    P->loops = saved;
    if (r || parse_end(P)) return NULL;
    return n;
}

static tnode *parse_filter_block(parser *P) {
    static const char *const ends[] = {"endfilter", NULL};
    tnode *n = node(P, S_FILTERBLOCK);
    if (!n) return NULL;
    adv(P);
    if (!(n->a = parse_filter(P, NULL))) return NULL;
    while (is_op(P, OP_PIPE)) { adv(P); if (!(n->a = parse_filter(P, n->a))) return NULL; }
    int w;
    if (expect_block_end(P) || subparse(P, &n->args, ends, &w) || parse_end(P)) return NULL;
    return n;
}

static tnode *parse_with(parser *P) {
    static const char *const ends[] = {"endwith", NULL};
    tnode *n = node(P, S_WITH);
    if (!n) return NULL;
    adv(P);
    const char *names[32]; int k = 0;
    while (cur(P)->t != TK_BLOCK_END) {
        if (k) { if (expect_op(P, OP_COMMA, ",")) return NULL; }
        if (cur(P)->t != TK_NAME) { pfail(P, "expected a variable name"); return NULL; }
        if (k == 32) { pfail(P, "too many targets"); return NULL; }
        names[k++] = cur(P)->s;
        adv(P);
        if (expect_op(P, OP_ASSIGN, "=")) return NULL;
        if (push(P, &n->args2, parse_expression(P, 1))) return NULL;
    }
    n->names = tarena_alloc(P->a, (size_t)(k ? k : 1) * sizeof *n->names);
    if (!n->names) { pfail(P, "out of memory"); return NULL; }
    memcpy(n->names, names, (size_t)k * sizeof *names);
    n->nnames = k;
    int w;
    if (expect_block_end(P) || subparse(P, &n->args, ends, &w) || parse_end(P)) return NULL;
    return n;
}

/* {% block name %}, {% generation %}: the body, rendered where it stands. */
static tnode *parse_plain_body(parser *P, const char *end, int named) {
    const char *const ends[] = {end, NULL};
    tnode *n = node(P, S_BODY);
    if (!n) return NULL;
    adv(P);
    if (named) {
        if (cur(P)->t != TK_NAME) { pfail(P, "expected a block name"); return NULL; }
        adv(P);
        if (is_name(P, "scoped")) adv(P);
        if (is_name(P, "required")) adv(P);
    }
    int w;
    if (expect_block_end(P) || subparse(P, &n->args, ends, &w)) return NULL;
    adv(P);
    if (named && cur(P)->t == TK_NAME) adv(P); /* {% endblock name %} */
    return expect_block_end(P) ? NULL : n;
}

static tnode *parse_statement(parser *P) {
    const tok *t = cur(P);
    if (t->t != TK_NAME) { char b[64]; pfail(P, "tag name expected, got %s", tok_desc(t, b, sizeof b)); return NULL; }
    if (enter(P)) return NULL;
    const char *s = t->s;
    tnode *n = NULL;
    if (!strcmp(s, "if")) n = parse_if(P);
    else if (!strcmp(s, "for")) n = parse_for(P);
    else if (!strcmp(s, "set")) n = parse_set(P);
    else if (!strcmp(s, "macro")) n = parse_macro(P);
    else if (!strcmp(s, "call")) n = parse_call_block(P);
    else if (!strcmp(s, "filter")) n = parse_filter_block(P);
    else if (!strcmp(s, "with")) n = parse_with(P);
    else if (!strcmp(s, "generation")) n = parse_plain_body(P, "endgeneration", 0);
    else if (!strcmp(s, "block")) n = parse_plain_body(P, "endblock", 1);
    else if (!strcmp(s, "print")) {
        n = node(P, S_OUT);
        adv(P);
        if (n && (!(n->a = parse_tuple(P, 1, 0, NULL)) || expect_block_end(P))) n = NULL;
    } else if (!strcmp(s, "break") || !strcmp(s, "continue")) {
        if (!P->loops) pfail(P, "'%s' outside of a for loop", s);
        else {
            n = node(P, s[0] == 'b' ? S_BREAK : S_CONTINUE);
            adv(P);
            if (n && expect_block_end(P)) n = NULL;
        }
    } else if (!strcmp(s, "include") || !strcmp(s, "import") || !strcmp(s, "from") || !strcmp(s, "extends"))
        pfail(P, "'%s' is not supported in chat templates (no template loader)", s);
    else pfail(P, "encountered unknown tag '%s'", s);
    P->depth--;
    return P->failed ? NULL : n;
}


/* ------------------------------------------------------------------ frame analysis
 *
 * Jinja compiles every frame (the template, a loop body, a loop's else, a macro, a call or
 * filter block, a block set, a with block) into a function whose locals are decided before
 * it runs. A name the frame assigns becomes a local; what it holds before the assignment
 * depends on the frame's first use of it: a read first (or an assignment only in some
 * branches of an if) means "look it up as usual", a name some enclosing frame already
 * knows is copied from there, and otherwise the local starts undefined — so a nested loop
 * or macro that reads it before the assignment sees it undefined, even when a render
 * variable of that name exists. This pass works that out per frame and records, in
 * node->assigned (for a loop's else: node->assigned2; the template: tpl_t.undef), the names
 * that start undefined; the evaluator binds them as such when it enters the frame. */

enum { K_PARAM = 1, K_RESOLVE, K_ALIAS, K_UNDEF };

typedef struct sym { const char *name; int kind; } sym;
typedef struct symtab {
    struct symtab *parent;
    sym *v; int n, cap;
    const char **st; int nst, capst;    /* names stored in this frame so far */
    tnode **nested; int nnested, capnested;
} symtab;

static int sym_own(const symtab *t, const char *name) {
    for (int i = 0; i < t->n; i++) if (!strcmp(t->v[i].name, name)) return i;
    return -1;
}
static int sym_find(const symtab *t, const char *name) {
    for (; t; t = t->parent) if (sym_own(t, name) >= 0) return 1;
    return 0;
}
static int grow(parser *P, void **arr, int *cap, int n, size_t el) {
    if (n < *cap) return 0;
    int nc = *cap ? *cap * 2 : 8;
    void *nv = tarena_alloc(P->a, (size_t)nc * el);
    if (!nv) return pfail(P, "out of memory");
    if (n) memcpy(nv, *arr, (size_t)n * el);
    *arr = nv; *cap = nc;
    return 0;
}
static int sym_add(parser *P, symtab *t, const char *name, int kind) {
    int i = sym_own(t, name);
    if (i >= 0) { t->v[i].kind = kind; return 0; }
    if (grow(P, (void **)&t->v, &t->cap, t->n, sizeof *t->v)) return -1;
    t->v[t->n].name = name; t->v[t->n].kind = kind; t->n++;
    return 0;
}
static int st_has(const symtab *t, const char *name) {
    for (int i = 0; i < t->nst; i++) if (!strcmp(t->st[i], name)) return 1;
    return 0;
}
static int st_add(parser *P, symtab *t, const char *name) {
    if (st_has(t, name)) return 0;
    if (grow(P, (void **)&t->st, &t->capst, t->nst, sizeof *t->st)) return -1;
    t->st[t->nst++] = name;
    return 0;
}
static int sym_load(parser *P, symtab *t, const char *name) {
    return sym_find(t, name) ? 0 : sym_add(P, t, name, K_RESOLVE);
}
static int sym_store(parser *P, symtab *t, const char *name) {
    if (st_add(P, t, name)) return -1;
    if (sym_own(t, name) >= 0) return 0;
    return sym_add(P, t, name, t->parent && sym_find(t->parent, name) ? K_ALIAS : K_UNDEF);
}
static int sym_param(parser *P, symtab *t, const char *name) {
    return st_add(P, t, name) || sym_add(P, t, name, K_PARAM) ? -1 : 0;
}
static int sym_copy(parser *P, const symtab *t, symtab *c) {
    memset(c, 0, sizeof *c);
    c->parent = t->parent;
    for (int i = 0; i < t->n; i++) if (sym_add(P, c, t->v[i].name, t->v[i].kind)) return -1;
    for (int i = 0; i < t->nst; i++) if (st_add(P, c, t->st[i])) return -1;
    return 0;
}

/* After an if: names stored in some but not all of its three branches read as usual. */
static int branch_update(parser *P, symtab *t, symtab *br, int nbr) {
    const char *names[256]; int counts[256], k = 0;
    for (int b = 0; b < nbr; b++)
        for (int i = 0; i < br[b].nst; i++) {
            const char *nm = br[b].st[i];
            if (st_has(t, nm)) continue;
            int j = 0;
            while (j < k && strcmp(names[j], nm)) j++;
            if (j == k) { if (k == 256) continue; names[k] = nm; counts[k++] = 0; }
            counts[j]++;
        }
    for (int b = 0; b < nbr; b++) {
        for (int i = 0; i < br[b].n; i++) if (sym_add(P, t, br[b].v[i].name, br[b].v[i].kind)) return -1;
        for (int i = 0; i < br[b].nst; i++) if (st_add(P, t, br[b].st[i])) return -1;
        for (int i = 0; i < br[b].nnested; i++) {
            if (grow(P, (void **)&t->nested, &t->capnested, t->nnested, sizeof *t->nested)) return -1;
            t->nested[t->nnested++] = br[b].nested[i];
        }
    }
    for (int j = 0; j < k; j++) {
        if (counts[j] == nbr) continue;
        if (sym_add(P, t, names[j], t->parent && sym_find(t->parent, names[j]) ? K_ALIAS : K_RESOLVE)) return -1;
    }
    return 0;
}

static int an_expr(parser *P, symtab *t, const tnode *e) {
    if (!e) return 0;
    if (e->kind == E_NAME) return sym_load(P, t, e->name);
    if (an_expr(P, t, e->a) || an_expr(P, t, e->b) || an_expr(P, t, e->c) || an_expr(P, t, e->d)) return -1;
    for (int i = 0; i < e->args.n; i++) if (an_expr(P, t, e->args.v[i])) return -1;
    for (int i = 0; i < e->args2.n; i++) if (an_expr(P, t, e->args2.v[i])) return -1;
    return 0;
}

static int an_nested(parser *P, symtab *t, tnode *n) {
    if (grow(P, (void **)&t->nested, &t->capnested, t->nnested, sizeof *t->nested)) return -1;
    t->nested[t->nnested++] = n;
    return 0;
}

static int an_body(parser *P, symtab *t, const tnodes *body);

static int an_if(parser *P, symtab *t, const tnode *n) {
    /* Jinja's If has three branches: body, elif list, else */
    if (an_expr(P, t, n->a)) return -1;
    const tnode *elifs[512]; int ne = 0;
    const tnodes *els = &n->args2;
    while (els->n == 1 && els->v[0]->kind == S_IF && els->v[0]->flag && ne < 512) {
        elifs[ne++] = els->v[0];
        els = &els->v[0]->args2;
    }
    symtab br[3];
    if (sym_copy(P, t, &br[0]) || sym_copy(P, t, &br[1]) || sym_copy(P, t, &br[2])) return -1;
    if (an_body(P, &br[0], &n->args)) return -1;
    for (int i = 0; i < ne; i++) { /* each elif: an If of its own with an empty elif and else */
        symtab sub[3];
        if (an_expr(P, &br[1], elifs[i]->a)) return -1;
        if (sym_copy(P, &br[1], &sub[0]) || sym_copy(P, &br[1], &sub[1]) || sym_copy(P, &br[1], &sub[2])) return -1;
        if (an_body(P, &sub[0], &elifs[i]->args) || branch_update(P, &br[1], sub, 3)) return -1;
    }
    if (an_body(P, &br[2], els)) return -1;
    return branch_update(P, t, br, 3);
}

static int an_stmt(parser *P, symtab *t, tnode *s) {
    switch (s->kind) {
    case S_OUT: return an_expr(P, t, s->a);
    case S_IF: return an_if(P, t, s);
    case S_FOR: return an_expr(P, t, s->a) || an_nested(P, t, s);
    case S_SET:
        if (an_expr(P, t, s->b)) return -1;
        if (s->name2) return sym_load(P, t, s->name);
        for (int i = 0; i < s->nnames; i++) if (sym_store(P, t, s->names[i])) return -1;
        return 0;
    case S_SETBLOCK: return sym_store(P, t, s->names[0]) || an_nested(P, t, s);
    case S_MACRO: return sym_store(P, t, s->name) || an_nested(P, t, s);
    case S_CALLBLOCK: return an_expr(P, t, s->a) || an_nested(P, t, s);
    case S_FILTERBLOCK: return an_expr(P, t, s->a) || an_nested(P, t, s);
    case S_WITH:
        for (int i = 0; i < s->args2.n; i++) if (an_expr(P, t, s->args2.v[i])) return -1;
        return an_nested(P, t, s);
    case S_BODY: return an_nested(P, t, s);
    default: return 0;
    }
}

static int an_body(parser *P, symtab *t, const tnodes *body) {
    for (int i = 0; i < body->n; i++) if (an_stmt(P, t, body->v[i])) return -1;
    return 0;
}

static int an_frames_below(parser *P, symtab *t);

/* The names of t that start undefined, as an arena array. */
static int undef_list(parser *P, symtab *t, const char ***out, int *n) {
    int k = 0;
    for (int i = 0; i < t->n; i++) k += t->v[i].kind == K_UNDEF;
    *n = k;
    *out = NULL;
    if (!k) return 0;
    *out = tarena_alloc(P->a, (size_t)k * sizeof **out);
    if (!*out) return pfail(P, "out of memory");
    k = 0;
    for (int i = 0; i < t->n; i++) if (t->v[i].kind == K_UNDEF) (*out)[k++] = t->v[i].name;
    return 0;
}

static int an_frame(parser *P, symtab *parent, tnode *n) {
    if (++P->depth > TPL_MAX_NEST * 4) return pfail(P, "template nested too deeply");
    symtab f = {.parent = parent};
    int r = 0;
    switch (n->kind) {
    case S_FOR:
        for (int i = 0; i < n->nnames && !r; i++) r = sym_param(P, &f, n->names[i]);
        if (!r) r = an_expr(P, &f, n->b) || an_body(P, &f, &n->args) || an_frames_below(P, &f) ||
                    undef_list(P, &f, &n->assigned, &n->nassigned);
        if (!r && n->args2.n) {
            symtab e = {.parent = parent};
            r = an_body(P, &e, &n->args2) || an_frames_below(P, &e) || undef_list(P, &e, &n->assigned2, &n->nassigned2);
        }
        break;
    case S_MACRO: case S_CALLBLOCK:
        for (int i = 0; i < n->nnames && !r; i++) r = sym_param(P, &f, n->names[i]);
        for (int i = 0; i < n->args2.n && !r; i++)
            if (!(n->args2.v[i]->kind == E_LIT && n->args2.v[i]->flag)) r = an_expr(P, &f, n->args2.v[i]);
        if (!r) r = an_body(P, &f, &n->args) || an_frames_below(P, &f) || undef_list(P, &f, &n->assigned, &n->nassigned);
        break;
    case S_WITH:
        for (int i = 0; i < n->nnames && !r; i++) r = sym_param(P, &f, n->names[i]);
        if (!r) r = an_body(P, &f, &n->args) || an_frames_below(P, &f) || undef_list(P, &f, &n->assigned, &n->nassigned);
        break;
    default: /* block set, filter block, block / generation */
        r = an_body(P, &f, &n->args) || an_frames_below(P, &f) || undef_list(P, &f, &n->assigned, &n->nassigned);
    }
    P->depth--;
    return r ? -1 : 0;
}

/* Nested frames are analysed once their parent frame is complete, as Jinja does. */
static int an_frames_below(parser *P, symtab *t) {
    for (int i = 0; i < t->nnested; i++) if (an_frame(P, t, t->nested[i])) return -1;
    return 0;
}

int tpl_parse(tarena *a, const tok *toks, int ntoks, tnodes *body, const char ***undef, int *nundef,
              char *err, size_t errlen) {
    parser P = {.a = a, .t = toks, .n = ntoks, .err = err, .errlen = errlen};
    memset(body, 0, sizeof *body);
    if (subparse(&P, body, NULL, NULL) || P.failed) return -1;
    symtab root = {0};
    P.depth = 0;
    if (an_body(&P, &root, body) || an_frames_below(&P, &root) || undef_list(&P, &root, undef, nundef)) return -1;
    return 0;
}
