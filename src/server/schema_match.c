/* schema_match.c — the byte-at-a-time matcher of a compiled schema (schema.h).
 *
 * A thread is the top frame of a stack; the frames below live in the arena, pushed once
 * and never changed, so threads that fork (anyOf, type lists) share them. A container
 * pushes itself already set to its "after the value" phase before the value starts, so a
 * finished value just pops. Strings, objects and arrays end on their closing byte; numbers
 * and literals end lazily, when a byte that cannot continue them comes: they pop and that
 * byte goes to the frame below. Each step checks that the rest can still be completed
 * (bounds of numbers, lengths with the pattern's distances, keys still to come), so the
 * matcher refuses at the first byte after which no valid reply exists. */
#include "schema.h"
#include <stdlib.h>
#include <string.h>

#define ROOT_NODE 0xFFFFu
enum { O_START, O_OPEN, O_KEY, O_COLON, O_VAL, O_AFTER, O_NEXT };           /* objects */
enum { A_START, A_OPEN, A_AFTER, A_NEXT };                                  /* arrays */
enum { S_START, S_BODY };                                                   /* strings */
enum { L_PLAIN, L_ESC, L_HEX, L_SURR_BS, L_SURR_U, L_EF = 6, L_EFBF = 7 };  /* string lexer */
enum { N_START, N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC };                     /* numbers */
enum { MAX_DIGITS = 15, MAX_BEGIN = 24 };

