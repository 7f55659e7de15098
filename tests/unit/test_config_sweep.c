/* test_config_sweep.c — every family over a grid of random-weight configs that push one size
 * against another (index_topk against the entries a session holds, windows against the
 * context and the 256-row micro-batch, conv kernels against the context, top-k against the
 * expert count, head dims and widths that are not multiples of the SIMD width), each run in
 * sessions of 1, 2, 7, 40 and 300 tokens:
 *   - the whole prompt in one call (300 rows span two micro-batches) equals one token at a
 *     time and an uneven split into calls (max|diff| < 1e-4, f32 weights), and its last row
 *     the same call asked for the last logits only (bit for bit); logits finite;
 *     again with the AVX2 kernels on 3 threads where the CPU has AVX2;
 *   - a token past max_ctx, and a prompt of max_ctx + 1, are refused naming the family;
 *   - where the family has them: one forward_batch step of sessions at position 0, mid-way
 *     and one short of max_ctx equals the single steps bit for bit, also with sessions of
 *     different max_ctx (the shortest first) and with more sessions than a micro-batch; a
 *     snapshot (or exported rows) carried into a session of exactly P + 1 tokens continues
 *     the same, and into one of P - 1 tokens is refused.
 * Buffers sized from one config quantity and indexed by another show up here (under ASan as
 * the overflow, in release as differing logits). */
#include "check.h"
#include "tmpmodel.h"
#include "cinfer.h"
#include "cache/cache.h"
#include "models/model.h"
#include <jansson.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int ctxs[] = { 1, 2, 7, 40, 300 };
enum { N_CTX = sizeof ctxs / sizeof ctxs[0], MAXT = 300 };

/* ---- configs: a base per family, and edges as JSON overrides of it ---------------------- */

#define LLAMA_BASE                                                                                         \
    "{\"model_type\": \"llama\", \"vocab_size\": 67, \"hidden_size\": 40, \"num_hidden_layers\": 2, "        \
    "\"num_attention_heads\": 5, \"num_key_value_heads\": 1, \"head_dim\": 8, \"intermediate_size\": 72, "   \
    "\"rms_norm_eps\": 1e-6, \"rope_theta\": 10000.0, \"max_position_embeddings\": 4096, "                   \
    "\"tie_word_embeddings\": false}"

#define QWEN3_BASE                                                                                         \
    "{\"model_type\": \"qwen3\", \"vocab_size\": 61, \"hidden_size\": 24, \"num_hidden_layers\": 2, "        \
    "\"num_attention_heads\": 6, \"num_key_value_heads\": 2, \"head_dim\": 24, \"intermediate_size\": 40, "  \
    "\"rms_norm_eps\": 1e-6, \"rope_theta\": 1000000.0, \"max_position_embeddings\": 4096, "                 \
    "\"tie_word_embeddings\": true}"

#define QWEN3_MOE_BASE                                                                                     \
    "{\"model_type\": \"qwen3_moe\", \"vocab_size\": 61, \"hidden_size\": 40, \"num_hidden_layers\": 2, "    \
    "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 24, \"intermediate_size\": 56, "  \
    "\"moe_intermediate_size\": 20, \"num_experts\": 4, \"num_experts_per_tok\": 4, "                        \
    "\"norm_topk_prob\": true, \"decoder_sparse_step\": 1, \"mlp_only_layers\": [], "                        \
    "\"rms_norm_eps\": 1e-6, \"rope_theta\": 1000000.0, \"max_position_embeddings\": 4096}"

#define DSV3_BASE                                                                                          \
    "{\"model_type\": \"deepseek_v3\", \"vocab_size\": 67, \"hidden_size\": 40, \"num_hidden_layers\": 2, "  \
    "\"num_attention_heads\": 3, \"num_key_value_heads\": 3, \"q_lora_rank\": 24, \"kv_lora_rank\": 20, "    \
    "\"qk_nope_head_dim\": 12, \"qk_rope_head_dim\": 4, \"v_head_dim\": 20, \"intermediate_size\": 56, "     \
    "\"moe_intermediate_size\": 24, \"n_routed_experts\": 4, \"num_experts_per_tok\": 4, "                   \
    "\"n_shared_experts\": 1, \"n_group\": 1, \"topk_group\": 1, \"first_k_dense_replace\": 1, "             \
    "\"norm_topk_prob\": true, \"routed_scaling_factor\": 2.5, \"rms_norm_eps\": 1e-6, "                     \
    "\"rope_theta\": 10000.0, \"max_position_embeddings\": 4096}"

#define DSV32_BASE                                                                                         \
    "{\"model_type\": \"deepseek_v32\", \"vocab_size\": 67, \"hidden_size\": 40, \"num_hidden_layers\": 2, " \
    "\"num_attention_heads\": 3, \"num_key_value_heads\": 3, \"q_lora_rank\": 24, \"kv_lora_rank\": 20, "    \
    "\"qk_nope_head_dim\": 12, \"qk_rope_head_dim\": 4, \"v_head_dim\": 20, \"intermediate_size\": 56, "     \
    "\"moe_intermediate_size\": 24, \"n_routed_experts\": 4, \"num_experts_per_tok\": 2, "                   \
    "\"n_shared_experts\": 1, \"n_group\": 2, \"topk_group\": 1, \"first_k_dense_replace\": 1, "             \
    "\"norm_topk_prob\": true, \"routed_scaling_factor\": 2.5, \"rms_norm_eps\": 1e-6, "                     \
    "\"index_n_heads\": 3, \"index_head_dim\": 12, \"index_topk\": 5, "                                      \
    "\"rope_theta\": 10000.0, \"max_position_embeddings\": 4096}"

