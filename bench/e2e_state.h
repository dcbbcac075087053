// The end-to-end benchmark's training state: a transformer's bf16 weights
// plus fp32 AdamW moments (10 bytes per parameter) with trained-like values,
// a step per parameter, RNG and data-loader blobs; and the checks a load is
// held to.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "ckfmt/state_dict.h"
#include "measure.h"

namespace ckfmt::bench {

struct TensorSpec {
  std::string fqn;  // torch-style dotted name
  ckfmt::KeyPath model_path;
  ckfmt::Shape shape;
  bool norm;
};

struct Layout {
  uint64_t d = 0, layers = 0, vocab = 32768;
  std::vector<TensorSpec> params;
  uint64_t num_params = 0;
};

// The widest model of about `size_gib` with at least 8 layers.
Layout MakeLayout(double size_gib);

uint64_t Numel(const ckfmt::Shape& s);

// Owns the memory of one copy of the state's tensors.
struct Buffers {
  std::vector<void*> weights, exp_avg, exp_avg_sq;
  std::vector<float*> steps;
  std::string rng, dataloader;
  std::vector<void*> allocations;
  ~Buffers() {
    for (void* p : allocations) std::free(p);
  }
  // `n` bytes starting `offset` bytes into a page-aligned allocation.
  void* Alloc(size_t n, size_t offset) {
    allocations.push_back(AlignedAlloc(n + offset));
    return static_cast<uint8_t*>(allocations.back()) + offset;
  }
};

// `offset`: where each tensor starts in its page-aligned allocation (64
// imitates PyTorch's large CPU tensors); `touch` faults the memory in.
void AllocBuffers(const Layout& L, Buffers* b, bool touch, size_t offset = 0);
// Trained-like values, on every core.
void FillBuffers(const Layout& L, Buffers* b);
// The state dict over `b`'s memory (views: no copies).
ckfmt::Value MakeStateDict(const Layout& L, const Buffers& b, int64_t step);
uint64_t LogicalBytes(const Layout& L, const Buffers& b);
// Every whole `block` of the tensors under `state`, in state order.
std::vector<void*> WholeBlocks(const ckfmt::Value& state, size_t block);
// One checksum per tensor: a load is checked against the state it saved
// without keeping a second copy of it.
std::vector<uint64_t> TensorHashes(const Layout& L, const Buffers& b);
// Whether every tensor of `want` is in `got` at the same path with the same
// bytes (got may hold more).
bool SameTensors(const ckfmt::Value& want, const ckfmt::Value& got);
// Overwrites every tensor, so that a load that skips one is caught.
void Poison(const ckfmt::Value& state);
// memcpy of the whole state, source tensors into the destination tensors
// (one thread; both already resident, as a load's target is), in GiB/s.
double MemcpyGiBs(const Layout& L, const Buffers& src, Buffers* dst);

}  // namespace ckfmt::bench
