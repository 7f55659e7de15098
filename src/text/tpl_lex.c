/* tpl_lex.c — template source to tokens, with Jinja2's whitespace rules.
 *
 * Owns the first pass over a template: line endings normalised (\r\n and \r become \n, one
 * trailing newline dropped, as Jinja does without keep_trailing_newline), text split from
 * `{{ }}`, `{% %}` and `{# #}` tags, `{% raw %}` bodies passed through, and the tags cut into
 * names, numbers, strings (Python escapes decoded) and operators. Whitespace control follows
 * the environment transformers uses: `{%-`/`-%}` strip all whitespace on that side,
 * trim_blocks drops the newline right after a block or comment tag, lstrip_blocks removes the
 * spaces and tabs before a block or comment tag that starts its line (`{%+` opts out), and a
 * tag end only counts while brackets inside the tag are balanced — all as Jinja's lexer
 * decides, including its notion of "line start" after a tag that ate a newline.
 *
 * Invariants: every token's text is valid UTF-8 and lives in the template arena; the source
 * must be valid UTF-8 (checked first). Errors name the line. */
#include "text/tpl_internal.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

typedef struct lexer {
    tarena *a;
    const char *s;   /* normalised source */
    size_t n;
    tok *toks; int ntoks, cap;
    int line;
    char *err; size_t errlen;
} lexer;

static int lfail(lexer *L, int line, const char *fmt, const char *arg) {
    char msg[200];
    snprintf(msg, sizeof msg, fmt, arg);
    snprintf(L->err, L->errlen, "line %d: %s", line, msg);
    return -1;
}

static tok *push(lexer *L, tk_type t, int line) {
    if (L->ntoks == L->cap) {
        int nc = L->cap ? L->cap * 2 : 256;
        tok *nt = realloc(L->toks, (size_t)nc * sizeof *nt);
        if (!nt) return NULL;
        L->toks = nt; L->cap = nc;
    }
    tok *t0 = &L->toks[L->ntoks++];
    memset(t0, 0, sizeof *t0);
    t0->t = t; t0->line = line;
    return t0;
}

/* Length of the Unicode whitespace run at i. */
static size_t ws_run(const char *s, size_t n, size_t i) {
    size_t j = i;
    while (j < n) {
        size_t k = j;
        int cp = utf8_next(s, n, &k);
        if (!py_isspace(cp)) break;
        j = k;
    }
    return j - i;
}

/* Length of text once trailing Unicode whitespace is removed (Python's rstrip()). */
static size_t rstrip_len(const char *s, size_t n) {
    size_t end = n;
    while (end > 0) {
        size_t st = end - 1;
        while (st > 0 && ((unsigned char)s[st] & 0xC0) == 0x80) st--;
        size_t k = st;
        int cp = utf8_next(s, n, &k);
        if (!py_isspace(cp)) break;
        end = st;
    }
    return end;
}

static int count_nl(const char *s, size_t n) {
    int c = 0;
    for (size_t i = 0; i < n; i++) c += s[i] == '\n';
    return c;
}

/* Emits text as a data token after the strip rules for the tag that follows it. */
static int emit_data(lexer *L, const char *text, size_t len, char sign, int lstrip_ok, int line_starting, int line) {
    if (sign == '-') len = rstrip_len(text, len);
    else if (sign != '+' && lstrip_ok) {
        size_t l_pos = 0;
        for (size_t i = len; i > 0; i--) if (text[i - 1] == '\n') { l_pos = i; break; }
        if ((l_pos > 0 || line_starting) && l_pos < len && ws_run(text, len, l_pos) == len - l_pos) len = l_pos;
    }
    if (!len) return 0;
    tok *t = push(L, TK_DATA, line);
    if (!t) return lfail(L, line, "%s", "out of memory");
    t->s = tarena_strdup(L->a, text, len);
    t->len = len;
    return t->s ? 0 : lfail(L, line, "%s", "out of memory");
}

