/* schema.c — JSON Schema -> grammar nodes (schema.h). One pass over the schema, depth
 * first; $ref targets are compiled once (a reference node per target, so recursion is a
 * cycle); allOf and the siblings of anyOf / oneOf are merged first (schema_merge.c).
 * Errors name the keyword and its place as a JSON pointer under `where`. */
#include "schema.h"
#include "schema_int.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int jsc_fail(jsc_ctx *c, const char *fmt, ...) {
    if (c->failed) return -1;
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(c->err, c->errlen, "%s at %s%s", msg, c->where, c->path[0] ? c->path : "");
    c->failed = 1;
    return -1;
}

static int new_node(jsc_grammar *g, sn_kind k) {
    if (g->n >= JSC_MAX_NODES) return -1;
    if (g->n == g->cap) {
        int nc = g->cap ? g->cap * 2 : 64;
        sn_node *nn = realloc(g->nodes, (size_t)nc * sizeof *nn);
        if (!nn) return -1;
        g->nodes = nn;
        g->cap = nc;
    }
    g->nodes[g->n] = (sn_node){ .kind = k, .items = -1, .addl = -1, .max_len = UINT32_MAX, .max_items = UINT32_MAX };
    return g->n++;
}

static int cmp_bytes(const char *a, uint32_t la, const char *b, uint32_t lb) {
    int c = memcmp(a, b, la < lb ? la : lb);
    return c ? c : la < lb ? -1 : la > lb;
}

/* A literal node of the given byte strings (copied, sorted, deduplicated). */
static int lit_node(jsc_grammar *g, char *const *s, const uint32_t *len, int n) {
    int id = new_node(g, SN_LIT);
    if (id < 0) return -1;
    sn_node *nd = &g->nodes[id];
    nd->lit = calloc((size_t)(n ? n : 1), sizeof *nd->lit);
    nd->llen = calloc((size_t)(n ? n : 1), sizeof *nd->llen);
    if (!nd->lit || !nd->llen) return -1;
    for (int i = 0; i < n; i++) {
        char *t = malloc(len[i] + 1);
        if (!t) return -1;
        memcpy(t, s[i], len[i]);
        t[len[i]] = 0;
        int j = nd->nlit, dup = 0;
        for (int q = 0; q < nd->nlit; q++) dup |= !cmp_bytes(nd->lit[q], nd->llen[q], t, len[i]);
        if (dup) { free(t); continue; }
        while (j > 0 && cmp_bytes(nd->lit[j - 1], nd->llen[j - 1], t, len[i]) > 0) {
            nd->lit[j] = nd->lit[j - 1];
            nd->llen[j] = nd->llen[j - 1];
            j--;
        }
        nd->lit[j] = t;
        nd->llen[j] = len[i];
        nd->nlit++;
    }
    return id;
}

int jsc_literal(jsc_grammar *g, const char *s, size_t n) {
    char *p = (char *)s;
    uint32_t l = (uint32_t)n;
    return lit_node(g, &p, &l, 1);
}

int jsc_group(jsc_grammar *g, sn_kind kind, const int *kids, int n) {
    int id = new_node(g, kind);
    if (id < 0) return -1;
    sn_node *nd = &g->nodes[id];
    nd->kids = malloc((size_t)(n ? n : 1) * sizeof *nd->kids);
    if (!nd->kids) return -1;
    memcpy(nd->kids, kids, (size_t)n * sizeof *kids);
    nd->nkids = n;
    return id;
}

int jsc_text(jsc_grammar *g, const char *marker, size_t n, int then) {
    int id = n ? jsc_literal(g, marker, n) : -1;
    if (id < 0) return -1;
    sn_node *nd = &g->nodes[id];
    nd->kind = SN_TEXT;
    if (!(nd->kids = malloc(sizeof *nd->kids))) return -1;
    nd->kids[0] = then;
    nd->nkids = 1;
    return id;
}

