/* sregex.c — see sregex.h. Pattern -> Thompson NFA over bytes (a byte set per edge); the
 * DFA is sregex_dfa.c. A counted repeat {m,n} re-parses its atom once per copy (parsing
 * is deterministic), so there is no syntax tree. */
#include "sregex_int.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { int s, e; } frag;           /* e: an epsilon state with nothing after it yet */

int rx_fail(rx_parser *P, const char *fmt, const char *what) {
    if (!P->failed) snprintf(P->err, P->errlen, fmt, what);
    P->failed = 1;
    return -1;
}

static void bs_add(bset *s, int lo, int hi) { for (int c = lo; c <= hi; c++) s->w[c >> 6] |= 1ull << (c & 63); }

static int new_state(rx_parser *P, int set) {
    if (P->nst >= MAX_NFA) return rx_fail(P, "%s is too large (more than 20000 automaton states)", "pattern");
    if (P->nst == P->cap) {
        int nc = P->cap ? P->cap * 2 : 256;
        nstate *ns = realloc(P->st, (size_t)nc * sizeof *ns);
        if (!ns) return rx_fail(P, "%s: out of memory", "pattern");
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
        if (!ns) return rx_fail(P, "%s: out of memory", "pattern");
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
    if (hi < lo) return rx_fail(P, "pattern: class range %s is out of order", "");
    for (uint32_t x = lo; x <= hi; x++) {
        if (x < 0x80) { bs_add(&c->ascii, (int)x, (int)x); continue; }
        if (hi - (lo > 0x80 ? lo : 0x80) > 256) return rx_fail(P, "pattern: non-ASCII class ranges wider than 256 characters are not supported%s", "");
        if (c->ncp == c->capcp) {
            int nc = c->capcp ? c->capcp * 2 : 16;
            uint32_t *n = realloc(c->cp, (size_t)nc * sizeof *n);
            if (!n) return rx_fail(P, "%s: out of memory", "pattern");
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
    if (!k || (size_t)k > left) return rx_fail(P, "pattern is not valid UTF-8%s", "");
    uint32_t v = k == 1 ? c : k == 2 ? c & 31 : k == 3 ? c & 15 : c & 7;
    for (int j = 1; j < k; j++) {
        if ((s[j] & 0xC0) != 0x80) return rx_fail(P, "pattern is not valid UTF-8%s", "");
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
    if (!have) { rx_fail(P, "pattern: a character class %s matches nothing", ""); return (frag){ -1, -1 }; }
    return f;
}

static int hexval(int c) { return c >= '0' && c <= '9' ? c - '0' : (c | 32) >= 'a' && (c | 32) <= 'f' ? (c | 32) - 'a' + 10 : -1; }

/* An escape after '\' (P->i at the letter) into class c (in_class: inside [...]); returns
 * 0, or 1 when it was a single character (*cp set: usable as a range end). */
static int escape(rx_parser *P, cclass *c, int in_class, uint32_t *cp) {
    if (P->i >= P->n) return rx_fail(P, "pattern ends inside an escape%s", "");
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
        if (!in_class) return rx_fail(P, "pattern: %s (word boundary) is not supported", "\\b");
        *cp = '\b';
        break;
    case 'x': case 'u': {
        int k = e == 'x' ? 2 : 4;
        uint32_t v = 0;
        if (P->i + (size_t)k > P->n) return rx_fail(P, "pattern: a short \\%s escape", e == 'x' ? "x" : "u");
        for (int j = 0; j < k; j++) {
            int h = hexval((unsigned char)P->p[P->i + (size_t)j]);
            if (h < 0) return rx_fail(P, "pattern: a bad \\%s escape", e == 'x' ? "x" : "u");
            v = v << 4 | (uint32_t)h;
        }
        P->i += (size_t)k;
        if (v >= 0xD800 && v <= 0xDFFF) return rx_fail(P, "pattern: %s escapes of surrogates are not supported", "\\u");
        *cp = v;
        break;
    }
    default:
        if (e >= '1' && e <= '9') return rx_fail(P, "pattern: %s are not supported", "backreferences");
        if (e == 'k' || e == 'p' || e == 'P' || e == 'c' || e == 'B') return rx_fail(P, "pattern: escape \\%s is not supported", (char[]){ (char)e, 0 });
        if (e < 0x80 && (e == '-' || !((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z') || (e >= '0' && e <= '9')))) { *cp = (uint32_t)e; break; }
        return rx_fail(P, "pattern: escape \\%s is not supported", (char[]){ (char)e, 0 });
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
        if (P->i >= P->n) { free(c.cp); rx_fail(P, "pattern: unterminated %s", "["); return (frag){ -1, -1 }; }
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
            if (s2 <= 0) { free(c.cp); if (!s2) rx_fail(P, "pattern: a class range ends in a %s", "class escape"); return (frag){ -1, -1 }; }
        }
        if (cc_add_cp(P, &c, lo, hi)) { free(c.cp); return (frag){ -1, -1 }; }
    }
    if (neg) {
        if (c.ncp) { free(c.cp); rx_fail(P, "pattern: negated classes with non-ASCII members are not supported%s", ""); return (frag){ -1, -1 }; }
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
            } else { rx_fail(P, "pattern: %s is not supported", "lookaround"); return (frag){ -1, -1 }; }
        }
        if (++P->depth > MAX_DEPTH) { rx_fail(P, "pattern: groups nested deeper than %s", "64"); return (frag){ -1, -1 }; }
        frag f = parse_alt(P, 0);
        P->depth--;
        if (f.s < 0) return f;
        if (P->i >= P->n || P->p[P->i] != ')') { rx_fail(P, "pattern: unbalanced %s", "("); return (frag){ -1, -1 }; }
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
    if (ch == '^' || ch == '$') { rx_fail(P, "pattern: anchor %s is supported only at the start / end of the pattern or of a top-level alternative", ch == '^' ? "^" : "$"); return (frag){ -1, -1 }; }
    if (ch == '*' || ch == '+' || ch == '?' || ch == '{' || ch == ')' || ch == ']' || ch == '}') {
        if (ch == '}' || ch == ']') { P->i++; bs_add(&c.ascii, ch, ch); return f_class(P, &c); }
        rx_fail(P, "pattern: nothing to repeat or unbalanced at '%s'", (char[]){ (char)ch, 0 });
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
        if (x > 1000) return rx_fail(P, "pattern: repeat counts above %s are not supported", "1000");
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
            if (hi >= 0 && hi < lo) { rx_fail(P, "pattern: repeat {m,n} with n < m%s", ""); return (frag){ -1, -1 }; }
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
            rx_fail(P, "pattern: nothing to repeat at '%s'", (char[]){ (char)ch, 0 });
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

int rx_compile(const char *pattern, size_t len, rx_dfa **out, char *err, size_t errlen) {
    rx_parser P = { .p = pattern, .n = len, .err = err, .errlen = errlen };
    *out = NULL;
    frag f = parse_alt(&P, 1);
    if (f.s >= 0 && P.i < P.n) rx_fail(&P, "pattern: unbalanced %s", ")");
    int rc = f.s < 0 || P.failed ? -1 : rx_build(&P, f.s, f.e, out);
    if (rc && !P.failed) snprintf(err, errlen, "pattern: cannot compile");
    free(P.st);
    free(P.sets);
    return rc;
}

void rx_free(rx_dfa *d) {
    if (!d) return;
    free(d->next); free(d->acc); free(d->min_cp); free(d->max_cp); free(d->loop);
    free(d);
}

int rx_match(const rx_dfa *d, const char *s, size_t n) {
    unsigned st = 0;
    for (size_t i = 0; i < n && st != RX_DEAD; i++) st = rx_step(d, st, (unsigned char)s[i]);
    return st != RX_DEAD && d->acc[st];
}
