/* fpmode.h — flush-to-zero and denormals-are-zero for the CPU backend's arithmetic.
 *
 * An f32 operation with a subnormal input or result costs a microcode assist on x86 (about
 * 100x a normal one); recurrent state that decays (DeltaNet, Mamba2's SSD) and softmax tails
 * produce them. With MXCSR.FTZ (a subnormal result becomes 0) and MXCSR.DAZ (a subnormal
 * input reads as 0) they cost nothing. The CPU backend computes every op this way: its pool's
 * worker threads keep both bits set (ci_pool_set_flush), and the thread that calls an op has
 * them set for the op's duration only (CI_FP_FLUSH_SCOPE at the top of each op), so the
 * caller's own floating-point environment is what it was once the op returns, and an output
 * element gets the same bits whichever thread computes it.
 *
 * What it changes: values below 2^-126 (~1.2e-38) in magnitude count as 0. The f32 path's
 * results differ only where such a value would have reached an output above the rounding of
 * its neighbours, i.e. outputs that are themselves ~1e-38; an E8M0 block scale of 2^-127
 * (the format's smallest) zeroes its block. Rounding mode and exception masks are untouched.
 * Other architectures: no-op (the functions exist so callers need no #ifdef). */
#ifndef CI_FPMODE_H
#define CI_FPMODE_H

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#define CI_MXCSR_FLUSH 0x8040u   /* FTZ (bit 15) | DAZ (bit 6) */

/* Sets FTZ and DAZ on this thread; returns what to hand to ci_fp_restore (the old MXCSR, or
 * 0 when both bits were already set and nothing needs restoring). */
static inline unsigned ci_fp_flush_begin(void) {
    unsigned old = _mm_getcsr();
    if ((old & CI_MXCSR_FLUSH) == CI_MXCSR_FLUSH) return 0;
    _mm_setcsr(old | CI_MXCSR_FLUSH);
    return old | 0x10000u;   /* a bit MXCSR does not use marks "restore" */
}
static inline void ci_fp_restore(unsigned saved) {
    if (saved) _mm_setcsr(saved & 0xffffu);
}
#else
static inline unsigned ci_fp_flush_begin(void) { return 0; }
static inline void ci_fp_restore(unsigned saved) { (void)saved; }
#endif

static inline void ci_fp_scope_end(const unsigned *saved) { ci_fp_restore(*saved); }

/* At the top of a function body: FTZ + DAZ until the function returns (GCC / Clang cleanup
 * attribute, so every return path restores). Nested scopes cost one MXCSR read. */
#define CI_FP_FLUSH_SCOPE() \
    __attribute__((cleanup(ci_fp_scope_end), unused)) const unsigned ci_fp_saved_ = ci_fp_flush_begin()

#endif
