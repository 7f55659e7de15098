/* qwen3_next.c — the QWEN3_NEXT (qwen3_next): gated DeltaNet + gated attention + MoE, fused in_proj_qkvz / in_proj_ba.
 * Registered so that loading names this family; the forward path is not written yet. */
#include "registry.h"

const ci_family fam_qwen3_next = { "qwen3_next", (const char *const[]){ "qwen3_next", NULL },
                            "gated DeltaNet layers not implemented yet", NULL };
