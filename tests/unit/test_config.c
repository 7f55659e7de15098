/* test_config.c — config.json dialects, Python literals, nesting and refusals. */
#include "check.h"
#include "io/config.h"
#include "io/json.h"
#include "models/registry.h"
#include "nn/rope.h"
#include <math.h>

static int parse(const char *txt, ci_config *c, char *err) {
    return cfg_parse(txt, strlen(txt), "cfg.json", c, err, 512);
}

#define BASE "\"vocab_size\": 100, \"hidden_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 4"

static void test_transformers5_dialect(void) {
    char err[512] = "";
    ci_config c;
    int rc = parse("{\"model_type\": \"llama\", " BASE ", \"rope_parameters\": {\"rope_type\": \"llama3\", "
                   "\"rope_theta\": 500000.0, \"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, "
                   "\"original_max_position_embeddings\": 8192}}", &c, err);
    CHECK(rc == 0, "%s", err);
    if (rc) return;
    CHECK(c.rope.type == CI_ROPE_LLAMA3 && c.rope.theta == 500000.0 && c.rope.factor == 8.0 && c.rope.original_max_pos == 8192, "rope");
    CHECK(!strcmp(c.family->name, "llama"), "family %s", c.family->name);
    cfg_free(&c);
}

static void test_hub_dialect(void) {
    char err[512] = "";
    ci_config c;
    int rc = parse("{\"model_type\": \"qwen3\", " BASE ", \"rope_theta\": 1000000, \"rope_scaling\": {\"type\": \"yarn\", "
                   "\"factor\": 4, \"original_max_position_embeddings\": 32768}, \"eos_token_id\": [5, 7]}", &c, err);
    CHECK(rc == 0, "%s", err);
    if (rc) return;
    CHECK(c.rope.type == CI_ROPE_YARN && c.rope.theta == 1e6 && c.rope.factor == 4 && c.rope.original_max_pos == 32768, "rope");
    CHECK(c.n_eos == 2 && c.eos_ids[0] == 5 && c.eos_ids[1] == 7, "eos");
    cfg_free(&c);
    rc = parse("{\"model_type\": \"qwen3\", " BASE ", \"rope_theta\": 1000000, \"rope_scaling\": null}", &c, err);
    CHECK(rc == 0 && c.rope.type == CI_ROPE_DEFAULT, "%s", err);
    if (!rc) cfg_free(&c);
}

static void test_python_literals(void) {
    char err[512] = "";
    const char *txt = "{\"a\": [0.0, Infinity], \"b\": -Infinity, \"c\": NaN, \"d\": \"Infinity in a string\", "
                      "\"e\": {\"__float__\": \"Infinity\"}, \"NaNx\": 1}";
    json_t *j = cj_parse(txt, strlen(txt), "t", err, sizeof err);
    CHECK(j != NULL, "%s", err);
    if (!j) return;
    double v;
    CHECK(cj_number(json_array_get(json_object_get(j, "a"), 1), &v) && isinf(v) && v > 0, "Infinity");
    CHECK(cj_get_num(j, "b", &v) == 1 && isinf(v) && v < 0, "-Infinity");
    CHECK(cj_get_num(j, "c", &v) == 1 && isnan(v), "NaN");
    CHECK(!strcmp(cj_get_str(j, "d"), "Infinity in a string"), "string untouched");
    CHECK(cj_get_num(j, "e", &v) == 1 && isinf(v), "__float__");
    CHECK(cj_get_int(j, "NaNx", &(long long){0}) == 1, "key containing NaN untouched");
    /* written back as Python writes them: bare literals, the other strings and keys kept */
    json_object_set_new(j, "NaN", json_string("NaN"));
    char *out = cj_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
    CHECK(out && strstr(out, "\"a\":[0.0,Infinity]") && strstr(out, "\"b\":-Infinity") && strstr(out, "\"c\":NaN") &&
              strstr(out, "\"Infinity in a string\"") && strstr(out, "\"__float__\":Infinity") && strstr(out, "\"NaN\":NaN"),
          "dumped: %s", out ? out : "(null)");
    json_t *back = out ? cj_parse(out, strlen(out), "t2", err, sizeof err) : NULL;
    CHECK(back && cj_number(json_array_get(json_object_get(back, "a"), 1), &v) && isinf(v), "round trip: %s", err);
    json_decref(back);
    free(out);
    json_decref(j);
}

