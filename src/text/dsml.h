/* dsml.h — DeepSeek V3.2 and V4 prompts without a Jinja template.
 *
 * DeepSeek-V3.2 and DeepSeek-V4 checkpoints ship no chat template: their prompt format is
 * defined by a Python encoder in the checkpoint (encoding/encoding_dsv32.py,
 * encoding/encoding_dsv4.py). This module is a native C implementation of both, byte for
 * byte as those encoders' encode_messages() write a conversation (tests/text/
 * dsml_vectors.json holds their outputs; test_dsml compares every one):
 *   - thinking mode ("<think>" opens the reply) or chat mode ("</think>" closes it at once),
 *   - earlier turns' reasoning dropped (drop_thinking, as the encoders do; V4 keeps it
 *     whenever a message carries tools),
 *   - tools described in the system (or developer) message and tool calls written as DSML
 *     (<｜DSML｜function_calls> in V3.2, <｜DSML｜tool_calls> in V4), tool results as
 *     <function_results> (V3.2) or merged into the user turn as <tool_result> (V4),
 *   - V4's latest_reminder role, quick-instruction tasks, wo_eos and reasoning_effort.
 *
 * Two levels:
 *   dsml_encode          what encode_messages(messages, thinking_mode, drop_thinking,
 *                        add_default_bos_token[, reasoning_effort]) returns; tools sit on a
 *                        system / developer message as in the official encoders;
 *   dsml_render_request  an OpenAI-style chat request {"messages", "tools",
 *                        "chat_template_kwargs"} (what template.h renders for other
 *                        models): tools go onto the first message when it is a system or
 *                        developer message, else onto a new empty system message in front;
 *                        chat_template_kwargs "thinking" / "enable_thinking" (true: thinking
 *                        mode; default chat), "thinking_mode" ("thinking" | "chat"),
 *                        "drop_thinking" (default true), "reasoning_effort" (V4: "max" |
 *                        "high").
 * Input the official encoders refuse (they raise) is refused here with one line naming the
 * field ("messages[3]: tool result with no tool call before it"); so is a tool result with
 * no assistant tool call before it in V4 too, which that encoder silently accepts. Where
 * the official encoders would print a Python repr (a list where a string is expected) this
 * refuses instead. Nothing here prints or exits. */
#ifndef CI_DSML_H
#define CI_DSML_H
#include <jansson.h>
#include <stddef.h>

typedef enum { DSML_NONE = 0, DSML_V32 = 32, DSML_V4 = 4 } dsml_version;

typedef struct dsml_opts {
    int thinking;                 /* thinking_mode "thinking" (1) or "chat" (0) */
    int drop_thinking;            /* drop reasoning of turns before the last user message */
    int add_bos;                  /* add_default_bos_token */
    const char *reasoning_effort; /* V4 only: NULL, "max" or "high" */
} dsml_opts;

/* The encoder of a config.json model_type: deepseek_v32 / deepseek_v3_2 -> DSML_V32,
 * deepseek_v4 -> DSML_V4, anything else (or NULL) -> DSML_NONE. */
dsml_version dsml_for_model_type(const char *model_type);
const char *dsml_name(dsml_version v);   /* "DeepSeek-V3.2" / "DeepSeek-V4" */

/* encode_messages. *out is malloc'd and NUL-terminated; 0 = ok, -1 = refused (err says why). */
int dsml_encode(dsml_version v, const json_t *messages, const dsml_opts *o, char **out, size_t *out_len,
                char *err, size_t errlen);

/* An OpenAI-style chat request (see above). */
int dsml_render_request(dsml_version v, const json_t *request, char **out, size_t *out_len, char *err, size_t errlen);

/* Python's json.dumps(value, ensure_ascii=False) of a JSON value (", " and ": "
 * separators, floats as Python's repr prints them). malloc'd; NULL when out of memory. */
char *dsml_py_json(const json_t *v);

#endif
