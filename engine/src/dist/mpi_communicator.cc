// The MPI backend (see mpi_communicator.h).
//
// Every operation posts nonblocking requests and polls them with MPI_Testsome
// until they complete or the deadline passes. Messages are split at 1 GiB so
// that no MPI count overflows an int.
#include "ckfmt/dist/mpi_communicator.h"

#include <sched.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <thread>

#include "ckfmt/dist/comm_util.h"
#include "ckfmt/file_layout.h"

namespace ckfmt::dist {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint64_t kMaxMessage = 1ull << 30;
// Polling: spin, then yield, then sleep (see WaitAll).
constexpr auto kSpin = std::chrono::milliseconds(2);
constexpr auto kYield = std::chrono::seconds(1);
constexpr auto kSleep = std::chrono::microseconds(200);
constexpr int kInternalTagBase = 30000;
// AgreeOnStatus sends fixed-size status records; longer messages are cut.
constexpr size_t kStatusRecord = 4096;

struct Pending {
  MPI_Request req = MPI_REQUEST_NULL;
  int peer = -1;         // the other rank of a point-to-point request; -1: collective
  bool is_recv = false;  // receives are cancelled on timeout
};

std::string MpiError(int rc) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(buf, len);
}

std::string Seconds(std::chrono::milliseconds ms) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", ms.count() / 1000.0);
  return buf;
}

std::string JoinRanks(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return s;
}

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm comm, const CommOptions& options) : Communicator(options), comm_(comm) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    int* ub = nullptr;
    int flag = 0;
    MPI_Comm_get_attr(comm_, MPI_TAG_UB, &ub, &flag);
    tag_span_ = flag && ub ? std::min(*ub - kInternalTagBase, 1 << 20) : 2767;
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    // A broken communicator may have requests in flight: leave it alone.
    if (!finalized && !broken()) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "mpi"; }

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
  int NextTag() { return kInternalTagBase + static_cast<int>(seq_++ % uint64_t(tag_span_)); }
  std::string Where(const std::string& op) const {
    return "mpi " + op + " on rank " + std::to_string(rank_) + " of " + std::to_string(size_);
  }
  // Turns an MPI return code into a status (and breaks on failure).
  Status Check(int rc, const std::string& op) {
    if (rc == MPI_SUCCESS) return Status::OK();
    return Break(Status::Aborted(Where(op) + ": " + MpiError(rc)));
  }
  Status CheckPeer(int peer, const std::string& op) const {
    if (peer < 0 || peer >= size_) {
      return Status::InvalidArgument(Where(op) + ": rank " + std::to_string(peer) +
                                     " out of range");
    }
    return Status::OK();
  }

  // Posts `bytes` bytes as messages of at most kMaxMessage.
  Status PostSend(const void* data, uint64_t bytes, int dst, int tag, std::vector<Pending>* p,
                  const std::string& op);
  Status PostRecv(void* data, uint64_t bytes, int src, int tag, std::vector<Pending>* p,
                  const std::string& op);
  // Polls until all of `p` complete or `deadline`. On timeout cancels the
  // receives, breaks the communicator and returns Aborted naming the peers
  // still outstanding (in *missing too, when given).
  Status WaitAll(std::vector<Pending>& p, const std::string& op, Clock::time_point deadline,
                 std::vector<int>* missing = nullptr);
  Clock::time_point Deadline(int factor = 1) const { return Clock::now() + factor * timeout(); }

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  int tag_span_ = 2767;
  uint64_t seq_ = 0;
};

Status MpiCommunicator::PostSend(const void* data, uint64_t bytes, int dst, int tag,
                                 std::vector<Pending>* p, const std::string& op) {
  const auto* b = static_cast<const uint8_t*>(data);
  uint64_t off = 0;
  do {
    int n = static_cast<int>(std::min(bytes - off, kMaxMessage));
    Pending x{MPI_REQUEST_NULL, dst, false};
    CKFMT_RETURN_IF_ERROR(Check(
        MPI_Isend(const_cast<uint8_t*>(b + off), n, MPI_BYTE, dst, tag, comm_, &x.req), op));
    p->push_back(x);
    off += n;
  } while (off < bytes);
  return Status::OK();
}

