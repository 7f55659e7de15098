/* outparse.h — what a reply's text holds besides plain content: reasoning and tool calls.
 *
 * Reasoning (thinking models: DeepSeek R1/V3.1, Qwen3): the text up to "</think>" is
 * reasoning when the prompt ended inside an open "<think>" or the reply starts with one;
 * the content is what follows "</think>" (leading newlines dropped). op_think_split tells
 * where the parts are, also on a text that is still growing (streaming): then a tail that
 * could still become "</think>" is held back.
 *
 * Tool calls, in the families' own formats:
 *   Hermes / Qwen     <tool_call>{"name": N, "arguments": {...}}</tool_call> (repeated)
 *   DeepSeek V3       <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>N
 *                     ```json\n{...}\n```<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>
 *   DeepSeek V3.1     <｜tool▁call▁begin｜>N<｜tool▁sep｜>{...}<｜tool▁call▁end｜>
 *   DeepSeek V3.2     <｜DSML｜function_calls><｜DSML｜invoke name="N"><｜DSML｜parameter
 *                     name="k" string="true|false">v</｜DSML｜parameter>...</｜DSML｜invoke>
 *                     </｜DSML｜function_calls> (newlines between the tags)
 *   DeepSeek V4       the same invokes inside <｜DSML｜tool_calls> ... </｜DSML｜tool_calls>
 * op_tool_start finds where a tool-call block starts (or how much of the tail must be held
 * back while it might); op_tool_parse turns the block into OpenAI tool_calls
 * [{id, type: "function", function: {name, arguments: "<JSON text>"}}]. Pure functions. */
#ifndef CI_SRV_OUTPARSE_H
#define CI_SRV_OUTPARSE_H
#include <jansson.h>
#include <stddef.h>

typedef struct {
    size_t r0, r1;      /* reasoning bytes [r0, r1) */
    size_t c0;          /* content starts here (== len while no content can be sent yet) */
    size_t safe;        /* bytes of the text that are settled (the rest may still change role) */
} op_think;

/* opened: the prompt ended inside "<think>". final: no more text will come. */
void op_think_split(const char *text, size_t len, int opened, int final, op_think *out);
/* 1 when a rendered prompt ends inside an open <think> (whitespace after it allowed). */
int op_prompt_opens_think(const char *prompt, size_t len);

/* Offset of the first tool-call marker in text[from, len), or len when none; *hold = how
 * many bytes at the end might be the start of a marker (0 when final or found). */
size_t op_tool_start(const char *text, size_t from, size_t len, size_t *hold);
/* Parses text[start, len) (from a marker on). Returns a JSON array of tool calls with ids
 * made from id_prefix, or NULL when the block does not parse. */
json_t *op_tool_parse(const char *text, size_t start, size_t len, const char *id_prefix);
/* The same for an Anthropic reply: the calls of text[0, len) as tool_use content blocks
 * [{type: "tool_use", id, name, input: {...}}] (arguments that are not a JSON object give
 * {}), and *text_end = where the text before the block ends (trailing blanks cut); NULL
 * (and *text_end = len) when no block parses. */
json_t *op_tool_uses(const char *text, size_t len, const char *id_prefix, size_t *text_end);

/* How a chat template frames one tool call, read off its rendering of an assistant turn
 * that calls `name` with arguments text `args`: *open gets the bytes from the call marker
 * up to the name, *mid those between the name and the arguments (both malloc'd), which is
 * what a reply must start with to call a tool (open) or a given one (open, name, mid).
 * *mid is NULL when the arguments do not appear as that text (DSML writes them as
 * parameters). -1 when the rendering holds no call this parser reads (nothing allocated). */
int op_call_frame(const char *text, size_t len, const char *name, const char *args, char **open, char **mid);
/* The bytes that close a call after its arguments text `args` in the same rendering (up to
 * the end of the call's last end marker, e.g. "}\n</tool_call>"), malloc'd into *close;
 * -1 when args or an end marker is not there. */
int op_call_close(const char *text, size_t len, const char *args, char **close);

#endif
