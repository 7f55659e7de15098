/* tok_util.c — the tokenizer's plumbing: byte buffers, UTF-8, hash maps, patterns and the
 * GPT-2 byte alphabet. Maps are open-addressing tables with power-of-two capacity kept at
 * most half full; keys of a tk_strmap live in its own buffer, referenced by offset so the
 * buffer may move when it grows. */
#include "tok_internal.h"
#include "../core/status.h"
#include <stdlib.h>
#include <string.h>

/* ---- buffers ---- */

int tk_buf_reserve(tk_buf *b, size_t extra) {
    if (b->n + extra + 1 <= b->cap) return 0;
    size_t nc = b->cap ? b->cap : 64;
    while (nc < b->n + extra + 1) nc *= 2;
    char *np = realloc(b->p, nc);
    if (!np) return -1;
    b->p = np;
    b->cap = nc;
    return 0;
}

int tk_buf_put(tk_buf *b, const void *s, size_t n) {
    if (tk_buf_reserve(b, n)) return -1;
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}

int tk_buf_putc(tk_buf *b, char c) { return tk_buf_put(b, &c, 1); }

void tk_buf_free(tk_buf *b) { free(b->p); b->p = NULL; b->n = b->cap = 0; }

/* ---- UTF-8 ---- */

size_t tk_utf8_len(const unsigned char *s, size_t n) {
    if (!n) return 0;
    unsigned char c = s[0];
    if (c < 0x80) return 1;
    if (c < 0xC2) return 0;
    if (c < 0xE0) return (n >= 2 && (s[1] & 0xC0) == 0x80) ? 2 : 0;
    if (c < 0xF0) {
        if (n < 3) return 0;
        unsigned char lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        if (s[1] < lo || s[1] > hi || (s[2] & 0xC0) != 0x80) return 0;
        return 3;
    }
    if (c < 0xF5) {
        if (n < 4) return 0;
        unsigned char lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        if (s[1] < lo || s[1] > hi || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80) return 0;
        return 4;
    }
    return 0;
}

uint32_t tk_utf8_dec(const unsigned char *s, size_t n, size_t *adv) {
    size_t l = tk_utf8_len(s, n);
    if (!l) { *adv = 1; return 0xFFFD; }
    *adv = l;
    switch (l) {
    case 1: return s[0];
    case 2: return ((uint32_t)(s[0] & 0x1F) << 6) | (s[1] & 0x3F);
    case 3: return ((uint32_t)(s[0] & 0x0F) << 12) | ((uint32_t)(s[1] & 0x3F) << 6) | (s[2] & 0x3F);
    default: return ((uint32_t)(s[0] & 0x07) << 18) | ((uint32_t)(s[1] & 0x3F) << 12) |
                    ((uint32_t)(s[2] & 0x3F) << 6) | (s[3] & 0x3F);
    }
}

int tk_utf8_put(tk_buf *b, uint32_t c) {
    char t[4];
    size_t n;
    if (c < 0x80) { t[0] = (char)c; n = 1; }
    else if (c < 0x800) { t[0] = (char)(0xC0 | (c >> 6)); t[1] = (char)(0x80 | (c & 0x3F)); n = 2; }
    else if (c < 0x10000) {
        t[0] = (char)(0xE0 | (c >> 12)); t[1] = (char)(0x80 | ((c >> 6) & 0x3F)); t[2] = (char)(0x80 | (c & 0x3F)); n = 3;
    } else {
        t[0] = (char)(0xF0 | (c >> 18)); t[1] = (char)(0x80 | ((c >> 12) & 0x3F));
        t[2] = (char)(0x80 | ((c >> 6) & 0x3F)); t[3] = (char)(0x80 | (c & 0x3F)); n = 4;
    }
    return tk_buf_put(b, t, n);
}

size_t tk_utf8_check(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        if (s[i] < 0x80) { i++; continue; }
        size_t l = tk_utf8_len(s + i, n - i);
        if (!l) return i;
        i += l;
    }
    return n;
}

/* Length of the maximal prefix of an invalid sequence at s that could start a valid one
 * (WHATWG / Rust "maximal subpart"); at least 1. */
static size_t maximal_subpart(const unsigned char *s, size_t n) {
    unsigned char c = s[0];
    size_t need;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c < 0xE0) need = 2;
    else if (c >= 0xE0 && c < 0xF0) { need = 3; if (c == 0xE0) lo = 0xA0; if (c == 0xED) hi = 0x9F; }
    else if (c >= 0xF0 && c < 0xF5) { need = 4; if (c == 0xF0) lo = 0x90; if (c == 0xF4) hi = 0x8F; }
    else return 1;
    size_t i = 1;
    if (i < n && i < need && s[i] >= lo && s[i] <= hi) {
        i++;
        while (i < n && i < need && (s[i] & 0xC0) == 0x80) i++;
    }
    return i;
}

