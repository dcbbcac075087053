// Communicators: the collective operations the distributed save and load
// need, with a bounded wait on every one of them.
//
// Every operation is collective over all ranks unless it says otherwise
// (Send/Recv are point-to-point), and all ranks must call collectives in
// the same order with matching sizes. No operation waits longer than
// timeout(): when a peer does not arrive in time the call returns
// Status::Aborted naming the operation, the rank that gave up and, where
// the backend can tell, the ranks that did not arrive.
//
// After a timeout or a transport error the communicator is broken(): the
// failed operation may still be in flight inside the transport, and every
// later call fails at once with Aborted. Buffers passed to the failed call
// may still be read or written by the transport until the process exits;
// callers keep them alive (the distributed save does this for its own
// buffers) and should end the job rather than reuse the communicator.
//
// Backends: SingleCommunicator (one process, for tests and for callers that
// are not distributed), MpiCommunicator (host buffers, mpi_communicator.h)
// and NcclCommunicator (device buffers, nccl_communicator.h). memory() says
// which kind of buffer a backend's data operations take; the helpers in
// comm_util.h and the distributed save need a host communicator.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ckfmt/status.h"

namespace ckfmt::dist {

enum class MemorySpace : uint8_t { kHost, kDevice };
enum class ReduceOp : uint8_t { kSum, kMin, kMax, kBitOr, kBitAnd };

struct CommOptions {
  // The longest any one operation waits for its peers.
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
};

// A byte range of memory in the communicator's memory space.
struct Segment {
  void* data;
  size_t size;
};
struct ConstSegment {
  const void* data;
  size_t size;
};

class Communicator {
 public:
  explicit Communicator(const CommOptions& options) : options_(options) {}
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "single", "mpi", "nccl".
  virtual std::string name() const = 0;
  virtual MemorySpace memory() const { return MemorySpace::kHost; }
  // Device communicators: the CUDA device their buffers live on; -1 for
  // host communicators.
  virtual int device() const { return -1; }

  std::chrono::milliseconds timeout() const { return options_.timeout; }
  void set_timeout(std::chrono::milliseconds t) { options_.timeout = t; }

  // True once an operation timed out or the transport failed; every later
  // operation then fails with Aborted and broken_reason().
  bool broken() const { return !broken_.ok(); }
  const Status& broken_reason() const { return broken_; }

  // Returns once every rank has called Barrier().
  virtual Status Barrier() = 0;
  // Copies `bytes` bytes at `data` on `root` into `data` on every rank.
  virtual Status Broadcast(void* data, size_t bytes, int root) = 0;
  // recv (size() * bytes) receives every rank's `bytes` bytes, in rank order.
  virtual Status AllGather(const void* send, size_t bytes, void* recv) = 0;
  // Variable sizes: rank r sends counts[r] bytes (REQUIRES: bytes ==
  // counts[rank()]); recv receives them concatenated in rank order.
  virtual Status AllGatherV(const void* send, size_t bytes, void* recv,
                            const std::vector<uint64_t>& counts) = 0;
  // Like AllGather, but only `root`'s recv is written (others may pass null).
  virtual Status Gather(const void* send, size_t bytes, void* recv, int root) = 0;
  // Like AllGatherV, but only `root` receives; only root needs `counts`.
  virtual Status GatherV(const void* send, size_t bytes, void* recv,
                         const std::vector<uint64_t>& counts, int root) = 0;
  // Zero-copy gather of scattered data: every rank sends the concatenation
  // of its `send` segments; on `root`, rank r's stream is scattered over
  // recv[r]'s segments in order. REQUIRES on root: recv.size() == size() and
  // each recv[r] holds exactly as many bytes as rank r sends (root's own
  // stream is copied locally). Non-root ranks pass an empty `recv`.
  virtual Status GatherSegments(const std::vector<ConstSegment>& send,
                                const std::vector<std::vector<Segment>>& recv, int root) = 0;
  // Point-to-point; `tag` in [0, 30000). A Send completes once its data is
  // handed to the transport, a Recv once `bytes` bytes from `src` arrived.
  virtual Status Send(const void* data, size_t bytes, int dst, int tag) = 0;
  virtual Status Recv(void* data, size_t bytes, int src, int tag) = 0;
  // Element-wise reduction of `n` int64 values in place, on every rank.
  // Host memory even for device communicators (it carries flags).
  virtual Status AllReduce(int64_t* values, size_t n, ReduceOp op) = 0;

  // Failure agreement. Every rank passes the outcome of its local work and
  // all get the same answer: OK iff every rank passed OK, else a status
  // with the first failing rank's code and a message listing each failing
  // rank's message ("rank 2: ..."). `what` names the step in messages.
  // A rank that does not arrive in time is reported as such by the others.
  virtual Status AgreeOnStatus(const Status& local, const std::string& what);

 protected:
  // Marks the communicator broken (first reason wins); returns `why`.
  Status Break(Status why);
  // Aborted if broken() (call first in every operation), else OK.
  Status CheckUsable(const char* op) const;

  CommOptions options_;

 private:
  Status broken_;
};

// The communicator of a single process: rank 0 of 1. Collectives copy
// locally; Send/Recv to oneself are matched in order per tag.
class SingleCommunicator final : public Communicator {
 public:
  explicit SingleCommunicator(const CommOptions& options = {}) : Communicator(options) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "single"; }
  Status Barrier() override;
  Status Broadcast(void* data, size_t bytes, int root) override;
  Status AllGather(const void* send, size_t bytes, void* recv) override;
  Status AllGatherV(const void* send, size_t bytes, void* recv,
                    const std::vector<uint64_t>& counts) override;
  Status Gather(const void* send, size_t bytes, void* recv, int root) override;
  Status GatherV(const void* send, size_t bytes, void* recv, const std::vector<uint64_t>& counts,
                 int root) override;
  Status GatherSegments(const std::vector<ConstSegment>& send,
                        const std::vector<std::vector<Segment>>& recv, int root) override;
  Status Send(const void* data, size_t bytes, int dst, int tag) override;
  Status Recv(void* data, size_t bytes, int src, int tag) override;
  Status AllReduce(int64_t* values, size_t n, ReduceOp op) override;
  Status AgreeOnStatus(const Status& local, const std::string& what) override;

 private:
  std::vector<std::pair<int, std::string>> mailbox_;  // (tag, bytes) sent to self
};

// Copies the concatenation of `src` into the concatenation of `dst`.
// REQUIRES: both hold the same number of bytes; host memory.
void CopySegments(const std::vector<ConstSegment>& src, const std::vector<Segment>& dst);
// Total bytes of a segment list.
uint64_t SegmentBytes(const std::vector<ConstSegment>& s);
uint64_t SegmentBytes(const std::vector<Segment>& s);

}  // namespace ckfmt::dist
