/* test_safetensors.c — src/io/safetensors.c against hand-built files.
 *
 * Every case writes its files into one mkdtemp directory under /tmp (removed at exit):
 * write_st() lays out the 8-byte little-endian length, the JSON header text and the data
 * bytes exactly as the format says, so a test reads like the header it is about. Bad
 * inputs check the return code, that no set is returned, and that the error line names
 * the file and (where there is one) the tensor. */
#include "io/safetensors.h"
#include "io/st_write.h"
#include "check.h"

#include <ftw.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char root_dir[256];

/* root_dir/rel into buf (rotating static buffers so two paths can live in one call). */
static const char *P(const char *rel) {
    static char bufs[4][512];
    static int k;
    char *b = bufs[k++ & 3];
    snprintf(b, sizeof bufs[0], "%s/%s", root_dir, rel);
    return b;
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) { perror(path); return; }
    if (n) fwrite(p, 1, n, f);
    fclose(f);
}

/* A safetensors file whose length prefix says hlen (normally strlen(json)). */
static void write_st_len(const char *path, uint64_t hlen, const char *json, const void *data, size_t dlen) {
    size_t jl = strlen(json);
    uint8_t *b = malloc(8 + jl + dlen + 1);
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(hlen >> (8 * i));
    memcpy(b + 8, json, jl);
    if (dlen) memcpy(b + 8 + jl, data, dlen);
    write_bytes(path, b, 8 + jl + dlen);
    free(b);
}

static void write_st(const char *path, const char *json, const void *data, size_t dlen) {
    write_st_len(path, strlen(json), json, data, dlen);
}

static void mkdir_p(const char *rel) { mkdir(P(rel), 0755); }

/* Opens a file that must be rejected and checks the message names the file and needle
 * (a tensor name or a phrase); needle2 may be NULL. */
#define EXPECT_BAD_FILE(rel, needle, needle2) do { \
    char err_[1024] = ""; st_set *s_ = (st_set *)1; \
    int rc_ = st_open_file(P(rel), &s_, err_, sizeof err_); \
    CHECK(rc_ != 0, "%s: expected failure", rel); \
    CHECK(s_ == NULL, "%s: set returned on failure", rel); \
    CHECK_HAS(err_, rel); \
    const char *n1_ = (needle), *n2_ = (needle2); \
    if (n1_) CHECK_HAS(err_, n1_); \
    if (n2_) CHECK_HAS(err_, n2_); \
    if (rc_ == 0) st_close(s_); } while (0)

#define EXPECT_BAD_DIR(rel, needle, needle2) do { \
    char err_[1024] = ""; st_set *s_ = (st_set *)1; \
    int rc_ = st_open_dir(P(rel), &s_, err_, sizeof err_); \
    CHECK(rc_ != 0, "%s: expected failure", rel); \
    CHECK(s_ == NULL, "%s: set returned on failure", rel); \
    const char *n1_ = (needle), *n2_ = (needle2); \
    if (n1_) CHECK_HAS(err_, n1_); \
    if (n2_) CHECK_HAS(err_, n2_); \
    if (rc_ == 0) st_close(s_); } while (0)

/* ---- valid files --------------------------------------------------------------------- */

static void test_roundtrip_dtypes(void) {
    /* Data area: f32 [2,3] (24 B) | bf16 [4] (8 B) | f8 [2,2] (4 B) | bool [3] (3 B) |
     * i64 [1] (8 B) at 40 (a gap of 1 byte is allowed) | empty f16 [0,5]. */
    uint8_t data[48];
    for (int i = 0; i < 48; i++) data[i] = (uint8_t)(i * 7 + 1);
    float f[6] = { 1, -2, 3.5f, 0, 1e-3f, 42 };
    memcpy(data, f, sizeof f);
    const char *hdr =
        "{\"__metadata__\": {\"format\": \"pt\"},"
        " \"model.embed.weight\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [0, 24]},"
        " \"b16\": {\"dtype\": \"BF16\", \"shape\": [4], \"data_offsets\": [24, 32]},"
        " \"fp8.weight\": {\"dtype\": \"F8_E4M3\", \"shape\": [2, 2], \"data_offsets\": [32, 36]},"
        " \"mask\": {\"dtype\": \"BOOL\", \"shape\": [3], \"data_offsets\": [36, 39]},"
        " \"step\": {\"dtype\": \"I64\", \"shape\": [1], \"data_offsets\": [40, 48]},"
        " \"empty\": {\"dtype\": \"F16\", \"shape\": [0, 5], \"data_offsets\": [48, 48]},"
        " \"scalar_empty\": {\"dtype\": \"F8_E8M0\", \"shape\": [0], \"data_offsets\": [10, 10]},"
        " \"\u00e9t\u00e9 \u4e2d\": {\"dtype\": \"U8\", \"shape\": [], \"data_offsets\": [39, 40]}}";
    write_st(P("ok.safetensors"), hdr, data, sizeof data);
    char err[512] = "";
    st_set *s = NULL;
    int rc = st_open_file(P("ok.safetensors"), &s, err, sizeof err);
    CHECK(rc == 0, "open failed: %s", err);
    if (rc) return;
    CHECK(st_count(s) == 8, "count %d", st_count(s));
    for (int i = 1; i < st_count(s); i++)
        CHECK(strcmp(st_get(s, i - 1)->name, st_get(s, i)->name) < 0, "not sorted at %d", i);

    const ci_tensor *t = st_find(s, "model.embed.weight");
    CHECK(t && t->dtype == CI_F32 && t->ndim == 2 && t->shape[0] == 2 && t->shape[1] == 3 && t->nbytes == 24, "f32 meta");
    if (t) CHECK(memcmp(t->data, f, sizeof f) == 0, "f32 data");
    t = st_find(s, "b16");
    CHECK(t && t->dtype == CI_BF16 && t->ndim == 1 && t->shape[0] == 4 && t->nbytes == 8, "bf16 meta");
    if (t) CHECK(memcmp(t->data, data + 24, 8) == 0, "bf16 data");
    t = st_find(s, "fp8.weight");
    CHECK(t && t->dtype == CI_F8_E4M3 && t->ndim == 2 && t->nbytes == 4, "fp8 meta");
    if (t) CHECK(memcmp(t->data, data + 32, 4) == 0, "fp8 data");
    t = st_find(s, "mask");
    CHECK(t && t->dtype == CI_BOOL && t->shape[0] == 3 && t->nbytes == 3, "bool meta");
    if (t) CHECK(memcmp(t->data, data + 36, 3) == 0, "bool data");
    t = st_find(s, "step");
    CHECK(t && t->dtype == CI_I64 && t->nbytes == 8, "i64 meta");
    if (t) CHECK(memcmp(t->data, data + 40, 8) == 0, "i64 data");
    t = st_find(s, "empty");
    CHECK(t && t->dtype == CI_F16 && t->ndim == 2 && t->shape[0] == 0 && t->shape[1] == 5 && t->nbytes == 0, "empty meta");
    t = st_find(s, "\xc3\xa9t\xc3\xa9 \xe4\xb8\xad");
    CHECK(t && t->dtype == CI_U8 && t->ndim == 0 && t->nbytes == 1, "utf-8 scalar meta");
    if (t) CHECK(*(const uint8_t *)t->data == data[39], "scalar data");
    CHECK(st_find(s, "__metadata__") == NULL, "metadata is not a tensor");
    CHECK(st_find(s, "missing") == NULL && st_index_of(s, "missing") == -1, "absent name");
    CHECK(st_find(s, "") == NULL, "empty name absent");
    int i = st_index_of(s, "mask");
    CHECK(i >= 0 && st_get(s, i) == st_find(s, "mask"), "index_of/get agree");
    CHECK(i >= 0 && strstr(st_file_of(s, i), "ok.safetensors") != NULL, "file_of");
    CHECK(st_total_bytes(s) == 24 + 8 + 4 + 3 + 8 + 1, "total %zu", st_total_bytes(s));
    st_close(s);
}

