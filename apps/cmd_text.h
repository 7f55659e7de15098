/* cmd_text.h — the CLI's text commands (apps/cmd_text.c), dispatched from apps/cinfer.c.
 *
 *   cinfer tokenize   --model DIR --file F [--add-special]
 *   cinfer detokenize --model DIR --ids 1,2,3 [--skip-special]
 *
 * Like the other commands, each takes the arguments after the command name (argc/argv
 * without "cinfer" and the command) and returns the exit status: 0, 1 for bad input
 * (one "cinfer: ..." line on stderr), 2 for usage errors. */
#ifndef CI_CMD_TEXT_H
#define CI_CMD_TEXT_H

/* Prints the ids of F's contents on one line, separated by spaces. Without --add-special
 * no BOS/EOS is added (special tokens written in the text still match). */
int cmd_tokenize(int argc, char **argv);
/* Prints the decoded text exactly, with no newline added. */
int cmd_detokenize(int argc, char **argv);

#endif
