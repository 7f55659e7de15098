/* generate.c — the smallest program on libcinfer: open a model, stream a greedy
 * generation through a callback, free everything.
 *
 *   cc generate.c $(pkg-config --cflags --libs cinfer) -o generate
 *   ./generate MODEL_DIR "The prompt" [MAX_TOKENS [cpu|cuda|auto]]
 *
 * Prints the generated text as it comes, then a newline: the same bytes as
 * `cinfer generate --model MODEL_DIR --prompt "The prompt" --max-tokens MAX_TOKENS`
 * (greedy by default). Errors are one line on stderr and exit status 1. */
#include <cinfer.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Each piece is complete UTF-8; returning non-zero would stop the generation. */
static int print_piece(void *ctx, const char *text, size_t len) {
    FILE *out = ctx;
    fwrite(text, 1, len, out);
    fflush(out);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3 || argc > 5) {
        fprintf(stderr, "usage: %s MODEL_DIR PROMPT [MAX_TOKENS [cpu|cuda|auto]]  (libcinfer %s)\n", argv[0],
                ci_version());
        return 2;
    }
    int max_tokens = argc >= 4 ? atoi(argv[3]) : 64;
    char err[1024];
    ci_model *m = NULL;
    ci_session *s = NULL;
    ci_model_opts mo = { 0 };           /* zeroed: the CPU, all cores */
    if (argc == 5) mo.device = !strcmp(argv[4], "cuda") ? 1 : !strcmp(argv[4], "auto") ? 2 : 0;
    ci_sampler_opts so;
    ci_sampler_defaults(&so);           /* greedy */
    int rc = 1, n = 0;
    if (ci_model_open(argv[1], &mo, &m, err, sizeof err)) goto fail;
    /* The session's context must hold the prompt and the generated tokens; 4096 is plenty
     * for a short prompt (the cache is sized for it once, here). */
    if (ci_session_new(m, 4096 < max_tokens + 1024 ? max_tokens + 1024 : 4096, &s, err, sizeof err)) goto fail;
    if (ci_generate_text(s, argv[2], max_tokens, &so, print_piece, stdout, &n, err, sizeof err)) goto fail;
    putchar('\n');
    rc = 0;
    goto done;
fail:
    fprintf(stderr, "generate: %s\n", err);
done:
    ci_session_free(s);
    ci_model_free(m);
    return rc;
}
