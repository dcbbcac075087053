// The end-to-end benchmark's training state (see e2e_state.h).
#include "e2e_state.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "ckfmt/checksum.h"
#include "measure.h"
#include "realistic_values.h"

namespace ckfmt::bench {

Layout MakeLayout(double size_gib) {
  const double target_params = size_gib * kGiB / 10.0;
  Layout L;
  // The widest model with at least 8 layers, embeddings included.
  for (uint64_t d : {4096ull, 2048ull, 1024ull, 512ull, 256ull, 128ull}) {
    const double per_layer = 12.0 * d * d + 2.0 * d;
    const double left = target_params - double(L.vocab * d + d);
    if (left / per_layer >= 8 || d == 128) {
      L.d = d;
      L.layers = uint64_t(std::max(1.0, std::floor(left / per_layer)));
      break;
    }
  }
  const uint64_t d = L.d;
  auto add = [&](std::string fqn, ckfmt::KeyPath p, ckfmt::Shape s, bool norm) {
    L.num_params += Numel(s);
    L.params.push_back({std::move(fqn), std::move(p), std::move(s), norm});
  };
  add("embed.weight", {"model", "embed.weight"}, {L.vocab, d}, false);
  static const std::pair<const char*, int> kLayer[] = {
      {"attn.q.weight", 0}, {"attn.k.weight", 0}, {"attn.v.weight", 0}, {"attn.o.weight", 0},
      {"mlp.up.weight", 1}, {"mlp.down.weight", 2}, {"norm1.weight", 3}, {"norm2.weight", 3}};
  for (uint64_t i = 0; i < L.layers; ++i) {
    for (auto [name, k] : kLayer) {
      ckfmt::Shape s = k == 0 ? ckfmt::Shape{d, d}
                     : k == 1 ? ckfmt::Shape{4 * d, d}
                     : k == 2 ? ckfmt::Shape{d, 4 * d}
                              : ckfmt::Shape{d};
      add("layers." + std::to_string(i) + "." + name, {"model", "layers", i, std::string(name)},
          s, k == 3);
    }
  }
  add("norm.weight", {"model", "norm.weight"}, {d}, true);
  return L;
}

uint64_t Numel(const ckfmt::Shape& s) {
  uint64_t n = 1;
  for (auto x : s) n *= x;
  return n;
}

void AllocBuffers(const Layout& L, Buffers* b, bool touch, size_t offset) {
  for (const auto& p : L.params) {
    const uint64_t n = Numel(p.shape);
    b->weights.push_back(b->Alloc(n * 2, offset));
    b->exp_avg.push_back(b->Alloc(n * 4, offset));
    b->exp_avg_sq.push_back(b->Alloc(n * 4, offset));
    b->steps.push_back(static_cast<float*>(b->Alloc(4, 0)));
    if (touch) {
      std::memset(b->weights.back(), 0, n * 2);
      std::memset(b->exp_avg.back(), 0, n * 4);
      std::memset(b->exp_avg_sq.back(), 0, n * 4);
    }
    *b->steps.back() = 0;
  }
}

void FillBuffers(const Layout& L, Buffers* b) {
  ParallelFill fill;
  for (size_t i = 0; i < L.params.size(); ++i) {
    const uint64_t n = Numel(L.params[i].shape);
    fill.Add(L.params[i].norm ? Realistic::kNormGainBF16 : Realistic::kWeightBF16, b->weights[i],
             n, 2);
    fill.Add(Realistic::kExpAvg, b->exp_avg[i], n, 4);
    fill.Add(Realistic::kExpAvgSq, b->exp_avg_sq[i], n, 4);
    *b->steps[i] = 1000.0f;
  }
  fill.Run();

  // RNG state (torch's CPU generator state is 5056 bytes) and a data-loader
  // state as a JSON blob.
  b->rng.resize(5056);
  Rng r(42);
  for (auto& c : b->rng) c = char(r.Next() >> 56);
  b->dataloader =
      R"({"epoch": 3, "samples_seen": 12800000, "shuffle_seed": 1234, )"
      R"("workers": [{"shard": 0, "offset": 77312}, {"shard": 1, "offset": 77056}]})";
}

ckfmt::Value MakeStateDict(const Layout& L, const Buffers& b, int64_t step) {
  using ckfmt::Dict;
  using ckfmt::List;
  using ckfmt::Tensor;
  using ckfmt::Value;
  Dict model;
  List layers(L.layers, Value(Dict{}));
  Dict optim_state;
  List all_names;
  for (size_t i = 0; i < L.params.size(); ++i) {
    const TensorSpec& p = L.params[i];
    Tensor w = Tensor::View(ckfmt::DType::kBF16, p.shape, b.weights[i]);
    if (p.model_path[1] == ckfmt::PathComponent(std::string("layers"))) {
      const uint64_t li = std::get<uint64_t>(p.model_path[2]);
      layers[li].as_dict().Set(std::get<std::string>(p.model_path[3]), Value(w));
    } else {
      model.Set(std::get<std::string>(p.model_path[1]), Value(w));
    }
    Dict st;
    st.Set("step", Value(Tensor::View(ckfmt::DType::kF32, {}, b.steps[i])));
    st.Set("exp_avg", Value(Tensor::View(ckfmt::DType::kF32, p.shape, b.exp_avg[i])));
    st.Set("exp_avg_sq", Value(Tensor::View(ckfmt::DType::kF32, p.shape, b.exp_avg_sq[i])));
    optim_state.Set(p.fqn, Value(std::move(st)));
    all_names.push_back(Value(p.fqn));
  }
  // Insertion order like torch: embed, layers, final norm.
  Dict model_ordered;
  model_ordered.Set("embed.weight", *model.Find("embed.weight"));
  model_ordered.Set("layers", Value(std::move(layers)));
  model_ordered.Set("norm.weight", *model.Find("norm.weight"));

  Dict group;
  group.Set("lr", Value(3e-4));
  group.Set("betas", Value(List{Value(0.9), Value(0.95)}));
  group.Set("eps", Value(1e-8));
  group.Set("weight_decay", Value(0.1));
  group.Set("params", Value(std::move(all_names)));
  Dict optim;
  optim.Set("state", Value(std::move(optim_state)));
  optim.Set("param_groups", Value(List{Value(std::move(group))}));

  Dict root;
  root.Set("model", Value(std::move(model_ordered)));
  root.Set("optim", Value(std::move(optim)));
  root.Set("step", Value(step));
  root.Set("rng", Value(ckfmt::Bytes{"raw", b.rng}));
  root.Set("dataloader", Value(ckfmt::Bytes{"json", b.dataloader}));
  return Value(std::move(root));
}

uint64_t LogicalBytes(const Layout& L, const Buffers& b) {
  return L.num_params * 10 + L.params.size() * 4 + b.rng.size() + b.dataloader.size();
}

std::vector<void*> WholeBlocks(const ckfmt::Value& state, size_t block) {
  std::vector<void*> blocks;
  ckfmt::VisitValues(state, [&](const ckfmt::KeyPath&, const ckfmt::Value& v) {
    if (!v.is_tensor()) return;
    auto* p = static_cast<uint8_t*>(v.as_tensor().data());
    for (uint64_t at = 0; at + block <= v.as_tensor().nbytes(); at += block) {
      blocks.push_back(p + at);
    }
  });
  return blocks;
}

std::vector<uint64_t> TensorHashes(const Layout& L, const Buffers& b) {
  std::vector<uint64_t> h;
  for (size_t i = 0; i < L.params.size(); ++i) {
    const uint64_t n = Numel(L.params[i].shape);
    h.push_back(ckfmt::Checksum(b.weights[i], n * 2));
    h.push_back(ckfmt::Checksum(b.exp_avg[i], n * 4));
    h.push_back(ckfmt::Checksum(b.exp_avg_sq[i], n * 4));
    h.push_back(ckfmt::Checksum(b.steps[i], 4));
  }
  return h;
}

bool SameTensors(const ckfmt::Value& want, const ckfmt::Value& got) {
  bool same = true;
  ckfmt::VisitValues(want, [&](const ckfmt::KeyPath& path, const ckfmt::Value& v) {
    if (!v.is_tensor() || !same) return;
    const ckfmt::Value* g = got.Find(path);
    const ckfmt::Tensor& a = v.as_tensor();
    same = g && g->is_tensor() && g->as_tensor().nbytes() == a.nbytes() &&
           ckfmt::Checksum(g->as_tensor().data(), a.nbytes()) ==
               ckfmt::Checksum(a.data(), a.nbytes());
  });
  return same;
}

void Poison(const ckfmt::Value& state) {
  ckfmt::VisitValues(state, [](const ckfmt::KeyPath&, const ckfmt::Value& v) {
    if (v.is_tensor()) std::memset(v.as_tensor().data(), 0xA5, v.as_tensor().nbytes());
  });
}

double MemcpyGiBs(const Layout& L, const Buffers& src, Buffers* dst) {
  uint64_t bytes = 0;
  const auto t0 = Clock::now();
  for (size_t i = 0; i < L.params.size(); ++i) {
    const uint64_t n = Numel(L.params[i].shape);
    std::memcpy(dst->weights[i], src.weights[i], n * 2);
    std::memcpy(dst->exp_avg[i], src.exp_avg[i], n * 4);
    std::memcpy(dst->exp_avg_sq[i], src.exp_avg_sq[i], n * 4);
    bytes += n * 10;
  }
  const auto t1 = Clock::now();
  return double(bytes) / kGiB / Seconds(t0, t1);
}

}  // namespace ckfmt::bench
