// Communicator base behaviour, the single-process backend and comm_util.h.
#include "ckfmt/dist/communicator.h"

#include <algorithm>
#include <cstring>

#include "ckfmt/dist/comm_util.h"
#include "ckfmt/file_layout.h"

namespace ckfmt::dist {

Status Communicator::Break(Status why) {
  if (broken_.ok()) broken_ = why;
  return why;
}

Status Communicator::CheckUsable(const char* op) const {
  if (broken_.ok()) return Status::OK();
  return Status::Aborted(name() + " communicator, rank " + std::to_string(rank()) + ": " + op +
                         " refused: the communicator is unusable after an earlier failure (" +
                         broken_.message() + ")");
}

Status Communicator::AgreeOnStatus(const Status& local, const std::string& what) {
  CKFMT_RETURN_IF_ERROR(CheckUsable("agree-on-status"));
  auto all = AllGatherStrings(*this, EncodeStatus(local));
  if (!all.ok()) return all.status().WithContext(what);
  std::vector<Status> statuses;
  for (const auto& s : *all) statuses.push_back(DecodeStatus(s));
  return CombineStatuses(statuses, what);
}

// ---------------------------------------------------------------------------
// Single process.

namespace {
Status CheckRoot(int root, const char* op) {
  if (root != 0) {
    return Status::InvalidArgument(std::string(op) + ": root " + std::to_string(root) +
                                   " is not a rank of a size-1 communicator");
  }
  return Status::OK();
}
}  // namespace

Status SingleCommunicator::Barrier() { return CheckUsable("barrier"); }

Status SingleCommunicator::Broadcast(void*, size_t, int root) {
  CKFMT_RETURN_IF_ERROR(CheckUsable("broadcast"));
  return CheckRoot(root, "broadcast");
}

Status SingleCommunicator::AllGather(const void* send, size_t bytes, void* recv) {
  CKFMT_RETURN_IF_ERROR(CheckUsable("allgather"));
  if (bytes && recv != send) std::memmove(recv, send, bytes);
  return Status::OK();
}

Status SingleCommunicator::AllGatherV(const void* send, size_t bytes, void* recv,
                                      const std::vector<uint64_t>& counts) {
  CKFMT_RETURN_IF_ERROR(CheckUsable("allgatherv"));
  if (counts.size() != 1 || counts[0] != bytes) {
    return Status::InvalidArgument("allgatherv: counts must be {" + std::to_string(bytes) + "}");
  }
  return AllGather(send, bytes, recv);
}

Status SingleCommunicator::Gather(const void* send, size_t bytes, void* recv, int root) {
  CKFMT_RETURN_IF_ERROR(CheckRoot(root, "gather"));
  return AllGather(send, bytes, recv);
}

Status SingleCommunicator::GatherV(const void* send, size_t bytes, void* recv,
                                   const std::vector<uint64_t>& counts, int root) {
  CKFMT_RETURN_IF_ERROR(CheckRoot(root, "gatherv"));
  return AllGatherV(send, bytes, recv, counts);
}

Status SingleCommunicator::GatherSegments(const std::vector<ConstSegment>& send,
                                          const std::vector<std::vector<Segment>>& recv,
                                          int root) {
  CKFMT_RETURN_IF_ERROR(CheckUsable("gather-segments"));
  CKFMT_RETURN_IF_ERROR(CheckRoot(root, "gather-segments"));
  if (recv.size() != 1 || SegmentBytes(recv[0]) != SegmentBytes(send)) {
    return Status::InvalidArgument("gather-segments: the receive segments hold " +
                                   std::to_string(recv.empty() ? 0 : SegmentBytes(recv[0])) +
                                   " bytes, the send segments " +
                                   std::to_string(SegmentBytes(send)));
  }
  CopySegments(send, recv[0]);
  return Status::OK();
}

Status SingleCommunicator::Send(const void* data, size_t bytes, int dst, int tag) {
  CKFMT_RETURN_IF_ERROR(CheckUsable("send"));
  CKFMT_RETURN_IF_ERROR(CheckRoot(dst, "send"));
  mailbox_.emplace_back(tag, std::string(static_cast<const char*>(data), bytes));
  return Status::OK();
}

Status SingleCommunicator::Recv(void* data, size_t bytes, int src, int tag) {
  CKFMT_RETURN_IF_ERROR(CheckUsable("recv"));
  CKFMT_RETURN_IF_ERROR(CheckRoot(src, "recv"));
  for (auto it = mailbox_.begin(); it != mailbox_.end(); ++it) {
    if (it->first != tag) continue;
    if (it->second.size() != bytes) {
      return Status::InvalidArgument("recv: expected " + std::to_string(bytes) +
                                     " bytes, the matching send has " +
                                     std::to_string(it->second.size()));
    }
    std::memcpy(data, it->second.data(), bytes);
    mailbox_.erase(it);
    return Status::OK();
  }
  // Nothing can ever arrive: a single process waiting on itself.
  return Break(Status::Aborted("recv on a size-1 communicator: no matching send with tag " +
                               std::to_string(tag) + " (it would wait forever)"));
}

Status SingleCommunicator::AllReduce(int64_t*, size_t, ReduceOp) {
  return CheckUsable("allreduce");
}

Status SingleCommunicator::AgreeOnStatus(const Status& local, const std::string& what) {
  CKFMT_RETURN_IF_ERROR(CheckUsable("agree-on-status"));
  return CombineStatuses({local}, what);
}

// ---------------------------------------------------------------------------
// Segments.

uint64_t SegmentBytes(const std::vector<ConstSegment>& s) {
  uint64_t n = 0;
  for (const auto& x : s) n += x.size;
  return n;
}

uint64_t SegmentBytes(const std::vector<Segment>& s) {
  uint64_t n = 0;
  for (const auto& x : s) n += x.size;
  return n;
}

void CopySegments(const std::vector<ConstSegment>& src, const std::vector<Segment>& dst) {
  size_t si = 0, so = 0;  // source segment, offset in it
  for (const Segment& d : dst) {
    size_t done = 0;
    while (done < d.size) {
      while (si < src.size() && so == src[si].size) {
        ++si;
        so = 0;
      }
      if (si == src.size()) return;
      size_t n = std::min(d.size - done, src[si].size - so);
      std::memcpy(static_cast<uint8_t*>(d.data) + done,
                  static_cast<const uint8_t*>(src[si].data) + so, n);
      done += n;
      so += n;
    }
  }
}

// ---------------------------------------------------------------------------
// comm_util.h

// Receive buffers of the helpers live on the heap and are left alive when
// the communicator breaks: a late peer may still write into them.
namespace {
struct HeapString {
  explicit HeapString(const Communicator& c, size_t n) : comm(c), s(new std::string(n, '\0')) {}
  ~HeapString() {
    if (!comm.broken()) delete s;
  }
  const Communicator& comm;
  std::string* s;
};
}  // namespace

Result<std::vector<std::string>> AllGatherStrings(Communicator& comm, const std::string& mine) {
  const int n = comm.size();
  HeapString sizes_buf(comm, n * sizeof(uint64_t));
  uint64_t my_size = mine.size();
  CKFMT_RETURN_IF_ERROR(comm.AllGather(&my_size, sizeof my_size, sizes_buf.s->data()));
  std::vector<uint64_t> sizes(n);
  std::memcpy(sizes.data(), sizes_buf.s->data(), n * sizeof(uint64_t));
  uint64_t total = 0;
  for (uint64_t s : sizes) total += s;
  HeapString all(comm, total);
  CKFMT_RETURN_IF_ERROR(comm.AllGatherV(mine.data(), mine.size(), all.s->data(), sizes));
  std::vector<std::string> out(n);
  uint64_t off = 0;
  for (int r = 0; r < n; ++r) {
    out[r] = all.s->substr(off, sizes[r]);
    off += sizes[r];
  }
  return out;
}

Result<std::vector<std::string>> GatherStrings(Communicator& comm, const std::string& mine,
                                               int root) {
  const int n = comm.size();
  const bool is_root = comm.rank() == root;
  std::vector<uint64_t> sizes(is_root ? n : 0);
  uint64_t my_size = mine.size();
  CKFMT_RETURN_IF_ERROR(comm.Gather(&my_size, sizeof my_size, is_root ? sizes.data() : nullptr,
                                    root));
  uint64_t total = 0;
  for (uint64_t s : sizes) total += s;
  std::string all(total, '\0');
  CKFMT_RETURN_IF_ERROR(
      comm.GatherV(mine.data(), mine.size(), is_root ? all.data() : nullptr, sizes, root));
  std::vector<std::string> out;
  if (!is_root) return out;
  out.resize(n);
  uint64_t off = 0;
  for (int r = 0; r < n; ++r) {
    out[r] = all.substr(off, sizes[r]);
    off += sizes[r];
  }
  return out;
}

Status BroadcastString(Communicator& comm, std::string* s, int root) {
  HeapString size_buf(comm, sizeof(uint64_t));
  uint64_t size = s->size();
  std::memcpy(size_buf.s->data(), &size, sizeof size);
  CKFMT_RETURN_IF_ERROR(comm.Broadcast(size_buf.s->data(), sizeof size, root));
  std::memcpy(&size, size_buf.s->data(), sizeof size);
  HeapString body(comm, size);
  if (comm.rank() == root) body.s->assign(*s);
  CKFMT_RETURN_IF_ERROR(comm.Broadcast(body.s->data(), size, root));
  if (comm.rank() != root) *s = *body.s;
  return Status::OK();
}

std::string EncodeStatus(const Status& s) {
  std::string out(4, '\0');
  PutU32(reinterpret_cast<uint8_t*>(out.data()), static_cast<uint32_t>(s.code()));
  return out + s.message();
}

Status DecodeStatus(const std::string& bytes) {
  if (bytes.size() < 4) return Status::Internal("malformed status message from a peer");
  auto code = static_cast<StatusCode>(GetU32(reinterpret_cast<const uint8_t*>(bytes.data())));
  if (code == StatusCode::kOk) return Status::OK();
  if (static_cast<uint32_t>(code) > static_cast<uint32_t>(StatusCode::kInternal)) {
    return Status::Internal("peer status with unknown code: " + bytes.substr(4));
  }
  return Status(code, bytes.substr(4));
}

Status CombineStatuses(const std::vector<Status>& per_rank, const std::string& what) {
  std::string msg;
  StatusCode code = StatusCode::kOk;
  size_t failed = 0;
  for (size_t r = 0; r < per_rank.size(); ++r) {
    if (per_rank[r].ok()) continue;
    if (code == StatusCode::kOk) code = per_rank[r].code();
    ++failed;
    msg += (msg.empty() ? "" : "; ") + std::string("rank ") + std::to_string(r) + ": " +
           per_rank[r].message();
  }
  if (code == StatusCode::kOk) return Status::OK();
  return Status(code, what + " failed on " + std::to_string(failed) + " of " +
                          std::to_string(per_rank.size()) + " ranks: " + msg);
}

void ReduceGathered(const int64_t* all, size_t n, int ranks, ReduceOp op, int64_t* out) {
  for (size_t i = 0; i < n; ++i) {
    int64_t v = all[i];
    for (int r = 1; r < ranks; ++r) {
      const int64_t x = all[r * n + i];
      switch (op) {
        case ReduceOp::kSum:
          v = static_cast<int64_t>(static_cast<uint64_t>(v) + static_cast<uint64_t>(x));
          break;
        case ReduceOp::kMin:
          v = std::min(v, x);
          break;
        case ReduceOp::kMax:
          v = std::max(v, x);
          break;
        case ReduceOp::kBitOr:
          v |= x;
          break;
        case ReduceOp::kBitAnd:
          v &= x;
          break;
      }
    }
    out[i] = v;
  }
}

}  // namespace ckfmt::dist