static int is_ws(int c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static sm_frame frame_of(unsigned node) {
    sm_frame f;
    memset(&f, 0, sizeof f);
    f.node = (uint16_t)node;
    return f;
}

static void emit(sm_state *out, const sm_thread *t) {
    for (int i = 0; i < out->n; i++)
        if (out->t[i].parent == t->parent && out->t[i].depth == t->depth && !memcmp(&out->t[i].top, &t->top, sizeof t->top)) return;
    if (out->n < SM_MAX_THREADS) out->t[out->n++] = *t;
}

static uint32_t push_cell(sm_matcher *m, const sm_frame *f, uint32_t parent) {
    if (m->n == m->cap) {
        uint32_t nc = m->cap ? m->cap * 2 : 256;
        sm_cell *c = realloc(m->cells, (size_t)nc * sizeof *c);
        if (!c) { m->oom = 1; return 0; }
        m->cells = c;
        m->cap = nc;
    }
    m->cells[m->n] = (sm_cell){ *f, parent };
    return m->n++;
}

static void step(sm_matcher *m, sm_thread t, int c, sm_state *out);

/* A value of `node` starts with byte c, above the arena cell `parent`. */
static void begin(sm_matcher *m, uint32_t parent, uint32_t depth, int node, int c, sm_state *out, int hops) {
    const jsc_grammar *g = m->g;
    if (hops > MAX_BEGIN || depth >= SM_MAX_STACK || node < 0) return;
    const sn_node *nd = &g->nodes[node];
    if (nd->kind == SN_REF) { if (nd->nkids) begin(m, parent, depth, nd->kids[0], c, out, hops + 1); return; }
    if (nd->kind == SN_UNION) {
        for (int i = 0; i < nd->nkids; i++) begin(m, parent, depth, nd->kids[i], c, out, hops + 1);
        return;
    }
    if (nd->kind == SN_ANY) {
        int to = c == '{' ? g->any_obj : c == '[' ? g->any_arr : c == '"' ? g->any_str
               : c == '-' || (c >= '0' && c <= '9') ? g->any_num : c == 't' || c == 'f' || c == 'n' ? g->any_lit : -1;
        if (to >= 0) begin(m, parent, depth, to, c, out, hops + 1);
        return;
    }
    sm_thread t = { frame_of((unsigned)node), parent, depth + 1 };
    if (nd->kind == SN_LIT) t.top.hi = (uint32_t)nd->nlit;
    step(m, t, c, out);
}

/* The frame of t, saved as it is, becomes the parent of a value of `node` starting with c. */
static void child(sm_matcher *m, const sm_thread *t, int node, int c, sm_state *out) {
    uint32_t at = push_cell(m, &t->top, t->parent);
    if (at) begin(m, at, t->depth, node, c, out, 0);
}

/* t's value is over: back to the frame below. */
static sm_thread pop(const sm_matcher *m, sm_thread t) {
    const sm_cell *c = &m->cells[t.parent];
    t.top = c->f;
    t.parent = c->parent;
    t.depth--;
    return t;
}

/* Whitespace in a frame that takes it: 1 taken, -1 too long a run, 0 not whitespace. */
static int ws(sm_thread *t, int c) {
    if (!is_ws(c)) { t->top.ws = 0; return 0; }
    return ++t->top.ws > SM_MAX_WS ? -1 : 1;
}

/* ---- numbers ----------------------------------------------------------------------------- */

static const double p10[16] = { 1, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15 };

static int in_range(const sn_node *nd, double v) {
    return (nd->lo_x ? v > nd->lo : v >= nd->lo) && (nd->hi_x ? v < nd->hi : v <= nd->hi);
}

/* values of sign s with magnitude in [a, b) (b == a: just a) meet the node's range */
static int meets(const sn_node *nd, int neg, double a, double b) {
    if (b <= a) return in_range(nd, neg ? -a : a);
    if (!neg) return (nd->hi_x ? a < nd->hi : a <= nd->hi) && b > nd->lo;
    return (nd->lo_x ? -a > nd->lo : -a >= nd->lo) && -b < nd->hi;
}

/* the value written so far (a whole number: phases N_ZERO, N_INT, N_FRAC) */
static double num_value(const sm_frame *f) {
    double v = f->pos ? ((double)f->x * p10[f->pos] + (double)f->y) / p10[f->pos] : (double)f->x;
    return f->lx ? -v : v;
}

static int num_feasible(const sn_node *nd, const sm_frame *f) {
    int neg = f->lx, left = MAX_DIGITS - f->aux - f->pos;
    double x = (double)f->x;
    switch (f->ph) {
    case N_MINUS: return meets(nd, 1, 0, 1e15);
    case N_ZERO: return meets(nd, neg, 0, 0) || (!nd->integer && meets(nd, neg, 0, 1));
    case N_INT:
        if (meets(nd, neg, x, x) || (!nd->integer && left > 0 && meets(nd, neg, x, x + 1))) return 1;
        for (int k = 1; k <= left; k++) if (meets(nd, neg, x * p10[k], (x + 1) * p10[k])) return 1;
        return 0;
    case N_DOT: return left > 0 && meets(nd, neg, x, x + 1);
    case N_FRAC: {
        double v = num_value(f), a = neg ? -v : v;
        return meets(nd, neg, a, a) || (left > 0 && meets(nd, neg, a, a + 1.0 / p10[f->pos]));
    }
    default: return 1;
    }
}

static int num_whole(const sn_node *nd, const sm_frame *f) {
    return (f->ph == N_ZERO || f->ph == N_INT || f->ph == N_FRAC) && in_range(nd, num_value(f));
}

static void step_num(sm_matcher *m, const sn_node *nd, sm_thread t, int c, sm_state *out) {
    sm_frame *f = &t.top;
    int d = c >= '0' && c <= '9' ? c - '0' : -1;
    switch (f->ph) {
    case N_START:
        if (c == '-') { f->lx = 1; f->ph = N_MINUS; break; }
        /* fall through */
    case N_MINUS:
        if (d < 0) return;
        f->ph = d ? N_INT : N_ZERO;
        f->x = (uint64_t)d;
        f->aux = 1;
        break;
    case N_ZERO: case N_INT: case N_FRAC:
        if (d >= 0 && f->ph != N_ZERO && f->aux + f->pos < MAX_DIGITS) {
            if (f->ph == N_INT) { f->x = f->x * 10 + (uint64_t)d; f->aux++; }
            else { f->y = f->y * 10 + (uint64_t)d; f->pos++; }
            break;
        }
        if (c == '.' && f->ph != N_FRAC && !nd->integer) { f->ph = N_DOT; break; }
        if (num_whole(nd, f)) step(m, pop(m, t), c, out);   /* the number ended before c */
        return;
    case N_DOT:
        if (d < 0 || f->aux >= MAX_DIGITS) return;
        f->ph = N_FRAC;
        f->y = (uint64_t)d;
        f->pos = 1;
        break;
    }
    if (num_feasible(nd, f)) emit(out, &t);
}

/* ---- strings and keys ------------------------------------------------------------------- */

/* UTF-8 inside a string body or a key: 0 taken (cont / first updated), -1 refused. Lead
 * bytes set *lead. U+FFFD (EF BF BD) is refused: token texts use it for a part of a
 * character, so the reply's real bytes could differ from what was checked. */
static int utf8(sm_frame *f, int c, int *lead) {
    static const uint8_t lo[5] = { 0x80, 0xA0, 0x80, 0x90, 0x80 }, hi[5] = { 0xBF, 0xBF, 0x9F, 0xBF, 0x8F };
    *lead = 0;
    if (f->cont) {
        if (c < lo[f->first] || c > hi[f->first]) return -1;
        if (f->lx == L_EFBF && c == 0xBD) return -1;
        f->lx = f->lx == L_EF && c == 0xBF ? L_EFBF : L_PLAIN;
        f->cont--;
        f->first = 0;
        return 0;
    }
    if (c < 0x20 || c == '"' || c == '\\') return -1;
    if (c < 0x80) { *lead = 1; return 0; }
    *lead = 1;
    if (c >= 0xC2 && c <= 0xDF) { f->cont = 1; f->first = 0; return 0; }
    if (c >= 0xE0 && c <= 0xEF) { f->cont = 2; f->first = c == 0xE0 ? 1 : c == 0xED ? 2 : 0; if (c == 0xEF) f->lx = L_EF; return 0; }
    if (c >= 0xF0 && c <= 0xF4) { f->cont = 3; f->first = c == 0xF0 ? 3 : c == 0xF4 ? 4 : 0; return 0; }
    return -1;
}

/* One decoded byte b of a string's value (lead: it starts a character): length and pattern. */
static int str_take(const sn_node *nd, sm_frame *f, int b, int lead) {
    uint32_t n = f->n + (lead ? 1 : 0);
    if (n > nd->max_len) return -1;
    if (nd->rx) {
        unsigned d = rx_step(nd->rx, f->dfa, (unsigned char)b);
        if (d == RX_DEAD) return -1;
        if (nd->fin) {
            if (!nd->fin[(size_t)d * (nd->max_len + 1) + n]) return -1;
        } else {
            if ((uint64_t)n + nd->rx->min_cp[d] > nd->max_len) return -1;
            if (nd->rx->max_cp[d] != RX_INF && (uint64_t)n + nd->rx->max_cp[d] < nd->min_len) return -1;
        }
        f->dfa = (uint16_t)d;
    }
    f->n = n;
    return 0;
}

static int hexval(int c) { return c >= '0' && c <= '9' ? c - '0' : (c | 32) >= 'a' && (c | 32) <= 'f' ? (c | 32) - 'a' + 10 : -1; }

static void step_str(sm_matcher *m, const sn_node *nd, sm_thread t, int c, sm_state *out) {
    sm_frame *f = &t.top;
    if (f->ph == S_START) {
        if (c != '"') return;
        f->ph = S_BODY;
        emit(out, &t);
        return;
    }
    int lead, e;
    switch (f->lx) {
    case L_ESC: {
        static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
        if (c == 'u' && !nd->rx) {
            if (f->n + 1 > nd->max_len) return;
            f->n++;
            f->lx = L_HEX; f->aux = 4; f->pos = 0; f->first = 0;
            break;
        }
        const char *k = c ? strchr(from, c) : NULL;
        if (!k || str_take(nd, f, to[k - from], 1)) return;
        f->lx = L_PLAIN;
        break;
    }
    case L_SURR_BS: if (c != '\\') return; f->lx = L_SURR_U; break;
    case L_SURR_U: if (c != 'u') return; f->lx = L_HEX; f->aux = 4; f->pos = 0; f->first = 1; break;
    case L_HEX: {
        int v = hexval(c);
        if (v < 0) return;
        unsigned h = (unsigned)f->pos << 4 | (unsigned)v;
        if (f->aux == 4 && f->first && v != 0xD) return;                 /* the low half of a pair */
        if (f->aux == 3 && (h >> 4) == 0xD && (f->first ? v < 0xC : v >= 0xC)) return;
        f->pos = (uint16_t)h;
        if (--f->aux == 0) f->lx = !f->first && h >= 0xD800 && h <= 0xDBFF ? L_SURR_BS : L_PLAIN;
        break;
    }
    default:
        if (!f->cont && c == '"') {
            if (f->n < nd->min_len || (nd->rx && !nd->rx->acc[f->dfa])) return;
            emit(out, (sm_thread[]){ pop(m, t) });
            return;
        }
        if (!f->cont && c == '\\') {
            if (f->n + 1 > nd->max_len) return;
            if (nd->rx) {                             /* some escape must lead on under the pattern */
                static const char dec[] = "\"\\/\b\f\n\r\t";
                int any = 0;
                for (int i = 0; dec[i] && !any; i++) { sm_frame g = *f; any = !str_take(nd, &g, dec[i], 1); }
                if (!any) return;
            }
            f->lx = L_ESC;
            break;
        }
        if (utf8(f, c, &lead) || (e = str_take(nd, f, c, lead))) return;
        break;
    }
    emit(out, &t);
}

/* An object key, byte by byte: candidates [lo, hi) are the declared keys that start with
 * what was written; the key must stay one of them not yet seen, or additionalProperties
 * must take it. */
static int key_viable(const sn_node *nd, const sm_frame *f) {
    for (uint32_t i = f->lo; i < f->hi; i++)
        if (nd->props[i].node >= 0 && !(f->x >> i & 1)) return 1;
    return nd->addl >= 0;
}

static void step_obj(sm_matcher *m, const sn_node *nd, sm_thread t, int c, sm_state *out) {
    sm_frame *f = &t.top;
    int w, lead;
    switch (f->ph) {
    case O_START:
        if (c != '{') return;
        f->ph = O_OPEN;
        break;
    case O_OPEN: case O_NEXT:
        if ((w = ws(&t, c))) { if (w < 0) return; break; }
        if (c == '"') {
            f->ph = O_KEY; f->lo = 0; f->hi = (uint32_t)nd->nprops; f->pos = 0; f->cont = 0; f->lx = 0;
            if (!key_viable(nd, f)) return;
            break;
        }
        if (c == '}' && f->ph == O_OPEN && !nd->required) { emit(out, (sm_thread[]){ pop(m, t) }); return; }
        return;
    case O_KEY:
        if (c == '"' && !f->cont) {
            int target = -1;
            if (f->lo < f->hi && nd->props[f->lo].len == f->pos) {                       /* a declared key */
                if (nd->props[f->lo].node < 0 || f->x >> f->lo & 1) return;
                f->x |= 1ull << f->lo;
                target = nd->props[f->lo].node;
            } else {
                target = nd->addl;
            }
            if (target < 0) return;
            f->n = (uint32_t)target + 1;
            f->ph = O_COLON;
            f->ws = 0;
            break;
        }
        if (utf8(f, c, &lead) || f->pos == 0xFFFF) return;
        {
            uint32_t lo = f->hi, hi = f->lo;
            for (uint32_t i = f->lo; i < f->hi; i++)
                if (nd->props[i].len > f->pos && (unsigned char)nd->props[i].name[f->pos] == c) { if (i < lo) lo = i; hi = i + 1; }
            if (hi <= lo) lo = hi = 0;
            f->lo = lo;
            f->hi = hi;
            f->pos++;
        }
        if (!key_viable(nd, f)) return;
        break;
    case O_COLON:
        if ((w = ws(&t, c))) { if (w < 0) return; break; }
        if (c != ':') return;
        f->ph = O_VAL;
        break;
    case O_VAL:
        if ((w = ws(&t, c))) { if (w < 0) return; break; }
        f->ph = O_AFTER;
        child(m, &t, (int)f->n - 1, c, out);
        return;
    case O_AFTER:
        if ((w = ws(&t, c))) { if (w < 0) return; break; }
        if (c == '}' && !(nd->required & ~f->x)) { emit(out, (sm_thread[]){ pop(m, t) }); return; }
        if (c != ',') return;
        f->lo = 0;
        f->hi = (uint32_t)nd->nprops;
        f->pos = 0;
        if (!key_viable(nd, f)) return;                                   /* no key is left to write */
        f->ph = O_NEXT;
        break;
    }
    emit(out, &t);
}

static int item_node(const sn_node *nd, uint32_t i) { return (int)i < nd->nprefix ? nd->prefix[i] : nd->items; }

static void step_arr(sm_matcher *m, const sn_node *nd, sm_thread t, int c, sm_state *out) {
    sm_frame *f = &t.top;
    int w;
    switch (f->ph) {
    case A_START:
        if (c != '[') return;
        f->ph = A_OPEN;
        break;
    case A_OPEN: case A_NEXT:
        if ((w = ws(&t, c))) { if (w < 0) return; break; }
        if (c == ']' && f->ph == A_OPEN) { if (nd->min_items == 0) emit(out, (sm_thread[]){ pop(m, t) }); return; }
        if (f->n >= nd->max_items || item_node(nd, f->n) < 0) return;
        f->ph = A_AFTER;
        f->n++;
        child(m, &t, item_node(nd, f->n - 1), c, out);
        return;
    case A_AFTER:
        if ((w = ws(&t, c))) { if (w < 0) return; break; }
        if (c == ']') { if (f->n >= nd->min_items) emit(out, (sm_thread[]){ pop(m, t) }); return; }
        if (c != ',' || f->n >= nd->max_items || item_node(nd, f->n) < 0) return;
        f->ph = A_NEXT;
        break;
    }
    emit(out, &t);
}

static void step_lit(sm_matcher *m, const sn_node *nd, sm_thread t, int c, sm_state *out) {
    sm_frame *f = &t.top;
    uint32_t lo = f->hi, hi = f->lo;
    for (uint32_t i = f->lo; i < f->hi; i++)
        if (nd->llen[i] > f->pos && (unsigned char)nd->lit[i][f->pos] == c) { if (i < lo) lo = i; hi = i + 1; }
    if (hi > lo) {
        f->lo = lo;
        f->hi = hi;
        f->pos++;
        emit(out, &t);
        return;
    }
    if (f->lo < f->hi && nd->llen[f->lo] == f->pos) step(m, pop(m, t), c, out);     /* ended before c */
}

static void step(sm_matcher *m, sm_thread t, int c, sm_state *out) {
    if (t.top.node == ROOT_NODE) {
        int w = ws(&t, c);
        if (w > 0) emit(out, &t);
        if (w || t.top.ph) return;
        t.top.ph = 1;
        child(m, &t, m->g->root, c, out);
        return;
    }
    const sn_node *nd = &m->g->nodes[t.top.node];
    switch (nd->kind) {
    case SN_STR: step_str(m, nd, t, c, out); return;
    case SN_NUM: step_num(m, nd, t, c, out); return;
    case SN_OBJ: step_obj(m, nd, t, c, out); return;
    case SN_ARR: step_arr(m, nd, t, c, out); return;
    case SN_LIT: step_lit(m, nd, t, c, out); return;
    case SN_TEXT:
        if (t.top.ph == 0) {                      /* text: follow how much of the marker was written */
            uint32_t k = t.top.pos + 1u, L = nd->llen[0];
            const char *mk = nd->lit[0];
            /* the longest prefix of the marker that ends the text + c */
            for (; k > 0; k--) {
                if ((unsigned char)mk[k - 1] != c) continue;
                uint32_t q = 0;
                while (q + 1 < k && mk[q] == mk[t.top.pos - (k - 1) + q]) q++;
                if (q + 1 == k) break;
            }
            t.top.pos = (uint16_t)k;
            if (k == L) { t.top.ph = 1; t.top.pos = 0; }
            emit(out, &t);
        } else {                                  /* after the marker: its value, then text again */
            t.top.ph = 0;
            child(m, &t, nd->kids[0], c, out);
        }
        return;
    case SN_SEQ:
        if (t.top.ph < nd->nkids) {
            t.top.ph++;
            child(m, &t, nd->kids[t.top.ph - 1], c, out);
        } else {
            step(m, pop(m, t), c, out);
        }
        return;
    default: return;
    }
}

/* ---- public ------------------------------------------------------------------------------ */

int sm_init(sm_matcher *m, const jsc_grammar *g, sm_state *s) {
    memset(m, 0, sizeof *m);
    m->g = g;
    m->n = 1;                                     /* cell 0: "no parent" */
    m->cap = 256;
    m->cells = malloc((size_t)m->cap * sizeof *m->cells);
    s->n = 1;
    s->t[0] = (sm_thread){ frame_of(ROOT_NODE), 0, 0 };
    return m->cells ? 0 : -1;
}

void sm_release(sm_matcher *m) {
    free(m->cells);
    m->cells = NULL;
    m->n = m->cap = 0;
}

int sm_next(sm_matcher *m, const sm_state *in, unsigned char c, sm_state *out) {
    out->n = 0;
    for (int i = 0; i < in->n; i++) step(m, in->t[i], c, out);
    if (m->oom) out->n = 0;
    return out->n ? 0 : -1;
}

int sm_feed_byte(sm_matcher *m, sm_state *s, unsigned char c) {
    sm_state out;
    sm_next(m, s, c, &out);
    s->n = out.n;
    memcpy(s->t, out.t, (size_t)out.n * sizeof *out.t);
    return out.n ? 0 : -1;
}

int sm_feed(sm_matcher *m, sm_state *s, const char *p, size_t n) {
    for (size_t i = 0; i < n && s->n; i++) sm_feed_byte(m, s, (unsigned char)p[i]);
    return s->n ? 0 : -1;
}

/* would the input end here: frames that end lazily pop until the root is done (or not) */
int sm_complete(const sm_matcher *m, const sm_state *s) {
    for (int i = 0; i < s->n; i++) {
        sm_thread t = s->t[i];
        for (int guard = 0; guard <= SM_MAX_STACK + 1; guard++) {
            if (t.top.node == ROOT_NODE) { if (t.top.ph) return 1; break; }
            const sn_node *nd = &m->g->nodes[t.top.node];
            int done = nd->kind == SN_NUM ? num_whole(nd, &t.top)
                     : nd->kind == SN_LIT ? t.top.lo < t.top.hi && nd->llen[t.top.lo] == t.top.pos
                     : nd->kind == SN_SEQ ? t.top.ph == nd->nkids
                     : nd->kind == SN_TEXT ? t.top.ph == 0 : 0;
            if (!done) break;
            t = pop(m, t);
        }
    }
    return 0;
}

long sm_plain_room(const sm_matcher *m, const sm_state *s) {
    if (s->n != 1) return -1;
    const sm_frame *f = &s->t[0].top;
    if (f->node == ROOT_NODE || f->cont) return -1;
    const sn_node *nd = &m->g->nodes[f->node];
    if (nd->kind == SN_STR && f->ph == S_BODY && f->lx == L_PLAIN && !nd->rx)
        return nd->max_len == UINT32_MAX ? 0x7FFFFFFF : (long)(nd->max_len - f->n);
    if (nd->kind == SN_OBJ && f->ph == O_KEY && f->lo >= f->hi && nd->addl >= 0) return 0x7FFFFFFF;
    return -1;
}

int sm_text_stop(const sm_matcher *m, const sm_state *s) {
    if (s->n != 1 || s->t[0].top.node == ROOT_NODE) return -1;
    const sm_frame *f = &s->t[0].top;
    const sn_node *nd = &m->g->nodes[f->node];
    return nd->kind == SN_TEXT && f->ph == 0 && f->pos == 0 ? (unsigned char)nd->lit[0][0] : -1;
}

long sm_loop_room(const sm_matcher *m, const sm_state *s, const uint64_t **loop) {
    if (s->n != 1 || s->t[0].top.node == ROOT_NODE) return -1;
    const sm_frame *f = &s->t[0].top;
    const sn_node *nd = &m->g->nodes[f->node];
    if (nd->kind != SN_STR || !nd->rx || nd->fin || f->ph != S_BODY || f->lx != L_PLAIN || f->cont) return -1;
    uint64_t used = (uint64_t)f->n + nd->rx->min_cp[f->dfa];
    if (used > nd->max_len) return -1;
    *loop = nd->rx->loop[f->dfa];
    return nd->max_len == UINT32_MAX ? 0x7FFFFFFF : (long)(nd->max_len - used);
}