jsc_grammar *jsc_new(void) {
    jsc_grammar *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    static char *const lits[3] = { "false", "null", "true" };
    static const uint32_t ll[3] = { 5, 4, 4 };
    g->any = new_node(g, SN_ANY);
    g->any_obj = new_node(g, SN_OBJ);
    g->any_arr = new_node(g, SN_ARR);
    g->any_str = new_node(g, SN_STR);
    g->any_num = new_node(g, SN_NUM);
    g->any_lit = lit_node(g, lits, ll, 3);
    if (g->any_lit < 0) { jsc_free(g); return NULL; }
    g->nodes[g->any_obj].addl = g->any;
    g->nodes[g->any_arr].items = g->any;
    g->nodes[g->any_num].lo = -1e15 + 1;
    g->nodes[g->any_num].hi = 1e15 - 1;
    g->root = g->any;
    return g;
}

void jsc_free(jsc_grammar *g) {
    if (!g) return;
    for (int i = 0; i < g->n; i++) {
        sn_node *nd = &g->nodes[i];
        for (int j = 0; j < nd->nlit; j++) free(nd->lit[j]);
        free(nd->lit); free(nd->llen);
        rx_free(nd->rx);
        free(nd->prefix);
        for (int j = 0; j < nd->nprops; j++) free(nd->props[j].name);
        free(nd->props);
        free(nd->kids);
    }
    free(g->nodes);
    free(g);
}

/* ---- keywords ------------------------------------------------------------------------- */

static const char *const annotations[] = { "title", "description", "default", "examples", "$schema", "$id", "$comment",
                                           "deprecated", "readOnly", "writeOnly", "$defs", "definitions", NULL };
static const char *const supported[] = { "type", "properties", "required", "additionalProperties", "enum", "const",
                                         "items", "prefixItems", "minItems", "maxItems", "anyOf", "oneOf", "allOf", "$ref",
                                         "minLength", "maxLength", "pattern", "format", "minimum", "maximum",
                                         "exclusiveMinimum", "exclusiveMaximum", NULL };

int jsc_is_annotation(const char *k) {
    for (int i = 0; annotations[i]; i++) if (!strcmp(k, annotations[i])) return 1;
    return 0;
}

static int check_keywords(jsc_ctx *c, const json_t *s) {
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (jsc_is_annotation(k)) continue;
        int ok = 0;
        for (int i = 0; supported[i] && !ok; i++) ok = !strcmp(k, supported[i]);
        if (!ok) return jsc_fail(c, "unsupported keyword '%.60s'", k);
    }
    return 0;
}

/* path helpers: push a segment, pop back to a saved length */
size_t jsc_push(jsc_ctx *c, const char *a, const char *b) {
    size_t at = strlen(c->path);
    snprintf(c->path + at, sizeof c->path - at, "/%s%s%.48s", a, b ? "/" : "", b ? b : "");
    return at;
}

static int type_bits(jsc_ctx *c, const json_t *t, unsigned *bits) {
    static const char *const names[] = { "null", "boolean", "object", "array", "string", "number", "integer" };
    *bits = 0;
    if (!t) { *bits = T_ALL; return 0; }
    const json_t *one = t;
    size_t i = 0, n = json_is_array(t) ? json_array_size(t) : 1;
    if (json_is_array(t) && !n) return jsc_fail(c, "'type' is an empty list");
    for (; i < n; i++) {
        if (json_is_array(t)) one = json_array_get(t, i);
        const char *s = json_string_value(one);
        int k = -1;
        for (int j = 0; s && j < 7; j++) if (!strcmp(s, names[j])) k = j;
        if (k < 0) return jsc_fail(c, "'type' must be a type name or a list of them (null, boolean, object, array, string, number, integer)");
        *bits |= 1u << k;
    }
    return 0;
}

