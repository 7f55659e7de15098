/* deepseek.h — the decoder shared by the DeepSeek V3 and V3.2 families (deepseek.c).
 *
 * DeepSeek V3 (deepseek_v3.c): MLA + MoE. DeepSeek V3.2 (deepseek_v32.c): the same decoder
 * with the lightning indexer and sparse attention in every layer (indexed = 1), its
 * indexer-key cache beside the latent cache, q_lora_rank required. The families own their
 * model_types and ops tables; both serve with batched decode steps and prefix reuse. */
#ifndef CI_DEEPSEEK_H
#define CI_DEEPSEEK_H
#include "model.h"

int ds_load(ci_model *m, int indexed, char *err, size_t errlen);
void ds_unload(ci_model *m);
/* The shared block pool's latent (and indexer-key) rows (registry.h pool_init). */
int ds_pool_init(ci_model *m, int n_blocks, char *err, size_t errlen);
int ds_session_init(ci_session *s, char *err, size_t errlen);
void ds_session_free(ci_session *s);
int ds_forward(ci_session *s, const int *tokens, int n, float *logits, int all_logits, char *err, size_t errlen);
/* The greedy forward: the last row's argmax taken by the backend (a decode step through a
 * recorded graph on a device). */
int ds_forward_argmax(ci_session *s, const int *tokens, int n, int *out_id, char *err, size_t errlen);
size_t ds_cache_bytes_per_token(const ci_model *m);
int ds_forward_batch(ci_session *const *ss, const int *tokens, int n, float *logits, char *err, size_t errlen);
/* forward_batch, only each row's argmax coming back (registry.h forward_batch_argmax). */
int ds_forward_batch_argmax(ci_session *const *ss, const int *tokens, int n, int *out_ids, char *err, size_t errlen);
int ds_cache_export(const ci_session *s, int n, void *dst, char *err, size_t errlen);
int ds_cache_import(ci_session *s, int n, const void *src, char *err, size_t errlen);

#endif