#define DSV4_BASE                                                                                          \
    "{\"model_type\": \"deepseek_v4\", \"vocab_size\": 67, \"hidden_size\": 40, \"num_hidden_layers\": 3, "  \
    "\"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"head_dim\": 24, \"q_lora_rank\": 20, "        \
    "\"qk_rope_head_dim\": 4, \"moe_intermediate_size\": 12, \"n_routed_experts\": 4, "                      \
    "\"num_experts_per_tok\": 2, \"n_shared_experts\": 1, \"routed_scaling_factor\": 1.5, "                  \
    "\"hc_mult\": 3, \"sliding_window\": 5, \"o_groups\": 2, \"o_lora_rank\": 8, \"index_n_heads\": 3, "     \
    "\"index_head_dim\": 12, \"index_topk\": 3, \"rms_norm_eps\": 1e-6, \"rope_theta\": 10000.0, "           \
    "\"max_position_embeddings\": 4096, \"swiglu_limit\": 1.0, "                                             \
    "\"layer_types\": [\"compressed_sparse_attention\", \"sliding_attention\", "                             \
    "\"heavily_compressed_attention\"], \"compress_rates\": {\"compressed_sparse_attention\": 4, "           \
    "\"heavily_compressed_attention\": 128}, \"mlp_layer_types\": [\"hash_moe\", \"moe\", \"moe\"]}"

#define QWEN3_NEXT_BASE                                                                                    \
    "{\"model_type\": \"qwen3_next\", \"vocab_size\": 61, \"hidden_size\": 40, \"num_hidden_layers\": 2, "   \
    "\"layer_types\": [\"linear_attention\", \"full_attention\"], \"num_attention_heads\": 3, "              \
    "\"num_key_value_heads\": 1, \"head_dim\": 24, \"intermediate_size\": 56, "                              \
    "\"linear_conv_kernel_dim\": 4, \"linear_key_head_dim\": 24, \"linear_num_key_heads\": 1, "              \
    "\"linear_num_value_heads\": 3, \"linear_value_head_dim\": 20, \"moe_intermediate_size\": 12, "          \
    "\"num_experts\": 4, \"num_experts_per_tok\": 4, \"shared_expert_intermediate_size\": 20, "              \
    "\"norm_topk_prob\": true, \"decoder_sparse_step\": 1, \"partial_rotary_factor\": 0.25, "                \
    "\"rms_norm_eps\": 1e-6, \"rope_theta\": 10000.0, \"max_position_embeddings\": 4096}"

#define QWEN3_5_BASE                                                                                       \
    "{\"model_type\": \"qwen3_5_text\", \"vocab_size\": 61, \"hidden_size\": 40, \"num_hidden_layers\": 3, " \
    "\"layer_types\": [\"linear_attention\", \"full_attention\", \"linear_attention\"], "                    \
    "\"num_attention_heads\": 2, \"num_key_value_heads\": 2, \"head_dim\": 40, \"intermediate_size\": 56, "  \
    "\"linear_conv_kernel_dim\": 4, \"linear_key_head_dim\": 8, \"linear_num_key_heads\": 2, "               \
    "\"linear_num_value_heads\": 4, \"linear_value_head_dim\": 12, \"partial_rotary_factor\": 0.25, "        \
    "\"rms_norm_eps\": 1e-6, \"rope_theta\": 10000.0, \"max_position_embeddings\": 4096}"

#define QWEN3_5_MOE_BASE                                                                                   \
    "{\"model_type\": \"qwen3_5_moe_text\", \"vocab_size\": 61, \"hidden_size\": 24, \"num_hidden_layers\": 2, " \
    "\"layer_types\": [\"linear_attention\", \"full_attention\"], \"num_attention_heads\": 3, "              \
    "\"num_key_value_heads\": 1, \"head_dim\": 24, \"linear_conv_kernel_dim\": 4, "                          \
    "\"linear_key_head_dim\": 12, \"linear_num_key_heads\": 2, \"linear_num_value_heads\": 2, "              \
    "\"linear_value_head_dim\": 20, \"moe_intermediate_size\": 12, \"num_experts\": 5, "                     \
    "\"num_experts_per_tok\": 5, \"shared_expert_intermediate_size\": 20, \"partial_rotary_factor\": 0.25, "  \
    "\"rms_norm_eps\": 1e-6, \"rope_theta\": 10000.0, \"max_position_embeddings\": 4096}"

#define LFM2_BASE                                                                                          \
    "{\"model_type\": \"lfm2\", \"vocab_size\": 61, \"hidden_size\": 40, \"num_hidden_layers\": 3, "         \
    "\"layer_types\": [\"conv\", \"full_attention\", \"conv\"], \"num_attention_heads\": 5, "                \
    "\"num_key_value_heads\": 1, \"intermediate_size\": 72, \"block_auto_adjust_ff_dim\": false, "           \
    "\"conv_L_cache\": 3, \"conv_bias\": false, \"norm_eps\": 1e-5, \"rope_theta\": 10000.0, "               \
    "\"max_position_embeddings\": 4096, \"tie_word_embeddings\": true}"

#define LFM2_MOE_BASE                                                                                      \
    "{\"model_type\": \"lfm2_moe\", \"vocab_size\": 61, \"hidden_size\": 40, \"num_hidden_layers\": 3, "     \
    "\"layer_types\": [\"conv\", \"full_attention\", \"conv\"], \"num_attention_heads\": 5, "                \
    "\"num_key_value_heads\": 5, \"intermediate_size\": 56, \"moe_intermediate_size\": 12, "                 \
    "\"num_experts\": 4, \"num_experts_per_tok\": 4, \"num_dense_layers\": 1, \"norm_topk_prob\": true, "     \
    "\"use_expert_bias\": true, \"routed_scaling_factor\": 1.0, \"conv_L_cache\": 3, \"conv_bias\": false, " \
    "\"norm_eps\": 1e-5, \"rope_theta\": 1000000.0, \"max_position_embeddings\": 4096}"

#define NEMH_BASE                                                                                          \
    "{\"model_type\": \"nemotron_h\", \"vocab_size\": 61, \"hidden_size\": 40, \"num_hidden_layers\": 4, "   \
    "\"layers_block_type\": [\"mamba\", \"attention\", \"moe\", \"mlp\"], \"num_attention_heads\": 5, "      \
    "\"num_key_value_heads\": 1, \"head_dim\": 8, \"intermediate_size\": 56, \"mamba_num_heads\": 6, "       \
    "\"mamba_head_dim\": 12, \"n_groups\": 2, \"ssm_state_size\": 12, \"conv_kernel\": 4, "                  \
    "\"chunk_size\": 64, \"expand\": 2, \"use_conv_bias\": true, \"n_routed_experts\": 4, "                  \
    "\"num_experts_per_tok\": 2, \"moe_intermediate_size\": 12, "                                            \
    "\"moe_shared_expert_intermediate_size\": 20, \"n_group\": 1, \"topk_group\": 1, "                       \
    "\"routed_scaling_factor\": 1.5, \"norm_topk_prob\": true, \"layer_norm_epsilon\": 1e-5, "               \
    "\"time_step_limit\": [0.0, 1e30], \"mlp_hidden_act\": \"relu2\", \"max_position_embeddings\": 4096}"

