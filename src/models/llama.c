/* llama.c — the LLAMA family (model_type "llama"): the dense GQA baseline.
 * Tensors and forward are the shared dense decoder (dense.c) without q/k norms; rope
 * scaling (llama3, yarn, linear) comes from the config. */
#include "dense.h"

static int llama_load(ci_model *m, char *err, size_t errlen) {
    dense_opts o = { .qk_norm = 0 };
    return dense_load(m, &o, err, errlen);
}

static const ci_family_ops llama_ops = {
    .load = llama_load, .unload = dense_unload,
    .session_init = dense_session_init, .session_free = dense_session_free, .pool_init = dense_pool_init,
    .forward = dense_forward, .cache_bytes_per_token = dense_cache_bytes_per_token,
    .forward_batch = dense_forward_batch, .cache_export = dense_cache_export, .cache_import = dense_cache_import,
    .forward_argmax = dense_forward_argmax, .forward_batch_argmax = dense_forward_batch_argmax,
};

const ci_family fam_llama = { "llama", (const char *const[]){ "llama", NULL }, NULL, &llama_ops, 1, 1, 1 };
