/* tpl_internal.h — internals shared by the chat-template interpreter (src/text/tpl_*.c).
 *
 * The interpreter runs the Jinja2 subset that Hugging Face chat templates use, with the
 * environment transformers renders them in (trim_blocks, lstrip_blocks, loop controls, an
 * immutable sandbox). Four parts:
 *   tpl_value.c  the value type: a tagged 16-byte `tv` passed by value; strings, lists,
 *                dicts, namespaces, loop objects, functions and macros live on the heap with
 *                a reference count. Python's printing (str/repr), JSON dumping (json.dumps as
 *                transformers' tojson calls it), equality, ordering and truthiness.
 *   tpl_lex.c    source text -> tokens, with Jinja's whitespace control rules.
 *   tpl_parse.c  tokens -> a tree of tnode (arena-allocated, freed with the template).
 *   tpl_eval.c   runs the tree; tpl_builtins.c holds the filters, tests, methods, globals.
 *
 * Invariants: values are immutable once built, except namespaces (the one thing templates
 * may assign into) — so sharing by reference count is safe. A tv owns one reference to its
 * heap object; functions that "return" a tv into *out hand the caller a reference. Template
 * literals are immortal (rc < 0) and live in the template's arena. No function here exits or
 * aborts: failures set one message in the render context and return -1. */
#ifndef CI_TPL_INTERNAL_H
#define CI_TPL_INTERNAL_H
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------ values */

typedef enum {
    TV_UNDEF, TV_NONE, TV_BOOL, TV_INT, TV_FLOAT, TV_STR, TV_LIST, TV_DICT,
    TV_NS, TV_LOOP, TV_FUNC, TV_MACRO
} tv_type;

typedef struct tobj { int rc; int kind; } tobj; /* rc < 0: immortal (arena) */

typedef struct tstr {
    tobj h;
    size_t len;    /* bytes, not counting the NUL */
    size_t ncp;    /* code points; (size_t)-1 until counted */
    char s[];      /* UTF-8, NUL-terminated */
} tstr;

struct tlist; struct tdict; struct tns; struct tloop; struct tfunc; struct tmacro;

typedef struct tv {
    tv_type t;
    union {
        int b;
        int64_t i;
        double f;
        tstr *s;              /* TV_STR; TV_UNDEF: the hint (why undefined) or NULL */
        struct tlist *l;
        struct tdict *d;
        struct tns *ns;
        struct tloop *lp;
        struct tfunc *fn;
        struct tmacro *m;
        tobj *o;
    } u;
} tv;

typedef struct tlist { tobj h; int tuple; size_t n, cap; tv *v; } tlist;

/* Insertion-ordered dict; a hash index over positions once it grows past a few keys. */
typedef struct tdict {
    tobj h;
    size_t n, cap;
    tv *k, *v;
    uint32_t *idx;   /* open addressing, slot = position + 1, 0 = empty; NULL while small */
    size_t idxcap;
} tdict;

typedef struct tns { tobj h; tdict *d; } tns;

typedef struct tloop {
    tobj h;
    int64_t index0, length;
    tlist *items;   /* the (filtered) sequence, for previtem / nextitem */
    int depth0;
} tloop;

/* Builtin callables: global functions (range, namespace, ...) and bound methods. */
typedef struct tfunc { tobj h; int id; tv self; } tfunc;

struct tnode; struct tscope; struct tctx; struct targs;
typedef struct tmacro {
    tobj h;
    const struct tnode *def;   /* S_MACRO or S_CALLBLOCK node (owned by the template) */
    struct tscope *scope;      /* where it was defined (caller(): the call site); NULL once that
                                  scope has ended */
    int is_caller;
} tmacro;

static inline tv tv_undef(void) { tv v; v.t = TV_UNDEF; v.u.s = NULL; return v; }
static inline tv tv_none(void) { tv v; v.t = TV_NONE; v.u.i = 0; return v; }
static inline tv tv_bool(int b) { tv v; v.t = TV_BOOL; v.u.i = 0; v.u.b = !!b; return v; }
static inline tv tv_int(int64_t i) { tv v; v.t = TV_INT; v.u.i = i; return v; }
static inline tv tv_float(double f) { tv v; v.t = TV_FLOAT; v.u.f = f; return v; }
static inline int tv_heap(tv v) { return v.t >= TV_STR || (v.t == TV_UNDEF && v.u.s); }

void tv_incref(tv v);
void tv_decref(tv v);
static inline tv tv_ref(tv v) { tv_incref(v); return v; }

/* Constructors return NULL / TV_UNDEF-without-object only on allocation failure. */
tstr *tstr_new(const char *s, size_t len);
tstr *tstr_alloc(size_t len);                /* uninitialised bytes, NUL at len */
tv tv_str(const char *s, size_t len);        /* t == TV_NONE on allocation failure */
tv tv_cstr(const char *s);
tv tv_str_take(tstr *s);
size_t tstr_ncp(tstr *s);                     /* code points (counted once, cached) */