Status MpiCommunicator::PostRecv(void* data, uint64_t bytes, int src, int tag,
                                 std::vector<Pending>* p, const std::string& op) {
  auto* b = static_cast<uint8_t*>(data);
  uint64_t off = 0;
  do {
    int n = static_cast<int>(std::min(bytes - off, kMaxMessage));
    Pending x{MPI_REQUEST_NULL, src, true};
    CKFMT_RETURN_IF_ERROR(Check(MPI_Irecv(b + off, n, MPI_BYTE, src, tag, comm_, &x.req), op));
    p->push_back(x);
    off += n;
  } while (off < bytes);
  return Status::OK();
}

Status MpiCommunicator::WaitAll(std::vector<Pending>& p, const std::string& op,
                                Clock::time_point deadline, std::vector<int>* missing) {
  std::vector<MPI_Request> reqs(p.size());
  for (size_t i = 0; i < p.size(); ++i) reqs[i] = p[i].req;
  std::vector<int> idx(p.size());
  size_t left = std::count_if(reqs.begin(), reqs.end(),
                              [](MPI_Request r) { return r != MPI_REQUEST_NULL; });
  const auto start = Clock::now();
  for (uint64_t iter = 0; left > 0; ++iter) {
    int out = 0;
    int rc = MPI_Testsome(static_cast<int>(reqs.size()), reqs.data(), &out, idx.data(),
                          MPI_STATUSES_IGNORE);
    if (rc != MPI_SUCCESS) return Check(rc, op);
    if (out != MPI_UNDEFINED) left -= out;
    if (left == 0) break;
    auto now = Clock::now();
    if (now >= deadline) {
      std::vector<int> peers;
      bool collective = false;
      for (size_t i = 0; i < reqs.size(); ++i) {
        if (reqs[i] == MPI_REQUEST_NULL) continue;
        if (p[i].peer < 0) collective = true;
        else if (std::find(peers.begin(), peers.end(), p[i].peer) == peers.end()) peers.push_back(p[i].peer);
        if (p[i].is_recv) {
          // A late message must not land in a buffer the caller has freed.
          MPI_Cancel(&reqs[i]);
          MPI_Request_free(&reqs[i]);
        }
      }
      std::sort(peers.begin(), peers.end());
      if (missing) *missing = peers;
      std::string who = collective ? "some rank did not arrive (a collective cannot tell which)"
                                   : "waiting for rank(s) " + JoinRanks(peers);
      auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(now - start);
      return Break(Status::Aborted(Where(op) + " timed out after " + Seconds(waited) + "; " +
                                   who + " - a peer died, hung or called a different operation"));
    }
    // Poll hard for a moment, then yield the core, then sleep: ranks often
    // share cores with each other and with rank 0's writer thread, and a
    // rank that only waits must not take the CPU from the ones working.
    const auto waited = now - start;
    if (waited < kSpin) continue;
    if (waited < kYield) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(kSleep);
    }
  }
  return Status::OK();
}

Status MpiCommunicator::Barrier() {
  CKFMT_RETURN_IF_ERROR(CheckUsable("barrier"));
  std::vector<Pending> p(1);
  CKFMT_RETURN_IF_ERROR(Check(MPI_Ibarrier(comm_, &p[0].req), "barrier"));
  return WaitAll(p, "barrier", Deadline());
}

Status MpiCommunicator::Broadcast(void* data, size_t bytes, int root) {
  CKFMT_RETURN_IF_ERROR(CheckUsable("broadcast"));
  CKFMT_RETURN_IF_ERROR(CheckPeer(root, "broadcast"));
  std::vector<Pending> p;
  auto* b = static_cast<uint8_t*>(data);
  for (uint64_t off = 0; off < bytes || (off == 0 && bytes == 0); off += kMaxMessage) {
    Pending x;
    int n = static_cast<int>(std::min<uint64_t>(bytes - off, kMaxMessage));
    CKFMT_RETURN_IF_ERROR(Check(MPI_Ibcast(b + off, n, MPI_BYTE, root, comm_, &x.req),
                                "broadcast"));
    p.push_back(x);
    if (bytes == 0) break;
  }
  return WaitAll(p, "broadcast from rank " + std::to_string(root), Deadline());
}

