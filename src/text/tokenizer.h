/* tokenizer.h — text to token ids and back, as Hugging Face `tokenizers` does it.
 *
 * A tok_tokenizer is loaded from a model folder: tokenizer.json (the pipeline: normalizer,
 * pre-tokenizer, BPE model, added tokens, post-processor, decoder), tokenizer_config.json
 * (bos/eos, add_bos_token/add_eos_token) and special_tokens_map.json when present. It is
 * immutable after tok_load except for an internal word cache guarded by a mutex, so one
 * tokenizer may be shared by threads. Encoding refuses invalid UTF-8 with an error; it
 * never replaces bytes silently. Decoding always yields valid UTF-8 (invalid byte runs
 * become U+FFFD exactly as Hugging Face's decode does).
 *
 * add_special follows transformers 4's fast tokenizers: when tokenizer_config.json sets
 * add_bos_token / add_eos_token those flags decide BOS/EOS; otherwise tokenizer.json's
 * post_processor does. Special tokens written in the text always match (as
 * add_special_tokens=False still does in Hugging Face). */
#ifndef CI_TOKENIZER_H
#define CI_TOKENIZER_H
#include <stddef.h>

typedef struct tok_tokenizer tok_tokenizer;
typedef struct tok_stream tok_stream;

/* Loads DIR/tokenizer.json (+ tokenizer_config.json, special_tokens_map.json). */
int tok_load(const char *dir, tok_tokenizer **out, char *err, size_t errlen);
void tok_free(tok_tokenizer *t);

/* Encodes len bytes of text. *ids is malloc'd (free it), *n its length. */
int tok_encode(tok_tokenizer *t, const char *text, size_t len, int add_special, int **ids, size_t *n,
               char *err, size_t errlen);

/* Decodes ids into malloc'd, NUL-terminated UTF-8 (*text, *len without the NUL).
 * skip_special drops special added tokens. An id outside [0, tok_n_vocab) is an error. */
int tok_decode(const tok_tokenizer *t, const int *ids, size_t n, int skip_special, char **text, size_t *len,
               char *err, size_t errlen);

/* Streaming decode: feed ids one at a time; each call hands back the text that became
 * complete (never a partial UTF-8 sequence), possibly empty. The pointer stays valid until
 * the next call on the stream. tok_stream_flush returns whatever is left at the end.
 * The concatenation of all pieces equals tok_decode of all the ids. */
tok_stream *tok_stream_new(const tok_tokenizer *t, int skip_special);
int tok_stream_put(tok_stream *s, int id, const char **text, size_t *len, char *err, size_t errlen);
int tok_stream_flush(tok_stream *s, const char **text, size_t *len, char *err, size_t errlen);
void tok_stream_free(tok_stream *s);

/* Size of the id space (model vocab and added tokens). */
int tok_n_vocab(const tok_tokenizer *t);
/* The token's string as the file spells it ("Ġhello", "<0x0A>", "<|im_end|>"), NUL-terminated;
 * NULL for an id that has none. *len may be NULL. */
const char *tok_id_to_piece(const tok_tokenizer *t, int id, size_t *len);
/* Id of a token string (model vocab or added token, as spelled in the file); -1 if none. */
int tok_piece_to_id(const tok_tokenizer *t, const char *piece, size_t len);
/* 1 if id is a special added token. */
int tok_is_special(const tok_tokenizer *t, int id);
/* BOS / EOS ids from tokenizer_config.json (or special_tokens_map.json); -1 when unset. */
int tok_bos_id(const tok_tokenizer *t);
int tok_eos_id(const tok_tokenizer *t);

#endif