tlist *tlist_new(size_t cap);
int tlist_push(tlist *l, tv v);              /* takes the reference */
tdict *tdict_new(void);
int tdict_set(tdict *d, tv k, tv v);          /* takes both references; replaces in place */
long tdict_find(const tdict *d, tv k);        /* position or -1 */
tv *tdict_get_cstr(const tdict *d, const char *key);
tns *tns_new(void);
tv tv_list(tlist *l);
tv tv_dict(tdict *d);

/* Python semantics. */
int tv_truthy(tv v);
int tv_eq(tv a, tv b);
int tv_cmp(tv a, tv b, int *out);             /* -1 when the types do not order */
const char *tv_pytype(tv v);                  /* "str", "int", "NoneType", "list", ... */
/* Stable sort of positions by keys[pos] (Python semantics); -1 unorderable (*bad_a, *bad_b), -2 OOM. */
int tv_sort_index(size_t *idx, size_t n, const tv *keys, int reverse, size_t *bad_a, size_t *bad_b);
const char *tv_objrepr(tv v);                 /* jinja2's object_type_repr: "dict object", "None" */

/* A growable byte buffer with a hard cap (the render's output limit). */
typedef struct tbuf { char *p; size_t n, cap, limit; int over; } tbuf;
int tbuf_put(tbuf *b, const char *s, size_t n);
int tbuf_putc(tbuf *b, char c);
int tbuf_printf(tbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void tbuf_free(tbuf *b);

/* str(v) and repr(v) appended to b; 0 or -1 when the buffer is over its limit. */
int tv_write_str(tbuf *b, tv v);
int tv_write_repr(tbuf *b, tv v);
void tv_format_float(char *out, size_t n, double f); /* Python repr(float) */

/* json.dumps(v, ensure_ascii, indent, separators, sort_keys). indent < 0: none.
 * Returns 0, or -1 with a reason in why (a type that JSON cannot hold). */
typedef struct tjson_opts {
    int ensure_ascii, indent, sort_keys;
    const char *item_sep, *key_sep;   /* NULL: Python's defaults for the indent mode */
    const char *indent_str;           /* indent given as a string; overrides indent */
} tjson_opts;
int tv_write_json(tbuf *b, tv v, const tjson_opts *o, char *why, size_t whylen);

/* UTF-8 helpers (Python code-point semantics). */
int utf8_next(const char *s, size_t len, size_t *i);   /* decodes at *i, advances; bad byte -> 0xFFFD */
int utf8_put(char *out, int cp);                         /* returns bytes written (1..4) */
int py_isspace(int cp);
size_t utf8_offset(const char *s, size_t len, size_t cp_index); /* byte offset of a code point */

/* ------------------------------------------------------------------ tokens */

typedef enum {
    TK_EOF, TK_DATA, TK_VAR_BEGIN, TK_VAR_END, TK_BLOCK_BEGIN, TK_BLOCK_END,
    TK_NAME, TK_STRING, TK_INT, TK_FLOAT, TK_OP
} tk_type;

enum { /* operators */
    OP_ADD = 1, OP_SUB, OP_DIV, OP_FLOORDIV, OP_MUL, OP_MOD, OP_POW, OP_TILDE,
    OP_LBRACKET, OP_RBRACKET, OP_LPAREN, OP_RPAREN, OP_LBRACE, OP_RBRACE,
    OP_EQ, OP_NE, OP_GT, OP_GTEQ, OP_LT, OP_LTEQ, OP_ASSIGN, OP_DOT, OP_COLON,
    OP_PIPE, OP_COMMA, OP_SEMICOLON,
    /* not tokens: comparison operators used by the tree */
    OP_IN, OP_NOTIN
};

typedef struct tok {
    tk_type t;
    int op;           /* TK_OP */
    int line;
    const char *s;    /* TK_NAME / TK_STRING / TK_DATA: decoded text (arena) */
    size_t len;
    int64_t i;        /* TK_INT */
    double f;         /* TK_FLOAT */
} tok;

/* ------------------------------------------------------------------ arena */

typedef struct tarena { struct tchunk *head; } tarena;
void *tarena_alloc(tarena *a, size_t n);   /* zeroed, 16-aligned; NULL when out of memory */
char *tarena_strdup(tarena *a, const char *s, size_t n);
void tarena_free(tarena *a);

/* ------------------------------------------------------------------ tree */

typedef enum {
    /* expressions */
    E_LIT, E_NAME, E_ATTR, E_ITEM, E_SLICE, E_CALL, E_FILTER, E_TEST, E_NOT, E_NEG, E_POS,
    E_BIN, E_AND, E_OR, E_CMP, E_COND, E_LIST, E_TUPLE, E_DICT,
    /* statements */
    S_TEXT, S_OUT, S_IF, S_FOR, S_SET, S_SETBLOCK, S_MACRO, S_CALLBLOCK, S_FILTERBLOCK,
    S_BREAK, S_CONTINUE, S_WITH, S_BODY
} tnode_kind;

typedef struct tnodes { struct tnode **v; int n, cap; } tnodes;

typedef struct tnode {
    tnode_kind kind;
    int line;
    int op;                  /* E_BIN operator; E_FILTER / E_TEST builtin index; S_FOR: tuple target */
    int flag;                /* E_TEST: negated; S_SET: tuple target; S_FOR: has filter */
    const char *name;        /* E_NAME / E_ATTR / E_FILTER / E_TEST / S_MACRO name; S_SET namespace */
    const char *name2;       /* S_SET: attribute of a namespace target */
    struct tnode *a, *b, *c, *d;
    tnodes args;             /* positional args, list/tuple items, dict keys, body statements */
    tnodes args2;            /* keyword values, dict values, else / elif body, param defaults */
    const char **names;      /* keyword names, param names, for / set targets */
    int nnames;
    int *ops;                /* E_CMP operators, one per right-hand operand */
    const char **assigned;   /* frame nodes: locals that start undefined (tpl_parse.c, frame analysis) */
    int nassigned;
    const char **assigned2;  /* S_FOR: the same for its else block */
    int nassigned2;
    tv val;                  /* E_LIT / S_TEXT (immortal) */
} tnode;

int tnodes_push(tarena *a, tnodes *l, tnode *n);

/* ------------------------------------------------------------------ compiled template */

typedef struct tpl {
    tarena arena;
    char *name;      /* shown in errors: "chat template of DIR" etc. */
    tnodes body;
    const char **undef; int nundef;  /* top-level locals that start undefined */
} tpl_t;

/* Lexes src into tokens (arena). Returns 0 or -1 with "line N: why" in err. */
int tpl_lex(tarena *a, const char *src, size_t len, tok **toks, int *ntoks, char *err, size_t errlen);
/* Parses tokens into a body. */
int tpl_parse(tarena *a, const tok *toks, int ntoks, tnodes *body, const char ***undef, int *nundef,
              char *err, size_t errlen);

/* ------------------------------------------------------------------ render context */

typedef struct tscope {
    struct tscope *parent;
    int n, cap;
    const char **names;
    tv *vals;
    struct tmacro **owned;   /* macros defined here: they resolve free names through this scope
                                while it lives, and through the root after (scope = NULL) */
    int nowned, capowned;
} tscope;

typedef struct targs {
    tv *pos; int npos;
    const char **kwn; tv *kwv; int nkw;
} targs;

typedef struct tctx {
    const tpl_t *t;
    tscope *root;
    tbuf *out;
    char *err; size_t errlen;
    int failed;
    int raised;               /* the failure came from the template's raise_exception() */
    int err_line;
    int depth, max_depth;
    uint64_t steps, max_steps;
    size_t max_output;
    int64_t now;              /* strftime_now: seconds since the epoch (UTC); 0 = real clock */
    tns **nss; int nns, cap_ns;  /* every namespace made by this render, emptied at the end */
} tctx;

/* Charges work proportional to bytes built (string concatenation in a loop is quadratic),
 * against the same budget as statements; -1 once it is spent. */
int tpl_charge(tctx *c, int line, size_t bytes);
/* Records the first error (with the line) and returns -1. */
int tpl_fail(tctx *c, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* The undefined-value error, as jinja2 words it. */
int tpl_fail_undef(tctx *c, int line, tv u);
tv tv_undef_hint(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Builtins (tpl_builtins.c). Lookups return -1 when the name is unknown. */
int tpl_filter_index(const char *name);
int tpl_test_index(const char *name);
int tpl_call_filter(tctx *c, const tnode *at, int idx, tv in, targs *a, tv *out);
int tpl_call_test(tctx *c, const tnode *at, int idx, tv in, targs *a, int *out);
int tpl_global(const char *name, tv *out);                    /* range, namespace, ... */
int tpl_method(tv self, const char *name, tv *out);            /* 1 found, 0 no, -1 unsafe */
int tpl_call_func(tctx *c, const tnode *at, tfunc *f, targs *a, tv *out);
/* Evaluator entry points the builtins need (map / select with a filter or test name). */
int tpl_call_value(tctx *c, const tnode *at, tv callee, targs *a, tv *out);
int tpl_getattr(tctx *c, const tnode *at, tv obj, const char *name, tv *out);
int tpl_getitem(tctx *c, const tnode *at, tv obj, tv key, tv *out);
/* Iterates like Python's iter(): lists, tuples, dict keys, string code points. */
int tpl_to_list(tctx *c, const tnode *at, tv v, tlist **out);
int tpl_note_ns(tctx *c, tns *ns);

/* targs helpers: argument by position or keyword; NULL when absent. */
tv *targ(targs *a, int pos, const char *kw);

/* tpl_eval.c: run a body in the context's root scope; release what the render made. */
int tpl_exec(tctx *c, const tnodes *body);
void tpl_ctx_release(tctx *c);
void tpl_scope_free(tscope *s);
int tpl_bind_undef(tctx *c, tscope *s, const char *const *names, int n);
int tpl_scope_set(tctx *c, tscope *s, const char *name, tv v);
int tpl_percent_format(tctx *c, int line, tv fmt, tv args, tv *out);
/* a <op> b with Python semantics (OP_ADD ... OP_TILDE). */
int tpl_arith(tctx *c, int line, int op, tv a, tv b, tv *out);

#endif