Status MpiCommunicator::AllGather(const void* send, size_t bytes, void* recv) {
  CKFMT_RETURN_IF_ERROR(CheckUsable("allgather"));
  if (bytes > INT_MAX) {
    return Status::InvalidArgument(Where("allgather") + ": " + std::to_string(bytes) +
                                   " bytes per rank exceed 2 GiB");
  }
  std::vector<Pending> p(1);
  CKFMT_RETURN_IF_ERROR(Check(MPI_Iallgather(send, static_cast<int>(bytes), MPI_BYTE, recv,
                                             static_cast<int>(bytes), MPI_BYTE, comm_, &p[0].req),
                              "allgather"));
  return WaitAll(p, "allgather", Deadline());
}

Status MpiCommunicator::AllGatherV(const void* send, size_t bytes, void* recv,
                                   const std::vector<uint64_t>& counts) {
  CKFMT_RETURN_IF_ERROR(CheckUsable("allgatherv"));
  if (counts.size() != size_t(size_) || counts[rank_] != bytes) {
    return Status::InvalidArgument(Where("allgatherv") + ": counts must have " +
                                   std::to_string(size_) + " entries, this rank's equal to " +
                                   std::to_string(bytes));
  }
  std::vector<int> cnt(size_), displ(size_);
  uint64_t total = 0;
  for (int r = 0; r < size_; ++r) {
    if (total + counts[r] > INT_MAX) {
      return Status::InvalidArgument(Where("allgatherv") + ": more than 2 GiB in total");
    }
    cnt[r] = static_cast<int>(counts[r]);
    displ[r] = static_cast<int>(total);
    total += counts[r];
  }
  std::vector<Pending> p(1);
  CKFMT_RETURN_IF_ERROR(Check(MPI_Iallgatherv(send, static_cast<int>(bytes), MPI_BYTE, recv,
                                              cnt.data(), displ.data(), MPI_BYTE, comm_,
                                              &p[0].req),
                              "allgatherv"));
  return WaitAll(p, "allgatherv", Deadline());
}

Status MpiCommunicator::Gather(const void* send, size_t bytes, void* recv, int root) {
  std::vector<uint64_t> counts(rank_ == root ? size_ : 0, bytes);
  return GatherV(send, bytes, recv, counts, root);
}

Status MpiCommunicator::GatherV(const void* send, size_t bytes, void* recv,
                                const std::vector<uint64_t>& counts, int root) {
  const std::string op = "gatherv to rank " + std::to_string(root);
  CKFMT_RETURN_IF_ERROR(CheckUsable("gatherv"));
  CKFMT_RETURN_IF_ERROR(CheckPeer(root, "gatherv"));
  const int tag = NextTag();
  std::vector<Pending> p;
  if (rank_ != root) {
    CKFMT_RETURN_IF_ERROR(PostSend(send, bytes, root, tag, &p, op));
    return WaitAll(p, op, Deadline());
  }
  if (counts.size() != size_t(size_) || counts[rank_] != bytes) {
    return Status::InvalidArgument(Where(op) + ": counts must have " + std::to_string(size_) +
                                   " entries, the root's equal to " + std::to_string(bytes));
  }
  auto* out = static_cast<uint8_t*>(recv);
  uint64_t off = 0;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) {
      if (bytes) std::memcpy(out + off, send, bytes);
    } else {
      CKFMT_RETURN_IF_ERROR(PostRecv(out + off, counts[r], r, tag, &p, op));
    }
    off += counts[r];
  }
  return WaitAll(p, op, Deadline());
}