typedef struct {
    const char *name;
    const char *base;
    const char *over;       /* JSON object merged over base ("{}": none) */
} sweep_cfg;

static const sweep_cfg llama_cfgs[] = {
    { "llama gqa5 hd8 dim40", LLAMA_BASE, "{}" },
    { "llama mha hd from dim 24/3", LLAMA_BASE,
      "{\"hidden_size\": 24, \"num_attention_heads\": 3, \"num_key_value_heads\": 3, \"head_dim\": null, \"intermediate_size\": 40}" },
    { "llama hd40 one kv head", LLAMA_BASE, "{\"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"head_dim\": 40}" },
    { "llama hd24 q width > dim, tied", LLAMA_BASE,
      "{\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 24, \"tie_word_embeddings\": true, \"vocab_size\": 300}" },
    { "llama hd6 odd ff", LLAMA_BASE, "{\"num_attention_heads\": 3, \"num_key_value_heads\": 1, \"head_dim\": 6, \"intermediate_size\": 33}" },
    { "llama dim 8 hd2 one head ff 1 one layer", LLAMA_BASE,
      "{\"hidden_size\": 8, \"num_attention_heads\": 1, \"num_key_value_heads\": 1, \"head_dim\": 2, \"intermediate_size\": 1, \"num_hidden_layers\": 1, \"vocab_size\": 3}" },
    { "llama hd 136 (> 128) gqa2 llama3 rope", LLAMA_BASE,
      "{\"num_attention_heads\": 2, \"num_key_value_heads\": 1, \"head_dim\": 136, \"rope_parameters\": {\"rope_type\": \"llama3\", \"rope_theta\": 500000.0, "
      "\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 16}}" },
    { NULL, NULL, NULL },
};

static const sweep_cfg qwen3_cfgs[] = {
    { "qwen3 gqa3 hd24 dim24", QWEN3_BASE, "{}" },
    { "qwen3 one head hd40", QWEN3_BASE, "{\"hidden_size\": 40, \"num_attention_heads\": 1, \"num_key_value_heads\": 1, \"head_dim\": 40}" },
    { "qwen3 hd20 kv6", QWEN3_BASE, "{\"num_key_value_heads\": 6, \"head_dim\": 20, \"tie_word_embeddings\": false}" },
    { "qwen3 hd2 many heads", QWEN3_BASE, "{\"num_attention_heads\": 16, \"num_key_value_heads\": 4, \"head_dim\": 2}" },
    { NULL, NULL, NULL },
};

static const sweep_cfg qwen3_moe_cfgs[] = {
    { "qwen3_moe top-k == experts", QWEN3_MOE_BASE, "{}" },
    { "qwen3_moe top-1 of 6", QWEN3_MOE_BASE, "{\"num_experts\": 6, \"num_experts_per_tok\": 1, \"norm_topk_prob\": false}" },
    { "qwen3_moe one expert, dense layer 1", QWEN3_MOE_BASE, "{\"num_experts\": 1, \"num_experts_per_tok\": 1, \"mlp_only_layers\": [1]}" },
    { NULL, NULL, NULL },
};

static const sweep_cfg dsv3_cfgs[] = {
    { "deepseek_v3 top-k == experts", DSV3_BASE, "{}" },
    { "deepseek_v3 top-1, groups", DSV3_BASE, "{\"n_routed_experts\": 6, \"num_experts_per_tok\": 1, \"n_group\": 3, \"topk_group\": 1}" },
    { "deepseek_v3 no q lora, no shared", DSV3_BASE, "{\"q_lora_rank\": null, \"n_shared_experts\": 0, \"first_k_dense_replace\": 0}" },
    { "deepseek_v3 top-k == experts over groups, kv_lora 1, rope 2", DSV3_BASE,
      "{\"n_routed_experts\": 6, \"num_experts_per_tok\": 6, \"n_group\": 3, \"topk_group\": 3, \"kv_lora_rank\": 1, \"qk_rope_head_dim\": 2, \"qk_nope_head_dim\": 1, \"v_head_dim\": 3}" },
    { "deepseek_v3 yarn, v 40, one head", DSV3_BASE,
      "{\"num_attention_heads\": 1, \"v_head_dim\": 40, \"qk_nope_head_dim\": 36, \"rope_parameters\": {\"rope_type\": \"yarn\", \"rope_theta\": 10000.0, \"factor\": 8.0, "
      "\"beta_fast\": 32.0, \"beta_slow\": 1.0, \"mscale\": 1.0, \"mscale_all_dim\": 1.0, \"original_max_position_embeddings\": 16}}" },
    { NULL, NULL, NULL },
};

static const sweep_cfg dsv32_cfgs[] = {
    { "deepseek_v32 index_topk 5", DSV32_BASE, "{}" },
    { "deepseek_v32 index_topk 1", DSV32_BASE, "{\"index_topk\": 1}" },
    { "deepseek_v32 index_topk 64 (> 40, < 300)", DSV32_BASE, "{\"index_topk\": 64}" },
    { "deepseek_v32 index_topk 257", DSV32_BASE, "{\"index_topk\": 257}" },
    { "deepseek_v32 index_topk 256", DSV32_BASE, "{\"index_topk\": 256}" },
    { "deepseek_v32 index_topk 255", DSV32_BASE, "{\"index_topk\": 255}" },
    { "deepseek_v32 index_topk 2, index_head_dim == rope, one index head", DSV32_BASE,
      "{\"index_topk\": 2, \"index_head_dim\": 4, \"index_n_heads\": 1}" },
    { "deepseek_v32 index_topk 40, index dims 40 x 7 heads", DSV32_BASE,
      "{\"index_topk\": 40, \"index_head_dim\": 40, \"index_n_heads\": 7}" },
    { "deepseek_v32 index_topk 2048", DSV32_BASE, "{\"index_topk\": 2048, \"num_experts_per_tok\": 4, \"n_group\": 1}" },
    { NULL, NULL, NULL },
};

