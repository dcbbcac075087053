// ckfmt-main-job: the README's main job, end to end.
//
//   ckfmt-main-job [--dir DIR] [--size-mb 500] [--codec none|zstd|byteplane-zstd]
//                  [--keep] [--full-report]
//
// 1. Builds a realistic training state: a transformer of about SIZE_MB of
//    bf16 weights (torch-style keys, nested dicts and lists), fp32 AdamW
//    state keyed by parameter name with param_groups, an LR-scheduler dict,
//    a data-loader state blob, RNG states and a step counter.
// 2. Saves it with ckfmt::Save.
// 3. Runs `ckfmt verify` and `ckfmt inspect` on the file (the ckfmt binary
//    next to this one), as an operator would.
// 4. Loads it into a state dict that holds only the model (what a trainer
//    has before the optimizer's first step), prints the LoadReport showing
//    the optimizer, scheduler, data-loader and RNG state reconstructed, and
//    checks every value bitwise against the original. Loads it a second
//    time into {model, optimizer without state, step} to check in-place
//    assignment of the hyper-parameters as well.
// 5. Prints save/load throughput and PASS or FAIL; the exit code is 0 only
//    on PASS.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "ckfmt/reader.h"
#include "ckfmt/state_dict.h"
#include "ckfmt/tensor.h"
#include "ckfmt/verify.h"
#include "ckfmt/writer.h"
#include "realistic_values.h"