static void test_zero_tensors(void) {
    char err[512] = "";
    st_set *s = NULL;
    write_st(P("empty.safetensors"), "{}", NULL, 0);
    CHECK(st_open_file(P("empty.safetensors"), &s, err, sizeof err) == 0, "{}: %s", err);
    if (s) { CHECK(st_count(s) == 0 && st_total_bytes(s) == 0 && st_find(s, "x") == NULL, "empty set"); st_close(s); }
    s = NULL;
    /* Only metadata, padded with trailing spaces as some writers do, plus stray data. */
    write_st(P("meta.safetensors"), "{\"__metadata__\": {\"a\": \"b\"}}      ", "xyz", 3);
    CHECK(st_open_file(P("meta.safetensors"), &s, err, sizeof err) == 0, "metadata only: %s", err);
    if (s) { CHECK(st_count(s) == 0, "count"); st_close(s); }
}

static void test_sharded_index(void) {
    mkdir_p("sharded");
    uint8_t d1[16], d2[8];
    for (int i = 0; i < 16; i++) d1[i] = (uint8_t)i;
    for (int i = 0; i < 8; i++) d2[i] = (uint8_t)(100 + i);
    write_st(P("sharded/model-00001-of-00002.safetensors"),
             "{\"a.weight\": {\"dtype\": \"F32\", \"shape\": [2, 2], \"data_offsets\": [0, 16]}}", d1, 16);
    write_st(P("sharded/model-00002-of-00002.safetensors"),
             "{\"b.weight\": {\"dtype\": \"BF16\", \"shape\": [2], \"data_offsets\": [0, 4]},"
             " \"c.bias\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [4, 8]}}", d2, 8);
    const char *idx = "{\"metadata\": {\"total_size\": 24}, \"weight_map\": {"
                      "\"a.weight\": \"model-00001-of-00002.safetensors\","
                      "\"c.bias\": \"model-00002-of-00002.safetensors\","
                      "\"b.weight\": \"model-00002-of-00002.safetensors\"}}";
    write_bytes(P("sharded/model.safetensors.index.json"), idx, strlen(idx));
    /* A stray file the index does not name must be ignored. */
    write_st(P("sharded/stray.safetensors"), "{\"zzz\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}}", "q", 1);
    char err[512] = "";
    st_set *s = NULL;
    int rc = st_open_dir(P("sharded"), &s, err, sizeof err);
    CHECK(rc == 0, "open sharded: %s", err);
    if (rc) return;
    CHECK(st_count(s) == 3, "count %d", st_count(s));
    CHECK(st_find(s, "zzz") == NULL, "stray file not loaded");
    const ci_tensor *t = st_find(s, "c.bias");
    CHECK(t && t->nbytes == 4 && memcmp(t->data, d2 + 4, 4) == 0, "c.bias data");
    t = st_find(s, "a.weight");
    CHECK(t && t->nbytes == 16 && memcmp(t->data, d1, 16) == 0, "a.weight data");
    int i = st_index_of(s, "b.weight");
    CHECK(i >= 0 && strstr(st_file_of(s, i), "model-00002-of-00002.safetensors"), "file_of b");
    i = st_index_of(s, "a.weight");
    CHECK(i >= 0 && strstr(st_file_of(s, i), "model-00001-of-00002.safetensors"), "file_of a");
    CHECK(st_total_bytes(s) == 24, "total");
    st_close(s);
}

