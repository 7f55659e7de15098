/* schema.h — JSON Schema to a grammar for constrained decoding (structured outputs and
 * strict tool calls), and the byte-at-a-time matcher that runs it.
 *
 * Compile (schema.c, schema_node.c, schema_merge.c): a schema (jansson) becomes nodes: literals (enum,
 * const, true / false / null), strings (length bounds, a pattern / format DFA, sregex.h),
 * numbers (integer or not, bounds), arrays (prefixItems, items, minItems / maxItems),
 * objects (properties in any order, required, additionalProperties), unions (anyOf,
 * oneOf of provably disjoint alternatives, type lists), references ($ref into the same
 * document: recursion is a cycle of nodes) and sequences (a literal, a value, a literal:
 * how a tool call wraps its arguments), and free text in which each call marker must be
 * followed by a call (strict tools under tool_choice auto). allOf is merged into one schema before it is
 * compiled. A keyword cinfer does not implement, a malformed schema or one nested past
 * JSC_MAX_DEPTH is an error naming the keyword and where it is (one line), never ignored.
 *
 * The grammar generates a subset of what the schema accepts, chosen so that every prefix
 * the matcher lets through can still be completed (no dead ends): object keys are written
 * without escapes, numbers have no exponent and at
 * most 15 digits, strings never hold U+FFFD (token texts use it for a part of a character),
 * whitespace between tokens comes in runs of at most SM_MAX_WS.
 *
 * Match (schema_match.c): the state is a few threads (alternatives still alive, at most
 * SM_MAX_THREADS; dropping one past that keeps the rest sound), each the top frame of a
 * stack whose lower frames live, immutable and shared, in the matcher's arena. Copying a
 * state is copying its threads; trying bytes that are then dropped costs arena room that
 * sm_reset gives back. */
#ifndef CI_SRV_SCHEMA_H
#define CI_SRV_SCHEMA_H
#include "sregex.h"
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

enum { JSC_MAX_RX_CELLS = 1 << 20, JSC_MAX_DEPTH = 64, JSC_MAX_NODES = 20000, JSC_MAX_PROPS = 64, SM_MAX_THREADS = 8, SM_MAX_WS = 32, SM_MAX_STACK = 128 };

typedef enum { SN_ANY, SN_LIT, SN_STR, SN_NUM, SN_ARR, SN_OBJ, SN_UNION, SN_SEQ, SN_REF, SN_TEXT } sn_kind;

typedef struct {
    char *name;                /* the key's bytes (as written: no escapes) */
    uint32_t len;
    int node;
} sn_prop;

typedef struct {
    sn_kind kind;
    int loose;                 /* made from a schema without "type": values of the types it does not
                                * generate match it too (what oneOf's disjointness test must know) */
    /* SN_LIT: byte strings, sorted */
    char **lit;
    uint32_t *llen;
    int nlit;
    /* SN_STR: code points in [min_len, max_len]; rx NULL: any text */
    uint32_t min_len, max_len;
    rx_dfa *rx;
    uint8_t *fin;              /* with rx and a small max_len: [n_states, max_len + 1], 1 where a string in
                                * that pattern state with that many characters can still end within
                                * the bounds (exact; else the fewest / most distances of rx are used) */
    /* SN_NUM: integer or not; value in [lo, hi] (lo_x / hi_x: exclusive) */
    int integer, lo_x, hi_x;
    double lo, hi;
    /* SN_ARR: item i is prefix[i] below nprefix, else items (-1: none); count in [min_items, max_items] */
    int *prefix, nprefix, items;
    uint32_t min_items, max_items;
    /* SN_OBJ: props sorted by name; required: bit i = props[i]; addl: node of other keys, -1 none */
    sn_prop *props;
    int nprops, addl;
    uint64_t required;
    /* SN_UNION: alternatives; SN_SEQ: elements in order; SN_REF: kids[0] is the target;
     * SN_TEXT: free text until lit[0] (a marker) appears, then kids[0] */
    int *kids, nkids;
} sn_node;

typedef struct jsc_grammar {
    sn_node *nodes;
    int n, cap;
    int root;                  /* the value of the reply */
    int any, any_obj, any_arr, any_str, any_num, any_lit;   /* built-in nodes for any JSON */
} jsc_grammar;

