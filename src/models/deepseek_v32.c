/* deepseek_v32.c — the DEEPSEEK_V32 (deepseek_v32, alias deepseek_v3_2): MLA + MoE as deepseek_v3, plus the DSA lightning indexer and its key cache.
 * Registered so that loading names this family; the forward path is not written yet. */
#include "registry.h"

const ci_family fam_deepseek_v32 = { "deepseek_v32", (const char *const[]){ "deepseek_v32", "deepseek_v3_2", NULL },
                            "DSA attention not implemented yet", NULL };