static const sweep_cfg dsv4_cfgs[] = {
    { "deepseek_v4 csa4 hca128 window5 topk3", DSV4_BASE, "{}" },
    { "deepseek_v4 index_topk 1000 (>> entries)", DSV4_BASE, "{\"index_topk\": 1000}" },
    { "deepseek_v4 index_topk 70 window 300 hc1", DSV4_BASE, "{\"index_topk\": 70, \"sliding_window\": 300, \"hc_mult\": 1}" },
    { "deepseek_v4 window 257 hc4 o_groups4 all hash", DSV4_BASE,
      "{\"sliding_window\": 257, \"hc_mult\": 4, \"o_groups\": 4, \"mlp_layer_types\": null, \"num_hash_layers\": 3}" },
    { "deepseek_v4 window 1 hc2 o_groups1 no hash", DSV4_BASE,
      "{\"sliding_window\": 1, \"hc_mult\": 2, \"o_groups\": 1, \"mlp_layer_types\": null, \"num_hash_layers\": 0, \"index_topk\": 1}" },
    { "deepseek_v4 csa128 hca4 topk 2", DSV4_BASE,
      "{\"compress_rates\": {\"compressed_sparse_attention\": 128, \"heavily_compressed_attention\": 4}, \"index_topk\": 2}" },
    { "deepseek_v4 csa2 hca3 top-k == experts", DSV4_BASE,
      "{\"compress_rates\": {\"compressed_sparse_attention\": 2, \"heavily_compressed_attention\": 3}, \"num_experts_per_tok\": 4, \"index_topk\": 9}" },
    { "deepseek_v4 csa1 hca1 topk 7", DSV4_BASE,
      "{\"compress_rates\": {\"compressed_sparse_attention\": 1, \"heavily_compressed_attention\": 1}, \"index_topk\": 7}" },
    { "deepseek_v4 csa4 hca128 window 256 topk 256", DSV4_BASE, "{\"sliding_window\": 256, \"index_topk\": 256}" },
    { "deepseek_v4 all sliding", DSV4_BASE,
      "{\"layer_types\": [\"sliding_attention\", \"sliding_attention\", \"sliding_attention\"], \"sliding_window\": 3}" },
    { "deepseek_v4 all HCA rate 2", DSV4_BASE,
      "{\"layer_types\": [\"heavily_compressed_attention\", \"heavily_compressed_attention\", \"heavily_compressed_attention\"], "
      "\"compress_rates\": {\"compressed_sparse_attention\": 4, \"heavily_compressed_attention\": 2}}" },
    { "deepseek_v4 rope == head_dim == index_head_dim, o_groups 48", DSV4_BASE,
      "{\"head_dim\": 12, \"qk_rope_head_dim\": 12, \"index_head_dim\": 12, \"o_groups\": 24, \"o_lora_rank\": 1, \"num_attention_heads\": 4}" },
    { "deepseek_v4 hub ratios 0/4/128, default hash layers", DSV4_BASE,
      "{\"layer_types\": null, \"compress_rates\": null, \"compress_ratios\": [4, 128, 0, 0], \"mlp_layer_types\": null, \"hc_mult\": 4}" },
    { "deepseek_v4 all CSA top-1 expert", DSV4_BASE,
      "{\"layer_types\": [\"compressed_sparse_attention\", \"compressed_sparse_attention\", \"compressed_sparse_attention\"], "
      "\"num_experts_per_tok\": 1, \"n_shared_experts\": 0, \"sliding_window\": 64, \"index_topk\": 16}" },
    { NULL, NULL, NULL },
};

static const sweep_cfg qnext_cfgs[] = {
    { "qwen3_next conv4 top-k == experts", QWEN3_NEXT_BASE, "{}" },
    { "qwen3_next conv2 top-1", QWEN3_NEXT_BASE, "{\"linear_conv_kernel_dim\": 2, \"num_experts_per_tok\": 1}" },
    { "qwen3_next conv3 dense layer 0", QWEN3_NEXT_BASE, "{\"linear_conv_kernel_dim\": 3, \"mlp_only_layers\": [0]}" },
    { "qwen3_next conv1 linear only", QWEN3_NEXT_BASE, "{\"linear_conv_kernel_dim\": 1, \"layer_types\": [\"linear_attention\", \"linear_attention\"]}" },
    { "qwen3_next full attention only", QWEN3_NEXT_BASE, "{\"layer_types\": [\"full_attention\", \"full_attention\"]}" },
    { NULL, NULL, NULL },
};

static const sweep_cfg q35_cfgs[] = {
    { "qwen3_5 conv4", QWEN3_5_BASE, "{}" },
    { "qwen3_5 conv2 dk24 dv40 one key head", QWEN3_5_BASE,
      "{\"linear_conv_kernel_dim\": 2, \"linear_key_head_dim\": 24, \"linear_value_head_dim\": 40, \"linear_num_key_heads\": 1, \"linear_num_value_heads\": 3}" },
    { "qwen3_5 conv3 hd24 gqa2", QWEN3_5_BASE, "{\"linear_conv_kernel_dim\": 3, \"head_dim\": 24, \"num_attention_heads\": 4}" },
    { "qwen3_5 conv1 dk 1 dv 1", QWEN3_5_BASE, "{\"linear_conv_kernel_dim\": 1, \"linear_key_head_dim\": 1, \"linear_value_head_dim\": 1}" },
    { "qwen3_5 dk 136 dv 72 (> 128)", QWEN3_5_BASE, "{\"linear_key_head_dim\": 136, \"linear_value_head_dim\": 72, \"linear_num_value_heads\": 2}" },
    { NULL, NULL, NULL },
};

static const sweep_cfg q35moe_cfgs[] = {
    { "qwen3_5_moe top-k == experts", QWEN3_5_MOE_BASE, "{}" },
    { "qwen3_5_moe top-1 conv2", QWEN3_5_MOE_BASE, "{\"num_experts_per_tok\": 1, \"linear_conv_kernel_dim\": 2}" },
    { "qwen3_5_moe one expert no shared", QWEN3_5_MOE_BASE, "{\"num_experts\": 1, \"num_experts_per_tok\": 1, \"shared_expert_intermediate_size\": 0}" },
    { NULL, NULL, NULL },
};

