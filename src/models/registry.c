/* registry.c — the family table. One entry per family; each lists its model_type strings.
 * Families without a forward path are refused at load with their own name and `missing`. */
#include "registry.h"
#include <stdio.h>
#include <string.h>

#define TYPES(...) (const char *const[]){ __VA_ARGS__, NULL }

static const ci_family fam_deepseek_v32 = { "deepseek_v32", TYPES("deepseek_v32", "deepseek_v3_2"), "DSA attention not implemented yet", NULL };
static const ci_family fam_deepseek_v4 = { "deepseek_v4", TYPES("deepseek_v4"), "hyper-connections, compressed sparse attention and hash MoE not implemented yet", NULL };
static const ci_family fam_qwen3_next = { "qwen3_next", TYPES("qwen3_next"), "gated DeltaNet layers not implemented yet", NULL };
static const ci_family fam_qwen3_5 = { "qwen3_5", TYPES("qwen3_5", "qwen3_5_text"), "gated DeltaNet layers not implemented yet", NULL };
static const ci_family fam_qwen3_5_moe = { "qwen3_5_moe", TYPES("qwen3_5_moe", "qwen3_5_moe_text"), "gated DeltaNet layers and MoE not implemented yet", NULL };
static const ci_family fam_lfm2 = { "lfm2", TYPES("lfm2"), "short-conv layers not implemented yet", NULL };
static const ci_family fam_lfm2_moe = { "lfm2_moe", TYPES("lfm2_moe"), "short-conv layers and MoE not implemented yet", NULL };
static const ci_family fam_nemotron_h = { "nemotron_h", TYPES("nemotron_h"), "Mamba2 layers not implemented yet", NULL };

static const ci_family *const families[] = {
    &fam_llama, &fam_qwen3, &fam_qwen3_moe, &fam_deepseek_v3, &fam_deepseek_v32, &fam_deepseek_v4,
    &fam_qwen3_next, &fam_qwen3_5, &fam_qwen3_5_moe, &fam_lfm2, &fam_lfm2_moe, &fam_nemotron_h,
};

const ci_family *reg_find(const char *model_type) {
    for (size_t f = 0; f < sizeof families / sizeof *families; f++)
        for (const char *const *t = families[f]->model_types; *t; t++)
            if (!strcmp(*t, model_type)) return families[f];
    return NULL;
}

void reg_list(char *buf, size_t n) {
    size_t o = 0;
    buf[0] = 0;
    for (size_t f = 0; f < sizeof families / sizeof *families; f++)
        for (const char *const *t = families[f]->model_types; *t; t++)
            if (o < n) o += (size_t)snprintf(buf + o, n - o, "%s%s", o ? ", " : "", *t);
}
