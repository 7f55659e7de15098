/* comm.h — the collectives that tensor- and expert-parallel ranks meet in.
 *
 * A ci_comm joins `world` ranks. Every rank calls each collective in the same order with the
 * same sizes (the ranks run the same forward on their parts of the weights); a call returns
 * once every rank has made it. Sums are taken in rank order 0, 1, .., world-1, so every rank
 * gets the same bits, and the result does not depend on which rank finishes first.
 *
 * Failure never hangs: a rank that cannot go on calls ci_comm_abort with its reason; every
 * collective then returns -1 on every rank (those waiting are woken), and ci_comm_error gives
 * the first reason, naming the rank. The other ranks' results are then undefined.
 *
 * This file has the one implementation the CPU can run: the ranks are threads of one process
 * and the buffers are host memory (the single-process simulation the tests check the sharded
 * math with, and what a CPU run with --tp uses). A device backend's collectives (NCCL) are ops
 * of its own, behind the same backend.h entries. */
#ifndef CI_COMM_H
#define CI_COMM_H
#include <stddef.h>
#include <stdint.h>

typedef struct ci_comm ci_comm;

/* A communicator of `world` (1..CI_COMM_MAX) threads of this process; NULL when out of memory. */
enum { CI_COMM_MAX = 64 };
ci_comm *ci_comm_new(int world);
void ci_comm_free(ci_comm *c);
int ci_comm_world(const ci_comm *c);

/* x[0, count) <- the sum over ranks of their x (rank order). */
int ci_comm_all_reduce(ci_comm *c, int rank, float *x, size_t count);
/* out [rows, world * width]: row i is rank 0's in row i, then rank 1's, ... (in [rows, width]
 * on each rank). out must not alias any rank's in. */
int ci_comm_all_gather_rows(ci_comm *c, int rank, float *out, const float *in, int rows, int width);
/* x[0, count) <- root's x. */
int ci_comm_broadcast(ci_comm *c, int rank, float *x, size_t count, int root);
int ci_comm_barrier(ci_comm *c, int rank);

/* Marks the communicator failed with rank's reason (the first reason is kept) and wakes every
 * rank waiting in a collective. */
void ci_comm_abort(ci_comm *c, int rank, const char *why);
/* 0 while no rank has aborted; else -1 with "rank R: reason" in msg. */
int ci_comm_error(ci_comm *c, char *msg, size_t len);

#endif