static void test_single_and_loose_dirs(void) {
    char err[512] = "";
    st_set *s = NULL;
    mkdir_p("single");
    write_st(P("single/model.safetensors"), "{\"w\": {\"dtype\": \"I32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", "abcd", 4);
    write_st(P("single/other.safetensors"), "{\"v\": {\"dtype\": \"I32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", "abcd", 4);
    CHECK(st_open_dir(P("single"), &s, err, sizeof err) == 0, "single: %s", err);
    if (s) { CHECK(st_count(s) == 1 && st_find(s, "w"), "model.safetensors preferred"); st_close(s); }
    s = NULL;
    mkdir_p("loose");
    write_st(P("loose/b.safetensors"), "{\"y\": {\"dtype\": \"I16\", \"shape\": [2], \"data_offsets\": [0, 4]}}", "wxyz", 4);
    write_st(P("loose/a.safetensors"), "{\"x\": {\"dtype\": \"I8\", \"shape\": [2], \"data_offsets\": [0, 2]}}", "pq", 2);
    write_bytes(P("loose/readme.txt"), "hi", 2);
    CHECK(st_open_dir(P("loose"), &s, err, sizeof err) == 0, "loose: %s", err);
    if (s) {
        CHECK(st_count(s) == 2 && st_find(s, "x") && st_find(s, "y"), "both loose files");
        CHECK(strstr(st_file_of(s, st_index_of(s, "y")), "b.safetensors") != NULL, "file_of y");
        st_close(s);
    }
    mkdir_p("nothing");
    EXPECT_BAD_DIR("nothing", "nothing", "no model.safetensors");
    EXPECT_BAD_DIR("does-not-exist", "does-not-exist", NULL);
}

/* ---- bad single files ---------------------------------------------------------------- */

static void test_truncated(void) {
    write_bytes(P("tiny.safetensors"), "\x05\0\0\0", 4);
    EXPECT_BAD_FILE("tiny.safetensors", "shorter than the 8-byte", NULL);
    write_bytes(P("zero.safetensors"), "", 0);
    EXPECT_BAD_FILE("zero.safetensors", "0 bytes", NULL);
    /* Length prefix says 200 bytes of header; only 20 follow. */
    write_st_len(P("short_hdr.safetensors"), 200, "{\"a\": {\"dtype\": \"F", NULL, 0);
    EXPECT_BAD_FILE("short_hdr.safetensors", "header length 200", "past the end of the file");
    EXPECT_BAD_FILE("no-such-file.safetensors", "cannot open", NULL);
    mkdir_p("adir.safetensors");
    EXPECT_BAD_FILE("adir.safetensors", "not a regular file", NULL);
}

static void test_absurd_header_len(void) {
    write_st_len(P("huge_len.safetensors"), (uint64_t)1 << 62, "{}", NULL, 0);
    EXPECT_BAD_FILE("huge_len.safetensors", "4611686018427387904", "limit");
    write_st_len(P("max_len.safetensors"), UINT64_MAX, "{}", NULL, 0);
    EXPECT_BAD_FILE("max_len.safetensors", "18446744073709551615", NULL);
}

static void test_bad_json(void) {
    write_st(P("notjson.safetensors"), "this is not json", NULL, 0);
    EXPECT_BAD_FILE("notjson.safetensors", "invalid JSON", NULL);
    write_st(P("array.safetensors"), "[1, 2, 3]", NULL, 0);
    EXPECT_BAD_FILE("array.safetensors", "must be a JSON object", "an array");
    write_st(P("empty_hdr.safetensors"), "", NULL, 0);
    EXPECT_BAD_FILE("empty_hdr.safetensors", "invalid JSON", NULL);
    write_st(P("entry_not_obj.safetensors"), "{\"w.x\": [1, 2]}", NULL, 0);
    EXPECT_BAD_FILE("entry_not_obj.safetensors", "'w.x'", "must be an object");
    write_st(P("dupkey.safetensors"),
             "{\"w\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]},"
             " \"w\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [1, 2]}}", "ab", 2);
    EXPECT_BAD_FILE("dupkey.safetensors", "duplicate", NULL);
    write_st(P("meta_bad.safetensors"), "{\"__metadata__\": {\"format\": 3}}", NULL, 0);
    EXPECT_BAD_FILE("meta_bad.safetensors", "__metadata__", "'format'");
    write_st(P("meta_arr.safetensors"), "{\"__metadata__\": [\"x\"]}", NULL, 0);
    EXPECT_BAD_FILE("meta_arr.safetensors", "__metadata__", NULL);
    write_st(P("nul_name.safetensors"), "{\"a\\u0000b\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]}}", "z", 1);
    EXPECT_BAD_FILE("nul_name.safetensors", "NUL", NULL);
    write_st(P("nul_dtype.safetensors"), "{\"t\": {\"dtype\": \"U8\\u0000x\", \"shape\": [1], \"data_offsets\": [0, 1]}}", "z", 1);
    EXPECT_BAD_FILE("nul_dtype.safetensors", "'t'", "NUL");
}

