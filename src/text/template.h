/* template.h — chat templates: a model's Jinja2 chat template rendered in C, byte for byte as
 * Hugging Face transformers' apply_chat_template(..., tokenize=False) renders it.
 *
 * Two levels:
 *   tpl_compile / tpl_render   any template source and a JSON object of variables;
 *   tpl_chat_*                 a model folder (chat_template.jinja, or the chat_template of
 *                              tokenizer_config.json, string or list of named templates) and an
 *                              OpenAI-style chat request: {"messages": [...], "tools": [...],
 *                              "add_generation_prompt": bool, "chat_template_kwargs": {...}}.
 * A folder with no template whose config.json says model_type deepseek_v32 / deepseek_v3_2
 * or deepseek_v4 renders with those checkpoints' own prompt encoder instead (dsml.h, native
 * C, byte for byte as their encoding_dsv32.py / encoding_dsv4.py); a template in the folder
 * or given as template_path still wins.
 * The variables a chat template sees are those transformers passes: messages, tools (None
 * when absent), documents (None), add_generation_prompt (False when absent), the special
 * tokens of tokenizer_config.json (bos_token, eos_token, unk_token, pad_token, ..., and the
 * named extra_special_tokens; strings or {"content": ...} objects), then every
 * chat_template_kwargs entry (which override tokens). An empty message list is refused, as
 * transformers refuses it.
 *
 * Errors (0 = ok, -1 = error, TPL_RAISED = the template itself refused the request through
 * raise_exception) come as one line in err that names the template and the line:
 *   "DIR/tokenizer_config.json (chat_template), line 12: Conversation roles must alternate ..."
 * Hostile templates end in errors, not crashes: nesting, recursion, work and output are
 * capped (tpl_opts); at the default depth cap a render needs about 1 MB of C stack (more
 * under sanitizers). Nothing here prints or exits. */
#ifndef CI_TEMPLATE_H
#define CI_TEMPLATE_H
#include <jansson.h>
#include <stddef.h>

#define TPL_RAISED (-2)

typedef struct tpl tpl_t;
typedef struct tpl_chat tpl_chat;

typedef struct tpl_opts {
    size_t max_output;             /* bytes of rendered text; 0 = 64 MiB */
    int max_depth;                 /* nested evaluation / macro recursion; 0 = 2000 (a few hundred
                                      nested macro calls, more than Jinja allows) */
    unsigned long long max_steps;  /* statements and loop iterations; 0 = 50 million */
    long long now;                 /* strftime_now(): seconds since the epoch shown in UTC;
                                      0 = the real clock in local time (as Python's now()) */
} tpl_opts;

/* Compiles template source (UTF-8). name appears in every error about this template. */
int tpl_compile(const char *src, size_t len, const char *name, tpl_t **out, char *err, size_t errlen);
void tpl_free(tpl_t *t);
/* Renders with the members of a JSON object as variables. *out is malloc'd, NUL-terminated
 * (the text may itself contain NUL bytes only if the variables do); opts may be NULL. */
int tpl_render(const tpl_t *t, const json_t *vars, const tpl_opts *opts, char **out, size_t *out_len,
               char *err, size_t errlen);

/* Loads a model folder's chat template(s) and special tokens. */
int tpl_chat_load(const char *model_dir, tpl_chat **out, char *err, size_t errlen);
/* The same with the template read from template_path (a Jinja file: --chat-template) instead
 * of the folder's; the special tokens still come from the folder. NULL: tpl_chat_load. */
int tpl_chat_load_ex(const char *model_dir, const char *template_path, tpl_chat **out, char *err, size_t errlen);
void tpl_chat_free(tpl_chat *ch);
/* Renders an OpenAI-style chat request (see above) with the model's template. */
int tpl_chat_render(const tpl_chat *ch, const json_t *request, const tpl_opts *opts, char **out,
                    size_t *out_len, char *err, size_t errlen);

/* The same request rendered with another compiled template (a request's own template, or a
 * test probe), with the model's special tokens. */
int tpl_chat_render_with(const tpl_chat *ch, const tpl_t *t, const json_t *request, const tpl_opts *opts,
                         char **out, size_t *out_len, char *err, size_t errlen);

/* Both in one call: what `cinfer template --model DIR --request F.json [--chat-template T]`
 * prints (template_path NULL: the folder's template). */
int tpl_render_request(const char *model_dir, const char *template_path, const json_t *request, char **out,
                       size_t *out_len, char *err, size_t errlen);

#endif