static const sweep_cfg lfm2_cfgs[] = {
    { "lfm2 L_cache 3 gqa5", LFM2_BASE, "{}" },
    { "lfm2 L_cache 2", LFM2_BASE, "{\"conv_L_cache\": 2, \"conv_bias\": true, \"num_key_value_heads\": 5}" },
    { "lfm2 L_cache 1", LFM2_BASE, "{\"conv_L_cache\": 1}" },
    { "lfm2 conv only L_cache 5", LFM2_BASE, "{\"conv_L_cache\": 5, \"layer_types\": [\"conv\", \"conv\", \"conv\"]}" },
    { "lfm2 attention only", LFM2_BASE, "{\"layer_types\": [\"full_attention\", \"full_attention\", \"full_attention\"]}" },
    { "lfm2 L_cache 4 dim24", LFM2_BASE,
      "{\"conv_L_cache\": 4, \"hidden_size\": 24, \"num_attention_heads\": 3, \"num_key_value_heads\": 1, \"intermediate_size\": 40}" },
    { NULL, NULL, NULL },
};

static const sweep_cfg lfm2_moe_cfgs[] = {
    { "lfm2_moe top-k == experts", LFM2_MOE_BASE, "{}" },
    { "lfm2_moe top-1 L_cache 2", LFM2_MOE_BASE, "{\"num_experts_per_tok\": 1, \"conv_L_cache\": 2, \"num_dense_layers\": 0}" },
    { "lfm2_moe all dense layers", LFM2_MOE_BASE, "{\"num_dense_layers\": 3}" },
    { "lfm2_moe L_cache 4 no bias", LFM2_MOE_BASE, "{\"conv_L_cache\": 4, \"use_expert_bias\": false, \"num_experts_per_tok\": 2}" },
    { NULL, NULL, NULL },
};

static const sweep_cfg nemh_cfgs[] = {
    { "nemotron_h groups2 conv4", NEMH_BASE, "{}" },
    { "nemotron_h groups1 conv2 chunk 1 top-k == experts", NEMH_BASE,
      "{\"n_groups\": 1, \"conv_kernel\": 2, \"chunk_size\": 1, \"num_experts_per_tok\": 4}" },
    { "nemotron_h groups6 conv3 top-1", NEMH_BASE,
      "{\"n_groups\": 6, \"conv_kernel\": 3, \"chunk_size\": 300, \"num_experts_per_tok\": 1, \"mamba_head_dim\": 5, \"ssm_state_size\": 7}" },
    { "nemotron_h conv1 state 1 head_dim 1", NEMH_BASE,
      "{\"conv_kernel\": 1, \"ssm_state_size\": 1, \"mamba_head_dim\": 1, \"n_groups\": 1}" },
    { "nemotron_h mamba only", NEMH_BASE,
      "{\"layers_block_type\": [\"mamba\", \"mamba\"], \"num_hidden_layers\": 2, \"mamba_head_dim\": 20, \"ssm_state_size\": 136}" },
    { "nemotron_h attention + moe only, top-k == experts over groups", NEMH_BASE,
      "{\"layers_block_type\": [\"attention\", \"moe\"], \"num_hidden_layers\": 2, \"n_routed_experts\": 6, \"num_experts_per_tok\": 6, \"n_group\": 3, \"topk_group\": 3}" },
    { "nemotron_h latent moe, groups 3", NEMH_BASE,
      "{\"n_groups\": 3, \"moe_latent_size\": 20, \"n_routed_experts\": 6, \"n_group\": 3, \"topk_group\": 2}" },
    { NULL, NULL, NULL },
};

/* ---- the checks ---------------------------------------------------------------------- */

static int n_fail;

#define SFAIL(...) do { n_fail++; printf("  "); printf(__VA_ARGS__); printf("\n"); CHECK(0, __VA_ARGS__); } while (0)

static double max_diff(const float *a, const float *b, size_t n) {
    double md = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= md)) md = isnan(d) ? INFINITY : d;
    }
    return md;
}

static int all_finite(const float *a, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(a[i])) return 0;
    return 1;
}

static int tok_at(int i, int salt, int V) { return (int)(((uint64_t)i * 2654435761u + (uint64_t)salt * 40503u + 7) % (uint64_t)V); }

/* Prefill in one call vs one token at a time vs uneven calls; the token past max_ctx. */
static void check_prefill(const char *name, ci_model *m, int T, const char *fam, int V) {
    char err[1024] = "";
    ci_session *s = NULL;
    if (ci_session_new(m, T, &s, err, sizeof err)) { SFAIL("%s ctx %d: session: %s", name, T, err); return; }
    int toks[MAXT + 1];
    for (int i = 0; i <= T; i++) toks[i] = tok_at(i, T, V);
    size_t nl = (size_t)T * V;
    float *a = malloc(nl * sizeof *a), *b = malloc(nl * sizeof *b), *c = malloc(nl * sizeof *c);
    if (ci_forward(s, toks, T, a, 1, err, sizeof err)) SFAIL("%s ctx %d: prefill: %s", name, T, err);
    else if (!all_finite(a, nl)) SFAIL("%s ctx %d: prefill logits not finite", name, T);
    else {
        ci_session_reset(s);
        int ok = 1;
        /* the last row only (the head on one row) */
        if (ci_forward(s, toks, T, c, 0, err, sizeof err)) { SFAIL("%s ctx %d: prefill, last logits: %s", name, T, err); ok = 0; }
        else if (memcmp(c, a + (size_t)(T - 1) * V, (size_t)V * sizeof *c))
            SFAIL("%s ctx %d: the last row's logits alone differ: max|diff| %g", name, T, max_diff(c, a + (size_t)(T - 1) * V, (size_t)V));
        ci_session_reset(s);
        for (int t = 0; t < T && ok; t++)
            if (ci_forward(s, &toks[t], 1, b + (size_t)t * V, 1, err, sizeof err)) {
                SFAIL("%s ctx %d: step %d: %s", name, T, t, err);
                ok = 0;
            }
        double md = ok ? max_diff(a, b, nl) : 0;
        if (ok && !(md < 1e-4)) SFAIL("%s ctx %d: prefill vs steps max|diff| %g", name, T, md);
        if (ok && T > 2) {   /* 1, then 2, then growing calls crossing the 256-row micro-batch */
            ci_session_reset(s);
            static const int chunk[] = { 1, 2, 254, 5, 17 };
            for (int at = 0, k = 0; at < T && ok; k++) {
                int n = chunk[k % 5] < T - at ? chunk[k % 5] : T - at;
                if (ci_forward(s, toks + at, n, c + (size_t)at * V, 1, err, sizeof err)) {
                    SFAIL("%s ctx %d: chunk at %d: %s", name, T, at, err);
                    ok = 0;
                }
                at += n;
            }
            md = ok ? max_diff(a, c, nl) : 0;
            if (ok && !(md < 1e-4)) SFAIL("%s ctx %d: prefill vs uneven calls max|diff| %g", name, T, md);
        }
        /* the session is full: one more token is refused, naming the family */
        err[0] = 0;
        if (ok && ci_forward(s, &toks[T], 1, a, 0, err, sizeof err) == 0) SFAIL("%s ctx %d: forward past max_ctx accepted", name, T);
        else if (ok && !strstr(err, fam)) SFAIL("%s ctx %d: refusal does not name %s: %s", name, T, fam, err);
        ci_session_reset(s);
        err[0] = 0;
        if (ci_forward(s, toks, T + 1, a, 0, err, sizeof err) == 0)
            SFAIL("%s ctx %d: a prompt of max_ctx + 1 accepted", name, T);
    }
    free(a); free(b); free(c);
    ci_session_free(s);
}

