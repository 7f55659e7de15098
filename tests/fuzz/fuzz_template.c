/* fuzz_template.c — libFuzzer target for the chat-template interpreter (src/text/).
 *
 * The input is template source: it is compiled and, when it compiles, rendered with a
 * small chat (system, user, assistant with a tool call, tool result), tools, the special
 * tokens and add_generation_prompt, under tight caps on steps, depth and output so a
 * hostile template ends in an error quickly. Nothing is checked beyond "no crash, no
 * sanitizer report, no leak, no hang". */
#include "text/template.h"

#include <stdint.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *buf, size_t size);

static const char *VARS =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"},"
    " {\"role\": \"user\", \"content\": \"What is 2+2?\"},"
    " {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"type\": \"function\", \"function\":"
    "   {\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 2}}}]},"
    " {\"role\": \"tool\", \"content\": \"4\"},"
    " {\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"thanks\"}]}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"add\", \"parameters\": {\"type\": \"object\"}}}],"
    " \"add_generation_prompt\": true, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"enable_thinking\": false}";

int LLVMFuzzerTestOneInput(const uint8_t *buf, size_t size) {
    static json_t *vars;
    if (!vars) vars = json_loads(VARS, 0, NULL);
    if (!vars) return 0;
    char err[512];
    tpl_t *t = NULL;
    if (tpl_compile((const char *)buf, size, "fuzz", &t, err, sizeof err) == 0) {
        tpl_opts o = { .max_output = 1 << 20, .max_depth = 64, .max_steps = 200000, .now = 1750000000 };
        char *out = NULL;
        size_t len = 0;
        if (tpl_render(t, vars, &o, &out, &len, err, sizeof err) == 0) free(out);
        tpl_free(t);
    }
    return 0;
}
