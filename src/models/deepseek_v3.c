/* deepseek_v3.c — the DEEPSEEK_V3 family (model_type "deepseek_v3"): MLA attention and
 * DeepSeek MoE after first_k_dense_replace dense SwiGLU layers; q_lora_rank optional.
 * Tensors, cache and forward are the shared DeepSeek decoder (deepseek.c) without the
 * indexer; it serves with batched decode steps and prefix reuse (latent rows), on the CPU
 * or the CUDA backend (--device cuda). */
#include "deepseek.h"

static int dsv3_load(ci_model *m, char *err, size_t errlen) { return ds_load(m, 0, err, errlen); }

static const ci_family_ops dsv3_ops = {
    .load = dsv3_load, .unload = ds_unload,
    .session_init = ds_session_init, .session_free = ds_session_free, .pool_init = ds_pool_init,
    .forward = ds_forward, .cache_bytes_per_token = ds_cache_bytes_per_token,
    .forward_argmax = ds_forward_argmax,
    .forward_batch = ds_forward_batch, .forward_batch_argmax = ds_forward_batch_argmax, .cache_export = ds_cache_export, .cache_import = ds_cache_import,
};

const ci_family fam_deepseek_v3 = { "deepseek_v3", (const char *const[]){ "deepseek_v3", NULL }, NULL, &dsv3_ops, CI_CUDA_YES, 1, 0 };