namespace {

namespace fs = std::filesystem;
using ckfmt::Bytes;
using ckfmt::Dict;
using ckfmt::DType;
using ckfmt::KeyPath;
using ckfmt::List;
using ckfmt::None;
using ckfmt::Shape;
using ckfmt::Tensor;
using ckfmt::Value;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

using ckfmt::bench::ForNormals;
using ckfmt::bench::Rng;
using ckfmt::bench::ToBF16;

using ckfmt::bench::ParallelFill;
using ckfmt::bench::Realistic;

Tensor NewTensor(DType dtype, Shape shape) {
  uint64_t bytes = ckfmt::DTypeSize(dtype);
  for (uint64_t d : shape) bytes *= d;
  void* p = nullptr;
  if (posix_memalign(&p, 4096, std::max<uint64_t>(bytes, 64)) != 0) {
    std::fprintf(stderr, "out of memory\n");
    std::exit(2);
  }
  std::shared_ptr<void> owner(p, [](void* q) { std::free(q); });
  return Tensor::Owning(dtype, std::move(shape), p, std::move(owner));
}

std::string RandomBytes(size_t n, uint64_t seed) {
  std::string s(n, '\0');
  Rng r(seed);
  for (auto& c : s) c = char(r.Next() >> 56);
  return s;
}

// Pickle-like bytes (protocol 4 framing around binary payload): NULs and
// high bytes included, as a real pickled object has.
std::string PickleLike(const std::string& tag, size_t payload, uint64_t seed) {
  std::string s = "\x80\x04\x95";
  uint64_t len = tag.size() + payload + 4;
  for (int i = 0; i < 8; ++i) s.push_back(char((len >> (8 * i)) & 0xff));
  s += "\x8c";
  s.push_back(char(tag.size()));
  s += tag;
  s += "\x94";
  s += RandomBytes(payload, seed);
  s += "\x94\x86\x94.";
  return s;
}

// ---------------------------------------------------------------------------
// The model.

struct Param {
  std::string fqn;       // "layers.3.mlp.up_proj.weight"
  KeyPath path;          // {"model", "layers", 3, "mlp.up_proj.weight"}
  Shape shape;
  bool no_decay;         // norms: the second param group
};

struct ModelShape {
  uint64_t vocab = 32000, d = 0, ffn = 0, layers = 0;
  std::vector<Param> params;
  uint64_t num_params = 0;
};

ModelShape MakeModelShape(double size_mb) {
  ModelShape m;
  const double target = size_mb * 1e6;  // bytes of bf16 weights
  for (uint64_t d : {4096ull, 2048ull, 1024ull, 512ull, 256ull, 128ull, 64ull}) {
    const uint64_t ffn = (d * 8 / 3 + 63) / 64 * 64;  // SwiGLU width
    const double embed = 2.0 * double(m.vocab * d) * 2;  // embed + lm_head
    const double per_layer = 2.0 * double(4 * d * d + 3 * d * ffn + 2 * d);
    const double layers = std::floor((target - embed) / per_layer);
    if (layers >= 4 || d == 64) {
      m.d = d;
      m.ffn = ffn;
      m.layers = uint64_t(std::max(1.0, layers));
      break;
    }
  }
  const uint64_t d = m.d, f = m.ffn;
  auto add = [&](std::string fqn, KeyPath p, Shape s, bool no_decay) {
    uint64_t n = 1;
    for (auto x : s) n *= x;
    m.num_params += n;
    m.params.push_back({std::move(fqn), std::move(p), std::move(s), no_decay});
  };
  add("embed.weight", {"model", "embed.weight"}, {m.vocab, d}, false);
  const std::vector<std::pair<std::string, Shape>> per_layer = {
      {"attn.q_proj.weight", {d, d}},      {"attn.k_proj.weight", {d, d}},
      {"attn.v_proj.weight", {d, d}},      {"attn.o_proj.weight", {d, d}},
      {"mlp.gate_proj.weight", {f, d}},    {"mlp.up_proj.weight", {f, d}},
      {"mlp.down_proj.weight", {d, f}},    {"input_norm.weight", {d}},
      {"post_attn_norm.weight", {d}}};
  for (uint64_t i = 0; i < m.layers; ++i) {
    for (const auto& [name, shape] : per_layer) {
      add("layers." + std::to_string(i) + "." + name, {"model", "layers", i, name}, shape,
          shape.size() == 1);
    }
  }
  add("norm.weight", {"model", "norm.weight"}, {d}, true);
  add("lm_head.weight", {"model", "lm_head.weight"}, {m.vocab, d}, false);
  return m;
}

// The model's state dict: {"embed.weight", "layers": [ {...}, ... ],
// "norm.weight", "lm_head.weight"}, with fresh tensors filled as `fill` says.
Value MakeModel(const ModelShape& m, ParallelFill* fill, bool trained) {
  Dict model;
  List layers(m.layers, Value(Dict{}));
  for (const Param& p : m.params) {
    Tensor t = NewTensor(DType::kBF16, p.shape);
    if (trained) {
      fill->Add(p.no_decay ? Realistic::kNormGainBF16 : Realistic::kWeightBF16, t.data(), t.numel(),
                2);
    } else {
      fill->AddBytes(t.data(), t.nbytes(), 0x5a);  // a fresh model's tensors: anything
    }
    if (p.path.size() == 4) {
      layers[std::get<uint64_t>(p.path[2])].as_dict().Set(std::get<std::string>(p.path[3]), t);
      if (!model.Find("layers")) model.Set("layers", Value(List{}));
    } else {
      model.Set(std::get<std::string>(p.path[1]), t);
    }
  }
  model.Set("layers", Value(std::move(layers)));  // keeps its position after embed
  return Value(std::move(model));
}

Dict ParamGroup(const ModelShape& m, bool no_decay, double lr, double beta2) {
  Dict g;
  g.Set("lr", lr);
  g.Set("betas", Value(List{Value(0.9), Value(beta2)}));
  g.Set("eps", 1e-8);
  g.Set("weight_decay", no_decay ? 0.0 : 0.1);
  g.Set("amsgrad", false);
  g.Set("foreach", None{});
  g.Set("maximize", false);
  g.Set("capturable", false);
  g.Set("differentiable", false);
  g.Set("fused", None{});
  g.Set("initial_lr", 3e-4);
  List names;
  for (const Param& p : m.params) {
    if (p.no_decay == no_decay) names.push_back(Value(p.fqn));
  }
  g.Set("params", Value(std::move(names)));
  return g;
}

// The full training state after `step` steps.
Value MakeTrainingState(const ModelShape& m, int64_t step, uint64_t* tensor_bytes) {
  ParallelFill fill;
  Dict root;
  root.Set("model", MakeModel(m, &fill, /*trained=*/true));

  Dict state;
  for (const Param& p : m.params) {
    Dict s;
    Tensor st = NewTensor(DType::kF32, {});
    *static_cast<float*>(st.data()) = float(step);
    s.Set("step", st);  // torch keeps AdamW's step as a 0-d float32 tensor
    Tensor ea = NewTensor(DType::kF32, p.shape), eas = NewTensor(DType::kF32, p.shape);
    fill.Add(Realistic::kExpAvg, ea.data(), ea.numel(), 4);
    fill.Add(Realistic::kExpAvgSq, eas.data(), eas.numel(), 4);
    s.Set("exp_avg", ea);
    s.Set("exp_avg_sq", eas);
    state.Set(p.fqn, Value(std::move(s)));
  }
  const double lr = 3e-4 * 0.5 * (1 + std::cos(3.14159265358979 * double(step) / 20000.0));
  Dict optim;
  optim.Set("state", Value(std::move(state)));
  optim.Set("param_groups", Value(List{Value(ParamGroup(m, false, lr, 0.95)),
                                       Value(ParamGroup(m, true, lr, 0.95))}));
  root.Set("optim", Value(std::move(optim)));

  Dict sched;
  sched.Set("last_epoch", step);
  sched.Set("_step_count", step + 1);
  sched.Set("base_lrs", Value(List{Value(3e-4), Value(3e-4)}));
  sched.Set("_last_lr", Value(List{Value(lr), Value(lr)}));
  sched.Set("verbose", false);
  sched.Set("_get_lr_called_within_step", false);
  root.Set("scheduler", Value(std::move(sched)));

  std::ostringstream dl;
  dl << R"({"epoch": 2, "samples_yielded": )" << step * 256
     << R"(, "sampler": {"seed": 1234, "shuffle": true, "index": )" << (step * 256) % 1000003
     << R"(}, "workers": [{"id": 0, "shard": "train-00017.bin", "offset": 77312}, )"
     << R"({"id": 1, "shard": "train-00018.bin", "offset": 76800}], "note": "caf\u00e9 \u2713"})";
  root.Set("dataloader", Value(Bytes{"json", dl.str()}));

  Dict rng;
  Tensor torch_rng = NewTensor(DType::kU8, {5056});  // torch.get_rng_state(): 5056 bytes
  {
    std::string b = RandomBytes(5056, 7);
    std::memcpy(torch_rng.data(), b.data(), b.size());
  }
  rng.Set("torch", torch_rng);
  rng.Set("cuda", Value(Bytes{"raw", RandomBytes(16, 8)}));
  rng.Set("numpy", Value(Bytes{"pickle", PickleLike("MT19937", 2504, 9)}));
  rng.Set("python", Value(Bytes{"pickle", PickleLike("random.Random", 2500, 10)}));
  root.Set("rng", Value(std::move(rng)));

  root.Set("step", step);
  root.Set("run_name", "llama-ish-" + std::to_string(m.d) + "d-" + std::to_string(m.layers) + "L");
  root.Set("best_val_loss", 2.3456789012345678);
  root.Set("finished", false);
  root.Set("resume_from", None{});

  fill.Run();
  Value v(std::move(root));
  *tensor_bytes = 0;
  ckfmt::VisitValues(v, [&](const KeyPath&, const Value& x) {
    if (x.is_tensor()) *tensor_bytes += x.as_tensor().nbytes();
    if (x.kind() == Value::Kind::kBytes) *tensor_bytes += x.as_bytes().data.size();
  });
  return v;
}

// ---------------------------------------------------------------------------
// Bitwise comparison of two state dicts.

uint64_t FloatBits(double d) {
  uint64_t u;
  std::memcpy(&u, &d, 8);
  return u;
}

// `check_order`: dicts must also keep the original's key order (true where
// the loaded dicts were built from the file, not supplied by the caller).
void Compare(const Value& want, const Value& got, const std::string& where,
             std::vector<std::string>* errors, uint64_t* checked, bool check_order) {
  auto err = [&](const std::string& m) {
    if (errors->size() < 50) errors->push_back((where.empty() ? "<root>" : where) + ": " + m);
  };
  if (want.kind() != got.kind()) {
    err(std::string("kind ") + ckfmt::ValueKindName(got.kind()) + ", expected " +
        ckfmt::ValueKindName(want.kind()));
    return;
  }
  ++*checked;
  switch (want.kind()) {
    case Value::Kind::kNone: break;
    case Value::Kind::kBool:
      if (want.as_bool() != got.as_bool()) err("bool differs");
      break;
    case Value::Kind::kInt:
      if (want.as_int() != got.as_int()) {
        err("int " + std::to_string(got.as_int()) + ", expected " + std::to_string(want.as_int()));
      }
      break;
    case Value::Kind::kFloat:
      if (FloatBits(want.as_float()) != FloatBits(got.as_float())) err("float bits differ");
      break;
    case Value::Kind::kString:
      if (want.as_string() != got.as_string()) err("string differs");
      break;
    case Value::Kind::kBytes:
      if (want.as_bytes().content_type != got.as_bytes().content_type) {
        err("content type '" + got.as_bytes().content_type + "', expected '" +
            want.as_bytes().content_type + "'");
      }
      if (want.as_bytes().data != got.as_bytes().data) err("bytes differ");
      break;
    case Value::Kind::kTensor: {
      const Tensor& a = want.as_tensor();
      const Tensor& b = got.as_tensor();
      if (a.dtype() != b.dtype()) {
        err(std::string("dtype ") + std::string(ckfmt::DTypeName(b.dtype())) + ", expected " +
            std::string(ckfmt::DTypeName(a.dtype())));
      } else if (a.shape() != b.shape()) {
        err("shape differs");
      } else if (b.device().type != ckfmt::DeviceType::kCPU) {
        err("not a host tensor");
      } else if (a.nbytes() && std::memcmp(a.data(), b.data(), a.nbytes()) != 0) {
        err("tensor bytes differ");
      }
      break;
    }
    case Value::Kind::kDict: {
      const Dict& a = want.as_dict();
      const Dict& b = got.as_dict();
      if (a.size() != b.size()) {
        err("dict has " + std::to_string(b.size()) + " keys, expected " + std::to_string(a.size()));
      }
      for (size_t i = 0; i < a.size(); ++i) {
        const Value* v = b.Find(a.key(i));
        const std::string sub = (where.empty() ? "" : where + "/") + a.key(i);
        if (!v) {
          if (errors->size() < 50) errors->push_back(sub + ": missing");
          continue;
        }
        if (check_order && i < b.size() && b.key(i) != a.key(i)) {
          err("key order differs at position " + std::to_string(i) + ": '" + b.key(i) +
              "', expected '" + a.key(i) + "'");
        }
        Compare(a.value(i), *v, sub, errors, checked, check_order);
      }
      break;
    }
    case Value::Kind::kList: {
      const List& a = want.as_list();
      const List& b = got.as_list();
      if (a.size() != b.size()) {
        err("list has " + std::to_string(b.size()) + " items, expected " + std::to_string(a.size()));
        return;
      }
      for (size_t i = 0; i < a.size(); ++i) {
        Compare(a[i], b[i], where + "/[" + std::to_string(i) + "]", errors, checked, check_order);
      }
      break;
    }
  }
}

// Data pointers of the tensors below `root`, by formatted path.
std::map<std::string, const void*> TensorPointers(const Value& root) {
  std::map<std::string, const void*> out;
  ckfmt::VisitValues(root, [&](const KeyPath& p, const Value& v) {
    if (v.is_tensor()) out[ckfmt::FormatKeyPath(p)] = v.as_tensor().data();
  });
  return out;
}

// ---------------------------------------------------------------------------

std::string SelfDir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : exe.parent_path().string();
}

