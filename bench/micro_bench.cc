// Micro benchmarks of the format's hot loops: checksum, chunk codecs on
// realistic training data, region arithmetic, index (de)serialization, and
// memcpy as the reference every per-byte cost is compared with.
//
//   build/bench/ckfmt_micro_bench [--benchmark_filter=REGEX]
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "ckfmt/checksum.h"
#include "ckfmt/codec.h"
#include "ckfmt/file_layout.h"
#include "ckfmt/index.h"
#include "ckfmt/region.h"
#include "realistic_values.h"

namespace {

constexpr size_t kChunk = 4ull << 20;  // the writer's default chunk size

// 64-byte aligned buffer, as the engine's staging buffers are.
struct AlignedBuf {
  explicit AlignedBuf(size_t n) : size(n) {
    if (posix_memalign(&p, 4096, n ? n : 1) != 0) std::abort();
    std::memset(p, 0, n);
  }
  ~AlignedBuf() { std::free(p); }
  AlignedBuf(const AlignedBuf&) = delete;
  AlignedBuf& operator=(const AlignedBuf&) = delete;
  uint8_t* data() const { return static_cast<uint8_t*>(p); }
  void* p = nullptr;
  size_t size;
};

// bf16 weights, fp32 AdamW exp_avg, and exp_avg_sq (an EMA of squared
// gradients: small and positive), from bench/realistic_values.h.
enum DataKind { kBF16Weights = 0, kF32ExpAvg = 1, kF32ExpAvgSq = 2 };
const char* DataName(int k) {
  switch (k) {
    case kBF16Weights: return "bf16_N(0,0.02)";
    case kF32ExpAvg: return "fp32_N(0,1e-3)";
    default: return "fp32_exp_avg_sq";
  }
}

void FillRealistic(int kind, uint8_t* p, size_t bytes) {
  using ckfmt::bench::Realistic;
  if (kind == kBF16Weights) {
    ckfmt::bench::FillRealistic(Realistic::kWeightBF16, p, bytes / 2, 1);
  } else {
    ckfmt::bench::FillRealistic(kind == kF32ExpAvg ? Realistic::kExpAvg : Realistic::kExpAvgSq, p,
                                bytes / 4, uint64_t(kind) + 1);
  }
}

// --------------------------------------------------------------------------

void BM_Memcpy4MiB(benchmark::State& state) {
  AlignedBuf src(kChunk), dst(kChunk);
  FillRealistic(kBF16Weights, src.data(), kChunk);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), kChunk);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * kChunk);
}
BENCHMARK(BM_Memcpy4MiB);

void BM_Checksum4MiB(benchmark::State& state) {
  AlignedBuf src(kChunk);
  FillRealistic(kBF16Weights, src.data(), kChunk);
  uint64_t h = 0;
  for (auto _ : state) {
    h ^= ckfmt::Checksum(src.data(), kChunk);
    benchmark::DoNotOptimize(h);
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * kChunk);
}
BENCHMARK(BM_Checksum4MiB);

// What a staging copy costs: memcpy then checksum of the destination, versus
// the fused single pass the engine uses.
void BM_CopyThenChecksum4MiB(benchmark::State& state) {
  AlignedBuf src(kChunk), dst(kChunk);
  FillRealistic(kBF16Weights, src.data(), kChunk);
  uint64_t h = 0;
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), kChunk);
    h ^= ckfmt::Checksum(dst.data(), kChunk);
    benchmark::DoNotOptimize(h);
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * kChunk);
}
BENCHMARK(BM_CopyThenChecksum4MiB);

void BM_CopyAndChecksum4MiB(benchmark::State& state) {
  AlignedBuf src(kChunk), dst(kChunk);
  FillRealistic(kBF16Weights, src.data(), kChunk);
  uint64_t h = 0;
  for (auto _ : state) {
    h ^= ckfmt::CopyAndChecksum(dst.data(), src.data(), kChunk);
    benchmark::DoNotOptimize(h);
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * kChunk);
}
BENCHMARK(BM_CopyAndChecksum4MiB);

