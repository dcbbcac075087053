// The NCCL backend: data operations on device buffers (memory() ==
// kDevice), enqueued on one CUDA stream and polled against the deadline
// (cudaStreamQuery and ncclCommGetAsyncError); on a timeout the NCCL
// communicator is aborted (ncclCommAbort), so no rank waits forever.
//
// Buffers passed to Broadcast, AllGather(V), Gather(V), GatherSegments,
// Send and Recv are device pointers on the communicator's device.
// AllReduce and AgreeOnStatus take host values and stage them through a
// small device buffer. Gathers of several segments are staged through a
// device scratch buffer of the stream's size; receive segments may also
// be pinned host memory (the scatter copies out of the scratch).
//
// Available when ckfmt is built with NCCL (CKFMT_HAVE_NCCL). NCCL refuses
// two ranks on one GPU: tests/gpu/nccl_test.cc runs it as one rank.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>

#include "ckfmt/dist/communicator.h"

namespace ckfmt::dist {

// Creates an NCCL communicator over the ranks of `bootstrap` (a host
// communicator, e.g. MPI): rank 0 makes the ncclUniqueId and broadcasts it
// through `bootstrap`; every rank uses CUDA device `device`. The
// communicator is created non-blocking and its initialization is bounded
// by options.timeout. It owns the NCCL communicator and a stream.
Result<std::unique_ptr<Communicator>> MakeNcclCommunicator(Communicator& bootstrap, int device,
                                                           const CommOptions& options = {});

// Wraps a caller's NCCL communicator and stream (not owned; the caller
// destroys them after the wrapper). Timeouts abort `comm` - create it with
// config.blocking = 0 so that NCCL calls return instead of blocking.
Result<std::unique_ptr<Communicator>> WrapNcclCommunicator(ncclComm_t comm, cudaStream_t stream,
                                                           const CommOptions& options = {});

}  // namespace ckfmt::dist
