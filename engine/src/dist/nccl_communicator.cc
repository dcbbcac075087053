// The NCCL backend (see nccl_communicator.h). Compiled only with NCCL; CI
// has no GPU: tests/gpu/nccl_test.cc runs it on one GPU as one rank.
#include "ckfmt/dist/nccl_communicator.h"

#include <sched.h>

#include <algorithm>
#include <cstring>
#include <thread>

#include "ckfmt/dist/comm_util.h"
#include "ckfmt/file_layout.h"

namespace ckfmt::dist {
namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kStatusRecord = 4096;

std::string Seconds(std::chrono::milliseconds ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", ms.count() / 1000.0);
  return buf;
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, cudaStream_t stream, bool owned, int device,
                   const CommOptions& options)
      : Communicator(options), comm_(comm), stream_(stream), owned_(owned), device_(device) {
    ncclCommUserRank(comm_, &rank_);
    ncclCommCount(comm_, &size_);
  }
  ~NcclCommunicator() override {
    if (scratch_) cudaFree(scratch_);
    if (!owned_) return;
    if (!broken()) {
      ncclCommFinalize(comm_);
      (void)Poll("finalize", Clock::now() + timeout());
    }
    if (broken()) {
      ncclCommAbort(comm_);
    } else {
      ncclCommDestroy(comm_);
    }
    cudaStreamDestroy(stream_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "nccl"; }
  MemorySpace memory() const override { return MemorySpace::kDevice; }
  int device() const override { return device_; }

  Status Barrier() override {
    int64_t v = 0;
    return AllReduce(&v, 1, ReduceOp::kSum);
  }

  Status Broadcast(void* data, size_t bytes, int root) override {
    CKFMT_RETURN_IF_ERROR(CheckUsable("broadcast"));
    return Run("broadcast", [&] {
      return ncclBroadcast(data, data, bytes, ncclUint8, root, comm_, stream_);
    });
  }

  Status AllGather(const void* send, size_t bytes, void* recv) override {
    CKFMT_RETURN_IF_ERROR(CheckUsable("allgather"));
    return Run("allgather",
               [&] { return ncclAllGather(send, recv, bytes, ncclUint8, comm_, stream_); });
  }

  // One broadcast per rank, grouped.
  Status AllGatherV(const void* send, size_t bytes, void* recv,
                    const std::vector<uint64_t>& counts) override {
    CKFMT_RETURN_IF_ERROR(CheckUsable("allgatherv"));
    if (counts.size() != size_t(size_) || counts[rank_] != bytes) {
      return Status::InvalidArgument("nccl allgatherv: counts must have one entry per rank");
    }
    return Run("allgatherv", [&] {
      ncclGroupStart();
      uint64_t off = 0;
      ncclResult_t rc = ncclSuccess;
      for (int r = 0; r < size_ && (rc == ncclSuccess || rc == ncclInProgress); ++r) {
        auto* dst = static_cast<uint8_t*>(recv) + off;
        rc = ncclBroadcast(r == rank_ ? send : dst, dst, counts[r], ncclUint8, r, comm_, stream_);
        off += counts[r];
      }
      ncclResult_t end = ncclGroupEnd();
      return rc == ncclSuccess ? end : rc;
    });
  }

  Status Gather(const void* send, size_t bytes, void* recv, int root) override {
    std::vector<uint64_t> counts(rank_ == root ? size_ : 0, bytes);
    return GatherV(send, bytes, recv, counts, root);
  }

  Status GatherV(const void* send, size_t bytes, void* recv, const std::vector<uint64_t>& counts,
                 int root) override {
    CKFMT_RETURN_IF_ERROR(CheckUsable("gatherv"));
    if (rank_ == root && (counts.size() != size_t(size_) || counts[rank_] != bytes)) {
      return Status::InvalidArgument("nccl gatherv: the root needs one count per rank");
    }
    return Run("gatherv to rank " + std::to_string(root), [&] {
      ncclGroupStart();
      ncclResult_t rc = ncclSuccess;
      if (rank_ != root) {
        rc = ncclSend(send, bytes, ncclUint8, root, comm_, stream_);
      } else {
        uint64_t off = 0;
        for (int r = 0; r < size_; ++r) {
          auto* dst = static_cast<uint8_t*>(recv) + off;
          if (r == rank_) {
            if (dst != send) cudaMemcpyAsync(dst, send, bytes, cudaMemcpyDeviceToDevice, stream_);
          } else if (rc == ncclSuccess || rc == ncclInProgress) {
            rc = ncclRecv(dst, counts[r], ncclUint8, r, comm_, stream_);
          }
          off += counts[r];
        }
      }
      ncclResult_t end = ncclGroupEnd();
      return rc == ncclSuccess ? end : rc;
    });
  }

  // Stages multi-segment streams through device scratch (see header).
  Status GatherSegments(const std::vector<ConstSegment>& send,
                        const std::vector<std::vector<Segment>>& recv, int root) override {
    CKFMT_RETURN_IF_ERROR(CheckUsable("gather-segments"));
    std::vector<uint64_t> counts;
    uint64_t total = 0;
    if (rank_ == root) {
      if (recv.size() != size_t(size_)) {
        return Status::InvalidArgument("nccl gather-segments: need one receive list per rank");
      }
      for (const auto& r : recv) counts.push_back(SegmentBytes(r));
      for (uint64_t c : counts) total += c;
    }
    uint64_t mine = SegmentBytes(send);
    CKFMT_RETURN_IF_ERROR(Reserve(std::max(total, mine)));
    // Pack this rank's stream, gather into scratch on root, then scatter.
    uint8_t* packed = static_cast<uint8_t*>(scratch_);
    if (rank_ == root) {
      uint64_t off = 0;
      for (int r = 0; r < rank_; ++r) off += counts[r];
      packed += off;
    }
    uint64_t off = 0;
    for (const auto& s : send) {
      cudaMemcpyAsync(packed + off, s.data, s.size, cudaMemcpyDeviceToDevice, stream_);
      off += s.size;
    }
    CKFMT_RETURN_IF_ERROR(GatherV(packed, mine, scratch_, counts, root));
    if (rank_ != root) return Status::OK();
    off = 0;
    for (int r = 0; r < size_; ++r) {
      for (const auto& d : recv[r]) {
        cudaMemcpyAsync(d.data, static_cast<uint8_t*>(scratch_) + off, d.size,
                        cudaMemcpyDefault, stream_);
        off += d.size;
      }
    }
    return Poll("gather-segments (scatter)", Clock::now() + timeout());
  }

  Status Send(const void* data, size_t bytes, int dst, int) override {
    CKFMT_RETURN_IF_ERROR(CheckUsable("send"));
    return Run("send to rank " + std::to_string(dst),
               [&] { return ncclSend(data, bytes, ncclUint8, dst, comm_, stream_); });
  }

  Status Recv(void* data, size_t bytes, int src, int) override {
    CKFMT_RETURN_IF_ERROR(CheckUsable("recv"));
    return Run("recv from rank " + std::to_string(src),
               [&] { return ncclRecv(data, bytes, ncclUint8, src, comm_, stream_); });
  }

  // Host values: all-gathered through device scratch, reduced on the host
  // (NCCL has no bitwise reductions).
  Status AllReduce(int64_t* values, size_t n, ReduceOp op) override {
    CKFMT_RETURN_IF_ERROR(CheckUsable("allreduce"));
    std::vector<int64_t> all(n * size_);
    CKFMT_RETURN_IF_ERROR(HostAllGather(values, n * sizeof(int64_t), all.data(), "allreduce"));
    ReduceGathered(all.data(), n, size_, op, values);
    return Status::OK();
  }

  Status AgreeOnStatus(const Status& local, const std::string& what) override {
    CKFMT_RETURN_IF_ERROR(CheckUsable("agree-on-status"));
    std::vector<uint8_t> mine(kStatusRecord, 0), all(kStatusRecord * size_);
    std::string enc = EncodeStatus(local);
    if (enc.size() > kStatusRecord - 8) enc.resize(kStatusRecord - 8);
    PutU64(mine.data(), enc.size());
    std::memcpy(mine.data() + 8, enc.data(), enc.size());
    CKFMT_RETURN_IF_ERROR(HostAllGather(mine.data(), kStatusRecord, all.data(),
                                        "agree-on-status (" + what + ")"));
    std::vector<Status> per_rank;
    for (int r = 0; r < size_; ++r) {
      const uint8_t* rec = all.data() + kStatusRecord * r;
      uint64_t len = std::min<uint64_t>(GetU64(rec), kStatusRecord - 8);
      per_rank.push_back(DecodeStatus(std::string(reinterpret_cast<const char*>(rec + 8), len)));
    }
    return CombineStatuses(per_rank, what);
  }

 private:
  std::string Where(const std::string& op) const {
    return "nccl " + op + " on rank " + std::to_string(rank_) + " of " + std::to_string(size_);
  }

  Status Reserve(uint64_t bytes) {
    if (bytes <= scratch_size_) return Status::OK();
    if (scratch_) cudaFree(scratch_);
    scratch_ = nullptr;
    scratch_size_ = 0;
    cudaError_t e = cudaMalloc(&scratch_, std::max<uint64_t>(bytes, 1));
    if (e != cudaSuccess) {
      return Status::IOError(Where("scratch") + ": cudaMalloc of " + std::to_string(bytes) +
                             " bytes: " + cudaGetErrorString(e));
    }
    scratch_size_ = bytes;
    return Status::OK();
  }

  // All-gathers host bytes through the device scratch buffer.
  Status HostAllGather(const void* send, size_t bytes, void* recv, const std::string& op) {
    CKFMT_RETURN_IF_ERROR(Reserve(bytes * (size_ + 1)));
    auto* dev = static_cast<uint8_t*>(scratch_);
    cudaMemcpyAsync(dev + bytes * size_, send, bytes, cudaMemcpyHostToDevice, stream_);
    CKFMT_RETURN_IF_ERROR(Run(op, [&] {
      return ncclAllGather(dev + bytes * size_, dev, bytes, ncclUint8, comm_, stream_);
    }));
    cudaMemcpyAsync(recv, dev, bytes * size_, cudaMemcpyDeviceToHost, stream_);
    return Poll(op + " (copy back)", Clock::now() + timeout());
  }

  // Enqueues with `issue`, then polls to completion or the deadline.
  template <typename F>
  Status Run(const std::string& op, F issue) {
    cudaSetDevice(device_);
    ncclResult_t rc = issue();
    if (rc != ncclSuccess && rc != ncclInProgress) {
      ncclCommAbort(comm_);
      return Break(Status::Aborted(Where(op) + ": " + ncclGetErrorString(rc)));
    }
    return Poll(op, Clock::now() + timeout());
  }

  // Waits for the stream, watching the communicator's asynchronous error.
  Status Poll(const std::string& op, Clock::time_point deadline) {
    const auto start = Clock::now();
    while (true) {
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_, &async);
      if (async != ncclSuccess && async != ncclInProgress) {
        ncclCommAbort(comm_);
        return Break(Status::Aborted(Where(op) + ": " + ncclGetErrorString(async)));
      }
      if (async == ncclSuccess) {
        cudaError_t e = cudaStreamQuery(stream_);
        if (e == cudaSuccess) return Status::OK();
        if (e != cudaErrorNotReady) {
          ncclCommAbort(comm_);
          return Break(Status::Aborted(Where(op) + ": " + cudaGetErrorString(e)));
        }
      }
      auto now = Clock::now();
      if (now >= deadline) {
        ncclCommAbort(comm_);
        return Break(Status::Aborted(Where(op) + " timed out after " + Seconds(timeout()) +
                                     "; some rank did not arrive (the NCCL communicator was "
                                     "aborted)"));
      }
      if (now - start < std::chrono::milliseconds(2)) continue;
      if (now - start < std::chrono::seconds(1)) {
        sched_yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
  }

  ncclComm_t comm_;
  cudaStream_t stream_;
  bool owned_;
  int device_;
  int rank_ = 0, size_ = 1;
  void* scratch_ = nullptr;
  uint64_t scratch_size_ = 0;
};

}  // namespace

Result<std::unique_ptr<Communicator>> MakeNcclCommunicator(Communicator& bootstrap, int device,
                                                           const CommOptions& options) {
  if (bootstrap.memory() != MemorySpace::kHost) {
    return Status::InvalidArgument("MakeNcclCommunicator: the bootstrap must be a host communicator");
  }
  cudaError_t ce = cudaSetDevice(device);
  ncclUniqueId id;
  std::memset(&id, 0, sizeof id);
  Status local;
  if (ce != cudaSuccess) {
    local = Status::IOError("cudaSetDevice(" + std::to_string(device) + "): " +
                            cudaGetErrorString(ce));
  } else if (bootstrap.rank() == 0) {
    ncclResult_t rc = ncclGetUniqueId(&id);
    if (rc != ncclSuccess) local = Status::IOError(std::string("ncclGetUniqueId: ") + ncclGetErrorString(rc));
  }
  CKFMT_RETURN_IF_ERROR(bootstrap.AgreeOnStatus(local, "NCCL setup"));
  CKFMT_RETURN_IF_ERROR(bootstrap.Broadcast(&id, sizeof id, 0));
  cudaStream_t stream = nullptr;
  ce = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  if (ce != cudaSuccess) {
    local = Status::IOError(std::string("cudaStreamCreate: ") + cudaGetErrorString(ce));
  }
  ncclComm_t comm = nullptr;
  if (local.ok()) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclResult_t rc = ncclCommInitRankConfig(&comm, bootstrap.size(), id, bootstrap.rank(), &config);
    auto deadline = std::chrono::steady_clock::now() + options.timeout;
    while (rc == ncclInProgress) {
      if (std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ncclCommGetAsyncError(comm, &rc);
    }
    if (rc != ncclSuccess) {
      if (comm) ncclCommAbort(comm);
      comm = nullptr;
      local = Status::Aborted(rc == ncclInProgress
                                  ? "ncclCommInitRankConfig timed out after " + Seconds(options.timeout)
                                  : std::string("ncclCommInitRankConfig: ") + ncclGetErrorString(rc));
    }
  }
  Status agreed = bootstrap.AgreeOnStatus(local, "NCCL communicator creation");
  if (!agreed.ok()) {
    if (comm) ncclCommAbort(comm);
    if (stream) cudaStreamDestroy(stream);
    return agreed;
  }
  return std::unique_ptr<Communicator>(new NcclCommunicator(comm, stream, true, device, options));
}

Result<std::unique_ptr<Communicator>> WrapNcclCommunicator(ncclComm_t comm, cudaStream_t stream,
                                                           const CommOptions& options) {
  int device = 0;
  if (ncclCommCuDevice(comm, &device) != ncclSuccess) {
    return Status::InvalidArgument("WrapNcclCommunicator: not a valid NCCL communicator");
  }
  return std::unique_ptr<Communicator>(new NcclCommunicator(comm, stream, false, device, options));
}

}  // namespace ckfmt::dist
