/* jsonfsm.h — a byte-at-a-time recognizer of JSON text prefixes (RFC 8259), for JSON mode
 * (response_format json_object): the engine keeps one per sequence and lets through only
 * tokens whose bytes keep the reply a prefix of some JSON object.
 *
 * The state is a small value (copy it to try a token's bytes without committing them):
 * the containers open (a bit stack, at most JF_DEPTH deep), the lexical state (in a string,
 * an escape, a \u sequence, a number, a literal) and what the grammar expects next. Only
 * whitespace may follow the top-level value; top_object makes that value an object.
 * Inside strings, UTF-8 must be well formed (no overlongs, surrogates or code points past
 * U+10FFFF), control bytes escaped, and \u escapes of surrogates come in high-low pairs.
 * Every prefix it accepts can still be completed: a refusal comes at the first byte after
 * which no JSON text is possible, which is what makes it safe for masking tokens. Pure; no
 * allocation. */
#ifndef CI_SRV_JSONFSM_H
#define CI_SRV_JSONFSM_H
#include <stddef.h>
#include <stdint.h>

enum { JF_DEPTH = 64 };

typedef struct {
    uint64_t stack;            /* bit d: container at depth d is an object (1) or array (0) */
    uint8_t depth;             /* containers open */
    uint8_t expect;            /* what the grammar wants next (jsonfsm.c) */
    uint8_t lex;               /* lexical sub-state: string / escape / number / literal */
    uint8_t aux;               /* \u hex digits left, or the literal's position */
    uint8_t lit;               /* which literal (true / false / null) */
    uint8_t key;               /* the string being read is an object key */
    uint8_t cont;              /* UTF-8 continuation bytes still due in a string */
    uint8_t first;             /* the range of the next one: 0 80-BF, 1 A0-BF, 2 80-9F, 3 90-BF, 4 80-8F */
    uint8_t low;               /* the \u sequence being read must be a low surrogate */
    uint16_t hex;              /* its value so far */
    uint8_t top_object;        /* the top-level value must be an object */
    uint8_t dead;              /* a byte was refused: no continuation is JSON */
    uint16_t ws, max_ws;       /* whitespace bytes in a row outside strings; the most allowed (0: any) */
} jf_state;

/* max_ws: the longest run of whitespace allowed between tokens (0: no limit; a sampler in
 * JSON mode sets one so that a model cannot pad forever). */
void jf_init(jf_state *s, int top_object);
/* Feeds n bytes; 0 while the text is still a JSON prefix, -1 (and s->dead) once not. */
int jf_feed(jf_state *s, const char *p, size_t n);
/* 1 when the text so far is a complete JSON text (the top-level value has ended; a top-level
 * number ends here too). */
int jf_complete(const jf_state *s);

#endif
