// ckfmt-dist-main-job: the distributed main job, end to end.
//
//   mpirun --allow-run-as-root --oversubscribe -np 4 ckfmt-dist-main-job
//       [--dir DIR] [--params-mb 64] [--resume-world 3] [--budget-mb 64]
//       [--timeout-s 300] [--keep]
//   mpirun ... -np 4 ckfmt-dist-main-job --bench [--bench-sizes 64,384] [--budget-mb 64]
//       [--bench-reps 3]
//
// Main job (default):
//  1. Every rank builds its shards of a transformer-shaped model (fp32
//     parameters with torch-style names, an uneven vocabulary, tiny gate
//     parameters that leave trailing ranks empty) and its AdamW state
//     (fp32 exp_avg / exp_avg_sq per parameter, a 0-d step, param_groups),
//     a step counter and a data-loader blob. Values are a function of
//     (tensor, global element index), so any rank can generate any region.
//  2. Two layouts, FSDP1 (flat-parameter slices spanning parameters) and
//     FSDP2 (dim-0 chunks, uneven and empty), are each saved in both modes:
//     into one flattened file through rank 0 with a bounded memory budget,
//     and into one file every rank writes its own pieces of (parallel).
//  3. Rank 0 runs VerifyFile on each of the four files.
//  4. Resume on a different world size (--resume-world, default 3; the first
//     ranks of the job form it): each resuming rank passes a state dict with
//     only its model shards - no optimizer state - in the other layout
//     (FSDP1 file -> FSDP2 shards and vice versa); the optimizer state comes
//     back as this rank's shards. Every value is checked bitwise against
//     the generator.
//  5. Prints PASS or FAIL (exit code 0 only on PASS).
//
// --bench: for each model size, the raw O_DIRECT write bandwidth of a file
// of the checkpoint's size, the flattened and parallel save throughput
// measured in the same run, and rank 0's peak RSS during the flattened save
// against its memory budget.
#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "ckfmt/dist/comm_util.h"
#include "ckfmt/dist/dist_load.h"
#include "ckfmt/dist/dist_save.h"
#include "ckfmt/dist/layout.h"
#include "ckfmt/dist/mpi_communicator.h"
#include "ckfmt/reader.h"
#include "ckfmt/verify.h"

