/* sregex.c — see sregex.h. Pattern -> Thompson NFA over bytes (a byte set per edge) ->
 * subset-construction DFA over byte classes -> dead states cut, code-point distances.
 * A counted repeat {m,n} re-parses its atom once per copy (parsing is deterministic), so
 * there is no syntax tree. */
#include "sregex.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MAX_NFA = 20000, MAX_DFA = 2048, MAX_DEPTH = 64 };

typedef struct { uint64_t w[4]; } bset;
typedef struct { int a, b, set; } nstate;     /* set >= 0: on a byte of sets[set] to a; else epsilon to a, b */

typedef struct {
    const char *p;
    size_t n, i;
    nstate *st;
    int nst, cap;
    bset *sets;
    int nsets, capsets;
    int depth;
    char *err;
    size_t errlen;
    int failed;
} rx_parser;

typedef struct { int s, e; } frag;           /* e: an epsilon state with nothing after it yet */

static int fail(rx_parser *P, const char *fmt, const char *what) {
    if (!P->failed) snprintf(P->err, P->errlen, fmt, what);
    P->failed = 1;
    return -1;
}

static void bs_add(bset *s, int lo, int hi) { for (int c = lo; c <= hi; c++) s->w[c >> 6] |= 1ull << (c & 63); }
static int bs_has(const bset *s, int c) { return (int)(s->w[c >> 6] >> (c & 63) & 1); }

static int new_state(rx_parser *P, int set) {
    if (P->nst >= MAX_NFA) return fail(P, "%s is too large (more than 20000 automaton states)", "pattern");
    if (P->nst == P->cap) {
        int nc = P->cap ? P->cap * 2 : 256;
        nstate *ns = realloc(P->st, (size_t)nc * sizeof *ns);
        if (!ns) return fail(P, "%s: out of memory", "pattern");
        P->st = ns;
        P->cap = nc;
    }
    P->st[P->nst] = (nstate){ -1, -1, set };
    return P->nst++;
}

static int new_set(rx_parser *P, const bset *s) {
    for (int i = 0; i < P->nsets; i++) if (!memcmp(&P->sets[i], s, sizeof *s)) return i;
    if (P->nsets == P->capsets) {
        int nc = P->capsets ? P->capsets * 2 : 32;
        bset *ns = realloc(P->sets, (size_t)nc * sizeof *ns);
        if (!ns) return fail(P, "%s: out of memory", "pattern");
        P->sets = ns;
        P->capsets = nc;
    }
    P->sets[P->nsets] = *s;
    return P->nsets++;
}

static frag f_eps(rx_parser *P) {
    int s = new_state(P, -1);
    return (frag){ s, s };
}

/* a chain of byte sets */
static frag f_seq(rx_parser *P, const bset *sets, int k) {
    frag f = f_eps(P);
    if (f.s < 0) return f;
    for (int i = 0; i < k; i++) {
        int si = new_set(P, &sets[i]), t = si < 0 ? -1 : new_state(P, si), e = t < 0 ? -1 : new_state(P, -1);
        if (e < 0) return (frag){ -1, -1 };
        P->st[f.e].a = t;
        P->st[t].a = e;
        f.e = e;
    }
    return f;
}

static frag f_cat(rx_parser *P, frag a, frag b) {
    if (a.s < 0 || b.s < 0) return (frag){ -1, -1 };
    P->st[a.e].a = b.s;
    (void)P;
    return (frag){ a.s, b.e };
}

static frag f_alt(rx_parser *P, frag a, frag b) {
    if (a.s < 0 || b.s < 0) return (frag){ -1, -1 };
    int s = new_state(P, -1), e = new_state(P, -1);
    if (e < 0) return (frag){ -1, -1 };
    P->st[s].a = a.s; P->st[s].b = b.s;
    P->st[a.e].a = e; P->st[b.e].a = e;
    return (frag){ s, e };
}

/* a* (plus: a+; opt: a?) */
static frag f_rep(rx_parser *P, frag a, int min1, int loop) {
    if (a.s < 0) return a;
    int s = new_state(P, -1), e = new_state(P, -1);
    if (e < 0) return (frag){ -1, -1 };
    P->st[s].a = a.s;
    if (!min1) P->st[s].b = e;
    P->st[a.e].a = e;
    if (loop) P->st[a.e].b = a.s;
    return (frag){ s, e };
}

/* ---- classes ---------------------------------------------------------------------------- */

