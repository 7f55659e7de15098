/* test_jsonfsm.c — the JSON prefix recognizer of JSON mode (src/server/jsonfsm.h): valid
 * texts and all their prefixes, refusals at the right byte, the top-level object rule, and
 * agreement with jansson on whether a text is complete JSON, over random mutations, and no
 * dead ends (every accepted prefix can be completed). */
#include "../unit/check.h"
#include "server/jsonfsm.h"
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *const good[] = {
    "{}", " { } ", "{\"a\":1}", "{\"a\": [1, 2.5, -0.5e-3, 1E+9, 0, -0]}", "{\"k\":\"v\\\"q\\\\ \\/ \\b\\f\\n\\r\\t \\u00e9\\uD83D\\uDE00\"}",
    "{\"t\":true,\"f\":false,\"n\":null}", "{\"o\":{\"p\":{\"q\":[[],[{}],{\"r\":[null]}]}}}", "{\"é\":\"ü — 日本\"}",
    "\n{\n\t\"a\" :\r\n 1 ,\"b\":[ ] }\n",
};

static void test_good(void) {
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        const char *t = good[i];
        size_t n = strlen(t);
        jf_state s;
        jf_init(&s, 1);
        CHECK(jf_feed(&s, t, n) == 0 && jf_complete(&s), "whole '%s'", t);
        size_t last = n;                              /* the text is complete from its last '}' on */
        while (last > 0 && t[last - 1] != '}') last--;
        for (size_t k = 0; k < n; k++) {
            jf_init(&s, 1);
            int rc = jf_feed(&s, t, k);
            CHECK(rc == 0 && jf_complete(&s) == (k >= last), "prefix %zu of '%s': rc %d complete %d", k, t, rc, jf_complete(&s));
        }
        jf_init(&s, 1);                                  /* byte by byte = whole */
        for (size_t k = 0; k < n; k++) CHECK(jf_feed(&s, t + k, 1) == 0, "byte %zu of '%s'", k, t);
        CHECK(jf_complete(&s), "bytewise '%s'", t);
    }
}

/* text, and the length of its longest prefix that is still valid */
static const struct { const char *t; size_t ok; } bad[] = {
    { "{\"a\" 1}", 5 }, { "{\"a\":01}", 6 }, { "{\"a\":1,}", 7 }, { "[1]", 0 }, { "{\"a\":tru}", 8 },
    { "{\"a\":\"\x01\"}", 6 }, { "{\"a\":\"\\q\"}", 7 }, { "{\"a\":1}}", 7 }, { "{\"a\":1} x", 8 }, { "{\"a\":-}", 6 },
    { "{\"a\":1.}", 7 }, { "{\"a\":1e}", 7 }, { "{\"a\":[1,]}", 8 }, { "{'a':1}", 1 }, { "{\"a\":nul}", 8 },
    { "{\"a\":\"\\u12G4\"}", 10 }, { "{\"a\":[1}", 7 }, { "{\"a\":{]}", 6 }, { "{1:2}", 1 }, { "\"str\"", 0 },
    /* \u surrogates: a lone low one, a high one without its low one */
    { "{\"a\":\"\\uDC00\"}", 9 }, { "{\"a\":\"\\uD83Dx\"}", 12 }, { "{\"a\":\"\\uD83D\\u0041\"}", 14 },
    /* UTF-8: overlong, surrogate, past U+10FFFF, a stray continuation, a cut sequence */
    { "{\"a\":\"\xC0\x80\"}", 6 }, { "{\"a\":\"\xE0\x80\x80\"}", 7 }, { "{\"a\":\"\xED\xA0\x80\"}", 7 },
    { "{\"a\":\"\xF4\x90\x80\x80\"}", 7 }, { "{\"a\":\"\xF5\"}", 6 }, { "{\"a\":\"\x80\"}", 6 }, { "{\"a\":\"\xC3\"}", 7 },
};

static void test_bad(void) {
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *t = bad[i].t;
        jf_state s;
        jf_init(&s, 1);
        CHECK(jf_feed(&s, t, bad[i].ok) == 0, "'%s' valid up to %zu", t, bad[i].ok);
        CHECK(jf_feed(&s, t + bad[i].ok, 1) == -1 && s.dead, "'%s' refused at byte %zu", t, bad[i].ok);
        CHECK(jf_feed(&s, "}", 1) == -1 && !jf_complete(&s), "'%s' stays refused", t);
    }
    jf_state s;
    jf_init(&s, 0);
    CHECK(jf_feed(&s, "[1, \"x\"]", 8) == 0 && jf_complete(&s), "an array at the top without top_object");
    jf_init(&s, 0);
    CHECK(jf_feed(&s, "12", 2) == 0 && jf_complete(&s), "a top-level number is complete");
    jf_init(&s, 1);
    s.max_ws = 3;
    CHECK(jf_feed(&s, "{ \n\t\"a\":  1 \n}", 14) == 0 && jf_complete(&s), "whitespace runs up to max_ws");
    jf_init(&s, 1);
    s.max_ws = 3;
    CHECK(jf_feed(&s, "{\"a\":    1}", 8) == 0 && jf_feed(&s, " ", 1) == -1, "a whitespace run past max_ws refused");
    jf_init(&s, 1);
    s.max_ws = 3;
    CHECK(jf_feed(&s, "{\"a\":\"     \"}", 13) == 0 && jf_complete(&s), "spaces inside strings are no whitespace run");
    char deep[2 * JF_DEPTH + 4];
    memset(deep, '[', JF_DEPTH + 1);
    jf_init(&s, 0);
    CHECK(jf_feed(&s, deep, JF_DEPTH) == 0 && jf_feed(&s, deep, 1) == -1, "nesting beyond %d refused", JF_DEPTH);
}