static void test_bad_offsets(void) {
    write_st(P("past_end.safetensors"), "{\"lm_head.weight\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}", "abcd", 4);
    EXPECT_BAD_FILE("past_end.safetensors", "'lm_head.weight'", "past the end of the data area (4 bytes)");
    write_st(P("past_end2.safetensors"),
             "{\"ok\": {\"dtype\": \"U8\", \"shape\": [4], \"data_offsets\": [0, 4]},"
             " \"late\": {\"dtype\": \"U8\", \"shape\": [0], \"data_offsets\": [5, 5]}}", "abcd", 4);
    EXPECT_BAD_FILE("past_end2.safetensors", "'late'", "past the end");
    write_st(P("backwards.safetensors"), "{\"norm\": {\"dtype\": \"U8\", \"shape\": [0], \"data_offsets\": [8, 0]}}", "abcdefgh", 8);
    EXPECT_BAD_FILE("backwards.safetensors", "'norm'", "end before they begin");
    write_st(P("negoff.safetensors"), "{\"norm\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [-1, 0]}}", "a", 1);
    EXPECT_BAD_FILE("negoff.safetensors", "'norm'", "negative");
    write_st(P("overlap.safetensors"),
             "{\"first\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]},"
             " \"second\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}", "0123456789ab", 12);
    EXPECT_BAD_FILE("overlap.safetensors", "'second'", "'first'");
    /* Contained in a larger range that started earlier, with a disjoint one in between. */
    write_st(P("overlap2.safetensors"),
             "{\"big\": {\"dtype\": \"U8\", \"shape\": [10], \"data_offsets\": [0, 10]},"
             " \"small\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [1, 3]},"
             " \"inner\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [6, 8]}}", "0123456789", 10);
    EXPECT_BAD_FILE("overlap2.safetensors", "overlap", "'big'");
    write_st(P("same_range.safetensors"),
             "{\"p\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [0, 2]},"
             " \"q\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [0, 2]}}", "01", 2);
    EXPECT_BAD_FILE("same_range.safetensors", "overlap", NULL);
    write_st(P("offs_shape.safetensors"), "{\"t\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0]}}", "a", 1);
    EXPECT_BAD_FILE("offs_shape.safetensors", "'t'", "data_offsets");
    write_st(P("offs_real.safetensors"), "{\"t\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1.0]}}", "a", 1);
    EXPECT_BAD_FILE("offs_real.safetensors", "'t'", "data_offsets");
}

static void test_bad_dtype_shape(void) {
    write_st(P("dtype.safetensors"), "{\"q_proj\": {\"dtype\": \"F4\", \"shape\": [2], \"data_offsets\": [0, 1]}}", "a", 1);
    EXPECT_BAD_FILE("dtype.safetensors", "'q_proj'", "unknown dtype 'F4'");
    write_st(P("dtype_num.safetensors"), "{\"q_proj\": {\"dtype\": 7, \"shape\": [2], \"data_offsets\": [0, 1]}}", "a", 1);
    EXPECT_BAD_FILE("dtype_num.safetensors", "'q_proj'", "dtype");
    static uint8_t d[4000];
    write_st(P("mismatch.safetensors"),
             "{\"model.layers.0.mlp.up_proj.weight\": {\"dtype\": \"BF16\", \"shape\": [64, 32], \"data_offsets\": [0, 4000]}}", d, sizeof d);
    EXPECT_BAD_FILE("mismatch.safetensors", "tensor 'model.layers.0.mlp.up_proj.weight': shape [64, 32] x BF16 needs 4096 bytes but data_offsets span 4000", NULL);
    write_st(P("negdim.safetensors"), "{\"k\": {\"dtype\": \"F32\", \"shape\": [2, -1], \"data_offsets\": [0, 0]}}", NULL, 0);
    EXPECT_BAD_FILE("negdim.safetensors", "'k'", "shape[1] = -1 is negative");
    write_st(P("overflow.safetensors"),
             "{\"huge\": {\"dtype\": \"F32\", \"shape\": [1099511627776, 1099511627776], \"data_offsets\": [0, 0]}}", NULL, 0);
    EXPECT_BAD_FILE("overflow.safetensors", "'huge'", "overflows");
    /* A zero dim does not excuse the other dims from overflowing (row sizes are products). */
    write_st(P("overflow0.safetensors"),
             "{\"huge0\": {\"dtype\": \"F32\", \"shape\": [0, 1099511627776, 1099511627776], \"data_offsets\": [0, 0]}}", NULL, 0);
    EXPECT_BAD_FILE("overflow0.safetensors", "'huge0'", "overflows");
    /* numel fits int64 but bytes do not. */
    write_st(P("overflow_b.safetensors"),
             "{\"hb\": {\"dtype\": \"F64\", \"shape\": [2305843009213693952], \"data_offsets\": [0, 0]}}", NULL, 0);
    EXPECT_BAD_FILE("overflow_b.safetensors", "'hb'", "overflows");
    write_st(P("realdim.safetensors"), "{\"r\": {\"dtype\": \"F32\", \"shape\": [2.5], \"data_offsets\": [0, 10]}}", "0123456789", 10);
    EXPECT_BAD_FILE("realdim.safetensors", "'r'", "shape[0] must be an integer");
    write_st(P("strdim.safetensors"), "{\"r\": {\"dtype\": \"F32\", \"shape\": [\"2\"], \"data_offsets\": [0, 8]}}", "01234567", 8);
    EXPECT_BAD_FILE("strdim.safetensors", "'r'", "shape[0] must be an integer");
    write_st(P("boolshape.safetensors"), "{\"r\": {\"dtype\": \"F32\", \"shape\": true, \"data_offsets\": [0, 4]}}", "0123", 4);
    EXPECT_BAD_FILE("boolshape.safetensors", "'r'", "shape");
    write_st(P("ninedims.safetensors"),
             "{\"nd\": {\"dtype\": \"U8\", \"shape\": [1,1,1,1,1,1,1,1,1], \"data_offsets\": [0, 1]}}", "a", 1);
    EXPECT_BAD_FILE("ninedims.safetensors", "'nd'", "9 dims");
    write_st(P("no_dtype.safetensors"), "{\"a\": {\"shape\": [1], \"data_offsets\": [0, 1]}}", "a", 1);
    EXPECT_BAD_FILE("no_dtype.safetensors", "'a'", "missing \"dtype\"");
    write_st(P("no_shape.safetensors"), "{\"a\": {\"dtype\": \"U8\", \"data_offsets\": [0, 1]}}", "a", 1);
    EXPECT_BAD_FILE("no_shape.safetensors", "'a'", "missing \"shape\"");
    write_st(P("no_offs.safetensors"), "{\"a\": {\"dtype\": \"U8\", \"shape\": [1]}}", "a", 1);
    EXPECT_BAD_FILE("no_offs.safetensors", "'a'", "missing \"data_offsets\"");
    write_st(P("extra_key.safetensors"),
             "{\"a\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1], \"stride\": [1]}}", "a", 1);
    EXPECT_BAD_FILE("extra_key.safetensors", "'a'", "unknown key 'stride'");
}

