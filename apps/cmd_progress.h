/* cmd_progress.h — the checkpoint-loading progress line of the commands that open a model.
 *
 * While a model opens, one line on stderr is redrawn in place (with \r) at most ten times a
 * second and at each shard's end:
 *   "cinfer: reading shard 2/5 model-00002-of-00005.safetensors 1.25/4.00 GiB (total 5.25/20.00 GiB)"
 * and finished once, with a newline, when every shard is read:
 *   "cinfer: read 5 shards, 20.00 GiB in 12.3 s"
 * Only when stderr is a terminal: piped or redirected, nothing is printed and the model is
 * read lazily as before (no ci_model_opts.progress). CINFER_PROGRESS=1 in the environment
 * turns the line on anyway (logs, tests), CINFER_PROGRESS=0 off. */
#ifndef CI_CMD_PROGRESS_H
#define CI_CMD_PROGRESS_H
#include "cinfer.h"

/* Sets o->progress (and its context) when the line is wanted, as above. */
void cli_progress_attach(ci_model_opts *o);

#endif