/* Random mutations of the good texts over a small alphabet: jf says complete exactly when
 * jansson parses the text (any top-level value, as jf_init(s, 0) takes it). */
static void test_vs_jansson(void) {
    static const char alpha[] = "{}[]\":,01-.eE+tfnrulas \\u9";
    uint64_t r = 0x9E3779B97F4A7C15ull;
    int agree = 0, complete = 0;
    for (int it = 0; it < 20000; it++) {
        char t[96];
        const char *src = good[it % (sizeof good / sizeof *good)];
        size_t n = strlen(src) < 80 ? strlen(src) : 80;
        memcpy(t, src, n);
        int muts = 1 + (int)(it % 3);
        for (int m = 0; m < muts; m++) {
            r ^= r << 13; r ^= r >> 7; r ^= r << 17;
            size_t at = (size_t)(r >> 8) % (n + 1);
            int op = (int)(r & 3);
            char c = alpha[(r >> 40) % (sizeof alpha - 1)];
            if (op == 0 && n < 90) { memmove(t + at + 1, t + at, n - at); t[at] = c; n++; }
            else if (op == 1 && at < n) { memmove(t + at, t + at + 1, n - at - 1); n--; }
            else if (at < n) t[at] = c;
        }
        jf_state s;
        jf_init(&s, 0);
        int ours = jf_feed(&s, t, n) == 0 && jf_complete(&s);
        json_t *j = json_loadb(t, n, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        int theirs = j != NULL;
        json_decref(j);
        if (ours == theirs) agree++;
        else CHECK(0, "'%.*s': ours %d, jansson %d", (int)n, t, ours, theirs);
        complete += ours;
    }
    CHECK(agree == 20000 && complete > 1000, "agree %d of 20000 (%d complete)", agree, complete);
}

/* No dead ends: from the longest accepted prefix of each random mutation, some bytes
 * complete the text. Breadth-first over the states reachable with the bytes a completion
 * may need (no openers, so the set is small). */
static int completable(const jf_state *from) {
    static const char alpha[] = "\"}]0:, \\uDCnelrsa" "\x80\x90\xA0";
    enum { MAXS = 4096 };
    static jf_state seen[MAXS];
    int n = 0, head = 0;
    seen[n++] = *from;
    while (head < n) {
        jf_state cur = seen[head++];
        if (jf_complete(&cur)) return 1;
        for (size_t i = 0; i < sizeof alpha - 1; i++) {
            jf_state nx = cur;
            if (jf_feed(&nx, &alpha[i], 1)) continue;
            int dup = 0;
            for (int k = 0; k < n && !dup; k++) dup = !memcmp(&seen[k], &nx, sizeof nx);
            if (!dup && n < MAXS) seen[n++] = nx;
        }
    }
    return 0;
}

static void test_no_dead_ends(void) {
    static const char alpha[] = "{}[]\":,01-.eE+tfnrulas \\u9DdCc" "\xC3\xA9\xE0\xED\xF0\xF4\x80\x90\xA0\xBF";
    uint64_t r = 0x2545F4914F6CDD1Dull;
    int ok = 0;
    for (int it = 0; it < 3000; it++) {
        char t[96];
        const char *src = good[it % (sizeof good / sizeof *good)];
        size_t n = strlen(src) < 80 ? strlen(src) : 80;
        memcpy(t, src, n);
        for (int m = 0; m < 2; m++) {
            r ^= r << 13; r ^= r >> 7; r ^= r << 17;
            size_t at = (size_t)(r >> 8) % (n + 1);
            char c = alpha[(r >> 40) % (sizeof alpha - 1)];
            if (n < 90) { memmove(t + at + 1, t + at, n - at); t[at] = c; n++; }
        }
        jf_state s, last;
        jf_init(&s, 1);
        last = s;
        for (size_t k = 0; k < n && !jf_feed(&s, t + k, 1); k++) last = s;
        jf_init(&s, 1);
        if (!memcmp(&s, &last, sizeof s)) jf_feed(&last, "{", 1);   /* nothing taken: an object must start */
        if (completable(&last)) ok++;
        else CHECK(0, "no completion after an accepted prefix of '%.*s'", (int)n, t);
    }
    CHECK(ok == 3000, "%d of 3000 prefixes completable", ok);
}

int main(void) {
    TEST_RUN(test_good);
    TEST_RUN(test_bad);
    TEST_RUN(test_vs_jansson);
    TEST_RUN(test_no_dead_ends);
    TEST_EXIT();
}
