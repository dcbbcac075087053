#include "ckfmt/async_save.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "ckfmt/checksum.h"
#include "ckfmt/commit.h"
#include "ckfmt/log.h"
#include "device/device_ops.h"
#include "device/device_staging.h"
#include "io/file.h"
#include "save_entries.h"
#include "thread_pool.h"

namespace ckfmt {

class AsyncSaver::Impl {
 public:
  explicit Impl(const AsyncSaverOptions& o) : opts_(o), pool_(o.copy_threads) {}
  ~Impl() {
    auto r = Join();
    if (!reported_ && !r.ok()) {
      Log(LogLevel::kError, "background save failed: " + r.status().ToString());
    }
  }

  Status SaveAsync(const std::string& path, const Value& sd, const SaveOptions& options) {
    auto start = std::chrono::steady_clock::now();
    if (!sd.is_dict()) return Status::InvalidArgument(path + ": the state dict must be a dict");
    // Known before the snapshot: the caller is not blocked for a save that cannot commit.
    CKFMT_RETURN_IF_ERROR(CheckCommitTarget(path));
    if (running_) {
      if (!opts_.wait_if_busy) {
        return Status::Aborted(path + ": a background save to " + in_flight_path_ +
                               " is still running");
      }
    }
    // The previous save's failure is reported (once) before anything new starts.
    auto previous = Join();
    if (!reported_ && !previous.ok()) {
      reported_ = true;
      return previous.status().WithContext("previous background save failed");
    }
    CKFMT_ASSIGN_OR_RETURN(Plan plan, PlanSnapshot(sd, path));
    // Past the snapshot budget: the leading entries go to disk from the
    // caller's tensors now, so that what is left fits the snapshot.
    std::unique_ptr<CheckpointWriter> writer;
    if (plan.first_visit > 0) {
      CKFMT_ASSIGN_OR_RETURN(writer, BeginSave(path, sd, options));
      CKFMT_RETURN_IF_ERROR(AddEntries(*writer, path, sd, 0, plan.first_visit));
      CKFMT_RETURN_IF_ERROR(writer->Flush());
    }
    CKFMT_ASSIGN_OR_RETURN(Value snapshot, Snapshot(sd, path, plan));
    in_flight_path_ = path;
    running_ = true;
    reported_ = false;
    worker_ = std::thread([this, path, options, snap = std::move(snapshot), w = std::move(writer),
                           first = plan.first_visit]() mutable {
      Result<WriteStats> r = w ? Finish(*w, path, snap, first) : Save(path, snap, options);
      std::lock_guard<std::mutex> lock(mu_);
      result_ = std::move(r);
      running_ = false;
    });
    blocked_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return Status::OK();
  }

  Result<WriteStats> Join() {
    if (worker_.joinable()) worker_.join();
    std::lock_guard<std::mutex> lock(mu_);
    return result_;
  }

  Result<WriteStats> Wait() {
    auto r = Join();
    reported_ = true;
    return r;
  }

  Status Prepare(const Value& sd) {
    if (!sd.is_dict()) return Status::InvalidArgument("Prepare: the state dict must be a dict");
    (void)Join();  // the arena may move; an error stays for SaveAsync()/Wait()
    CKFMT_ASSIGN_OR_RETURN(Plan plan, PlanSnapshot(sd, "Prepare"));
    return ReadyArena(plan, "Prepare");
  }

  bool busy() const { return running_; }
  double blocked() const { return blocked_; }
  uint64_t reserved() const { return arena_.size(); }

 private:
  struct Item {
    const Tensor* src;
    uint64_t offset;
    KeyPath key;
    size_t visit;  // VisitValues' number of the tensor
    DeviceOps* ops;  // nullptr for host tensors
  };
  // The values VisitValues numbers from first_visit on are snapshotted:
  // where each of their tensors goes in the arena, and the device whose
  // copies need it pinned (nullptr: host tensors only). Those before are
  // written from the caller's state before SaveAsync returns.
  struct Plan {
    std::vector<Item> items;
    uint64_t total = 0;
    DeviceOps* ops = nullptr;
    size_t first_visit = 0;
  };

  static uint64_t ArenaBytes(const Tensor& t) { return (t.nbytes() + 63) / 64 * 64; }

