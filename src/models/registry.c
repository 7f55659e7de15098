/* registry.c — the family table. Each family is defined in its own file in src/models/
 * (one value per family, listing its model_type strings); families without a forward path
 * carry `missing` and are refused at load with their own name. */
#include "registry.h"
#include <stdio.h>
#include <string.h>


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
