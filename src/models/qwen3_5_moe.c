/* qwen3_5_moe.c — the QWEN3_5_MOE (qwen3_5_moe, qwen3_5_moe_text): Qwen3.5 with MoE everywhere; hub checkpoints nest text_config.
 * Registered so that loading names this family; the forward path is not written yet. */
#include "registry.h"

const ci_family fam_qwen3_5_moe = { "qwen3_5_moe", (const char *const[]){ "qwen3_5_moe", "qwen3_5_moe_text", NULL },
                            "gated DeltaNet layers and MoE not implemented yet", NULL };