  // The trailing tensors that fit opts_.snapshot_bytes (all without one).
  Result<Plan> PlanSnapshot(const Value& sd, const std::string& path) {
    std::vector<Item> all;
    size_t visits = 0;
    Status bad;
    VisitValues(sd, [&](const KeyPath& p, const Value& v) {
      const size_t visit = visits++;
      if (!v.is_tensor() || !bad.ok()) return;
      const Tensor& t = v.as_tensor();
      DeviceOps* ops = nullptr;
      if (t.device().type != DeviceType::kCPU) {
        auto o = DeviceOpsFor(t.device());
        if (!o.ok()) {
          bad = o.status().WithContext(path + ": " + FormatKeyPath(p));
          return;
        }
        ops = *o;
      }
      all.push_back({&t, 0, p, visit, ops});
    });
    CKFMT_RETURN_IF_ERROR(bad);
    size_t first = 0;  // the first snapshotted tensor
    if (const uint64_t budget = opts_.snapshot_bytes; budget > 0) {
      uint64_t fits = 0;
      first = all.size();
      while (first > 0 && fits + ArenaBytes(*all[first - 1].src) <= budget) {
        fits += ArenaBytes(*all[--first].src);
      }
    }
    Plan plan;
    if (first > 0) plan.first_visit = first < all.size() ? all[first].visit : visits;
    for (size_t i = first; i < all.size(); ++i) {
      Item it = all[i];
      it.offset = plan.total;
      plan.total += ArenaBytes(*it.src);
      if (it.ops) plan.ops = it.ops;
      plan.items.push_back(std::move(it));
    }
    return plan;
  }

  // The background half of a save that began in the caller's thread.
  static Result<WriteStats> Finish(CheckpointWriter& w, const std::string& path,
                                   const Value& snapshot, size_t first_visit) {
    CKFMT_RETURN_IF_ERROR(AddEntries(w, path, snapshot, first_visit));
    CKFMT_RETURN_IF_ERROR(w.Commit());
    return w.stats();
  }

  // Grows the arena to the plan's size (fresh memory is faulted in here)
  // and pins it for the plan's device.
  Status ReadyArena(const Plan& plan, const std::string& path) {
    const uint64_t total = plan.total;
    DeviceOps* ops = plan.ops;
    if (arena_.size() < total) {
      arena_pins_.Clear();  // unpin before the memory goes
      pinned_for_ = nullptr;
      try {
        arena_ = AlignedBuffer(total);  // zero-filled: pages faulted in now, not at copy time
      } catch (const std::bad_alloc&) {
        return Status::IOError(path + ": cannot allocate a " + std::to_string(total) +
                               "-byte snapshot");
      }
    }
    if (ops && pinned_for_ != ops) {
      arena_pins_.Clear();
      pinned_for_ = nullptr;
      CKFMT_RETURN_IF_ERROR(arena_pins_.Add(ops, arena_.data(), arena_.size())
                                .WithContext(path + ": pinning the snapshot arena"));
      pinned_for_ = ops;
    }
    return Status::OK();
  }

  // Copies every tensor into the arena; the snapshot's tensors view it.
  // Device tensors are copied device -> arena (pinned while it holds
  // device data) on a stream per device, while the host tensors are copied
  // on the pool; both are complete when this returns.
  Result<Value> Snapshot(const Value& sd, const std::string& path, const Plan& plan) {
    CKFMT_RETURN_IF_ERROR(ReadyArena(plan, path));
    const std::vector<Item>& items = plan.items;
    // Device copies first, so they run while the host copies do.
    std::vector<DeviceCopy> copies;
    for (const Item& it : items) {
      const Tensor& t = *it.src;
      if (t.device().type == DeviceType::kCPU || t.nbytes() == 0) continue;
      std::string where = path + ": " + FormatKeyPath(it.key) + " on " + DeviceName(t.device());
      if (!device_) {
        auto made = DeviceStaging::For(t.device());
        if (!made.ok()) return made.status().WithContext(where);
        device_ = std::move(*made);
      }
      auto stream = device_->Stream(t.device());
      if (!stream.ok()) return stream.status().WithContext(where);
      Status s = (*stream)->CopyToHost(arena_.data() + it.offset, t.data(), t.nbytes());
      auto fence = s.ok() ? (*stream)->Record() : Result<uint64_t>(s);
      if (!fence.ok()) {
        // The arena must not change under copies still in flight; the next
        // save starts on fresh streams (see DeviceStream::Wait).
        (void)WaitAll(copies);
        device_->DropStreams();
        return fence.status().WithContext("snapshot of " + where);
      }
      copies.push_back({&it, *stream, *fence});
    }
    // Parallel copy in slices of at most 8 MiB so big tensors split too.
    constexpr uint64_t kSlice = 8 << 20;
    std::vector<std::tuple<const uint8_t*, uint8_t*, uint64_t>> slices;
    for (const Item& it : items) {
      if (it.src->device().type != DeviceType::kCPU) continue;
      const auto* src = static_cast<const uint8_t*>(it.src->data());
      for (uint64_t off = 0; off < it.src->nbytes(); off += kSlice) {
        slices.emplace_back(src + off, arena_.data() + it.offset + off,
                            std::min(kSlice, it.src->nbytes() - off));
      }
    }
    pool_.ParallelFor(slices.size(), [&](size_t i) {
      auto [s, d, n] = slices[i];
      CopyUncached(d, s, n);  // the arena is read by the background write
    });
    if (Status s = WaitAll(copies); !s.ok()) {
      device_->DropStreams();
      return s.WithContext(path);
    }
    size_t next = 0, visit = 0;
    Dict root;
    for (size_t i = 0; i < sd.as_dict().size(); ++i) {
      root.Set(sd.as_dict().key(i), Rebuild(sd.as_dict().value(i), plan, next, visit));
    }
    return Value(std::move(root));
  }