// Runs argv[0] with `argv`, stdout and stderr captured together.
int RunProcess(const std::vector<std::string>& argv, std::string* output) {
  int fds[2];
  if (pipe(fds) != 0) return -1;
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    std::fprintf(stderr, "exec %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  close(fds[1]);
  char buf[65536];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) output->append(buf, size_t(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void PrintLines(const std::string& text, size_t head, size_t tail, const std::string& indent) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  if (head + tail >= lines.size()) {
    for (const auto& l : lines) std::printf("%s%s\n", indent.c_str(), l.c_str());
    return;
  }
  for (size_t i = 0; i < head; ++i) std::printf("%s%s\n", indent.c_str(), lines[i].c_str());
  std::printf("%s... (%zu more lines) ...\n", indent.c_str(), lines.size() - head - tail);
  for (size_t i = lines.size() - tail; i < lines.size(); ++i) {
    std::printf("%s%s\n", indent.c_str(), lines[i].c_str());
  }
}

// LoadReport::ToString() with each section ("title (N)" followed by
// indented paths) cut to its first `head` and last `tail` paths.
void PrintReport(const std::string& text, size_t head, size_t tail, const std::string& indent) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::vector<std::string> items;
  auto flush = [&] {
    if (items.size() <= head + tail + 1) {
      for (const auto& l : items) std::printf("%s%s\n", indent.c_str(), l.c_str());
    } else {
      for (size_t i = 0; i < head; ++i) std::printf("%s%s\n", indent.c_str(), items[i].c_str());
      std::printf("%s  ... (%zu more) ...\n", indent.c_str(), items.size() - head - tail);
      for (size_t i = items.size() - tail; i < items.size(); ++i) {
        std::printf("%s%s\n", indent.c_str(), items[i].c_str());
      }
    }
    items.clear();
  };
  for (const auto& l : lines) {
    if (l.rfind("  ", 0) == 0) {
      items.push_back(l);
    } else {
      flush();
      std::printf("%s%s\n", indent.c_str(), l.c_str());
    }
  }
  flush();
}

void DropCache(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

bool HasPrefixIn(const std::vector<KeyPath>& paths, const KeyPath& prefix) {
  return std::any_of(paths.begin(), paths.end(),
                     [&](const KeyPath& p) { return ckfmt::HasPrefix(p, prefix); });
}

struct Args {
  std::string dir;
  double size_mb = 500;
  ckfmt::Codec codec = ckfmt::Codec::kNone;
  bool keep = false, full_report = false;
};

void Usage() {
  std::printf(
      "usage: ckfmt-main-job [--dir DIR] [--size-mb 500] [--codec NAME] [--keep] [--full-report]\n"
      "  --dir DIR       where to write the checkpoint (default: a new dir under /tmp)\n"
      "  --size-mb N     bf16 model weights in MB (the AdamW state adds 4x that)\n"
      "  --codec NAME    none (default), zstd or byteplane-zstd, level 1; --zstd: zstd\n"
      "  --keep          keep the checkpoint (default: removed at the end)\n"
      "  --full-report   print the whole LoadReport (default: its first and last lines)\n");
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "missing value for %s\n", s.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (s == "--dir") args.dir = val();
    else if (s == "--size-mb") args.size_mb = std::atof(val().c_str());
    else if (s == "--zstd") args.codec = ckfmt::Codec::kZstd;
    else if (s == "--codec") {
      auto c = ckfmt::CodecFromName(val());
      if (!c.ok()) { std::fprintf(stderr, "%s\n", c.status().ToString().c_str()); return 2; }
      args.codec = *c;
    }
    else if (s == "--keep") args.keep = true;
    else if (s == "--full-report") args.full_report = true;
    else if (s == "-h" || s == "--help") { Usage(); return 0; }
    else { std::fprintf(stderr, "unknown argument %s\n", s.c_str()); Usage(); return 2; }
  }
  if (args.size_mb <= 0) { std::fprintf(stderr, "--size-mb must be > 0\n"); return 2; }

  bool made_dir = false;
  if (args.dir.empty()) {
    char tmpl[] = "/tmp/ckfmt-main-job-XXXXXX";
    if (!mkdtemp(tmpl)) { std::perror("mkdtemp"); return 2; }
    args.dir = tmpl;
    made_dir = true;
  } else {
    std::error_code ec;
    fs::create_directories(args.dir, ec);
    if (ec) {
      std::fprintf(stderr, "cannot create %s: %s\n", args.dir.c_str(), ec.message().c_str());
      return 2;
    }
  }
  const std::string file = args.dir + "/step_001000.ckfmt";
  std::vector<std::string> failures;
  auto check = [&](bool ok, const std::string& what) {
    std::printf("  [%s] %s\n", ok ? " ok " : "FAIL", what.c_str());
    if (!ok) failures.push_back(what);
    return ok;
  };

  // 1. The training state.
  std::printf("== 1. building the training state\n");
  const ModelShape m = MakeModelShape(args.size_mb);
  const auto g0 = Clock::now();
  uint64_t data_bytes = 0;
  const Value original = MakeTrainingState(m, 1000, &data_bytes);
  const auto g1 = Clock::now();
  std::printf("model: vocab %llu, d %llu, ffn %llu, %llu layers: %llu params, %zu tensors, "
              "%.1f MB bf16\n",
              (unsigned long long)m.vocab, (unsigned long long)m.d, (unsigned long long)m.ffn,
              (unsigned long long)m.layers, (unsigned long long)m.num_params, m.params.size(),
              double(m.num_params) * 2 / 1e6);
  std::printf("optimizer: AdamW, fp32 exp_avg + exp_avg_sq + 0-d step per parameter, "
              "%.1f MB; 2 param groups\n",
              double(m.num_params) * 8 / 1e6);
  std::printf("plus scheduler dict, data-loader state (json bytes), rng {torch u8 tensor, "
              "cuda raw bytes, numpy/python pickle bytes}, step, run name, ...\n");
  std::printf("total tensor + blob bytes: %.1f MB (built in %.1f s)\n", double(data_bytes) / 1e6,
              Seconds(g0, g1));

  // 2. Save.
  std::printf("\n== 2. ckfmt::Save -> %s (codec %s%s)\n", file.c_str(),
              std::string(ckfmt::CodecName(uint8_t(args.codec))).c_str(),
              args.codec == ckfmt::Codec::kNone ? "" : ", level 1");
  ckfmt::SaveOptions so;
  so.codec = args.codec;
  so.metadata = {{"job", "ckfmt-main-job"}, {"step", "1000"}};
  const auto s0 = Clock::now();
  auto saved = ckfmt::Save(file, original, so);
  const auto s1 = Clock::now();
  double save_s = Seconds(s0, s1);
  if (!check(saved.ok(), "save" + (saved.ok() ? std::string() : ": " + saved.status().ToString()))) {
    std::printf("MAIN JOB: FAIL (save failed)\n");
    std::error_code ec;
    if (made_dir && !args.keep) fs::remove_all(args.dir, ec);
    return 1;
  }
  std::printf("  %.1f MB logical, %.1f MB stored, file %.1f MB, %llu chunks, I/O %s\n",
              double(saved->raw_bytes) / 1e6, double(saved->stored_bytes) / 1e6,
              double(saved->file_bytes) / 1e6, (unsigned long long)saved->chunks,
              saved->io_path.c_str());
  std::printf("  save: %.2f s, %.3f GB/s (logical, fsync included)\n", save_s,
              double(data_bytes) / 1e9 / save_s);
  check(saved->raw_bytes == data_bytes,
        "WriteStats.raw_bytes (" + std::to_string(saved->raw_bytes) +
            ") equals the state's tensor + blob bytes (" + std::to_string(data_bytes) + ")");
  {
    std::vector<std::string> leftovers;
    for (const auto& e : fs::directory_iterator(args.dir)) {
      const std::string name = e.path().filename().string();
      if (name.find(".tmp") != std::string::npos) leftovers.push_back(name);
    }
    check(leftovers.empty(), "no temporary files left next to the checkpoint" +
                                 (leftovers.empty() ? std::string() : ": " + leftovers[0]));
  }

  // 3. verify and inspect, in process and with the CLI.
  std::printf("\n== 3. verify and inspect\n");
  {
    auto vr = ckfmt::VerifyFile(file);
    bool ok = vr.ok() && vr->ok();
    std::string detail = !vr.ok() ? vr.status().ToString()
                         : vr->ok() ? std::to_string(vr->entries) + " entries, " +
                                          std::to_string(vr->chunks) + " chunks, " +
                                          std::to_string(vr->bytes_checked) + " bytes checked"
                                    : vr->problems[0].where + ": " + vr->problems[0].message;
    check(ok, "ckfmt::VerifyFile: " + detail);
  }
  const std::string cli = SelfDir() + "/ckfmt";
  if (!check(access(cli.c_str(), X_OK) == 0, "ckfmt CLI found at " + cli)) {
    std::printf("  (build the `ckfmt` target; it is built next to ckfmt-main-job)\n");
  } else {
    std::string out;
    const auto v0 = Clock::now();
    int rc = RunProcess({cli, "verify", "-v", file}, &out);
    const auto v1 = Clock::now();
    std::printf("  $ ckfmt verify -v %s   (%.2f s)\n", file.c_str(), Seconds(v0, v1));
    PrintLines(out, 20, 5, "    ");
    check(rc == 0, "`ckfmt verify` exit code " + std::to_string(rc) + " (expected 0)");
    out.clear();
    rc = RunProcess({cli, "inspect", file}, &out);
    std::printf("  $ ckfmt inspect %s | head -30\n", file.c_str());
    PrintLines(out, 30, 0, "    ");
    check(rc == 0, "`ckfmt inspect` exit code " + std::to_string(rc) + " (expected 0)");
  }

  // 4a. Load into {model} only: what a trainer has before its first step.
  std::printf("\n== 4. load into a state dict holding only the model (fresh tensors)\n");
  double load_s = 0;
  {
    ParallelFill fill;
    Dict root;
    root.Set("model", MakeModel(m, &fill, /*trained=*/false));
    fill.Run();
    Value into(std::move(root));
    const auto before = TensorPointers(into);
    DropCache(file);
    const auto l0 = Clock::now();
    auto report = ckfmt::Load(file, &into);
    const auto l1 = Clock::now();
    load_s = Seconds(l0, l1);
    if (check(report.ok(), "Load" + (report.ok() ? std::string() : ": " + report.status().ToString()))) {
      std::printf("  load: %.2f s, %.3f GB/s (logical; page cache dropped, default O_DIRECT)\n",
                  load_s, double(data_bytes) / 1e9 / load_s);
      std::printf("  LoadReport::ToString()%s:\n",
                  args.full_report ? "" : " (each section cut to its first and last keys; "
                                          "--full-report for all)");
      const std::string text = report->ToString();
      if (args.full_report) PrintLines(text, 1u << 30, 0, "    ");
      else PrintReport(text, 6, 16, "    ");
      const auto& r = *report;
      std::printf("  report: %zu loaded in place, %zu reconstructed, %zu missing, %zu unexpected, "
                  "%llu bytes read\n",
                  r.loaded_in_place.size(), r.reconstructed.size(), r.missing.size(),
                  r.unexpected.size(), (unsigned long long)r.bytes_read);
      check(r.missing.empty() && r.unexpected.empty(), "nothing missing or left out");
      check(r.loaded_in_place.size() == m.params.size(),
            std::to_string(r.loaded_in_place.size()) + " entries loaded in place == " +
                std::to_string(m.params.size()) + " model tensors");
      check(HasPrefixIn(r.reconstructed, {"optim", "state"}) &&
                HasPrefixIn(r.reconstructed, {"optim", "param_groups"}),
            "optimizer state and param_groups reconstructed");
      check(HasPrefixIn(r.reconstructed, {"dataloader"}), "data-loader state reconstructed");
      check(HasPrefixIn(r.reconstructed, {"rng"}) && HasPrefixIn(r.reconstructed, {"scheduler"}) &&
                HasPrefixIn(r.reconstructed, {"step"}),
            "rng, scheduler and step reconstructed");
      const auto after = TensorPointers(into);
      size_t moved = 0;
      for (const auto& [k, p] : before) {
        auto it = after.find(k);
        if (it == after.end() || it->second != p) ++moved;
      }
      check(moved == 0, "model tensors filled in place (same buffers), " + std::to_string(moved) +
                            " reallocated");
      std::vector<std::string> errors;
      uint64_t checked = 0;
      Compare(original, into, "", &errors, &checked, /*check_order=*/true);
      for (const auto& e : errors) std::printf("    mismatch: %s\n", e.c_str());
      check(errors.empty(), "bitwise equal to the original, key order included: " +
                                std::to_string(checked) +
                                " values (tensors, scalars, blobs, containers) compared");
    }
  }

  // 4b. Load into {model, optim{state: {}, param_groups: constructor defaults},
  //     step: 0}: hyper-parameters assigned in place, state reconstructed.
  std::printf("\n== 4b. load into {model, optimizer before its first step, step 0}\n");
  double load2_s = 0;
  {
    ParallelFill fill;
    Dict root;
    root.Set("model", MakeModel(m, &fill, /*trained=*/false));
    fill.Run();
    Dict optim;
    optim.Set("state", Value(Dict{}));
    optim.Set("param_groups", Value(List{Value(ParamGroup(m, false, 3e-4, 0.999)),
                                         Value(ParamGroup(m, true, 3e-4, 0.999))}));
    root.Set("optim", Value(std::move(optim)));
    root.Set("step", int64_t{0});
    Value into(std::move(root));
    DropCache(file);
    const auto l0 = Clock::now();
    auto report = ckfmt::Load(file, &into);
    const auto l1 = Clock::now();
    load2_s = Seconds(l0, l1);
    if (check(report.ok(), "Load" + (report.ok() ? std::string() : ": " + report.status().ToString()))) {
      const auto& r = *report;
      std::printf("  load: %.2f s, %.3f GB/s; %zu loaded in place, %zu reconstructed, %zu missing, "
                  "%zu unexpected\n",
                  load2_s, double(data_bytes) / 1e9 / load2_s, r.loaded_in_place.size(),
                  r.reconstructed.size(), r.missing.size(), r.unexpected.size());
      check(r.missing.empty() && r.unexpected.empty(), "nothing missing or left out");
      check(HasPrefixIn(r.loaded_in_place, {"optim", "param_groups"}) &&
                HasPrefixIn(r.loaded_in_place, {"step"}),
            "param_groups hyper-parameters and step assigned in place");
      check(HasPrefixIn(r.reconstructed, {"optim", "state"}), "optimizer state reconstructed");
      std::vector<std::string> errors;
      uint64_t checked = 0;
      // The caller's own dicts keep the caller's key order ("step" is third here).
      Compare(original, into, "", &errors, &checked, /*check_order=*/false);
      for (const auto& e : errors) std::printf("    mismatch: %s\n", e.c_str());
      check(errors.empty(), "bitwise equal to the original: " + std::to_string(checked) +
                                " values compared");
    }
  }

  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  std::printf("\n== summary\n");
  std::printf("  state %.1f MB: save %.3f GB/s (%.2f s), load %.3f GB/s (%.2f s), "
              "load #2 %.3f GB/s (%.2f s); peak RSS %.0f MiB\n",
              double(data_bytes) / 1e6, double(data_bytes) / 1e9 / save_s, save_s,
              load_s > 0 ? double(data_bytes) / 1e9 / load_s : 0.0, load_s,
              load2_s > 0 ? double(data_bytes) / 1e9 / load2_s : 0.0, load2_s,
              double(ru.ru_maxrss) / 1024.0);
  if (!args.keep) {
    std::error_code ec;
    if (made_dir) fs::remove_all(args.dir, ec);
    else fs::remove(file, ec);
  } else {
    std::printf("  kept %s\n", file.c_str());
  }
  if (failures.empty()) {
    std::printf("MAIN JOB: PASS (save, verify, inspect, load with reconstruction, bitwise check)\n");
    return 0;
  }
  std::printf("MAIN JOB: FAIL (%zu check(s) failed; first: %s)\n", failures.size(),
              failures[0].c_str());
  return 1;
}
