/* schema.c — the grammar's nodes (schema.h): building them, the keywords cinfer knows,
 * and the typed nodes (strings, numbers, arrays, objects) of one schema object. The walk
 * over a schema (references, combinators, enums) is schema_node.c; allOf merging and the
 * oneOf test are schema_merge.c. Errors name the keyword and its place as a JSON pointer
 * under `where`. */
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

int jsc_new_node(jsc_grammar *g, sn_kind k) {
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
int jsc_lit_node(jsc_grammar *g, char *const *s, const uint32_t *len, int n) {
    int id = jsc_new_node(g, SN_LIT);
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
    return jsc_lit_node(g, &p, &l, 1);
}

int jsc_group(jsc_grammar *g, sn_kind kind, const int *kids, int n) {
    int id = jsc_new_node(g, kind);
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
    g->any = jsc_new_node(g, SN_ANY);
    g->any_obj = jsc_new_node(g, SN_OBJ);
    g->any_arr = jsc_new_node(g, SN_ARR);
    g->any_str = jsc_new_node(g, SN_STR);
    g->any_num = jsc_new_node(g, SN_NUM);
    g->any_lit = jsc_lit_node(g, lits, ll, 3);
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
        free(nd->fin);
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

int jsc_check_keywords(jsc_ctx *c, const json_t *s) {
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

int jsc_type_bits(jsc_ctx *c, const json_t *t, unsigned *bits) {
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

/* With a pattern and a bounded length, the fewest / most characters to acceptance do not
 * tell every length apart (^(aa)+$ takes even lengths only): the exact table, when it is
 * small enough, of which (pattern state, characters written) can still end in bounds,
 * filled from the longest count down (continuation bytes add no character). */
static int finish_table(jsc_ctx *c, sn_node *nd) {
    const rx_dfa *d = nd->rx;
    size_t L = (size_t)nd->max_len + 1, S = (size_t)d->n_states;
    if (S * L > (1u << 20) || c->rx_cells + S * L > JSC_MAX_RX_CELLS * 2) return 0;   /* too big: distances only */
    c->rx_cells += S * L;
    uint8_t *fin = calloc(S * L, 1), w[256];
    if (!fin) return jsc_fail(c, "out of memory");
    for (int b = 0; b < 256; b++) w[b] = b >= 0x80 && b <= 0xBF ? 0 : 1;
    uint8_t cw[256];
    for (int b = 255; b >= 0; b--) cw[d->cls[b]] = w[b];
    for (size_t n = L; n-- > 0;)
        for (int pass = 0; pass < 4; pass++)                 /* continuation bytes: chains of at most 3 */
            for (size_t s = 0; s < S; s++) {
                if (fin[s * L + n]) continue;
                int ok = d->acc[s] && n >= nd->min_len;
                for (int k = 0; k < d->n_cls && !ok; k++) {
                    unsigned t = d->next[s * (size_t)d->n_cls + k];
                    if (t != RX_DEAD && n + cw[k] < L) ok = fin[t * L + n + cw[k]];
                }
                fin[s * L + n] = (uint8_t)ok;
            }
    nd->fin = fin;
    if (!fin[0]) return jsc_fail(c, "no string of %u..%u characters matches the 'pattern' / 'format'", nd->min_len, nd->max_len);
    return 0;
}

int jsc_string_node(jsc_ctx *c, const json_t *s) {
    int id = jsc_new_node(c->g, SN_STR);
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
        c->rx_cells += (size_t)d->n_states * (size_t)d->n_cls;
        if (c->rx_cells > JSC_MAX_RX_CELLS) return jsc_fail(c, "the schema's patterns and formats are too large together");
        if (d->min_cp[0] > nd->max_len || (d->max_cp[0] != RX_INF && d->max_cp[0] < nd->min_len))
            return jsc_fail(c, "'%s' cannot match a string of %u..%u characters", p ? "pattern" : "format", nd->min_len, nd->max_len);
    }
    if (nd->min_len > nd->max_len) return jsc_fail(c, "'minLength' is above 'maxLength'");
    if (nd->rx && nd->max_len != UINT32_MAX && finish_table(c, nd)) return -1;
    return id;
}

int jsc_number_node(jsc_ctx *c, const json_t *s, int integer) {
    int id = jsc_new_node(c->g, SN_NUM);
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

int jsc_array_node(jsc_ctx *c, const json_t *s, int depth) {
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
    int id = jsc_new_node(c->g, SN_ARR);
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

int jsc_object_node(jsc_ctx *c, const json_t *s, int depth) {
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
    int id = jsc_new_node(c->g, SN_OBJ);
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
