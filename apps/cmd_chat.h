/* cmd_chat.h — `cinfer chat`: an interactive conversation (apps/cmd_chat.c). */
#ifndef CINFER_CMD_CHAT_H
#define CINFER_CMD_CHAT_H

/* argv holds the options after "chat"; returns the process exit status. */
int cmd_chat(int argc, char **argv);

#endif