static int get_count(jsc_ctx *c, const json_t *s, const char *k, uint32_t *out) {
    const json_t *v = json_object_get(s, k);
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return jsc_fail(c, "'%s' must be a non-negative integer", k);
    long long x = json_integer_value(v);
    *out = x > 100000000 ? 100000000u : (uint32_t)x;
    return 0;
}

static int get_number(jsc_ctx *c, const json_t *s, const char *k, double *out, int *have) {
    const json_t *v = json_object_get(s, k);
    *have = 0;
    if (!v) return 0;
    if (!json_is_number(v)) return jsc_fail(c, "'%s' must be a number", k);
    *out = json_number_value(v);
    *have = 1;
    return 0;
}

/* ---- the typed nodes -------------------------------------------------------------------- */

static const struct { const char *name, *rx; } formats[] = {
    { "date", "^[0-9]{4}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))$" },
    { "date-time", "^[0-9]{4}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))"
                   "T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$" },
    { "time", "^([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$" },
    { "uuid", "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$" },
    { "email", "^[A-Za-z0-9_+-]+(\\.[A-Za-z0-9_+-]+)*@([A-Za-z0-9]([A-Za-z0-9-]{0,20}[A-Za-z0-9])?\\.)+[A-Za-z]{2,6}$" },
};

static int string_node(jsc_ctx *c, const json_t *s) {
    int id = new_node(c->g, SN_STR);
    if (id < 0) return jsc_fail(c, "schema too large");
    sn_node *nd = &c->g->nodes[id];
    if (get_count(c, s, "minLength", &nd->min_len) || get_count(c, s, "maxLength", &nd->max_len)) return -1;
    const json_t *p = json_object_get(s, "pattern"), *f = json_object_get(s, "format");
    if (p && f) return jsc_fail(c, "'pattern' together with 'format' is not supported");
    const char *rx = NULL;
    size_t rl = 0;
    char err[256];
    if (p) {
        if (!json_is_string(p)) return jsc_fail(c, "'pattern' must be a string");
        rx = json_string_value(p);
        rl = json_string_length(p);
    } else if (f) {
        const char *fs = json_string_value(f);
        if (!fs) return jsc_fail(c, "'format' must be a string");
        for (size_t i = 0; i < sizeof formats / sizeof *formats && !rx; i++)
            if (!strcmp(fs, formats[i].name)) { rx = formats[i].rx; rl = strlen(rx); }
        if (!rx) return jsc_fail(c, "unsupported 'format' '%.40s' (date-time, date, time, uuid, email are)", fs);
    }
    if (rx) {
        rx_dfa *d = NULL;
        if (rx_compile(rx, rl, &d, err, sizeof err)) return jsc_fail(c, "'%s': %s", p ? "pattern" : "format", err);
        c->g->nodes[id].rx = d;
        nd = &c->g->nodes[id];
        if (d->min_cp[0] > nd->max_len || (d->max_cp[0] != RX_INF && d->max_cp[0] < nd->min_len))
            return jsc_fail(c, "'%s' cannot match a string of %u..%u characters", p ? "pattern" : "format", nd->min_len, nd->max_len);
    }
    if (nd->min_len > nd->max_len) return jsc_fail(c, "'minLength' is above 'maxLength'");
    return id;
}

