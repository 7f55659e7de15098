/* test_tokenizer.c — the tokenizer against Hugging Face's ids, on the six real tokenizers.
 *
 * For every tokenizer in .cache/tokenizers (fetched by scripts/fetch-tokenizers.sh) and
 * every text of tests/text/corpus.json: the ids with and without add_special must equal
 * tests/text/ref/<name>.json (made by tools/oracle/make_tok_fixtures.py with HF
 * `tokenizers`), decode must equal HF's decode, and streaming decode must equal the full
 * decode. Plus random-id decode cases, invalid UTF-8 (an error, not a crash), bad ids, bad
 * files. Load times are printed, not asserted. Runs from the repo root. */
#include "text/tokenizer.h"
#include "io/json.h"
#include "check.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <time.h>

static const char *NAMES[] = { "deepseek_v3", "qwen3", "llama3", "llama2", "gemma3", "gptoss" };
#define N_NAMES (sizeof NAMES / sizeof NAMES[0])

static json_t *corpus;
static const char *cur_name;

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int file_exists(const char *p) { struct stat st; return stat(p, &st) == 0; }

static void test_fixtures_present(void) {
    char p[256];
    for (size_t i = 0; i < N_NAMES; i++) {
        snprintf(p, sizeof p, ".cache/tokenizers/%s/tokenizer.json", NAMES[i]);
        CHECK(file_exists(p), "%s is missing: run scripts/fetch-tokenizers.sh first", p);
        snprintf(p, sizeof p, "tests/text/ref/%s.json", NAMES[i]);
        CHECK(file_exists(p), "%s is missing (make it with tools/oracle/make_tok_fixtures.py)", p);
    }
    CHECK(corpus != NULL, "tests/text/corpus.json did not load");
}

/* ids of a JSON array into a malloc'd int array */
static int *json_ids(json_t *a, size_t *n) {
    *n = json_array_size(a);
    int *v = malloc((*n + 1) * sizeof *v);
    for (size_t i = 0; i < *n; i++) v[i] = (int)json_integer_value(json_array_get(a, i));
    return v;
}

static int same_ids(const int *a, size_t na, const int *b, size_t nb) {
    return na == nb && (na == 0 || !memcmp(a, b, na * sizeof *a));
}

static void show_ids(const char *label, const int *v, size_t n) {
    printf("    %s (%zu):", label, n);
    for (size_t i = 0; i < n && i < 24; i++) printf(" %d", v[i]);
    printf(n > 24 ? " ...\n" : "\n");
}

/* Streams ids one at a time; returns the concatenation (malloc'd) or NULL on error. */
static char *stream_decode(tok_tokenizer *t, const int *ids, size_t n, size_t *len, int *partial_utf8) {
    char err[256];
    tok_stream *s = tok_stream_new(t, 0);
    size_t cap = 64, o = 0;
    char *out = malloc(cap);
    *partial_utf8 = 0;
    for (size_t i = 0; i <= n; i++) {
        const char *piece;
        size_t pl;
        int rc = i < n ? tok_stream_put(s, ids[i], &piece, &pl, err, sizeof err) : tok_stream_flush(s, &piece, &pl, err, sizeof err);
        if (rc) { free(out); tok_stream_free(s); return NULL; }
        /* each piece must end on a complete UTF-8 character */
        if (pl) {
            size_t k = pl - 1;
            while (k > 0 && ((unsigned char)piece[k] & 0xC0) == 0x80) k--;
            unsigned char c = (unsigned char)piece[k];
            size_t need = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
            if (pl - k != need) *partial_utf8 = 1;
        }
        while (o + pl + 1 > cap) { cap *= 2; out = realloc(out, cap); }
        memcpy(out + o, piece, pl);
        o += pl;
    }
    out[o] = 0;
    *len = o;
    tok_stream_free(s);
    return out;
}

