// The MPI backend: host buffers, nonblocking MPI operations polled against a
// deadline, so that no call waits longer than the communicator's timeout.
//
// Collectives with a root (Gather, GatherV, GatherSegments) and
// AgreeOnStatus are built from point-to-point messages so that the root
// can name the ranks that did not arrive; AgreeOnStatus's root then tells
// the ranks that did arrive, so every surviving rank gets the same error.
// Barrier, Broadcast, AllGather(V) and AllReduce use MPI's nonblocking
// collectives (MPI-3).
//
// Available when ckfmt is built with MPI (CKFMT_HAVE_MPI).
#pragma once

#include <mpi.h>

#include <memory>

#include "ckfmt/dist/communicator.h"

namespace ckfmt::dist {

// Wraps a duplicate of `comm` (the caller's communicator is not used for
// ckfmt's own traffic) with errors returned rather than fatal. Collective
// over `comm`; the duplication itself (MPI_Comm_dup) is a blocking call
// without a timeout.
// REQUIRES: MPI is initialized (any thread level; ckfmt calls MPI from the
// thread that calls the communicator only).
Result<std::unique_ptr<Communicator>> MakeMpiCommunicator(MPI_Comm comm,
                                                          const CommOptions& options = {});

}  // namespace ckfmt::dist
