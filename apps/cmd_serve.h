/* cmd_serve.h — `cinfer serve`: the OpenAI-compatible HTTP server (src/server). */
#ifndef CINFER_CMD_SERVE_H
#define CINFER_CMD_SERVE_H

/* argv holds the options after "serve"; returns the process exit status. */
int cmd_serve(int argc, char **argv);

#endif