static void run_tokenizer(void) {
    const char *name = cur_name;
    char dir[256], refp[256], err[512];
    snprintf(dir, sizeof dir, ".cache/tokenizers/%s", name);
    snprintf(refp, sizeof refp, "tests/text/ref/%s.json", name);
    if (!file_exists(dir)) { CHECK(0, "%s is missing: run scripts/fetch-tokenizers.sh first", dir); return; }
    json_t *ref = cj_load_file(refp, err, sizeof err);
    if (!ref) { CHECK(0, "%s", err); return; }
    tok_tokenizer *t = NULL;
    double t0 = now_ms();
    int rc = tok_load(dir, &t, err, sizeof err);
    double load_ms = now_ms() - t0;
    if (rc) { CHECK(0, "tok_load %s: %s", dir, err); json_decref(ref); return; }
    json_t *cases = json_object_get(ref, "cases");
    size_t nt = json_array_size(json_object_get(corpus, "texts"));
    CHECK(json_array_size(cases) == nt, "%s: %zu cases for %zu corpus texts (re-run the oracle)", refp, json_array_size(cases), nt);
    size_t ok_ids = 0, ok_sp = 0, ok_dec = 0, ok_stream = 0, ok_rt = 0, n_rt = 0, shown = 0;
    double enc_ms = 0;
    size_t enc_bytes = 0;
    for (size_t i = 0; i < nt && i < json_array_size(cases); i++) {
        json_t *txt = json_array_get(json_object_get(corpus, "texts"), i), *c = json_array_get(cases, i);
        const char *text = json_string_value(txt);
        size_t tl = json_string_length(txt);
        size_t nref, nref_sp, n0, n1;
        int *ref0 = json_ids(json_object_get(c, "ids"), &nref);
        json_t *jsp = json_object_get(c, "ids_special");
        int *ref1 = json_ids(jsp ? jsp : json_object_get(c, "ids"), &nref_sp);
        int *ids0 = NULL, *ids1 = NULL;
        double e0 = now_ms();
        int r0 = tok_encode(t, text, tl, 0, &ids0, &n0, err, sizeof err);
        enc_ms += now_ms() - e0;
        enc_bytes += tl;
        int r1 = tok_encode(t, text, tl, 1, &ids1, &n1, err, sizeof err);
        int good0 = !r0 && same_ids(ids0, n0, ref0, nref);
        int good1 = !r1 && same_ids(ids1, n1, ref1, nref_sp);
        ok_ids += good0;
        ok_sp += good1;
        if ((!good0 || !good1) && shown++ < 6) {
            printf("  %s: text %zu %.60s\n", name, i, text);
            if (r0 || r1) printf("    error: %s\n", err);
            if (!good0) { show_ids("want", ref0, nref); if (!r0) show_ids("got ", ids0, n0); }
            if (!good1) { show_ids("want+special", ref1, nref_sp); if (!r1) show_ids("got+special ", ids1, n1); }
        }
        /* decode of the reference ids */
        const char *want = json_string_value(json_object_get(c, "decoded"));
        size_t wl = json_string_length(json_object_get(c, "decoded"));
        char *dec = NULL;
        size_t dl = 0;
        int rd = tok_decode(t, ref0, nref, 0, &dec, &dl, err, sizeof err);
        int gd = !rd && dl == wl && !memcmp(dec, want, wl);
        json_t *dsp = json_object_get(c, "decoded_special");
        if (gd && dsp) {
            char *d2 = NULL;
            size_t l2 = 0;
            gd = !tok_decode(t, ref1, nref_sp, 0, &d2, &l2, err, sizeof err) && l2 == json_string_length(dsp) &&
                 !memcmp(d2, json_string_value(dsp), l2);
            free(d2);
        }
        ok_dec += gd;
        if (!gd && shown++ < 6) printf("  %s: decode of text %zu: want \"%.80s\" got \"%.80s\"\n", name, i, want, rd ? err : dec);
        if (json_is_true(json_object_get(c, "roundtrip"))) { n_rt++; ok_rt += !rd && dl == tl && !memcmp(dec, text, tl); }
        int partial;
        size_t sl;
        char *st = stream_decode(t, ref0, nref, &sl, &partial);
        int gs = st && !rd && sl == dl && !memcmp(st, dec, dl) && !partial;
        ok_stream += gs;
        if (!gs && shown++ < 6) printf("  %s: stream decode of text %zu differs%s\n", name, i, partial ? " (partial UTF-8)" : "");
        free(st);
        free(dec);
        free(ids0); free(ids1); free(ref0); free(ref1);
    }
    /* random id runs and byte pieces */
    json_t *dcs = json_object_get(ref, "decode_cases");
    size_t ok_dc = 0, n_dc = json_array_size(dcs);
    for (size_t i = 0; i < n_dc; i++) {
        json_t *c = json_array_get(dcs, i);
        size_t n;
        int *ids = json_ids(json_object_get(c, "ids"), &n);
        const char *want = json_string_value(json_object_get(c, "decoded"));
        size_t wl = json_string_length(json_object_get(c, "decoded"));
        char *dec = NULL;
        size_t dl = 0;
        int rd = tok_decode(t, ids, n, 0, &dec, &dl, err, sizeof err);
        int g = !rd && dl == wl && !memcmp(dec, want, wl);
        int partial;
        size_t sl;
        char *st = stream_decode(t, ids, n, &sl, &partial);
        g = g && st && sl == dl && !memcmp(st, dec, dl);
        ok_dc += g;
        if (!g && shown++ < 8) { printf("  %s: decode case %zu: want \"%.60s\" got \"%.60s\"\n", name, i, want, rd ? err : dec); show_ids("ids", ids, n); }
        free(st);
        free(dec);
        free(ids);
    }
    printf("tokenizer %-12s load %7.1f ms  ids %zu/%zu  ids+special %zu/%zu  decode %zu/%zu  stream %zu/%zu  "
           "round-trip %zu/%zu  random-decode %zu/%zu  encode %.1f MB/s\n",
           name, load_ms, ok_ids, nt, ok_sp, nt, ok_dec, nt, ok_stream, nt, ok_rt, n_rt, ok_dc, n_dc,
           enc_ms > 0 ? enc_bytes / enc_ms / 1e3 : 0.0);
    CHECK(ok_ids == nt && ok_sp == nt, "%s: ids match %zu/%zu, with special %zu/%zu", name, ok_ids, nt, ok_sp, nt);
    CHECK(ok_dec == nt && ok_stream == nt, "%s: decode match %zu/%zu, stream %zu/%zu", name, ok_dec, nt, ok_stream, nt);
    CHECK(ok_rt == n_rt, "%s: round trip %zu/%zu where HF round-trips", name, ok_rt, n_rt);
    CHECK(ok_dc == n_dc, "%s: random-id decode %zu/%zu", name, ok_dc, n_dc);
    tok_free(t);
    json_decref(ref);
}

