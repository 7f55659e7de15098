/* nemotron_h.c — the NEMOTRON_H (nemotron_h): Mamba2 + attention + relu2 MLP / latent MoE.
 * Registered so that loading names this family; the forward path is not written yet. */
#include "registry.h"

const ci_family fam_nemotron_h = { "nemotron_h", (const char *const[]){ "nemotron_h", NULL },
                            "Mamba2 layers not implemented yet", NULL };
