/* rope.h — rotary embedding frequencies for every rope type transformers defines that the
 * families use (default, linear, llama3, yarn). The rotation itself is the backend's rope op.
 *
 * rot_dim = int(head_dim * partial_rotary_factor) dims of each head are rotated; inv_freq
 * has rot_dim/2 entries; mscale multiplies cos and sin (yarn's attention factor, 1 else). */
#ifndef CI_ROPE_H
#define CI_ROPE_H
#include "../io/config.h"

typedef struct {
    int rot_dim;
    float mscale;
    float *inv_freq;   /* [rot_dim/2], owned */
} rope_table;

int rope_init(rope_table *t, const ci_rope_cfg *rc, int head_dim, const char *family, char *err, size_t errlen);
void rope_free(rope_table *t);

#endif
