/* deepseek_v4.c — the DEEPSEEK_V4 (deepseek_v4): mHC residual streams, CSA/HCA compressed attention with sinks, hash-routed MoE.
 * Registered so that loading names this family; the forward path is not written yet. */
#include "registry.h"

const ci_family fam_deepseek_v4 = { "deepseek_v4", (const char *const[]){ "deepseek_v4", NULL },
                            "hyper-connections, compressed sparse attention and hash MoE not implemented yet", NULL };