#define TOK_TEST(n) static void test_##n(void) { cur_name = #n; run_tokenizer(); }
TOK_TEST(deepseek_v3)
TOK_TEST(qwen3)
TOK_TEST(llama3)
TOK_TEST(llama2)
TOK_TEST(gemma3)
TOK_TEST(gptoss)

static tok_tokenizer *load_or_fail(const char *name) {
    char dir[256], err[512];
    snprintf(dir, sizeof dir, ".cache/tokenizers/%s", name);
    tok_tokenizer *t = NULL;
    if (tok_load(dir, &t, err, sizeof err)) { CHECK(0, "tok_load %s: %s", dir, err); return NULL; }
    return t;
}

static void test_invalid_utf8(void) {
    static const char *bad[] = { "\x80", "abc\xff", "\xc0\x80", "\xed\xa0\x80", "\xe4\xb8", "x\xf5\x80\x80\x80",
                                 "\xf4\x90\x80\x80", "ok \xe2\x82", "\xc3" };
    const char *names[] = { "qwen3", "llama2" };
    for (int k = 0; k < 2; k++) {
        tok_tokenizer *t = load_or_fail(names[k]);
        if (!t) return;
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            char err[256] = "";
            int *ids = NULL;
            size_t n = 0;
            int rc = tok_encode(t, bad[i], strlen(bad[i]), 0, &ids, &n, err, sizeof err);
            CHECK(rc != 0 && ids == NULL, "%s: invalid UTF-8 case %zu was accepted", names[k], i);
            CHECK_HAS(err, "not valid UTF-8");
        }
        /* NUL inside is valid UTF-8 */
        char err[256];
        int *ids = NULL;
        size_t n = 0;
        CHECK(tok_encode(t, "a\0b", 3, 0, &ids, &n, err, sizeof err) == 0 && n >= 2, "%s: NUL inside text", names[k]);
        free(ids);
        tok_free(t);
    }
}