namespace {

namespace fs = std::filesystem;
using namespace ckfmt;
using namespace ckfmt::dist;
using Clock = std::chrono::steady_clock;

int g_rank = 0;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

void Say(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void Say(const char* fmt, ...) {
  if (g_rank != 0) return;
  va_list ap;
  va_start(ap, fmt);
  std::vprintf(fmt, ap);
  va_end(ap);
  std::fflush(stdout);
}

// ---------------------------------------------------------------------------
// The model: shapes, names, and values as a function of the global index.

struct Config {
  uint64_t vocab = 5003, dim = 320, ffn = 861, layers = 10;
};

Config ConfigForParams(uint64_t params_mb) {
  Config c;
  const uint64_t target = params_mb << 20;
  const uint64_t fixed = (2 * c.vocab * c.dim + c.dim) * 4;
  const uint64_t per_layer = (4 * c.dim * c.dim + 3 * c.ffn * c.dim + 2 * c.dim + 2) * 4;
  c.layers = target > fixed ? std::max<uint64_t>(1, (target - fixed + per_layer / 2) / per_layer) : 1;
  return c;
}

std::vector<ParamInfo> Params(const Config& c) {
  std::vector<ParamInfo> p;
  auto add = [&](const std::string& name, Shape shape) {
    p.push_back({{std::string("model"), name}, std::move(shape)});
  };
  add("tok_embeddings.weight", {c.vocab, c.dim});
  for (uint64_t l = 0; l < c.layers; ++l) {
    const std::string pre = "layers." + std::to_string(l) + ".";
    for (const char* w : {"wq", "wk", "wv", "wo"}) add(pre + "attention." + w + ".weight", {c.dim, c.dim});
    add(pre + "attention.gate", {2});  // 2 rows: trailing ranks hold nothing
    add(pre + "feed_forward.w1.weight", {c.ffn, c.dim});
    add(pre + "feed_forward.w2.weight", {c.dim, c.ffn});
    add(pre + "feed_forward.w3.weight", {c.ffn, c.dim});
    add(pre + "attention_norm.weight", {c.dim});
    add(pre + "ffn_norm.weight", {c.dim});
  }
  add("norm.weight", {c.dim});
  add("output.weight", {c.vocab, c.dim});
  return p;
}

const std::string& ParamName(const ParamInfo& p) { return std::get<std::string>(p.path[1]); }

enum class Kind : uint64_t { kParam = 1, kExpAvg = 2, kExpAvgSq = 3 };

uint64_t Seed(const std::string& name, Kind kind) {
  uint64_t h = 1469598103934665603ull;
  for (char ch : name) h = (h ^ uint8_t(ch)) * 1099511628211ull;
  return h ^ (uint64_t(kind) * 0x9e3779b97f4a7c15ull);
}

inline uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

inline float ValueAt(uint64_t seed, uint64_t g, Kind kind) {
  const uint64_t h = Mix(seed + g * 0x9e3779b97f4a7c15ull);
  const float u = float(int32_t(h >> 32)) * (1.0f / 2147483648.0f);  // [-1, 1)
  switch (kind) {
    case Kind::kParam: return 0.035f * u;
    case Kind::kExpAvg: return 1e-3f * u;
    case Kind::kExpAvgSq: return 1e-6f * (u + 1.0f);
  }
  return 0;
}

// Fills `dst` with `region` of the tensor of `shape` named by (seed, kind).
void FillRegion(float* dst, const Shape& shape, const Region& region, uint64_t seed, Kind kind) {
  ForEachOverlap(shape, Region::Whole(shape), region, [&](const Run& r) {
    for (uint64_t i = 0; i < r.count; ++i) dst[r.dst_offset + i] = ValueAt(seed, r.src_offset + i, kind);
  });
}

Tensor MakeShard(const ParamInfo& p, const std::optional<Region>& region, Kind kind) {
  Region reg = region ? *region : Region::Whole(p.shape);
  Tensor t = Tensor::Zeros(DType::kF32, region ? LocalShape(reg) : p.shape);
  FillRegion(static_cast<float*>(t.data()), p.shape, reg, Seed(ParamName(p), kind), kind);
  if (region) t.SetShard(ShardSpec{p.shape, reg});
  return t;
}

constexpr int64_t kStep = 1200;
constexpr float kAdamStep = 1200.0f;

std::string LoaderBlob() {
  std::string s = "{\"epoch\": 3, \"sampler_offset\": 918272, \"shuffle_seed\": 1234}";
  return s;
}

// The optimizer-state path of a parameter name.
KeyPath StatePath(const std::string& name, const char* leaf) {
  return {std::string("optim"), std::string("state"), name, std::string(leaf)};
}

// Maps optimizer-state paths to the parameter they follow.
ParamOf MakeParamOf() {
  return [](const KeyPath& path) -> std::optional<KeyPath> {
    if (path.size() == 2 && std::get_if<std::string>(&path[0]) &&
        std::get<std::string>(path[0]) == "model") {
      return path;
    }
    if (path.size() == 4 && std::get<std::string>(path[0]) == "optim" &&
        std::get<std::string>(path[1]) == "state") {
      return KeyPath{std::string("model"), std::get<std::string>(path[2])};
    }
    return std::nullopt;
  };
}

enum class Style { kFsdp1, kFsdp2 };
const char* StyleName(Style s) { return s == Style::kFsdp1 ? "FSDP1 (flat ranges)" : "FSDP2 (dim-0 chunks)"; }

LayoutFn MakeLayoutFor(Style style, const std::vector<ParamInfo>& params, int world, int rank) {
  ParamOf param_of = MakeParamOf();
  if (style == Style::kFsdp1) return Fsdp1Layout(params, world, rank, param_of);
  return Fsdp2Layout(world, rank, [param_of](const KeyPath& p) { return param_of(p).has_value(); });
}

// A rank's full training state (model + optimizer + counters), sharded.
Value BuildLocalState(const std::vector<ParamInfo>& params, const LayoutFn& layout,
                      bool with_optimizer) {
  Value sd{Dict{}};
  Dict model;
  for (const auto& p : params) model.Set(ParamName(p), MakeShard(p, *layout(p.path, p.shape), Kind::kParam));
  sd.as_dict().Set("model", Value(std::move(model)));
  if (!with_optimizer) return sd;
  Dict state;
  List names;
  for (const auto& p : params) {
    const std::string& name = ParamName(p);
    Dict st;
    st.Set("exp_avg", MakeShard(p, *layout(StatePath(name, "exp_avg"), p.shape), Kind::kExpAvg));
    st.Set("exp_avg_sq", MakeShard(p, *layout(StatePath(name, "exp_avg_sq"), p.shape), Kind::kExpAvgSq));
    Tensor step = Tensor::Zeros(DType::kF32, {});
    *static_cast<float*>(step.data()) = kAdamStep;
    st.Set("step", step);
    state.Set(name, Value(std::move(st)));
    names.push_back(Value(name));
  }
  Dict group;
  group.Set("lr", Value(3e-4));
  group.Set("betas", Value(List{Value(0.9), Value(0.95)}));
  group.Set("eps", Value(1e-8));
  group.Set("weight_decay", Value(0.1));
  group.Set("params", Value(std::move(names)));
  Dict optim;
  optim.Set("state", Value(std::move(state)));
  optim.Set("param_groups", Value(List{Value(std::move(group))}));
  sd.as_dict().Set("optim", Value(std::move(optim)));
  sd.as_dict().Set("step", Value(kStep));
  sd.as_dict().Set("dataloader", Value(Bytes{"json", LoaderBlob()}));
  return sd;
}

// Checks every value of a resumed state dict bitwise; returns the number of
// problems (printed) and adds the tensor bytes checked.
uint64_t CheckResumed(const Value& sd, const std::vector<ParamInfo>& params,
                      const LayoutFn& layout, uint64_t* bytes, uint64_t* shards) {
  uint64_t bad = 0;
  auto problem = [&](const std::string& m) {
    if (++bad <= 10) std::fprintf(stderr, "[rank %d] %s\n", g_rank, m.c_str());
  };
  auto check_tensor = [&](const KeyPath& path, const ParamInfo& p, Kind kind) {
    const Value* v = sd.Find(path);
    if (!v || !v->is_tensor()) return problem(FormatKeyPath(path) + ": missing");
    const Tensor& t = v->as_tensor();
    std::optional<Region> want = *layout(path, p.shape);  // the job's layouts do not fail
    if (t.dtype() != DType::kF32 || t.global_shape() != p.shape) return problem(FormatKeyPath(path) + ": dtype/shape");
    if (want && (!t.shard() || t.region() != *want)) {
      return problem(FormatKeyPath(path) + ": expected this rank's shard " + want->ToString());
    }
    if (t.shard()) ++*shards;
    std::vector<float> expect(t.numel());
    FillRegion(expect.data(), p.shape, t.region(), Seed(ParamName(p), kind), kind);
    if (t.nbytes() && std::memcmp(expect.data(), t.data(), t.nbytes()) != 0) {
      return problem(FormatKeyPath(path) + ": values differ in " + t.region().ToString());
    }
    *bytes += t.nbytes();
  };
  for (const auto& p : params) {
    const std::string& name = ParamName(p);
    check_tensor(p.path, p, Kind::kParam);
    check_tensor(StatePath(name, "exp_avg"), p, Kind::kExpAvg);
    check_tensor(StatePath(name, "exp_avg_sq"), p, Kind::kExpAvgSq);
    const Value* step = sd.Find(StatePath(name, "step"));
    if (!step || !step->is_tensor() || step->as_tensor().numel() != 1 ||
        *static_cast<const float*>(step->as_tensor().data()) != kAdamStep) {
      problem(name + ": optimizer step");
    }
  }
  const Value* step = sd.Find({std::string("step")});
  if (!step || step->kind() != Value::Kind::kInt || step->as_int() != kStep) problem("step");
  const Value* dl = sd.Find({std::string("dataloader")});
  if (!dl || dl->kind() != Value::Kind::kBytes || dl->as_bytes().data != LoaderBlob()) problem("dataloader");
  const Value* lr = sd.Find({std::string("optim"), std::string("param_groups"), uint64_t{0}, std::string("lr")});
  if (!lr || lr->kind() != Value::Kind::kFloat || lr->as_float() != 3e-4) problem("param_groups lr");
  const Value* names = sd.Find({std::string("optim"), std::string("param_groups"), uint64_t{0}, std::string("params")});
  if (!names || !names->is_list() || names->as_list().size() != params.size()) problem("param_groups params");
  return bad;
}

// ---------------------------------------------------------------------------
// Process memory.

uint64_t StatusKB(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) return std::strtoull(line.c_str() + std::strlen(key) + 1, nullptr, 10);
  }
  return 0;
}

