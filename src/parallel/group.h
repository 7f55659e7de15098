/* group.h — a model split over tensor-parallel ranks that the caller sees as one model.
 *
 * ci_model_open with opts->tp > 1 comes here: the group opens the model once per rank
 * (ci_model_open_rank: each its part of the weights and its own backend, all joined to one
 * communicator) and returns a ci_model whose family ops run every call on all ranks at once,
 * one thread per rank (the caller's thread is rank 0), and answer with rank 0's result: every
 * rank computes the same logits, bit for bit. Sessions hold one session per rank; a session's
 * position is the group's, given to every rank before each call (so ci_session_reset works).
 *
 * What a group does: sessions, forward, forward_argmax and batch steps (forward_batch and its
 * argmax form): generate, logits, bench, perplexity, and chat / serve continuing a slot's own
 * sequence. Not yet: paged pools, cache export / import, snapshots (the server's block pool and
 * prefix store): those ops are absent, so the server runs without them. Inputs are checked once, on the group, before any rank
 * runs; a rank that fails after that aborts the communicator, every rank stops, and the call
 * (and every later one) fails with the first rank's reason.
 *
 * The ranks are threads of this process on CPU backends (n_threads / tp pool threads each);
 * devices need a communicator of their own (NCCL), not written yet. */
#ifndef CI_GROUP_H
#define CI_GROUP_H
#include "../models/model.h"

int ci_group_open(const char *dir, const ci_model_opts *opts, ci_model **out, char *err, size_t errlen);

#endif
