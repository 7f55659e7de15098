/* fuzz_config.c — libFuzzer target for the JSON layer (src/io/json.c).
 *
 * Feeds the input to cj_parse (which rewrites Python's bare Infinity/NaN before jansson
 * sees the text), then, when it parses, reads the keys config loading reads first with
 * every typed getter, and calls cj_number on every value of the tree. Nothing is checked
 * beyond "no crash, no sanitizer report, no leak". */
#include "io/json.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *buf, size_t size);

static double sink;

/* Visits every value; jansson caps nesting depth while parsing, so recursion is bounded. */
static void walk(json_t *v) {
    double d;
    if (cj_number(v, &d)) sink += d;
    if (json_is_object(v)) {
        const char *k;
        json_t *c;
        json_object_foreach(v, k, c) walk(c);
    } else if (json_is_array(v)) {
        size_t i;
        json_t *c;
        json_array_foreach(v, i, c) walk(c);
    }
}

static void getters(const json_t *o) {
    static const char *keys[] = { "hidden_size", "rope_theta", "rope_scaling", "text_config", "time_step_limit",
                                  "rope_parameters", "model_type" };
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        long long ll;
        double d;
        int b;
        if (cj_get_int(o, keys[i], &ll) == 1) sink += (double)ll;
        if (cj_get_num(o, keys[i], &d) == 1) sink += d;
        if (cj_get_bool(o, keys[i], &b) == 1) sink += b;
        const char *s = cj_get_str(o, keys[i]);
        if (s) sink += s[0];
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *buf, size_t size) {
    char err[256];
    json_t *root = cj_parse((const char *)buf, size, "config.json", err, sizeof err);
    if (!root) return 0;
    getters(root);
    /* Nested configs (text_config, rope_scaling) are read the same way. */
    const char *nested[] = { "text_config", "rope_scaling", "rope_parameters" };
    for (size_t i = 0; i < 3; i++) {
        json_t *o = json_object_get(root, nested[i]);
        if (o && json_is_object(o)) getters(o);
    }
    walk(root);
    json_decref(root);
    return 0;
}