// How the writer places an encoded chunk that has left the cache, against
// a plain copy (the baseline): mode 0 copies, 1 hashes and then copies (as
// the encoders and the writer did until 2026-11-28), 2 copies and hashes
// in one pass (the writer now). 3.2 MiB chunks, about what a 4 MiB
// byte-plane chunk encodes to, walking 512 MiB into 16 chunk-sized slots.
void BM_PlaceChunkFromMemory(benchmark::State& state) {
  constexpr size_t kStored = 3200 << 10, kWalk = 512ull << 20, kSlots = 16;
  const int mode = int(state.range(0));
  AlignedBuf src(kWalk), dst(kSlots * kChunk);
  for (size_t i = 0; i < kWalk; i += 8) {  // any bytes: neither pass looks at them
    const uint64_t v = i * 0x9e3779b97f4a7c15ull;
    std::memcpy(src.data() + i, &v, 8);
  }
  size_t c = 0;
  uint64_t h = 0;
  for (auto _ : state) {
    const uint8_t* s = src.data() + c % (kWalk / kStored) * kStored;
    uint8_t* d = dst.data() + c % kSlots * kChunk;
    ++c;
    if (mode == 0) {
      ckfmt::CopyUncached(d, s, kStored);
    } else if (mode == 1) {
      h ^= ckfmt::Checksum(s, kStored);
      ckfmt::CopyUncached(d, s, kStored);
    } else {
      h ^= ckfmt::CopyAndChecksum(d, s, kStored);
    }
    benchmark::DoNotOptimize(h);
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(kStored));
  state.SetLabel(mode == 0 ? "copy" : mode == 1 ? "hash, then copy" : "copy and hash");
}
BENCHMARK(BM_PlaceChunkFromMemory)->ArgName("mode")->Arg(0)->Arg(1)->Arg(2);

// Chunk codecs at level 1 on one 4 MiB chunk; bytes processed are raw
// (logical) bytes. Args: {codec id, data kind}.
size_t ElementSize(int kind) { return kind == kBF16Weights ? 2 : 4; }

void SetCodecLabel(benchmark::State& state, int codec, int kind) {
  state.SetLabel(std::string(ckfmt::CodecName(uint8_t(codec))) + " " + DataName(kind));
}

void EncodeChunkOf(benchmark::State& state, ckfmt::Codec codec, int kind, size_t bytes) {
  SetCodecLabel(state, int(codec), kind);
  AlignedBuf raw(bytes);
  FillRealistic(kind, raw.data(), bytes);
  const size_t cap = ckfmt::MaxEncodedSize(codec, bytes);
  AlignedBuf out(cap);
  size_t stored = 0;
  for (auto _ : state) {
    auto r = ckfmt::EncodeChunk(codec, 1, ElementSize(kind), raw.data(), bytes, out.data(), cap);
    if (!r.ok()) {
      state.SkipWithError(r.status().ToString().c_str());
      return;
    }
    stored = *r;
    benchmark::DoNotOptimize(stored);
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * int64_t(bytes));
  state.counters["ratio"] = double(bytes) / double(stored);
}

void BM_EncodeChunk(benchmark::State& state) {
  EncodeChunkOf(state, ckfmt::Codec(state.range(0)), int(state.range(1)), kChunk);
}

// Byte planes of small tensors' chunks (norms, biases, LoRA adapters), where
// what is paid per chunk rather than per byte shows.
void BM_EncodeSmallChunk(benchmark::State& state) {
  EncodeChunkOf(state, ckfmt::Codec::kBytePlaneZstd, int(state.range(0)),
                size_t(state.range(1)) << 10);
}

