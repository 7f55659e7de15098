/* qwen3_5.c — the QWEN3_5 (qwen3_5, qwen3_5_text): dense Qwen3.5, gated DeltaNet with separate projections + gated attention.
 * Registered so that loading names this family; the forward path is not written yet. */
#include "registry.h"

const ci_family fam_qwen3_5 = { "qwen3_5", (const char *const[]){ "qwen3_5", "qwen3_5_text", NULL },
                            "gated DeltaNet layers not implemented yet", NULL };