static void test_bad_ids_and_specials(void) {
    tok_tokenizer *t = load_or_fail("qwen3");
    if (!t) return;
    char err[256], *text = NULL;
    size_t len;
    int bad[] = { 1, 999999 };
    CHECK(tok_decode(t, bad, 2, 0, &text, &len, err, sizeof err) != 0, "decode accepted id 999999");
    CHECK_HAS(err, "999999");
    int neg[] = { -1 };
    CHECK(tok_decode(t, neg, 1, 0, &text, &len, err, sizeof err) != 0, "decode accepted id -1");
    tok_stream *s = tok_stream_new(t, 0);
    const char *p;
    CHECK(tok_stream_put(s, 999999, &p, &len, err, sizeof err) != 0, "stream accepted id 999999");
    tok_stream_free(s);
    CHECK(tok_eos_id(t) == 151645, "qwen3 eos %d, want 151645 (<|im_end|>)", tok_eos_id(t));
    CHECK(tok_bos_id(t) == -1, "qwen3 bos %d, want none", tok_bos_id(t));
    CHECK(tok_is_special(t, 151644) && !tok_is_special(t, 100), "qwen3 special flags");
    size_t pl;
    const char *piece = tok_id_to_piece(t, 151644, &pl);
    CHECK(piece && !strcmp(piece, "<|im_start|>") && pl == 12, "qwen3 piece 151644");
    CHECK(tok_piece_to_id(t, "Ġthe", strlen("Ġthe")) == 279, "qwen3 'Ġthe' -> %d", tok_piece_to_id(t, "Ġthe", strlen("Ġthe")));
    /* skip_special */
    int ids[] = { 151644, 872, 151645 };
    CHECK(tok_decode(t, ids, 3, 1, &text, &len, err, sizeof err) == 0 && !strcmp(text, "user"), "skip_special: '%s'", text ? text : err);
    free(text);
    tok_free(t);
    t = load_or_fail("llama2");
    if (!t) return;
    CHECK(tok_bos_id(t) == 1 && tok_eos_id(t) == 2, "llama2 bos/eos %d/%d", tok_bos_id(t), tok_eos_id(t));
    tok_free(t);
}

static void write_file(const char *path, const char *s) {
    FILE *f = fopen(path, "w");
    if (f) { fputs(s, f); fclose(f); }
}