// Decodes a chunk again and again, or, with `check_only`, checks that it
// decodes as `ckfmt verify` does (FORMAT.md Z2), keeping nothing. With
// `copies` > 1 it goes round that many copies of the chunk, each from and
// into memory of its own, as a load decodes chunks fresh from the disk into
// tensors: 64 copies are 450 MiB, so that neither side is in any cache, and
// memory traffic counts as in a load.
void DecodeChunkOf(benchmark::State& state, bool check_only, size_t copies = 1) {
  const auto codec = ckfmt::Codec(state.range(0));
  const int kind = int(state.range(1));
  SetCodecLabel(state, int(codec), kind);
  AlignedBuf raw(kChunk), back(copies * kChunk);
  FillRealistic(kind, raw.data(), kChunk);
  const size_t cap = ckfmt::MaxEncodedSize(codec, kChunk);
  AlignedBuf enc(copies * cap);
  auto r = ckfmt::EncodeChunk(codec, 1, ElementSize(kind), raw.data(), kChunk, enc.data(), cap);
  if (!r.ok()) {
    state.SkipWithError(r.status().ToString().c_str());
    return;
  }
  const size_t stored = *r;
  for (size_t k = 1; k < copies; ++k) std::memcpy(enc.data() + k * cap, enc.data(), stored);
  std::memset(back.data(), 0, back.size);  // fault the pages in before timing
  size_t k = 0;
  for (auto _ : state) {
    const uint8_t* in = enc.data() + k * cap;
    ckfmt::Status s = check_only ? ckfmt::CheckChunkDecodes(uint8_t(codec), in, stored, kChunk)
                                 : ckfmt::DecodeChunk(uint8_t(codec), in, stored,
                                                      back.data() + k * kChunk, kChunk);
    if (!s.ok()) {
      state.SkipWithError(s.ToString().c_str());
      return;
    }
    benchmark::DoNotOptimize(back.data());
    k = (k + 1) % copies;
  }
  if (!check_only && std::memcmp(raw.data(), back.data(), kChunk) != 0) {
    state.SkipWithError("codec round trip differs");
    return;
  }
  state.SetBytesProcessed(int64_t(state.iterations()) * kChunk);
  state.counters["ratio"] = double(kChunk) / double(stored);
}

void BM_DecodeChunk(benchmark::State& state) { DecodeChunkOf(state, false); }
void BM_DecodeChunkCold(benchmark::State& state) { DecodeChunkOf(state, false, 64); }
void BM_CheckChunk(benchmark::State& state) { DecodeChunkOf(state, true); }
void BM_CheckChunkCold(benchmark::State& state) { DecodeChunkOf(state, true, 64); }

void CodecArgs(benchmark::internal::Benchmark* b) {
  for (auto codec : {ckfmt::Codec::kZstd, ckfmt::Codec::kBytePlaneZstd}) {
    for (int kind : {kBF16Weights, kF32ExpAvg, kF32ExpAvgSq}) b->Args({int64_t(codec), kind});
  }
  b->ArgNames({"codec", "data"});
}
BENCHMARK(BM_EncodeChunk)->Apply(CodecArgs);
BENCHMARK(BM_DecodeChunk)->Apply(CodecArgs);
BENCHMARK(BM_DecodeChunkCold)->Apply(CodecArgs);
BENCHMARK(BM_CheckChunk)->Apply(CodecArgs);
BENCHMARK(BM_CheckChunkCold)->Apply(CodecArgs);
BENCHMARK(BM_EncodeSmallChunk)
    ->ArgsProduct({{kBF16Weights, kF32ExpAvg}, {16, 64, 256}})
    ->ArgNames({"data", "KiB"});

// --------------------------------------------------------------------------
// Region arithmetic: a 2-d [8192, 1024] tensor (8M elements). The
// destination is an FSDP-style flat range of 4M elements starting mid-row.

const ckfmt::Shape kShape2D = {8192, 1024};
const ckfmt::Region kFlatDst = ckfmt::Region::Flat(1000003, 4u << 20);

void RunOverlap(benchmark::State& state, const ckfmt::Region& src) {
  uint64_t runs = 0, elems = 0;
  for (auto _ : state) {
    runs = 0;
    elems = 0;
    ckfmt::ForEachOverlap(kShape2D, src, kFlatDst, [&](const ckfmt::Run& r) {
      ++runs;
      elems += r.count;
    });
    benchmark::DoNotOptimize(elems);
  }
  state.counters["runs"] = double(runs);
  state.counters["elements"] = double(elems);
  state.SetItemsProcessed(int64_t(state.iterations()) * int64_t(runs));
}

// Whole tensor (an unsharded piece) against the flat range: one merged run.
void BM_ForEachOverlap_WholeVsFlat(benchmark::State& state) {
  RunOverlap(state, ckfmt::Region::Whole(kShape2D));
}
BENCHMARK(BM_ForEachOverlap_WholeVsFlat);

// A tensor-parallel column shard (all rows, columns [256, 768)) against the
// flat range: one run per row the range touches.
void BM_ForEachOverlap_ColumnBoxVsFlat(benchmark::State& state) {
  RunOverlap(state, ckfmt::Region::Box({0, 256}, {8192, 512}));
}
BENCHMARK(BM_ForEachOverlap_ColumnBoxVsFlat);