static int number_node(jsc_ctx *c, const json_t *s, int integer) {
    int id = new_node(c->g, SN_NUM);
    if (id < 0) return jsc_fail(c, "schema too large");
    double mn = 0, mx = 0, xmn = 0, xmx = 0;
    int hmn, hmx, hxmn, hxmx;
    if (get_number(c, s, "minimum", &mn, &hmn) || get_number(c, s, "maximum", &mx, &hmx) ||
        get_number(c, s, "exclusiveMinimum", &xmn, &hxmn) || get_number(c, s, "exclusiveMaximum", &xmx, &hxmx))
        return -1;
    sn_node *nd = &c->g->nodes[id];
    nd->integer = integer;
    /* numbers are written with at most 15 digits: the range is clamped to that */
    nd->lo = -1e15 + 1;
    nd->hi = 1e15 - 1;
    if (hmn && mn > nd->lo) { nd->lo = mn; nd->lo_x = 0; }
    if (hxmn && xmn >= nd->lo) { nd->lo = xmn; nd->lo_x = 1; }
    if (hmx && mx < nd->hi) { nd->hi = mx; nd->hi_x = 0; }
    if (hxmx && xmx <= nd->hi) { nd->hi = xmx; nd->hi_x = 1; }
    if (integer) {
        double lo = ceil(nd->lo), hi = floor(nd->hi);
        if (nd->lo_x && lo == nd->lo) lo += 1;
        if (nd->hi_x && hi == nd->hi) hi -= 1;
        nd->lo = lo; nd->hi = hi; nd->lo_x = nd->hi_x = 0;
    }
    if (nd->lo > nd->hi || (nd->lo == nd->hi && (nd->lo_x || nd->hi_x)))
        return jsc_fail(c, "the range of 'minimum' / 'maximum' holds no %s", integer ? "integer" : "number");
    return id;
}

static int array_node(jsc_ctx *c, const json_t *s, int depth) {
    const json_t *pi = json_object_get(s, "prefixItems"), *it = json_object_get(s, "items");
    if (pi && !json_is_array(pi)) return jsc_fail(c, "'prefixItems' must be an array of schemas");
    if (it && json_is_array(it)) return jsc_fail(c, "'items' as an array (tuple) is not supported; use 'prefixItems'");
    int np = pi ? (int)json_array_size(pi) : 0;
    int *pre = np ? malloc((size_t)np * sizeof *pre) : NULL;
    if (np && !pre) return jsc_fail(c, "out of memory");
    for (int i = 0; i < np; i++) {
        char num[16];
        snprintf(num, sizeof num, "%d", i);
        size_t at = jsc_push(c, "prefixItems", num);
        pre[i] = jsc_node(c, json_array_get(pi, (size_t)i), depth + 1);
        c->path[at] = 0;
        if (pre[i] < 0) { free(pre); return -1; }
    }
    int items = c->g->any;
    if (it && json_is_false(it)) items = -1;
    else if (it) {
        size_t at = jsc_push(c, "items", NULL);
        items = jsc_node(c, it, depth + 1);
        c->path[at] = 0;
        if (items < 0) { free(pre); return -1; }
    }
    int id = new_node(c->g, SN_ARR);
    if (id < 0) { free(pre); return jsc_fail(c, "schema too large"); }
    sn_node *nd = &c->g->nodes[id];
    nd->prefix = pre;
    nd->nprefix = np;
    nd->items = items;
    if (get_count(c, s, "minItems", &nd->min_items) || get_count(c, s, "maxItems", &nd->max_items)) return -1;
    if (items < 0 && nd->max_items > (uint32_t)np) nd->max_items = (uint32_t)np;
    if (nd->min_items > nd->max_items) return jsc_fail(c, "'minItems' is above what 'maxItems' / 'items' allow");
    return id;
}

