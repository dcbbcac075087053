// DistSave: options and plan agreement, then the chosen mode.
#include <chrono>
#include <map>

#include "ckfmt/dist/comm_util.h"
#include "save_internal.h"
#include "wire.h"

namespace ckfmt::dist {

std::string_view SaveModeName(SaveMode m) {
  return m == SaveMode::kParallel ? "parallel" : "flattened";
}

namespace {

// The options every rank must share, as rank 0 has them.
std::string EncodeOptions(const DistSaveOptions& o) {
  WireWriter w;
  w.U8(static_cast<uint8_t>(o.mode));
  w.U64(o.memory_budget);
  w.U8(static_cast<uint8_t>(o.replica_check));
  w.U64(o.save.chunk_size);
  w.U8(static_cast<uint8_t>(o.save.codec));
  w.I64(o.save.level);
  w.U8(o.save.fsync);
  w.U8(o.save.io.direct_io);
  return std::move(w.str());
}

Status DecodeOptions(const std::string& bytes, DistSaveOptions* o) {
  WireReader r(bytes, "rank 0's save options");
  o->mode = r.U8() == 1 ? SaveMode::kParallel : SaveMode::kFlattened;
  o->memory_budget = r.U64();
  o->replica_check = r.U8() == 1 ? ReplicaCheck::kChecksum : ReplicaCheck::kMetadata;
  o->save.chunk_size = r.U64();
  o->save.codec = static_cast<Codec>(r.U8());
  o->save.level = static_cast<int>(r.I64());
  o->save.fsync = r.U8() != 0;
  o->save.io.direct_io = r.U8() != 0;
  return r.status();
}

// Every rank's local plan to rank 0, merged there, agreed, broadcast.
Status AgreeOnPlan(SaveContext& ctx) {
  Communicator& comm = ctx.comm;
  Status local = ctx.Hook("plan");
  std::vector<LocalEntry> described;
  if (local.ok()) {
    // The flattened mode gathers GPU tensors over the device communicator,
    // from its device, or without one through host memory, from any; in
    // the parallel mode each rank writes its own.
    const Communicator* dc = ctx.options.device_comm;
    GpuTensorPolicy gpu;
    if (ctx.options.mode == SaveMode::kFlattened && dc) {
      gpu = {GpuTensorPolicy::Allow::kOneDevice, dc->device()};
    }
    auto d = DescribeLocalState(ctx.local_state, ctx.rank(),
                                ctx.options.replica_check == ReplicaCheck::kChecksum, gpu);
    if (d.ok()) {
      described = std::move(*d);
    } else {
      local = d.status();
    }
  }
  auto gathered = GatherStrings(comm, EncodeLocalPlan(described), 0);
  CKFMT_RETURN_IF_ERROR(gathered.status());
  std::string plan_bytes;
  if (ctx.root() && local.ok()) {
    std::vector<std::vector<LocalEntry>> per_rank;
    for (size_t r = 0; r < gathered->size() && local.ok(); ++r) {
      auto p = DecodeLocalPlan((*gathered)[r], static_cast<int>(r));
      if (p.ok()) {
        per_rank.push_back(std::move(*p));
      } else {
        local = p.status();
      }
    }
    if (local.ok()) {
      const bool device_gathers =
          ctx.options.mode == SaveMode::kFlattened && ctx.options.device_comm;
      auto merged = MergePlans(per_rank, ctx.options.replica_check, ctx.path, device_gathers);
      if (merged.ok()) {
        ctx.plan = std::move(*merged);
        plan_bytes = EncodeGlobalPlan(ctx.plan);
      } else {
        local = merged.status();
      }
    }
  }
  CKFMT_RETURN_IF_ERROR(comm.AgreeOnStatus(local, "planning the save of " + ctx.path));
  CKFMT_RETURN_IF_ERROR(BroadcastString(comm, &plan_bytes, 0));
  local = Status::OK();
  if (!ctx.root()) {
    auto plan = DecodeGlobalPlan(plan_bytes);
    if (plan.ok()) {
      ctx.plan = std::move(*plan);
    } else {
      local = plan.status();
    }
  }
  // This rank's data for each entry it owns a part of.
  std::map<KeyPath, const LocalEntry*> data;
  for (const LocalEntry& e : described) {
    if (e.kind == EntryKind::kTensor || e.kind == EntryKind::kBytes) data[e.path] = &e;
  }
  const size_t n = ctx.plan.entries.size();
  ctx.local_data.assign(n, nullptr);
  ctx.local_region.assign(n, nullptr);
  ctx.local_device.assign(n, Device{});
  static const uint8_t kEmpty = 0;
  for (size_t i = 0; i < n && local.ok(); ++i) {
    const PlanEntry& e = ctx.plan.entries[i];
    for (const Source& o : e.owners) {
      if (o.rank != static_cast<uint32_t>(ctx.rank())) continue;
      auto it = data.find(e.path);
      if (it == data.end()) {
        local = Status::Internal("rank " + std::to_string(ctx.rank()) + " owns " +
                                 FormatKeyPath(e.path) + " but does not hold it");
        break;
      }
      const void* d = it->second->data;
      ctx.local_data[i] = d ? static_cast<const uint8_t*>(d) : &kEmpty;
      ctx.local_region[i] = &o.region;
      ctx.local_device[i] = d ? it->second->device : Device{};
    }
  }
  return comm.AgreeOnStatus(local, "receiving the plan of " + ctx.path);
}

// A device communicator on every rank or on none, over the same ranks.
// (The parallel mode does not use it, but a trainer that passes one
// whichever the mode must still pass a consistent one.)
Status CheckDeviceComm(const SaveContext& ctx) {
  Communicator& comm = ctx.comm;
  const Communicator* dc = ctx.options.device_comm;
  int64_t given = dc != nullptr;
  CKFMT_RETURN_IF_ERROR(comm.AllReduce(&given, 1, ReduceOp::kSum));
  Status local;
  const std::string where = ctx.path + ": DistSaveOptions::device_comm";
  if (given != 0 && given != comm.size()) {
    local = Status::InvalidArgument(where + " is given on " + std::to_string(given) + " of " +
                                    std::to_string(comm.size()) + " ranks; pass it on all or none");
  } else if (dc && dc->memory() != MemorySpace::kDevice) {
    local = Status::InvalidArgument(where + " must be a device communicator, got " + dc->name());
  } else if (dc && (dc->size() != comm.size() || dc->rank() != comm.rank())) {
    local = Status::InvalidArgument(where + " is rank " + std::to_string(dc->rank()) + " of " +
                                    std::to_string(dc->size()) + ", the host communicator rank " +
                                    std::to_string(comm.rank()) + " of " +
                                    std::to_string(comm.size()) + ": they must match");
  }
  return comm.AgreeOnStatus(local, "checking the device communicator for " + ctx.path);
}

}  // namespace

Result<DistSaveStats> DistSave(Communicator& comm, const std::string& path,
                               const Value& local_state, const DistSaveOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  if (comm.memory() != MemorySpace::kHost) {
    return Status::InvalidArgument(path + ": DistSave needs a host communicator, got " +
                                   comm.name());
  }
  SaveContext ctx{comm, path, local_state, options, {}, {}, {}, {}, {}};
  std::string opts = EncodeOptions(options);
  CKFMT_RETURN_IF_ERROR(BroadcastString(comm, &opts, 0));
  CKFMT_RETURN_IF_ERROR(DecodeOptions(opts, &ctx.options));
  ctx.stats.mode = ctx.options.mode;
  CKFMT_RETURN_IF_ERROR(CheckDeviceComm(ctx));
  CKFMT_RETURN_IF_ERROR(AgreeOnPlan(ctx));
  ctx.stats.entries = ctx.plan.entries.size();
  Status s = ctx.options.mode == SaveMode::kParallel ? ParallelSave(ctx) : FlattenedSave(ctx);
  CKFMT_RETURN_IF_ERROR(s);
  ctx.stats.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return ctx.stats;
}

}  // namespace ckfmt::dist