// A flat range (another FSDP rank's shard) against the flat range.
void BM_ForEachOverlap_FlatVsFlat(benchmark::State& state) {
  RunOverlap(state, ckfmt::Region::Flat(3u << 20, 4u << 20));
}
BENCHMARK(BM_ForEachOverlap_FlatVsFlat);

// --------------------------------------------------------------------------
// Index: ~10k entries shaped like a transformer's state dict: model/layers/
// [i]/{9 weights}, each a [1024, 1024] bf16 tensor in one 2 MiB chunk.

struct BuiltIndex {
  ckfmt::IndexRecord index;
  uint64_t data_end = 0;
};

BuiltIndex MakeIndex(size_t target_entries) {
  using ckfmt::EntryKind;
  BuiltIndex b;
  auto& idx = b.index;
  idx.writer_name = "ckfmt_micro_bench";
  idx.writer_version = std::string("0");  // not = "0": a GCC 12 -Wrestrict false positive
  idx.metadata = {{"job", "bench"}};
  auto container = [&](ckfmt::KeyPath p, EntryKind k) {
    ckfmt::EntryRecord e;
    e.path = std::move(p);
    e.kind = k;
    idx.entries.push_back(std::move(e));
  };
  container({"model"}, EntryKind::kDict);
  container({"model", "layers"}, EntryKind::kList);
  static const char* kNames[] = {"attn.q.weight",  "attn.k.weight",   "attn.v.weight",
                                 "attn.o.weight",  "mlp.gate.weight", "mlp.up.weight",
                                 "mlp.down.weight", "norm1.weight",   "norm2.weight"};
  const uint64_t tensor_bytes = 1024ull * 1024 * 2;
  uint64_t offset = ckfmt::kHeaderSize;
  for (uint64_t layer = 0; idx.entries.size() < target_entries; ++layer) {
    container({"model", "layers", layer}, EntryKind::kDict);
    for (const char* n : kNames) {
      ckfmt::EntryRecord e;
      e.path = {"model", "layers", layer, std::string(n)};
      e.kind = EntryKind::kTensor;
      e.dtype = ckfmt::DType::kBF16;
      e.shape = {1024, 1024};
      ckfmt::PieceRecord p;
      p.rank = 0;
      p.region = ckfmt::Region::Whole(e.shape);
      ckfmt::ChunkRecord c;
      c.offset = offset;
      c.stored_size = c.raw_size = tensor_bytes;
      c.checksum = 0x9e3779b97f4a7c15ull * (offset + 1);
      c.codec = 0;
      p.chunks.push_back(c);
      e.pieces.push_back(std::move(p));
      idx.entries.push_back(std::move(e));
      offset += ckfmt::AlignUp(tensor_bytes);
    }
  }
  b.data_end = offset;
  return b;
}

void BM_SerializeIndex10k(benchmark::State& state) {
  BuiltIndex b = MakeIndex(10000);
  size_t bytes = 0;
  for (auto _ : state) {
    std::string s = ckfmt::SerializeIndex(b.index);
    bytes = s.size();
    benchmark::DoNotOptimize(s.data());
  }
  state.counters["entries"] = double(b.index.entries.size());
  state.counters["index_bytes"] = double(bytes);
  state.SetItemsProcessed(int64_t(state.iterations()) * int64_t(b.index.entries.size()));
}
BENCHMARK(BM_SerializeIndex10k)->Unit(benchmark::kMillisecond);

void BM_ParseIndex10k(benchmark::State& state) {
  BuiltIndex b = MakeIndex(10000);
  const std::string s = ckfmt::SerializeIndex(b.index);
  for (auto _ : state) {
    auto r = ckfmt::ParseIndex(reinterpret_cast<const uint8_t*>(s.data()), s.size(),
                               ckfmt::kHeaderSize, b.data_end, "bench");
    if (!r.ok()) {
      state.SkipWithError(r.status().ToString().c_str());
      return;
    }
    benchmark::DoNotOptimize(r->entries.data());
  }
  state.counters["entries"] = double(b.index.entries.size());
  state.counters["index_bytes"] = double(s.size());
  state.SetItemsProcessed(int64_t(state.iterations()) * int64_t(b.index.entries.size()));
}
BENCHMARK(BM_ParseIndex10k)->Unit(benchmark::kMillisecond);

}  // namespace