static void test_huge_integers(void) {
    char err[512] = "";
    const char *txt = "{\"model_max_length\": 1000000000000000019884624838656, \"n\": -99999999999999999999, "
                      "\"ok\": 123456789012345678, \"r\": 1.5e300, \"a\": [12, -3, 0]}";
    CHECK(cj_parse(txt, strlen(txt), "t", err, sizeof err) == NULL, "plain cj_parse keeps refusing huge integers");
    json_t *j = cj_parse_ex(txt, strlen(txt), "t", 1, err, sizeof err);
    CHECK(j != NULL, "%s", err);
    if (!j) return;
    double v;
    long long i;
    CHECK(cj_get_num(j, "model_max_length", &v) == 1 && v > 9.9e29 && v < 1.1e30, "huge as real: %g", v);
    CHECK(cj_get_num(j, "n", &v) == 1 && v < -9.9e19, "negative huge: %g", v);
    CHECK(cj_get_int(j, "ok", &i) == 1 && i == 123456789012345678LL, "18 digits stay an integer");
    CHECK(json_is_integer(json_array_get(json_object_get(j, "a"), 1)), "small integers stay integers");
    CHECK(cj_get_num(j, "r", &v) == 1 && v == 1.5e300, "reals untouched");
    json_decref(j);
}

static void test_text_config(void) {
    char err[512] = "";
    ci_config c;
    int rc = parse("{\"model_type\": \"qwen3_5_moe\", \"architectures\": [\"X\"], \"vision_config\": {}, "
                   "\"text_config\": {\"model_type\": \"qwen3_5_moe_text\", " BASE "}}", &c, err);
    CHECK(rc == 0, "%s", err);
    if (rc) return;
    CHECK(!strcmp(c.family->name, "qwen3_5_moe") && c.hidden_size == 64 && !strcmp(c.model_type, "qwen3_5_moe_text"),
          "family %s hidden %lld", c.family->name, c.hidden_size);
    cfg_free(&c);
}

static void test_refusals(void) {
    char err[512] = "";
    ci_config c;
    CHECK(parse("{\"model_type\": \"bert\", " BASE "}", &c, err) < 0, "bert accepted");
    CHECK_HAS(err, "unknown model_type 'bert'; supported: llama, qwen3, qwen3_moe, deepseek_v3, deepseek_v32, deepseek_v3_2, deepseek_v4");
    CHECK(parse("{" BASE "}", &c, err) < 0, "no model_type accepted");
    CHECK_HAS(err, "model_type");
    CHECK(parse("{\"model_type\": \"llama\", \"vocab_size\": 100, \"num_hidden_layers\": 2}", &c, err) < 0, "no hidden");
    CHECK_HAS(err, "required key 'hidden_size' is missing");
    CHECK(parse("{\"model_type\": \"llama\", " BASE ", \"rope_theta\": \"x\"}", &c, err) < 0, "bad theta");
    CHECK_HAS(err, "rope_theta must be a number");
    CHECK(parse("[1, 2]", &c, err) < 0, "array accepted");
    CHECK_HAS(err, "cfg.json: expected a JSON object");
    CHECK(parse("{\"model_type\": \"llama\", " BASE ", \"eos_token_id\": 100}", &c, err) < 0, "eos out of vocab");
    CHECK_HAS(err, "eos_token_id 100 is outside the vocabulary");
    /* past long long: converting it was undefined (fuzz_model) */
    CHECK(parse("{\"model_type\": \"llama\", " BASE ", \"rope_parameters\": {\"rope_type\": \"yarn\", \"factor\": 4, "
                "\"original_max_position_embeddings\": 1e30}}", &c, err) < 0, "huge original_max_position_embeddings");
    CHECK_HAS(err, "rope_parameters.original_max_position_embeddings = 1e+30 is out of range");
    CHECK(parse("{\"model_type\": \"llama\", " BASE ", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4, "
                "\"original_max_position_embeddings\": Infinity}}", &c, err) < 0, "infinite original_max_position_embeddings");
    CHECK_HAS(err, "rope_scaling.original_max_position_embeddings = inf is out of range");   /* the block as spelled */
    CHECK(parse("{\"model_type\": \"llama\", " BASE ", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4, "
                "\"original_max_position_embeddings\": NaN}}", &c, err) < 0, "NaN original_max_position_embeddings accepted");
    CHECK_HAS(err, "rope_scaling.original_max_position_embeddings = nan is out of range");
    /* Every family in DESIGN.md is registered under its own name. */
    const char *types[][2] = { {"llama", "llama"}, {"qwen3", "qwen3"}, {"qwen3_moe", "qwen3_moe"},
        {"deepseek_v3", "deepseek_v3"}, {"deepseek_v32", "deepseek_v32"}, {"deepseek_v3_2", "deepseek_v32"},
        {"deepseek_v4", "deepseek_v4"}, {"qwen3_next", "qwen3_next"}, {"qwen3_5", "qwen3_5"}, {"qwen3_5_text", "qwen3_5"},
        {"qwen3_5_moe", "qwen3_5_moe"}, {"qwen3_5_moe_text", "qwen3_5_moe"}, {"lfm2", "lfm2"}, {"lfm2_moe", "lfm2_moe"},
        {"nemotron_h", "nemotron_h"} };
    for (size_t i = 0; i < sizeof types / sizeof *types; i++) {
        const ci_family *f = reg_find(types[i][0]);
        CHECK(f && !strcmp(f->name, types[i][1]), "model_type %s -> %s", types[i][0], f ? f->name : "none");
    }
}