typedef struct {
    bset ascii;                /* members below 0x80 */
    uint32_t *cp;              /* non-ASCII members */
    int ncp, capcp;
    int any_na;                /* every non-ASCII character (but U+2028, U+2029, U+FFFD) */
} cclass;

static int cc_add_cp(rx_parser *P, cclass *c, uint32_t lo, uint32_t hi) {
    if (hi < lo) return fail(P, "pattern: class range %s is out of order", "");
    for (uint32_t x = lo; x <= hi; x++) {
        if (x < 0x80) { bs_add(&c->ascii, (int)x, (int)x); continue; }
        if (hi - (lo > 0x80 ? lo : 0x80) > 256) return fail(P, "pattern: non-ASCII class ranges wider than 256 characters are not supported%s", "");
        if (c->ncp == c->capcp) {
            int nc = c->capcp ? c->capcp * 2 : 16;
            uint32_t *n = realloc(c->cp, (size_t)nc * sizeof *n);
            if (!n) return fail(P, "%s: out of memory", "pattern");
            c->cp = n;
            c->capcp = nc;
        }
        c->cp[c->ncp++] = x;
    }
    return 0;
}

static int utf8_enc(uint32_t c, unsigned char *o) {
    if (c < 0x80) { o[0] = (unsigned char)c; return 1; }
    if (c < 0x800) { o[0] = (unsigned char)(0xC0 | c >> 6); o[1] = (unsigned char)(0x80 | (c & 63)); return 2; }
    if (c < 0x10000) { o[0] = (unsigned char)(0xE0 | c >> 12); o[1] = (unsigned char)(0x80 | (c >> 6 & 63)); o[2] = (unsigned char)(0x80 | (c & 63)); return 3; }
    o[0] = (unsigned char)(0xF0 | c >> 18); o[1] = (unsigned char)(0x80 | (c >> 12 & 63));
    o[2] = (unsigned char)(0x80 | (c >> 6 & 63)); o[3] = (unsigned char)(0x80 | (c & 63));
    return 4;
}

/* Decodes one UTF-8 character of the pattern at P->i; -1 when malformed. */
static long next_cp(rx_parser *P) {
    const unsigned char *s = (const unsigned char *)P->p + P->i;
    size_t left = P->n - P->i;
    unsigned c = s[0];
    int k = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
    if (!k || (size_t)k > left) return fail(P, "pattern is not valid UTF-8%s", "");
    uint32_t v = k == 1 ? c : k == 2 ? c & 31 : k == 3 ? c & 15 : c & 7;
    for (int j = 1; j < k; j++) {
        if ((s[j] & 0xC0) != 0x80) return fail(P, "pattern is not valid UTF-8%s", "");
        v = v << 6 | (s[j] & 63);
    }
    P->i += (size_t)k;
    return (long)v;
}

/* The non-ASCII "any character" fragment: well-formed UTF-8 sequences except U+2028/9, U+FFFD. */
static frag f_any_na(rx_parser *P) {
    static const unsigned char R[][4][2] = {
        { { 0xC2, 0xDF }, { 0x80, 0xBF } },
        { { 0xE0, 0xE0 }, { 0xA0, 0xBF }, { 0x80, 0xBF } },
        { { 0xE1, 0xE1 }, { 0x80, 0xBF }, { 0x80, 0xBF } },
        { { 0xE3, 0xEC }, { 0x80, 0xBF }, { 0x80, 0xBF } },
        { { 0xE2, 0xE2 }, { 0x81, 0xBF }, { 0x80, 0xBF } },
        { { 0xE2, 0xE2 }, { 0x80, 0x80 }, { 0x80, 0xA7 } },
        { { 0xE2, 0xE2 }, { 0x80, 0x80 }, { 0xAA, 0xBF } },
        { { 0xED, 0xED }, { 0x80, 0x9F }, { 0x80, 0xBF } },
        { { 0xEE, 0xEE }, { 0x80, 0xBF }, { 0x80, 0xBF } },
        { { 0xEF, 0xEF }, { 0x80, 0xBE }, { 0x80, 0xBF } },
        { { 0xEF, 0xEF }, { 0xBF, 0xBF }, { 0x80, 0xBC } },
        { { 0xEF, 0xEF }, { 0xBF, 0xBF }, { 0xBE, 0xBF } },
        { { 0xF0, 0xF0 }, { 0x90, 0xBF }, { 0x80, 0xBF }, { 0x80, 0xBF } },
        { { 0xF1, 0xF3 }, { 0x80, 0xBF }, { 0x80, 0xBF }, { 0x80, 0xBF } },
        { { 0xF4, 0xF4 }, { 0x80, 0x8F }, { 0x80, 0xBF }, { 0x80, 0xBF } },
    };
    frag f = { -1, -1 };
    for (size_t r = 0; r < sizeof R / sizeof *R; r++) {
        bset s[4];
        int k = 0;
        memset(s, 0, sizeof s);
        for (; k < 4 && R[r][k][0]; k++) bs_add(&s[k], R[r][k][0], R[r][k][1]);
        frag g = f_seq(P, s, k);
        f = f.s < 0 && r == 0 ? g : f_alt(P, f, g);
    }
    return f;
}