/* ---- bad sharded sets ---------------------------------------------------------------- */

/* dir/model.safetensors.index.json with the given weight_map body. */
static void write_index(const char *dir, const char *weight_map) {
    char path[600], buf[2048];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", P(dir));
    snprintf(buf, sizeof buf, "{\"metadata\": {}, \"weight_map\": {%s}}", weight_map);
    write_bytes(path, buf, strlen(buf));
}

static void shard(const char *dir, const char *file, const char *tensor) {
    char rel[300], hdr[400];
    snprintf(rel, sizeof rel, "%s/%s", dir, file);
    snprintf(hdr, sizeof hdr, "{\"%s\": {\"dtype\": \"F32\", \"shape\": [1], \"data_offsets\": [0, 4]}}", tensor);
    write_st(P(rel), hdr, "\0\0\x80?", 4);
}

static void test_bad_sharded(void) {
    mkdir_p("missing_shard");
    shard("missing_shard", "s1.safetensors", "a");
    write_index("missing_shard", "\"a\": \"s1.safetensors\", \"b\": \"s2.safetensors\"");
    EXPECT_BAD_DIR("missing_shard", "model.safetensors.index.json", "shard 's2.safetensors'");

    mkdir_p("ghost");
    shard("ghost", "s1.safetensors", "a");
    write_index("ghost", "\"a\": \"s1.safetensors\", \"model.ghost.weight\": \"s1.safetensors\"");
    EXPECT_BAD_DIR("ghost", "model.safetensors.index.json", "tensor 'model.ghost.weight'");
    EXPECT_BAD_DIR("ghost", "s1.safetensors", "not in that shard");

    mkdir_p("unlisted");
    write_st(P("unlisted/s1.safetensors"),
             "{\"a\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [0, 1]},"
             " \"b.extra\": {\"dtype\": \"U8\", \"shape\": [1], \"data_offsets\": [1, 2]}}", "xy", 2);
    write_index("unlisted", "\"a\": \"s1.safetensors\"");
    EXPECT_BAD_DIR("unlisted", "tensor 'b.extra'", "not in the weight_map");
    EXPECT_BAD_DIR("unlisted", "model.safetensors.index.json", NULL);

    mkdir_p("dup");
    shard("dup", "s1.safetensors", "same.weight");
    shard("dup", "s2.safetensors", "same.weight");
    shard("dup", "s3.safetensors", "other");
    write_index("dup", "\"same.weight\": \"s1.safetensors\", \"other\": \"s2.safetensors\"");
    /* s2 is opened because the index puts "other" there; it holds same.weight instead,
     * which s1 also holds. The duplicate is reported before the index mismatch. */
    EXPECT_BAD_DIR("dup", "'same.weight'", "s1.safetensors");
    EXPECT_BAD_DIR("dup", "s2.safetensors", NULL);

    mkdir_p("dup_loose");
    shard("dup_loose", "x.safetensors", "t");
    shard("dup_loose", "y.safetensors", "t");
    EXPECT_BAD_DIR("dup_loose", "'t'", "x.safetensors");

    mkdir_p("wrong_shard");
    shard("wrong_shard", "s1.safetensors", "a");
    shard("wrong_shard", "s2.safetensors", "b");
    write_index("wrong_shard", "\"a\": \"s2.safetensors\", \"b\": \"s1.safetensors\"");
    EXPECT_BAD_DIR("wrong_shard", "tensor 'a'", "but it is in shard 's1.safetensors'");

    mkdir_p("escape");
    write_index("escape", "\"a\": \"../ok.safetensors\"");
    EXPECT_BAD_DIR("escape", "tensor 'a'", "relative file name");

    mkdir_p("bad_shard_inside");
    write_st(P("bad_shard_inside/s1.safetensors"), "{\"w\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 4]}}", "abcd", 4);
    write_index("bad_shard_inside", "\"w\": \"s1.safetensors\"");
    EXPECT_BAD_DIR("bad_shard_inside", "s1.safetensors", "tensor 'w'");

    mkdir_p("no_map");
    write_bytes(P("no_map/model.safetensors.index.json"), "{\"metadata\": {}}", 16);
    EXPECT_BAD_DIR("no_map", "model.safetensors.index.json", "weight_map");
    mkdir_p("index_bad_json");
    write_bytes(P("index_bad_json/model.safetensors.index.json"), "{weight_map", 11);
    EXPECT_BAD_DIR("index_bad_json", "model.safetensors.index.json", "invalid JSON");
    mkdir_p("index_num");
    write_index("index_num", "\"a\": 3");
    EXPECT_BAD_DIR("index_num", "model.safetensors.index.json", "tensor 'a': shard must be a file name string, got an integer");
}

/* ---- st_parse_header directly -------------------------------------------------------- */

