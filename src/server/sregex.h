/* sregex.h — the regular expressions of JSON Schema "pattern" (and the built-in "format"s),
 * compiled to a byte-level DFA for constrained decoding.
 *
 * The DFA runs over the UTF-8 bytes of a string's decoded value. It is built to *generate*
 * from, so it may recognize a subset of what the ECMAScript regex matches, never more:
 * `.`, negated classes, \D and \W take ASCII (minus what they exclude) and every well-formed
 * non-ASCII character but U+2028, U+2029 and U+FFFD; \s and \S take their ASCII members
 * only. Unanchored patterns are searched (as JSON Schema says): `.*` is implied at an end
 * without its anchor. Supported: literals, escapes (\d \w \s \D \W \S \n \r \t \f \v \0
 * \xHH \uXXXX and escaped punctuation), classes with ranges, `.`, groups ( ) (?: ) (?<n> ),
 * alternation, quantifiers ? * + {m} {m,} {m,n} (lazy forms too: same language), and ^ / $
 * at the start / end of a top-level alternative. Refused with a message naming the
 * construct: lookaround, backreferences, \b, anchors elsewhere, non-ASCII class ranges
 * wider than 256 characters, automata past their size bounds.
 *
 * Every DFA state kept can reach acceptance (dead ones are cut), and each state knows the
 * fewest and the most characters (code points) still needed to accept, so that a string's
 * length bounds can be kept together with the pattern. Immutable after compile. */
#ifndef CI_SRV_SREGEX_H
#define CI_SRV_SREGEX_H
#include <stddef.h>
#include <stdint.h>

#define RX_DEAD 0xFFFFu
#define RX_INF 0xFFFFFFFFu

typedef struct {
    int n_states, n_cls;
    uint8_t cls[256];          /* byte -> class */
    uint16_t *next;            /* [n_states, n_cls]: next state or RX_DEAD */
    uint8_t *acc;              /* [n_states] accepting */
    uint32_t *min_cp;          /* [n_states] fewest code points to acceptance */
    uint32_t *max_cp;          /* [n_states] most (RX_INF: unbounded) */
    uint64_t (*loop)[2];       /* [n_states] printable ASCII bytes (not '"' or '\\') that lead back to the
                                * same state: text of only those keeps the state (a token mask shortcut) */
} rx_dfa;

/* 0 and *out (malloc'd), or -1 with err (one line). */
int rx_compile(const char *pattern, size_t len, rx_dfa **out, char *err, size_t errlen);
void rx_free(rx_dfa *d);
static inline unsigned rx_step(const rx_dfa *d, unsigned st, unsigned char c) {
    return d->next[(size_t)st * d->n_cls + d->cls[c]];
}
/* Whole-string match of a byte string (for tests). */
int rx_match(const rx_dfa *d, const char *s, size_t n);

#endif
