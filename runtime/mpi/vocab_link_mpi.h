/*
 * vocab_link_mpi.h: the vocabulary passes' messages between pipeline ranks
 * as MPI point-to-point (runtime/vocab_link.h), for `mpirun -np P zbsched
 * run PLAN` on a "+vocab-N" plan.
 *
 * A message (kind, micro-batch) from rank e is the MPI message of source e
 * and tag kind * m + mb on a communicator of its own (a duplicate of the
 * pipeline's, so no transport message can match it).  A (source, tag)
 * pair occurs once per step, and MPI does not let two messages of one
 * pair overtake each other, so consecutive steps cannot mix.  Sends copy
 * the bytes and go out as MPI_Isend; the copies are freed as MPI finishes
 * with them (checked at every call, waited for at the end), so a send
 * never waits for its receiver, which may be busy with the ops its own
 * schedule puts first.  Receives are MPI_Recv on the calling worker (the
 * rank's only one; MPI_THREAD_SERIALIZED suffices, as for transport_mpi).
 */
#ifndef ZB_MPI_VOCAB_LINK_MPI_H
#define ZB_MPI_VOCAB_LINK_MPI_H

#include <mpi.h>

#include "runtime/vocab_link.h"

/* What vocab_link_mpi_make needs: the pipeline's communicator (borrowed;
 * duplicated) and the schedule's micro-batches per step (the tags). */
typedef struct vocab_link_mpi_cfg {
    MPI_Comm comm;  /* one rank per schedule device */
    int n_micro;    /* m */
    unsigned long long bytes_sent, messages; /* counters, added to by every send */
} vocab_link_mpi_cfg;

/* trainer_opts.make_vocab_link for ctx = a vocab_link_mpi_cfg (borrowed:
 * it must outlive the link): the carrier for device `device`, which must
 * be this rank.  0 and *out, or -1 with err. */
int vocab_link_mpi_make(void *ctx, int device, zb_vocab_link **out, zb_err *err);

#endif