static int object_node(jsc_ctx *c, const json_t *s, int depth) {
    const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required"),
                 *ap = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) return jsc_fail(c, "'properties' must be an object of schemas");
    if (req && !json_is_array(req)) return jsc_fail(c, "'required' must be an array of names");
    int addl = c->g->any;
    if (ap && json_is_false(ap)) addl = -1;
    else if (ap && !json_is_true(ap)) {
        size_t at = jsc_push(c, "additionalProperties", NULL);
        addl = jsc_node(c, ap, depth + 1);
        c->path[at] = 0;
        if (addl < 0) return -1;
    }
    sn_prop pr[JSC_MAX_PROPS];
    int np = 0;
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)props, k, v) {
        if (np == JSC_MAX_PROPS) return jsc_fail(c, "more than %d 'properties' are not supported", JSC_MAX_PROPS);
        size_t kl = strlen(k);
        for (size_t i = 0; i < kl; i++)
            if ((unsigned char)k[i] < 0x20 || k[i] == '"' || k[i] == '\\')
                return jsc_fail(c, "property names with quotes, backslashes or control characters are not supported");
        int n = -1;                                          /* false: a key that may not appear */
        if (!json_is_false(v)) {
            size_t at = jsc_push(c, "properties", k);
            n = jsc_node(c, v, depth + 1);
            c->path[at] = 0;
            if (n < 0) return -1;
        }
        pr[np++] = (sn_prop){ (char *)k, (uint32_t)kl, n };
    }
    uint64_t required = 0;
    /* required names: declared ones, or else additional keys of the additionalProperties schema */
    for (size_t i = 0; req && i < json_array_size(req); i++) {
        const char *rn = json_string_value(json_array_get(req, i));
        if (!rn) return jsc_fail(c, "'required' must be an array of names");
        int f = -1;
        for (int j = 0; j < np; j++) if (!strcmp(pr[j].name, rn)) f = j;
        if (f >= 0 && pr[f].node < 0) return jsc_fail(c, "'required' names '%.60s', which the schema does not allow", rn);
        if (f < 0) {
            if (addl < 0)
                return jsc_fail(c, "'required' names '%.60s', which the schema does not allow", rn);
            if (np == JSC_MAX_PROPS) return jsc_fail(c, "more than %d 'properties' are not supported", JSC_MAX_PROPS);
            for (const char *q = rn; *q; q++)
                if ((unsigned char)*q < 0x20 || *q == '"' || *q == '\\')
                    return jsc_fail(c, "property names with quotes, backslashes or control characters are not supported");
            pr[np++] = (sn_prop){ (char *)rn, (uint32_t)strlen(rn), addl };
            f = np - 1;
        }
        (void)f;
    }
    /* sort by name bytes, then mark required by sorted index */
    for (int i = 1; i < np; i++) {
        sn_prop t = pr[i];
        int j = i;
        while (j > 0 && cmp_bytes(pr[j - 1].name, pr[j - 1].len, t.name, t.len) > 0) { pr[j] = pr[j - 1]; j--; }
        pr[j] = t;
    }
    for (size_t i = 0; req && i < json_array_size(req); i++) {
        const char *rn = json_string_value(json_array_get(req, i));
        for (int j = 0; j < np; j++) if (!strcmp(pr[j].name, rn)) required |= 1ull << j;
    }
    int id = new_node(c->g, SN_OBJ);
    if (id < 0) return jsc_fail(c, "schema too large");
    sn_node *nd = &c->g->nodes[id];
    nd->props = calloc((size_t)(np ? np : 1), sizeof *nd->props);
    if (!nd->props) return jsc_fail(c, "out of memory");
    for (int i = 0; i < np; i++) {
        nd->props[i] = pr[i];
        if (!(nd->props[i].name = strdup(pr[i].name))) return jsc_fail(c, "out of memory");
        nd->nprops = i + 1;
    }
    nd->required = required;
    nd->addl = addl;
    return id;
}

/* ---- references, combinators, enums ------------------------------------------------------- */

const json_t *jsc_resolve(const json_t *doc, const char *ref) {
    if (ref[0] != '#') return NULL;
    const json_t *v = doc;
    const char *p = ref + 1;
    if (*p && *p != '/') return NULL;
    while (*p && v) {
        p++;
        char seg[256];
        size_t n = 0;
        while (*p && *p != '/' && n + 1 < sizeof seg) {
            if (*p == '~' && p[1] == '0') { seg[n++] = '~'; p += 2; }
            else if (*p == '~' && p[1] == '1') { seg[n++] = '/'; p += 2; }
            else seg[n++] = *p++;
        }
        seg[n] = 0;
        if (json_is_object(v)) v = json_object_get(v, seg);
        else if (json_is_array(v)) {
            char *end;
            long i = strtol(seg, &end, 10);
            v = *seg && !*end && i >= 0 ? json_array_get(v, (size_t)i) : NULL;
        } else v = NULL;
    }
    return v;
}

