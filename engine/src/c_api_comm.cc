// The C ABI's distributed save: a communicator made of the four operations
// a caller's transport provides (ckfmt_comm_ops), and DistSave behind it.
#include <algorithm>
#include <cstring>
#include <vector>

#include "c_api_state.h"
#include "ckfmt/c_api.h"
#include "ckfmt/dist/comm_util.h"
#include "ckfmt/dist/dist_save.h"

namespace ckfmt {
namespace {

using dist::ConstSegment;
using dist::ReduceOp;
using dist::Segment;

// Tags of the gathers built from point-to-point operations; the engine's
// own Send/Recv tags lie below 30000 (communicator.h).
constexpr int kGatherTag = 30000;
constexpr int kGatherSegmentsTag = 30001;

// Every collective from all_gather, broadcast, send and recv. Gathers to a
// root are point-to-point, so that only the root receives the data (a
// flattened save gathers the whole state to rank 0, bucket by bucket).
class CallbackCommunicator final : public dist::Communicator {
 public:
  explicit CallbackCommunicator(const ckfmt_comm_ops& ops)
      : Communicator(dist::CommOptions{}), ops_(ops) {}

  int rank() const override { return ops_.rank; }
  int size() const override { return ops_.size; }
  std::string name() const override { return "callback"; }

  Status Barrier() override {
    std::vector<uint8_t> all(size());
    const uint8_t mine = 0;
    return Gathered("barrier", &mine, 1, all.data());
  }

  Status Broadcast(void* data, size_t bytes, int root) override {
    CKFMT_RETURN_IF_ERROR(Ready("broadcast", root));
    return Call("broadcast", ops_.broadcast(ops_.ctx, data, bytes, root));
  }

  Status AllGather(const void* send, size_t bytes, void* recv) override {
    return Gathered("allgather", send, bytes, recv);
  }

  // Every rank's part padded to the largest, gathered, then packed.
  Status AllGatherV(const void* send, size_t bytes, void* recv,
                    const std::vector<uint64_t>& counts) override {
    CKFMT_RETURN_IF_ERROR(CheckCounts("allgatherv", bytes, counts));
    uint64_t most = 0;
    for (uint64_t c : counts) most = std::max(most, c);
    std::vector<uint8_t> mine(most), all(most * counts.size());
    if (bytes) std::memcpy(mine.data(), send, bytes);
    CKFMT_RETURN_IF_ERROR(Gathered("allgatherv", mine.data(), most, all.data()));
    auto* out = static_cast<uint8_t*>(recv);
    for (size_t r = 0; r < counts.size(); ++r) {
      if (counts[r]) std::memcpy(out, all.data() + r * most, counts[r]);
      out += counts[r];
    }
    return Status::OK();
  }

  Status Gather(const void* send, size_t bytes, void* recv, int root) override {
    return GatherV(send, bytes, recv, std::vector<uint64_t>(size(), bytes), root);
  }

  Status GatherV(const void* send, size_t bytes, void* recv, const std::vector<uint64_t>& counts,
                 int root) override {
    CKFMT_RETURN_IF_ERROR(Ready("gatherv", root));
    if (rank() != root) return SendTo("gatherv", send, bytes, root, kGatherTag);
    CKFMT_RETURN_IF_ERROR(CheckCounts("gatherv", bytes, counts));
    auto* out = static_cast<uint8_t*>(recv);
    for (int r = 0; r < size(); ++r) {
      if (r == root) {
        if (bytes) std::memcpy(out, send, bytes);
      } else {
        CKFMT_RETURN_IF_ERROR(RecvFrom("gatherv", out, counts[r], r, kGatherTag));
      }
      out += counts[r];
    }
    return Status::OK();
  }