static void test_parse_header_direct(void) {
    const char *h = "{\"z\": {\"dtype\": \"F8_E5M2\", \"shape\": [3], \"data_offsets\": [5, 8]},"
                    " \"a\": {\"dtype\": \"U32\", \"shape\": [1], \"data_offsets\": [0, 4]},"
                    " \"e\": {\"dtype\": \"I32\", \"shape\": [0], \"data_offsets\": [1, 1]}}";
    ci_tensor *t = NULL;
    int n = -1;
    char err[512] = "";
    CHECK(st_parse_header(h, strlen(h), NULL, 8, "hdr.json", &t, &n, err, sizeof err) == 0, "validate only: %s", err);
    CHECK(n == 3, "n %d", n);
    if (n == 3 && t) {
        CHECK(!strcmp(t[0].name, "a") && !strcmp(t[1].name, "e") && !strcmp(t[2].name, "z"), "sorted by name");
        CHECK(t[0].data == NULL && t[2].data == NULL, "no data_base -> NULL data");
        CHECK(t[2].dtype == CI_F8_E5M2 && t[2].nbytes == 3, "z meta");
    }
    st_free_tensors(t, n);

    uint8_t base[8] = { 0 };
    t = NULL;
    CHECK(st_parse_header(h, strlen(h), base, sizeof base, "hdr.json", &t, &n, err, sizeof err) == 0, "with base: %s", err);
    if (t && n == 3) CHECK(t[0].data == base && t[2].data == base + 5 && t[1].data == base + 1, "data pointers");
    st_free_tensors(t, n);

    /* Same header against a data area one byte too short. */
    t = (ci_tensor *)&n;
    CHECK(st_parse_header(h, strlen(h), NULL, 7, "hdr.json", &t, &n, err, sizeof err) != 0, "short data");
    CHECK(t == NULL && n == 0, "outputs cleared on failure");
    CHECK_HAS(err, "hdr.json: tensor 'z'");

    /* Python's bare NaN in metadata becomes the string "NaN" and is accepted. */
    const char *hm = "{\"__metadata__\": {\"x\": NaN}}";
    CHECK(st_parse_header(hm, strlen(hm), NULL, 0, "nan.json", &t, &n, err, sizeof err) == 0 && n == 0, "NaN metadata: %s", err);
    st_free_tensors(t, n);

    /* Not NUL-terminated: the parser must stop at hdr_len. */
    char buf[64];
    memcpy(buf, "{}XXXXXXXXXXXXXXXX", 18);
    CHECK(st_parse_header(buf, 2, NULL, 0, "b", &t, &n, err, sizeof err) == 0 && n == 0, "length-bounded: %s", err);
    st_free_tensors(t, n);

    CHECK(st_parse_header("{", 1, NULL, 0, "trunc.json", &t, &n, err, sizeof err) != 0, "truncated JSON");
    CHECK_HAS(err, "trunc.json");
    /* The error buffer may be absent. */
    CHECK(st_parse_header("[]", 2, NULL, 0, "x", &t, &n, NULL, 0) != 0, "NULL err buffer");
}

/* 100k tensors: the header must parse in O(n log n); names sort differently from the
 * data order, so the table really gets sorted. */
static void test_large_header(void) {
    const int N = 100000;
    size_t cap = (size_t)N * 96 + 16, o = 0;
    char *h = malloc(cap);
    uint8_t *data = calloc((size_t)N, 2);
    o += (size_t)snprintf(h + o, cap - o, "{");
    for (int i = 0; i < N; i++) {
        o += (size_t)snprintf(h + o, cap - o, "%s\"model.layers.%d.w\": {\"dtype\": \"BF16\", \"shape\": [1], \"data_offsets\": [%d, %d]}",
                              i ? "," : "", i, 2 * i, 2 * i + 2);
        data[2 * i] = (uint8_t)i;
        data[2 * i + 1] = (uint8_t)(i >> 8);
    }
    o += (size_t)snprintf(h + o, cap - o, "}");
    write_st(P("large.safetensors"), h, data, (size_t)N * 2);
    free(h);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    char err[512] = "";
    st_set *s = NULL;
    int rc = st_open_file(P("large.safetensors"), &s, err, sizeof err);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
    CHECK(rc == 0, "large: %s", err);
    CHECK(secs < 10.0, "100k-tensor header took %.2f s", secs);
    if (s) {
        CHECK(st_count(s) == N, "count %d", st_count(s));
        char name[64];
        for (int i = 0; i < N; i += 997) {
            snprintf(name, sizeof name, "model.layers.%d.w", i);
            const ci_tensor *t = st_find(s, name);
            CHECK(t && memcmp(t->data, data + 2 * i, 2) == 0, "find %s", name);
        }
        CHECK(st_total_bytes(s) == (size_t)N * 2, "total");
        st_close(s);
    }
    free(data);
}

/* ---- driver -------------------------------------------------------------------------- */

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb; (void)flag; (void)ftw;
    return remove(p);
}

/* The format promises no alignment: a header whose length is not a multiple of 8 and a
 * 2-byte tensor before an F32 one put the F32 data at an odd address in the mapping. The set
 * hands out an aligned copy (kernels read through float pointers; UBSan would flag a
 * misaligned one), with the same values; aligned tensors still point into the mapping. */
static void test_misaligned_tensors(void) {
    char err[512] = "";
    st_set *s = NULL;
    const char *json = "{\"h\": {\"dtype\": \"BF16\", \"shape\": [1], \"data_offsets\": [0, 2]}, "
                       "\"f\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [2, 14]}, "
                       "\"b\": {\"dtype\": \"U8\", \"shape\": [2], \"data_offsets\": [14, 16]}} ";
    uint8_t data[16] = { 0x80, 0x3f };
    const float want[3] = { 1.5f, -2.25f, 1e-30f };
    memcpy(data + 2, want, sizeof want);
    data[14] = 7; data[15] = 9;
    CHECK((8 + strlen(json)) % 2 == 1, "the file must put its tensors at odd offsets");
    write_st(P("odd.safetensors"), json, data, sizeof data);
    CHECK(st_open_file(P("odd.safetensors"), &s, err, sizeof err) == 0, "%s", err);
    if (!s) return;
    const ci_tensor *f = st_find(s, "f"), *h = st_find(s, "h"), *b = st_find(s, "b");
    CHECK(f && h && b, "tensors missing");
    if (f && h && b) {
        CHECK((uintptr_t)f->data % 4 == 0, "F32 tensor at a misaligned address");
        CHECK((uintptr_t)h->data % 2 == 0, "BF16 tensor at a misaligned address");
        CHECK(memcmp(f->data, want, sizeof want) == 0, "F32 values changed");
        CHECK(((const uint8_t *)b->data)[0] == 7 && ((const uint8_t *)b->data)[1] == 9, "U8 values changed");
        float x = ((const float *)f->data)[1];
        CHECK(x == -2.25f, "read through a float pointer: %g", x);
    }
    st_close(s);
}

