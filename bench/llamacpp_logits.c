/* llamacpp_logits.c — the logits llama.cpp computes for a list of token ids, for the GGUF parity
 * check of bench/make_bf16_gguf.py (bench/gguf_parity.sh): the same random weights through both
 * engines, `cinfer logits` against this, row by row.
 *
 *   llamacpp_logits MODEL.gguf 1,2,3 OUT.f32 [THREADS]
 *
 * One llama_decode of all the ids at positions 0..T-1 in one sequence, every row's logits kept;
 * OUT gets [T, n_vocab] float32, the layout `cinfer logits --out` writes. Built against a llama.cpp
 * build tree by bench/gguf_parity.sh (include/ + ggml/include/, -lllama); never committed with it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static void quiet(enum ggml_log_level level, const char *text, void *ud) {
    (void)ud;
    if (level >= GGML_LOG_LEVEL_ERROR) fputs(text, stderr);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s MODEL.gguf ID,ID,... OUT.f32 [THREADS]\n", argv[0]);
        return 2;
    }
    int nt = argc > 4 ? atoi(argv[4]) : 2;
    int cap = 16, n = 0;
    llama_token *ids = malloc(cap * sizeof *ids);
    for (char *p = argv[2]; *p;) {
        char *e;
        long v = strtol(p, &e, 10);
        if (e == p) { fprintf(stderr, "bad token list at '%s'\n", p); return 2; }
        if (n == cap) ids = realloc(ids, (cap *= 2) * sizeof *ids);
        ids[n++] = (llama_token)v;
        p = *e == ',' ? e + 1 : e;
    }
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    struct llama_model *m = llama_model_load_from_file(argv[1], mp);
    if (!m) { fprintf(stderr, "cannot load %s\n", argv[1]); return 1; }
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = (uint32_t)(n + 64);
    cp.n_batch = cp.n_ubatch = (uint32_t)n;
    cp.n_threads = cp.n_threads_batch = nt;
    cp.type_k = cp.type_v = GGML_TYPE_F32; /* the default f16 cache would round K and V */
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED; /* CPU flash attention takes Q in f16 */
    struct llama_context *c = llama_init_from_model(m, cp);
    if (!c) { fprintf(stderr, "cannot make a context\n"); return 1; }
    struct llama_batch b = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        b.token[i] = ids[i];
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = 1;
    }
    b.n_tokens = n;
    if (llama_decode(c, b)) { fprintf(stderr, "llama_decode failed\n"); return 1; }
    int V = llama_vocab_n_tokens(llama_model_get_vocab(m));
    FILE *f = fopen(argv[3], "wb");
    if (!f) { perror(argv[3]); return 1; }
    for (int i = 0; i < n; i++) fwrite(llama_get_logits_ith(c, i), sizeof(float), (size_t)V, f);
    fclose(f);
    printf("%d rows x %d logits -> %s\n", n, V, argv[3]);
    llama_batch_free(b);
    llama_free(c);
    llama_model_free(m);
    free(ids);
    return 0;
}
