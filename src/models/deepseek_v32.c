/* deepseek_v32.c — the DEEPSEEK_V32 family (model_type "deepseek_v32", alias "deepseek_v3_2"):
 * the DeepSeek V3 decoder whose attention is DeepSeek Sparse Attention (nn/dsa.h): a lightning
 * indexer per layer (wq_b from the shared q latent, wk, k_norm LayerNorm, weights_proj) picks
 * index_topk keys per query and MLA attends over those only. Tensors, the dual cache (latent
 * + indexer keys), forward, batched decode steps and prefix reuse are the shared DeepSeek
 * decoder (deepseek.c) with the indexer, on the CPU or the CUDA backend. */
#include "deepseek.h"

static int dsv32_load(ci_model *m, char *err, size_t errlen) { return ds_load(m, 1, err, errlen); }

static const ci_family_ops dsv32_ops = {
    .load = dsv32_load, .unload = ds_unload,
    .session_init = ds_session_init, .session_free = ds_session_free, .pool_init = ds_pool_init,
    .forward = ds_forward, .cache_bytes_per_token = ds_cache_bytes_per_token,
    .forward_argmax = ds_forward_argmax, .forward_batch = ds_forward_batch, .forward_batch_argmax = ds_forward_batch_argmax,
    .cache_export = ds_cache_export, .cache_import = ds_cache_import,
};

const ci_family fam_deepseek_v32 = { "deepseek_v32", (const char *const[]){ "deepseek_v32", "deepseek_v3_2", NULL }, NULL,
                                     &dsv32_ops, CI_CUDA_YES, 1, 0 };
