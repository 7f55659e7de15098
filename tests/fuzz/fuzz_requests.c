/* fuzz_requests.c — libFuzzer target for the server's request handling (src/server/api.c):
 * validation of every field, the chat template rendering of the messages, Anthropic's
 * conversion (tool_use / tool_result, tools, tool_choice), the Responses API's translation
 * (input items, flat tools, text.format, previous_response_id), logit_bias, response_format,
 * stop strings, the prompt against the context, up to the engine parameters, without
 * generating (api_prepare).
 *
 * Input: one byte choosing the route (chat completions, completions, messages, responses), then the
 * request body, parsed as the HTTP layer parses it. The server runs the embedded demo
 * model (found from the executable's path, as `cinfer serve` finds it) with a 256-token
 * context. Nothing is checked beyond "no crash, no sanitizer report, no leak". */
#include "server/srv_internal.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *buf, size_t size);

static srv *S;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc; (void)argv;
    srv_opts o = { 0 };
    o.parallel = 1;
    o.ctx = 256;
    o.queue_max = 0;
    o.prefix_cache_mb = 0;
    o.threads = 1;
    char err[1024];
    if (srv_start(&o, &S, err, sizeof err)) {
        fprintf(stderr, "fuzz_requests: %s\n", err);
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *buf, size_t size) {
    if (size < 1 || size > 65536) return 0;
    json_t *req = json_loadb((const char *)buf + 1, size - 1, JSON_REJECT_DUPLICATES, NULL);
    if (!req) return 0;
    if (json_is_object(req)) {
        char err[256];
        int n = 0;
        api_prepare(S, buf[0] % 4, req, &n, err, sizeof err);
    }
    json_decref(req);
    return 0;
}
