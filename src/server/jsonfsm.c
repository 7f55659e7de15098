/* jsonfsm.c — JSON prefix recognizer (jsonfsm.h). */
#include "jsonfsm.h"

/* what the grammar expects next, outside a token */
enum { E_VALUE, E_VALUE_OR_CLOSE, E_KEY_OR_CLOSE, E_KEY, E_COLON, E_COMMA_OR_CLOSE, E_END };
/* lexical states */
enum { L_NONE, L_STR, L_ESC, L_HEX, L_SURR_BS, L_SURR_U, L_MINUS, L_ZERO, L_INT, L_DOT, L_FRAC, L_E, L_ESIGN, L_EXP, L_LIT };

static const char *const lits[3] = { "true", "false", "null" };

void jf_init(jf_state *s, int top_object) {
    *s = (jf_state){ 0 };
    s->expect = E_VALUE;
    s->top_object = (uint8_t)(top_object != 0);
}

static int is_ws(int c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
static int is_hex(int c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }
static int top_is_object(const jf_state *s) { return (int)((s->stack >> (s->depth - 1)) & 1u); }

static void value_done(jf_state *s) { s->expect = s->depth ? E_COMMA_OR_CLOSE : E_END; }

static int push(jf_state *s, int object) {
    if (s->depth >= JF_DEPTH) return -1;
    if (object) s->stack |= (uint64_t)1 << s->depth;
    else s->stack &= ~((uint64_t)1 << s->depth);
    s->depth++;
    s->expect = object ? E_KEY_OR_CLOSE : E_VALUE_OR_CLOSE;
    return 0;
}

static void pop(jf_state *s) {
    s->depth--;
    value_done(s);
}

/* A value starting with byte c (expect is E_VALUE or E_VALUE_OR_CLOSE). */
static int start_value(jf_state *s, int c) {
    if (s->top_object && s->depth == 0 && c != '{') return -1;
    switch (c) {
    case '{': return push(s, 1);
    case '[': return push(s, 0);
    case '"': s->lex = L_STR; s->key = 0; return 0;
    case '-': s->lex = L_MINUS; return 0;
    case '0': s->lex = L_ZERO; return 0;
    case 't': s->lex = L_LIT; s->lit = 0; s->aux = 1; return 0;
    case 'f': s->lex = L_LIT; s->lit = 1; s->aux = 1; return 0;
    case 'n': s->lex = L_LIT; s->lit = 2; s->aux = 1; return 0;
    default:
        if (c >= '1' && c <= '9') { s->lex = L_INT; return 0; }
        return -1;
    }
}

/* One byte; 0 or -1. */
static int feed1(jf_state *s, int c) {
    switch (s->lex) {
    case L_STR:
        if (s->cont) {                            /* inside a UTF-8 sequence */
            static const uint8_t lo[5] = { 0x80, 0xA0, 0x80, 0x90, 0x80 }, hi[5] = { 0xBF, 0xBF, 0x9F, 0xBF, 0x8F };
            if (c < lo[s->first] || c > hi[s->first]) return -1;
            s->cont--;
            s->first = 0;
            return 0;
        }
        if (c == '"') { s->lex = L_NONE; if (s->key) s->expect = E_COLON; else value_done(s); return 0; }
        if (c == '\\') { s->lex = L_ESC; return 0; }
        if (c < 0x20) return -1;
        if (c < 0x80) return 0;
        if (c >= 0xC2 && c <= 0xDF) { s->cont = 1; s->first = 0; return 0; }
        if (c >= 0xE0 && c <= 0xEF) { s->cont = 2; s->first = c == 0xE0 ? 1 : c == 0xED ? 2 : 0; return 0; }
        if (c >= 0xF0 && c <= 0xF4) { s->cont = 3; s->first = c == 0xF0 ? 3 : c == 0xF4 ? 4 : 0; return 0; }
        return -1;
    case L_ESC:
        if (c == 'u') { s->lex = L_HEX; s->aux = 4; s->hex = 0; s->low = 0; return 0; }
        if (c == '"' || c == '\\' || c == '/' || c == 'b' || c == 'f' || c == 'n' || c == 'r' || c == 't') { s->lex = L_STR; return 0; }
        return -1;
    case L_SURR_BS:                               /* a high surrogate wants "\\u" + a low one */
        if (c != '\\') return -1;
        s->lex = L_SURR_U;
        return 0;
    case L_SURR_U:
        if (c != 'u') return -1;
        s->lex = L_HEX; s->aux = 4; s->hex = 0; s->low = 1;
        return 0;
    case L_HEX: {
        if (!is_hex(c)) return -1;
        int v = c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
        unsigned h = (unsigned)s->hex << 4 | (unsigned)v;
        /* digit by digit, so that no accepted prefix is a dead end: D8-DB high (a low one
         * must follow), DC-DF only as that low one */
        if (s->aux == 4 && s->low && v != 0xD) return -1;
        if (s->aux == 3 && (h >> 4) == 0xD) {
            if (s->low ? v < 0xC : v >= 0xC) return -1;
        }
        s->hex = (uint16_t)h;
        if (--s->aux == 0) s->lex = !s->low && h >= 0xD800 && h <= 0xDBFF ? L_SURR_BS : L_STR;
        return 0;
    }
    case L_LIT:
        if (c != lits[s->lit][s->aux]) return -1;
        if (!lits[s->lit][++s->aux]) { s->lex = L_NONE; value_done(s); }
        return 0;
    case L_MINUS:
        if (c == '0') { s->lex = L_ZERO; return 0; }
        if (c >= '1' && c <= '9') { s->lex = L_INT; return 0; }
        return -1;
    case L_ZERO: case L_INT: case L_FRAC: case L_EXP:
        if (c >= '0' && c <= '9' && s->lex != L_ZERO) return 0;
        if (c == '.' && (s->lex == L_ZERO || s->lex == L_INT)) { s->lex = L_DOT; return 0; }
        if ((c == 'e' || c == 'E') && s->lex != L_EXP) { s->lex = L_E; return 0; }
        s->lex = L_NONE;                          /* the number ended before c */
        value_done(s);
        return feed1(s, c);
    case L_DOT:
        if (c >= '0' && c <= '9') { s->lex = L_FRAC; return 0; }
        return -1;
    case L_E:
        if (c == '+' || c == '-') { s->lex = L_ESIGN; return 0; }
        if (c >= '0' && c <= '9') { s->lex = L_EXP; return 0; }
        return -1;
    case L_ESIGN:
        if (c >= '0' && c <= '9') { s->lex = L_EXP; return 0; }
        return -1;
    default: break;
    }
    if (is_ws(c)) return s->max_ws && ++s->ws > s->max_ws ? -1 : 0;
    s->ws = 0;
    switch (s->expect) {
    case E_VALUE: return start_value(s, c);
    case E_VALUE_OR_CLOSE:
        if (c == ']') { pop(s); return 0; }
        return start_value(s, c);
    case E_KEY_OR_CLOSE:
        if (c == '}') { pop(s); return 0; }
        /* fall through */
    case E_KEY:
        if (c != '"') return -1;
        s->lex = L_STR;
        s->key = 1;
        return 0;
    case E_COLON:
        if (c != ':') return -1;
        s->expect = E_VALUE;
        return 0;
    case E_COMMA_OR_CLOSE:
        if (c == ',') { s->expect = top_is_object(s) ? E_KEY : E_VALUE; return 0; }
        if (c == (top_is_object(s) ? '}' : ']')) { pop(s); return 0; }
        return -1;
    default:
        return -1;                                /* E_END: only whitespace */
    }
}

int jf_feed(jf_state *s, const char *p, size_t n) {
    if (s->dead) return -1;
    for (size_t i = 0; i < n; i++)
        if (feed1(s, (unsigned char)p[i])) { s->dead = 1; return -1; }
    return 0;
}

int jf_complete(const jf_state *s) {
    if (s->dead || s->depth) return 0;
    if (s->lex == L_NONE) return s->expect == E_END;
    return s->lex == L_ZERO || s->lex == L_INT || s->lex == L_FRAC || s->lex == L_EXP;
}
