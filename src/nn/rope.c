/* rope.c — inverse frequencies per rope type, computed in double as the formulas of
 * transformers' modeling_rope_utils.py state them (see rope.h). */
#include "rope.h"
#include "../core/status.h"
#include <math.h>
#include <stdlib.h>

static double yarn_mscale(double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * log(scale) + 1.0; }

/* The dimension index at which a frequency completes num_rot rotations over max_pos. */
static double yarn_corr_dim(double num_rot, int dim, double base, double max_pos) {
    return (dim * log(max_pos / (num_rot * 2 * M_PI))) / (2 * log(base));
}

int rope_init(rope_table *t, const ci_rope_cfg *rc, int head_dim, const char *family, char *err, size_t errlen) {
    t->inv_freq = NULL;
    int dim = (int)(head_dim * rc->partial_rotary_factor);
    if (dim < 2 || dim % 2 || dim > head_dim)
        return ci_err(err, errlen, "%s: rotary dims %d (head_dim %d x partial_rotary_factor %g) must be even and in [2, head_dim]",
                      family, dim, head_dim, rc->partial_rotary_factor);
    t->rot_dim = dim;
    t->mscale = 1.0f;
    int half = dim / 2;
    t->inv_freq = malloc((size_t)half * sizeof(float));
    if (!t->inv_freq) return ci_err(err, errlen, "%s: out of memory", family);
    double base = rc->theta;
    for (int i = 0; i < half; i++) {
        double inv = 1.0 / pow(base, (2.0 * i) / dim);
        switch (rc->type) {
        case CI_ROPE_DEFAULT: break;
        case CI_ROPE_LINEAR: inv /= rc->factor; break;
        case CI_ROPE_LLAMA3: {
            double old = (double)rc->original_max_pos;
            double low_wl = old / rc->low_freq_factor, high_wl = old / rc->high_freq_factor;
            double wl = 2 * M_PI / inv;
            if (wl > low_wl) inv /= rc->factor;                  /* low frequencies: interpolate */
            else if (wl >= high_wl) {                             /* medium: blend smoothly */
                double s = (old / wl - rc->low_freq_factor) / (rc->high_freq_factor - rc->low_freq_factor);
                inv = (1 - s) * inv / rc->factor + s * inv;
            }
            break;
        }
        case CI_ROPE_YARN: {
            double bf = rc->beta_fast > 0 ? rc->beta_fast : 32, bs = rc->beta_slow > 0 ? rc->beta_slow : 1;
            double lo = yarn_corr_dim(bf, dim, base, (double)rc->original_max_pos);
            double hi = yarn_corr_dim(bs, dim, base, (double)rc->original_max_pos);
            if (rc->truncate) { lo = floor(lo); hi = ceil(hi); }
            if (lo < 0) lo = 0;
            if (hi > dim - 1) hi = dim - 1;
            if (lo == hi) hi += 0.001;
            double ramp = (i - lo) / (hi - lo);
            ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
            double extrap = 1 - ramp;  /* weight of the unscaled frequency */
            inv = (inv / rc->factor) * (1 - extrap) + inv * extrap;
            break;
        }
        case CI_ROPE_DYNAMIC:
            free(t->inv_freq);
            t->inv_freq = NULL;
            return ci_err(err, errlen, "%s: rope type 'dynamic' is not implemented", family);
        }
        t->inv_freq[i] = (float)inv;
    }
    if (rc->type == CI_ROPE_YARN) {
        double af = rc->attention_factor;
        if (af < 0) {
            if (rc->mscale > 0 && rc->mscale_all_dim > 0)
                af = yarn_mscale(rc->factor, rc->mscale) / yarn_mscale(rc->factor, rc->mscale_all_dim);
            else af = yarn_mscale(rc->factor, 1);
        }
        t->mscale = (float)af;
    }
    return 0;
}

void rope_free(rope_table *t) {
    free(t->inv_freq);
    t->inv_freq = NULL;
}