static int ref_node(jsc_ctx *c, const char *ref, int depth) {
    for (int i = 0; i < c->nrefs; i++) if (!strcmp(c->refs[i].ref, ref)) return c->refs[i].node;
    const json_t *t = jsc_resolve(c->doc, ref);
    if (!t) return jsc_fail(c, "'$ref' '%.80s' points to nothing in this schema (only local '#/...' references are supported)", ref);
    int id = new_node(c->g, SN_REF);
    if (id < 0) return jsc_fail(c, "schema too large");
    if (c->nrefs == c->caprefs) {
        int nc = c->caprefs ? c->caprefs * 2 : 8;
        jsc_ref *nr = realloc(c->refs, (size_t)nc * sizeof *nr);
        if (!nr) return jsc_fail(c, "out of memory");
        c->refs = nr;
        c->caprefs = nc;
    }
    c->refs[c->nrefs].ref = strdup(ref);
    if (!c->refs[c->nrefs].ref) return jsc_fail(c, "out of memory");
    c->refs[c->nrefs++].node = id;
    int k = jsc_node(c, t, depth + 1);
    if (k < 0) return -1;
    sn_node *nd = &c->g->nodes[id];
    if (!(nd->kids = malloc(sizeof *nd->kids))) return jsc_fail(c, "out of memory");
    nd->kids[0] = k;
    nd->nkids = 1;
    for (int x = k, hops = 0; c->g->nodes[x].kind == SN_REF; hops++) {
        if (x == id || hops > c->g->n || c->g->nodes[x].nkids == 0) return jsc_fail(c, "'$ref' '%.80s' refers to itself", ref);
        x = c->g->nodes[x].kids[0];
    }
    return id;
}

/* Does node `root` accept the whole text s? (the matcher as a validator) */
static int accepts(jsc_grammar *g, int root, const char *s, size_t n) {
    sm_matcher m;
    sm_state st;
    int save = g->root, ok = 0;
    g->root = root;
    if (!sm_init(&m, g, &st)) ok = sm_feed(&m, &st, s, n) == 0 && sm_complete(&m, &st);
    sm_release(&m);
    g->root = save;
    return ok;
}

static int has_constraints(const json_t *s, const char *skip1, const char *skip2) {
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)s, k, v) {
        if (jsc_is_annotation(k) || !strcmp(k, skip1) || (skip2 && !strcmp(k, skip2))) continue;
        return 1;
    }
    return 0;
}

static json_t *without(const json_t *s, const char *k1, const char *k2) {
    json_t *r = json_copy((json_t *)s);
    if (r) { json_object_del(r, k1); if (k2) json_object_del(r, k2); }
    return r;
}