static void test_rope_tables(void) {
    char err[512] = "";
    ci_config c;
    /* llama3: high frequencies untouched, low ones divided by factor, medium blended. */
    int rc = parse("{\"model_type\": \"llama\", " BASE ", \"rope_parameters\": {\"rope_type\": \"llama3\", \"rope_theta\": 500000, "
                   "\"factor\": 8, \"low_freq_factor\": 1, \"high_freq_factor\": 4, \"original_max_position_embeddings\": 8192}}", &c, err);
    CHECK(rc == 0, "%s", err);
    if (rc) return;
    rope_table t;
    rc = rope_init(&t, &c.rope, 128, "llama", err, sizeof err);
    CHECK(rc == 0 && t.rot_dim == 128 && t.mscale == 1.0f, "%s", err);
    if (!rc) {
        CHECK(fabs(t.inv_freq[0] - 1.0) < 1e-7, "first %g", t.inv_freq[0]);
        double base63 = 1.0 / pow(500000.0, 126.0 / 128);
        CHECK(fabs(t.inv_freq[63] - base63 / 8) < 1e-6 * base63, "last %g vs %g", t.inv_freq[63], base63 / 8);
        rope_free(&t);
    }
    cfg_free(&c);
    /* yarn: attention factor 0.1 ln(factor) + 1 */
    rc = parse("{\"model_type\": \"llama\", " BASE ", \"rope_parameters\": {\"rope_type\": \"yarn\", \"rope_theta\": 10000, "
               "\"factor\": 4, \"original_max_position_embeddings\": 128}, \"partial_rotary_factor\": 0.5}", &c, err);
    CHECK(rc == 0, "%s", err);
    if (rc) return;
    rc = rope_init(&t, &c.rope, 16, "llama", err, sizeof err);
    CHECK(rc == 0 && t.rot_dim == 8, "%s rot %d", err, t.rot_dim);
    if (!rc) {
        CHECK(fabs(t.mscale - (0.1 * log(4.0) + 1)) < 1e-6, "mscale %g", t.mscale);
        rope_free(&t);
    }
    cfg_free(&c);
}

int main(void) {
    TEST_RUN(test_transformers5_dialect);
    TEST_RUN(test_hub_dialect);
    TEST_RUN(test_python_literals);
    TEST_RUN(test_huge_integers);
    TEST_RUN(test_text_config);
    TEST_RUN(test_refusals);
    TEST_RUN(test_rope_tables);
    TEST_EXIT();
}