// Splits a segment stream into messages of at most kMaxMessage bytes and
// posts each, as an hindexed datatype when it spans several segments.
template <typename Seg>
std::vector<std::vector<std::pair<MPI_Aint, uint64_t>>> SplitStream(const std::vector<Seg>& segs) {
  std::vector<std::vector<std::pair<MPI_Aint, uint64_t>>> msgs(1);
  uint64_t in_msg = 0;
  for (const Seg& s : segs) {
    uint64_t off = 0;
    while (off < s.size) {
      if (in_msg == kMaxMessage) {
        msgs.emplace_back();
        in_msg = 0;
      }
      uint64_t n = std::min<uint64_t>(s.size - off, kMaxMessage - in_msg);
      MPI_Aint addr;
      MPI_Get_address(static_cast<const uint8_t*>(s.data) + off, &addr);
      msgs.back().emplace_back(addr, n);
      in_msg += n;
      off += n;
    }
  }
  return msgs;
}

Status MpiCommunicator::GatherSegments(const std::vector<ConstSegment>& send,
                                       const std::vector<std::vector<Segment>>& recv, int root) {
  const std::string op = "gather-segments to rank " + std::to_string(root);
  CKFMT_RETURN_IF_ERROR(CheckUsable("gather-segments"));
  CKFMT_RETURN_IF_ERROR(CheckPeer(root, "gather-segments"));
  if (rank_ == root) {
    if (recv.size() != size_t(size_) || SegmentBytes(recv[root]) != SegmentBytes(send)) {
      return Status::InvalidArgument(Where(op) + ": need one receive list per rank, the root's "
                                     "holding as many bytes as it sends");
    }
  }
  const int tag = NextTag();
  std::vector<Pending> p;
  std::vector<MPI_Datatype> types;
  auto post = [&](const std::vector<std::pair<MPI_Aint, uint64_t>>& msg, int peer,
                  bool is_recv) -> Status {
    if (msg.empty()) return Status::OK();  // nothing to transfer
    Pending x{MPI_REQUEST_NULL, peer, is_recv};
    int rc;
    if (msg.size() == 1) {
      void* ptr = reinterpret_cast<void*>(msg[0].first);
      int n = static_cast<int>(msg[0].second);
      rc = is_recv ? MPI_Irecv(ptr, n, MPI_BYTE, peer, tag, comm_, &x.req)
                   : MPI_Isend(ptr, n, MPI_BYTE, peer, tag, comm_, &x.req);
    } else {
      std::vector<int> lens(msg.size());
      std::vector<MPI_Aint> displs(msg.size());
      for (size_t i = 0; i < msg.size(); ++i) {
        lens[i] = static_cast<int>(msg[i].second);
        displs[i] = msg[i].first;
      }
      MPI_Datatype t;
      rc = MPI_Type_create_hindexed(static_cast<int>(msg.size()), lens.data(), displs.data(),
                                    MPI_BYTE, &t);
      if (rc == MPI_SUCCESS) rc = MPI_Type_commit(&t);
      if (rc != MPI_SUCCESS) return Check(rc, op);
      types.push_back(t);
      rc = is_recv ? MPI_Irecv(MPI_BOTTOM, 1, t, peer, tag, comm_, &x.req)
                   : MPI_Isend(MPI_BOTTOM, 1, t, peer, tag, comm_, &x.req);
    }
    CKFMT_RETURN_IF_ERROR(Check(rc, op));
    p.push_back(x);
    return Status::OK();
  };
  Status s;
  if (rank_ != root) {
    for (const auto& msg : SplitStream(send)) {
      if (s.ok()) s = post(msg, root, false);
    }
  } else {
    CopySegments(send, recv[root]);
    for (int r = 0; r < size_ && s.ok(); ++r) {
      if (r == root) continue;
      for (const auto& msg : SplitStream(recv[r])) {
        if (s.ok()) s = post(msg, r, true);
      }
    }
  }
  // Types may be freed while the operations using them are pending.
  for (MPI_Datatype& t : types) MPI_Type_free(&t);
  CKFMT_RETURN_IF_ERROR(s);
  return WaitAll(p, op, Deadline());
}

