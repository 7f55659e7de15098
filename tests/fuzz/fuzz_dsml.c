/* fuzz_dsml.c — libFuzzer target for the DeepSeek V3.2 / V4 prompt encoders (src/text/dsml.c)
 * and the DSML reply parser (src/server/outparse.c).
 *
 * Input: one byte choosing the encoder (even: V3.2, odd: V4), then a chat request as JSON
 * ({"messages", "tools", "chat_template_kwargs"}). A request that renders is parsed back:
 * the text after each "<｜Assistant｜>" goes through the reasoning split and the tool-call
 * parser, as a reply would. Seeds: tests/fuzz/corpus/dsml (conversations of
 * tests/text/dsml_vectors.json). Nothing is checked beyond "no crash, no sanitizer report,
 * no leak, no hang". */
#include "server/outparse.h"
#include "text/dsml.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *buf, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *buf, size_t size) {
    if (size < 1) return 0;
    dsml_version v = buf[0] & 1 ? DSML_V4 : DSML_V32;
    json_t *req = json_loadb((const char *)buf + 1, size - 1, 0, NULL);
    if (!json_is_object(req)) { json_decref(req); return 0; }
    char *out = NULL, err[768];
    size_t len = 0;
    if (dsml_render_request(v, req, &out, &len, err, sizeof err) == 0) {
        static const char A[] = "<｜Assistant｜>";
        for (const char *p = strstr(out, A); p; p = strstr(p + 1, A)) {
            const char *t = p + strlen(A);
            size_t tl = len - (size_t)(t - out);
            op_think th;
            op_think_split(t, tl, 1, 1, &th);
            size_t m = op_tool_start(t, th.c0, tl, NULL);
            json_t *calls = m < tl ? op_tool_parse(t, m, tl, "f") : NULL;
            json_decref(calls);
        }
        free(out);
    }
    json_decref(req);
    return 0;
}