/* `{%[-+]?\s*raw\s*(-%}\s*|%})` at q; returns the end, or 0. */
static size_t match_raw_begin(lexer *L, size_t q) {
    const char *s = L->s; size_t n = L->n, p = q + 2;
    if (p < n && (s[p] == '-' || s[p] == '+')) p++;
    p += ws_run(s, n, p);
    if (p + 3 > n || memcmp(s + p, "raw", 3)) return 0;
    p += 3;
    p += ws_run(s, n, p);
    if (p + 3 <= n && s[p] == '-' && s[p + 1] == '%' && s[p + 2] == '}') return p + 3 + ws_run(s, n, p + 3);
    if (p + 2 <= n && s[p] == '%' && s[p + 1] == '}') return p + 2;
    return 0;
}

/* `{%[-+]?\s*endraw\s*(\+%}|-%}\s*|%}\n?)` at q; returns the end, or 0. */
static size_t match_endraw(lexer *L, size_t q, char *sign) {
    const char *s = L->s; size_t n = L->n, p = q;
    if (p + 2 > n || s[p] != '{' || s[p + 1] != '%') return 0;
    p += 2;
    *sign = 0;
    if (p < n && (s[p] == '-' || s[p] == '+')) *sign = s[p++];
    p += ws_run(s, n, p);
    if (p + 6 > n || memcmp(s + p, "endraw", 6)) return 0;
    p += 6;
    p += ws_run(s, n, p);
    if (p + 3 <= n && s[p] == '+' && s[p + 1] == '%' && s[p + 2] == '}') return p + 3;
    if (p + 3 <= n && s[p] == '-' && s[p + 1] == '%' && s[p + 2] == '}') return p + 3 + ws_run(s, n, p + 3);
    if (p + 2 <= n && s[p] == '%' && s[p + 1] == '}') return p + 2 + (p + 2 < n && s[p + 2] == '\n');
    return 0;
}