int tk_utf8_lossy(tk_buf *out, const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t start = i;
        while (i < n) {
            if (s[i] < 0x80) { i++; continue; }
            size_t l = tk_utf8_len(s + i, n - i);
            if (!l) break;
            i += l;
        }
        if (tk_buf_put(out, s + start, i - start)) return -1;
        if (i < n) {
            i += maximal_subpart(s + i, n - i);
            if (tk_buf_put(out, "\xEF\xBF\xBD", 3)) return -1;
        }
    }
    return 0;
}

int tk_is_whitespace(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
           c == 0x3000;
}

/* ---- hashing and maps ---- */

uint32_t tk_hash(const void *p, size_t n) {
    /* FNV-1a over 8-byte words then bytes, finished with a murmur-style mix. */
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ull ^ n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0x100000001b3ull;
        h ^= h >> 29;
        s += 8; n -= 8;
    }
    while (n--) h = (h ^ *s++) * 0x100000001b3ull;
    h ^= h >> 33; h *= 0xff51afd7ed558ccdull; h ^= h >> 33;
    return (uint32_t)h;
}

static size_t pow2_at_least(size_t n) {
    size_t c = 16;
    while (c < n) c *= 2;
    return c;
}

int tk_sm_init(tk_strmap *m, size_t expect) {
    memset(m, 0, sizeof *m);
    m->cap = pow2_at_least(expect * 2 + 1);
    m->e = malloc(m->cap * sizeof *m->e);
    if (!m->e) return -1;
    for (size_t i = 0; i < m->cap; i++) m->e[i].val = -1;
    return 0;
}

static int sm_grow(tk_strmap *m) {
    size_t nc = m->cap * 2;
    tk_sm_ent *ne = malloc(nc * sizeof *ne);
    if (!ne) return -1;
    for (size_t i = 0; i < nc; i++) ne[i].val = -1;
    for (size_t i = 0; i < m->cap; i++) {
        if (m->e[i].val < 0) continue;
        size_t j = m->e[i].hash & (nc - 1);
        while (ne[j].val >= 0) j = (j + 1) & (nc - 1);
        ne[j] = m->e[i];
    }
    free(m->e);
    m->e = ne;
    m->cap = nc;
    return 0;
}

int tk_sm_put(tk_strmap *m, const char *k, size_t len, int val) {
    if (val < 0 || len > UINT32_MAX) return -1;
    if ((m->n + 1) * 2 > m->cap && sm_grow(m)) return -1;
    uint32_t h = tk_hash(k, len);
    size_t j = h & (m->cap - 1);
    while (m->e[j].val >= 0) {
        tk_sm_ent *e = &m->e[j];
        if (e->hash == h && e->len == len && !memcmp(m->keys.p + e->off, k, len)) { e->val = val; return 0; }
        j = (j + 1) & (m->cap - 1);
    }
    if (m->keys.n + len > UINT32_MAX) return -1;
    uint32_t off = (uint32_t)m->keys.n;
    if (tk_buf_put(&m->keys, k, len)) return -1;
    m->e[j] = (tk_sm_ent){ off, (uint32_t)len, h, val };
    m->n++;
    return 0;
}

int tk_sm_get(const tk_strmap *m, const char *k, size_t len) {
    if (!m->e) return -1;
    uint32_t h = tk_hash(k, len);
    size_t j = h & (m->cap - 1);
    while (m->e[j].val >= 0) {
        const tk_sm_ent *e = &m->e[j];
        if (e->hash == h && e->len == len && !memcmp(m->keys.p + e->off, k, len)) return e->val;
        j = (j + 1) & (m->cap - 1);
    }
    return -1;
}

void tk_sm_free(tk_strmap *m) {
    free(m->e);
    tk_buf_free(&m->keys);
    memset(m, 0, sizeof *m);
}

static uint64_t mix64(uint64_t k) {
    k ^= k >> 33; k *= 0xff51afd7ed558ccdull; k ^= k >> 33; k *= 0xc4ceb9fe1a85ec53ull; k ^= k >> 33;
    return k;
}

int tk_pm_init(tk_pairmap *m, size_t expect) {
    m->n = 0;
    m->cap = pow2_at_least(expect * 2 + 1);
    m->e = malloc(m->cap * sizeof *m->e);
    if (!m->e) return -1;
    for (size_t i = 0; i < m->cap; i++) m->e[i].key = UINT64_MAX;
    return 0;
}