  // A rank's stream goes as one message; segments are packed or scattered
  // through a buffer of that rank's bytes where there are several.
  Status GatherSegments(const std::vector<ConstSegment>& send,
                        const std::vector<std::vector<Segment>>& recv, int root) override {
    CKFMT_RETURN_IF_ERROR(Ready("gather-segments", root));
    const uint64_t bytes = dist::SegmentBytes(send);
    if (rank() != root) {
      if (send.size() == 1) {
        return SendTo("gather-segments", send[0].data, bytes, root, kGatherSegmentsTag);
      }
      std::vector<uint8_t> packed(bytes);
      dist::CopySegments(send, {Segment{packed.data(), packed.size()}});
      return SendTo("gather-segments", packed.data(), bytes, root, kGatherSegmentsTag);
    }
    if (recv.size() != static_cast<size_t>(size()) || dist::SegmentBytes(recv[root]) != bytes) {
      return Status::InvalidArgument(
          "gather-segments: the root needs one receive list per rank, "
          "its own holding the bytes it sends");
    }
    dist::CopySegments(send, recv[root]);
    for (int r = 0; r < size(); ++r) {
      const uint64_t n = dist::SegmentBytes(recv[r]);
      if (r == root) continue;
      if (recv[r].size() == 1) {
        CKFMT_RETURN_IF_ERROR(
            RecvFrom("gather-segments", recv[r][0].data, n, r, kGatherSegmentsTag));
        continue;
      }
      std::vector<uint8_t> packed(n);
      CKFMT_RETURN_IF_ERROR(RecvFrom("gather-segments", packed.data(), n, r, kGatherSegmentsTag));
      dist::CopySegments({ConstSegment{packed.data(), packed.size()}}, recv[r]);
    }
    return Status::OK();
  }

  Status Send(const void* data, size_t bytes, int dst, int tag) override {
    CKFMT_RETURN_IF_ERROR(CheckTag("send", tag));
    return SendTo("send", data, bytes, dst, tag);
  }

  Status Recv(void* data, size_t bytes, int src, int tag) override {
    CKFMT_RETURN_IF_ERROR(CheckTag("recv", tag));
    return RecvFrom("recv", data, bytes, src, tag);
  }

  Status AllReduce(int64_t* values, size_t n, ReduceOp op) override {
    std::vector<int64_t> all(n * size());
    CKFMT_RETURN_IF_ERROR(Gathered("allreduce", values, n * sizeof(int64_t), all.data()));
    dist::ReduceGathered(all.data(), n, size(), op, values);
    return Status::OK();
  }

 private:
  // A failed operation breaks the communicator (communicator.h): the
  // transport may still be in the middle of it.
  Status Call(const char* op, int rc) {
    if (rc == 0) return Status::OK();
    return Break(Status::Aborted("callback communicator, rank " + std::to_string(rank()) + ": " +
                                 op + " failed in the caller's transport (it returned " +
                                 std::to_string(rc) + ")"));
  }

  Status Ready(const char* op, int peer) const {
    CKFMT_RETURN_IF_ERROR(CheckUsable(op));
    if (peer < 0 || peer >= size()) {
      return Status::InvalidArgument(std::string(op) + ": rank " + std::to_string(peer) +
                                     " is not in [0, " + std::to_string(size()) + ")");
    }
    return Status::OK();
  }

  Status Gathered(const char* op, const void* send, size_t bytes, void* recv) {
    CKFMT_RETURN_IF_ERROR(CheckUsable(op));
    return Call(op, ops_.all_gather(ops_.ctx, send, bytes, recv));
  }

  // Both sides know a message's size: one without bytes is not sent.
  Status SendTo(const char* op, const void* data, size_t bytes, int dst, int tag) {
    CKFMT_RETURN_IF_ERROR(Ready(op, dst));
    return bytes ? Call(op, ops_.send(ops_.ctx, data, bytes, dst, tag)) : Status::OK();
  }
  Status RecvFrom(const char* op, void* data, size_t bytes, int src, int tag) {
    CKFMT_RETURN_IF_ERROR(Ready(op, src));
    return bytes ? Call(op, ops_.recv(ops_.ctx, data, bytes, src, tag)) : Status::OK();
  }