static int hexval(int c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* Decodes the body of a string literal as Python's unicode-escape codec does. */
static int decode_string(lexer *L, const char *s, size_t n, int line, tok *t) {
    char *out = tarena_alloc(L->a, n * 2 + 1); /* escapes never grow the text more than 2x */
    if (!out) return lfail(L, line, "%s", "out of memory");
    size_t o = 0, i = 0;
    while (i < n) {
        if (s[i] != '\\' || i + 1 >= n) { out[o++] = s[i++]; continue; }
        char c = s[i + 1];
        i += 2;
        int cp = -1;
        switch (c) {
        case '\n': continue;
        case '\\': cp = '\\'; break;
        case '\'': cp = '\''; break;
        case '"': cp = '"'; break;
        case 'a': cp = 7; break;
        case 'b': cp = 8; break;
        case 'f': cp = 12; break;
        case 'n': cp = '\n'; break;
        case 'r': cp = '\r'; break;
        case 't': cp = '\t'; break;
        case 'v': cp = 11; break;
        case 'x': case 'u': case 'U': {
            int nd = c == 'x' ? 2 : c == 'u' ? 4 : 8;
            long v = 0;
            for (int k = 0; k < nd; k++) {
                int h = i + (size_t)k < n ? hexval(s[i + (size_t)k]) : -1;
                if (h < 0) return lfail(L, line, "bad string literal: truncated \\%c escape", (char[]){c, 0});
                v = v * 16 + h;
            }
            if (v > 0x10FFFF) return lfail(L, line, "%s", "bad string literal: illegal Unicode character");
            i += (size_t)nd;
            cp = (int)v;
            break;
        }
        default:
            if (c >= '0' && c <= '7') {
                int v = c - '0';
                for (int k = 0; k < 2 && i < n && s[i] >= '0' && s[i] <= '7'; k++) v = v * 8 + (s[i++] - '0');
                cp = v;
            }
        }
        if (cp < 0) { out[o++] = '\\'; out[o++] = c; continue; }
        o += (size_t)utf8_put(out + o, cp);
    }
    out[o] = 0;
    t->s = out; t->len = o;
    return 0;
}

static const char *const OPS2[] = {"//", "**", "==", "!=", ">=", "<="};
static const int OPS2_ID[] = {OP_FLOORDIV, OP_POW, OP_EQ, OP_NE, OP_GTEQ, OP_LTEQ};
static const char OPS1[] = "+-/*%~[](){}><=.:|,;";
static const int OPS1_ID[] = {OP_ADD, OP_SUB, OP_DIV, OP_MUL, OP_MOD, OP_TILDE, OP_LBRACKET,
                              OP_RBRACKET, OP_LPAREN, OP_RPAREN, OP_LBRACE, OP_RBRACE, OP_GT,
                              OP_LT, OP_ASSIGN, OP_DOT, OP_COLON, OP_PIPE, OP_COMMA, OP_SEMICOLON};

static int isdig(char c) { return c >= '0' && c <= '9'; }
static int isname0(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }

/* Digits with single underscores between them: (\d+_)*\d+ . Returns the end or 0. */
static size_t digits(const char *s, size_t n, size_t p) {
    if (p >= n || !isdig(s[p])) return 0;
    while (p < n && isdig(s[p])) {
        p++;
        if (p + 1 < n && s[p] == '_' && isdig(s[p + 1])) p++;
    }
    return p;
}

static int lex_number(lexer *L, size_t *pp, int line) {
    const char *s = L->s; size_t n = L->n, p = *pp;
    size_t e1 = digits(s, n, p);
    /* float: digits ( (.digits)? e[+-]?digits | .digits ) */
    size_t fe = 0;
    if (e1) {
        size_t q = e1;
        if (q < n && s[q] == '.') { size_t f = digits(s, n, q + 1); if (f) q = f; }
        if (q < n && (s[q] == 'e' || s[q] == 'E')) {
            size_t r = q + 1;
            if (r < n && (s[r] == '+' || s[r] == '-')) r++;
            size_t x = digits(s, n, r);
            if (x) fe = x;
        }
        if (!fe && e1 < n && s[e1] == '.') { size_t f = digits(s, n, e1 + 1); if (f) fe = f; }
    }
    char buf[128];
    if (fe) {
        size_t k = 0;
        for (size_t i = p; i < fe && k < sizeof buf - 1; i++) if (s[i] != '_') buf[k++] = s[i];
        buf[k] = 0;
        tok *t = push(L, TK_FLOAT, line);
        if (!t) return lfail(L, line, "%s", "out of memory");
        t->f = strtod(buf, NULL);
        *pp = fe;
        return 0;
    }
    /* integer: 0b / 0o / 0x prefixes, or decimal */
    int base = 10;
    size_t q = p;
    if (s[p] == '0' && p + 1 < n && strchr("bBoOxX", s[p + 1]) && s[p + 1]) {
        char c = (char)(s[p + 1] | 0x20);
        base = c == 'b' ? 2 : c == 'o' ? 8 : 16;
        q = p + 2;
    }
    uint64_t v = 0; int nd = 0, over = 0;
    while (q < n) {
        char c = s[q];
        if (c == '_' && nd && q + 1 < n && hexval(s[q + 1]) >= 0 && hexval(s[q + 1]) < base) { q++; continue; }
        int h = hexval(c);
        if (h < 0 || h >= base) break;
        if (v > (UINT64_MAX - (uint64_t)h) / (uint64_t)base) over = 1;
        v = v * (uint64_t)base + (uint64_t)h;
        nd++; q++;
        if (base == 10 && s[p] == '0') { while (q < n && (s[q] == '0' || (s[q] == '_' && q + 1 < n && s[q + 1] == '0'))) q++; break; }
    }
    if (!nd) return lfail(L, line, "%s", "invalid number");
    if (over || v > (uint64_t)INT64_MAX) return lfail(L, line, "%s", "integer literal too large");
    tok *t = push(L, TK_INT, line);
    if (!t) return lfail(L, line, "%s", "out of memory");
    t->i = (int64_t)v;
    *pp = q;
    return 0;
}

/* Tokens of one {{ }} or {% %} tag, from p to its end; sets *end and *line_starting. */
static int lex_tag(lexer *L, size_t p, int is_block, size_t *end, int *line_starting) {
    const char *s = L->s; size_t n = L->n;
    char stack[256]; int depth = 0;
    int start_line = L->line;
    for (;;) {
        if (p >= n) return lfail(L, start_line, "%s", is_block ? "unexpected end of template: block tag never closed with %}"
                                                                : "unexpected end of template: expression never closed with }}");
        if (depth == 0) {
            size_t e = 0;
            if (is_block) {
                if (p + 3 <= n && s[p] == '+' && s[p + 1] == '%' && s[p + 2] == '}') e = p + 3;
                else if (p + 3 <= n && s[p] == '-' && s[p + 1] == '%' && s[p + 2] == '}') e = p + 3 + ws_run(s, n, p + 3);
                else if (p + 2 <= n && s[p] == '%' && s[p + 1] == '}') e = p + 2 + (p + 2 < n && s[p + 2] == '\n');
            } else {
                if (p + 3 <= n && s[p] == '-' && s[p + 1] == '}' && s[p + 2] == '}') e = p + 3 + ws_run(s, n, p + 3);
                else if (p + 2 <= n && s[p] == '}' && s[p + 1] == '}') e = p + 2;
            }
            if (e) {
                if (!push(L, is_block ? TK_BLOCK_END : TK_VAR_END, L->line)) return lfail(L, L->line, "%s", "out of memory");
                L->line += count_nl(s + p, e - p);
                *end = e;
                *line_starting = s[e - 1] == '\n';
                return 0;
            }
        }
        size_t w = ws_run(s, n, p);
        if (w) { L->line += count_nl(s + p, w); p += w; continue; }
        char c = s[p];
        if (isdig(c) && !(p > 0 && s[p - 1] == '.')) { if (lex_number(L, &p, L->line)) return -1; continue; }
        if (isname0(c)) {
            size_t q = p + 1;
            while (q < n && (isname0(s[q]) || isdig(s[q]))) q++;
            tok *t = push(L, TK_NAME, L->line);
            if (!t) return lfail(L, L->line, "%s", "out of memory");
            t->s = tarena_strdup(L->a, s + p, q - p); t->len = q - p;
            if (!t->s) return lfail(L, L->line, "%s", "out of memory");
            p = q;
            continue;
        }
        if (c == '\'' || c == '"') {
            size_t q = p + 1;
            while (q < n && s[q] != c) q += s[q] == '\\' ? 2 : 1;
            if (q >= n) return lfail(L, L->line, "%s", "unterminated string literal");
            tok *t = push(L, TK_STRING, L->line);
            if (!t) return lfail(L, L->line, "%s", "out of memory");
            if (decode_string(L, s + p + 1, q - p - 1, L->line, t)) return -1;
            L->line += count_nl(s + p, q - p);
            p = q + 1;
            continue;
        }
        int op = 0; size_t ol = 0;
        for (size_t k = 0; k < sizeof OPS2 / sizeof *OPS2; k++)
            if (p + 2 <= n && s[p] == OPS2[k][0] && s[p + 1] == OPS2[k][1]) { op = OPS2_ID[k]; ol = 2; break; }
        if (!op) {
            const char *f = c ? strchr(OPS1, c) : NULL;
            if (f) { op = OPS1_ID[f - OPS1]; ol = 1; }
        }
        if (!op) {
            char ch[8] = {0};
            size_t k = p;
            utf8_next(s, n, &k);
            memcpy(ch, s + p, k - p < 7 ? k - p : 7);
            return lfail(L, L->line, "unexpected char '%s'", ch);
        }
        if (op == OP_LPAREN || op == OP_LBRACKET || op == OP_LBRACE) {
            if (depth == (int)sizeof stack) return lfail(L, L->line, "%s", "brackets nested too deeply");
            stack[depth++] = op == OP_LPAREN ? ')' : op == OP_LBRACKET ? ']' : '}';
        } else if (op == OP_RPAREN || op == OP_RBRACKET || op == OP_RBRACE) {
            if (!depth) return lfail(L, L->line, "unexpected '%s'", (char[]){c, 0});
            if (stack[depth - 1] != c) {
                char msg[40];
                snprintf(msg, sizeof msg, "'%c', expected '%c'", c, stack[depth - 1]);
                return lfail(L, L->line, "unexpected %s", msg);
            }
            depth--;
        }
        tok *t = push(L, TK_OP, L->line);
        if (!t) return lfail(L, L->line, "%s", "out of memory");
        t->op = op;
        p += ol;
    }
}

int tpl_lex(tarena *a, const char *src, size_t len, tok **toks, int *ntoks, char *err, size_t errlen) {
    lexer L = {.a = a, .line = 1, .err = err, .errlen = errlen};
    *toks = NULL; *ntoks = 0;
    /* valid UTF-8 first: every string made from the source must be */
    {
        size_t i = 0;
        int line = 1;
        while (i < len) {
            utf8proc_int32_t cp;
            utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)src + i, (utf8proc_ssize_t)(len - i), &cp);
            if (k <= 0) { snprintf(err, errlen, "line %d: template is not valid UTF-8 (byte %zu)", line, i); return -1; }
            if (cp == '\n') line++;
            i += (size_t)k;
        }
    }
    /* line endings: \r\n and \r become \n; one trailing newline is dropped */
    char *s = tarena_alloc(a, len + 1);
    if (!s) { snprintf(err, errlen, "out of memory"); return -1; }
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') { s[n++] = '\n'; if (i + 1 < len && src[i + 1] == '\n') i++; }
        else s[n++] = src[i];
    }
    if (n && s[n - 1] == '\n') n--;
    s[n] = 0;
    L.s = s; L.n = n;

    size_t pos = 0;
    int line_starting = 1;
    while (pos < n) {
        size_t q = pos;
        while (q + 1 < n && !(s[q] == '{' && (s[q + 1] == '{' || s[q + 1] == '%' || s[q + 1] == '#'))) q++;
        if (q + 1 >= n) { /* the rest is text */
            if (emit_data(&L, s + pos, n - pos, '+', 0, 0, L.line)) goto fail;
            break;
        }
        char opener = s[q + 1];
        char sign = q + 2 < n && (s[q + 2] == '-' || s[q + 2] == '+') ? s[q + 2] : 0;
        size_t raw_end = opener == '%' ? match_raw_begin(&L, q) : 0;
        if (emit_data(&L, s + pos, q - pos, sign, opener != '{', line_starting, L.line)) goto fail;
        L.line += count_nl(s + pos, q - pos);
        if (raw_end) {
            L.line += count_nl(s + q, raw_end - q);
            line_starting = s[raw_end - 1] == '\n';
            size_t p = raw_end, e = 0;
            char sign2 = 0;
            for (; p < n; p++) if (s[p] == '{' && (e = match_endraw(&L, p, &sign2))) break;
            if (!e) { lfail(&L, L.line, "%s", "missing end of raw directive"); goto fail; }
            if (emit_data(&L, s + raw_end, p - raw_end, sign2, 1, line_starting, L.line)) goto fail;
            L.line += count_nl(s + raw_end, e - raw_end);
            line_starting = s[e - 1] == '\n';
            pos = e;
            continue;
        }
        if (opener == '#') {
            size_t p = q + 2 + (sign ? 1 : 0), e = 0;
            for (; p < n; p++) {
                if (p + 3 <= n && s[p] == '+' && s[p + 1] == '#' && s[p + 2] == '}') { e = p + 3; break; }
                if (p + 3 <= n && s[p] == '-' && s[p + 1] == '#' && s[p + 2] == '}') { e = p + 3 + ws_run(s, n, p + 3); break; }
                if (p + 2 <= n && s[p] == '#' && s[p + 1] == '}') { e = p + 2 + (p + 2 < n && s[p + 2] == '\n'); break; }
            }
            if (!e) { lfail(&L, L.line, "%s", "missing end of comment tag"); goto fail; }
            L.line += count_nl(s + q, e - q);
            line_starting = s[e - 1] == '\n';
            pos = e;
            continue;
        }
        int is_block = opener == '%';
        if (!push(&L, is_block ? TK_BLOCK_BEGIN : TK_VAR_BEGIN, L.line)) { lfail(&L, L.line, "%s", "out of memory"); goto fail; }
        if (lex_tag(&L, q + 2 + (sign ? 1 : 0), is_block, &pos, &line_starting)) goto fail;
    }
    if (!push(&L, TK_EOF, L.line)) { lfail(&L, L.line, "%s", "out of memory"); goto fail; }
    /* the token array moves into the arena so the template owns everything */
    tok *out = tarena_alloc(a, (size_t)L.ntoks * sizeof *out);
    if (!out) { snprintf(err, errlen, "out of memory"); goto fail; }
    memcpy(out, L.toks, (size_t)L.ntoks * sizeof *out);
    free(L.toks);
    *toks = out; *ntoks = L.ntoks;
    return 0;
fail:
    free(L.toks);
    return -1;
}