static int enum_node(jsc_ctx *c, const json_t *s, int depth) {
    const json_t *en = json_object_get(s, "enum"), *cn = json_object_get(s, "const");
    if (en && (!json_is_array(en) || !json_array_size(en))) return jsc_fail(c, "'enum' must be a non-empty array");
    if (json_array_size(en) > 4096) return jsc_fail(c, "'enum' has more than 4096 values");
    int rest = c->g->any;
    if (has_constraints(s, "enum", "const")) {
        json_t *r = without(s, "enum", "const");
        if (!r) return jsc_fail(c, "out of memory");
        rest = jsc_node(c, r, depth + 1);
        json_decref(r);
        if (rest < 0) return -1;
    }
    size_t n = en ? json_array_size(en) : 1;
    char **lit = calloc(n, sizeof *lit);
    uint32_t *len = calloc(n, sizeof *len);
    int k = 0, id = -1;
    if (!lit || !len) { jsc_fail(c, "out of memory"); goto done; }
    for (size_t i = 0; i < n; i++) {
        const json_t *v = en ? json_array_get(en, i) : cn;
        if (en && cn && !json_equal((json_t *)v, (json_t *)cn)) continue;
        char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        if (!t) { jsc_fail(c, "out of memory"); goto done; }
        if (strlen(t) > 60000) { free(t); jsc_fail(c, "an '%s' value longer than 60000 bytes is not supported", en ? "enum" : "const"); goto done; }
        if (!accepts(c->g, rest, t, strlen(t))) { free(t); continue; }
        lit[k] = t;
        len[k++] = (uint32_t)strlen(t);
    }
    if (!k) { jsc_fail(c, "no value of '%s' is allowed by the rest of the schema", en ? "enum" : "const"); goto done; }
    id = lit_node(c->g, lit, len, k);
    if (id < 0) jsc_fail(c, "out of memory");
done:
    for (int i = 0; i < k; i++) free(lit[i]);
    free(lit);
    free(len);
    return id;
}

static int union_node(jsc_ctx *c, const json_t *s, const char *kw, int depth) {
    const json_t *alts = json_object_get(s, kw);
    if (!json_is_array(alts) || !json_array_size(alts)) return jsc_fail(c, "'%s' must be a non-empty array of schemas", kw);
    if (json_array_size(alts) > 64) return jsc_fail(c, "'%s' has more than 64 alternatives", kw);
    int kids[64], n = (int)json_array_size(alts);
    for (int i = 0; i < n; i++) {
        char num[16];
        snprintf(num, sizeof num, "%d", i);
        size_t at = jsc_push(c, kw, num);
        kids[i] = jsc_node(c, json_array_get(alts, (size_t)i), depth + 1);
        if (kids[i] < 0) return -1;
        c->path[at] = 0;
    }
    if (!strcmp(kw, "oneOf"))
        for (int i = 0; i < n; i++) for (int j = i + 1; j < n; j++)
            if (!jsc_disjoint(c->g, kids[i], kids[j]))
                return jsc_fail(c, "'oneOf' alternatives %d and %d may both match; only alternatives that differ by type, by a "
                                  "const / enum property or by a required key the other forbids are supported (anyOf is)", i, j);
    if (n == 1) return kids[0];
    int id = jsc_group(c->g, SN_UNION, kids, n);
    return id < 0 ? jsc_fail(c, "schema too large") : id;
}

static unsigned infer_types(const json_t *s) {
    static const char *const ko[] = { "properties", "required", "additionalProperties", NULL },
                             *const ka[] = { "items", "prefixItems", "minItems", "maxItems", NULL },
                             *const ks[] = { "minLength", "maxLength", "pattern", "format", NULL },
                             *const kn[] = { "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", NULL };
    const char *const *lists[4] = { ko, ka, ks, kn };
    const unsigned bits[4] = { T_OBJ, T_ARR, T_STR, T_NUM };
    unsigned t = 0;
    for (int l = 0; l < 4; l++)
        for (int i = 0; lists[l][i]; i++) if (json_object_get(s, lists[l][i])) t |= bits[l];
    return t;
}