static void test_bad_files(void) {
    char err[512];
    tok_tokenizer *t = NULL;
    CHECK(tok_load("/nonexistent/dir", &t, err, sizeof err) != 0 && t == NULL, "missing dir loaded");
    CHECK_HAS(err, "/nonexistent/dir/tokenizer.json");
    char dir[] = "/tmp/cinfer_tok_XXXXXX";
    if (!mkdtemp(dir)) { CHECK(0, "mkdtemp"); return; }
    char p[300];
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    struct { const char *json, *want; } cases[] = {
        { "{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}", "model.type 'Unigram'" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a b\"]}}", "model.merges[0]" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"Split\", "
          "\"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}}", "pre_tokenizer.pattern" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"normalizer\": {\"type\": \"Precompiled\"}}", "normalizer type 'Precompiled'" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"decoder\": {\"type\": \"CTC\"}}", "decoder type 'CTC'" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"merges\": []}", "invalid JSON" },
        { "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": -3}, \"merges\": []}}", "model.vocab[\"a\"]" },
        { "[1, 2]", "expected a JSON object" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_file(p, cases[i].json);
        t = NULL;
        err[0] = 0;
        CHECK(tok_load(dir, &t, err, sizeof err) != 0 && t == NULL, "bad file %zu loaded", i);
        CHECK_HAS(err, cases[i].want);
        CHECK_HAS(err, "tokenizer.json");
    }
    /* a tiny valid tokenizer with no pre-tokenizer or decoder */
    write_file(p, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, \"<unk>\": 3}, \"merges\": [\"a b\"], "
                  "\"unk_token\": \"<unk>\", \"fuse_unk\": true}}");
    if (tok_load(dir, &t, err, sizeof err)) CHECK(0, "tiny tokenizer: %s", err);
    else {
        int *ids = NULL;
        size_t n = 0;
        CHECK(tok_encode(t, "abzzab", 6, 1, &ids, &n, err, sizeof err) == 0 && n == 3 && ids[0] == 2 && ids[1] == 3 && ids[2] == 2,
              "tiny: abzzab -> %zu ids", n);
        free(ids);
        tok_free(t);
    }
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    write_file(p, "{\"bos_token\": \"<nope>\"}");
    CHECK(tok_load(dir, &t, err, sizeof err) != 0, "config with unknown bos_token loaded");
    CHECK_HAS(err, "bos_token '<nope>'");
    remove(p);
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    remove(p);
    rmdir(dir);
}

/* Random strings from a pool of awkward pieces: byte-level tokenizers without a normalizer
 * must give the text back exactly, and streaming must equal the full decode. */
static void test_random_roundtrip(void) {
    static const char *pool[] = { "a", "Z", " ", "  ", "\n", "\r\n", "\t", "'s", "'LL", "1", "234", "中", "文字", "😀", "👩‍💻",
        "\xcc\x81", "e\xcc\x81", "\xc2\xa0", "\xe3\x80\x80", "<|eot_id|>", "<|im_start", "<｜User｜>", "<s>", "▁", "Ġ",
        "\xef\xbf\xbd", "\x01", "{\"k\":", "...", "ﬁ", "ǅ", "İ" };
    const char *names[] = { "llama3", "deepseek_v3", "gptoss" };
    unsigned seed = 12345;
    for (int k = 0; k < 3; k++) {
        tok_tokenizer *t = load_or_fail(names[k]);
        if (!t) return;
        int bad = 0;
        for (int it = 0; it < 300 && bad < 3; it++) {
            char text[512];
            size_t tl = 0;
            seed = seed * 1103515245u + 12345u;
            int parts = 1 + (int)((seed >> 16) % 24);
            for (int p = 0; p < parts; p++) {
                seed = seed * 1103515245u + 12345u;
                const char *piece = pool[(seed >> 16) % (sizeof pool / sizeof pool[0])];
                size_t pl = strlen(piece);
                if (tl + pl >= sizeof text) break;
                memcpy(text + tl, piece, pl);
                tl += pl;
            }
            char err[256];
            int *ids = NULL;
            size_t n = 0;
            if (tok_encode(t, text, tl, 0, &ids, &n, err, sizeof err)) { CHECK(0, "%s: encode: %s", names[k], err); bad++; continue; }
            char *dec = NULL;
            size_t dl = 0;
            int rd = tok_decode(t, ids, n, 0, &dec, &dl, err, sizeof err);
            if (rd || dl != tl || memcmp(dec, text, tl)) { CHECK(0, "%s: round trip of \"%.*s\" gave \"%s\"", names[k], (int)tl, text, rd ? err : dec); bad++; }
            int partial;
            size_t sl;
            char *st = stream_decode(t, ids, n, &sl, &partial);
            if (!st || rd || sl != dl || memcmp(st, dec, dl) || partial) { CHECK(0, "%s: stream decode of \"%.*s\" differs", names[k], (int)tl, text); bad++; }
            free(st);
            free(dec);
            free(ids);
        }
        tok_free(t);
    }
}

