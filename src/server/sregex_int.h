/* sregex_int.h — what the pattern parser (sregex.c) hands the DFA builder (sregex_dfa.c). */
#ifndef CI_SRV_SREGEX_INT_H
#define CI_SRV_SREGEX_INT_H
#include "sregex.h"
#include <stddef.h>
#include <stdint.h>

enum { MAX_NFA = 20000, MAX_DFA = 2048, MAX_DEPTH = 64 };

typedef struct { uint64_t w[4]; } bset;
typedef struct { int a, b, set; } nstate;     /* set >= 0: on a byte of sets[set] to a; else epsilon to a, b */

typedef struct {
    const char *p;
    size_t n, i;
    nstate *st;
    int nst, cap;
    bset *sets;
    int nsets, capsets;
    int depth;
    char *err;
    size_t errlen;
    int failed;
} rx_parser;

static inline int bs_has(const bset *s, int c) { return (int)(s->w[c >> 6] >> (c & 63) & 1); }
/* Records the first error (fmt has one %s for what); returns -1. */
int rx_fail(rx_parser *P, const char *fmt, const char *what);
/* The DFA of the NFA in P (start state, accepting state); 0 or -1 with P's error. */
int rx_build(rx_parser *P, int start, int accept, rx_dfa **out);

#endif