Status MpiCommunicator::Send(const void* data, size_t bytes, int dst, int tag) {
  const std::string op = "send to rank " + std::to_string(dst);
  CKFMT_RETURN_IF_ERROR(CheckUsable("send"));
  CKFMT_RETURN_IF_ERROR(CheckPeer(dst, "send"));
  if (tag < 0 || tag >= kInternalTagBase) return Status::InvalidArgument(Where(op) + ": bad tag");
  std::vector<Pending> p;
  CKFMT_RETURN_IF_ERROR(PostSend(data, bytes, dst, tag, &p, op));
  return WaitAll(p, op, Deadline());
}

Status MpiCommunicator::Recv(void* data, size_t bytes, int src, int tag) {
  const std::string op = "recv from rank " + std::to_string(src);
  CKFMT_RETURN_IF_ERROR(CheckUsable("recv"));
  CKFMT_RETURN_IF_ERROR(CheckPeer(src, "recv"));
  if (tag < 0 || tag >= kInternalTagBase) return Status::InvalidArgument(Where(op) + ": bad tag");
  std::vector<Pending> p;
  CKFMT_RETURN_IF_ERROR(PostRecv(data, bytes, src, tag, &p, op));
  return WaitAll(p, op, Deadline());
}

Status MpiCommunicator::AllReduce(int64_t* values, size_t n, ReduceOp op) {
  CKFMT_RETURN_IF_ERROR(CheckUsable("allreduce"));
  if (n > INT_MAX) return Status::InvalidArgument(Where("allreduce") + ": too many values");
  MPI_Op mop = MPI_SUM;
  switch (op) {
    case ReduceOp::kSum: mop = MPI_SUM; break;
    case ReduceOp::kMin: mop = MPI_MIN; break;
    case ReduceOp::kMax: mop = MPI_MAX; break;
    case ReduceOp::kBitOr: mop = MPI_BOR; break;
    case ReduceOp::kBitAnd: mop = MPI_BAND; break;
  }
  // Internal buffers: on a timeout they are left to the transport.
  auto* in = new int64_t[n + 1];
  auto* out = new int64_t[n + 1];
  std::memcpy(in, values, n * sizeof(int64_t));
  std::vector<Pending> p(1);
  Status s = Check(MPI_Iallreduce(in, out, static_cast<int>(n), MPI_INT64_T, mop, comm_, &p[0].req),
                   "allreduce");
  if (s.ok()) s = WaitAll(p, "allreduce", Deadline());
  if (s.ok()) std::memcpy(values, out, n * sizeof(int64_t));
  if (!broken()) {
    delete[] in;
    delete[] out;
  }
  return s;
}

// Status records: [code u32][message length u32][message, cut to fit].
void PutStatusRecord(const Status& s, uint8_t* rec) {
  std::string m = s.message();
  if (m.size() > kStatusRecord - 8) m = m.substr(0, kStatusRecord - 8 - 3) + "...";
  PutU32(rec, static_cast<uint32_t>(s.code()));
  PutU32(rec + 4, static_cast<uint32_t>(m.size()));
  std::memcpy(rec + 8, m.data(), m.size());
}

Status GetStatusRecord(const uint8_t* rec) {
  uint32_t len = std::min<uint32_t>(GetU32(rec + 4), kStatusRecord - 8);
  std::string bytes(4, '\0');
  std::memcpy(bytes.data(), rec, 4);
  bytes.append(reinterpret_cast<const char*>(rec + 8), len);
  return DecodeStatus(bytes);
}

