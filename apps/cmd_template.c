/* cmd_template.c — the `cinfer template` command (see cmd_template.h).
 *
 * Owns only argument handling and output: the rendering is src/text/template.c, the same
 * code the server will call. Invariants: stdout receives the prompt bytes and nothing else;
 * every failure is exactly one line on stderr; the exit status is 0, 1 (bad input, a
 * template error or refusal) or 2 (usage). */
#include "cmd_template.h"
#include "io/json.h"
#include "text/template.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *TEMPLATE_USAGE = "usage: cinfer template --model DIR --request F.json [--chat-template FILE]\n";

static int fail(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(int code, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fputs("cinfer: template: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return code;
}

int cmd_template(int argc, char **argv) {
    const char *model = NULL, *request = NULL, *tpl = NULL;
    int i = 0;
    if (argc > 0 && !strcmp(argv[0], "template")) i = 1;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) { fputs(TEMPLATE_USAGE, stdout); return 0; }
        const char **slot = !strcmp(a, "--model") ? &model : !strcmp(a, "--request") ? &request
                          : !strcmp(a, "--chat-template") ? &tpl : NULL;
        if (!slot) return fail(2, "unknown option '%s' (usage: cinfer template --model DIR --request F.json [--chat-template FILE])", a);
        if (*slot) return fail(2, "option %s given twice", a);
        if (i + 1 >= argc) return fail(2, "option %s needs a value", a);
        *slot = argv[++i];
    }
    if (!model) return fail(2, "option --model is required (usage: cinfer template --model DIR --request F.json)");
    if (!request) return fail(2, "option --request is required (usage: cinfer template --model DIR --request F.json)");

    char err[2048];
    json_t *req = cj_load_file(request, err, sizeof err);
    if (!req) return fail(1, "%s", err);
    char *out = NULL;
    size_t len = 0;
    int rc = tpl_render_request(model, tpl, req, &out, &len, err, sizeof err);
    json_decref(req);
    if (rc == TPL_RAISED) return fail(1, "the chat template refused the request: %s", err);
    if (rc) return fail(1, "%s", err);
    int bad = fwrite(out, 1, len, stdout) != len;
    free(out);
    if (fflush(stdout) || bad) return fail(1, "cannot write the prompt to stdout");
    return 0;
}
