/* random.h — make-random with a thread count, for the CLI (outside the public API of
 * include/cinfer.h, whose ci_make_random uses every online CPU). */
#ifndef CI_RANDOM_H
#define CI_RANDOM_H
#include <stddef.h>
#include <stdint.h>

/* ci_make_random, filling tensors on n_threads threads (<= 0: the online CPUs) while the
 * calling thread writes them in order; the files are the same for every thread count. */
int ci_make_random_threads(const char *config_path, const char *out_dir, const char *dtype, uint64_t seed, int layers,
                           int n_threads, char *err, size_t errlen);

#endif