/* forward_batch of three sessions (at position 0, mid-way, one short of max_ctx) vs single
 * steps; a snapshot and exported rows carried into fresh sessions. */
static void check_serving(const char *name, ci_model *m, int T, int V) {
    const ci_family_ops *ops = m->family->ops;
    enum { NS = 3 };
    char err[1024] = "";
    ci_session *a[NS] = { 0 }, *b[NS] = { 0 }, *c = NULL;
    int plen[NS] = { 0, (T - 1) / 2, T - 1 }, toks[MAXT], step[NS];
    float *la = malloc((size_t)NS * V * sizeof *la), *lb = malloc((size_t)NS * V * sizeof *lb);
    float *lc = malloc((size_t)V * sizeof *lc);
    for (int i = 0; i < NS; i++) {
        if (ci_session_new(m, T, &a[i], err, sizeof err) || ci_session_new(m, T, &b[i], err, sizeof err)) {
            SFAIL("%s ctx %d: session: %s", name, T, err);
            goto done;
        }
        for (int t = 0; t < plen[i]; t++) toks[t] = tok_at(t, 31 * i + T, V);
        if (plen[i] && (ci_forward(a[i], toks, plen[i], NULL, 0, err, sizeof err) ||
                        ci_forward(b[i], toks, plen[i], NULL, 0, err, sizeof err))) {
            SFAIL("%s ctx %d: prefill %d: %s", name, T, plen[i], err);
            goto done;
        }
        step[i] = tok_at(i, 977, V);
    }
    if (ops->forward_batch) {
        for (int i = 0; i < NS; i++)
            if (ci_forward(a[i], &step[i], 1, la + (size_t)i * V, 0, err, sizeof err)) {
                SFAIL("%s ctx %d: step: %s", name, T, err);
                goto done;
            }
        if (ops->forward_batch(b, step, NS, lb, err, sizeof err)) { SFAIL("%s ctx %d: forward_batch: %s", name, T, err); goto done; }
        for (int i = 0; i < NS; i++) {
            if (memcmp(la + (size_t)i * V, lb + (size_t)i * V, (size_t)V * sizeof *la))
                SFAIL("%s ctx %d: forward_batch row %d (position %d) differs from the single step: max|diff| %g", name, T, i,
                      plen[i], max_diff(la + (size_t)i * V, lb + (size_t)i * V, (size_t)V));
            if (a[i]->pos != b[i]->pos) SFAIL("%s ctx %d: positions %d vs %d", name, T, a[i]->pos, b[i]->pos);
        }
        if (ops->forward_batch(b + 2, step, 1, lb, err, sizeof err) == 0) SFAIL("%s ctx %d: forward_batch past max_ctx accepted", name, T);
    }
    /* a[1] sits at (T-1)/2 + 1 <= T - 1 when T >= 2: room for one more token */
    if (T >= 2 && ops->snapshot && ops->restore) {
        cache_snap *snap = ops->snapshot(a[1], err, sizeof err);
        if (!snap) SFAIL("%s ctx %d: snapshot: %s", name, T, err);
        else {
            if (ci_session_new(m, T, &c, err, sizeof err) || ops->restore(c, snap, err, sizeof err))
                SFAIL("%s ctx %d: restore: %s", name, T, err);
            else if (ci_forward(a[1], &step[0], 1, la, 0, err, sizeof err) || ci_forward(c, &step[0], 1, lc, 0, err, sizeof err))
                SFAIL("%s ctx %d: after restore: %s", name, T, err);
            else if (memcmp(la, lc, (size_t)V * sizeof *la))
                SFAIL("%s ctx %d: the restored session continues differently", name, T);
            cache_snap_free(snap);
        }
    } else if (T >= 2 && ops->cache_export && ops->cache_import) {
        int held = a[1]->pos;
        void *blob = malloc(ops->cache_bytes_per_token(m) * (size_t)held + 1);
        if (ci_session_new(m, T, &c, err, sizeof err) || ops->cache_export(a[1], held, blob, err, sizeof err) ||
            ops->cache_import(c, held, blob, err, sizeof err))
            SFAIL("%s ctx %d: export / import: %s", name, T, err);
        else if (ci_forward(a[1], &step[0], 1, la, 0, err, sizeof err) || ci_forward(c, &step[0], 1, lc, 0, err, sizeof err))
            SFAIL("%s ctx %d: after import: %s", name, T, err);
        else if (memcmp(la, lc, (size_t)V * sizeof *la))
            SFAIL("%s ctx %d: the imported session continues differently", name, T);
        free(blob);
    }
done:
    for (int i = 0; i < NS; i++) { ci_session_free(a[i]); ci_session_free(b[i]); }
    ci_session_free(c);
    free(la); free(lb); free(lc);
}

/* forward_batch of sessions with different max_ctx, the first the smallest (scratch is the
 * first session's): a 1-token session at 0, a 300-token one at 299, a 40-token one at 20. */