// Gather of status records to rank 0, which combines them and sends the
// verdict back: [broken u64][length u64] then the encoded status. Ranks
// that do not reach rank 0 in time are named in the verdict; rank 0 answers
// the others before giving up, so all survivors report the same failure.
Status MpiCommunicator::AgreeOnStatus(const Status& local, const std::string& what) {
  CKFMT_RETURN_IF_ERROR(CheckUsable("agree-on-status"));
  const std::string op = "agree-on-status (" + what + ")";
  const int tag = NextTag();
  // Heap buffers, left to the transport if the call times out.
  auto* records = new uint8_t[kStatusRecord * size_]();
  auto release = [&] {
    if (!broken()) delete[] records;
  };
  PutStatusRecord(local, records + kStatusRecord * rank_);
  if (rank_ == 0) {
    std::vector<Pending> p;
    for (int r = 1; r < size_; ++r) {
      Status s = PostRecv(records + kStatusRecord * r, kStatusRecord, r, tag, &p, op);
      if (!s.ok()) {
        release();
        return s;
      }
    }
    std::vector<int> missing;
    Status waited = WaitAll(p, op, Deadline(), &missing);
    std::vector<Status> per_rank(size_);
    for (int r = 0; r < size_; ++r) {
      bool absent = std::find(missing.begin(), missing.end(), r) != missing.end();
      per_rank[r] = absent ? Status::Aborted("did not arrive within " + Seconds(timeout()) +
                                             " (died, hung or diverged)")
                           : GetStatusRecord(records + kStatusRecord * r);
    }
    if (!waited.ok() && missing.empty()) {  // a transport error, not a timeout
      release();
      return waited;
    }
    Status verdict = CombineStatuses(per_rank, what);
    std::string body = EncodeStatus(verdict);
    auto* answer = new uint8_t[16 + body.size()];
    PutU64(answer, waited.ok() ? 0 : 1);
    PutU64(answer + 8, body.size());
    std::memcpy(answer + 16, body.data(), body.size());
    std::vector<Pending> q;
    for (int r = 1; r < size_; ++r) {
      if (std::find(missing.begin(), missing.end(), r) != missing.end()) continue;
      (void)PostSend(answer, 16, r, tag, &q, op);
      (void)PostSend(answer + 16, body.size(), r, tag, &q, op);
    }
    // Bounded: the survivors are waiting for exactly these messages.
    Status sent = WaitAll(q, op, Deadline());
    if (!broken()) delete[] answer;
    release();
    if (!sent.ok() && verdict.ok()) return sent;
    return verdict;
  }
  std::vector<Pending> p;
  Status s = PostSend(records + kStatusRecord * rank_, kStatusRecord, 0, tag, &p, op);
  auto* header = new uint8_t[16]();
  if (s.ok()) s = PostRecv(header, 16, 0, tag, &p, op);
  // Rank 0 waits up to one timeout for the others, then answers.
  if (s.ok()) s = WaitAll(p, op, Deadline(2));
  if (!s.ok()) {
    release();
    if (!broken()) delete[] header;
    return Status::Aborted(s.message() + " (rank 0 coordinates the agreement and did not answer)");
  }
  bool peer_missing = GetU64(header) != 0;
  uint64_t len = GetU64(header + 8);
  delete[] header;
  std::string body(len, '\0');
  p.clear();
  s = PostRecv(body.data(), len, 0, tag, &p, op);
  if (s.ok()) s = WaitAll(p, op, Deadline());
  release();
  if (!s.ok()) return s;
  Status verdict = DecodeStatus(body);
  // A rank that did not arrive leaves the communicator unusable everywhere.
  if (peer_missing) (void)Break(verdict);
  return verdict;
}

}  // namespace

Result<std::unique_ptr<Communicator>> MakeMpiCommunicator(MPI_Comm comm,
                                                          const CommOptions& options) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) {
    return Status::InvalidArgument("MakeMpiCommunicator: MPI is not initialized (or finalized)");
  }
  MPI_Comm dup;
  int rc = MPI_Comm_dup(comm, &dup);
  if (rc != MPI_SUCCESS) return Status::Aborted("MPI_Comm_dup: " + MpiError(rc));
  MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
  return std::unique_ptr<Communicator>(new MpiCommunicator(dup, options));
}

}  // namespace ckfmt::dist