bool ResetPeakRss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  return bool(out);
}

// Raw sequential O_DIRECT write of `bytes` (8 MiB blocks) + fsync; MB/s.
double RawWriteMBps(const std::string& path, uint64_t bytes) {
  const size_t block = 8u << 20;
  void* buf = std::aligned_alloc(4096, block);
  uint64_t x = 12345;
  for (size_t i = 0; i < block; i += 8) {
    uint64_t v = Mix(x++);
    std::memcpy(static_cast<char*>(buf) + i, &v, 8);
  }
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0644);
  if (fd < 0) fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  auto t0 = Clock::now();
  for (uint64_t off = 0; off < bytes; off += block) {
    if (::pwrite(fd, buf, block, off) != ssize_t(block)) break;
  }
  ::fsync(fd);
  double s = Seconds(t0, Clock::now());
  ::close(fd);
  ::unlink(path.c_str());
  std::free(buf);
  return double(bytes) / 1e6 / s;
}

// ---------------------------------------------------------------------------

struct Args {
  std::string dir = "/tmp/ckfmt-dist-main-job";
  uint64_t params_mb = 64;
  int resume_world = 3;
  uint64_t budget_mb = 64;
  double timeout_s = 300;
  bool keep = false;
  bool bench = false;
  int reps = 3;
  std::vector<uint64_t> bench_sizes = {64, 384};
};