/* Steps the six real files do not use, on a hand-made tokenizer whose ids follow from
 * Hugging Face's rules: Lowercase, Metaspace (prepend always, split), added token with
 * lstrip/rstrip, unk without fusing, Metaspace decoder. */
static void test_synthetic_pipeline(void) {
    char dir[] = "/tmp/cinfer_tok_XXXXXX", p[300], err[512];
    if (!mkdtemp(dir)) { CHECK(0, "mkdtemp"); return; }
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    write_file(p,
        "{\"normalizer\": {\"type\": \"Lowercase\"},"
        " \"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"\xe2\x96\x81\", \"prepend_scheme\": \"always\", \"split\": true},"
        " \"decoder\": {\"type\": \"Metaspace\", \"replacement\": \"\xe2\x96\x81\", \"prepend_scheme\": \"always\", \"split\": true},"
        " \"added_tokens\": [{\"id\": 6, \"content\": \"<x>\", \"lstrip\": true, \"rstrip\": true, \"special\": true, \"normalized\": false, \"single_word\": false}],"
        " \"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"fuse_unk\": false,"
        "  \"vocab\": {\"<unk>\": 0, \"\xe2\x96\x81\": 1, \"h\": 2, \"i\": 3, \"\xe2\x96\x81h\": 4, \"\xe2\x96\x81hi\": 5, \"<x>\": 6, \"t\": 7, \"e\": 8, \"\xe2\x96\x81t\": 9},"
        "  \"merges\": [\"\xe2\x96\x81 h\", \"\xe2\x96\x81h i\", \"\xe2\x96\x81 t\"]}}");
    tok_tokenizer *t = NULL;
    if (tok_load(dir, &t, err, sizeof err)) { CHECK(0, "synthetic: %s", err); goto done; }
    struct { const char *text; int ids[8]; size_t n; const char *decoded; } cases[] = {
        { "HI <x> te", { 5, 6, 9, 8 }, 4, "hi<x> te" },
        { "hi there", { 5, 9, 2, 8, 0, 8 }, 6, NULL },
    };
    for (size_t i = 0; i < 2; i++) {
        int *ids = NULL;
        size_t n = 0;
        if (tok_encode(t, cases[i].text, strlen(cases[i].text), 1, &ids, &n, err, sizeof err)) { CHECK(0, "synthetic: %s", err); continue; }
        CHECK(same_ids(ids, n, cases[i].ids, cases[i].n), "synthetic case %zu: %zu ids, first %d", i, n, n ? ids[0] : -1);
        if (cases[i].decoded) {
            char *dec = NULL;
            size_t dl;
            CHECK(!tok_decode(t, ids, n, 0, &dec, &dl, err, sizeof err) && !strcmp(dec, cases[i].decoded), "synthetic decode: '%s'", dec ? dec : err);
            free(dec);
        }
        free(ids);
    }
    tok_free(t);
done:
    remove(p);
    rmdir(dir);
}

int main(void) {
    char err[512];
    corpus = cj_load_file("tests/text/corpus.json", err, sizeof err);
    if (!corpus) printf("corpus: %s\n", err);
    TEST_RUN(test_fixtures_present);
    TEST_RUN(test_deepseek_v3);
    TEST_RUN(test_qwen3);
    TEST_RUN(test_llama3);
    TEST_RUN(test_llama2);
    TEST_RUN(test_gemma3);
    TEST_RUN(test_gptoss);
    TEST_RUN(test_invalid_utf8);
    TEST_RUN(test_bad_ids_and_specials);
    TEST_RUN(test_bad_files);
    TEST_RUN(test_random_roundtrip);
    TEST_RUN(test_synthetic_pipeline);
    json_decref(corpus);
    TEST_EXIT();
}