/* ---- building ---- */
jsc_grammar *jsc_new(void);
void jsc_free(jsc_grammar *g);
/* The node of a schema (doc: the document its $refs point into, usually the schema itself).
 * where: how the error names the schema's place (e.g. "response_format.json_schema.schema").
 * Node id, or -1 with err. */
int jsc_schema(jsc_grammar *g, const json_t *doc, const json_t *schema, const char *where, char *err, size_t errlen);
int jsc_literal(jsc_grammar *g, const char *s, size_t n);                 /* one byte string */
int jsc_group(jsc_grammar *g, sn_kind kind, const int *kids, int n);      /* SN_UNION or SN_SEQ */
/* Free text (any bytes) that may end anywhere, except that each time `marker` appears,
 * a value of node `then` must follow (then text again). How a reply with optional tool
 * calls is held: text, and each call that starts is constrained. */
int jsc_text(jsc_grammar *g, const char *marker, size_t n, int then);
/* Convenience: compiles schema as the root. 0 or -1 with err. */
int jsc_compile(jsc_grammar *g, const json_t *schema, const char *where, char *err, size_t errlen);

/* ---- matching ---- */
typedef struct {
    uint16_t node;
    uint8_t ph;                /* phase in the node */
    uint8_t ws;                /* whitespace bytes in a row */
    uint8_t lx, cont, first;   /* strings / keys: lexical state, UTF-8 bytes due, their range */
    uint8_t aux;               /* \u digits left; number: digits; key: additional-only */
    uint16_t pos;              /* literal / key position; \u value */
    uint16_t dfa;              /* pattern state */
    uint32_t n;                /* code points, items, or the value node of a key (+1) */
    uint32_t lo, hi;           /* literal / key candidates [lo, hi) */
    uint64_t x;                /* object: keys seen; number: integer part */
    uint64_t y;                /* number: fraction digits as an integer */
} sm_frame;

typedef struct {
    sm_frame top;
    uint32_t parent;           /* arena cell below the top; 0: none */
    uint32_t depth;
} sm_thread;

typedef struct {
    int n;                     /* 0: dead */
    sm_thread t[SM_MAX_THREADS];
} sm_state;

typedef struct {
    sm_frame f;
    uint32_t parent;
} sm_cell;

typedef struct {
    const jsc_grammar *g;
    sm_cell *cells;            /* [0] unused */
    uint32_t n, cap;
    int oom;
} sm_matcher;

int sm_init(sm_matcher *m, const jsc_grammar *g, sm_state *s);    /* 0, or -1 on no memory */
void sm_release(sm_matcher *m);
/* Feeds bytes: 0 while the text is a prefix the grammar allows, -1 (s->n == 0) once not. */
int sm_feed(sm_matcher *m, sm_state *s, const char *p, size_t n);
int sm_feed_byte(sm_matcher *m, sm_state *s, unsigned char c);
/* out = in after byte c (in is unchanged); 0, or -1 when out is dead. */
int sm_next(sm_matcher *m, const sm_state *in, unsigned char c, sm_state *out);
/* 1 when the text so far is a whole reply (the root value is complete). */
int sm_complete(const sm_matcher *m, const sm_state *s);
/* Arena room: trial feeds between sm_mark and sm_reset leave nothing behind. */
static inline uint32_t sm_mark(const sm_matcher *m) { return m->n; }
static inline void sm_reset(sm_matcher *m, uint32_t mark) { m->n = mark; }
/* When the state is one thread inside a string body that takes any plain text (no
 * pattern, at a character boundary), how many more code points it may take (>= 0);
 * -1 otherwise. Lets a mask accept runs of plain text without walking them. */
long sm_plain_room(const sm_matcher *m, const sm_state *s);
/* The byte that starts the marker when the state is one thread in free text with no part
 * of its marker written (any bytes but that one keep it there); -1 otherwise. */
int sm_text_stop(const sm_matcher *m, const sm_state *s);
/* When the state is one thread inside a string body under a pattern, at a character
 * boundary: *loop gets the ASCII bytes that keep its pattern state (sregex.h rx_dfa.loop)
 * and the result is how many more characters such text may add (>= 0); -1 otherwise. */
long sm_loop_room(const sm_matcher *m, const sm_state *s, const uint64_t **loop);

#endif
