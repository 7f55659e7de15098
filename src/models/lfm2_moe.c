/* lfm2_moe.c — the LFM2_MOE (lfm2_moe): LFM2 with MoE (sigmoid router + expert bias).
 * Registered so that loading names this family; the forward path is not written yet. */
#include "registry.h"

const ci_family fam_lfm2_moe = { "lfm2_moe", (const char *const[]){ "lfm2_moe", NULL },
                            "short-conv layers and MoE not implemented yet", NULL };