static void check_mixed_batch(const char *name, ci_model *m, int V) {
    const ci_family_ops *ops = m->family->ops;
    if (!ops->forward_batch) return;
    enum { NS = 3 };
    char err[1024] = "";
    ci_session *a[NS] = { 0 }, *b[NS] = { 0 };
    const int ctx[NS] = { 1, MAXT, 40 }, plen[NS] = { 0, MAXT - 1, 20 };
    int toks[MAXT], step[NS];
    float *la = malloc((size_t)NS * V * sizeof *la), *lb = malloc((size_t)NS * V * sizeof *lb);
    for (int i = 0; i < NS; i++) {
        if (ci_session_new(m, ctx[i], &a[i], err, sizeof err) || ci_session_new(m, ctx[i], &b[i], err, sizeof err)) {
            SFAIL("%s mixed: session: %s", name, err);
            goto done;
        }
        for (int t = 0; t < plen[i]; t++) toks[t] = tok_at(t, 7 * i, V);
        if (plen[i] && (ci_forward(a[i], toks, plen[i], NULL, 0, err, sizeof err) ||
                        ci_forward(b[i], toks, plen[i], NULL, 0, err, sizeof err))) {
            SFAIL("%s mixed: prefill %d: %s", name, plen[i], err);
            goto done;
        }
        step[i] = tok_at(i, 555, V);
        if (ci_forward(a[i], &step[i], 1, la + (size_t)i * V, 0, err, sizeof err)) { SFAIL("%s mixed: step: %s", name, err); goto done; }
    }
    if (ops->forward_batch(b, step, NS, lb, err, sizeof err)) SFAIL("%s mixed: forward_batch: %s", name, err);
    else
        for (int i = 0; i < NS; i++)
            if (memcmp(la + (size_t)i * V, lb + (size_t)i * V, (size_t)V * sizeof *la))
                SFAIL("%s mixed: forward_batch row %d (max_ctx %d, position %d) differs from the single step: max|diff| %g",
                      name, i, ctx[i], plen[i], max_diff(la + (size_t)i * V, lb + (size_t)i * V, (size_t)V));
done:
    for (int i = 0; i < NS; i++) { ci_session_free(a[i]); ci_session_free(b[i]); }
    free(la); free(lb);
}

/* Carrying a cache into a session of another size: a 300-token session at P (1, 150, 299)
 * snapshotted or exported, restored or imported into a session of exactly P + 1 tokens
 * (continues the same) and of P - 1 tokens (refused). */
static void check_carry_sizes(const char *name, ci_model *m, int V) {
    const ci_family_ops *ops = m->family->ops;
    int snap_ops = ops->snapshot && ops->restore, rows_ops = ops->cache_export && ops->cache_import;
    if (!snap_ops && !rows_ops) return;
    static const int Ps[] = { 1, 150, MAXT - 1 };
    char err[1024] = "";
    int toks[MAXT];
    float *la = malloc((size_t)V * sizeof *la), *lb = malloc((size_t)V * sizeof *lb);
    for (int k = 0; k < 3; k++) {
        const int P = Ps[k];
        ci_session *a = NULL, *b = NULL, *c = NULL;
        cache_snap *snap = NULL;
        void *blob = NULL;
        for (int t = 0; t < P; t++) toks[t] = tok_at(t, 1000 + P, V);
        int nt = tok_at(P, 1, V);
        if (ci_session_new(m, MAXT, &a, err, sizeof err) || ci_session_new(m, P + 1, &b, err, sizeof err) ||
            (P > 1 && ci_session_new(m, P - 1, &c, err, sizeof err)) || ci_forward(a, toks, P, NULL, 0, err, sizeof err)) {
            SFAIL("%s carry %d: %s", name, P, err);
            goto next;
        }
        if (snap_ops) {
            if (!(snap = ops->snapshot(a, err, sizeof err))) { SFAIL("%s carry %d: snapshot: %s", name, P, err); goto next; }
            if (ops->restore(b, snap, err, sizeof err)) { SFAIL("%s carry %d: restore into %d: %s", name, P, P + 1, err); goto next; }
            if (c && ops->restore(c, snap, err, sizeof err) == 0) SFAIL("%s carry %d: restore into a %d-token session accepted", name, P, P - 1);
        } else {
            blob = malloc(ops->cache_bytes_per_token(m) * (size_t)P);
            if (!blob || ops->cache_export(a, P, blob, err, sizeof err) || ops->cache_import(b, P, blob, err, sizeof err)) {
                SFAIL("%s carry %d: export / import into %d: %s", name, P, P + 1, err);
                goto next;
            }
            if (c && ops->cache_import(c, P, blob, err, sizeof err) == 0) SFAIL("%s carry %d: import into a %d-token session accepted", name, P, P - 1);
        }
        if (ci_forward(a, &nt, 1, la, 0, err, sizeof err) || ci_forward(b, &nt, 1, lb, 0, err, sizeof err))
            SFAIL("%s carry %d: next step: %s", name, P, err);
        else if (memcmp(la, lb, (size_t)V * sizeof *la))
            SFAIL("%s carry %d: the carried session continues differently: max|diff| %g", name, P, max_diff(la, lb, (size_t)V));
    next:
        cache_snap_free(snap);
        free(blob);
        ci_session_free(a); ci_session_free(b); ci_session_free(c);
    }
    free(la); free(lb);
}

/* forward_batch of more sessions than a micro-batch (260, at positions 0..3 of 5-token
 * sessions) against single steps. */
static void check_wide_batch(const char *name, ci_model *m, int V) {
    const ci_family_ops *ops = m->family->ops;
    if (!ops->forward_batch) return;
    enum { NS = 260 };
    char err[1024] = "";
    ci_session **a = calloc(NS, sizeof *a), **b = calloc(NS, sizeof *b);
    int *step = malloc(NS * sizeof *step);
    float *la = malloc((size_t)NS * V * sizeof *la), *lb = malloc((size_t)NS * V * sizeof *lb);
    int toks[4];
    for (int i = 0; i < NS; i++) {
        int p = i % 4;
        for (int t = 0; t < p; t++) toks[t] = tok_at(t, i, V);
        if (ci_session_new(m, 5, &a[i], err, sizeof err) || ci_session_new(m, 5, &b[i], err, sizeof err) ||
            (p && (ci_forward(a[i], toks, p, NULL, 0, err, sizeof err) || ci_forward(b[i], toks, p, NULL, 0, err, sizeof err)))) {
            SFAIL("%s wide: %s", name, err);
            goto done;
        }
        step[i] = tok_at(i, 3, V);
        if (ci_forward(a[i], &step[i], 1, la + (size_t)i * V, 0, err, sizeof err)) { SFAIL("%s wide: %s", name, err); goto done; }
    }
    if (ops->forward_batch(b, step, NS, lb, err, sizeof err)) SFAIL("%s wide: forward_batch: %s", name, err);
    else
        for (int i = 0; i < NS; i++)
            if (memcmp(la + (size_t)i * V, lb + (size_t)i * V, (size_t)V * sizeof *la)) {
                SFAIL("%s wide: forward_batch row %d differs from the single step: max|diff| %g", name, i,
                      max_diff(la + (size_t)i * V, lb + (size_t)i * V, (size_t)V));
                break;
            }
done:
    for (int i = 0; i < NS; i++) { ci_session_free(a[i]); ci_session_free(b[i]); }
    free(a); free(b); free(step); free(la); free(lb);
}