/* ---- st_make_resident ------------------------------------------------------------------ */

typedef struct { int calls; uint64_t last_done, last_total; } res_prog;
static void res_cb(void *ctx, const ci_load_progress *p) {
    res_prog *r = ctx;
    r->calls++;
    r->last_done = p->done;
    r->last_total = p->total;
}

/* The sharded set (two files) and the misaligned file: copies hold the same bytes at new
 * addresses (outside the old mapping), an aligned copy of a misaligned tensor keeps its
 * place, progress ends at done == total; under a too small budget nothing moves; a file
 * cut short after opening is an error naming it, never a crash. */
static void test_make_resident(void) {
    char err[512] = "";
    st_set *s = NULL;
    CHECK(st_open_dir(P("sharded"), &s, err, sizeof err) == 0, "%s", err);
    if (!s) return;
    const ci_tensor *a = st_find(s, "a.weight"), *c = st_find(s, "c.bias");
    const void *a0 = a->data, *c0 = c->data;
    uint8_t abytes[16], cbytes[4];
    memcpy(abytes, a0, 16);
    memcpy(cbytes, c0, 4);
    CHECK(st_file_bytes(s) > st_total_bytes(s), "file bytes %llu count the headers", (unsigned long long)st_file_bytes(s));
    CHECK(st_make_resident(s, st_file_bytes(s) - 1, NULL, NULL, err, sizeof err) == 0, "over budget: left mapped");
    CHECK(st_find(s, "a.weight")->data == a0, "over budget: pointer moved");
    uint64_t rl = 1;
    CHECK(st_resident_bytes(s, &rl) == NULL && rl == 0, "mapped files are not resident bytes");
    res_prog pr = { 0, 0, 0 };
    CHECK(st_make_resident(s, st_file_bytes(s), res_cb, &pr, err, sizeof err) == 1, "copy: %s", err);
    a = st_find(s, "a.weight");
    c = st_find(s, "c.bias");
    CHECK(a->data != a0 && c->data != c0, "pointers moved to the copies");
    CHECK(memcmp(a->data, abytes, 16) == 0 && memcmp(c->data, cbytes, 4) == 0, "bytes kept");
    CHECK((uintptr_t)a->data % 4 == 0, "F32 tensor aligned in the copy");
    {   /* the largest file's copy, the one holding the tensor of the largest file here */
        const uint8_t *rb = st_resident_bytes(s, &rl);
        uint64_t biggest = 0;
        for (int i = 0; i < st_count(s); i++) {
            struct stat sb;
            if (stat(st_file_of(s, i), &sb) == 0 && (uint64_t)sb.st_size > biggest) biggest = (uint64_t)sb.st_size;
        }
        CHECK(rb && rl == biggest, "resident bytes %llu, the largest file %llu", (unsigned long long)rl,
              (unsigned long long)biggest);
        int inside = 0;
        for (int i = 0; rb && i < st_count(s); i++) {
            const uint8_t *d = st_get(s, i)->data;
            inside += d >= rb && d + st_get(s, i)->nbytes <= rb + rl;
        }
        CHECK(inside > 0, "a tensor lies in the resident bytes");
    }
    CHECK(pr.calls >= 2 && pr.last_done == pr.last_total && pr.last_total == st_file_bytes(s),
          "progress %d calls, %llu of %llu", pr.calls, (unsigned long long)pr.last_done, (unsigned long long)pr.last_total);
    st_close(s);

    s = NULL;
    CHECK(st_open_file(P("odd.safetensors"), &s, err, sizeof err) == 0, "%s", err);
    if (!s) return;
    const void *f0 = st_find(s, "f")->data, *h0 = st_find(s, "h")->data;
    CHECK(st_make_resident(s, (uint64_t)1 << 40, NULL, NULL, err, sizeof err) == 1, "copy odd: %s", err);
    const ci_tensor *f = st_find(s, "f"), *h = st_find(s, "h");
    CHECK(f->data == f0 && h->data == h0, "aligned copies of misaligned tensors stay where they are");
    CHECK(((const float *)f->data)[1] == -2.25f, "F32 value");
    CHECK(((const uint8_t *)st_find(s, "b")->data)[1] == 9, "U8 value from the copy");
    st_close(s);

    /* cut short between open and copy */
    uint8_t d[64];
    for (int i = 0; i < 64; i++) d[i] = (uint8_t)i;
    write_st(P("shrink.safetensors"), "{\"x\": {\"dtype\": \"U8\", \"shape\": [64], \"data_offsets\": [0, 64]}}", d, 64);
    s = NULL;
    CHECK(st_open_file(P("shrink.safetensors"), &s, err, sizeof err) == 0, "%s", err);
    if (!s) return;
    CHECK(truncate(P("shrink.safetensors"), 20) == 0, "truncate");
    err[0] = 0;
    CHECK(st_make_resident(s, (uint64_t)1 << 40, NULL, NULL, err, sizeof err) == -1, "a short read is an error");
    CHECK_HAS(err, "shrink.safetensors");
    CHECK_HAS(err, "shorter");
    st_close(s);
}