  Status CheckCounts(const char* op, size_t bytes, const std::vector<uint64_t>& counts) const {
    if (counts.size() != static_cast<size_t>(size()) || counts[rank()] != bytes) {
      return Status::InvalidArgument(std::string(op) + ": expected " + std::to_string(size()) +
                                     " counts with this rank's equal to " + std::to_string(bytes));
    }
    return Status::OK();
  }

  static Status CheckTag(const char* op, int tag) {
    if (tag < 0 || tag >= kGatherTag) {
      return Status::InvalidArgument(std::string(op) + ": tag " + std::to_string(tag) +
                                     " is not in [0, " + std::to_string(kGatherTag) + ")");
    }
    return Status::OK();
  }

  const ckfmt_comm_ops ops_;
};

Result<dist::DistSaveOptions> DistOptionsFromAbi(const ckfmt_dist_options* o, const char* codec,
                                                 const ckfmt_metadata* metadata,
                                                 size_t n_metadata) {
  dist::DistSaveOptions options;
  CKFMT_ASSIGN_OR_RETURN(options.save, SaveOptionsFromAbi(codec, metadata, n_metadata));
  if (!o) return options;
  switch (o->mode) {
    case CKFMT_DIST_FLATTENED:
      options.mode = dist::SaveMode::kFlattened;
      break;
    case CKFMT_DIST_PARALLEL:
      options.mode = dist::SaveMode::kParallel;
      break;
    default:
      return Status::InvalidArgument("options.mode is " + std::to_string(o->mode) +
                                     ", expected 0 or 1 (CKFMT_DIST_*)");
  }
  if (o->memory_budget) options.memory_budget = o->memory_budget;
  if (o->check_contents) options.replica_check = dist::ReplicaCheck::kChecksum;
  return options;
}

}  // namespace
}  // namespace ckfmt

struct ckfmt_comm {
  explicit ckfmt_comm(const ckfmt_comm_ops& ops) : comm(ops) {}
  ckfmt::CallbackCommunicator comm;
};

using namespace ckfmt;

extern "C" int ckfmt_comm_new(const ckfmt_comm_ops* ops, ckfmt_comm** out, char* err,
                              size_t err_cap) {
  return Guarded(err, err_cap, [&]() -> Status {
    if (!out) return Status::InvalidArgument("out is NULL");
    *out = nullptr;
    if (!ops) return Status::InvalidArgument("ops is NULL");
    if (!ops->all_gather || !ops->broadcast || !ops->send || !ops->recv) {
      return Status::InvalidArgument("ops: all_gather, broadcast, send and recv must all be given");
    }
    if (ops->size < 1 || ops->rank < 0 || ops->rank >= ops->size) {
      return Status::InvalidArgument("ops: rank " + std::to_string(ops->rank) + " of size " +
                                     std::to_string(ops->size) + ", expected 0 <= rank < size");
    }
    *out = new ckfmt_comm(*ops);
    return Status::OK();
  });
}

extern "C" void ckfmt_comm_free(ckfmt_comm* comm) { delete comm; }

extern "C" int ckfmt_dist_save_entries(ckfmt_comm* comm, const char* path,
                                       const ckfmt_entry* entries, size_t n,
                                       const ckfmt_metadata* metadata, size_t n_metadata,
                                       const char* codec, const ckfmt_dist_options* options,
                                       char* err, size_t err_cap) {
  return Guarded(err, err_cap, [&]() -> Status {
    if (!comm) return Status::InvalidArgument("comm is NULL");
    // What one rank refuses, every rank reports: the others would otherwise
    // wait in the save's first collective for a rank that left.
    Status local = RequirePath(path);
    Result<dist::DistSaveOptions> so = DistOptionsFromAbi(options, codec, metadata, n_metadata);
    Result<Value> sd = EntriesToStateDict(entries, n, kEntryNoun, false);
    if (local.ok()) local = so.status();
    if (local.ok()) local = sd.status();
    CKFMT_RETURN_IF_ERROR(
        comm->comm.AgreeOnStatus(local, std::string("the entries of ") + (path ? path : "?")));
    return dist::DistSave(comm->comm, path, *sd, *so).status();
  });
}