static frag f_class(rx_parser *P, cclass *c) {
    frag f = { -1, -1 };
    int have = 0;
    bset z;
    memset(&z, 0, sizeof z);
    if (memcmp(&c->ascii, &z, sizeof z)) { f = f_seq(P, &c->ascii, 1); have = 1; }
    for (int i = 0; i < c->ncp; i++) {
        unsigned char b[4];
        int k = utf8_enc(c->cp[i], b);
        bset s[4];
        memset(s, 0, sizeof s);
        for (int j = 0; j < k; j++) bs_add(&s[j], b[j], b[j]);
        frag g = f_seq(P, s, k);
        f = have ? f_alt(P, f, g) : g;
        have = 1;
    }
    if (c->any_na) { frag g = f_any_na(P); f = have ? f_alt(P, f, g) : g; have = 1; }
    free(c->cp);
    c->cp = NULL;
    if (!have) { fail(P, "pattern: a character class %s matches nothing", ""); return (frag){ -1, -1 }; }
    return f;
}

static int hexval(int c) { return c >= '0' && c <= '9' ? c - '0' : (c | 32) >= 'a' && (c | 32) <= 'f' ? (c | 32) - 'a' + 10 : -1; }

/* An escape after '\' (P->i at the letter) into class c (in_class: inside [...]); returns
 * 0, or 1 when it was a single character (*cp set: usable as a range end). */