int tk_pm_put(tk_pairmap *m, int a, int b, int rank, int id) {
    if ((m->n + 1) * 2 > m->cap) {
        tk_pairmap g;
        if (tk_pm_init(&g, m->cap)) return -1;
        for (size_t i = 0; i < m->cap; i++)
            if (m->e[i].key != UINT64_MAX) {
                size_t j = mix64(m->e[i].key) & (g.cap - 1);
                while (g.e[j].key != UINT64_MAX) j = (j + 1) & (g.cap - 1);
                g.e[j] = m->e[i];
            }
        g.n = m->n;
        free(m->e);
        *m = g;
    }
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t j = mix64(key) & (m->cap - 1);
    while (m->e[j].key != UINT64_MAX) {
        if (m->e[j].key == key) return 0; /* first (best-ranked) merge wins */
        j = (j + 1) & (m->cap - 1);
    }
    m->e[j] = (tk_pm_ent){ key, rank, id };
    m->n++;
    return 0;
}

const tk_pm_ent *tk_pm_get(const tk_pairmap *m, int a, int b) {
    if (!m->e) return NULL;
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    size_t j = mix64(key) & (m->cap - 1);
    while (m->e[j].key != UINT64_MAX) {
        if (m->e[j].key == key) return &m->e[j];
        j = (j + 1) & (m->cap - 1);
    }
    return NULL;
}

void tk_pm_free(tk_pairmap *m) { free(m->e); m->e = NULL; m->n = m->cap = 0; }

/* ---- patterns ---- */

int tk_pattern_compile(tk_pattern *p, const char *s, size_t len, int is_regex, const char *what,
                       char *err, size_t errlen) {
    memset(p, 0, sizeof *p);
    if (!is_regex) {
        p->lit = malloc(len + 1);
        if (!p->lit) return ci_err(err, errlen, "%s: out of memory", what);
        memcpy(p->lit, s, len);
        p->lit[len] = 0;
        p->lit_len = len;
        return 0;
    }
    int ec;
    PCRE2_SIZE eo;
    p->re = pcre2_compile((PCRE2_SPTR)s, len, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
    if (!p->re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return ci_err(err, errlen, "%s: regex does not compile at offset %zu: %s", what, (size_t)eo, (char *)msg);
    }
    pcre2_jit_compile(p->re, PCRE2_JIT_COMPLETE); /* best effort: the interpreter is the fallback */
    return 0;
}

void tk_pattern_free(tk_pattern *p) {
    free(p->lit);
    if (p->re) pcre2_code_free(p->re);
    memset(p, 0, sizeof *p);
}

int tk_pattern_find(const tk_pattern *p, const char *s, size_t n, size_t start, pcre2_match_data *md,
                    size_t *ms, size_t *me, char *err, size_t errlen) {
    if (start > n) return 0;
    if (!p->re) {
        if (!p->lit_len) return 0;
        const char *q = n - start >= p->lit_len ? memmem(s + start, n - start, p->lit, p->lit_len) : NULL;
        if (!q) return 0;
        *ms = (size_t)(q - s);
        *me = *ms + p->lit_len;
        return 1;
    }
    int rc = pcre2_match(p->re, (PCRE2_SPTR)s, n, start, PCRE2_NO_UTF_CHECK, md, NULL);
    if (rc == PCRE2_ERROR_NOMATCH) return 0;
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
        rc = pcre2_match(p->re, (PCRE2_SPTR)s, n, start, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
    if (rc < 0) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(rc, msg, sizeof msg);
        return ci_err(err, errlen, "tokenizer regex failed on a %zu-byte piece: %s", n, (char *)msg);
    }
    PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
    *ms = ov[0];
    *me = ov[1];
    return 1;
}

/* ---- GPT-2 byte alphabet: printable Latin-1 bytes map to themselves, the other 68 bytes
 * to U+0100.. in byte order. ---- */

static int byte_is_self(unsigned b) {
    return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t tk_byte_to_cp(unsigned char b) {
    if (byte_is_self(b)) return b;
    unsigned k = 0;
    for (unsigned i = 0; i < b; i++) if (!byte_is_self(i)) k++;
    return 256 + k;
}

static int16_t cp_byte[256 + 68];
static pthread_once_t cp_once = PTHREAD_ONCE_INIT;

static void cp_init(void) {
    for (unsigned i = 0; i < 256 + 68; i++) cp_byte[i] = -1;
    for (unsigned b = 0; b < 256; b++) cp_byte[tk_byte_to_cp((unsigned char)b)] = (int16_t)b;
}

int tk_cp_to_byte(uint32_t cp) {
    if (cp >= 256 + 68) return -1;
    pthread_once(&cp_once, cp_init);
    return cp_byte[cp];
}