int jsc_node(jsc_ctx *c, const json_t *s, int depth) {
    if (c->failed) return -1;
    if (depth > JSC_MAX_DEPTH) return jsc_fail(c, "schema nested deeper than %d levels", JSC_MAX_DEPTH);
    if (json_is_true(s)) return c->g->any;
    if (json_is_false(s)) return jsc_fail(c, "schema false matches nothing");
    if (!json_is_object(s)) return jsc_fail(c, "a schema must be an object or a boolean");
    if (check_keywords(c, s)) return -1;
    const json_t *ref = json_object_get(s, "$ref");
    if (ref && !json_is_string(ref)) return jsc_fail(c, "'$ref' must be a string");
    if (ref && !has_constraints(s, "$ref", NULL)) return ref_node(c, json_string_value(ref), depth);
    int has_any = json_object_get(s, "anyOf") != NULL, has_one = json_object_get(s, "oneOf") != NULL;
    if (has_any && has_one) return jsc_fail(c, "'anyOf' together with 'oneOf' is not supported");
    if (ref || json_object_get(s, "allOf") ||
        ((has_any || has_one) && has_constraints(s, has_any ? "anyOf" : "oneOf", NULL))) {
        json_t *f = jsc_flatten(c, s, depth);
        if (!f) return -1;
        int id = -1;
        const char *kw = json_object_get(f, "anyOf") ? "anyOf" : json_object_get(f, "oneOf") ? "oneOf" : NULL;
        if (kw && has_constraints(f, kw, NULL)) {
            /* siblings of anyOf / oneOf apply to every alternative: distribute them */
            json_t *base = without(f, kw, NULL), *alts = json_array(), *u = json_object();
            size_t i;
            const json_t *a;
            json_array_foreach(json_object_get(f, kw), i, a) {
                json_t *fa = jsc_flatten(c, a, depth + 1), *m = fa ? jsc_merge(c, base, fa) : NULL;
                json_decref(fa);
                if (!m) break;
                json_array_append_new(alts, m);
            }
            json_object_set_new(u, kw, alts);
            if (!c->failed) id = jsc_node(c, u, depth + 1);
            json_decref(base);
            json_decref(u);
        } else if (!c->failed) {
            id = jsc_node(c, f, depth + 1);
        }
        json_decref(f);
        return c->failed ? -1 : id;
    }
    if (has_any || has_one) return union_node(c, s, has_any ? "anyOf" : "oneOf", depth);
    if (json_object_get(s, "enum") || json_object_get(s, "const")) return enum_node(c, s, depth);
    unsigned t;
    if (type_bits(c, json_object_get(s, "type"), &t)) return -1;
    if (!json_object_get(s, "type")) {
        t = infer_types(s);
        if (!t) return c->g->any;
    }
    if (t & T_INT && t & T_NUM) t &= ~(unsigned)T_INT;
    int kids[7], n = 0;
    static char *const fl[2] = { "false", "true" };
    static const uint32_t fll[2] = { 5, 4 };
    for (unsigned b = 1; b <= T_INT; b <<= 1) {
        if (!(t & b)) continue;
        int id = b == T_NULL ? jsc_literal(c->g, "null", 4) : b == T_BOOL ? lit_node(c->g, fl, fll, 2)
               : b == T_OBJ ? object_node(c, s, depth) : b == T_ARR ? array_node(c, s, depth)
               : b == T_STR ? string_node(c, s) : number_node(c, s, b == T_INT);
        if (id < 0) return c->failed ? -1 : jsc_fail(c, "schema too large");
        kids[n++] = id;
    }
    if (n == 1) return kids[0];
    int id = jsc_group(c->g, SN_UNION, kids, n);
    return id < 0 ? jsc_fail(c, "schema too large") : id;
}

int jsc_schema(jsc_grammar *g, const json_t *doc, const json_t *schema, const char *where, char *err, size_t errlen) {
    jsc_ctx c = { .g = g, .doc = doc, .where = where, .err = err, .errlen = errlen };
    int id = jsc_node(&c, schema, 0);
    for (int i = 0; i < c.nrefs; i++) free(c.refs[i].ref);
    free(c.refs);
    if (id < 0 && !c.failed) snprintf(err, errlen, "%s: cannot compile the schema", where);
    return c.failed ? -1 : id;
}

int jsc_compile(jsc_grammar *g, const json_t *schema, const char *where, char *err, size_t errlen) {
    int id = jsc_schema(g, schema, schema, where, err, errlen);
    if (id < 0) return -1;
    g->root = id;
    return 0;
}