static char *merged(const sweep_cfg *sc) {
    json_error_t je;
    json_t *base = json_loads(sc->base, 0, &je), *over = json_loads(sc->over, 0, &je);
    char *out = NULL;
    if (base && over && json_object_update(base, over) == 0) {
        /* a null override removes the key */
        const char *k;
        json_t *v;
        void *tmp;
        json_object_foreach_safe(base, tmp, k, v) if (json_is_null(v)) json_object_del(base, k);
        out = json_dumps(base, JSON_COMPACT);
    }
    json_decref(base);
    json_decref(over);
    return out;
}

static void run_cfgs(const sweep_cfg *cfgs) {
    for (const sweep_cfg *sc = cfgs; sc->name; sc++) {
        char dir[64], err[1024] = "";
        char *cfg = merged(sc);
        if (!cfg) { SFAIL("%s: bad test config", sc->name); continue; }
        if (!tm_make_random(cfg, "f32", 17, dir, sizeof dir, err, sizeof err)) {
            SFAIL("%s: make-random: %s", sc->name, err);
            free(cfg);
            continue;
        }
        free(cfg);
        /* the default backend with every check, then AVX2 kernels (8-wide tails) on 3 threads
         * (another split of rows and heads) with the prefill checks, where AVX2 exists */
        for (int pass = 0; pass < 2; pass++) {
            ci_model *m = NULL;
            ci_model_opts o = { .n_threads = pass ? 3 : 0, .isa = pass ? 2 : 0 };
            if (ci_model_open(dir, &o, &m, err, sizeof err)) {
                if (!pass || !strstr(err, "CPU backend")) SFAIL("%s: open: %s", sc->name, err);
            } else {
                ci_model_info info;
                ci_model_get_info(m, &info);
                for (int k = 0; k < N_CTX; k++) {
                    check_prefill(sc->name, m, ctxs[k], info.family, info.vocab_size);
                    if (!pass) check_serving(sc->name, m, ctxs[k], info.vocab_size);
                }
                if (!pass) {
                    check_mixed_batch(sc->name, m, info.vocab_size);
                    check_carry_sizes(sc->name, m, info.vocab_size);
                    if (sc == cfgs) check_wide_batch(sc->name, m, info.vocab_size);
                }
            }
            ci_model_free(m);
        }
        tm_rm_dir(dir);
    }
}

/* Sliding-window attention is not implemented in the dense families: a Qwen3 config whose
 * layers slide must be refused, naming the key (a window that no layer uses is fine). */
static void test_qwen3_sliding_refused(void) {
    static const char *const over[] = {
        "{\"use_sliding_window\": true, \"sliding_window\": 4, \"max_window_layers\": 1}",
        "{\"use_sliding_window\": true, \"sliding_window\": 4, \"layer_types\": [\"full_attention\", \"sliding_attention\"]}",
    };
    for (int i = 0; i < 2; i++) {
        sweep_cfg q = { "qwen3 sliding", QWEN3_BASE, over[i] }, qm = { "qwen3_moe sliding", QWEN3_MOE_BASE, over[i] };
        char *a = merged(&q), *b = merged(&qm);
        if (a) tm_expect_load_error(a, "use_sliding_window");
        if (b) tm_expect_load_error(b, "use_sliding_window");
        free(a); free(b);
    }
    static const sweep_cfg fine[] = {
        { "qwen3 window on no layer", QWEN3_BASE, "{\"use_sliding_window\": true, \"sliding_window\": 4, \"max_window_layers\": 2}" },
        { "qwen3 window off", QWEN3_BASE, "{\"use_sliding_window\": false, \"sliding_window\": 4, \"max_window_layers\": 0}" },
        { NULL, NULL, NULL },
    };
    run_cfgs(fine);
}

static void test_llama(void) { run_cfgs(llama_cfgs); }
static void test_qwen3(void) { run_cfgs(qwen3_cfgs); }
static void test_qwen3_moe(void) { run_cfgs(qwen3_moe_cfgs); }
static void test_deepseek_v3(void) { run_cfgs(dsv3_cfgs); }
static void test_deepseek_v32(void) { run_cfgs(dsv32_cfgs); }
static void test_deepseek_v4(void) { run_cfgs(dsv4_cfgs); }
static void test_qwen3_next(void) { run_cfgs(qnext_cfgs); }
static void test_qwen3_5(void) { run_cfgs(q35_cfgs); }
static void test_qwen3_5_moe(void) { run_cfgs(q35moe_cfgs); }
static void test_lfm2(void) { run_cfgs(lfm2_cfgs); }
static void test_lfm2_moe(void) { run_cfgs(lfm2_moe_cfgs); }
static void test_nemotron_h(void) { run_cfgs(nemh_cfgs); }

int main(void) {
    TEST_RUN(test_llama);
    TEST_RUN(test_qwen3);
    TEST_RUN(test_qwen3_moe);
    TEST_RUN(test_qwen3_sliding_refused);
    TEST_RUN(test_deepseek_v3);
    TEST_RUN(test_deepseek_v32);
    TEST_RUN(test_deepseek_v4);
    TEST_RUN(test_qwen3_next);
    TEST_RUN(test_qwen3_5);
    TEST_RUN(test_qwen3_5_moe);
    TEST_RUN(test_lfm2);
    TEST_RUN(test_lfm2_moe);
    TEST_RUN(test_nemotron_h);
    TEST_EXIT();
}