/* ---- st_write_file_par against st_write_file ------------------------------------------ */

typedef struct { int fail_at; atomic_int calls; } wfill_ctx;

/* Tensor i's bytes: a hash of (i, byte index); fails at tensor fail_at (-1: never). Sleeps
 * a little on even tensors so the workers finish out of order. */
static int wfill(void *vctx, int i, void *buf, size_t nbytes) {
    wfill_ctx *c = vctx;
    atomic_fetch_add(&c->calls, 1);
    if (i == c->fail_at) return -1;
    uint8_t *b = buf;
    for (size_t k = 0; k < nbytes; k++) {
        uint64_t z = (uint64_t)i * 0x9E3779B97F4A7C15ull + k;
        z = (z ^ (z >> 31)) * 0xBF58476D1CE4E5B9ull;
        b[k] = (uint8_t)(z >> 56);
    }
    if (i % 2 == 0) nanosleep(&(struct timespec){ 0, 200000 }, NULL);
    return 0;
}

/* Whole file at path into a malloc'd buffer (*n bytes), or NULL. */
static uint8_t *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long l = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(l > 0 ? (size_t)l : 1);
    *n = b && l >= 0 ? fread(b, 1, (size_t)l, f) : 0;
    fclose(f);
    return b;
}

/* The parallel writer gives the serial file byte for byte for 1..9 threads; a failing fill
 * gives the serial error (the first failing tensor in order), as does an unwritable path and
 * a full disk (/dev/full), with every worker joined. */
static void test_write_parallel(void) {
    enum { N = 37 };
    st_wdesc d[N];
    char names[N][16];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof names[i], "t%d", i);
        memset(&d[i], 0, sizeof d[i]);
        d[i].name = names[i];
        d[i].dtype = i % 3 == 0 ? CI_F32 : i % 3 == 1 ? CI_BF16 : CI_U8;
        d[i].ndim = 2;
        d[i].shape[0] = 1 + (i * 7) % 13;
        d[i].shape[1] = i == 5 ? 0 : i == 11 ? 100000 : 1 + (i * 131) % 1000;   /* an empty and a big one */
    }
    char err[512] = "", err2[512] = "";
    wfill_ctx c = { -1, 0 };
    CHECK(st_write_file(P("w_serial.st"), d, N, wfill, &c, err, sizeof err) == 0, "%s", err);
    size_t ns = 0;
    uint8_t *ref = slurp(P("w_serial.st"), &ns);
    CHECK(ref && ns > 8, "no serial file");
    const int threads[] = { 0, 1, 2, 3, 4, 9, 64 };
    for (size_t t = 0; t < sizeof threads / sizeof *threads; t++) {
        c.calls = 0;
        CHECK(st_write_file_par(P("w_par.st"), d, N, wfill, &c, threads[t], err, sizeof err) == 0, "%d threads: %s",
              threads[t], err);
        CHECK(c.calls == N, "%d threads: %d fill calls", threads[t], (int)c.calls);
        size_t np = 0;
        uint8_t *got = slurp(P("w_par.st"), &np);
        CHECK(got && np == ns && memcmp(got, ref, ns) == 0, "%d threads: the file differs", threads[t]);
        free(got);
    }
    free(ref);
    c.fail_at = 20;
    CHECK(st_write_file(P("w_fail.st"), d, N, wfill, &c, err, sizeof err) != 0, "serial fill failure accepted");
    for (int nt = 2; nt <= 8; nt *= 2) {
        CHECK(st_write_file_par(P("w_fail.st"), d, N, wfill, &c, nt, err2, sizeof err2) != 0, "fill failure accepted");
        CHECK(!strcmp(err, err2), "'%s' vs '%s'", err, err2);
    }
    CHECK_HAS(err, "cannot fill tensor 't20'");
    c.fail_at = -1;
    CHECK(st_write_file(P("no/such/dir/x.st"), d, N, wfill, &c, err, sizeof err) != 0, "bad path accepted");
    CHECK(st_write_file_par(P("no/such/dir/x.st"), d, N, wfill, &c, 4, err2, sizeof err2) != 0, "bad path accepted");
    CHECK(!strcmp(err, err2), "'%s' vs '%s'", err, err2);
    CHECK_HAS(err2, "cannot create");
    if (access("/dev/full", W_OK) == 0) {
        CHECK(st_write_file("/dev/full", d, N, wfill, &c, err, sizeof err) != 0, "full disk accepted");
        CHECK(st_write_file_par("/dev/full", d, N, wfill, &c, 4, err2, sizeof err2) != 0, "full disk accepted");
        CHECK(!strcmp(err, err2), "'%s' vs '%s'", err, err2);
        CHECK_HAS(err2, "write failed");
    }
}

int main(void) {
    snprintf(root_dir, sizeof root_dir, "/tmp/cinfer_st_XXXXXX");
    if (!mkdtemp(root_dir)) { perror("mkdtemp"); return 1; }
    TEST_RUN(test_roundtrip_dtypes);
    TEST_RUN(test_zero_tensors);
    TEST_RUN(test_sharded_index);
    TEST_RUN(test_single_and_loose_dirs);
    TEST_RUN(test_truncated);
    TEST_RUN(test_absurd_header_len);
    TEST_RUN(test_bad_json);
    TEST_RUN(test_bad_offsets);
    TEST_RUN(test_bad_dtype_shape);
    TEST_RUN(test_bad_sharded);
    TEST_RUN(test_parse_header_direct);
    TEST_RUN(test_large_header);
    TEST_RUN(test_misaligned_tensors);
    TEST_RUN(test_make_resident);
    TEST_RUN(test_write_parallel);
    nftw(root_dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    TEST_EXIT();
}