static int escape(rx_parser *P, cclass *c, int in_class, uint32_t *cp) {
    if (P->i >= P->n) return fail(P, "pattern ends inside an escape%s", "");
    int e = (unsigned char)P->p[P->i++];
    bset t;
    memset(&t, 0, sizeof t);
    switch (e) {
    case 'd': bs_add(&c->ascii, '0', '9'); return 0;
    case 'w': bs_add(&c->ascii, '0', '9'); bs_add(&c->ascii, 'a', 'z'); bs_add(&c->ascii, 'A', 'Z'); bs_add(&c->ascii, '_', '_'); return 0;
    case 's': bs_add(&c->ascii, 9, 13); bs_add(&c->ascii, ' ', ' '); return 0;
    case 'D': case 'W': case 'S':
        if (e == 'D') bs_add(&t, '0', '9');
        if (e == 'W') { bs_add(&t, '0', '9'); bs_add(&t, 'a', 'z'); bs_add(&t, 'A', 'Z'); bs_add(&t, '_', '_'); }
        if (e == 'S') { bs_add(&t, 9, 13); bs_add(&t, ' ', ' '); }
        for (int x = 0; x < 128; x++) if (!bs_has(&t, x)) bs_add(&c->ascii, x, x);
        if (e != 'S') c->any_na = 1;
        return 0;
    case 'n': *cp = '\n'; break;
    case 'r': *cp = '\r'; break;
    case 't': *cp = '\t'; break;
    case 'f': *cp = '\f'; break;
    case 'v': *cp = '\v'; break;
    case '0': *cp = 0; break;
    case 'b':
        if (!in_class) return fail(P, "pattern: %s (word boundary) is not supported", "\\b");
        *cp = '\b';
        break;
    case 'x': case 'u': {
        int k = e == 'x' ? 2 : 4;
        uint32_t v = 0;
        if (P->i + (size_t)k > P->n) return fail(P, "pattern: a short \\%s escape", e == 'x' ? "x" : "u");
        for (int j = 0; j < k; j++) {
            int h = hexval((unsigned char)P->p[P->i + (size_t)j]);
            if (h < 0) return fail(P, "pattern: a bad \\%s escape", e == 'x' ? "x" : "u");
            v = v << 4 | (uint32_t)h;
        }
        P->i += (size_t)k;
        if (v >= 0xD800 && v <= 0xDFFF) return fail(P, "pattern: %s escapes of surrogates are not supported", "\\u");
        *cp = v;
        break;
    }
    default:
        if (e >= '1' && e <= '9') return fail(P, "pattern: %s are not supported", "backreferences");
        if (e == 'k' || e == 'p' || e == 'P' || e == 'c' || e == 'B') return fail(P, "pattern: escape \\%s is not supported", (char[]){ (char)e, 0 });
        if (e < 0x80 && (e == '-' || !((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9')))) { *cp = (uint32_t)e; break; }
        return fail(P, "pattern: escape \\%s is not supported", (char[]){ (char)e, 0 });
    }
    return 1;
}

static frag parse_alt(rx_parser *P, int top);

static frag parse_class(rx_parser *P) {
    cclass c = { 0 };
    int neg = 0;
    if (P->i < P->n && P->p[P->i] == '^') { neg = 1; P->i++; }
    int first = 1;
    for (;;) {
        if (P->i >= P->n) { free(c.cp); fail(P, "pattern: unterminated %s", "["); return (frag){ -1, -1 }; }
        if (P->p[P->i] == ']' && !first) { P->i++; break; }
        first = 0;
        uint32_t lo;
        int single;
        if (P->p[P->i] == '\\') { P->i++; single = escape(P, &c, 1, &lo); }
        else { long v = next_cp(P); single = v < 0 ? -1 : 1; lo = (uint32_t)v; }
        if (single < 0) { free(c.cp); return (frag){ -1, -1 }; }
        if (!single) continue;
        uint32_t hi = lo;
        if (P->i + 1 < P->n && P->p[P->i] == '-' && P->p[P->i + 1] != ']') {
            P->i++;
            int s2;
            if (P->p[P->i] == '\\') { P->i++; cclass tmp = { 0 }; s2 = escape(P, &tmp, 1, &hi); free(tmp.cp); }
            else { long v = next_cp(P); s2 = v < 0 ? -1 : 1; hi = (uint32_t)v; }
            if (s2 <= 0) { free(c.cp); if (!s2) fail(P, "pattern: a class range ends in a %s", "class escape"); return (frag){ -1, -1 }; }
        }
        if (cc_add_cp(P, &c, lo, hi)) { free(c.cp); return (frag){ -1, -1 }; }
    }
    if (neg) {
        if (c.ncp) { free(c.cp); fail(P, "pattern: negated classes with non-ASCII members are not supported%s", ""); return (frag){ -1, -1 }; }
        cclass d = { 0 };
        for (int x = 0; x < 128; x++) if (!bs_has(&c.ascii, x)) bs_add(&d.ascii, x, x);
        d.any_na = !c.any_na && !bs_has(&c.ascii, ' ');       /* [^\s...]: non-ASCII spaces exist; keep ASCII */
        return f_class(P, &d);
    }
    return f_class(P, &c);
}

static frag parse_atom(rx_parser *P) {
    int ch = (unsigned char)P->p[P->i];
    cclass c = { 0 };
    if (ch == '(') {
        P->i++;
        if (P->i < P->n && P->p[P->i] == '?') {
            if (P->i + 1 < P->n && P->p[P->i + 1] == ':') P->i += 2;
            else if (P->i + 2 < P->n && P->p[P->i + 1] == '<' && P->p[P->i + 2] != '=' && P->p[P->i + 2] != '!') {
                while (P->i < P->n && P->p[P->i] != '>') P->i++;
                P->i++;
            } else { fail(P, "pattern: %s is not supported", "lookaround"); return (frag){ -1, -1 }; }
        }
        if (++P->depth > MAX_DEPTH) { fail(P, "pattern: groups nested deeper than %s", "64"); return (frag){ -1, -1 }; }
        frag f = parse_alt(P, 0);
        P->depth--;
        if (f.s < 0) return f;
        if (P->i >= P->n || P->p[P->i] != ')') { fail(P, "pattern: unbalanced %s", "("); return (frag){ -1, -1 }; }
        P->i++;
        return f;
    }
    if (ch == '[') { P->i++; return parse_class(P); }
    if (ch == '.') {
        P->i++;
        for (int x = 0; x < 128; x++) if (x != '\n' && x != '\r') bs_add(&c.ascii, x, x);
        c.any_na = 1;
        return f_class(P, &c);
    }
    if (ch == '^' || ch == '$') { fail(P, "pattern: anchor %s is supported only at the start / end of the pattern or of a top-level alternative", ch == '^' ? "^" : "$"); return (frag){ -1, -1 }; }
    if (ch == '*' || ch == '+' || ch == '?' || ch == '{' || ch == ')' || ch == ']' || ch == '}') {
        if (ch == '}' || ch == ']') { P->i++; bs_add(&c.ascii, ch, ch); return f_class(P, &c); }
        fail(P, "pattern: nothing to repeat or unbalanced at '%s'", (char[]){ (char)ch, 0 });
        return (frag){ -1, -1 };
    }
    uint32_t cp;
    if (ch == '\\') {
        P->i++;
        int single = escape(P, &c, 0, &cp);
        if (single < 0) return (frag){ -1, -1 };
        if (!single) return f_class(P, &c);
    } else {
        long v = next_cp(P);
        if (v < 0) return (frag){ -1, -1 };
        cp = (uint32_t)v;
    }
    if (cc_add_cp(P, &c, cp, cp)) { free(c.cp); return (frag){ -1, -1 }; }
    return f_class(P, &c);
}

static int read_int(rx_parser *P, int *v) {
    size_t s = P->i;
    long x = 0;
    while (P->i < P->n && P->p[P->i] >= '0' && P->p[P->i] <= '9') {
        x = x * 10 + (P->p[P->i++] - '0');
        if (x > 1000) return fail(P, "pattern: repeat counts above %s are not supported", "1000");
    }
    *v = (int)x;
    return P->i > s ? 0 : -1;
}

static frag parse_repeat(rx_parser *P) {
    size_t at = P->i;
    frag f = parse_atom(P);
    if (f.s < 0) return f;
    while (P->i < P->n) {
        int ch = P->p[P->i];
        int lo, hi;
        if (ch == '*') { lo = 0; hi = -1; P->i++; }
        else if (ch == '+') { lo = 1; hi = -1; P->i++; }
        else if (ch == '?') { lo = 0; hi = 1; P->i++; }
        else if (ch == '{') {
            size_t save = P->i;
            P->i++;
            if (read_int(P, &lo)) { if (P->failed) return (frag){ -1, -1 }; P->i = save; break; }
            hi = lo;
            if (P->i < P->n && P->p[P->i] == ',') {
                P->i++;
                if (P->i < P->n && P->p[P->i] == '}') hi = -1;
                else if (read_int(P, &hi)) { if (P->failed) return (frag){ -1, -1 }; P->i = save; break; }
            }
            if (P->i >= P->n || P->p[P->i] != '}') { P->i = save; break; }
            P->i++;
            if (hi >= 0 && hi < lo) { fail(P, "pattern: repeat {m,n} with n < m%s", ""); return (frag){ -1, -1 }; }
        } else break;
        if (P->i < P->n && P->p[P->i] == '?') P->i++;          /* lazy: same language */
        size_t end = P->i;
        if (lo == 0 && hi == -1) f = f_rep(P, f, 0, 1);
        else if (lo == 1 && hi == -1) f = f_rep(P, f, 1, 1);
        else if (lo == 0 && hi == 1) f = f_rep(P, f, 0, 0);
        else {
            /* x{lo,hi}: lo copies, then hi - lo optional ones (or a star) */
            frag r = lo ? f : f_eps(P);
            for (int k = 1; k < lo && r.s >= 0; k++) { P->i = at; r = f_cat(P, r, parse_atom(P)); }
            if (hi < 0) { P->i = at; r = f_cat(P, r, f_rep(P, parse_atom(P), 0, 1)); }
            for (int k = lo; k < hi && r.s >= 0; k++) {
                frag g;
                if (k == 0) g = f;
                else { P->i = at; g = parse_atom(P); }
                r = f_cat(P, r, f_rep(P, g, 0, 0));
            }
            f = r;
        }
        P->i = end;
        break;
    }
    if (P->i < P->n && (P->p[P->i] == '*' || P->p[P->i] == '+' || P->p[P->i] == '?' || P->p[P->i] == '{')) {
        int ch = P->p[P->i];
        if (ch != '{' || (P->i + 1 < P->n && P->p[P->i + 1] >= '0' && P->p[P->i + 1] <= '9')) {
            fail(P, "pattern: nothing to repeat at '%s'", (char[]){ (char)ch, 0 });
            return (frag){ -1, -1 };
        }
    }
    return f;
}

/* top: a top-level alternative, where ^ / $ may open / close it */
static frag parse_concat(rx_parser *P, int top) {
    frag f = f_eps(P);
    int anchored_start = 0, anchored_end = 0;
    if (top && P->i < P->n && P->p[P->i] == '^') { anchored_start = 1; P->i++; }
    while (P->i < P->n && P->p[P->i] != '|' && P->p[P->i] != ')') {
        if (top && P->p[P->i] == '$' && (P->i + 1 == P->n || P->p[P->i + 1] == '|')) { anchored_end = 1; P->i++; break; }
        f = f_cat(P, f, parse_repeat(P));
        if (f.s < 0) return f;
    }
    if (top && f.s >= 0) {               /* JSON Schema searches: an open end takes any characters */
        bset all;
        memset(&all, 0, sizeof all);
        bs_add(&all, 0, 127);
        if (!anchored_start) f = f_cat(P, f_rep(P, f_class(P, &(cclass){ all, NULL, 0, 0, 1 }), 0, 1), f);
        if (!anchored_end) f = f_cat(P, f, f_rep(P, f_class(P, &(cclass){ all, NULL, 0, 0, 1 }), 0, 1));
    }
    return f;
}

static frag parse_alt(rx_parser *P, int top) {
    frag f = parse_concat(P, top);
    while (f.s >= 0 && P->i < P->n && P->p[P->i] == '|') {
        P->i++;
        f = f_alt(P, f, parse_concat(P, top));
    }
    return f;
}

/* ---- NFA -> DFA ---------------------------------------------------------------------------- */

typedef struct {
    int *items;                /* sorted NFA states of each DFA state, back to back */
    int *off;                  /* [n + 1] */
    int n, cap_items, cap_off;
    int *hash;                 /* open addressing over DFA ids, size hcap */
    int hcap;
} dset;

static uint32_t set_hash(const int *s, int k) {
    uint32_t h = 2166136261u;
    for (int i = 0; i < k; i++) h = (h ^ (uint32_t)s[i]) * 16777619u;
    return h;
}

/* closure of the NFA states in stack[0..k) (marks in mark[] with stamp), sorted into out */
static int closure(const rx_parser *P, int *stack, int k, int *mark, int stamp, int *out) {
    int n = 0;
    for (int i = 0; i < k; i++) mark[stack[i]] = stamp;
    while (k) {
        int s = stack[--k];
        const nstate *st = &P->st[s];
        out[n++] = s;
        if (st->set >= 0) continue;
        if (st->a >= 0 && mark[st->a] != stamp) { mark[st->a] = stamp; stack[k++] = st->a; }
        if (st->b >= 0 && mark[st->b] != stamp) { mark[st->b] = stamp; stack[k++] = st->b; }
    }
    /* keep what matters: byte edges and the accepting state (epsilon-only states are implied) */
    int m = 0;
    for (int i = 0; i < n; i++) if (P->st[out[i]].set >= 0 || (P->st[out[i]].a < 0 && P->st[out[i]].b < 0)) out[m++] = out[i];
    for (int i = 1; i < m; i++) {               /* insertion sort: sets are small */
        int v = out[i], j = i;
        while (j > 0 && out[j - 1] > v) { out[j] = out[j - 1]; j--; }
        out[j] = v;
    }
    return m;
}

/* id of the set, adding it when new; -1 on no memory or too many states */
static int dset_get(dset *D, const int *s, int k) {
    uint32_t h = set_hash(s, k);
    for (uint32_t i = h & (uint32_t)(D->hcap - 1);; i = (i + 1) & (uint32_t)(D->hcap - 1)) {
        int id = D->hash[i];
        if (id < 0) {
            if (D->n >= MAX_DFA) return -1;
            if (D->off[D->n] + k > D->cap_items) {
                int nc = (D->off[D->n] + k) * 2;
                int *ni = realloc(D->items, (size_t)nc * sizeof *ni);
                if (!ni) return -1;
                D->items = ni;
                D->cap_items = nc;
            }
            memcpy(D->items + D->off[D->n], s, (size_t)k * sizeof *s);
            D->off[D->n + 1] = D->off[D->n] + k;
            D->hash[i] = D->n;
            return D->n++;
        }
        int len = D->off[id + 1] - D->off[id];
        if (len == k && !memcmp(D->items + D->off[id], s, (size_t)k * sizeof *s)) return id;
    }
}

/* the most code points from s to acceptance; RX_INF when a cycle is on the way (every
 * state here is live, so a cycle means unbounded) */
static uint32_t longest(rx_dfa *d, const int *rep, int s, uint8_t *color) {
    if (color[s] == 2) return d->max_cp[s];
    if (color[s] == 1) return RX_INF;
    color[s] = 1;
    uint32_t best = 0;
    int inf = 0;
    for (int c = 0; c < d->n_cls; c++) {
        unsigned t = d->next[(size_t)s * d->n_cls + c];
        if (t == RX_DEAD) continue;
        uint32_t l = longest(d, rep, (int)t, color);
        if (l == RX_INF) { inf = 1; continue; }
        uint32_t w = rep[c] >= 0x80 && rep[c] <= 0xBF ? 0 : 1;
        if (l + w > best) best = l + w;
    }
    color[s] = 2;
    d->max_cp[s] = inf ? RX_INF : best;
    return d->max_cp[s];
}

int rx_compile(const char *pattern, size_t len, rx_dfa **out, char *err, size_t errlen) {
    rx_parser P = { .p = pattern, .n = len, .err = err, .errlen = errlen };
    rx_dfa *d = NULL;
    dset D = { 0 };
    int *mark = NULL, *stack = NULL, *buf = NULL, *rev = NULL, *roff = NULL, *queue = NULL, *fill = NULL;
    uint16_t *next = NULL;
    *out = NULL;
    frag f = parse_alt(&P, 1);
    if (f.s >= 0 && P.i < P.n) fail(&P, "pattern: unbalanced %s", ")");
    if (f.s < 0 || P.failed) goto fail;
    int accept = f.e;                           /* an epsilon state with no edges */
    /* byte classes: continuation bytes and ASCII apart from the start, then every set */
    uint8_t cls[256];
    int ncls = 3;
    for (int b = 0; b < 256; b++) cls[b] = b < 0x80 ? 0 : b < 0xC0 ? 1 : 2;
    for (int si = 0; si < P.nsets; si++) {
        int map[512];
        for (int i = 0; i < 512; i++) map[i] = -1;
        int nn = 0;
        uint8_t nc[256];
        for (int b = 0; b < 256; b++) {
            int key = cls[b] * 2 + bs_has(&P.sets[si], b);
            if (map[key] < 0) map[key] = nn++;
            nc[b] = (uint8_t)map[key];
        }
        if (nn > 255) { fail(&P, "%s needs too many byte classes", "pattern"); goto fail; }
        memcpy(cls, nc, sizeof cls);
        ncls = nn;
    }
    int N = P.nst;
    mark = calloc((size_t)N, sizeof *mark);
    stack = malloc((size_t)N * sizeof *stack);
    buf = malloc((size_t)N * sizeof *buf);
    D.hcap = 4096;
    D.hash = malloc((size_t)D.hcap * sizeof *D.hash);
    D.off = calloc(MAX_DFA + 1, sizeof *D.off);
    next = malloc((size_t)MAX_DFA * ncls * sizeof *next);
    if (!mark || !stack || !buf || !D.hash || !D.off || !next) { fail(&P, "%s: out of memory", "pattern"); goto fail; }
    for (int i = 0; i < D.hcap; i++) D.hash[i] = -1;
    int stamp = 1;
    stack[0] = f.s;
    int k = closure(&P, stack, 1, mark, stamp++, buf);
    if (dset_get(&D, buf, k) < 0) { fail(&P, "%s: out of memory", "pattern"); goto fail; }
    int rep[256];
    for (int c = 0; c < ncls; c++) for (int b = 0; b < 256; b++) if (cls[b] == c) { rep[c] = b; break; }
    for (int s = 0; s < D.n; s++) {
        for (int c = 0; c < ncls; c++) {
            int m = 0;
            for (int j = D.off[s]; j < D.off[s + 1]; j++) {
                const nstate *st = &P.st[D.items[j]];
                if (st->set >= 0 && bs_has(&P.sets[st->set], rep[c])) stack[m++] = st->a;
            }
            if (!m) { next[(size_t)s * ncls + c] = RX_DEAD; continue; }
            /* dedupe the targets before the closure */
            int u = 0;
            for (int j = 0; j < m; j++) {
                int dup = 0;
                for (int q = 0; q < u; q++) dup |= stack[q] == stack[j];
                if (!dup) stack[u++] = stack[j];
            }
            k = closure(&P, stack, u, mark, stamp++, buf);
            int id = dset_get(&D, buf, k);
            if (id < 0) { fail(&P, "pattern is too complex (more than %s automaton states)", "2048"); goto fail; }
            next[(size_t)s * ncls + c] = (uint16_t)id;
        }
    }
    d = calloc(1, sizeof *d);
    if (!d) { fail(&P, "%s: out of memory", "pattern"); goto fail; }
    d->n_states = D.n;
    d->n_cls = ncls;
    memcpy(d->cls, cls, sizeof cls);
    d->next = next;
    next = NULL;
    d->acc = calloc((size_t)D.n, 1);
    d->min_cp = malloc((size_t)D.n * sizeof *d->min_cp);
    d->max_cp = malloc((size_t)D.n * sizeof *d->max_cp);
    rev = malloc((size_t)D.n * ncls * sizeof *rev);
    roff = calloc((size_t)D.n + 1, sizeof *roff);
    size_t qcap = 2 * ((size_t)D.n * ncls + (size_t)D.n);
    queue = malloc(qcap * sizeof *queue);
    fill = malloc(((size_t)D.n + 1) * sizeof *fill);
    if (!d->acc || !d->min_cp || !d->max_cp || !rev || !roff || !queue || !fill) { fail(&P, "%s: out of memory", "pattern"); goto fail; }
    for (int s = 0; s < D.n; s++) {
        for (int j = D.off[s]; j < D.off[s + 1]; j++) d->acc[s] |= D.items[j] == accept;
        d->min_cp[s] = RX_INF;
    }
    /* reverse edges, then the fewest code points to acceptance (0-1 BFS; a deque in queue) */
    for (int s = 0; s < D.n; s++) for (int c = 0; c < ncls; c++) if (d->next[(size_t)s * ncls + c] != RX_DEAD) roff[d->next[(size_t)s * ncls + c] + 1]++;
    for (int s = 0; s < D.n; s++) roff[s + 1] += roff[s];
    for (int s = 0; s < D.n; s++) fill[s] = roff[s];
    for (int s = 0; s < D.n; s++) for (int c = 0; c < ncls; c++) {
        unsigned t = d->next[(size_t)s * ncls + c];
        if (t != RX_DEAD) rev[fill[t]++] = s * ncls + c;
    }
    size_t qh = qcap / 2, qt = qcap / 2;         /* a deque: 0-edges at the front */
    for (int s = 0; s < D.n; s++) if (d->acc[s]) { d->min_cp[s] = 0; queue[qt++] = s; }
    while (qh < qt) {
        int t = queue[qh++];
        for (int j = roff[t]; j < roff[t + 1]; j++) {
            int s = rev[j] / ncls, c = rev[j] % ncls;
            uint32_t w = rep[c] >= 0x80 && rep[c] <= 0xBF ? 0 : 1, dd = d->min_cp[t] + w;
            if (dd < d->min_cp[s]) {
                d->min_cp[s] = dd;
                if (w == 0 && qh > 0) queue[--qh] = s; else queue[qt++] = s;
            }
        }
    }
    /* cut the edges into dead states */
    for (size_t i = 0; i < (size_t)D.n * ncls; i++)
        if (d->next[i] != RX_DEAD && d->min_cp[d->next[i]] == RX_INF) d->next[i] = RX_DEAD;
    if (d->min_cp[0] == RX_INF) { fail(&P, "pattern can match %s", "nothing"); goto fail; }
    uint8_t *color = calloc((size_t)D.n, 1);
    if (!color) { fail(&P, "%s: out of memory", "pattern"); goto fail; }
    for (int s = 0; s < D.n; s++) if (d->min_cp[s] != RX_INF) longest(d, rep, s, color);
    free(color);
    free(P.st); free(P.sets); free(mark); free(stack); free(buf); free(rev); free(roff); free(queue); free(fill);
    free(D.items); free(D.off); free(D.hash);
    *out = d;
    return 0;
fail:
    if (!P.failed) snprintf(err, errlen, "pattern: cannot compile");
    rx_free(d);
    free(P.st); free(P.sets); free(mark); free(stack); free(buf); free(rev); free(roff); free(queue); free(next); free(fill);
    free(D.items); free(D.off); free(D.hash);
    return -1;
}

void rx_free(rx_dfa *d) {
    if (!d) return;
    free(d->next); free(d->acc); free(d->min_cp); free(d->max_cp);
    free(d);
}

int rx_match(const rx_dfa *d, const char *s, size_t n) {
    unsigned st = 0;
    for (size_t i = 0; i < n && st != RX_DEAD; i++) st = rx_step(d, st, (unsigned char)s[i]);
    return st != RX_DEAD && d->acc[st];
}
