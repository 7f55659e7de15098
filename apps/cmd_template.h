/* cmd_template.h — `cinfer template`: print a chat request rendered with a model's template.
 *
 *   cinfer template --model DIR --request F.json
 *
 * F.json is an OpenAI-style chat request ({"messages": [...], "tools": [...],
 * "add_generation_prompt": true, "chat_template_kwargs": {...}}). The rendered prompt goes to
 * stdout exactly, with no newline added. Bad input: one stderr line starting "cinfer: " and
 * exit status 1; usage errors exit 2. argv holds the options after the command name (a
 * leading "template" is skipped too). */
#ifndef CI_CMD_TEMPLATE_H
#define CI_CMD_TEMPLATE_H

int cmd_template(int argc, char **argv);

#endif
