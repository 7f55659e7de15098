/* schema_int.h — what schema.c, schema_node.c and schema_merge.c share: the compile context. */
#ifndef CI_SRV_SCHEMA_INT_H
#define CI_SRV_SCHEMA_INT_H
#include "schema.h"

/* type bits: null, boolean, object, array, string, number, integer */
enum { T_NULL = 1, T_BOOL = 2, T_OBJ = 4, T_ARR = 8, T_STR = 16, T_NUM = 32, T_INT = 64, T_ALL = 127 };

typedef struct {
    char *ref;
    int node;
} jsc_ref;

typedef struct {
    jsc_grammar *g;
    const json_t *doc;         /* where "#..." references point */
    const char *where;
    char path[512];            /* JSON pointer of the schema being compiled, under where */
    char *err;
    size_t errlen;
    int failed;
    jsc_ref *refs;
    int nrefs, caprefs;
    size_t rx_cells;           /* DFA table entries of every pattern so far (bounded: JSC_MAX_RX_CELLS) */
} jsc_ctx;

int jsc_fail(jsc_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* schema.c: nodes and the typed nodes of one schema object (ids, or -1 with c failed) */
int jsc_new_node(jsc_grammar *g, sn_kind k);
int jsc_lit_node(jsc_grammar *g, char *const *s, const uint32_t *len, int n);
int jsc_check_keywords(jsc_ctx *c, const json_t *s);
int jsc_type_bits(jsc_ctx *c, const json_t *t, unsigned *bits);
int jsc_string_node(jsc_ctx *c, const json_t *s);
int jsc_number_node(jsc_ctx *c, const json_t *s, int integer);
int jsc_array_node(jsc_ctx *c, const json_t *s, int depth);
int jsc_object_node(jsc_ctx *c, const json_t *s, int depth);
size_t jsc_push(jsc_ctx *c, const char *a, const char *b);     /* returns the length to cut back to */
int jsc_node(jsc_ctx *c, const json_t *s, int depth);
int jsc_is_annotation(const char *k);
/* The target of a local reference ("#", "#/a/b" with ~0 ~1), or NULL. */
const json_t *jsc_resolve(const json_t *doc, const char *ref);
/* allOf, a top-level $ref with siblings, and the branches' own allOf merged into one schema
 * (a new reference; NULL with c failed). */
json_t *jsc_flatten(jsc_ctx *c, const json_t *s, int depth);
json_t *jsc_merge(jsc_ctx *c, const json_t *a, const json_t *b);
/* 1 when no JSON value can match both nodes (what oneOf needs to act as anyOf). */
int jsc_disjoint(const jsc_grammar *g, int a, int b);

#endif
