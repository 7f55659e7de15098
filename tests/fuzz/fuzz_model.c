/* fuzz_model.c — libFuzzer target for the whole load path: config.json + model.safetensors
 * through ci_model_open (config, safetensors, the family's loader), then a session and a
 * short forward pass on whatever was accepted.
 *
 * Input framing: a 4-byte little-endian length C, C bytes of config.json text, then the
 * bytes of model.safetensors (the rest of the input). Inputs whose prefix does not fit are
 * dropped. Both files are written into one temp dir per process (ci_model_open reads a
 * folder); the dir is removed at exit.
 *
 * Every failure must leave a one-line, non-empty message (the API's promise); a crash,
 * leak, UB report, hang or huge allocation is a finding. The session is kept small
 * (max_ctx 8) so its caches follow from validated shapes, not from the config's
 * max_position_embeddings. */
#include "cinfer.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *buf, size_t size);

static char dir[64], cfg_path[128], st_path[128];

static void cleanup(void) {
    if (!dir[0]) return;
    unlink(cfg_path);
    unlink(st_path);
    rmdir(dir);
}

static int write_file(const char *path, const uint8_t *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = n ? fwrite(p, 1, n, f) : 0;
    return fclose(f) || w != n ? -1 : 0;
}

/* The API promises one non-empty line naming what is at fault. */
static void check_err(const char *err) {
    if (!err[0] || strchr(err, '\n')) __builtin_trap();
    if (getenv("FUZZ_MODEL_VERBOSE")) fprintf(stderr, "fuzz_model: %s\n", err);
}

int LLVMFuzzerTestOneInput(const uint8_t *buf, size_t size) {
    if (!dir[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/fuzz_model.XXXXXX", tmp && strlen(tmp) < 32 ? tmp : "/tmp");
        if (!mkdtemp(dir)) { perror("fuzz_model: mkdtemp"); abort(); }
        snprintf(cfg_path, sizeof cfg_path, "%s/config.json", dir);
        snprintf(st_path, sizeof st_path, "%s/model.safetensors", dir);
        atexit(cleanup);
    }
    if (size < 4) return 0;
    size_t c = (size_t)buf[0] | (size_t)buf[1] << 8 | (size_t)buf[2] << 16 | (size_t)buf[3] << 24;
    if (c > size - 4) return 0;
    if (write_file(cfg_path, buf + 4, c) || write_file(st_path, buf + 4 + c, size - 4 - c)) {
        perror("fuzz_model: writing the model folder");
        abort();
    }

    char err[1024] = "";
    ci_model_opts opts = { .n_threads = 1, .isa = 0 };
    ci_model *m = NULL;
    if (ci_model_open(dir, &opts, &m, err, sizeof err)) {
        if (m) __builtin_trap();
        check_err(err);
        return 0;
    }
    ci_model_info info;
    ci_model_get_info(m, &info);
    if (info.vocab_size <= 0) __builtin_trap();
    volatile size_t cache = ci_model_cache_bytes(m, 8); /* UBSan sees the sizing arithmetic */
    (void)cache;
    if (getenv("FUZZ_MODEL_VERBOSE")) fprintf(stderr, "fuzz_model: loaded %s (%s), vocab %d\n", info.family, info.model_type, info.vocab_size);

    ci_session *s = NULL;
    err[0] = 0;
    if (ci_session_new(m, 8, &s, err, sizeof err)) {
        check_err(err);
        ci_model_free(m);
        return 0;
    }
    int v = info.vocab_size;
    int toks[4] = { 0, v - 1, v / 2, 1 % v };
    float *logits = malloc((size_t)4 * (size_t)v * sizeof *logits);
    if (!logits) abort();
    err[0] = 0;
    if (ci_forward(s, toks, 3, logits, 1, err, sizeof err)) check_err(err);     /* prefill, all rows */
    else if (ci_forward(s, toks + 3, 1, logits, 0, err, sizeof err)) check_err(err); /* one decode step */
    free(logits);
    ci_session_free(s);
    ci_model_free(m);
    return 0;
}