bool ParseArgs(int argc, char** argv, Args* a) {
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
    const char* v = nullptr;
    if (k == "--keep") {
      a->keep = true;
    } else if (k == "--bench") {
      a->bench = true;
    } else if ((k == "--dir") && (v = next())) {
      a->dir = v;
    } else if (k == "--params-mb" && (v = next())) {
      a->params_mb = std::strtoull(v, nullptr, 10);
    } else if (k == "--resume-world" && (v = next())) {
      a->resume_world = std::atoi(v);
    } else if (k == "--budget-mb" && (v = next())) {
      a->budget_mb = std::strtoull(v, nullptr, 10);
    } else if (k == "--timeout-s" && (v = next())) {
      a->timeout_s = std::atof(v);
    } else if (k == "--bench-reps" && (v = next())) {
      a->reps = std::max(1, std::atoi(v));
    } else if (k == "--bench-sizes" && (v = next())) {
      a->bench_sizes.clear();
      std::stringstream ss(v);
      std::string item;
      while (std::getline(ss, item, ',')) a->bench_sizes.push_back(std::strtoull(item.c_str(), nullptr, 10));
    } else {
      return false;
    }
  }
  return a->resume_world >= 1 && a->params_mb > 0 && a->budget_mb > 0;
}

double MaxOverRanks(double v) {
  double out = v;
  MPI_Allreduce(&v, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return out;
}

uint64_t StateBytes(const std::vector<ParamInfo>& params) {
  uint64_t n = 0;
  for (const auto& p : params) {
    uint64_t e = 1;
    for (auto d : p.shape) e *= d;
    n += 3 * e * 4;
  }
  return n;
}

// The file one layout is saved to in one mode.
std::string FileName(Style style, SaveMode mode) {
  return std::string(style == Style::kFsdp1 ? "ckpt_fsdp1" : "ckpt_fsdp2") +
         (mode == SaveMode::kParallel ? "_parallel.ckfmt" : ".ckfmt");
}
constexpr Style kStyles[] = {Style::kFsdp1, Style::kFsdp2};
constexpr SaveMode kModes[] = {SaveMode::kFlattened, SaveMode::kParallel};

// Saves, verifies and resumes one layout in one mode; returns the number of
// failures on this rank.
int RunStyle(Communicator& world, const Args& args, Style style, SaveMode mode,
             const std::vector<ParamInfo>& params) {
  const int n = world.size(), rank = world.rank();
  const Style other = style == Style::kFsdp1 ? Style::kFsdp2 : Style::kFsdp1;
  const std::string path = args.dir + "/" + FileName(style, mode);
  Say("\n== %s on %d ranks -> %s file -> %s on %d ranks\n", StyleName(style), n,
      std::string(SaveModeName(mode)).c_str(), StyleName(other), args.resume_world);
  int failures = 0;
  Value local = BuildLocalState(params, MakeLayoutFor(style, params, n, rank), true);
  DistSaveOptions o;
  o.mode = mode;
  o.memory_budget = args.budget_mb << 20;
  o.save.metadata = {{"job", "ckfmt-dist-main-job"}, {"layout", StyleName(style)}};
  (void)world.Barrier();
  auto t0 = Clock::now();
  auto saved = DistSave(world, path, local, o);
  double secs = MaxOverRanks(Seconds(t0, Clock::now()));
  if (!saved.ok()) {
    std::fprintf(stderr, "[rank %d] save failed: %s\n", rank, saved.status().ToString().c_str());
    return 1;
  }
  if (mode == SaveMode::kFlattened) {
    Say("save: %llu entries, %.1f MB file in %.2f s (%.0f MB/s), %llu buckets of <= %.0f MB, "
        "rank 0 gather buffers %.1f MB, via %s\n",
        (unsigned long long)saved->entries, saved->file_bytes / 1e6, secs,
        saved->file_bytes / 1e6 / secs, (unsigned long long)saved->buckets,
        saved->bucket_bytes / 1e6, saved->peak_gather_bytes / 1e6, saved->io_path.c_str());
  } else {
    Say("save: %llu entries, %.1f MB file in %.2f s (%.0f MB/s), rank 0's own pieces %.1f MB, "
        "via %s\n",
        (unsigned long long)saved->entries, saved->file_bytes / 1e6, secs,
        saved->file_bytes / 1e6 / secs, saved->local_raw_bytes / 1e6, saved->io_path.c_str());
  }
  local = Value();  // the training state of the old world is gone
  if (rank == 0) {
    auto t1 = Clock::now();
    auto v = VerifyFile(path);
    if (!v.ok() || !v->ok()) {
      std::fprintf(stderr, "verify failed: %s\n",
                   v.ok() ? (v->problems[0].where + ": " + v->problems[0].message).c_str()
                          : v.status().ToString().c_str());
      ++failures;
    } else {
      Say("verify: OK, %llu entries, %llu chunks, %.1f MB checked in %.2f s\n",
          (unsigned long long)v->entries, (unsigned long long)v->chunks, v->bytes_checked / 1e6,
          Seconds(t1, Clock::now()));
    }
    auto reader = CheckpointReader::Open(path);
    if (reader.ok()) {
      const EntryRecord* e = (*reader)->Find({std::string("model"), std::string("tok_embeddings.weight")});
      if (e) {
        std::string layout;
        for (const auto& s : e->saved_layout) layout += " r" + std::to_string(s.rank) + ":" + s.region.ToString();
        if (layout.empty()) layout = ": none (each piece is a rank's own)";
        Say("index: save_mode=%s world_size=%u; model/tok_embeddings.weight: %zu piece(s), saved layout%s\n",
            (*reader)->index().save_mode.c_str(), (*reader)->index().world_size, e->pieces.size(),
            layout.c_str());
      }
    }
  }
  // Resume on the first resume_world ranks.
  MPI_Comm sub;
  MPI_Comm_split(MPI_COMM_WORLD, rank < args.resume_world ? 0 : MPI_UNDEFINED, rank, &sub);
  if (sub != MPI_COMM_NULL) {
    auto made = MakeMpiCommunicator(sub, CommOptions{std::chrono::milliseconds(int64_t(args.timeout_s * 1000))});
    MPI_Comm_free(&sub);
    if (!made.ok()) return failures + 1;
    Communicator& comm = **made;
    LayoutFn layout = MakeLayoutFor(other, params, comm.size(), comm.rank());
    Value sd = BuildLocalState(params, layout, false);  // no optimizer state
    VisitValues(sd, [](const KeyPath&, const Value& v) {  // nothing may survive from before
      if (v.is_tensor() && v.as_tensor().nbytes()) std::memset(v.as_tensor().data(), 0xff, v.as_tensor().nbytes());
    });
    ShardedLoadOptions lo;
    lo.layout = layout;
    auto t2 = Clock::now();
    auto report = DistLoad(comm, path, &sd, lo);
    double load_s = Seconds(t2, Clock::now());
    if (!report.ok()) {
      std::fprintf(stderr, "[rank %d] resume failed: %s\n", rank, report.status().ToString().c_str());
      return failures + 1;
    }
    uint64_t bytes = 0, shards = 0;
    uint64_t bad = CheckResumed(sd, params, layout, &bytes, &shards);
    failures += int(bad);
    std::fprintf(stdout, "resume rank %d/%d: %zu loaded in place, %zu reconstructed (%llu tensors are this rank's "
                 "shards), %.1f MB read in %.2f s, %.1f MB checked bitwise: %s\n",
                 comm.rank(), comm.size(), report->loaded_in_place.size(), report->reconstructed.size(),
                 (unsigned long long)shards, report->bytes_read / 1e6, load_s, bytes / 1e6,
                 bad ? "MISMATCH" : "identical");
    std::fflush(stdout);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return failures;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// Per model size, `reps` rounds of: raw O_DIRECT write of the checkpoint's
// size, flattened save, parallel save (interleaved, so that drift of the
// disk hits all three alike); medians are reported. Rank 0's peak RSS is
// taken over the flattened saves, relative to its RSS before each save.
int RunBench(Communicator& world, const Args& args) {
  const int n = world.size(), rank = world.rank();
  const uint64_t staging_mb = 32;
  Say("== bench: %d ranks, writer budget %llu MB, writer staging %llu MB, %d rounds (medians)\n", n,
      (unsigned long long)args.budget_mb, (unsigned long long)staging_mb, args.reps);
  Say("%-9s %-8s %-9s %-17s %-17s %-11s %-s\n", "params_MB", "file_MB", "raw_MB/s",
      "flattened_MB/s", "parallel_MB/s", "reshard_s", "rank-0 peak RSS over its base (flattened)");
  int failures = 0;
  for (uint64_t mb : args.bench_sizes) {
    auto params = Params(ConfigForParams(mb));
    Value local = BuildLocalState(params, MakeLayoutFor(Style::kFsdp2, params, n, rank), true);
    std::vector<double> raw, rate[2], reshard;
    double rss_mb = 0, file_mb = 0;
    const std::string path = args.dir + "/bench.ckfmt";
    for (int rep = 0; rep < args.reps; ++rep) {
      for (int m = 0; m < 2; ++m) {
        DistSaveOptions o;
        o.mode = m == 0 ? SaveMode::kFlattened : SaveMode::kParallel;
        o.memory_budget = args.budget_mb << 20;
        o.save.io.staging_bytes = staging_mb << 20;
        (void)world.Barrier();
        uint64_t base_kb = StatusKB("VmRSS:");
        bool reset = ResetPeakRss();
        auto t0 = Clock::now();
        auto s = DistSave(world, path, local, o);
        double secs = MaxOverRanks(Seconds(t0, Clock::now()));
        if (!s.ok()) {
          std::fprintf(stderr, "[rank %d] bench save failed: %s\n", rank, s.status().ToString().c_str());
          return 1;
        }
        uint64_t size = s->file_bytes;
        MPI_Bcast(&size, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
        rate[m].push_back(size / 1e6 / secs);
        file_mb = size / 1e6;
        if (m == 0 && rank == 0 && reset) {
          rss_mb = std::max(rss_mb, (double(StatusKB("VmHWM:")) - double(base_kb)) / 1024.0);
        }
        if (m == 0 && rep == 0) {
          // Resharding load of the flattened file into FSDP1 shards, timed.
          LayoutFn layout = MakeLayoutFor(Style::kFsdp1, params, n, rank);
          Value sd = BuildLocalState(params, layout, false);
          ShardedLoadOptions lo;
          lo.layout = layout;
          MPI_Barrier(MPI_COMM_WORLD);
          auto t1 = Clock::now();
          auto r = DistLoad(world, path, &sd, lo);
          reshard.push_back(MaxOverRanks(Seconds(t1, Clock::now())));
          if (!r.ok()) ++failures;
        }
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0) fs::remove(path);
      }
      double r = 0;
      if (rank == 0) r = RawWriteMBps(args.dir + "/raw.bin", uint64_t(file_mb * 1e6) / (8u << 20) * (8u << 20));
      MPI_Bcast(&r, 1, MPI_DOUBLE, 0, MPI_COMM_WORLD);
      raw.push_back(r);
    }
    const double rw = Median(raw), fl = Median(rate[0]), pa = Median(rate[1]);
    Say("%-9llu %-8.0f %-9.0f %-6.0f (%3.0f%%)     %-6.0f (%3.0f%%)     %-11.2f %.0f MB (budget %llu + staging %llu)\n",
        (unsigned long long)mb, file_mb, rw, fl, 100 * fl / rw, pa, 100 * pa / rw, Median(reshard),
        rss_mb, (unsigned long long)args.budget_mb, (unsigned long long)staging_mb);
  }
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  Args args;
  if (!ParseArgs(argc, argv, &args)) {
    Say("usage: mpirun -np N %s [--dir DIR] [--params-mb MB] [--resume-world M] [--budget-mb MB] "
        "[--timeout-s S] [--keep] [--bench [--bench-sizes MB,MB] [--bench-reps N]]\n", argv[0]);
    MPI_Finalize();
    return 2;
  }
  auto made = MakeMpiCommunicator(MPI_COMM_WORLD, CommOptions{std::chrono::milliseconds(int64_t(args.timeout_s * 1000))});
  if (!made.ok()) {
    std::fprintf(stderr, "%s\n", made.status().ToString().c_str());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  Communicator& world = **made;
  if (g_rank == 0) fs::create_directories(args.dir);
  MPI_Barrier(MPI_COMM_WORLD);
  if (args.resume_world > world.size()) {
    Say("--resume-world %d exceeds the job's %d ranks; resuming on %d\n", args.resume_world, world.size(), world.size());
    args.resume_world = world.size();
  }
  int failures = 0;
  auto t0 = Clock::now();
  if (args.bench) {
    failures = RunBench(world, args);
  } else {
    auto params = Params(ConfigForParams(args.params_mb));
    Say("model: %zu parameter tensors, %.1f MB of fp32 parameters, %.1f MB with AdamW state; "
        "writer budget %llu MB\n", params.size(), StateBytes(params) / 3 / 1e6, StateBytes(params) / 1e6,
        (unsigned long long)args.budget_mb);
    for (Style s : kStyles) {
      for (SaveMode m : kModes) failures += RunStyle(world, args, s, m, params);
    }
  }
  int total = 0;
  MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (g_rank == 0 && !args.keep) {
    for (Style s : kStyles) {
      for (SaveMode m : kModes) fs::remove(args.dir + "/" + FileName(s, m));
    }
  }
  Say("\n%s (%.1f s)\n", total == 0 ? "PASS" : "FAIL", Seconds(t0, Clock::now()));
  made->reset();
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
