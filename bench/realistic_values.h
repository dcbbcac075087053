// Trained-like numbers, fast, for the benchmarks and the main jobs:
// xorshift128+ and Box-Muller in float (about 6 ns a value on one core; full
// 24-bit mantissas, unlike table lookups), and round-to-nearest-even bf16.
// Benchmarks must not run on zeros or uniform bytes: compression and
// checksums behave differently there.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

namespace ckfmt::bench {

struct Rng {
  uint64_t s0, s1;
  explicit Rng(uint64_t seed) {
    auto mix = [](uint64_t& x) {
      uint64_t z = (x += 0x9e3779b97f4a7c15ull);
      z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
      z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
      return z ^ (z >> 31);
    };
    s0 = mix(seed);
    s1 = mix(seed);
  }
  uint64_t Next() {
    uint64_t x = s0;
    const uint64_t y = s1;
    s0 = y;
    x ^= x << 23;
    s1 = x ^ y ^ (x >> 17) ^ (y >> 26);
    return s1 + y;
  }
};

template <typename F>
void ForNormals(size_t n, uint64_t seed, F&& emit) {
  Rng r(seed);
  size_t i = 0;
  while (i < n) {
    const uint64_t x = r.Next();
    const float u1 = float((x >> 40) + 1) * (1.0f / 16777217.0f);
    const float u2 = float(x & 0xffffff) * (1.0f / 16777216.0f);
    const float rad = std::sqrt(-2.0f * std::log(u1));
    float s, c;
    sincosf(6.2831853f * u2, &s, &c);
    emit(i++, rad * c);
    if (i < n) emit(i++, rad * s);
  }
}

inline uint16_t ToBF16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);
  return uint16_t(u >> 16);
}

// The value distributions of a training state: bf16 weights ~N(0, 0.02),
// bf16 layer-norm gains ~1, fp32 AdamW exp_avg ~N(0, 1e-3) and exp_avg_sq
// (an EMA of squared gradients: small, positive).
enum class Realistic { kWeightBF16, kNormGainBF16, kExpAvg, kExpAvgSq };

// Fills `n` elements at `data` (bf16 or fp32 per `kind`) from `seed`.
inline void FillRealistic(Realistic kind, void* data, size_t n, uint64_t seed) {
  switch (kind) {
    case Realistic::kWeightBF16: {
      auto* p = static_cast<uint16_t*>(data);
      ForNormals(n, seed, [&](size_t i, float z) { p[i] = ToBF16(0.02f * z); });
      break;
    }
    case Realistic::kNormGainBF16: {
      auto* p = static_cast<uint16_t*>(data);
      ForNormals(n, seed, [&](size_t i, float z) { p[i] = ToBF16(1.0f + 0.05f * z); });
      break;
    }
    case Realistic::kExpAvg: {
      auto* p = static_cast<float*>(data);
      ForNormals(n, seed, [&](size_t i, float z) { p[i] = 1e-3f * z; });
      break;
    }
    case Realistic::kExpAvgSq: {
      auto* p = static_cast<float*>(data);
      ForNormals(n, seed, [&](size_t i, float z) {
        const float g = 1e-3f * z;
        p[i] = g * g + 1e-9f;
      });
      break;
    }
  }
}

// Fills many buffers in slices spread over every core: a multi-GiB
// training state takes seconds on one.
class ParallelFill {
 public:
  // Schedules `n` elements of `esize` bytes at `data` filled as `kind`;
  // each slice has a seed of its own, 1, 2, ... in the order added.
  void Add(Realistic kind, void* data, size_t n, size_t esize) { Slice(kind, data, n, esize, 0); }
  // Schedules `bytes` bytes at `data` set to `byte`: memory that only needs
  // writing, as a freshly constructed model's.
  void AddBytes(void* data, size_t bytes, uint8_t byte) {
    Slice(std::nullopt, data, bytes, 1, byte);
  }
  void Run() {
    std::atomic<size_t> next{0};
    auto worker = [&] {
      for (size_t i; (i = next.fetch_add(1)) < tasks_.size();) {
        const Task& t = tasks_[i];
        if (t.kind) {
          FillRealistic(*t.kind, t.data, t.n, t.seed);
        } else {
          std::memset(t.data, t.byte, t.n);
        }
      }
    };
    std::vector<std::thread> threads;
    for (unsigned i = 0; i < std::max(1u, std::thread::hardware_concurrency()); ++i) {
      threads.emplace_back(worker);
    }
    for (auto& t : threads) t.join();
    tasks_.clear();
  }

 private:
  struct Task {
    std::optional<Realistic> kind;  // none: set every byte to `byte`
    void* data;
    size_t n;
    uint64_t seed;
    uint8_t byte;
  };
  void Slice(std::optional<Realistic> kind, void* data, size_t n, size_t esize, uint8_t byte) {
    constexpr size_t kSlice = size_t{4} << 20;  // elements per task
    for (size_t off = 0; off < n; off += kSlice) {
      tasks_.push_back({kind, static_cast<uint8_t*>(data) + off * esize, std::min(kSlice, n - off),
                        ++seed_, byte});
    }
  }
  std::vector<Task> tasks_;
  uint64_t seed_ = 0;
};

}  // namespace ckfmt::bench