  // A device copy into the arena: its item, its stream and the fence after it.
  struct DeviceCopy {
    const Item* item;
    DeviceStream* stream;
    uint64_t fence;
  };

  // Waits for every copy; the first failure names its tensor.
  Status WaitAll(const std::vector<DeviceCopy>& copies) {
    Status first;
    for (const auto& [item, stream, fence] : copies) {
      Status s = stream->Wait(fence);
      if (!s.ok() && first.ok()) {
        first = s.WithContext("copying " + FormatKeyPath(item->key) + " from " +
                              DeviceName(item->src->device()) + " for the snapshot");
      }
    }
    return first;
  }

  // `v` (number `visit` in pre-order) with its tensors as views of the
  // arena. Leaves written before the snapshot become None: the background
  // write skips them, and VisitValues numbers the snapshot as the state.
  Value Rebuild(const Value& v, const Plan& plan, size_t& next, size_t& visit) {
    const bool written = visit++ < plan.first_visit;
    switch (v.kind()) {
      case Value::Kind::kTensor: {
        if (written) return Value();
        const Tensor& t = v.as_tensor();
        Tensor view =
            Tensor::View(t.dtype(), t.shape(), arena_.data() + plan.items[next++].offset);
        if (t.shard()) view.SetShard(*t.shard());
        return Value(std::move(view));
      }
      case Value::Kind::kDict: {
        Dict d;
        for (size_t i = 0; i < v.as_dict().size(); ++i) {
          d.Set(v.as_dict().key(i), Rebuild(v.as_dict().value(i), plan, next, visit));
        }
        return Value(std::move(d));
      }
      case Value::Kind::kList: {
        List l;
        for (const Value& c : v.as_list()) l.push_back(Rebuild(c, plan, next, visit));
        return Value(std::move(l));
      }
      default:
        return written ? Value() : v;  // scalars and bytes are copied by value
    }
  }

  AsyncSaverOptions opts_;
  ThreadPool pool_;
  AlignedBuffer arena_;
  PinnedRanges arena_pins_;          // the arena, while it takes device copies
  DeviceOps* pinned_for_ = nullptr;  // whose Pin() arena_pins_ holds
  std::unique_ptr<DeviceStaging> device_;  // streams per device, made on first use
  std::thread worker_;
  std::mutex mu_;
  // What Wait() returns before any save; never reported otherwise, as
  // reported_ starts true. (Its code is no sentinel: a save's own failure
  // may be kNotFound too, and must be reported.)
  Result<WriteStats> result_ = Status::NotFound("no save has been started");
  std::atomic<bool> running_{false};
  bool reported_ = true;  // the last result was returned by Wait() or SaveAsync()
  std::string in_flight_path_;
  double blocked_ = 0;
};

AsyncSaver::AsyncSaver(AsyncSaverOptions options) : impl_(std::make_unique<Impl>(options)) {}
AsyncSaver::~AsyncSaver() = default;
Status AsyncSaver::SaveAsync(const std::string& path, const Value& sd, const SaveOptions& o) {
  return impl_->SaveAsync(path, sd, o);
}
Status AsyncSaver::Prepare(const Value& sd) { return impl_->Prepare(sd); }
Result<WriteStats> AsyncSaver::Wait() { return impl_->Wait(); }
uint64_t AsyncSaver::reserved_bytes() const { return impl_->reserved(); }
bool AsyncSaver::busy() const { return impl_->busy(); }
double AsyncSaver::last_blocked_seconds() const { return impl_->blocked(); }

}  // namespace ckfmt
